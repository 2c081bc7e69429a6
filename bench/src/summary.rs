//! The headline form of repeated runs (`--runs N`): every figure's median
//! with its min and max, and in how many runs a yes/no note held, so that a
//! figure quoted from a benchmark is the median of runs, not the best one.
//!
//! Figures are read from the rows generically: the numeric columns, every
//! note that is a number or a yes/no, and every `name=number` of a note that
//! lists several (the CPU per process, the database's writes per firing).
//! A note a scenario adds later is summarised without a change here; a note
//! in another shape (a histogram's percentiles, a load average) is left to
//! each run's own table.

use std::fmt::Write as _;

use crate::report::Row;

/// One figure of one row label, a value per run that reported it, in run
/// order.
#[derive(Debug, Clone, PartialEq)]
pub enum Series {
    Number(Vec<f64>),
    Flag(Vec<bool>),
}

/// The figures of one row label (a rate, a scenario's one row), in the order
/// the rows first name them.
#[derive(Debug, Default, PartialEq)]
pub struct LabelSummary {
    pub label: String,
    pub figures: Vec<(String, Series)>,
}

impl LabelSummary {
    fn push(&mut self, name: String, value: Value) {
        let empty = match value {
            Value::Number(_) => Series::Number(Vec::new()),
            Value::Flag(_) => Series::Flag(Vec::new()),
        };
        let at = position_or_push(
            &mut self.figures,
            |(n, _)| *n == name,
            || (name.clone(), empty),
        );
        match (&mut self.figures[at].1, value) {
            (Series::Number(values), Value::Number(v)) => values.push(v),
            (Series::Flag(values), Value::Flag(v)) => values.push(v),
            // A note that is a number in one run and a flag in another is
            // no figure; its first shape is kept.
            _ => {}
        }
    }
}

enum Value {
    Number(f64),
    Flag(bool),
}

/// Gathers the figures of each run's rows by label, labels in the order
/// they first appear.
pub fn summarize(runs: &[Vec<Row>]) -> Vec<LabelSummary> {
    let mut labels: Vec<LabelSummary> = Vec::new();
    for row in runs.iter().flatten() {
        let at = position_or_push(
            &mut labels,
            |l| l.label == row.label,
            || LabelSummary {
                label: row.label.clone(),
                figures: Vec::new(),
            },
        );
        for (name, value) in figures_of(row) {
            labels[at].push(name, value);
        }
    }
    labels
}

/// The index of the first item of `items` that is `found`, after pushing
/// `new()` if none is: the summary keeps the order things first appear in.
fn position_or_push<T>(
    items: &mut Vec<T>,
    found: impl Fn(&T) -> bool,
    new: impl FnOnce() -> T,
) -> usize {
    items.iter().position(found).unwrap_or_else(|| {
        items.push(new());
        items.len() - 1
    })
}

/// A row's figures: its columns that were measured, then its notes as the
/// module says.
fn figures_of(row: &Row) -> Vec<(String, Value)> {
    let mut figures: Vec<(String, Value)> = [
        ("fired/s", Some(row.firings_per_s)),
        ("p50 ms", Some(row.p50_ms)),
        ("p99 ms", Some(row.p99_ms)),
        ("p99.9 ms", Some(row.p999_ms)),
        ("max ms", Some(row.max_ms)),
        ("RSS MiB", row.rss_max_mib),
        ("CPU s/1k", row.cpu_s_per_1k),
        ("lost", Some(row.lost as f64)),
        ("dup", Some(row.duplicates as f64)),
    ]
    .into_iter()
    .filter_map(|(name, v)| Some((name.to_owned(), Value::Number(v?))))
    .collect();
    for (key, text) in &row.notes {
        if key == "run" {
            // The run's number, which the table's last column already orders.
            continue;
        }
        if let Some(value) = scalar(text) {
            figures.push((key.clone(), value));
            continue;
        }
        let parts: Vec<(&str, f64)> = text
            .split(',')
            .filter_map(|part| {
                let (name, v) = part.split_once('=')?;
                Some((name, v.trim().parse::<f64>().ok()?))
            })
            .collect();
        for (name, v) in parts {
            figures.push((format!("{key}.{name}"), Value::Number(v)));
        }
    }
    figures
}

