//! `parqdb-catalog bench`.

use std::time::Duration;

use clap::Args;

use crate::bench::{self, BenchConfig, BenchOp};
use crate::config::CatalogConfig;
use crate::error::Result;

#[derive(Debug, Args)]
pub(crate) struct BenchArgs {
    /// Scenarios to run (comma-separated).
    #[arg(long, value_delimiter = ',', default_values = ["load", "commit", "contention", "list", "parse", "gc"])]
    ops: Vec<BenchOp>,
    /// Writers racing in the contention scenario.
    #[arg(long, default_value_t = 16)]
    writers: usize,
    /// Measuring time per scenario, e.g. `5s`, `500ms`, `1m30s`.
    #[arg(long, default_value = "5s", value_parser = crate::gc::config::parse_duration)]
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
    /// Bench this backend instead of `--warehouse`/`--catalog`: `WAREHOUSE_URI` or
    /// `WAREHOUSE_URI,CATALOG_URI`. Repeat to bench several backends one after the other.
    #[arg(long = "backend", value_name = "WAREHOUSE[,CATALOG]")]
    backends: Vec<String>,
    /// After the per-backend tables, print the table of targets with one column per
    /// backend (markdown).
    #[arg(long)]
    backend_report: bool,
}

/// Runs the bench on each backend; prints the tables itself unless `--json`.
pub(crate) async fn run(
    args: &BenchArgs,
    default: &CatalogConfig,
) -> Result<Option<serde_json::Value>> {
    let config = BenchConfig {
        ops: args.ops.clone(),
        writers: args.writers,
        duration: args.duration,
        list_size: args.list_size,
        parse_snapshots: args.parse_snapshots,
        gc_objects: args.gc_objects,
    };
    let configs: Vec<CatalogConfig> = if args.backends.is_empty() {
        vec![default.clone()]
    } else {
        args.backends
            .iter()
            .map(|spec| {
                let (warehouse, catalog) = match spec.split_once(',') {
                    Some((w, c)) => (w.to_owned(), Some(c.to_owned())),
                    None => (spec.clone(), None),
                };
                let uris = CatalogConfig::typed(Some(warehouse), catalog);
                CatalogConfig {
                    warehouse: uris.warehouse,
                    catalog: uris.catalog,
                    ..default.clone()
                }
            })
            .collect()
    };
    let mut reports = Vec::new();
    for config_of_backend in &configs {
        let catalog = config_of_backend.build().await?;
        let report = bench::run(&catalog, &config).await?;
        if !args.json {
            print!("{}", report.table());
        }
        reports.push(report);
    }
    if args.json {
        let mut json = serde_json::json!({ "reports": reports });
        if args.backend_report {
            json["backend-report"] = bench::backend_report(&reports).into();
        }
        return Ok(Some(json));
    }
    if args.backend_report {
        print!("\n{}", bench::backend_report(&reports));
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        bench: BenchArgs,
    }

    #[test]
    fn the_duration_takes_the_crate_duration_syntax() {
        let duration = |text: &str| {
            Cli::try_parse_from(["bench", "--duration", text]).map(|cli| cli.bench.duration)
        };
        assert_eq!(duration("1h30m").ok(), Some(Duration::from_secs(5_400)));
        assert_eq!(duration("2w").ok(), Some(Duration::from_secs(14 * 86_400)));
        assert_eq!(duration("90s").ok(), Some(Duration::from_secs(90)));
        assert_eq!(duration("500ms").ok(), Some(Duration::from_millis(500)));
        let err = duration("5").expect_err("no unit");
        assert_eq!(err.kind(), clap::error::ErrorKind::ValueValidation);
        let source = std::error::Error::source(&err)
            .and_then(|source| source.downcast_ref::<crate::error::Error>())
            .expect("the typed error");
        assert_eq!(source.kind(), crate::error::ErrorKind::InvalidRequest);
    }
}
