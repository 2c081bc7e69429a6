//! Subject, stream, consumer and bucket names.
//!
//! All names derive from one prefix (default `chime`) so several isolated
//! installations can share a NATS account: prefix `chime` gives subjects
//! `chime.…`, streams `CHIME_…` and buckets `chime-…`.

use crate::api::Verb;
use crate::band::Band;

/// The default subject prefix.
pub const DEFAULT_PREFIX: &str = "chime";

/// Every name Chime uses on NATS, for one prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subjects {
    prefix: String,
}

impl Default for Subjects {
    fn default() -> Self {
        Subjects::new(DEFAULT_PREFIX)
    }
}

impl Subjects {
    /// Names under `prefix` (a single subject token such as `chime` or `staging-chime`).
    pub fn new(prefix: impl Into<String>) -> Self {
        Subjects {
            prefix: prefix.into(),
        }
    }

    /// Checks that `prefix` can serve as a subject token and a stream name part.
    pub fn validate_prefix(prefix: &str) -> Result<(), String> {
        if prefix.is_empty() || prefix.len() > 32 {
            return Err("the subject prefix must be 1 to 32 characters".into());
        }
        if !prefix
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            return Err(format!(
                "the subject prefix {prefix:?} may only contain A-Z a-z 0-9 - _"
            ));
        }
        Ok(())
    }

    /// The prefix itself.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    fn upper(&self) -> String {
        self.prefix.to_ascii_uppercase().replace('-', "_")
    }

    /// `chime.api.v1.<verb>`, e.g. `chime.api.v1.jobs.put`.
    pub fn api(&self, verb: Verb) -> String {
        format!("{}.api.v1.{verb}", self.prefix)
    }

    /// What follows `chime.api.v1.` in `subject`: the verb a request asks
    /// for, as written, so an unknown one can be named in the reply.
    pub fn api_verb<'a>(&self, subject: &'a str) -> Option<&'a str> {
        subject
            .strip_prefix(self.prefix.as_str())?
            .strip_prefix(".api.v1.")
    }

    /// `chime.api.v1.>`: what the API service subscribes to.
    pub fn api_wildcard(&self) -> String {
        format!("{}.api.v1.>", self.prefix)
    }

    /// The durable submission subject, `chime.submit`.
    pub fn submit(&self) -> String {
        format!("{}.submit", self.prefix)
    }

    /// Where unapplicable submissions go, `chime.submit.rejected`.
    pub fn submit_rejected(&self) -> String {
        format!("{}.submit.rejected", self.prefix)
    }

    /// `chime.fire.<group>.<band>`.
    pub fn fire(&self, group: &str, band: Band) -> String {
        format!("{}.fire.{group}.{band}", self.prefix)
    }

    /// `chime.fire.>`: the firing stream's subjects.
    pub fn fire_wildcard(&self) -> String {
        format!("{}.fire.>", self.prefix)
    }

    /// `chime.ready.<group>`: a core-NATS doorbell rung after firings for a group are published,
    /// so idle workers wake at once instead of polling.
    pub fn ready(&self, group: &str) -> String {
        format!("{}.ready.{group}", self.prefix)
    }

    /// `chime.worker.v1.start`: request/reply, a worker asks to start a firing.
    pub fn worker_start(&self) -> String {
        format!("{}.worker.v1.start", self.prefix)
    }

    /// `chime.worker.v1.start.<group>.<worker id>`: where a worker asks, so
    /// NATS permissions can let it ask only as itself.
    pub fn worker_start_as(&self, group: &str, worker_id: &str) -> String {
        format!("{}.worker.v1.start.{group}.{worker_id}", self.prefix)
    }

    /// `chime.worker.v1.start.>`: every worker's own start subject.
    pub fn worker_start_wildcard(&self) -> String {
        format!("{}.worker.v1.start.>", self.prefix)
    }

    /// The group and worker id a worker's own subject names
    /// (`worker_start_as` or `finished_as`); `None` for the v1 subjects and
    /// for anything else. Worker ids hold no `.`, group names may.
    pub fn reporter<'a>(&self, subject: &'a str) -> Option<(&'a str, &'a str)> {
        let rest = subject.strip_prefix(self.prefix.as_str())?;
        let rest = rest
            .strip_prefix(".worker.v1.start.")
            .or_else(|| rest.strip_prefix(".events.finished."))?;
        let (group, worker_id) = rest.rsplit_once('.')?;
        (!group.is_empty() && !worker_id.is_empty()).then_some((group, worker_id))
    }

    /// `chime.events.finished`: JetStream, a worker reports a finished firing.
    pub fn finished(&self) -> String {
        format!("{}.events.finished", self.prefix)
    }

    /// `chime.events.finished.<group>.<worker id>`: a worker's own report subject.
    pub fn finished_as(&self, group: &str, worker_id: &str) -> String {
        format!("{}.events.finished.{group}.{worker_id}", self.prefix)
    }

    /// `chime.events.finished.>`: every worker's own report subject.
    pub fn finished_wildcard(&self) -> String {
        format!("{}.events.finished.>", self.prefix)
    }

    /// `chime.events.>`: the event stream's subjects.
    pub fn events_wildcard(&self) -> String {
        format!("{}.events.>", self.prefix)
    }

    /// `chime.cancel.<worker id>`: core NATS, the scheduler asks a worker to cancel a running firing.
    pub fn cancel(&self, worker_id: &str) -> String {
        format!("{}.cancel.{worker_id}", self.prefix)
    }

    /// `chime.offer.<group>.<worker id>`: the firings of broadcast jobs
    /// addressed to the worker, as core NATS messages (docs/PROTOCOL.md §4,
    /// "Offers"). The group in the subject lets NATS permissions give a
    /// group's users its own workers' offers only.
    pub fn offer(&self, group: &str, worker_id: &str) -> String {
        format!("{}.offer.{group}.{worker_id}", self.prefix)
    }

    /// `chime.alerts`: JSON alert events (failed or lost firings, repeated failures).
    pub fn alerts(&self) -> String {
        format!("{}.alerts", self.prefix)
    }

    /// `chime.dead.<kind>`: messages Chime could not apply after their
    /// retries (`finished`, `start`, `submit`), body unchanged.
    pub fn dead(&self, kind: &str) -> String {
        format!("{}.dead.{kind}", self.prefix)
    }

    /// `chime.dead.>`: the dead-letter stream's subjects.
    pub fn dead_wildcard(&self) -> String {
        format!("{}.dead.>", self.prefix)
    }

    /// Stream of firings, `CHIME_FIRE`.
    pub fn fire_stream(&self) -> String {
        format!("{}_FIRE", self.upper())
    }

    /// Stream of durable submissions and rejections, `CHIME_SUBMIT`.
    pub fn submit_stream(&self) -> String {
        format!("{}_SUBMIT", self.upper())
    }

    /// Stream of worker events, `CHIME_EVENTS`.
    pub fn events_stream(&self) -> String {
        format!("{}_EVENTS", self.upper())
    }

    /// Stream of alerts, `CHIME_ALERTS`.
    pub fn alerts_stream(&self) -> String {
        format!("{}_ALERTS", self.upper())
    }

    /// Stream of dead letters, `CHIME_DEAD`.
    pub fn dead_stream(&self) -> String {
        format!("{}_DEAD", self.upper())
    }

    /// KV bucket of time-slice claims, `chime-slices`.
    pub fn slices_bucket(&self) -> String {
        format!("{}-slices", self.prefix)
    }

    /// KV bucket of worker heartbeats, `chime-workers`.
    pub fn workers_bucket(&self) -> String {
        format!("{}-workers", self.prefix)
    }

    /// KV bucket of leases for single-active services, `chime-leases`.
    pub fn leases_bucket(&self) -> String {
        format!("{}-leases", self.prefix)
    }

    /// Durable pull consumer for one group and band.
    ///
    /// Consumer names cannot hold `.`, which group names may; such groups are
    /// hex-encoded under a different tag so no two groups share a name.
    pub fn fire_consumer(&self, group: &str, band: Band) -> String {
        if group.contains('.') {
            let hex: String = group.bytes().map(|b| format!("{b:02x}")).collect();
            format!("fire_h_{hex}_{band}")
        } else {
            format!("fire_g_{group}_{band}")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_names_match_the_contract() {
        let s = Subjects::default();
        assert_eq!(s.api(Verb::JobsPut), "chime.api.v1.jobs.put");
        assert_eq!(
            s.api_verb("chime.api.v1.jobs.frobnicate"),
            Some("jobs.frobnicate")
        );
        assert_eq!(s.api_verb("other.api.v1.jobs.put"), None);
        assert_eq!(
            s.worker_start_as("a.b", "w-1"),
            "chime.worker.v1.start.a.b.w-1"
        );
        assert_eq!(
            s.reporter("chime.worker.v1.start.a.b.w-1"),
            Some(("a.b", "w-1"))
        );
        assert_eq!(
            s.reporter(&s.finished_as("reports", "w-2")),
            Some(("reports", "w-2"))
        );
        assert_eq!(s.reporter("chime.worker.v1.start"), None);
        assert_eq!(s.reporter("chime.events.finished"), None);
        assert_eq!(s.reporter("chime.worker.v1.start.w-1"), None);
        assert_eq!(s.reporter("other.worker.v1.start.a.w"), None);
        assert_eq!(s.fire("reports", Band::High), "chime.fire.reports.high");
        assert_eq!(s.submit_rejected(), "chime.submit.rejected");
        assert_eq!(s.fire_stream(), "CHIME_FIRE");
        assert_eq!(s.slices_bucket(), "chime-slices");
        assert_eq!(s.dead("finished"), "chime.dead.finished");
        assert_eq!(s.dead_wildcard(), "chime.dead.>");
        assert_eq!(s.dead_stream(), "CHIME_DEAD");
    }

    #[test]
    fn dead_letters_follow_the_prefix() {
        let s = Subjects::new("staging-chime");
        assert_eq!(s.dead("submit"), "staging-chime.dead.submit");
        assert_eq!(s.dead_stream(), "STAGING_CHIME_DEAD");
    }

    #[test]
    fn consumer_names_never_collide_and_never_hold_dots() {
        let s = Subjects::default();
        let a = s.fire_consumer("a.b", Band::Low);
        let b = s.fire_consumer("a_b", Band::Low);
        assert_ne!(a, b);
        assert!(!a.contains('.'));
    }
}
