/**
 * Reporting finished runs (docs/PROTOCOL.md §6): JSON on JetStream
 * `chime.events.finished.<group>.<worker id>` with
 * `Nats-Msg-Id: finished:<firing id>`, so a re-sent report is a duplicate
 * JetStream drops. Each report is kept and retried with backoff (100 ms
 * doubling to 5 s) until JetStream acknowledges it, through NATS restarts;
 * only the end of a shutdown's flush grace stops the retries.
 */

import type { JetStreamClient } from "@nats-io/jetstream";
import type { Logger } from "./log.js";
import { errorMessage } from "./log.js";
import type { Metrics } from "./metrics.js";
import type { Running } from "./running.js";
import { sleep } from "./wait.js";

const FIRST_RETRY_MS = 100;
const MAX_RETRY_MS = 5000;
/** How long one publish waits for JetStream's ack. */
const PUBLISH_TIMEOUT_MS = 5000;

/** A finished event as sent. */
export interface Finished {
  firing_id: string;
  worker_id: string;
  outcome: "succeeded" | "failed" | "timed_out" | "cancelled";
  error?: string;
  output?: string;
  interrupted?: "fenced" | "shutdown";
  started_at: string;
  finished_at: string;
}

/** Publishes finished events in the background. */
export class Reporter {
  private readonly pending = new Set<Promise<void>>();
  private readonly giveUp = new AbortController();
  private unsent = 0;

  constructor(
    private readonly js: JetStreamClient,
    private readonly subject: string,
    private readonly running: Running,
    private readonly metrics: Metrics,
    private readonly log: Logger,
    /** Called once JetStream has stored an event. */
    private readonly onStored: (event: Finished) => void = () => {},
  ) {}

  /** Queues `event` for publishing; returns at once. */
  report(event: Finished): void {
    const task = this.publishUntilAcked(event).finally(() => {
      this.running.reported(event.firing_id);
      this.pending.delete(task);
    });
    this.pending.add(task);
  }

  private async publishUntilAcked(event: Finished): Promise<void> {
    const body = JSON.stringify(event);
    const msgID = `finished:${event.firing_id}`;
    let delay = FIRST_RETRY_MS;
    let failures = 0;
    for (;;) {
      if (this.giveUp.signal.aborted) return this.gaveUp(event);
      try {
        await this.js.publish(this.subject, body, { msgID, timeout: PUBLISH_TIMEOUT_MS });
        if (failures > 0) this.log.info("finished event published after retries", { firing_id: event.firing_id, failures });
        try {
          this.onStored(event);
        } catch (error) {
          this.log.warn("the finished-event callback failed", { error: errorMessage(error) });
        }
        return;
      } catch (error) {
        failures += 1;
        this.metrics.reportRetry();
        const fields = { firing_id: event.firing_id, error: errorMessage(error), failures };
        if (failures === 1) this.log.warn("cannot publish a finished event; retrying", fields);
        else this.log.debug("finished event still not published", fields);
      }
      await sleep(delay, this.giveUp.signal);
      delay = Math.min(delay * 2, MAX_RETRY_MS);
    }
  }

  private gaveUp(event: Finished): void {
    this.unsent += 1;
    this.log.error("gave up publishing a finished event at shutdown; the scheduler will treat the firing as lost", {
      firing_id: event.firing_id,
      outcome: event.outcome,
    });
  }

  /** Waits until every queued event is published, at most `graceMs`; then stops retrying. Returns how many were given up. */
  async flush(graceMs: number): Promise<number> {
    const all = Promise.all([...this.pending]);
    let timer: NodeJS.Timeout | undefined;
    const timedOut = await Promise.race([
      all.then(() => false),
      new Promise<boolean>((resolve) => (timer = setTimeout(() => resolve(true), graceMs))),
    ]);
    clearTimeout(timer);
    if (timedOut) {
      this.giveUp.abort();
      await Promise.all([...this.pending]);
    }
    return this.unsent;
  }

  /** Events not yet acknowledged. */
  get queued(): number {
    return this.pending.size;
  }
}
