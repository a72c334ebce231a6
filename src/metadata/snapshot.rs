//! Snapshots, snapshot-log entries, and the builder input [`SnapshotContents`].

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::definitions::{IndexTableDefinition, ProviderDefinition, TableDefinition};
use super::parse::parse_strict;
use super::strict;
use crate::error::Result;
use crate::json::strict_object;

/// The content of one snapshot, without its `snapshot-id`, `sequence-number` and
/// `timestamp-ms` (which the builders allocate): the input of
/// [`IndexMetadata::create`](super::IndexMetadata::create) and
/// [`IndexMetadata::successor`](super::IndexMetadata::successor).
///
/// Its JSON form uses the snapshot's field names and is strict like the metadata
/// (unknown fields, duplicate keys, `null`, wrong types, empty names, non-positive
/// `indexed-rows` are rejected); `summary` may be omitted (empty). The fields are public,
/// so a value built in code is only checked when metadata is built from it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(remote = "Self", deny_unknown_fields, rename_all = "kebab-case")]
pub struct SnapshotContents {
    /// The exact source table state used to build this snapshot.
    pub source_table: TableDefinition,
    /// The vector field in the catalog-bound source (identity field).
    #[serde(deserialize_with = "strict::non_empty")]
    pub vector_field: String,
    /// The ordered source key, non-empty and unique (identity field).
    #[serde(deserialize_with = "strict::key_fields")]
    pub source_key_fields: Vec<String>,
    /// The positive number of represented source rows.
    #[serde(deserialize_with = "strict::positive_i64")]
    pub indexed_rows: i64,
    /// The index family identifier (identity field).
    #[serde(deserialize_with = "strict::non_empty")]
    pub index_family: String,
    /// The family schema version.
    #[serde(deserialize_with = "strict::int")]
    pub index_schema_version: i32,
    /// The distance metric (identity field).
    #[serde(deserialize_with = "strict::non_empty")]
    pub metric: String,
    /// Family-defined parameters.
    #[serde(deserialize_with = "crate::json::unique_map")]
    pub parameters: BTreeMap<String, String>,
    /// The provider of the physical index tables.
    pub index_provider: ProviderDefinition,
    /// Family roles to immutable provider-defined tables.
    #[serde(deserialize_with = "crate::json::unique_map")]
    pub index_tables: BTreeMap<String, IndexTableDefinition>,
    /// Non-semantic provenance; may be empty.
    #[serde(default, deserialize_with = "crate::json::unique_map")]
    pub summary: BTreeMap<String, String>,
}

strict_object!(SnapshotContents);

impl SnapshotContents {
    /// Parse strict snapshot-contents JSON (`INVALID_INDEX_METADATA` naming the JSON path).
    pub fn from_json_slice(bytes: &[u8]) -> Result<Self> {
        parse_strict(bytes, "snapshot contents")
    }

    /// Whether the logical identity fields (`vector-field`, `source-key-fields`,
    /// `index-family`, `metric`) equal those of `other`.
    pub fn same_identity(&self, other: &SnapshotContents) -> bool {
        self.identity_difference(other).is_none()
    }

    /// The first identity field that differs from `other`, by JSON name.
    pub(super) fn identity_difference(&self, other: &SnapshotContents) -> Option<&'static str> {
        if self.vector_field != other.vector_field {
            Some("vector-field")
        } else if self.source_key_fields != other.source_key_fields {
            Some("source-key-fields")
        } else if self.index_family != other.index_family {
            Some("index-family")
        } else if self.metric != other.metric {
            Some("metric")
        } else {
            None
        }
    }
}

/// One retained snapshot of a valid [`IndexMetadata`](super::IndexMetadata).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    pub(super) snapshot_id: i64,
    pub(super) sequence_number: i64,
    pub(super) timestamp_ms: i64,
    pub(super) contents: SnapshotContents,
}

impl Snapshot {
    /// The positive snapshot id, unique within the index.
    pub fn snapshot_id(&self) -> i64 {
        self.snapshot_id
    }

    /// The positive commit sequence number.
    pub fn sequence_number(&self) -> i64 {
        self.sequence_number
    }

    /// The snapshot creation time (Unix epoch milliseconds).
    pub fn timestamp_ms(&self) -> i64 {
        self.timestamp_ms
    }

    /// Everything but the id, sequence number and timestamp (e.g. to derive the contents
    /// of a successor).
    pub fn contents(&self) -> &SnapshotContents {
        &self.contents
    }

    /// Non-semantic provenance.
    pub(crate) fn summary(&self) -> &BTreeMap<String, String> {
        &self.contents.summary
    }

    /// The exact source table state used to build this snapshot.
    pub(crate) fn source_table(&self) -> &TableDefinition {
        &self.contents.source_table
    }

    /// The index family identifier.
    pub(crate) fn index_family(&self) -> &str {
        &self.contents.index_family
    }

    /// The distance metric.
    pub(crate) fn metric(&self) -> &str {
        &self.contents.metric
    }

    /// The family-defined parameters.
    pub(crate) fn parameters(&self) -> &BTreeMap<String, String> {
        &self.contents.parameters
    }

    /// The provider of the physical index tables.
    pub(crate) fn index_provider(&self) -> &ProviderDefinition {
        &self.contents.index_provider
    }

    /// The index tables by family role.
    pub(crate) fn index_tables(&self) -> &BTreeMap<String, IndexTableDefinition> {
        &self.contents.index_tables
    }
}

/// One `snapshot-log` entry: when a snapshot became current.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(remote = "Self", deny_unknown_fields, rename_all = "kebab-case")]
pub struct SnapshotLogEntry {
    #[serde(deserialize_with = "strict::long")]
    timestamp_ms: i64,
    #[serde(deserialize_with = "strict::long")]
    snapshot_id: i64,
}

strict_object!(SnapshotLogEntry);

impl SnapshotLogEntry {
    pub(super) fn new(timestamp_ms: i64, snapshot_id: i64) -> Self {
        SnapshotLogEntry {
            timestamp_ms,
            snapshot_id,
        }
    }

    /// When the snapshot became current (Unix epoch milliseconds).
    pub fn timestamp_ms(&self) -> i64 {
        self.timestamp_ms
    }

    /// The snapshot that became current.
    pub fn snapshot_id(&self) -> i64 {
        self.snapshot_id
    }
}
