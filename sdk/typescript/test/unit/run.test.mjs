// Running one firing: success keeps the output tail, failures and throws
// report their message, the deadline cuts a run off (keeping what it returns
// in the stop grace), a cancel reports its reason, a fence or shutdown fails
// the run interrupted, and output is cleaned and capped.
import { test } from "node:test";
import assert from "node:assert/strict";
import { runFiring } from "../../dist/run.js";
import { RunControl } from "../../dist/running.js";
import { HandlerError } from "../../dist/handler.js";

const GRACE = 200;

function input(deadlineInMs, overrides = {}) {
  const now = new Date();
  return {
    firing: {
      firingId: "job@1#1", jobId: "job", handler: "h", scheduledAt: now, dueAt: now, attempt: 1, priority: 5,
      payload: null, shard: undefined, shards: undefined, traceparent: undefined,
    },
    deadline: new Date(now.getTime() + deadlineInMs),
    control: new RunControl(),
    workerId: "w",
    maxOutputBytes: 8,
    stopGraceMs: GRACE,
    ...overrides,
  };
}
const waitFor = (signal) => new Promise((resolve) => signal.addEventListener("abort", resolve, { once: true }));
// Unref'd: a run the worker left behind must not keep the test process alive.
const sleep = (ms) => new Promise((r) => setTimeout(r, ms).unref());

test("success keeps the output tail", async () => {
  const report = await runFiring(async () => "0123456789", input(5000));
  assert.equal(report.outcome, "succeeded");
  assert.equal(report.output, "23456789");
  assert.equal(report.error, undefined);
  assert.ok(report.startedAt <= report.finishedAt);
});

test("bytes, objects and nothing are outputs too", async () => {
  assert.equal((await runFiring(() => new Uint8Array([0x61, 0x00, 0xff]), input(5000))).output, "a\uFFFD\uFFFD");
  assert.equal((await runFiring(() => ({ a: 1 }), input(5000, { maxOutputBytes: 64 }))).output, '{"a":1}');
  assert.equal((await runFiring(() => undefined, input(5000))).output, undefined);
  assert.equal((await runFiring(() => "", input(5000))).output, undefined, "empty output is left out");
});

test("failures report their message and output", async () => {
  let report = await runFiring(async () => {
    throw new HandlerError("bad", { output: "out" });
  }, input(5000));
  assert.deepEqual([report.outcome, report.error, report.output], ["failed", "bad", "out"]);
  report = await runFiring(() => {
    throw new TypeError("kaboom");
  }, input(5000));
  assert.deepEqual([report.outcome, report.error], ["failed", "kaboom"]);
  report = await runFiring(() => Promise.reject("a string"), input(5000));
  assert.equal(report.error, "a string");
  report = await runFiring(() => Promise.reject(new Error("")), input(5000));
  assert.equal(report.error, "handler failed (Error)");
  report = await runFiring(undefined, input(5000));
  assert.deepEqual([report.outcome, report.error], ["failed", "no handler named h on this worker"]);
});

test("the deadline cuts a run off", async () => {
  let report = await runFiring(() => sleep(30_000), input(100));
  assert.equal(report.outcome, "timed_out");
  assert.match(report.error, /^timed out: the deadline .* passed after 0\.\d{3}s$/);
  assert.ok(report.durationSeconds < 1, String(report.durationSeconds));

  // A handler that watches its signal returns its output within the grace.
  report = await runFiring(async (ctx) => {
    await waitFor(ctx.signal);
    assert.equal(ctx.signal.reason.kind, "deadline");
    throw new HandlerError("stopped", { output: "partial" });
  }, input(100));
  assert.deepEqual([report.outcome, report.output], ["timed_out", "partial"]);

  report = await runFiring(() => "never", input(-1));
  assert.equal(report.outcome, "timed_out");
  assert.match(report.error, /^the deadline .* passed before the run started$/);

  // A handler failing on its own at its deadline timed out.
  report = await runFiring(async (ctx) => {
    await sleep(Math.max(0, ctx.deadline.getTime() - Date.now() + 5));
    throw new Error("request timed out");
  }, input(100, { stopGraceMs: 5000 }));
  assert.equal(report.outcome, "timed_out");
  assert.match(report.error, /^timed out/);
});

test("a cancel reports its reason", async () => {
  const control = new RunControl();
  setTimeout(() => control.cancel("replaced"), 50);
  const report = await runFiring(() => sleep(30_000), input(30_000, { control }));
  assert.deepEqual([report.outcome, report.error, report.interrupted], ["cancelled", "replaced", undefined]);
});

test("a cancel wins over a handler that returns as soon as it notices", async () => {
  const control = new RunControl();
  setTimeout(() => control.cancel("replaced"), 50);
  const report = await runFiring(async (ctx) => {
    await waitFor(ctx.signal);
    throw new HandlerError("cancelled");
  }, input(30_000, { control }));
  assert.deepEqual([report.outcome, report.error], ["cancelled", "replaced"]);
});

test("a fence or a shutdown fails the run, interrupted, never cancelled", async () => {
  for (const kind of ["fenced", "shutdown"]) {
    const control = new RunControl();
    setTimeout(() => control.interrupt(kind, `stopped: ${kind}`), 50);
    const report = await runFiring(async (ctx) => {
      await waitFor(ctx.signal);
      assert.equal(ctx.signal.reason.kind, kind);
      return "bye";
    }, input(30_000, { control }));
    assert.deepEqual([report.outcome, report.error, report.interrupted, report.output], ["failed", `stopped: ${kind}`, kind, "bye"]);
  }
});

test("a handler that ignores its signal is left after the stop grace", async () => {
  const control = new RunControl();
  setTimeout(() => control.interrupt("shutdown", "worker shutting down"), 20);
  const started = Date.now();
  const report = await runFiring(() => new Promise(() => {}), input(30_000, { control }));
  assert.equal(report.interrupted, "shutdown");
  assert.ok(Date.now() - started < GRACE + 1000);
});

test("nul bytes and long errors are cleaned and capped", async () => {
  let report = await runFiring(() => "a\0b", input(5000, { maxOutputBytes: 64 }));
  assert.equal(report.output, "a\uFFFDb");
  report = await runFiring(() => {
    throw new Error(`bad\0${"é".repeat(8192)}`);
  }, input(5000));
  assert.ok(report.error.startsWith("bad\uFFFDé"));
  assert.ok(new TextEncoder().encode(report.error).length <= 8192);
});
