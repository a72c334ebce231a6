//! Reachability: the roots (every pointer record of the catalog) and everything they
//! reference, plus the evidence the retention clock may use.
//!
//! # Roots
//! Every pointer record is read: by listing the store's whole `i` tree where the store
//! supports it (memory, local files, S3), else by walking every namespace record —
//! including dropped namespaces — and listing each namespace's index prefix (the only
//! prefixes DynamoDB can list). Records are never deleted, so a listing finds every record
//! that existed when it started.
//!
//! * `live` and `moving` records are roots.
//! * A `dropped` record (tombstone) whose `updated-ms` is within the clock-skew allowance
//!   of the run is also a root: it was dropped or renamed away while the walk was running,
//!   and the record that took its metadata over (a rename destination) may have been read
//!   before it was written. Treating it as a root closes the rename race of a non-atomic
//!   walk.
//! * Older tombstones are not roots but **evidence**: whatever their metadata references
//!   lost reachability no earlier than the tombstone's `updated-ms`, so that time is a
//!   lower bound for the retention clock.
//!
//! # Closure
//! From each root metadata file: every retained snapshot's index-table locations
//! (directory prefixes), every family parameter reference (`ivf_centroids_metadata_location`)
//! and, recursively, what a referenced file references if it parses as index metadata, plus
//! every source-table property that names a location inside the warehouse (source tables
//! are never owned, hence never deleted). A root metadata file that cannot be read or parsed
//! aborts the run: nothing is deleted on incomplete knowledge.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};

use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::refs::{RefMap, normalize};
use crate::catalog::Catalog;
use crate::catalog::record::{PointerRecord, PointerState};
use crate::catalog::write::store_error;
use crate::error::{Error, ErrorKind, Result};
use crate::family::FamilyRegistry;
use crate::identifier::Namespace;
use crate::metadata::{IndexMetadata, MAX_METADATA_BYTES, TableDefinition};
use crate::store::{PointerStore, StoreError, StoreKey, Versioned};
use crate::warehouse::Warehouse;
use crate::warehouse::{Fetched, aliases};

const PAGE: usize = 1000;

/// What the walk found among the pointer records.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct RootStats {
    /// Pointer records read.
    pub pointer_records: u64,
    /// `live` records.
    pub live: u64,
    /// `moving` records (renames under way; roots).
    pub moving: u64,
    /// `dropped` records (tombstones).
    pub tombstones: u64,
    /// Tombstones recent enough to count as roots.
    pub recent_tombstone_roots: u64,
    /// Metadata files read while computing reachability.
    pub metadata_files_read: u64,
    /// Distinct reachable references (objects and directory prefixes).
    pub references: u64,
}

/// One incarnation of an identifier, as seen by a walk.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub(crate) struct Incarnation {
    /// The register or rename that created it (stable across its commits).
    pub created_by: Uuid,
    /// The index uuid of its current metadata, if readable.
    pub index_uuid: Option<Uuid>,
    /// When its record last changed.
    pub updated_ms: i64,
    /// Whether it replaced a tombstone (earlier incarnations of the key are hidden).
    pub reincarnation: bool,
    /// The writes just before its creation, newest first, as far as the chain shows them:
    /// the drop it replaced, and the write that drop replaced.
    #[serde(default)]
    pub replaced: Vec<Uuid>,
}

/// Evidence about when unreachable objects lost reachability.
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub(crate) struct Evidence {
    /// The latest `updated-ms` of any pointer record: every record has been in its current
    /// state since then, so an object unreachable now was unreachable since then too.
    /// `None` when there are no records.
    pub quiet_since_ms: Option<i64>,
    /// Whether `quiet_since_ms` may be used (no dangling references were seen).
    pub quiet_usable: bool,
    /// Incarnations of roots and of tombstones within the retention horizon, by the
    /// index uuid of their metadata.
    pub by_uuid: HashMap<Uuid, Vec<Incarnation>>,
    /// Incarnations within the horizon that replaced a tombstone.
    pub reincarnations: Vec<Incarnation>,
    /// The `created-by` of every record (the run's journal).
    pub all_incarnations: HashSet<Uuid>,
    /// The `commit-id` of every record (the run's journal).
    #[serde(default)]
    pub all_writes: HashSet<Uuid>,
    /// References of recently dropped metadata, each with its tombstone's `updated-ms`.
    pub tombstone_refs: RefMap,
}

