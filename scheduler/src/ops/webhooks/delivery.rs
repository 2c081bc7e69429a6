//! Delivering one alert to one webhook: POST, and on a failure that may
//! pass (no answer, a timeout, 408, 429, 5xx) try again after an
//! exponential backoff, at most `tries` times and within `deadline` from
//! the first try. Any other answer (a redirect, another 4xx) is final at
//! once: trying again would get the same. Nothing here waits forever: each
//! POST is cut at `request_timeout` (or what is left of the deadline).

use super::signature::{sign, SIGNATURE_HEADER};
use super::target::WebhookTarget;
use bytes::Bytes;
use chime_runtime::secret::Secret;
use reqwest::header::CONTENT_TYPE;
use reqwest::StatusCode;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// The header that names the alert: the same on every try and every
/// delivery of one alert, so a receiver can drop a repeat.
pub const ALERT_ID_HEADER: &str = "X-Chime-Alert-Id";

/// How an alert is tried.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeliveryConfig {
    /// POSTs per alert and URL, the first included (`--alert-webhook-tries`).
    pub tries: u32,
    /// The pause before the second try; it doubles after each
    /// (`--alert-webhook-backoff`).
    pub backoff: Duration,
    /// The longest pause between two tries.
    pub max_backoff: Duration,
    /// All tries of one alert end within this long of the first
    /// (`--alert-webhook-deadline`).
    pub deadline: Duration,
    /// One POST waits at most this long for an answer.
    pub request_timeout: Duration,
}

impl Default for DeliveryConfig {
    fn default() -> Self {
        DeliveryConfig {
            tries: 5,
            backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(30),
            deadline: Duration::from_secs(120),
            request_timeout: Duration::from_secs(10),
        }
    }
}

impl DeliveryConfig {
    /// Checks the settings; the message names the flag.
    pub fn validate(&self) -> Result<(), String> {
        if !(1..=20).contains(&self.tries) {
            return Err("--alert-webhook-tries must be from 1 to 20".into());
        }
        if self.backoff < Duration::from_millis(10) || self.backoff > Duration::from_secs(60) {
            return Err("--alert-webhook-backoff must be from 10ms to 60s".into());
        }
        if self.deadline < Duration::from_secs(1) || self.deadline > Duration::from_secs(3600) {
            return Err("--alert-webhook-deadline must be from 1s to 1h".into());
        }
        if self.request_timeout.is_zero() || self.max_backoff < self.backoff {
            return Err(
                "the alert webhook request timeout must be above zero and the longest pause \
                 at least --alert-webhook-backoff"
                    .into(),
            );
        }
        Ok(())
    }

    /// The pause after try `tried` (1 for the first) failed.
    pub fn pause_after(&self, tried: u32) -> Duration {
        let doubled = self
            .backoff
            .saturating_mul(2u32.saturating_pow(tried.saturating_sub(1)));
        doubled.min(self.max_backoff)
    }
}

/// How one alert's delivery to one URL ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Delivery {
    /// A POST was answered with a 2xx status, at try `tries`.
    Delivered { tries: u32 },
    /// The tries or the deadline ran out, or an answer said trying again
    /// will not help; `reason` is the last failure.
    GaveUp {
        tries: u32,
        elapsed: Duration,
        reason: String,
    },
    /// Shutdown came between two tries: another replica takes the alert.
    Interrupted { tries: u32 },
}

/// Why one POST failed, and whether another may succeed.
struct Failure {
    reason: String,
    passing: bool,
}

/// Sends alerts: one HTTP client for every webhook of a replica.
#[derive(Clone)]
pub struct Poster {
    client: reqwest::Client,
    secret: Option<Secret>,
}

impl Poster {
    /// A client that follows no redirect (a redirected POST becomes a GET)
    /// and uses no proxy from the environment.
    pub fn new(secret: Option<Secret>) -> Result<Poster, reqwest::Error> {
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .user_agent(concat!("chime-scheduler/", env!("CARGO_PKG_VERSION")))
            .build()?;
        Ok(Poster { client, secret })
    }

