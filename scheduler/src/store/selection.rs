//! Label selectors as SQL: a selector (`chime_common::labels`) becomes a
//! condition on the jobs of `jobs` alias `j`, so selection happens in the
//! same query that pages, and a page holds exactly the jobs that match.
//!
//! Labels are read from the stored spec (`Backend::label_value`): no table
//! of labels to keep in step with every write of a spec. A selector scans
//! the jobs in page order, which suits the thousands of jobs an
//! installation has.

use super::dialect::Backend;
use super::listing::Conditions;
use chime_common::labels::{Requirement, Selector};

/// The condition that holds for exactly the jobs `selector` matches, its
/// values bound in `conditions`.
pub(crate) fn selector_condition(
    backend: Backend,
    selector: &Selector,
    conditions: &mut Conditions,
) -> String {
    let mut parts = Vec::new();
    for requirement in selector.requirements() {
        let label = backend.label_value(conditions.param(requirement.key()));
        let part = match requirement {
            Requirement::Equals(_, v) => format!("{label} = {}", conditions.param(v.as_str())),
            Requirement::NotEquals(_, v) => {
                format!(
                    "({label} IS NULL OR {label} <> {})",
                    conditions.param(v.as_str())
                )
            }
            Requirement::Exists(_) => format!("{label} IS NOT NULL"),
            Requirement::Absent(_) => format!("{label} IS NULL"),
            Requirement::In(_, vs) => format!("{label} IN ({})", list(vs, conditions)),
            Requirement::NotIn(_, vs) => {
                format!(
                    "({label} IS NULL OR {label} NOT IN ({}))",
                    list(vs, conditions)
                )
            }
        };
        parts.push(part);
    }
    format!("({})", parts.join(" AND "))
}

fn list(values: &[String], conditions: &mut Conditions) -> String {
    let params: Vec<String> = values
        .iter()
        .map(|v| conditions.param(v.as_str()))
        .collect();
    params.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameters_follow_the_ones_before() {
        let selector: Selector = "team=data,!old,tier in (a,b)".parse().unwrap();
        let mut conditions = Conditions::default();
        conditions.param("group");
        conditions.param("state");
        let sql = selector_condition(Backend::Postgres, &selector, &mut conditions);
        assert!(sql.contains("->> $3) = $4"), "{sql}");
        assert!(sql.contains("->> $5) IS NULL"), "{sql}");
        assert!(sql.contains("IN ($7, $8)"), "{sql}");
        assert_eq!(conditions.param(0), "$9");
    }
}
