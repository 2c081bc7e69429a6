//! Result rows, the printed table and the machine description.

use std::collections::BTreeMap;
use std::time::Instant;

use hdrhistogram::Histogram;
use serde::Serialize;

use crate::proc::clock_ticks;
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
    /// `None` when not sampled over the window.
    pub rss_max_mib: Option<f64>,
    /// The schedulers' CPU; `None` when not sampled over the window or
    /// nothing succeeded in it.
    pub cpu_s_per_1k: Option<f64>,
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
        self.cpu_s_per_1k =
            (self.succeeded > 0).then(|| cpu_seconds / (self.succeeded as f64 / 1000.0));
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
            "| {:<14} | {:>8.0} | {:>6.0}s | {:>9} | {:>8.1} | {:>8.2} | {:>8.2} | {:>8.2} | {:>9.1} | {:>8} | {:>10} | {:>5} | {:>5} |",
            r.label, r.offered_per_s, r.window_s, r.succeeded, r.firings_per_s, r.p50_ms, r.p99_ms,
            r.p999_ms, r.max_ms, measured(r.rss_max_mib, 1), measured(r.cpu_s_per_1k, 3), r.lost,
            r.duplicates
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

/// A figure to `decimals` places, or `-` where it was not measured.
fn measured(figure: Option<f64>, decimals: usize) -> String {
    figure.map_or_else(|| "-".to_owned(), |v| format!("{v:.decimals$}"))
}

/// Prints the machine, its load, and how idle its CPU was over the two
/// seconds before the run (a headline figure needs a quiet machine);
/// returns that idle share in per cent.
pub fn print_machine() -> f64 {
    let before = MachineCpu::read();
    std::thread::sleep(std::time::Duration::from_secs(2));
    let idle = 1.0 - MachineCpu::read().busy_share_since(&before);
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let cpus = cpus();
    let mem = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| m.lines().next().map(str::to_owned))
        .unwrap_or_default();
    println!(
        "machine: {cpus} cpus, {mem}, loadavg {}, CPU idle {:.0} % over the 2 s before the run, {}",
        load.trim(),
        idle * 100.0,
        writeback(|name| std::fs::read_to_string(format!("/proc/sys/vm/{name}")).ok())
    );
    idle * 100.0
}

/// The kernel's writeback settings, which decide whether the disk's flushes
/// stall periodically: pages written back only once they are old reach the
/// disk in bursts that delay every commit's flush behind them
/// (docs/PERFORMANCE.md, "Tuning"). `read` gives a `/proc/sys/vm` file's
/// text by name.
fn writeback(read: impl Fn(&str) -> Option<String>) -> String {
    let value = |name| read(name).and_then(|text| text.trim().parse::<u64>().ok());
    let background = match (
        value("dirty_background_bytes"),
        value("dirty_background_ratio"),
    ) {
        (Some(bytes), _) if bytes > 0 => format!("{} KiB", bytes / 1024),
        (_, Some(ratio)) => format!("{ratio} % of memory"),
        _ => "unknown".to_owned(),
    };
    let centiseconds = |name| {
        value(name).map_or_else(
            || "unknown".to_owned(),
            |cs| format!("{} s", cs as f64 / 100.0),
        )
    };
    format!(
        "writeback from {background} dirty, of pages {} old, every {}",
        centiseconds("dirty_expire_centisecs"),
        centiseconds("dirty_writeback_centisecs")
    )
}

pub fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

/// The machine's idle CPU time and context switches at one moment. The
/// busy time between two readings is what the idle time leaves of the
/// CPUs' wall time. Not the busy fields of /proc/stat: those are sampled at
/// each timer tick, and a load that wakes on whole milliseconds, like the
/// bench's, is running at more of the ticks than its share of the time
/// (it overstated Chime's load by about a fifth at 1,000/s, and understated
/// the floor's), while idle time is measured as it passes.
#[derive(Clone, Copy)]
pub struct MachineCpu {
    idle_s: f64,
    /// Context switches since boot (`ctxt`), if the line was there.
    pub context_switches: Option<u64>,
    at: Instant,
}

