/**
 * How a firing message reached the worker, and how the worker settles it.
 * A pulled message is a JetStream delivery: the worker acks, NAKs or
 * terminates it on its ack subject (docs/PROTOCOL.md §3, §4). An offer, a
 * broadcast job's firing addressed to this worker (§4, "Offers"), is a core
 * NATS message: there is nothing to settle, and the scheduler offers it
 * again every second until it starts. Both take the dispatcher's one path;
 * only the acker differs.
 */

import type { Msg, NatsConnection } from "@nats-io/transport-node";
import { ACK, nakWithDelay, parseAckSubject, TERM } from "./ack.js";
import type { Logger } from "./log.js";
import { errorMessage } from "./log.js";

/** Settles one firing message. */
export interface Acker {
  /** The message's delivery count, 1 on the first delivery. */
  readonly delivered: number;
  /** What settling a message that is not a firing does, for the log. */
  readonly discards: string;
  ack(): void;
  nakWithDelay(delayMs: number): void;
  term(): void;
}

/** A firing message as it arrived, and how to settle it. */
export interface Delivery {
  msg: Msg;
  acker: Acker;
  /** For an offer, the worker its `Chime-Worker-Id` must name (this one). */
  addressee?: string;
}

/** What a delivery is, for the log. */
export function kindOf(delivery: Delivery): "offer" | "delivery" {
  return delivery.addressee === undefined ? "delivery" : "offer";
}

/** Acks, NAKs and terminates a fetched message on its ack subject. */
class JetStreamAcker implements Acker {
  readonly delivered: number;
  readonly discards = "terminating";

  constructor(
    private readonly nc: NatsConnection,
    private readonly msg: Msg,
    private readonly log: Logger,
  ) {
    this.delivered = parseAckSubject(msg.reply)?.delivered ?? 1;
  }

  private send(body: string, what: string): void {
    try {
      if (this.msg.reply) this.nc.publish(this.msg.reply, body);
    } catch (error) {
      this.log.warn(`cannot ${what} the firing message; JetStream will redeliver it`, { error: errorMessage(error) });
    }
  }

  ack(): void {
    this.send(ACK, "ack");
  }

  nakWithDelay(delayMs: number): void {
    this.send(nakWithDelay(delayMs), "nak");
  }

  term(): void {
    this.send(TERM, "terminate");
  }
}

/** An offer is not a JetStream message: whatever becomes of it, nothing is sent. */
const OFFER_ACKER: Acker = {
  delivered: 1,
  discards: "dropping",
  ack() {},
  nakWithDelay() {},
  term() {},
};

/** A message fetched from one of the group's consumers. */
export function pulled(nc: NatsConnection, msg: Msg, log: Logger): Delivery {
  return { msg, acker: new JetStreamAcker(nc, msg, log) };
}

/** An offer on this worker's offer subject. */
export function offered(msg: Msg, workerId: string): Delivery {
  return { msg, acker: OFFER_ACKER, addressee: workerId };
}
