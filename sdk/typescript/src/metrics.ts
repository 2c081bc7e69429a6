/**
 * The worker's Prometheus metrics, with the Rust reference worker's names
 * (worker/src/metrics.rs), all in one registry whose series carry the
 * worker's `group`. `prom-client` is an optional peer dependency: without
 * it, or when no metrics port is asked for, every metric is a no-op.
 */

import type * as Prom from "prom-client";

/** What the worker records. */
export interface Metrics {
  setInFlight(inFlight: number, threads: number): void;
  setThreads(threads: number): void;
  firing(handler: string, outcome: string, durationSeconds: number): void;
  startLateness(seconds: number): void;
  startDecision(seconds: number): void;
  fetchError(): void;
  startRefusal(reason: string): void;
  badMessage(): void;
  reportRetry(): void;
  fenced(): void;
  serviceRestart(service: string): void;
  clockOffset(seconds: number): void;
  /** Prometheus text exposition; empty for the no-op metrics. */
  render(): Promise<string>;
  readonly contentType: string;
}

/** Metrics that record nothing. */
export const noMetrics: Metrics = {
  setInFlight() {},
  setThreads() {},
  firing() {},
  startLateness() {},
  startDecision() {},
  fetchError() {},
  startRefusal() {},
  badMessage() {},
  reportRetry() {},
  fenced() {},
  serviceRestart() {},
  clockOffset() {},
  render: async () => "",
  contentType: "text/plain; version=0.0.4; charset=utf-8",
};

const LATENESS_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60];
const DURATION_BUCKETS = [0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 3600];
const DECISION_BUCKETS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5];

/** Loads prom-client; throws an Error that says how to install it when it is missing. */
export async function loadPromClient(): Promise<typeof Prom> {
  try {
    const loaded = (await import("prom-client")) as typeof Prom & { default?: typeof Prom };
    return loaded.Registry ? loaded : (loaded.default as typeof Prom);
  } catch (error) {
    throw new Error(
      `metrics need the optional peer dependency prom-client: npm install prom-client (${(error as Error).message})`,
    );
  }
}

/** Creates every metric in a fresh registry whose series are labelled `group="<group>"`. */
export function promMetrics(prom: typeof Prom, group: string): Metrics {
  const registry = new prom.Registry();
  registry.setDefaultLabels({ group });
  const registers = [registry];
  const gauge = (name: string, help: string) => new prom.Gauge({ name, help, registers });
  const counter = (name: string, help: string, labelNames: string[] = []) =>
    new prom.Counter({ name, help, labelNames, registers });
  const inFlight = gauge("chime_worker_in_flight", "Firings this worker holds: being started or running.");
  const freeThreads = gauge("chime_worker_free_threads", "Threads not holding a firing.");
  const threads = gauge("chime_worker_threads", "Firings this worker runs at most at once.");
  const firings = counter("chime_worker_firings_total", "Finished runs by handler and outcome.", ["handler", "outcome"]);
  const runDuration = new prom.Histogram({
    name: "chime_worker_run_duration_seconds",
    help: "How long runs took, by handler.",
    labelNames: ["handler"],
    buckets: DURATION_BUCKETS,
    registers,
  });
  const lateness = new prom.Histogram({
    name: "chime_worker_start_lateness_seconds",
    help: "Accepted start minus the firing's due time.",
    buckets: LATENESS_BUCKETS,
    registers,
  });
  const decision = new prom.Histogram({
    name: "chime_worker_start_decision_seconds",
    help: "Start request to the scheduler's answer (accepted, refused or none).",
    buckets: DECISION_BUCKETS,
    registers,
  });
  const fetchErrors = counter("chime_worker_fetch_errors_total", "Failed fetches from the firing consumers.");
  const refusals = counter("chime_worker_start_refusals_total", "Fetched firings not run, by reason.", ["reason"]);
  const badMessages = counter(
    "chime_worker_bad_messages_total",
    "Messages terminated because they were not valid firings.",
  );
  const reportRetries = counter(
    "chime_worker_report_retries_total",
    "Finished-event publishes that failed once and were retried.",
  );
  const fenced = counter(
    "chime_worker_fenced_total",
    "Times the worker fenced itself: no heartbeat written for its lease, so its runs were stopped and fetching paused.",
  );
  const restarts = counter(
    "chime_service_restarts_total",
    "Restarts of a supervised service after it failed or stopped early.",
    ["service"],
  );
  const clock = gauge(
    "chime_clock_offset_seconds",
    "Local clock minus the NATS server's (positive: ahead), the smallest sample of the last 5 minutes of fetched firings; an upper bound.",
  );
  for (const c of [fetchErrors, badMessages, reportRetries, fenced]) c.inc(0);
  return {
    setInFlight(n, total) {
      inFlight.set(n);
      freeThreads.set(Math.max(0, total - n));
    },
    setThreads: (n) => threads.set(n),
    firing(handler, outcome, seconds) {
      firings.inc({ handler, outcome });
      runDuration.observe({ handler }, seconds);
    },
    startLateness: (s) => lateness.observe(Math.max(0, s)),
    startDecision: (s) => decision.observe(s),
    fetchError: () => fetchErrors.inc(),
    startRefusal: (reason) => refusals.inc({ reason }),
    badMessage: () => badMessages.inc(),
    reportRetry: () => reportRetries.inc(),
    fenced: () => fenced.inc(),
    serviceRestart: (service) => restarts.inc({ service }),
    clockOffset: (s) => clock.set(s),
    render: () => registry.metrics(),
    contentType: registry.contentType,
  };
}
