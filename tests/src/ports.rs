//! Free TCP ports on 127.0.0.1 for the servers the harness starts.
//!
//! The operating system picks an unused port when we bind port 0; we close
//! that probe listener and hand the number to a child process. Between the
//! two another process could take it, so servers that can retry do
//! ([`crate::NatsServer::start`]). Within one test process the race is closed
//! entirely: a port handed out once is never handed out again, even after its
//! probe listener is gone and the kernel would offer it anew.

use std::collections::BTreeSet;
use std::net::TcpListener;
use std::sync::Mutex;

/// Every port this process has handed out so far.
static HANDED_OUT: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());

/// A TCP port on 127.0.0.1 that was free a moment ago and that no other
/// caller in this process has received.
pub fn free_port() -> u16 {
    loop {
        let listener = TcpListener::bind(("127.0.0.1", 0))
            .unwrap_or_else(|e| panic!("cannot bind 127.0.0.1:0 to find a free port: {e}"));
        let port = listener
            .local_addr()
            .expect("a bound listener has a local address")
            .port();
        let mut handed_out = HANDED_OUT.lock().unwrap_or_else(|p| p.into_inner());
        if handed_out.insert(port) {
            return port;
        }
    }
}
