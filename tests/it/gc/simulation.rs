//! A seeded simulation of the garbage collector: random histories of register, commit
//! (with snapshot expiry), drop, rename and re-register of old metadata files; writers
//! that crash after writing files, writers whose commit lands later (within the grace
//! period); catalog operations injected in the middle of a GC run; GC runs that die
//! mid-delete. Time is a `ManualClock`; every object is stamped with simulated time.
//!
//! After every step the oracle (a model of the catalog) checks:
//! * **safety**: no deleted object was reachable when it was deleted, none was deleted
//!   before it had been unreachable for the retention period (or, never published, before
//!   grace + retention), nothing outside `metadata/`, `indexes/` and `_gc/` was deleted,
//!   and an existing metadata file never names a deleted object;
//! * **liveness**: garbage unreachable since `L` is gone by
//!   `L + retention + condemn delay + 3 GC periods + lease` (later if evidence of a newer
//!   incarnation moved its clock, or while an existing metadata file references it) —
//!   checked in the histories whose runs have no budget (a third have a zero budget:
//!   each `collect` call then does one page of one step, the run going on in the next
//!   call, and only safety is checked). Pages are small and runs have a few partitions,
//!   so runs checkpoint, fan out and resume all the time.
//!
//! # The hostile-layout generator
//! The second test, `hostile_layouts_never_delete_live_foreign_or_outside_data`, runs the
//! same workload in a warehouse that other engines, other catalogs and careless operators
//! also write to. Each history enables a random subset of these, and about one step in
//! four is one of them (issue 15's classes):
//!
//! 1. **Location encodings.** Index-table directories and metadata file names made of
//!    characters `object_store`'s `PathPart` percent-encodes (non-ASCII, space, `~`, `[`,
//!    `]`, `{`, `}`, `^`, `|`, backtick, `"`, `<`, `>`, `*`, ...; metadata names also a
//!    `%` that is no escape), every file written at its raw key as another engine would;
//!    metadata locations handed to register and commit (and as commit bases) in a random
//!    URI spelling: raw, escaped in upper or lower case, or mixed, root segments included.
//! 2. **Foreign catalogs.** Second pointer stores over the same warehouse (in memory, in a
//!    directory beside the warehouse, or — local backend — inside its `metadata/` or
//!    `indexes/`) write index tables and metadata raw, then try a namespace create,
//!    register, commit, drop, rename, `init` or a GC run: each must fail with
//!    `WAREHOUSE_NOT_OWNED`, and their pointer stores never hold an index record. Their
//!    files are unreferenced garbage (which may be collected).
//! 3. **Nested warehouses and pointer stores.** Raw files showing a catalog structure
//!    (`_catalog-owner.json`, `_catalog/…`, `_gc/…`, `_meta/=catalog-id`, `i/…/=name`,
//!    `n/=ns`, their `.lock` files) under `metadata/` and `indexes/` — in a fresh
//!    directory, in an existing table or metadata directory, rarely at `indexes/` or
//!    `metadata/` itself — with arbitrary data below their roots, then and later.
//! 4. **Symbolic links** (local backend). Links inside `indexes/` and `metadata/` (also
//!    inside table directories, and named like metadata files) to directories and files
//!    outside the warehouse directory, to places inside it (the root, `_catalog`, live
//!    table directories and metadata files), to their own parent, and dangling ones.
//! 5. **Metadata outside `metadata/`.** Valid metadata (new, or a live index's successor)
//!    written under `indexes/`, beside the managed prefixes, or outside the warehouse, and
//!    locations that leave `metadata/` through `..` or an escaped `/`: register and commit
//!    must fail with `INVALID_INDEX_METADATA`. Stray unparseable files under `metadata/`:
//!    broken format-version-1 JSON naming random objects (files or directories, relative
//!    or as URIs), junk, empty files, and `{"format-version": 2, ...}` files naming
//!    objects. No run may fail because of them.
//! 6. **Paused runs.** A run is paused at a random phase (or between delete batches)
//!    through its progress hook while time advances (usually past its lease) and the
//!    workload and other runs go on; then it resumes. It must stop (lease lost:
//!    `COMMIT_CONFLICT`) or be harmless.
//!
//! Besides the checks above, the oracle then checks the **hostile invariant** after every
//! step: nothing live in any catalog, nothing outside the owning warehouse (the links'
//! targets, sibling directories and prefixes of the same store, files beside the managed
//! prefixes), nothing below a nested catalog structure, no format-version-2 file, and
//! nothing a stray file names while that file exists (the collector counts every string
//! in an unparseable file that names a warehouse object as its reference) is ever deleted;
//! no link is deleted or followed. At the end of a history, after quiescence, everything
//! else unreachable is gone, and every pointer of the catalog is the model's, in canonical
//! form.
//!
//! # Running it
//! `PARQDB_GC_SIM_HISTORIES` sets the number of histories of the first test (default 200,
//! 20 at `PARQDB_TEST_SCALE=quick`: nine in ten on the memory backends, one in ten on local
//! files, four at a time);
//! `PARQDB_GC_SIM_SEED` the first seed; `PARQDB_GC_SIM_STEPS` the steps per history
//! (default 120). The hostile test has its own: `PARQDB_GC_SIM_HOSTILE_HISTORIES`
//! (default 200, 20 at the quick scale; a seed divisible by 3 runs on local files, the others on memory),
//! `PARQDB_GC_SIM_HOSTILE_SEED` (default 1) and `PARQDB_GC_SIM_HOSTILE_STEPS` (default 30).
//! `PARQDB_GC_SIM_VERBOSE` prints each history's seed and counts, `PARQDB_GC_SIM_TRACE=<text>`
//! every run's counts and the actions on paths containing `<text>` (use with one seed).
//!
//! ```text
//! PARQDB_GC_SIM_HISTORIES=10000 cargo test --release --test it gc::simulation:: -- --nocapture
//! PARQDB_GC_SIM_HOSTILE_HISTORIES=10000 cargo test --release --test it gc::simulation::hostile -- --nocapture
//! PARQDB_GC_SIM_HOSTILE_SEED=4711 PARQDB_GC_SIM_HOSTILE_HISTORIES=1 PARQDB_GC_SIM_VERBOSE=1 \
//!     cargo test --test it gc::simulation::hostile -- --nocapture
//! ```
#![allow(clippy::disallowed_methods)] // tests may read the wall clock and draw random ids (unique names)

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::support::gc::{Backend, Env, HOUR, Layout, MINUTE, contents, set_mtime, source};
use crate::support::scale::knob;
use object_store::path::Path as StorePath;
use object_store::{ObjectStoreExt, PutPayload};
use parqdb_catalog::IndexMetadata;
use parqdb_catalog::family::FamilyRegistry;
use parqdb_catalog::gc::{self, GarbageCollector, GcConfig, GcPhase, GcProgress, GcStatus};
use parqdb_catalog::store::LocalStore;
use parqdb_catalog::store::MemoryStore;
use parqdb_catalog::store::PointerStoreExt;
use parqdb_catalog::store::{PointerStore, StoreKey};
use parqdb_catalog::{Catalog, IndexCatalog};
use parqdb_catalog::{ErrorKind, IndexIdentifier, Namespace, SeededIds};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const RETENTION: i64 = 2 * HOUR;
const GRACE: i64 = 10 * MINUTE;
const DELAY: i64 = 10 * MINUTE;
const SKEW: i64 = MINUTE;
const LEASE: i64 = 5 * MINUTE;
/// The longest gap between successful GC runs.
const PERIOD: i64 = 30 * MINUTE;
/// How long before an adoption an entry must be logged for the adoption to release it: a
/// publish window and twice the skew an adoption allows (`changelog::record_release`).
const ADOPTION_SETTLE: i64 = MINUTE + 2 * 5 * MINUTE;

fn config(rng: &mut StdRng) -> GcConfig {
    GcConfig {
        retention: Duration::from_millis(RETENTION as u64),
        grace: Duration::from_millis(GRACE as u64),
        condemn_delay: Some(Duration::from_millis(DELAY as u64)),
        max_clock_skew: Duration::from_millis(SKEW as u64),
        lease_duration: Duration::from_millis(LEASE as u64),
        io_concurrency: rng.random_range(1..6),
        delete_batch_size: rng.random_range(1..5),
        // Small pages and a few partitions: runs checkpoint, fan out and resume often.
        page_size: rng.random_range(1..40),
        partitions: rng.random_range(1..6),
        workers: rng.random_range(1..4),
        // A third of the histories collect with a zero budget: every `collect` call does
        // one step of one page and the run goes on in the next call. Every safety check
        // holds; the liveness bound, written for whole runs per call, is checked for the
        // others (budgeted liveness: gc_scenarios, gc_state_machine).
        budget: rng.random_bool(0.3).then_some(Duration::ZERO),
        ..GcConfig::default()
    }
}

#[derive(Debug, Clone)]
struct Obj {
    created: i64,
    last_reachable: Option<i64>,
    deleted: Option<i64>,
    /// Written by a writer whose commit may still land.
    in_flight: bool,
    /// Why it must never be deleted, if so (part of a nested catalog structure, metadata
    /// of a format this collector does not understand).
    never: Option<&'static str>,
}

#[derive(Debug, Clone)]
struct Live {
    metadata: IndexMetadata,
    location: String,
}

/// A commit whose files are written and whose compare-and-swap comes later.
#[derive(Debug, Clone)]
struct Pending {
    name: String,
    base: String,
    metadata: IndexMetadata,
    location: String,
    files: Vec<String>,
    written: i64,
}

/// A catalog operation prepared in advance, to run inside a GC run.
#[derive(Debug, Clone)]
enum Op {
    Register {
        name: String,
        location: String,
    },
    Drop {
        name: String,
    },
    Rename {
        from: String,
        to: String,
    },
    Commit {
        name: String,
        base: String,
        new: String,
    },
}

/// An unparseable file under `metadata/`: the collector keeps whatever its strings name
/// while it exists.
#[derive(Debug, Clone)]
struct Stray {
    /// The object names (files or directory prefixes) its strings name.
    names: Vec<String>,
    /// The objects those names covered when it was written (all existing then).
    named: BTreeSet<String>,
}

/// What the hostile generator did in a history (summed over histories).
#[derive(Debug, Default, Clone)]
struct Stats {
    encoded_tables: u64,
    encoded_metadata: u64,
    spelled_locations: u64,
    foreign_refused: u64,
    nested_roots: u64,
    nested_files: u64,
    links: u64,
    /// Runs that kept a whole prefix for a link to it a reader of a live table reaches.
    wide_kept: u64,
    strays: u64,
    /// Files the collector reported as possibly naming any file.
    gave_up: u64,
    unknown_format: u64,
    misplaced_refused: u64,
    pauses: u64,
    paused_lease_lost: u64,
    paused_completed: u64,
}

impl Stats {
    fn add(&mut self, other: &Stats) {
        self.encoded_tables += other.encoded_tables;
        self.encoded_metadata += other.encoded_metadata;
        self.spelled_locations += other.spelled_locations;
        self.foreign_refused += other.foreign_refused;
        self.nested_roots += other.nested_roots;
        self.nested_files += other.nested_files;
        self.links += other.links;
        self.wide_kept += other.wide_kept;
        self.strays += other.strays;
        self.gave_up += other.gave_up;
        self.unknown_format += other.unknown_format;
        self.misplaced_refused += other.misplaced_refused;
        self.pauses += other.pauses;
        self.paused_lease_lost += other.paused_lease_lost;
        self.paused_completed += other.paused_completed;
    }
}

/// Another catalog over the same warehouse.
struct Foreign {
    catalog: Catalog,
    store: Arc<dyn PointerStore>,
}

/// The hostile generator's state in one history.
/// A symbolic link the hostile layout made (see [`Hostile::made_links`]).
#[derive(Debug, Clone)]
struct Link {
    at: String,
    names: Option<String>,
    /// Where it leads if that is the warehouse root (`""`) or a managed prefix as a
    /// whole: a reader of a table it lies in reads everything there.
    wide: Option<String>,
    made: i64,
}

struct Hostile {
    /// The probability that a new table directory or metadata name is oddly encoded.
    encode: f64,
    foreign: bool,
    nested: bool,
    links: bool,
    strays: bool,
    misplaced: bool,
    pauses: bool,
    /// Whether a nested structure may sit at `indexes/` or `metadata/` itself.
    whole_prefix: bool,
    foreigns: Vec<Foreign>,
    /// Metadata files foreign catalogs wrote (never registered by the model).
    foreign_files: BTreeSet<String>,
    /// Symbolic links made inside the warehouse directory.
    links_made: Vec<PathBuf>,
    /// Each link made: where (a name), what it names inside the warehouse (as the
    /// collector reads a link: never a managed prefix as a whole, nor the root), and when.
    made_links: Vec<Link>,
    /// Files outside the warehouse directory, with their content.
    outside_files: Vec<(PathBuf, Vec<u8>)>,
    /// The directory outside the warehouse the links point into.
    outside_dir: Option<PathBuf>,
    /// Names relative to the warehouse root, outside the managed prefixes, that must stay.
    keep: Vec<String>,
    /// Object-store keys outside the warehouse prefix that must stay.
    keep_keys: Vec<String>,
    stats: Stats,
}

