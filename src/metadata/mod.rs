//! Strict index metadata: the JSON format of the metadata spec, parsed into a model that
//! can only hold valid metadata (what [`IndexMetadata`] documents).
//!
//! `read_index_metadata` reads one metadata file from the warehouse and parses it, its
//! errors naming the file: the catalog, the publisher and their caches read through it.
//!
//! The modules: `strict` (serde building blocks), `wire` (private wire structs),
//! `definitions` and `snapshot` (public value types), `parse` (byte-level pipeline),
//! `invariants` (cross-field rules and family/provider rules), `index_metadata` (the
//! model), `builder`, `successor`, `expire` and `references`.

mod builder;
mod definitions;
mod expire;
mod index_metadata;
mod invariants;
pub(crate) mod named;
mod parse;
mod references;
mod snapshot;
mod strict;
mod strings;
mod successor;
mod wire;

#[cfg(test)]
mod tests;

pub use definitions::{
    IndexTableDefinition, ProviderDefinition, TableDefinition, TableIdentifierRef,
};
pub use index_metadata::IndexMetadata;
pub(crate) use index_metadata::{read_base_metadata, read_index_metadata};
#[doc(hidden)] // For the workspace's tests.
pub use parse::MAX_METADATA_BYTES;
pub use snapshot::{Snapshot, SnapshotContents, SnapshotLogEntry};

/// The only supported `format-version`.
pub(crate) const FORMAT_VERSION: i32 = 1;
