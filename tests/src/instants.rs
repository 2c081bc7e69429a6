//! Instants for schedules in tests: aligned to whole seconds so a test's
//! expected firings do not depend on when in a second it started.

use std::time::Duration;

/// The next whole second at least `ahead` from now, in UTC ms.
pub fn aligned_start(ahead: Duration) -> i64 {
    let at = chrono::Utc::now().timestamp_millis() + ahead.as_millis() as i64;
    (at / 1000 + 1) * 1000
}

/// RFC 3339 of UTC ms.
pub fn rfc3339(ms: i64) -> String {
    chime_common::duration::format_time(chime_common::duration::from_millis(ms))
}
