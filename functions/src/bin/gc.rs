//! The `gc` Lambda function: one step of a garbage-collection run per invocation (the
//! `gc-cycle` state machine's events), or as much of a whole run as fits for any other
//! event (an EventBridge scheduled event, `{}` for a manual run).
//!
//! Events: `{"step": "plan"}`, `{"step": "scan", "run": "<id>", "partition": 0}`,
//! `{"step": "verify", "run": ...}`, `{"step": "delete", ...}`, `{"step": "finish", ...}`
//! (see `parqdb_catalog::gc::GcStep`). Environment: `PARQDB_WAREHOUSE`, `PARQDB_CATALOG`
//! (the catalog) and the `PARQDB_GC_*` limits (`GcConfig::from_env`); a bad value is
//! reported to `/init/error` as `INVALID_CONFIGURATION` before the first poll. Each
//! invocation stops at a page boundary before its deadline (its progress checkpointed)
//! and answers with the step's report and `done`; a failure's `errorType` is the error
//! code (`INVALID_CONFIGURATION` for a warehouse this catalog does not own, ...). A step
//! that finds another run's lease answers `"status": "skipped"`.

use std::process::ExitCode;

use parqdb_catalog::gc::{GarbageCollector, GcConfig};
use parqdb_catalog::lambda::{Invocations, handler};

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
    let result = parqdb_catalog_functions::run(|event| {
        invocations.serve(event, |event| handler::gc(&collector, event))
    })
    .await;
    parqdb_catalog_functions::finish(result)
}
