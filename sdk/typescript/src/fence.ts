/**
 * Self-fencing (docs/PROTOCOL.md §7): a worker that could not write a
 * heartbeat for its whole lease stops its runs before the scheduler can
 * re-queue them.
 *
 * Let `s` be the monotonic instant just before the newest heartbeat put the
 * server acknowledged: the key lives until at least `s + worker_ttl`. The
 * worker fences at `s + lease`, `lease = worker_ttl − fenceMargin`: it stops
 * every run (reported `failed`, interrupted `fenced`), and a handler that
 * ignores its signal is left `stopGrace` later. Since `fenceMargin >
 * stopGrace`, every run is over before the key can expire. Measured with a
 * monotonic clock, so wall-clock jumps do not move the fence.
 */

import type { Logger } from "./log.js";
import type { Metrics } from "./metrics.js";
import type { Running } from "./running.js";
import type { WorkerStatus } from "./status.js";
import { monotonicMs, Signal } from "./wait.js";

/** The worker's heartbeat lease and the fence that ends it. */
export class Fence {
  private renewedAt: number;
  private fenced = false;
  private timer: NodeJS.Timeout | undefined;
  private stopped = false;
  /** Set while not fenced; reset when the fence falls. */
  readonly lifted = new Signal();

  constructor(
    private readonly leaseMs: number,
    renewedAt: number,
    private readonly running: Running,
    private readonly status: WorkerStatus,
    private readonly metrics: Metrics,
    private readonly log: Logger,
  ) {
    this.renewedAt = renewedAt;
    this.lifted.set();
  }

  get isFenced(): boolean {
    return this.fenced;
  }

  /** Starts watching the lease. */
  start(): void {
    this.arm();
  }

  /** Stops watching. */
  stop(): void {
    this.stopped = true;
    clearTimeout(this.timer);
  }

  /**
   * A heartbeat sent at monotonic `sentAt` was acknowledged (observed at
   * `nowMs`): renews the lease, and lifts the fence unless that beat is
   * itself older than the lease.
   */
  renew(sentAt: number, nowMs: number = monotonicMs()): void {
    if (sentAt > this.renewedAt) this.renewedAt = sentAt;
    if (this.fenced && nowMs < sentAt + this.leaseMs) {
      this.fenced = false;
      this.running.unfence();
      this.status.setFenced(false);
      this.lifted.set();
      this.log.info("heartbeat written again: fence lifted, fetching firings again");
    }
    this.arm();
  }

  /** One check at monotonic `nowMs`: fences the worker if its lease ran out. Returns the runs stopped, `undefined` if it did not fence now. */
  check(nowMs: number = monotonicMs()): number | undefined {
    if (this.fenced) return undefined;
    const silentMs = nowMs - this.renewedAt;
    if (silentMs < this.leaseMs) return undefined;
    const reason = `fenced: no heartbeat for ${(silentMs / 1000).toFixed(1)}s`;
    this.fenced = true;
    this.lifted.reset();
    this.status.setFenced(true);
    const stopped = this.running.fence(reason);
    this.metrics.fenced();
    this.log.error(
      `${reason}: stopping every run and fetching nothing until a heartbeat succeeds, ` +
        "so that no firing runs here while the scheduler re-queues it",
      { stopped, lease_ms: this.leaseMs },
    );
    return stopped;
  }

  /** Sets the timer for the moment the lease can run out. */
  private arm(): void {
    clearTimeout(this.timer);
    if (this.stopped || this.fenced) return;
    const due = this.renewedAt + this.leaseMs - monotonicMs();
    this.timer = setTimeout(() => {
      if (this.check() === undefined && !this.fenced) this.arm();
    }, Math.max(0, due));
  }
}
