// The small pieces of the wire protocol: ack subjects, NAK bodies, start
// replies, the rejected firings' backoff, doorbell bodies, consumer names
// and the firings a heartbeat lists.
import { test } from "node:test";
import assert from "node:assert/strict";
import { nakWithDelay, parseAckSubject } from "../../dist/ack.js";
import { decide, payloadSha256, rejectedDelayMs } from "../../dist/start.js";
import { doorbellBands, fireConsumerName, Names } from "../../dist/names.js";
import { Running, MAX_LISTED_RUNNING, RECENT_FOR_MS } from "../../dist/running.js";
import { deadlineOf } from "../../dist/dispatch.js";
import { readCancel } from "../../dist/cancel.js";
import { ClockOffset } from "../../dist/clock.js";

const bytes = (text) => new TextEncoder().encode(text);

test("ack subjects are read in both forms", () => {
  assert.deepEqual(parseAckSubject("$JS.ACK.CHIME_FIRE.fire_g_a_high.3.41.17.1774661400000000000.5"), {
    stream: "CHIME_FIRE", consumer: "fire_g_a_high", delivered: 3, streamSeq: 41, consumerSeq: 17,
    timestampNs: 1774661400000000000n, pending: 5,
  });
  const v2 = parseAckSubject("$JS.ACK._.ACCHASH.CHIME_FIRE.fire_g_a_high.1.2.3.1774661400000000000.0.tok");
  assert.equal(v2.delivered, 1);
  assert.equal(v2.consumer, "fire_g_a_high");
  for (const bad of [undefined, "", "_INBOX.x", "$JS.ACK.S.C.1.2.3", "$JS.ACK.S.C.x.2.3.4.5", "$JS.API.S.C.1.2.3.4.5"]) {
    assert.equal(parseAckSubject(bad), undefined, String(bad));
  }
});

test("naks always carry a delay in nanoseconds", () => {
  assert.equal(nakWithDelay(1000), '-NAK {"delay": 1000000000}');
  assert.equal(nakWithDelay(60_000), '-NAK {"delay": 60000000000}');
});

test("start replies map to decisions", () => {
  const accepted = decide(bytes('{"accepted": true, "deadline": "2026-03-28T01:30:00.000Z"}'));
  assert.equal(accepted.kind, "accepted");
  assert.equal(accepted.deadline.toISOString(), "2026-03-28T01:30:00.000Z");
  assert.deepEqual(decide(bytes('{"accepted": true}')), { kind: "accepted", deadline: undefined });
  assert.deepEqual(decide(bytes('{"accepted": true, "deadline": "soon"}')), { kind: "accepted", deadline: undefined });
  assert.deepEqual(decide(bytes('{"accepted": false, "refusal": "already_started"}')), { kind: "refused", refusal: "already_started" });
  assert.deepEqual(decide(bytes('{"accepted": false}')), { kind: "refused", refusal: undefined });
  const unavailable = decide(bytes('{"error": {"code": "unavailable", "message": "db down"}}'));
  assert.equal(unavailable.kind, "unavailable");
  assert.match(unavailable.error, /db down/);
  const rejected = decide(bytes('{"error": {"code": "internal", "message": "corrupt row"}}'));
  assert.equal(rejected.kind, "rejected");
  assert.match(rejected.error, /corrupt row/);
  for (const garbage of ["garbage", "[]", "null", "{}", '{"accepted": "yes"}']) {
    assert.equal(decide(bytes(garbage)).kind, "unavailable", garbage);
  }
});

test("rejected firings stay away longer each time", () => {
  assert.equal(rejectedDelayMs(1000, 1), 1000);
  assert.equal(rejectedDelayMs(1000, 3), 4000);
  assert.equal(rejectedDelayMs(1000, 40), 60_000);
  assert.equal(rejectedDelayMs(1000, Number.MAX_SAFE_INTEGER), 60_000);
  assert.equal(rejectedDelayMs(1000, 0), 1000);
});

test("the payload hash is of the body exactly as received", () => {
  assert.equal(payloadSha256(bytes("test")), "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08");
});

test("doorbells name bands; anything else means all", () => {
  assert.deepEqual(doorbellBands(bytes("high,low")), ["high", "low"]);
  assert.deepEqual(doorbellBands(bytes(" normal ")), ["normal"]);
  for (const body of [bytes(""), bytes("urgent"), bytes("high,"), new Uint8Array([0xff, 0xfe])]) {
    assert.deepEqual(doorbellBands(body), ["high", "normal", "low"]);
  }
});

