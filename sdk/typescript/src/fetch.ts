/**
 * One pull request on the wire (docs/PROTOCOL.md §2). The official
 * JavaScript client has neither a no-wait fetch nor an expiry under 1 s, so
 * the worker speaks the pull protocol itself: subscribe to a fresh inbox,
 * publish `{"batch": N, "no_wait": true, "expires": NS}` to
 * `$JS.API.CONSUMER.MSG.NEXT.<stream>.<consumer>` with that inbox as the
 * reply subject, and read the inbox until N messages came or a status
 * message (404, 408, 409, …) ends the request. `expires` is always set: a
 * request without one can hang forever once the consumer's max ack pending
 * is full.
 */

import { createInbox, type Msg, type NatsConnection } from "@nats-io/transport-node";
import { parseAckSubject } from "./ack.js";

/** How much longer than `expires` the worker waits for the server to end a request itself. */
export const FETCH_SLACK_MS = 5000;

/** How a request ended. */
export interface FetchEnd {
  /** Messages delivered (each already handed to `onMessage`). */
  received: number;
  /** The status that ended it (`404`, `408`, `409`, …); `undefined` when `batch` messages came or the wait ran out. */
  status: number | undefined;
  /** The status line's description, e.g. `No Messages`. */
  description: string | undefined;
}

/** The status code of a status message; `undefined` for an ordinary message. */
export function statusOf(msg: Msg): { code: number; description: string } | undefined {
  // A status message has no reply subject and a header line with a code.
  if (msg.reply) return undefined;
  try {
    const headers = msg.headers;
    if (headers && headers.code > 0) return { code: headers.code, description: headers.description };
  } catch {
    return undefined;
  }
  return undefined;
}

/**
 * Sends one no-wait pull request for up to `batch` messages on `subject`
 * and hands each firing message to `onMessage` as it arrives. Messages
 * without a JetStream ack subject (anything but a delivery) are ignored.
 * Rejects when the request cannot be sent.
 */
export async function fetchBatch(
  nc: NatsConnection,
  subject: string,
  batch: number,
  expiresMs: number,
  onMessage: (msg: Msg) => void,
  inboxPrefix?: string,
): Promise<FetchEnd> {
  const inbox = createInbox(inboxPrefix);
  const expiresNs = BigInt(Math.max(1, Math.round(expiresMs))) * 1_000_000n;
  const body = `{"batch":${batch},"no_wait":true,"expires":${expiresNs}}`;
  return new Promise<FetchEnd>((resolve, reject) => {
    let received = 0;
    let done = false;
    const finish = (status?: { code: number; description: string }) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      sub.unsubscribe();
      resolve({ received, status: status?.code, description: status?.description });
    };
    const sub = nc.subscribe(inbox, {
      callback: (err, msg) => {
        if (done) return;
        if (err) {
          finish({ code: 0, description: err.message });
          return;
        }
        const status = statusOf(msg);
        if (status) {
          finish(status);
          return;
        }
        if (!parseAckSubject(msg.reply)) return;
        received += 1;
        onMessage(msg);
        if (received >= batch) finish();
      },
    });
    const timer = setTimeout(() => finish(), expiresMs + FETCH_SLACK_MS);
    try {
      nc.publish(subject, body, { reply: inbox });
    } catch (e) {
      done = true;
      clearTimeout(timer);
      sub.unsubscribe();
      reject(e);
    }
  });
}
