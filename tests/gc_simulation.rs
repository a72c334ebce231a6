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
//!   incarnation moved its clock, or while an existing metadata file references it).
//!
//! `PARQDB_GC_SIM_HISTORIES` sets the number of histories (default 200: nine in ten on the
//! memory backends, one in ten on local files, four at a time); `PARQDB_GC_SIM_SEED` the
//! first seed; `PARQDB_GC_SIM_STEPS` the steps per history (default 120);
//! `PARQDB_GC_SIM_VERBOSE` prints each history's seed and counts, `PARQDB_GC_SIM_TRACE=<text>`
//! every run's counts and the actions on paths containing `<text>` (use with one seed).
//!
//! ```text
//! PARQDB_GC_SIM_HISTORIES=10000 cargo test --release --test gc_simulation -- --nocapture
//! ```
mod gc_support;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use gc_support::{Backend, Env, HOUR, Layout, MINUTE, contents, source};
use parqdb_catalog::IndexIdentifier;
use parqdb_catalog::catalog::{Catalog, IndexCatalog};
use parqdb_catalog::family::FamilyRegistry;
use parqdb_catalog::gc::{self, GarbageCollector, GcConfig, GcPhase, GcProgress, GcStatus};
use parqdb_catalog::metadata::IndexMetadata;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use uuid::Uuid;

const RETENTION: i64 = 2 * HOUR;
const GRACE: i64 = 10 * MINUTE;
const DELAY: i64 = 10 * MINUTE;
const SKEW: i64 = MINUTE;
const LEASE: i64 = 5 * MINUTE;
/// The longest gap between successful GC runs.
const PERIOD: i64 = 30 * MINUTE;

