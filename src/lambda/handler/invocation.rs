//! What every invocation of every function goes through: the deadline, a span carrying
//! the request id, one outcome log line and one EMF metric; and the [`Handler`] of the
//! catalog operations.

use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use lambda_runtime::LambdaEvent;
use serde_json::Value;
use tracing::Instrument;

use super::{Response, dispatch};
use crate::catalog::IndexCatalog;
use crate::clock::{Clock, SystemClock};
use crate::error::{ErrorKind, Result};
use crate::lambda::Operation;
use crate::lambda::deadline::Deadline;
use crate::lambda::event::RawEvent;
use crate::lambda::metrics::{Metrics, Outcome};

/// What every invocation of one function goes through, whatever the function does: the
/// raw event is parsed (`INVALID_REQUEST` if it is not JSON), the work is bounded by the
/// invocation's deadline ([`Deadline`]) and observed ([`observe`]: span, outcome log line,
/// EMF metric).
///
/// ```no_run
/// use lambda_runtime::{LambdaEvent, service_fn};
/// use parqdb_catalog::CatalogConfig;
/// use parqdb_catalog::lambda::{Invocations, RawEvent, handler};
/// use parqdb_catalog::Publisher;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), lambda_runtime::Error> {
/// let catalog = CatalogConfig::from_env().build().await?;
/// let publisher = Publisher::for_catalog(&catalog);
/// let invocations = Invocations::new("publish");
/// lambda_runtime::run(service_fn(|event: LambdaEvent<RawEvent>| {
///     invocations.serve(event, |event| handler::publish(&publisher, event))
/// }))
/// .await
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct Invocations {
    name: &'static str,
    metrics: Metrics,
    deadline: Deadline,
    clock: Arc<dyn Clock>,
}

impl Invocations {
    /// The invocations of the function `name` (the `Operation` metric dimension), with
    /// metrics on stdout, the default [`Deadline`] and the system clock.
    pub fn new(name: &'static str) -> Self {
        Invocations {
            name,
            metrics: Metrics::stdout(),
            deadline: Deadline::default(),
            clock: Arc::new(SystemClock),
        }
    }

    /// Record metrics with `metrics` instead.
    pub fn with_metrics(mut self, metrics: Metrics) -> Self {
        self.metrics = metrics;
        self
    }

    /// Bound invocations by `deadline` instead.
    pub fn with_deadline(mut self, deadline: Deadline) -> Self {
        self.deadline = deadline;
        self
    }

    /// Read the time from `clock` instead (to compute the time left before a deadline).
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// The function's name.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// Serve one invocation with `handler`. Errors keep their kind; the runtime turns them
    /// into function errors whose `errorType` is the code.
    pub async fn serve<T, F, Fut>(&self, event: LambdaEvent<RawEvent>, handler: F) -> Result<T>
    where
        F: FnOnce(LambdaEvent<Value>) -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        let LambdaEvent { payload, context } = event;
        let request_id = context.request_id.clone();
        let trace_id = context.xray_trace_id.clone();
        let deadline_ms = context.deadline;
        let now_ms = self.clock.now_ms();
        observe(
            self.name,
            &request_id,
            trace_id.as_deref(),
            &self.metrics,
            self.deadline.bound(self.name, deadline_ms, now_ms, async {
                handler(LambdaEvent::new(payload.into_value()?, context)).await
            }),
        )
        .await
    }
}

/// One function's handler: an operation over a catalog built once per container.
///
/// ```no_run
/// use std::sync::Arc;
/// use lambda_runtime::{LambdaEvent, service_fn};
/// use parqdb_catalog::CatalogConfig;
/// use parqdb_catalog::lambda::{Handler, Operation, RawEvent};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), lambda_runtime::Error> {
/// let catalog = CatalogConfig::from_env().build().await?;
/// let handler = Handler::new(Operation::Load, Arc::new(catalog));
/// lambda_runtime::run(service_fn(|event: LambdaEvent<RawEvent>| handler.invoke(event))).await
/// # }
/// ```
#[derive(Clone)]
pub struct Handler {
    operation: Operation,
    catalog: Arc<dyn IndexCatalog>,
    invocations: Invocations,
}

