//! The stored records: one pointer record per identifier, one record per namespace.
//!
//! Records are versioned JSON (`record-version: 1`), parsed as strictly as metadata:
//! unknown fields, duplicate keys and wrong types are [`ErrorKind::CorruptRecord`].
//!
//! ```json
//! {
//!   "record-version": 1,
//!   "state": "live",
//!   "metadata-location": "s3://bucket/wh/metadata/…/00001.metadata.json",
//!   "source": { "provider": "parquet", "properties": { … } },
//!   "commit-id": "6f1c…",
//!   "created-by": "2d9a…",
//!   "previous-commit-ids": ["2d9a…"],
//!   "updated-ms": 1750000000000,
//!   "previous-location": "s3://bucket/wh/metadata/…/00000.metadata.json"
//! }
//! ```
//!
//! Every write carries a fresh `commit-id` and keeps the last [`HISTORY`] commit ids of the
//! key in `previous-commit-ids`, so a writer whose outcome was ambiguous can read back and
//! see whether its write landed, even if others wrote after it. `created-by` names the
//! register or rename that created the current incarnation and survives later commits.
//!
//! `previous-location` (optional) is the metadata location the commit that set
//! `metadata-location` replaced, i.e. that commit's base. It lets a replayed commit be
//! recognised exactly (see [`Catalog`](crate::Catalog#idempotent-replay)): a retry of the commit that produced the
//! current state names the same base. Register and rename create records without it
//! (nothing was replaced); records written before it existed lack it too, and a replay
//! against them is answered `COMMIT_CONFLICT`. Readers older than this field refuse records
//! that carry it (`CORRUPT_RECORD`), so upgrade every reader before the first commit.
//!
//! States: `live` (visible), `moving` (visible, a rename to `rename.to` is under way),
//! `dropped` (a tombstone: invisible; `updated-ms` is when the mapping lost reachability,
//! which starts the garbage collector's retention clock).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::error::{Error, ErrorKind, Result};
use crate::identifier::IndexIdentifier;
use crate::metadata::TableDefinition;
use crate::store::Listing;

/// How many earlier commit ids a record remembers.
pub const HISTORY: usize = 16;

const RECORD_VERSION: i32 = 1;

/// The lifecycle state of a pointer record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PointerState {
    /// The mapping is visible.
    Live,
    /// The mapping is visible and a rename away from it is under way.
    Moving,
    /// The mapping was dropped (or renamed away).
    Dropped,
}

/// A rename under way (on a `moving` record) or done (on a `dropped` one).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct RenameIntent {
    /// The destination identifier.
    pub to: IndexIdentifier,
    /// The commit id the destination record is created with.
    pub destination_commit_id: Uuid,
}

/// The pointer record of one identifier.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct PointerRecord {
    record_version: i32,
    /// The lifecycle state.
    pub state: PointerState,
    /// The absolute URI of the current metadata file.
    pub metadata_location: String,
    /// The source binding.
    pub source: TableDefinition,
    /// The id of the write that produced this record.
    pub commit_id: Uuid,
    /// The id of the register or rename that created this incarnation.
    pub created_by: Uuid,
    /// Earlier commit ids of this key, oldest first, at most [`HISTORY`].
    pub previous_commit_ids: Vec<Uuid>,
    /// When this state began (Unix epoch milliseconds).
    pub updated_ms: i64,
    /// The rename under way or done, for `moving` and renamed-away `dropped` records.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rename: Option<RenameIntent>,
    /// The metadata location that the commit which set `metadata_location` replaced (its
    /// base); `None` after a register or rename, and in records written before the field.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present_string"
    )]
    pub previous_location: Option<String>,
}

/// An optional field that, when present, is a string (`null` is refused).
fn present_string<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> std::result::Result<Option<String>, D::Error> {
    String::deserialize(deserializer).map(Some)
}

impl PointerRecord {
    /// A new live incarnation created by `commit_id`, following `previous` (a tombstone
    /// being replaced) if any.
    pub fn created(
        previous: Option<&PointerRecord>,
        metadata_location: String,
        source: TableDefinition,
        commit_id: Uuid,
        now_ms: i64,
    ) -> PointerRecord {
        PointerRecord {
            record_version: RECORD_VERSION,
            state: PointerState::Live,
            metadata_location,
            source,
            commit_id,
            created_by: commit_id,
            previous_commit_ids: previous.map(PointerRecord::chain).unwrap_or_default(),
            updated_ms: now_ms,
            rename: None,
            previous_location: None,
        }
    }

