//! The scheduler's Prometheus metrics, one registry per replica.
//!
//! Names follow `chime_<noun>_<unit>`; labels are small bounded sets (group,
//! verb, outcome, kind). Job ids label only the per-job freshness gauges,
//! behind the cap `--job-metrics-limit` (`ops/job_metrics.rs` keeps them);
//! webhook URLs, without credentials or query, label the webhook counters.
//! A registry per replica (not a global) lets tests run several replicas in
//! one process.

use prometheus::{
    Encoder, Gauge, GaugeVec, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec,
    IntGauge, IntGaugeVec, Opts, Registry, TextEncoder,
};

/// Buckets for lateness: 100 µs to 60 s.
const LATENESS_BUCKETS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
    10.0, 30.0, 60.0,
];

/// Buckets for a firing's start lateness: 10 ms to an hour (a group with no
/// worker for a while is the case `max_lateness` is for).
const FIRING_LATENESS_BUCKETS: &[f64] = &[
    0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0,
];

/// Every metric a scheduler replica exports.
#[derive(Clone)]
pub struct Metrics {
    pub registry: Registry,
    /// Firings published to JetStream, by group.
    pub firings_published: IntCounterVec,
    /// Publish time minus due time.
    pub publish_lateness: Histogram,
    /// Publishes JetStream acknowledged as duplicates (another replica or a
    /// retry had already published that firing id; dedup dropped this one).
    pub publish_duplicates: IntCounter,
    /// Publishes that failed and were retried.
    pub publish_errors: IntCounter,
    /// Slices this replica claimed.
    pub slices_claimed: IntCounter,
    /// Slices this replica took over from a replica that did not finish them.
    pub slices_taken_over: IntCounter,
    /// Firings staged in this replica's wheel, waiting for their instant.
    pub wheel_staged: IntGauge,
    /// Seconds spent staging one slice in the store.
    pub stage_duration: Histogram,
    /// Time to decide one batch of start requests in the store.
    pub start_batch_duration: Histogram,
    /// Start time minus the firing's instant (`due_at` for a retry), by group.
    pub firing_lateness: HistogramVec,
    /// Firings that started later than their job's `max_lateness`, by group.
    pub firings_late: IntCounterVec,
    /// Start requests a concurrency limit held back, by group and limit
    /// (`job`, `group`, `rate`).
    pub firings_held: IntCounterVec,
    /// How long a firing a limit held waited, from its first hold to its
    /// start, by group and the limit that held it last.
    pub limit_wait: HistogramVec,
    /// Instants recorded `skipped` that raised a `missed` alert, by group and
    /// cause (`misfire`, `calendar`).
    pub firings_missed: IntCounterVec,
    /// Published firings published again because their message was gone
    /// from the stream before any worker started them, by group and cause
    /// (`message_gone`, `message_replaced`).
    pub firings_republished: IntCounterVec,
    /// Instants found later than their job's misfire threshold.
    pub misfires: IntCounter,
    /// Instants recorded `skipped` (misfire policy) while staging.
    pub misfire_skipped: IntCounter,
    /// API requests by verb and outcome (`ok` or an error code).
    pub api_requests: IntCounterVec,
    /// Requests dropped unanswered because their reply subject is not an
    /// inbox, by kind (`api`, `start`).
    pub replies_refused: IntCounterVec,
    /// Durable submissions applied.
    pub submit_applied: IntCounter,
    /// Durable submissions rejected to `chime.submit.rejected`.
    pub submit_rejected: IntCounter,
    /// Start requests by decision (`accepted` or a refusal reason).
    pub starts: IntCounterVec,
    /// Finished firings by outcome (the firing's resulting state).
    pub firings_finished: IntCounterVec,
    /// Retries scheduled after a failed attempt.
    pub retries: IntCounter,
    /// Firings skipped by the overlap policy.
    pub overlap_skipped: IntCounter,
    /// Attempts ended by a fault of the infrastructure and run again
    /// without spending the job's attempts, by group and cause
    /// ([`RequeueCause`](crate::recovery::requeue::RequeueCause)).
    pub requeued: IntCounterVec,
    /// Instants that spent their infrastructure budget and ended `failed`, by group.
    pub infra_retries_exhausted: IntCounterVec,
    /// Firings that ended `lost`.
    pub lost: IntCounter,
    /// Alerts published, by kind.
    pub alerts: IntCounterVec,
    /// Firings by group and live state (staged, published, executing), from the store.
    pub firings_by_state: IntGaugeVec,
    /// 1 while this replica holds the expiry/housekeeping lease.
    pub leader: IntGauge,
    /// Store operations that failed, by operation.
    pub store_errors: IntCounterVec,
    /// Staged firings rescued by housekeeping after their slice owner failed to publish them.
    pub rescued: IntCounter,
    /// History rows pruned by retention.
    pub pruned: IntCounter,
    /// Messages moved to `chime.dead.<kind>` after their retries, by kind
    /// (`finished`, `start`, `submit`).
    pub dead_letters: IntCounterVec,
    /// Restarts of a supervised service after it panicked, failed or stopped, by service.
    pub service_restarts: IntCounterVec,
    /// The database clock minus this replica's clock, last measured.
    pub clock_offset: Gauge,
    /// Unix time of each job's newest succeeded firing, by job and group
    /// (at most `--job-metrics-limit` jobs).
    pub job_last_success: GaugeVec,
    /// Unix time of each job's newest failed, timed out or lost firing.
    pub job_last_failure: GaugeVec,
    /// Jobs left without per-job series by `--job-metrics-limit`.
    pub job_metrics_dropped: IntGauge,
    /// Alerts a webhook answered with a 2xx, by URL (credentials and query removed).
    pub alert_webhook_deliveries: IntCounterVec,
    /// POSTs of an alert to a webhook after its first, by URL.
    pub alert_webhook_retries: IntCounterVec,
    /// Alerts given up on for a webhook and dead-lettered, by URL.
    pub alert_webhook_failures: IntCounterVec,
}

