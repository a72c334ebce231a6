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
//! table), unless `PARQDB_REFRESH_BUILDER_FUNCTION` names a Lambda function (name or ARN):
//! then every build is one synchronous invocation of it under the build contract
//! (`parqdb_catalog::refresh::contract`, version `parqdb.refresh.build/1`) through
//! [`LambdaBuilder`], bounded by `PARQDB_REFRESH_BUILDER_TIMEOUT`. A build that fails or
//! times out fails its index: its messages are reported in `batchItemFailures` and SQS
//! delivers them again.
//!
//! Environment: `PARQDB_WAREHOUSE`, `PARQDB_CATALOG` (the catalog), `PARQDB_REFRESH_ROUTES`
//! (JSON: `[{"source": "s3://<bucket>/<prefix>/", "index": {"namespace": [...], "name":
//! "..."}}]`, see `Routes::from_json`), optional `PARQDB_REFRESH_CONCURRENCY` (indexes
//! refreshed at once, 1 to 64, default 4), `PARQDB_REFRESH_CLOCK_SKEW` (the ordering
//! rule's clock-skew allowance, a duration such as `2s`, at most 60 s, default 2 s),
//! `PARQDB_REFRESH_BUILDER_FUNCTION` (the builder function) and
//! `PARQDB_REFRESH_BUILDER_TIMEOUT` (a duration, at least 1 s and at most the function's
//! timeout less the deadline margin; default three quarters of the function's timeout).
//! A bad value is reported to `/init/error` as `INVALID_CONFIGURATION` before the first
//! poll.

use std::process::ExitCode;

use parqdb_catalog::Publisher;
use parqdb_catalog::lambda::{Invocations, handler};
use std::time::Duration;

use parqdb_catalog::lambda::deadline::DEFAULT_MARGIN;
use parqdb_catalog::refresh::{
    DEFAULT_CLOCK_SKEW, IndexBuilder, LambdaBuilder, PlaceholderBuilder, RefreshRunner, Routes,
};
use parqdb_catalog::{Error, ErrorKind};

/// The variable holding the routes.
const ROUTES_VARIABLE: &str = "PARQDB_REFRESH_ROUTES";
/// The variable holding how many indexes one batch refreshes at once.
const CONCURRENCY_VARIABLE: &str = "PARQDB_REFRESH_CONCURRENCY";
/// The variable holding the clock-skew allowance.
const CLOCK_SKEW_VARIABLE: &str = "PARQDB_REFRESH_CLOCK_SKEW";
/// The variable naming the builder function.
const BUILDER_FUNCTION_VARIABLE: &str = "PARQDB_REFRESH_BUILDER_FUNCTION";
/// The variable holding the builder timeout.
const BUILDER_TIMEOUT_VARIABLE: &str = "PARQDB_REFRESH_BUILDER_TIMEOUT";

fn configuration(message: String) -> Error {
    Error::new(ErrorKind::Configuration, message)
}

/// A duration variable (humantime syntax: `2s`, `500ms`, `4m`), if set.
fn duration(name: &str) -> Result<Option<Duration>, Error> {
    match std::env::var(name) {
        Err(_) => Ok(None),
        Ok(value) => humantime::parse_duration(&value)
            .map(Some)
            .map_err(|err| configuration(format!("{name} `{value}` is not a duration: {err}"))),
    }
}

/// The builder: the function of `PARQDB_REFRESH_BUILDER_FUNCTION`, else the placeholder.
fn builder() -> Result<Box<dyn IndexBuilder>, Error> {
    let Ok(function) = std::env::var(BUILDER_FUNCTION_VARIABLE) else {
        return Ok(Box::new(PlaceholderBuilder));
    };
    let available = parqdb_catalog_functions::function_timeout()?.saturating_sub(DEFAULT_MARGIN);
    let timeout = match duration(BUILDER_TIMEOUT_VARIABLE)? {
        None => available * 3 / 4,
        Some(timeout) if timeout >= Duration::from_secs(1) && timeout <= available => timeout,
        Some(timeout) => {
            return Err(configuration(format!(
                "{BUILDER_TIMEOUT_VARIABLE} {} is not between 1 s and the function's timeout less the deadline margin ({})",
                humantime::format_duration(timeout),
                humantime::format_duration(available)
            )));
        }
    };
    let builder = LambdaBuilder::from_env(&function, timeout)?;
    tracing::info!(
        function = builder.function(),
        timeout = %humantime::format_duration(timeout),
        "builds invoke the builder function"
    );
    Ok(Box::new(builder))
}

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
            builder()?,
        )
        .with_clock_skew(duration(CLOCK_SKEW_VARIABLE)?.unwrap_or(DEFAULT_CLOCK_SKEW))?;
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
