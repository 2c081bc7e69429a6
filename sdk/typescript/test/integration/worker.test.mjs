// The SDK's worker against a real nats-server and a real scheduler: jobs run
// end to end, heartbeats carry what the protocol says, cancels stop runs,
// a shutdown drains and reports what outlived its grace as interrupted, and
// the metrics endpoint serves the Rust worker's metric names.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { createConnection } from "node:net";
import { connect } from "@nats-io/transport-node";
import { Kvm } from "@nats-io/kv";
import { jetstreamManager } from "@nats-io/jetstream";
import { Worker, HandlerError } from "../../dist/index.js";
import { startChime, eventually, inMs } from "../harness.mjs";

let chime;
let nc;
before(async () => {
  chime = await startChime();
  nc = await connect({ servers: chime.natsUrl.replace("nats://", "") });
});
after(async () => {
  await nc?.close();
  await chime?.stop();
});

const quiet = { debug() {}, info() {}, warn() {}, error() {} };
const final = (states) => (f) => states.includes(f.state);

test("a worker runs its handlers' firings to success and failure, with output and errors", async () => {
  const worker = new Worker({ group: "sdk-e2e", workerId: "sdk-e2e-1", threads: 2, nats: { url: chime.natsUrl }, logger: quiet });
  worker
    .handle("greet", (ctx) => `hello ${ctx.payload.name} from ${ctx.workerId}, attempt ${ctx.attempt}`)
    .handle("explode", () => {
      throw new HandlerError("it blew up", { output: "last words" });
    })
    .handle("shard", (ctx) => `${ctx.shard}/${ctx.shards}`);
  await worker.start();
  try {
    const at = inMs(1500);
    chime.putJob({ id: "greet", group: "sdk-e2e", schedule: { at }, handler: "greet", payload: { name: "Ada" } });
    chime.putJob({ id: "explode", group: "sdk-e2e", schedule: { at }, handler: "explode" });
    chime.putJob({ id: "sharded", group: "sdk-e2e", schedule: { at }, handler: "shard", shards: 3 });
    chime.putJob({ id: "unknown", group: "sdk-e2e", schedule: { at }, handler: "not-here" });
    const greet = await eventually("greet finished", () => chime.history("greet").find(final(["succeeded", "failed"])));
    assert.equal(greet.state, "succeeded");
    assert.equal(greet.output, "hello Ada from sdk-e2e-1, attempt 1");
    assert.equal(greet.worker, "sdk-e2e-1");
    const explode = await eventually("explode finished", () => chime.history("explode").find(final(["succeeded", "failed"])));
    assert.deepEqual([explode.state, explode.error, explode.output], ["failed", "it blew up", "last words"]);
    const unknown = await eventually("unknown finished", () => chime.history("unknown").find(final(["succeeded", "failed"])));
    assert.equal(unknown.error, "no handler named not-here on this worker");
    const shards = await eventually("3 shards finished", () => {
      const done = chime.history("sharded").filter(final(["succeeded"]));
      return done.length === 3 && done;
    });
    assert.deepEqual(shards.map((f) => f.output).sort(), ["0/3", "1/3", "2/3"]);
  } finally {
    await worker.shutdown();
  }
});

