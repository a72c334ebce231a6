//! The metadata invariants: everything that relates fields to each other, and the
//! family/provider rules. [`Unchecked::validate`] is the only way an
//! [`IndexMetadata`] comes into existence.

use std::collections::{BTreeMap, BTreeSet};

use uuid::Uuid;

use super::IndexMetadata;
use super::snapshot::{Snapshot, SnapshotContents, SnapshotLogEntry};
use super::strict::check_key_fields;
use super::wire::WireMetadata;
use crate::error::{Error, ErrorKind, Result};
use crate::family::FamilyRegistry;

pub(super) fn invalid(message: String) -> Error {
    Error::new(ErrorKind::InvalidIndexMetadata, message)
}

/// Metadata fields whose invariants have not been checked yet.
#[derive(Debug)]
pub(super) struct Unchecked {
    pub(super) index_uuid: Uuid,
    pub(super) last_updated_ms: i64,
    pub(super) last_sequence_number: i64,
    pub(super) current_snapshot_id: i64,
    pub(super) snapshots: Vec<Snapshot>,
    pub(super) snapshot_log: Vec<SnapshotLogEntry>,
    pub(super) properties: BTreeMap<String, String>,
}

impl From<WireMetadata> for Unchecked {
    fn from(wire: WireMetadata) -> Self {
        Unchecked {
            index_uuid: wire.index_uuid,
            last_updated_ms: wire.last_updated_ms,
            last_sequence_number: wire.last_sequence_number,
            current_snapshot_id: wire.current_snapshot_id,
            snapshots: wire.snapshots.into_iter().map(Snapshot::from).collect(),
            snapshot_log: wire.snapshot_log,
            properties: wire.properties,
        }
    }
}

/// Whether the family and provider rules are checked.
#[derive(Debug, Clone, Copy)]
pub(super) enum FamilyRules<'a> {
    /// Check every snapshot against this registry.
    Check(&'a FamilyRegistry),
    /// Every snapshot comes from metadata that was already checked (snapshot expiry).
    AlreadyChecked,
}

impl Unchecked {
    /// Check every invariant and produce the metadata, or the first violation with its
    /// JSON path.
    pub(super) fn validate(self, rules: FamilyRules<'_>) -> Result<IndexMetadata> {
        if self.index_uuid.is_nil() {
            return Err(invalid("index-uuid: must not be the nil UUID".to_owned()));
        }
        for (position, snapshot) in self.snapshots.iter().enumerate() {
            let prefix = format!("snapshots[{position}]");
            check_snapshot_fields(&prefix, snapshot)?;
            if let FamilyRules::Check(registry) = rules {
                check_family_rules(&prefix, &snapshot.contents, registry)?;
            }
        }
        self.check_snapshot_ids()?;
        let current_index = self
            .snapshots
            .iter()
            .position(|snapshot| snapshot.snapshot_id == self.current_snapshot_id)
            .ok_or_else(|| {
                invalid(format!(
                    "current-snapshot-id: {} does not name a retained snapshot",
                    self.current_snapshot_id
                ))
            })?;
        self.check_identity(current_index)?;
        self.check_log()?;
        self.check_last_updated()?;
        Ok(IndexMetadata {
            index_uuid: self.index_uuid,
            last_updated_ms: self.last_updated_ms,
            last_sequence_number: self.last_sequence_number,
            current_snapshot_id: self.current_snapshot_id,
            current_index,
            snapshots: self.snapshots,
            snapshot_log: self.snapshot_log,
            properties: self.properties,
        })
    }

