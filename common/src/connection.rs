//! Connecting to NATS with the settings every Chime program shares.
//!
//! The scheduler, the worker and chimectl take the same flags (`--nats-url`,
//! `--nats-creds`, `--nats-tls-ca`, `--nats-tls-cert`, `--nats-tls-key`) and
//! connect the same way. A server that is not reachable yet (NATS and Chime
//! started together by one deploy) is tried again with backoff for as long as
//! the caller is willing to wait; a setting that cannot work (an unreadable
//! credentials file, a refused credential, a TLS mismatch) fails at once with
//! a message that names it.

use async_nats::{ConnectErrorKind, ConnectOptions, ServerAddr};
use backoff::ExponentialBackoff;
use std::path::PathBuf;
use std::time::Duration;

/// The NATS URL used when none is given.
pub const DEFAULT_NATS_URL: &str = "nats://127.0.0.1:4222";

/// How to reach NATS: servers, credentials and TLS.
///
/// `global` lets chimectl take these flags after its subcommand too; it
/// changes nothing for the programs without subcommands.
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct NatsConnection {
    /// NATS server URL(s), comma-separated.
    #[arg(long = "nats-url", env = "CHIME_NATS_URL", default_value = DEFAULT_NATS_URL, global = true)]
    pub url: String,

    /// NATS credentials file (JWT and NKey seed).
    #[arg(long = "nats-creds", env = "CHIME_NATS_CREDS", global = true)]
    pub creds: Option<PathBuf>,

    /// CA certificate (PEM) to verify the NATS server with; TLS is then required.
    #[arg(long = "nats-tls-ca", env = "CHIME_NATS_TLS_CA", global = true)]
    pub tls_ca: Option<PathBuf>,

    /// Client certificate (PEM) for NATS mutual TLS; needs --nats-tls-key.
    #[arg(
        long = "nats-tls-cert",
        env = "CHIME_NATS_TLS_CERT",
        requires = "tls_key",
        global = true
    )]
    pub tls_cert: Option<PathBuf>,

    /// Client key (PEM) for NATS mutual TLS; needs --nats-tls-cert.
    #[arg(
        long = "nats-tls-key",
        env = "CHIME_NATS_TLS_KEY",
        requires = "tls_cert",
        global = true
    )]
    pub tls_key: Option<PathBuf>,
}

/// Why a connection could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// A setting is wrong; retrying cannot help.
    #[error("{0}")]
    Settings(String),
    /// The server answered and refused us (credentials, authorization, TLS).
    #[error("cannot connect to NATS at {url}: {reason}")]
    Refused { url: String, reason: String },
    /// No server answered within the wait.
    #[error("cannot connect to NATS at {url} within {wait}: {last}")]
    Unreachable {
        url: String,
        wait: String,
        last: String,
    },
}

impl NatsConnection {
    /// A plain connection to `url` (comma-separated for several servers).
    pub fn new(url: impl Into<String>) -> Self {
        NatsConnection {
            url: url.into(),
            creds: None,
            tls_ca: None,
            tls_cert: None,
            tls_key: None,
        }
    }

    /// The server addresses of `url`.
    pub fn servers(&self) -> Result<Vec<ServerAddr>, String> {
        let servers: Vec<_> = self
            .url
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(|s| {
                s.parse::<ServerAddr>()
                    .map_err(|e| format!("{s:?} is not a NATS URL ({e})"))
            })
            .collect::<Result<_, _>>()?;
        if servers.is_empty() {
            return Err("at least one URL is needed, e.g. nats://127.0.0.1:4222".into());
        }
        Ok(servers)
    }

    /// Checks every setting; the message names the flag to fix.
    pub fn validate(&self) -> Result<(), String> {
        self.servers().map_err(|e| format!("--nats-url: {e}"))?;
        if self.tls_cert.is_some() != self.tls_key.is_some() {
            return Err(
                "--nats-tls-cert and --nats-tls-key go together: give both or neither".into(),
            );
        }
        for (flag, path) in [
            ("--nats-creds", &self.creds),
            ("--nats-tls-ca", &self.tls_ca),
            ("--nats-tls-cert", &self.tls_cert),
            ("--nats-tls-key", &self.tls_key),
        ] {
            if let Some(path) = path {
                if !path.is_file() {
                    return Err(format!("{flag}: {} is not a readable file", path.display()));
                }
            }
        }
        Ok(())
    }

