//! The `http` handler ignores the proxy settings of the worker's
//! environment: a proxy resolves the job's host name itself, past the
//! resolver that keeps private addresses out, and a proxy written as an
//! address is reached without that check at all. Alone in its test binary
//! because it sets the process's environment.

use chime_common::FiringId;
use chime_worker::handlers::http::HttpHandler;
use chime_worker::{FiringContext, FiringDetails, Handler};
use chrono::Utc;
use serde_json::json;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

#[tokio::test(flavor = "current_thread")]
async fn environment_proxies_are_not_used() {
    // A "proxy" that counts who reaches it and answers 200 to anything.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let proxy = format!("http://{}", listener.local_addr().unwrap());
    let reached = Arc::new(AtomicUsize::new(0));
    let seen = reached.clone();
    tokio::spawn(async move {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        while let Ok((mut socket, _)) = listener.accept().await {
            seen.fetch_add(1, Ordering::SeqCst);
            let mut buf = [0u8; 4096];
            let _ = socket.read(&mut buf).await;
            let _ = socket
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
                .await;
        }
    });
    for variable in [
        "HTTP_PROXY",
        "http_proxy",
        "HTTPS_PROXY",
        "https_proxy",
        "ALL_PROXY",
    ] {
        // SAFETY: the only test of this binary, on a current-thread runtime,
        // sets these before anything reads the environment.
        unsafe { std::env::set_var(variable, &proxy) };
    }
    let handler = HttpHandler::new().expect("a client");
    let now = Utc::now();
    let ctx = FiringContext {
        firing: FiringDetails {
            firing_id: FiringId::new("job-1", 1_700_000_000_000, 1),
            job_id: "job-1".into(),
            handler: "http".into(),
            scheduled_at: now,
            due_at: now,
            attempt: 1,
            priority: 5,
            // `.invalid` never resolves: without a proxy the request fails
            // at the name; through one it would succeed.
            payload: json!({"url": "http://metadata.invalid/latest/"}),
            shard: None,
            traceparent: None,
        },
        deadline: now + chrono::Duration::seconds(10),
        cancel: CancellationToken::new(),
        max_output_bytes: 1024,
        worker_id: "w".into(),
        traceparent: chime_common::traceparent::TraceParent::fresh(),
    };
    let error = handler
        .run(ctx)
        .await
        .expect_err("the name does not resolve");
    assert!(
        error.message.contains("metadata.invalid"),
        "{}",
        error.message
    );
    assert_eq!(reached.load(Ordering::SeqCst), 0, "the proxy was used");
}
