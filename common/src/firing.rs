//! Firings: one run of a job at one scheduled instant, as one attempt.

use crate::duration::{rfc3339_ms, rfc3339_ms_opt};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// A firing's identity, `<job id>@<scheduled ms>#<attempt>`.
///
/// It is also the `Nats-Msg-Id` of the firing message, so JetStream drops a
/// second publish of the same attempt inside its duplicate window.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FiringId {
    pub job_id: String,
    pub scheduled_ms: i64,
    pub attempt: u32,
}

impl FiringId {
    /// The identity of `attempt` of `job_id` at `scheduled_ms`.
    pub fn new(job_id: impl Into<String>, scheduled_ms: i64, attempt: u32) -> Self {
        FiringId {
            job_id: job_id.into(),
            scheduled_ms,
            attempt,
        }
    }

    /// The same instant, next attempt.
    pub fn next_attempt(&self) -> Self {
        FiringId::new(
            self.job_id.clone(),
            self.scheduled_ms,
            self.attempt.saturating_add(1),
        )
    }
}

impl fmt::Display for FiringId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}@{}#{}", self.job_id, self.scheduled_ms, self.attempt)
    }
}

impl FromStr for FiringId {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || format!("{s:?} is not a firing id (<job id>@<scheduled ms>#<attempt>)");
        // Job ids cannot contain '@' or '#', so the last ones are the separators.
        let (job_id, rest) = s.rsplit_once('@').ok_or_else(bad)?;
        let (ms, attempt) = rest.split_once('#').ok_or_else(bad)?;
        if job_id.is_empty() {
            return Err(bad());
        }
        Ok(FiringId {
            job_id: job_id.to_string(),
            scheduled_ms: ms.parse().map_err(|_| bad())?,
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
    fn malformed_firing_ids_are_rejected() {
        for bad in [
            "", "job", "job@", "@1#1", "job@x#1", "job@1#", "job@1#-1", "job@1",
        ] {
            assert!(bad.parse::<FiringId>().is_err(), "{bad:?} parsed");
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
