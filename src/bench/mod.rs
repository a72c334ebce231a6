//! `parqdb-catalog bench`: what the catalog costs on top of the raw store primitive.
//!
//! Every scenario measures the catalog operation and the raw primitive it is built on
//! **in the same run, interleaved** (one catalog call, one raw call, …), so both see the
//! same machine and server noise, and reports p50/p90/p99, throughput and the ratio of the
//! medians. A benchmark reports; it asserts nothing.
//!
//! | scenario     | catalog                                   | raw primitive                         |
//! |--------------|-------------------------------------------|---------------------------------------|
//! | `load`       | `load`, and `load_if_changed` (unchanged) | `get` of the pointer record            |
//! | `commit`     | `commit` with the base metadata cached    | `get` + conditional `put` of a record; the physical minimum: `get` of a record and `GET` of the new metadata file concurrently, then a conditional `put`; and that minimum with a change-log entry created beside the reads (`+log`: the write the collector's safety argument adds) |
//! | `contention` | N writers, reload-and-retry on one index  | the same with 1 writer                 |
//! | `list`       | `list` of a namespace of `--list-size` identifiers, half of them dropped | paginated store listing of all its keys (tombstones included) |
//! | `parse`      | strict parse + validate, 1,000 snapshots  | `serde_json::Value` parse              |
//! | `gc`         | GC dry run over the warehouse plus `--gc-objects` small unreachable objects: objects/s and peak RSS | a listing of every object of the warehouse |
//!
//! The bench writes into its own namespaces (`parqdb-bench-*`) of the configured catalog;
//! point it at a scratch warehouse. The `list` namespace is reused by later runs of the
//! same size, so only the first run pays for creating it.
//!
//! [`backend_report`] condenses the reports of one or more backends into the table of
//! targets (`bench --backend-report`, one column per backend).

mod scenarios;
mod stats;

use std::time::Duration;

use serde::Serialize;

pub use stats::{Samples, Summary};

use crate::catalog::Catalog;
use crate::error::{Error, ErrorKind, Result};

/// One scenario of the bench.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum BenchOp {
    /// `load` and `load_if_changed` against a raw read.
    Load,
    /// `commit` against a raw read plus conditional write.
    Commit,
    /// N writers racing on one index.
    Contention,
    /// `list` against a raw paginated listing.
    List,
    /// Strict metadata parsing against plain JSON parsing.
    Parse,
    /// A garbage-collector dry run over a large warehouse.
    Gc,
}

/// What to measure and for how long.
#[derive(Debug, Clone)]
pub struct BenchConfig {
    /// Scenarios to run, in order.
    pub ops: Vec<BenchOp>,
    /// Writers of the contention scenario.
    pub writers: usize,
    /// Measuring time per scenario (setup excluded).
    pub duration: Duration,
    /// Identifiers in the listed namespace.
    pub list_size: usize,
    /// Snapshots in the parsed metadata file.
    pub parse_snapshots: usize,
    /// Unreachable objects added to the warehouse for the GC scenario.
    pub gc_objects: usize,
}

impl Default for BenchConfig {
    fn default() -> Self {
        BenchConfig {
            ops: vec![
                BenchOp::Load,
                BenchOp::Commit,
                BenchOp::Contention,
                BenchOp::List,
                BenchOp::Parse,
                BenchOp::Gc,
            ],
            writers: 16,
            duration: Duration::from_secs(5),
            list_size: 100_000,
            parse_snapshots: 1000,
            gc_objects: 100_000,
        }
    }
}