fn gauge_vec(registry: &Registry, name: &str, help: &str, labels: &[&str]) -> GaugeVec {
    let g = GaugeVec::new(Opts::new(name, help), labels).expect("valid metric name");
    registry
        .register(Box::new(g.clone()))
        .expect("metric registered once");
    g
}

fn int_gauge(registry: &Registry, name: &str, help: &str) -> IntGauge {
    let g = IntGauge::new(name, help).expect("valid metric name");
    registry
        .register(Box::new(g.clone()))
        .expect("metric registered once");
    g
}

fn counter(registry: &Registry, name: &str, help: &str) -> IntCounter {
    let c = IntCounter::new(name, help).expect("valid metric name");
    registry
        .register(Box::new(c.clone()))
        .expect("metric registered once");
    c
}

fn counter_vec(registry: &Registry, name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    let c = IntCounterVec::new(Opts::new(name, help), labels).expect("valid metric name");
    registry
        .register(Box::new(c.clone()))
        .expect("metric registered once");
    c
}

fn histogram_vec(
    registry: &Registry,
    name: &str,
    help: &str,
    buckets: &[f64],
    labels: &[&str],
) -> HistogramVec {
    let h = HistogramVec::new(
        HistogramOpts::new(name, help).buckets(buckets.to_vec()),
        labels,
    )
    .expect("valid metric name");
    registry
        .register(Box::new(h.clone()))
        .expect("metric registered once");
    h
}

fn histogram(registry: &Registry, name: &str, help: &str, buckets: &[f64]) -> Histogram {
    let h = Histogram::with_opts(HistogramOpts::new(name, help).buckets(buckets.to_vec()))
        .expect("valid metric name");
    registry
        .register(Box::new(h.clone()))
        .expect("metric registered once");
    h
}

/// The `cause` labels of the per-group counters, started at zero together.
const REQUEUE_CAUSES: [&str; 5] = ["vanished", "deadline", "not_running", "fenced", "shutdown"];
const REPUBLISH_CAUSES: [&str; 3] = ["message_gone", "message_replaced", "duplicate_ack"];
const MISSED_CAUSES: [&str; 2] = ["misfire", "calendar"];
const HOLD_LIMITS: [&str; 3] = ["job", "group", "rate"];

impl Metrics {
    /// Creates `group`'s series of the per-group counters at zero.
    pub fn start_group_at_zero(&self, group: &str) {
        for cause in REQUEUE_CAUSES {
            self.requeued.with_label_values(&[group, cause]);
        }
        for cause in REPUBLISH_CAUSES {
            self.firings_republished.with_label_values(&[group, cause]);
        }
        for cause in MISSED_CAUSES {
            self.firings_missed.with_label_values(&[group, cause]);
        }
        for limit in HOLD_LIMITS {
            self.firings_held.with_label_values(&[group, limit]);
        }
        self.infra_retries_exhausted.with_label_values(&[group]);
        self.firings_late.with_label_values(&[group]);
        self.firings_published.with_label_values(&[group]);
    }

    /// Creates the series of webhook `url` (its label form) at zero.
    pub fn start_webhook_at_zero(&self, url: &str) {
        self.alert_webhook_deliveries.with_label_values(&[url]);
        self.alert_webhook_retries.with_label_values(&[url]);
        self.alert_webhook_failures.with_label_values(&[url]);
    }

