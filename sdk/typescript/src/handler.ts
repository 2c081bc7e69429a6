/**
 * What a handler is and what it sees: the firing as the scheduler published
 * it, the deadline the worker enforces, and a signal that aborts when the
 * run is stopped (deadline, cancel request, fence, end of a shutdown's
 * drain grace).
 */

import type { FiringDetails } from "./message.js";

/**
 * One firing, as handed to a handler. `P` is the type the handler expects
 * its payload to have; the worker does not check it (the payload is the
 * job's JSON as it was put).
 */
export interface FiringContext<P = unknown> extends Omit<FiringDetails, "payload"> {
  /** The job's payload (`null` when the message had no body). */
  payload: P;
  /** When the run is cut off. Past it the signal aborts and, a moment later, the worker stops waiting for the handler. */
  deadline: Date;
  /**
   * Aborted when the run is stopped; its `reason` is a `FiringStopped`
   * whose `kind` says why (`deadline`, `cancelled`, `fenced`, `shutdown`).
   * Long-running handlers should watch it and return promptly.
   */
  signal: AbortSignal;
  /** The id of the worker running the firing. */
  workerId: string;
  /** The bound on the output tail the worker keeps; handlers need keep no more than this. */
  maxOutputBytes: number;
}

/**
 * What a run returns: its output (text, or bytes cleaned into text), or
 * nothing. Any other value is reported as its JSON. Throwing fails the run
 * with the error's message; throw a {@link HandlerError} to report output too.
 */
export type HandlerOutput = string | Uint8Array | null | undefined | void;

/** Runs firings of one handler name. */
export type Handler<P = unknown> = (ctx: FiringContext<P>) => Promise<HandlerOutput> | HandlerOutput;

/** A failed run: its message becomes the firing's `error`; `output` is what it printed before failing. */
export class HandlerError extends Error {
  readonly output: string | undefined;
  constructor(message: string, options?: { output?: string; cause?: unknown }) {
    super(message, options?.cause === undefined ? undefined : { cause: options.cause });
    this.name = "HandlerError";
    this.output = options?.output;
  }
}
