/**
 * The fetch loop (docs/PROTOCOL.md §2): pulls as many firings as there are
 * free threads, highest band first.
 *
 * - `free = threads − in flight`; nothing is fetched that cannot start now.
 * - A round fetches up to `free` from `high`, then what is still free from
 *   `normal`, then from `low`, each a no-wait pull request with a short
 *   `expires` (fetch.ts).
 * - A band that returned fewer messages than asked is drained: it is not
 *   fetched again until the doorbell rings for it or the poll interval
 *   passes. A band that filled the request is fetched again as soon as a
 *   thread frees up.
 * - Otherwise the loop sleeps until the doorbell, the poll interval, a
 *   thread freeing up (when all were busy) or shutdown.
 * - Doorbells are queued as they ring and read after each round, so one
 *   that rings while a fetch is in flight is not lost: its band is fetched
 *   again before the loop sleeps.
 * - While the worker is fenced it fetches nothing.
 * - Holding pull requests open on drained bands (§2 step 5) is optional and
 *   not done here: the doorbell and the poll cover drained bands.
 */

import type { Msg, NatsConnection, Subscription } from "@nats-io/transport-node";
import type { JetStreamManager } from "@nats-io/jetstream";
import { parseAckSubject } from "./ack.js";
import { ClockOffset, nowNs } from "./clock.js";
import { pulled } from "./delivery.js";
import type { Dispatcher } from "./dispatch.js";
import { fetchBatch } from "./fetch.js";
import type { Fence } from "./fence.js";
import type { Logger } from "./log.js";
import { errorMessage } from "./log.js";
import type { Metrics } from "./metrics.js";
import { BANDS, doorbellBands, type Band, type Names } from "./names.js";
import type { Slots } from "./slots.js";
import { monotonicMs, Signal, sleep } from "./wait.js";

/** What the fetch loop works with. */
export interface PullDeps {
  nc: NatsConnection;
  jsm: JetStreamManager;
  names: Names;
  slots: Slots;
  fence: Fence;
  dispatcher: Dispatcher;
  metrics: Metrics;
  log: Logger;
  pollIntervalMs: number;
  fetchExpiryMs: number;
  inboxPrefix: string | undefined;
  /** Tracks each dispatch, so shutdown can wait for them. */
  track: (task: Promise<void>) => void;
}

/** What one round did, for logs and tests. */
export interface Round {
  /** Messages fetched per band, in {@link BANDS} order. */
  fetched: [number, number, number];
  errors: number;
}

/** Statuses that end a pull request normally: no messages now, or `expires` passed. */
const NORMAL_END = new Set([404, 408]);

/** The fetch loop of one worker. */
export class Puller {
  /** Whether a band may hold messages. */
  private readonly maybeWork: [boolean, boolean, boolean] = [true, true, true];
  /** Bands whose consumer must be looked up again before the next fetch. */
  private readonly lookUp: [boolean, boolean, boolean] = [false, false, false];
  /** Bands named by doorbells since the last round. */
  private rung = new Set<Band>();
  private readonly wake = new Signal();
  private doorbell: Subscription | undefined;
  private readonly clock = new ClockOffset();

  constructor(private readonly d: PullDeps) {}

  /** Subscribes to the group's doorbell. */
  subscribeDoorbell(): void {
    this.doorbell = this.d.nc.subscribe(this.d.names.doorbell, {
      callback: (_err, msg) => {
        if (!msg) return;
        for (const band of doorbellBands(msg.data)) this.rung.add(band);
        this.wake.set();
      },
    });
  }

