//! An example builder function for the `refresh` function's external builder
//! (`PARQDB_REFRESH_BUILDER_FUNCTION`): the build contract `parqdb.refresh.build/1`
//! (`parqdb_catalog::refresh::contract`, README "Event-driven refresh") on one side, the
//! demonstration `PlaceholderBuilder` on the other. A real builder keeps the two ends and
//! replaces the middle: read the source table (from `read-start-ms` on), train centroids,
//! write posting lists below `<warehouse>/<table-prefix>`, answer the snapshot.
//!
//! Request: a `BuildFunctionRequest`, strictly (unknown, duplicate, missing or ill-typed
//! fields, trailing data, another contract version, another warehouse than its own are
//! `INVALID_REQUEST` function errors naming the JSON path). Response: a
//! `BuildFunctionResponse` with the request's `build-id`. Errors writing the tables are
//! function errors with the catalog's codes (`STORE_UNAVAILABLE`, ...); the refresh
//! function then fails the index and SQS delivers its messages again.
//!
//! Environment: `PARQDB_WAREHOUSE` (where it writes the tables; the refresh function's
//! warehouse), `PARQDB_CATALOG` as every function. Not deployed by the template (it is an
//! example; `tests/it/infra/template.rs` exempts `example-*` binaries): deploy it with
//! `cargo lambda build --release -p parqdb-catalog-functions --bin example-builder` and
//! `cargo lambda deploy`, with a role that may write below the warehouse's `indexes/`.

use std::process::ExitCode;

use parqdb_catalog::Warehouse;
use parqdb_catalog::lambda::Invocations;
use parqdb_catalog::refresh::contract::{BuildFunctionRequest, BuildFunctionResponse};
use parqdb_catalog::refresh::{BuildRequest, IndexBuilder, PlaceholderBuilder};
use parqdb_catalog::{Error, ErrorKind, Result};
use serde_json::Value;

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    // Once per container: logging, configuration, the warehouse.
    let warehouse = match parqdb_catalog_functions::init_with(|catalog| {
        Ok(catalog.warehouse().clone())
    })
    .await
    {
        Ok(warehouse) => warehouse,
        Err(code) => return code,
    };
    let invocations = Invocations::new("example-builder");
    let result = parqdb_catalog_functions::run(|event| {
        invocations.serve(event, |event| build(&warehouse, event.payload))
    })
    .await;
    parqdb_catalog_functions::finish(result)
}

/// One build under the contract.
async fn build(warehouse: &Warehouse, event: Value) -> Result<BuildFunctionResponse> {
    let bytes = serde_json::to_vec(&event).map_err(|err| {
        Error::with_source(ErrorKind::InvalidRequest, "the event cannot be read", err)
    })?;
    let request = BuildFunctionRequest::from_json_slice(&bytes)?;
    if request.warehouse != warehouse.root() {
        return Err(Error::new(
            ErrorKind::InvalidRequest,
            format!(
                "build request: at `warehouse`: `{}` is not this builder's warehouse `{}`",
                request.warehouse,
                warehouse.root()
            ),
        ));
    }
    let snapshot = PlaceholderBuilder
        .build(&BuildRequest {
            index: &request.index,
            index_uuid: request.index_uuid,
            build_id: request.build_id,
            read_start_ms: request.read_start_ms,
            newest: &request.newest,
            changed: &request.changed,
            changes: request.changes,
            source_table: request.source_table.clone(),
            current: None,
            warehouse,
        })
        .await?;
    Ok(BuildFunctionResponse::new(&request, snapshot))
}
