// Reading firing messages: every header checked against the firing id,
// shards present exactly when the id names one, the body strict JSON, the
// traceparent kept only when well formed; anything else is a bad message
// whose error names the header.
import { test } from "node:test";
import assert from "node:assert/strict";
import { BadMessage, checkAddressee, parseFiring } from "../../dist/message.js";
import { parseFiringId } from "../../dist/firing-id.js";

const TRACE = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

function good(overrides = {}) {
  const h = {
    "Chime-Firing-Id": "job-1@1774661400000#2",
    "Chime-Job-Id": "job-1",
    "Chime-Handler": "echo",
    "Chime-Scheduled-At": "2026-03-28T01:30:00.000Z",
    "Chime-Due-At": "2026-03-28T01:30:05.000Z",
    "Chime-Attempt": "2",
    "Chime-Priority": "5",
    "Chime-Deadline": "2026-03-28T02:30:05.000Z",
    "Chime-Timeout-Ms": "3600000",
    traceparent: TRACE,
    ...overrides,
  };
  return (name) => h[name];
}
const body = (text) => new TextEncoder().encode(text);

test("a complete message parses", () => {
  const m = parseFiring(good(), body('{"x": 1}'));
  assert.equal(m.timeoutMs, 3_600_000);
  assert.equal(m.firing.firingId, "job-1@1774661400000#2");
  assert.equal(m.firing.handler, "echo");
  assert.equal(m.firing.attempt, 2);
  assert.equal(m.firing.priority, 5);
  assert.deepEqual(m.firing.payload, { x: 1 });
  assert.ok(m.firing.dueAt > m.firing.scheduledAt);
  assert.equal(m.firing.shard, undefined);
  assert.equal(m.firing.traceparent, TRACE);
});

test("optional headers and empty bodies have defaults", () => {
  const m = parseFiring(good({ "Chime-Due-At": "", "Chime-Timeout-Ms": undefined, traceparent: undefined }), body("  \n"));
  assert.equal(m.timeoutMs, undefined);
  assert.equal(m.firing.dueAt.getTime(), m.firing.scheduledAt.getTime());
  assert.equal(m.firing.payload, null);
  assert.equal(m.firing.traceparent, undefined);
});

test("a malformed traceparent is treated as absent", () => {
  for (const bad of [
    "garbage",
    "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
    "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
    "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
    "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
    "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
    "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
  ]) {
    assert.equal(parseFiring(good({ traceparent: bad }), body("")).firing.traceparent, undefined, bad);
  }
  const later = "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-more";
  assert.equal(
    parseFiring(good({ traceparent: later }), body("")).firing.traceparent,
    "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
    "a later version keeps its first four fields",
  );
});

test("a shard is read and checked against its id", () => {
  const sharded = (o = {}) => good({ "Chime-Firing-Id": "job-1@1774661400000.3#2", "Chime-Shard": "3", "Chime-Shards": "8", ...o });
  const m = parseFiring(sharded(), body("")).firing;
  assert.deepEqual([m.shard, m.shards], [3, 8]);
  for (const [name, value, header] of [
    ["Chime-Shard", "4", "Chime-Shard"],
    ["Chime-Shard", "x", "Chime-Shard"],
    ["Chime-Shards", "3", "Chime-Shard"],
    ["Chime-Shards", "1", "Chime-Shard"],
    ["Chime-Shards", "0", "Chime-Shards"],
    ["Chime-Shards", "-8", "Chime-Shards"],
  ]) {
    assert.throws(() => parseFiring(sharded({ [name]: value }), body("")), (e) => e instanceof BadMessage && e.message.includes(`header ${header} is invalid`), `${name}=${value}`);
  }
  assert.throws(() => parseFiring(sharded({ "Chime-Shards": "" }), body("")), /header Chime-Shards is missing/);
  assert.throws(() => parseFiring(good({ "Chime-Shard": "0", "Chime-Shards": "2" }), body("")), /header Chime-Shard is invalid: .* is not a shard/);
});

test("a broadcast to one worker is shard 0 of 1", () => {
  const m = parseFiring(good({ "Chime-Firing-Id": "job-1@1774661400000.0#2", "Chime-Shard": "0", "Chime-Shards": "1" }), body("")).firing;
  assert.deepEqual([m.shard, m.shards], [0, 1]);
});

test("an offer must name this worker", () => {
  checkAddressee(good({ "Chime-Worker-Id": "w1" }), "w1");
  assert.throws(() => checkAddressee(good(), "w1"), (e) => e instanceof BadMessage && /header Chime-Worker-Id is missing/.test(e.message));
  assert.throws(() => checkAddressee(good({ "Chime-Worker-Id": "w2" }), "w1"), (e) => e instanceof BadMessage && /header Chime-Worker-Id is invalid/.test(e.message));
});

test("garbage is rejected with the header named", () => {
  assert.throws(() => parseFiring(undefined, body("{}")), /the message has no headers/);
  for (const [name, value] of [
    ["Chime-Firing-Id", "not-a-firing"],
    ["Chime-Job-Id", "other-job"],
    ["Chime-Scheduled-At", "yesterday"],
    ["Chime-Due-At", "soon"],
    ["Chime-Attempt", "3"],
    ["Chime-Attempt", "two"],
    ["Chime-Priority", "12"],
    ["Chime-Deadline", "soon"],
    ["Chime-Timeout-Ms", "-5"],
  ]) {
    assert.throws(() => parseFiring(good({ [name]: value }), body("{}")), (e) => e instanceof BadMessage && e.message.startsWith(`header ${name} is invalid`), `${name}=${value}`);
  }
  assert.throws(() => parseFiring(good({ "Chime-Handler": " " }), body("{}")), /header Chime-Handler is missing/);
  assert.throws(() => parseFiring(good(), body("{nope")), /the body is not JSON/);
  assert.throws(() => parseFiring(good(), new Uint8Array([0x22, 0xff, 0x22])), /the body is not JSON: it is not UTF-8/);
});

test("firing ids split at the last @ and then at #", () => {
  assert.deepEqual(parseFiringId("nightly-report@1774661400000#2"), { jobId: "nightly-report", scheduledMs: 1774661400000, attempt: 2 });
  assert.deepEqual(parseFiringId("scan@1774661400000.3#1"), { jobId: "scan", scheduledMs: 1774661400000, shard: 3, attempt: 1 });
  for (const bad of ["", "@1#1", "job", "job@1", "job@x#1", "job@1#x", "job@1.#1", "job@1.+3#1", "job@1. 3#1", "job@1#-1"]) {
    assert.throws(() => parseFiringId(bad), /is not a firing id/, bad);
  }
});
