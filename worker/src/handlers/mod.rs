//! Built-in handlers: `shell` (opt-in) and `http`.

pub mod http;
pub mod shell;

pub use http::HttpHandler;
pub use shell::ShellHandler;
