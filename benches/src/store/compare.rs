//! Side by side: one section's measurements with each member count, as
//! column groups of one table, ratios against the first member count, and
//! summary lines naming both figures. Measures nothing itself.

use crate::report::{self, Table};

/// One section's measurement with one member count.
pub struct Run<T> {
    pub members: usize,
    pub measured: T,
}

/// "1 member", "3 members".
pub fn label(members: usize) -> String {
    match members {
        1 => "1 member".into(),
        n => format!("{n} members"),
    }
}

/// "3 ÷ 1": the title of a ratio against the first run.
fn ratio_title<T>(run: &Run<T>, base: &Run<T>) -> String {
    format!("{} ÷ {}", run.members, base.members)
}

/// Adds a group of `columns` per run, then a group of `ratio_columns` per
/// later run, each the ratio of that run to the first.
pub fn add_groups<T>(table: &mut Table, runs: &[Run<T>], columns: &[&str], ratio_columns: &[&str]) {
    for run in runs {
        table.group(&label(run.members), columns);
    }
    for run in runs.iter().skip(1) {
        table.group(&ratio_title(run, &runs[0]), ratio_columns);
    }
}

/// The cells `add_groups` laid out: `cells` of each run, then for each
/// later run its `figures` divided by the first run's.
pub fn row_cells<T>(
    runs: &[Run<T>],
    cells: impl Fn(&T) -> Vec<String>,
    figures: impl Fn(&T) -> Vec<f64>,
) -> Vec<String> {
    let mut row: Vec<String> = runs.iter().flat_map(|run| cells(&run.measured)).collect();
    if let Some(base) = runs.first().map(|run| figures(&run.measured)) {
        for run in runs.iter().skip(1) {
            let values = figures(&run.measured);
            row.extend(values.iter().zip(&base).map(|(v, b)| report::ratio(*v, *b)));
        }
    }
    row
}

/// Headers of a table with one row per figure: the figure, one column per
/// run, one ratio column per later run.
pub fn figure_headers<T>(runs: &[Run<T>]) -> Vec<String> {
    let mut headers = vec!["figure".to_string()];
    headers.extend(runs.iter().map(|run| label(run.members)));
    headers.extend(runs.iter().skip(1).map(|run| ratio_title(run, &runs[0])));
    headers
}

/// "1 | 3": the member counts, as the summary lines order their figures.
pub fn counts<T>(runs: &[Run<T>]) -> String {
    runs.iter()
        .map(|run| run.members.to_string())
        .collect::<Vec<_>>()
        .join(" | ")
}

/// "289 | 910": one figure of each run, for a summary line.
pub fn across<T>(runs: &[Run<T>], figure: impl Fn(&T) -> String) -> String {
    runs.iter()
        .map(|run| figure(&run.measured))
        .collect::<Vec<_>>()
        .join(" | ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn runs() -> Vec<Run<(u64, u64)>> {
        vec![
            Run {
                members: 1,
                measured: (100, 4),
            },
            Run {
                members: 3,
                measured: (300, 2),
            },
        ]
    }

    #[test]
    fn rows_hold_each_run_then_ratios_to_the_first() {
        let runs = runs();
        let mut table = Table::new(&["writers"]);
        add_groups(&mut table, &runs, &["p50", "puts/s"], &["p50", "puts/s"]);
        let row = row_cells(
            &runs,
            |&(p50, rate)| vec![p50.to_string(), rate.to_string()],
            |&(p50, rate)| vec![p50 as f64, rate as f64],
        );
        assert_eq!(row, ["100", "4", "300", "2", "3.00", "0.50"]);
        let mut cells = vec!["1".to_string()];
        cells.extend(row);
        table.row(cells);
        assert_eq!(
            table.render(),
            concat!(
                "         -- 1 member --  -- 3 members --  -- 3 ÷ 1 ---\n",
                "writers  p50     puts/s  p50      puts/s   p50  puts/s\n",
                "------------------------------------------------------\n",
                "1        100          4  300           2  3.00    0.50\n",
            )
        );
    }

    #[test]
    fn summaries_join_runs_in_order() {
        let runs = runs();
        assert_eq!(counts(&runs), "1 | 3");
        assert_eq!(across(&runs, |(p50, _)| p50.to_string()), "100 | 300");
        assert_eq!(
            figure_headers(&runs),
            ["figure", "1 member", "3 members", "3 ÷ 1"]
        );
    }
}
