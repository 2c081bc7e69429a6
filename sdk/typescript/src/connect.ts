/**
 * Connecting to NATS with the official client: the same connection settings
 * as Chime's other programs (`--nats-url` with credentials in it, user and
 * password, token, credentials file, nkey seed file, TLS CA and client
 * certificate, inbox prefix), turned into `@nats-io/transport-node` options.
 */

import { readFileSync } from "node:fs";
import {
  connect,
  credsAuthenticator,
  nkeyAuthenticator,
  type NatsConnection,
  type NodeConnectionOptions,
} from "@nats-io/transport-node";

/** How to reach NATS. */
export interface NatsSettings {
  /** Server URL(s), comma-separated; `nats://user:password@host` or `nats://token@host` carry credentials; `tls://` requires TLS. Default `nats://127.0.0.1:4222`. */
  url?: string;
  user?: string;
  password?: string;
  token?: string;
  /** A NATS credentials file (JWT and nkey seed). */
  credsFile?: string;
  /** A file holding an nkey seed (`SU…`). */
  nkeyFile?: string;
  /** A CA certificate (PEM) to verify the server with; TLS is then required. */
  tlsCaFile?: string;
  /** A client certificate (PEM) for mutual TLS; needs `tlsKeyFile`. */
  tlsCertFile?: string;
  /** The client certificate's key (PEM). */
  tlsKeyFile?: string;
  /** Subject prefix of reply inboxes (default `_INBOX`); pulled firings arrive on them. */
  inboxPrefix?: string;
  /** The connection's name, as the server shows it. */
  name?: string;
  /** At start-up, keep trying to reach NATS this long (default 0: one try). Once connected, the client reconnects forever. */
  connectWaitMs?: number;
}

/** A setting of {@link NatsSettings} that cannot work; `setting` names it. */
export class NatsSettingError extends Error {
  constructor(
    readonly setting: string,
    reason: string,
  ) {
    super(`${setting}: ${reason}`);
    this.name = "NatsSettingError";
  }
}

/** The servers, user, password and token a URL list names. */
export function parseNatsUrls(url: string): { servers: string[]; user?: string; password?: string; token?: string; tls: boolean } {
  const parts = url.split(",").map((p) => p.trim()).filter((p) => p.length > 0);
  if (parts.length === 0) throw new NatsSettingError("url", `${JSON.stringify(url)} names no server`);
  const servers: string[] = [];
  let user: string | undefined, password: string | undefined, token: string | undefined;
  let tls = false;
  for (const part of parts) {
    const withScheme = /^[a-z]+:\/\//i.test(part) ? part : `nats://${part}`;
    let parsed: URL;
    try {
      parsed = new URL(withScheme);
    } catch {
      throw new NatsSettingError("url", `${JSON.stringify(part)} is not a URL such as nats://127.0.0.1:4222`);
    }
    const scheme = parsed.protocol.replace(/:$/, "").toLowerCase();
    if (!["nats", "tls"].includes(scheme)) {
      throw new NatsSettingError("url", `${JSON.stringify(part)}: the scheme must be nats:// or tls://`);
    }
    if (!parsed.hostname) throw new NatsSettingError("url", `${JSON.stringify(part)} names no host`);
    if (scheme === "tls") tls = true;
    if (parsed.username && parsed.password) {
      user = decodeURIComponent(parsed.username);
      password = decodeURIComponent(parsed.password);
    } else if (parsed.username) {
      token = decodeURIComponent(parsed.username);
    }
    servers.push(`${parsed.hostname.includes(":") ? `[${parsed.hostname}]` : parsed.hostname}:${parsed.port || "4222"}`);
  }
  return { servers, user, password, token, tls };
}

