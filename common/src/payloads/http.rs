//! The `http` handler's payload: `{"url": "https://…", "method"?: "GET",
//! "headers"?: {"Name": "value"}, "body"?: "text" | JSON}`.
//!
//! The rules are HTTP's own: an absolute `http` or `https` URL, a method
//! and header names made of token characters (RFC 9110 `tchar`), header
//! values without control characters. A payload that passes them becomes a
//! request; whether its host may be reached is the worker's to decide
//! when it runs (`--http-allow-private`, DNS at the time).

use super::{at, object, present, string_map};
use crate::duration::json_kind;
use crate::error::FieldError;
use serde_json::Value;
use std::collections::BTreeMap;
use url::Url;

/// The handler's name.
pub const HANDLER: &str = "http";

/// The payload's fields.
pub const FIELDS: [&str; 4] = ["url", "method", "headers", "body"];

/// The longest method name accepted.
pub const MAX_METHOD_LEN: usize = 32;

/// The longest header name accepted.
pub const MAX_HEADER_NAME_LEN: usize = 256;

/// The shape, for messages.
pub const USAGE: &str = r#"an http payload is {"url": "https://...", "method"?: "GET", "headers"?: {"Name": "value"}, "body"?: "text" or JSON}"#;

/// An `http` payload, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpPayload {
    /// An absolute `http` or `https` URL.
    pub url: Url,
    /// The method, upper case (`GET` when absent).
    pub method: String,
    /// Headers added to the request, as written.
    pub headers: BTreeMap<String, String>,
    /// A string is sent as it is; other JSON is sent as JSON.
    pub body: Option<Value>,
}

impl HttpPayload {
    /// Reads the payload at JSON path `path`, reporting every problem with
    /// its path (`payload.url`, `payload.headers.X-Key`).
    pub fn from_json(payload: &Value, path: &str) -> Result<HttpPayload, Vec<FieldError>> {
        let mut errors = Vec::new();
        let obj = object(payload, path, &FIELDS, USAGE, &mut errors);
        if !payload.is_object() && !payload.is_null() {
            return Err(errors);
        }
        let url = url(present(obj, "url"), &at(path, "url"), &mut errors);
        let method = match present(obj, "method") {
            None => Some("GET".to_string()),
            Some(Value::String(m)) if is_method(m) => Some(m.to_ascii_uppercase()),
            Some(Value::String(m)) => {
                errors.push(FieldError::new(
                    at(path, "method"),
                    format!(
                        "{m:?} is not an HTTP method: 1 to {MAX_METHOD_LEN} letters, digits \
                         or !#$%&'*+-.^_`|~, e.g. GET, POST, PUT"
                    ),
                ));
                None
            }
            Some(other) => {
                errors.push(FieldError::new(
                    at(path, "method"),
                    format!(
                        "expected a string such as \"POST\", found {}",
                        json_kind(other)
                    ),
                ));
                None
            }
        };
        let headers = string_map(
            present(obj, "headers"),
            &at(path, "headers"),
            &mut errors,
            header_problem,
        );
        let body = present(obj, "body").cloned();
        match (url, method) {
            (Some(url), Some(method)) if errors.is_empty() => Ok(HttpPayload {
                url,
                method,
                headers,
                body,
            }),
            _ => Err(errors),
        }
    }
}

/// `url`: required, absolute, `http` or `https`, with a host.
fn url(value: Option<&Value>, path: &str, errors: &mut Vec<FieldError>) -> Option<Url> {
    let text = match value {
        Some(Value::String(text)) => text,
        None => {
            errors.push(FieldError::new(
                path,
                "is required: the http or https URL to request, e.g. \"https://example.com/hook\"",
            ));
            return None;
        }
        Some(other) => {
            errors.push(FieldError::new(
                path,
                format!("expected a URL string, found {}", json_kind(other)),
            ));
            return None;
        }
    };
    match Url::parse(text) {
        Ok(url) if matches!(url.scheme(), "http" | "https") && url.has_host() => Some(url),
        Ok(url) => {
            errors.push(FieldError::new(
                path,
                format!(
                    "must be an http or https URL, found scheme {:?}",
                    url.scheme()
                ),
            ));
            None
        }
        Err(e) => {
            errors.push(FieldError::new(
                path,
                format!("is not an absolute URL ({e}); write e.g. \"https://example.com/hook\""),
            ));
            None
        }
    }
}

/// A token character (RFC 9110 `tchar`): what methods and header names are made of.
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// Whether `m` is a method name (any case; the worker sends it upper case).
pub fn is_method(m: &str) -> bool {
    (1..=MAX_METHOD_LEN).contains(&m.len()) && m.bytes().all(is_tchar)
}

/// Whether `name` is a header name.
pub fn is_header_name(name: &str) -> bool {
    (1..=MAX_HEADER_NAME_LEN).contains(&name.len()) && name.bytes().all(is_tchar)
}

/// Whether `value` is a header value: no control character but tab.
pub fn is_header_value(value: &str) -> bool {
    value
        .bytes()
        .all(|b| b == b'\t' || (b >= 0x20 && b != 0x7f))
}

