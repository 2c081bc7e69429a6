// With the OpenTelemetry API installed, a handler runs inside a span that
// continues the firing's trace: its active context carries the firing's
// trace id. Without a valid traceparent it runs outside any span.
import { test } from "node:test";
import assert from "node:assert/strict";
import { AsyncLocalStorage } from "node:async_hooks";
import { context, ROOT_CONTEXT, trace } from "@opentelemetry/api";
import { runFiring } from "../../dist/run.js";
import { RunControl } from "../../dist/running.js";

const TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT = "00f067aa0ba902b7";

// The active context follows async calls only with a context manager, which
// an OpenTelemetry SDK registers; this one is the same idea in a few lines.
const storage = new AsyncLocalStorage();
context.setGlobalContextManager({
  active: () => storage.getStore() ?? ROOT_CONTEXT,
  with: (ctx, fn, thisArg, ...args) => storage.run(ctx, () => fn.call(thisArg, ...args)),
  bind: (_ctx, target) => target,
  enable() {
    return this;
  },
  disable() {
    return this;
  },
});

function input(traceparent) {
  const now = new Date();
  return {
    firing: { firingId: "job@1#1", jobId: "job", handler: "h", scheduledAt: now, dueAt: now, attempt: 1, priority: 5,
      payload: null, shard: undefined, shards: undefined, traceparent },
    deadline: new Date(now.getTime() + 5000),
    control: new RunControl(),
    workerId: "w",
    maxOutputBytes: 1024,
    stopGraceMs: 100,
  };
}

test("the handler runs in the firing's trace", async () => {
  const report = await runFiring((ctx) => {
    assert.equal(ctx.traceparent, `00-${TRACE_ID}-${PARENT}-01`);
    return trace.getActiveSpan()?.spanContext().traceId ?? "no span";
  }, input(`00-${TRACE_ID}-${PARENT}-01`));
  assert.equal(report.output, TRACE_ID);
});

test("without a traceparent the handler runs outside any span", async () => {
  const report = await runFiring(() => trace.getActiveSpan()?.spanContext().traceId ?? "no span", input(undefined));
  assert.equal(report.output, "no span");
});