impl Evidence {
    /// Incarnations that changed after `after_ms` and may have published the metadata
    /// file of index `uuid` (same uuid; or, when `strict`, any re-incarnation but one
    /// whose replaced drop, or the write that drop replaced, is in `seen`: between a state
    /// a finished run saw and the re-incarnation there was at most the drop, so the only
    /// incarnation it hides is one that run saw).
    pub(crate) fn lineage_after(
        &self,
        uuid: Uuid,
        after_ms: i64,
        strict: bool,
        seen: &HashSet<Uuid>,
    ) -> Vec<&Incarnation> {
        let same = self.by_uuid.get(&uuid).into_iter().flatten();
        let reused = self
            .reincarnations
            .iter()
            .filter(|inc| strict && !inc.replaced.iter().any(|write| seen.contains(write)));
        same.chain(reused)
            .filter(|inc| inc.updated_ms > after_ms)
            .collect()
    }
}

/// One walk's result.
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub(crate) struct Observation {
    pub reachable: RefMap,
    /// The metadata files the walk read (roots and what their family references reach):
    /// everything they name is in `reachable`. (A file `reachable` covers only as part of
    /// a referenced directory is not among them.)
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub walked: BTreeSet<String>,
    pub roots: RootStats,
    pub evidence: Evidence,
    pub warnings: Vec<String>,
}

/// The references of one metadata file, in canonical form.
#[derive(Debug, Default)]
pub(crate) struct References {
    /// Index-table locations and source-table locations inside the warehouse.
    pub direct: Vec<String>,
    /// Family parameter references (objects that may themselves be metadata).
    pub family: Vec<String>,
}

/// The references of `metadata`.
pub(crate) fn references_of(
    metadata: &IndexMetadata,
    registry: &FamilyRegistry,
    warehouse: &Warehouse,
) -> References {
    let mut refs = References::default();
    for snapshot in metadata.snapshots() {
        if let Some(provider) = registry.provider(snapshot.index_provider().provider()) {
            for table in snapshot.index_tables().values() {
                if let Some(location) = provider.table_location(table.properties()) {
                    refs.direct.extend(normalize(location));
                }
            }
        }
        refs.direct
            .extend(source_locations(snapshot.source_table(), warehouse));
        if let Some(family) = registry.family(snapshot.index_family()) {
            for location in family.warehouse_references(snapshot.parameters()) {
                refs.family.extend(normalize(location));
            }
        }
    }
    refs
}

/// Source-table properties naming a location inside the warehouse. Source bindings are
/// written by other engines, so the common other spellings of a warehouse URI count too:
/// Hadoop's `file:/dir` for `file:///dir`, and S3A/S3N's `s3a://` and `s3n://` for `s3://`
/// (when unsure whether a source names warehouse objects, keep them).
pub(crate) fn source_locations(source: &TableDefinition, warehouse: &Warehouse) -> Vec<String> {
    source
        .properties()
        .values()
        .flat_map(|value| source_spellings(value.trim_end_matches('/')))
        .filter_map(|value| warehouse.relative(&value).ok())
        .collect()
}

/// `value` and the spellings other engines use for the same location.
fn source_spellings(value: &str) -> Vec<String> {
    let mut out = vec![value.to_owned()];
    for scheme in ["s3a://", "s3n://"] {
        if let Some(rest) = value.strip_prefix(scheme) {
            out.push(format!("s3://{rest}"));
        }
    }
    if let Some(rest) = value.strip_prefix("file:/")
        && !rest.starts_with('/')
    {
        out.push(format!("file:///{rest}"));
    }
    out
}

/// What reading a possibly-metadata object gave.
pub(crate) enum Parsed {
    /// It is valid index metadata.
    Metadata(Box<IndexMetadata>),
    /// It exists but is not valid index metadata of a format this collector understands:
    /// why, whether it may be metadata of another format version (then it is never
    /// deleted), and every string in it that names a warehouse object (kept while it
    /// exists: it might reference them).
    Opaque {
        why: String,
        foreign_format: bool,
        references: Vec<String>,
    },
    /// It does not exist.
    Missing,
}

