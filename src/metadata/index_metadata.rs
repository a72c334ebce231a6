//! [`IndexMetadata`]: the validated model, its accessors and its canonical JSON form.

use std::collections::BTreeMap;

use bytes::Bytes;
use uuid::Uuid;

use super::FORMAT_VERSION;
use super::invariants::{FamilyRules, Unchecked};
use super::parse::{check_format_version, check_text, deserialize_text};
use super::snapshot::{Snapshot, SnapshotLogEntry};
use super::wire::{WireMetadata, WireSnapshot};
use crate::error::{Error, ErrorKind, Result};
use crate::family::FamilyRegistry;
use crate::warehouse::{Fetched, Warehouse};

use super::MAX_METADATA_BYTES;

impl Warehouse {
    /// Read a metadata file by absolute location: [`ErrorKind::InvalidIndexMetadata`] if
    /// it is outside the warehouse, missing or too large.
    #[doc(hidden)] // A storage helper for the workspace's tests; `Catalog::read_metadata` is the API.
    pub async fn read_metadata(&self, location: &str) -> Result<Bytes> {
        let name = self.relative(location)?;
        match self.get(&name, MAX_METADATA_BYTES as u64).await? {
            Fetched::Object(bytes, _) => Ok(bytes),
            Fetched::Missing => Err(Error::new(
                ErrorKind::InvalidIndexMetadata,
                format!("metadata file `{location}` does not exist"),
            )),
            Fetched::TooLarge(size) => Err(Error::new(
                ErrorKind::InvalidIndexMetadata,
                format!(
                    "metadata file `{location}` has {size} bytes, more than the limit of {MAX_METADATA_BYTES}"
                ),
            )),
        }
    }
}

/// Read the metadata file at the absolute `location` from `warehouse`, then parse and
/// validate it ([`IndexMetadata::from_json_slice`]). Every error names the file: reading
/// (`Warehouse::read_metadata`: outside the warehouse, missing, too large) and parsing
/// (the parse error's kind, its message prefixed with ``metadata file `LOCATION`: ``).
pub(crate) async fn read_index_metadata(
    warehouse: &Warehouse,
    location: &str,
    registry: &FamilyRegistry,
) -> Result<IndexMetadata> {
    let bytes = warehouse.read_metadata(location).await?;
    IndexMetadata::from_json_slice(&bytes, registry).map_err(|err| {
        Error::new(
            err.kind(),
            format!("metadata file `{location}`: {}", err.message()),
        )
    })
}

/// Read the metadata file at the absolute `location` as the base of a commit
/// ([`IndexMetadata::from_json_slice_as_base`]); errors name the file as
/// [`read_index_metadata`]'s do.
pub(crate) async fn read_base_metadata(
    warehouse: &Warehouse,
    location: &str,
) -> Result<IndexMetadata> {
    let bytes = warehouse.read_metadata(location).await?;
    IndexMetadata::from_json_slice_as_base(&bytes).map_err(|err| {
        Error::new(
            err.kind(),
            format!("base metadata file `{location}`: {}", err.message()),
        )
    })
}

/// One immutable, valid index metadata file.
///
/// A value can only be obtained from [`IndexMetadata::from_json_slice`] or the builders
/// ([`IndexMetadata::create`], [`IndexMetadata::successor`],
/// [`IndexMetadata::expire_snapshots`]), all of which check every invariant of the
/// metadata spec and the family and provider rules.
///
/// ```
/// use parqdb_catalog::family::FamilyRegistry;
/// use parqdb_catalog::IndexMetadata;
///
/// let registry = FamilyRegistry::builtin();
/// # let bytes = include_bytes!("../../tests/fixtures/metadata/valid/spec-example.json");
/// let metadata = IndexMetadata::from_json_slice(bytes, &registry)?;
/// assert_eq!(metadata.current_snapshot_id(), 701);
/// assert_eq!(metadata.current_snapshot().contents().index_family, "ivf");
///
/// let canonical = metadata.to_json_vec();
/// let again = IndexMetadata::from_json_slice(&canonical, &registry)?;
/// assert_eq!(again, metadata);
/// assert_eq!(again.to_json_vec(), canonical);
/// # Ok::<(), parqdb_catalog::Error>(())
/// ```
///
/// * [`IndexMetadata::from_json_slice`] parses and validates one metadata file against a
///   [`FamilyRegistry`](crate::family::FamilyRegistry); [`IndexMetadata::to_json_vec`]
///   writes its canonical, byte-stable JSON.
/// * [`IndexMetadata::create`], [`IndexMetadata::successor`] and
///   [`IndexMetadata::expire_snapshots`] build new metadata with an injected
///   [`Clock`](crate::clock::Clock) and [`IdGenerator`](crate::clock::IdGenerator).
/// * [`IndexMetadata::check_successor_of`] holds the rules a commit checks.
///
/// Parsing is strict at every level: unknown fields, duplicate keys (in objects and in
/// every map), missing required fields, `null`, wrong types, out-of-range or non-integral
/// integers, non-canonical UUIDs, invalid UTF-8, trailing data and inputs over
/// 64 MiB are `INVALID_INDEX_METADATA`, and every message starts with
/// the JSON path of the violation. `-0` is the integer 0. A `format-version` that is an
/// `int` other than 1 is `UNSUPPORTED_FORMAT_VERSION`, decided before any other rule; one
/// outside the `int` range is an out-of-range integer (`INVALID_INDEX_METADATA`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexMetadata {
    pub(super) index_uuid: Uuid,
    pub(super) last_updated_ms: i64,
    pub(super) last_sequence_number: i64,
    pub(super) current_snapshot_id: i64,
    /// Position of the current snapshot in `snapshots` (an invariant, not serialized).
    pub(super) current_index: usize,
    pub(super) snapshots: Vec<Snapshot>,
    pub(super) snapshot_log: Vec<SnapshotLogEntry>,
    pub(super) properties: BTreeMap<String, String>,
}

