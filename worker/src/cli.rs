//! The `chime-worker` command line: every flag has a `CHIME_…` twin.

use crate::config::{validate_group, validate_worker_id, WorkerConfig, DEFAULT_GROUP};
use chime_common::Subjects;
use chime_runtime::connection::NatsConnection;
use chime_runtime::topology::TopologyConfig;
use clap::builder::BoolishValueParser;
use clap::{ArgAction, Parser, ValueEnum};
use std::net::SocketAddr;
use std::time::Duration;

/// Runs Chime firings of one group: the built-in `http` and (opt-in) `shell` handlers.
#[derive(Debug, Clone, Parser)]
#[command(name = "chime-worker", version, about, long_about = None)]
pub struct Args {
    #[command(flatten)]
    pub nats: NatsConnection,

    /// At start-up, keep trying to reach NATS this long before giving up.
    #[arg(long, env = "CHIME_NATS_CONNECT_WAIT", default_value = "60s", value_parser = humantime::parse_duration)]
    pub nats_connect_wait: Duration,

    /// Subject prefix, for several isolated installations on one NATS.
    #[arg(long, env = "CHIME_SUBJECT_PREFIX", default_value = chime_common::subjects::DEFAULT_PREFIX)]
    pub subject_prefix: String,

    /// The group whose firings this worker runs.
    #[arg(long, env = "CHIME_GROUP", default_value = DEFAULT_GROUP)]
    pub group: String,

    /// Firings run at once [default: the number of CPUs].
    #[arg(long, env = "CHIME_THREADS")]
    pub threads: Option<usize>,

    /// Let the `shell` handler run commands (off: it fails every firing).
    #[arg(long, env = "CHIME_ALLOW_SHELL", action = ArgAction::SetTrue, value_parser = BoolishValueParser::new())]
    pub allow_shell: bool,

    /// Let the `http` handler reach loopback, private, link-local and
    /// unspecified addresses (off: refused, after DNS resolution and on
    /// every redirect).
    #[arg(long, env = "CHIME_HTTP_ALLOW_PRIVATE", action = ArgAction::SetTrue, value_parser = BoolishValueParser::new())]
    pub http_allow_private: bool,

    /// The handlers this worker agrees to run, comma-separated [default:
    /// all built in: shell, http]; a firing for another fails with
    /// "handler not allowed".
    #[arg(long, env = "CHIME_HANDLERS", value_delimiter = ',')]
    pub handlers: Option<Vec<String>>,

    /// The only variables of the worker's environment a `shell` job
    /// inherits, comma-separated (besides the firing's CHIME_* variables and
    /// the payload's `env`).
    #[arg(
        long,
        env = "CHIME_SHELL_ENV",
        value_delimiter = ',',
        default_value = "PATH,HOME,LANG,TZ"
    )]
    pub shell_env: Vec<String>,

    /// Address of /metrics and /healthz; `off` disables them.
    #[arg(long, env = "CHIME_METRICS_ADDR", default_value = "127.0.0.1:9465")]
    pub metrics_addr: String,

    /// Worker id [default: <hostname>-<8 random hex>]; A-Z a-z 0-9 - _ only.
    #[arg(long, env = "CHIME_WORKER_ID")]
    pub worker_id: Option<String>,

    /// On SIGTERM, how long running firings may finish before they are cancelled.
    #[arg(long, env = "CHIME_DRAIN_GRACE", default_value = "30s", value_parser = humantime::parse_duration)]
    pub drain_grace: Duration,

    /// How often the worker writes its heartbeat (keys expire after 15s without one).
    #[arg(long, env = "CHIME_HEARTBEAT_INTERVAL", default_value = "2s", value_parser = humantime::parse_duration)]
    pub heartbeat_interval: Duration,

    /// The worker stops its runs and fetches nothing once no heartbeat was
    /// written for the heartbeat key TTL (15s) minus this, so a worker cut off
    /// from NATS has stopped before the scheduler re-queues its firings. Must
    /// exceed the 1s stop grace.
    #[arg(long, env = "CHIME_FENCE_MARGIN", default_value = "2s", value_parser = humantime::parse_duration)]
    pub fence_margin: Duration,

    /// Idle fallback wake-up for redeliveries and missed doorbells.
    #[arg(long, env = "CHIME_POLL_INTERVAL", default_value = "1s", value_parser = humantime::parse_duration)]
    pub poll_interval: Duration,

    /// Log format.
    #[arg(long, env = "CHIME_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
}

/// How logs are written (to stdout).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

