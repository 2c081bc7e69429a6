/**
 * One firing message, from receipt to report (docs/PROTOCOL.md §3–§6):
 * check it, ask the scheduler to start it, settle it, run it, report how it
 * ended. Every branch settles the message exactly once, so nothing is left
 * held and unstarted. A pulled message and an offer take the same path;
 * how each is settled (acked, NAKed, terminated, or for an offer nothing at
 * all) is its acker's (delivery.ts).
 */

import { Match, type Msg } from "@nats-io/transport-node";
import { kindOf, type Delivery } from "./delivery.js";
import type { Handler } from "./handler.js";
import type { Logger } from "./log.js";
import { errorMessage } from "./log.js";
import { BadMessage, checkAddressee, HEADERS, parseFiring, type FiringMessage, type HeaderReader } from "./message.js";
import type { Metrics } from "./metrics.js";
import type { Reporter } from "./report.js";
import { runFiring } from "./run.js";
import type { Running } from "./running.js";
import { MAX_REJECTED_DELIVERIES, REFUSALS, rejectedDelayMs, type Starter } from "./start.js";
import { formatTime } from "./time.js";
import { monotonicMs } from "./wait.js";

/** What the dispatcher works with; one per worker. */
export interface DispatchDeps {
  starter: Starter;
  handlers: Map<string, Handler>;
  running: Running;
  reporter: Reporter;
  metrics: Metrics;
  log: Logger;
  workerId: string;
  nakDelayMs: number;
  stopGraceMs: number;
  maxOutputBytes: number;
}

/** The headers of `msg` as a reader, or `undefined` when it has none; throws when they cannot be read. */
function headerReader(msg: Msg): HeaderReader | undefined {
  const headers = msg.headers;
  if (!headers) return undefined;
  return (name) => {
    // W3C names `traceparent` case-insensitively; Chime's own headers are exact.
    const value = name === HEADERS.traceparent ? headers.get(name, Match.IgnoreCase) : headers.get(name);
    return value === "" ? undefined : value;
  };
}

/** The run's cut-off: the scheduler's, else start + `Chime-Timeout-Ms`, else `Chime-Deadline`. */
export function deadlineOf(message: FiringMessage, fromReply: Date | undefined, now: Date): Date {
  if (fromReply) return fromReply;
  if (message.timeoutMs !== undefined) {
    const at = now.getTime() + message.timeoutMs;
    if (Number.isFinite(at) && at <= 8.64e15) return new Date(at);
  }
  return message.deadline;
}

/** Takes deliveries from receipt to report. */
export class Dispatcher {
  constructor(private readonly d: DispatchDeps) {}

  /** Handles one firing message; `release` frees its thread and is called exactly once, when the run ends. */
  async dispatch(delivery: Delivery, release: () => void): Promise<void> {
    const parsed = this.check(delivery);
    if (parsed) {
      await this.take(delivery, parsed, release);
    } else {
      release();
    }
  }

  /**
   * The firing a message carries; `undefined` for one that is not a valid
   * firing (or an offer for another worker), which is counted, logged and
   * settled here.
   */
  check(delivery: Delivery): FiringMessage | undefined {
    const { msg, acker } = delivery;
    try {
      const read = headerReader(msg);
      const parsed = parseFiring(read, msg.data);
      if (delivery.addressee !== undefined) checkAddressee(read, delivery.addressee);
      return parsed;
    } catch (error) {
      this.d.metrics.badMessage();
      const reason = error instanceof BadMessage ? error.message : `unreadable headers: ${errorMessage(error)}`;
      const what = delivery.addressee === undefined ? "a message" : "an offer";
      this.d.log.warn(`${acker.discards} ${what} that is not a valid firing`, { subject: msg.subject, error: reason });
      acker.term();
      return undefined;
    }
  }

  /** Starts, runs and reports a checked firing; `release` frees its thread and is called exactly once. */
  async take(delivery: Delivery, parsed: FiringMessage, release: () => void): Promise<void> {
    try {
      await this.handle(delivery, parsed, release);
    } catch (error) {
      // Nothing above throws by design; a bug must not strand the message or the thread.
      this.d.log.error("dispatching a firing failed", { error: errorMessage(error) });
    } finally {
      release();
    }
  }

