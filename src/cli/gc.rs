//! `parqdb-catalog gc`: collect garbage in the catalog's warehouse.
//!
//! ```text
//! parqdb-catalog init                      # once: claim the warehouse for this catalog
//! parqdb-catalog gc --dry-run              # what would be deleted, and why
//! parqdb-catalog gc --retention 7d --grace 1h
//! parqdb-catalog gc --budget 10m --resume  # go on with an unfinished run for at most 10 minutes
//! parqdb-catalog gc status [--ledger]      # the lease, the unfinished run per partition, the last finished run
//! ```
//!
//! Prints the [`GcReport`](crate::gc::GcReport) as JSON on stdout; a progress bar goes to
//! stderr when it is a terminal.

use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};

use crate::catalog::Catalog;
use crate::error::Result;
use crate::gc::{
    self, GarbageCollector, GcConfig, GcPhase, GcProgress, config::DEFAULT_GRACE,
    config::DEFAULT_RETENTION,
};

/// Arguments of `parqdb-catalog gc`.
#[derive(Debug, Clone, clap::Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct GcArgs {
    /// `status`: show the collector's state instead of running it.
    #[command(subcommand)]
    pub command: Option<GcCommand>,
    /// Report what would be deleted and why; write and delete nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// How long an object must stay unreachable before it is deleted (e.g. 7d, 36h, 1h30m).
    #[arg(long, value_name = "DURATION", value_parser = gc::config::parse_duration, default_value = "7d")]
    pub retention: Duration,
    /// Never touch objects younger than this: they may belong to a commit in flight.
    #[arg(long, value_name = "DURATION", value_parser = gc::config::parse_duration, default_value = "1h")]
    pub grace: Duration,
    /// How long a condemnation stands before the object is deleted (default: the grace;
    /// at least 2m, twice the catalog's publish window, unless forced).
    #[arg(long, value_name = "DURATION", value_parser = gc::config::parse_duration)]
    pub condemn_delay: Option<Duration>,
    /// Accept a retention under 1h, a grace under 5m or a condemnation delay under 2m.
    #[arg(long)]
    pub force: bool,
    /// Most objects one run deletes (the rest wait for the next run); lower it to throttle
    /// deletions on purpose.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..), default_value_t = crate::gc::config::DEFAULT_MAX_DELETES as u64)]
    pub max_deletes: u64,
    /// Objects per delete batch (the lease is renewed before each).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..), default_value_t = 1000)]
    pub delete_batch_size: u64,
    /// Concurrent object-store requests while scanning.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..), default_value_t = 16)]
    pub io_concurrency: u64,
    /// How long the run lease lasts without renewal.
    #[arg(long, value_name = "DURATION", value_parser = gc::config::parse_duration, default_value = "15m")]
    pub lease: Duration,
    /// Stop after this long (at the next page boundary, checkpointed) with the run
    /// unfinished; the next `gc` goes on where it stopped (default: run to the end).
    #[arg(long, value_name = "DURATION", value_parser = gc::config::parse_duration)]
    pub budget: Option<Duration>,
    /// Only go on with an unfinished run (one stopped by its budget, a failure or a
    /// kill); start none.
    #[arg(long)]
    pub resume: bool,
    /// How many partitions of `indexes/` a new run is split into.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=1000), default_value_t = 16)]
    pub partitions: u64,
    /// How many partitions are scanned and deleted at once.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..), default_value_t = 4)]
    pub workers: u64,
    /// Objects per listing page (the unit of checkpointed work).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..), default_value_t = 1000)]
    pub page_size: u64,
}

/// What `gc` does instead of a run.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum GcCommand {
    /// Show the run lease, the last finished run and runs that did not finish (writes
    /// nothing).
    Status {
        /// Also count the ledger's tracked objects and condemnations (lists all of it).
        #[arg(long)]
        ledger: bool,
    },
    /// Do one step of a run as the `gc` Lambda function would for EVENT (`{"step":
    /// "plan"}`, `{"step": "scan", "run": "<id>", "partition": 0}`, ... or `{}` for as much
    /// of a whole run as fits), configured like the function by the `PARQDB_GC_*`
    /// environment variables; prints the function's answer.
    Step {
        /// The event (JSON).
        event: String,
        /// Stop at the first page boundary after this long (the function derives it from
        /// its deadline; default: until the step is done).
        #[arg(long, value_name = "DURATION", value_parser = gc::config::parse_duration)]
        budget: Option<Duration>,
    },
    /// Give up the unfinished run (it is never resumed; the next run starts every
    /// retention clock again), and break the run lease whoever holds it (a run killed before its
    /// plan, or one whose clock ran far ahead, leaves one nothing else releases; a run
    /// still under way stops before its next delete batch). For a run that cannot go on
    /// (its state was lost or damaged) or a wedged lease; `gc status` shows both.
    Abandon,
}

