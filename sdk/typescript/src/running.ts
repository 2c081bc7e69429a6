/**
 * The firings this worker holds, and those it finished lately.
 *
 * Cancel requests find a run here by firing id; heartbeats list the firings
 * the worker owes the scheduler a report on ({@link Running.listed}). It also
 * keeps one attempt from running twice here: JetStream can deliver an
 * attempt again (a lost ack, an ack after the ack wait) and the scheduler
 * accepts a repeated start from the same worker, so the worker itself drops
 * a delivery of an attempt it runs or has just finished.
 */

/** How long a finished attempt is remembered. */
export const RECENT_FOR_MS = 600_000;
/** The most finished attempts remembered. */
export const RECENT_MAX = 10_000;
/** The most firing ids one heartbeat lists; past it the list is left out. */
export const MAX_LISTED_RUNNING = 1000;

/** Why a run was stopped from outside, and the outcome it then reports. */
export interface StopReason {
  outcome: "cancelled" | "failed";
  reason: string;
  /** Set when the worker stopped the run for a fault that is not the job's. */
  interrupted?: "fenced" | "shutdown";
}

/** How one run is stopped from outside: an abort signal and the first reason given. */
export class RunControl {
  private readonly controller = new AbortController();
  private stopReason: StopReason | undefined;

  /** Aborted when the run is stopped from outside (cancel, fence, shutdown). */
  get signal(): AbortSignal {
    return this.controller.signal;
  }

  /** The first stop, if any. */
  get stopped(): StopReason | undefined {
    return this.stopReason;
  }

  /** Cancels the run (outcome `cancelled`, error = `reason`). */
  cancel(reason: string): void {
    this.stop({ outcome: "cancelled", reason });
  }

  /** Stops the run for a fault of the worker or of NATS: it reports `failed`, interrupted. */
  interrupt(interrupted: "fenced" | "shutdown", reason: string): void {
    this.stop({ outcome: "failed", reason, interrupted });
  }

  private stop(stop: StopReason): void {
    if (this.stopReason === undefined) this.stopReason = stop;
    if (!this.controller.signal.aborted) this.controller.abort(new FiringStopped(this.stopReason));
  }
}

/** The reason of an aborted {@link FiringContext.signal}: why the run was stopped. */
export class FiringStopped extends Error {
  /** `deadline`, `cancelled`, `fenced` or `shutdown`. */
  readonly kind: "deadline" | "cancelled" | "fenced" | "shutdown";
  constructor(stop: StopReason | { deadline: true; reason: string }) {
    super("reason" in stop ? stop.reason : "stopped");
    this.name = "FiringStopped";
    this.kind = "deadline" in stop ? "deadline" : (stop.interrupted ?? "cancelled");
  }
}

/** Firings held by this worker. */
export class Running {
  private readonly running = new Map<string, RunControl>();
  /** Accepted starts whose finished event JetStream has not acknowledged. */
  private readonly accepted = new Set<string>();
  /** Finished attempts, oldest first, with when they finished (monotonic ms). */
  private readonly recent = new Map<string, number>();
  /** Set at the end of a shutdown's drain grace: later claims come back stopped. */
  private closed: string | undefined;
  /** Set while fenced: claims meanwhile come back stopped. */
  private fenced: string | undefined;

  /** Claims `id` for a start; `undefined` when this worker already holds or just finished it. */
  claim(id: string): RunControl | undefined {
    if (this.running.has(id) || this.recent.has(id)) return undefined;
    const control = new RunControl();
    if (this.closed !== undefined) control.interrupt("shutdown", this.closed);
    else if (this.fenced !== undefined) control.interrupt("fenced", this.fenced);
    this.running.set(id, control);
    return control;
  }

  /** Gives back a claim whose start was not accepted. */
  release(id: string): void {
    this.running.delete(id);
  }

  /** The scheduler accepted the start of `id`: heartbeats list it until {@link reported}. */
  accept(id: string): void {
    this.accepted.add(id);
  }

  /** JetStream acknowledged the finished event of `id` (or the worker gave it up). */
  reported(id: string): void {
    this.accepted.delete(id);
  }

  /**
   * The firings a heartbeat lists: every start asked for or accepted whose
   * finished event is not acknowledged yet (a start awaiting its answer is
   * listed, so a beat written while an accepted answer travels does not
   * deny the run). `undefined` past {@link MAX_LISTED_RUNNING}.
   */
  listed(): string[] | undefined {
    const all = new Set<string>(this.accepted);
    for (const id of this.running.keys()) all.add(id);
    if (all.size > MAX_LISTED_RUNNING) return undefined;
    return [...all].sort();
  }

  /** The run of `id` ended at monotonic time `nowMs`. */
  finish(id: string, nowMs: number): void {
    this.running.delete(id);
    for (const [old, at] of this.recent) {
      if (nowMs - at < RECENT_FOR_MS && this.recent.size < RECENT_MAX) break;
      this.recent.delete(old);
    }
    if (!this.recent.has(id)) this.recent.set(id, nowMs);
  }

  /** Cancels the run of `id`; false when it does not run here. */
  cancel(id: string, reason: string): boolean {
    const control = this.running.get(id);
    if (!control) return false;
    control.cancel(reason);
    return true;
  }

  /** Stops every run, and every later claim, at the end of a shutdown's drain grace; returns how many ran. */
  interruptAll(reason: string): number {
    this.closed = reason;
    for (const control of this.running.values()) control.interrupt("shutdown", reason);
    return this.running.size;
  }

  /** Stops every run, and every claim until {@link unfence}, for the fence; returns how many ran. */
  fence(reason: string): number {
    this.fenced = reason;
    for (const control of this.running.values()) control.interrupt("fenced", reason);
    return this.running.size;
  }

  /** Lets claims run again after a fence. */
  unfence(): void {
    this.fenced = undefined;
  }

  /** Firings claimed now (being started or running). */
  get size(): number {
    return this.running.size;
  }
}
