//! Upgrades without downtime (docs/OPERATIONS.md, "Upgrades"): during a
//! rolling upgrade replicas of two releases share one database, so
//! migrations expand the schema and only a later release contracts it.
//!
//! - Each PostgreSQL migration after [`BASELINE`] is applied alone to a
//!   database migrated up to it, and the schema before and after are
//!   compared: no table or column disappears, no column changes type or
//!   becomes NOT NULL, and no NOT NULL column without a default appears
//!   (an older release's inserts would fail), unless the file is a
//!   contract migration (`*_contract.sql`) whose first line declares
//!   exactly what it removes (`-- contract: table.column, table`).
//! - A replica starts and serves on a database a newer release has
//!   already expanded (a rollback, or an old replica restarting mid-upgrade).
//! - The Kubernetes Deployment rolls replicas over one at a time, so both
//!   releases run together, and migrates nowhere else than at replica start.

use chime_common::client::Client;
use chime_scheduler::{Replica, SchedulerConfig};
use chime_tests::*;
use serde_json::json;
use sqlx::{Connection, PgConnection, Row};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The last migration written before the rule: those up to it were made
/// before Chime had a release anyone upgrades from, and some drop columns
/// in the release that stopped using them.
const BASELINE: i64 = 20261125200000;

/// A column as the rule sees it: type, nullable, has a default.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Column {
    data_type: String,
    nullable: bool,
    has_default: bool,
}

type Schema = BTreeMap<(String, String), Column>;

fn migrations_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../scheduler/migrations/postgres")
}

/// Every migration file, oldest first, with its version.
fn migrations() -> Vec<(i64, PathBuf)> {
    let mut files: Vec<(i64, PathBuf)> = std::fs::read_dir(migrations_dir())
        .expect("the migrations directory")
        .map(|entry| entry.expect("a directory entry").path())
        .filter(|path| path.extension().is_some_and(|e| e == "sql"))
        .map(|path| {
            let name = path.file_name().expect("a file name").to_string_lossy();
            let version = name
                .split('_')
                .next()
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("{name}: a migration's name starts with its version"));
            (version, path)
        })
        .collect();
    files.sort();
    files
}

async fn schema(conn: &mut PgConnection) -> Schema {
    let rows = sqlx::query(
        "SELECT c.table_name::text AS t, c.column_name::text AS c, c.data_type::text AS ty, \
                c.is_nullable = 'YES' AS nullable, c.column_default IS NOT NULL AS has_default \
         FROM information_schema.columns c \
         JOIN information_schema.tables t USING (table_schema, table_name) \
         WHERE c.table_schema = current_schema() AND t.table_type = 'BASE TABLE' \
           AND c.table_name <> '_sqlx_migrations'",
    )
    .fetch_all(conn)
    .await
    .expect("read the schema");
    rows.into_iter()
        .map(|row| {
            (
                (row.get("t"), row.get("c")),
                Column {
                    data_type: row.get("ty"),
                    nullable: row.get("nullable"),
                    has_default: row.get("has_default"),
                },
            )
        })
        .collect()
}

/// What a contract migration's first line says it removes: `table.column`
/// for a column, `table` for a whole table.
fn declared_removals(sql: &str) -> BTreeSet<String> {
    sql.lines()
        .next()
        .and_then(|line| line.strip_prefix("-- contract:"))
        .map(|list| {
            list.split(',')
                .map(|item| item.trim().to_string())
                .filter(|item| !item.is_empty())
                .collect()
        })
        .unwrap_or_default()
}

/// The ways `after` breaks a release that reads and writes `before`; a
/// removal in `allowed` is none.
fn breaks(before: &Schema, after: &Schema, allowed: &BTreeSet<String>) -> Vec<String> {
    let mut found = Vec::new();
    let tables_after: BTreeSet<&String> = after.keys().map(|(t, _)| t).collect();
    for ((table, column), old) in before {
        let declared = allowed.contains(table) || allowed.contains(&format!("{table}.{column}"));
        match after.get(&(table.clone(), column.clone())) {
            None if declared => {}
            None if !tables_after.contains(table) => found.push(format!("drops table {table}")),
            None => found.push(format!("drops or renames column {table}.{column}")),
            Some(new) if new.data_type != old.data_type => found.push(format!(
                "changes {table}.{column} from {} to {}",
                old.data_type, new.data_type
            )),
            Some(new) if old.nullable && !new.nullable => {
                found.push(format!("makes {table}.{column} NOT NULL"))
            }
            Some(_) => {}
        }
    }
    for ((table, column), new) in after {
        let added = !before.contains_key(&(table.clone(), column.clone()));
        let table_existed = before.keys().any(|(t, _)| t == table);
        if added && table_existed && !new.nullable && !new.has_default {
            found.push(format!(
                "adds {table}.{column} NOT NULL without a default (an older release's inserts fail)"
            ));
        }
    }
    found.sort();
    found.dedup();
    found
}

