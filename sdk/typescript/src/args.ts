/**
 * The conformance worker's command line. The names and meanings are the
 * Rust worker's and the conformance interface's, each flag with its
 * `CHIME_…` environment twin (the Python SDK's program takes the same), so
 * a test or a deployment drives every worker the same way. A bad value,
 * from the command line or the environment, is an error naming the flag.
 */

import { checkGroup, checkPrefix, checkWorkerId } from "./config.js";

/** The conformance worker's settings; durations in milliseconds. */
export interface ConformanceArgs {
  natsUrl: string;
  natsUser: string | undefined;
  natsPassword: string | undefined;
  natsToken: string | undefined;
  natsCreds: string | undefined;
  natsNkey: string | undefined;
  natsTlsCa: string | undefined;
  natsTlsCert: string | undefined;
  natsTlsKey: string | undefined;
  natsInboxPrefix: string | undefined;
  natsConnectWaitMs: number;
  group: string;
  workerId: string | undefined;
  subjectPrefix: string;
  threads: number;
  drainGraceMs: number;
  heartbeatIntervalMs: number;
  fenceMarginMs: number;
  pollIntervalMs: number;
  metricsPort: number | undefined;
  /** Exit after this many firings ran and their finished events were stored; 0: run until signalled. */
  count: number;
  help: boolean;
}

/** A bad command line; the message names the flag. */
export class UsageError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "UsageError";
  }
}

type Kind = "text" | "duration" | "count" | "port";
type Key = Exclude<keyof ConformanceArgs, "help">;

// flag, environment variable, kind, default, what it sets, help
const FLAGS: [string, string, Kind, string | undefined, Key, string][] = [
  ["--nats-url", "CHIME_NATS_URL", "text", "nats://127.0.0.1:4222", "natsUrl", "NATS server URL(s), comma-separated"],
  ["--nats-user", "CHIME_NATS_USER", "text", undefined, "natsUser", "NATS user name; needs --nats-password"],
  ["--nats-password", "CHIME_NATS_PASSWORD", "text", undefined, "natsPassword", "NATS password; needs --nats-user"],
  ["--nats-token", "CHIME_NATS_TOKEN", "text", undefined, "natsToken", "NATS authentication token"],
  ["--nats-creds", "CHIME_NATS_CREDS", "text", undefined, "natsCreds", "NATS credentials file (JWT and NKey seed)"],
  ["--nats-nkey", "CHIME_NATS_NKEY", "text", undefined, "natsNkey", "file holding a NATS nkey seed (SU...)"],
  ["--nats-tls-ca", "CHIME_NATS_TLS_CA", "text", undefined, "natsTlsCa", "CA certificate (PEM) to verify the NATS server with"],
  ["--nats-tls-cert", "CHIME_NATS_TLS_CERT", "text", undefined, "natsTlsCert", "client certificate (PEM); needs --nats-tls-key"],
  ["--nats-tls-key", "CHIME_NATS_TLS_KEY", "text", undefined, "natsTlsKey", "client key (PEM); needs --nats-tls-cert"],
  ["--nats-inbox-prefix", "CHIME_NATS_INBOX_PREFIX", "text", undefined, "natsInboxPrefix", "subject prefix of reply inboxes"],
  ["--nats-connect-wait", "CHIME_NATS_CONNECT_WAIT", "duration", "10", "natsConnectWaitMs", "keep trying to reach NATS this long"],
  ["--group", "CHIME_GROUP", "text", "default", "group", "the group whose firings this worker runs"],
  ["--worker-id", "CHIME_WORKER_ID", "text", undefined, "workerId", "worker id (default: <hostname>-<8 random hex>)"],
  ["--subject-prefix", "CHIME_SUBJECT_PREFIX", "text", "chime", "subjectPrefix", "subject prefix of the installation"],
  ["--threads", "CHIME_THREADS", "count", "2", "threads", "firings run at once"],
  ["--drain-grace", "CHIME_DRAIN_GRACE", "duration", "30", "drainGraceMs", "on SIGTERM, how long runs may finish"],
  ["--heartbeat-interval", "CHIME_HEARTBEAT_INTERVAL", "duration", "2", "heartbeatIntervalMs", "heartbeat period"],
  ["--fence-margin", "CHIME_FENCE_MARGIN", "duration", "2", "fenceMarginMs", "key TTL minus this is the heartbeat lease"],
  ["--poll-interval", "CHIME_POLL_INTERVAL", "duration", "1", "pollIntervalMs", "idle fallback wake-up"],
  ["--metrics-port", "CHIME_METRICS_PORT", "port", undefined, "metricsPort", "serve /metrics, /healthz, /readyz on this port"],
  ["--count", "CHIME_COUNT", "count", "0", "count", "exit after this many finished events were stored (0: run until signalled)"],
];