/// Read and parse the object `name`. Store failures are errors; anything else that is not
/// valid metadata is opaque.
pub(crate) async fn read_parsed(
    warehouse: &Warehouse,
    registry: &FamilyRegistry,
    name: &str,
) -> Result<Parsed> {
    let bytes: Bytes = match warehouse.get(name, MAX_METADATA_BYTES as u64).await {
        Ok(Fetched::Object(bytes, _)) => bytes,
        Ok(Fetched::Missing) => return Ok(Parsed::Missing),
        Ok(Fetched::TooLarge(size)) => {
            return Ok(Parsed::Opaque {
                why: format!("{size} bytes, larger than any metadata file"),
                foreign_format: false,
                references: Vec::new(),
            });
        }
        Err(err) => {
            return Err(Error::new(
                err.kind(),
                format!("gc aborted: reading `{name}` failed: {}", err.message()),
            ));
        }
    };
    match IndexMetadata::from_json_slice(&bytes, registry) {
        Ok(metadata) => Ok(Parsed::Metadata(Box::new(metadata))),
        Err(err) => Ok(Parsed::Opaque {
            why: err.message().to_owned(),
            foreign_format: err.kind() == ErrorKind::UnsupportedFormatVersion,
            references: string_references(&bytes, warehouse),
        }),
    }
}

/// Every string value in a JSON document that names a warehouse object: a
/// warehouse-relative location or an absolute location inside the warehouse. A superset
/// of whatever an unparseable metadata file could reference: a relative string is taken
/// as it is, even with characters this catalog's metadata may not contain (another
/// format may allow a `%` and mean the object at that literal name), and in its other
/// spellings too (that `%` may also be an escape).
fn string_references(bytes: &[u8], warehouse: &Warehouse) -> Vec<String> {
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(bytes) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let mut stack = vec![&value];
    while let Some(value) = stack.pop() {
        match value {
            serde_json::Value::String(text) => match warehouse.relative(text.trim_end_matches('/'))
            {
                Ok(name) => out.push(name),
                Err(_) if !text.contains("://") => {
                    if let Some(name) = normalize(text) {
                        out.extend(aliases(&name));
                        out.push(name);
                    }
                }
                Err(_) => {}
            },
            serde_json::Value::Array(items) => stack.extend(items),
            serde_json::Value::Object(fields) => stack.extend(fields.values()),
            _ => {}
        }
    }
    out
}

/// Whether a record's incarnation may have replaced a tombstone (register or rename over a
/// dropped key), judged from its commit-id chain. A chain that no longer shows the
/// incarnation's creation, or shows it first of a full chain (more than
/// [`HISTORY`](crate::catalog::record::HISTORY) writes since), may hide one: it counts.
/// (Once a finished run and the clock's run list the incarnation, it moves no clock.)
fn is_reincarnation(record: &PointerRecord) -> bool {
    let chain = &record.previous_commit_ids;
    if record.created_by == record.commit_id {
        return !chain.is_empty();
    }
    match chain.iter().position(|id| *id == record.created_by) {
        Some(position) => position > 0 || chain.len() >= crate::catalog::record::HISTORY,
        None => true,
    }
}

/// The two writes before a re-incarnation's creation in its commit-id chain, newest
/// first (fewer when the chain does not show them).
fn replaced_writes(record: &PointerRecord) -> Vec<Uuid> {
    let chain = &record.previous_commit_ids;
    let created = if record.created_by == record.commit_id {
        chain.len()
    } else {
        match chain.iter().position(|id| *id == record.created_by) {
            Some(position) => position,
            None => return Vec::new(),
        }
    };
    chain[..created].iter().rev().take(2).copied().collect()
}

