//! Firings: one run of a job at one scheduled instant, as one attempt.

use crate::duration::{rfc3339_ms, rfc3339_ms_opt};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// A firing's identity, `<job id>@<scheduled ms>#<attempt>`, or
/// `<job id>@<scheduled ms>.<shard>#<attempt>` for a shard of a sharded job
/// (`shards` above 1; shard 0 included).
///
/// It is also the `Nats-Msg-Id` of the firing message, so JetStream drops a
/// second publish of the same attempt inside its duplicate window.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FiringId {
    pub job_id: String,
    pub scheduled_ms: i64,
    /// The shard of a sharded job's instant; `None` for an unsharded job.
    pub shard: Option<u32>,
    pub attempt: u32,
}

impl FiringId {
    /// The identity of `attempt` of `job_id` at `scheduled_ms`.
    pub fn new(job_id: impl Into<String>, scheduled_ms: i64, attempt: u32) -> Self {
        FiringId {
            job_id: job_id.into(),
            scheduled_ms,
            shard: None,
            attempt,
        }
    }

    /// The identity of shard `shard` of `shards` at that instant: the plain
    /// id when the job has one shard only.
    pub fn of_shard(
        job_id: impl Into<String>,
        scheduled_ms: i64,
        shard: u32,
        shards: u32,
        attempt: u32,
    ) -> Self {
        FiringId {
            shard: (shards > 1).then_some(shard),
            ..FiringId::new(job_id, scheduled_ms, attempt)
        }
    }

    /// The same instant and shard, next attempt.
    pub fn next_attempt(&self) -> Self {
        FiringId {
            attempt: self.attempt.saturating_add(1),
            ..self.clone()
        }
    }
}

impl fmt::Display for FiringId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.shard {
            Some(shard) => write!(
                f,
                "{}@{}.{}#{}",
                self.job_id, self.scheduled_ms, shard, self.attempt
            ),
            None => write!(f, "{}@{}#{}", self.job_id, self.scheduled_ms, self.attempt),
        }
    }
}

impl FromStr for FiringId {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || {
            format!(
                "{s:?} is not a firing id (<job id>@<scheduled ms>#<attempt> or \
                 <job id>@<scheduled ms>.<shard>#<attempt>)"
            )
        };
        // Job ids cannot contain '@' or '#', so the last ones are the separators.
        let (job_id, rest) = s.rsplit_once('@').ok_or_else(bad)?;
        let (instant, attempt) = rest.split_once('#').ok_or_else(bad)?;
        if job_id.is_empty() {
            return Err(bad());
        }
        let (ms, shard) = match instant.split_once('.') {
            Some((ms, shard)) => {
                // Digits only: one shard has one spelling (no sign, no blank).
                if shard.is_empty() || !shard.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(bad());
                }
                (ms, Some(shard.parse().map_err(|_| bad())?))
            }
            None => (instant, None),
        };
        Ok(FiringId {
            job_id: job_id.to_string(),
            scheduled_ms: ms.parse().map_err(|_| bad())?,
            shard,
            attempt: attempt.parse().map_err(|_| bad())?,
        })
    }
}

impl Serialize for FiringId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for FiringId {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// Where a firing is in its life.
///
/// `staged → published → executing → succeeded | failed | lost`, or
/// `skipped` (misfire or overlap policy) and `cancelled` (replaced, deleted job, operator).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum FiringState {
    Staged,
    Published,
    Executing,
    Succeeded,
    Failed,
    Lost,
    Skipped,
    Cancelled,
}

impl FiringState {
    /// Every state, in lifecycle order.
    pub const ALL: [FiringState; 8] = [
        FiringState::Staged,
        FiringState::Published,
        FiringState::Executing,
        FiringState::Succeeded,
        FiringState::Failed,
        FiringState::Lost,
        FiringState::Skipped,
        FiringState::Cancelled,
    ];

    /// The state's wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            FiringState::Staged => "staged",
            FiringState::Published => "published",
            FiringState::Executing => "executing",
            FiringState::Succeeded => "succeeded",
            FiringState::Failed => "failed",
            FiringState::Lost => "lost",
            FiringState::Skipped => "skipped",
            FiringState::Cancelled => "cancelled",
        }
    }

    /// A final state never changes again.
    pub fn is_final(self) -> bool {
        !matches!(
            self,
            FiringState::Staged | FiringState::Published | FiringState::Executing
        )
    }
}

impl fmt::Display for FiringState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for FiringState {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        FiringState::ALL
            .into_iter()
            .find(|state| state.as_str() == s)
            .ok_or_else(|| format!("{s:?} is not a firing state"))
    }
}

