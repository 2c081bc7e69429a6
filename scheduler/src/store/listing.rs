//! What every list read shares: conditions with their values bound in the
//! order they are numbered (`$1`, `$2`, …), and a page read one row longer
//! than asked, so a full page knows whether another follows.

use super::types::Page;
use sqlx::any::AnyArguments;
use sqlx::query::Query;
use sqlx::Any;

/// A value a condition binds.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Bound {
    Text(String),
    Int(i64),
}

impl From<&str> for Bound {
    fn from(s: &str) -> Bound {
        Bound::Text(s.to_string())
    }
}

impl From<i64> for Bound {
    fn from(n: i64) -> Bound {
        Bound::Int(n)
    }
}

/// The `WHERE` conditions of one list query and the values they bind.
#[derive(Debug, Default)]
pub(crate) struct Conditions {
    sql: Vec<String>,
    values: Vec<Bound>,
}

impl Conditions {
    /// Binds `value` and returns its placeholder, `$n`.
    pub(crate) fn param(&mut self, value: impl Into<Bound>) -> String {
        self.values.push(value.into());
        format!("${}", self.values.len())
    }

    /// Adds a condition written with placeholders from [`Conditions::param`].
    pub(crate) fn push(&mut self, condition: String) {
        self.sql.push(condition);
    }

    /// `WHERE a AND b`, or nothing.
    pub(crate) fn where_clause(&self) -> String {
        if self.sql.is_empty() {
            String::new()
        } else {
            format!("WHERE {}", self.sql.join(" AND "))
        }
    }

    /// `query` with every value bound, in placeholder order.
    pub(crate) fn bind<'q>(
        &'q self,
        mut query: Query<'q, Any, AnyArguments<'q>>,
    ) -> Query<'q, Any, AnyArguments<'q>> {
        for value in &self.values {
            query = match value {
                Bound::Text(text) => query.bind(text.as_str()),
                Bound::Int(n) => query.bind(*n),
            };
        }
        query
    }
}

/// The page of `items`, read with `LIMIT limit + 1`: the extra row, if it
/// came, is dropped and says that `next` (the cursor of the last item kept)
/// leads somewhere.
pub(crate) fn page_of<T>(mut items: Vec<T>, limit: u32, cursor: impl Fn(&T) -> String) -> Page<T> {
    let next = if items.len() > limit as usize {
        items.truncate(limit as usize);
        items.last().map(cursor)
    } else {
        None
    };
    Page { items, next }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_follow_the_binding_order() {
        let mut c = Conditions::default();
        assert_eq!(c.where_clause(), "");
        let a = c.param("x");
        c.push(format!("a = {a}"));
        let (b, d) = (c.param(5), c.param("y"));
        c.push(format!("(b, d) < ({b}, {d})"));
        assert_eq!(c.where_clause(), "WHERE a = $1 AND (b, d) < ($2, $3)");
        assert_eq!(c.param(10), "$4");
        assert_eq!(
            c.values,
            [
                Bound::from("x"),
                Bound::Int(5),
                Bound::from("y"),
                Bound::Int(10)
            ]
        );
    }

    #[test]
    fn a_page_says_whether_more_follow() {
        let full = page_of(vec![1, 2, 3], 2, |n| n.to_string());
        assert_eq!((full.items, full.next), (vec![1, 2], Some("2".into())));
        let last = page_of(vec![1, 2], 2, |n| n.to_string());
        assert_eq!((last.items, last.next), (vec![1, 2], None));
    }
}
