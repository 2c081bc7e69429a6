// Offers against a real nats-server (docs/PROTOCOL.md §4, "Offers"): the
// firings of broadcast jobs, sent by the scheduler to one worker on core
// NATS, started through the same exchange as a pulled firing, and dropped,
// never held, when they cannot start. The test stands in for the
// scheduler: it offers the firings and answers the start requests.
import { test } from "node:test";
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { connect, headers } from "@nats-io/transport-node";
import { Kvm } from "@nats-io/kv";
import { Worker } from "../../dist/index.js";
import { createTopology, eventually, standInScheduler, startChime } from "../harness.mjs";

const quiet = { debug() {}, info() {}, warn() {}, error() {} };
let instant = 1_800_000_000_000;

/** A firing of a broadcast job: shard `shard` of `shards`. */
function firing(jobId, handler, { shard = 0, shards = 1, payload = {} } = {}) {
  const scheduledMs = (instant += 1000);
  const id = `${jobId}@${scheduledMs}.${shard}#1`;
  const now = Date.now();
  return {
    id,
    body: JSON.stringify(payload),
    headers: {
      "Nats-Msg-Id": id, "Chime-Firing-Id": id, "Chime-Job-Id": jobId, "Chime-Handler": handler,
      "Chime-Scheduled-At": new Date(scheduledMs).toISOString(), "Chime-Due-At": new Date(now).toISOString(),
      "Chime-Attempt": "1", "Chime-Priority": "5", "Chime-Deadline": new Date(now + 60_000).toISOString(),
      "Chime-Timeout-Ms": "60000", "Chime-Shard": String(shard), "Chime-Shards": String(shards),
    },
  };
}

/** Runs `body` with a nats-server holding Chime's topology for group `ts`, a stand-in scheduler and a started worker. */
async function withWorker({ refusal, ...settings }, handlers, body, prefix = "chime") {
  const bare = await startChime({ scheduler: false });
  const nc = await connect({ servers: bare.natsUrl.replace("nats://", "") });
  const worker = new Worker({
    group: "ts", workerId: "w1", threads: 2, subjectPrefix: prefix, pollIntervalMs: 250, heartbeatIntervalMs: 500,
    nats: { url: bare.natsUrl }, metrics: { port: 0 }, logger: quiet, ...settings,
  });
  for (const [name, handler] of Object.entries(handlers)) worker.handle(name, handler);
  try {
    await createTopology(nc, "ts", prefix);
    const scheduler = await standInScheduler(nc, { prefix, refusal });
    await worker.start();
    /** Offers `f` on w1's offer subject, its `Chime-Worker-Id` naming `addressee`. */
    const offer = async (f, addressee = "w1") => {
      const h = headers();
      for (const [k, v] of Object.entries({ ...f.headers, "Chime-Worker-Id": addressee })) h.set(k, v);
      nc.publish(`${prefix}.offer.ts.w1`, f.body, { headers: h });
      await nc.flush();
      return f.id;
    };
    const metric = async (name) => {
      const text = await (await fetch(`http://127.0.0.1:${worker.metricsPort}/metrics`)).text();
      const line = text.split("\n").find((l) => l.startsWith(name));
      return line === undefined ? 0 : Number(line.split(" ").pop());
    };
    await body({ nc, worker, scheduler, offer, metric });
  } finally {
    await worker.shutdown();
    await nc.close();
    await bare.stop();
  }
}

const record = (seen) => (ctx) => {
  seen.push(ctx);
  return `shard ${ctx.shard} of ${ctx.shards}`;
};

test("the heartbeat says the worker takes offers", async () => {
  await withWorker({}, { record: record([]) }, async ({ nc }) => {
    const entry = await (await new Kvm(nc).open("chime-workers")).get("ts.w1");
    assert.equal(entry.json().offers, true);
  });
});

