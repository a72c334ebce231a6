//! The `publish` Lambda function: idempotent successor publication for refresh jobs,
//! with the publisher's bounded, jittered retries on `COMMIT_CONFLICT`.
//!
//! Event (unknown fields at any depth are `INVALID_REQUEST`):
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

use lambda_runtime::{LambdaEvent, service_fn};
use parqdb_catalog::lambda::RawEvent;
use parqdb_catalog::publish::Publisher;
use parqdb_catalog::publish::request::handle_publish;

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    // Once per container: logging, configuration, catalog (clients and metadata cache).
    let catalog = match parqdb_catalog_functions::init().await {
        Ok(catalog) => catalog,
        Err(code) => return code,
    };
    let publisher = Publisher::for_catalog(&catalog);
    let result = lambda_runtime::run(service_fn(|event: LambdaEvent<RawEvent>| {
        let publisher = publisher.clone();
        async move { invoke(&publisher, event).await }
    }))
    .await;
    parqdb_catalog_functions::finish(result)
}

async fn invoke(
    publisher: &Publisher,
    event: LambdaEvent<RawEvent>,
) -> Result<serde_json::Value, parqdb_catalog::Error> {
    let request_id = event.context.request_id.clone();
    let outcome: Result<serde_json::Value, parqdb_catalog::Error> = async {
        let payload = serde_json::to_vec(&event.payload.into_value()?).unwrap_or_default();
        let published = handle_publish(publisher, &payload).await?;
        Ok(serde_json::to_value(&published).unwrap_or_default())
    }
    .await;
    match &outcome {
        Ok(response) => tracing::info!(
            request_id,
            metadata_location = %response["metadata-location"],
            attempts = %response["attempts"],
            already_published = %response["already-published"],
            "published"
        ),
        Err(err) => tracing::warn!(
            request_id,
            error_type = err.code(),
            error = %err.full_message(),
            "publication failed"
        ),
    }
    outcome
}
