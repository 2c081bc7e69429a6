//! The worker's settings: defaults in one place, validated once at build.

use crate::error::WorkerError;
use crate::output::DEFAULT_MAX_OUTPUT_BYTES;
use chime_common::bounds::{check_name, MAX_GROUP_LEN};
use chime_runtime::supervisor::SupervisorConfig;
use std::time::Duration;

/// Default group.
pub const DEFAULT_GROUP: &str = "default";
/// Longest worker id.
pub const MAX_WORKER_ID_LEN: usize = 128;
/// Largest output tail: a finished event must fit NATS's default 1 MiB payload.
pub const MAX_OUTPUT_LIMIT: usize = 512 * 1024;
/// How much longer than `stop_grace` the fence margin must be: the timers'
/// lateness on a loaded machine (see `fence.rs`).
pub const FENCE_SLACK: Duration = Duration::from_millis(250);

/// How a worker runs; see the field docs for defaults.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// The group whose firings it runs (default `default`).
    pub group: String,
    /// Firings run at once (default: the number of CPUs).
    pub threads: usize,
    /// `<hostname>-<8 random hex>` unless set; a KV key and subject token.
    pub worker_id: String,
    /// Fallback wake-up when idle: redeliveries and missed doorbells are picked up this late at most (1 s).
    pub poll_interval: Duration,
    /// Heartbeat period (2 s); must be shorter than the bucket's key TTL.
    pub heartbeat_interval: Duration,
    /// On shutdown, how long running firings may take to finish before they are cancelled (30 s).
    pub drain_grace: Duration,
    /// On shutdown, how long unsent finished events are retried after the runs ended (10 s).
    pub flush_grace: Duration,
    /// Output tail kept per firing (64 KiB).
    pub max_output_bytes: usize,
    /// How long a start request waits for the scheduler's reply (2 s; the
    /// first of the two requests waits a quarter of it).
    pub start_timeout: Duration,
    /// How long a firing that was not started comes back after (NAK delay, 1 s).
    pub nak_delay: Duration,
    /// How the worker's services are restarted when they fail.
    pub supervisor: SupervisorConfig,
    /// The `expires` of every fetch (10 ms): how long an empty band is waited on.
    pub fetch_expiry: Duration,
    /// After a handler's token is cancelled (deadline, cancel request), how long
    /// it may take to return before its future is dropped (1 s).
    pub stop_grace: Duration,
    /// The worker fences itself (stops its runs, fetches nothing) when no
    /// heartbeat was acknowledged for the bucket's key TTL minus this (2 s:
    /// a lease of 13 s with the default 15 s TTL). It must exceed `stop_grace`
    /// so runs have stopped before the key can expire; see `fence.rs`.
    pub fence_margin: Duration,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        WorkerConfig {
            group: DEFAULT_GROUP.to_string(),
            threads: default_threads(),
            worker_id: default_worker_id(),
            poll_interval: Duration::from_secs(1),
            heartbeat_interval: Duration::from_secs(2),
            drain_grace: Duration::from_secs(30),
            flush_grace: Duration::from_secs(10),
            max_output_bytes: DEFAULT_MAX_OUTPUT_BYTES,
            start_timeout: Duration::from_secs(2),
            nak_delay: Duration::from_secs(1),
            supervisor: SupervisorConfig::default(),
            fetch_expiry: Duration::from_millis(10),
            stop_grace: Duration::from_secs(1),
            fence_margin: Duration::from_secs(2),
        }
    }
}

impl WorkerConfig {
    /// How long the worker runs firings without an acknowledged heartbeat:
    /// `worker_ttl − fence_margin`. Errors name the setting when the margin
    /// does not fit.
    pub fn lease(&self, worker_ttl: Duration) -> Result<Duration, WorkerError> {
        let least = self.stop_grace.saturating_add(FENCE_SLACK);
        if self.fence_margin < least {
            return Err(WorkerError::InvalidSetting {
                setting: "fence_margin",
                reason: format!(
                    "must be at least stop_grace + {FENCE_SLACK:?} ({least:?}), found {:?}; \
                     otherwise a run may outlive the heartbeat key",
                    self.fence_margin
                ),
            });
        }
        match worker_ttl.checked_sub(self.fence_margin) {
            Some(lease) if !lease.is_zero() => Ok(lease),
            _ => Err(WorkerError::InvalidSetting {
                setting: "fence_margin",
                reason: format!(
                    "must be shorter than the workers bucket's key TTL ({worker_ttl:?}), found {:?}",
                    self.fence_margin
                ),
            }),
        }
    }

