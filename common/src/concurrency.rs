//! How many firings may run at once: a job's `max_concurrent` and
//! `queue_limit`, and the limits of a whole group (`groups.put`), as
//! CONTRACT.md v1.1 names them (docs/API.md, "Concurrency limits").
//!
//! Kept apart from `job.rs` because the scheduler's start decision reads
//! only these, and `groups.*` shares their ranges and messages.

use crate::bounds::check_group;
use crate::duration::json_kind;
use crate::error::FieldError;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// What to do with a firing whose predecessor is still running.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default, utoipa::ToSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Overlap {
    /// Run concurrently.
    #[default]
    Allow,
    /// Skip the new firing (recorded `skipped`).
    Forbid,
    /// Hold at most one pending firing; start it when the running one ends.
    Queue,
    /// Cancel the running firing and start the new one.
    Replace,
}

/// The largest `max_concurrent` of a job.
pub const MAX_JOB_CONCURRENT: u64 = 1000;
/// The largest `queue_limit`.
pub const MAX_QUEUE_LIMIT: u64 = 10_000;
/// The largest `shards` of a job.
pub const MAX_SHARDS: u64 = 1000;
/// The largest `max_concurrent` of a group.
pub const MAX_GROUP_CONCURRENT: u64 = 100_000;
/// The largest `max_per_second` of a group.
pub const MAX_GROUP_PER_SECOND: u64 = 100_000;

/// A job's `max_concurrent` and `queue_limit`, as written (absent: the
/// defaults [`Concurrency::limit`] and [`Concurrency::queue_capacity`] give).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct Concurrency {
    /// At most this many firings of the job execute at once; the extra ones
    /// follow `overlap`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_concurrent: Option<u32>,
    /// With `overlap: queue`: at most this many firings wait; more are skipped.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub queue_limit: Option<u32>,
    /// Each instant becomes this many firings, shard 0…N-1 (default 1).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shards: Option<u32>,
    /// Each instant becomes one firing per live worker of the group that
    /// takes offers, each addressed to its worker (default `false`).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub broadcast: bool,
}

impl Concurrency {
    /// The keys this reads from a job object.
    pub const FIELDS: [&'static str; 4] = ["max_concurrent", "queue_limit", "shards", "broadcast"];

    /// Reads the fields present in `obj` (absent and `null` are the same)
    /// for a job with `overlap` (`None`: the overlap was itself invalid, so
    /// what depends on it is not judged), reporting every problem with its
    /// field path.
    pub fn from_json(
        obj: &Map<String, Value>,
        overlap: Option<Overlap>,
    ) -> Result<Concurrency, Vec<FieldError>> {
        let mut errors = Vec::new();
        let max_concurrent = bounded(obj, "max_concurrent", MAX_JOB_CONCURRENT, &mut errors);
        let queue_limit = bounded(obj, "queue_limit", MAX_QUEUE_LIMIT, &mut errors);
        let shards = bounded(obj, "shards", MAX_SHARDS, &mut errors);
        if queue_limit.is_some() && overlap.is_some_and(|o| o != Overlap::Queue) {
            errors.push(FieldError::new(
                "queue_limit",
                "applies only with overlap: queue (it bounds the firings that wait)",
            ));
        }
        let broadcast = match obj.get("broadcast") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => *b,
            Some(other) => {
                errors.push(FieldError::new(
                    "broadcast",
                    format!("must be true or false, not {}", json_kind(other)),
                ));
                false
            }
        };
        if broadcast && max_concurrent.is_none() && overlap.is_some_and(|o| o != Overlap::Allow) {
            // One instant's worth is as many firings as live workers, which
            // a limit stored with the job cannot know.
            errors.push(FieldError::new(
                "max_concurrent",
                "is required for a broadcast job whose overlap is not allow: it bounds the \
                 job's firings on all its workers together",
            ));
        }
        if broadcast && shards.is_some() {
            errors.push(FieldError::new(
                "broadcast",
                "cannot be combined with shards: a broadcast has one shard per live worker",
            ));
        }
        if errors.is_empty() {
            Ok(Concurrency {
                max_concurrent,
                queue_limit,
                shards,
                broadcast,
            })
        } else {
            Err(errors)
        }
    }