/// One pointer record as an operator's backup saved it: its raw bytes and the model's
/// view of it.
struct SavedRecord {
    key: StoreKey,
    bytes: bytes::Bytes,
    name: String,
    live: Option<Live>,
}

/// What a history did.
#[derive(Debug, Default, Clone)]
struct Outcome {
    runs: u64,
    deleted: u64,
    stats: Stats,
}

struct Sim {
    env: Env,
    seed: u64,
    rng: StdRng,
    config: GcConfig,
    live: BTreeMap<String, Live>,
    tombstoned: BTreeSet<String>,
    metadata: BTreeMap<String, IndexMetadata>,
    objects: BTreeMap<String, Obj>,
    centroids: Vec<String>,
    pending: Vec<Pending>,
    /// Unparseable files under `metadata/`.
    strays: BTreeMap<String, Stray>,
    /// Roots of nested catalog structures: nothing below them may ever be deleted.
    nested_roots: Vec<String>,
    /// Files under `metadata/` the collector reported as possibly naming any file (it
    /// gave up reading them: odd strings, junk read in many encodings, links it cannot
    /// follow to the end), and whether it said it keeps everything while one exists (one
    /// it never deletes, or a live one). An unreachable one keeps all of `indexes/`, but
    /// no more of `metadata/` than the names it holds, so such files never keep one
    /// another.
    gave_up: BTreeMap<String, bool>,
    hostile: Option<Hostile>,
    /// Metadata file (relative) -> the location it was written as a successor of: a
    /// commit from there may publish it at any later time (an identifier catching up
    /// through old metadata, a commit retried late).
    bases: HashMap<String, String>,
    /// A copy of every pointer record (raw bytes) and the model's view of it, taken by an
    /// operator's backup.
    backup: Option<(i64, Vec<SavedRecord>)>,
    /// Object -> when the last existing metadata file referencing it was deleted, or a
    /// commit named it (or a metadata file naming it) as its base.
    unprotected_since: HashMap<String, i64>,
    counter: u64,
    /// The records changed without the catalog (a restored backup): the next finished run
    /// restarts every tracked clock.
    crashed: bool,
    /// When a finished run last restarted every tracked clock.
    restarted: i64,
    deletions_seen: usize,
    /// The history's runs have a scan budget (until quiescence): liveness is not checked.
    budgeted: bool,
    /// A restore has not been adopted yet: its older records are the newer ones away, and
    /// every run restarts every clock until the operator adopts (at the latest when the
    /// history quiesces).
    unadopted: bool,
    /// Metadata files a publication refused while the warehouse failed deletes may have
    /// left announced: its writer could not withdraw its change-log entry, and no store
    /// shows the write, so what the file names is kept until an adoption (rule N of `gc`).
    unwithdrawn: BTreeSet<String>,
    /// The metadata files operations published, and when: an adoption releases no entry
    /// logged within [`ADOPTION_SETTLE`] of it, so one a restore lost stays kept until the
    /// next adoption.
    published_at: Vec<(i64, String)>,
    last_gc: i64,
    gc_runs: u64,
    deleted_total: u64,
    /// When the collector last said it keeps everything for a link to the root or a whole
    /// managed prefix that a reader of a kept table reaches (the model checks each time
    /// that one does): garbage goes only in time after the last.
    wide_kept_until: BTreeMap<String, i64>,
}

/// Characters `object_store`'s `PathPart` percent-encodes, and a few more that are special
/// in URIs, for odd location segments.
const ODD: [&str; 33] = [
    "ü", "é", "ß", "漢字", "😀", "\u{a0}", "\u{2028}", " ", "~", "[", "]", "{", "}", "^", "|", "`",
    "\"", "<", ">", "*", "!", "$", "&", "'", "(", ")", "+", ",", ";", "=", "@", ":", ".",
];

/// Whether `name` is `ancestor` or lies below it on a segment boundary.
fn within(name: &str, ancestor: &str) -> bool {
    name == ancestor
        || name
            .strip_prefix(ancestor)
            .is_some_and(|rest| rest.starts_with('/'))
}

/// The objects `name` covers: itself and everything below it on a segment boundary.
fn covered(objects: &BTreeMap<String, Obj>, name: &str) -> Vec<String> {
    let name = name.trim_end_matches('/');
    let dir = format!("{name}/");
    let mut out: Vec<String> = objects
        .range(dir.clone()..)
        .map(|(p, _)| p)
        .take_while(|p| p.starts_with(&dir))
        .cloned()
        .collect();
    if objects.contains_key(name) {
        out.push(name.to_owned());
    }
    out
}

/// Every file below `dir` (names relative to `root`), never following links.
fn walk_files(root: &std::path::Path, dir: &std::path::Path, out: &mut Vec<String>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        let path = entry.path();
        if kind.is_dir() {
            walk_files(root, &path, out);
        } else if kind.is_file() {
            let relative = path.strip_prefix(root).expect("below the root");
            let name: Vec<String> = relative
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            out.push(name.join("/"));
        }
    }
}

impl Sim {
    fn new(backend: Backend, seed: u64, hostile: bool) -> Sim {
        let mut rng = StdRng::seed_from_u64(seed);
        let config = config(&mut rng);
        let budgeted = config.budget.is_some();
        let env = Env::new(backend, seed);
        let now = env.now();
        let hostile = hostile.then(|| Hostile {
            encode: if rng.random_bool(0.8) {
                rng.random_range(0.1..0.6)
            } else {
                0.0
            },
            foreign: rng.random_bool(0.6),
            nested: rng.random_bool(0.6),
            links: backend == Backend::Local && rng.random_bool(0.8),
            strays: rng.random_bool(0.6),
            misplaced: rng.random_bool(0.5),
            pauses: rng.random_bool(0.6),
            whole_prefix: rng.random_bool(0.04),
            foreigns: Vec::new(),
            foreign_files: BTreeSet::new(),
            links_made: Vec::new(),
            made_links: Vec::new(),
            outside_files: Vec::new(),
            outside_dir: None,
            keep: Vec::new(),
            keep_keys: Vec::new(),
            stats: Stats::default(),
        });
        Sim {
            env,
            seed,
            rng,
            config,
            live: BTreeMap::new(),
            tombstoned: BTreeSet::new(),
            metadata: BTreeMap::new(),
            objects: BTreeMap::new(),
            centroids: Vec::new(),
            pending: Vec::new(),
            strays: BTreeMap::new(),
            nested_roots: Vec::new(),
            gave_up: BTreeMap::new(),
            hostile,
            bases: HashMap::new(),
            backup: None,
            unprotected_since: HashMap::new(),
            counter: 0,
            crashed: false,
            restarted: i64::MIN,
            deletions_seen: 0,
            budgeted,
            unadopted: false,
            unwithdrawn: BTreeSet::new(),
            published_at: Vec::new(),
            last_gc: now,
            gc_runs: 0,
            deleted_total: 0,
            wide_kept_until: BTreeMap::new(),
        }
    }

    fn now(&self) -> i64 {
        self.env.now()
    }

    fn next(&mut self) -> u64 {
        self.counter += 1;
        self.counter
    }

    async fn id(&self, name: &str) -> IndexIdentifier {
        self.env.id(name).await
    }

    fn stats(&mut self) -> Option<&mut Stats> {
        self.hostile.as_mut().map(|h| &mut h.stats)
    }

    /// Whether a new location should be oddly encoded.
    fn encode(&mut self) -> bool {
        let p = self.hostile.as_ref().map_or(0.0, |h| h.encode);
        p > 0.0 && self.rng.random_bool(p)
    }

    /// Whether `name` lies below a nested catalog structure.
    fn nested(&self, name: &str) -> bool {
        self.nested_roots.iter().any(|root| within(name, root))
    }

    /// Start tracking an object written now.
    fn track(&mut self, path: &str, in_flight: bool) {
        let never = self
            .nested(path)
            .then_some("it lies below a nested catalog structure");
        self.objects.insert(
            path.to_owned(),
            Obj {
                created: self.now(),
                last_reachable: None,
                deleted: None,
                in_flight,
                never,
            },
        );
    }

    // ----- the oracle -----

    /// Everything `metadata` references (transitively through centroid metadata).
    /// A change-log entry names `location` now: a publication of it (refused or not: one
    /// logged within the settle time of its condemnation counts), or a commit from it as
    /// its base (current until the write, as far as the writer knows). Either restarts
    /// the retention of the file and what it names, whether or not the write landed.
    fn logged_naming(&mut self, location: &str) {
        let Ok(relative) = self.env.warehouse.relative(location) else {
            return;
        };
        let mut touched = BTreeSet::from([relative.clone()]);
        if let Some(metadata) = self.metadata.get(&relative).cloned() {
            self.refs_of(&metadata, &mut touched);
        }
        let now = self.now();
        for path in touched {
            let since = self.unprotected_since.entry(path).or_insert(now);
            *since = (*since).max(now);
        }
    }

    /// What the change-log entry of `op` names (see [`Sim::logged_naming`]).
    fn logged(&mut self, op: &Op) {
        match op {
            Op::Register { location, .. } => self.logged_naming(location),
            Op::Commit { base, new, .. } => {
                self.logged_naming(base);
                self.logged_naming(new);
            }
            Op::Drop { .. } | Op::Rename { .. } => {}
        }
    }

    fn refs_of(&self, metadata: &IndexMetadata, out: &mut BTreeSet<String>) {
        for snapshot in metadata.snapshots() {
            for table in snapshot.contents().index_tables.values() {
                let dir = table.properties()["location"].clone();
                for path in self
                    .objects
                    .range(dir.clone()..)
                    .map(|(p, _)| p)
                    .take_while(|p| p.starts_with(&dir))
                {
                    out.insert(path.clone());
                }
            }
            if let Some(centroids) = snapshot
                .contents()
                .parameters
                .get("ivf_centroids_metadata_location")
                && out.insert(centroids.clone())
                && let Some(inner) = self.metadata.get(centroids)
            {
                self.refs_of(inner, out);
            }
        }
    }

    /// What the file `path` references, if it is a metadata file or a stray.
    fn referrer_refs(&self, path: &str) -> Option<BTreeSet<String>> {
        let mut refs = BTreeSet::new();
        if let Some(metadata) = self.metadata.get(path) {
            self.refs_of(metadata, &mut refs);
        } else if let Some(stray) = self.strays.get(path) {
            refs.extend(
                stray
                    .names
                    .iter()
                    .flat_map(|name| covered(&self.objects, name)),
            );
        } else if !self.gave_up.contains_key(path) {
            return None;
        }
        match self.gave_up.get(path) {
            Some(true) => {
                refs.extend(covered(&self.objects, "indexes"));
                refs.extend(covered(&self.objects, "metadata"));
            }
            Some(false) => refs.extend(covered(&self.objects, "indexes")),
            None => {}
        }
        Some(refs)
    }

    /// Learn the files the collector reported as possibly naming any file.
    fn note_gave_up(&mut self, warnings: &[String]) {
        for warning in warnings {
            let Some((path, said)) = warning
                .strip_prefix('`')
                .and_then(|rest| rest.split_once("` may name any file"))
            else {
                continue;
            };
            let keeps_everything = said.contains(": nothing is collected while it exists");
            assert!(
                self.metadata.contains_key(path)
                    || self.strays.contains_key(path)
                    || self.nested(path),
                "the collector gave up on {path}, which the history never wrote as metadata, a stray or a nested catalog's file"
            );
            let known = self.gave_up.get(path).copied();
            self.gave_up
                .insert(path.to_owned(), keeps_everything || known == Some(true));
            if known.is_none()
                && let Some(stats) = self.stats()
            {
                stats.gave_up += 1;
            }
        }
    }

    fn reachable(&self) -> BTreeSet<String> {
        let mut out = BTreeSet::new();
        for live in self.live.values() {
            out.insert(self.env.relative(&live.location));
            self.refs_of(&live.metadata, &mut out);
        }
        out
    }

    /// Mark what is reachable now; check it all exists.
    fn mark(&mut self) {
        let now = self.now();
        for path in self.reachable() {
            let obj = self
                .objects
                .get_mut(&path)
                .unwrap_or_else(|| panic!("unknown object {path}"));
            assert!(
                obj.deleted.is_none(),
                "reachable object {path} was deleted at {:?}",
                obj.deleted
            );
            obj.last_reachable = Some(now);
        }
    }