/// What is wrong with one header, if anything.
fn header_problem(name: &str, value: &str) -> Option<String> {
    if !is_header_name(name) {
        Some(format!(
            "{name:?} is not a header name: 1 to {MAX_HEADER_NAME_LEN} letters, digits or \
             !#$%&'*+-.^_`|~"
        ))
    } else if !is_header_value(value) {
        Some(
            "the value must not contain control characters (line breaks, NUL) other than tab"
                .into(),
        )
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn fields(payload: Value) -> Vec<String> {
        match HttpPayload::from_json(&payload, "payload") {
            Ok(p) => panic!("{payload} accepted as {p:?}"),
            Err(errors) => errors.into_iter().map(|e| e.field).collect(),
        }
    }

    #[test]
    fn a_full_payload_is_read() {
        let p = HttpPayload::from_json(
            &json!({"url": "https://user:pw@example.com:8443/hook?x=1", "method": "post",
                "headers": {"X-Api-Key": "k\tv", "Content-Type": "text/plain"}, "body": {"a": 1}}),
            "payload",
        )
        .unwrap();
        assert_eq!(p.url.host_str(), Some("example.com"));
        assert_eq!(p.method, "POST");
        assert_eq!(p.headers.len(), 2);
        assert_eq!(p.body, Some(json!({"a": 1})));
        let p = HttpPayload::from_json(&json!({"url": "http://10.0.0.1/"}), "payload").unwrap();
        assert_eq!((p.method.as_str(), p.body), ("GET", None));
    }

    #[test]
    fn the_url_is_required_absolute_and_http() {
        assert_eq!(fields(json!(null)), ["payload.url"]);
        assert_eq!(fields(json!({"method": "GET"})), ["payload.url"]);
        for bad in [
            json!("example.com/hook"),
            json!("/hook"),
            json!("ftp://example.com/x"),
            json!("file:///etc/passwd"),
            json!("mailto:a@example.com"),
            json!("http://"),
            json!("https://exa mple.com"),
            json!(""),
            json!(42),
            json!({"host": "x"}),
        ] {
            assert_eq!(fields(json!({"url": bad})), ["payload.url"], "{bad}");
        }
    }

    #[test]
    fn methods_are_tokens() {
        for good in ["GET", "post", "PROPFIND", "M-SEARCH"] {
            let p = HttpPayload::from_json(&json!({"url": "http://x.test", "method": good}), "p");
            assert_eq!(p.map(|p| p.method), Ok(good.to_ascii_uppercase()));
        }
        for bad in [
            json!("GE T"),
            json!(""),
            json!("GET\r\n"),
            json!("ÜBER"),
            json!(1),
        ] {
            assert_eq!(
                fields(json!({"url": "http://x.test", "method": bad})),
                ["payload.method"],
                "{bad}"
            );
        }
        assert_eq!(
            fields(json!({"url": "http://x.test", "method": "A".repeat(MAX_METHOD_LEN + 1)})),
            ["payload.method"]
        );
    }

    #[test]
    fn headers_are_checked_by_name() {
        assert_eq!(
            fields(json!({"url": "http://x.test",
                "headers": {"bad name": "v", "X-Ok": "v", "X-Break": "a\r\nInjected: 1", "X-N": 1}})),
            [
                "payload.headers.X-Break",
                "payload.headers.X-N",
                "payload.headers.bad name"
            ]
        );
        assert_eq!(
            fields(json!({"url": "http://x.test", "headers": ["X-A: b"]})),
            ["payload.headers"]
        );
    }

    #[test]
    fn unknown_keys_are_refused_by_name() {
        let errors = HttpPayload::from_json(
            &json!({"url": "http://x.test", "header": {}, "timeout": "5s"}),
            "payload",
        )
        .unwrap_err();
        let f: Vec<&str> = errors.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(f, ["payload.header", "payload.timeout"]);
        assert!(
            errors[0].message.contains("did you mean `headers`?"),
            "{}",
            errors[0]
        );
        assert_eq!(fields(json!("https://example.com")), ["payload"]);
    }

    proptest! {
        /// Any JSON at all is read without panicking, and what is accepted
        /// has exactly the properties the rules promise.
        #[test]
        fn hostile_values_are_refused_or_kept_whole(
            url in ".{0,40}",
            method in ".{0,40}",
            name in ".{0,20}",
            value in ".{0,40}",
        ) {
            let payload = json!({"url": url, "method": method, "headers": {name.clone(): value.clone()}});
            match HttpPayload::from_json(&payload, "payload") {
                Ok(p) => {
                    prop_assert!(matches!(p.url.scheme(), "http" | "https"));
                    prop_assert!(is_method(&method));
                    prop_assert_eq!(p.method, method.to_ascii_uppercase());
                    prop_assert!(is_header_name(&name) && is_header_value(&value));
                    prop_assert_eq!(p.headers.get(&name), Some(&value));
                }
                Err(errors) => {
                    prop_assert!(!errors.is_empty());
                    prop_assert!(errors.iter().all(|e| e.field.starts_with("payload")));
                }
            }
        }
    }
}
