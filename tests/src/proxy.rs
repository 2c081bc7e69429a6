//! A TCP proxy a test controls, to put a network fault between one client
//! and a server (NATS, PostgreSQL) without touching the server or the other
//! clients.
//!
//! ```ignore
//! let proxy = Proxy::start(nats.addr()).await;
//! let client = async_nats::connect(format!("nats://{}", proxy.addr())).await?;
//! proxy.block();    // a partition: bytes stop flowing both ways, connections stay open
//! proxy.unblock();  // held bytes flow again
//! proxy.cut();      // a crash: every connection is closed, new ones are refused
//! proxy.unblock();  // connections are accepted again
//! ```
//!
//! `block()` is the fault a client notices only by its timeouts (a silent
//! network), `cut()` the one it notices at once (connection reset).
//! `retarget()` moves new connections to another server, as a virtual IP
//! or a DNS name moves to a promoted standby.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// What the proxy does with traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Forwards every byte.
    Forward,
    /// Forwards nothing; connections stay open and new ones are accepted
    /// but held too. Bytes sent meanwhile wait and flow on `unblock()`.
    Hold,
    /// Closes every connection and refuses new ones.
    Refuse,
}

/// A controllable TCP proxy on 127.0.0.1; stops when dropped.
pub struct Proxy {
    addr: SocketAddr,
    target: Arc<Mutex<SocketAddr>>,
    mode: Arc<watch::Sender<Mode>>,
    accept: JoinHandle<()>,
}

impl Proxy {
    /// Listens on a free port of 127.0.0.1 and forwards every connection to `target`.
    pub async fn start(target: SocketAddr) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the proxy");
        let addr = listener.local_addr().expect("the proxy's address");
        let mode = Arc::new(watch::Sender::new(Mode::Forward));
        let target = Arc::new(Mutex::new(target));
        let accept = tokio::spawn(accept_loop(listener, target.clone(), mode.clone()));
        Proxy {
            addr,
            target,
            mode,
            accept,
        }
    }

    /// Where clients connect.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Where it forwards new connections to.
    pub fn target(&self) -> SocketAddr {
        *self.target.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Forwards new connections to `target` from now on; connections made
    /// before keep their server (call `cut()` first to end them).
    pub fn retarget(&self, target: SocketAddr) {
        *self.target.lock().unwrap_or_else(|p| p.into_inner()) = target;
    }

    /// Stops forwarding in both directions and holds the connections open.
    pub fn block(&self) {
        self.mode.send_replace(Mode::Hold);
    }

    /// Closes every connection and refuses new ones.
    pub fn cut(&self) {
        self.mode.send_replace(Mode::Refuse);
    }

    /// Forwards again (held bytes first).
    pub fn unblock(&self) {
        self.mode.send_replace(Mode::Forward);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
        // Ends every connection: each pipe sees the closed channel.
        self.mode.send_replace(Mode::Refuse);
    }
}

async fn accept_loop(
    listener: TcpListener,
    target: Arc<Mutex<SocketAddr>>,
    mode: Arc<watch::Sender<Mode>>,
) {
    loop {
        let Ok((client, _)) = listener.accept().await else {
            return;
        };
        if *mode.borrow() == Mode::Refuse {
            drop(client);
            continue;
        }
        let mode = mode.subscribe();
        let target = *target.lock().unwrap_or_else(|p| p.into_inner());
        tokio::spawn(async move {
            let Ok(server) = TcpStream::connect(target).await else {
                return;
            };
            let _ = client.set_nodelay(true);
            let _ = server.set_nodelay(true);
            let (client_read, client_write) = client.into_split();
            let (server_read, server_write) = server.into_split();
            tokio::select! {
                _ = pipe(client_read, server_write, mode.clone()) => {}
                _ = pipe(server_read, client_write, mode) => {}
            }
        });
    }
}

/// Copies `from` to `to` while the mode allows; returns when either side
/// closes or the mode is `Refuse` (dropping both halves closes the sockets).
async fn pipe(mut from: OwnedReadHalf, mut to: OwnedWriteHalf, mut mode: watch::Receiver<Mode>) {
    let mut buffer = vec![0u8; 16 * 1024];
    loop {
        // Neither read nor write while held: the bytes wait in the kernel's buffers.
        match mode.wait_for(|m| *m != Mode::Hold).await {
            Ok(m) if *m == Mode::Forward => {}
            _ => return,
        }
        let read = tokio::select! {
            read = from.read(&mut buffer) => read,
            _ = mode.changed() => continue,
        };
        let n = match read {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        // Bytes read just as the proxy blocked are held until it forwards again.
        match mode.wait_for(|m| *m != Mode::Hold).await {
            Ok(m) if *m == Mode::Forward => {}
            _ => return,
        }
        if to.write_all(&buffer[..n]).await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    async fn echo_server() -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let (mut r, mut w) = socket.split();
                    let _ = tokio::io::copy(&mut r, &mut w).await;
                });
            }
        });
        addr
    }

    async fn roundtrip(stream: &mut TcpStream, text: &[u8], wait: Duration) -> Option<Vec<u8>> {
        stream.write_all(text).await.ok()?;
        let mut back = vec![0u8; text.len()];
        tokio::time::timeout(wait, stream.read_exact(&mut back))
            .await
            .ok()?
            .ok()?;
        Some(back)
    }

    #[tokio::test]
    async fn block_holds_bytes_until_unblock_and_cut_closes() {
        let proxy = Proxy::start(echo_server().await).await;
        let mut stream = TcpStream::connect(proxy.addr()).await.unwrap();
        let short = Duration::from_millis(300);
        let long = Duration::from_secs(5);
        assert_eq!(
            roundtrip(&mut stream, b"one", long).await.as_deref(),
            Some(&b"one"[..])
        );

        proxy.block();
        assert_eq!(roundtrip(&mut stream, b"two", short).await, None, "held");
        proxy.unblock();
        let mut back = vec![0u8; 3];
        tokio::time::timeout(long, stream.read_exact(&mut back))
            .await
            .expect("held bytes arrive after unblock")
            .unwrap();
        assert_eq!(back, b"two");

        proxy.cut();
        let mut byte = [0u8; 1];
        let closed = tokio::time::timeout(long, stream.read(&mut byte))
            .await
            .expect("the connection ends");
        assert!(matches!(closed, Ok(0) | Err(_)), "{closed:?}");
        proxy.unblock();
        let mut again = TcpStream::connect(proxy.addr()).await.unwrap();
        assert_eq!(
            roundtrip(&mut again, b"three", long).await.as_deref(),
            Some(&b"three"[..])
        );
    }
}
