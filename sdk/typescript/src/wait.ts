/**
 * Waiting, in the shapes the worker needs: a pause that a stop ends early,
 * a promise with a time limit, and a bounded backoff.
 */

/** Resolves after `ms`, or at once when `signal` aborts. */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve();
    const done = () => {
      clearTimeout(timer);
      signal?.removeEventListener("abort", done);
      resolve();
    };
    const timer = setTimeout(done, Math.max(0, ms));
    signal?.addEventListener("abort", done, { once: true });
  });
}

/** `promise`'s value, or a rejection with `message` after `ms`. */
export function withTimeout<T>(promise: Promise<T>, ms: number, message: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const limit = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(message)), Math.max(0, ms));
  });
  return Promise.race([promise, limit]).finally(() => clearTimeout(timer));
}

/** Monotonic milliseconds: wall-clock jumps do not move it. */
export function monotonicMs(): number {
  return performance.now();
}

/** A one-shot event others can wait on; set it again after {@link reset}. */
export class Signal {
  private waiters: (() => void)[] = [];
  private isSet = false;

  /** Wakes every waiter; later waits resolve at once until {@link reset}. */
  set(): void {
    this.isSet = true;
    const waiters = this.waiters;
    this.waiters = [];
    for (const wake of waiters) wake();
  }

  reset(): void {
    this.isSet = false;
  }

  get value(): boolean {
    return this.isSet;
  }

  wait(): Promise<void> {
    if (this.isSet) return Promise.resolve();
    return new Promise((resolve) => this.waiters.push(resolve));
  }
}

/** The longest delay `setTimeout` takes as it is; longer ones fire at once. */
const MAX_TIMEOUT_MS = 2_147_483_647;

/** A timer for any delay, even past `setTimeout`'s 24.8-day limit; returns its cancel. */
export function setLongTimeout(fire: () => void, ms: number): () => void {
  let timer: NodeJS.Timeout;
  const due = Date.now() + Math.max(0, ms);
  const arm = (left: number) => {
    timer = setTimeout(() => {
      const rest = due - Date.now();
      if (rest > 0) arm(rest);
      else fire();
    }, Math.min(left, MAX_TIMEOUT_MS));
  };
  arm(Math.max(0, ms));
  return () => clearTimeout(timer);
}
