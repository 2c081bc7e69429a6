//! `chime-scheduler`: one scheduler replica. Run as many as you like.

use anyhow::Context as _;
use chime_common::duration::parse_duration;
use chime_common::Subjects;
use chime_runtime::connection::{NatsConnection, ReplyCredentials};
use chime_scheduler::config::{default_replica_id, SchedulerConfig};
use chime_scheduler::intake::web::host::AllowedHosts;
use chime_scheduler::intake::web::users::{hash_password, Users};
use chime_scheduler::intake::web::WebConfig;
use chime_scheduler::ops::webhooks::{read_secret_file, WebhookTarget};
use chime_scheduler::Replica;
use clap::Parser;
use std::net::SocketAddr;
use std::time::Duration;

/// glibc's allocator spent about a third of the scheduler's CPU in a burst
/// (`_int_malloc`, `malloc_consolidate`, `unlink_chunk` under `perf`):
/// every firing allocates its headers, payload and ack future on one thread
/// and frees them on another.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn duration(s: &str) -> Result<Duration, String> {
    parse_duration(&serde_json::Value::String(s.to_string()))
}

/// A Chime scheduler replica: serves the API, claims time slices, publishes firings,
/// tracks their execution and re-queues lost ones.
#[derive(Debug, Parser)]
#[command(name = "chime-scheduler", version, about)]
struct Args {
    #[command(flatten)]
    nats: NatsConnection,
    #[command(flatten)]
    reply_credentials: ReplyCredentials,
    /// At start-up, keep trying to reach NATS this long before giving up.
    #[arg(long, env = "CHIME_NATS_CONNECT_WAIT", default_value = "60s", value_parser = duration)]
    nats_connect_wait: Duration,
    /// Subject prefix, for several isolated installations on one NATS.
    #[arg(long, env = "CHIME_SUBJECT_PREFIX", default_value = "chime")]
    subject_prefix: String,
    /// Database: postgres://… for several replicas, sqlite://FILE for one (created if missing).
    #[arg(long, env = "CHIME_DATABASE_URL", default_value = "sqlite://chime.db")]
    database_url: String,
    /// File holding the database password (a mounted secret), for a
    /// postgres:// URL written without one.
    #[arg(long, env = "CHIME_DATABASE_PASSWORD_FILE")]
    database_password_file: Option<std::path::PathBuf>,
    /// Where /metrics, /healthz and /readyz are served.
    #[arg(long, env = "CHIME_METRICS_ADDR", default_value = "127.0.0.1:9464")]
    metrics_addr: SocketAddr,
    /// This replica's id (default: hostname plus a random suffix).
    #[arg(long, env = "CHIME_REPLICA_ID")]
    replica_id: Option<String>,
    /// Replicas of JetStream streams and buckets (3 on a cluster).
    #[arg(long, env = "CHIME_STREAM_REPLICAS", default_value_t = 1)]
    stream_replicas: usize,
    /// Length of a time slice.
    #[arg(long, env = "CHIME_SLICE", default_value = "1s", value_parser = duration)]
    slice: Duration,
    /// How far ahead slices are claimed.
    #[arg(long, env = "CHIME_LOOKAHEAD", default_value = "3s", value_parser = duration)]
    lookahead: Duration,
    /// A slice partition with at least --dense-jobs jobs due is claimed and staged this far ahead.
    #[arg(long, env = "CHIME_DENSE_HORIZON", default_value = "15s", value_parser = duration)]
    dense_horizon: Duration,
    /// Jobs due in one slice partition that make it dense (staged at --dense-horizon).
    #[arg(long, env = "CHIME_DENSE_JOBS", default_value_t = 20000)]
    dense_jobs: u32,
    /// Partitions per slice, so several replicas share one slice. Every replica must use the same value.
    #[arg(long, env = "CHIME_PARTITIONS", default_value_t = 1)]
    partitions: u32,
    /// `misfire: fire_all` catches up at most this many instants per job at once.
    #[arg(long, env = "CHIME_MAX_CATCH_UP", default_value_t = 100)]
    max_catch_up: u32,
    /// JetStream duplicate window of the firing stream.
    #[arg(long, env = "CHIME_DUPLICATE_WINDOW", default_value = "2m", value_parser = duration)]
    duplicate_window: Duration,
    /// Size limit of the firing stream in bytes (reserved on the NATS server's disk).
    #[arg(long, env = "CHIME_FIRE_STREAM_MAX_BYTES", default_value_t = 256 * 1024 * 1024)]
    fire_stream_max_bytes: i64,
    /// Size limit of the firing stream in messages.
    #[arg(long, env = "CHIME_FIRE_STREAM_MAX_MSGS", default_value_t = 1_000_000)]
    fire_stream_max_msgs: i64,
    /// Largest accepted job payload, in bytes.
    #[arg(long, env = "CHIME_MAX_PAYLOAD", default_value_t = 64 * 1024)]
    max_payload: usize,
    /// Finished firings older than this are pruned from history.
    #[arg(long, env = "CHIME_HISTORY_RETENTION", default_value = "7d", value_parser = duration)]
    history_retention: Duration,
    /// History always keeps the newest this many firings per job.
    #[arg(long, env = "CHIME_HISTORY_KEEP", default_value_t = 100)]
    history_keep: u32,
    /// A published firing that no worker started for this long, whose
    /// message still waits in the stream, raises a `not_started` alert.
    #[arg(long, env = "CHIME_NOT_STARTED_AFTER", default_value = "60s", value_parser = duration)]
    not_started_after: Duration,
    /// How many times one instant is run again after faults of the
    /// infrastructure (lost or silent worker, fenced or drained run, a start
    /// its worker never ran), without spending the job's max_attempts; past
    /// it the firing ends failed with an alert.
    #[arg(long, env = "CHIME_INFRA_RETRIES", default_value_t = chime_scheduler::store::DEFAULT_INFRA_RETRIES)]
    infra_retries: u32,
    /// A published firing that no worker started for this long has its
    /// message looked up in the stream, and is published again if it is gone.
    #[arg(long, env = "CHIME_REPUBLISH_AFTER", default_value = "15s", value_parser = duration)]
    republish_after: Duration,
    /// Copies of a firing published again before it ends `failed`.
    #[arg(long, env = "CHIME_MAX_REPUBLISHES", default_value_t = 3)]
    max_republishes: u32,
    /// How often the expiry monitor scans executing firings.
    #[arg(long, env = "CHIME_EXPIRY_INTERVAL", default_value = "1s", value_parser = duration)]
    expiry_interval: Duration,
    /// Above this offset from the database clock the replica claims no
    /// slices, is not ready and raises a `clock_offset` alert.
    #[arg(long, env = "CHIME_MAX_CLOCK_OFFSET", default_value = "500ms", value_parser = duration)]
    max_clock_offset: Duration,
    /// On SIGTERM, keep publishing staged firings for at most this long.
    #[arg(long, env = "CHIME_SHUTDOWN_DRAIN", default_value = "10s", value_parser = duration)]
    shutdown_drain: Duration,
    /// Log format: text or json.
    #[arg(long, env = "CHIME_LOG_FORMAT", default_value = "text", value_parser = ["text", "json"])]
    log_format: String,
    /// Serve the HTTP API under /api/v1/ and the web console at / on this address (off by default).
    #[arg(long, env = "CHIME_HTTP_ADDR")]
    http_addr: Option<SocketAddr>,
    /// File of HTTP users, one `name:role:argon2-hash` per line (role viewer, operator or admin;
    /// `chime-scheduler hash-password` makes the hash).
    #[arg(long, env = "CHIME_HTTP_USERS")]
    http_users: Option<std::path::PathBuf>,
    /// No user accounts, for local development: refused unless --http-addr is a loopback
    /// address; the console's address printed at start-up carries the one token that opens it.
    #[arg(long, env = "CHIME_HTTP_OPEN")]
    http_open: bool,
    /// The --http-open token (default: a new random one at each start).
    #[arg(long, env = "CHIME_HTTP_OPEN_TOKEN", hide_env_values = true)]
    http_open_token: Option<chime_runtime::secret::Secret>,
    /// The Host names the HTTP API answers, comma-separated; a request naming another is
    /// refused (421). Default: the loopback names with --http-open, every name otherwise.
    #[arg(long, env = "CHIME_HTTP_ALLOWED_HOSTS")]
    http_allowed_hosts: Option<String>,
    /// How long a console login lasts.
    #[arg(long, env = "CHIME_HTTP_SESSION_TTL", default_value = "12h", value_parser = duration)]
    http_session_ttl: Duration,
    /// NATS users answered as HTTP viewers are, job payloads redacted to their digest; each is
    /// recognised by its reply inbox `_INBOX.<user>`, which only it may read (docs/SECURITY.md).
    #[arg(
        long,
        env = "CHIME_NATS_READ_ONLY_USERS",
        value_delimiter = ',',
        default_value = "chime-viewer"
    )]
    nats_read_only_users: Vec<String>,
    /// Audit entries (mutating API requests) older than this are pruned.
    #[arg(long, env = "CHIME_AUDIT_RETENTION", default_value = "90d", value_parser = duration)]
    audit_retention: Duration,
    /// At most this many jobs get the per-job series
    /// chime_job_last_success_timestamp_seconds and
    /// chime_job_last_failure_timestamp_seconds (the first by id); past it a
    /// warning and chime_job_metrics_dropped say how many were left out.
    #[arg(long, env = "CHIME_JOB_METRICS_LIMIT", default_value_t = 10_000)]
    job_metrics_limit: usize,
    /// How often each replica reads every job's newest ends from the store
    /// (a finish recorded on another replica shows within this long).
    #[arg(long, env = "CHIME_JOB_METRICS_INTERVAL", default_value = "15s", value_parser = duration)]
    job_metrics_interval: Duration,
    /// POST every alert, as its JSON object, to this http:// or https:// URL
    /// (repeatable; the environment variable takes them comma-separated).
    #[arg(
        long = "alert-webhook",
        env = "CHIME_ALERT_WEBHOOKS",
        value_delimiter = ',',
        hide_env_values = true
    )]
    alert_webhooks: Vec<String>,
    /// File whose first line is the key of the X-Chime-Signature header
    /// (sha256=<hex HMAC-SHA256 of the body>) on every webhook POST.
    #[arg(long, env = "CHIME_ALERT_WEBHOOK_SECRET_FILE")]
    alert_webhook_secret_file: Option<std::path::PathBuf>,
    /// POSTs of one alert to one webhook, the first included, before it is
    /// dead-lettered (1-20).
    #[arg(long, env = "CHIME_ALERT_WEBHOOK_TRIES", default_value_t = 5)]
    alert_webhook_tries: u32,
    /// The pause before a webhook's second try; it doubles after each, up to 30s.
    #[arg(long, env = "CHIME_ALERT_WEBHOOK_BACKOFF", default_value = "1s", value_parser = duration)]
    alert_webhook_backoff: Duration,
    /// Every try of one alert to one webhook ends within this long of the first.
    #[arg(long, env = "CHIME_ALERT_WEBHOOK_DEADLINE", default_value = "2m", value_parser = duration)]
    alert_webhook_deadline: Duration,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, clap::Subcommand)]