    /// A fresh registry with every metric registered.
    pub fn new() -> Self {
        let r = Registry::new();
        let firings_by_state = IntGaugeVec::new(
            Opts::new(
                "chime_firings",
                "Firings by group and live state (staged, published, executing).",
            ),
            &["group", "state"],
        )
        .expect("valid metric name");
        r.register(Box::new(firings_by_state.clone()))
            .expect("metric registered once");
        let wheel_staged = IntGauge::new(
            "chime_wheel_staged_firings",
            "Firings held in this replica's time wheel.",
        )
        .expect("valid metric name");
        r.register(Box::new(wheel_staged.clone()))
            .expect("metric registered once");
        let leader = IntGauge::new(
            "chime_leader",
            "1 while this replica runs the expiry monitor and housekeeping.",
        )
        .expect("valid metric name");
        r.register(Box::new(leader.clone()))
            .expect("metric registered once");
        let clock_offset = Gauge::new(
            "chime_clock_offset_seconds",
            "The database clock minus this replica's clock, last measured.",
        )
        .expect("valid metric name");
        r.register(Box::new(clock_offset.clone()))
            .expect("metric registered once");
        let metrics = Metrics {
            firings_published: counter_vec(
                &r,
                "chime_firings_published_total",
                "Firings published to JetStream.",
                &["group"],
            ),
            publish_lateness: histogram(
                &r,
                "chime_publish_lateness_seconds",
                "Publish time minus due time.",
                LATENESS_BUCKETS,
            ),
            firing_lateness: histogram_vec(
                &r,
                "chime_firing_lateness_seconds",
                "Start time minus the firing's instant (due time for a retry).",
                FIRING_LATENESS_BUCKETS,
                &["group"],
            ),
            firings_late: counter_vec(
                &r,
                "chime_firings_late_total",
                "Firings that started later than their job's max_lateness.",
                &["group"],
            ),
            firings_held: counter_vec(
                &r,
                "chime_firings_held_total",
                "Start requests held back by a concurrency limit (job, group or rate).",
                &["group", "limit"],
            ),
            limit_wait: histogram_vec(
                &r,
                "chime_limit_wait_seconds",
                "How long a firing held by a concurrency limit waited to start.",
                FIRING_LATENESS_BUCKETS,
                &["group", "limit"],
            ),
            firings_missed: counter_vec(
                &r,
                "chime_firings_missed_total",
                "Instants skipped (misfire, or a calendar with alert_on_excluded) that raised a missed alert.",
                &["group", "cause"],
            ),
            firings_republished: counter_vec(
                &r,
                "chime_firings_republished_total",
                "Published firings published again because their message left the stream before any worker started them.",
                &["group", "cause"],
            ),
            publish_duplicates: counter(
                &r,
                "chime_publish_duplicates_total",
                "Publishes acknowledged as duplicates and dropped by JetStream dedup.",
            ),
            publish_errors: counter(
                &r,
                "chime_publish_errors_total",
                "Firing publishes that failed and were retried.",
            ),
            slices_claimed: counter(
                &r,
                "chime_slices_claimed_total",
                "Time slices this replica claimed.",
            ),
            slices_taken_over: counter(
                &r,
                "chime_slices_taken_over_total",
                "Time slices taken over from a replica that did not publish them.",
            ),
            wheel_staged,
            stage_duration: histogram(
                &r,
                "chime_stage_duration_seconds",
                "Time to stage one slice in the store.",
                LATENESS_BUCKETS,
            ),
            start_batch_duration: histogram(
                &r,
                "chime_start_batch_duration_seconds",
                "Time to decide one batch of start requests in the store.",
                LATENESS_BUCKETS,
            ),
            misfires: counter(
                &r,
                "chime_misfires_total",
                "Instants found later than their misfire threshold.",
            ),
            misfire_skipped: counter(
                &r,
                "chime_misfire_skipped_total",
                "Late instants recorded skipped by the misfire policy.",
            ),
            api_requests: counter_vec(
                &r,
                "chime_api_requests_total",
                "API requests by verb and outcome.",
                &["verb", "outcome"],
            ),
            replies_refused: counter_vec(
                &r,
                "chime_replies_refused_total",
                "Requests dropped unanswered because their reply subject is not an inbox.",
                &["kind"],
            ),
            submit_applied: counter(
                &r,
                "chime_submit_applied_total",
                "Durable submissions applied.",
            ),
            submit_rejected: counter(
                &r,
                "chime_submit_rejected_total",
                "Durable submissions rejected.",
            ),
            starts: counter_vec(
                &r,
                "chime_starts_total",
                "Start requests by decision.",
                &["decision"],
            ),
            firings_finished: counter_vec(
                &r,
                "chime_firings_finished_total",
                "Finished firings by outcome.",
                &["outcome"],
            ),
            retries: counter(
                &r,
                "chime_retries_total",
                "Retries scheduled after a failed attempt.",
            ),
            overlap_skipped: counter(
                &r,
                "chime_overlap_skipped_total",
                "Firings skipped by the overlap policy.",
            ),
            requeued: counter_vec(
                &r,
                "chime_firings_requeued_total",
                "Attempts ended by a fault of the infrastructure (worker vanished, deadline passed unreported, not running on its worker, fenced, cut by a shutdown) and run again without spending the job's attempts.",
                &["group", "cause"],
            ),
            infra_retries_exhausted: counter_vec(
                &r,
                "chime_infra_retries_exhausted_total",
                "Firings ended failed because their instant had already been run again --infra-retries times after faults of the infrastructure.",
                &["group"],
            ),
            lost: counter(&r, "chime_firings_lost_total", "Firings that ended lost."),
            alerts: counter_vec(
                &r,
                "chime_alerts_total",
                "Alerts published, by kind.",
                &["kind"],
            ),
            firings_by_state,
            leader,
            store_errors: counter_vec(
                &r,
                "chime_store_errors_total",
                "Store operations that failed.",
                &["op"],
            ),
            rescued: counter(
                &r,
                "chime_firings_rescued_total",
                "Staged firings published by housekeeping after their slice owner failed.",
            ),
            pruned: counter(
                &r,
                "chime_history_pruned_total",
                "History rows removed by retention.",
            ),
            dead_letters: counter_vec(
                &r,
                "chime_dead_letters_total",
                "Messages moved to the dead-letter stream after their retries, by kind.",
                &["kind"],
            ),
            service_restarts: counter_vec(
                &r,
                "chime_service_restarts_total",
                "Restarts of a supervised service after it panicked, failed or stopped.",
                &["service"],
            ),
            clock_offset,
            job_last_success: gauge_vec(
                &r,
                "chime_job_last_success_timestamp_seconds",
                "Unix time of the job's newest succeeded firing (at most --job-metrics-limit jobs).",
                &["job", "group"],
            ),
            job_last_failure: gauge_vec(
                &r,
                "chime_job_last_failure_timestamp_seconds",
                "Unix time of the job's newest failed, timed out or lost firing (at most --job-metrics-limit jobs).",
                &["job", "group"],
            ),
            job_metrics_dropped: int_gauge(
                &r,
                "chime_job_metrics_dropped",
                "Jobs with a finished firing left without per-job series by --job-metrics-limit.",
            ),
            alert_webhook_deliveries: counter_vec(
                &r,
                "chime_alert_webhook_deliveries_total",
                "Alerts a webhook answered with a 2xx status.",
                &["url"],
            ),
            alert_webhook_retries: counter_vec(
                &r,
                "chime_alert_webhook_retries_total",
                "POSTs of an alert to a webhook after its first try.",
                &["url"],
            ),
            alert_webhook_failures: counter_vec(
                &r,
                "chime_alert_webhook_failures_total",
                "Alerts given up on for a webhook after their tries and moved to chime.dead.webhook.",
                &["url"],
            ),
            registry: r,
        };
        metrics.initialise_series();
        metrics
    }

