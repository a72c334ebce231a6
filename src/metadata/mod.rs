//! Strict index metadata: the JSON format of the metadata spec, parsed into a model that
//! can only hold valid metadata ("parse, don't validate").
//!
//! * [`IndexMetadata::from_json_slice`] parses and validates one metadata file against a
//!   [`FamilyRegistry`](crate::family::FamilyRegistry); [`IndexMetadata::to_json_vec`]
//!   writes its canonical, byte-stable JSON.
//! * [`IndexMetadata::create`], [`IndexMetadata::successor`] and
//!   [`IndexMetadata::expire_snapshots`] build new metadata with an injected
//!   [`Clock`](crate::clock::Clock) and [`IdGenerator`](crate::clock::IdGenerator).
//! * [`IndexMetadata::check_successor_of`] holds the rules a commit checks.
//! * `read_index_metadata` reads one metadata file from the warehouse and parses it, its
//!   errors naming the file: the catalog, the publisher and their caches read through it.
//!
//! Parsing is strict at every level: unknown fields, duplicate keys (in objects and in
//! every map), missing required fields, `null`, wrong types, out-of-range or non-integral
//! integers, non-canonical UUIDs, invalid UTF-8, trailing data and inputs over
//! [`MAX_METADATA_BYTES`] are `INVALID_INDEX_METADATA`, and every message starts with
//! the JSON path of the violation. `-0` is the integer 0. A `format-version` that is an
//! `int` other than 1 is `UNSUPPORTED_FORMAT_VERSION`, decided before any other rule; one
//! outside the `int` range is an out-of-range integer (`INVALID_INDEX_METADATA`).
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
pub use parse::MAX_METADATA_BYTES;
pub use snapshot::{Snapshot, SnapshotContents, SnapshotLogEntry};

/// The only supported `format-version`.
pub const FORMAT_VERSION: i32 = 1;