#[test]
fn the_rule_catches_drops_renames_and_new_required_columns() {
    let col = |ty: &str, nullable, has_default| Column {
        data_type: ty.into(),
        nullable,
        has_default,
    };
    let key = |t: &str, c: &str| (t.to_string(), c.to_string());
    let before: Schema = [
        (key("jobs", "id"), col("text", false, false)),
        (key("jobs", "spec"), col("jsonb", true, false)),
        (key("old", "id"), col("bigint", false, false)),
    ]
    .into();
    let mut after = before.clone();
    after.remove(&key("jobs", "spec"));
    after.insert(key("jobs", "spec2"), col("jsonb", false, false));
    after.remove(&key("old", "id"));
    let none = BTreeSet::new();
    assert_eq!(
        breaks(&before, &after, &none),
        [
            "adds jobs.spec2 NOT NULL without a default (an older release's inserts fail)",
            "drops or renames column jobs.spec",
            "drops table old",
        ]
    );
    let declared = declared_removals("-- contract: jobs.spec, old\nALTER TABLE …");
    assert_eq!(
        breaks(&before, &after, &declared),
        ["adds jobs.spec2 NOT NULL without a default (an older release's inserts fail)"]
    );
    assert!(breaks(&before, &before, &none).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_migration_after_the_baseline_only_expands_the_schema() {
    let db = PgDatabase::create().await;
    let mut conn = PgConnection::connect(db.url()).await.expect("connect");
    let all = migrations();
    assert!(
        all.iter().any(|(v, _)| *v == BASELINE),
        "the baseline {BASELINE} is one of the migrations"
    );
    let mut checked = 0;
    for (version, path) in &all {
        let sql = std::fs::read_to_string(path).expect("read a migration");
        let before = schema(&mut conn).await;
        sqlx::raw_sql(&sql)
            .execute(&mut conn)
            .await
            .unwrap_or_else(|e| panic!("{} does not apply: {e}", path.display()));
        if *version <= BASELINE {
            continue;
        }
        checked += 1;
        let after = schema(&mut conn).await;
        let name = path.file_name().expect("name").to_string_lossy();
        let contract = name.ends_with("_contract.sql");
        let declared = declared_removals(&sql);
        assert!(
            contract || declared.is_empty(),
            "{name} declares removals but is not named *_contract.sql"
        );
        let found = breaks(&before, &after, &declared);
        assert!(
            found.is_empty(),
            "{name} breaks the release before it, which still runs during a rolling upgrade: {found:?}. \
             Expand now and contract in a later release (docs/OPERATIONS.md, \"Upgrades\")"
        );
        // A declared removal that did not happen is a stale declaration.
        for item in &declared {
            let (table, column) = match item.split_once('.') {
                Some((t, c)) => (t.to_string(), Some(c.to_string())),
                None => (item.clone(), None),
            };
            let gone = match &column {
                Some(c) => {
                    before.contains_key(&(table.clone(), c.clone()))
                        && !after.contains_key(&(table.clone(), c.clone()))
                }
                None => {
                    before.keys().any(|(t, _)| *t == table)
                        && !after.keys().any(|(t, _)| *t == table)
                }
            };
            assert!(gone, "{name} declares it removes {item}, which it does not");
        }
    }
    println!(
        "{} migrations, {checked} after the baseline checked",
        all.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_starts_and_serves_on_a_schema_a_newer_release_expanded() {
    init_tracing();
    let nats = NatsServer::start().await;
    let db = PgDatabase::create().await;
    // This release migrates the database first…
    let mut config = SchedulerConfig::new(nats.url(), db.url());
    config.replica_id = "current".into();
    Replica::start(config.clone())
        .await
        .expect("a replica starts on a fresh database")
        .shutdown()
        .await;
    // …then a newer release expands it with a migration this one does not know.
    let mut conn = PgConnection::connect(db.url()).await.expect("connect");
    sqlx::raw_sql(
        "ALTER TABLE jobs ADD COLUMN from_the_future TEXT; \
         CREATE TABLE from_the_future (id BIGINT PRIMARY KEY); \
         INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time) \
         VALUES (99991231000000, 'a newer release', true, '\\x00'::bytea, 0)",
    )
    .execute(&mut conn)
    .await
    .expect("expand the schema as a newer release would");
    // A replica of this release restarting mid-upgrade, or after a rollback.
    let replica = Replica::start(config)
        .await
        .expect("a replica starts on a schema a newer release expanded");
    let client = Client::new(nats.connect().await);
    client
        .put_job(&json!({"id": "after-expand", "schedule": {"every": "1h"}, "handler": "noop"}))
        .await
        .expect("it serves puts");
    let job = client.get_job("after-expand").await.expect("and reads");
    assert_eq!(job.spec.id, "after-expand");
    replica.shutdown().await;
}

#[test]
fn the_kubernetes_scheduler_rolls_over_so_two_releases_share_the_database() {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/kubernetes/base/scheduler.yaml");
    let text = std::fs::read_to_string(&path).expect("read the scheduler manifest");
    let mut deployment = None;
    for document in serde_yaml_ng::Deserializer::from_str(&text) {
        let value: serde_yaml_ng::Value =
            serde::Deserialize::deserialize(document).expect("a YAML document");
        // Migrations run in each replica as it starts (under PostgreSQL's
        // advisory lock); a separate migration Job or init container would
        // be a second path that could contract before the old pods are gone.
        assert!(
            value["kind"] != "Job" && value["spec"]["template"]["spec"]["initContainers"].is_null(),
            "{}: migrations run only in the scheduler replicas",
            path.display()
        );
        if value["kind"] == "Deployment" {
            deployment = Some(value);
        }
    }
    let deployment = deployment.expect("a scheduler Deployment");
    let strategy = &deployment["spec"]["strategy"];
    assert_eq!(
        strategy["type"], "RollingUpdate",
        "replicas are replaced one by one, so the API keeps answering"
    );
    let replicas = deployment["spec"]["replicas"].as_i64().expect("replicas");
    let unavailable = strategy["rollingUpdate"]["maxUnavailable"]
        .as_i64()
        .expect("maxUnavailable as a number");
    assert!(
        unavailable < replicas,
        "at most {unavailable} of {replicas} replicas down at once"
    );
}
