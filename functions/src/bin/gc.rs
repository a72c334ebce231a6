//! The `gc` Lambda function: one garbage-collection run per EventBridge scheduled event.
//!
//! Event: the raw scheduled event (any JSON object; `{}` for a manual run). Environment:
//! `PARQDB_WAREHOUSE`, `PARQDB_CATALOG` (the catalog), `PARQDB_GC_RETENTION`,
//! `PARQDB_GC_GRACE` (durations such as `7d`, `1h`), optional `PARQDB_GC_DRY_RUN` and
//! `PARQDB_GC_FORCE`. Returns the GC report as JSON; a failure's `errorType` is the error
//! code (`INVALID_CONFIGURATION` for a warehouse this catalog does not own, ...). A run
//! skipped because another run holds the lease returns `"status": "skipped"`.

use std::process::ExitCode;

use lambda_runtime::{Diagnostic, LambdaEvent, service_fn};
use parqdb_catalog::gc::{GarbageCollector, GcConfig, run_scheduled};
use serde_json::Value;

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    // Once per container: logging, configuration, catalog (clients), collector.
    let catalog = match parqdb_catalog_functions::init().await {
        Ok(catalog) => catalog,
        Err(code) => return code,
    };
    let collector = match GcConfig::from_env()
        .and_then(|config| GarbageCollector::new(catalog, config))
    {
        Ok(collector) => collector,
        Err(err) => {
            tracing::error!(error_type = err.code(), error = %err.full_message(), "invalid gc configuration");
            return ExitCode::FAILURE;
        }
    };
    let result = lambda_runtime::run(service_fn(|event: LambdaEvent<Value>| {
        let collector = &collector;
        async move {
            run_scheduled(collector, event.payload)
                .await
                .map_err(Diagnostic::from)
        }
    }))
    .await;
    parqdb_catalog_functions::finish(result)
}
