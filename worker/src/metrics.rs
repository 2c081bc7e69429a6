//! The worker's Prometheus metrics, all in one registry.
//!
//! Every series carries the worker's `group`, so dashboards split and sum
//! workers by group. Other labels are small bounded sets: `handler` is a
//! registered handler name or `unknown`, `outcome` one of four, `reason` one
//! of the start refusals.

use std::collections::HashMap;

use prometheus::{
    Gauge, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, Opts,
    Registry,
};

/// Every metric of one worker.
#[derive(Clone)]
pub struct Metrics {
    registry: Registry,
    /// Firings held: being started or running.
    pub in_flight: IntGauge,
    /// Threads minus in-flight firings.
    pub free_threads: IntGauge,
    /// The configured threads.
    pub threads: IntGauge,
    /// Finished runs by handler and outcome.
    pub firings: IntCounterVec,
    /// Run time by handler.
    pub run_duration: HistogramVec,
    /// Accepted start minus the firing's due time.
    pub start_lateness: Histogram,
    /// How long the scheduler took to answer a start request.
    pub start_decision: Histogram,
    /// Failed fetches from the firing consumers.
    pub fetch_errors: IntCounter,
    /// Starts not run, by reason (the scheduler's refusals, `duplicate_delivery`, `scheduler_unavailable`).
    pub start_refusals: IntCounterVec,
    /// Messages terminated because their headers or body were not a firing.
    pub bad_messages: IntCounter,
    /// Finished events whose publish failed once (each is retried until it succeeds).
    pub report_retries: IntCounter,
    /// Times the worker fenced itself: no heartbeat for its whole lease, runs stopped.
    pub fenced: IntCounter,
    /// Restarts of a supervised service after it panicked or stopped early, by service.
    pub service_restarts: IntCounterVec,
    /// Local clock minus the NATS server's, from fetched messages' timestamps.
    pub clock_offset: Gauge,
}

impl Metrics {
    /// Creates and registers every metric in a fresh registry whose series
    /// are labelled `group="<group>"`.
    pub fn new(group: &str) -> Self {
        let labels = HashMap::from([("group".to_string(), group.to_string())]);
        let registry =
            Registry::new_custom(None, Some(labels)).expect("`group` is a valid label name");
        let lateness_buckets = vec![
            0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
            60.0,
        ];
        let duration_buckets = vec![
            0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0,
        ];
        let metrics = Metrics {
            in_flight: IntGauge::new(
                "chime_worker_in_flight",
                "Firings this worker holds: being started or running.",
            )
            .expect("valid metric"),
            free_threads: IntGauge::new(
                "chime_worker_free_threads",
                "Threads not holding a firing.",
            )
            .expect("valid metric"),
            threads: IntGauge::new(
                "chime_worker_threads",
                "Firings this worker runs at most at once.",
            )
            .expect("valid metric"),
            firings: IntCounterVec::new(
                Opts::new(
                    "chime_worker_firings_total",
                    "Finished runs by handler and outcome.",
                ),
                &["handler", "outcome"],
            )
            .expect("valid metric"),
            run_duration: HistogramVec::new(
                HistogramOpts::new(
                    "chime_worker_run_duration_seconds",
                    "How long runs took, by handler.",
                )
                .buckets(duration_buckets),
                &["handler"],
            )
            .expect("valid metric"),
            start_lateness: Histogram::with_opts(
                HistogramOpts::new(
                    "chime_worker_start_lateness_seconds",
                    "Accepted start minus the firing's due time.",
                )
                .buckets(lateness_buckets),
            )
            .expect("valid metric"),
            start_decision: Histogram::with_opts(
                HistogramOpts::new(
                    "chime_worker_start_decision_seconds",
                    "Start request to the scheduler's answer (accepted, refused or none).",
                )
                .buckets(vec![
                    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                ]),
            )
            .expect("valid metric"),
            fetch_errors: IntCounter::new(
                "chime_worker_fetch_errors_total",
                "Failed fetches from the firing consumers.",
            )
            .expect("valid metric"),
            start_refusals: IntCounterVec::new(
                Opts::new(
                    "chime_worker_start_refusals_total",
                    "Fetched firings not run, by reason.",
                ),
                &["reason"],
            )
            .expect("valid metric"),
            bad_messages: IntCounter::new(
                "chime_worker_bad_messages_total",
                "Messages terminated because they were not valid firings.",
            )
            .expect("valid metric"),
            report_retries: IntCounter::new(
                "chime_worker_report_retries_total",
                "Finished-event publishes that failed once and were retried.",
            )
            .expect("valid metric"),
            fenced: IntCounter::new(
                "chime_worker_fenced_total",
                "Times the worker fenced itself: no heartbeat written for its lease, so its runs were stopped and fetching paused.",
            )
            .expect("valid metric"),
            service_restarts: IntCounterVec::new(
                Opts::new(
                    "chime_service_restarts_total",
                    "Restarts of a supervised service after it panicked or stopped early.",
                ),
                &["service"],
            )
            .expect("valid metric"),
            clock_offset: Gauge::new(
                "chime_clock_offset_seconds",
                "Local clock minus the NATS server's (positive: ahead), the smallest sample of the last 5 minutes of fetched firings; an upper bound.",
            )
            .expect("valid metric"),
            registry,
        };
        let collectors: Vec<Box<dyn prometheus::core::Collector>> = vec![
            Box::new(metrics.in_flight.clone()),
            Box::new(metrics.free_threads.clone()),
            Box::new(metrics.threads.clone()),
            Box::new(metrics.firings.clone()),
            Box::new(metrics.run_duration.clone()),
            Box::new(metrics.start_lateness.clone()),
            Box::new(metrics.start_decision.clone()),
            Box::new(metrics.fetch_errors.clone()),
            Box::new(metrics.start_refusals.clone()),
            Box::new(metrics.bad_messages.clone()),
            Box::new(metrics.report_retries.clone()),
            Box::new(metrics.fenced.clone()),
            Box::new(metrics.service_restarts.clone()),
            Box::new(metrics.clock_offset.clone()),
        ];
        for collector in collectors {
            metrics
                .registry
                .register(collector)
                .expect("metric names are unique in a fresh registry");
        }
        metrics
    }

