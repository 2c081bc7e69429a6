/**
 * `@chime/worker`: Chime workers in TypeScript. Register handlers by name,
 * start the worker, and it runs the firings of its group as the Rust
 * reference worker does (docs/PROTOCOL.md).
 *
 * ```ts
 * import { Worker } from "@chime/worker";
 * const worker = new Worker({ group: "reports", nats: { url: "nats://127.0.0.1:4222" } });
 * worker.handle("hello", async (ctx) => `hello from ${ctx.firingId}`);
 * await worker.run(); // until SIGTERM or SIGINT
 * ```
 */

export { Worker, SHUTDOWN_REASON, type WorkerOptions, type ShutdownReport } from "./worker.js";
export { HandlerError, type Handler, type HandlerOutput, type FiringContext } from "./handler.js";
export { FiringStopped } from "./running.js";
export type { FiringDetails } from "./message.js";
export type { Finished } from "./report.js";
export { InvalidSettingError, defaultWorkerId, type WorkerSettings } from "./config.js";
export { connectNats, connectionOptions, NatsSettingError, type NatsSettings } from "./connect.js";
export { stderrLogger, type Logger, type LogFields } from "./log.js";
export { parseTraceparent, type TraceParent } from "./traceparent.js";
export { VERSION } from "./version.js";
