//! Built-in handlers: `shell` (opt-in) and `http`, and what a worker runs
//! for a handler it does not agree to run (`--handlers`).

pub mod http;
pub mod shell;

pub use http::HttpHandler;
pub use shell::ShellHandler;

use crate::firing::context::FiringContext;
use crate::handler::{Handler, HandlerError, HandlerResult};
use async_trait::async_trait;

/// The built-in handlers' names.
pub const BUILT_IN: [&str; 2] = chime_common::payloads::BUILT_IN;

/// Stands in for a built-in handler left out of `--handlers`: every firing
/// for it fails, saying so.
#[derive(Debug, Clone)]
pub struct NotAllowed {
    name: String,
}

impl NotAllowed {
    /// Refuses firings of handler `name`.
    pub fn new(name: impl Into<String>) -> Self {
        NotAllowed { name: name.into() }
    }
}

#[async_trait]
impl Handler for NotAllowed {
    fn offered(&self) -> bool {
        false
    }

    async fn run(&self, _ctx: FiringContext) -> HandlerResult {
        Err(HandlerError::new(format!(
            "handler not allowed: this worker runs only the handlers in --handlers, not {:?}",
            self.name
        )))
    }
}