/// One line of the report: a catalog operation next to its raw primitive.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct BenchRow {
    /// The scenario's stable name (`load`, `load-if-changed`, `commit`, `contention-1`,
    /// `contention-n`, `list`, `parse`, `gc`).
    pub scenario: String,
    /// What was measured.
    pub operation: String,
    /// The catalog operation.
    pub catalog: Summary,
    /// The raw primitive, measured interleaved with it.
    pub raw: Option<Summary>,
    /// `catalog.p50 / raw.p50`.
    pub ratio_p50: Option<f64>,
    /// The physical minimum the operation's spec allows, as raw primitives measured
    /// interleaved with it (commit: the pointer and the new metadata read concurrently,
    /// then the conditional write).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub minimum: Option<Summary>,
    /// `catalog.p50 / minimum.p50`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ratio_minimum_p50: Option<f64>,
    /// The physical minimum plus the one write the collector's safety argument adds
    /// (commit: a change-log entry created beside the reads, before the conditional
    /// write).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub logged_minimum: Option<Summary>,
    /// `catalog.p50 / logged_minimum.p50`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ratio_logged_minimum_p50: Option<f64>,
    /// Scenario-specific numbers (contention: attempts, fairness, lost updates).
    #[serde(skip_serializing_if = "serde_json::Value::is_null")]
    pub details: serde_json::Value,
}

impl BenchRow {
    fn new(scenario: &str, operation: &str, catalog: &Samples, raw: Option<&Samples>) -> BenchRow {
        let catalog = catalog.summary();
        let raw = raw.map(Samples::summary);
        BenchRow {
            scenario: scenario.to_owned(),
            operation: operation.to_owned(),
            ratio_p50: ratio(&catalog, raw.as_ref()),
            catalog,
            raw,
            minimum: None,
            ratio_minimum_p50: None,
            logged_minimum: None,
            ratio_logged_minimum_p50: None,
            details: serde_json::Value::Null,
        }
    }

    fn with_minimum(mut self, minimum: &Samples) -> BenchRow {
        let minimum = minimum.summary();
        self.ratio_minimum_p50 = ratio(&self.catalog, Some(&minimum));
        self.minimum = Some(minimum);
        self
    }

    fn with_logged_minimum(mut self, logged: &Samples) -> BenchRow {
        let logged = logged.summary();
        self.ratio_logged_minimum_p50 = ratio(&self.catalog, Some(&logged));
        self.logged_minimum = Some(logged);
        self
    }
}

fn ratio(catalog: &Summary, raw: Option<&Summary>) -> Option<f64> {
    raw.filter(|r| r.p50_ms > 0.0)
        .map(|r| catalog.p50_ms / r.p50_ms)
}

/// The whole report.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct BenchReport {
    /// The pointer store measured.
    pub store: String,
    /// The warehouse measured.
    pub warehouse: String,
    /// One row per measured operation.
    pub rows: Vec<BenchRow>,
}

impl BenchReport {
    /// The report as an aligned text table.
    pub fn table(&self) -> String {
        let mut out = format!("store: {}\nwarehouse: {}\n", self.store, self.warehouse);
        out.push_str(&format!(
            "{:<52} {:>8} {:>9} {:>9} {:>9} {:>10} {:>9} {:>7} {:>9} {:>7} {:>9} {:>7}\n",
            "operation",
            "n",
            "p50 ms",
            "p90 ms",
            "p99 ms",
            "ops/s",
            "raw p50",
            "ratio",
            "min p50",
            "vs min",
            "+log p50",
            "vs +log"
        ));
        let ms = |s: Option<Summary>| {
            s.map(|s| format!("{:.3}", s.p50_ms))
                .unwrap_or_else(|| "-".into())
        };
        let times = |r: Option<f64>| r.map(|r| format!("{r:.2}x")).unwrap_or_else(|| "-".into());
        for row in &self.rows {
            let c = &row.catalog;
            out.push_str(&format!(
                "{:<52} {:>8} {:>9.3} {:>9.3} {:>9.3} {:>10.1} {:>9} {:>7} {:>9} {:>7} {:>9} {:>7}\n",
                row.operation,
                c.count,
                c.p50_ms,
                c.p90_ms,
                c.p99_ms,
                c.ops_per_second,
                ms(row.raw),
                times(row.ratio_p50),
                ms(row.minimum),
                times(row.ratio_minimum_p50),
                ms(row.logged_minimum),
                times(row.ratio_logged_minimum_p50),
            ));
            if !row.details.is_null() {
                out.push_str(&format!("    {}\n", row.details));
            }
        }
        out
    }
}

