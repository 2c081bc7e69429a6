//! The audit trail: one row per mutating API request, whoever sent it.

use super::error::StoreError;
use super::handle::Store;
use super::listing::{page_of, Conditions};
use super::types::Page;
use super::values::{at_ms, ms, RowExt};
use chime_common::api::page_limit;
use chime_common::api::AuditEntry;
use chrono::{DateTime, Utc};

/// What [`Store::record_audit`] writes; the id and time are the store's.
#[derive(Debug, Clone)]
pub struct AuditRecord<'a> {
    pub actor: &'a str,
    pub via: &'a str,
    pub verb: &'a str,
    pub target: &'a str,
    pub before_version: Option<i64>,
    pub after_version: Option<i64>,
    pub outcome: &'a str,
    pub message: Option<&'a str>,
}

/// Which entries `audit.list` reads.
#[derive(Debug, Clone, Default)]
pub struct AuditFilter {
    pub target: Option<String>,
    pub limit: u32,
    /// The `next` cursor of the previous page: an entry id.
    pub after: Option<String>,
}

const AUDIT_COLUMNS: &str =
    "id, at, actor, via, verb, target, before_version, after_version, outcome, message";

impl Store {
    /// Appends one entry at `at`.
    pub async fn record_audit(
        &self,
        record: &AuditRecord<'_>,
        at: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        // UUID v7 sorts by time: ids are the order and the cursor.
        let id = uuid::Uuid::now_v7().to_string();
        self.retrying(|| async {
            sqlx::query(&format!(
                "INSERT INTO audit ({AUDIT_COLUMNS}) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)"
            ))
            .bind(id.as_str())
            .bind(ms(at))
            .bind(record.actor)
            .bind(record.via)
            .bind(record.verb)
            .bind(record.target)
            .bind(record.before_version)
            .bind(record.after_version)
            .bind(record.outcome)
            .bind(record.message)
            .execute(&self.write)
            .await?;
            Ok(())
        })
        .await
    }

    /// One page of entries, newest first.
    pub async fn list_audit(&self, filter: &AuditFilter) -> Result<Page<AuditEntry>, StoreError> {
        let limit = page_limit(filter.limit);
        let mut conditions = Conditions::default();
        if let Some(target) = &filter.target {
            let target = conditions.param(target.as_str());
            conditions.push(format!("target = {target}"));
        }
        if let Some(after) = &filter.after {
            let after = conditions.param(after.as_str());
            conditions.push(format!("id < {after}"));
        }
        let limit_param = conditions.param(i64::from(limit) + 1);
        let sql = format!(
            "SELECT {AUDIT_COLUMNS} FROM audit {} ORDER BY id DESC LIMIT {limit_param}",
            conditions.where_clause()
        );
        let rows = conditions
            .bind(sqlx::query(&sql))
            .fetch_all(&self.read)
            .await?;
        let mut items = Vec::with_capacity(rows.len());
        for row in &rows {
            let id = row.text("audit", "id")?;
            items.push(AuditEntry {
                at: at_ms(row.int(&id, "at")?),
                actor: row.text(&id, "actor")?,
                via: row.text(&id, "via")?,
                verb: row.text(&id, "verb")?,
                target: row.text(&id, "target")?,
                before_version: row.opt_int(&id, "before_version")?,
                after_version: row.opt_int(&id, "after_version")?,
                outcome: row.text(&id, "outcome")?,
                message: row.opt_text(&id, "message")?,
                id,
            });
        }
        Ok(page_of(items, limit, |e| e.id.clone()))
    }

    /// Deletes entries recorded before `before`; returns how many.
    pub async fn prune_audit(&self, before: DateTime<Utc>) -> Result<u64, StoreError> {
        self.retrying(|| async {
            let done = sqlx::query("DELETE FROM audit WHERE at < $1")
                .bind(ms(before))
                .execute(&self.write)
                .await?;
            Ok(done.rows_affected())
        })
        .await
    }
}