enum Command {
    /// Reads a password on standard input (its first line) and prints its
    /// argon2 hash for an --http-users file.
    HashPassword,
}

impl Args {
    fn into_config(self) -> anyhow::Result<SchedulerConfig> {
        let database_url = match &self.database_password_file {
            Some(file) => with_password_from(&self.database_url, file)?,
            None => self.database_url,
        };
        let mut config = SchedulerConfig::new(self.nats.url.clone(), database_url);
        config.nats = self.nats;
        config.reply_credentials = self.reply_credentials;
        config.nats_connect_wait = self.nats_connect_wait;
        Subjects::validate_prefix(&self.subject_prefix)
            .map_err(|e| anyhow::anyhow!("--subject-prefix: {e}"))?;
        config.subjects = Subjects::new(self.subject_prefix);
        config.metrics_addr = Some(self.metrics_addr);
        config.replica_id = self.replica_id.unwrap_or_else(default_replica_id);
        if chime_common::bounds::check_name(&config.replica_id, 64).is_err()
            || config.replica_id.contains('.')
        {
            anyhow::bail!("--replica-id: use 1 to 64 of A-Z a-z 0-9 _ -");
        }
        anyhow::ensure!(
            (1..=5).contains(&self.stream_replicas),
            "--stream-replicas must be from 1 to 5"
        );
        config.topology.replicas = self.stream_replicas;
        config.topology.duplicate_window = self.duplicate_window;
        anyhow::ensure!(
            self.fire_stream_max_bytes >= 1024 * 1024,
            "--fire-stream-max-bytes must be at least 1 MiB"
        );
        anyhow::ensure!(
            self.fire_stream_max_msgs >= 1000,
            "--fire-stream-max-msgs must be at least 1000"
        );
        config.topology.fire_max_bytes = self.fire_stream_max_bytes;
        config.topology.fire_max_msgs = self.fire_stream_max_msgs;
        config.slicer.slice = self.slice;
        config.slicer.lookahead = self.lookahead;
        config.slicer.dense_horizon = self.dense_horizon;
        config.slicer.dense_jobs = self.dense_jobs;
        config.slicer.partitions = self.partitions;
        config.slicer.max_catch_up = self.max_catch_up;
        config.store.partitions = self.partitions;
        config.store.infra_retries = self.infra_retries;
        anyhow::ensure!(
            self.max_payload >= 1024,
            "--max-payload must be at least 1024 bytes"
        );
        config.api.limits.max_payload_bytes = self.max_payload;
        config.submit.limits.max_payload_bytes = self.max_payload;
        config.store.limits.max_payload_bytes = self.max_payload;
        config.housekeeping.retention = self.history_retention;
        config.housekeeping.keep_per_job = self.history_keep;
        config.housekeeping.audit_retention = self.audit_retention;
        if let Some(addr) = self.http_addr {
            let mut web = WebConfig::new(addr);
            web.open = self.http_open;
            if let Some(token) = self.http_open_token {
                web.open_token = token;
            }
            if let Some(hosts) = &self.http_allowed_hosts {
                web.allowed_hosts = Some(AllowedHosts::parse(hosts).map_err(anyhow::Error::msg)?);
            }
            web.session_ttl = self.http_session_ttl;
            if let Some(file) = &self.http_users {
                web.users = Users::load(file).map_err(anyhow::Error::msg)?;
            }
            config.web = Some(web);
        } else {
            anyhow::ensure!(
                !self.http_open && self.http_users.is_none() && self.http_allowed_hosts.is_none(),
                "--http-open, --http-users and --http-allowed-hosts need --http-addr"
            );
        }
        config.api.read_only_users = self
            .nats_read_only_users
            .iter()
            .map(|u| u.trim().to_string())
            .filter(|u| !u.is_empty())
            .collect();
        config.republish.not_started_after = self.not_started_after;
        config.republish.after = self.republish_after;
        config.republish.max_republishes = self.max_republishes;
        config.expiry.interval = self.expiry_interval;
        config.shutdown_drain = self.shutdown_drain;
        config.clock.max_offset = self.max_clock_offset;
        config.job_metrics.limit = self.job_metrics_limit;
        config.job_metrics.interval = self.job_metrics_interval;
        let webhooks = &mut config.webhooks;
        // A variable set but empty (a Compose default) names no webhook.
        let urls: Vec<&String> = self
            .alert_webhooks
            .iter()
            .filter(|url| !url.trim().is_empty())
            .collect();
        webhooks.targets = WebhookTarget::parse_all(&urls).map_err(anyhow::Error::msg)?;
        if let Some(file) = &self.alert_webhook_secret_file {
            webhooks.secret = Some(read_secret_file(file).map_err(anyhow::Error::msg)?);
        }
        webhooks.delivery.tries = self.alert_webhook_tries;
        webhooks.delivery.backoff = self.alert_webhook_backoff;
        webhooks.delivery.deadline = self.alert_webhook_deadline;
        config.validate().map_err(anyhow::Error::msg)?;
        Ok(config)
    }
}