    /// Delivers `body` (an alert's JSON object) to `target` as `config`
    /// says. `retried` is told of each try after the first.
    pub async fn deliver(
        &self,
        target: &WebhookTarget,
        body: &Bytes,
        alert_id: &str,
        config: &DeliveryConfig,
        shutdown: &CancellationToken,
        retried: impl Fn(),
    ) -> Delivery {
        let began = Instant::now();
        let mut tried = 0;
        loop {
            let left = config.deadline.saturating_sub(began.elapsed());
            tried += 1;
            if tried > 1 {
                retried();
            }
            let failure = match self
                .post(target, body, alert_id, config.request_timeout.min(left))
                .await
            {
                Ok(()) => return Delivery::Delivered { tries: tried },
                Err(failure) => failure,
            };
            let pause = config.pause_after(tried);
            let out_of_time = began.elapsed() + pause >= config.deadline;
            if !failure.passing || tried >= config.tries || out_of_time {
                return Delivery::GaveUp {
                    tries: tried,
                    elapsed: began.elapsed(),
                    reason: failure.reason,
                };
            }
            tracing::debug!(webhook = target.label(), tried, reason = %failure.reason, ?pause, "alert webhook try failed; trying again");
            tokio::select! {
                _ = tokio::time::sleep(pause) => {}
                _ = shutdown.cancelled() => return Delivery::Interrupted { tries: tried },
            }
        }
    }

    /// One POST within `timeout`.
    async fn post(
        &self,
        target: &WebhookTarget,
        body: &Bytes,
        alert_id: &str,
        timeout: Duration,
    ) -> Result<(), Failure> {
        let mut request = self
            .client
            .post(target.url().clone())
            .timeout(timeout)
            .header(CONTENT_TYPE, "application/json")
            .header(ALERT_ID_HEADER, alert_id)
            .body(body.clone());
        if let Some(secret) = &self.secret {
            request = request.header(SIGNATURE_HEADER, sign(secret, body));
        }
        if let Some((user, password)) = target.credentials() {
            request = request.basic_auth(user, password);
        }
        let response = request.send().await.map_err(|e| Failure {
            reason: describe(&e.without_url()),
            passing: true,
        })?;
        let status = response.status();
        if status.is_success() {
            return Ok(());
        }
        Err(Failure {
            reason: format!("HTTP {status}"),
            passing: passes(status),
        })
    }
}

/// Whether another try may get another answer than `status`.
fn passes(status: StatusCode) -> bool {
    status.is_server_error()
        || status == StatusCode::REQUEST_TIMEOUT
        || status == StatusCode::TOO_MANY_REQUESTS
}

/// An error with its causes ("error sending request: … connection refused"),
/// without the URL (its query may hold a secret).
fn describe(error: &reqwest::Error) -> String {
    let mut text = if error.is_timeout() {
        "no answer within the timeout".to_string()
    } else {
        error.to_string()
    };
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pauses_double_up_to_the_longest() {
        let config = DeliveryConfig {
            backoff: Duration::from_millis(100),
            max_backoff: Duration::from_millis(500),
            ..DeliveryConfig::default()
        };
        let pauses: Vec<u128> = (1..=6).map(|t| config.pause_after(t).as_millis()).collect();
        assert_eq!(pauses, vec![100, 200, 400, 500, 500, 500]);
        assert_eq!(config.pause_after(u32::MAX), Duration::from_millis(500));
    }

    #[test]
    fn the_defaults_fit_their_deadline_and_bad_settings_name_their_flag() {
        let config = DeliveryConfig::default();
        assert!(config.validate().is_ok());
        let pauses: Duration = (1..config.tries).map(|t| config.pause_after(t)).sum();
        assert!(
            pauses + config.request_timeout * config.tries <= config.deadline,
            "every default try fits the default deadline"
        );
        for (bad, flag) in [
            (
                DeliveryConfig {
                    tries: 0,
                    ..config.clone()
                },
                "--alert-webhook-tries",
            ),
            (
                DeliveryConfig {
                    tries: 21,
                    ..config.clone()
                },
                "--alert-webhook-tries",
            ),
            (
                DeliveryConfig {
                    backoff: Duration::from_millis(1),
                    ..config.clone()
                },
                "--alert-webhook-backoff",
            ),
            (
                DeliveryConfig {
                    deadline: Duration::from_secs(7200),
                    ..config.clone()
                },
                "--alert-webhook-deadline",
            ),
        ] {
            assert!(bad.validate().unwrap_err().starts_with(flag), "{bad:?}");
        }
    }

    #[test]
    fn only_answers_that_may_change_are_tried_again() {
        for status in [500, 502, 503, 504, 408, 429] {
            assert!(passes(StatusCode::from_u16(status).unwrap()), "{status}");
        }
        for status in [301, 302, 400, 401, 403, 404, 410, 413, 422] {
            assert!(!passes(StatusCode::from_u16(status).unwrap()), "{status}");
        }
    }
}
