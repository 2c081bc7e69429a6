//! The contract's error shape: `{"error": {"code", "message", "field"?}}`.
//!
//! Every failure that reaches a user carries one of five codes and, where a
//! particular input was at fault, the JSON path of that input (`schedule.cron`).

use serde::{Deserialize, Serialize};
use std::fmt;

/// The error codes of CONTRACT.md.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// The request itself is wrong; retrying it unchanged will fail again.
    InvalidArgument,
    /// The named thing does not exist.
    NotFound,
    /// The request conflicts with the current state.
    Conflict,
    /// A dependency (database, NATS) is unreachable; retry later.
    Unavailable,
    /// A bug or an unexpected state; the message says what.
    Internal,
}

impl ErrorCode {
    /// The code as it appears on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::InvalidArgument => "invalid_argument",
            ErrorCode::NotFound => "not_found",
            ErrorCode::Conflict => "conflict",
            ErrorCode::Unavailable => "unavailable",
            ErrorCode::Internal => "internal",
        }
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One problem with one input field, found by validation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct FieldError {
    /// JSON path of the offending field, e.g. `schedule.cron` or `retry.max_attempts`.
    pub field: String,
    /// What is wrong, in words a person understands.
    pub message: String,
}

impl FieldError {
    /// A problem with `field`.
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        FieldError {
            field: field.into(),
            message: message.into(),
        }
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.field.is_empty() {
            f.write_str(&self.message)
        } else {
            write!(f, "{}: {}", self.field, self.message)
        }
    }
}

/// An error as carried in an API reply.
///
/// `field` names the first offending field; `details` lists every problem
/// validation found (an extension to the contract's shape, which clients that
/// only read `code`/`message`/`field` can ignore).
#[derive(
    Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error, utoipa::ToSchema,
)]
#[error("{code}: {message}")]
pub struct ApiError {
    pub code: ErrorCode,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub details: Vec<FieldError>,
}

impl ApiError {
    /// An error without a field.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        ApiError {
            code,
            message: message.into(),
            field: None,
            details: Vec::new(),
        }
    }

    /// `invalid_argument` for one field; an empty `field` (the request as a
    /// whole: not JSON, not an object) makes [`ApiError::invalid_request`].
    pub fn invalid(field: impl Into<String>, message: impl Into<String>) -> Self {
        let field = field.into();
        if field.is_empty() {
            return Self::invalid_request(message);
        }
        Self::from_field_errors(vec![FieldError::new(field, message)])
    }

    /// `invalid_argument` for the request as a whole, naming no field.
    pub fn invalid_request(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::InvalidArgument, message)
    }

    /// `invalid_argument` listing every problem; `field` and `message` come
    /// from the first (no `field` if the first names none).
    pub fn from_field_errors(errors: Vec<FieldError>) -> Self {
        let named = |first: &FieldError| Some(first.field.clone()).filter(|f| !f.is_empty());
        let (field, message) = match errors.first() {
            Some(first) if errors.len() == 1 => (named(first), first.to_string()),
            Some(first) => (
                named(first),
                format!("{} (and {} more problems)", first, errors.len() - 1),
            ),
            None => (None, "invalid request".to_string()),
        };
        ApiError {
            code: ErrorCode::InvalidArgument,
            message,
            field,
            details: errors,
        }
    }

    /// `not_found` for a thing named in the message.
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::NotFound, message)
    }

    /// `unavailable`: a dependency is down, retry later.
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Unavailable, message)
    }

    /// `internal`: something that should not happen.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Internal, message)
    }

    /// `conflict` with the current state.
    pub fn conflict(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Conflict, message)
    }
}

/// The `{"error": ...}` envelope of a failure reply.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ErrorReply {
    pub error: ApiError,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_of_the_whole_request_names_no_field_and_starts_with_its_words() {
        let error = ApiError::invalid("", "the request is not valid JSON");
        assert_eq!(error.field, None);
        assert_eq!(error.message, "the request is not valid JSON");
        assert!(error.details.is_empty());
        let json = serde_json::to_value(&error).expect("json");
        assert!(json.get("field").is_none(), "{json}");
    }

    #[test]
    fn an_error_of_one_field_names_it() {
        let error = ApiError::invalid("schedule.cron", "bad expression");
        assert_eq!(error.field.as_deref(), Some("schedule.cron"));
        assert_eq!(error.message, "schedule.cron: bad expression");
    }
}
