//! Parsed job definitions kept between stagings.
//!
//! Every slice stages each due job again, and reading a stored spec (JSON
//! parse, validation, compiling its schedule, encoding its payload) is most
//! of the scheduler's staging work. A job's definition
//! changes far less often than it fires, so the parsed form is kept, keyed
//! by job id and valid while the stored text and anchor are byte for byte
//! what it was parsed from: a put, a replace by a replica of another
//! release or a job deleted and created again under its id all change the
//! text or the anchor, and the next read parses afresh. Nothing else can
//! make an entry stale, so nothing needs to invalidate it.
//!
//! The cache is bounded by an estimate of its memory, not by a count,
//! because a payload may be up to `max_payload_bytes`: a definition too
//! large for its share of the budget is parsed every time, as before.

use super::error::StoreError;
use super::rows;
use super::schedule::compile;
use chime_common::schedule::Schedule;
use chime_common::JobSpec;
use quick_cache::sync::Cache;
use quick_cache::Weighter;
use std::sync::Arc;

/// What the budget allows by default: room for tens of thousands of
/// ordinary definitions.
pub(crate) const DEFAULT_BUDGET_BYTES: u64 = 64 * 1024 * 1024;

/// A job's stored definition, read once: what staging needs of it.
#[derive(Debug)]
pub(crate) struct ParsedJob {
    /// The stored text and anchor this was read from.
    text: String,
    anchor_ms: i64,
    /// The definition, less its payload: staging needs that only encoded
    /// (`payload`), and its parsed tree would take a few times the memory.
    pub spec: JobSpec,
    pub schedule: Schedule,
    /// The job's payload, encoded: what each staged firing row stores and
    /// its message carries.
    pub payload: String,
}

impl ParsedJob {
    /// Reads job `id`'s stored definition `text` with its `anchor_ms`.
    fn read(id: &str, text: &str, anchor_ms: i64) -> Result<ParsedJob, StoreError> {
        let mut spec = rows::spec(id, text)?;
        let schedule = compile(&spec, anchor_ms)?;
        let payload = serde_json::to_string(&std::mem::take(&mut spec.payload))
            .map_err(|e| StoreError::corrupt(id, format!("payload does not encode: {e}")))?;
        Ok(ParsedJob {
            text: text.to_owned(),
            anchor_ms,
            spec,
            schedule,
            payload,
        })
    }

    /// Whether this was read from exactly `text` and `anchor_ms`.
    fn is_of(&self, text: &str, anchor_ms: i64) -> bool {
        self.anchor_ms == anchor_ms && self.text == text
    }
}

/// Estimates an entry's memory: the text kept for comparison, the parsed
/// spec (counted as twice the whole text, though its payload is out) and
/// the encoded payload, plus the fixed parts.
#[derive(Debug, Clone, Copy)]
struct EstimatedBytes;

impl Weighter<String, Arc<ParsedJob>> for EstimatedBytes {
    fn weight(&self, id: &String, job: &Arc<ParsedJob>) -> u64 {
        let text = job.text.len() as u64;
        let payload = job.payload.len() as u64;
        (id.len() as u64)
            .saturating_add(text.saturating_mul(3))
            .saturating_add(payload)
            .saturating_add(512)
    }
}

/// The parsed definitions of recently staged jobs, shared by a store's
/// clones.
#[derive(Clone)]
pub(crate) struct SpecCache {
    entries: Arc<Cache<String, Arc<ParsedJob>, EstimatedBytes>>,
}

impl SpecCache {
    /// A cache that keeps about `budget_bytes` of definitions (0 keeps none).
    pub(crate) fn new(budget_bytes: u64) -> SpecCache {
        // At about 2 KiB an entry; the cache grows past it if entries are smaller.
        let estimated_items = usize::try_from(budget_bytes / 2048)
            .unwrap_or(usize::MAX)
            .max(1);
        SpecCache {
            entries: Arc::new(Cache::with_weighter(
                estimated_items,
                budget_bytes,
                EstimatedBytes,
            )),
        }
    }

