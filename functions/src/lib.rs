//! Shared start-up of the ParqDB catalog's Lambda functions.
//!
//! Every function binary in `src/bin/` does the same three things: [`init`] (or
//! [`init_with`]) once per container (JSON logging, the Lambda environment, the catalog
//! configuration, the catalog with its clients and metadata cache), then
//! `lambda_runtime::run` over the shared handler of `parqdb_catalog::lambda`, then
//! [`finish`] to turn the runtime's result into the exit status. A bad configuration is
//! logged, reported to the Runtime API's `/init/error` endpoint with `errorType`
//! `INVALID_CONFIGURATION`, and ends the process with a non-zero status before it polls
//! for an event.
//!
//! The store clients are bounded below the function's timeout, which Lambda does not
//! expose: the template passes it as `PARQDB_FUNCTION_TIMEOUT` (seconds; 30, the
//! template's default, when unset). See [`store_timeouts`].
#![deny(missing_docs)]

use std::process::ExitCode;
use std::time::Duration;

use lambda_runtime_api_client::body::Body;
use lambda_runtime_api_client::{PooledClient, build_request};
use parqdb_catalog::catalog::Catalog;
use parqdb_catalog::config::CatalogConfig;
use parqdb_catalog::lambda::deadline::DEFAULT_MARGIN;
use parqdb_catalog::store::timeouts::StoreTimeouts;
use parqdb_catalog::{Error, ErrorKind};

/// Variables the Lambda service sets and the runtime client needs (it panics without
/// them, so they are checked first).
const RUNTIME_VARIABLES: [&str; 4] = [
    "AWS_LAMBDA_RUNTIME_API",
    "AWS_LAMBDA_FUNCTION_NAME",
    "AWS_LAMBDA_FUNCTION_MEMORY_SIZE",
    "AWS_LAMBDA_FUNCTION_VERSION",
];

/// How long to try reporting an init error before exiting anyway.
const REPORT_TIMEOUT: Duration = Duration::from_secs(2);

/// The variable carrying the function's timeout in seconds (Lambda does not expose it).
pub const FUNCTION_TIMEOUT_VARIABLE: &str = "PARQDB_FUNCTION_TIMEOUT";

/// The function timeout assumed when [`FUNCTION_TIMEOUT_VARIABLE`] is unset: the
/// template's default `FunctionTimeout`.
pub const DEFAULT_FUNCTION_TIMEOUT: Duration = Duration::from_secs(30);

/// Initialise a function once per container: logging, then the validated environment
/// and catalog configuration (`PARQDB_WAREHOUSE`, `PARQDB_CATALOG`,
/// `PARQDB_FUNCTION_TIMEOUT`), then the catalog. On a bad configuration, log it, report
/// it to `/init/error` and return the exit code.
pub async fn init() -> Result<Catalog, ExitCode> {
    init_with(Ok).await
}

/// [`init`], then `build` what the function serves from the catalog (the garbage
/// collector, ...). An error of `build` is a configuration error too: reported to
/// `/init/error` as `INVALID_CONFIGURATION`, before polling.
pub async fn init_with<T>(
    build: impl FnOnce(Catalog) -> parqdb_catalog::Result<T>,
) -> Result<T, ExitCode> {
    parqdb_catalog::lambda::logging::init();
    let built = match check_runtime_environment().and_then(|()| store_timeouts()) {
        Ok(timeouts) => match CatalogConfig::from_env()
            .with_store_timeouts(timeouts)
            .build()
            .await
        {
            Ok(catalog) => {
                tracing::info!(
                    warehouse = catalog.warehouse().root(),
                    store = %catalog.store().describe(),
                    ?timeouts,
                    "catalog ready"
                );
                build(catalog).map_err(as_configuration_error)
            }
            Err(err) => Err(err),
        },
        Err(err) => Err(err),
    };
    match built {
        Ok(built) => Ok(built),
        Err(err) => {
            tracing::error!(
                error_type = err.code(),
                error = %err.full_message(),
                "invalid configuration; exiting before polling for events"
            );
            report_init_error(err).await;
            Err(ExitCode::FAILURE)
        }
    }
}

