//! Durations and instants as the contract writes them.
//!
//! A DURATION is a string such as `"250ms"`, `"30s"`, `"1h 30m"` (parsed by
//! `humantime`) or an integer of milliseconds. A TIME is RFC 3339; Chime
//! always writes UTC with milliseconds and `Z`.

use chrono::{DateTime, SecondsFormat, Utc};
use serde::{Deserialize, Deserializer, Serializer};
use serde_json::Value;
use std::time::Duration;

/// Parses a DURATION from JSON: a humantime string or a non-negative integer of milliseconds.
pub fn parse_duration(value: &Value) -> Result<Duration, String> {
    match value {
        Value::String(s) => humantime::parse_duration(s.trim())
            .map_err(|e| format!("{s:?} is not a duration ({e}); write e.g. \"250ms\", \"30s\", \"1h 30m\" or an integer of milliseconds")),
        Value::Number(n) => n
            .as_u64()
            .map(Duration::from_millis)
            .ok_or_else(|| format!("{n} is not a whole, non-negative number of milliseconds")),
        other => Err(format!(
            "expected a duration string such as \"30s\" or an integer of milliseconds, found {}",
            json_kind(other)
        )),
    }
}

/// Formats a duration the way Chime writes it back (`"1h 30m"`, `"250ms"`).
pub fn format_duration(d: Duration) -> String {
    if d.is_zero() {
        return "0s".to_string();
    }
    let ms = u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    humantime::format_duration(Duration::from_millis(ms)).to_string()
}

/// Parses an RFC 3339 TIME from JSON.
pub fn parse_time(value: &Value) -> Result<DateTime<Utc>, String> {
    match value {
        Value::String(s) => parse_time_str(s),
        other => Err(format!(
            "expected an RFC 3339 time string such as \"2026-03-28T02:30:00Z\", found {}",
            json_kind(other)
        )),
    }
}

/// Parses an RFC 3339 TIME from text.
pub fn parse_time_str(s: &str) -> Result<DateTime<Utc>, String> {
    DateTime::parse_from_rfc3339(s.trim())
        .map(|t| t.with_timezone(&Utc))
        .map_err(|e| {
            format!("{s:?} is not an RFC 3339 time ({e}); write e.g. \"2026-03-28T02:30:00Z\"")
        })
}

/// Formats an instant as RFC 3339, UTC, with milliseconds and `Z`.
pub fn format_time(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// An instant from UTC milliseconds since the epoch (the store's representation).
pub fn from_millis(ms: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(ms).unwrap_or(DateTime::<Utc>::MIN_UTC)
}

/// Names a JSON value's kind for error messages.
pub fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Serde helpers: instants as RFC 3339 with milliseconds.
pub mod rfc3339_ms {
    use super::*;

    pub fn serialize<S: Serializer>(t: &DateTime<Utc>, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format_time(*t))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<DateTime<Utc>, D::Error> {
        let s = String::deserialize(d)?;
        parse_time_str(&s).map_err(serde::de::Error::custom)
    }
}

/// Serde helpers: optional instants as RFC 3339 with milliseconds.
pub mod rfc3339_ms_opt {
    use super::*;

    pub fn serialize<S: Serializer>(t: &Option<DateTime<Utc>>, s: S) -> Result<S::Ok, S::Error> {
        match t {
            Some(t) => s.serialize_some(&format_time(*t)),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<DateTime<Utc>>, D::Error> {
        let s = Option::<String>::deserialize(d)?;
        s.map(|s| parse_time_str(&s).map_err(serde::de::Error::custom))
            .transpose()
    }
}

/// Serde helpers: durations as contract DURATIONs (string or integer ms in, string out).
pub mod duration_serde {
    use super::*;

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format_duration(*d))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let v = Value::deserialize(d)?;
        parse_duration(&v).map_err(serde::de::Error::custom)
    }
}

/// Serde helpers: optional durations, written as [`duration_serde`] does.
pub mod duration_opt {
    use super::*;

    pub fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => s.serialize_some(&format_duration(*d)),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        Option::<Value>::deserialize(d)?
            .filter(|v| !v.is_null())
            .map(|v| parse_duration(&v).map_err(serde::de::Error::custom))
            .transpose()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn durations_parse_from_strings_and_integers() {
        assert_eq!(
            parse_duration(&json!("250ms")),
            Ok(Duration::from_millis(250))
        );
        assert_eq!(
            parse_duration(&json!("1h 30m")),
            Ok(Duration::from_secs(5400))
        );
        assert_eq!(
            parse_duration(&json!(1500)),
            Ok(Duration::from_millis(1500))
        );
        assert!(parse_duration(&json!(-1)).is_err());
        assert!(parse_duration(&json!(1.5)).is_err());
        assert!(parse_duration(&json!("soon")).is_err());
        assert!(parse_duration(&json!(true)).is_err());
    }

    #[test]
    fn durations_format_back_readably() {
        assert_eq!(format_duration(Duration::from_secs(5400)), "1h 30m");
        assert_eq!(format_duration(Duration::from_millis(250)), "250ms");
        assert_eq!(format_duration(Duration::ZERO), "0s");
    }

    #[test]
    fn times_are_written_in_utc_with_milliseconds() {
        let t = parse_time_str("2026-03-28T02:30:00+01:00").unwrap();
        assert_eq!(format_time(t), "2026-03-28T01:30:00.000Z");
        assert!(parse_time(&json!("yesterday")).is_err());
        assert!(parse_time(&json!(5)).is_err());
    }
}
