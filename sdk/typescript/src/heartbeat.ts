/**
 * The worker's heartbeat (docs/PROTOCOL.md §7): its info under
 * `<group>.<worker id>` in KV `chime-workers`, every interval. The bucket
 * drops a key `worker_ttl` after its last write, which is how the scheduler
 * learns a worker died. Each acknowledged beat renews the fence's lease;
 * each lists the firings the worker runs (`running`) and the handlers it
 * offers, and says it takes offers (`offers`: the scheduler gives a share
 * of each broadcast job only to such workers). After a failed beat the next comes after a quarter of the
 * interval; each beat waits at most the interval, at most 1 s.
 */

import type { KV } from "@nats-io/kv";
import type { Fence } from "./fence.js";
import type { Logger } from "./log.js";
import { errorMessage } from "./log.js";
import type { Running } from "./running.js";
import { formatTime } from "./time.js";
import { monotonicMs, sleep, withTimeout } from "./wait.js";

const RETRY_SHARE = 4;
const BEAT_TIMEOUT_MS = 1000;

/** The value a worker writes. */
export interface WorkerInfo {
  id: string;
  group: string;
  threads: number;
  in_flight: number;
  version: string;
  started_at: string;
  running?: string[];
  handlers: string[];
  /** The worker takes the firings of broadcast jobs offered to it (it always subscribes to its offer subject). */
  offers: true;
}

/** What a heartbeat reads from the worker each time it beats. */
export interface HeartbeatSource {
  id: string;
  group: string;
  threads: number;
  version: string;
  handlers: string[];
  inFlight(): number;
  running: Running;
}

/** Puts the worker's info every interval. */
export class Heartbeat {
  private readonly startedAt = new Date();

  constructor(
    private readonly kv: KV,
    private readonly key: string,
    private readonly source: HeartbeatSource,
    private readonly intervalMs: number,
    private readonly log: Logger,
  ) {}

  /** The value written now. */
  info(): WorkerInfo {
    const s = this.source;
    const info: WorkerInfo = {
      id: s.id,
      group: s.group,
      threads: s.threads,
      in_flight: s.inFlight(),
      version: s.version,
      started_at: formatTime(this.startedAt),
      handlers: s.handlers,
      offers: true,
    };
    const running = s.running.listed();
    if (running !== undefined) info.running = running;
    return info;
  }

  /** One beat, bounded by `timeoutMs`; resolves to the monotonic instant just before it was sent. */
  async beatOnce(timeoutMs: number = BEAT_TIMEOUT_MS): Promise<number> {
    const value = JSON.stringify(this.info());
    const sent = monotonicMs();
    await withTimeout(this.kv.put(this.key, value), timeoutMs, "heartbeat put timed out");
    return sent;
  }

  /** Beats every interval until `signal` aborts, renewing `fence` with each beat acknowledged. */
  async run(fence: Fence, signal: AbortSignal): Promise<void> {
    const retry = Math.max(this.intervalMs / RETRY_SHARE, 50);
    const timeout = Math.min(this.intervalMs, BEAT_TIMEOUT_MS);
    let pause = this.intervalMs;
    let failing = false;
    for (;;) {
      await sleep(pause, signal);
      if (signal.aborted) return;
      try {
        const sent = await this.beatOnce(timeout);
        fence.renew(sent);
        if (failing) this.log.info("heartbeat restored");
        failing = false;
        pause = this.intervalMs;
      } catch (error) {
        pause = retry;
        if (!failing) this.log.warn("heartbeat failed; retrying", { error: errorMessage(error), retry_ms: retry });
        failing = true;
      }
    }
  }

  /** Deletes the key: the worker left cleanly. */
  async remove(): Promise<void> {
    try {
      await withTimeout(this.kv.delete(this.key), 5000, "deleting the heartbeat key timed out");
    } catch (error) {
      this.log.warn("cannot delete the heartbeat key; it expires on its own", { error: errorMessage(error) });
    }
  }
}
