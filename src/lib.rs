//! # ParqDB Catalog
//!
//! A serverless, object-store-only catalog for ParqDB vector indexes. A catalog maps an
//! [`IndexIdentifier`] (an ordered [`Namespace`] plus a name) to the current immutable
//! metadata file of one index and to the source table it is bound to. Writers publish a
//! new metadata file and then swap the pointer with compare-and-swap; readers load the
//! pointer and read one complete immutable file.
//!
//! # A walk through the protocol
//!
//! Open a catalog on the embedded default (a local directory as the warehouse, the
//! pointers in its `_catalog/`), create a namespace, write a first metadata file and
//! register it, publish a successor with a commit, and load the pointer back. A writer
//! that lost the race gets a typed [`ErrorKind::CommitConflict`] and retries on top of
//! what won: conflicts are never silent.
//!
//! ```
//! use std::collections::BTreeMap;
//!
//! use bytes::Bytes;
//! use parqdb_catalog::{
//!     CatalogConfig, ErrorKind, IndexCatalog, IndexIdentifier, IndexMetadata, Namespace,
//!     SnapshotContents,
//! };
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let dir = tempfile::tempdir()?;
//! let config = CatalogConfig::new(Some(format!("file://{}", dir.path().display())), None);
//! let catalog = config.build().await?;
//!
//! let docs = Namespace::new(["docs"])?;
//! catalog.create_namespace(&docs, BTreeMap::new()).await?;
//! let id = IndexIdentifier::new(docs, "embeddings")?;
//!
//! // What one snapshot describes: its source table state and the index tables built from it.
//! let contents = |rows: i64| {
//!     SnapshotContents::from_json_slice(format!(r#"{{
//!         "source-table": {{"provider": "parquet", "properties": {{"location": "s3://lake/docs/", "rows": "{rows}"}}}},
//!         "vector-field": "embedding", "source-key-fields": ["id"], "indexed-rows": {rows},
//!         "index-family": "ivf", "index-schema-version": 1, "metric": "cosine", "parameters": {{}},
//!         "index-provider": {{"provider": "parquet", "properties": {{}}}},
//!         "index-tables": {{
//!             "ivf_centroids": {{"definition-version": 1, "properties": {{"location": "indexes/docs/{rows}/ivf_centroids/"}}}},
//!             "ivf_postings": {{"definition-version": 1, "properties": {{"location": "indexes/docs/{rows}/ivf_postings/"}}}}
//!         }}
//!     }}"#).as_bytes())
//! };
//! // Metadata files are immutable and never reused: write each once, create-if-absent.
//! let write = |metadata: IndexMetadata| {
//!     let name = format!(
//!         "metadata/{}/{:05}-{}.metadata.json",
//!         metadata.index_uuid(),
//!         metadata.last_sequence_number(),
//!         catalog.ids().uuid()
//!     );
//!     let bytes = Bytes::from(metadata.to_json_vec());
//!     let warehouse = catalog.warehouse().clone();
//!     async move { warehouse.write_new(&name, bytes).await }
//! };
//!
//! // Register: the identifier did not exist; it now points at the first metadata file.
//! let first = IndexMetadata::create(
//!     contents(10)?,
//!     BTreeMap::new(),
//!     catalog.clock().as_ref(),
//!     catalog.ids().as_ref(),
//!     catalog.registry(),
//! )?;
//! let first_location = write(first.clone()).await?;
//! catalog.register(&id, None, &first_location).await?;
//!
//! // Commit: swap the pointer from the base we read to a successor built on it.
//! let successor = |rows| {
//!     first.successor(contents(rows)?, catalog.clock().as_ref(), catalog.ids().as_ref(), catalog.registry())
//! };
//! let ours = write(successor(20)?).await?;
//! let theirs = write(successor(30)?).await?;
//! let committed = catalog.commit(&id, None, &first_location, &ours).await?;
//! assert!(!committed.already_applied);
//!
//! // A second writer on the same base loses, and is told so.
//! let lost = catalog.commit(&id, None, &first_location, &theirs).await.unwrap_err();
//! assert_eq!(lost.kind(), ErrorKind::CommitConflict);
//! assert_eq!(lost.code(), "COMMIT_CONFLICT");
//!
//! // Load: readers follow the pointer to one complete metadata file.
//! let pointer = catalog.load(&id).await?;
//! assert_eq!(pointer.metadata_location, ours);
//! let metadata = catalog.read_metadata(&pointer.metadata_location).await?;
//! assert_eq!(metadata.last_sequence_number(), 2);
//! # Ok(()) }
//! ```
//!
//! # Where to go next
//! - [`Catalog`]: the operations, their order of checks, replays and errors
//!   ([`IndexCatalog`] is the interface it and the remote client share).
//! - [`Publisher`]: the successor protocol with bounded, jittered retries, for refresh jobs.
//! - [`refresh`]: event-driven refresh that coalesces bursts of source changes.
//! - [`gc`]: the garbage collector, conservative by construction.
//! - [`store`]: the pointer stores (local files, memory, S3 and compatible servers,
//!   DynamoDB); [`Warehouse`]: where metadata and index tables live.
//! - [`CatalogConfig`]: which store and warehouse, from URIs (what the command uses).
//! - [`IndexMetadata`]: the strict metadata format and its snapshot rules.
//!
//! The README has the command, the deployment and the architecture.
#![deny(missing_docs)]

#[cfg(any(
    all(feature = "dynamodb", not(feature = "credential-chain")),
    feature = "builder-function"
))]
mod aws_environment;
#[cfg(feature = "cli")]
mod bench;
#[doc(hidden)] // Its items are at the crate root; the path is for the workspace's tests.
pub mod catalog;
#[cfg(feature = "cli")]
mod cli;
mod clock;
mod config;
mod error;
pub mod family;
pub mod gc;
mod identifier;
mod json;
#[cfg(feature = "lambda")]
#[doc(hidden)] // The handler layer of the `functions/` crate, not part of the API.
pub mod lambda;
mod metadata;
#[doc(hidden)] // Its items are at the crate root; the path is for the workspace's tests.
pub mod publish;
pub mod refresh;
#[cfg(feature = "remote")]
pub mod remote;
mod retry;
pub mod store;
#[doc(hidden)] // Its items are at the crate root; the path is for the workspace's tests.
pub mod warehouse;

pub use catalog::{
    Catalog, CatalogBuilder, CommitResult, IdentifierPage, IndexCatalog, IndexPointer,
    LoadIfChanged, NamespacePage, RetryPolicy, SourceBinding,
};
pub use clock::{Clock, IdGenerator, ManualClock, RandomIds, SeededIds, SystemClock};
pub use config::CatalogConfig;
pub use error::{Error, ErrorKind, Result};
pub use identifier::{IndexIdentifier, Namespace};
#[doc(hidden)] // For the workspace's tests.
pub use metadata::MAX_METADATA_BYTES;
pub use metadata::{
    IndexMetadata, IndexTableDefinition, ProviderDefinition, Snapshot, SnapshotContents,
    SnapshotLogEntry, TableDefinition, TableIdentifierRef,
};
pub use publish::{
    Declined, Expired, Jitter, PublishOutcome, PublishPolicy, Published, Publisher,
    PublisherBuilder, Retention,
};
pub use warehouse::Warehouse;

/// Run the `parqdb-catalog` command: parse the process's arguments, run the command, print
/// its result, and return the exit code (what `src/bin/parqdb-catalog.rs` calls).
#[cfg(feature = "cli")]
#[doc(hidden)] // For the binary target, not part of the API.
pub fn run_command() -> std::process::ExitCode {
    cli::main()
}