test("names follow the subject prefix and dotted groups", () => {
  assert.equal(fireConsumerName("reports", "high"), "fire_g_reports_high");
  assert.equal(fireConsumerName("eu.reports", "low"), "fire_h_65752e7265706f727473_low");
  const n = new Names("staging-chime", "eu.reports", "w-1");
  assert.equal(n.fireStream, "STAGING_CHIME_FIRE");
  assert.equal(n.eventsStream, "STAGING_CHIME_EVENTS");
  assert.equal(n.workersBucket, "staging-chime-workers");
  assert.equal(n.start, "staging-chime.worker.v1.start.eu.reports.w-1");
  assert.equal(n.finished, "staging-chime.events.finished.eu.reports.w-1");
  assert.equal(n.cancel, "staging-chime.cancel.w-1");
  assert.equal(n.offer, "staging-chime.offer.eu.reports.w-1");
  assert.equal(n.doorbell, "staging-chime.ready.eu.reports");
  assert.equal(n.heartbeatKey, "eu.reports.w-1");
  assert.equal(n.pullSubject("normal"), "$JS.API.CONSUMER.MSG.NEXT.STAGING_CHIME_FIRE.fire_h_65752e7265706f727473_normal");
});

test("heartbeats list starts until their report is acknowledged", () => {
  const running = new Running();
  assert.ok(running.claim("job@1#1"));
  assert.deepEqual(running.listed(), ["job@1#1"], "asked to start");
  running.claim("job@2#1");
  running.release("job@2#1");
  assert.deepEqual(running.listed(), ["job@1#1"], "refused: not listed");
  running.accept("job@1#1");
  running.finish("job@1#1", 0);
  assert.deepEqual(running.listed(), ["job@1#1"], "report unsent");
  running.reported("job@1#1");
  assert.deepEqual(running.listed(), []);
  for (let i = 0; i <= MAX_LISTED_RUNNING; i++) running.accept(`job@${i}#9`);
  assert.equal(running.listed(), undefined, "past the bound the list is left out");
});

test("an attempt is claimed once until long after it finished", () => {
  const running = new Running();
  const control = running.claim("job@1#1");
  assert.equal(running.claim("job@1#1"), undefined, "running");
  assert.ok(running.cancel("job@1#1", "replaced"));
  assert.ok(control.signal.aborted);
  assert.equal(control.stopped.reason, "replaced");
  control.cancel("second reason");
  assert.equal(control.stopped.reason, "replaced", "the first reason stays");
  running.finish("job@1#1", 0);
  assert.equal(running.claim("job@1#1"), undefined, "just finished");
  assert.equal(running.cancel("job@1#1", "late"), false);
  running.finish("job@2#1", RECENT_FOR_MS);
  assert.ok(running.claim("job@1#1"), "forgotten after ten minutes");
});

test("claims after a shutdown or during a fence come back stopped, never cancelled", () => {
  const running = new Running();
  const first = running.claim("job@1#1");
  assert.equal(running.fence("fenced: no heartbeat for 13.0s"), 1);
  assert.deepEqual(first.stopped, { outcome: "failed", reason: "fenced: no heartbeat for 13.0s", interrupted: "fenced" });
  assert.equal(first.signal.reason.kind, "fenced");
  const during = running.claim("job@2#1");
  assert.equal(during.stopped.interrupted, "fenced");
  running.release("job@2#1");
  running.unfence();
  assert.equal(running.claim("job@3#1").stopped, undefined);
  assert.equal(running.interruptAll("worker shutting down"), 2);
  const late = running.claim("job@4#1");
  assert.deepEqual(late.stopped, { outcome: "failed", reason: "worker shutting down", interrupted: "shutdown" });
});

test("the reply deadline wins, then the timeout, then the header", () => {
  const now = new Date("2026-01-01T00:00:00Z");
  const message = { deadline: new Date("2026-01-01T01:00:00Z"), timeoutMs: 60_000 };
  const reply = new Date("2026-01-01T00:00:05Z");
  assert.equal(deadlineOf(message, reply, now), reply);
  assert.equal(deadlineOf(message, undefined, now).toISOString(), "2026-01-01T00:01:00.000Z");
  assert.equal(deadlineOf({ ...message, timeoutMs: undefined }, undefined, now), message.deadline);
  assert.equal(deadlineOf({ ...message, timeoutMs: 9e18 }, undefined, now), message.deadline, "an absurd timeout falls back");
});

test("cancel requests are read strictly", () => {
  assert.deepEqual(readCancel(bytes('{"firing_id": "j@1#1", "reason": "replaced"}')), { firingId: "j@1#1", reason: "replaced" });
  for (const bad of ["", "null", "[]", '{"firing_id": 5, "reason": "x"}', '{"firing_id": "j@1#1"}', "{"]) {
    assert.equal(readCancel(bytes(bad)), undefined, bad);
  }
  assert.equal(readCancel(new Uint8Array(70_000).fill(0x20)), undefined, "too long");
});

test("the clock offset is the smallest recent sample", () => {
  const S = 1_000_000_000n;
  const clock = new ClockOffset(60_000);
  assert.equal(clock.estimate(0), undefined);
  const server = 1_800_000_000n * S;
  clock.observe(0, server, server + 2n * S + 30_000_000n);
  clock.observe(0, server, server + 12n * S);
  assert.equal(clock.estimate(0), 2.03);
  clock.observe(1000, server + S, server + 3n * S + 5_000_000n);
  assert.equal(clock.estimate(1000), 2.005);
  assert.equal(clock.estimate(61_001), undefined, "old samples leave the window");
  assert.equal(clock.observe(0, server, server - 700_000_000n), -0.7, "a clock behind gives a negative offset");
});