    /// Check the deletions the last step made.
    fn check_deletions(&mut self) {
        let deletions = self.env.sim.deletions();
        let prefix = self.env.warehouse.prefix().to_string();
        let reachable = self.reachable();
        for deletion in &deletions[self.deletions_seen..] {
            let path = if prefix.is_empty() {
                deletion.path.clone()
            } else {
                deletion
                    .path
                    .strip_prefix(&format!("{prefix}/"))
                    .unwrap_or_else(|| panic!("deleted {} outside the warehouse", deletion.path))
                    .to_owned()
            };
            if path.starts_with("_gc/") {
                continue;
            }
            assert!(
                path.starts_with("metadata/") || path.starts_with("indexes/"),
                "deleted {path} outside the managed prefixes"
            );
            assert!(!reachable.contains(&path), "deleted reachable {path}");
            assert!(
                !self.nested(&path),
                "deleted {path}, below a nested catalog structure"
            );
            let obj = self
                .objects
                .get(&path)
                .unwrap_or_else(|| panic!("deleted unknown {path}"))
                .clone();
            if let Some(why) = obj.never {
                panic!("deleted {path}, which must never be deleted: {why}");
            }
            assert!(obj.deleted.is_none(), "{path} deleted twice");
            assert!(!obj.in_flight, "deleted {path} of a writer in flight");
            assert!(
                deletion.at_ms >= obj.created + GRACE,
                "{path} deleted at {} within grace of its creation at {}",
                deletion.at_ms,
                obj.created
            );
            match obj.last_reachable {
                Some(last) => assert!(
                    deletion.at_ms >= last + RETENTION,
                    "{path} deleted at {} but reachable until {last}",
                    deletion.at_ms
                ),
                None => assert!(
                    deletion.at_ms >= obj.created + GRACE + RETENTION,
                    "never-published {path} deleted at {} before grace + retention from {}",
                    deletion.at_ms,
                    obj.created
                ),
            }
            self.objects.get_mut(&path).expect("known").deleted = Some(deletion.at_ms);
            self.deleted_total += 1;
            if let Some(refs) = self.referrer_refs(&path) {
                for reference in refs {
                    self.unprotected_since.insert(reference, deletion.at_ms);
                }
            }
        }
        self.deletions_seen = deletions.len();
    }

    /// Everything an existing metadata file or stray references (they keep it).
    fn protected(&self) -> BTreeSet<String> {
        let mut protected = BTreeSet::new();
        let referrers = self.metadata.keys().chain(self.strays.keys());
        for path in &self.unwithdrawn {
            if self.objects.get(path).is_some_and(|o| o.deleted.is_none()) {
                protected.insert(path.clone());
            }
        }
        for path in referrers.chain(self.gave_up.keys()) {
            if self.objects.get(path).is_none_or(|o| o.deleted.is_some()) {
                continue;
            }
            protected.extend(self.referrer_refs(path).unwrap_or_default());
        }
        // What a link leads to: a link keeps it while it is young, and a link lands at the
        // real time (its birth time), far ahead of the simulated clock: always.
        if let Some(hostile) = &self.hostile {
            for link in &hostile.made_links {
                if let Some(names) = &link.names {
                    protected.extend(covered(&self.objects, names));
                }
            }
        }
        protected
    }

    /// Existing metadata never names a deleted object, nor does an existing stray; nothing
    /// outside the warehouse is touched; old garbage is gone.
    fn check_invariants(&self) {
        for (path, metadata) in &self.metadata {
            if self.objects[path].deleted.is_some() {
                continue;
            }
            let mut refs = BTreeSet::new();
            self.refs_of(metadata, &mut refs);
            for reference in &refs {
                if let Some(obj) = self.objects.get(reference) {
                    assert!(
                        obj.deleted.is_none(),
                        "existing metadata {path} (created {}, in flight {}) names deleted {reference} (deleted {:?})",
                        self.objects[path].created,
                        self.objects[path].in_flight,
                        obj.deleted
                    );
                }
            }
        }
        for (path, stray) in &self.strays {
            if self.objects[path].deleted.is_some() {
                continue;
            }
            for reference in &stray.named {
                assert!(
                    self.objects[reference].deleted.is_none(),
                    "the existing unparseable file {path} names deleted {reference}"
                );
            }
        }
        self.check_outside();
        let protected = self.protected();
        let reachable = self.reachable();
        let now = self.now();
        for (path, obj) in &self.objects {
            if obj.deleted.is_some()
                || obj.in_flight
                || obj.never.is_some()
                || reachable.contains(path)
                || protected.contains(path)
            {
                continue;
            }
            let lost = obj
                .last_reachable
                .unwrap_or(obj.created)
                .max(obj.created + GRACE + SKEW);
            let base = lost
                .max(
                    self.unprotected_since
                        .get(path)
                        .copied()
                        .unwrap_or(i64::MIN),
                )
                .max(self.restarted)
                .max(
                    self.wide_kept_until
                        .iter()
                        .filter(|(prefix, _)| within(path, prefix))
                        .map(|(_, at)| *at)
                        .max()
                        .unwrap_or(i64::MIN),
                );
            let deadline = base + RETENTION + DELAY + 3 * PERIOD + LEASE + 2 * MINUTE;
            assert!(
                self.budgeted || now <= deadline,
                "garbage {path} (unreachable since {lost}, base {base}) still here at {now}"
            );
        }
    }

    /// Links and the files outside the warehouse directory are untouched; what a link in a
    /// live table leads to was not deleted after the link was made.
    /// The table directories of live indexes (without their trailing `/`).
    fn live_dirs(&self) -> Vec<String> {
        self.live
            .values()
            .flat_map(|live| Self::table_dirs(&live.metadata))
            .collect()
    }

