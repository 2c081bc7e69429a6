//! Result rows, the printed table and the machine description.

use std::collections::BTreeMap;

use hdrhistogram::Histogram;
use serde::Serialize;

use crate::record::Window;

#[derive(Debug, Clone, Default, Serialize)]
pub struct Row {
    pub scenario: String,
    pub label: String,
    /// Offered firings/s.
    pub offered_per_s: f64,
    pub window_s: f64,
    /// Instants due in the window.
    pub expected: u64,
    /// Instants with a succeeded firing (SQL).
    pub succeeded: u64,
    /// `succeeded / window_s`.
    pub firings_per_s: f64,
    pub started: u64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
    pub max_ms: f64,
    pub rss_max_mib: f64,
    pub cpu_s_per_1k: f64,
    pub lost: i64,
    pub duplicates: u64,
    pub retries: u64,
    pub states: BTreeMap<String, i64>,
    pub notes: BTreeMap<String, String>,
}

impl Row {
    pub fn from_window(scenario: &str, label: &str, w: &Window) -> Row {
        let mut row = Row {
            scenario: scenario.to_owned(),
            label: label.to_owned(),
            window_s: (w.end_ms - w.start_ms) as f64 / 1000.0,
            started: w.started,
            duplicates: w.duplicates,
            retries: w.retries,
            ..Row::default()
        };
        row.set_lateness(&w.lateness);
        row
    }

    /// The lateness columns (p50, p99, p99.9, max) from `h`, in µs.
    pub fn set_lateness(&mut self, h: &Histogram<u64>) {
        let ms = |us: u64| us as f64 / 1000.0;
        (self.p50_ms, self.p99_ms, self.p999_ms, self.max_ms) = if h.is_empty() {
            (0.0, 0.0, 0.0, 0.0)
        } else {
            (
                ms(h.value_at_quantile(0.50)),
                ms(h.value_at_quantile(0.99)),
                ms(h.value_at_quantile(0.999)),
                ms(h.max()),
            )
        };
    }

    /// Fills the SQL side: counts by state, succeeded instants, lost.
    pub fn set_counts(
        &mut self,
        expected: u64,
        succeeded: i64,
        states: impl IntoIterator<Item = (String, i64)>,
    ) {
        self.expected = expected;
        self.succeeded = succeeded.max(0) as u64;
        self.firings_per_s = self.succeeded as f64 / self.window_s.max(1e-9);
        self.lost = expected as i64 - succeeded;
        self.states = states.into_iter().collect();
    }

    pub fn set_cpu(&mut self, cpu_seconds: f64) {
        self.cpu_s_per_1k = if self.succeeded > 0 {
            cpu_seconds / (self.succeeded as f64 / 1000.0)
        } else {
            0.0
        };
    }

    pub fn note(&mut self, key: &str, value: impl ToString) {
        self.notes.insert(key.to_owned(), value.to_string());
    }
}

pub fn print_table(scenario: &str, rows: &[Row]) {
    println!();
    println!("### {scenario}");
    println!(
        "| {:<14} | {:>8} | {:>7} | {:>9} | {:>8} | {:>8} | {:>8} | {:>8} | {:>9} | {:>8} | {:>10} | {:>5} | {:>5} |",
        "run", "offered/s", "window", "succeeded", "fired/s", "p50 ms", "p99 ms", "p99.9 ms", "max ms",
        "RSS MiB", "CPU s/1k", "lost", "dup"
    );
    println!("|{}|", ["---"; 13].join("|"));
    for r in rows {
        println!(
            "| {:<14} | {:>8.0} | {:>6.0}s | {:>9} | {:>8.1} | {:>8.2} | {:>8.2} | {:>8.2} | {:>9.1} | {:>8.1} | {:>10.3} | {:>5} | {:>5} |",
            r.label, r.offered_per_s, r.window_s, r.succeeded, r.firings_per_s, r.p50_ms, r.p99_ms,
            r.p999_ms, r.max_ms, r.rss_max_mib, r.cpu_s_per_1k, r.lost, r.duplicates
        );
    }
    for r in rows {
        let states: Vec<String> = r.states.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let notes: Vec<String> = r.notes.iter().map(|(k, v)| format!("{k}={v}")).collect();
        println!(
            "- {}: states [{}] started={} retries={} {}",
            r.label,
            states.join(" "),
            r.started,
            r.retries,
            notes.join(" ")
        );
    }
}

/// Prints the machine, its load, and how idle its CPU was over the two
/// seconds before the run (a headline figure needs a quiet machine);
/// returns that idle share in per cent.
pub fn print_machine() -> f64 {
    let before = cpu_ticks();
    std::thread::sleep(std::time::Duration::from_secs(2));
    let idle = 1.0 - busy_between(before, cpu_ticks());
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let cpus = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0);
    let mem = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| m.lines().next().map(str::to_owned))
        .unwrap_or_default();
    println!(
        "machine: {cpus} cpus, {mem}, loadavg {}, CPU idle {:.0} % over the 2 s before the run",
        load.trim(),
        idle * 100.0
    );
    idle * 100.0
}

pub fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

/// The machine's CPU time so far, in clock ticks: (busy, total), from the
/// first line of /proc/stat (busy = total − idle − iowait).
pub fn cpu_ticks() -> (u64, u64) {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let ticks: Vec<u64> = stat
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .skip(1)
        .filter_map(|t| t.parse().ok())
        .collect();
    let total: u64 = ticks.iter().sum();
    let idle = ticks.get(3).copied().unwrap_or(0) + ticks.get(4).copied().unwrap_or(0);
    (total.saturating_sub(idle), total)
}

/// The fraction of the machine's CPU that was busy between two
/// [`cpu_ticks`] readings.
pub fn busy_between(from: (u64, u64), to: (u64, u64)) -> f64 {
    let total = to.1.saturating_sub(from.1);
    if total == 0 {
        return 0.0;
    }
    to.0.saturating_sub(from.0) as f64 / total as f64
}