impl MachineCpu {
    /// Reads the idle and iowait time of all CPUs (the first line of
    /// /proc/stat) and the context switches (its `ctxt` line).
    pub fn read() -> MachineCpu {
        let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
        let idle_ticks: u64 = stat
            .lines()
            .next()
            .unwrap_or_default()
            .split_whitespace()
            .skip(4)
            .take(2)
            .filter_map(|t| t.parse::<u64>().ok())
            .sum();
        MachineCpu {
            idle_s: idle_ticks as f64 / clock_ticks(),
            context_switches: stat
                .lines()
                .find_map(|line| line.strip_prefix("ctxt ")?.trim().parse().ok()),
            at: Instant::now(),
        }
    }

    /// CPU seconds the machine was busy, all of its CPUs together, since
    /// `earlier`.
    pub fn busy_seconds_since(&self, earlier: &MachineCpu) -> f64 {
        let capacity = self.capacity_since(earlier);
        (capacity - (self.idle_s - earlier.idle_s)).clamp(0.0, capacity)
    }

    /// The share of the machine's CPU that was busy since `earlier`.
    pub fn busy_share_since(&self, earlier: &MachineCpu) -> f64 {
        let capacity = self.capacity_since(earlier);
        if capacity == 0.0 {
            return 0.0;
        }
        self.busy_seconds_since(earlier) / capacity
    }

    /// The CPU seconds all of the machine's CPUs had since `earlier`.
    fn capacity_since(&self, earlier: &MachineCpu) -> f64 {
        self.at.duration_since(earlier.at).as_secs_f64() * cpus() as f64
    }
}

pub fn cpus() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn a_figure_not_measured_is_a_dash() {
        assert_eq!(measured(Some(0.1234), 3), "0.123");
        assert_eq!(measured(Some(12.0), 1), "12.0");
        assert_eq!(measured(None, 3), "-");
    }

    /// The kernel's defaults, a byte threshold (which takes the ratio's
    /// place when set), and files that cannot be read.
    #[test]
    fn the_writeback_settings_say_when_dirty_pages_reach_the_disk() {
        let settings = |bytes: &'static str| {
            move |name: &str| {
                Some(
                    match name {
                        "dirty_background_bytes" => bytes,
                        "dirty_background_ratio" => "10\n",
                        "dirty_expire_centisecs" => "3000\n",
                        "dirty_writeback_centisecs" => "500\n",
                        _ => return None,
                    }
                    .to_owned(),
                )
            }
        };
        assert_eq!(
            writeback(settings("0\n")),
            "writeback from 10 % of memory dirty, of pages 30 s old, every 5 s"
        );
        assert_eq!(
            writeback(settings("4194304\n")),
            "writeback from 4096 KiB dirty, of pages 30 s old, every 5 s"
        );
        assert_eq!(
            writeback(|_| None),
            "writeback from unknown dirty, of pages unknown old, every unknown"
        );
    }

    /// A first reading with 100 s of idle time, the moment 10 s after it,
    /// and the CPU seconds the machine had in between.
    fn ten_seconds_apart() -> (MachineCpu, Instant, f64) {
        let t0 = Instant::now();
        (
            reading(100.0, t0),
            t0 + Duration::from_secs(10),
            10.0 * cpus() as f64,
        )
    }

    fn reading(idle_s: f64, at: Instant) -> MachineCpu {
        MachineCpu {
            idle_s,
            context_switches: None,
            at,
        }
    }

    #[test]
    fn busy_time_is_what_idle_time_leaves_of_the_cpus_wall_time() {
        let (earlier, t1, capacity) = ten_seconds_apart();
        let later = reading(100.0 + capacity / 4.0, t1);

        let busy = later.busy_seconds_since(&earlier);
        assert!((busy - capacity * 0.75).abs() < 1e-9, "{busy}");
        let share = later.busy_share_since(&earlier);
        assert!((share - 0.75).abs() < 1e-9, "{share}");
    }

    #[test]
    fn a_reading_outside_the_wall_time_is_held_to_it() {
        let (earlier, t1, capacity) = ten_seconds_apart();

        // More idle than the CPUs had time for (the counter is in whole ticks,
        // read a moment apart from the clock): not negative.
        assert_eq!(
            reading(100.0 + capacity + 1.0, t1).busy_seconds_since(&earlier),
            0.0
        );
        // Idle going backwards: no more than all of the time.
        assert_eq!(reading(99.0, t1).busy_seconds_since(&earlier), capacity);
        // No time between the readings: no share.
        assert_eq!(reading(100.0, earlier.at).busy_share_since(&earlier), 0.0);
    }
}