fn config(rng: &mut StdRng) -> GcConfig {
    GcConfig {
        retention: Duration::from_millis(RETENTION as u64),
        grace: Duration::from_millis(GRACE as u64),
        condemn_delay: Some(Duration::from_millis(DELAY as u64)),
        max_clock_skew: Duration::from_millis(SKEW as u64),
        lease_duration: Duration::from_millis(LEASE as u64),
        io_concurrency: rng.random_range(1..6),
        delete_batch_size: rng.random_range(1..5),
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

struct Sim {
    env: Env,
    rng: StdRng,
    config: GcConfig,
    live: BTreeMap<String, Live>,
    tombstoned: BTreeSet<String>,
    metadata: BTreeMap<String, IndexMetadata>,
    objects: BTreeMap<String, Obj>,
    centroids: Vec<String>,
    pending: Vec<Pending>,
    /// Index uuid -> the latest time an incarnation with it was created.
    incarnated: HashMap<Uuid, i64>,
    /// The latest register or rename over a tombstone.
    reincarnated: i64,
    /// Object -> when the last existing metadata file referencing it was deleted.
    unprotected_since: HashMap<String, i64>,
    counter: u64,
    /// A GC run died; the next finished run restarts every tracked clock.
    crashed: bool,
    /// When a finished run last restarted every tracked clock.
    restarted: i64,
    deletions_seen: usize,
    last_gc: i64,
    gc_runs: u64,
    deleted_total: u64,
}

impl Sim {
    fn new(backend: Backend, seed: u64) -> Sim {
        let mut rng = StdRng::seed_from_u64(seed);
        let config = config(&mut rng);
        let env = Env::new(backend, seed);
        let now = env.now();
        Sim {
            env,
            rng,
            config,
            live: BTreeMap::new(),
            tombstoned: BTreeSet::new(),
            metadata: BTreeMap::new(),
            objects: BTreeMap::new(),
            centroids: Vec::new(),
            pending: Vec::new(),
            incarnated: HashMap::new(),
            reincarnated: i64::MIN,
            unprotected_since: HashMap::new(),
            counter: 0,
            crashed: false,
            restarted: i64::MIN,
            deletions_seen: 0,
            last_gc: now,
            gc_runs: 0,
            deleted_total: 0,
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

    // ----- the oracle -----

    /// Everything `metadata` references (transitively through centroid metadata).
    fn refs_of(&self, metadata: &IndexMetadata, out: &mut BTreeSet<String>) {
        for snapshot in metadata.snapshots() {
            for table in snapshot.index_tables().values() {
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
            if let Some(centroids) = snapshot.parameters().get("ivf_centroids_metadata_location")
                && out.insert(centroids.clone())
                && let Some(inner) = self.metadata.get(centroids)
            {
                self.refs_of(inner, out);
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
                    .expect("inside the warehouse")
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
            let obj = self
                .objects
                .get(&path)
                .unwrap_or_else(|| panic!("deleted unknown {path}"))
                .clone();
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
            if let Some(metadata) = self.metadata.get(&path).cloned() {
                let mut refs = BTreeSet::new();
                self.refs_of(&metadata, &mut refs);
                for reference in refs {
                    self.unprotected_since.insert(reference, deletion.at_ms);
                }
            }
        }
        self.deletions_seen = deletions.len();
    }

    /// Existing metadata never names a deleted object; old garbage is gone.
    fn check_invariants(&self) {
        let mut protected = BTreeSet::new();
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
                        "existing metadata {path} names deleted {reference}"
                    );
                }
            }
            protected.extend(refs);
        }
        let reachable = self.reachable();
        let now = self.now();
        for (path, obj) in &self.objects {
            if obj.deleted.is_some()
                || obj.in_flight
                || reachable.contains(path)
                || protected.contains(path)
            {
                continue;
            }
            let lost = obj
                .last_reachable
                .unwrap_or(obj.created)
                .max(obj.created + GRACE + SKEW);
            let mut base = lost
                .max(
                    self.unprotected_since
                        .get(path)
                        .copied()
                        .unwrap_or(i64::MIN),
                )
                .max(self.restarted);
            if let Some(metadata) = self.metadata.get(path) {
                // A new incarnation moves the clock to its latest change seen by the next
                // run (at most a period later).
                let incarnated = self
                    .incarnated
                    .get(&metadata.index_uuid())
                    .copied()
                    .unwrap_or(i64::MIN);
                base = base
                    .max(incarnated.saturating_add(PERIOD))
                    .max(self.reincarnated.saturating_add(PERIOD));
            }
            let deadline = base + RETENTION + DELAY + 3 * PERIOD + LEASE + 2 * MINUTE;
            assert!(
                now <= deadline,
                "garbage {path} (unreachable since {lost}, base {base}) still here at {now}"
            );
        }
    }

    // ----- writing files -----

    async fn write_table_dir(&mut self, dir: &str) -> Vec<String> {
        if self.objects.keys().any(|p| p.starts_with(dir)) {
            return Vec::new(); // shared, already written
        }
        let now = self.now();
        let mut files = Vec::new();
        for part in 0..self.rng.random_range(1..3) {
            let path = format!("{dir}part-{part}.parquet");
            self.env.put(&path, b"0123456789").await;
            self.objects.insert(
                path.clone(),
                Obj {
                    created: now,
                    last_reachable: None,
                    deleted: None,
                    in_flight: false,
                },
            );
            files.push(path);
        }
        files
    }

    async fn write_metadata(&mut self, metadata: &IndexMetadata) -> (String, String) {
        let location = self.env.write_metadata(metadata).await;
        let relative = self.env.relative(&location);
        self.objects.insert(
            relative.clone(),
            Obj {
                created: self.now(),
                last_reachable: None,
                deleted: None,
                in_flight: false,
            },
        );
        self.metadata.insert(relative.clone(), metadata.clone());
        (location, relative)
    }

    /// A layout for a new snapshot, sometimes sharing centroids.
    async fn layout(&mut self) -> Layout {
        let tag = self.next();
        let mut layout = Layout::under(&format!("t{tag}"));
        if self.rng.random_bool(0.3) {
            let existing: Vec<String> = self
                .centroids
                .iter()
                .filter(|c| self.objects[*c].deleted.is_none())
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
                let (_, relative) = self.write_metadata(&metadata).await;
                self.centroids.push(relative.clone());
                relative
            };
            let table =
                self.metadata[&centroids].current_snapshot().index_tables()["ivf_centroids"]
                    .properties()["location"]
                    .clone();
            layout.centroids = table;
            layout.centroids_metadata = Some(centroids);
        }
        layout
    }

    async fn write_index(
        &mut self,
        base: Option<&IndexMetadata>,
    ) -> (IndexMetadata, String, Vec<String>) {
        let layout = self.layout().await;
        let mut files = self.write_table_dir(&layout.centroids).await;
        files.extend(self.write_table_dir(&layout.postings).await);
        let registry = FamilyRegistry::builtin();
        let metadata = match base {
            None => IndexMetadata::create(
                contents(&layout),
                BTreeMap::new(),
                self.env.clock.as_ref(),
                self.env.catalog.ids().as_ref(),
                &registry,
            )
            .expect("metadata"),
            Some(base) => {
                let next = base
                    .successor(
                        contents(&layout),
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
        };
        let (location, relative) = self.write_metadata(&metadata).await;
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

    fn incarnate(&mut self, name: &str, uuid: Uuid) {
        let now = self.now();
        self.incarnated.insert(uuid, now);
        if self.tombstoned.contains(name) {
            self.reincarnated = now;
        }
    }

    fn apply(&mut self, op: &Op) {
        if std::env::var_os("PARQDB_GC_SIM_TRACE").is_some() {
            eprintln!("op at {}: {op:?}", self.now());
        }
        match op {
            Op::Register { name, location } => {
                let metadata = self.metadata[&self.env.relative(location)].clone();
                self.incarnate(name, metadata.index_uuid());
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
                self.incarnate(to, live.metadata.index_uuid());
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
        match self.rng.random_range(0..10) {
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
                    .filter(|p| self.objects[*p].deleted.is_none() && !self.objects[*p].in_flight)
                    .cloned()
                    .collect();
                if old.is_empty() {
                    return None;
                }
                let pick = old[self.rng.random_range(0..old.len())].clone();
                Some(Op::Register {
                    name: self.free_name(),
                    location: self.env.warehouse.absolute(&pick),
                })
            }
        }
    }

    async fn operate(&mut self) {
        self.mark();
        if let Some(op) = self.prepare().await {
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
        let dry = allow_chaos && self.rng.random_bool(0.1);
        let crash = allow_chaos && !dry && self.rng.random_bool(0.08);
        let inject = if allow_chaos && self.rng.random_bool(0.2) {
            self.prepare().await
        } else if allow_chaos && !dry && self.rng.random_bool(0.2) {
            self.doomed_metadata().await.map(|path| Op::Register {
                name: self.free_name(),
                location: self.env.warehouse.absolute(&path),
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
        if let (Some(op), Some(true)) = (inject, *outcome.lock().expect("lock")) {
            self.apply(&op);
        }
        match result {
            Ok(report) => {
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
                        report.kept_by_grace.objects,
                        report.kept_by_retention.objects,
                        report.kept_by_condemn_delay.objects,
                        report.kept_by_reference.objects,
                        report.kept_at_verification.objects,
                        report.deleted.objects,
                        actions
                    );
                }
                if report.status == GcStatus::Completed {
                    self.last_gc = self.now();
                    self.gc_runs += 1;
                    if self.crashed {
                        self.crashed = false;
                        self.restarted = self.now();
                    }
                }
            }
            Err(err) => {
                assert!(crash, "gc failed without an injected failure: {err}");
                self.crashed = true;
            }
        }
        self.check_deletions();
        self.mark();
    }

    async fn step(&mut self) {
        match self.rng.random_range(0..100) {
            0..=44 => self.operate().await,
            45..=52 => self.writer(true).await,
            53..=62 => self.writer(false).await,
            63..=79 => self.gc(true).await,
            _ => {
                let delta = if self.rng.random_bool(0.7) {
                    self.rng.random_range(1..6) * MINUTE
                } else {
                    self.rng.random_range(10..41) * MINUTE
                };
                // Advance in small steps, keeping the GC period.
                let mut left = delta;
                while left > 0 {
                    let step = left.min(5 * MINUTE);
                    self.env.advance(step);
                    left -= step;
                    self.keep_period().await;
                }
            }
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

    async fn run(mut self, steps: usize) -> (u64, u64) {
        gc::claim(&self.env.catalog, self.now())
            .await
            .expect("claimed");
        self.env.put("sources/sentinel.parquet", b"not ours").await;
        self.env.put("outside/keep.bin", b"not ours").await;
        for _ in 0..steps {
            self.step().await;
        }
        // Quiesce: stop writing, keep collecting; everything unreachable goes.
        self.settle_pending(true).await;
        let end = self.now() + RETENTION + DELAY + 4 * PERIOD + LEASE;
        while self.now() < end {
            self.env.advance(PERIOD / 2);
            self.gc(false).await;
            self.check_invariants();
        }
        assert!(self.env.exists("sources/sentinel.parquet").await);
        assert!(self.env.exists("outside/keep.bin").await);
        let reachable = self.reachable();
        let managed = self.env.managed_objects().await;
        let leftover: Vec<&String> = managed.iter().filter(|p| !reachable.contains(*p)).collect();
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
        (self.gc_runs, self.deleted_total)
    }
}

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_histories_never_delete_live_objects_and_collect_garbage() {
    use futures::StreamExt;

    let histories = env_number("PARQDB_GC_SIM_HISTORIES", 200);
    let first_seed = env_number("PARQDB_GC_SIM_SEED", 1);
    let steps = env_number("PARQDB_GC_SIM_STEPS", 120) as usize;
    let verbose = std::env::var_os("PARQDB_GC_SIM_VERBOSE").is_some();
    let results: Vec<(u64, u64)> = futures::stream::iter(0..histories)
        .map(|n| {
            let seed = first_seed + n;
            let backend = if n % 10 == 9 {
                Backend::Local
            } else {
                Backend::Memory
            };
            tokio::spawn(async move {
                let started = std::time::Instant::now();
                if verbose {
                    eprintln!("seed {seed} on {backend:?}: started");
                }
                let (runs, deleted) = Sim::new(backend, seed).run(steps).await;
                if verbose {
                    eprintln!(
                        "seed {seed} on {backend:?}: {runs} gc runs, {deleted} collected in {:?}",
                        started.elapsed()
                    );
                }
                (runs, deleted)
            })
        })
        .buffer_unordered(4)
        .map(|joined| match joined {
            Ok(result) => result,
            Err(err) => std::panic::resume_unwind(err.into_panic()),
        })
        .collect()
        .await;
    let runs: u64 = results.iter().map(|(r, _)| r).sum();
    let deleted: u64 = results.iter().map(|(_, d)| d).sum();
    println!("{histories} histories: {runs} gc runs, {deleted} objects collected");
    assert!(deleted > 0, "the simulation never collected anything");
}