    /// Connects, naming the connection `name`; a server that does not
    /// answer is tried again with backoff (100 ms doubling to 2 s) until
    /// `wait` has passed. `Duration::ZERO` tries once.
    pub async fn connect(
        &self,
        name: &str,
        wait: Duration,
    ) -> Result<async_nats::Client, ConnectError> {
        self.validate().map_err(ConnectError::Settings)?;
        let servers = self.servers().map_err(ConnectError::Settings)?;
        let policy = ExponentialBackoff {
            initial_interval: Duration::from_millis(100),
            multiplier: 2.0,
            randomization_factor: 0.2,
            max_interval: Duration::from_secs(2),
            max_elapsed_time: Some(wait),
            ..ExponentialBackoff::default()
        };
        let attempt = || async {
            let options = self
                .options(name)
                .await
                .map_err(backoff::Error::permanent)?;
            options
                .connect(servers.clone())
                .await
                .map_err(|e| match e.kind() {
                    ConnectErrorKind::Io | ConnectErrorKind::TimedOut | ConnectErrorKind::Dns => {
                        backoff::Error::transient(ConnectError::Unreachable {
                            url: self.url.clone(),
                            wait: humantime::format_duration(wait).to_string(),
                            last: e.to_string(),
                        })
                    }
                    _ => backoff::Error::permanent(ConnectError::Refused {
                        url: self.url.clone(),
                        reason: e.to_string(),
                    }),
                })
        };
        let url = &self.url;
        backoff::future::retry_notify(policy, attempt, |error, next: Duration| {
            tracing::warn!(%url, %error, retry_in = ?next, "NATS is not reachable yet");
        })
        .await
    }

    /// Connect options for one attempt (the credentials file is read each time).
    async fn options(&self, name: &str) -> Result<ConnectOptions, ConnectError> {
        let mut options = ConnectOptions::new().name(name);
        if let Some(creds) = &self.creds {
            options = options.credentials_file(creds).await.map_err(|e| {
                ConnectError::Settings(format!(
                    "--nats-creds: cannot read {}: {e}",
                    creds.display()
                ))
            })?;
        }
        if let Some(ca) = &self.tls_ca {
            options = options.add_root_certificates(ca.clone()).require_tls(true);
        }
        if let (Some(cert), Some(key)) = (&self.tls_cert, &self.tls_key) {
            options = options.add_client_certificate(cert.clone(), key.clone());
        }
        Ok(options)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_are_checked_before_connecting() {
        assert!(NatsConnection::new("nats://a:4222, nats://b:4222")
            .validate()
            .is_ok());
        let empty = NatsConnection::new(" , ").validate().unwrap_err();
        assert!(empty.starts_with("--nats-url:"), "{empty}");
        let bad = NatsConnection::new("nats://host:notaport")
            .validate()
            .unwrap_err();
        assert!(bad.starts_with("--nats-url:"), "{bad}");
        let half = NatsConnection {
            tls_cert: Some("/etc/hostname".into()),
            ..NatsConnection::new(DEFAULT_NATS_URL)
        };
        assert!(half.validate().unwrap_err().contains("go together"));
        let missing = NatsConnection {
            creds: Some("/nonexistent/chime.creds".into()),
            ..NatsConnection::new(DEFAULT_NATS_URL)
        };
        let error = missing.validate().unwrap_err();
        assert!(error.starts_with("--nats-creds:"), "{error}");
    }

    #[tokio::test]
    async fn a_server_that_never_answers_is_reported_unreachable() {
        // Nothing listens on port 1: a transient error, retried until the wait ends.
        let error = NatsConnection::new("nats://127.0.0.1:1")
            .connect("test", Duration::from_millis(300))
            .await
            .expect_err("nothing listens on port 1");
        assert!(matches!(error, ConnectError::Unreachable { .. }), "{error}");
        assert!(error.to_string().contains("nats://127.0.0.1:1"), "{error}");
    }
}
