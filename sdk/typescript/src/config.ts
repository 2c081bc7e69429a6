/**
 * A worker's settings: defaults in one place, checked once when the worker
 * is made, each error naming the setting to fix. The defaults are the Rust
 * reference worker's (worker/src/config.rs).
 */

import { randomBytes } from "node:crypto";
import { hostname } from "node:os";
import { availableParallelism } from "node:os";
import { DEFAULT_PREFIX } from "./names.js";
import { DEFAULT_MAX_OUTPUT_BYTES, MAX_OUTPUT_LIMIT } from "./text.js";

/** Longest worker id. */
export const MAX_WORKER_ID_LEN = 128;
/** Longest group name. */
export const MAX_GROUP_LEN = 64;
/** How much longer than `stopGraceMs` the fence margin must be: timers run late on a loaded machine. */
export const FENCE_SLACK_MS = 250;

/** How a worker runs. Every field has a default; see each. */
export interface WorkerSettings {
  /** The group whose firings it runs (default `default`): 1–64 of `A-Z a-z 0-9 . _ -`, dots between non-empty parts. */
  group: string;
  /** `<hostname>-<8 random hex>` unless set: 1–128 of `A-Z a-z 0-9 - _`. */
  workerId: string;
  /** Subject prefix of the installation (default `chime`). */
  subjectPrefix: string;
  /** Firings run at once (default: the number of CPUs). */
  threads: number;
  /** Idle fallback wake-up: redeliveries and missed doorbells are picked up this late at most (1000 ms). */
  pollIntervalMs: number;
  /** Heartbeat period (2000 ms); must be shorter than the heartbeat lease. */
  heartbeatIntervalMs: number;
  /** On shutdown, how long running firings may take before they are stopped (30000 ms). */
  drainGraceMs: number;
  /** On shutdown, how long unsent finished events are retried after the runs ended (10000 ms). */
  flushGraceMs: number;
  /** Output tail kept per firing (64 KiB, at most 512 KiB). */
  maxOutputBytes: number;
  /** How long a start request may take in all (2000 ms; the first of the two requests waits a quarter). */
  startTimeoutMs: number;
  /** How long a firing that was not started stays away (NAK delay, 1000 ms). */
  nakDelayMs: number;
  /** The `expires` of every no-wait fetch (10 ms): how long an empty band is waited on. */
  fetchExpiryMs: number;
  /** After a run is stopped (deadline, cancel, fence, shutdown), how long its handler may take to return (1000 ms). */
  stopGraceMs: number;
  /** The worker fences itself when no heartbeat was acknowledged for the bucket's key TTL minus this (2000 ms). */
  fenceMarginMs: number;
}

/** The defaults, with a fresh worker id. */
export function defaultSettings(): WorkerSettings {
  return {
    group: "default",
    workerId: defaultWorkerId(),
    subjectPrefix: DEFAULT_PREFIX,
    threads: Math.max(1, availableParallelism()),
    pollIntervalMs: 1000,
    heartbeatIntervalMs: 2000,
    drainGraceMs: 30_000,
    flushGraceMs: 10_000,
    maxOutputBytes: DEFAULT_MAX_OUTPUT_BYTES,
    startTimeoutMs: 2000,
    nakDelayMs: 1000,
    fetchExpiryMs: 10,
    stopGraceMs: 1000,
    fenceMarginMs: 2000,
  };
}

/** A setting that cannot work; `setting` names it. */
export class InvalidSettingError extends Error {
  readonly setting: string;
  constructor(setting: string, reason: string) {
    super(`${setting} ${reason}`);
    this.name = "InvalidSettingError";
    this.setting = setting;
  }
}

/** `<hostname>-<8 random hex>`, the hostname cut to valid characters. */
export function defaultWorkerId(): string {
  let host = "";
  try {
    host = hostname();
  } catch {
    host = "";
  }
  host = [...host]
    .map((c) => (/^[A-Za-z0-9_-]$/.test(c) ? c : "-"))
    .slice(0, 64)
    .join("")
    .replace(/^-+|-+$/g, "");
  return `${host || "worker"}-${randomBytes(4).toString("hex")}`;
}

/** Why `id` cannot be a worker id (a KV key and a subject token); `undefined` when it can. */
export function checkWorkerId(id: string): string | undefined {
  if (id.length === 0 || id.length > MAX_WORKER_ID_LEN) {
    return `must be 1 to ${MAX_WORKER_ID_LEN} characters`;
  }
  const bad = [...id].find((c) => !/^[A-Za-z0-9_-]$/.test(c));
  return bad === undefined ? undefined : `${JSON.stringify(bad)} is not allowed; use only A-Z a-z 0-9 - _`;
}