    /// How many firings each instant becomes (`shards`, default 1).
    pub fn shard_count(&self) -> u32 {
        self.shards.unwrap_or(1).max(1)
    }

    /// How many of the job's firings may execute at once under `overlap`:
    /// `max_concurrent`, else one instant's worth (its [`shard_count`],
    /// 1 for an unsharded job) with `forbid`, `queue` and `replace`, and no
    /// limit with `allow`. Each shard is a firing for every limit; an
    /// explicit `max_concurrent` below `shards` is the user's choice (the
    /// shards beyond it wait or are skipped, as `overlap` says).
    ///
    /// [`shard_count`]: Concurrency::shard_count
    pub fn limit(&self, overlap: Overlap) -> Option<u32> {
        match (self.max_concurrent, overlap) {
            (Some(n), _) => Some(n),
            (None, Overlap::Allow) => None,
            (None, _) => Some(self.shard_count()),
        }
    }

    /// How many firings may wait under `overlap: queue` (default 1).
    pub fn queue_capacity(&self) -> u32 {
        self.queue_limit.unwrap_or(1)
    }

    /// Of `firings` of the job due at once (a backfill's), how many
    /// `overlap` skips or cancels at most while the others run: beyond the
    /// limit, `forbid` skips, `queue` skips what its queue cannot hold and
    /// `replace` cancels the older ones; `allow` makes them wait. At most,
    /// because a firing that ends before the next one starts frees its slot.
    pub fn overlap_casualties(&self, overlap: Overlap, firings: u32) -> u32 {
        match (overlap, self.limit(overlap)) {
            (Overlap::Allow, _) | (_, None) => 0,
            (Overlap::Forbid | Overlap::Replace, Some(n)) => firings.saturating_sub(n),
            (Overlap::Queue, Some(n)) => {
                firings.saturating_sub(n.saturating_add(self.queue_capacity()))
            }
        }
    }

    /// What a backfill of `firings` due at once should be told about
    /// `overlap`: the [`Concurrency::overlap_casualties`] and why, with what
    /// to change to run them all; `None` when none are lost.
    pub fn backfill_warning(&self, overlap: Overlap, firings: u32) -> Option<(u32, String)> {
        let lost = self.overlap_casualties(overlap, firings);
        let limit = self.limit(overlap)?;
        if lost == 0 {
            return None;
        }
        let waiting = firings.saturating_sub(limit);
        let message = match overlap {
            Overlap::Forbid => format!(
                "overlap \"forbid\" with max_concurrent {limit}: the {firings} backfilled \
                 firings are due at once and one that starts while {limit} of the job's firings \
                 run is skipped, so up to {lost} of them will be recorded skipped, not run; to run \
                 them all one after another, put the job with overlap \"queue\" and \
                 queue_limit {waiting} (or overlap \"allow\" with max_concurrent {limit}) first"
            ),
            Overlap::Queue => format!(
                "overlap \"queue\" with max_concurrent {limit} and queue_limit {}: the \
                 {firings} backfilled firings are due at once and those the queue cannot hold \
                 are skipped, so up to {lost} of them will be recorded skipped, not run; to run \
                 them all, put the job with queue_limit {waiting} first",
                self.queue_capacity()
            ),
            Overlap::Replace => format!(
                "overlap \"replace\" with max_concurrent {limit}: the {firings} backfilled \
                 firings are due at once and each one that starts cancels the oldest running, \
                 so up to {lost} of them will be cancelled; to run them all one after another, \
                 put the job with overlap \"queue\" and queue_limit {waiting} first"
            ),
            Overlap::Allow => return None,
        };
        Some((lost, message))
    }
}

/// An integer field from 1 to `max`, as `u32`; `None` when absent or wrong
/// (the error recorded).
fn bounded(
    obj: &Map<String, Value>,
    key: &str,
    max: u64,
    errors: &mut Vec<FieldError>,
) -> Option<u32> {
    let v = obj.get(key).filter(|v| !v.is_null())?;
    match v.as_u64().filter(|n| (1..=max).contains(n)) {
        Some(n) => u32::try_from(n).ok(),
        None => {
            errors.push(FieldError::new(
                key,
                format!("must be an integer from 1 to {max}, found {v}"),
            ));
            None
        }
    }
}

