//! Reachability: the roots (every pointer record of the catalog) and everything they
//! reference.
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
//!   walk. (The change log closes it too: a rename's steps are logged publications.)
//!
//! The walk also keeps every record's commit id (the run's journal, and what the next
//! run's [`history`](super::history) compares with).
//!
//! # Closure
//! From each root metadata file: every retained snapshot's index-table locations
//! (directory prefixes), every family parameter reference (`ivf_centroids_metadata_location`)
//! and, recursively, what a referenced file references if it parses as index metadata, plus
//! every source-table property that names a location inside the warehouse (source tables
//! are never owned, hence never deleted). A root metadata file that cannot be read or parsed
//! aborts the run: nothing is deleted on incomplete knowledge.

use std::collections::{BTreeMap, BTreeSet, HashSet, VecDeque};

use futures::{StreamExt, TryStreamExt};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::history::{History, Stranger, Walked};
use super::journal::{JournalFacts, Seen};
use super::refs::RefMap;
use crate::catalog::Catalog;
use crate::catalog::record::{HISTORY, PointerRecord, PointerState};
use crate::catalog::write::store_error;
use crate::error::{Error, ErrorKind, Result};
use crate::identifier::Namespace;
use crate::metadata::named::{
    Below, Parsed, directories_of, files_below, read_parsed, references_of,
};
use crate::store::PointerStoreExt;
use crate::store::{PointerStore, StoreError, StoreKey, Versioned};
use crate::warehouse::MANAGED_PREFIXES;

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
    /// Every pointer record's store key and commit id.
    #[serde(default)]
    pub records: BTreeMap<String, Uuid>,
    /// The writes of each record since the previous finished run's walk, newest first, as
    /// far as the record's commit chain shows them (empty for a record that run saw as it
    /// is): each must be one the change log announces (see [`history`](super::history)).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub changed: BTreeMap<String, Vec<Uuid>>,
    /// Records that do not remember the commit the previous finished run saw at their key
    /// (or that a newer journal that no longer counts saw there): see [`Stranger`].
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub unrelated: BTreeMap<String, Stranger>,
    /// Keys of vanished records (`JournalFacts::vanished`) that hold a record that does
    /// not remember the commit that vanished: a record that was away comes back as it
    /// was, so that one is not it, however long its chain (round 39 L1).
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub not_back: BTreeSet<String>,
    /// What the change log says about this walk (read after it).
    #[serde(default)]
    pub history: History,
    pub warnings: Vec<String>,
    /// Family references that named no file, or one that does not parse (kept apart from
    /// the walk's file: see [`dangling`](super::dangling)).
    #[serde(skip)]
    pub dangling: BTreeSet<String>,
    /// The directories live metadata names whose files the walk read as family
    /// references' (`metadata::named::files_below`): the guard lists them again before
    /// every delete batch, as a file may appear there after the walk.
    #[serde(skip)]
    pub directories: BTreeSet<String>,
}

impl Observation {
    /// What the change log must explain of this walk.
    pub(crate) fn walked(&self) -> Walked<'_> {
        Walked {
            records: &self.records,
            changed: &self.changed,
            unrelated: &self.unrelated,
            not_back: &self.not_back,
        }
    }
}

/// The writes of `record` after `seen` (the commit the previous finished run saw at its
/// key, if any), newest first: its commit id and its chain back to `seen`, or as far as
/// the chain goes. A record written since by this catalog shows only writes the change log
/// announced; a restored backup overwritten again before a walk shows its own commit id
/// in the chain.
fn writes_since(record: &PointerRecord, seen: Seen) -> Vec<Uuid> {
    if seen.is(record.commit_id) {
        return Vec::new();
    }
    let mut writes = vec![record.commit_id];
    for id in record.previous_commit_ids.iter().rev() {
        if seen.is(*id) {
            break;
        }
        writes.push(*id);
    }
    writes
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

/// Walk the catalog at `now_ms`: the pointer records (the roots), then the closure over
/// root metadata. `previous` is what the previous finished run's walk saw.
pub(crate) async fn observe(
    catalog: &Catalog,
    now_ms: i64,
    skew_ms: i64,
    previous: &JournalFacts,
    concurrency: usize,
) -> Result<Observation> {
    let mut walker = Walker {
        catalog,
        concurrency,
        observation: Observation::default(),
    };
    let roots = walker.read_records(now_ms, skew_ms, previous).await?;
    walker.close_over_roots(&roots).await?;
    let mut observation = walker.observation;
    observation
        .reachable
        .add_link_targets(catalog.warehouse())
        .await?;
    observation.roots.references = observation.reachable.len() as u64;
    Ok(observation)
}

/// One walk of the catalog: where it reads, and what it has found so far.
struct Walker<'a> {
    catalog: &'a Catalog,
    /// How many reads at once.
    concurrency: usize,
    observation: Observation,
}