impl Default for GcArgs {
    fn default() -> Self {
        GcArgs {
            command: None,
            dry_run: false,
            retention: DEFAULT_RETENTION,
            grace: DEFAULT_GRACE,
            condemn_delay: None,
            force: false,
            max_deletes: crate::gc::config::DEFAULT_MAX_DELETES as u64,
            delete_batch_size: 1000,
            io_concurrency: 16,
            lease: crate::gc::config::DEFAULT_LEASE,
            budget: None,
            resume: false,
            partitions: 16,
            workers: 4,
            page_size: 1000,
        }
    }
}

impl GcArgs {
    /// The collector configuration these arguments describe.
    pub fn config(&self) -> GcConfig {
        GcConfig {
            retention: self.retention,
            grace: self.grace,
            condemn_delay: self.condemn_delay,
            dry_run: self.dry_run,
            force: self.force,
            max_deletes_per_run: usize::try_from(self.max_deletes).unwrap_or(usize::MAX),
            delete_batch_size: usize::try_from(self.delete_batch_size).unwrap_or(usize::MAX),
            io_concurrency: usize::try_from(self.io_concurrency).unwrap_or(usize::MAX),
            lease_duration: self.lease,
            budget: self.budget,
            partitions: usize::try_from(self.partitions).unwrap_or(usize::MAX),
            workers: usize::try_from(self.workers).unwrap_or(usize::MAX),
            page_size: usize::try_from(self.page_size).unwrap_or(usize::MAX),
            ..GcConfig::default()
        }
    }
}

fn phase_name(phase: GcPhase) -> &'static str {
    match phase {
        GcPhase::CheckOwnership => "checking ownership",
        GcPhase::AcquireLease => "acquiring the gc lease",
        GcPhase::ComputeReachability => "walking the catalog",
        GcPhase::ScanMetadata => "scanning metadata/",
        GcPhase::ScanIndexes => "scanning indexes/",
        GcPhase::Verify => "verifying before deleting",
        GcPhase::Delete => "deleting",
        GcPhase::SweepLedger => "sweeping the ledger",
        GcPhase::Done => "done",
    }
}

