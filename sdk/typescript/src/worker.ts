/**
 * A Chime worker: register handlers by name, start it, and it pulls
 * firings as threads free up, asks the scheduler to start each, runs its
 * handler under the firing's deadline and reports how it ended
 * (docs/PROTOCOL.md). Start-up finds (never creates) the heartbeat bucket,
 * writes the first heartbeat, waits for the streams and the group's
 * consumers, then starts the heartbeat, the fence, the cancel listener, the
 * offer listener (the firings of broadcast jobs addressed to this worker)
 * and the fetch loop. Shutdown stops fetching and taking offers, lets runs finish within the
 * drain grace, stops the rest (reported interrupted), flushes finished
 * events, and deletes the heartbeat key.
 */

import type { Server } from "node:http";
import { jetstream, jetstreamManager, type JetStreamManager } from "@nats-io/jetstream";
import { Kvm, type KV } from "@nats-io/kv";
import type { NatsConnection, Subscription } from "@nats-io/transport-node";
import { serveAdmin } from "./admin.js";
import { onCancel } from "./cancel.js";
import { defaultSettings, InvalidSettingError, leaseFor, validateSettings, type WorkerSettings } from "./config.js";
import { checkServer, connectNats, type NatsSettings } from "./connect.js";
import { Dispatcher } from "./dispatch.js";
import { Fence } from "./fence.js";
import type { Handler } from "./handler.js";
import { Heartbeat } from "./heartbeat.js";
import { errorMessage, stderrLogger, type Logger } from "./log.js";
import { loadPromClient, noMetrics, promMetrics, type Metrics } from "./metrics.js";
import { BANDS, Names } from "./names.js";
import { OfferListener } from "./offers.js";
import { Puller } from "./pull.js";
import { Reporter, type Finished } from "./report.js";
import { Running } from "./running.js";
import { Starter } from "./start.js";
import { WorkerStatus } from "./status.js";
import { Slots } from "./slots.js";
import { awaited, waitFor } from "./topology.js";
import { HEARTBEAT_VERSION } from "./version.js";
import { Signal, sleep, withTimeout } from "./wait.js";

/** The error of firings stopped at the end of a shutdown's drain grace. */
export const SHUTDOWN_REASON = "worker shutting down";

/** How to make a worker; every setting has a default (see {@link WorkerSettings}). */
export interface WorkerOptions extends Partial<WorkerSettings> {
  /** How to reach NATS, when no `connection` is given. */
  nats?: NatsSettings;
  /** A connection to use; the worker leaves it open when it stops. */
  connection?: NatsConnection;
  /** Where to log (default: lines on standard error, from `info` up). */
  logger?: Logger;
  /** Serve `/metrics`, `/healthz` and `/readyz` on this port (needs `prom-client`); port 0 picks a free one. */
  metrics?: { port: number; host?: string };
  /** Called once JetStream has stored a finished event. */
  onFinished?: (event: Finished) => void;
}

/** What a shutdown did. */
export interface ShutdownReport {
  /** Every run ended within the drain grace. */
  drained: boolean;
  /** Runs stopped when the drain grace ended (reported interrupted). */
  interrupted: number;
  /** Finished events still unpublished when the flush grace ended. */
  unsentEvents: number;
}

/** Everything a started worker runs. */
interface Started {
  nc: NatsConnection;
  heartbeat: Heartbeat;
  fence: Fence;
  reporter: Reporter;
  pull: Promise<void>;
  beats: Promise<void>;
  cancels: Subscription;
  offers: Subscription;
  admin: Server | undefined;
}