/// A firing as the API reports it (`firings.list`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Firing {
    #[schema(value_type = String, example = "nightly-report@1767225600000#1")]
    pub id: FiringId,
    pub job_id: String,
    #[serde(with = "rfc3339_ms")]
    pub scheduled_at: DateTime<Utc>,
    /// The shard of a sharded job's instant (0…`shards`-1); written only
    /// for a sharded job's firings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard: Option<u32>,
    pub attempt: u32,
    pub state: FiringState,
    /// The node group the firing was published to.
    pub group: String,
    pub priority: u8,
    /// When the firing was (or is to be) published: the scheduled instant, or later for retries.
    #[serde(with = "rfc3339_ms")]
    pub due_at: DateTime<Utc>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker: Option<String>,
    /// A broadcast job's firing: the worker it is addressed to, known
    /// before it starts; only that worker may start it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker_id: Option<String>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "rfc3339_ms_opt"
    )]
    pub published_at: Option<DateTime<Utc>>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "rfc3339_ms_opt"
    )]
    pub started_at: Option<DateTime<Utc>>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "rfc3339_ms_opt"
    )]
    pub finished_at: Option<DateTime<Utc>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
    /// Staged by `jobs.backfill` (or a retry of such a firing), not by the
    /// schedule; written only when true.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub backfill: bool,
    /// A `published` firing that a worker received and a concurrency limit
    /// holds back until a slot frees: which limit. Written only while held.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_by: Option<HeldBy>,
    /// With `held_by`: when the limit first held it.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "rfc3339_ms_opt"
    )]
    pub held_since: Option<DateTime<Utc>>,
}

/// The concurrency limit that holds a firing back (docs/API.md,
/// "Concurrency limits"): named by the setting to raise.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum HeldBy {
    /// The job's own `max_concurrent`.
    JobMaxConcurrent,
    /// The group's `max_concurrent` (`groups.put`).
    GroupMaxConcurrent,
    /// The group's `max_per_second` (`groups.put`).
    GroupMaxPerSecond,
}

impl HeldBy {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            HeldBy::JobMaxConcurrent => "job_max_concurrent",
            HeldBy::GroupMaxConcurrent => "group_max_concurrent",
            HeldBy::GroupMaxPerSecond => "group_max_per_second",
        }
    }

    /// A few words for people: `the job's max_concurrent`.
    pub fn describe(self) -> &'static str {
        match self {
            HeldBy::JobMaxConcurrent => "the job's max_concurrent",
            HeldBy::GroupMaxConcurrent => "the group's max_concurrent",
            HeldBy::GroupMaxPerSecond => "the group's max_per_second",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn firing_ids_round_trip_through_text() {
        let id = FiringId::new("nightly-report", 1_774_661_400_000, 2);
        assert_eq!(id.to_string(), "nightly-report@1774661400000#2");
        assert_eq!("nightly-report@1774661400000#2".parse::<FiringId>(), Ok(id));
    }

    #[test]
    fn sharded_firing_ids_round_trip_through_text() {
        let id = FiringId::of_shard("scan.v2", 1_774_661_400_000, 0, 8, 1);
        assert_eq!(id.shard, Some(0));
        assert_eq!(id.to_string(), "scan.v2@1774661400000.0#1");
        assert_eq!(
            "scan.v2@1774661400000.0#1".parse::<FiringId>(),
            Ok(id.clone())
        );
        let next = id.next_attempt();
        assert_eq!(next.to_string(), "scan.v2@1774661400000.0#2");
        // One shard: the plain id, exactly as before shards existed.
        let plain = FiringId::of_shard("scan", 5, 0, 1, 3);
        assert_eq!(plain, FiringId::new("scan", 5, 3));
        assert_eq!(plain.to_string(), "scan@5#3");
        assert_eq!(
            "j@7.999#2".parse::<FiringId>().map(|id| id.shard),
            Ok(Some(999))
        );
    }

    #[test]
    fn malformed_firing_ids_are_rejected() {
        for bad in [
            "",
            "job",
            "job@",
            "@1#1",
            "job@x#1",
            "job@1#",
            "job@1#-1",
            "job@1",
            "job@1.#1",
            "job@.1#1",
            "job@1.x#1",
            "job@1.-1#1",
            "job@1.+1#1",
            "job@1.1.1#1",
            "job@1. 1#1",
            "job@1.99999999999#1",
            "@1.0#1",
            "job@1.0#",
            "job@1.0",
        ] {
            assert!(bad.parse::<FiringId>().is_err(), "{bad:?} parsed");
        }
    }

    proptest::proptest! {
        #[test]
        fn firing_ids_round_trip_in_both_forms(
            job in "[A-Za-z0-9._-]{1,20}",
            ms in proptest::num::i64::ANY,
            shard in proptest::option::of(0u32..1000),
            attempt in proptest::num::u32::ANY,
        ) {
            let id = FiringId { job_id: job, scheduled_ms: ms, shard, attempt };
            proptest::prop_assert_eq!(id.to_string().parse::<FiringId>(), Ok(id));
        }

        #[test]
        fn parsing_any_text_never_panics(s in "\\PC{0,40}") {
            let _ = s.parse::<FiringId>();
        }

        #[test]
        fn parsing_near_ids_never_panics(s in "[a-z]{0,3}[@#.0-9+-]{0,12}") {
            if let Ok(id) = s.parse::<FiringId>() {
                proptest::prop_assert_eq!(id.to_string().parse::<FiringId>(), Ok(id));
            }
        }
    }

    #[test]
    fn firing_states_parse_their_wire_names() {
        for state in FiringState::ALL {
            assert_eq!(state.as_str().parse::<FiringState>(), Ok(state));
        }
        assert!("running".parse::<FiringState>().is_err());
    }
}