/** Why `group` cannot be a group name; `undefined` when it can. */
export function checkGroup(group: string): string | undefined {
  if (group.length === 0 || group.length > MAX_GROUP_LEN) {
    return `must be 1 to ${MAX_GROUP_LEN} characters, found ${group.length}`;
  }
  const bad = [...group].find((c) => !/^[A-Za-z0-9._-]$/.test(c));
  if (bad !== undefined) return `${JSON.stringify(bad)} is not allowed; use only A-Z a-z 0-9 . _ -`;
  if (group.split(".").some((part) => part.length === 0)) {
    return "dots must separate non-empty parts (no leading, trailing or double dots)";
  }
  return undefined;
}

/** Why `prefix` cannot be a subject prefix; `undefined` when it can. */
export function checkPrefix(prefix: string): string | undefined {
  if (prefix.length === 0 || prefix.length > 32) return "must be 1 to 32 characters";
  if (!/^[A-Za-z0-9_-]+$/.test(prefix)) return `${JSON.stringify(prefix)} may only contain A-Z a-z 0-9 - _`;
  return undefined;
}

/** Checks every setting that does not depend on the server; throws an {@link InvalidSettingError}. */
export function validateSettings(s: WorkerSettings): void {
  const named: [string, string | undefined][] = [
    ["group", checkGroup(s.group)],
    ["workerId", checkWorkerId(s.workerId)],
    ["subjectPrefix", checkPrefix(s.subjectPrefix)],
  ];
  for (const [setting, reason] of named) {
    if (reason !== undefined) throw new InvalidSettingError(setting, reason);
  }
  if (!Number.isSafeInteger(s.threads) || s.threads < 1) {
    throw new InvalidSettingError("threads", `must be a whole number of at least 1, found ${s.threads}`);
  }
  const positive: (keyof WorkerSettings)[] = [
    "pollIntervalMs",
    "heartbeatIntervalMs",
    "startTimeoutMs",
    "fetchExpiryMs",
    "nakDelayMs",
  ];
  for (const setting of positive) {
    const value = s[setting] as number;
    if (!Number.isFinite(value) || value < 1) {
      throw new InvalidSettingError(setting, `must be at least 1 ms, found ${value}`);
    }
  }
  const nonNegative: (keyof WorkerSettings)[] = ["drainGraceMs", "flushGraceMs", "stopGraceMs", "fenceMarginMs"];
  for (const setting of nonNegative) {
    const value = s[setting] as number;
    if (!Number.isFinite(value) || value < 0) {
      throw new InvalidSettingError(setting, `must be 0 ms or more, found ${value}`);
    }
  }
  if (!Number.isSafeInteger(s.maxOutputBytes) || s.maxOutputBytes < 1 || s.maxOutputBytes > MAX_OUTPUT_LIMIT) {
    throw new InvalidSettingError("maxOutputBytes", `must be from 1 to ${MAX_OUTPUT_LIMIT}, found ${s.maxOutputBytes}`);
  }
  const least = s.stopGraceMs + FENCE_SLACK_MS;
  if (s.fenceMarginMs < least) {
    throw new InvalidSettingError(
      "fenceMarginMs",
      `must be at least stopGraceMs + ${FENCE_SLACK_MS} ms (${least} ms), found ${s.fenceMarginMs} ms; ` +
        "otherwise a run may outlive the heartbeat key",
    );
  }
}

/**
 * The heartbeat lease for the bucket's key TTL: `workerTtlMs − fenceMarginMs`.
 * Throws an {@link InvalidSettingError} when the margin or the heartbeat
 * interval does not fit in it.
 */
export function leaseFor(s: WorkerSettings, workerTtlMs: number): number {
  const lease = workerTtlMs - s.fenceMarginMs;
  if (!(workerTtlMs > 0) || lease <= 0) {
    throw new InvalidSettingError(
      "fenceMarginMs",
      `must be shorter than the workers bucket's key TTL (${workerTtlMs} ms), found ${s.fenceMarginMs} ms`,
    );
  }
  if (s.heartbeatIntervalMs >= lease) {
    throw new InvalidSettingError(
      "heartbeatIntervalMs",
      `must be shorter than the heartbeat lease (${lease} ms: the workers bucket's key TTL ${workerTtlMs} ms ` +
        `minus fenceMarginMs ${s.fenceMarginMs} ms), found ${s.heartbeatIntervalMs} ms; otherwise the worker ` +
        "fences itself between beats",
    );
  }
  return lease;
}