/** A Chime worker for one group. */
export class Worker {
  /** The settings it runs with, defaults applied and checked. */
  readonly settings: Readonly<WorkerSettings>;
  private readonly handlers = new Map<string, Handler>();
  private readonly log: Logger;
  private readonly status = new WorkerStatus();
  private readonly running = new Running();
  private readonly options: WorkerOptions;
  /** Aborted by shutdown: stops start-up's waits and the fetch loop. */
  private readonly stopFetching = new AbortController();
  /** Aborted once the runs are over: stops the heartbeat and the fence. */
  private readonly stopBackground = new AbortController();
  private readonly firings = new Set<Promise<void>>();
  private metrics: Metrics = noMetrics;
  private slots: Slots | undefined;
  private started: Started | undefined;
  private starting: Promise<void> | undefined;
  private stopping: Promise<ShutdownReport> | undefined;
  /** Set when a shutdown begins (by signal, {@link shutdown} or a closed connection). */
  private readonly shutdownStarted = new Signal();
  private connected = true;
  private ownConnection: NatsConnection | undefined;
  private adminPort: number | undefined;

  constructor(options: WorkerOptions = {}) {
    const settings = defaultSettings();
    for (const key of Object.keys(settings) as (keyof WorkerSettings)[]) {
      const value = options[key];
      if (value !== undefined) (settings as unknown as Record<string, unknown>)[key] = value;
    }
    validateSettings(settings);
    this.settings = Object.freeze(settings);
    this.options = options;
    this.log = options.logger ?? stderrLogger();
  }

  /** The worker id. */
  get id(): string {
    return this.settings.workerId;
  }

  /** The port `/metrics`, `/healthz` and `/readyz` are served on, once started with `metrics`. */
  get metricsPort(): number | undefined {
    return this.adminPort;
  }

  /** Firings held now (being started or running). */
  get inFlight(): number {
    return this.slots?.inFlight ?? 0;
  }

  /** Why the worker does not take firings now (as `/readyz` says it); `undefined` when it does. */
  notReady(): string | undefined {
    if (this.started && !this.connected) return "not connected to NATS";
    return this.status.notReady();
  }

  /**
   * Registers `handler` for firings whose handler name is `name` (1–128
   * characters). Call before {@link start}; returns the worker, so calls chain.
   */
  handle<P = unknown>(name: string, handler: Handler<P>): this {
    if (this.starting) throw new Error(`handler ${JSON.stringify(name)}: handlers are registered before the worker starts`);
    if (typeof name !== "string" || name.length === 0 || name.length > 128) {
      throw new InvalidSettingError("handler name", `must be 1 to 128 characters, found ${JSON.stringify(name)}`);
    }
    if (typeof handler !== "function") throw new InvalidSettingError(`handler ${name}`, "must be a function");
    if (this.handlers.has(name)) throw new InvalidSettingError(`handler ${name}`, "is registered twice");
    this.handlers.set(name, handler as Handler);
    return this;
  }

  /**
   * Registers the worker and starts pulling; resolves once it is ready.
   * Waits as long as a NATS object is missing (logging what), heartbeating
   * meanwhile. Rejects on bad settings, an unsuitable server, or a
   * {@link shutdown} while it waits.
   */
  start(): Promise<void> {
    this.starting ??= this.startOnce();
    return this.starting;
  }