test("heartbeats carry the worker's info and its runs; cancels stop a run; shutdown interrupts what outlives the grace", async () => {
  const seen = [];
  const worker = new Worker({
    group: "sdk-life",
    workerId: "sdk-life-1",
    threads: 3,
    drainGraceMs: 500,
    nats: { url: chime.natsUrl },
    logger: quiet,
  });
  worker.handle("wait", async (ctx) => {
    await new Promise((resolve) => ctx.signal.addEventListener("abort", resolve, { once: true }));
    seen.push([ctx.jobId, ctx.signal.reason.kind]);
    return "stopped";
  });
  await worker.start();
  const kv = await new Kvm(nc).open("chime-workers");
  const beat = async () => {
    const entry = await kv.get("sdk-life.sdk-life-1");
    return entry && entry.operation === "PUT" ? entry.json() : undefined;
  };
  const first = await beat();
  assert.equal(first.id, "sdk-life-1");
  assert.equal(first.group, "sdk-life");
  assert.equal(first.threads, 3);
  assert.equal(first.in_flight, 0);
  assert.deepEqual(first.running, []);
  assert.deepEqual(first.handlers, ["wait"]);
  assert.match(first.version, /^0\.1\.0 \(typescript\)$/);
  assert.match(first.started_at, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);

  const at = inMs(1500);
  chime.putJob({ id: "to-cancel", group: "sdk-life", schedule: { at }, handler: "wait" });
  chime.putJob({ id: "to-interrupt", group: "sdk-life", schedule: { at }, handler: "wait" });
  const toCancel = await eventually("to-cancel executing", () => chime.history("to-cancel").find((f) => f.state === "executing"));
  const toInterrupt = await eventually("to-interrupt executing", () => chime.history("to-interrupt").find((f) => f.state === "executing"));
  const listed = await eventually("both runs listed in a heartbeat", async () => {
    const info = await beat();
    return info?.running?.length === 2 && info;
  });
  assert.deepEqual(listed.running, [toCancel.id, toInterrupt.id].sort());
  assert.equal(listed.in_flight, 2);

  chime.chimectl(["cancel", toCancel.id]);
  const cancelled = await eventually("cancelled", () => chime.history("to-cancel").find((f) => f.state === "cancelled"));
  assert.equal(cancelled.output, "stopped");
  assert.ok(cancelled.error, "the cancel's reason is the error");

  const report = await worker.shutdown();
  assert.deepEqual(report, { drained: false, interrupted: 1, unsentEvents: 0 });
  const interrupted = await eventually("interrupted attempt recorded", () =>
    chime.history("to-interrupt").find((f) => f.id === toInterrupt.id && f.state !== "executing"),
  );
  assert.equal(interrupted.state, "failed");
  assert.match(interrupted.error, /worker shutting down/);
  assert.deepEqual(seen.sort(), [["to-cancel", "cancelled"], ["to-interrupt", "shutdown"]]);
  assert.equal(await beat(), undefined, "the heartbeat key is deleted");
});

test("the metrics endpoint serves the reference names; readiness follows the worker", async () => {
  const worker = new Worker({ group: "sdk-metrics", threads: 2, nats: { url: chime.natsUrl }, metrics: { port: 0 }, logger: quiet });
  worker.handle("ok", () => "fine");
  await worker.start();
  try {
    const port = worker.metricsPort;
    assert.ok(port > 0);
    const get = async (path) => {
      const res = await fetch(`http://127.0.0.1:${port}${path}`);
      return [res.status, await res.text()];
    };
    assert.deepEqual(await get("/healthz"), [200, "ok\n"]);
    assert.deepEqual(await get("/readyz"), [200, "ready\n"]);
    chime.putJob({ id: "metrics-ok", group: "sdk-metrics", schedule: { at: inMs(1200) }, handler: "ok" });
    await eventually("metrics-ok succeeded", () => chime.history("metrics-ok").find((f) => f.state === "succeeded"));
    const text = await eventually("the run counted", async () => {
      const [, body] = await get("/metrics");
      return body.includes('chime_worker_firings_total{handler="ok",outcome="succeeded",group="sdk-metrics"} 1') && body;
    });
    for (const name of [
      'chime_worker_in_flight{group="sdk-metrics"} 0',
      'chime_worker_free_threads{group="sdk-metrics"} 2',
      'chime_worker_threads{group="sdk-metrics"} 2',
      "chime_worker_start_lateness_seconds_count",
      "chime_worker_start_decision_seconds_count",
      'chime_worker_fetch_errors_total{group="sdk-metrics"} 0',
      'chime_worker_bad_messages_total{group="sdk-metrics"} 0',
      'chime_worker_report_retries_total{group="sdk-metrics"} 0',
      'chime_worker_fenced_total{group="sdk-metrics"} 0',
      'chime_clock_offset_seconds{group="sdk-metrics"}',
    ]) {
      assert.ok(text.includes(name), `${name} missing from\n${text}`);
    }
    assert.match(text, /chime_worker_run_duration_seconds_count\{[^}]*handler="ok"[^}]*\} 1\n/);
    assert.match(text, /chime_worker_start_refusals_total/);
    const stopping = worker.shutdown();
    assert.equal(worker.notReady(), "draining: shutting down");
    await stopping;
  } finally {
    await worker.shutdown();
  }
});

test("a worker started before any scheduler waits, heartbeating, and starts once the objects exist", async () => {
  const bare = await startChime({ scheduler: false });
  try {
    const worker = new Worker({ group: "early", nats: { url: bare.natsUrl }, logger: quiet });
    worker.handle("x", () => "y");
    const started = worker.start();
    await new Promise((r) => setTimeout(r, 500));
    assert.match(worker.notReady(), /^starting: waiting for a scheduler to create bucket chime-workers$/);
    const report = await worker.shutdown();
    assert.deepEqual(report, { drained: true, interrupted: 0, unsentEvents: 0 });
    await assert.rejects(started, /stopped while starting/);
  } finally {
    await bare.stop();
  }
});

