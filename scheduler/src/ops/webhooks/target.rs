//! One `--alert-webhook` URL, checked at start-up, and the only form of it
//! that is ever shown: its label, `scheme://host[:port]/path`, without
//! credentials, query or fragment (they may hold secrets). The label names
//! the URL in logs, errors, dead letters and the `url` label of the
//! webhook metrics.

use chime_runtime::secret::Secret;
use percent_encoding::percent_decode_str;
use sha2::Digest as _;
use std::fmt;

/// The flag every message names.
pub const FLAG: &str = "--alert-webhook";

/// A webhook alerts are POSTed to.
#[derive(Clone, PartialEq, Eq)]
pub struct WebhookTarget {
    /// Where to POST: the URL without its credentials or fragment.
    url: url::Url,
    /// HTTP Basic credentials, from the URL's user and password.
    credentials: Option<(String, Option<Secret>)>,
    /// `scheme://host[:port]/path`.
    label: String,
    /// The durable consumer of CHIME_ALERTS that serves this URL.
    consumer: String,
}

impl fmt::Debug for WebhookTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "WebhookTarget({})", self.label)
    }
}

/// The first part of `raw` that cannot hold a secret, for a message about
/// a value that is not even a URL.
fn shown(raw: &str) -> String {
    let cut = raw.find(['?', '#']).map_or(raw, |end| &raw[..end]);
    chime_runtime::secret::redact_url(cut)
}

impl WebhookTarget {
    /// Checks one URL: `http://` or `https://` with a host. The error
    /// names the flag and shows the URL without its secrets.
    pub fn parse(raw: &str) -> Result<WebhookTarget, String> {
        let raw = raw.trim();
        if raw.is_empty() {
            return Err(format!("{FLAG}: an empty URL"));
        }
        let mut url = url::Url::parse(raw)
            .map_err(|e| format!("{FLAG}: {} is not a URL: {e}", shown(raw)))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(format!(
                "{FLAG}: {} is not an http:// or https:// URL",
                shown(raw)
            ));
        }
        let Some(host) = url.host_str().filter(|h| !h.is_empty()) else {
            return Err(format!("{FLAG}: {} names no host", shown(raw)));
        };
        let authority = match url.port() {
            Some(port) => format!("{host}:{port}"),
            None => host.to_string(),
        };
        let label = format!("{}://{authority}{}", url.scheme(), url.path());
        let decode = |text: &str| percent_decode_str(text).decode_utf8_lossy().into_owned();
        let credentials = (!url.username().is_empty()).then(|| {
            (
                decode(url.username()),
                url.password().map(|p| Secret::new(decode(p))),
            )
        });
        // Neither can fail on an http(s) URL with a host.
        let _ = url.set_username("");
        let _ = url.set_password(None);
        url.set_fragment(None);
        let digest = format!("{:x}", sha2::Sha256::digest(url.as_str().as_bytes()));
        Ok(WebhookTarget {
            consumer: format!("chime-alert-webhook-{}", &digest[..16]),
            url,
            credentials,
            label,
        })
    }

    /// Every URL of the flag, in order; the same URL twice (credentials
    /// aside) is refused, as its deliveries would be one consumer's.
    pub fn parse_all<S: AsRef<str>>(raws: &[S]) -> Result<Vec<WebhookTarget>, String> {
        let mut targets: Vec<WebhookTarget> = Vec::new();
        for raw in raws {
            let target = WebhookTarget::parse(raw.as_ref())?;
            if targets.iter().any(|t| t.url == target.url) {
                return Err(format!("{FLAG}: {} is given twice", target.label));
            }
            targets.push(target);
        }
        Ok(targets)
    }

    /// Where to POST (without credentials; they go in `Authorization`).
    pub fn url(&self) -> &url::Url {
        &self.url
    }

    /// The user and password the URL carried.
    pub fn credentials(&self) -> Option<(&str, Option<&str>)> {
        self.credentials
            .as_ref()
            .map(|(user, password)| (user.as_str(), password.as_ref().map(Secret::expose)))
    }

    /// `scheme://host[:port]/path`: what logs, errors and metrics show.
    pub fn label(&self) -> &str {
        &self.label
    }

    /// The name of the durable consumer that serves this URL.
    pub fn consumer(&self) -> &str {
        &self.consumer
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_query_and_fragment_never_reach_the_label() {
        let target = WebhookTarget::parse(
            " https://alice:p%40ss@hooks.example:8443/chime/alerts?token=s3cret#x ",
        )
        .expect("a valid URL");
        assert_eq!(target.label(), "https://hooks.example:8443/chime/alerts");
        assert_eq!(
            target.url().as_str(),
            "https://hooks.example:8443/chime/alerts?token=s3cret"
        );
        assert_eq!(target.credentials(), Some(("alice", Some("p@ss"))));
        let debug = format!("{target:?}");
        assert!(
            !debug.contains("s3cret") && !debug.contains("p@ss"),
            "{debug}"
        );
        assert!(target.consumer().starts_with("chime-alert-webhook-"));
        assert_eq!(target.consumer().len(), "chime-alert-webhook-".len() + 16);
    }

    #[test]
    fn the_consumer_follows_the_url_not_its_credentials() {
        let a = WebhookTarget::parse("http://u:one@h/p").unwrap();
        let b = WebhookTarget::parse("http://u:two@h/p").unwrap();
        let c = WebhookTarget::parse("http://h/q").unwrap();
        assert_eq!(a.consumer(), b.consumer());
        assert_ne!(a.consumer(), c.consumer());
        let twice = WebhookTarget::parse_all(&["http://u:one@h/p", "http://h/p"]).unwrap_err();
        assert_eq!(twice, "--alert-webhook: http://h/p is given twice");
    }

    #[test]
    fn only_http_and_https_urls_with_a_host_are_taken() {
        for (raw, expected) in [
            ("", "--alert-webhook: an empty URL"),
            (
                "ftp://user:secret@files.example/x",
                "--alert-webhook: ftp://user:***@files.example/x is not an http:// or https:// URL",
            ),
            (
                "file:///etc/passwd",
                "--alert-webhook: file:///etc/passwd is not an http:// or https:// URL",
            ),
        ] {
            assert_eq!(WebhookTarget::parse(raw).unwrap_err(), expected, "{raw}");
        }
        let bad = WebhookTarget::parse("hooks.example/x?token=s3cret").unwrap_err();
        assert!(bad.starts_with("--alert-webhook: "), "{bad}");
        assert!(
            bad.contains("is not a URL") && !bad.contains("s3cret"),
            "{bad}"
        );
        let no_host = WebhookTarget::parse("http://:8080/x").unwrap_err();
        assert!(no_host.starts_with("--alert-webhook: "), "{no_host}");
        assert!(WebhookTarget::parse("http://127.0.0.1:9/hook").is_ok());
    }
}