  private async startOnce(): Promise<void> {
    const s = this.settings;
    if (this.handlers.size === 0) throw new InvalidSettingError("handlers", "register at least one with worker.handle(name, fn)");
    const names = new Names(s.subjectPrefix, s.group, s.workerId);
    const signal = this.stopFetching.signal;
    const wait = { status: this.status, log: this.log, signal };
    let admin: Server | undefined;
    if (this.options.metrics) {
      const prom = await loadPromClient();
      this.metrics = promMetrics(prom, s.group);
      const host = this.options.metrics.host ?? "127.0.0.1";
      admin = await serveAdmin(host, this.options.metrics.port, this.metrics, () => this.notReady());
      const address = admin.address();
      this.adminPort = typeof address === "object" && address ? address.port : undefined;
    }
    this.slots = new Slots(s.threads, this.metrics);
    try {
      const nc = this.options.connection ?? (this.ownConnection = await connectNats({
        name: `chime-worker-ts ${s.workerId}`,
        ...this.options.nats,
      }));
      try {
        checkServer(nc);
      } catch (error) {
        throw new Error(`the NATS server ${(error as Error).message}`, { cause: error });
      }
      this.watchConnection(nc);
      const js = jetstream(nc);
      const jsm: JetStreamManager = await jetstreamManager(nc, { checkAPI: false });
      const bucket = names.workersBucket;
      const { kv, ttlMs } = await waitFor(
        awaited("bucket", bucket),
        async () => {
          const kv: KV = await new Kvm(js).open(bucket);
          return { kv, ttlMs: (await kv.status()).ttl };
        },
        wait,
      );
      const leaseMs = leaseFor(s, ttlMs);
      const heartbeat = new Heartbeat(
        kv,
        names.heartbeatKey,
        {
          id: s.workerId,
          group: s.group,
          threads: s.threads,
          version: HEARTBEAT_VERSION,
          handlers: [...this.handlers.keys()].sort(),
          inFlight: () => this.slots?.inFlight ?? 0,
          running: this.running,
        },
        s.heartbeatIntervalMs,
        this.log,
      );
      const firstBeat = await waitFor("the first heartbeat to be written", () => heartbeat.beatOnce(), wait);
      const fence = new Fence(leaseMs, firstBeat, this.running, this.status, this.metrics, this.log);
      fence.start();
      const beats = heartbeat.run(fence, this.stopBackground.signal);

      for (const stream of [names.fireStream, names.eventsStream]) {
        await waitFor(awaited("stream", stream), () => jsm.streams.info(stream), wait);
      }
      for (const band of BANDS) {
        const consumer = names.fireConsumer(band);
        await waitFor(awaited("consumer", consumer), () => jsm.consumers.info(names.fireStream, consumer), wait);
      }
      const reporter = new Reporter(js, names.finished, this.running, this.metrics, this.log, this.options.onFinished);
      const dispatcher = new Dispatcher({
        starter: new Starter(nc, names.start, s.workerId, s.group, s.startTimeoutMs),
        handlers: this.handlers,
        running: this.running,
        reporter,
        metrics: this.metrics,
        log: this.log,
        workerId: s.workerId,
        nakDelayMs: s.nakDelayMs,
        stopGraceMs: s.stopGraceMs,
        maxOutputBytes: s.maxOutputBytes,
      });
      const track = (task: Promise<void>) => {
        this.firings.add(task);
        void task.finally(() => this.firings.delete(task));
      };
      const puller = new Puller({
        nc,
        jsm,
        names,
        slots: this.slots,
        fence,
        dispatcher,
        metrics: this.metrics,
        log: this.log,
        pollIntervalMs: s.pollIntervalMs,
        fetchExpiryMs: s.fetchExpiryMs,
        inboxPrefix: this.options.nats?.inboxPrefix,
        track,
      });
      puller.subscribeDoorbell();
      const cancels = nc.subscribe(names.cancel, {
        callback: (_err, msg) => {
          if (msg) onCancel(msg, this.running, this.log);
        },
      });
      const offerListener = new OfferListener({
        workerId: s.workerId,
        dispatcher,
        slots: this.slots,
        fence,
        status: this.status,
        log: this.log,
        track,
      });
      const offers = nc.subscribe(names.offer, {
        callback: (_err, msg) => {
          if (msg) offerListener.onOffer(msg);
        },
      });
      // Confirms the subscriptions with the server: nothing sent once the worker reports started is missed.
      await nc.flush();
      const pull = this.supervise("fetch", () => puller.run(signal), signal);
      this.started = { nc, heartbeat, fence, reporter, pull, beats, cancels, offers, admin };
      this.status.setStarted();
      this.log.info("worker started", {
        worker_id: s.workerId,
        group: s.group,
        threads: s.threads,
        handlers: [...this.handlers.keys()].sort().join(","),
        lease_ms: leaseMs,
      });
    } catch (error) {
      this.stopBackground.abort();
      admin?.close();
      await this.closeOwnConnection();
      throw error;
    }
  }

  /** Runs `service` until `signal` aborts, starting it again (after a pause) if it fails. */
  private async supervise(service: string, run: () => Promise<void>, signal: AbortSignal): Promise<void> {
    let pause = 100;
    while (!signal.aborted) {
      try {
        await run();
        if (signal.aborted) return;
        this.log.error(`service ${service} stopped early; starting it again`);
      } catch (error) {
        this.log.error(`service ${service} failed; starting it again`, { error: errorMessage(error) });
      }
      this.metrics.serviceRestart(service);
      await sleep(pause, signal);
      pause = Math.min(pause * 2, 5000);
    }
  }

