//! Shared start-up of the ParqDB catalog's Lambda functions.
//!
//! Every function binary in `src/bin/` does the same three things: [`init`] (or
//! [`init_with`]) once per container (JSON logging, the Lambda environment, the catalog
//! configuration, the catalog with its clients and metadata cache), then [`run`] over the
//! shared handler of `parqdb_catalog::lambda` (the `lambda_runtime` loop, handing the
//! handler each invocation's whole body), then [`finish`] to turn the runtime's result
//! into the exit status. A bad configuration is
//! logged, reported to the Runtime API's `/init/error` endpoint with `errorType`
//! `INVALID_CONFIGURATION`, and ends the process with a non-zero status before it polls
//! for an event.
//!
//! The store clients are bounded below the function's timeout, which Lambda does not
//! expose: the template passes it as `PARQDB_FUNCTION_TIMEOUT` (seconds; 30, the
//! template's default, when unset). See [`store_timeouts`].
#![deny(missing_docs)]

use std::borrow::Cow;
use std::future::Future;
use std::process::ExitCode;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use lambda_runtime::layers::TracingLayer;
use lambda_runtime::tower::{Service, layer::layer_fn};
use lambda_runtime::{LambdaEvent, LambdaInvocation, Runtime, service_fn};
use lambda_runtime_api_client::body::Body;
use lambda_runtime_api_client::{PooledClient, build_request};
use parqdb_catalog::Catalog;
use parqdb_catalog::CatalogConfig;
use parqdb_catalog::lambda::RawEvent;
use parqdb_catalog::lambda::deadline::DEFAULT_MARGIN;
use parqdb_catalog::store::StoreTimeouts;
use parqdb_catalog::{Error, ErrorKind};
use serde::{Deserialize, Serialize};

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
    Ok(StoreTimeouts::within(
        function_timeout()?.saturating_sub(DEFAULT_MARGIN),
    ))
}

/// The function's timeout: [`FUNCTION_TIMEOUT_VARIABLE`], default
/// [`DEFAULT_FUNCTION_TIMEOUT`]; `INVALID_CONFIGURATION` unless a whole number of seconds
/// between 1 and 900 (Lambda's range).
pub fn function_timeout() -> parqdb_catalog::Result<Duration> {
    match std::env::var(FUNCTION_TIMEOUT_VARIABLE) {
        Err(_) => Ok(DEFAULT_FUNCTION_TIMEOUT),
        Ok(value) => match value.parse::<u64>() {
            Ok(seconds @ 1..=900) => Ok(Duration::from_secs(seconds)),
            _ => Err(Error::new(
                ErrorKind::Configuration,
                format!(
                    "{FUNCTION_TIMEOUT_VARIABLE} `{value}` is not the function's timeout in whole seconds (1 to 900)"
                ),
            )),
        },
    }
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

/// Serve `handler` until the Runtime API fails: `lambda_runtime::run` (with its tracing
/// layer), except that the handler gets each invocation's whole body as an event
/// ([`RawEvent::from_body`]). The runtime alone would read the body's first JSON value and
/// drop what follows; this way trailing data is `INVALID_REQUEST` like malformed JSON and
/// duplicate keys, in every function.
pub async fn run<F, Fut, R>(handler: F) -> Result<(), lambda_runtime::Error>
where
    F: Fn(LambdaEvent<RawEvent>) -> Fut,
    Fut: Future<Output = parqdb_catalog::Result<R>>,
    R: Serialize,
{
    let service = service_fn(|event: LambdaEvent<Frame<'static>>| {
        let LambdaEvent { payload, context } = event;
        handler(LambdaEvent::new(payload.into_event(), context))
    });
    Runtime::new(service)
        .layer(TracingLayer::new())
        .layer(layer_fn(WholeBody))
        .run()
        .await
}

/// An invocation body, framed as JSON by [`WholeBody`] so that the runtime's deserializer
/// hands it over untouched: a string if it is UTF-8, its bytes otherwise.
#[derive(Debug, Serialize, Deserialize)]
enum Frame<'a> {
    Text(Cow<'a, str>),
    Bytes(Cow<'a, [u8]>),
}

impl Frame<'_> {
    /// `body` framed as JSON. A string or a list of bytes always serializes; were it ever
    /// refused (`None`), the body would go on unframed and the runtime would refuse it with
    /// its own error.
    fn encode(body: &[u8]) -> Option<Bytes> {
        let frame = match std::str::from_utf8(body) {
            Ok(text) => Frame::Text(Cow::Borrowed(text)),
            Err(_) => Frame::Bytes(Cow::Borrowed(body)),
        };
        serde_json::to_vec(&frame).ok().map(Bytes::from)
    }

    /// The event the framed body holds.
    fn into_event(self) -> RawEvent {
        match self {
            Frame::Text(text) => RawEvent::from_body(text.as_bytes()),
            Frame::Bytes(bytes) => RawEvent::from_body(&bytes),
        }
    }
}

/// The runtime layer that frames each invocation's body ([`Frame`]) before the runtime
/// deserializes it.
struct WholeBody<S>(S);

impl<S: Service<LambdaInvocation>> Service<LambdaInvocation> for WholeBody<S> {
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, mut invocation: LambdaInvocation) -> S::Future {
        if let Some(framed) = Frame::encode(&invocation.body) {
            invocation.body = framed;
        }
        self.0.call(invocation)
    }
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

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// What the handler gets for `body`: framed by the layer, then deserialized the way the
    /// runtime deserializes every payload.
    fn through_the_layer(body: &[u8]) -> parqdb_catalog::Result<serde_json::Value> {
        let framed = Frame::encode(body).expect("frames");
        let frame: Frame<'static> = serde_json::from_slice(&framed).expect("a frame");
        frame.into_event().into_value()
    }

    #[test]
    fn handlers_get_the_whole_body() {
        let event = json!({"identifier": {"namespace": ["a"], "name": "x\"y"}});
        let body = serde_json::to_vec(&event).expect("json");
        assert_eq!(through_the_layer(&body).expect("valid"), event);
        for (body, mentions) in [
            (
                &br#"{"identifier": {}} trailing"#[..],
                "trailing characters",
            ),
            (
                br#"{"identifier": {}}{"identifier": {}}"#,
                "trailing characters",
            ),
            (br#"{"a": 1, "a": 2}"#, "duplicate key"),
            (&[0xff, 0xfe, b'{'], "not valid JSON"),
            (b"{\"a\": \"\xff\"}", "not valid JSON"),
            (b"", "not valid JSON"),
        ] {
            let err = through_the_layer(body).expect_err("refused");
            assert_eq!(err.code(), "INVALID_REQUEST");
            assert!(err.message().contains(mentions), "{mentions}: {err}");
        }
    }
}
