//! The few places where PostgreSQL and SQLite need different SQL.
//!
//! Everything else in the store is one SQL text for both: `$n` parameters,
//! `ON CONFLICT`, `RETURNING`, `UPDATE … FROM`, partial indexes and row-value
//! comparisons mean the same on PostgreSQL 14+ and SQLite 3.35+ (sqlx bundles
//! a newer SQLite).

/// Which database the store talks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Backend {
    /// PostgreSQL: the production store, many replicas.
    Postgres,
    /// SQLite: the embedded single-node default.
    Sqlite,
}

/// SQL type of a column in a JSON batch (see [`Backend::json_rows`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Col {
    Int,
    Text,
}

impl Backend {
    /// The backend a database URL names.
    pub fn from_url(url: &str) -> Option<Backend> {
        let scheme = url.split(':').next().unwrap_or("");
        match scheme {
            "postgres" | "postgresql" => Some(Backend::Postgres),
            "sqlite" => Some(Backend::Sqlite),
            _ => None,
        }
    }

    /// The name used in logs and errors.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Postgres => "postgres",
            Backend::Sqlite => "sqlite",
        }
    }

    /// Row lock for rows a transaction reads and then changes. SQLite needs
    /// none: write transactions begin `IMMEDIATE`, so they run one at a time.
    pub(crate) fn for_update(self) -> &'static str {
        match self {
            Backend::Postgres => " FOR UPDATE",
            Backend::Sqlite => "",
        }
    }

    /// Row lock on one table of a join (`alias`), for rows a transaction
    /// reads and then changes.
    pub(crate) fn for_update_of(self, alias: &str) -> String {
        match self {
            Backend::Postgres => format!(" FOR UPDATE OF {alias}"),
            Backend::Sqlite => String::new(),
        }
    }

    /// Row lock on one table of a query (`alias`) that passes over rows
    /// another transaction holds: replicas staging the same partition split
    /// the due jobs between them instead of waiting.
    pub(crate) fn for_update_skip_locked(self, alias: &str) -> String {
        match self {
            Backend::Postgres => format!(" FOR UPDATE OF {alias} SKIP LOCKED"),
            Backend::Sqlite => String::new(),
        }
    }

    /// The statement that opens a write transaction.
    pub(crate) fn begin_write(self) -> &'static str {
        match self {
            Backend::Postgres => "BEGIN",
            // Take the write lock up front: a deferred transaction that reads
            // and then writes can fail with SQLITE_BUSY instead of waiting.
            Backend::Sqlite => "BEGIN IMMEDIATE",
        }
    }

    /// A FROM item, aliased `r`, that expands the JSON array of objects bound
    /// as parameter `$param` into rows with the given columns.
    ///
    /// This is how every batch reaches the database: one parameter, one
    /// statement, any number of rows (PostgreSQL `json_to_recordset`, SQLite
    /// `json_each`). It plays the part of PostgreSQL's `UNNEST($1::text[], …)`,
    /// which sqlx's `Any` driver cannot bind, and keeps one SQL text per
    /// statement on both backends. Text values are JSON strings, integers JSON
    /// numbers (milliseconds stay below 2^53), absent values JSON null.
    ///
    /// PostgreSQL plans such a join for the tables as they are when it runs
    /// (`plan_cache_mode = force_custom_plan` on every connection, see
    /// `Store::connect`), not once for the lifetime of the connection. It
    /// guesses 100 rows for any `json_to_recordset`, and with 100 rows a hash
    /// join over a sequential scan of `firings` looks cheaper than 100 index
    /// lookups up to tens of thousands of rows: 3–6 ms per statement for a
    /// handful of ids. The `LIMIT json_array_length(…)` changes no result;
    /// the planner folds it to the batch's real size, then looks the rows up
    /// by index (0.1 ms).
    pub(crate) fn json_rows(self, param: usize, columns: &[(&str, Col)]) -> String {
        match self {
            Backend::Postgres => {
                let cols: Vec<String> = columns
                    .iter()
                    .map(|(name, col)| {
                        let ty = match col {
                            Col::Int => "bigint",
                            Col::Text => "text",
                        };
                        format!("{name} {ty}")
                    })
                    .collect();
                format!(
                    "(SELECT * FROM json_to_recordset(${param}::json) AS r({}) \
                     LIMIT json_array_length(${param}::json)) AS r",
                    cols.join(", ")
                )
            }
            Backend::Sqlite => {
                let cols: Vec<String> = columns
                    .iter()
                    .map(|(name, _)| format!("json_extract(value, '$.{name}') AS {name}"))
                    .collect();
                format!("(SELECT {} FROM json_each(${param})) AS r", cols.join(", "))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_name_their_backend() {
        assert_eq!(
            Backend::from_url("postgres://u@h/db"),
            Some(Backend::Postgres)
        );
        assert_eq!(
            Backend::from_url("postgresql://u@h/db"),
            Some(Backend::Postgres)
        );
        assert_eq!(
            Backend::from_url("sqlite://chime.db"),
            Some(Backend::Sqlite)
        );
        assert_eq!(Backend::from_url("sqlite::memory:"), Some(Backend::Sqlite));
        assert_eq!(Backend::from_url("mysql://h/db"), None);
    }

    #[test]
    fn json_rows_declare_columns_per_backend() {
        let cols = [("id", Col::Text), ("n", Col::Int)];
        assert_eq!(
            Backend::Postgres.json_rows(1, &cols),
            "(SELECT * FROM json_to_recordset($1::json) AS r(id text, n bigint) \
             LIMIT json_array_length($1::json)) AS r"
        );
        assert_eq!(
            Backend::Sqlite.json_rows(2, &cols),
            "(SELECT json_extract(value, '$.id') AS id, json_extract(value, '$.n') AS n FROM json_each($2)) AS r"
        );
    }
}
