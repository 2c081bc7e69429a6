//! Chime against the floors: at each of `--rates`, the architecture's
//! floor (`floor.rs`), the transport floor (`transport_floor.rs`) and
//! Chime's saturation step run back to back on the same machine, then the
//! limit (`limit.rs`); each rate gets one row with the machine's CPU per
//! firing of all three, Chime's as a multiple of each floor's
//! (`chime_over_floor`, `chime_over_transport_floor`) and the limit's
//! firings a second beside them.
//!
//! A machine's speed changes between hosts and over time, and so do
//! Chime's figures; the floors' change with them. A ratio measured within
//! minutes on one machine is a figure another person can reproduce on
//! another (docs/PERFORMANCE.md). With `--runs N` the summary gives its
//! median, min and max; the floors run first in odd runs and after Chime
//! in even ones, so that a machine that drifts during a series does not
//! favour one side.

use crate::cost::MACHINE_CPU_NOTE;
use crate::limit::{FIRING_LABEL, LIMIT_NOTE};
use crate::report::{print_table, Row};
use crate::{floor, limit, saturation, transport_floor, Args};

/// What each side measured at `--rates`.
pub struct Sides {
    pub floor: Vec<Row>,
    pub transport: Vec<Row>,
    pub chime: Vec<Row>,
    pub limit: Vec<Row>,
}

/// Runs both floors and Chime at `--rates`, in the order `run` says, then
/// the limit, and pairs their rows.
pub async fn run(args: &Args, run: u32) -> anyhow::Result<Vec<Row>> {
    let sides = if run % 2 == 1 {
        let floor = floor::run(args).await?;
        let transport = transport_floor::run(args).await?;
        let chime = saturation::run(args).await?;
        let limit = limit::run(args).await?;
        Sides {
            floor,
            transport,
            chime,
            limit,
        }
    } else {
        let chime = saturation::run(args).await?;
        let transport = transport_floor::run(args).await?;
        let floor = floor::run(args).await?;
        let limit = limit::run(args).await?;
        Sides {
            floor,
            transport,
            chime,
            limit,
        }
    };
    print_table("floor", &sides.floor);
    print_table("transport-floor", &sides.transport);
    print_table("saturation", &sides.chime);
    Ok(pair(&sides))
}

/// One row per rate Chime measured: Chime's row, with each floor's figures
/// and the ratios of the machine's CPU per firing beside it, and the
/// limit. A rate Chime stopped before (past `--p99-limit-ms`) has no row.
pub fn pair(sides: &Sides) -> Vec<Row> {
    let limit = sides
        .limit
        .iter()
        .find(|row| row.label == FIRING_LABEL)
        .and_then(|row| row.notes.get(LIMIT_NOTE));
    sides
        .chime
        .iter()
        .map(|chime| {
            let mut row = chime.clone();
            row.scenario = "against-floor".to_owned();
            beside(&mut row, "floor", &sides.floor);
            beside(&mut row, "transport_floor", &sides.transport);
            if let Some(limit) = limit {
                row.note(LIMIT_NOTE, limit);
            }
            row
        })
        .collect()
}

/// Notes on Chime's `row` the figures of the `floor` row of its rate, named
/// after `name`, and Chime's machine CPU per firing over the floor's.
fn beside(row: &mut Row, name: &str, floor: &[Row]) {
    let Some(floor) = floor.iter().find(|f| f.label == row.label) else {
        return;
    };
    row.note(&format!("{name}_p99_ms"), format!("{:.2}", floor.p99_ms));
    row.note(&format!("{name}_lost"), floor.lost);
    if let Some(floor_cpu) = floor.notes.get(MACHINE_CPU_NOTE) {
        row.note(&format!("{name}_cpu_s_per_1k_machine"), floor_cpu);
    }
    if let Some(ratio) = ratio(floor, row) {
        row.note(&format!("chime_over_{name}"), format!("{ratio:.2}"));
    }
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

    fn limit(rate: &str) -> Vec<Row> {
        let mut firing = row(FIRING_LABEL, 0.0, None);
        firing.note(LIMIT_NOTE, rate);
        vec![row("KV create", 0.0, None), firing]
    }

    #[test]
    fn each_rate_chime_measured_gets_both_floors_the_ratios_and_the_limit() {
        let sides = Sides {
            floor: vec![
                row("1000/s", 4.2, Some("0.800")),
                row("4000/s", 7.9, Some("0.320")),
            ],
            transport: vec![
                row("1000/s", 3.1, Some("0.400")),
                row("4000/s", 5.0, Some("0.224")),
            ],
            chime: vec![
                row("1000/s", 9.5, Some("1.600")),
                row("4000/s", 41.0, Some("0.448")),
            ],
            limit: limit("21000"),
        };
        let rows = pair(&sides);
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].scenario, "against-floor");
        assert_eq!(rows[0].p99_ms, 9.5);
        assert_eq!(rows[0].notes["chime_over_floor"], "2.00");
        assert_eq!(rows[0].notes["floor_cpu_s_per_1k_machine"], "0.800");
        assert_eq!(rows[0].notes["floor_p99_ms"], "4.20");
        assert_eq!(rows[0].notes["chime_over_transport_floor"], "4.00");
        assert_eq!(
            rows[0].notes["transport_floor_cpu_s_per_1k_machine"],
            "0.400"
        );
        assert_eq!(rows[0].notes["transport_floor_p99_ms"], "3.10");
        assert_eq!(rows[1].notes["chime_over_floor"], "1.40");
        assert_eq!(rows[1].notes["chime_over_transport_floor"], "2.00");
        assert_eq!(rows[1].notes[LIMIT_NOTE], "21000");
    }

    #[test]
    fn a_side_without_the_rate_or_cpu_figures_gives_no_ratio() {
        let sides = Sides {
            floor: vec![row("4000/s", 7.9, None)],
            transport: vec![row("10000/s", 70.0, Some("0.170"))],
            chime: vec![row("4000/s", 41.0, Some("0.448"))],
            limit: Vec::new(),
        };
        let rows = pair(&sides);
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].label, "4000/s");
        assert!(!rows[0].notes.contains_key("chime_over_floor"));
        assert!(rows[0].notes.contains_key("floor_p99_ms"));
        assert!(!rows[0].notes.contains_key("transport_floor_p99_ms"));
        assert!(!rows[0].notes.contains_key(LIMIT_NOTE));
        assert_eq!(
            ratio(&row("x", 0.0, Some("0.000")), &row("x", 0.0, Some("0.5"))),
            None,
            "no ratio over a floor that measured nothing"
        );
    }
}
