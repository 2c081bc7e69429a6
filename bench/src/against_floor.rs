//! Chime against the floor: at each of `--rates`, the floor (`floor.rs`)
//! and Chime's saturation step run back to back on the same machine, and
//! each rate gets one row with the machine's CPU per firing of both and
//! Chime's as a multiple of the floor's (`chime_over_floor`).
//!
//! A machine's speed changes between hosts and over time, and so do
//! Chime's figures; the floor's change with them. A ratio measured within
//! minutes on one machine is a figure another person can reproduce on
//! another (docs/PERFORMANCE.md). With `--runs N` the summary gives its
//! median, min and max; the floor runs first in odd runs and second in even
//! ones, so that a machine that drifts during a series does not favour one
//! side.

use crate::cost::MACHINE_CPU_NOTE;
use crate::report::{print_table, Row};
use crate::{floor, saturation, Args};

/// Runs the floor and Chime at `--rates`, in the order `run` says, and
/// pairs their rows.
pub async fn run(args: &Args, run: u32) -> anyhow::Result<Vec<Row>> {
    let (floor, chime) = if run % 2 == 1 {
        let floor = floor::run(args).await?;
        (floor, saturation::run(args).await?)
    } else {
        let chime = saturation::run(args).await?;
        (floor::run(args).await?, chime)
    };
    print_table("floor", &floor);
    print_table("saturation", &chime);
    Ok(pair(&floor, &chime))
}

/// One row per rate both sides measured: Chime's row, with the floor's
/// figures and the ratio of the machine's CPU per firing beside it. A rate
/// Chime stopped before (past `--p99-limit-ms`) has no row.
pub fn pair(floor: &[Row], chime: &[Row]) -> Vec<Row> {
    chime
        .iter()
        .filter_map(|chime| {
            let floor = floor.iter().find(|f| f.label == chime.label)?;
            let mut row = chime.clone();
            row.scenario = "against-floor".to_owned();
            row.note("floor_p99_ms", format!("{:.2}", floor.p99_ms));
            row.note("floor_lost", floor.lost);
            if let Some(floor_cpu) = floor.notes.get(MACHINE_CPU_NOTE) {
                row.note("floor_cpu_s_per_1k_machine", floor_cpu);
            }
            if let Some(ratio) = ratio(floor, chime) {
                row.note("chime_over_floor", format!("{ratio:.2}"));
            }
            Some(row)
        })
        .collect()
}

/// Chime's machine CPU per firing over the floor's, when both measured one.
fn ratio(floor: &Row, chime: &Row) -> Option<f64> {
    let cpu = |row: &Row| -> Option<f64> { row.notes.get(MACHINE_CPU_NOTE)?.parse().ok() };
    let (floor, chime) = (cpu(floor)?, cpu(chime)?);
    (floor > 0.0).then(|| chime / floor)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(label: &str, p99_ms: f64, machine_cpu: Option<&str>) -> Row {
        let mut row = Row {
            label: label.to_owned(),
            p99_ms,
            ..Row::default()
        };
        if let Some(cpu) = machine_cpu {
            row.note(MACHINE_CPU_NOTE, cpu);
        }
        row
    }

    #[test]
    fn each_rate_both_sides_measured_gets_chimes_row_and_the_ratio() {
        let floor = [
            row("1000/s", 4.2, Some("0.800")),
            row("4000/s", 7.9, Some("0.320")),
        ];
        let chime = [
            row("1000/s", 9.5, Some("1.600")),
            row("4000/s", 41.0, Some("0.448")),
        ];
        let rows = pair(&floor, &chime);
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].scenario, "against-floor");
        assert_eq!(rows[0].p99_ms, 9.5);
        assert_eq!(rows[0].notes["chime_over_floor"], "2.00");
        assert_eq!(rows[0].notes["floor_cpu_s_per_1k_machine"], "0.800");
        assert_eq!(rows[0].notes["floor_p99_ms"], "4.20");
        assert_eq!(rows[1].notes["chime_over_floor"], "1.40");
    }

    #[test]
    fn a_rate_chime_stopped_before_or_without_cpu_figures_has_no_ratio() {
        let floor = [
            row("4000/s", 7.9, None),
            row("10000/s", 70.0, Some("0.170")),
        ];
        let chime = [row("4000/s", 41.0, Some("0.448"))];
        let rows = pair(&floor, &chime);
        assert_eq!(rows.len(), 1, "10000/s: Chime stopped before it");
        assert_eq!(rows[0].label, "4000/s");
        assert!(!rows[0].notes.contains_key("chime_over_floor"));
        assert_eq!(
            ratio(&row("x", 0.0, Some("0.000")), &row("x", 0.0, Some("0.5"))),
            None,
            "no ratio over a floor that measured nothing"
        );
    }
}