/// `url` with the password read from `file` (its first line), so the secret
/// can live in a mounted file instead of the environment.
fn with_password_from(url: &str, file: &std::path::Path) -> anyhow::Result<String> {
    let what = "--database-password-file";
    let mut parsed = url::Url::parse(url)
        .map_err(|_| anyhow::anyhow!("{what} needs a postgres:// --database-url"))?;
    anyhow::ensure!(
        matches!(parsed.scheme(), "postgres" | "postgresql"),
        "{what} needs a postgres:// --database-url"
    );
    anyhow::ensure!(
        parsed.password().is_none(),
        "{what}: --database-url already holds a password; give it in one place"
    );
    let text = std::fs::read_to_string(file)
        .map_err(|e| anyhow::anyhow!("{what}: cannot read {}: {e}", file.display()))?;
    let password = text.lines().next().unwrap_or("");
    anyhow::ensure!(!password.is_empty(), "{what}: {} is empty", file.display());
    // set_password percent-encodes; sqlx decodes.
    parsed
        .set_password(Some(password))
        .map_err(|_| anyhow::anyhow!("{what} needs a --database-url with a user"))?;
    Ok(parsed.into())
}

async fn terminated() {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(s) => s,
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
            return;
        }
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if let Some(Command::HashPassword) = args.command {
        let mut line = String::new();
        std::io::stdin()
            .read_line(&mut line)
            .context("cannot read the password from standard input")?;
        let password = line.trim_end_matches(['\r', '\n']);
        anyhow::ensure!(!password.is_empty(), "the password is empty");
        println!("{}", hash_password(password).map_err(anyhow::Error::msg)?);
        return Ok(());
    }
    chime_runtime::logging::init(args.log_format == "json");
    let config = args.into_config()?;
    let export = chime_runtime::traces::init("chime-scheduler").map_err(anyhow::Error::msg)?;
    if export.is_some() {
        tracing::info!("exporting spans over OTLP");
    }
    let replica = Replica::start(config)
        .await
        .context("chime-scheduler could not start")?;
    tokio::select! {
        _ = terminated() => {
            tracing::info!("shutting down: publishing what the wheel holds");
            replica.shutdown().await;
        }
        _ = replica.wait() => {}
    }
    tracing::info!("chime-scheduler stopped");
    if let Some(export) = export {
        // Sends the last spans; blocks, so off the runtime's threads.
        let _ = tokio::task::spawn_blocking(move || export.shutdown()).await;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_line_is_consistent() {
        use clap::CommandFactory as _;
        Args::command().debug_assert();
    }

    #[test]
    fn the_webhook_flag_repeats_and_its_settings_reach_the_config() {
        let dir = tempfile::tempdir().unwrap();
        let secret = dir.path().join("secret");
        std::fs::write(&secret, "k3y\n").unwrap();
        let args = Args::try_parse_from([
            "chime-scheduler",
            "--alert-webhook",
            "https://hooks.example/a",
            "--alert-webhook",
            "http://relay:8080/slack",
            "--alert-webhook-secret-file",
            secret.to_str().unwrap(),
            "--alert-webhook-tries",
            "3",
            "--job-metrics-limit",
            "50",
        ])
        .unwrap();
        let config = args.into_config().unwrap();
        let labels: Vec<&str> = config.webhooks.targets.iter().map(|t| t.label()).collect();
        assert_eq!(
            labels,
            vec!["https://hooks.example/a", "http://relay:8080/slack"]
        );
        assert_eq!(config.webhooks.secret.unwrap().expose(), "k3y");
        assert_eq!(config.webhooks.delivery.tries, 3);
        assert_eq!(config.job_metrics.limit, 50);
    }

    #[test]
    fn the_database_password_comes_from_its_file_once() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("password");
        std::fs::write(&file, "p@ss word/:x\n").unwrap();
        let url = with_password_from("postgres://chime@db:5432/chime", &file).unwrap();
        assert_eq!(url, "postgres://chime:p%40ss%20word%2F%3Ax@db:5432/chime");
        let twice = with_password_from("postgres://chime:other@db/chime", &file).unwrap_err();
        assert!(twice.to_string().contains("one place"), "{twice}");
        let sqlite = with_password_from("sqlite://chime.db", &file).unwrap_err();
        assert!(sqlite.to_string().contains("postgres://"), "{sqlite}");
        std::fs::write(&file, "\n").unwrap();
        let empty = with_password_from("postgres://chime@db/chime", &file).unwrap_err();
        assert!(empty.to_string().contains("empty"), "{empty}");
    }
}
