//! The `Handler` trait, its error, and the registry of named handlers.

use crate::firing::context::FiringContext;
use async_trait::async_trait;
use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::sync::Arc;

/// What a run returns: the output to report (if any), or a failure.
pub type HandlerResult = Result<Option<String>, HandlerError>;

/// Runs firings of one handler name.
///
/// Each run gets its own tokio task: a panic fails that firing only
/// (`handler panicked: …`), and the worker drops the future when the
/// firing's deadline passes or it is cancelled.
#[async_trait]
pub trait Handler: Send + Sync + 'static {
    /// Runs one firing. `Ok(output)` is success; output is cut to its last
    /// `ctx.max_output_bytes` bytes.
    async fn run(&self, ctx: FiringContext) -> HandlerResult;

    /// Whether this handler runs firings at all, rather than failing every
    /// one for a setting of the worker (a handler left out of `--handlers`,
    /// `shell` without `--allow-shell`). Heartbeats list only the handlers
    /// offered, so the scheduler can warn of a job no worker will run.
    fn offered(&self) -> bool {
        true
    }
}

/// A failed run: a message for the firing's `error`, and optionally the output so far.
///
/// Any `std::error::Error` converts into it, so handlers can use `?`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HandlerError {
    pub message: String,
    pub output: Option<String>,
}

impl HandlerError {
    /// A failure with `message` and no output.
    pub fn new(message: impl Into<String>) -> Self {
        HandlerError {
            message: message.into(),
            output: None,
        }
    }

    /// Attaches the output produced before the failure.
    pub fn with_output(mut self, output: impl Into<String>) -> Self {
        self.output = Some(output.into());
        self
    }
}

impl fmt::Display for HandlerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl<E: std::error::Error + Send + Sync + 'static> From<E> for HandlerError {
    fn from(error: E) -> Self {
        // Include the causes: "connect failed: connection refused".
        let mut message = error.to_string();
        let mut source = error.source();
        while let Some(cause) = source {
            let text = cause.to_string();
            if !message.contains(&text) {
                message.push_str(": ");
                message.push_str(&text);
            }
            source = cause.source();
        }
        HandlerError::new(message)
    }
}

/// A handler made from an async closure (see [`WorkerBuilder::handler_fn`](crate::WorkerBuilder::handler_fn)).
pub struct FnHandler<F>(pub F);

#[async_trait]
impl<F, Fut> Handler for FnHandler<F>
where
    F: Fn(FiringContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = HandlerResult> + Send + 'static,
{
    async fn run(&self, ctx: FiringContext) -> HandlerResult {
        (self.0)(ctx).await
    }
}

/// Handlers by name. The set is fixed once the worker is built, which also
/// bounds the `handler` metric label.
#[derive(Clone, Default)]
pub(crate) struct Handlers {
    by_name: HashMap<String, Arc<dyn Handler>>,
}

impl Handlers {
    pub(crate) fn insert(&mut self, name: String, handler: Arc<dyn Handler>) -> bool {
        self.by_name.insert(name, handler).is_none()
    }

    pub(crate) fn get(&self, name: &str) -> Option<Arc<dyn Handler>> {
        self.by_name.get(name).cloned()
    }

    /// The metric label for `name`: itself if registered, else `unknown`.
    pub(crate) fn label<'a>(&self, name: &'a str) -> &'a str {
        if self.by_name.contains_key(name) {
            name
        } else {
            "unknown"
        }
    }

    pub(crate) fn names(&self) -> Vec<&str> {
        let mut names: Vec<&str> = self.by_name.keys().map(String::as_str).collect();
        names.sort_unstable();
        names
    }

    /// The names of the handlers that run firings ([`Handler::offered`]), sorted.
    pub(crate) fn offered(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .by_name
            .iter()
            .filter(|(_, handler)| handler.offered())
            .map(|(name, _)| name.clone())
            .collect();
        names.sort_unstable();
        names
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_convert_with_their_causes() {
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "no such file");
        let error: HandlerError = io.into();
        assert_eq!(error.message, "no such file");
        assert_eq!(error.output, None);
        let error = HandlerError::new("boom").with_output("partial");
        assert_eq!(error.to_string(), "boom");
        assert_eq!(error.output.as_deref(), Some("partial"));
    }

    #[test]
    fn unregistered_handlers_are_labelled_unknown() {
        let mut handlers = Handlers::default();
        handlers.insert(
            "echo".into(),
            Arc::new(FnHandler(|_ctx| async { Ok(None) })),
        );
        assert_eq!(handlers.label("echo"), "echo");
        assert_eq!(handlers.label("job-1234"), "unknown");
        assert_eq!(handlers.names(), vec!["echo"]);
    }

    #[test]
    fn handlers_that_refuse_every_firing_are_not_offered() {
        let mut handlers = Handlers::default();
        handlers.insert(
            "echo".into(),
            Arc::new(FnHandler(|_ctx| async { Ok(None) })),
        );
        handlers.insert(
            "http".into(),
            Arc::new(crate::handlers::NotAllowed::new("http")),
        );
        handlers.insert(
            "shell".into(),
            Arc::new(crate::handlers::ShellHandler::disabled()),
        );
        assert_eq!(handlers.names(), vec!["echo", "http", "shell"]);
        assert_eq!(handlers.offered(), vec!["echo"]);
        handlers.insert(
            "shell".into(),
            Arc::new(crate::handlers::ShellHandler::enabled()),
        );
        assert_eq!(handlers.offered(), vec!["echo", "shell"]);
    }
}