fn scalar(text: &str) -> Option<Value> {
    match text.trim() {
        "true" => Some(Value::Flag(true)),
        "false" => Some(Value::Flag(false)),
        t => t
            .parse::<f64>()
            .ok()
            .filter(|v| v.is_finite())
            .map(Value::Number),
    }
}

/// The median, min and max of `values` (`None` if empty); the median of an
/// even count is the mean of the middle two.
pub fn median_min_max(values: &[f64]) -> Option<(f64, f64, f64)> {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let (first, last) = (*sorted.first()?, *sorted.last()?);
    let mid = sorted.len() / 2;
    let median = if sorted.len() % 2 == 1 {
        sorted[mid]
    } else {
        (sorted[mid - 1] + sorted[mid]) / 2.0
    };
    Some((median, first, last))
}

/// The summary as Markdown: a table per label, figure by figure, with each
/// run's value beside the median, min and max.
pub fn render(scenario: &str, runs: usize, ended: usize, labels: &[LabelSummary]) -> String {
    let mut out = String::new();
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "### {scenario}: median (min–max) of {ended} runs ({runs} asked)"
    );
    for label in labels {
        let _ = writeln!(out);
        let _ = writeln!(out, "| {} | median | min | max | each run |", label.label);
        let _ = writeln!(out, "|---|---|---|---|---|");
        for (name, series) in &label.figures {
            match series {
                Series::Number(values) => {
                    let Some((median, min, max)) = median_min_max(values) else {
                        continue;
                    };
                    let each: Vec<String> = values.iter().map(|v| number(*v)).collect();
                    let _ = writeln!(
                        out,
                        "| {name} | {} | {} | {} | {} |",
                        number(median),
                        number(min),
                        number(max),
                        each.join(", ")
                    );
                }
                Series::Flag(values) => {
                    let held = values.iter().filter(|v| **v).count();
                    let each: Vec<&str> = values
                        .iter()
                        .map(|v| if *v { "yes" } else { "no" })
                        .collect();
                    let _ = writeln!(
                        out,
                        "| {name} | {held} of {} | | | {} |",
                        values.len(),
                        each.join(", ")
                    );
                }
            }
        }
    }
    out
}