/// The bounds of every store request: [`StoreTimeouts::within`] the function's timeout
/// ([`FUNCTION_TIMEOUT_VARIABLE`], default [`DEFAULT_FUNCTION_TIMEOUT`]) minus the deadline
/// margin. A value that is not a whole number of seconds between 1 and 900 (Lambda's
/// range) is `INVALID_CONFIGURATION`.
pub fn store_timeouts() -> parqdb_catalog::Result<StoreTimeouts> {
    let timeout = match std::env::var(FUNCTION_TIMEOUT_VARIABLE) {
        Err(_) => DEFAULT_FUNCTION_TIMEOUT,
        Ok(value) => match value.parse::<u64>() {
            Ok(seconds @ 1..=900) => Duration::from_secs(seconds),
            _ => {
                return Err(Error::new(
                    ErrorKind::Configuration,
                    format!(
                        "{FUNCTION_TIMEOUT_VARIABLE} `{value}` is not the function's timeout in whole seconds (1 to 900)"
                    ),
                ));
            }
        },
    };
    Ok(StoreTimeouts::within(
        timeout.saturating_sub(DEFAULT_MARGIN),
    ))
}

/// Errors found while building what a function serves are configuration errors, whatever
/// their kind (the message keeps the original code).
fn as_configuration_error(err: Error) -> Error {
    if err.kind() == ErrorKind::Configuration {
        return err;
    }
    Error::new(
        ErrorKind::Configuration,
        format!("{} ({})", err.full_message(), err.code()),
    )
}

/// The exit status for the runtime's result (it only returns on a Runtime API failure).
pub fn finish(result: Result<(), lambda_runtime::Error>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            tracing::error!(error = %err, "the Lambda runtime stopped");
            ExitCode::FAILURE
        }
    }
}

fn check_runtime_environment() -> parqdb_catalog::Result<()> {
    let invalid = |message: String| Error::new(ErrorKind::Configuration, message);
    for name in RUNTIME_VARIABLES {
        if std::env::var(name).map_or(true, |value| value.is_empty()) {
            return Err(invalid(format!(
                "{name} is not set; the function must run inside the Lambda runtime environment"
            )));
        }
    }
    let memory = std::env::var("AWS_LAMBDA_FUNCTION_MEMORY_SIZE").unwrap_or_default();
    if memory.parse::<i32>().is_err() {
        return Err(invalid(format!(
            "AWS_LAMBDA_FUNCTION_MEMORY_SIZE `{memory}` is not a number"
        )));
    }
    let api = std::env::var("AWS_LAMBDA_RUNTIME_API").unwrap_or_default();
    if http::Uri::try_from(api.as_str()).is_err() {
        return Err(invalid(format!(
            "AWS_LAMBDA_RUNTIME_API `{api}` is not a host:port"
        )));
    }
    Ok(())
}

/// Tell the Runtime API why initialisation failed (best effort: logged if it fails).
async fn report_init_error(err: Error) {
    let Some(endpoint) = std::env::var("AWS_LAMBDA_RUNTIME_API")
        .ok()
        .and_then(|api| http::Uri::try_from(format!("http://{api}")).ok())
    else {
        return;
    };
    let diagnostic = lambda_runtime::Diagnostic::from(err);
    let body = serde_json::json!({
        "errorType": diagnostic.error_type,
        "errorMessage": diagnostic.error_message,
    });
    let request = build_request()
        .method(http::Method::POST)
        .uri("/2018-06-01/runtime/init/error")
        .header("lambda-runtime-function-error-type", "Runtime.InitError")
        .body(Body::from(body.to_string()));
    let request = match request {
        Ok(request) => request,
        Err(err) => {
            tracing::warn!(error = %err, "cannot build the init error report");
            return;
        }
    };
    let client = PooledClient::builder().with_endpoint(endpoint).build();
    match tokio::time::timeout(REPORT_TIMEOUT, client.call(request)).await {
        Ok(Ok(response)) if response.status().is_success() => {}
        Ok(Ok(response)) => {
            tracing::warn!(status = %response.status(), "the Runtime API refused the init error")
        }
        Ok(Err(err)) => tracing::warn!(error = %err, "cannot report the init error"),
        Err(_) => tracing::warn!("the init error report timed out"),
    }
}