/// Read every pointer record; `visit` gets each (key, value) once, in listing order. Records
/// a listing returns without their values (S3 pages carry no bodies) are read `concurrency`
/// at a time.
pub(crate) async fn for_each_record(
    store: &dyn PointerStore,
    concurrency: usize,
    visit: &mut (dyn FnMut(&StoreKey, &[u8]) -> Result<()> + Send),
) -> Result<()> {
    let everything = StoreKey::new("i")?;
    match list_prefix(store, &everything, concurrency, &mut |key, value| {
        if key.as_str().starts_with("i/") {
            visit(key, value)
        } else {
            Ok(())
        }
    })
    .await
    {
        Ok(()) => return Ok(()),
        Err(Failure::Store(StoreError::NotSupported(_))) => {}
        Err(Failure::Store(err)) => return Err(store_error(store, err)),
        Err(Failure::Visit(err)) => return Err(err),
    }
    // Walk the namespace tree, dropped namespaces included.
    let mut prefixes = VecDeque::from([Namespace::top_level_prefix()]);
    while let Some(prefix) = prefixes.pop_front() {
        let mut namespaces = Vec::new();
        list_prefix(store, &prefix, concurrency, &mut |key, _| {
            namespaces.push(Namespace::from_store_key(key.as_str()).map_err(|err| {
                Error::new(
                    ErrorKind::CorruptRecord,
                    format!("stored key `{key}`: {}", err.message()),
                )
            })?);
            Ok(())
        })
        .await
        .map_err(|failure| failure.into_error(store))?;
        for namespace in namespaces {
            prefixes.push_back(namespace.children_prefix());
            list_prefix(store, &namespace.indexes_prefix(), concurrency, visit)
                .await
                .map_err(|failure| failure.into_error(store))?;
        }
    }
    Ok(())
}

enum Failure {
    Store(StoreError),
    Visit(Error),
}

impl Failure {
    fn into_error(self, store: &dyn PointerStore) -> Error {
        match self {
            Failure::Store(err) => store_error(store, err),
            Failure::Visit(err) => err,
        }
    }
}

async fn list_prefix(
    store: &dyn PointerStore,
    prefix: &StoreKey,
    concurrency: usize,
    visit: &mut (dyn FnMut(&StoreKey, &[u8]) -> Result<()> + Send),
) -> std::result::Result<(), Failure> {
    let mut after: Option<StoreKey> = None;
    loop {
        let page = store
            .list(prefix, after.as_ref(), PAGE)
            .await
            .map_err(Failure::Store)?;
        let mut values = futures::stream::iter(page.entries)
            .map(|entry| async move {
                let value: Option<Versioned> = match entry.value {
                    Some(value) => Some(value),
                    None => store.get(&entry.key).await?,
                };
                Ok::<_, StoreError>((entry.key, value))
            })
            .buffered(concurrency.max(1));
        while let Some(read) = values.next().await {
            let (key, value) = read.map_err(Failure::Store)?;
            if let Some(value) = value {
                visit(&key, &value.value).map_err(Failure::Visit)?;
            }
            after = Some(key);
        }
        if !page.more {
            return Ok(());
        }
    }
}

/// Walk the catalog at `now_ms`: the pointer records (the roots and the evidence they
/// carry), the closure over root metadata, the metadata of recent tombstones, then each
/// incarnation attached to the index uuid of its metadata.
pub(crate) async fn observe(
    catalog: &Catalog,
    now_ms: i64,
    retention_ms: i64,
    skew_ms: i64,
    concurrency: usize,
) -> Result<Observation> {
    let mut walker = Walker {
        catalog,
        concurrency,
        observation: Observation {
            evidence: Evidence {
                quiet_usable: true,
                ..Evidence::default()
            },
            ..Observation::default()
        },
        uuids: HashMap::new(),
        names: HashMap::new(),
    };
    let records = walker.read_records(now_ms, retention_ms, skew_ms).await?;
    walker.close_over_roots(&records.roots).await?;
    walker.read_tombstones(records.tombstones).await?;
    walker.attach_incarnations(records.incarnations);
    let mut observation = walker.observation;
    observation.roots.references = observation.reachable.len() as u64;
    Ok(observation)
}

/// One walk of the catalog: where it reads, and what it has found so far.
struct Walker<'a> {
    catalog: &'a Catalog,
    /// How many reads at once.
    concurrency: usize,
    observation: Observation,
    /// Canonical metadata name -> its index uuid (roots and tombstones).
    uuids: HashMap<String, Uuid>,
    /// Absolute location -> canonical name.
    names: HashMap<String, String>,
}

