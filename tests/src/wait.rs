//! Waiting for a condition in a test without sleeping a fixed time.

use std::future::Future;
use std::time::Duration;

/// How often a condition is checked again.
const POLL: Duration = Duration::from_millis(50);

/// Polls `check` until it returns `Ok`, and returns its value; after
/// `timeout`, panics naming `what` and the last `Err` (what was seen instead).
pub async fn until_ok<T, F, Fut>(timeout: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        match check().await {
            Ok(value) => return value,
            Err(last) if tokio::time::Instant::now() >= deadline => {
                panic!("timed out waiting for {what}: {last}")
            }
            Err(_) => tokio::time::sleep(POLL).await,
        }
    }
}

/// Polls `check` until it returns true; panics naming `what` after `timeout`.
pub async fn eventually<F, Fut>(timeout: Duration, what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    until_ok(timeout, what, || {
        let done = check();
        async move {
            if done.await {
                Ok(())
            } else {
                Err("still not so".to_string())
            }
        }
    })
    .await
}
