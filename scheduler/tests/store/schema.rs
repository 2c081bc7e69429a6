//! Schema parity: the two migration folders are written by hand, one per
//! backend, and must build the same schema. Each database's catalog is read
//! into one line per table, column, index and constraint, in words both
//! backends share; the test fails with the lines only one side has.
//!
//! What legitimately differs is normalised here, explicitly and nowhere
//! else: column types through [`TYPES`]; a primary key column counts as
//! `not null` on SQLite too (SQLite lets a non-integer key hold NULL, which
//! the store never writes); PostgreSQL's casts (`'active'::text`) and the
//! parentheses it adds to expressions are dropped from predicates, defaults
//! and checks. Storage settings (`fillfactor`, autovacuum) are
//! PostgreSQL's alone and not compared.

use super::fixture::TestDb;
use sqlx::{AnyConnection, Connection, PgConnection, Row};
use std::collections::BTreeSet;

/// Column types: (PostgreSQL's `information_schema` name, SQLite's declared
/// type, the type both mean). A type missing here fails the test.
const TYPES: &[(&str, &str, &str)] = &[
    ("bigint", "INTEGER", "integer"),
    ("bigint", "BIGINT", "integer"),
    ("text", "TEXT", "text"),
];

/// Tables the migrator keeps for itself.
const MIGRATOR_TABLE: &str = "_sqlx_migrations";

/// The type both backends mean by a declared type.
fn normal_type(postgres: bool, declared: &str) -> String {
    TYPES
        .iter()
        .find(|(pg, lite, _)| {
            if postgres {
                *pg == declared
            } else {
                *lite == declared
            }
        })
        .map(|(_, _, normal)| normal.to_string())
        .unwrap_or_else(|| {
            panic!("column type {declared:?} is not in the schema test's mapping table")
        })
}

