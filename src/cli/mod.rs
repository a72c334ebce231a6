//! The `parqdb-catalog` command-line interface.
//!
//! Every command prints one JSON object on stdout on success. On failure it prints
//! `{"error": "<CODE>", "message": "..."}` on stderr and exits with the error kind's code
//! (see [`ErrorKind::exit_code`]; `2` is a usage error).

mod bench;
mod demo;
mod gc;
mod index;
mod init;
mod namespace;
mod publish;
mod source;
mod validate;

use std::process::ExitCode;
use std::sync::Arc;

use clap::{Parser, Subcommand};

use crate::catalog::{Catalog, IndexCatalog};
use crate::config::CatalogConfig;
use crate::error::{ErrorKind, Result};

const EXIT_CODES: &str = "EXIT CODES:
  0 success, 2 usage error, and per error kind:
  10 NAMESPACE_NOT_FOUND      11 INDEX_NOT_FOUND        12 ALREADY_EXISTS
  13 INVALID_INDEX_METADATA   14 UNSUPPORTED_FORMAT_VERSION
  15 INDEX_UUID_MISMATCH      16 COMMIT_CONFLICT        17 INVALID_IDENTIFIER
  18 INVALID_REQUEST          19 NAMESPACE_NOT_EMPTY    20 COMMIT_STATE_UNKNOWN
  21 STORE_UNAVAILABLE        22 STORE_UNSUPPORTED      23 CORRUPT_RECORD
  24 INVALID_CONFIGURATION    25 WAREHOUSE_NOT_OWNED    26 STORE_REFUSED
  27 CONCURRENT_MODIFICATION
  Retry (after reloading or backing off) only 16, 20, 21 and 27.";

/// A serverless, object-store-only catalog for ParqDB vector indexes.
#[derive(Debug, Parser)]
#[command(name = "parqdb-catalog", version, after_help = EXIT_CODES)]
pub struct Cli {
    /// Warehouse root URI or local path (default: file://$PWD/warehouse).
    #[arg(long, global = true, env = "PARQDB_WAREHOUSE")]
    warehouse: Option<String>,
    /// Pointer-store URI (default: the warehouse's own store, under `_catalog/`), or
    /// `lambda://PREFIX` to run the index and namespace commands against a deployment's
    /// Lambda functions through their alias `live` (PREFIXload:live, PREFIXcommit:live,
    /// ...; `lambda://PREFIX?qualifier=ALIAS` for another alias or version, `$LATEST` for
    /// the unqualified functions).
    #[arg(long, global = true, env = "PARQDB_CATALOG")]
    catalog: Option<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Validate a metadata file and print a summary.
    Validate(validate::ValidateArgs),
    /// Namespace operations.
    #[command(subcommand)]
    Namespace(namespace::NamespaceCommand),
    /// Register an index under an absent identifier.
    Register(index::RegisterArgs),
    /// Print an index's current metadata location, source binding and version.
    Load(index::IdentifierArgs),
    /// Replace an index's metadata location if it still equals the base.
    Commit(index::CommitArgs),
    /// Remove an index mapping (metadata and data stay).
    Drop(index::IdentifierArgs),
    /// Move an index mapping to another identifier.
    Rename(index::RenameArgs),
    /// List the indexes directly in a namespace.
    List(index::ListArgs),
    /// Publish a new snapshot with reload-and-retry (a refresh job's last step).
    Publish(publish::PublishArgs),
    /// Remove old snapshots from an index's metadata (keeps the current one).
    Expire(publish::ExpireArgs),
    /// Create a missing table or bucket, probe the store, and claim the warehouse.
    Init(init::InitArgs),
    /// Delete warehouse objects unreachable for the retention window (see `--dry-run`).
    Gc(gc::GcArgs),
    /// Check that the pointer store honours conditional writes.
    Probe,
    /// Walk through the index lifecycle on real files (safe to run twice).
    Demo,
    /// Measure catalog operations against the raw store primitives (reports, asserts nothing).
    Bench(bench::BenchArgs),
}

impl Cli {
    fn config(&self) -> CatalogConfig {
        CatalogConfig::typed(self.warehouse.clone(), self.catalog.clone())
    }

    /// The configuration, for a command that may write: a missing local directory is
    /// created; for one that only acts on what exists, it is refused (a mistyped path).
    fn config_for_command(&self) -> Result<CatalogConfig> {
        let config = self.config();
        if self.acts_on_existing_state() {
            config.require_existing_dirs()?;
        }
        Ok(config)
    }

    /// Whether the command only reads, or changes what exists (it can create nothing).
    fn acts_on_existing_state(&self) -> bool {
        use namespace::NamespaceCommand as Ns;
        match &self.command {
            Command::Load(_)
            | Command::List(_)
            | Command::Commit(_)
            | Command::Drop(_)
            | Command::Rename(_)
            | Command::Expire(_)
            | Command::Gc(_) => true,
            Command::Namespace(command) => !matches!(command, Ns::Create(_)),
            _ => false,
        }
    }

    /// The embedded catalog (commands that need the store itself).
    async fn catalog(&self) -> Result<Catalog> {
        self.config_for_command()?.build().await
    }

    /// The catalog `--catalog` names: embedded, or remote for `lambda://PREFIX`.
    async fn connect(&self) -> Result<Arc<dyn IndexCatalog>> {
        self.config_for_command()?.connect().await
    }

    /// Run the command: `Some(json)` to print, `None` if the command printed itself.
    async fn run(self) -> Result<Option<serde_json::Value>> {
        let json = match &self.command {
            Command::Validate(args) => validate::run(args)?,
            Command::Namespace(command) => namespace::run(command, &*self.connect().await?).await?,
            Command::Register(args) => index::register(args, &*self.connect().await?).await?,
            Command::Load(args) => index::load(args, &*self.connect().await?).await?,
            Command::Commit(args) => index::commit(args, &*self.connect().await?).await?,
            Command::Drop(args) => index::drop(args, &*self.connect().await?).await?,
            Command::Rename(args) => index::rename(args, &*self.connect().await?).await?,
            Command::List(args) => index::list(args, &*self.connect().await?).await?,
            Command::Publish(args) => {
                let config = self.config();
                publish::run_publish(args, config.connect().await?, &config.open_warehouse()?)
                    .await?
            }
            Command::Expire(args) => {
                let config = self.config_for_command()?;
                publish::run_expire(args, config.connect().await?, &config.open_warehouse()?)
                    .await?
            }
            Command::Init(args) => init::run(&self.config(), args).await?,
            Command::Gc(args) => gc::run(args, &self.catalog().await?).await?,
            Command::Probe => {
                let report = self.catalog().await?.probe().await?;
                let json = serde_json::to_value(&report).unwrap_or_default();
                report.into_result()?;
                json
            }
            Command::Demo => {
                demo::run(&self.catalog().await?).await?;
                return Ok(None);
            }
            Command::Bench(args) => return bench::run(args, &self.config()).await,
        };
        Ok(Some(json))
    }
}

/// Parse arguments, run the command, print the result, and return the exit code.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!(
                "{}",
                serde_json::json!({"error": "INVALID_CONFIGURATION", "message": err.to_string()})
            );
            return ExitCode::from(ErrorKind::Configuration.exit_code() as u8);
        }
    };
    match runtime.block_on(cli.run()) {
        Ok(value) => {
            if let Some(value) = value {
                println!("{value}");
            }
            ExitCode::SUCCESS
        }
        Err(err) => {
            eprintln!("{}", err.to_json());
            ExitCode::from(err.kind().exit_code() as u8)
        }
    }
}