/// The limits of one group, as `groups.put` takes them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct GroupLimits {
    pub name: String,
    /// At most this many firings of the group execute at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_concurrent: Option<u32>,
    /// At most this many firings of the group start in any one second.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_per_second: Option<u32>,
}

impl GroupLimits {
    /// Parses and checks a `groups.put` request. A limit left out is no
    /// limit: a put replaces both.
    pub fn from_json(value: &Value) -> Result<GroupLimits, Vec<FieldError>> {
        let Some(obj) = value.as_object() else {
            return Err(vec![FieldError::new(
                "",
                format!("expected a JSON object, found {}", json_kind(value)),
            )]);
        };
        let mut errors = Vec::new();
        for key in obj
            .keys()
            .filter(|k| !matches!(k.as_str(), "name" | "max_concurrent" | "max_per_second"))
        {
            errors.push(FieldError::new(
                key.clone(),
                "unknown field; a group has name, max_concurrent and max_per_second",
            ));
        }
        let name = group_name(obj, &mut errors);
        let max_concurrent = bounded(obj, "max_concurrent", MAX_GROUP_CONCURRENT, &mut errors);
        let max_per_second = bounded(obj, "max_per_second", MAX_GROUP_PER_SECOND, &mut errors);
        match name {
            Some(name) if errors.is_empty() => Ok(GroupLimits {
                name,
                max_concurrent,
                max_per_second,
            }),
            _ => Err(errors),
        }
    }

    /// Whether any limit is set.
    pub fn is_limited(&self) -> bool {
        self.max_concurrent.is_some() || self.max_per_second.is_some()
    }
}

/// The `name` of a `groups.*` request, checked as a job's `group` is.
pub fn group_name(obj: &Map<String, Value>, errors: &mut Vec<FieldError>) -> Option<String> {
    match obj.get("name") {
        Some(Value::String(name)) => match check_group(name) {
            Ok(()) => Some(name.clone()),
            Err(e) => {
                errors.push(FieldError::new("name", e));
                None
            }
        },
        None | Some(Value::Null) => {
            errors.push(FieldError::new("name", "is required"));
            None
        }
        Some(other) => {
            errors.push(FieldError::new(
                "name",
                format!("expected a group name string, found {}", json_kind(other)),
            ));
            None
        }
    }
}

