/**
 * Offers: the firings of broadcast jobs, addressed to this worker
 * (docs/PROTOCOL.md §4, "Offers"). The scheduler sends each on
 * `chime.offer.<group>.<worker id>`, a core NATS message with the headers
 * and body of a firing message plus `Chime-Worker-Id`, and offers it again
 * every second until it starts. So an offer is checked first (a bad one,
 * or one for another worker, is counted, logged and dropped); then one
 * that cannot start now (no free thread, fenced, draining) is dropped, not
 * held; the rest take a thread and the same path as a pulled message, with
 * nothing to ack or NAK.
 */

import type { Msg } from "@nats-io/transport-node";
import { offered } from "./delivery.js";
import type { Dispatcher } from "./dispatch.js";
import type { Fence } from "./fence.js";
import type { Logger } from "./log.js";
import type { Slots } from "./slots.js";
import type { WorkerStatus } from "./status.js";

/** What the offer listener works with. */
export interface OfferDeps {
  workerId: string;
  dispatcher: Dispatcher;
  slots: Slots;
  fence: Fence;
  status: WorkerStatus;
  log: Logger;
  /** Tracks each dispatch, so shutdown can wait for them. */
  track: (task: Promise<void>) => void;
}

/** Takes the offers of one worker. */
export class OfferListener {
  constructor(private readonly d: OfferDeps) {}

  /** Why an offer cannot start now; `undefined` when it can. */
  private cannotStart(): string | undefined {
    if (this.d.status.isDraining) return "draining";
    if (this.d.fence.isFenced) return "fenced";
    return undefined;
  }

  onOffer(msg: Msg): void {
    const delivery = offered(msg, this.d.workerId);
    const parsed = this.d.dispatcher.check(delivery);
    if (!parsed) return;
    const why = this.cannotStart();
    const release = why === undefined ? this.d.slots.tryTake() : undefined;
    if (!release) {
      this.d.log.info("dropping an offer; the scheduler offers it again", {
        firing_id: parsed.firing.firingId,
        reason: why ?? "no free thread",
      });
      return;
    }
    this.d.track(this.d.dispatcher.take(delivery, parsed, release));
  }
}