test("messages that are not firings are terminated and counted; the worker keeps running firings", async () => {
  const worker = new Worker({ group: "sdk-hostile", threads: 2, nats: { url: chime.natsUrl }, metrics: { port: 0 }, logger: quiet });
  worker.handle("ok", () => "fine");
  await worker.start();
  try {
    const jsm = await jetstreamManager(nc);
    const { headers } = await import("@nats-io/transport-node");
    const h = headers();
    h.set("Chime-Firing-Id", "forged@1#1");
    nc.publish("chime.fire.sdk-hostile.normal", "{}"); // no headers
    nc.publish("chime.fire.sdk-hostile.high", "not json", { headers: h }); // missing headers, bad body
    await nc.flush();
    // A header block no client would write, straight on the wire.
    const raw = createConnection(Number(chime.natsUrl.split(":").pop()), "127.0.0.1");
    raw.on("data", () => {});
    const block = Buffer.from("GARBAGE\r\nno colon here\r\n\r\n", "latin1");
    raw.write('CONNECT {"verbose":false,"headers":true,"protocol":1}\r\n');
    raw.write(`HPUB chime.fire.sdk-hostile.low ${block.length} ${block.length + 2}\r\n`);
    raw.write(Buffer.concat([block, Buffer.from("{}\r\nPING\r\n")]));
    const [, metrics] = await eventually("three bad messages counted", async () => {
      const res = await fetch(`http://127.0.0.1:${worker.metricsPort}/metrics`);
      const body = await res.text();
      return body.includes('chime_worker_bad_messages_total{group="sdk-hostile"} 3') && [res.status, body];
    });
    raw.destroy();
    assert.ok(metrics);
    await eventually("the work queue emptied", async () => {
      const info = await jsm.consumers.info("CHIME_FIRE", "fire_g_sdk-hostile_normal");
      const high = await jsm.consumers.info("CHIME_FIRE", "fire_g_sdk-hostile_high");
      const low = await jsm.consumers.info("CHIME_FIRE", "fire_g_sdk-hostile_low");
      return [info, high, low].every((c) => c.num_ack_pending === 0 && c.num_pending === 0);
    });
    chime.putJob({ id: "after-garbage", group: "sdk-hostile", schedule: { at: inMs(1200) }, handler: "ok" });
    const ok = await eventually("after-garbage succeeded", () => chime.history("after-garbage").find((f) => f.state === "succeeded"));
    assert.equal(ok.output, "fine");
  } finally {
    await worker.shutdown();
  }
});

test("a second delivery of an attempt the worker runs is acked and not run again", async () => {
  let runs = 0;
  const worker = new Worker({ group: "sdk-dup", threads: 2, nats: { url: chime.natsUrl }, metrics: { port: 0 }, logger: quiet });
  worker.handle("wait", async (ctx) => {
    runs += 1;
    await new Promise((resolve) => ctx.signal.addEventListener("abort", resolve, { once: true }));
  });
  await worker.start();
  try {
    chime.putJob({ id: "dup", group: "sdk-dup", schedule: { at: inMs(1200) }, handler: "wait" });
    const running = await eventually("dup executing", () => chime.history("dup").find((f) => f.state === "executing"));
    // The same attempt again, as JetStream delivers it after a lost ack.
    const { headers } = await import("@nats-io/transport-node");
    const h = headers();
    for (const [k, v] of Object.entries({
      "Nats-Msg-Id": `${running.id}~copy`, "Chime-Firing-Id": running.id, "Chime-Job-Id": "dup", "Chime-Handler": "wait",
      "Chime-Scheduled-At": running.scheduled_at, "Chime-Attempt": "1", "Chime-Priority": "5",
      "Chime-Deadline": new Date(Date.now() + 3_600_000).toISOString(),
    })) h.set(k, v);
    nc.publish("chime.fire.sdk-dup.normal", "null", { headers: h });
    nc.publish("chime.ready.sdk-dup", "normal");
    await nc.flush();
    await eventually("the copy dropped", async () => {
      const body = await (await fetch(`http://127.0.0.1:${worker.metricsPort}/metrics`)).text();
      return body.includes('chime_worker_start_refusals_total{reason="duplicate_delivery",group="sdk-dup"} 1');
    });
    const jsm = await jetstreamManager(nc);
    const consumer = await jsm.consumers.info("CHIME_FIRE", "fire_g_sdk-dup_normal");
    assert.equal(consumer.num_ack_pending + consumer.num_pending, 0, "the copy was acked");
    assert.equal(runs, 1);
    chime.chimectl(["cancel", running.id]);
    await eventually("dup cancelled", () => chime.history("dup").find((f) => f.state === "cancelled"));
  } finally {
    await worker.shutdown();
  }
});