    /// Produce the base of a commit: only what the successor rules read must hold —
    /// unique snapshot ids (so an id names one snapshot) and a `current-snapshot-id`
    /// naming a retained snapshot (whose identity fields the new metadata keeps). The
    /// other invariants and the family and provider rules are not checked again: the base
    /// met them under the rules of the version that published it, and the new metadata is
    /// judged by today's ([`IndexMetadata::check_successor_of`] compares the two).
    ///
    /// The result is a base only, never published or handed out of the crate.
    pub(super) fn into_base(self) -> Result<IndexMetadata> {
        let mut ids = BTreeMap::new();
        for (position, snapshot) in self.snapshots.iter().enumerate() {
            if let Some(first) = ids.insert(snapshot.snapshot_id, position) {
                return Err(invalid(format!(
                    "snapshots[{position}].snapshot-id: {} is also the id of snapshots[{first}]",
                    snapshot.snapshot_id
                )));
            }
        }
        let current_index = ids.get(&self.current_snapshot_id).copied().ok_or_else(|| {
            invalid(format!(
                "current-snapshot-id: {} does not name a retained snapshot",
                self.current_snapshot_id
            ))
        })?;
        Ok(IndexMetadata {
            index_uuid: self.index_uuid,
            last_updated_ms: self.last_updated_ms,
            last_sequence_number: self.last_sequence_number,
            current_snapshot_id: self.current_snapshot_id,
            current_index,
            snapshots: self.snapshots,
            snapshot_log: self.snapshot_log,
            properties: self.properties,
        })
    }

    /// Unique snapshot ids; unique sequence numbers no greater than
    /// `last-sequence-number`.
    fn check_snapshot_ids(&self) -> Result<()> {
        let mut ids = BTreeMap::new();
        let mut sequences = BTreeMap::new();
        for (position, snapshot) in self.snapshots.iter().enumerate() {
            if let Some(first) = ids.insert(snapshot.snapshot_id, position) {
                return Err(invalid(format!(
                    "snapshots[{position}].snapshot-id: {} is also the id of snapshots[{first}]",
                    snapshot.snapshot_id
                )));
            }
            if let Some(first) = sequences.insert(snapshot.sequence_number, position) {
                return Err(invalid(format!(
                    "snapshots[{position}].sequence-number: {} is also the sequence number of snapshots[{first}]",
                    snapshot.sequence_number
                )));
            }
            if snapshot.sequence_number > self.last_sequence_number {
                return Err(invalid(format!(
                    "snapshots[{position}].sequence-number: {} exceeds last-sequence-number {}",
                    snapshot.sequence_number, self.last_sequence_number
                )));
            }
        }
        Ok(())
    }

    /// The logical identity fields are equal across retained snapshots.
    fn check_identity(&self, current_index: usize) -> Result<()> {
        let current = &self.snapshots[current_index].contents;
        for (position, snapshot) in self.snapshots.iter().enumerate() {
            if let Some(field) = snapshot.contents.identity_difference(current) {
                return Err(invalid(format!(
                    "snapshots[{position}].{field}: identity field differs from the current snapshot (snapshots[{current_index}])"
                )));
            }
        }
        Ok(())
    }

    /// A non-empty log with non-decreasing timestamps, naming retained snapshots, ending
    /// with the current snapshot.
    fn check_log(&self) -> Result<()> {
        let retained: BTreeSet<i64> = self.snapshots.iter().map(|s| s.snapshot_id).collect();
        let Some(last) = self.snapshot_log.last() else {
            return Err(invalid("snapshot-log: must not be empty".to_owned()));
        };
        let mut previous: Option<i64> = None;
        for (position, entry) in self.snapshot_log.iter().enumerate() {
            if let Some(previous) = previous
                && entry.timestamp_ms() < previous
            {
                return Err(invalid(format!(
                    "snapshot-log[{position}].timestamp-ms: {} is earlier than the previous entry's {previous}",
                    entry.timestamp_ms()
                )));
            }
            previous = Some(entry.timestamp_ms());
            if !retained.contains(&entry.snapshot_id()) {
                return Err(invalid(format!(
                    "snapshot-log[{position}].snapshot-id: {} does not name a retained snapshot",
                    entry.snapshot_id()
                )));
            }
        }
        if last.snapshot_id() != self.current_snapshot_id {
            return Err(invalid(format!(
                "snapshot-log[{}].snapshot-id: the last entry names {} but current-snapshot-id is {}",
                self.snapshot_log.len() - 1,
                last.snapshot_id(),
                self.current_snapshot_id
            )));
        }
        Ok(())
    }

