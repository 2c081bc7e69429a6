/**
 * Cancel requests (docs/PROTOCOL.md §8): core NATS `chime.cancel.<worker id>`,
 * `{"firing_id": …, "reason": …}`. A request for a firing that runs here
 * stops it (outcome `cancelled`, error = the reason); unreadable requests
 * and firings that do not run here are ignored. A request with a reply
 * subject is answered `{"running": true|false}`.
 */

import type { Msg } from "@nats-io/transport-node";
import type { Logger } from "./log.js";
import type { Running } from "./running.js";

/** The longest cancel request read; anything longer is unreadable. */
const MAX_CANCEL_BYTES = 64 * 1024;

/** Handles one cancel request message; returns whether its firing runs here. */
export function onCancel(msg: Msg, running: Running, log: Logger): boolean {
  let found = false;
  const request = readCancel(msg.data);
  if (request) {
    found = running.cancel(request.firingId, request.reason);
    log.info("cancel request", { firing_id: request.firingId, reason: request.reason, found });
  } else {
    log.warn("ignoring an unreadable cancel request");
  }
  if (msg.reply) {
    try {
      msg.respond(JSON.stringify({ running: found }));
    } catch {
      // The requester went away; nothing to answer.
    }
  }
  return found;
}

/** Reads a cancel request; `undefined` when it is not one. */
export function readCancel(data: Uint8Array): { firingId: string; reason: string } | undefined {
  if (data.length > MAX_CANCEL_BYTES) return undefined;
  try {
    const value = JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(data)) as unknown;
    if (typeof value !== "object" || value === null) return undefined;
    const { firing_id: firingId, reason } = value as Record<string, unknown>;
    if (typeof firingId !== "string" || typeof reason !== "string") return undefined;
    return { firingId, reason };
  } catch {
    return undefined;
  }
}