/// A figure to three decimals (one from 100 up), without trailing zeros.
fn number(v: f64) -> String {
    let text = if v.abs() >= 100.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.3}")
    };
    let text = text.trim_end_matches('0').trim_end_matches('.');
    if text == "-0" {
        "0".to_owned()
    } else {
        text.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(label: &str, p99: f64, notes: &[(&str, &str)]) -> Row {
        let mut row = Row {
            label: label.to_owned(),
            p99_ms: p99,
            ..Row::default()
        };
        for (k, v) in notes {
            row.note(k, v);
        }
        row
    }

    fn series<'a>(summary: &'a LabelSummary, name: &str) -> &'a Series {
        &summary
            .figures
            .iter()
            .find(|(n, _)| n == name)
            .unwrap_or_else(|| panic!("no figure {name} in {summary:?}"))
            .1
    }

    #[test]
    fn the_median_is_the_middle_run_and_of_an_even_count_the_mean_of_two() {
        assert_eq!(median_min_max(&[]), None);
        assert_eq!(
            median_min_max(&[100.0, 42.2, 49.6]),
            Some((49.6, 42.2, 100.0))
        );
        assert_eq!(median_min_max(&[4.0, 1.0, 3.0, 2.0]), Some((2.5, 1.0, 4.0)));
    }

    #[test]
    fn figures_are_gathered_by_label_across_runs() {
        let runs = vec![
            vec![
                row(
                    "4000/s",
                    100.0,
                    &[("cpu_s_per_1k_machine", "0.474"), ("sustained", "true")],
                ),
                row("6000/s", 300.0, &[("sustained", "false")]),
            ],
            vec![row(
                "4000/s",
                49.6,
                &[("cpu_s_per_1k_machine", "0.450"), ("sustained", "false")],
            )],
            vec![row(
                "4000/s",
                42.2,
                &[("cpu_s_per_1k_machine", "0.447"), ("sustained", "true")],
            )],
        ];
        let labels = summarize(&runs);
        assert_eq!(
            labels.iter().map(|l| l.label.as_str()).collect::<Vec<_>>(),
            ["4000/s", "6000/s"]
        );
        assert_eq!(
            series(&labels[0], "p99 ms"),
            &Series::Number(vec![100.0, 49.6, 42.2])
        );
        assert_eq!(
            series(&labels[0], "cpu_s_per_1k_machine"),
            &Series::Number(vec![0.474, 0.450, 0.447])
        );
        assert_eq!(
            series(&labels[0], "sustained"),
            &Series::Flag(vec![true, false, true])
        );
        assert_eq!(series(&labels[1], "sustained"), &Series::Flag(vec![false]));
    }

    /// A step sampled too late (or with nothing succeeded) has no CPU or
    /// RSS: the summary's figures are of the runs that measured them.
    #[test]
    fn a_figure_not_measured_is_left_out_of_the_median() {
        let measured = |cpu| Row {
            label: "10000/s".to_owned(),
            cpu_s_per_1k: cpu,
            rss_max_mib: cpu.map(|_| 80.0),
            ..Row::default()
        };
        let runs = vec![
            vec![measured(Some(0.2))],
            vec![measured(None)],
            vec![measured(Some(0.3))],
        ];
        let labels = summarize(&runs);
        assert_eq!(
            series(&labels[0], "CPU s/1k"),
            &Series::Number(vec![0.2, 0.3])
        );
        assert_eq!(
            series(&labels[0], "RSS MiB"),
            &Series::Number(vec![80.0, 80.0])
        );
        assert_eq!(
            series(&labels[0], "p99 ms"),
            &Series::Number(vec![0.0, 0.0, 0.0])
        );
    }

    #[test]
    fn a_listing_note_gives_a_figure_per_name_and_other_shapes_none() {
        let runs = vec![vec![row(
            "4000/s",
            1.0,
            &[
                (
                    "cpu_s_per_1k_by_process",
                    "bench-workers-and-load=0.072,nats-server=0.122,postgres=0.176",
                ),
                (
                    "db_ms_p50/p99/max",
                    "publish-due[5/50/87]_start-publish[0/0/0]",
                ),
                ("load_before", "[0.10 0.20 0.30]"),
                ("backend", "postgres"),
                ("odd", "NaN"),
                ("run", "1"),
            ],
        )]];
        let labels = summarize(&runs);
        assert_eq!(
            series(&labels[0], "cpu_s_per_1k_by_process.nats-server"),
            &Series::Number(vec![0.122])
        );
        assert_eq!(
            series(&labels[0], "cpu_s_per_1k_by_process.postgres"),
            &Series::Number(vec![0.176])
        );
        let names: Vec<&str> = labels[0].figures.iter().map(|(n, _)| n.as_str()).collect();
        for shapeless in ["db_ms_p50/p99/max", "load_before", "backend", "odd", "run"] {
            assert!(
                !names.iter().any(|n| n.starts_with(shapeless)),
                "{shapeless} is no figure: {names:?}"
            );
        }
    }

    #[test]
    fn the_rendered_table_gives_median_min_max_and_each_run() {
        let runs = vec![
            vec![row("4000/s", 100.0, &[("sustained", "false")])],
            vec![row("4000/s", 49.63, &[("sustained", "true")])],
            vec![row("4000/s", 42.21, &[("sustained", "true")])],
        ];
        let text = render("saturation", 3, 3, &summarize(&runs));
        assert!(
            text.contains("### saturation: median (min–max) of 3 runs (3 asked)"),
            "{text}"
        );
        assert!(
            text.contains("| p99 ms | 49.63 | 42.21 | 100 | 100, 49.63, 42.21 |"),
            "{text}"
        );
        assert!(
            text.contains("| sustained | 2 of 3 | | | no, yes, yes |"),
            "{text}"
        );
    }
}