    /// Creates the series of every known label value at zero, so dashboards
    /// and alerts see 0 rather than "no data" before the first event.
    fn initialise_series(&self) {
        for op in [
            "stage_slice",
            "slice_firings",
            "mark_published",
            "start",
            "finish",
            "requeue",
            "submit",
            "housekeeping",
            "maintenance",
            "job_metrics",
        ] {
            self.store_errors.with_label_values(&[op]);
        }
        for outcome in ["succeeded", "failed", "cancelled", "lost"] {
            self.firings_finished.with_label_values(&[outcome]);
        }
        for kind in [
            "firing_failed",
            "firing_lost",
            "repeated_failures",
            "not_started",
            "dead_letter",
            "stream_full",
            "clock_offset",
            "late",
            "missed",
            "not_running",
        ] {
            self.alerts.with_label_values(&[kind]);
        }
        for kind in ["finished", "start", "submit", "webhook"] {
            self.dead_letters.with_label_values(&[kind]);
        }
        for decision in [
            "accepted",
            "already_started",
            "already_finished",
            "unknown_firing",
            "skipped",
            "queued",
            "cancelled",
        ] {
            self.starts.with_label_values(&[decision]);
        }
    }

    /// The registry in Prometheus text format.
    pub fn render(&self) -> String {
        let mut buf = Vec::new();
        let encoder = TextEncoder::new();
        if encoder.encode(&self.registry.gather(), &mut buf).is_err() {
            return String::new();
        }
        String::from_utf8(buf).unwrap_or_default()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}