    /// The successor of this record written by `commit_id`, in `state` (same location,
    /// source and `previous_location`; a commit then sets the new ones).
    pub fn successor(&self, state: PointerState, commit_id: Uuid, now_ms: i64) -> PointerRecord {
        PointerRecord {
            state,
            commit_id,
            previous_commit_ids: self.chain(),
            updated_ms: now_ms,
            rename: None,
            ..self.clone()
        }
    }

    /// This record's commit id appended to its history, truncated to [`HISTORY`].
    fn chain(&self) -> Vec<Uuid> {
        let mut chain = self.previous_commit_ids.clone();
        chain.push(self.commit_id);
        let excess = chain.len().saturating_sub(HISTORY);
        chain.drain(..excess);
        chain
    }

    /// The oldest commit this key's chain remembers. While the chain is shorter than
    /// [`HISTORY`] it is whole, and this is the write that found the key absent.
    pub(crate) fn origin(&self) -> Uuid {
        self.previous_commit_ids
            .first()
            .copied()
            .unwrap_or(self.commit_id)
    }

    /// Whether `commit_id` wrote this record or one of its remembered predecessors, or
    /// created this incarnation.
    pub fn remembers(&self, commit_id: Uuid) -> bool {
        self.commit_id == commit_id
            || self.created_by == commit_id
            || self.previous_commit_ids.contains(&commit_id)
    }

    /// How the record shows in listings: a live record is visible by its class alone, a
    /// `moving` one only after checking its rename's destination, a tombstone not at all.
    pub fn listing(&self) -> Listing {
        match self.state {
            PointerState::Live => Listing::Shown,
            PointerState::Moving => Listing::Check,
            PointerState::Dropped => Listing::Hidden,
        }
    }

    /// Parse a stored record.
    pub fn from_bytes(bytes: &[u8]) -> Result<PointerRecord> {
        let record: PointerRecord = parse_record(bytes, "pointer")?;
        let consistent = match record.state {
            PointerState::Moving => record.rename.is_some(),
            PointerState::Live => record.rename.is_none(),
            PointerState::Dropped => true,
        };
        if !consistent {
            return Err(corrupt("pointer", "`rename` does not match `state`"));
        }
        Ok(record)
    }

    /// Serialise for storage.
    pub fn to_bytes(&self) -> Vec<u8> {
        to_bytes(self)
    }
}

/// The record of one namespace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct NamespaceRecord {
    record_version: i32,
    /// Whether the namespace exists (`false`: a tombstone).
    pub exists: bool,
    /// The namespace's string properties.
    pub properties: BTreeMap<String, String>,
    /// The id of the write that produced this record.
    pub commit_id: Uuid,
    /// Earlier commit ids, oldest first, at most [`HISTORY`].
    pub previous_commit_ids: Vec<Uuid>,
    /// When this state began.
    pub updated_ms: i64,
}

impl NamespaceRecord {
    /// A namespace record written by `commit_id`, following `previous` if any.
    pub fn new(
        previous: Option<&NamespaceRecord>,
        exists: bool,
        properties: BTreeMap<String, String>,
        commit_id: Uuid,
        now_ms: i64,
    ) -> NamespaceRecord {
        let mut chain = previous
            .map(|p| p.previous_commit_ids.clone())
            .unwrap_or_default();
        if let Some(previous) = previous {
            chain.push(previous.commit_id);
        }
        let excess = chain.len().saturating_sub(HISTORY);
        chain.drain(..excess);
        NamespaceRecord {
            record_version: RECORD_VERSION,
            exists,
            properties,
            commit_id,
            previous_commit_ids: chain,
            updated_ms: now_ms,
        }
    }

    /// How the record shows in listings: an existing namespace is shown, a tombstone not.
    pub fn listing(&self) -> Listing {
        if self.exists {
            Listing::Shown
        } else {
            Listing::Hidden
        }
    }

    /// Parse a stored record.
    pub fn from_bytes(bytes: &[u8]) -> Result<NamespaceRecord> {
        parse_record(bytes, "namespace")
    }

    /// Serialise for storage.
    pub fn to_bytes(&self) -> Vec<u8> {
        to_bytes(self)
    }
}

/// The commit-id chain every record carries, read without knowing the record's kind.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) struct CommitChain {
    commit_id: Uuid,
    #[serde(default)]
    created_by: Option<Uuid>,
    previous_commit_ids: Vec<Uuid>,
}

impl CommitChain {
    pub(crate) fn from_bytes(bytes: &[u8]) -> Result<CommitChain> {
        serde_json::from_slice(bytes).map_err(|err| corrupt("stored", err.to_string()))
    }

    /// The commit id that wrote this record.
    pub(crate) fn commit_id(&self) -> Uuid {
        self.commit_id
    }

