/**
 * What the worker is doing now, for `/readyz` and {@link Worker.notReady}:
 * waiting for its NATS objects, taking firings, fenced, or draining.
 */

/** A worker's state. */
export class WorkerStatus {
  private started = false;
  private fenced = false;
  private draining = false;
  private waitingFor: string | undefined;

  /** Why the worker does not take firings now; `undefined` when it does. */
  notReady(): string | undefined {
    if (this.draining) return "draining: shutting down";
    if (this.fenced) return "fenced: no heartbeat within its lease; runs stopped, not fetching";
    if (!this.started) return this.waitingFor ? `starting: waiting for ${this.waitingFor}` : "starting";
    return undefined;
  }

  get isFenced(): boolean {
    return this.fenced;
  }

  get isDraining(): boolean {
    return this.draining;
  }

  setWaitingFor(what: string | undefined): void {
    this.waitingFor = what;
  }

  setStarted(): void {
    this.started = true;
  }

  setFenced(fenced: boolean): void {
    this.fenced = fenced;
  }

  setDraining(): void {
    this.draining = true;
  }
}
