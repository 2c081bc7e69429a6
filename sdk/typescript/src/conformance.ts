#!/usr/bin/env node
/**
 * The protocol conformance worker: a worker of this SDK with the handlers the
 * conformance suite drives (echo, sleep, fail, shard, trace, env). The suite
 * launches it as a child process, waits for its one stdout line
 * `conformance worker ready <worker id>`, and checks what it does against a
 * real nats-server and scheduler. It logs to stderr, exits 0 after a clean
 * drain on SIGTERM (or after `--count` firings), and non-zero with a message
 * on bad arguments or when NATS is unreachable or unsuitable.
 */

import { parseArgs, USAGE, UsageError } from "./args.js";
import { InvalidSettingError } from "./config.js";
import { HandlerError, type FiringContext } from "./handler.js";
import { errorMessage } from "./log.js";
import { formatTime } from "./time.js";
import { Worker } from "./worker.js";

/** Registers the conformance handlers on `worker`. */
export function registerConformanceHandlers(worker: Worker): Worker {
  const payloadField = (ctx: FiringContext, name: string): unknown =>
    typeof ctx.payload === "object" && ctx.payload !== null && !Array.isArray(ctx.payload)
      ? (ctx.payload as Record<string, unknown>)[name]
      : undefined;
  return worker
    .handle("echo", (ctx) => {
      const text = payloadField(ctx, "text");
      return typeof text === "string" ? text : JSON.stringify(ctx.payload);
    })
    .handle("sleep", async (ctx) => {
      const seconds = payloadField(ctx, "seconds");
      if (typeof seconds !== "number" || !Number.isFinite(seconds) || seconds < 0) {
        throw new HandlerError(`payload.seconds must be a number of seconds, 0 or more, found ${JSON.stringify(seconds)}`);
      }
      await new Promise<void>((resolve, reject) => {
        const timer = setTimeout(resolve, seconds * 1000);
        const onAbort = () => {
          clearTimeout(timer);
          reject(new HandlerError("cancelled"));
        };
        if (ctx.signal.aborted) onAbort();
        else ctx.signal.addEventListener("abort", onAbort, { once: true });
      });
      return `slept ${seconds}`;
    })
    .handle("fail", (ctx) => {
      const message = payloadField(ctx, "message");
      throw new HandlerError(typeof message === "string" ? message : "failed on purpose");
    })
    .handle("shard", (ctx) => (ctx.shard === undefined ? "unsharded" : `${ctx.shard}/${ctx.shards}`))
    .handle("trace", (ctx) => ctx.traceparent ?? "")
    .handle("env", (ctx) =>
      JSON.stringify({
        firing_id: ctx.firingId,
        job_id: ctx.jobId,
        attempt: ctx.attempt,
        scheduled_at: formatTime(ctx.scheduledAt),
      }),
    );
}

/** The flag of each setting the command line sets, for errors found when the worker is made. */
const FLAG_OF: Record<string, string> = {
  fenceMarginMs: "--fence-margin",
  heartbeatIntervalMs: "--heartbeat-interval",
  pollIntervalMs: "--poll-interval",
  drainGraceMs: "--drain-grace",
  threads: "--threads",
};

/** An error's message, naming the flag rather than the setting where there is one. */
function describe(error: unknown): string {
  const message = errorMessage(error);
  if (!(error instanceof InvalidSettingError)) return message;
  const flag = FLAG_OF[error.setting];
  return flag ? message.replace(error.setting, flag) : message;
}

async function main(): Promise<number> {
  let args;
  try {
    args = parseArgs(process.argv.slice(2));
  } catch (error) {
    if (error instanceof UsageError) {
      process.stderr.write(`conformance worker: ${error.message}\n`);
      return 2;
    }
    throw error;
  }
  if (args.help) {
    process.stdout.write(USAGE);
    return 0;
  }
  let stored = 0;
  let worker: Worker;
  try {
    worker = new Worker({
      nats: {
        url: args.natsUrl,
        user: args.natsUser,
        password: args.natsPassword,
        token: args.natsToken,
        credsFile: args.natsCreds,
        nkeyFile: args.natsNkey,
        tlsCaFile: args.natsTlsCa,
        tlsCertFile: args.natsTlsCert,
        tlsKeyFile: args.natsTlsKey,
        inboxPrefix: args.natsInboxPrefix,
        connectWaitMs: args.natsConnectWaitMs,
      },
      group: args.group,
      ...(args.workerId !== undefined ? { workerId: args.workerId } : {}),
      subjectPrefix: args.subjectPrefix,
      threads: args.threads,
      drainGraceMs: args.drainGraceMs,
      heartbeatIntervalMs: args.heartbeatIntervalMs,
      fenceMarginMs: args.fenceMarginMs,
      pollIntervalMs: args.pollIntervalMs,
      ...(args.metricsPort !== undefined ? { metrics: { port: args.metricsPort } } : {}),
      onFinished: () => {
        stored += 1;
        if (args.count > 0 && stored >= args.count) void worker.shutdown();
      },
    });
  } catch (error) {
    process.stderr.write(`conformance worker: ${describe(error)}\n`);
    return 2;
  }
  registerConformanceHandlers(worker);
  const stop = () => void worker.shutdown();
  process.once("SIGTERM", stop);
  process.once("SIGINT", stop);
  try {
    await worker.start();
  } catch (error) {
    if (worker.notReady()?.startsWith("draining")) {
      await worker.shutdown();
      return 0;
    }
    process.stderr.write(`conformance worker: ${describe(error)}\n`);
    return 1;
  }
  await new Promise<void>((resolve) => process.stdout.write(`conformance worker ready ${worker.id}\n`, () => resolve()));
  const report = await worker.run();
  return report.unsentEvents > 0 ? 1 : 0;
}

// Exits explicitly: a handler that ignored its stop signal may still hold a timer.
main().then(
  (code) => process.exit(code),
  (error: unknown) => {
    process.stderr.write(`conformance worker: ${errorMessage(error)}\n`);
    process.exit(1);
  },
);
