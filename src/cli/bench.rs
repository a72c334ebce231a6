//! `parqdb-catalog bench`.

use std::time::Duration;

use clap::Args;

use super::publish::parse_duration;
use crate::bench::{self, BenchConfig, BenchOp};
use crate::catalog::Catalog;
use crate::error::Result;

#[derive(Debug, Args)]
pub(crate) struct BenchArgs {
    /// Scenarios to run (comma-separated).
    #[arg(long, value_delimiter = ',', default_values = ["load", "commit", "contention", "list", "parse", "gc"])]
    ops: Vec<BenchOp>,
    /// Writers racing in the contention scenario.
    #[arg(long, default_value_t = 16)]
    writers: usize,
    /// Measuring time per scenario, e.g. `5s`, `500ms`, `1m`.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    duration: Duration,
    /// Identifiers in the listed namespace.
    #[arg(long, default_value_t = 100_000)]
    list_size: usize,
    /// Snapshots in the parsed metadata file.
    #[arg(long, default_value_t = 1000)]
    parse_snapshots: usize,
    /// Unreachable objects added to the warehouse for the GC scenario.
    #[arg(long, default_value_t = 100_000)]
    gc_objects: usize,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

/// Runs the bench; prints the table itself unless `--json`.
pub(crate) async fn run(args: &BenchArgs, catalog: &Catalog) -> Result<Option<serde_json::Value>> {
    let config = BenchConfig {
        ops: args.ops.clone(),
        writers: args.writers,
        duration: args.duration,
        list_size: args.list_size,
        parse_snapshots: args.parse_snapshots,
        gc_objects: args.gc_objects,
    };
    let report = bench::run(catalog, &config).await?;
    if args.json {
        Ok(Some(serde_json::to_value(&report).unwrap_or_default()))
    } else {
        print!("{}", report.table());
        Ok(None)
    }
}
