/**
 * Running a handler inside a span that continues the firing's trace, when
 * the OpenTelemetry API package (`@opentelemetry/api`, an optional peer
 * dependency) is installed. Without it, or without a valid `traceparent`
 * on the firing, handlers run as they are. With the API but no SDK the span
 * records nothing, yet the handler's active context still carries the
 * firing's trace id, so its own instrumentation joins the trace.
 */

import type * as Otel from "@opentelemetry/api";
import type { FiringDetails } from "./message.js";
import { parseTraceparent } from "./traceparent.js";

let loaded: Promise<typeof Otel | undefined> | undefined;

/** The OpenTelemetry API if it is installed; loaded once. */
export function openTelemetry(): Promise<typeof Otel | undefined> {
  loaded ??= import("@opentelemetry/api").then(
    (api) => ((api as { trace?: unknown }).trace ? api : (api as unknown as { default: typeof Otel }).default),
    () => undefined,
  );
  return loaded;
}

/**
 * Runs `run` inside a span named `chime.firing <handler>`, a child of the
 * firing's traceparent; runs it as it is when there is no API or no trace.
 */
export async function inFiringSpan<T>(firing: FiringDetails, workerId: string, run: () => Promise<T>): Promise<T> {
  const parent = parseTraceparent(firing.traceparent);
  const api = parent ? await openTelemetry() : undefined;
  if (!api || !parent) return run();
  const parentContext = api.trace.setSpanContext(api.ROOT_CONTEXT, {
    traceId: parent.traceId,
    spanId: parent.parentId,
    traceFlags: parent.flags & 0xff,
    isRemote: true,
  });
  const tracer = api.trace.getTracer("@chime/worker");
  const attributes = {
    "chime.firing_id": firing.firingId,
    "chime.job_id": firing.jobId,
    "chime.attempt": firing.attempt,
    "chime.handler": firing.handler,
    "chime.worker_id": workerId,
  };
  return tracer.startActiveSpan(
    `chime.firing ${firing.handler}`,
    { kind: api.SpanKind.CONSUMER, attributes },
    parentContext,
    async (span) => {
      try {
        const result = await run();
        span.setStatus({ code: api.SpanStatusCode.OK });
        return result;
      } catch (error) {
        span.setStatus({ code: api.SpanStatusCode.ERROR, message: (error as Error)?.message ?? String(error) });
        throw error;
      } finally {
        span.end();
      }
    },
  );
}