test("an offer addressed to the worker is started, run and reported", async () => {
  const seen = [];
  await withWorker({ pollIntervalMs: 30_000 }, { record: record(seen) }, async ({ scheduler, offer }) => {
    const f = firing("everywhere", "record", { shard: 1, shards: 3, payload: { to: "all" } });
    await offer(f);
    const event = await scheduler.eventOf(f.id);
    assert.deepEqual([event.worker_id, event.outcome, event.output], ["w1", "succeeded", "shard 1 of 3"]);
    assert.equal(scheduler.requests.length, 1);
    const [{ subject, request }] = scheduler.requests;
    assert.equal(subject, "chime.worker.v1.start.ts.w1");
    assert.deepEqual(request, {
      firing_id: f.id, worker_id: "w1", group: "ts", handler: "record",
      payload_sha256: createHash("sha256").update(f.body).digest("hex"),
    });
    assert.deepEqual([seen[0].firingId, seen[0].payload, seen[0].shard, seen[0].shards], [f.id, { to: "all" }, 1, 3]);
  });
});

test("a broadcast to one worker is shard 0 of 1, under the subject prefix", async () => {
  const seen = [];
  await withWorker({}, { record: record(seen) }, async ({ scheduler, offer, metric }) => {
    const f = firing("alone", "record");
    await offer(f);
    const event = await scheduler.eventOf(f.id);
    assert.deepEqual([event.outcome, event.output], ["succeeded", "shard 0 of 1"]);
    assert.deepEqual([seen[0].shard, seen[0].shards], [0, 1]);
    assert.equal(scheduler.requests[0].subject, "acme.worker.v1.start.ts.w1");
    assert.equal(await metric("chime_worker_bad_messages_total"), 0);
  }, "acme");
});

test("an offer for another worker is counted and dropped unstarted", async () => {
  const seen = [];
  await withWorker({}, { record: record(seen) }, async ({ scheduler, offer, metric }) => {
    await offer(firing("misrouted", "record", { shards: 2 }), "w2");
    await eventually("counted as a bad message", async () => (await metric("chime_worker_bad_messages_total")) === 1, 10_000, 20);
    assert.deepEqual([scheduler.requests, seen], [[], []]);
    // The worker still takes the offers that are its own.
    const mine = await offer(firing("routed", "record", { shard: 1, shards: 2 }));
    assert.equal((await scheduler.eventOf(mine)).outcome, "succeeded");
    assert.deepEqual(scheduler.requests.map((r) => r.request.firing_id), [mine]);
  });
});

test("an offer while every thread is busy is dropped unstarted", async () => {
  let release;
  const released = new Promise((resolve) => (release = resolve));
  const seen = [];
  const handlers = { block: () => released.then(() => "released"), record: record(seen) };
  await withWorker({ threads: 1 }, handlers, async ({ worker, scheduler, offer, metric }) => {
    const busy = await offer(firing("busy", "block"));
    await eventually("the only thread taken", () => worker.inFlight === 1, 10_000, 20);
    const dropped = firing("dropped", "record");
    await offer(dropped);
    // Offers are handled in order: once this misaddressed one is counted, the one before it was handled.
    await offer(firing("probe", "record"), "w2");
    await eventually("the probe counted", async () => (await metric("chime_worker_bad_messages_total")) === 1, 10_000, 20);
    release();
    assert.equal((await scheduler.eventOf(busy)).outcome, "succeeded");
    assert.deepEqual(scheduler.requests.map((r) => r.request.firing_id), [busy]);
    assert.deepEqual(seen, []);
    await eventually("the thread back", () => worker.inFlight === 0, 10_000, 20);
    // The scheduler offers the dropped firing again; now it runs.
    await offer(dropped);
    assert.equal((await scheduler.eventOf(dropped.id)).outcome, "succeeded");
  });
});

test("a refused offer is not run and frees its thread", async () => {
  const seen = [];
  await withWorker({ threads: 1, refusal: "wrong_worker" }, { record: record(seen) }, async ({ worker, scheduler, offer, metric }) => {
    await offer(firing("refused", "record"));
    await eventually("refused", async () => (await metric('chime_worker_start_refusals_total{reason="wrong_worker"')) === 1, 10_000, 20);
    await eventually("its thread back", () => worker.inFlight === 0, 10_000, 20);
    assert.equal(scheduler.requests.length, 1);
    assert.deepEqual(seen, []);
  });
});
