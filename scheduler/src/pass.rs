//! The settings every periodic service shares: how often a pass runs, how
//! much one pass takes, and, for a service one replica at a time runs, the
//! lease that elects it. Each service's settings name them `interval`,
//! `batch` and `lease_ttl`, and check them here, so the rules and their
//! messages are written once.

use std::time::Duration;

/// Checks a periodic service's shared settings; `service` names it in the
/// message. `batch` and `lease_ttl` are `None` for a service without them.
pub fn check_pass(
    service: &str,
    interval: Duration,
    batch: Option<u32>,
    lease_ttl: Option<Duration>,
) -> Result<(), String> {
    if interval.is_zero() {
        return Err(format!("the {service} interval must be above zero"));
    }
    if batch == Some(0) {
        return Err(format!("the {service} batch must be above zero"));
    }
    if lease_ttl.is_some_and(|ttl| ttl <= interval) {
        return Err(format!(
            "the {service} lease must outlast one {service} interval, or two replicas run it at once"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::check_pass;
    use std::time::Duration;

    const SECOND: Duration = Duration::from_secs(1);

    #[test]
    fn each_shared_setting_is_checked_and_named() {
        assert!(check_pass("expiry", SECOND, Some(10), Some(SECOND * 5)).is_ok());
        assert!(check_pass("checkpoint", SECOND, None, None).is_ok());
        let zero = check_pass("expiry", Duration::ZERO, None, None).unwrap_err();
        assert_eq!(zero, "the expiry interval must be above zero");
        let batch = check_pass("expiry", SECOND, Some(0), None).unwrap_err();
        assert_eq!(batch, "the expiry batch must be above zero");
        let lease = check_pass("expiry", SECOND, Some(1), Some(SECOND)).unwrap_err();
        assert!(lease.starts_with("the expiry lease must outlast one expiry interval"));
    }
}