    /// `last-updated-ms` is no earlier than any snapshot or log timestamp.
    fn check_last_updated(&self) -> Result<()> {
        let later = |what: String, timestamp: i64| {
            invalid(format!(
                "last-updated-ms: {} is earlier than {what} {timestamp}",
                self.last_updated_ms
            ))
        };
        for (position, snapshot) in self.snapshots.iter().enumerate() {
            if snapshot.timestamp_ms > self.last_updated_ms {
                return Err(later(
                    format!("snapshots[{position}].timestamp-ms"),
                    snapshot.timestamp_ms,
                ));
            }
        }
        for (position, entry) in self.snapshot_log.iter().enumerate() {
            if entry.timestamp_ms() > self.last_updated_ms {
                return Err(later(
                    format!("snapshot-log[{position}].timestamp-ms"),
                    entry.timestamp_ms(),
                ));
            }
        }
        Ok(())
    }
}

/// The per-snapshot rules that need no registry (the wire format checks them too, but
/// builder input has public fields).
fn check_snapshot_fields(prefix: &str, snapshot: &Snapshot) -> Result<()> {
    let contents = &snapshot.contents;
    let positive = [
        ("snapshot-id", snapshot.snapshot_id),
        ("sequence-number", snapshot.sequence_number),
        ("indexed-rows", contents.indexed_rows),
    ];
    for (field, value) in positive {
        if value <= 0 {
            return Err(invalid(format!(
                "{prefix}.{field}: must be positive, got {value}"
            )));
        }
    }
    let names = [
        ("vector-field", &contents.vector_field),
        ("index-family", &contents.index_family),
        ("metric", &contents.metric),
    ];
    for (field, value) in names {
        if value.is_empty() {
            return Err(invalid(format!(
                "{prefix}.{field}: must not be an empty string"
            )));
        }
    }
    check_key_fields(&contents.source_key_fields)
        .map_err(|err| invalid(format!("{prefix}.source-key-fields: {err}")))
}

/// The family rules (schema version, metric, exact roles, parameters) and the provider
/// rules (provider properties, each index table).
fn check_family_rules(
    prefix: &str,
    contents: &SnapshotContents,
    registry: &FamilyRegistry,
) -> Result<()> {
    let name = &contents.index_family;
    let family = registry.family(name).ok_or_else(|| {
        invalid(format!(
            "{prefix}.index-family: unknown index family {name:?}"
        ))
    })?;
    let version = contents.index_schema_version;
    if !family.schema_versions().contains(&version) {
        return Err(invalid(format!(
            "{prefix}.index-schema-version: {version} is not supported by family {name:?} (supported: {:?})",
            family.schema_versions()
        )));
    }
    let metric = contents.metric.as_str();
    if !family.metrics().contains(&metric) {
        return Err(invalid(format!(
            "{prefix}.metric: {metric:?} is not a metric of family {name:?} (supported: {:?})",
            family.metrics()
        )));
    }
    for role in contents.index_tables.keys() {
        if !family.roles().contains(&role.as_str()) {
            return Err(invalid(format!(
                "{prefix}.index-tables.{role}: unknown role for family {name:?} (roles: {:?})",
                family.roles()
            )));
        }
    }
    for role in family.roles() {
        if !contents.index_tables.contains_key(*role) {
            return Err(invalid(format!(
                "{prefix}.index-tables: missing role {role:?} of family {name:?}"
            )));
        }
    }
    family
        .validate_parameters(&contents.parameters)
        .map_err(|err| invalid(format!("{prefix}.parameters: {err}")))?;

    let provider_name = contents.index_provider.provider();
    let provider = registry.provider(provider_name).ok_or_else(|| {
        invalid(format!(
            "{prefix}.index-provider.provider: unknown index provider {provider_name:?}"
        ))
    })?;
    provider
        .validate_provider_properties(contents.index_provider.properties())
        .map_err(|err| invalid(format!("{prefix}.index-provider.properties: {err}")))?;
    for (role, table) in &contents.index_tables {
        provider
            .validate_table(table.properties())
            .map_err(|err| invalid(format!("{prefix}.index-tables.{role}.properties: {err}")))?;
    }
    Ok(())
}