impl Args {
    /// Checks every flag; the message names the flag to fix.
    pub fn validate(&self) -> Result<(), String> {
        self.nats.validate()?;
        Subjects::validate_prefix(&self.subject_prefix)
            .map_err(|e| format!("--subject-prefix: {e}"))?;
        validate_group(&self.group).map_err(|e| format!("--group: {e}"))?;
        if self.threads == Some(0) {
            return Err("--threads must be at least 1".into());
        }
        for name in self.handlers.iter().flatten() {
            if !crate::handlers::BUILT_IN.contains(&name.trim()) {
                return Err(format!(
                    "--handlers: {name:?} is not a built-in handler; they are {}",
                    crate::handlers::BUILT_IN.join(", ")
                ));
            }
        }
        if let Some(id) = &self.worker_id {
            validate_worker_id(id).map_err(|e| format!("--worker-id: {e}"))?;
        }
        self.metrics_addr()
            .map_err(|e| format!("--metrics-addr: {e}"))?;
        let ttl = TopologyConfig::default().worker_ttl;
        let lease = self
            .worker_config()
            .lease(ttl)
            .map_err(|e| format!("--fence-margin: {e}"))?;
        if self.heartbeat_interval.is_zero() || self.heartbeat_interval >= lease {
            return Err(format!(
                "--heartbeat-interval must be above 0 and below the heartbeat lease ({}: the key TTL {} minus --fence-margin), found {}",
                humantime::format_duration(lease),
                humantime::format_duration(ttl),
                humantime::format_duration(self.heartbeat_interval)
            ));
        }
        if self.poll_interval < Duration::from_millis(1) {
            return Err("--poll-interval must be at least 1ms".into());
        }
        Ok(())
    }

    /// The metrics address, `None` when `off`.
    pub fn metrics_addr(&self) -> Result<Option<SocketAddr>, String> {
        let text = self.metrics_addr.trim();
        if text.is_empty() || text.eq_ignore_ascii_case("off") {
            return Ok(None);
        }
        text.parse()
            .map(Some)
            .map_err(|e| format!("{text:?} is not an address such as 127.0.0.1:9465 ({e})"))
    }

    /// The worker settings these flags ask for.
    /// Whether built-in handler `name` may run here (`--handlers`).
    pub fn allows(&self, name: &str) -> bool {
        self.handlers
            .as_ref()
            .is_none_or(|allowed| allowed.iter().any(|a| a.trim() == name))
    }

    pub fn worker_config(&self) -> WorkerConfig {
        let defaults = WorkerConfig::default();
        WorkerConfig {
            group: self.group.clone(),
            threads: self.threads.unwrap_or(defaults.threads),
            worker_id: self.worker_id.clone().unwrap_or(defaults.worker_id),
            poll_interval: self.poll_interval,
            heartbeat_interval: self.heartbeat_interval,
            drain_grace: self.drain_grace,
            fence_margin: self.fence_margin,
            ..defaults
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Args {
        Args::try_parse_from(std::iter::once("chime-worker").chain(args.iter().copied())).unwrap()
    }

    #[test]
    fn defaults_match_the_contract() {
        let args = parse(&[]);
        args.validate().unwrap();
        assert_eq!(args.nats.url, "nats://127.0.0.1:4222");
        assert_eq!(args.nats_connect_wait, Duration::from_secs(60));
        assert_eq!(args.group, "default");
        assert!(!args.allow_shell);
        assert_eq!(
            args.metrics_addr().unwrap(),
            Some("127.0.0.1:9465".parse().unwrap())
        );
        assert_eq!(args.drain_grace, Duration::from_secs(30));
        assert_eq!(args.heartbeat_interval, Duration::from_secs(2));
        assert_eq!(args.fence_margin, Duration::from_secs(2));
        assert_eq!(args.log_format, LogFormat::Text);
        assert!(args.worker_config().threads >= 1);
    }

    #[test]
    fn bad_flags_are_named() {
        let cases: [(&[&str], &str); 10] = [
            (&["--fence-margin", "500ms"], "--fence-margin"),
            (&["--heartbeat-interval", "13s"], "--heartbeat-interval"),
            (&["--threads", "0"], "--threads"),
            (&["--group", "a b"], "--group"),
            (&["--worker-id", "a.b"], "--worker-id"),
            (&["--metrics-addr", "nowhere"], "--metrics-addr"),
            (&["--heartbeat-interval", "30s"], "--heartbeat-interval"),
            (&["--nats-creds", "/no/such/file"], "--nats-creds"),
            (&["--nats-url", " , "], "--nats-url"),
            (
                &[
                    "--nats-tls-cert",
                    "/no/cert.pem",
                    "--nats-tls-key",
                    "/no/key.pem",
                ],
                "--nats-tls-cert",
            ),
        ];
        for (args, flag) in cases {
            let error = parse(args).validate().unwrap_err();
            assert!(error.starts_with(flag), "{args:?}: {error}");
        }
        assert_eq!(
            parse(&["--metrics-addr", "off"]).metrics_addr().unwrap(),
            None
        );
        assert!(parse(&["--allow-shell"]).allow_shell);
    }
}
