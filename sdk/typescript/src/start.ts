/**
 * Asking the scheduler to start a firing (docs/PROTOCOL.md §4): a core NATS
 * request on the worker's own `chime.worker.v1.start.<group>.<worker id>`,
 * and what each answer means.
 */

import { createHash } from "node:crypto";
import { errors, type NatsConnection } from "@nats-io/transport-node";
import { parseTime } from "./time.js";

/** The first of the two requests waits this share of the start timeout, the repeat the whole of it. */
const FIRST_ATTEMPT_SHARE = 4;
/** Deliveries of one firing the scheduler keeps rejecting before the worker terminates it. */
export const MAX_REJECTED_DELIVERIES = 8;

/** The scheduler's decision on one delivery. */
export type StartDecision =
  /** Run it; the scheduler's deadline, if it sent a readable one. */
  | { kind: "accepted"; deadline: Date | undefined }
  /** Drop it (ack, do not run); the refusal reason as sent, `undefined` when there was none. */
  | { kind: "refused"; refusal: string | undefined }
  /** No decision (no scheduler, timeout, garbage reply, `unavailable`): NAK it, however often. */
  | { kind: "unavailable"; error: string }
  /** The scheduler cannot decide this firing for a reason of its own: NAK with a growing delay, then drop it. */
  | { kind: "rejected"; error: string };

/** The refusal reasons the worker counts under their own name; any other is `unspecified`. */
export const REFUSALS = [
  "already_started",
  "already_finished",
  "unknown_firing",
  "skipped",
  "queued",
  "cancelled",
  "wrong_group",
  "not_as_staged",
  "wrong_worker",
] as const;

/** The lower-case hex SHA-256 of the message body exactly as received. */
export function payloadSha256(body: Uint8Array): string {
  return createHash("sha256").update(body).digest("hex");
}

/**
 * How long a rejected firing stays away after its `delivered`-th delivery:
 * `nakDelayMs` doubling per delivery, at most a minute.
 */
export function rejectedDelayMs(nakDelayMs: number, delivered: number): number {
  const doublings = Math.min(Math.max(delivered - 1, 0), 16);
  return Math.min(nakDelayMs * 2 ** doublings, 60_000);
}

/** Reads a start reply: a decision, an API error `{"error": {...}}`, or garbage. */
export function decide(payload: Uint8Array): StartDecision {
  let value: unknown;
  const text = new TextDecoder().decode(payload);
  try {
    value = JSON.parse(text);
  } catch (e) {
    return { kind: "unavailable", error: `unreadable start reply (${(e as Error).message}): ${text.slice(0, 200)}` };
  }
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    return { kind: "unavailable", error: `unreadable start reply: ${text.slice(0, 200)}` };
  }
  const reply = value as Record<string, unknown>;
  if (reply.accepted === true) {
    let deadline: Date | undefined;
    if (typeof reply.deadline === "string") {
      try {
        deadline = parseTime(reply.deadline);
      } catch {
        deadline = undefined;
      }
    }
    return { kind: "accepted", deadline };
  }
  if (reply.accepted === false) {
    const refusal = typeof reply.refusal === "string" ? reply.refusal : undefined;
    return { kind: "refused", refusal };
  }
  const error = reply.error;
  if (error !== undefined) {
    const code = typeof error === "object" && error !== null ? (error as Record<string, unknown>).code : undefined;
    const described = `the scheduler answered with an error: ${JSON.stringify(error).slice(0, 500)}`;
    return code === "unavailable" ? { kind: "unavailable", error: described } : { kind: "rejected", error: described };
  }
  return { kind: "unavailable", error: `unreadable start reply: ${text.slice(0, 200)}` };
}

/** Asks the scheduler to start firings for one worker of one group. */
export class Starter {
  constructor(
    private readonly nc: NatsConnection,
    private readonly subject: string,
    private readonly workerId: string,
    private readonly group: string,
    private readonly timeoutMs: number,
  ) {}

  /** Asks to start `firingId`, which arrived with `handler` and `body`, and reads the decision. */
  async ask(firingId: string, handler: string, body: Uint8Array): Promise<StartDecision> {
    const request = JSON.stringify({
      firing_id: firingId,
      worker_id: this.workerId,
      group: this.group,
      handler,
      payload_sha256: payloadSha256(body),
    });
    let last = "";
    for (let attempt = 1; attempt <= 2; attempt++) {
      const timeout = attempt === 1 ? this.timeoutMs / FIRST_ATTEMPT_SHARE : this.timeoutMs;
      try {
        const reply = await this.nc.request(this.subject, request, { timeout: Math.max(1, Math.round(timeout)) });
        return decide(reply.data);
      } catch (e) {
        const cause = (e as { cause?: unknown }).cause ?? e;
        if (cause instanceof errors.NoRespondersError) {
          return { kind: "unavailable", error: "no scheduler answers start requests" };
        }
        last = (e as Error).message ?? String(e);
        if (cause instanceof errors.TimeoutError && attempt < 2) continue;
        break;
      }
    }
    return { kind: "unavailable", error: `start request failed: ${last}` };
  }
}
