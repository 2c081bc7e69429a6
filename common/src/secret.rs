//! Secrets in settings: passwords, tokens, credentials inside URLs.
//!
//! A secret must never reach a log line, an error message or a `Debug`
//! print of a configuration. [`Secret`] holds one and prints as `***`;
//! [`redact_url`] is the one way a URL that may carry credentials is shown.

use std::fmt;
use std::str::FromStr;

/// A password or token from a flag or the environment; prints as `***`.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps a secret value.
    pub fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }

    /// The value itself, for the one place that sends it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(***)")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

impl FromStr for Secret {
    type Err = std::convert::Infallible;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(Secret(s.to_string()))
    }
}

/// `url` (or a comma-separated list of URLs) without its secrets: a password
/// becomes `***`, and so does a lone user name on a NATS URL, which is a
/// token there (`nats://TOKEN@host`). Anything that does not parse as a URL
/// with credentials is returned as it is.
pub fn redact_url(url: &str) -> String {
    url.split(',').map(redact_one).collect::<Vec<_>>().join(",")
}

fn redact_one(url: &str) -> String {
    let Some(scheme_end) = url.find("://") else {
        return url.to_string();
    };
    let rest_start = scheme_end + 3;
    let authority_end = url[rest_start..]
        .find(['/', '?', '#'])
        .map_or(url.len(), |i| rest_start + i);
    let Some(at) = url[rest_start..authority_end].rfind('@') else {
        return url.to_string();
    };
    let at = rest_start + at;
    let userinfo = &url[rest_start..at];
    let scheme = url[..scheme_end].trim().to_ascii_lowercase();
    let shown = match userinfo.split_once(':') {
        Some((user, _)) => format!("{user}:***"),
        None if matches!(scheme.as_str(), "nats" | "tls" | "ws" | "wss") => "***".to_string(),
        None => userinfo.to_string(),
    };
    format!("{}{shown}{}", &url[..rest_start], &url[at..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_print_as_stars() {
        let s: Secret = "hunter2".parse().unwrap();
        assert_eq!(format!("{s} {s:?}"), "*** Secret(***)");
        assert_eq!(s.expose(), "hunter2");
    }

    #[test]
    fn urls_lose_passwords_and_tokens() {
        for (url, shown) in [
            ("postgres://u:secret@h/db", "postgres://u:***@h/db"),
            ("postgres://u@h/db", "postgres://u@h/db"),
            ("sqlite://chime.db", "sqlite://chime.db"),
            (
                "nats://chime:s3cret@127.0.0.1:4222",
                "nats://chime:***@127.0.0.1:4222",
            ),
            ("nats://t0ken@h:4222", "nats://***@h:4222"),
            ("tls://a:b@h, nats://c@h", "tls://a:***@h, nats://***@h"),
            ("postgres://u:p@ss@h/db?x=@", "postgres://u:***@h/db?x=@"),
            ("not a url", "not a url"),
        ] {
            assert_eq!(redact_url(url), shown, "{url}");
        }
    }
}
