//! The disk's flush latency over a run, so that a row whose tail came from
//! the disk says so.
//!
//! Every trigger, start and finish waits for a commit, and on PostgreSQL
//! every commit waits for its log to reach the disk. A virtual disk shared
//! with other machines can take hundreds of milliseconds over a flush while
//! the run's own writes queue beside it, and then the lateness measures the
//! disk, not Chime. A thread here writes 8 KiB to a file in the bench's
//! temporary directory and waits for it to reach the disk (`fdatasync`)
//! every 50 ms: 20 small flushes a second beside the run's own.

use std::fs::File;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

use crate::report::Row;

const EVERY: Duration = Duration::from_millis(50);
const BLOCK: [u8; 8192] = [0x5a; 8192];
/// A flush at least this long is counted as a stall.
const STALL_MS: u64 = 20;

/// Runs until dropped.
pub struct FlushProbe {
    /// (wall-clock ms when the flush began, its duration in µs).
    samples: Arc<Mutex<Vec<(i64, u64)>>>,
    stop: Arc<AtomicBool>,
    _file: tempfile::TempPath,
}

impl FlushProbe {
    pub fn start() -> std::io::Result<FlushProbe> {
        let (mut file, path) = tempfile::NamedTempFile::new()?.into_parts();
        let samples = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (samples_, stop_) = (samples.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop_.load(Ordering::Relaxed) {
                let began = chrono::Utc::now().timestamp_millis();
                let timer = Instant::now();
                if flush_one(&mut file).is_err() {
                    return;
                }
                let took = u64::try_from(timer.elapsed().as_micros()).unwrap_or(u64::MAX);
                samples_.lock().unwrap().push((began, took));
                std::thread::sleep(EVERY);
            }
        });
        Ok(FlushProbe {
            samples,
            stop,
            _file: path,
        })
    }

    /// Notes the flushes that began in `[w0, w1)`: `disk_flush_ms` as
    /// p50/p99/max and `disk_flush_stalls`, those of 20 ms or more.
    pub fn note(&self, w0: i64, w1: i64, row: &mut Row) {
        let mut h = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("valid bounds");
        for &(_, us) in self
            .samples
            .lock()
            .unwrap()
            .iter()
            .filter(|(at, _)| (w0..w1).contains(at))
        {
            h.saturating_record(us.max(1));
        }
        if h.is_empty() {
            return;
        }
        let ms = |us: u64| us as f64 / 1000.0;
        row.note(
            "disk_flush_ms",
            format!(
                "{:.2}/{:.1}/{:.1}",
                ms(h.value_at_quantile(0.5)),
                ms(h.value_at_quantile(0.99)),
                ms(h.max())
            ),
        );
        let stalls: u64 = h
            .iter_recorded()
            .filter(|v| v.value_iterated_to() >= STALL_MS * 1000)
            .map(|v| v.count_at_value())
            .sum();
        row.note("disk_flush_stalls", format!("{stalls}/{}", h.len()));
    }
}

impl Drop for FlushProbe {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Rewrites the first block and waits until it is on the disk.
fn flush_one(file: &mut File) -> std::io::Result<()> {
    use std::io::Seek;
    file.rewind()?;
    file.write_all(&BLOCK)?;
    file.sync_data()
}