impl std::fmt::Debug for Handler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Handler")
            .field("operation", &self.operation)
            .field("invocations", &self.invocations)
            .finish_non_exhaustive()
    }
}

impl Handler {
    /// A handler for `operation` over `catalog`, printing metrics to stdout.
    pub fn new(operation: Operation, catalog: Arc<dyn IndexCatalog>) -> Self {
        Handler {
            operation,
            catalog,
            invocations: Invocations::new(operation.name()),
        }
    }

    /// Record metrics with `metrics` instead.
    pub fn with_metrics(mut self, metrics: Metrics) -> Self {
        self.invocations = self.invocations.with_metrics(metrics);
        self
    }

    /// Bound invocations by `deadline` instead of the default.
    pub fn with_deadline(mut self, deadline: Deadline) -> Self {
        self.invocations = self.invocations.with_deadline(deadline);
        self
    }

    /// The operation this handler serves.
    pub fn operation(&self) -> Operation {
        self.operation
    }

    /// Serve one invocation (see [`Invocations::serve`]). Errors keep their kind; the
    /// runtime turns them into function errors whose `errorType` is the spec code.
    pub async fn invoke(&self, event: LambdaEvent<RawEvent>) -> Result<Response> {
        self.invocations
            .serve(event, |event| {
                dispatch(self.operation, self.catalog.as_ref(), event)
            })
            .await
    }
}

/// Run one invocation of the function `operation` inside a span that carries the request
/// id and the X-Ray trace id (the invocation's `Lambda-Runtime-Trace-Id`, which Lambda
/// also exports as `_X_AMZN_TRACE_ID`; with `Tracing: Active` it names the trace of the
/// invocation), so every log line names both, then log its outcome and record its latency
/// as an EMF metric. [`Invocations::serve`] calls it for every function.
pub async fn observe<T>(
    operation: &'static str,
    request_id: &str,
    trace_id: Option<&str>,
    metrics: &Metrics,
    invocation: impl Future<Output = Result<T>>,
) -> Result<T> {
    let span = tracing::info_span!(
        "invocation",
        request_id = %request_id,
        trace_id = trace_id.unwrap_or_default(),
        operation
    );
    async {
        let started_ms = metrics.now_ms();
        let started = Instant::now();
        let result = invocation.await;
        let latency_ms = started.elapsed().as_secs_f64() * 1000.0;
        let outcome = Outcome::of(&result);
        match &result {
            Ok(_) => tracing::info!(outcome = %outcome, latency_ms, "invocation succeeded"),
            Err(err) if is_server_side(err.kind()) => tracing::error!(
                outcome = %outcome,
                latency_ms,
                error = %err.full_message(),
                "invocation failed"
            ),
            Err(err) => tracing::warn!(
                outcome = %outcome,
                latency_ms,
                error = %err.full_message(),
                "invocation rejected"
            ),
        }
        metrics.record_at(started_ms, operation, outcome, latency_ms, request_id);
        result
    }
    .instrument(span)
    .await
}

/// Failures of the catalog or its store rather than of the request.
fn is_server_side(kind: ErrorKind) -> bool {
    matches!(
        kind,
        ErrorKind::CommitStateUnknown
            | ErrorKind::StoreUnavailable
            | ErrorKind::StoreRefused
            | ErrorKind::StoreUnsupported
            | ErrorKind::CorruptRecord
            | ErrorKind::Configuration
    )
}

#[cfg(test)]
mod tests {
    use lambda_runtime::Context;
    use serde_json::json;

    use super::*;
    use crate::catalog::Catalog;
    use crate::store::memory::MemoryStore;
    use crate::warehouse::Warehouse;

