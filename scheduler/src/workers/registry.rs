//! The live workers, as their heartbeats in the `chime-workers` bucket say
//! (docs/PROTOCOL.md §7), and which handlers a group's live workers offer.
//!
//! `workers.list` reads the bucket afresh each time. A put's warning about
//! a handler no live worker offers reads it through [`Registry::recent`],
//! at most a second old, so that applying hundreds of jobs reads the bucket
//! once a second rather than once per job; heartbeats come every two
//! seconds, so a fresher read would know no more.

use async_nats::jetstream::kv;
use chime_common::protocol::{heartbeat_matches_key, WorkerInfo};
use chrono::DateTime;
use futures::StreamExt;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

/// How old a [`Registry::recent`] read may be.
const RECENT: Duration = Duration::from_secs(1);

/// A read of the bucket and when it was made.
type Read = (Instant, Arc<Vec<WorkerInfo>>);

/// The heartbeat bucket, read.
#[derive(Clone)]
pub struct Registry {
    bucket: kv::Store,
    recent: Arc<Mutex<Option<Read>>>,
}

impl Registry {
    /// The workers of `bucket`.
    pub fn new(bucket: kv::Store) -> Self {
        Registry {
            bucket,
            recent: Arc::new(Mutex::new(None)),
        }
    }

    /// Every live worker now: each heartbeat whose body names the worker
    /// and group of its key, with `heartbeat_at` the key's write time.
    /// Fails (with the reason) when the bucket cannot be read.
    pub async fn live(&self) -> Result<Vec<WorkerInfo>, String> {
        let mut keys = self.bucket.keys().await.map_err(|e| e.to_string())?;
        let mut workers = Vec::new();
        while let Some(key) = keys.next().await {
            let key = key.map_err(|e| e.to_string())?;
            // A key gone since it was listed: that worker left.
            let Ok(Some(entry)) = self.bucket.entry(&key).await else {
                continue;
            };
            let Ok(mut info) = serde_json::from_slice::<WorkerInfo>(&entry.value) else {
                continue;
            };
            if !heartbeat_matches_key(&key, &info) {
                continue;
            }
            info.heartbeat_at = i64::try_from(entry.created.unix_timestamp_nanos() / 1_000_000)
                .ok()
                .and_then(DateTime::from_timestamp_millis);
            workers.push(info);
        }
        Ok(workers)
    }

    /// The live workers as read at most a second ago.
    pub async fn recent(&self) -> Result<Arc<Vec<WorkerInfo>>, String> {
        let cached = self
            .recent
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        if let Some((_, workers)) = cached.filter(|(at, _)| at.elapsed() < RECENT) {
            return Ok(workers);
        }
        let workers = Arc::new(self.live().await?);
        *self.recent.lock().unwrap_or_else(|p| p.into_inner()) =
            Some((Instant::now(), workers.clone()));
        Ok(workers)
    }
}

/// Why no live worker of a group will run a handler.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unoffered {
    /// The group has no live worker at all.
    NoWorker,
    /// The group's live workers all list their handlers, and none lists
    /// this one: these are the ones they list.
    NotOffered(Vec<String>),
}

impl Unoffered {
    /// Why no live worker of `group` among `workers` will run `handler`;
    /// `None` when one offers it, or does not list its handlers (and may).
    pub fn judge(group: &str, handler: &str, workers: &[WorkerInfo]) -> Option<Unoffered> {
        let mut offered: Vec<String> = Vec::new();
        let mut any = false;
        for worker in workers.iter().filter(|w| w.group == group) {
            any = true;
            match &worker.handlers {
                None => return None,
                Some(names) if names.iter().any(|n| n == handler) => return None,
                Some(names) => offered.extend(names.iter().cloned()),
            }
        }
        offered.sort_unstable();
        offered.dedup();
        Some(if any {
            Unoffered::NotOffered(offered)
        } else {
            Unoffered::NoWorker
        })
    }

    /// The cause in words: `no live worker of group "g" offers handler "h"
    /// (they offer: http, shell)`.
    pub fn describe(&self, group: &str, handler: &str) -> String {
        match self {
            Unoffered::NoWorker => format!("no worker of group {group:?} is alive"),
            Unoffered::NotOffered(offered) if offered.is_empty() => format!(
                "no live worker of group {group:?} offers handler {handler:?} (they offer none)"
            ),
            Unoffered::NotOffered(offered) => format!(
                "no live worker of group {group:?} offers handler {handler:?} (they offer: {})",
                offered.join(", ")
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::Utc;

    fn worker(id: &str, group: &str, handlers: Option<&[&str]>) -> WorkerInfo {
        WorkerInfo {
            id: id.into(),
            group: group.into(),
            threads: 1,
            in_flight: 0,
            version: "test".into(),
            started_at: Utc::now(),
            running: None,
            handlers: handlers.map(|h| h.iter().map(ToString::to_string).collect()),
            offers: false,
            heartbeat_at: None,
        }
    }

    #[test]
    fn a_handler_is_unoffered_only_when_every_live_worker_of_the_group_says_so() {
        let workers = [
            worker("a", "reports", Some(&["shell", "http"])),
            worker("b", "reports", Some(&["http"])),
            worker("c", "etl", Some(&["nosuch"])),
        ];
        assert_eq!(Unoffered::judge("reports", "shell", &workers), None);
        let unoffered = Unoffered::judge("reports", "nosuch", &workers).unwrap();
        assert_eq!(
            unoffered,
            Unoffered::NotOffered(vec!["http".into(), "shell".into()])
        );
        assert_eq!(
            unoffered.describe("reports", "nosuch"),
            "no live worker of group \"reports\" offers handler \"nosuch\" (they offer: http, shell)"
        );
        assert_eq!(
            Unoffered::judge("empty", "shell", &workers),
            Some(Unoffered::NoWorker)
        );
        // A worker that does not list its handlers may run any.
        let silent = [
            worker("a", "reports", Some(&["http"])),
            worker("b", "reports", None),
        ];
        assert_eq!(Unoffered::judge("reports", "nosuch", &silent), None);
    }
}
