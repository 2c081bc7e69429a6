//! Who a broadcast job's instant goes to: the live workers of its group
//! that take offers, ordered by id, one firing (a share) each.
//!
//! The store does not read heartbeats; whoever stages (a slice, a trigger)
//! hands it the workers it knows of as an [`Audiences`], read before its
//! transaction, so no database lock waits on NATS.

use chime_common::protocol::WorkerInfo;
use chime_common::FiringId;
use std::collections::HashMap;
use std::sync::Arc;

/// The workers each group's broadcast firings go to.
#[derive(Debug, Clone, Default)]
pub struct Audiences(Arc<HashMap<String, Vec<String>>>);

impl Audiences {
    /// The workers among `workers` that take offers, per group, by id.
    pub fn of(workers: &[WorkerInfo]) -> Self {
        let mut groups: HashMap<String, Vec<String>> = HashMap::new();
        for worker in workers.iter().filter(|w| w.offers) {
            groups
                .entry(worker.group.clone())
                .or_default()
                .push(worker.id.clone());
        }
        for ids in groups.values_mut() {
            ids.sort_unstable();
            ids.dedup();
            ids.truncate(MAX_AUDIENCE);
        }
        Audiences(Arc::new(groups))
    }

    /// The workers `group`'s broadcast firings go to, in shard order.
    pub fn of_group(&self, group: &str) -> &[String] {
        self.0.get(group).map_or(&[], Vec::as_slice)
    }
}

/// The most workers one broadcast instant goes to (the largest `shards`).
const MAX_AUDIENCE: usize = chime_common::concurrency::MAX_SHARDS as usize;

/// One firing of an instant: its shard, how many the instant has, and the
/// worker it is addressed to (a broadcast's share).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Share<'w> {
    pub shard: u32,
    pub shards: u32,
    pub worker: Option<&'w str>,
}

/// The firings one instant of a job becomes: its `shards`, or for a
/// broadcast job one per worker of `audience` (none when it is empty).
pub fn shares<'w>(
    concurrency: &chime_common::concurrency::Concurrency,
    audience: &'w [String],
) -> Vec<Share<'w>> {
    if concurrency.broadcast {
        let shards = u32::try_from(audience.len()).unwrap_or(u32::MAX);
        return (0u32..)
            .zip(audience)
            .map(|(shard, worker)| Share {
                shard,
                shards,
                worker: Some(worker.as_str()),
            })
            .collect();
    }
    let shards = concurrency.shard_count();
    (0..shards)
        .map(|shard| Share {
            shard,
            shards,
            worker: None,
        })
        .collect()
}

impl Share<'_> {
    /// The id of this share of `job_id`'s instant `scheduled_ms`: a
    /// broadcast's ids always name their shard, even the one share of a
    /// group with one worker, so its worker sees shard 0 of 1.
    pub fn id(&self, job_id: &str, scheduled_ms: i64, attempt: u32) -> FiringId {
        match self.worker {
            Some(_) => FiringId {
                shard: Some(self.shard),
                ..FiringId::new(job_id, scheduled_ms, attempt)
            },
            None => FiringId::of_shard(job_id, scheduled_ms, self.shard, self.shards, attempt),
        }
    }
}

/// The error a broadcast instant with no worker to go to is skipped with.
pub fn no_audience(group: &str) -> String {
    format!("no live worker of group {group:?} takes broadcast firings (offers)")
}

#[cfg(test)]
mod tests {
    use super::*;
    use chime_common::concurrency::Concurrency;

    fn worker(id: &str, group: &str, offers: bool) -> WorkerInfo {
        WorkerInfo {
            id: id.into(),
            group: group.into(),
            threads: 1,
            in_flight: 0,
            version: "0".into(),
            started_at: chrono::Utc::now(),
            running: None,
            handlers: None,
            offers,
            heartbeat_at: None,
        }
    }

    #[test]
    fn a_broadcast_goes_to_the_groups_offer_taking_workers_by_id() {
        let audiences = Audiences::of(&[
            worker("w-c", "g", true),
            worker("w-a", "g", true),
            worker("w-old", "g", false),
            worker("w-b", "other", true),
        ]);
        let broadcast = Concurrency {
            broadcast: true,
            ..Concurrency::default()
        };
        let shares = shares(&broadcast, audiences.of_group("g"));
        assert_eq!(
            shares,
            vec![
                Share {
                    shard: 0,
                    shards: 2,
                    worker: Some("w-a")
                },
                Share {
                    shard: 1,
                    shards: 2,
                    worker: Some("w-c")
                },
            ]
        );
        assert!(super::shares(&broadcast, audiences.of_group("none")).is_empty());
    }

    #[test]
    fn a_plain_job_has_its_shards_and_no_worker() {
        let sharded = Concurrency {
            shards: Some(3),
            ..Concurrency::default()
        };
        let shares = shares(&sharded, &[]);
        assert_eq!(shares.len(), 3);
        assert!(shares.iter().all(|s| s.shards == 3 && s.worker.is_none()));
    }
}
