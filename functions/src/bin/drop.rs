//! The `drop` Lambda function: remove an index's catalog mapping (metadata and data stay for the garbage collector).
//!
//! Event: `{"identifier": {"namespace": ["docs"], "name": "embeddings"}}`. The contract, the error
//! contract and the environment are documented in `functions/README.md`.

use std::process::ExitCode;
use std::sync::Arc;

use parqdb_catalog::lambda::{Handler, Operation};

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    // Once per container: logging, configuration, catalog (clients and metadata cache).
    let catalog = match parqdb_catalog_functions::init().await {
        Ok(catalog) => catalog,
        Err(code) => return code,
    };
    let handler = Handler::new(Operation::Drop, Arc::new(catalog));
    let result = parqdb_catalog_functions::run(|event| handler.invoke(event)).await;
    parqdb_catalog_functions::finish(result)
}
