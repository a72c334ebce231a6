//! The `gc` Lambda function: one garbage-collection run per EventBridge scheduled event.
//!
//! Event: the raw scheduled event (any JSON object; `{}` for a manual run). Environment:
//! `PARQDB_WAREHOUSE`, `PARQDB_CATALOG` (the catalog), `PARQDB_GC_RETENTION`,
//! `PARQDB_GC_GRACE` (durations such as `7d`, `1h`), optional `PARQDB_GC_DRY_RUN` and
//! `PARQDB_GC_FORCE`; a bad value is reported to `/init/error` as `INVALID_CONFIGURATION`
//! before the first poll. Returns the GC report as JSON; a failure's `errorType` is the
//! error code (`INVALID_CONFIGURATION` for a warehouse this catalog does not own, ...). A
//! run skipped because another run holds the lease returns `"status": "skipped"`.

use std::process::ExitCode;

use lambda_runtime::{LambdaEvent, service_fn};
use parqdb_catalog::gc::{GarbageCollector, GcConfig};
use parqdb_catalog::lambda::{Invocations, RawEvent, handler};

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    // Once per container: logging, configuration, catalog (clients), collector.
    let collector = match parqdb_catalog_functions::init_with(|catalog| {
        GarbageCollector::new(catalog, GcConfig::from_env()?)
    })
    .await
    {
        Ok(collector) => collector,
        Err(code) => return code,
    };
    let invocations = Invocations::new("gc");
    let result = lambda_runtime::run(service_fn(|event: LambdaEvent<RawEvent>| {
        invocations.serve(event, |event| handler::gc(&collector, event))
    }))
    .await;
    parqdb_catalog_functions::finish(result)
}