  /** Fetches and dispatches until `signal` aborts; messages already fetched are dispatched before it returns. */
  async run(signal: AbortSignal): Promise<void> {
    const onStop = () => this.wake.set();
    signal.addEventListener("abort", onStop, { once: true });
    let nextPoll = monotonicMs() + this.d.pollIntervalMs;
    try {
      while (!signal.aborted) {
        if (this.d.fence.isFenced) {
          await Promise.race([this.d.fence.lifted.wait(), sleep(60_000, signal)]);
          this.maybeWork.fill(true);
          continue;
        }
        this.takeDoorbells();
        const round = await this.runOnce();
        const free = this.d.slots.free;
        if (round.errors > 0) {
          this.d.log.debug("fetch round had errors", { errors: round.errors });
        } else if (round.fetched.some((n) => n > 0) && free > 0 && this.maybeWork.includes(true)) {
          continue;
        }
        if (this.rung.size > 0) continue;
        // Sleep until a doorbell, the poll, a freed thread (when all are busy), or the stop.
        this.wake.reset();
        this.d.slots.freed.reset();
        const now = monotonicMs();
        if (now >= nextPoll) {
          nextPoll = now + this.d.pollIntervalMs;
          this.maybeWork.fill(true);
          continue;
        }
        const waits: Promise<unknown>[] = [this.wake.wait(), sleep(nextPoll - now, signal)];
        if (this.d.slots.free === 0) waits.push(this.d.slots.freed.wait());
        await Promise.race(waits);
        if (monotonicMs() >= nextPoll) {
          nextPoll = monotonicMs() + this.d.pollIntervalMs;
          this.maybeWork.fill(true);
        }
      }
    } finally {
      signal.removeEventListener("abort", onStop);
      this.doorbell?.unsubscribe();
      this.doorbell = undefined;
    }
  }

  /** Notes the bands doorbells rang for since the last round. */
  private takeDoorbells(): void {
    for (const band of this.rung) this.maybeWork[BANDS.indexOf(band)] = true;
    this.rung.clear();
  }

  /** One round: fetch up to the free threads, high band first, and dispatch. */
  async runOnce(): Promise<Round> {
    const round: Round = { fetched: [0, 0, 0], errors: 0 };
    for (let i = 0; i < BANDS.length; i++) {
      const band = BANDS[i]!;
      const free = this.d.slots.free;
      if (free <= 0) break;
      if (!this.maybeWork[i]) continue;
      if (this.lookUp[i]) {
        try {
          await this.d.jsm.consumers.info(this.d.names.fireStream, this.d.names.fireConsumer(band));
          this.lookUp[i] = false;
        } catch (error) {
          this.d.metrics.fetchError();
          round.errors += 1;
          this.d.log.warn("cannot open the firing consumer", { band, error: errorMessage(error) });
          continue;
        }
      }
      try {
        const end = await fetchBatch(
          this.d.nc,
          this.d.names.pullSubject(band),
          free,
          this.d.fetchExpiryMs,
          (msg) => {
            round.fetched[i] += 1;
            this.take(msg);
          },
          this.d.inboxPrefix,
        );
        if (end.status !== undefined && !NORMAL_END.has(end.status)) {
          this.d.metrics.fetchError();
          round.errors += 1;
          this.lookUp[i] = true;
          this.d.log.warn("fetching firings failed", { band, status: end.status, description: end.description });
        }
        if (round.fetched[i] < free) this.maybeWork[i] = false;
      } catch (error) {
        this.d.metrics.fetchError();
        round.errors += 1;
        this.lookUp[i] = true;
        this.d.log.warn("fetching firings failed", { band, error: errorMessage(error) });
      }
    }
    return round;
  }

  /** Runs `msg` on a thread of its own. */
  private take(msg: Msg): void {
    const info = parseAckSubject(msg.reply);
    if (info) {
      const estimate = this.clock.observe(monotonicMs(), info.timestampNs, nowNs());
      if (estimate !== undefined) {
        const offset = this.clock.estimate(monotonicMs());
        if (offset !== undefined) this.d.metrics.clockOffset(offset);
      }
    }
    const release = this.d.slots.tryTake();
    if (!release) {
      // An offer took the thread while the fetch was in flight; never hold a message unstarted.
      this.d.log.info("fetched a firing after an offer took its thread; handing it back");
      try {
        if (msg.reply) this.d.nc.publish(msg.reply, "-NAK");
      } catch {
        // Redelivered after the ack wait.
      }
      return;
    }
    this.d.track(this.d.dispatcher.dispatch(pulled(this.d.nc, msg, this.d.log), release));
  }
}
