//! The parts of `chimectl` that are more than one request: jobs as code
//! (`apply`, `diff`, `export`) and `import crontab`. A library so the end-to-end suites can make
//! a plan, change the server, and then carry the plan out, which is how a
//! concurrent edit between `diff` and `apply` is shown to be a conflict.

pub mod crontab;
pub mod field_diff;
pub mod manifests;
pub mod plan;
