//! An event-driven refresh job on the command line: a file of S3 events in, the
//! publications out — a thin wrapper over the library's
//! [`RefreshRunner`](parqdb_catalog::refresh::RefreshRunner), the same runner the
//! `refresh` Lambda function runs.
//!
//! The file holds any shape an S3 write reaches a job in
//! ([`Delivery`](parqdb_catalog::refresh::Delivery)): an EventBridge `Object Created` event
//! (`examples/s3_object_created.json`), an S3 event notification, or an SQS batch of
//! either (`examples/s3_object_created_sqs.json`). Every change refreshes one index
//! (`--namespace`, `--name`), the source table being the changed object's directory; the
//! runner skips changes a published snapshot already contains (a redelivery: its build
//! started reading after the write's event time plus the clock-skew allowance), builds once with the demonstration
//! [`PlaceholderBuilder`] (placeholder `ivf` tables under
//! `indexes/<index-uuid>/<build-id>/`) and publishes once, creating the namespace and the
//! index on first use.
//!
//! Run it against the embedded default (a `./warehouse` directory, pointers under
//! `./warehouse/_catalog`; `PARQDB_WAREHOUSE`/`PARQDB_CATALOG` select others):
//!
//! ```text
//! cargo run --example refresh_on_s3_event -- examples/s3_object_created.json
//! cargo run --example refresh_on_s3_event -- examples/s3_object_created.json      # replay: already-published
//! cargo run --example refresh_on_s3_event -- examples/s3_object_created_sqs.json  # the same write through SQS: already-published
//! cargo run --example refresh_on_s3_event -- --namespace docs --name embeddings event.json
//! ```
//!
//! It prints the runner's report as JSON (per index: the newest change and the outcome,
//! `published` with `metadata-location`, `snapshot-id`, `sequence-number`, `attempts`, or
//! `already-published`; then `builds` and `commits`). A file that is not an S3 event, or
//! an index whose refresh failed, prints `{"error": CODE, "message": ...}` on stderr and
//! exits with status 1.

use std::process::ExitCode;

use clap::Parser;
use parqdb_catalog::CatalogConfig;
use parqdb_catalog::Publisher;
use parqdb_catalog::refresh::{
    Delivery, PlaceholderBuilder, RefreshOutcome, RefreshReport, RefreshRunner, Routes,
};
use parqdb_catalog::{Error, ErrorKind, IndexIdentifier, Namespace, Result};

/// Refresh an index from the S3 writes an event file reports.
#[derive(Debug, Parser)]
struct Args {
    /// The event JSON file (`-` for stdin): EventBridge, S3 notification or SQS batch.
    event: String,
    /// Namespace segment of the index (repeatable).
    #[arg(long = "namespace", default_values_t = ["examples".to_owned()])]
    namespace: Vec<String>,
    /// Index name.
    #[arg(long, default_value = "documents_embedding")]
    name: String,
}

/// The job's runner: every change refreshes `index`.
pub fn runner(publisher: Publisher, index: IndexIdentifier) -> RefreshRunner<PlaceholderBuilder> {
    RefreshRunner::new(publisher, Routes::new().fallback(index), PlaceholderBuilder)
}

/// Refresh from one event's JSON: `INVALID_REQUEST` if it is not an S3 event (or an SQS
/// message of the batch is not), else the runner's report, or the first failed index's
/// error.
pub async fn refresh(
    runner: &RefreshRunner<PlaceholderBuilder>,
    event: &[u8],
) -> Result<RefreshReport> {
    let event = serde_json::from_slice(event).map_err(|err| {
        Error::with_source(ErrorKind::InvalidRequest, "the event is not JSON", err)
    })?;
    let delivery = Delivery::parse(event)?;
    if let Some((message, why)) = delivery.rejected().next() {
        return Err(Error::new(
            why.kind(),
            format!("SQS message `{message}`: {}", why.message()),
        ));
    }
    let report = runner.run(delivery.changes().to_vec()).await;
    for index in &report.indexes {
        if let RefreshOutcome::Failed { code, message, .. } = &index.outcome {
            let kind = ErrorKind::from_code(code).unwrap_or(ErrorKind::StoreUnavailable);
            return Err(Error::new(kind, format!("{}: {message}", index.index)));
        }
    }
    Ok(report)
}

async fn run(args: Args) -> Result<RefreshReport> {
    let bytes = if args.event == "-" {
        let mut buffer = Vec::new();
        std::io::Read::read_to_end(&mut std::io::stdin(), &mut buffer).map_err(|err| {
            Error::with_source(ErrorKind::InvalidRequest, "cannot read stdin", err)
        })?;
        buffer
    } else {
        std::fs::read(&args.event).map_err(|err| {
            Error::with_source(
                ErrorKind::InvalidRequest,
                format!("cannot read the event file `{}`", args.event),
                err,
            )
        })?
    };
    let index = IndexIdentifier::new(Namespace::new(args.namespace)?, args.name)?;
    let catalog = CatalogConfig::from_env().build().await?;
    refresh(&runner(Publisher::for_catalog(&catalog), index), &bytes).await
}

#[tokio::main]
async fn main() -> ExitCode {
    match run(Args::parse()).await {
        Ok(report) => {
            println!(
                "{}",
                serde_json::to_string_pretty(&report).unwrap_or_default()
            );
            ExitCode::SUCCESS
        }
        Err(err) => {
            eprintln!("{}", err.to_json());
            ExitCode::FAILURE
        }
    }
}
