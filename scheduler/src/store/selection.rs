//! Label selectors as SQL: a selector (`chime_common::labels`) becomes a
//! condition on the jobs of `jobs` alias `j`, so selection happens in the
//! same query that pages, and a page holds exactly the jobs that match.
//!
//! Labels are read from the stored spec (`Backend::label_value`): no table
//! of labels to keep in step with every write of a spec. A selector scans
//! the jobs in page order, which suits the thousands of jobs an
//! installation has.

use super::dialect::Backend;
use chime_common::labels::{Requirement, Selector};

/// A condition and the text parameters it binds, in order.
pub(crate) struct Condition {
    pub(crate) sql: String,
    pub(crate) binds: Vec<String>,
}

/// The condition that holds for exactly the jobs `selector` matches; its
/// parameters are numbered from `$first`.
pub(crate) fn selector_condition(backend: Backend, selector: &Selector, first: usize) -> Condition {
    let mut binds: Vec<String> = Vec::new();
    let mut bind = |value: &str| {
        binds.push(value.to_string());
        first + binds.len() - 1
    };
    let mut parts = Vec::new();
    for requirement in selector.requirements() {
        let label = backend.label_value(bind(requirement.key()));
        let part = match requirement {
            Requirement::Equals(_, v) => format!("{label} = ${}", bind(v)),
            Requirement::NotEquals(_, v) => {
                format!("({label} IS NULL OR {label} <> ${})", bind(v))
            }
            Requirement::Exists(_) => format!("{label} IS NOT NULL"),
            Requirement::Absent(_) => format!("{label} IS NULL"),
            Requirement::In(_, vs) => format!("{label} IN ({})", list(vs, &mut bind)),
            Requirement::NotIn(_, vs) => {
                format!(
                    "({label} IS NULL OR {label} NOT IN ({}))",
                    list(vs, &mut bind)
                )
            }
        };
        parts.push(part);
    }
    Condition {
        sql: format!("({})", parts.join(" AND ")),
        binds,
    }
}

fn list(values: &[String], bind: &mut impl FnMut(&str) -> usize) -> String {
    let params: Vec<String> = values.iter().map(|v| format!("${}", bind(v))).collect();
    params.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameters_follow_the_ones_before() {
        let selector: Selector = "team=data,!old,tier in (a,b)".parse().unwrap();
        let c = selector_condition(Backend::Postgres, &selector, 3);
        assert_eq!(c.binds, vec!["team", "data", "old", "tier", "a", "b"]);
        assert!(c.sql.contains("->> $3) = $4"), "{}", c.sql);
        assert!(c.sql.contains("->> $5) IS NULL"), "{}", c.sql);
        assert!(c.sql.contains("IN ($7, $8)"), "{}", c.sql);
    }
}
