//! Connections the fast paths keep between statements.
//!
//! sqlx's pool pings every connection it gets back (a round trip, so that a
//! connection left mid-statement by a cancelled caller is not reused), and
//! the fast paths are a statement each: half of their round trips, and of
//! the database backend's wake-ups, would be those pings. Here a connection
//! whose statement completed goes back to a free list as it is; one whose
//! caller failed or was cancelled is dropped (closed) instead, which is what
//! the ping protects against. At most the pool's `max_connections` are in
//! use at once, and a new one is opened only when none is free, so no more
//! than that exist, as with the pool itself.

use sqlx::any::AnyRow;
use sqlx::query::QueryAs;
use sqlx::{Any, AnyConnection, AnyPool, FromRow};
use std::sync::{Arc, Mutex};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// A pool's connections, taken off it for good and handed out again.
#[derive(Clone)]
pub(super) struct HeldConnections {
    pool: AnyPool,
    /// `None` once closed.
    free: Arc<Mutex<Option<Vec<AnyConnection>>>>,
    in_use: Arc<Semaphore>,
}

/// One connection in use; [`Held::keep`] returns it, dropping closes it.
struct Held {
    connection: AnyConnection,
    free: Arc<Mutex<Option<Vec<AnyConnection>>>>,
    _in_use: OwnedSemaphorePermit,
}

impl HeldConnections {
    /// At most as many connections of `pool` as it would open itself.
    pub(super) fn new(pool: AnyPool) -> Self {
        let max = pool.options().get_max_connections().max(1) as usize;
        HeldConnections {
            pool,
            free: Arc::new(Mutex::new(Some(Vec::new()))),
            in_use: Arc::new(Semaphore::new(max)),
        }
    }

    /// Closes the free connections and the pool: later statements fail.
    pub(super) async fn close(&self) {
        self.in_use.close();
        let free = self.free.lock().map(|mut free| free.take());
        for connection in free.ok().flatten().unwrap_or_default() {
            // Closing says goodbye to the server; one that fails is dropped anyway.
            let _ = sqlx::Connection::close(connection).await;
        }
        self.pool.close().await;
    }

    /// Runs `query` on a held connection and returns its rows; the
    /// connection is kept only if the statement completed.
    pub(super) async fn fetch_all<'q, O>(
        &self,
        query: QueryAs<'q, Any, O, sqlx::any::AnyArguments<'q>>,
    ) -> Result<Vec<O>, sqlx::Error>
    where
        O: Send + Unpin + for<'r> FromRow<'r, AnyRow>,
    {
        let mut held = self.take().await?;
        let rows = query.fetch_all(&mut held.connection).await?;
        held.keep();
        Ok(rows)
    }

    /// A free connection, or a new one from the pool; fails once closed,
    /// and after waiting as long as the pool would for one.
    async fn take(&self) -> Result<Held, sqlx::Error> {
        let waiting = self.in_use.clone().acquire_owned();
        let permit = tokio::time::timeout(self.pool.options().get_acquire_timeout(), waiting)
            .await
            .map_err(|_| sqlx::Error::PoolTimedOut)?
            .map_err(|_| sqlx::Error::PoolClosed)?;
        let free = self
            .free
            .lock()
            .ok()
            .and_then(|mut free| free.as_mut()?.pop());
        let connection = match free {
            Some(connection) => connection,
            None => self.pool.acquire().await?.detach(),
        };
        Ok(Held {
            connection,
            free: self.free.clone(),
            _in_use: permit,
        })
    }
}

impl Held {
    /// Gives the connection back for the next statement: only after a
    /// statement that completed.
    fn keep(self) {
        if let Ok(mut free) = self.free.lock() {
            if let Some(free) = free.as_mut() {
                free.push(self.connection);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sqlx::any::AnyPoolOptions;
    use std::time::Duration;

    /// Held connections over a pool of two on the test PostgreSQL.
    async fn connections() -> HeldConnections {
        sqlx::any::install_default_drivers();
        let url = std::env::var("CHIME_TEST_PG_URL")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_string());
        let pool = AnyPoolOptions::new()
            .max_connections(2)
            .acquire_timeout(Duration::from_millis(300))
            .connect(&url)
            .await
            .expect("the test PostgreSQL ($CHIME_TEST_PG_URL)");
        HeldConnections::new(pool)
    }

    async fn backend_pid(held: &mut Held) -> Result<i32, sqlx::Error> {
        sqlx::query_scalar("SELECT pg_backend_pid()")
            .fetch_one(&mut held.connection)
            .await
    }

    /// Runs a statement on a held connection and keeps it; its backend's pid.
    async fn kept_after_a_statement(connections: &HeldConnections) -> i32 {
        let mut held = connections.take().await.expect("take");
        let pid = backend_pid(&mut held).await.expect("statement");
        held.keep();
        pid
    }

    #[tokio::test]
    async fn a_completed_statement_keeps_its_connection_for_the_next() {
        let connections = connections().await;
        let pid = kept_after_a_statement(&connections).await;
        let mut second = connections.take().await.expect("take again");
        assert_eq!(backend_pid(&mut second).await.expect("statement"), pid);
    }

    #[tokio::test]
    async fn a_connection_left_mid_statement_is_closed_not_reused() {
        let connections = connections().await;
        let pid = kept_after_a_statement(&connections).await;
        let mut cancelled = connections.take().await.expect("take again");
        let sleeping = sqlx::query("SELECT pg_sleep(5)").execute(&mut cancelled.connection);
        let timed_out = tokio::time::timeout(Duration::from_millis(100), sleeping).await;
        assert!(
            timed_out.is_err(),
            "the statement was meant to be cut short"
        );
        drop(cancelled);
        let mut next = connections.take().await.expect("a fresh connection");
        let next_pid = backend_pid(&mut next).await.expect("a statement on it");
        assert_ne!(
            next_pid, pid,
            "the connection left mid-statement was handed out again"
        );
    }

    #[tokio::test]
    async fn no_more_than_max_are_in_use_at_once_and_a_wait_times_out() {
        let connections = connections().await;
        let _first = connections.take().await.expect("take");
        let _second = connections.take().await.expect("take");
        let third = tokio::time::timeout(Duration::from_secs(5), connections.take())
            .await
            .expect("a third take gives up after the pool's acquire timeout");
        assert!(
            matches!(third, Err(sqlx::Error::PoolTimedOut)),
            "a third connection was handed out with a maximum of two"
        );
    }

    #[tokio::test]
    async fn once_closed_nothing_is_handed_out() {
        let connections = connections().await;
        connections.take().await.expect("take").keep();
        let in_use = connections.take().await.expect("take the free one");
        connections.close().await;
        in_use.keep();
        assert!(
            connections.take().await.is_err(),
            "a closed store handed out a connection"
        );
    }
}