    #[tokio::test]
    async fn invoke_records_one_metric_per_invocation() {
        let warehouse = Warehouse::in_memory("memory://lambda/wh").expect("warehouse");
        let catalog = Catalog::builder(Arc::new(MemoryStore::new()), warehouse).build();
        let (metrics, lines) = Metrics::in_memory();
        let handler = Handler::new(Operation::Load, Arc::new(catalog)).with_metrics(metrics);
        let mut context = Context::default();
        context.request_id = "req-1".into();
        let event = json!({"identifier": {"namespace": ["docs"], "name": "x"}});
        let err = handler
            .invoke(LambdaEvent::new(RawEvent::from(event), context.clone()))
            .await
            .expect_err("absent");
        assert_eq!(err.code(), "INDEX_NOT_FOUND");
        let raw = crate::lambda::event::tests::as_the_runtime_would(b"{not json");
        let err = handler
            .invoke(LambdaEvent::new(raw, context))
            .await
            .expect_err("malformed");
        assert_eq!(err.code(), "INVALID_REQUEST");

        let lines = lines.lock().expect("lock").clone();
        assert_eq!(lines.len(), 2);
        let first: Value = serde_json::from_str(&lines[0]).expect("json");
        assert_eq!(first["Operation"], "load");
        assert_eq!(first["Outcome"], "INDEX_NOT_FOUND");
        assert_eq!(first["RequestId"], "req-1");
        let second: Value = serde_json::from_str(&lines[1]).expect("json");
        assert_eq!(second["Outcome"], "INVALID_REQUEST");
    }

    /// The log lines of an invocation, as the functions write them (JSON, the current
    /// span's fields).
    #[derive(Clone, Default)]
    struct Captured(Arc<std::sync::Mutex<Vec<u8>>>);

    impl std::io::Write for Captured {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().expect("lock").extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[tokio::test]
    async fn every_log_line_names_the_request_and_the_trace() {
        // `tracing` caches which callsites are of interest process-wide, and another test's
        // thread may recompute that cache while this one's subscriber is in place (no line
        // was captured once in a full run): the test runs again in a process of its own.
        const ALONE: &str = "PARQDB_TEST_TRACING_ALONE";
        if std::env::var_os(ALONE).is_none() {
            let status = std::process::Command::new(std::env::current_exe().expect("test binary"))
                .args([
                    "--exact",
                    "lambda::handler::invocation::tests::every_log_line_names_the_request_and_the_trace",
                    "--test-threads=1",
                ])
                .env(ALONE, "1")
                .status()
                .expect("the test binary runs");
            assert!(status.success(), "the test failed in a process of its own");
            return;
        }
        let captured = Captured::default();
        let writer = captured.clone();
        let subscriber = tracing_subscriber::fmt()
            .json()
            .with_current_span(true)
            .with_writer(move || writer.clone())
            .finish();
        let _guard = tracing::subscriber::set_default(subscriber);
        // Another test's thread may have registered these callsites while no subscriber
        // was interested (the interest is cached process-wide): ask again.
        tracing::callsite::rebuild_interest_cache();
        let warehouse = Warehouse::in_memory("memory://lambda/trace").expect("warehouse");
        let catalog = Catalog::builder(Arc::new(MemoryStore::new()), warehouse).build();
        let (metrics, _) = Metrics::in_memory();
        let handler = Handler::new(Operation::Load, Arc::new(catalog)).with_metrics(metrics);
        let mut context = Context::default();
        context.request_id = "req-7".into();
        context.xray_trace_id = Some("Root=1-5759e988-bd862e3fe1be46a994272793;Sampled=1".into());
        let event = json!({"identifier": {"namespace": ["docs"], "name": "x"}});
        handler
            .invoke(LambdaEvent::new(RawEvent::from(event), context))
            .await
            .expect_err("absent");
        let text = String::from_utf8(captured.0.lock().expect("lock").clone()).expect("UTF-8");
        let lines: Vec<Value> = text
            .lines()
            .map(|line| serde_json::from_str(line).expect("a JSON line"))
            .collect();
        assert!(!lines.is_empty());
        for line in lines {
            assert_eq!(line["span"]["request_id"], "req-7", "{line}");
            assert_eq!(
                line["span"]["trace_id"], "Root=1-5759e988-bd862e3fe1be46a994272793;Sampled=1",
                "{line}"
            );
        }
    }
}
