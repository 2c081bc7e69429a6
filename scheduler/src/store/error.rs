//! The store's errors: one variant per thing a caller does differently.

use chime_common::{ApiError, FieldError};

/// What went wrong in the store.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum StoreError {
    /// The database cannot be reached (connection, pool, I/O). Retry later;
    /// the API answers `unavailable`, the submit consumer naks and retries.
    #[error("database unavailable: {0}")]
    Unavailable(String),
    /// The database aborted the transaction to resolve contention (deadlock,
    /// serialization failure, SQLite busy) and the store's own retries ran
    /// out. Nothing was changed; retrying is safe.
    #[error("database busy, nothing was changed: {0}")]
    Busy(String),
    /// A stored row cannot be read back (a spec that no longer parses, an
    /// unknown state). Names the row so an operator can repair it.
    #[error("stored row {id:?} is corrupt: {message}")]
    Corrupt {
        /// The row's primary key (job id or firing id).
        id: String,
        /// What is wrong with it.
        message: String,
    },
    /// The request is wrong (an invalid schedule, a malformed cursor).
    #[error("{0}")]
    Invalid(FieldError),
    /// The request conflicts with what is stored.
    #[error("conflict: {0}")]
    Conflict(String),
    /// A bug or an unexpected database error; the message says what.
    #[error("store internal error: {0}")]
    Internal(String),
}

impl StoreError {
    /// A corrupt row.
    pub fn corrupt(id: impl Into<String>, message: impl Into<String>) -> Self {
        StoreError::Corrupt {
            id: id.into(),
            message: message.into(),
        }
    }

    /// `Invalid` for one field.
    pub fn invalid(field: impl Into<String>, message: impl Into<String>) -> Self {
        StoreError::Invalid(FieldError::new(field, message))
    }

    /// True when the operation may simply be run again (`Unavailable`, `Busy`).
    pub fn is_retryable(&self) -> bool {
        matches!(self, StoreError::Unavailable(_) | StoreError::Busy(_))
    }
}

/// SQLSTATEs and SQLite result codes that mean "the transaction was rolled
/// back because of contention": safe to run again.
const TRANSIENT_CODES: [&str; 6] = [
    "40001", // PostgreSQL serialization_failure
    "40P01", // PostgreSQL deadlock_detected
    "55P03", // PostgreSQL lock_not_available
    "5",     // SQLITE_BUSY
    "6",     // SQLITE_LOCKED
    "517",   // SQLITE_BUSY_SNAPSHOT
];

impl From<sqlx::Error> for StoreError {
    fn from(e: sqlx::Error) -> Self {
        use sqlx::Error as E;
        match &e {
            E::Io(_)
            | E::Tls(_)
            | E::PoolTimedOut
            | E::PoolClosed
            | E::WorkerCrashed
            | E::Protocol(_) => StoreError::Unavailable(e.to_string()),
            E::Database(db) => {
                let code = db.code();
                let code = code.as_deref().unwrap_or("");
                if TRANSIENT_CODES.contains(&code) {
                    StoreError::Busy(db.message().to_string())
                } else if code.starts_with("08") || code == "57P01" || code == "57P03" {
                    // PostgreSQL connection exceptions and shutdowns.
                    StoreError::Unavailable(db.message().to_string())
                } else if db.is_unique_violation() {
                    StoreError::Conflict(db.message().to_string())
                } else {
                    StoreError::Internal(format!("database error {code}: {}", db.message()))
                }
            }
            _ => StoreError::Internal(e.to_string()),
        }
    }
}

impl From<sqlx::migrate::MigrateError> for StoreError {
    fn from(e: sqlx::migrate::MigrateError) -> Self {
        match e {
            sqlx::migrate::MigrateError::Execute(inner) => StoreError::from(inner),
            other => StoreError::Internal(format!("migrating the database: {other}")),
        }
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Unavailable(m) | StoreError::Busy(m) => {
                ApiError::unavailable(format!("the database is unavailable ({m}); retry later"))
            }
            StoreError::Invalid(field) => ApiError::from_field_errors(vec![field]),
            StoreError::Conflict(m) => ApiError::conflict(m),
            e @ StoreError::Corrupt { .. } => ApiError::internal(e.to_string()),
            StoreError::Internal(m) => ApiError::internal(m),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chime_common::ErrorCode;

    #[test]
    fn each_variant_maps_to_its_api_code() {
        let code = |e: StoreError| ApiError::from(e).code;
        assert_eq!(
            code(StoreError::Unavailable("down".into())),
            ErrorCode::Unavailable
        );
        assert_eq!(
            code(StoreError::Busy("deadlock".into())),
            ErrorCode::Unavailable
        );
        assert_eq!(
            code(StoreError::invalid("schedule.cron", "bad")),
            ErrorCode::InvalidArgument
        );
        assert_eq!(code(StoreError::Conflict("x".into())), ErrorCode::Conflict);
        assert_eq!(
            code(StoreError::corrupt("job-1", "bad spec")),
            ErrorCode::Internal
        );
        assert_eq!(
            code(StoreError::Internal("bug".into())),
            ErrorCode::Internal
        );
    }

    #[test]
    fn invalid_keeps_the_field_path() {
        let api = ApiError::from(StoreError::invalid("after", "not a cursor"));
        assert_eq!(api.field.as_deref(), Some("after"));
    }

    #[test]
    fn corrupt_names_the_row() {
        let api = ApiError::from(StoreError::corrupt("job-1", "bad spec"));
        assert!(api.message.contains("job-1"), "{}", api.message);
    }

    #[test]
    fn pool_timeouts_are_unavailable() {
        assert!(matches!(
            StoreError::from(sqlx::Error::PoolTimedOut),
            StoreError::Unavailable(_)
        ));
    }
}
