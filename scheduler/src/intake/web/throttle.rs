//! Limits on wrong passwords, per source address and per user name.
//!
//! Every password check costs an argon2 verification, slow and
//! memory-hungry on purpose, and only a few run at once. Without a limit
//! a flood of wrong passwords fills those slots, so real logins wait and
//! time out, and an attacker may guess for as long as they like. A source
//! (an IPv4 address, an IPv6 /64) or a user name that has failed too often
//! in the window is answered 429 without a verification until the window
//! ends; a success clears the user's count. The table is bounded, so the
//! throttle itself cannot be grown without limit.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The header the HTTP server sets to the client's address (any value a
/// client sends in it is replaced), so handlers that see only headers can
/// name the source.
pub const PEER_HEADER: &str = "x-chime-peer";

/// Throttle settings.
#[derive(Debug, Clone)]
pub struct ThrottleConfig {
    /// The window failures are counted in.
    pub window: Duration,
    /// Failed checks from one source within the window before it is refused.
    pub per_source: u32,
    /// Failed checks for one user name within the window before it is refused.
    pub per_user: u32,
    /// Sources and names tracked at once; past it, the oldest windows go.
    pub max_tracked: usize,
}

impl Default for ThrottleConfig {
    fn default() -> Self {
        ThrottleConfig {
            window: Duration::from_secs(60),
            per_source: 10,
            per_user: 20,
            max_tracked: 10_000,
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Window {
    started: Instant,
    failures: u32,
}

/// Counts failed password checks.
#[derive(Debug, Default)]
pub struct LoginThrottle {
    config: ThrottleConfig,
    windows: Mutex<HashMap<String, Window>>,
}

/// The keys a check is counted under.
fn keys(source: Option<IpAddr>, user: &str) -> Vec<(String, bool)> {
    let mut keys = vec![(format!("user:{user}"), false)];
    if let Some(source) = source {
        let source = match source {
            IpAddr::V4(v4) => v4.to_string(),
            // One host usually owns a whole /64.
            IpAddr::V6(v6) => {
                let s = v6.segments();
                format!("{:x}:{:x}:{:x}:{:x}::/64", s[0], s[1], s[2], s[3])
            }
        };
        keys.push((format!("source:{source}"), true));
    }
    keys
}

impl LoginThrottle {
    pub fn new(config: ThrottleConfig) -> Self {
        LoginThrottle {
            config,
            windows: Mutex::default(),
        }
    }

    /// `Err(wait)` when `source` or `user` has failed too often: refuse
    /// without checking the password, and say when to try again.
    pub fn check(&self, source: Option<IpAddr>, user: &str) -> Result<(), Duration> {
        let windows = self.windows.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        for (key, is_source) in keys(source, user) {
            let limit = if is_source {
                self.config.per_source
            } else {
                self.config.per_user
            };
            if let Some(window) = windows.get(&key) {
                let age = now.duration_since(window.started);
                if age < self.config.window && window.failures >= limit {
                    return Err(self.config.window - age);
                }
            }
        }
        Ok(())
    }

    /// Counts a failed check.
    pub fn failed(&self, source: Option<IpAddr>, user: &str) {
        let mut windows = self.windows.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        let window = self.config.window;
        if windows.len() >= self.config.max_tracked {
            windows.retain(|_, w| now.duration_since(w.started) < window);
        }
        for (key, _) in keys(source, user) {
            if windows.len() >= self.config.max_tracked && !windows.contains_key(&key) {
                // Full of live windows: forget the oldest one.
                if let Some(oldest) = windows
                    .iter()
                    .min_by_key(|(_, w)| w.started)
                    .map(|(k, _)| k.clone())
                {
                    windows.remove(&oldest);
                }
            }
            let entry = windows.entry(key).or_insert(Window {
                started: now,
                failures: 0,
            });
            if now.duration_since(entry.started) >= window {
                *entry = Window {
                    started: now,
                    failures: 0,
                };
            }
            entry.failures = entry.failures.saturating_add(1);
        }
    }

    /// A correct password clears the user's count (not the source's).
    pub fn succeeded(&self, user: &str) {
        let mut windows = self.windows.lock().unwrap_or_else(|p| p.into_inner());
        windows.remove(&format!("user:{user}"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_source_or_user_that_fails_too_often_is_refused_until_the_window_ends() {
        let throttle = LoginThrottle::new(ThrottleConfig {
            window: Duration::from_secs(60),
            per_source: 3,
            per_user: 5,
            max_tracked: 100,
        });
        let attacker: IpAddr = "203.0.113.9".parse().unwrap();
        let other: IpAddr = "198.51.100.1".parse().unwrap();
        for i in 0..3 {
            assert!(throttle.check(Some(attacker), &format!("u{i}")).is_ok());
            throttle.failed(Some(attacker), &format!("u{i}"));
        }
        assert!(
            throttle.check(Some(attacker), "alice").is_err(),
            "the source"
        );
        assert!(throttle.check(Some(other), "alice").is_ok());
        for _ in 0..5 {
            throttle.failed(Some(other), "bob");
        }
        assert!(throttle.check(None, "bob").is_err(), "the user");
        throttle.succeeded("bob");
        assert!(throttle.check(None, "bob").is_ok());
        let v6a: IpAddr = "2001:db8:1:2::1".parse().unwrap();
        let v6b: IpAddr = "2001:db8:1:2::ffff".parse().unwrap();
        for _ in 0..3 {
            throttle.failed(Some(v6a), "x");
        }
        assert!(throttle.check(Some(v6b), "y").is_err(), "one /64");
    }

    #[test]
    fn the_table_stays_bounded() {
        let throttle = LoginThrottle::new(ThrottleConfig {
            max_tracked: 10,
            ..ThrottleConfig::default()
        });
        for i in 0..1000u32 {
            let source = IpAddr::from(i.to_be_bytes());
            throttle.failed(Some(source), &format!("user{i}"));
        }
        assert!(throttle.windows.lock().unwrap().len() <= 11);
    }
}
