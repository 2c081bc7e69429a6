//! The worker library's errors: each variant is a case the caller can act on.

/// Why a worker could not be built or started.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    #[error("no NATS connection: call .nats(client) on the worker builder")]
    NoNats,
    #[error("threads must be at least 1 (it is the number of firings run at once)")]
    ZeroThreads,
    #[error("group {group:?} is invalid: {reason}")]
    InvalidGroup { group: String, reason: String },
    #[error("worker id {id:?} is invalid: {reason}")]
    InvalidWorkerId { id: String, reason: String },
    #[error("handler name {name:?} is invalid: {reason}")]
    InvalidHandlerName { name: String, reason: String },
    #[error("handler {0:?} is registered twice")]
    DuplicateHandler(String),
    #[error("{setting} {reason}")]
    InvalidSetting {
        setting: &'static str,
        reason: String,
    },
    #[error("cannot {what}: {source}")]
    Nats {
        what: String,
        #[source]
        source: async_nats::Error,
    },
}

impl WorkerError {
    pub(crate) fn nats(what: impl Into<String>) -> impl FnOnce(async_nats::Error) -> WorkerError {
        let what = what.into();
        move |source| WorkerError::Nats { what, source }
    }
}
