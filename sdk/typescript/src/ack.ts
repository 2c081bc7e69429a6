/**
 * A fetched message's ack subject and the acks sent to it (docs/PROTOCOL.md
 * §2, "A pull request on the wire"). The ack subject carries the delivery
 * count, the server's timestamp and the pending count; acks are core NATS
 * publishes to it, with no reply of their own.
 */

/** What a JetStream ack subject says about its message. */
export interface AckInfo {
  stream: string;
  consumer: string;
  /** The delivery count, 1 on the first delivery. */
  delivered: number;
  streamSeq: number;
  consumerSeq: number;
  /** When the server stored the message, in nanoseconds since the epoch. */
  timestampNs: bigint;
  /** How many more messages the consumer holds. */
  pending: number;
}

/**
 * Reads `$JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>.<consumer seq>.<ts>.<pending>`,
 * or the form with a domain and account hash before the stream and a token
 * after the pending count; `undefined` for anything else.
 */
export function parseAckSubject(subject: string | undefined): AckInfo | undefined {
  if (!subject) return undefined;
  const tokens = subject.split(".");
  if (tokens[0] !== "$JS" || tokens[1] !== "ACK") return undefined;
  let at: number;
  if (tokens.length === 9) {
    at = 2;
  } else if (tokens.length >= 12) {
    at = 4;
  } else {
    return undefined;
  }
  const numbers = tokens.slice(at + 2, at + 7);
  if (numbers.length !== 5 || !numbers.every((t) => /^\d+$/.test(t))) return undefined;
  return {
    stream: tokens[at]!,
    consumer: tokens[at + 1]!,
    delivered: Number(numbers[0]),
    streamSeq: Number(numbers[1]),
    consumerSeq: Number(numbers[2]),
    timestampNs: BigInt(numbers[3]!),
    pending: Number(numbers[4]),
  };
}

/** The ack bodies. */
export const ACK = "+ACK";
export const TERM = "+TERM";

/** `-NAK {"delay": <ns>}`: redeliver after the delay (never a bare NAK, which redelivers at once). */
export function nakWithDelay(delayMs: number): string {
  const ns = BigInt(Math.max(0, Math.round(delayMs))) * 1_000_000n;
  return `-NAK {"delay": ${ns}}`;
}
