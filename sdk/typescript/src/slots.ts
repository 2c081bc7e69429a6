/**
 * Threads as slots: a firing holds one from fetch until its run ends
 * (docs/PROTOCOL.md §2: in flight from the moment its message is fetched).
 * `free = threads − in flight` is how many messages the fetch loop may
 * fetch; a slot coming back wakes it.
 */

import type { Metrics } from "./metrics.js";
import { Signal } from "./wait.js";

/** The worker's threads. */
export class Slots {
  private held = 0;
  /** Set whenever a slot is freed; the fetch loop resets it before it waits. */
  readonly freed = new Signal();

  constructor(
    readonly threads: number,
    private readonly metrics: Metrics,
  ) {
    metrics.setThreads(threads);
    metrics.setInFlight(0, threads);
  }

  get free(): number {
    return this.threads - this.held;
  }

  get inFlight(): number {
    return this.held;
  }

  /** Takes a free thread; returns its release (callable once), or `undefined` when none is free. */
  tryTake(): (() => void) | undefined {
    if (this.held >= this.threads) return undefined;
    this.held += 1;
    this.metrics.setInFlight(this.held, this.threads);
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.held -= 1;
      this.metrics.setInFlight(this.held, this.threads);
      this.freed.set();
    };
  }
}