/** The official client's options for `settings`; files are read now, so a missing one is named at once. */
export function connectionOptions(settings: NatsSettings): NodeConnectionOptions {
  const urls = parseNatsUrls(settings.url ?? "nats://127.0.0.1:4222");
  const options: NodeConnectionOptions = {
    servers: urls.servers,
    name: settings.name,
    maxReconnectAttempts: -1,
    reconnectTimeWait: 500,
    waitOnFirstConnect: false,
  };
  const user = settings.user ?? urls.user;
  const password = settings.password ?? urls.password;
  if ((user === undefined) !== (password === undefined)) {
    throw new NatsSettingError(user === undefined ? "user" : "password", "user and password go together");
  }
  if (user !== undefined) {
    options.user = user;
    options.pass = password;
  }
  const token = settings.token ?? urls.token;
  if (token !== undefined) options.token = token;
  const read = (setting: string, path: string) => {
    try {
      return readFileSync(path);
    } catch (error) {
      throw new NatsSettingError(setting, `cannot read ${path}: ${(error as Error).message}`);
    }
  };
  if (settings.credsFile && settings.nkeyFile) {
    throw new NatsSettingError("credsFile", "give a credentials file or an nkey seed file, not both");
  }
  if (settings.credsFile) {
    options.authenticator = credsAuthenticator(new Uint8Array(read("credsFile", settings.credsFile)));
  } else if (settings.nkeyFile) {
    const seed = read("nkeyFile", settings.nkeyFile).toString("utf8").trim();
    if (!seed.startsWith("S")) throw new NatsSettingError("nkeyFile", `${settings.nkeyFile} holds no nkey seed (SU…)`);
    options.authenticator = nkeyAuthenticator(new TextEncoder().encode(seed));
  }
  if ((settings.tlsCertFile === undefined) !== (settings.tlsKeyFile === undefined)) {
    throw new NatsSettingError(settings.tlsCertFile === undefined ? "tlsCertFile" : "tlsKeyFile", "the client certificate and its key go together");
  }
  if (urls.tls || settings.tlsCaFile || settings.tlsCertFile) {
    const tls: NonNullable<NodeConnectionOptions["tls"]> = {};
    if (settings.tlsCaFile) tls.ca = read("tlsCaFile", settings.tlsCaFile).toString("utf8");
    if (settings.tlsCertFile) tls.cert = read("tlsCertFile", settings.tlsCertFile).toString("utf8");
    if (settings.tlsKeyFile) tls.key = read("tlsKeyFile", settings.tlsKeyFile).toString("utf8");
    options.tls = tls;
  }
  if (settings.inboxPrefix) options.inboxPrefix = settings.inboxPrefix;
  return options;
}

/**
 * Connects with `settings`, trying again (every 250 ms) for
 * `connectWaitMs`; rejects with a message naming the servers when none
 * answers, or when the server cannot serve Chime ({@link checkServer}).
 */
export async function connectNats(settings: NatsSettings = {}): Promise<NatsConnection> {
  const options = connectionOptions(settings);
  const waitMs = settings.connectWaitMs ?? 0;
  if (!(waitMs >= 0)) throw new NatsSettingError("connectWaitMs", `must not be negative, found ${waitMs}`);
  const until = Date.now() + waitMs;
  const where = (options.servers as string[]).join(", ");
  for (;;) {
    let nc: NatsConnection;
    try {
      nc = await connect(options);
    } catch (error) {
      if (Date.now() + 250 < until) {
        await new Promise((resolve) => setTimeout(resolve, 250));
        continue;
      }
      const within = waitMs > 0 ? ` within ${waitMs / 1000}s` : "";
      throw new Error(`cannot connect to NATS at ${where}${within}: ${(error as Error).message}`, { cause: error });
    }
    try {
      checkServer(nc);
    } catch (error) {
      await nc.close().catch(() => {});
      throw new Error(`the NATS server at ${where}: ${(error as Error).message}`, { cause: error });
    }
    return nc;
  }
}

/**
 * Checks that the server can serve Chime: JetStream enabled and version
 * 2.11 or newer. Throws an Error naming the server's version otherwise
 * (its message continues "the NATS server …").
 */
export function checkServer(nc: NatsConnection): void {
  const info = nc.info;
  if (!info) return;
  const version = info.version ?? "unknown";
  const match = /^v?(\d+)\.(\d+)/.exec(version);
  const tooOld = match ? Number(match[1]) < 2 || (Number(match[1]) === 2 && Number(match[2]) < 11) : false;
  if (tooOld) {
    throw new Error(`is version ${version}; Chime needs nats-server 2.11 or newer with JetStream`);
  }
  if (info.jetstream === false || info.jetstream === undefined) {
    throw new Error(`(version ${version}) has JetStream disabled; Chime needs nats-server 2.11 or newer with JetStream`);
  }
}