impl Walker<'_> {
    /// Read every pointer record once (see "Roots" in the module docs): count it, note its
    /// evidence and its source locations in `observation`, and keep what the walk over
    /// metadata needs.
    async fn read_records(
        &mut self,
        now_ms: i64,
        retention_ms: i64,
        skew_ms: i64,
    ) -> Result<Records> {
        let (catalog, concurrency) = (self.catalog, self.concurrency);
        let observation = &mut self.observation;
        let warehouse = catalog.warehouse();
        let mut records = Records::default();
        let mut seen_keys: HashSet<StoreKey> = HashSet::new();
        let recent_after = now_ms.saturating_sub(skew_ms);
        let horizon = now_ms.saturating_sub(retention_ms.saturating_add(skew_ms));
        let mut visit = |key: &StoreKey, value: &[u8]| -> Result<()> {
            if !seen_keys.insert(key.clone()) {
                return Ok(());
            }
            let record = PointerRecord::from_bytes(value).map_err(|err| {
                Error::new(
                    err.kind(),
                    format!("gc aborted: record `{key}`: {}", err.message()),
                )
            })?;
            records.note(observation, &record, warehouse, horizon, recent_after);
            Ok(())
        };
        for_each_record(catalog.store().as_ref(), concurrency, &mut visit).await?;
        Ok(records)
    }

    /// The closure over root metadata, layer by layer (see "Closure" in the module docs):
    /// everything the `roots` reach is reachable; a root metadata file that is missing or
    /// invalid aborts the walk.
    async fn close_over_roots(&mut self, roots: &BTreeMap<String, i64>) -> Result<()> {
        let (catalog, concurrency) = (self.catalog, self.concurrency);
        let (warehouse, registry) = (catalog.warehouse(), catalog.registry());
        let Walker {
            observation,
            uuids,
            names,
            ..
        } = self;
        let mut visited: HashSet<String> = HashSet::new();
        let mut frontier: Vec<(String, Option<i64>)> = Vec::new();
        for (location, updated_ms) in roots {
            let name = warehouse.relative(location).map_err(|err| {
                Error::new(
                    err.kind(),
                    format!(
                        "gc aborted: a root names a metadata file outside the warehouse: {}",
                        err.message()
                    ),
                )
            })?;
            names.insert(location.clone(), name.clone());
            if visited.insert(name.clone()) {
                frontier.push((name, Some(*updated_ms)));
            }
        }
        while !frontier.is_empty() {
            let layer = std::mem::take(&mut frontier);
            let results: Vec<(String, Option<i64>, Parsed)> = futures::stream::iter(layer)
                .map(|(name, root_updated)| async move {
                    let parsed = read_parsed(warehouse, registry, &name).await?;
                    Ok::<_, Error>((name, root_updated, parsed))
                })
                .buffer_unordered(concurrency.max(1))
                .try_collect()
                .await?;
            for (name, root_updated, parsed) in results {
                observation.reachable.insert(name.clone(), 0);
                if !matches!(parsed, Parsed::Missing) {
                    observation.walked.insert(name.clone());
                }
                match parsed {
                    Parsed::Metadata(metadata) => {
                        observation.roots.metadata_files_read += 1;
                        if root_updated.is_some() {
                            uuids.insert(name.clone(), metadata.index_uuid());
                        }
                        let refs = references_of(&metadata, registry, warehouse);
                        for reference in refs.direct {
                            observation.reachable.insert(reference, 0);
                        }
                        for reference in refs.family {
                            if visited.insert(reference.clone()) {
                                frontier.push((reference, None));
                            }
                        }
                    }
                    Parsed::Missing if root_updated.is_some() => {
                        return Err(Error::new(
                            ErrorKind::InvalidIndexMetadata,
                            format!(
                                "gc aborted: the metadata file `{}` of a catalog pointer does not exist; nothing is deleted until this is repaired",
                                warehouse.absolute(&name)
                            ),
                        ));
                    }
                    Parsed::Opaque { why, .. } if root_updated.is_some() => {
                        return Err(Error::new(
                            ErrorKind::InvalidIndexMetadata,
                            format!(
                                "gc aborted: the metadata file `{}` of a catalog pointer is invalid: {why}",
                                warehouse.absolute(&name)
                            ),
                        ));
                    }
                    Parsed::Missing => {
                        observation.evidence.quiet_usable = false;
                        observation.warnings.push(format!(
                            "a family parameter references `{name}`, which does not exist"
                        ));
                    }
                    Parsed::Opaque { references, .. } => {
                        // A referenced object in another format: reachable itself, and so is
                        // whatever it may name.
                        for reference in references {
                            observation.reachable.insert(reference, 0);
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// Evidence from recently dropped metadata: whatever the metadata of a tombstone within
    /// the retention horizon references lost reachability no earlier than its drop.
    async fn read_tombstones(&mut self, tombstones: BTreeMap<String, i64>) -> Result<()> {
        let (catalog, concurrency) = (self.catalog, self.concurrency);
        let (warehouse, registry) = (catalog.warehouse(), catalog.registry());
        let Walker {
            observation,
            uuids,
            names,
            ..
        } = self;
        let tombstone_list: Vec<(String, i64)> = tombstones.into_iter().collect();
        let parsed: Vec<(String, String, i64, Option<Parsed>)> =
            futures::stream::iter(tombstone_list)
                .map(|(location, dropped_ms)| async move {
                    let Ok(name) = warehouse.relative(&location) else {
                        return Ok::<_, Error>((location.clone(), location, dropped_ms, None));
                    };
                    let parsed = read_parsed(warehouse, registry, &name).await?;
                    Ok((location, name, dropped_ms, Some(parsed)))
                })
                .buffer_unordered(concurrency.max(1))
                .try_collect()
                .await?;
        for (location, name, dropped_ms, parsed) in parsed {
            let evidence = &mut observation.evidence;
            match parsed {
                Some(Parsed::Metadata(metadata)) => {
                    names.insert(location, name.clone());
                    uuids.insert(name.clone(), metadata.index_uuid());
                    evidence.tombstone_refs.insert(name, dropped_ms);
                    let refs = references_of(&metadata, registry, warehouse);
                    for reference in refs.direct.into_iter().chain(refs.family) {
                        evidence.tombstone_refs.insert(reference, dropped_ms);
                    }
                }
                Some(Parsed::Missing) => {}
                Some(Parsed::Opaque {
                    why, references, ..
                }) => {
                    evidence.tombstone_refs.insert(name.clone(), dropped_ms);
                    for reference in references {
                        evidence.tombstone_refs.insert(reference, dropped_ms);
                    }
                    observation.warnings.push(format!(
                        "the metadata of a dropped index, `{name}`, is invalid: {why}"
                    ));
                }
                None => observation.warnings.push(format!(
                    "a dropped index names `{name}`, outside the warehouse"
                )),
            }
        }
        Ok(())
    }

    /// Attach each incarnation to the index uuid of its metadata.
    fn attach_incarnations(&mut self, incarnations: HashMap<String, Vec<Incarnation>>) {
        let Walker {
            observation,
            uuids,
            names,
            ..
        } = self;
        for (location, list) in incarnations {
            let uuid = names
                .get(&location)
                .and_then(|name| uuids.get(name))
                .copied();
            for mut incarnation in list {
                incarnation.index_uuid = uuid;
                if incarnation.reincarnation {
                    observation
                        .evidence
                        .reincarnations
                        .push(incarnation.clone());
                }
                if let Some(uuid) = uuid {
                    observation
                        .evidence
                        .by_uuid
                        .entry(uuid)
                        .or_default()
                        .push(incarnation);
                }
            }
        }
    }
}

/// What the walk over the pointer records leaves for the walk over metadata.
#[derive(Default)]
struct Records {
    /// Absolute metadata location -> the latest `updated-ms` of a root record naming it.
    roots: BTreeMap<String, i64>,
    /// Tombstone metadata within the retention horizon -> the latest drop time.
    tombstones: BTreeMap<String, i64>,
    /// Absolute metadata location -> incarnations naming it (roots and horizon tombstones).
    incarnations: HashMap<String, Vec<Incarnation>>,
}

impl Records {
    /// Note one pointer record: a root if `live`, `moving` or dropped at `recent_after`
    /// or later; evidence if dropped after `horizon`.
    fn note(
        &mut self,
        obs: &mut Observation,
        record: &PointerRecord,
        warehouse: &Warehouse,
        horizon: i64,
        recent_after: i64,
    ) {
        let Records {
            roots,
            tombstones,
            incarnations,
        } = self;
        let stats = &mut obs.roots;
        stats.pointer_records += 1;
        let evidence = &mut obs.evidence;
        evidence.quiet_since_ms = Some(
            evidence
                .quiet_since_ms
                .map_or(record.updated_ms, |q| q.max(record.updated_ms)),
        );
        evidence.all_incarnations.insert(record.created_by);
        evidence.all_writes.insert(record.commit_id);
        if record.updated_ms > horizon {
            incarnations
                .entry(record.metadata_location.clone())
                .or_default()
                .push(Incarnation {
                    created_by: record.created_by,
                    index_uuid: None,
                    updated_ms: record.updated_ms,
                    reincarnation: is_reincarnation(record),
                    replaced: replaced_writes(record),
                });
        }
        for location in source_locations(&record.source, warehouse) {
            obs.reachable.insert(location, 0);
        }
        let root = match record.state {
            PointerState::Live => {
                stats.live += 1;
                true
            }
            PointerState::Moving => {
                stats.moving += 1;
                true
            }
            PointerState::Dropped => {
                stats.tombstones += 1;
                if record.updated_ms >= recent_after {
                    stats.recent_tombstone_roots += 1;
                    true
                } else {
                    if record.updated_ms > horizon {
                        let at = tombstones
                            .entry(record.metadata_location.clone())
                            .or_insert(record.updated_ms);
                        *at = (*at).max(record.updated_ms);
                    }
                    false
                }
            }
        };
        if root {
            let at = roots
                .entry(record.metadata_location.clone())
                .or_insert(record.updated_ms);
            *at = (*at).max(record.updated_ms);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metadata::TableDefinition;

    fn record(created_by: Uuid, commit_id: Uuid, previous: Vec<Uuid>) -> PointerRecord {
        let source = TableDefinition::new(
            "parquet",
            std::collections::BTreeMap::from([("definition-version".to_owned(), "1".to_owned())]),
        )
        .expect("source");
        let mut record =
            PointerRecord::created(None, "memory://x/m.json".into(), source, created_by, 1);
        record.commit_id = commit_id;
        record.previous_commit_ids = previous;
        record
    }

    #[test]
    fn sources_in_other_engines_spellings_are_inside_the_warehouse() {
        let warehouse = Warehouse::in_memory("s3://b/wh").expect("warehouse");
        let source = |location: &str| {
            TableDefinition::new(
                "parquet",
                std::collections::BTreeMap::from([
                    ("definition-version".to_owned(), "1".to_owned()),
                    ("location".to_owned(), location.to_owned()),
                ]),
            )
            .expect("source")
        };
        for spelling in [
            "s3://b/wh/indexes/src/",
            "s3a://b/wh/indexes/src",
            "s3n://b/wh/indexes/src/",
        ] {
            assert_eq!(
                source_locations(&source(spelling), &warehouse),
                vec!["indexes/src".to_owned()],
                "{spelling}"
            );
        }
        assert!(source_locations(&source("s3a://other/wh/indexes/src"), &warehouse).is_empty());
        assert_eq!(
            source_spellings("file:/data/wh/indexes/src"),
            vec![
                "file:/data/wh/indexes/src".to_owned(),
                "file:///data/wh/indexes/src".to_owned()
            ]
        );
    }

    #[test]
    fn reincarnations_are_recognised_from_the_chain() {
        let (a, b, c) = (Uuid::from_u128(1), Uuid::from_u128(2), Uuid::from_u128(3));
        assert!(!is_reincarnation(&record(a, a, vec![])), "fresh register");
        assert!(
            is_reincarnation(&record(a, a, vec![b])),
            "register over a tombstone"
        );
        assert!(
            !is_reincarnation(&record(a, c, vec![a])),
            "fresh register, one commit"
        );
        assert!(
            is_reincarnation(&record(a, c, vec![b, a])),
            "reused key, one commit"
        );
        assert!(
            is_reincarnation(&record(a, c, vec![b])),
            "a chain truncated past the creation may hide a tombstone"
        );
        let full: Vec<Uuid> = std::iter::once(a)
            .chain((10..25).map(Uuid::from_u128))
            .collect();
        assert_eq!(full.len(), crate::catalog::record::HISTORY);
        assert!(
            is_reincarnation(&record(a, c, full)),
            "a full chain starting at the creation may have lost the tombstone before it"
        );
    }
}
