/**
 * Finding Chime's NATS objects. Only schedulers create streams, buckets and
 * consumers (docs/PROTOCOL.md §1); a worker looks them up and, while one is
 * missing, waits for a scheduler to create it, looking again with a bounded
 * backoff (100 ms doubling to 5 s) for as long as it takes.
 */

import type { Logger } from "./log.js";
import { errorMessage } from "./log.js";
import type { WorkerStatus } from "./status.js";
import { sleep } from "./wait.js";

const FIRST_RETRY_MS = 100;
const MAX_RETRY_MS = 5000;
/** How often a wait that goes on is logged again. */
const LOG_EVERY_MS = 30_000;

/** Raised when a wait is given up because the worker stops. */
export class Stopped extends Error {
  constructor() {
    super("the worker was stopped while starting");
    this.name = "Stopped";
  }
}

/**
 * Calls `find` until it succeeds, pausing with bounded exponential backoff;
 * logs what it waits for and shows it in `status`. `beat` (if given) runs
 * between looks, keeping the heartbeat alive. Rejects with {@link Stopped}
 * when `signal` aborts.
 */
export async function waitFor<T>(
  what: string,
  find: () => Promise<T>,
  options: { status: WorkerStatus; log: Logger; signal: AbortSignal },
): Promise<T> {
  const { status, log, signal } = options;
  const began = Date.now();
  let delay = FIRST_RETRY_MS;
  let loggedAt: number | undefined;
  for (;;) {
    if (signal.aborted) throw new Stopped();
    try {
      const found = await find();
      if (loggedAt !== undefined) log.info(`found ${what}`, { waited_ms: Date.now() - began });
      status.setWaitingFor(undefined);
      return found;
    } catch (error) {
      status.setWaitingFor(what);
      if (loggedAt === undefined || Date.now() - loggedAt >= LOG_EVERY_MS) {
        loggedAt = Date.now();
        log.warn(`waiting for ${what}`, { waited_ms: Date.now() - began, error: errorMessage(error) });
      }
    }
    await sleep(delay, signal);
    delay = Math.min(delay * 2, MAX_RETRY_MS);
  }
}

/** What a scheduler is asked to create, as logged and shown by `/readyz`. */
export function awaited(kind: string, name: string): string {
  return `a scheduler to create ${kind} ${name}`;
}
