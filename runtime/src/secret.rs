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

/// `url` (or a comma-separated list of URLs) without its secrets, the one
/// redaction every program uses for NATS and database URLs alike:
///
/// - a password becomes `***` (`nats://user:***@host`);
/// - a lone user name on a NATS URL is a token there (`nats://***@host`),
///   and so is one that looks like an nkey seed on any URL;
/// - a URL without a scheme is read as NATS reads it, as `nats://`, so
///   `user:secret@host:4222` loses its password too;
/// - a `password` query parameter (which PostgreSQL URLs accept) becomes
///   `password=***`.
///
/// Anything else is returned as it is.
pub fn redact_url(url: &str) -> String {
    url.split(',').map(redact_one).collect::<Vec<_>>().join(",")
}

/// Schemes where a user name without a password is a token.
const TOKEN_SCHEMES: [&str; 4] = ["nats", "tls", "ws", "wss"];

fn redact_one(url: &str) -> String {
    let (scheme, rest_start) = match url.find("://") {
        Some(end) => (url[..end].trim().to_ascii_lowercase(), end + 3),
        None => ("nats".to_string(), url.len() - url.trim_start().len()),
    };
    let authority_end = url[rest_start..]
        .find(['/', '?', '#'])
        .map_or(url.len(), |i| rest_start + i);
    let mut shown = match url[rest_start..authority_end].rfind('@') {
        Some(at) => {
            let at = rest_start + at;
            let userinfo = &url[rest_start..at];
            let userinfo = match userinfo.split_once(':') {
                Some((user, _)) => format!("{user}:***"),
                None if TOKEN_SCHEMES.contains(&scheme.as_str()) || looks_like_seed(userinfo) => {
                    "***".to_string()
                }
                None => userinfo.to_string(),
            };
            format!(
                "{}{userinfo}{}",
                &url[..rest_start],
                &url[at..authority_end]
            )
        }
        None => url[..authority_end].to_string(),
    };
    shown.push_str(&redact_query(&url[authority_end..]));
    shown
}

/// An nkey seed: `S`, a key type letter, then base32 (58 characters in all).
fn looks_like_seed(text: &str) -> bool {
    text.len() == 58
        && text.starts_with('S')
        && text
            .bytes()
            .all(|b| b.is_ascii_uppercase() || (b'2'..=b'7').contains(&b))
}

/// `tail` (path, query and fragment) with the value of every `password`
/// query parameter replaced by `***`.
fn redact_query(tail: &str) -> String {
    let Some(query_start) = tail.find('?') else {
        return tail.to_string();
    };
    let query_end = tail[query_start..]
        .find('#')
        .map_or(tail.len(), |i| query_start + i);
    let pairs: Vec<String> = tail[query_start + 1..query_end]
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some((key, _)) if key.eq_ignore_ascii_case("password") => format!("{key}=***"),
            _ => pair.to_string(),
        })
        .collect();
    format!(
        "{}?{}{}",
        &tail[..query_start],
        pairs.join("&"),
        &tail[query_end..]
    )
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

    #[test]
    fn urls_without_a_scheme_are_redacted_as_nats_reads_them() {
        for (url, shown) in [
            ("chime:s3cret@127.0.0.1:4222", "chime:***@127.0.0.1:4222"),
            ("t0ken@h:4222", "***@h:4222"),
            ("127.0.0.1:4222", "127.0.0.1:4222"),
        ] {
            assert_eq!(redact_url(url), shown, "{url}");
        }
    }

    #[test]
    fn nkey_seeds_are_tokens_on_any_url() {
        let seed = "SUACSSL3UAHUDXKFSNVUZRF5UHPMWZ6BFDTJ7M6USDXIEDNPPQYYYCU3VY";
        assert!(looks_like_seed(seed));
        assert_eq!(
            redact_url(&format!("nats://{seed}@h:4222")),
            "nats://***@h:4222"
        );
        assert_eq!(
            redact_url(&format!("postgres://{seed}@h/db")),
            "postgres://***@h/db"
        );
        assert_eq!(
            redact_url(&format!("nats://UAKEY:{seed}@h")),
            "nats://UAKEY:***@h"
        );
        assert_eq!(redact_url("postgres://chime@h/db"), "postgres://chime@h/db");
    }

    #[test]
    fn password_parameters_are_redacted() {
        for (url, shown) in [
            (
                "postgres://h/db?user=u&password=secret&sslmode=require",
                "postgres://h/db?user=u&password=***&sslmode=require",
            ),
            (
                "postgres://u:p@h/db?PASSWORD=x#frag",
                "postgres://u:***@h/db?PASSWORD=***#frag",
            ),
            (
                "postgres://h/db?sslmode=disable",
                "postgres://h/db?sslmode=disable",
            ),
        ] {
            assert_eq!(redact_url(url), shown, "{url}");
        }
    }

    #[test]
    fn every_url_of_a_list_is_redacted() {
        assert_eq!(
            redact_url("nats://a:b@h1:4222,nats://a:b@h2:4222,h3:4222,tok@h4"),
            "nats://a:***@h1:4222,nats://a:***@h2:4222,h3:4222,***@h4"
        );
        assert_eq!(
            redact_url("tls://a:b@h, nats://c@h"),
            "tls://a:***@h, nats://***@h"
        );
    }
}
