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

/// Why a database error is worth retrying.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Transient {
    /// The transaction was rolled back for contention (a deadlock, a
    /// serialization failure, a lock wait that timed out, SQLite busy or
    /// locked): [`StoreError::Busy`], retried at once by the store itself.
    Contention,
    /// The database cannot serve now (connection lost, out of resources,
    /// shutting down): [`StoreError::Unavailable`].
    Unavailable,
}

/// PostgreSQL SQLSTATEs of a transaction rolled back for contention:
/// serialization_failure, deadlock_detected, lock_not_available.
const PG_CONTENTION: [&str; 3] = ["40001", "40P01", "55P03"];

/// What a database error code means, if it is transient.
///
/// PostgreSQL (`sqlite` false): the contention codes above; class 08
/// (connection exception), class 53 (insufficient resources: disk full, out
/// of memory, too many connections) and class 57P (operator intervention:
/// admin or crash shutdown, cannot connect now, database dropped, idle
/// session timeout) are unavailability. A cancelled statement (57014, e.g.
/// `statement_timeout`) is not: a statement too slow to ever finish must
/// not be retried forever.
///
/// SQLite (`sqlite` true, an extended result code): primary code (the low
/// byte) SQLITE_BUSY (5) or SQLITE_LOCKED (6) is contention, SQLITE_FULL (13,
/// the disk is full) unavailability.
fn transient_code(sqlite: bool, code: &str) -> Option<Transient> {
    if sqlite {
        return match code.parse::<i32>().ok()? & 0xff {
            5 | 6 => Some(Transient::Contention),
            13 => Some(Transient::Unavailable),
            _ => None,
        };
    }
    if PG_CONTENTION.contains(&code) {
        Some(Transient::Contention)
    } else if code.starts_with("08") || code.starts_with("53") || code.starts_with("57P") {
        Some(Transient::Unavailable)
    } else {
        None
    }
}

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
                let sqlite = db.try_downcast_ref::<sqlx::sqlite::SqliteError>().is_some();
                match transient_code(sqlite, code) {
                    Some(Transient::Contention) => StoreError::Busy(db.message().to_string()),
                    Some(Transient::Unavailable) => {
                        StoreError::Unavailable(db.message().to_string())
                    }
                    None if db.is_unique_violation() => {
                        StoreError::Conflict(db.message().to_string())
                    }
                    None => {
                        StoreError::Internal(format!("database error {code}: {}", db.message()))
                    }
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

/// A periodic service's pass fails with the store's error: whether the next
/// pass may simply try again is the store's to say.
impl chime_runtime::service::ServiceError for StoreError {
    fn is_retryable(&self) -> bool {
        StoreError::is_retryable(self)
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
    fn postgres_codes_are_classified_by_class() {
        let pg = |code| transient_code(false, code);
        for code in ["40001", "40P01", "55P03"] {
            assert_eq!(pg(code), Some(Transient::Contention), "{code}");
        }
        for code in [
            "08000", "08003", "08006", "08001", "08004", "08P01", "53000", "53100", "53200",
            "53300", "53400", "57P01", "57P02", "57P03", "57P04", "57P05",
        ] {
            assert_eq!(pg(code), Some(Transient::Unavailable), "{code}");
        }
        // A spec's or a bug's fault, or a statement too slow to finish: final.
        for code in ["23505", "22021", "42P01", "P0001", "57014", "XX000", ""] {
            assert_eq!(pg(code), None, "{code}");
        }
    }

    #[test]
    fn sqlite_codes_are_classified_by_primary_code() {
        let sqlite = |code| transient_code(true, code);
        // BUSY, BUSY_RECOVERY, BUSY_SNAPSHOT, BUSY_TIMEOUT, LOCKED, LOCKED_SHAREDCACHE.
        for code in ["5", "261", "517", "773", "6", "262"] {
            assert_eq!(sqlite(code), Some(Transient::Contention), "{code}");
        }
        assert_eq!(sqlite("13"), Some(Transient::Unavailable));
        // CONSTRAINT_TRIGGER, CONSTRAINT_UNIQUE, CORRUPT, ERROR, not a number.
        for code in ["1811", "2067", "11", "1", "55P03"] {
            assert_eq!(sqlite(code), None, "{code}");
        }
    }

    #[test]
    fn pool_timeouts_are_unavailable() {
        assert!(matches!(
            StoreError::from(sqlx::Error::PoolTimedOut),
            StoreError::Unavailable(_)
        ));
    }
}
