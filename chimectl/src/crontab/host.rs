//! What a crontab means on the machine it came from: the users that
//! exist there (a system crontab names one in its sixth field) and the
//! machine's time zone, in which cron runs the lines without `CRON_TZ`.

use std::collections::BTreeSet;
use std::io::Read as _;
use std::path::Path;

/// User names a system crontab names on most machines, known even when
/// `/etc/passwd` does not list them (a crontab copied from elsewhere).
pub const TYPICAL_USERS: [&str; 9] = [
    "root", "daemon", "nobody", "www-data", "postgres", "mysql", "redis", "nginx", "apache",
];

/// The most of `/etc/passwd` read: a bound on a file that is not one.
const MAX_PASSWD_BYTES: u64 = 4 << 20;

/// [`TYPICAL_USERS`] and the users of this machine's `/etc/passwd`.
pub fn known_users() -> BTreeSet<String> {
    let mut users: BTreeSet<String> = TYPICAL_USERS.iter().map(|u| u.to_string()).collect();
    users.extend(passwd_users(&read_bounded(Path::new("/etc/passwd"))));
    users
}

/// The names of a passwd file's entries.
pub fn passwd_users(text: &str) -> Vec<String> {
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| line.split(':').next())
        .filter(|name| !name.is_empty())
        .map(str::to_string)
        .collect()
}

fn read_bounded(path: &Path) -> String {
    let mut text = String::new();
    if let Ok(file) = std::fs::File::open(path) {
        // An unreadable or non-UTF-8 file names no user.
        let _ = file.take(MAX_PASSWD_BYTES).read_to_string(&mut text);
    }
    text
}

/// The zone the crontab's lines without `CRON_TZ` ran in, and where it was
/// found, for the note that says so.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostZone {
    pub zone: String,
    pub source: String,
}

/// This machine's zone: `TZ` when it names an IANA zone, else the zone
/// `/etc/localtime` links to, else `/etc/timezone`, else UTC, which is what
/// cron uses on a machine with none of these.
pub fn host_zone() -> HostZone {
    let from_env = std::env::var("TZ").ok();
    let from_localtime = iana_time_zone::get_timezone().ok();
    let from_file = std::fs::read_to_string("/etc/timezone").ok();
    choose_zone(
        from_env.as_deref(),
        from_localtime.as_deref(),
        from_file.as_deref(),
    )
}

/// [`host_zone`]'s choice among what it found.
pub fn choose_zone(
    tz_env: Option<&str>,
    localtime: Option<&str>,
    etc_timezone: Option<&str>,
) -> HostZone {
    let candidates = [
        (tz_env.map(|z| z.trim_start_matches(':')), "the TZ variable"),
        (localtime, "/etc/localtime"),
        (etc_timezone, "/etc/timezone"),
    ];
    for (zone, source) in candidates {
        if let Some(zone) = zone
            .map(str::trim)
            .filter(|z| z.parse::<chrono_tz::Tz>().is_ok())
        {
            return HostZone {
                zone: zone.to_string(),
                source: source.to_string(),
            };
        }
    }
    HostZone {
        zone: "UTC".to_string(),
        source: "no TZ, /etc/localtime or /etc/timezone on this machine".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_zone_that_is_an_iana_name_wins() {
        let chosen = choose_zone(Some(":Europe/Berlin"), Some("Asia/Tokyo"), None);
        assert_eq!(chosen.zone, "Europe/Berlin");
        assert_eq!(chosen.source, "the TZ variable");
        // A POSIX TZ string is not a zone a job can name.
        let chosen = choose_zone(Some("CET-1CEST"), Some("Asia/Tokyo"), None);
        assert_eq!(chosen.zone, "Asia/Tokyo");
        let chosen = choose_zone(None, None, Some("America/New_York\n"));
        assert_eq!(
            (chosen.zone.as_str(), chosen.source.as_str()),
            ("America/New_York", "/etc/timezone")
        );
        let none = choose_zone(None, Some("Nowhere/Atlantis"), None);
        assert_eq!(none.zone, "UTC");
        assert!(none.source.contains("no TZ"), "{}", none.source);
    }

    #[test]
    fn passwd_names_its_users() {
        let text = "root:x:0:0:root:/root:/bin/bash\n# comment\n\nwww-data:x:33:33::/var/www:/usr/sbin/nologin\n";
        assert_eq!(passwd_users(text), ["root", "www-data"]);
        assert!(known_users().contains("root"));
    }
}