/// The table of targets for one or more backends' reports: one row per target, one column
/// per report (a cell is `-` where the report lacks the scenario).
pub fn backend_report(reports: &[BenchReport]) -> String {
    let row = |report: &BenchReport, scenario: &str| -> Option<BenchRow> {
        report.rows.iter().find(|r| r.scenario == scenario).cloned()
    };
    let times = |r: Option<f64>| r.map(|r| format!("{r:.2}×")).unwrap_or_else(|| "-".into());
    type Cell<'a> = Box<dyn Fn(&BenchReport) -> String + 'a>;
    let targets: Vec<(&str, Cell)> = vec![
        (
            "load vs raw read (≤ 1.10×)",
            Box::new(|r| times(row(r, "load").and_then(|r| r.ratio_p50))),
        ),
        (
            "commit vs raw read + conditional write",
            Box::new(|r| times(row(r, "commit").and_then(|r| r.ratio_p50))),
        ),
        (
            "commit vs physical minimum (≤ 1.10×)",
            Box::new(|r| times(row(r, "commit").and_then(|r| r.ratio_minimum_p50))),
        ),
        (
            "commit vs physical minimum with the change-log entry",
            Box::new(|r| times(row(r, "commit").and_then(|r| r.ratio_logged_minimum_p50))),
        ),
        (
            "list, half dropped, vs raw listing (≤ 1.2×)",
            Box::new(|r| times(row(r, "list").and_then(|r| r.ratio_p50))),
        ),
        (
            "N writers: rate vs 1 writer (≥ 70 %), max attempts (≤ 32), lost updates (0)",
            Box::new(|r| match row(r, "contention-n") {
                Some(row) => format!(
                    "{} writers: {:.0} %, max {}, lost {}",
                    row.details["writers"],
                    row.details["rate-vs-single-writer"].as_f64().unwrap_or(0.0) * 100.0,
                    row.details["attempts-max"],
                    row.details["lost-updates"],
                ),
                None => "-".into(),
            }),
        ),
        (
            "GC dry run vs raw listing of the warehouse (≤ 1.3×)",
            Box::new(|r| match row(r, "gc") {
                Some(row) => format!(
                    "{} ({} the physical minimum: the listing plus reading every metadata file and pointer record; {} objects, peak RSS {} MiB)",
                    times(row.ratio_p50),
                    times(row.ratio_minimum_p50),
                    row.details["objects-scanned"],
                    row.details["peak-rss-kib-after"].as_u64().unwrap_or(0) / 1024
                ),
                None => "-".into(),
            }),
        ),
    ];
    let mut out = String::from("| target |");
    for report in reports {
        out.push_str(&format!(" {} |", report.store));
    }
    out.push_str("\n|---|");
    out.push_str(&"---|".repeat(reports.len()));
    out.push('\n');
    for (name, cell) in &targets {
        out.push_str(&format!("| {name} |"));
        for report in reports {
            out.push_str(&format!(" {} |", cell(report)));
        }
        out.push('\n');
    }
    out
}

/// Run the configured scenarios against `catalog`.
pub async fn run(catalog: &Catalog, config: &BenchConfig) -> Result<BenchReport> {
    if config.writers == 0 || config.list_size == 0 || config.parse_snapshots == 0 {
        return Err(Error::new(
            ErrorKind::InvalidRequest,
            "writers, list size and snapshot count must be positive",
        ));
    }
    let bench = scenarios::Bench::new(catalog.clone(), config.duration);
    let mut rows = Vec::new();
    for op in &config.ops {
        match op {
            BenchOp::Load => rows.extend(bench.load().await?),
            BenchOp::Commit => rows.push(bench.commit().await?),
            BenchOp::Contention => rows.extend(bench.contention(config.writers).await?),
            BenchOp::List => rows.push(bench.list(config.list_size).await?),
            BenchOp::Parse => rows.push(bench.parse(config.parse_snapshots)?),
            BenchOp::Gc => rows.push(bench.gc(config.gc_objects).await?),
        }
    }
    Ok(BenchReport {
        store: catalog.store().describe(),
        warehouse: catalog.warehouse().root().to_owned(),
        rows,
    })
}