/** The help text. */
export const USAGE =
  "usage: node dist/conformance.js [options]\n\n" +
  "Runs a Chime worker with the conformance handlers (echo, sleep, fail, shard, trace, env)\n" +
  "until SIGTERM or SIGINT, or until --count firings ran. Durations are seconds, or e.g.\n" +
  "500ms, 2s, 1m.\n\n" +
  FLAGS.map(([flag, variable, , fallback, , help]) =>
    `  ${flag.padEnd(22)}${help}${fallback === undefined ? "" : ` (default ${fallback})`} [env ${variable}]`,
  ).join("\n") +
  "\n  -h, --help            print this and exit\n";

const DURATION = /^\s*(\d+(?:\.\d*)?|\.\d+)\s*(ms|s|m)?\s*$/;
const INBOX_TOKEN = /^[^\s.*>]+$/;

/** Milliseconds from `2.5`, `2.5s`, `500ms` or `1m` (a bare number is seconds). */
export function parseDuration(text: string): number {
  const m = DURATION.exec(text);
  if (!m) throw new Error(`${JSON.stringify(text)} is not a duration (seconds, or e.g. 500ms, 2s, 1m)`);
  const unit = m[2] === "ms" ? 1 : m[2] === "m" ? 60_000 : 1000;
  return Number(m[1]) * unit;
}

function parseCount(text: string): number {
  if (!/^\s*\d{1,9}\s*$/.test(text)) throw new Error(`${JSON.stringify(text)} is not a whole number`);
  return Number(text.trim());
}

function parsePort(text: string): number {
  const port = parseCount(text);
  if (port > 65535) throw new Error(`${JSON.stringify(text)} is not a port (0 to 65535)`);
  return port;
}

function convert(kind: Kind, text: string): string | number {
  switch (kind) {
    case "text":
      return text;
    case "duration":
      return parseDuration(text);
    case "count":
      return parseCount(text);
    case "port":
      return parsePort(text);
  }
}

/** Reads `argv` (without the program) with fallbacks from `env`; throws a {@link UsageError} naming the flag. */
export function parseArgs(argv: string[], env: Record<string, string | undefined> = process.env): ConformanceArgs {
  const given = new Map<string, string>();
  let help = false;
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    if (arg === "-h" || arg === "--help") {
      help = true;
      continue;
    }
    const eq = arg.indexOf("=");
    const name = eq > 0 ? arg.slice(0, eq) : arg;
    if (!FLAGS.some(([flag]) => flag === name)) throw new UsageError(`unknown argument ${JSON.stringify(arg)}; see --help`);
    let value: string | undefined;
    if (eq > 0) value = arg.slice(eq + 1);
    else {
      value = argv[i + 1];
      if (value === undefined) throw new UsageError(`${name} needs a value`);
      i += 1;
    }
    given.set(name, value);
  }
  const out: Record<string, unknown> = { help };
  for (const [flag, variable, kind, fallback, key] of FLAGS) {
    const fromFlag = given.get(flag);
    const fromEnv = env[variable] === undefined || env[variable] === "" ? undefined : env[variable];
    const text = fromFlag ?? fromEnv ?? fallback;
    if (text === undefined) {
      out[key] = undefined;
      continue;
    }
    try {
      out[key] = convert(kind, text);
    } catch (error) {
      const source = fromFlag === undefined && fromEnv !== undefined ? ` (from ${variable})` : "";
      throw new UsageError(`${flag}${source}: ${(error as Error).message}`);
    }
  }
  const args = out as unknown as ConformanceArgs;
  if (args.workerId === "") args.workerId = undefined;
  check(args);
  return args;
}

function check(args: ConformanceArgs): void {
  if (args.natsUrl.split(",").every((part) => part.trim() === "")) throw new UsageError("--nats-url must name a server");
  const problems: [string, string | undefined][] = [
    ["--group", checkGroup(args.group)],
    ["--worker-id", args.workerId === undefined ? undefined : checkWorkerId(args.workerId)],
    ["--subject-prefix", checkPrefix(args.subjectPrefix)],
  ];
  for (const [flag, problem] of problems) if (problem) throw new UsageError(`${flag}: ${problem}`);
  if (args.threads < 1) throw new UsageError("--threads must be at least 1");
  if ((args.natsUser === undefined) !== (args.natsPassword === undefined)) {
    throw new UsageError("--nats-user and --nats-password go together: set both or neither");
  }
  if ((args.natsTlsCert === undefined) !== (args.natsTlsKey === undefined)) {
    throw new UsageError("--nats-tls-cert and --nats-tls-key go together: set both or neither");
  }
  if (args.natsInboxPrefix !== undefined && !args.natsInboxPrefix.split(".").every((t) => INBOX_TOKEN.test(t))) {
    throw new UsageError(`--nats-inbox-prefix: ${JSON.stringify(args.natsInboxPrefix)} is not a literal subject`);
  }
}
