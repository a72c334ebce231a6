//! The `refresh` Lambda function: event-driven index refresh that survives bursts.
//!
//! Fed by an SQS queue that an EventBridge rule fills with the source bucket's
//! `Object Created` events (infra/template.yaml, `RefreshSourceBucket`), it turns each
//! batch into one build and at most one commit per index with
//! [`parqdb_catalog::refresh::RefreshRunner`]: changes are grouped per index by the
//! routes, skipped if a retained snapshot already contains them (by the ordering rule of
//! `parqdb_catalog::refresh`: event times against the snapshot's read start, with a
//! clock-skew allowance), built once and published once; a build overtaken by a snapshot
//! that contains its batch too is discarded. The response is SQS's partial-batch response:
//! only the messages of failed indexes, unrouted changes and unreadable bodies are
//! delivered again (see `parqdb_catalog::lambda::handler::refresh`).
//!
//! The builder is the demonstration [`PlaceholderBuilder`] (one placeholder file per `ivf`
//! table); a real job implements [`parqdb_catalog::refresh::IndexBuilder`] and passes it
//! here instead.
//!
//! Environment: `PARQDB_WAREHOUSE`, `PARQDB_CATALOG` (the catalog), `PARQDB_REFRESH_ROUTES`
//! (JSON: `[{"source": "s3://<bucket>/<prefix>/", "index": {"namespace": [...], "name":
//! "..."}}]`, see `Routes::from_json`), optional `PARQDB_REFRESH_CONCURRENCY` (indexes
//! refreshed at once, 1 to 64, default 4). A bad value is reported to `/init/error` as
//! `INVALID_CONFIGURATION` before the first poll.

use std::process::ExitCode;

use parqdb_catalog::lambda::{Invocations, handler};
use parqdb_catalog::publish::Publisher;
use parqdb_catalog::refresh::{PlaceholderBuilder, RefreshRunner, Routes};
use parqdb_catalog::{Error, ErrorKind};

/// The variable holding the routes.
const ROUTES_VARIABLE: &str = "PARQDB_REFRESH_ROUTES";
/// The variable holding how many indexes one batch refreshes at once.
const CONCURRENCY_VARIABLE: &str = "PARQDB_REFRESH_CONCURRENCY";

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    // Once per container: logging, configuration, catalog (clients and metadata cache).
    let runner = match parqdb_catalog_functions::init_with(|catalog| {
        let routes = std::env::var(ROUTES_VARIABLE).map_err(|_| {
            Error::new(
                ErrorKind::Configuration,
                format!("{ROUTES_VARIABLE} is not set: which source tables refresh which indexes"),
            )
        })?;
        let runner = RefreshRunner::new(
            Publisher::for_catalog(&catalog),
            Routes::from_json(&routes)?,
            PlaceholderBuilder,
        );
        Ok(match std::env::var(CONCURRENCY_VARIABLE) {
            Err(_) => runner,
            Ok(value) => match value.parse::<usize>() {
                Ok(concurrency @ 1..=64) => runner.concurrency(concurrency),
                _ => {
                    return Err(Error::new(
                        ErrorKind::Configuration,
                        format!("{CONCURRENCY_VARIABLE} `{value}` is not a number from 1 to 64"),
                    ));
                }
            },
        })
    })
    .await
    {
        Ok(runner) => runner,
        Err(code) => return code,
    };
    let invocations = Invocations::new("refresh");
    let result = parqdb_catalog_functions::run(|event| {
        invocations.serve(event, |event| handler::refresh(&runner, event))
    })
    .await;
    parqdb_catalog_functions::finish(result)
}
