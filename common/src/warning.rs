//! Warnings: what a request asked for that it likely did not mean, said in
//! its reply without refusing it (the request was valid and was carried
//! out). `jobs.put`, `jobs.preview` and `jobs.backfill` replies carry them
//! in `warnings`, written only when there are some.

use serde::{Deserialize, Serialize};
use std::fmt;

/// One warning about one field of a request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Warning {
    /// JSON path of the field it is about, e.g. `schedule.cron` or `handler`.
    pub field: String,
    /// What may not be what was meant, and what to write instead.
    pub message: String,
}

impl Warning {
    /// A warning about `field`.
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Warning {
            field: field.into(),
            message: message.into(),
        }
    }
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}