  private async handle(delivery: Delivery, parsed: FiringMessage, release: () => void): Promise<void> {
    const d = this.d;
    const acker = delivery.acker;
    const kind = kindOf(delivery);
    const firing = parsed.firing;
    const id = firing.firingId;
    const fields = { firing_id: id, job_id: firing.jobId, attempt: firing.attempt };
    const control = d.running.claim(id);
    if (!control) {
      d.metrics.startRefusal("duplicate_delivery");
      d.log.info(`dropping a second ${kind} of an attempt this worker holds`, fields);
      acker.ack();
      return;
    }
    if (control.stopped) {
      // Shutting down past the drain grace, or fenced: leave it to another worker, with a delay.
      d.running.release(id);
      acker.nakWithDelay(d.nakDelayMs);
      return;
    }

    const asked = monotonicMs();
    const decision = await d.starter.ask(id, firing.handler, delivery.msg.data);
    d.metrics.startDecision((monotonicMs() - asked) / 1000);
    switch (decision.kind) {
      case "refused": {
        d.running.release(id);
        const known = decision.refusal !== undefined && (REFUSALS as readonly string[]).includes(decision.refusal);
        const reason = known ? decision.refusal! : "unspecified";
        d.metrics.startRefusal(reason);
        d.log.info(`start refused; dropping the ${kind}`, { ...fields, reason: decision.refusal ?? "unspecified" });
        acker.ack();
        return;
      }
      case "rejected": {
        d.running.release(id);
        d.metrics.startRefusal("rejected");
        const delivered = acker.delivered;
        if (delivered >= MAX_REJECTED_DELIVERIES) {
          d.log.error("the scheduler keeps rejecting this firing; dropping it", { ...fields, error: decision.error, delivered });
          acker.term();
        } else {
          const delay = rejectedDelayMs(d.nakDelayMs, delivered);
          d.log.warn(`start rejected; the ${kind} comes back later`, { ...fields, error: decision.error, delivered, delay_ms: delay });
          acker.nakWithDelay(delay);
        }
        return;
      }
      case "unavailable": {
        d.running.release(id);
        d.metrics.startRefusal("scheduler_unavailable");
        d.log.warn(`no start decision; handing the ${kind} back`, { ...fields, error: decision.error, delay_ms: d.nakDelayMs });
        acker.nakWithDelay(d.nakDelayMs);
        return;
      }
      case "accepted":
        break;
    }

    // From here the scheduler owns the firing; heartbeats list it until its report is acknowledged.
    d.running.accept(id);
    acker.ack();
    const now = new Date();
    d.metrics.startLateness(Math.max(0, now.getTime() - firing.dueAt.getTime()) / 1000);
    const deadline = deadlineOf(parsed, decision.deadline, now);
    const handler = d.handlers.get(firing.handler);
    const label = handler ? firing.handler : "unknown";
    d.log.info("firing started", { ...fields, handler: firing.handler, deadline: formatTime(deadline) });

    const report = await runFiring(handler, {
      firing,
      deadline,
      control,
      workerId: d.workerId,
      maxOutputBytes: d.maxOutputBytes,
      stopGraceMs: d.stopGraceMs,
    });
    d.running.finish(id, monotonicMs());
    release();

    d.metrics.firing(label, report.outcome, report.durationSeconds);
    d.log.info("firing finished", {
      ...fields,
      outcome: report.outcome,
      duration_s: Number(report.durationSeconds.toFixed(3)),
      error: report.error,
    });
    d.reporter.report({
      firing_id: id,
      worker_id: d.workerId,
      outcome: report.outcome,
      ...(report.error !== undefined ? { error: report.error } : {}),
      ...(report.output !== undefined ? { output: report.output } : {}),
      ...(report.interrupted !== undefined ? { interrupted: report.interrupted } : {}),
      started_at: formatTime(report.startedAt),
      finished_at: formatTime(report.finishedAt),
    });
  }
}