/// A group as `groups.get` and `groups.list` return it: its limits and
/// what runs and waits in it now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Group {
    #[serde(flatten)]
    pub limits: GroupLimits,
    /// Firings of the group executing now.
    pub running: u64,
    /// Firings of the group held back by a limit (the job's or the group's)
    /// and still waiting for a slot.
    pub held: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn concurrency(v: Value, overlap: Option<Overlap>) -> Result<Concurrency, Vec<FieldError>> {
        Concurrency::from_json(v.as_object().unwrap(), overlap)
    }

    #[test]
    fn limits_default_by_overlap() {
        let none = Concurrency::default();
        assert_eq!(none.limit(Overlap::Allow), None);
        for o in [Overlap::Forbid, Overlap::Queue, Overlap::Replace] {
            assert_eq!(none.limit(o), Some(1));
        }
        let three = concurrency(json!({"max_concurrent": 3}), Some(Overlap::Allow)).unwrap();
        assert_eq!(three.limit(Overlap::Allow), Some(3));
        assert_eq!(three.queue_capacity(), 1);
    }

    #[test]
    fn a_sharded_job_runs_one_instant_at_once_by_default() {
        let eight = concurrency(json!({"shards": 8}), Some(Overlap::Forbid)).unwrap();
        assert_eq!(eight.shard_count(), 8);
        assert_eq!(Concurrency::default().shard_count(), 1);
        for o in [Overlap::Forbid, Overlap::Queue, Overlap::Replace] {
            assert_eq!(eight.limit(o), Some(8));
        }
        assert_eq!(eight.limit(Overlap::Allow), None);
        // Below `shards` is the user's choice: the extra shards wait or skip.
        let two = concurrency(
            json!({"shards": 8, "max_concurrent": 2}),
            Some(Overlap::Queue),
        )
        .unwrap();
        assert_eq!(two.limit(Overlap::Queue), Some(2));
    }

    #[test]
    fn firings_due_at_once_beyond_the_limit_are_lost_as_overlap_says() {
        let none = Concurrency::default();
        assert_eq!(none.overlap_casualties(Overlap::Allow, 24), 0);
        assert_eq!(none.overlap_casualties(Overlap::Forbid, 24), 23);
        assert_eq!(none.overlap_casualties(Overlap::Replace, 24), 23);
        assert_eq!(none.overlap_casualties(Overlap::Queue, 24), 22);
        assert_eq!(none.overlap_casualties(Overlap::Forbid, 1), 0);
        let queue = concurrency(json!({"queue_limit": 30}), Some(Overlap::Queue)).unwrap();
        assert_eq!(queue.overlap_casualties(Overlap::Queue, 24), 0);
        let capped = concurrency(json!({"max_concurrent": 2}), Some(Overlap::Allow)).unwrap();
        assert_eq!(capped.overlap_casualties(Overlap::Allow, 24), 0);
        // Each shard is a firing: 10 instants of 8 shards, one instant at once.
        let sharded = concurrency(json!({"shards": 8}), Some(Overlap::Forbid)).unwrap();
        assert_eq!(sharded.overlap_casualties(Overlap::Forbid, 80), 72);
    }

    #[test]
    fn a_backfill_warning_counts_what_is_lost_and_says_what_runs_them_all() {
        let (lost, message) = Concurrency::default()
            .backfill_warning(Overlap::Forbid, 24)
            .unwrap();
        assert_eq!(lost, 23);
        assert!(
            message.contains("up to 23 of them will be recorded skipped"),
            "{message}"
        );
        assert!(message.contains("queue_limit 23"), "{message}");
        let (lost, message) = Concurrency::default()
            .backfill_warning(Overlap::Replace, 3)
            .unwrap();
        assert_eq!(lost, 2);
        assert!(message.contains("cancelled"), "{message}");
        assert_eq!(
            Concurrency::default().backfill_warning(Overlap::Allow, 24),
            None
        );
        assert_eq!(
            Concurrency::default().backfill_warning(Overlap::Forbid, 1),
            None
        );
    }

    #[test]
    fn out_of_range_and_misplaced_values_name_their_field() {
        for (v, field) in [
            (json!({"max_concurrent": 0}), "max_concurrent"),
            (json!({"max_concurrent": 1001}), "max_concurrent"),
            (json!({"max_concurrent": -1}), "max_concurrent"),
            (json!({"max_concurrent": 2.5}), "max_concurrent"),
            (json!({"max_concurrent": "3"}), "max_concurrent"),
            (json!({"queue_limit": 10001}), "queue_limit"),
            (json!({"queue_limit": 0}), "queue_limit"),
            (json!({"shards": 0}), "shards"),
            (json!({"shards": 1001}), "shards"),
            (json!({"shards": "8"}), "shards"),
        ] {
            let e = concurrency(v.clone(), Some(Overlap::Queue)).unwrap_err();
            assert_eq!(e[0].field, field, "{v}");
        }
        let e = concurrency(json!({"queue_limit": 5}), Some(Overlap::Forbid)).unwrap_err();
        assert_eq!(e[0].field, "queue_limit");
        assert!(concurrency(json!({"queue_limit": 5}), Some(Overlap::Queue)).is_ok());
    }

    #[test]
    fn group_limits_are_checked() {
        let ok = GroupLimits::from_json(&json!({"name": "db", "max_concurrent": 5})).unwrap();
        assert_eq!(ok.max_concurrent, Some(5));
        assert_eq!(ok.max_per_second, None);
        assert!(ok.is_limited());
        for (v, field) in [
            (json!({"max_concurrent": 5}), "name"),
            (json!({"name": "a..b"}), "name"),
            (json!({"name": 7}), "name"),
            (json!({"name": "db", "max_per_second": 0}), "max_per_second"),
            (
                json!({"name": "db", "max_concurrent": 100001}),
                "max_concurrent",
            ),
            (json!({"name": "db", "burst": 1}), "burst"),
        ] {
            let e = GroupLimits::from_json(&v).unwrap_err();
            assert_eq!(e[0].field, field, "{v}");
        }
        assert!(GroupLimits::from_json(&json!([1])).is_err());
    }
}