    /// The registry, for serving.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// Prometheus text exposition of every metric.
    pub fn render(&self) -> String {
        let mut out = String::new();
        if let Err(e) =
            prometheus::TextEncoder::new().encode_utf8(&self.registry.gather(), &mut out)
        {
            tracing::warn!(error = %e, "cannot encode metrics");
        }
        out
    }

    /// Records the number of firings held.
    pub(crate) fn set_in_flight(&self, in_flight: usize, threads: usize) {
        self.in_flight.set(in_flight as i64);
        self.free_threads
            .set(threads.saturating_sub(in_flight) as i64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_metric_is_exposed_under_its_contract_name() {
        let metrics = Metrics::new("reports");
        metrics.threads.set(4);
        metrics.set_in_flight(1, 4);
        metrics
            .firings
            .with_label_values(&["shell", "succeeded"])
            .inc();
        metrics
            .run_duration
            .with_label_values(&["shell"])
            .observe(0.2);
        metrics
            .start_refusals
            .with_label_values(&["already_started"])
            .inc();
        metrics.start_lateness.observe(0.004);
        let text = metrics.render();
        for name in [
            "chime_worker_in_flight{group=\"reports\"} 1",
            "chime_worker_free_threads{group=\"reports\"} 3",
            "chime_worker_threads{group=\"reports\"} 4",
            "chime_worker_firings_total{handler=\"shell\",outcome=\"succeeded\",group=\"reports\"} 1",
            "chime_worker_run_duration_seconds_bucket{handler=\"shell\",group=\"reports\"",
            "chime_worker_start_lateness_seconds_bucket{group=\"reports\",le=\"0.001\"} 0",
            "chime_worker_fetch_errors_total{group=\"reports\"} 0",
            "chime_worker_start_refusals_total{reason=\"already_started\",group=\"reports\"} 1",
            "chime_worker_bad_messages_total{group=\"reports\"} 0",
            "chime_worker_fenced_total{group=\"reports\"} 0",
            "chime_clock_offset_seconds{group=\"reports\"} 0",
        ] {
            assert!(text.contains(name), "{name} missing from\n{text}");
        }
    }
}