/// Run `gc` against `catalog` and return the report as JSON.
pub async fn run(args: &GcArgs, catalog: &Catalog) -> Result<serde_json::Value> {
    match &args.command {
        Some(GcCommand::Status { ledger }) => {
            let state = gc::status(catalog, catalog.clock().now_ms(), *ledger).await?;
            return Ok(serde_json::to_value(&state).unwrap_or_default());
        }
        Some(GcCommand::Step { event, budget }) => {
            let event: serde_json::Value = serde_json::from_str(event).map_err(|err| {
                crate::error::Error::new(
                    crate::error::ErrorKind::InvalidRequest,
                    format!("the gc step event is not JSON: {err}"),
                )
            })?;
            let collector = GarbageCollector::new(catalog.clone(), GcConfig::from_env()?)?;
            return gc::run_scheduled_within(&collector, event, *budget).await;
        }
        Some(GcCommand::Abandon) => {
            let collector = GarbageCollector::new(catalog.clone(), args.config())?;
            let abandoned = collector.abandon().await?;
            let lease_broken_for = collector.break_lease().await?;
            return Ok(serde_json::json!({
                "abandoned": abandoned,
                "lease-broken-for": lease_broken_for,
            }));
        }
        None => {}
    }
    let bar = ProgressBar::new_spinner();
    bar.set_style(
        ProgressStyle::with_template("{spinner} {elapsed_precise} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_spinner()),
    );
    bar.enable_steady_tick(Duration::from_millis(120));
    let progress = bar.clone();
    let collector =
        GarbageCollector::new(catalog.clone(), args.config())?.with_progress(move |event| {
            match event {
                GcProgress::Phase { phase } => progress.set_message(phase_name(*phase)),
                GcProgress::Scanned { objects, bytes } => {
                    progress.set_message(format!("scanned {objects} objects ({bytes} bytes)"));
                }
                GcProgress::Deleted { objects, of } => {
                    progress.set_message(format!("deleted {objects} of {of}"))
                }
            }
        });
    let now = catalog.clock().now_ms();
    let result = if args.resume {
        collector.resume(now).await
    } else {
        collector.collect(now).await
    };
    bar.finish_and_clear();
    Ok(result?.to_json())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        gc: GcArgs,
    }

    #[test]
    fn arguments_parse_durations_and_flags() {
        let cli = Cli::try_parse_from(["gc", "--dry-run", "--retention", "36h", "--grace", "90m"])
            .expect("parsed");
        assert!(cli.gc.dry_run);
        assert_eq!(cli.gc.retention, Duration::from_secs(36 * 3600));
        assert_eq!(cli.gc.grace, Duration::from_secs(90 * 60));
        let compound = Cli::try_parse_from([
            "gc",
            "--retention",
            "2w",
            "--grace",
            "1h30m",
            "--condemn-delay",
            "90s",
            "--budget",
            "500ms",
        ])
        .expect("parsed");
        assert_eq!(
            (
                compound.gc.retention,
                compound.gc.grace,
                compound.gc.condemn_delay,
                compound.gc.budget
            ),
            (
                Duration::from_secs(14 * 86_400),
                Duration::from_secs(90 * 60),
                Some(Duration::from_secs(90)),
                Some(Duration::from_millis(500))
            )
        );
        let err = Cli::try_parse_from(["gc", "--lease", "15"]).expect_err("no unit");
        assert_eq!(err.kind(), clap::error::ErrorKind::ValueValidation);
        let source = std::error::Error::source(&err)
            .and_then(|source| source.downcast_ref::<crate::error::Error>())
            .expect("the typed error");
        assert_eq!(source.kind(), crate::error::ErrorKind::InvalidRequest);
        let defaults = Cli::try_parse_from(["gc"]).expect("parsed");
        assert_eq!(defaults.gc.retention, DEFAULT_RETENTION);
        assert!(!defaults.gc.force);
        let (cli, library) = (defaults.gc.config(), GcConfig::default());
        assert_eq!(
            (
                cli.max_deletes_per_run,
                cli.delete_batch_size,
                cli.io_concurrency,
                cli.lease_duration,
                cli.partitions,
                cli.workers,
                cli.page_size
            ),
            (
                library.max_deletes_per_run,
                library.delete_batch_size,
                library.io_concurrency,
                library.lease_duration,
                library.partitions,
                library.workers,
                library.page_size
            ),
            "the CLI's defaults are the library's"
        );
        assert!(Cli::try_parse_from(["gc", "--max-deletes", "0"]).is_err());
        assert!(Cli::try_parse_from(["gc", "--retention", "7"]).is_err());
        let status = Cli::try_parse_from(["gc", "status", "--ledger"]).expect("parsed");
        assert!(matches!(
            status.gc.command,
            Some(GcCommand::Status { ledger: true })
        ));
        assert!(Cli::try_parse_from(["gc", "--dry-run", "status"]).is_err());
        let config = Cli::try_parse_from(["gc", "--retention", "30m", "--force"])
            .expect("parsed")
            .gc
            .config();
        assert!(config.validate().is_ok());
        assert!(
            GcArgs {
                retention: Duration::from_secs(60),
                ..GcArgs::default()
            }
            .config()
            .validate()
            .is_err()
        );
    }

    #[tokio::test]
    async fn init_then_dry_run_prints_a_report() {
        let dir = tempfile::tempdir().expect("dir");
        let uri = format!("file://{}", dir.path().join("wh").display());
        let config = crate::config::CatalogConfig::new(Some(uri), None);
        let initialised = super::super::init::run(&config, &Default::default())
            .await
            .expect("init");
        assert!(initialised["owner"]["catalog-id"].is_string());
        let catalog = config.build().await.expect("catalog");
        let args = GcArgs {
            dry_run: true,
            ..GcArgs::default()
        };
        let report = run(&args, &catalog).await.expect("gc");
        assert_eq!(report["status"], "dry-run");
        assert_eq!(report["scanned"]["objects"], 0);
        let status = GcArgs {
            command: Some(GcCommand::Status { ledger: true }),
            ..GcArgs::default()
        };
        let state = run(&status, &catalog).await.expect("status");
        assert_eq!(state["running"], false);
        assert!(state["owner"]["catalog-id"].is_string());
        assert_eq!(state["ledger"]["tracked-objects"], 0);
        assert!(
            state["last-finished-run"].is_null(),
            "a dry run records nothing"
        );
    }
}