  /** Follows the connection's state for `/readyz`, and stops the worker if the connection closes for good. */
  private watchConnection(nc: NatsConnection): void {
    void (async () => {
      for await (const s of nc.status()) {
        if (s.type === "disconnect") this.connected = false;
        if (s.type === "reconnect") this.connected = true;
      }
    })().catch(() => {});
    void nc.closed().then((error) => {
      this.connected = false;
      if (this.started && !this.stopping) {
        this.log.error("the NATS connection closed for good; stopping", { error: error ? error.message : undefined });
        void this.shutdown();
      }
    });
  }

  /**
   * Stops gracefully: no more fetches, running firings finish within the
   * drain grace, the rest are stopped and reported `failed`, interrupted by
   * the shutdown; finished events are flushed within the flush grace; the
   * heartbeat key is deleted. Safe to call more than once.
   */
  shutdown(): Promise<ShutdownReport> {
    this.stopping ??= this.shutdownOnce();
    this.shutdownStarted.set();
    return this.stopping;
  }

  private async shutdownOnce(): Promise<ShutdownReport> {
    const s = this.settings;
    this.log.info("worker shutting down: no more fetches", { in_flight: this.inFlight });
    this.status.setDraining();
    this.stopFetching.abort();
    if (this.starting) await this.starting.catch(() => {});
    const started = this.started;
    if (!started) {
      this.stopBackground.abort();
      return { drained: true, interrupted: 0, unsentEvents: 0 };
    }
    started.offers.unsubscribe();
    await started.pull;

    const drained = await settlesWithin(() => Promise.all([...this.firings]), s.drainGraceMs);
    let interrupted = 0;
    if (!drained) {
      interrupted = this.running.interruptAll(SHUTDOWN_REASON);
      this.log.warn("drain grace over; stopping the remaining runs, to be run again elsewhere", {
        interrupted,
        grace_ms: s.drainGraceMs,
      });
      while (this.firings.size > 0) await Promise.all([...this.firings]);
    }
    const unsentEvents = await started.reporter.flush(s.flushGraceMs);

    started.cancels.unsubscribe();
    this.stopBackground.abort();
    started.fence.stop();
    await started.beats;
    await started.heartbeat.remove();
    started.admin?.close();
    await this.closeOwnConnection();
    const report = { drained, interrupted, unsentEvents };
    this.log.info("worker stopped", { ...report });
    return report;
  }

  /** Drains and closes the connection the worker made (never one it was given), bounded in time. */
  private async closeOwnConnection(): Promise<void> {
    const nc = this.ownConnection;
    if (!nc || nc.isClosed()) return;
    try {
      await withTimeout(nc.drain(), 5000, "draining the NATS connection timed out");
    } catch {
      await nc.close().catch(() => {});
    }
  }

  /**
   * Starts the worker and runs it until SIGTERM or SIGINT, then shuts it
   * down gracefully; resolves with what the shutdown did.
   */
  async run(): Promise<ShutdownReport> {
    const stop = () => void this.shutdown();
    process.once("SIGTERM", stop);
    process.once("SIGINT", stop);
    try {
      try {
        await this.start();
      } catch (error) {
        // A signal while starting: the start was given up, the shutdown says how it ended.
        if (this.stopping) return await this.stopping;
        throw error;
      }
      await this.shutdownStarted.wait();
      return await this.stopping!;
    } finally {
      process.off("SIGTERM", stop);
      process.off("SIGINT", stop);
    }
  }

}

/** Whether `task` settles within `ms`. */
async function settlesWithin(task: () => Promise<unknown>, ms: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const result = await Promise.race([
    task().then(() => true),
    new Promise<boolean>((resolve) => (timer = setTimeout(() => resolve(false), ms))),
  ]);
  clearTimeout(timer);
  return result;
}
