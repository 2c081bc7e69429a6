// Faults of the infrastructure: with no scheduler every delivery is handed
// back with a delay and nothing is terminated; a worker cut off from NATS
// for its whole lease fences itself (its runs stop, reported interrupted)
// and takes firings again once a heartbeat is written.
import { test } from "node:test";
import assert from "node:assert/strict";
import { connect, headers } from "@nats-io/transport-node";
import { jetstreamManager } from "@nats-io/jetstream";
import { Worker } from "../../dist/index.js";
import { startChime, eventually, inMs } from "../harness.mjs";

const quiet = { debug() {}, info() {}, warn() {}, error() {} };
const metric = async (worker, name) => {
  const body = await (await fetch(`http://127.0.0.1:${worker.metricsPort}/metrics`)).text();
  const line = body.split("\n").find((l) => l.startsWith(name));
  return line === undefined ? 0 : Number(line.split(" ").pop());
};

test("with no scheduler every delivery is handed back after a delay, never terminated", async () => {
  const chime = await startChime();
  const nc = await connect({ servers: chime.natsUrl.replace("nats://", "") });
  const worker = new Worker({ group: "outage", threads: 2, nats: { url: chime.natsUrl }, metrics: { port: 0 }, logger: quiet });
  worker.handle("never", () => {
    throw new Error("must not run without an accepted start");
  });
  try {
    await worker.start();
    await chime.scheduler.stop();
    const now = new Date();
    const h = headers();
    const id = `orphan@${now.getTime()}#1`;
    for (const [k, v] of Object.entries({
      "Nats-Msg-Id": id, "Chime-Firing-Id": id, "Chime-Job-Id": "orphan", "Chime-Handler": "never",
      "Chime-Scheduled-At": now.toISOString(), "Chime-Attempt": "1", "Chime-Priority": "5",
      "Chime-Deadline": new Date(now.getTime() + 60_000).toISOString(),
    })) h.set(k, v);
    nc.publish("chime.fire.outage.normal", "{}", { headers: h });
    nc.publish("chime.ready.outage", "normal");
    await nc.flush();
    await new Promise((r) => setTimeout(r, 3500));
    const refused = await metric(worker, 'chime_worker_start_refusals_total{reason="scheduler_unavailable",group="outage"}');
    assert.ok(refused >= 2 && refused <= 5, `asked ${refused} times in 3.5 s: redelivered after a 1 s delay, not at once`);
    const jsm = await jetstreamManager(nc);
    const stream = await jsm.streams.info("CHIME_FIRE");
    assert.equal(stream.state.messages, 1, "the firing is still in the stream");
    assert.equal(await metric(worker, 'chime_worker_firings_total'), 0, "nothing ran");
  } finally {
    await worker.shutdown();
    await nc.close();
    await chime.stop();
  }
});

test("a worker cut off from NATS for its lease fences itself, then takes firings again", { timeout: 120_000 }, async () => {
  const chime = await startChime();
  const stops = [];
  const worker = new Worker({ group: "fence", threads: 2, nats: { url: chime.natsUrl }, metrics: { port: 0 }, logger: quiet });
  worker
    .handle("hold", async (ctx) => {
      await new Promise((resolve) => ctx.signal.addEventListener("abort", resolve, { once: true }));
      stops.push(ctx.signal.reason.kind);
    })
    .handle("ok", () => "fine");
  try {
    await worker.start();
    chime.putJob({ id: "hold", group: "fence", schedule: { at: inMs(1200) }, handler: "hold" });
    await eventually("hold executing", () => chime.history("hold").find((f) => f.state === "executing"));
    // Freeze NATS past the 13 s lease (15 s key TTL minus the 2 s margin).
    chime.nats.child.kill("SIGSTOP");
    const frozenAt = Date.now();
    await eventually("the fence", () => stops.length > 0, 20_000);
    const fencedAfter = Date.now() - frozenAt;
    assert.deepEqual(stops, ["fenced"]);
    // The lease runs from the send of the last acknowledged beat, up to one 2 s interval before the freeze.
    assert.ok(fencedAfter >= 10_500 && fencedAfter < 15_500, `fenced after ${fencedAfter} ms`);
    assert.match(worker.notReady(), /^fenced/);
    chime.nats.child.kill("SIGCONT");
    await eventually("the fence lifted", () => worker.notReady() === undefined, 20_000);
    assert.equal(await metric(worker, "chime_worker_fenced_total"), 1);
    const hold = await eventually("the fenced attempt ended", () => chime.history("hold").find((f) => f.attempt === 1 && f.state !== "executing"), 30_000);
    assert.notEqual(hold.state, "succeeded");
    chime.putJob({ id: "after-fence", group: "fence", schedule: { at: inMs(1200) }, handler: "ok" });
    const ok = await eventually("after-fence succeeded", () => chime.history("after-fence").find((f) => f.state === "succeeded"), 30_000);
    assert.equal(ok.output, "fine");
  } finally {
    chime.nats.child.kill("SIGCONT");
    await worker.shutdown();
    await chime.stop();
  }
});
