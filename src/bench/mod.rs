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
//! | `commit`     | `commit` with the base metadata cached    | `get` + conditional `put` of a record  |
//! | `contention` | N writers, reload-and-retry on one index  | the same with 1 writer                 |
//! | `list`       | `list` of a namespace of `--list-size`    | paginated store listing of the keys    |
//! | `parse`      | strict parse + validate, 1,000 snapshots  | `serde_json::Value` parse              |
//! | `gc`         | GC dry run over the warehouse plus `--gc-objects` small unreachable objects: objects/s and peak RSS | |
//!
//! The bench writes into its own namespaces (`parqdb-bench-*`) of the configured catalog;
//! point it at a scratch warehouse. The `list` namespace is reused by later runs of the
//! same size, so only the first run pays for creating it.

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
    /// What was measured.
    pub operation: String,
    /// The catalog operation.
    pub catalog: Summary,
    /// The raw primitive, measured interleaved with it.
    pub raw: Option<Summary>,
    /// `catalog.p50 / raw.p50`.
    pub ratio_p50: Option<f64>,
    /// Scenario-specific numbers (contention: attempts, fairness, lost updates).
    #[serde(skip_serializing_if = "serde_json::Value::is_null")]
    pub details: serde_json::Value,
}

impl BenchRow {
    fn new(operation: &str, catalog: &Samples, raw: Option<&Samples>) -> BenchRow {
        let catalog = catalog.summary();
        let raw = raw.map(Samples::summary);
        BenchRow {
            operation: operation.to_owned(),
            ratio_p50: raw
                .filter(|r| r.p50_ms > 0.0)
                .map(|r| catalog.p50_ms / r.p50_ms),
            catalog,
            raw,
            details: serde_json::Value::Null,
        }
    }
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
            "{:<52} {:>8} {:>9} {:>9} {:>9} {:>10} {:>9} {:>7}\n",
            "operation", "n", "p50 ms", "p90 ms", "p99 ms", "ops/s", "raw p50", "ratio"
        ));
        for row in &self.rows {
            let c = &row.catalog;
            out.push_str(&format!(
                "{:<52} {:>8} {:>9.3} {:>9.3} {:>9.3} {:>10.1} {:>9} {:>7}\n",
                row.operation,
                c.count,
                c.p50_ms,
                c.p90_ms,
                c.p99_ms,
                c.ops_per_second,
                row.raw
                    .map(|r| format!("{:.3}", r.p50_ms))
                    .unwrap_or_else(|| "-".into()),
                row.ratio_p50
                    .map(|r| format!("{r:.2}x"))
                    .unwrap_or_else(|| "-".into()),
            ));
            if !row.details.is_null() {
                out.push_str(&format!("    {}\n", row.details));
            }
        }
        out
    }
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