impl Walker<'_> {
    /// Read every pointer record once (see "Roots" in the module docs): count it, keep its
    /// commit id and its source locations in `observation`; the root metadata locations.
    async fn read_records(
        &mut self,
        now_ms: i64,
        skew_ms: i64,
        previous: &JournalFacts,
    ) -> Result<BTreeSet<String>> {
        let (catalog, concurrency) = (self.catalog, self.concurrency);
        let observation = &mut self.observation;
        let warehouse = catalog.warehouse();
        let mut roots = BTreeSet::new();
        let recent_after = now_ms.saturating_sub(skew_ms);
        // The records the previous finished run saw (or that had vanished, or that newer
        // journals list) that this walk has not seen yet.
        let unseen = std::sync::Mutex::new(
            previous
                .records
                .keys()
                .chain(previous.vanished.keys())
                .chain(previous.untrusted.keys())
                .cloned()
                .collect::<BTreeSet<String>>(),
        );
        let mut visit = |key: &StoreKey, value: &[u8]| -> Result<()> {
            if let Ok(mut unseen) = unseen.lock() {
                unseen.remove(key.as_str());
            }
            if observation.records.contains_key(key.as_str()) {
                return Ok(());
            }
            let record = PointerRecord::from_bytes(value).map_err(|err| {
                Error::new(
                    err.kind(),
                    format!("gc aborted: record `{key}`: {}", err.message()),
                )
            })?;
            observation
                .records
                .insert(key.as_str().to_owned(), record.commit_id);
            let changed = writes_since(&record, previous.seen(key.as_str()));
            if !changed.is_empty() {
                observation.changed.insert(key.as_str().to_owned(), changed);
            }
            // A chain shorter than its bound is the record's whole history since it was
            // created: one that does not reach a commit seen at this key never held it.
            let key = key.as_str();
            let stranger = Stranger {
                origin: (record.previous_commit_ids.len() >= HISTORY).then(|| record.origin()),
            };
            let seen = [previous.records.get(key), previous.untrusted.get(key)];
            if seen
                .into_iter()
                .flatten()
                .any(|seen| !record.remembers(*seen))
            {
                observation.unrelated.insert(key.to_owned(), stranger);
            }
            if previous
                .vanished
                .get(key)
                .is_some_and(|gone| !record.remembers(*gone))
            {
                observation.not_back.insert(key.to_owned());
            }
            let stats = &mut observation.roots;
            stats.pointer_records += 1;
            let names = record.source.warehouse_names(&mut warehouse.name_reader());
            let whole: Vec<&str> = MANAGED_PREFIXES
                .iter()
                .copied()
                .filter(|prefix| names.iter().any(|name| name == prefix))
                .collect();
            // A source a reader may find anything through (an overlay mount, a place the
            // collector may not read, too many alternatives): said, not kept silently
            // (round 86).
            if !whole.is_empty() {
                let whole: Vec<String> =
                    whole.iter().map(|prefix| format!("`{prefix}/`")).collect();
                observation.warnings.push(format!(
                    "the source table of the pointer record `{key}` may lead to any file under {} (its location, or a link or mount on its way, could not be read within the collector's bounds: an overlay mount, a place the collector may not read, a link into a process's view); all of it is kept while the record is there. Move the source table, or bind the index to another one",
                    whole.join(" and ")
                ));
            }
            for location in names {
                observation.reachable.insert(location, 0);
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
                    let recent = record.updated_ms >= recent_after;
                    if recent {
                        stats.recent_tombstone_roots += 1;
                    }
                    recent
                }
            };
            if root {
                roots.insert(record.metadata_location);
            }
            Ok(())
        };
        let store = catalog.store();
        for_each_record(store.as_ref(), concurrency, &mut visit).await?;
        // A record the walk's listing did not return though the previous run saw it (on
        // DynamoDB the walk goes through namespace records: an index record whose
        // namespace record was deleted by hand or left out of a partial restore) is read
        // directly: while it exists, it is a root like any other.
        let unseen: Vec<String> = unseen
            .lock()
            .map(|unseen| unseen.iter().cloned().collect())
            .unwrap_or_default();
        for key in unseen {
            let key = StoreKey::new(&key)?;
            let value = store
                .get(&key)
                .await
                .map_err(|err| store_error(store.as_ref(), err))?;
            if let Some(value) = value {
                tracing::warn!(record = %key, "gc: a record no listing of the catalog returns (its namespace record is missing?) is kept as a root");
                visit(&key, &value.value)?;
            }
        }
        Ok(roots)
    }

    /// The closure over root metadata, layer by layer (see "Closure" in the module docs):
    /// everything the `roots` reach is reachable; a root metadata file that is missing or
    /// invalid aborts the walk.
    async fn close_over_roots(&mut self, roots: &BTreeSet<String>) -> Result<()> {
        let (catalog, concurrency) = (self.catalog, self.concurrency);
        let (warehouse, registry) = (catalog.warehouse(), catalog.registry());
        let observation = &mut self.observation;
        let mut visited: HashSet<String> = HashSet::new();
        let mut frontier: Vec<(String, bool)> = Vec::new();
        for location in roots {
            let name = warehouse.relative(location).map_err(|err| {
                Error::new(
                    err.kind(),
                    format!(
                        "gc aborted: a root names a metadata file outside the warehouse: {}",
                        err.message()
                    ),
                )
            })?;
            if visited.insert(name.clone()) {
                frontier.push((name, true));
            }
        }
        while !frontier.is_empty() {
            let layer = std::mem::take(&mut frontier);
            let results: Vec<(String, bool, Parsed)> = futures::stream::iter(layer)
                .map(|(name, root)| async move {
                    let parsed = read_parsed(warehouse, registry, &name).await?;
                    Ok::<_, Error>((name, root, parsed))
                })
                .buffer_unordered(concurrency.max(1))
                .try_collect()
                .await?;
            // Directories the layer's files name: their files that may be metadata are
            // read as family references' are (`files_below`).
            let mut directories: Vec<String> = Vec::new();
            for (name, root, parsed) in results {
                observation.reachable.insert(name.clone(), 0);
                if !matches!(parsed, Parsed::Missing) {
                    observation.walked.insert(name.clone());
                }
                match parsed {
                    Parsed::Metadata(metadata) => {
                        observation.roots.metadata_files_read += 1;
                        let refs = references_of(&metadata, registry, warehouse);
                        for reference in refs.direct() {
                            observation.reachable.insert(reference.clone(), 0);
                        }
                        directories.extend(directories_of([], &refs.tables));
                        for reference in refs.family {
                            if visited.insert(reference.clone()) {
                                frontier.push((reference, false));
                            }
                        }
                    }
                    Parsed::Missing if root => {
                        return Err(Error::new(
                            ErrorKind::InvalidIndexMetadata,
                            format!(
                                "gc aborted: the metadata file `{}` of a catalog pointer does not exist; nothing is deleted until this is repaired",
                                warehouse.absolute(&name)
                            ),
                        ));
                    }
                    Parsed::Opaque { why, .. } if root => {
                        return Err(Error::new(
                            ErrorKind::InvalidIndexMetadata,
                            format!(
                                "gc aborted: the metadata file `{}` of a catalog pointer is invalid: {why}",
                                warehouse.absolute(&name)
                            ),
                        ));
                    }
                    Parsed::Missing => {
                        observation.warnings.push(format!(
                            "a family parameter references `{name}`, which does not exist"
                        ));
                        directories.extend(directories_of([&name], []));
                        observation.dangling.insert(name);
                    }
                    Parsed::Opaque { why, .. } => {
                        // A referenced object that is no metadata (another format, written
                        // half, a future format version): a reader of its format may take
                        // names from it by rules the collector cannot know (where its
                        // strings lead, on which file system, under which base: rounds
                        // 35–62), so it may name anything, and nothing is collected while
                        // it is live. Publication refuses such a file; it got here by
                        // being written after its reference was published. It is read
                        // again before every delete batch (`dangling`).
                        observation.warnings.push(format!(
                            "`{name}`, which live metadata reaches, may name any file of the warehouse (it is no metadata: {why}): nothing is collected while it is live; replace it with a metadata file"
                        ));
                        for prefix in MANAGED_PREFIXES {
                            observation.reachable.insert(prefix.to_owned(), 0);
                        }
                        observation.dangling.insert(name);
                    }
                    Parsed::Unbounded(why) => return Err(unbounded(warehouse, &name, &why)),
                }
            }
            // Listed again before every delete batch (a file may appear there later).
            observation.directories.extend(directories.iter().cloned());
            match files_below(warehouse, &directories).await? {
                Below::Files(files) => {
                    for file in files {
                        if visited.insert(file.clone()) {
                            frontier.push((file, false));
                        }
                    }
                }
                Below::Anything(why) => {
                    observation.warnings.push(format!(
                        "a directory live metadata names may hold a file that names any file of the warehouse ({why}): nothing is collected while it is live"
                    ));
                    for prefix in MANAGED_PREFIXES {
                        observation.reachable.insert(prefix.to_owned(), 0);
                    }
                }
            }
        }
        Ok(())
    }
}

/// Why a walk stops at `name`, a file live metadata reaches that may name anything.
fn unbounded(warehouse: &crate::warehouse::Warehouse, name: &str, why: &str) -> Error {
    Error::new(
        ErrorKind::InvalidIndexMetadata,
        format!(
            "gc aborted: `{}`, which live metadata reaches through family references, is no metadata and cannot be read to the end ({why}): what it names is unknown, so nothing is deleted until it is replaced by a metadata file or removed",
            warehouse.absolute(name)
        ),
    )
}