/// An expression in comparable words: lower case, no casts, no
/// parentheses, single spaces.
fn normal_expr(expr: &str) -> String {
    let mut text = expr.to_lowercase();
    for cast in ["::text", "::bigint", "::integer"] {
        text = text.replace(cast, "");
    }
    text.retain(|c| c != '(' && c != ')');
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The schema of a PostgreSQL database, one line per item.
async fn postgres_schema(url: &str) -> BTreeSet<String> {
    let mut conn = PgConnection::connect(url).await.expect("connect");
    let mut out = BTreeSet::new();
    let tables: Vec<String> = sqlx::query_scalar(
        "SELECT tablename::text FROM pg_tables WHERE schemaname = current_schema()",
    )
    .fetch_all(&mut conn)
    .await
    .expect("tables");
    for table in tables.iter().filter(|t| *t != MIGRATOR_TABLE) {
        out.insert(format!("table {table}"));
    }
    let columns = sqlx::query(
        "SELECT table_name::text AS t, column_name::text AS c, data_type::text AS ty, \
             is_nullable::text AS nullable, column_default::text AS dflt \
         FROM information_schema.columns WHERE table_schema = current_schema()",
    )
    .fetch_all(&mut conn)
    .await
    .expect("columns");
    for row in &columns {
        let table: String = row.get("t");
        if table == MIGRATOR_TABLE {
            continue;
        }
        let not_null = row.get::<String, _>("nullable") == "NO";
        let default: Option<String> = row.get("dflt");
        out.insert(column_line(
            &table,
            &row.get::<String, _>("c"),
            &normal_type(true, &row.get::<String, _>("ty")),
            not_null,
            default.as_deref(),
        ));
    }
    let indexes = sqlx::query(
        "SELECT t.relname::text AS t, i.relname::text AS i, x.indisunique AS uniq, \
             x.indisprimary AS pk, \
             EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid = x.indexrelid) AS constraint_, \
             pg_get_expr(x.indpred, x.indrelid) AS pred, \
             array_to_string(array( \
                 SELECT a.attname || CASE WHEN (x.indoption[k.i] & 1) = 1 THEN ' desc' ELSE '' END \
                 FROM generate_subscripts(x.indkey, 1) AS k(i) \
                 JOIN pg_attribute a ON a.attrelid = x.indrelid AND a.attnum = x.indkey[k.i] \
                 ORDER BY k.i), ', ') AS cols \
         FROM pg_index x \
         JOIN pg_class i ON i.oid = x.indexrelid \
         JOIN pg_class t ON t.oid = x.indrelid \
         JOIN pg_namespace n ON n.oid = t.relnamespace \
         WHERE n.nspname = current_schema()",
    )
    .fetch_all(&mut conn)
    .await
    .expect("indexes");
    for row in &indexes {
        let table: String = row.get("t");
        if table == MIGRATOR_TABLE {
            continue;
        }
        let cols: String = row.get("cols");
        out.insert(if row.get::<bool, _>("pk") {
            format!("primary key {table} ({cols})")
        } else if row.get::<bool, _>("constraint_") {
            format!("unique {table} ({cols})")
        } else {
            index_line(
                &table,
                &row.get::<String, _>("i"),
                row.get("uniq"),
                &cols,
                row.get::<Option<String>, _>("pred").as_deref(),
            )
        });
    }
    let constraints = sqlx::query(
        "SELECT c.conrelid::regclass::text AS t, c.contype::text AS kind, \
             pg_get_constraintdef(c.oid) AS def, c.confrelid::regclass::text AS ref, \
             c.confdeltype::text AS on_delete, \
             (SELECT string_agg(a.attname, ', ' ORDER BY k.n) FROM unnest(c.conkey) \
                 WITH ORDINALITY AS k(att, n) \
                 JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = k.att) AS cols, \
             (SELECT string_agg(a.attname, ', ' ORDER BY k.n) FROM unnest(c.confkey) \
                 WITH ORDINALITY AS k(att, n) \
                 JOIN pg_attribute a ON a.attrelid = c.confrelid AND a.attnum = k.att) AS ref_cols \
         FROM pg_constraint c \
         WHERE c.connamespace = current_schema()::regnamespace AND c.contype IN ('f', 'c')",
    )
    .fetch_all(&mut conn)
    .await
    .expect("constraints");
    for row in &constraints {
        let table: String = row.get("t");
        if row.get::<String, _>("kind") == "c" {
            out.insert(check_line(&table, &row.get::<String, _>("def")));
        } else {
            let on_delete = match row.get::<String, _>("on_delete").as_str() {
                "r" => "restrict",
                "c" => "cascade",
                "n" => "set null",
                "d" => "set default",
                _ => "no action",
            };
            out.insert(format!(
                "foreign key {table} ({}) references {}({}) on delete {on_delete}",
                row.get::<String, _>("cols"),
                row.get::<String, _>("ref"),
                row.get::<String, _>("ref_cols"),
            ));
        }
    }
    let _ = conn.close().await;
    out
}

/// The schema of a SQLite database, one line per item.
async fn sqlite_schema(url: &str) -> BTreeSet<String> {
    sqlx::any::install_default_drivers();
    let mut conn = AnyConnection::connect(&format!("{url}?mode=ro"))
        .await
        .expect("connect");
    let mut out = BTreeSet::new();
    let tables = sqlx::query(
        "SELECT name, sql FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'",
    )
    .fetch_all(&mut conn)
    .await
    .expect("tables");
    for table_row in &tables {
        let table: String = table_row.get("name");
        if table == MIGRATOR_TABLE {
            continue;
        }
        out.insert(format!("table {table}"));
        let sql: String = table_row.get("sql");
        for check in checks(&sql) {
            out.insert(check_line(&table, &check));
        }
        let columns = sqlx::query(
            "SELECT name, type, \"notnull\" AS not_null, dflt_value, pk \
             FROM pragma_table_info($1) ORDER BY pk, cid",
        )
        .bind(&table)
        .fetch_all(&mut conn)
        .await
        .expect("columns");
        let mut key = Vec::new();
        for row in &columns {
            let name: String = row.get("name");
            let pk: i64 = row.get("pk");
            if pk > 0 {
                key.push(name.clone());
            }
            let default: Option<String> = row.get("dflt_value");
            out.insert(column_line(
                &table,
                &name,
                &normal_type(false, &row.get::<String, _>("type")),
                row.get::<i64, _>("not_null") != 0 || pk > 0,
                default.as_deref(),
            ));
        }
        if !key.is_empty() {
            out.insert(format!("primary key {table} ({})", key.join(", ")));
        }
        let indexes = sqlx::query(
            "SELECT l.name, l.\"unique\" AS uniq, l.origin, m.sql \
             FROM pragma_index_list($1) l LEFT JOIN sqlite_master m ON m.name = l.name",
        )
        .bind(&table)
        .fetch_all(&mut conn)
        .await
        .expect("indexes");
        for row in &indexes {
            let name: String = row.get("name");
            let origin: String = row.get("origin");
            let cols: Vec<String> = sqlx::query(
                "SELECT name, \"desc\" AS descending FROM pragma_index_xinfo($1) \
                 WHERE key = 1 ORDER BY seqno",
            )
            .bind(&name)
            .fetch_all(&mut conn)
            .await
            .expect("index columns")
            .iter()
            .map(|c| {
                let column: String = c.get("name");
                if c.get::<i64, _>("descending") != 0 {
                    format!("{column} desc")
                } else {
                    column
                }
            })
            .collect();
            let cols = cols.join(", ");
            match origin.as_str() {
                // Read from the columns above (an INTEGER key has no index).
                "pk" => {}
                "u" => {
                    out.insert(format!("unique {table} ({cols})"));
                }
                _ => {
                    let sql: Option<String> = row.get("sql");
                    let predicate = sql.as_deref().and_then(|sql| {
                        let at = sql.to_lowercase().find(" where ")?;
                        Some(sql[at + 7..].to_string())
                    });
                    out.insert(index_line(
                        &table,
                        &name,
                        row.get::<i64, _>("uniq") != 0,
                        &cols,
                        predicate.as_deref(),
                    ));
                }
            }
        }
        let keys = sqlx::query(
            "SELECT \"from\" AS col, \"table\" AS ref, \"to\" AS ref_col, on_delete \
             FROM pragma_foreign_key_list($1) ORDER BY id, seq",
        )
        .bind(&table)
        .fetch_all(&mut conn)
        .await
        .expect("foreign keys");
        for row in &keys {
            out.insert(format!(
                "foreign key {table} ({}) references {}({}) on delete {}",
                row.get::<String, _>("col"),
                row.get::<String, _>("ref"),
                row.get::<String, _>("ref_col"),
                row.get::<String, _>("on_delete").to_lowercase(),
            ));
        }
    }
    let _ = conn.close().await;
    out
}

fn column_line(table: &str, name: &str, ty: &str, not_null: bool, default: Option<&str>) -> String {
    format!(
        "column {table}.{name} {ty}{}{}",
        if not_null { " not null" } else { "" },
        default.map_or(String::new(), |d| format!(" default {}", normal_expr(d)))
    )
}

fn index_line(
    table: &str,
    name: &str,
    unique: bool,
    cols: &str,
    predicate: Option<&str>,
) -> String {
    format!(
        "index {table}.{name}{} ({cols}){}",
        if unique { " unique" } else { "" },
        predicate.map_or(String::new(), |p| format!(" where {}", normal_expr(p)))
    )
}

fn check_line(table: &str, check: &str) -> String {
    let expr = normal_expr(check);
    let expr = expr.strip_prefix("check ").unwrap_or(&expr);
    format!("check {table}: {expr}")
}

/// The `CHECK (…)` clauses of a SQLite `CREATE TABLE` statement.
fn checks(sql: &str) -> Vec<String> {
    let lower = sql.to_lowercase();
    let mut found = Vec::new();
    let mut from = 0;
    while let Some(at) = lower[from..].find("check") {
        let start = from + at + "check".len();
        let Some(open) = lower[start..].find('(').map(|o| start + o) else {
            break;
        };
        if !lower[start..open].trim().is_empty() {
            from = start;
            continue;
        }
        let mut depth = 0;
        let mut end = open;
        for (i, c) in lower[open..].char_indices() {
            match c {
                '(' => depth += 1,
                ')' => {
                    depth -= 1;
                    if depth == 0 {
                        end = open + i;
                        break;
                    }
                }
                _ => {}
            }
        }
        found.push(sql[open..=end].to_string());
        from = end + 1;
    }
    found
}

/// The lines only one side has, readable.
fn differences(postgres: &BTreeSet<String>, sqlite: &BTreeSet<String>) -> Vec<String> {
    let only = |a: &BTreeSet<String>, b: &BTreeSet<String>, side: &str| {
        a.difference(b)
            .map(|line| format!("only on {side}: {line}"))
            .collect::<Vec<_>>()
    };
    let mut out = only(postgres, sqlite, "postgres");
    out.extend(only(sqlite, postgres, "sqlite"));
    out
}

/// Both backends' schemas after every migration.
async fn migrated() -> (TestDb, BTreeSet<String>, TestDb, BTreeSet<String>) {
    let pg = TestDb::create(super::Backend::Postgres).await;
    let lite = TestDb::create(super::Backend::Sqlite).await;
    pg.store().await.close().await;
    lite.store().await.close().await;
    let pg_schema = postgres_schema(&pg.url).await;
    let lite_schema = sqlite_schema(&lite.url).await;
    (pg, pg_schema, lite, lite_schema)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_migration_folders_build_the_same_schema() {
    let (_pg, postgres, _lite, sqlite) = migrated().await;
    assert!(
        postgres.iter().any(|l| l.starts_with("index waiting.")),
        "the catalog reads found no indexes: {postgres:#?}"
    );
    let diff = differences(&postgres, &sqlite);
    assert!(
        diff.is_empty(),
        "the migrations build different schemas:\n{}",
        diff.join("\n")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_divergent_migration_is_reported() {
    let (pg, _, lite, _) = migrated().await;
    lite.exec("CREATE INDEX waiting_group ON waiting (group_name) WHERE slice IS NULL")
        .await;
    lite.exec("ALTER TABLE store_meta ADD COLUMN note TEXT NOT NULL DEFAULT 'x'")
        .await;
    pg.exec("ALTER TABLE pending ADD CONSTRAINT pending_firing CHECK (firing_id <> '')")
        .await;
    let diff = differences(
        &postgres_schema(&pg.url).await,
        &sqlite_schema(&lite.url).await,
    );
    assert_eq!(
        diff,
        [
            "only on postgres: check pending: firing_id <> ''",
            "only on sqlite: column store_meta.note text not null default 'x'",
            "only on sqlite: index waiting.waiting_group (group_name) where slice is null",
        ]
    );
}

#[test]
fn sqlite_check_clauses_are_found() {
    assert_eq!(
        checks("CREATE TABLE t (a INTEGER CHECK (a > (0)), b TEXT, CONSTRAINT c CHECK(b <> ''))"),
        ["(a > (0))", "(b <> '')"]
    );
    assert_eq!(
        normal_expr("((state = 'active'::text))"),
        "state = 'active'"
    );
}
