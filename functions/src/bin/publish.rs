//! The `publish` Lambda function: idempotent successor publication for refresh jobs,
//! with the publisher's bounded, jittered retries on `COMMIT_CONFLICT`.
//!
//! Event, under the contract of every function (`functions/README.md`: unknown fields,
//! duplicate keys and trailing data are `INVALID_REQUEST`, at most 256 KiB):
//! `{"identifier": {"namespace": [...], "name": "..."}, "idempotency-key": "...",
//! "snapshot": {...snapshot contents...}}`.
//!
//! Response: `{"metadata-location", "snapshot-id", "sequence-number", "attempts",
//! "already-published"}`. A redelivered event (same `idempotency-key`, while its snapshot
//! is retained) returns the first publication with `"already-published": true`.
//!
//! Errors are Lambda errors whose `errorType` is the error code (`INDEX_NOT_FOUND`,
//! `COMMIT_CONFLICT` after the last attempt, `COMMIT_STATE_UNKNOWN`, ...); see
//! `parqdb_catalog::publish::request`. Environment: `PARQDB_WAREHOUSE`, `PARQDB_CATALOG`.

use std::process::ExitCode;

use parqdb_catalog::Publisher;
use parqdb_catalog::lambda::{Invocations, handler};

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    // Once per container: logging, configuration, catalog (clients and metadata cache).
    let publisher =
        match parqdb_catalog_functions::init_with(|catalog| Ok(Publisher::for_catalog(&catalog)))
            .await
        {
            Ok(publisher) => publisher,
            Err(code) => return code,
        };
    let invocations = Invocations::new("publish");
    let result = parqdb_catalog_functions::run(|event| {
        invocations.serve(event, |event| handler::publish(&publisher, event))
    })
    .await;
    parqdb_catalog_functions::finish(result)
}