    /// Job `id`'s definition as stored (`text`, `anchor_ms`): the kept one if
    /// it was read from exactly these, else read now and kept. A corrupt
    /// definition is an error each time and is not kept.
    pub(crate) fn parsed(
        &self,
        id: &str,
        text: &str,
        anchor_ms: i64,
    ) -> Result<Arc<ParsedJob>, StoreError> {
        if let Some(kept) = self.entries.get(id) {
            if kept.is_of(text, anchor_ms) {
                return Ok(kept);
            }
        }
        let job = Arc::new(ParsedJob::read(id, text, anchor_ms)?);
        self.entries.insert(id.to_owned(), Arc::clone(&job));
        Ok(job)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec_text(id: &str, payload: serde_json::Value) -> String {
        json!({
            "id": id,
            "schedule": {"every": "1s"},
            "handler": "noop",
            "payload": payload,
        })
        .to_string()
    }

    #[test]
    fn the_same_text_and_anchor_are_read_once() {
        let cache = SpecCache::new(DEFAULT_BUDGET_BYTES);
        let text = spec_text("a", json!({"n": 1}));
        let first = cache.parsed("a", &text, 1_000).unwrap();
        let again = cache.parsed("a", &text, 1_000).unwrap();
        assert!(Arc::ptr_eq(&first, &again));
        assert_eq!(again.payload, r#"{"n":1}"#);
        assert_eq!(
            again.spec.payload,
            serde_json::Value::Null,
            "kept once, encoded"
        );
    }

    #[test]
    fn another_text_or_anchor_is_read_afresh() {
        let cache = SpecCache::new(DEFAULT_BUDGET_BYTES);
        let old = cache
            .parsed("a", &spec_text("a", json!({"n": 1})), 1_000)
            .unwrap();
        let replaced = cache
            .parsed("a", &spec_text("a", json!({"n": 2})), 1_000)
            .unwrap();
        assert!(!Arc::ptr_eq(&old, &replaced));
        assert_eq!(replaced.payload, r#"{"n":2}"#);
        let moved = cache
            .parsed("a", &spec_text("a", json!({"n": 2})), 2_000)
            .unwrap();
        assert!(!Arc::ptr_eq(&replaced, &moved));
        assert_ne!(moved.schedule, old.schedule);
    }

    #[test]
    fn a_corrupt_definition_is_an_error_every_time() {
        let cache = SpecCache::new(DEFAULT_BUDGET_BYTES);
        for _ in 0..2 {
            match cache.parsed("a", "{not json", 0) {
                Err(StoreError::Corrupt { id, .. }) => assert_eq!(id, "a"),
                other => panic!("expected a corrupt definition, got {other:?}"),
            }
        }
        assert_eq!(cache.entries.len(), 0);
        // A spec naming another job is corrupt for this one.
        assert!(cache.parsed("a", &spec_text("b", json!(null)), 0).is_err());
    }

    #[test]
    fn a_definition_over_the_budget_is_read_each_time() {
        let cache = SpecCache::new(4 * 1024);
        let large = spec_text("a", json!("x".repeat(8 * 1024)));
        let first = cache.parsed("a", &large, 0).unwrap();
        let again = cache.parsed("a", &large, 0).unwrap();
        assert!(!Arc::ptr_eq(&first, &again));
        assert_eq!(first.payload, again.payload);
        assert!(cache.entries.weight() <= 4 * 1024);
    }

    #[test]
    fn the_budget_bounds_what_is_kept() {
        let cache = SpecCache::new(64 * 1024);
        for i in 0..1_000 {
            let id = format!("job-{i}");
            cache
                .parsed(&id, &spec_text(&id, json!({"i": i})), 0)
                .unwrap();
        }
        assert!(cache.entries.weight() <= 64 * 1024);
        assert!(cache.entries.len() < 1_000);
        assert!(!cache.entries.is_empty());
    }
}