    /// Whether `id` wrote this record or a remembered predecessor.
    pub(crate) fn remembers(&self, id: Uuid) -> bool {
        self.commit_id == id
            || self.created_by == Some(id)
            || self.previous_commit_ids.contains(&id)
    }

    /// Every commit id the record remembers: its writer's, its creator's, its
    /// predecessors'.
    pub(crate) fn commits(&self) -> impl Iterator<Item = Uuid> + '_ {
        std::iter::once(self.commit_id)
            .chain(self.created_by)
            .chain(self.previous_commit_ids.iter().copied())
    }

    /// Whether the chain still covers `id`'s successor: `id` is this record's writer or a
    /// remembered predecessor, so whoever replaced it is known.
    pub(crate) fn covers(&self, id: Uuid) -> bool {
        self.commit_id == id || self.previous_commit_ids.contains(&id)
    }
}

fn corrupt(what: &str, detail: impl std::fmt::Display) -> Error {
    Error::new(
        ErrorKind::CorruptRecord,
        format!("the stored {what} record is invalid: {detail}"),
    )
}

fn parse_record<T: serde::de::DeserializeOwned + HasVersion>(
    bytes: &[u8],
    what: &str,
) -> Result<T> {
    // The plain parse is as strict (unknown fields, duplicates and trailing data are errors)
    // and faster; only a failure is parsed again to name the JSON path.
    let record: T = match serde_json::from_slice(bytes) {
        Ok(record) => record,
        Err(_) => {
            let mut de = serde_json::Deserializer::from_slice(bytes);
            let record: T = serde_path_to_error::deserialize(&mut de)
                .map_err(|err| corrupt(what, format!("at `{}`: {}", err.path(), err.inner())))?;
            de.end().map_err(|err| corrupt(what, err))?;
            record
        }
    };
    if record.record_version() != RECORD_VERSION {
        return Err(corrupt(
            what,
            format!(
                "record-version {} is not supported",
                record.record_version()
            ),
        ));
    }
    Ok(record)
}

fn to_bytes<T: Serialize>(record: &T) -> Vec<u8> {
    // Serialising plain structs of strings, numbers and maps cannot fail.
    serde_json::to_vec(record).unwrap_or_default()
}

trait HasVersion {
    fn record_version(&self) -> i32;
}

impl HasVersion for PointerRecord {
    fn record_version(&self) -> i32 {
        self.record_version
    }
}

impl HasVersion for NamespaceRecord {
    fn record_version(&self) -> i32 {
        self.record_version
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(previous_location: Option<&str>) -> PointerRecord {
        let source = TableDefinition::new("parquet", BTreeMap::new()).expect("valid");
        let mut record = PointerRecord::created(
            None,
            "s3://b/wh/metadata/2.json".into(),
            source,
            Uuid::from_u128(1),
            7,
        );
        record.previous_location = previous_location.map(str::to_owned);
        record
    }

    #[test]
    fn previous_location_is_optional_and_strict() {
        // Written by commit, it round-trips.
        let committed = record(Some("s3://b/wh/metadata/1.json"));
        let bytes = committed.to_bytes();
        assert!(
            String::from_utf8_lossy(&bytes)
                .contains(r#""previous-location":"s3://b/wh/metadata/1.json""#)
        );
        assert_eq!(
            PointerRecord::from_bytes(&bytes).expect("parses"),
            committed
        );
        // Records without it (register, rename, or written before it existed) parse.
        let old = record(None);
        let bytes = old.to_bytes();
        assert!(!String::from_utf8_lossy(&bytes).contains("previous-location"));
        assert_eq!(PointerRecord::from_bytes(&bytes).expect("parses"), old);
        // `null` and other types are corrupt, as everywhere in records.
        let mut value: serde_json::Value = serde_json::from_slice(&bytes).expect("json");
        for bad in [
            serde_json::Value::Null,
            serde_json::json!(1),
            serde_json::json!([]),
        ] {
            value["previous-location"] = bad;
            let err = PointerRecord::from_bytes(&serde_json::to_vec(&value).expect("json"))
                .expect_err("refused");
            assert_eq!(err.kind(), ErrorKind::CorruptRecord, "{err}");
        }
        // A successor keeps it; a new incarnation drops it.
        let moved = committed.successor(PointerState::Moving, Uuid::from_u128(2), 8);
        assert_eq!(moved.previous_location, committed.previous_location);
        let again = PointerRecord::created(
            Some(&committed),
            "s3://b/wh/metadata/3.json".into(),
            committed.source.clone(),
            Uuid::from_u128(3),
            9,
        );
        assert_eq!(again.previous_location, None);
    }
}
