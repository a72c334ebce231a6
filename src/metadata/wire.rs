//! The private wire structs: the exact JSON layout, field order and per-field rules.
//! Cross-field invariants are checked when a wire value becomes an
//! [`IndexMetadata`](super::IndexMetadata) (see `invariants`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::definitions::{IndexTableDefinition, ProviderDefinition, TableDefinition};
use super::snapshot::{Snapshot, SnapshotContents, SnapshotLogEntry};
use super::strict;
use crate::json::strict_object;

/// The root object.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(remote = "Self", deny_unknown_fields, rename_all = "kebab-case")]
pub(super) struct WireMetadata {
    #[serde(deserialize_with = "strict::int")]
    pub(super) format_version: i32,
    #[serde(deserialize_with = "strict::uuid")]
    pub(super) index_uuid: Uuid,
    #[serde(deserialize_with = "strict::long")]
    pub(super) last_updated_ms: i64,
    #[serde(deserialize_with = "strict::long")]
    pub(super) last_sequence_number: i64,
    #[serde(deserialize_with = "strict::long")]
    pub(super) current_snapshot_id: i64,
    pub(super) snapshots: Vec<WireSnapshot>,
    pub(super) snapshot_log: Vec<SnapshotLogEntry>,
    #[serde(default, deserialize_with = "crate::json::unique_map")]
    pub(super) properties: BTreeMap<String, String>,
}

strict_object!(WireMetadata);

/// One snapshot, fields in spec order.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(remote = "Self", deny_unknown_fields, rename_all = "kebab-case")]
pub(super) struct WireSnapshot {
    #[serde(deserialize_with = "strict::positive_i64")]
    snapshot_id: i64,
    #[serde(deserialize_with = "strict::positive_i64")]
    sequence_number: i64,
    #[serde(deserialize_with = "strict::long")]
    timestamp_ms: i64,
    #[serde(deserialize_with = "crate::json::unique_map")]
    summary: BTreeMap<String, String>,
    source_table: TableDefinition,
    #[serde(deserialize_with = "strict::non_empty")]
    vector_field: String,
    #[serde(deserialize_with = "strict::key_fields")]
    source_key_fields: Vec<String>,
    #[serde(deserialize_with = "strict::positive_i64")]
    indexed_rows: i64,
    #[serde(deserialize_with = "strict::non_empty")]
    index_family: String,
    #[serde(deserialize_with = "strict::int")]
    index_schema_version: i32,
    #[serde(deserialize_with = "strict::non_empty")]
    metric: String,
    #[serde(deserialize_with = "crate::json::unique_map")]
    parameters: BTreeMap<String, String>,
    index_provider: ProviderDefinition,
    #[serde(deserialize_with = "crate::json::unique_map")]
    index_tables: BTreeMap<String, IndexTableDefinition>,
}

strict_object!(WireSnapshot);

impl From<WireSnapshot> for Snapshot {
    fn from(wire: WireSnapshot) -> Self {
        Snapshot {
            snapshot_id: wire.snapshot_id,
            sequence_number: wire.sequence_number,
            timestamp_ms: wire.timestamp_ms,
            contents: SnapshotContents {
                source_table: wire.source_table,
                vector_field: wire.vector_field,
                source_key_fields: wire.source_key_fields,
                indexed_rows: wire.indexed_rows,
                index_family: wire.index_family,
                index_schema_version: wire.index_schema_version,
                metric: wire.metric,
                parameters: wire.parameters,
                index_provider: wire.index_provider,
                index_tables: wire.index_tables,
                summary: wire.summary,
            },
        }
    }
}

impl From<&Snapshot> for WireSnapshot {
    fn from(snapshot: &Snapshot) -> Self {
        let contents = snapshot.contents.clone();
        WireSnapshot {
            snapshot_id: snapshot.snapshot_id,
            sequence_number: snapshot.sequence_number,
            timestamp_ms: snapshot.timestamp_ms,
            summary: contents.summary,
            source_table: contents.source_table,
            vector_field: contents.vector_field,
            source_key_fields: contents.source_key_fields,
            indexed_rows: contents.indexed_rows,
            index_family: contents.index_family,
            index_schema_version: contents.index_schema_version,
            metric: contents.metric,
            parameters: contents.parameters,
            index_provider: contents.index_provider,
            index_tables: contents.index_tables,
        }
    }
}