    /// Checks every setting; `worker_ttl` is the heartbeat bucket's key TTL.
    pub fn validate(&self, worker_ttl: Duration) -> Result<(), WorkerError> {
        validate_group(&self.group)?;
        validate_worker_id(&self.worker_id)?;
        if self.threads == 0 {
            return Err(WorkerError::ZeroThreads);
        }
        self.supervisor
            .validate()
            .map_err(|reason| WorkerError::InvalidSetting {
                setting: "supervisor",
                reason,
            })?;
        let positive = [
            ("poll_interval", self.poll_interval),
            ("heartbeat_interval", self.heartbeat_interval),
            ("start_timeout", self.start_timeout),
            ("fetch_expiry", self.fetch_expiry),
        ];
        for (setting, value) in positive {
            if value < Duration::from_millis(1) {
                return Err(WorkerError::InvalidSetting {
                    setting,
                    reason: format!("must be at least 1ms, found {value:?}"),
                });
            }
        }
        let lease = self.lease(worker_ttl)?;
        if self.heartbeat_interval >= lease {
            return Err(WorkerError::InvalidSetting {
                setting: "heartbeat_interval",
                reason: format!(
                    "must be shorter than the heartbeat lease ({lease:?}: the workers bucket's \
                     key TTL {worker_ttl:?} minus fence_margin {:?}), found {:?}; otherwise the \
                     worker fences itself between beats",
                    self.fence_margin, self.heartbeat_interval
                ),
            });
        }
        if self.max_output_bytes == 0 || self.max_output_bytes > MAX_OUTPUT_LIMIT {
            return Err(WorkerError::InvalidSetting {
                setting: "max_output_bytes",
                reason: format!(
                    "must be from 1 to {MAX_OUTPUT_LIMIT}, found {}",
                    self.max_output_bytes
                ),
            });
        }
        Ok(())
    }
}

/// The number of CPUs (1 if unknown).
pub fn default_threads() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

/// `<hostname>-<8 random hex>`, the hostname cut to valid characters.
pub fn default_worker_id() -> String {
    let host = nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_default();
    let host: String = host
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '-'
            }
        })
        .take(64)
        .collect();
    let host = host.trim_matches('-');
    let host = if host.is_empty() { "worker" } else { host };
    let random = uuid::Uuid::new_v4().simple().to_string();
    format!("{host}-{}", &random[..8])
}

/// A worker id is a KV key and a subject token: 1–128 of `A-Z a-z 0-9 - _`.
pub fn validate_worker_id(id: &str) -> Result<(), WorkerError> {
    let bad = |reason: String| WorkerError::InvalidWorkerId {
        id: id.to_string(),
        reason,
    };
    if id.is_empty() || id.len() > MAX_WORKER_ID_LEN {
        return Err(bad(format!("must be 1 to {MAX_WORKER_ID_LEN} characters")));
    }
    if let Some(c) = id
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || *c == '-' || *c == '_'))
    {
        return Err(bad(format!(
            "{c:?} is not allowed; use only A-Z a-z 0-9 - _"
        )));
    }
    Ok(())
}

/// A group is a job-spec group name (1–64 of `A-Z a-z 0-9 . _ -`) whose dots
/// separate non-empty subject tokens.
pub fn validate_group(group: &str) -> Result<(), WorkerError> {
    let bad = |reason: String| WorkerError::InvalidGroup {
        group: group.to_string(),
        reason,
    };
    check_name(group, MAX_GROUP_LEN).map_err(bad)?;
    if group.split('.').any(str::is_empty) {
        return Err(bad(
            "dots must separate non-empty parts (no leading, trailing or double dots)".into(),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid() {
        let config = WorkerConfig::default();
        config.validate(Duration::from_secs(6)).unwrap();
        assert!(config.threads >= 1);
        validate_worker_id(&config.worker_id).unwrap();
    }

    #[test]
    fn bad_settings_are_named() {
        let ttl = Duration::from_secs(6);
        let mut config = WorkerConfig {
            threads: 0,
            ..Default::default()
        };
        assert!(matches!(
            config.validate(ttl),
            Err(WorkerError::ZeroThreads)
        ));
        config.threads = 2;
        config.heartbeat_interval = Duration::from_secs(6);
        let error = config.validate(ttl).unwrap_err().to_string();
        assert!(
            error.starts_with("heartbeat_interval must be shorter"),
            "{error}"
        );
        config.heartbeat_interval = Duration::from_secs(4);
        let error = config.validate(ttl).unwrap_err().to_string();
        assert!(error.contains("heartbeat lease (4s"), "{error}");
        config.heartbeat_interval = Duration::from_secs(2);
        config.fence_margin = Duration::from_millis(1100);
        let error = config.validate(ttl).unwrap_err().to_string();
        assert!(
            error.starts_with("fence_margin must be at least"),
            "{error}"
        );
        config.fence_margin = Duration::from_secs(6);
        let error = config.validate(ttl).unwrap_err().to_string();
        assert!(error.starts_with("fence_margin must be shorter"), "{error}");
        config.fence_margin = Duration::from_secs(2);
        assert_eq!(config.lease(ttl).unwrap(), Duration::from_secs(4));
        config.max_output_bytes = 0;
        assert!(config
            .validate(ttl)
            .unwrap_err()
            .to_string()
            .starts_with("max_output_bytes"));
    }

    #[test]
    fn worker_ids_must_be_subject_tokens() {
        validate_worker_id("host-1_a").unwrap();
        for bad in ["", "a.b", "a b", "a*", "a>", &"x".repeat(129)] {
            assert!(validate_worker_id(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn groups_follow_job_spec_rules() {
        validate_group("reports").unwrap();
        validate_group("eu.reports").unwrap();
        for bad in ["", "a b", "a..b", ".a", "a.", "a*"] {
            assert!(validate_group(bad).is_err(), "{bad:?}");
        }
    }
}