    /// The table directories `metadata` names (without their trailing `/`).
    fn table_dirs(metadata: &IndexMetadata) -> Vec<String> {
        metadata
            .snapshots()
            .iter()
            .flat_map(|snapshot| {
                snapshot
                    .contents()
                    .index_tables
                    .values()
                    .map(|table| {
                        table.properties()["location"]
                            .trim_end_matches('/')
                            .to_owned()
                    })
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    /// The links to the root or a whole managed prefix a reader of the tables `dirs`
    /// reaches: in them, or below where the links in them lead (a whole prefix too), and
    /// so on.
    fn wide_links_reached(&self, dirs: &[String]) -> Vec<Link> {
        let Some(hostile) = &self.hostile else {
            return Vec::new();
        };
        let mut places: Vec<String> = dirs.to_vec();
        loop {
            let more: Vec<String> = hostile
                .made_links
                .iter()
                .filter(|link| places.iter().any(|dir| within(&link.at, dir)))
                .flat_map(|link| match (&link.names, &link.wide) {
                    (Some(names), _) => vec![names.clone()],
                    (None, Some(wide)) if wide.is_empty() => {
                        vec!["indexes".to_owned(), "metadata".to_owned()]
                    }
                    (None, Some(wide)) => vec![wide.clone()],
                    (None, None) => Vec::new(),
                })
                .filter(|names| !places.contains(names))
                .collect();
            if more.is_empty() {
                break;
            }
            places.extend(more);
        }
        hostile
            .made_links
            .iter()
            .filter(|link| link.wide.is_some() && places.iter().any(|dir| within(&link.at, dir)))
            .cloned()
            .collect()
    }

    /// Learn the links the collector said keep everything (a reader of a kept table
    /// reaches them), checking that one does by the tables live before or after the run.
    fn note_wide(&mut self, warnings: &[String], live_before: &[String]) {
        let Some(root) = self.env.local_dir.clone() else {
            return;
        };
        let mut live = live_before.to_vec();
        live.extend(self.live_dirs());
        // A table existing metadata or a stray names is one a reader may read (rule P).
        let mut existing = live.clone();
        let exists = |path: &String| self.objects.get(path).is_some_and(|o| o.deleted.is_none());
        for (path, metadata) in &self.metadata {
            if exists(path) {
                existing.extend(Self::table_dirs(metadata));
            }
        }
        // A file whose reading gave up keeps all of `indexes/` (and all of `metadata/` when
        // it keeps everything): the collector's search starts there too.
        for (path, everything) in &self.gave_up {
            if exists(path) {
                existing.push("indexes".to_owned());
                if *everything {
                    existing.push("metadata".to_owned());
                }
            }
        }
        for (path, stray) in &self.strays {
            if exists(path) {
                existing.extend(
                    stray
                        .names
                        .iter()
                        .map(|name| name.trim_end_matches('/').to_owned()),
                );
            }
        }
        let reached_live = self.wide_links_reached(&live);
        let reached_existing = self.wide_links_reached(&existing);
        for warning in warnings {
            let Some((link, reader)) = warning
                .strip_prefix("the symbolic link or bind mount `")
                .and_then(|rest| rest.split_once("`, which a reader of a table "))
            else {
                continue;
            };
            let (reached, of_live) = if reader.starts_with("the collector keeps reaches") {
                (&reached_live, true)
            } else if reader.starts_with("existing metadata names reaches") {
                (&reached_existing, false)
            } else {
                panic!("unknown warning: {warning}");
            };
            let at = std::path::Path::new(link)
                .strip_prefix(&root)
                .ok()
                .and_then(|relative| relative.to_str())
                .unwrap_or_else(|| {
                    panic!("the collector kept everything for {link}, outside the warehouse")
                });
            let made = reached
                .iter()
                .find(|made| made.at == at)
                .unwrap_or_else(|| panic!("the collector kept a whole prefix for the link {at}, which no such reader reaches: {warning}"));
            let wide = made.wide.clone().unwrap_or_default();
            // A reader of a table only existing metadata names keeps no metadata.
            let kept: Vec<&str> = ["indexes", "metadata"]
                .into_iter()
                .filter(|prefix| wide.is_empty() || wide == *prefix)
                .filter(|prefix| of_live || *prefix == "indexes")
                .collect();
            assert!(
                !kept.is_empty(),
                "the collector kept a whole prefix for the link {at} to `{wide}`: {warning}"
            );
            let now = self.now();
            if let Some(stats) = self.stats() {
                stats.wide_kept += 1;
            }
            for prefix in kept {
                self.wide_kept_until.insert(prefix.to_owned(), now);
            }
        }
    }

    /// Nothing under where a link reached before and after the run leads was deleted by
    /// it.
    fn check_wide(&self, live_before: &[String], deletions_before: usize) {
        let after = self.live_dirs();
        let kept: Vec<String> = live_before
            .iter()
            .filter(|dir| after.contains(dir))
            .cloned()
            .collect();
        let reached = self.wide_links_reached(&kept);
        if reached.is_empty() {
            return;
        }
        let prefix = self.env.warehouse.prefix().to_string();
        for deletion in &self.env.sim.deletions()[deletions_before..] {
            let path = deletion
                .path
                .strip_prefix(&format!("{prefix}/"))
                .unwrap_or(&deletion.path);
            if path.starts_with("_gc/") {
                continue;
            }
            for link in &reached {
                let wide = link.wide.as_deref().unwrap_or_default();
                assert!(
                    !wide.is_empty() && !within(path, wide),
                    "deleted {path} while a reader of a live table reaches the link {}, which leads to `{wide}` as a whole",
                    link.at
                );
            }
        }
    }

    fn check_outside(&self) {
        let Some(hostile) = &self.hostile else {
            return;
        };
        let live_dirs = self.live_dirs();
        for link in &hostile.made_links {
            let Some(names) = &link.names else {
                continue;
            };
            if !live_dirs.iter().any(|dir| within(&link.at, dir)) {
                continue;
            }
            for path in covered(&self.objects, names) {
                if let Some(deleted) = self.objects[&path].deleted {
                    assert!(
                        deleted < link.made,
                        "{path}, where the link {} in a live table leads, was deleted at {deleted} (the link made at {})",
                        link.at,
                        link.made
                    );
                }
            }
        }
        for (path, content) in &hostile.outside_files {
            let found = std::fs::read(path)
                .unwrap_or_else(|err| panic!("{} outside the warehouse: {err}", path.display()));
            assert_eq!(
                &found,
                content,
                "{} outside the warehouse changed",
                path.display()
            );
        }
        for link in &hostile.links_made {
            let meta = std::fs::symlink_metadata(link)
                .unwrap_or_else(|err| panic!("the link {} is gone: {err}", link.display()));
            assert!(
                meta.file_type().is_symlink(),
                "{} is no link any more",
                link.display()
            );
        }
    }

    // ----- writing files -----

    /// The object-store key of the warehouse-relative name `name` (raw, as any engine
    /// writes it).
    fn raw_key(&self, name: &str) -> StorePath {
        let key = match self.env.warehouse.prefix().as_ref() {
            "" => name.to_owned(),
            prefix => format!("{prefix}/{name}"),
        };
        StorePath::parse(&key).unwrap_or_else(|err| panic!("raw key {key:?}: {err}"))
    }

    /// Write `bytes` at the raw key of `name`, as another engine would.
    async fn put_raw(&self, name: &str, bytes: Vec<u8>) {
        self.env
            .warehouse
            .object_store()
            .put(&self.raw_key(name), PutPayload::from(bytes))
            .await
            .unwrap_or_else(|err| panic!("writing {name:?}: {err}"));
    }

    /// An odd path segment: characters `PathPart` percent-encodes, made unique by a
    /// number (so it is never `.`, `..` or a catalog structure's name). A literal `%`
    /// (also before two hex digits) only where the catalog allows it: metadata file names
    /// (and data other engines write).
    fn odd_segment(&mut self, percent: bool) -> String {
        let n = self.next();
        let mut segment = String::new();
        for _ in 0..self.rng.random_range(1..4) {
            if percent && self.rng.random_bool(0.2) {
                segment.push_str(["%z", "%41", "%25", "%"][self.rng.random_range(0..4)]);
            }
            segment.push_str(ODD[self.rng.random_range(0..ODD.len())]);
        }
        if self.rng.random_bool(0.5) {
            format!("{segment}{n}")
        } else {
            format!("{n}{segment}")
        }
    }

    /// One segment of a URI, spelled at random: raw, every character escaped (upper or
    /// lower case hex), or a random mix. A `%` is always escaped.
    fn spell_segment(&mut self, segment: &str) -> String {
        let mode = self.rng.random_range(0..4);
        let mut out = String::new();
        for c in segment.chars() {
            let escape = match mode {
                0 => c == '%',
                1 | 2 => true,
                _ => c == '%' || self.rng.random_bool(0.5),
            };
            if !escape {
                out.push(c);
                continue;
            }
            let mut buf = [0u8; 4];
            for byte in c.encode_utf8(&mut buf).bytes() {
                let upper = match mode {
                    1 => true,
                    2 => false,
                    _ => self.rng.random_bool(0.5),
                };
                if upper {
                    write!(out, "%{byte:02X}").expect("write");
                } else {
                    write!(out, "%{byte:02x}").expect("write");
                }
            }
        }
        out
    }

    /// An absolute URI of the object `name`: canonical outside hostile histories, else
    /// any spelling (root segments included).
    fn spell_uri(&mut self, name: &str) -> String {
        if self.hostile.is_none() || self.rng.random_bool(0.3) {
            return self.env.warehouse.absolute(name);
        }
        if let Some(stats) = self.stats() {
            stats.spelled_locations += 1;
        }
        let root = self.env.warehouse.root().to_owned();
        let (scheme, rest) = root.split_once("://").expect("a root URI");
        let (authority, path) = match rest.find('/') {
            Some(at) => (&rest[..at], &rest[at..]),
            None => (rest, ""),
        };
        let mut out = format!("{scheme}://{authority}");
        let segments: Vec<String> = path
            .split('/')
            .filter(|s| !s.is_empty())
            .map(|s| {
                percent_encoding::percent_decode_str(s)
                    .decode_utf8()
                    .expect("a UTF-8 root")
                    .into_owned()
            })
            .chain(name.split('/').map(str::to_owned))
            .collect();
        for segment in segments {
            out.push('/');
            let spelled = self.spell_segment(&segment);
            out.push_str(&spelled);
        }
        out
    }

    async fn write_table_dir(&mut self, dir: &str) -> Vec<String> {
        if self.objects.keys().any(|p| p.starts_with(dir)) {
            return Vec::new(); // shared, already written
        }
        let mut files = Vec::new();
        for part in 0..self.rng.random_range(1..3) {
            let path = format!("{dir}part-{part}.parquet");
            self.put_raw(&path, b"0123456789".to_vec()).await;
            self.track(&path, false);
            files.push(path);
        }
        files
    }

    /// Write a metadata file (at an odd name sometimes); its location (in any spelling)
    /// and name. `centroids`: it will be named by a family parameter, which must be a
    /// plain relative location (no `%`).
    async fn write_metadata(
        &mut self,
        metadata: &IndexMetadata,
        centroids: bool,
    ) -> (String, String) {
        let relative = if self.encode() {
            if let Some(stats) = self.stats() {
                stats.encoded_metadata += 1;
            }
            let dir = self.odd_segment(!centroids);
            let file = self.odd_segment(!centroids);
            let name = format!(
                "metadata/{dir}/{:05}-{}{file}.metadata.json",
                metadata.last_sequence_number(),
                self.env.catalog.ids().uuid()
            );
            self.put_raw(&name, metadata.to_json_vec()).await;
            name
        } else {
            let location = self.env.write_metadata(metadata).await;
            self.env.relative(&location)
        };
        self.track(&relative, false);
        self.metadata.insert(relative.clone(), metadata.clone());
        let location = self.spell_uri(&relative);
        (location, relative)
    }

    /// A layout for a new snapshot, sometimes sharing centroids, sometimes at odd names.
    async fn layout(&mut self) -> Layout {
        let tag = self.next();
        let mut layout = Layout::under(&format!("t{tag}"));
        if self.encode() {
            if let Some(stats) = self.stats() {
                stats.encoded_tables += 1;
            }
            let base = match self.rng.random_range(0..3) {
                0 => format!("indexes/{}", self.odd_segment(false)),
                1 => format!("indexes/{}/{}", self.odd_segment(false), tag),
                _ => format!("indexes/t{tag}/{}", self.odd_segment(false)),
            };
            let centroids = if self.rng.random_bool(0.5) {
                self.odd_segment(false)
            } else {
                "ivf_centroids".to_owned()
            };
            let postings = if self.rng.random_bool(0.5) {
                self.odd_segment(false)
            } else {
                "ivf_postings".to_owned()
            };
            layout.centroids = format!("{base}/{centroids}/");
            layout.postings = format!("{base}/{postings}/");
        }
        if self.rng.random_bool(0.3) {
            // Shared centroids a pointer reaches now: a writer takes family references from
            // metadata it loaded (assumption 3 of `gc`; one unreachable for the retention
            // may be condemned and collected under a writer that picks it up later, and
            // its publication is refused).
            let reachable = self.reachable();
            let existing: Vec<String> = self
                .centroids
                .iter()
                .filter(|c| self.objects[*c].deleted.is_none() && reachable.contains(*c))
                .cloned()
                .collect();
            let centroids = if !existing.is_empty() && self.rng.random_bool(0.6) {
                existing[self.rng.random_range(0..existing.len())].clone()
            } else {
                let own = Layout::under(&format!("c{}", self.next()));
                self.write_table_dir(&own.centroids).await;
                self.write_table_dir(&own.postings).await;
                let metadata = IndexMetadata::create(
                    contents(&own),
                    BTreeMap::new(),
                    self.env.clock.as_ref(),
                    self.env.catalog.ids().as_ref(),
                    &FamilyRegistry::builtin(),
                )
                .expect("centroids metadata");
                let (_, relative) = self.write_metadata(&metadata, true).await;
                self.centroids.push(relative.clone());
                relative
            };
            let table = self.metadata[&centroids]
                .current_snapshot()
                .contents()
                .index_tables["ivf_centroids"]
                .properties()["location"]
                .clone();
            layout.centroids = table;
            layout.centroids_metadata = Some(centroids);
        }
        layout
    }

    /// The metadata of a new snapshot at `layout` (a new index, or a successor of `base`).
    fn snapshot_metadata(
        &mut self,
        layout: &Layout,
        base: Option<&IndexMetadata>,
    ) -> IndexMetadata {
        let registry = FamilyRegistry::builtin();
        match base {
            None => IndexMetadata::create(
                contents(layout),
                BTreeMap::new(),
                self.env.clock.as_ref(),
                self.env.catalog.ids().as_ref(),
                &registry,
            )
            .expect("metadata"),
            Some(base) => {
                let next = base
                    .successor(
                        contents(layout),
                        self.env.clock.as_ref(),
                        self.env.catalog.ids().as_ref(),
                        &registry,
                    )
                    .expect("successor");
                if self.rng.random_bool(0.5) {
                    let keep = self.rng.random_range(1..3);
                    next.expire_snapshots(Some(keep), None, self.env.clock.as_ref())
                        .expect("expiry")
                } else {
                    next
                }
            }
        }
    }

    async fn write_index(
        &mut self,
        base: Option<&IndexMetadata>,
    ) -> (IndexMetadata, String, Vec<String>) {
        let layout = self.layout().await;
        let mut files = self.write_table_dir(&layout.centroids).await;
        files.extend(self.write_table_dir(&layout.postings).await);
        let metadata = self.snapshot_metadata(&layout, base);
        let (location, relative) = self.write_metadata(&metadata, false).await;
        files.push(relative);
        (metadata, location, files)
    }
    fn free_name(&mut self) -> String {
        let reusable: Vec<String> = self
            .tombstoned
            .iter()
            .filter(|n| !self.live.contains_key(*n))
            .cloned()
            .collect();
        if !reusable.is_empty() && self.rng.random_bool(0.15) {
            reusable[self.rng.random_range(0..reusable.len())].clone()
        } else {
            format!("x{}", self.next())
        }
    }

    fn pick_live(&mut self) -> Option<String> {
        let names: Vec<String> = self.live.keys().cloned().collect();
        (!names.is_empty()).then(|| names[self.rng.random_range(0..names.len())].clone())
    }

    // ----- catalog operations (model updates after success) -----

    fn apply(&mut self, op: &Op) {
        if std::env::var_os("PARQDB_GC_SIM_TRACE").is_some() {
            eprintln!("op at {}: {op:?}", self.now());
        }
        if let Op::Register { location, .. } | Op::Commit { new: location, .. } = op {
            let now = self.now();
            self.published_at.push((now, self.env.relative(location)));
        }
        match op {
            Op::Register { name, location } => {
                let metadata = self.metadata[&self.env.relative(location)].clone();
                self.live.insert(
                    name.clone(),
                    Live {
                        metadata,
                        location: location.clone(),
                    },
                );
            }
            Op::Drop { name } => {
                self.live.remove(name);
                self.tombstoned.insert(name.clone());
            }
            Op::Rename { from, to } => {
                let live = self.live.remove(from).expect("renamed index");
                self.tombstoned.insert(from.clone());
                self.live.insert(to.clone(), live);
            }
            Op::Commit { name, new, .. } => {
                let metadata = self.metadata[&self.env.relative(new)].clone();
                self.live.insert(
                    name.clone(),
                    Live {
                        metadata,
                        location: new.clone(),
                    },
                );
            }
        }
    }

    async fn execute(
        catalog: &Catalog,
        env_ids: (IndexIdentifier, Option<IndexIdentifier>),
        op: &Op,
    ) -> bool {
        let (id, other) = env_ids;
        match op {
            Op::Register { location, .. } => catalog
                .register(&id, Some(&source()), location)
                .await
                .is_ok(),
            Op::Drop { .. } => catalog.drop_index(&id).await.is_ok(),
            Op::Rename { .. } => catalog
                .rename(&id, &other.expect("destination"))
                .await
                .is_ok(),
            Op::Commit { base, new, .. } => catalog
                .commit(&id, Some(&source()), base, new)
                .await
                .is_ok(),
        }
    }

    async fn ids_of(&self, op: &Op) -> (IndexIdentifier, Option<IndexIdentifier>) {
        match op {
            Op::Register { name, .. } | Op::Drop { name } | Op::Commit { name, .. } => {
                (self.id(name).await, None)
            }
            Op::Rename { from, to } => (self.id(from).await, Some(self.id(to).await)),
        }
    }

    /// A random operation, with its files written (not yet applied).
    async fn prepare(&mut self) -> Option<Op> {
        match self.rng.random_range(0..12) {
            0..=2 => {
                let (_, location, _) = self.write_index(None).await;
                Some(Op::Register {
                    name: self.free_name(),
                    location,
                })
            }
            3..=5 => {
                let name = self.pick_live()?;
                let live = self.live[&name].clone();
                let (_, new, _) = self.write_index(Some(&live.metadata)).await;
                self.bases
                    .insert(self.env.relative(&new), live.location.clone());
                Some(Op::Commit {
                    name,
                    base: live.location,
                    new,
                })
            }
            6 => Some(Op::Drop {
                name: self.pick_live()?,
            }),
            7 => {
                let from = self.pick_live()?;
                Some(Op::Rename {
                    from,
                    to: self.free_name(),
                })
            }
            10 => {
                // Another identifier on the very file a live one points at.
                let shared = self.pick_live()?;
                let location = self.live[&shared].location.clone();
                Some(Op::Register {
                    name: self.free_name(),
                    location,
                })
            }
            11 => {
                // An identifier catches up through a file written long ago as a successor
                // of its current one (another identifier may have committed it and moved
                // on since, or its writer's commit comes only now).
                let name = self.pick_live()?;
                let base = self.live[&name].location.clone();
                let current = self.env.relative(&base);
                let mut later: Vec<String> = self
                    .bases
                    .iter()
                    .filter(|(file, from)| {
                        self.env.relative(from) == current
                            && self
                                .objects
                                .get(*file)
                                .is_some_and(|o| o.deleted.is_none() && !o.in_flight)
                    })
                    .map(|(file, _)| file.clone())
                    .collect();
                later.sort();
                if later.is_empty() {
                    return None;
                }
                let pick = later[self.rng.random_range(0..later.len())].clone();
                Some(Op::Commit {
                    name,
                    base,
                    new: self.spell_uri(&pick),
                })
            }
            _ => {
                // Re-register an old metadata file that still exists and nobody points at.
                let current: BTreeSet<String> = self
                    .live
                    .values()
                    .map(|l| self.env.relative(&l.location))
                    .collect();
                let old: Vec<String> = self
                    .metadata
                    .keys()
                    .filter(|p| !self.centroids.contains(p) && !current.contains(*p))
                    .filter(|p| {
                        !self
                            .hostile
                            .as_ref()
                            .is_some_and(|h| h.foreign_files.contains(*p))
                    })
                    .filter(|p| self.objects[*p].deleted.is_none() && !self.objects[*p].in_flight)
                    .cloned()
                    .collect();
                if old.is_empty() {
                    return None;
                }
                let pick = old[self.rng.random_range(0..old.len())].clone();
                let name = self.free_name();
                Some(Op::Register {
                    name,
                    location: self.spell_uri(&pick),
                })
            }
        }
    }

    async fn operate(&mut self) {
        self.mark();
        if let Some(op) = self.prepare().await {
            self.logged(&op);
            let ids = self.ids_of(&op).await;
            if Sim::execute(&self.env.catalog, ids, &op).await {
                self.apply(&op);
            }
        }
        self.mark();
    }

    /// A writer writes a successor (or a new index) and crashes, or commits later.
    async fn writer(&mut self, crash: bool) {
        let base = self
            .pick_live()
            .map(|name| (name.clone(), self.live[&name].clone()));
        let (metadata, location, files) = self
            .write_index(base.as_ref().map(|(_, l)| &l.metadata))
            .await;
        if crash {
            return; // orphans
        }
        if let Some((name, live)) = base {
            self.bases
                .insert(self.env.relative(&location), live.location.clone());
            for file in &files {
                self.objects.get_mut(file).expect("written").in_flight = true;
            }
            self.pending.push(Pending {
                name,
                base: live.location,
                metadata,
                location,
                files,
                written: self.now(),
            });
        }
    }

    /// Land or abandon pending commits (they must complete within half the grace period).
    async fn settle_pending(&mut self, force_abandon: bool) {
        let pending = std::mem::take(&mut self.pending);
        for commit in pending {
            let fresh = self.now() - commit.written <= GRACE / 2 && !force_abandon;
            if fresh && self.rng.random_bool(0.5) {
                self.pending.push(commit);
                continue;
            }
            for file in &commit.files {
                self.objects.get_mut(file).expect("written").in_flight = false;
            }
            if fresh {
                self.mark();
                self.logged_naming(&commit.base);
                self.logged_naming(&commit.location);
                let id = self.id(&commit.name).await;
                let landed = self
                    .env
                    .catalog
                    .commit(&id, Some(&source()), &commit.base, &commit.location)
                    .await
                    .is_ok();
                if landed {
                    let _ = &commit.metadata;
                    self.apply(&Op::Commit {
                        name: commit.name.clone(),
                        base: commit.base.clone(),
                        new: commit.location.clone(),
                    });
                }
                self.mark();
            }
        }
    }

    /// A metadata file the next run would delete (adversarial: re-register it mid-run).
    async fn doomed_metadata(&mut self) -> Option<String> {
        let dry = GcConfig {
            dry_run: true,
            ..self.config.clone()
        };
        let report = GarbageCollector::new(self.env.catalog.clone(), dry)
            .expect("config")
            .collect(self.now())
            .await
            .ok()?;
        let mut doomed: Vec<String> = report
            .actions
            .iter()
            .filter(|a| a.action == gc::ActionKind::Delete && self.metadata.contains_key(&a.path))
            .filter(|a| !self.centroids.contains(&a.path))
            .map(|a| a.path.clone())
            .collect();
        doomed.sort(); // the report's order follows concurrent I/O
        (!doomed.is_empty()).then(|| doomed[self.rng.random_range(0..doomed.len())].clone())
    }

    /// One GC run, maybe with a catalog operation injected between its phases, maybe
    /// dying mid-delete.
    async fn gc(&mut self, allow_chaos: bool) {
        self.mark();
        let live_before = self.live_dirs();
        let deletions_before = self.env.sim.deletions().len();
        let dry = allow_chaos && self.rng.random_bool(0.1);
        let crash = allow_chaos && !dry && self.rng.random_bool(0.08);
        let inject = if allow_chaos && self.rng.random_bool(0.2) {
            self.prepare().await
        } else if allow_chaos && !dry && self.rng.random_bool(0.2) {
            self.doomed_metadata().await.map(|path| Op::Register {
                name: self.free_name(),
                location: self.spell_uri(&path),
            })
        } else {
            None
        };
        let config = GcConfig {
            dry_run: dry,
            ..self.config.clone()
        };
        let mut collector =
            GarbageCollector::new(self.env.catalog.clone(), config).expect("config");
        let outcome: Arc<Mutex<Option<bool>>> = Arc::new(Mutex::new(None));
        if let Some(op) = &inject {
            self.logged(op);
        }
        if let Some(op) = inject.clone() {
            let phases = [GcPhase::ScanMetadata, GcPhase::ScanIndexes, GcPhase::Verify];
            let phase = phases[self.rng.random_range(0..phases.len())];
            let ids = self.ids_of(&op).await;
            let catalog = self.env.catalog.clone();
            let outcome = outcome.clone();
            collector = collector.with_progress(move |event| {
                if *event != (GcProgress::Phase { phase })
                    || outcome.lock().expect("lock").is_some()
                {
                    return;
                }
                let (catalog, ids, op) = (catalog.clone(), ids.clone(), op.clone());
                let ok = std::thread::spawn(move || {
                    tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                        .expect("runtime")
                        .block_on(Sim::execute(&catalog, ids, &op))
                })
                .join()
                .expect("operation thread");
                if std::env::var_os("PARQDB_GC_SIM_TRACE").is_some() {
                    eprintln!("injected at {phase:?}: {ok}");
                }
                *outcome.lock().expect("lock") = Some(ok);
            });
        }
        if crash {
            self.env
                .sim
                .fail_deletes_after(Some(self.rng.random_range(0..3)));
        }
        let result = collector.collect(self.now()).await;
        self.env.sim.fail_deletes_after(None);
        match (inject, *outcome.lock().expect("lock")) {
            (Some(op), Some(true)) => self.apply(&op),
            // A refused publication withdraws its entry: a delete, which may have failed.
            (
                Some(Op::Register { location, .. } | Op::Commit { new: location, .. }),
                Some(false),
            ) if crash => {
                if let Ok(relative) = self.env.warehouse.relative(&location) {
                    self.unwithdrawn.insert(relative);
                }
            }
            _ => {}
        }
        match result {
            Ok(report) => {
                self.note_gave_up(&report.warnings);
                self.note_wide(&report.warnings, &live_before);
                if let Ok(trace) = std::env::var("PARQDB_GC_SIM_TRACE") {
                    let actions: Vec<_> = report
                        .actions
                        .iter()
                        .filter(|a| a.path.contains(&trace))
                        .collect();
                    eprintln!(
                        "gc at {} {:?} records {}: kept grace {} retention {} delay {} reference {} verify {} deleted {} {:?}",
                        self.now(),
                        report.status,
                        report.roots.pointer_records,
                        report.counts.kept_by_grace.objects,
                        report.counts.kept_by_retention.objects,
                        report.counts.kept_by_condemn_delay.objects,
                        report.counts.kept_by_reference.objects,
                        report.counts.kept_at_verification.objects,
                        report.counts.deleted.objects,
                        actions
                    );
                    for warning in &report.warnings {
                        eprintln!("  warning: {warning}");
                    }
                }
                // A call that stopped at its (zero) budget did its part of the run: the
                // next call goes on with it.
                if report.status == GcStatus::InProgress {
                    self.last_gc = self.now();
                }
                if report.status == GcStatus::Completed {
                    self.last_gc = self.now();
                    self.gc_runs += 1;
                    if self.crashed || self.unadopted {
                        self.crashed = false;
                        self.restarted = self.now();
                    }
                }
            }
            Err(err) => {
                // A run that fails mid-delete is resumed by the next call: no clock of it
                // restarts.
                assert!(
                    crash,
                    "gc failed without an injected failure: {}",
                    std::iter::successors(Some(&err as &dyn std::error::Error), |e| e.source())
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join(": ")
                );
            }
        }
        self.check_deletions();
        self.check_wide(&live_before, deletions_before);
        self.mark();
    }

    /// Advance time by `delta` in small steps, keeping the GC period.
    async fn advance(&mut self, delta: i64) {
        let mut left = delta;
        while left > 0 {
            let step = left.min(5 * MINUTE);
            self.env.advance(step);
            left -= step;
            self.keep_period().await;
        }
    }

    /// One step of the ordinary workload.
    async fn ordinary(&mut self) {
        match self.rng.random_range(0..100) {
            0..=44 => self.operate().await,
            45..=52 => self.writer(true).await,
            53..=62 => self.writer(false).await,
            63..=79 => self.gc(true).await,
            80 => self.backup_or_restore().await,
            81 => self.long_key().await,
            82 => self.prefix_stray().await,
            _ => {
                let delta = if self.rng.random_bool(0.7) {
                    self.rng.random_range(1..6) * MINUTE
                } else {
                    self.rng.random_range(10..41) * MINUTE
                };
                self.advance(delta).await;
            }
        }
    }

    /// An operator backs up every pointer record, or restores the backup in place: the
    /// records go back (as far as their metadata still exists), without the catalog.
    async fn backup_or_restore(&mut self) {
        let store = self.env.pointer_store.clone();
        // A backup older than the retention cannot be restored: what it names may have
        // been collected (the reader-safety period is all a collector promises; see the
        // assumptions in `gc`'s module docs). Such a backup is replaced by a new one.
        let now = self.now();
        let young = |(taken, _): &(i64, Vec<SavedRecord>)| now - taken < RETENTION;
        let Some((_, backup)) = self.backup.take().filter(young) else {
            let mut saved = Vec::new();
            let page = store
                .list(&StoreKey::new("i").expect("key"), None, 1000)
                .await
                .expect("listing records");
            for entry in page.entries {
                let Some(value) = store.get(&entry.key).await.expect("record") else {
                    continue;
                };
                let Ok(id) = IndexIdentifier::from_store_key(entry.key.as_str()) else {
                    continue;
                };
                let name = id.name().to_owned();
                let live = self.live.get(&name).cloned();
                saved.push(SavedRecord {
                    key: entry.key,
                    bytes: value.value,
                    name,
                    live,
                });
            }
            if std::env::var_os("PARQDB_GC_SIM_TRACE").is_some() {
                eprintln!("backup at {} of {} records", self.now(), saved.len());
            }
            self.backup = Some((self.now(), saved));
            return;
        };
        let mut restored = false;
        for SavedRecord {
            key,
            bytes,
            name,
            live,
        } in backup
        {
            if let Some(live) = &live {
                let mut refs = BTreeSet::from([self.env.relative(&live.location)]);
                self.refs_of(&live.metadata, &mut refs);
                if refs
                    .iter()
                    .any(|r| self.objects.get(r).is_some_and(|o| o.deleted.is_some()))
                {
                    continue; // its files are gone: restoring it would dangle
                }
            }
            let Some(current) = store.get(&key).await.expect("record") else {
                continue;
            };
            store
                .put(
                    &key,
                    bytes,
                    parqdb_catalog::store::PutMode::Update(current.version),
                )
                .await
                .expect("restored");
            restored = true;
            match live {
                Some(live) => {
                    self.live.insert(name, live);
                }
                None => {
                    self.live.remove(&name);
                }
            }
        }
        if std::env::var_os("PARQDB_GC_SIM_TRACE").is_some() {
            eprintln!("restore at {}: {restored}", self.now());
        }
        if restored {
            // The restore procedure: a pointer store put back from a backup is the catalog
            // once the operator says so (until then its older records are the newer ones
            // away, and no clock runs).
            self.unadopted = true;
            if self.rng.random_bool(0.8) {
                self.adopt().await;
            }
            self.crashed = true;
        }
        self.mark();
    }

    /// The operator adopts the pointer store as it is (`init --adopt`).
    async fn adopt(&mut self) {
        gc::adopt(&self.env.catalog, self.now())
            .await
            .expect("adopted");
        self.unadopted = false;
        self.unwithdrawn.clear();
        // What was published within the settle time before it stays judged (a write in
        // flight may land after the adoption reads the records): kept until the next
        // adoption if the store lacks it.
        let recent = self.now() - ADOPTION_SETTLE;
        self.published_at.retain(|(at, _)| *at > recent);
        self.unwithdrawn
            .extend(self.published_at.iter().map(|(_, path)| path.clone()));
        self.crashed = true;
    }

    /// Garbage whose name is too long for the ledger's mirror: kept, and collection goes
    /// on around it.
    async fn long_key(&mut self) {
        let n = self.next();
        let limit = self.env.warehouse.max_name_len();
        let len = limit.saturating_sub(40);
        let mut name = format!("indexes/long{n}");
        while name.len() + 201 < len {
            name.push('/');
            name.push_str(&"k".repeat(200));
        }
        name.push('/');
        name.push_str(&"k".repeat(len.saturating_sub(name.len() + 1).max(1)));
        match &self.env.local_dir {
            Some(dir) => {
                let path = dir.join(&name);
                std::fs::create_dir_all(path.parent().expect("parent")).expect("dirs");
                std::fs::write(&path, b"long").expect("long file");
                set_mtime(&path, self.now());
            }
            None => self.put_raw(&name, b"long".to_vec()).await,
        }
        self.track(&name, false);
        self.objects.get_mut(&name).expect("tracked").never =
            Some("its name is too long for the ledger");
    }

    /// A stray note under `metadata/` naming the managed prefixes as a whole: it is kept
    /// (a format this collector does not understand), and keeps nothing whole.
    async fn prefix_stray(&mut self) {
        let path = format!("metadata/notes{}.json", self.next());
        let bytes = serde_json::to_vec(&serde_json::json!({
            "format-version": 2,
            "n": ["indexes", "metadata", "indexes/", "metadata/"],
        }))
        .expect("json");
        self.put_raw(&path, bytes).await;
        self.track(&path, false);
        self.objects.get_mut(&path).expect("tracked").never =
            Some("metadata of a format version this collector does not understand");
        self.strays.insert(
            path,
            Stray {
                names: Vec::new(),
                named: BTreeSet::new(),
            },
        );
    }

    async fn step(&mut self) {
        if self.hostile.is_some() && self.rng.random_bool(0.25) {
            self.hostile_step().await;
        } else {
            self.ordinary().await;
        }
        self.settle_pending(false).await;
        self.keep_period().await;
        self.check_invariants();
    }

    /// A successful run at least every PERIOD (a skipped run — lease held by a crashed
    /// run — is retried after the lease expires, which the liveness bound allows for).
    async fn keep_period(&mut self) {
        let mut tries = 0;
        while self.now() - self.last_gc >= PERIOD - 5 * MINUTE {
            self.gc(false).await;
            if self.now() - self.last_gc < PERIOD - 5 * MINUTE {
                break;
            }
            tries += 1;
            assert!(tries < 10, "gc keeps being skipped");
            self.env.advance(LEASE);
        }
    }

    // ----- the hostile generator -----

    /// Neighbours the collector must never touch, and the first foreign catalog.
    async fn setup_hostile(&mut self) {
        if self.hostile.is_none() {
            return;
        }
        let old = self.now() - 10 * 24 * HOUR;
        if let Some(dir) = self.env.local_dir.clone() {
            // Files outside the warehouse directory, for links to point at, and a sibling
            // warehouse whose name extends this one's.
            let parent = dir.parent().expect("parent").to_path_buf();
            let outside = parent.join("outside");
            let files = [
                "outside/a.parquet",
                "outside/deep/b.parquet",
                "outside/x.metadata.json",
                "outside/indexes/t1/ivf_postings/part-0.parquet",
                "warehouse2/indexes/t1/ivf_postings/part-0.parquet",
                "warehouse2/metadata/x.metadata.json",
            ];
            let mut made = Vec::new();
            for file in files {
                let path = parent.join(file);
                std::fs::create_dir_all(path.parent().expect("parent")).expect("dirs");
                let content = format!("precious {file}").into_bytes();
                std::fs::write(&path, &content).expect("outside file");
                set_mtime(&path, old);
                made.push((path, content));
            }
            let hostile = self.hostile.as_mut().expect("hostile");
            hostile.outside_files = made;
            hostile.outside_dir = Some(outside);
        } else {
            // Keys of the same store outside the warehouse prefix.
            let keys = [
                "wh2/indexes/t1/ivf_postings/part-0.parquet",
                "wh-old/metadata/x.metadata.json",
                "indexes/t1/ivf_postings/part-0.parquet",
                "metadata/x.metadata.json",
                "w/indexes/a",
            ];
            for key in keys {
                self.env
                    .warehouse
                    .object_store()
                    .put(
                        &StorePath::parse(key).expect("key"),
                        PutPayload::from_static(b"not ours"),
                    )
                    .await
                    .expect("written");
            }
            let hostile = self.hostile.as_mut().expect("hostile");
            hostile.keep_keys = keys.iter().map(|k| k.to_string()).collect();
        }
        // Beside the managed prefixes, inside the warehouse.
        for name in [
            "indexesx/t1/ivf_postings/part-0.parquet",
            "metadata.json",
            "Metadata/x.metadata.json",
            "sources/odd ü~[1]/part-0.parquet",
        ] {
            self.put_raw(name, b"not ours".to_vec()).await;
            self.hostile
                .as_mut()
                .expect("hostile")
                .keep
                .push(name.to_owned());
        }
        if self.hostile.as_ref().is_some_and(|h| h.foreign) {
            self.add_foreign();
        }
    }

    /// Another catalog over the same warehouse: its pointer store in memory, beside the
    /// warehouse or (local) inside a managed prefix.
    fn add_foreign(&mut self) {
        let n = self.next();
        let store: Arc<dyn PointerStore> = match self.env.local_dir.clone() {
            Some(dir) => {
                let path = match self.rng.random_range(0..3) {
                    0 => dir.parent().expect("parent").join(format!("pointers-{n}")),
                    place => {
                        let segment = if self.encode() {
                            self.odd_segment(false)
                        } else {
                            format!("team{n}")
                        };
                        let prefix = if place == 1 { "metadata" } else { "indexes" };
                        let root = format!("{prefix}/{segment}/cat{n}");
                        self.nested_roots.push(root.clone());
                        dir.join(root)
                    }
                };
                Arc::new(LocalStore::new(path))
            }
            None => Arc::new(MemoryStore::new()),
        };
        let catalog = Catalog::builder(store.clone(), self.env.warehouse.clone())
            .clock(self.env.clock.clone())
            .ids(Arc::new(SeededIds::new(self.seed ^ (n << 40))))
            .build();
        self.hostile
            .as_mut()
            .expect("hostile")
            .foreigns
            .push(Foreign { catalog, store });
    }

    /// A foreign catalog writes an index's files raw, then tries to write to the catalog:
    /// refused, and nothing is published.
    async fn foreign_attempt(&mut self) {
        if self.hostile.as_ref().expect("hostile").foreigns.is_empty() || self.rng.random_bool(0.1)
        {
            self.add_foreign();
        }
        let count = self.hostile.as_ref().expect("hostile").foreigns.len();
        let pick = self.rng.random_range(0..count);
        let (catalog, store) = {
            let foreign = &self.hostile.as_ref().expect("hostile").foreigns[pick];
            (foreign.catalog.clone(), foreign.store.clone())
        };
        let base = if self.rng.random_bool(0.5) {
            self.pick_live()
                .map(|name| (name.clone(), self.live[&name].clone()))
        } else {
            None
        };
        let (_, location, _) = self
            .write_index(base.as_ref().map(|(_, live)| &live.metadata))
            .await;
        let written = self.env.relative(&location);
        self.hostile
            .as_mut()
            .expect("hostile")
            .foreign_files
            .insert(written);
        let n = self.next();
        let namespace = Namespace::new([format!("f{n}")]).expect("namespace");
        let owned = match &base {
            Some((name, _)) => self.id(name).await,
            None => self.id(&format!("x{n}")).await,
        };
        let now = self.now();
        let (what, result): (&str, parqdb_catalog::Result<()>) = match self.rng.random_range(0..9) {
            0 => (
                "namespace create",
                catalog.create_namespace(&namespace, BTreeMap::new()).await,
            ),
            1 => (
                "register in its own namespace",
                catalog
                    .register(
                        &IndexIdentifier::new(namespace, "x").expect("id"),
                        Some(&source()),
                        &location,
                    )
                    .await
                    .map(|_| ()),
            ),
            2 => (
                "register in the owner's namespace",
                catalog
                    .register(&owned, Some(&source()), &location)
                    .await
                    .map(|_| ()),
            ),
            3 => match &base {
                Some((_, live)) => (
                    "commit",
                    catalog
                        .commit(&owned, Some(&source()), &live.location, &location)
                        .await
                        .map(|_| ()),
                ),
                None => (
                    "register",
                    catalog
                        .register(&owned, Some(&source()), &location)
                        .await
                        .map(|_| ()),
                ),
            },
            4 => ("drop", catalog.drop_index(&owned).await),
            5 => (
                "rename",
                catalog
                    .rename(
                        &owned,
                        &IndexIdentifier::new(owned.namespace().clone(), format!("r{n}"))
                            .expect("id"),
                    )
                    .await
                    .map(|_| ()),
            ),
            6 => ("init", gc::claim(&catalog, now).await.map(|_| ())),
            7 => (
                "gc",
                GarbageCollector::new(catalog, self.config.clone())
                    .expect("config")
                    .collect(now)
                    .await
                    .map(|_| ()),
            ),
            _ => (
                "dry-run gc",
                GarbageCollector::new(
                    catalog,
                    GcConfig {
                        dry_run: true,
                        ..self.config.clone()
                    },
                )
                .expect("config")
                .collect(now)
                .await
                .map(|_| ()),
            ),
        };
        let err = result.expect_err(&format!("a foreign catalog's {what} was accepted"));
        assert_eq!(
            err.kind(),
            ErrorKind::WarehouseNotOwned,
            "a foreign catalog's {what}: {err}"
        );
        let records = store
            .list(&StoreKey::new("i").expect("key"), None, 10)
            .await
            .expect("listing a foreign store");
        assert!(
            records.entries.is_empty(),
            "a foreign catalog holds index records after its {what}"
        );
        self.stats().expect("hostile").foreign_refused += 1;
    }

    /// A nested catalog structure (another warehouse or pointer store) below `metadata/`
    /// or `indexes/`, with data below its root; or more data below an existing one.
    async fn nest(&mut self) {
        let structures: Vec<String> = self
            .nested_roots
            .iter()
            .filter(|root| self.objects.keys().any(|p| within(p, root)))
            .cloned()
            .collect();
        if !structures.is_empty() && self.rng.random_bool(0.4) {
            let root = structures[self.rng.random_range(0..structures.len())].clone();
            self.nested_data(&root).await;
            return;
        }
        let n = self.next();
        let whole =
            self.hostile.as_ref().expect("hostile").whole_prefix && self.rng.random_bool(0.3);
        let segment = if self.encode() {
            self.odd_segment(false)
        } else {
            format!("team{n}")
        };
        let existing: Vec<String> = self
            .objects
            .iter()
            .filter(|(p, o)| o.deleted.is_none() && p.matches('/').count() >= 2)
            .map(|(p, _)| p.clone())
            .collect();
        let root = match self.rng.random_range(0..10) {
            _ if whole => ["indexes", "metadata"][self.rng.random_range(0..2)].to_owned(),
            0..=2 if !existing.is_empty() => {
                // In an existing directory: a table's, or an index's metadata directory.
                let pick = &existing[self.rng.random_range(0..existing.len())];
                let parent = pick.rsplit_once('/').expect("a directory").0.to_owned();
                if self.rng.random_bool(0.5) {
                    parent
                } else {
                    format!("{parent}/sub{n}")
                }
            }
            0..=6 => format!("indexes/{segment}/wh{n}"),
            _ => format!("metadata/{segment}/cat{n}"),
        };
        let structure = match self.rng.random_range(0..9) {
            0 => "_catalog-owner.json".to_owned(),
            1 => "_catalog/i/ns/=x".to_owned(),
            2 => format!("_gc/ledger/indexes/u/{n}/u-1-1-0.json"),
            3 => "_gc/lease/00000000000000000001.json".to_owned(),
            4 => "_meta/=catalog-id".to_owned(),
            5 => "i/ns/=idx".to_owned(),
            6 => "n/=ns".to_owned(),
            7 => "i/a/b/=idx.lock".to_owned(),
            _ => "_catalog/_meta/=catalog-id".to_owned(),
        };
        let structure = format!("{root}/{structure}");
        // The structure first, then data below it.
        self.put_raw(&structure, b"{}".to_vec()).await;
        self.nested_roots.push(root.clone());
        for path in covered(&self.objects, &root) {
            let obj = self.objects.get_mut(&path).expect("known");
            obj.never
                .get_or_insert("it lies below a nested catalog structure");
        }
        self.track(&structure, false);
        let stats = self.stats().expect("hostile");
        stats.nested_roots += 1;
        stats.nested_files += 1;
        for _ in 0..self.rng.random_range(1..4) {
            self.nested_data(&root).await;
        }
    }

    /// An arbitrary file below the nested root `root`.
    async fn nested_data(&mut self, root: &str) {
        let n = self.next();
        let mut name = root.to_owned();
        for _ in 0..self.rng.random_range(0..3) {
            let segment = match self.rng.random_range(0..5) {
                0 => "metadata".to_owned(),
                1 => "indexes".to_owned(),
                2 => format!("u{n}"),
                3 => "ivf_postings".to_owned(),
                _ => self.odd_segment(false),
            };
            name = format!("{name}/{segment}");
        }
        let (file, content): (String, &[u8]) = match self.rng.random_range(0..4) {
            0 => (format!("part-{n}.parquet"), b"PAR1 nested data"),
            1 => (
                format!("0000{n}-a.metadata.json"),
                b"{\"format-version\": 1}",
            ),
            2 => (format!("{}.bin", self.odd_segment(false)), b"\x00\x01\x02"),
            _ => (format!("x{n}.json"), b"{}"),
        };
        let name = format!("{name}/{file}");
        self.put_raw(&name, content.to_vec()).await;
        self.track(&name, false);
        self.stats().expect("hostile").nested_files += 1;
    }

    /// A symbolic link inside `indexes/` or `metadata/` (local backend).
    fn link(&mut self) {
        let Some(root) = self.env.local_dir.clone() else {
            return;
        };
        let outside = self
            .hostile
            .as_ref()
            .and_then(|h| h.outside_dir.clone())
            .expect("outside dir");
        let n = self.next();
        let segment = if self.encode() {
            self.odd_segment(false)
        } else {
            format!("l{n}")
        };
        let existing: Vec<String> = self
            .objects
            .iter()
            .filter(|(p, o)| o.deleted.is_none() && p.matches('/').count() >= 2)
            .map(|(p, _)| p.clone())
            .collect();
        let at = match self.rng.random_range(0..7) {
            0 => format!("indexes/{segment}/L{n}"),
            1 => format!("metadata/{segment}/L{n}"),
            2 => format!("metadata/{segment}/L{n}.metadata.json"),
            3 => format!("indexes/L{n}"),
            _ if !existing.is_empty() => {
                // In an existing directory, named like its files.
                let pick = &existing[self.rng.random_range(0..existing.len())];
                let parent = pick.rsplit_once('/').expect("a directory").0;
                if self.rng.random_bool(0.5) {
                    format!("{parent}/part-9{n}.parquet")
                } else {
                    format!("{parent}/L{n}")
                }
            }
            _ => format!("indexes/L{n}"),
        };
        let path = root.join(&at);
        let target = match self.rng.random_range(0..11) {
            0 => outside.clone(),
            1 => outside.join("deep"),
            2 => outside.join("a.parquet"),
            3 => outside.join("x.metadata.json"),
            4 => outside.join("indexes"),
            5 => root.clone(),
            6 => root.join("_catalog"),
            7 => root.join("indexes"),
            8 if !existing.is_empty() => {
                let pick = &existing[self.rng.random_range(0..existing.len())];
                let inside = root.join(pick);
                if self.rng.random_bool(0.5) {
                    inside
                } else {
                    inside.parent().expect("parent").to_path_buf()
                }
            }
            9 => path.parent().expect("parent").to_path_buf(),
            _ => outside.join(format!("missing-{n}")),
        };
        std::fs::create_dir_all(path.parent().expect("parent")).expect("link directory");
        let now = self.now();
        crate::support::gc::symlink_at(&target, &path, now);
        // What the collector reads the link as naming: a name inside the warehouse, but
        // never the root, a managed prefix as a whole or the catalog's own directories.
        let names = target
            .strip_prefix(&root)
            .ok()
            .and_then(|relative| relative.to_str())
            .map(|relative| relative.trim_end_matches('/').to_owned())
            .filter(|name| {
                let top = name.split('/').next().unwrap_or_default();
                !name.is_empty()
                    && !["indexes", "metadata"].contains(&name.as_str())
                    && !["_gc", "_catalog", "_catalog-owner.json"].contains(&top)
            });
        let hostile = self.hostile.as_mut().expect("hostile");
        hostile.links_made.push(path);
        let wide = target
            .strip_prefix(&root)
            .ok()
            .and_then(|relative| relative.to_str())
            .map(|relative| relative.trim_end_matches('/').to_owned())
            .filter(|relative| ["", "indexes", "metadata"].contains(&relative.as_str()));
        hostile.made_links.push(Link {
            at,
            names,
            wide,
            made: now,
        });
        hostile.stats.links += 1;
    }

    /// A name a stray may mention: an existing object or one of its directories (never a
    /// managed prefix itself), or nothing at all; spelled relative or as a URI.
    fn stray_target(&mut self) -> (String, String) {
        let existing: Vec<String> = self
            .objects
            .iter()
            .filter(|(_, o)| o.deleted.is_none())
            .map(|(p, _)| p.clone())
            .collect();
        let name = if existing.is_empty() || self.rng.random_bool(0.1) {
            format!("indexes/ghost{}", self.next())
        } else {
            let pick = existing[self.rng.random_range(0..existing.len())].clone();
            let segments: Vec<&str> = pick.split('/').collect();
            let keep = self.rng.random_range(2..=segments.len());
            segments[..keep].join("/")
        };
        // Relative names are written as they are, `%` included: another engine's format
        // may allow it, and the object it names is the one at that literal name.
        let mut spelled = if self.rng.random_bool(0.5) {
            self.spell_uri(&name)
        } else {
            name.clone()
        };
        if self.rng.random_bool(0.3) {
            spelled.push('/');
        }
        (spelled, name)
    }

    /// A stray unparseable file under `metadata/`: broken format-version-1 JSON or a JSON
    /// array naming objects, a format-version-2 file naming objects, junk or nothing.
    async fn stray(&mut self) {
        let n = self.next();
        let dir = if self.encode() {
            self.odd_segment(true)
        } else {
            format!("stray{n}")
        };
        let path = match self.rng.random_range(0..3) {
            0 => format!("metadata/{dir}/s{n}.metadata.json"),
            1 => format!("metadata/s{n}.json"),
            _ => format!("metadata/{dir}/deep/s{n}"),
        };
        let mut names = Vec::new();
        let mut spelled = Vec::new();
        if self.rng.random_bool(0.3) {
            // The stray's engine wrote data of its own, at a name the catalog would refuse
            // in its metadata (a `%`), and names it as it is.
            let dir = format!("indexes/{}", self.odd_segment(true));
            let file = format!("{dir}/part-0.parquet");
            self.put_raw(&file, b"their data".to_vec()).await;
            self.track(&file, false);
            let spelling = if self.rng.random_bool(0.7) {
                format!("{dir}/")
            } else {
                self.spell_uri(&dir)
            };
            spelled.push(serde_json::Value::String(spelling));
            names.push(dir);
        }
        for _ in 0..self.rng.random_range(1..4) {
            let (spelling, name) = self.stray_target();
            spelled.push(serde_json::Value::String(spelling));
            names.push(name);
        }
        let kind = self.rng.random_range(0..10);
        let version = [2, 3, 0][self.rng.random_range(0..3)];
        let (bytes, names, never) = match kind {
            0..=3 => (
                serde_json::to_vec(&serde_json::json!({
                    "format-version": 1,
                    "oops": spelled,
                    "nested": {"a": spelled[0].clone(), "n": 3, "ok": true},
                    "note": "not a location",
                }))
                .expect("json"),
                names,
                None,
            ),
            4..=5 => (
                serde_json::to_vec(&serde_json::json!({
                    "format-version": version,
                    "tables": {"t": spelled[0].clone()},
                    "more": spelled,
                }))
                .expect("json"),
                names,
                Some("metadata of a format version this collector does not understand"),
            ),
            6 => (serde_json::to_vec(&spelled).expect("json"), names, None),
            7 => (b"\x00\x01 not json {".to_vec(), Vec::new(), None),
            _ => (Vec::new(), Vec::new(), None),
        };
        self.put_raw(&path, bytes).await;
        self.track(&path, false);
        if let Some(why) = never {
            self.objects.get_mut(&path).expect("tracked").never = Some(why);
            self.stats().expect("hostile").unknown_format += 1;
        }
        let named: BTreeSet<String> = names
            .iter()
            .flat_map(|name| covered(&self.objects, name))
            .filter(|p| *p != path && self.objects[p].deleted.is_none())
            .collect();
        self.strays.insert(path, Stray { names, named });
        self.stats().expect("hostile").strays += 1;
    }

    /// Valid metadata written outside `metadata/` (or a location leaving it): register and
    /// commit refuse it.
    async fn misplaced(&mut self) {
        let n = self.next();
        let base = if self.rng.random_bool(0.6) {
            self.pick_live()
                .map(|name| (name.clone(), self.live[&name].clone()))
        } else {
            None
        };
        let layout = self.layout().await;
        self.write_table_dir(&layout.centroids).await;
        self.write_table_dir(&layout.postings).await;
        let metadata = self.snapshot_metadata(&layout, base.as_ref().map(|(_, l)| &l.metadata));
        let bytes = metadata.to_json_vec();
        let segment = if self.encode() {
            self.odd_segment(false)
        } else {
            format!("m{n}")
        };
        let root = self.env.warehouse.root().to_owned();
        // (where it is written, the location handed to the catalog, whether it is inside a
        // managed prefix)
        let (written, location, managed) = match self.rng.random_range(0..8) {
            0 => {
                let name = format!("indexes/{segment}/{n}.metadata.json");
                let location = self.spell_uri(&name);
                (name, location, true)
            }
            1 => {
                let name = format!("{segment}/{n}.metadata.json");
                let location = self.spell_uri(&name);
                (name, location, false)
            }
            2 => {
                let name = format!("metadata{n}.json");
                let location = self.spell_uri(&name);
                (name, location, false)
            }
            3 => {
                let name = format!("metadatax{n}/v.metadata.json");
                let location = self.spell_uri(&name);
                (name, location, false)
            }
            4 => {
                let name = format!("indexes/{segment}/{n}.metadata.json");
                let dots = ["..", "%2e%2e", "%2E."][self.rng.random_range(0..3)];
                let location =
                    format!("{root}/metadata/{dots}/indexes/{segment}/{n}.metadata.json");
                (name, location, true)
            }
            5 => {
                let name = format!("metadata%2F{n}.metadata.json");
                let location = format!("{root}/metadata%2F{n}.metadata.json");
                (name, location, false)
            }
            6 => {
                let name = format!("indexes/{segment}/{n}.metadata.json");
                let escaped = ["%69ndexes", "INDEXES", "indexes"][self.rng.random_range(0..3)];
                let location = format!("{root}/{escaped}/{segment}/{n}.metadata.json");
                (name, location, true)
            }
            _ => {
                // Outside the warehouse: a sibling root whose name extends this one's.
                let location = format!("{root}2/metadata/{n}.metadata.json");
                match self.env.local_dir.clone() {
                    Some(dir) => {
                        let path = dir
                            .parent()
                            .expect("parent")
                            .join(format!("warehouse2/metadata/{n}.metadata.json"));
                        std::fs::create_dir_all(path.parent().expect("parent")).expect("dirs");
                        std::fs::write(&path, &bytes).expect("outside file");
                        self.hostile
                            .as_mut()
                            .expect("hostile")
                            .outside_files
                            .push((path, bytes.clone()));
                    }
                    None => {
                        let key = format!("wh2/metadata/{n}.metadata.json");
                        self.env
                            .warehouse
                            .object_store()
                            .put(
                                &StorePath::parse(&key).expect("key"),
                                PutPayload::from(bytes.clone()),
                            )
                            .await
                            .expect("written");
                        self.hostile.as_mut().expect("hostile").keep_keys.push(key);
                    }
                }
                (String::new(), location, false)
            }
        };
        // A location spelled `INDEXES/…` names another object: write that one too.
        let written = if location.contains("/INDEXES/") {
            written.replacen("indexes/", "INDEXES/", 1)
        } else {
            written
        };
        let managed = managed && written.starts_with("indexes/");
        if !written.is_empty() {
            self.put_raw(&written, bytes.clone()).await;
            if managed {
                self.track(&written, false);
            } else {
                self.hostile
                    .as_mut()
                    .expect("hostile")
                    .keep
                    .push(written.clone());
            }
        }
        let name = self.free_name();
        let id = self.id(&name).await;
        let err = self
            .env
            .catalog
            .register(&id, Some(&source()), &location)
            .await
            .expect_err(&format!("registered misplaced metadata {location}"));
        assert_eq!(
            err.kind(),
            ErrorKind::InvalidIndexMetadata,
            "register {location}: {err}"
        );
        if let Some((name, live)) = base {
            let id = self.id(&name).await;
            let err = self
                .env
                .catalog
                .commit(&id, Some(&source()), &live.location, &location)
                .await
                .expect_err(&format!("committed misplaced metadata {location}"));
            assert_eq!(
                err.kind(),
                ErrorKind::InvalidIndexMetadata,
                "commit {location}: {err}"
            );
        }
        self.stats().expect("hostile").misplaced_refused += 1;
    }

    /// A run paused at a random phase (or between delete batches) while time advances,
    /// usually past its lease, and the workload and other runs go on; then resumed. It
    /// must stop (lease lost) or do no harm.
    async fn paused_gc(&mut self) {
        #[derive(Debug, Clone, Copy)]
        enum Pause {
            Phase(GcPhase),
            Deleted(u64),
        }
        self.mark();
        let phases = [
            GcPhase::CheckOwnership,
            GcPhase::AcquireLease,
            GcPhase::ComputeReachability,
            GcPhase::ScanMetadata,
            GcPhase::ScanIndexes,
            GcPhase::Verify,
            GcPhase::Delete,
            GcPhase::SweepLedger,
        ];
        let at = match self.rng.random_range(0..10) {
            i @ 0..8 => Pause::Phase(phases[i]),
            _ => Pause::Deleted(self.rng.random_range(1..3)),
        };
        let (paused_tx, mut paused_rx) = tokio::sync::mpsc::unbounded_channel::<()>();
        let (resume_tx, resume_rx) = std::sync::mpsc::channel::<()>();
        let resume_rx = Mutex::new(resume_rx);
        let deleted_events = std::sync::atomic::AtomicU64::new(0);
        let fired = AtomicBool::new(false);
        let collector = GarbageCollector::new(self.env.catalog.clone(), self.config.clone())
            .expect("config")
            .with_progress(move |event| {
                let hit = match (at, event) {
                    (Pause::Phase(phase), GcProgress::Phase { phase: now }) => *now == phase,
                    (Pause::Deleted(n), GcProgress::Deleted { .. }) => {
                        deleted_events.fetch_add(1, Ordering::SeqCst) + 1 == n
                    }
                    _ => false,
                };
                if hit && !fired.swap(true, Ordering::SeqCst) {
                    paused_tx.send(()).ok();
                    resume_rx.lock().expect("lock").recv().ok();
                }
            });
        let now = self.now();
        let run = std::thread::spawn(move || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime")
                .block_on(collector.collect(now))
        });
        let paused = paused_rx.recv().await.is_some();
        if paused {
            if std::env::var_os("PARQDB_GC_SIM_TRACE").is_some() {
                eprintln!("paused at {at:?} at {}", self.now());
            }
            // Its journal looks like a dead run's to the runs that go on meanwhile.
            self.crashed = true;
            self.stats().expect("hostile").pauses += 1;
            let start = self.now();
            let past_lease = self.rng.random_bool(0.85);
            for _ in 0..self.rng.random_range(1..6) {
                match self.rng.random_range(0..10) {
                    0..=3 => self.operate().await,
                    4 => self.writer(true).await,
                    5 => self.writer(false).await,
                    6 | 7 => self.gc(true).await,
                    _ => {
                        let delta = self.rng.random_range(1..41) * MINUTE;
                        self.advance(delta).await;
                    }
                }
                self.settle_pending(false).await;
                self.keep_period().await;
                self.check_invariants();
            }
            let elapsed = self.now() - start;
            if past_lease && elapsed <= LEASE {
                self.advance(LEASE + MINUTE - elapsed).await;
            }
            if std::env::var_os("PARQDB_GC_SIM_TRACE").is_some() {
                eprintln!("resumed at {}", self.now());
            }
            resume_tx.send(()).ok();
        }
        let result = tokio::task::spawn_blocking(move || run.join())
            .await
            .expect("join")
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        match result {
            Ok(report) => {
                if report.status == GcStatus::Completed {
                    self.gc_runs += 1;
                    if paused {
                        self.stats().expect("hostile").paused_completed += 1;
                    }
                }
            }
            Err(err) => {
                assert!(
                    paused && err.kind() == ErrorKind::CommitConflict,
                    "a paused run (at {at:?}) failed otherwise than by losing its lease: {err}"
                );
                self.stats().expect("hostile").paused_lease_lost += 1;
                self.crashed = true;
            }
        }
        self.check_deletions();
        self.mark();
    }

    /// One step of the hostile generator (the enabled classes, at random).
    async fn hostile_step(&mut self) {
        let hostile = self.hostile.as_ref().expect("hostile");
        let mut choices = Vec::new();
        for (enabled, choice) in [
            (hostile.foreign, 0),
            (hostile.nested, 1),
            (hostile.links, 2),
            (hostile.strays, 3),
            (hostile.misplaced, 4),
            (hostile.pauses, 5),
        ] {
            if enabled {
                choices.push(choice);
            }
        }
        if choices.is_empty() {
            self.ordinary().await;
            return;
        }
        match choices[self.rng.random_range(0..choices.len())] {
            0 => self.foreign_attempt().await,
            1 => self.nest().await,
            2 => self.link(),
            3 => self.stray().await,
            4 => self.misplaced().await,
            _ => self.paused_gc().await,
        }
    }

    // ----- the history -----

    /// The names of every file under the managed prefixes (local: links not followed).
    async fn managed_objects(&self) -> Vec<String> {
        match &self.env.local_dir {
            Some(dir) => {
                let mut out = Vec::new();
                walk_files(dir, &dir.join("metadata"), &mut out);
                walk_files(dir, &dir.join("indexes"), &mut out);
                out.sort();
                out
            }
            None => self.env.managed_objects().await,
        }
    }

    async fn run(mut self, steps: usize) -> Outcome {
        gc::claim(&self.env.catalog, self.now())
            .await
            .expect("claimed");
        self.env.put("sources/sentinel.parquet", b"not ours").await;
        self.env.put("outside/keep.bin", b"not ours").await;
        self.setup_hostile().await;
        for _ in 0..steps {
            self.step().await;
        }
        // Quiesce: stop writing, keep collecting; everything unreachable goes.
        self.settle_pending(true).await;
        // The operator adopts a restore, and releases what unwithdrawn entries keep (every
        // run warns of them).
        if self.unadopted || !self.unwithdrawn.is_empty() {
            self.env.advance(ADOPTION_SETTLE + 1);
            self.adopt().await;
        }
        let end = self.now() + RETENTION + DELAY + 4 * PERIOD + LEASE;
        // Budgeted histories quiesce with whole runs: what budgeted runs left behind must
        // converge too (budgeted liveness is gc_scenarios' and gc_state_machine's).
        self.config.budget = None;
        while self.now() < end {
            self.env.advance(PERIOD / 2);
            self.gc(false).await;
            self.check_invariants();
        }
        assert!(self.env.exists("sources/sentinel.parquet").await);
        assert!(self.env.exists("outside/keep.bin").await);
        let reachable = self.reachable();
        let protected = self.protected();
        let managed = self.managed_objects().await;
        // A link to the root or a whole prefix that a reader of a live table reaches keeps
        // everything there.
        let wide: Vec<String> = self
            .wide_links_reached(&self.live_dirs())
            .into_iter()
            .filter_map(|link| link.wide)
            .collect();
        let leftover: Vec<&String> = managed
            .iter()
            .filter(|p| !reachable.contains(*p) && !protected.contains(*p) && !self.nested(p))
            .filter(|p| !wide.iter().any(|w| w.is_empty() || within(p, w)))
            .filter(|p| self.objects.get(*p).is_none_or(|o| o.never.is_none()))
            .collect();
        assert!(
            leftover.is_empty(),
            "garbage left after quiescence: {leftover:?}"
        );
        for path in &reachable {
            assert!(
                self.env.exists(path).await,
                "reachable {path} missing at the end"
            );
        }
        if self.hostile.is_some() {
            self.check_end().await;
        }
        Outcome {
            runs: self.gc_runs,
            deleted: self.deleted_total,
            stats: self
                .hostile
                .as_ref()
                .map(|h| h.stats.clone())
                .unwrap_or_default(),
        }
    }

    /// What must stay is there; the catalog's pointers are the model's, canonical.
    async fn check_end(&self) {
        let hostile = self.hostile.as_ref().expect("hostile");
        for (path, obj) in &self.objects {
            if obj.never.is_some() {
                assert!(self.env.exists(path).await, "{path} was deleted");
            }
        }
        for name in &hostile.keep {
            assert!(self.env.exists(name).await, "{name} was deleted");
        }
        for key in &hostile.keep_keys {
            self.env
                .warehouse
                .object_store()
                .head(&StorePath::parse(key).expect("key"))
                .await
                .unwrap_or_else(|err| panic!("{key} outside the warehouse: {err}"));
        }
        self.check_outside();
        for foreign in &hostile.foreigns {
            let records = foreign
                .store
                .list(&StoreKey::new("i").expect("key"), None, 10)
                .await
                .expect("listing a foreign store");
            assert!(
                records.entries.is_empty(),
                "a foreign catalog holds records"
            );
        }
        for (name, live) in &self.live {
            let pointer = self
                .env
                .catalog
                .load(&self.id(name).await)
                .await
                .unwrap_or_else(|err| panic!("{name} is live in the model: {err}"));
            let relative = self.env.relative(&live.location);
            assert_eq!(
                pointer.metadata_location,
                self.env.warehouse.absolute(&relative),
                "{name}"
            );
        }
    }
}

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Run `histories` histories from `first_seed`, four at a time.
async fn histories(
    histories: u64,
    first_seed: u64,
    steps: usize,
    hostile: bool,
    backend: fn(u64, u64) -> Backend,
) -> Vec<Outcome> {
    use futures::StreamExt;

    let verbose = std::env::var_os("PARQDB_GC_SIM_VERBOSE").is_some();
    futures::stream::iter(0..histories)
        .map(|n| {
            let seed = first_seed + n;
            let backend = backend(n, seed);
            tokio::spawn(async move {
                let started = std::time::Instant::now();
                if verbose {
                    eprintln!("seed {seed} on {backend:?}: started");
                }
                let outcome = Sim::new(backend, seed, hostile).run(steps).await;
                if verbose {
                    eprintln!(
                        "seed {seed} on {backend:?}: {} gc runs, {} collected in {:?}{}",
                        outcome.runs,
                        outcome.deleted,
                        started.elapsed(),
                        if hostile {
                            format!(": {:?}", outcome.stats)
                        } else {
                            String::new()
                        }
                    );
                }
                outcome
            })
        })
        .buffer_unordered(4)
        .map(|joined| match joined {
            Ok(result) => result,
            Err(err) => std::panic::resume_unwind(err.into_panic()),
        })
        .collect()
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_histories_never_delete_live_objects_and_collect_garbage() {
    let count = knob("PARQDB_GC_SIM_HISTORIES", 200, 20);
    let first_seed = env_number("PARQDB_GC_SIM_SEED", 1);
    let steps = env_number("PARQDB_GC_SIM_STEPS", 120) as usize;
    let results = histories(count, first_seed, steps, false, |n, _| {
        if n % 10 == 9 {
            Backend::Local
        } else {
            Backend::Memory
        }
    })
    .await;
    let runs: u64 = results.iter().map(|o| o.runs).sum();
    let deleted: u64 = results.iter().map(|o| o.deleted).sum();
    println!("{count} histories: {runs} gc runs, {deleted} objects collected");
    assert!(deleted > 0, "the simulation never collected anything");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_layouts_never_delete_live_foreign_or_outside_data() {
    let count = knob("PARQDB_GC_SIM_HOSTILE_HISTORIES", 200, 20);
    let first_seed = env_number("PARQDB_GC_SIM_HOSTILE_SEED", 1);
    let steps = env_number("PARQDB_GC_SIM_HOSTILE_STEPS", 30) as usize;
    let started = std::time::Instant::now();
    let results = histories(count, first_seed, steps, true, |_, seed| {
        if seed % 3 == 0 {
            Backend::Local
        } else {
            Backend::Memory
        }
    })
    .await;
    let runs: u64 = results.iter().map(|o| o.runs).sum();
    let deleted: u64 = results.iter().map(|o| o.deleted).sum();
    let mut stats = Stats::default();
    for outcome in &results {
        stats.add(&outcome.stats);
    }
    println!(
        "{count} hostile histories (seeds {first_seed}..{}): {runs} gc runs, {deleted} objects collected in {:?}; {stats:?}",
        first_seed + count,
        started.elapsed()
    );
    assert!(deleted > 0, "the simulation never collected anything");
    if count >= 50 && steps >= 30 {
        // The generator really produced every class.
        for (what, n) in [
            ("odd table locations", stats.encoded_tables),
            ("odd metadata names", stats.encoded_metadata),
            ("odd URI spellings", stats.spelled_locations),
            ("refused foreign writes", stats.foreign_refused),
            ("nested structures", stats.nested_roots),
            ("links", stats.links),
            (
                "links to a whole prefix a reader of a live table reaches",
                stats.wide_kept,
            ),
            ("strays", stats.strays),
            ("unknown-format files", stats.unknown_format),
            ("refused misplaced metadata", stats.misplaced_refused),
            ("paused runs", stats.pauses),
            ("paused runs that lost their lease", stats.paused_lease_lost),
        ] {
            assert!(n > 0, "the generator made no {what}");
        }
    }
}
