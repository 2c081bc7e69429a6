/**
 * The worker's clock offset from the NATS server, measured on the firings
 * it fetches. JetStream stamps every message with the server's time when it
 * stored it (in the ack subject); `local receive time − stored time` is the
 * offset of the local clock (positive: ahead) plus time spent in the stream
 * and on the wire, never negative. The smallest sample of the last 5 minutes
 * is therefore the tightest estimate, and an upper bound of the real offset.
 */

/** How far back samples count. */
export const OFFSET_WINDOW_MS = 300_000;
const MAX_SAMPLES = 1024;

/** The minimum of the offset samples seen within the window. */
export class ClockOffset {
  /** Samples that can still become the minimum: times and offsets increase from front to back. */
  private candidates: { at: number; offset: number }[] = [];

  constructor(private readonly windowMs: number = OFFSET_WINDOW_MS) {}

  /**
   * Records a message stored at `publishedNs` (server clock, ns since the
   * epoch) and received at `receivedNs` (local clock), observed at monotonic
   * `nowMs`. Returns the sample in seconds.
   */
  observe(nowMs: number, publishedNs: bigint, receivedNs: bigint): number | undefined {
    const sample = Number(receivedNs - publishedNs) / 1e9;
    if (!Number.isFinite(sample)) return undefined;
    while (this.candidates.length > 0 && this.candidates[this.candidates.length - 1]!.offset >= sample) {
      this.candidates.pop();
    }
    if (this.candidates.length >= MAX_SAMPLES) this.candidates.shift();
    this.candidates.push({ at: nowMs, offset: sample });
    return sample;
  }

  /** The offset in seconds at monotonic `nowMs`: the smallest sample in the window. */
  estimate(nowMs: number): number | undefined {
    while (this.candidates.length > 0 && nowMs - this.candidates[0]!.at > this.windowMs) {
      this.candidates.shift();
    }
    return this.candidates[0]?.offset;
  }
}

/** Local time in nanoseconds since the epoch. */
export function nowNs(): bigint {
  return BigInt(Date.now()) * 1_000_000n;
}