impl IndexMetadata {
    /// Parse and fully validate one metadata document.
    ///
    /// Errors: `UNSUPPORTED_FORMAT_VERSION` if `format-version` is an `int` other than 1
    /// (checked before any other rule; an integer outside the `int` range is an
    /// out-of-range integer, `INVALID_INDEX_METADATA`); otherwise `INVALID_INDEX_METADATA`, whose
    /// message starts with the JSON path of the violation (e.g.
    /// `snapshots[0].index-tables.ivf_postings.definition-version: ...`), for inputs over
    /// 64 MiB, invalid UTF-8, malformed or
    /// too deeply nested JSON, trailing data, unknown fields, duplicate keys, missing
    /// fields, `null`, wrong types, out-of-range or non-integral integers (`-0` is the
    /// integer 0; `-0.0` and `1e0` are not integers), non-canonical
    /// UUIDs, and any violated invariant or family/provider rule.
    pub fn from_json_slice(bytes: &[u8], registry: &FamilyRegistry) -> Result<IndexMetadata> {
        Unchecked::from(read_wire(bytes)?).validate(FamilyRules::Check(registry))
    }

    /// Parse one metadata document as the **base** of a commit: in the format (the
    /// `format-version` and the strict JSON layout, as [`IndexMetadata::from_json_slice`]),
    /// but of the invariants only what the successor rules read — unique snapshot ids and
    /// a `current-snapshot-id` naming a retained snapshot. The base's other invariants and
    /// its family and provider rules are not judged again: metadata published under an
    /// earlier version of a rule stays a base a successor can build on (and fix).
    ///
    /// Crate-private on purpose: the value may break today's rules, so it is only ever
    /// compared against, never published or handed out.
    pub(crate) fn from_json_slice_as_base(bytes: &[u8]) -> Result<IndexMetadata> {
        Unchecked::from(read_wire(bytes)?).into_base()
    }

    /// The canonical JSON form (pretty-printed, fields in spec order, maps sorted by key,
    /// `properties` always present). Byte-stable: parsing it yields an equal value that
    /// serializes to identical bytes.
    pub fn to_json_vec(&self) -> Vec<u8> {
        let wire = WireMetadata {
            format_version: FORMAT_VERSION,
            index_uuid: self.index_uuid,
            last_updated_ms: self.last_updated_ms,
            last_sequence_number: self.last_sequence_number,
            current_snapshot_id: self.current_snapshot_id,
            snapshots: self.snapshots.iter().map(WireSnapshot::from).collect(),
            snapshot_log: self.snapshot_log.clone(),
            properties: self.properties.clone(),
        };
        // Cannot fail: every map has string keys and every Serialize impl is derived.
        serde_json::to_vec_pretty(&wire).expect("index metadata always serializes")
    }

    /// A summary for the `validate` command: `index-uuid`, `current-snapshot-id`,
    /// `snapshot-count`, `last-sequence-number`, `last-updated-ms`, `index-family` and
    /// `metric`.
    #[doc(hidden)] // The CLI's output (also read by the fuzz targets and tests), not API.
    pub fn summary_json(&self) -> serde_json::Value {
        let current = self.current_snapshot();
        serde_json::json!({
            "index-uuid": self.index_uuid.to_string(),
            "current-snapshot-id": self.current_snapshot_id,
            "snapshot-count": self.snapshots.len(),
            "last-sequence-number": self.last_sequence_number,
            "last-updated-ms": self.last_updated_ms,
            "index-family": current.index_family(),
            "metric": current.metric(),
        })
    }

    /// The stable UUID of the logical index.
    pub fn index_uuid(&self) -> Uuid {
        self.index_uuid
    }

    /// The creation time of this metadata file (Unix epoch milliseconds).
    pub fn last_updated_ms(&self) -> i64 {
        self.last_updated_ms
    }

    /// The greatest sequence number ever allocated.
    pub fn last_sequence_number(&self) -> i64 {
        self.last_sequence_number
    }

    /// The id of the current snapshot.
    pub fn current_snapshot_id(&self) -> i64 {
        self.current_snapshot_id
    }

    /// The current snapshot.
    pub fn current_snapshot(&self) -> &Snapshot {
        &self.snapshots[self.current_index]
    }

    /// The retained snapshots, in file order (which has no meaning).
    pub fn snapshots(&self) -> &[Snapshot] {
        &self.snapshots
    }

    /// The retained snapshot with id `snapshot_id`.
    pub fn snapshot(&self, snapshot_id: i64) -> Option<&Snapshot> {
        self.snapshots
            .iter()
            .find(|snapshot| snapshot.snapshot_id == snapshot_id)
    }

    /// The current-snapshot history, oldest first.
    pub fn snapshot_log(&self) -> &[SnapshotLogEntry] {
        &self.snapshot_log
    }

    /// The non-semantic properties.
    pub fn properties(&self) -> &BTreeMap<String, String> {
        &self.properties
    }
}

/// The strict JSON layout of one metadata document, in the supported format version.
fn read_wire(bytes: &[u8]) -> Result<WireMetadata> {
    const WHAT: &str = "index metadata";
    let text = check_text(bytes, WHAT)?;
    check_format_version(&text)?;
    let wire: WireMetadata = deserialize_text(&text, WHAT)?;
    if wire.format_version != FORMAT_VERSION {
        return Err(Error::new(
            ErrorKind::UnsupportedFormatVersion,
            format!("format-version: {} is not supported", wire.format_version),
        ));
    }
    Ok(wire)
}
