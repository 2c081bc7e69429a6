/**
 * Running one accepted firing: its handler under its deadline and stop
 * signal, with failures caught and output cleaned and bounded
 * (docs/PROTOCOL.md §5). A JavaScript promise cannot be killed: when a run
 * is stopped the handler's signal aborts, it gets `stopGraceMs` to return
 * (its output is kept if it does), and then the worker stops waiting for it.
 */

import type { Handler, FiringContext } from "./handler.js";
import { HandlerError } from "./handler.js";
import type { FiringDetails } from "./message.js";
import { errorMessage } from "./log.js";
import { FiringStopped, type RunControl, type StopReason } from "./running.js";
import { formatTime } from "./time.js";
import { fromBytes, head, tail, MAX_ERROR_BYTES } from "./text.js";
import { inFiringSpan } from "./tracing.js";
import { monotonicMs, setLongTimeout } from "./wait.js";

/** How a run ended, ready for a finished event. */
export interface RunReport {
  outcome: "succeeded" | "failed" | "timed_out" | "cancelled";
  error: string | undefined;
  output: string | undefined;
  startedAt: Date;
  finishedAt: Date;
  /** Monotonic run time in seconds. */
  durationSeconds: number;
  interrupted: "fenced" | "shutdown" | undefined;
}

/** What a run needs besides its handler. */
export interface RunInput {
  firing: FiringDetails;
  deadline: Date;
  control: RunControl;
  workerId: string;
  maxOutputBytes: number;
  stopGraceMs: number;
}

type Settled = { ok: true; value: unknown } | { ok: false; error: unknown };

/** The output a handler's value stands for, before bounding. */
export function outputOf(value: unknown): string | undefined {
  if (value === undefined || value === null) return undefined;
  if (typeof value === "string") return value;
  if (value instanceof Uint8Array) return fromBytes(value);
  try {
    return JSON.stringify(value);
  } catch {
    return String(value);
  }
}

/** The error text of a failed run. */
function failureOf(error: unknown): { message: string; output: string | undefined } {
  const output = error instanceof HandlerError ? error.output : undefined;
  let message = errorMessage(error);
  if (!message) message = error instanceof Error ? `handler failed (${error.name})` : "handler failed";
  return { message, output };
}

/**
 * Runs the firing with `handler` (`undefined`: no handler of that name
 * here) until it returns, its deadline passes, or its control stops it.
 */
export async function runFiring(handler: Handler | undefined, input: RunInput): Promise<RunReport> {
  const { firing, deadline, control, maxOutputBytes, stopGraceMs } = input;
  const startedAt = new Date();
  const started = monotonicMs();
  const finish = (
    outcome: RunReport["outcome"],
    error: string | undefined,
    output: string | undefined,
    interrupted?: RunReport["interrupted"],
  ): RunReport => {
    const kept = output === undefined ? undefined : tail(output, maxOutputBytes);
    return {
      outcome,
      error: error === undefined ? undefined : head(error, MAX_ERROR_BYTES),
      output: kept ? kept : undefined,
      startedAt,
      finishedAt: new Date(),
      durationSeconds: (monotonicMs() - started) / 1000,
      interrupted,
    };
  };

  if (!handler) return finish("failed", `no handler named ${firing.handler} on this worker`, undefined);
  const remainingMs = deadline.getTime() - startedAt.getTime();
  if (remainingMs <= 0) {
    return finish("timed_out", `the deadline ${formatTime(deadline)} passed before the run started`, undefined);
  }
  const early = control.stopped;
  if (early) return finish(early.outcome, early.reason, undefined, early.interrupted);

  // The handler's signal follows the control's (cancel, fence, shutdown) and the deadline.
  const handlerController = new AbortController();
  let stop: "deadline" | "control" | undefined;
  let wake: () => void = () => {};
  const stopped = new Promise<void>((resolve) => (wake = resolve));
  const onControl = () => {
    stop ??= "control";
    handlerController.abort(control.signal.reason);
    wake();
  };
  control.signal.addEventListener("abort", onControl, { once: true });
  const cancelTimer = setLongTimeout(() => {
    stop ??= "deadline";
    handlerController.abort(new FiringStopped({ deadline: true, reason: `the deadline ${formatTime(deadline)} passed` }));
    wake();
  }, remainingMs);

  const ctx: FiringContext = {
    ...firing,
    deadline,
    signal: handlerController.signal,
    workerId: input.workerId,
    maxOutputBytes,
  };
  const settled: Promise<Settled> = Promise.resolve()
    .then(() => inFiringSpan(firing, input.workerId, async () => handler(ctx)))
    .then(
      (value) => ({ ok: true as const, value }),
      (error: unknown) => ({ ok: false as const, error }),
    );

  try {
    const first = await Promise.race([settled, stopped.then(() => undefined)]);
    if (first !== undefined && stop === undefined) {
      if (first.ok) return finish("succeeded", undefined, outputOf(first.value));
      const failure = failureOf(first.error);
      if (Date.now() >= deadline.getTime()) {
        // A handler that enforces the deadline itself (a request timeout) failed because of it.
        return finish(
          "timed_out",
          `timed out: the deadline ${formatTime(deadline)} passed (${failure.message})`,
          failure.output,
        );
      }
      return finish("failed", failure.message, failure.output);
    }
    // Stopped: the handler may still return its output within the stop grace.
    let graceTimer: NodeJS.Timeout | undefined;
    const late = await Promise.race([
      settled,
      new Promise<undefined>((resolve) => (graceTimer = setTimeout(() => resolve(undefined), stopGraceMs))),
    ]);
    clearTimeout(graceTimer);
    const output = late === undefined ? undefined : late.ok ? outputOf(late.value) : failureOf(late.error).output;
    if (stop === "deadline") {
      const seconds = ((monotonicMs() - started) / 1000).toFixed(3);
      return finish("timed_out", `timed out: the deadline ${formatTime(deadline)} passed after ${seconds}s`, output);
    }
    // Read again: the control has been stopped since the check before the run.
    const reason = control.stopped as StopReason | undefined;
    if (reason) return finish(reason.outcome, reason.reason, output, reason.interrupted);
    return finish("cancelled", "cancelled", output);
  } finally {
    cancelTimer();
    control.signal.removeEventListener("abort", onControl);
  }
}
