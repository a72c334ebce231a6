//! Linearizability of catalog histories.
//!
//! * [`run_workload`]: K concurrent clients issue random `load`, `register`, `commit`,
//!   `drop`, `rename` and `list` operations over a small universe of identifiers (3 names
//!   in 2 namespaces, so conflicts are frequent), each recorded with its invocation and
//!   completion on a global logical clock, its arguments and its result. Metadata files
//!   are real: a shared [`Pool`] writes them with the fixture helpers, and a commit always
//!   proposes "the successor of what I loaded" (one pre-written successor per base and
//!   client), so every committed file is a valid successor of its base.
//! * [`check`]: searches for a linearization of the history against a sequential model
//!   of the catalog (the state is the map identifier → absent | present(location); the
//!   location determines the source binding). The search is Wing & Gong's, with Lowe's
//!   memoisation of (linearized set, state) and P-compositionality: operations are split
//!   into independent partitions by the identifiers they touch (rename links two).
//!   An operation whose outcome is unknown (`COMMIT_STATE_UNKNOWN`) may take effect at any
//!   point after its invocation, or never. `list` is not transactional (catalog spec): a
//!   listing becomes one observation per identifier of its namespace — present if listed,
//!   absent if not — each free to take effect at its own point of the listing's interval.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use parqdb_catalog::catalog::{Catalog, IndexCatalog, RetryPolicy};
use parqdb_catalog::metadata::{IndexMetadata, TableDefinition};
use parqdb_catalog::store::PointerStore;
use parqdb_catalog::warehouse::Warehouse;
use parqdb_catalog::{ErrorKind, IndexIdentifier, Namespace, SystemClock};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::fixture::TestEnv;

/// A metadata location, interned.
pub type Loc = u32;

/// splitmix64.
pub fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// An environment variable as a number, or the default.
pub fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// `PARQDB_LIN_SEEDS=1,2,3` or the defaults.
pub fn env_seeds(default: &[u64]) -> Vec<u64> {
    match std::env::var("PARQDB_LIN_SEEDS") {
        Ok(text) if !text.trim().is_empty() => text
            .split(',')
            .map(|s| {
                s.trim()
                    .parse()
                    .expect("PARQDB_LIN_SEEDS: comma-separated integers")
            })
            .collect(),
        _ => default.to_vec(),
    }
}

/// A quick retry policy for tests (same attempts as the default, shorter waits).
pub fn quick_retry() -> RetryPolicy {
    RetryPolicy {
        max_attempts: 6,
        base_delay: Duration::from_millis(1),
        max_delay: Duration::from_millis(50),
    }
}

/// A catalog over `store` and `warehouse` with the quick retry policy.
pub fn catalog_over(store: Arc<dyn PointerStore>, warehouse: &Warehouse, probe: bool) -> Catalog {
    Catalog::builder(store, warehouse.clone())
        .retry(quick_retry())
        .probe_on_first_write(probe)
        .build()
}

// ---------------------------------------------------------------------------------------
// The universe and the metadata pool
// ---------------------------------------------------------------------------------------

/// The identifiers a workload touches.
#[derive(Debug, Clone)]
pub struct Universe {
    /// The namespaces.
    pub namespaces: Vec<Namespace>,
    /// The identifiers.
    pub ids: Vec<IndexIdentifier>,
    /// The namespace (index into `namespaces`) of each identifier.
    pub namespace_of: Vec<usize>,
}

impl Universe {
    /// `names` names in each of `namespaces` fresh namespaces (not yet created).
    pub fn new(tag: &str, namespaces: usize, names: usize) -> Universe {
        let unique = uuid::Uuid::new_v4().simple().to_string();
        let namespaces: Vec<Namespace> = (0..namespaces)
            .map(|n| Namespace::new([format!("lin-{tag}-{}-{n}", &unique[..8])]).expect("valid"))
            .collect();
        let mut ids = Vec::new();
        let mut namespace_of = Vec::new();
        for (n, namespace) in namespaces.iter().enumerate() {
            for name in 0..names {
                ids.push(
                    IndexIdentifier::new(namespace.clone(), format!("ix{name}")).expect("valid"),
                );
                namespace_of.push(n);
            }
        }
        Universe {
            namespaces,
            ids,
            namespace_of,
        }
    }

    /// The identifiers of namespace `ns`.
    pub fn ids_in(&self, ns: usize) -> impl Iterator<Item = usize> + '_ {
        (0..self.ids.len()).filter(move |&id| self.namespace_of[id] == ns)
    }

    /// Create the namespaces.
    pub async fn create(&self, catalog: &dyn IndexCatalog) {
        for namespace in &self.namespaces {
            catalog
                .create_namespace(namespace, Default::default())
                .await
                .expect("namespace created");
        }
    }
}

struct PoolInner {
    locations: Vec<String>,
    by_location: HashMap<String, Loc>,
    metadata: Vec<Arc<IndexMetadata>>,
    successors: HashMap<(Loc, usize), Loc>,
    initial: Vec<Loc>,
}

/// Real metadata files: a few initial indexes and, lazily, one successor per base
/// location and client.
pub struct Pool {
    env: TestEnv,
    inner: Mutex<PoolInner>,
}

impl Pool {
    /// A pool with `indexes` initial metadata files written to the warehouse.
    pub async fn new(env: &TestEnv, indexes: usize) -> Pool {
        let pool = Pool {
            env: env.clone(),
            inner: Mutex::new(PoolInner {
                locations: Vec::new(),
                by_location: HashMap::new(),
                metadata: Vec::new(),
                successors: HashMap::new(),
                initial: Vec::new(),
            }),
        };
        for _ in 0..indexes {
            let (metadata, location) = env.new_index().await;
            let loc = pool.intern(location, metadata);
            pool.lock().initial.push(loc);
        }
        pool
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, PoolInner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn intern(&self, location: String, metadata: IndexMetadata) -> Loc {
        let mut inner = self.lock();
        let loc = inner.locations.len() as Loc;
        inner.by_location.insert(location.clone(), loc);
        inner.locations.push(location);
        inner.metadata.push(Arc::new(metadata));
        loc
    }

    /// The location text.
    pub fn location(&self, loc: Loc) -> String {
        self.lock().locations[loc as usize].clone()
    }

    /// The interned location of a text, if the pool wrote it.
    pub fn loc_of(&self, location: &str) -> Option<Loc> {
        self.lock().by_location.get(location).copied()
    }

    /// The metadata written at `loc`.
    pub fn metadata(&self, loc: Loc) -> Arc<IndexMetadata> {
        self.lock().metadata[loc as usize].clone()
    }

    /// The source binding of `loc` (its current snapshot's source table).
    pub fn source(&self, loc: Loc) -> TableDefinition {
        self.metadata(loc).current_snapshot().source_table().clone()
    }

    /// The initial metadata files.
    pub fn initial(&self) -> Vec<Loc> {
        self.lock().initial.clone()
    }

    /// Every location written.
    pub fn all(&self) -> Vec<String> {
        self.lock().locations.clone()
    }

    /// Client `client`'s successor of `base`, written on first use.
    pub async fn successor(&self, base: Loc, client: usize) -> Loc {
        if let Some(&loc) = self.lock().successors.get(&(base, client)) {
            return loc;
        }
        let base_metadata = self.metadata(base);
        let trimmed = base_metadata
            .expire_snapshots(Some(3), None, &SystemClock)
            .expect("expire");
        let version = (base_metadata.last_sequence_number() as u32 + 1) * 1000 + client as u32;
        let (metadata, location) = self.env.successor(&trimmed, version).await;
        let loc = self.intern(location, metadata);
        self.lock().successors.insert((base, client), loc);
        loc
    }
}

// ---------------------------------------------------------------------------------------
// Histories
// ---------------------------------------------------------------------------------------

/// An operation's arguments (identifiers and namespaces as indexes into the universe).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Call {
    /// `load(id)`.
    Load { id: usize },
    /// `register(id, source-of(loc), loc)`.
    Register { id: usize, loc: Loc },
    /// `commit(id, source-of(new), base, new)`.
    Commit { id: usize, base: Loc, new: Loc },
    /// `drop(id)`.
    Drop { id: usize },
    /// `rename(from, to)`.
    Rename { from: usize, to: usize },
    /// `list(ns)`, every page (`page_size` per page).
    List { ns: usize, page_size: Option<usize> },
}

/// An operation's result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ret {
    /// `load` answered this location.
    Loaded(Loc),
    /// `register` succeeded.
    Registered,
    /// `commit` succeeded.
    Committed { already_applied: bool },
    /// `drop` succeeded.
    Dropped,
    /// `rename` succeeded; the pointer it answered has this location.
    Renamed(Loc),
    /// `list` answered these identifiers (all pages).
    Listed(BTreeSet<usize>),
    /// A definite error.
    Failed(ErrorKind),
    /// `COMMIT_STATE_UNKNOWN`: may or may not have taken effect.
    Unknown,
    /// An answer the model cannot explain at all (a location the pool never wrote, an
    /// identifier outside the universe, a source that does not match the location).
    Bogus(String),
}

/// One recorded operation.
#[derive(Debug, Clone)]
pub struct Op {
    /// The client that issued it.
    pub client: usize,
    /// The arguments.
    pub call: Call,
    /// The result.
    pub ret: Ret,
    /// Logical time of the invocation.
    pub invoke: u64,
    /// Logical time of the completion.
    pub complete: u64,
}

/// A recorded history.
#[derive(Debug, Clone)]
pub struct History {
    /// The identifiers.
    pub universe: Universe,
    /// The operations, in no particular order.
    pub ops: Vec<Op>,
}

impl History {
    /// Operations whose outcome was unknown.
    pub fn unknown(&self) -> usize {
        self.ops.iter().filter(|op| op.ret == Ret::Unknown).count()
    }

    /// Count of each result class, for the report.
    pub fn summary(&self) -> String {
        let mut counts: std::collections::BTreeMap<String, usize> = Default::default();
        for op in &self.ops {
            let call = match op.call {
                Call::Load { .. } => "load",
                Call::Register { .. } => "register",
                Call::Commit { .. } => "commit",
                Call::Drop { .. } => "drop",
                Call::Rename { .. } => "rename",
                Call::List { .. } => "list",
            };
            let ret = match &op.ret {
                Ret::Failed(kind) => kind.code().to_owned(),
                Ret::Unknown => "UNKNOWN".to_owned(),
                Ret::Bogus(_) => "BOGUS".to_owned(),
                Ret::Committed {
                    already_applied: true,
                } => "ok(already-applied)".to_owned(),
                _ => "ok".to_owned(),
            };
            *counts.entry(format!("{call}:{ret}")).or_default() += 1;
        }
        counts
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// Records operations on a global logical clock.
#[derive(Debug, Default)]
pub struct Recorder {
    clock: AtomicU64,
    ops: Mutex<Vec<Op>>,
}

impl Recorder {
    /// The next tick.
    pub fn tick(&self) -> u64 {
        self.clock.fetch_add(1, Ordering::SeqCst)
    }

    /// Keep an operation.
    pub fn push(&self, op: Op) {
        self.ops.lock().unwrap_or_else(|p| p.into_inner()).push(op);
    }

    /// Everything recorded.
    pub fn ops(&self) -> Vec<Op> {
        self.ops.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

fn failed(err: &parqdb_catalog::Error) -> Ret {
    match err.kind() {
        ErrorKind::CommitStateUnknown => Ret::Unknown,
        kind => Ret::Failed(kind),
    }
}

/// Run `call` against `catalog`, recording it.
pub async fn perform(
    catalog: &dyn IndexCatalog,
    universe: &Universe,
    pool: &Pool,
    recorder: &Recorder,
    client: usize,
    call: Call,
) -> Ret {
    let id_of = |identifier: &IndexIdentifier| universe.ids.iter().position(|i| i == identifier);
    let located = |location: &str, source: &TableDefinition, ok: fn(Loc) -> Ret| match pool
        .loc_of(location)
    {
        None => Ret::Bogus(format!("unknown location {location}")),
        Some(loc) if pool.source(loc) != *source => {
            Ret::Bogus(format!("the source binding does not match {location}"))
        }
        Some(loc) => ok(loc),
    };
    let invoke = recorder.tick();
    let ret = match &call {
        Call::Load { id } => match catalog.load(&universe.ids[*id]).await {
            Ok(pointer) => located(&pointer.metadata_location, &pointer.source, Ret::Loaded),
            Err(err) => failed(&err),
        },
        Call::Register { id, loc } => {
            let result = catalog
                .register(
                    &universe.ids[*id],
                    Some(&pool.source(*loc)),
                    &pool.location(*loc),
                )
                .await;
            match result {
                Ok(pointer) if pointer.metadata_location == pool.location(*loc) => Ret::Registered,
                Ok(pointer) => {
                    Ret::Bogus(format!("register answered {}", pointer.metadata_location))
                }
                Err(err) => failed(&err),
            }
        }
        Call::Commit { id, base, new } => {
            let result = catalog
                .commit(
                    &universe.ids[*id],
                    Some(&pool.source(*new)),
                    &pool.location(*base),
                    &pool.location(*new),
                )
                .await;
            match result {
                Ok(done) if done.pointer.metadata_location == pool.location(*new) => {
                    Ret::Committed {
                        already_applied: done.already_applied,
                    }
                }
                Ok(done) => Ret::Bogus(format!(
                    "commit answered {}",
                    done.pointer.metadata_location
                )),
                Err(err) => failed(&err),
            }
        }
        Call::Drop { id } => match catalog.drop_index(&universe.ids[*id]).await {
            Ok(()) => Ret::Dropped,
            Err(err) => failed(&err),
        },
        Call::Rename { from, to } => {
            match catalog
                .rename(&universe.ids[*from], &universe.ids[*to])
                .await
            {
                Ok(pointer) if pointer.identifier != universe.ids[*to] => Ret::Bogus(format!(
                    "rename answered the pointer of {}",
                    pointer.identifier
                )),
                Ok(pointer) => located(&pointer.metadata_location, &pointer.source, Ret::Renamed),
                Err(err) => failed(&err),
            }
        }
        Call::List { ns, page_size } => {
            let mut listed = BTreeSet::new();
            let mut token: Option<String> = None;
            let mut ret = None;
            for _ in 0..100 {
                match catalog
                    .list(&universe.namespaces[*ns], token.as_deref(), *page_size)
                    .await
                {
                    Ok(page) => {
                        for identifier in &page.identifiers {
                            match id_of(identifier) {
                                Some(id) if universe.namespace_of[id] == *ns => {
                                    if !listed.insert(id) {
                                        ret =
                                            Some(Ret::Bogus(format!("{identifier} listed twice")));
                                    }
                                }
                                _ => ret = Some(Ret::Bogus(format!("listed {identifier}"))),
                            }
                        }
                        token = page.next_page_token;
                        if token.is_none() {
                            break;
                        }
                    }
                    Err(err) => {
                        ret = Some(failed(&err));
                        break;
                    }
                }
            }
            ret.unwrap_or(Ret::Listed(listed))
        }
    };
    let complete = recorder.tick();
    recorder.push(Op {
        client,
        call,
        ret: ret.clone(),
        invoke,
        complete,
    });
    ret
}

/// What to run.
#[derive(Debug, Clone)]
pub struct Workload {
    /// Concurrent clients.
    pub clients: usize,
    /// Recorded operations per client (a load-then-commit counts two).
    pub ops_per_client: usize,
    /// The seed of every client's choices.
    pub seed: u64,
    /// Whether clients rename.
    pub renames: bool,
    /// Namespaces and names per namespace.
    pub shape: (usize, usize),
    /// Initial metadata files to register.
    pub indexes: usize,
}

impl Workload {
    /// The CI size, overridable with `PARQDB_LIN_CLIENTS` and `PARQDB_LIN_OPS`.
    pub fn sized(clients: usize, ops: usize, seed: u64) -> Workload {
        Workload {
            clients: env_usize("PARQDB_LIN_CLIENTS", clients),
            ops_per_client: env_usize("PARQDB_LIN_OPS", ops),
            seed,
            renames: std::env::var("PARQDB_LIN_RENAMES")
                .map(|v| v != "0")
                .unwrap_or(true),
            shape: (2, 3),
            indexes: 3,
        }
    }
}

/// Run `workload`: client `c` uses `catalogs[c % catalogs.len()]`; metadata files are
/// written through `env`. The universe's namespaces must exist already.
pub async fn run_workload(
    env: &TestEnv,
    catalogs: &[Arc<dyn IndexCatalog>],
    universe: &Universe,
    workload: &Workload,
) -> (History, Arc<Pool>) {
    let pool = Arc::new(Pool::new(env, workload.indexes).await);
    let recorder = Arc::new(Recorder::default());
    let mut tasks = Vec::new();
    for client in 0..workload.clients {
        let catalog = catalogs[client % catalogs.len()].clone();
        let pool = pool.clone();
        let recorder = recorder.clone();
        let universe = universe.clone();
        let workload = workload.clone();
        tasks.push(tokio::spawn(async move {
            let mut rng = StdRng::seed_from_u64(mix(workload.seed) ^ mix(client as u64 + 1));
            let n = universe.ids.len();
            let mut done = 0;
            while done < workload.ops_per_client {
                let id = rng.random_range(0..n);
                let roll = rng.random_range(0..100);
                let call = match roll {
                    0..20 => Call::Load { id },
                    20..35 => {
                        let initial = pool.initial();
                        let loc = if rng.random_bool(0.8) {
                            initial[rng.random_range(0..initial.len())]
                        } else {
                            let all = pool.all().len() as Loc;
                            rng.random_range(0..all)
                        };
                        Call::Register { id, loc }
                    }
                    35..65 => {
                        // Load, then commit the successor of what was loaded.
                        let ret = perform(
                            &*catalog,
                            &universe,
                            &pool,
                            &recorder,
                            client,
                            Call::Load { id },
                        )
                        .await;
                        done += 1;
                        let Ret::Loaded(base) = ret else { continue };
                        let new = pool.successor(base, client).await;
                        Call::Commit { id, base, new }
                    }
                    65..77 => Call::Drop { id },
                    77..90 if workload.renames => {
                        // Mostly within a namespace, sometimes across.
                        let to = if rng.random_bool(0.75) {
                            let same: Vec<usize> =
                                universe.ids_in(universe.namespace_of[id]).collect();
                            same[rng.random_range(0..same.len())]
                        } else {
                            rng.random_range(0..n)
                        };
                        Call::Rename { from: id, to }
                    }
                    77..90 => Call::Load { id },
                    _ => {
                        let page_size = if rng.random_bool(0.5) {
                            None
                        } else {
                            Some(rng.random_range(1..=2))
                        };
                        Call::List {
                            ns: rng.random_range(0..universe.namespaces.len()),
                            page_size,
                        }
                    }
                };
                perform(&*catalog, &universe, &pool, &recorder, client, call).await;
                done += 1;
            }
        }));
    }
    for task in tasks {
        task.await.expect("client task");
    }
    (
        History {
            universe: universe.clone(),
            ops: recorder.ops(),
        },
        pool,
    )
}

// ---------------------------------------------------------------------------------------
// The checker
// ---------------------------------------------------------------------------------------

/// What a successful check found.
#[derive(Debug, Clone, Default)]
pub struct CheckReport {
    /// Operations in the history.
    pub operations: usize,
    /// Model steps checked (a listing counts one per identifier of its namespace).
    pub steps: usize,
    /// Operations with an unknown outcome.
    pub unknown: usize,
    /// Operations without effect or information (dropped before the search).
    pub uninformative: usize,
    /// Independent partitions searched.
    pub partitions: usize,
    /// Search iterations.
    pub explored: u64,
}

impl fmt::Display for CheckReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} operations ({} model steps, {} unknown outcomes, {} uninformative) linearizable; {} partitions, {} search iterations",
            self.operations,
            self.steps,
            self.unknown,
            self.uninformative,
            self.partitions,
            self.explored
        )
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    Exact(Option<Loc>),
    Present,
}

#[derive(Debug, Clone, Copy)]
enum Step {
    Observe { id: usize, expect: Expect },
    RegisterOk { id: usize, loc: Loc },
    RegisterExists { id: usize },
    RegisterMaybe { id: usize, loc: Loc },
    CommitOk { id: usize, base: Loc, new: Loc },
    CommitAlready { id: usize, new: Loc },
    CommitConflict { id: usize, base: Loc, new: Loc },
    CommitMaybe { id: usize, base: Loc, new: Loc },
    DropOk { id: usize },
    DropMaybe { id: usize },
    RenameOk { from: usize, to: usize },
    RenameExists { from: usize, to: usize },
    RenameMaybe { from: usize, to: usize },
}

impl Step {
    /// A known-outcome step that never changes the state: if it is possible now, placing
    /// it now is as good as anywhere later, so the search places it without a choice point.
    fn read_only(&self) -> bool {
        matches!(
            self,
            Step::Observe { .. }
                | Step::RegisterExists { .. }
                | Step::CommitAlready { .. }
                | Step::CommitConflict { .. }
                | Step::RenameExists { .. }
        )
    }

    fn ids(&self) -> (usize, Option<usize>) {
        match *self {
            Step::Observe { id, .. }
            | Step::RegisterOk { id, .. }
            | Step::RegisterExists { id }
            | Step::RegisterMaybe { id, .. }
            | Step::CommitOk { id, .. }
            | Step::CommitAlready { id, .. }
            | Step::CommitConflict { id, .. }
            | Step::CommitMaybe { id, .. }
            | Step::DropOk { id }
            | Step::DropMaybe { id } => (id, None),
            Step::RenameOk { from, to }
            | Step::RenameExists { from, to }
            | Step::RenameMaybe { from, to } => (from, Some(to)),
        }
    }

    /// The states this step can lead to from `s` (0 = absent, `loc + 1` = present).
    fn next(&self, s: &[u32]) -> Vec<Vec<u32>> {
        let with = |changes: &[(usize, u32)]| {
            let mut t = s.to_vec();
            for &(id, v) in changes {
                t[id] = v;
            }
            t
        };
        let p = |loc: Loc| loc + 1;
        let mut out = Vec::new();
        match *self {
            Step::Observe { id, expect } => {
                let ok = match expect {
                    Expect::Exact(None) => s[id] == 0,
                    Expect::Exact(Some(loc)) => s[id] == p(loc),
                    Expect::Present => s[id] != 0,
                };
                if ok {
                    out.push(s.to_vec());
                }
            }
            Step::RegisterOk { id, loc } => {
                if s[id] == 0 {
                    out.push(with(&[(id, p(loc))]));
                }
            }
            Step::RegisterExists { id } => {
                if s[id] != 0 {
                    out.push(s.to_vec());
                }
            }
            Step::RegisterMaybe { id, loc } => {
                out.push(s.to_vec());
                if s[id] == 0 {
                    out.push(with(&[(id, p(loc))]));
                }
            }
            Step::CommitOk { id, base, new } => {
                if s[id] == p(base) {
                    out.push(with(&[(id, p(new))]));
                }
            }
            Step::CommitAlready { id, new } => {
                if s[id] == p(new) {
                    out.push(s.to_vec());
                }
            }
            Step::CommitConflict { id, base, .. } => {
                // The base is not current. (`new` may be: a request that is not a replay
                // of the commit that made it current is a conflict too.)
                if s[id] != 0 && s[id] != p(base) {
                    out.push(s.to_vec());
                }
            }
            Step::CommitMaybe { id, base, new } => {
                out.push(s.to_vec());
                if s[id] == p(base) {
                    out.push(with(&[(id, p(new))]));
                }
            }
            Step::DropOk { id } => {
                if s[id] != 0 {
                    out.push(with(&[(id, 0)]));
                }
            }
            Step::DropMaybe { id } => {
                out.push(s.to_vec());
                if s[id] != 0 {
                    out.push(with(&[(id, 0)]));
                }
            }
            Step::RenameOk { from, to } => {
                if from != to && s[from] != 0 && s[to] == 0 {
                    out.push(with(&[(from, 0), (to, s[from])]));
                }
            }
            Step::RenameExists { from, to } => {
                if s[from] != 0 && s[to] != 0 {
                    out.push(s.to_vec());
                }
            }
            Step::RenameMaybe { from, to } => {
                out.push(s.to_vec());
                if from != to && s[from] != 0 && s[to] == 0 {
                    out.push(with(&[(from, 0), (to, s[from])]));
                }
            }
        }
        out
    }
}

#[derive(Debug, Clone, Copy)]
struct CheckOp {
    invoke: u64,
    /// `None`: the outcome is unknown; the step may happen at any point after `invoke`.
    complete: Option<u64>,
    step: Step,
    origin: usize,
}

fn not_found(id: usize) -> Step {
    Step::Observe {
        id,
        expect: Expect::Exact(None),
    }
}

/// Translate recorded operations into model steps. `Err` for a result no model state
/// can explain (a bogus answer or an error kind the catalog must never return here).
fn steps(history: &History) -> Result<(Vec<CheckOp>, usize), String> {
    let mut out = Vec::new();
    let mut uninformative = 0;
    for (origin, op) in history.ops.iter().enumerate() {
        let at = |step: Step| CheckOp {
            invoke: op.invoke,
            complete: Some(op.complete),
            step,
            origin,
        };
        let maybe = |step: Step| CheckOp {
            invoke: op.invoke,
            complete: None,
            step,
            origin,
        };
        let unexpected = || Err(format!("unexpected result: {}", describe(history, op)));
        use ErrorKind as K;
        let mut steps: Vec<CheckOp> = Vec::new();
        match (&op.call, &op.ret) {
            (_, Ret::Bogus(_)) => return unexpected(),
            // No effect and no information: a failed read, or a write that certainly did
            // not apply (the store failed before it, or it gave up contending).
            (Call::Load { .. } | Call::List { .. }, Ret::Failed(K::StoreUnavailable)) => {}
            (Call::Load { .. } | Call::List { .. }, Ret::Unknown) => return unexpected(),
            // (Operations without a base never answer COMMIT_CONFLICT: giving up under
            // contention is CONCURRENT_MODIFICATION.)
            (
                Call::Register { .. } | Call::Drop { .. } | Call::Rename { .. },
                Ret::Failed(K::StoreUnavailable | K::ConcurrentModification),
            ) => {}
            (Call::Commit { .. }, Ret::Failed(K::StoreUnavailable | K::ConcurrentModification)) => {
            }

            (Call::Load { id }, Ret::Loaded(loc)) => steps.push(at(Step::Observe {
                id: *id,
                expect: Expect::Exact(Some(*loc)),
            })),
            (Call::Load { id }, Ret::Failed(K::IndexNotFound)) => steps.push(at(not_found(*id))),

            (Call::Register { id, loc }, Ret::Registered) => {
                steps.push(at(Step::RegisterOk { id: *id, loc: *loc }))
            }
            (Call::Register { id, .. }, Ret::Failed(K::AlreadyExists)) => {
                steps.push(at(Step::RegisterExists { id: *id }))
            }
            (Call::Register { id, loc }, Ret::Unknown) => {
                steps.push(maybe(Step::RegisterMaybe { id: *id, loc: *loc }))
            }

            (
                Call::Commit { id, base, new },
                Ret::Committed {
                    already_applied: false,
                },
            ) => steps.push(at(Step::CommitOk {
                id: *id,
                base: *base,
                new: *new,
            })),
            (
                Call::Commit { id, new, .. },
                Ret::Committed {
                    already_applied: true,
                },
            ) => steps.push(at(Step::CommitAlready { id: *id, new: *new })),
            (Call::Commit { id, base, new }, Ret::Failed(K::CommitConflict)) => {
                steps.push(at(Step::CommitConflict {
                    id: *id,
                    base: *base,
                    new: *new,
                }))
            }
            (Call::Commit { id, .. }, Ret::Failed(K::IndexNotFound)) => {
                steps.push(at(not_found(*id)))
            }
            (Call::Commit { id, base, new }, Ret::Unknown) => {
                steps.push(maybe(Step::CommitMaybe {
                    id: *id,
                    base: *base,
                    new: *new,
                }))
            }

            (Call::Drop { id }, Ret::Dropped) => steps.push(at(Step::DropOk { id: *id })),
            (Call::Drop { id }, Ret::Failed(K::IndexNotFound)) => steps.push(at(not_found(*id))),
            (Call::Drop { id }, Ret::Unknown) => steps.push(maybe(Step::DropMaybe { id: *id })),

            (Call::Rename { from, to }, Ret::Renamed(loc)) => {
                steps.push(at(Step::RenameOk {
                    from: *from,
                    to: *to,
                }));
                // The answered pointer is a load of `to` after the move.
                steps.push(at(Step::Observe {
                    id: *to,
                    expect: Expect::Exact(Some(*loc)),
                }));
            }
            (Call::Rename { from, .. }, Ret::Failed(K::IndexNotFound)) => {
                steps.push(at(not_found(*from)))
            }
            (Call::Rename { from, to }, Ret::Failed(K::AlreadyExists)) => {
                steps.push(at(Step::RenameExists {
                    from: *from,
                    to: *to,
                }))
            }
            (Call::Rename { from, to }, Ret::Unknown) => steps.push(maybe(Step::RenameMaybe {
                from: *from,
                to: *to,
            })),

            (Call::List { ns, .. }, Ret::Listed(listed)) => {
                for id in history.universe.ids_in(*ns) {
                    let expect = if listed.contains(&id) {
                        Expect::Present
                    } else {
                        Expect::Exact(None)
                    };
                    steps.push(at(Step::Observe { id, expect }));
                }
            }
            _ => return unexpected(),
        }
        if steps.is_empty() {
            uninformative += 1;
        }
        out.extend(steps);
    }
    Ok((out, uninformative))
}

/// A readable line for one operation.
pub fn describe(history: &History, op: &Op) -> String {
    let id = |i: usize| format!("#{i}{}", history.universe.ids[i]);
    let call = match &op.call {
        Call::Load { id: i } => format!("load({})", id(*i)),
        Call::Register { id: i, loc } => format!("register({}, L{loc})", id(*i)),
        Call::Commit { id: i, base, new } => format!("commit({}, L{base} -> L{new})", id(*i)),
        Call::Drop { id: i } => format!("drop({})", id(*i)),
        Call::Rename { from, to } => format!("rename({} -> {})", id(*from), id(*to)),
        Call::List { ns, page_size } => format!("list(ns{ns}, page-size {page_size:?})"),
    };
    format!(
        "client {} [{}, {}] {call} => {:?}",
        op.client, op.invoke, op.complete, op.ret
    )
}

/// Search budget per partition (iterations); an exhausted budget fails the check.
const BUDGET: u64 = 200_000_000;

/// Check `history` for linearizability. `Err` explains the failure: the operations at the
/// deepest point the search reached, none of which could be linearized next.
pub fn check(history: &History) -> Result<CheckReport, String> {
    let (ops, uninformative) = steps(history)?;
    let ids = history.universe.ids.len();
    // Partition by identifier: union the two identifiers of every rename.
    let mut parent: Vec<usize> = (0..ids).collect();
    fn find(parent: &mut [usize], x: usize) -> usize {
        let mut root = x;
        while parent[root] != root {
            root = parent[root];
        }
        let mut x = x;
        while parent[x] != root {
            let next = parent[x];
            parent[x] = root;
            x = next;
        }
        root
    }
    for op in &ops {
        if let (a, Some(b)) = op.step.ids() {
            let (ra, rb) = (find(&mut parent, a), find(&mut parent, b));
            parent[ra] = rb;
        }
    }
    let mut partitions: HashMap<usize, Vec<CheckOp>> = HashMap::new();
    for op in &ops {
        let root = find(&mut parent, op.step.ids().0);
        partitions.entry(root).or_default().push(*op);
    }
    let mut report = CheckReport {
        operations: history.ops.len(),
        steps: ops.len(),
        unknown: history.unknown(),
        uninformative,
        partitions: partitions.len(),
        explored: 0,
    };
    let mut roots: Vec<usize> = partitions.keys().copied().collect();
    roots.sort();
    for root in roots {
        match search(&partitions[&root], ids, history) {
            Ok(explored) => report.explored += explored,
            Err(failure) => return Err(localize(&partitions[&root], ids, history, failure)),
        }
    }
    Ok(report)
}

/// The operations of a history cut at time `cut`: those invoked before it, the ones still
/// running then becoming unknown outcomes (mutations) or dropped (observations).
fn cut_at(ops: &[CheckOp], cut: u64) -> Vec<CheckOp> {
    ops.iter()
        .filter(|op| op.invoke < cut)
        .filter_map(|op| {
            if op.complete.is_some_and(|c| c < cut) {
                return Some(*op);
            }
            let step = match op.step {
                Step::RegisterOk { id, loc } | Step::RegisterMaybe { id, loc } => {
                    Step::RegisterMaybe { id, loc }
                }
                Step::CommitOk { id, base, new } | Step::CommitMaybe { id, base, new } => {
                    Step::CommitMaybe { id, base, new }
                }
                Step::DropOk { id } | Step::DropMaybe { id } => Step::DropMaybe { id },
                Step::RenameOk { from, to } | Step::RenameMaybe { from, to } => {
                    Step::RenameMaybe { from, to }
                }
                _ => return None,
            };
            Some(CheckOp {
                complete: None,
                step,
                ..*op
            })
        })
        .collect()
}

/// After a failed search: find the earliest cut of the history that is already not
/// linearizable (binary search), and show the operations just before it.
fn localize(ops: &[CheckOp], ids: usize, history: &History, failure: String) -> String {
    let mut times: Vec<u64> = ops.iter().filter_map(|op| op.complete).collect();
    times.sort();
    times.dedup();
    let (mut lo, mut hi) = (0usize, times.len());
    // Invariant: the cut after times[hi - 1] fails (the whole history does); find the first.
    while lo < hi {
        let mid = (lo + hi) / 2;
        if search(&cut_at(ops, times[mid] + 1), ids, history).is_err() {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    let Some(&cut) = times.get(lo) else {
        return failure;
    };
    let mut text = format!(
        "not linearizable; the earliest failing cut of the history is at time {cut}, \
         when this operation completed:\n"
    );
    let mut window: Vec<&CheckOp> = ops.iter().filter(|op| op.complete == Some(cut)).collect();
    window.dedup_by_key(|op| op.origin);
    for op in &window {
        text.push_str(&format!(
            "  {} [as {:?}]\n",
            describe(history, &history.ops[op.origin]),
            op.step
        ));
    }
    let touched: HashSet<usize> = window
        .iter()
        .flat_map(|op| {
            let (a, b) = op.step.ids();
            std::iter::once(a).chain(b)
        })
        .collect();
    text.push_str("Operations on those identifiers invoked before then (latest 80):\n");
    let mut origins: Vec<usize> = ops
        .iter()
        .filter(|op| op.invoke <= cut)
        .filter(|op| {
            let (a, b) = op.step.ids();
            touched.contains(&a) || b.is_some_and(|b| touched.contains(&b))
        })
        .map(|op| op.origin)
        .collect();
    origins.sort_by_key(|&o| history.ops[o].invoke);
    origins.dedup();
    let skip = origins.len().saturating_sub(80);
    for &o in &origins[skip..] {
        text.push_str(&format!("  {}\n", describe(history, &history.ops[o])));
    }
    if ops.len() <= 400 {
        text.push_str("\nThe search's own report:\n");
        text.push_str(&failure);
    }
    text
}

#[derive(Clone, Copy, Debug)]
enum Node {
    Call(usize),
    Return(usize),
}

struct Frame {
    op: usize,
    alt: usize,
    previous: Vec<u32>,
    /// Placed without a choice point (a read-only step placed as soon as possible).
    forced: bool,
}

/// Wing & Gong's search with Lowe's memoisation over one partition.
///
/// Every operation has a call node in a time-ordered list, and those with a known outcome
/// also a return node; a call before the first remaining return may be linearized next.
/// An operation with an unknown outcome has no return: it may be linearized at any later
/// point, first tried without effect (the same as never), then with its effect.
fn search(ops: &[CheckOp], ids: usize, history: &History) -> Result<u64, String> {
    // Calls before returns at equal times: more concurrency, never less.
    let mut events: Vec<(u64, u8, Node)> = Vec::new();
    for (i, op) in ops.iter().enumerate() {
        events.push((op.invoke, 0, Node::Call(i)));
        if let Some(complete) = op.complete {
            events.push((complete, 1, Node::Return(i)));
        }
    }
    if events.is_empty() {
        return Ok(0);
    }
    events.sort_by_key(|&(time, order, _)| (time, order));
    const END: usize = usize::MAX;
    let n = events.len();
    let head = n;
    let mut next: Vec<usize> = (0..=n)
        .map(|i| if i + 1 >= n { END } else { i + 1 })
        .collect();
    let mut prev: Vec<usize> = (0..=n).map(|i| if i == 0 { head } else { i - 1 }).collect();
    next[head] = 0;
    let nodes: Vec<Node> = events.iter().map(|e| e.2).collect();
    let mut call_node = vec![0; ops.len()];
    let mut return_node = vec![None; ops.len()];
    for (index, node) in nodes.iter().enumerate() {
        match *node {
            Node::Call(i) => call_node[i] = index,
            Node::Return(i) => return_node[i] = Some(index),
        }
    }
    let unlink = |next: &mut Vec<usize>, prev: &mut Vec<usize>, x: usize| {
        let (p, q) = (prev[x], next[x]);
        next[p] = q;
        if q != END {
            prev[q] = p;
        }
    };
    let relink = |next: &mut Vec<usize>, prev: &mut Vec<usize>, x: usize| {
        let (p, q) = (prev[x], next[x]);
        next[p] = x;
        if q != END {
            prev[q] = x;
        }
    };
    let zobrist: Vec<u128> = (0..ops.len() as u64)
        .map(|i| ((mix(2 * i) as u128) << 64) | mix(2 * i + 1) as u128)
        .collect();

    let mut remaining = ops.iter().filter(|op| op.complete.is_some()).count();
    let mut state = vec![0u32; ids];
    let mut linearized: u128 = 0;
    let mut memo: HashSet<(u128, Vec<u32>)> = HashSet::new();
    let mut stack: Vec<Frame> = Vec::new();
    let mut resume: Option<(usize, usize)> = None;
    let mut cursor = next[head];
    let mut explored: u64 = 0;
    let mut deepest: (usize, Vec<u32>, Vec<usize>) = (0, state.clone(), Vec::new());

    let mut fresh_scan = true;
    loop {
        if remaining == 0 {
            return Ok(explored);
        }
        explored += 1;
        if explored > BUDGET {
            return Err(format!(
                "the linearizability search exhausted its budget of {BUDGET} iterations \
                 ({} of {} steps placed at best); reduce PARQDB_LIN_CLIENTS",
                deepest.0,
                ops.len()
            ));
        }
        // At the start of a scan, place a possible read-only step first, without a choice.
        let mut backtrack = false;
        let mut placed: Option<(usize, usize, Vec<u32>, bool)> = None;
        if fresh_scan {
            fresh_scan = false;
            let mut x = next[head];
            while x != END {
                let Node::Call(i) = nodes[x] else { break };
                let possible = (ops[i].complete.is_some() && ops[i].step.read_only())
                    .then(|| ops[i].step.next(&state).into_iter().next())
                    .flatten();
                if let Some(candidate) = possible {
                    if memo.insert((linearized ^ zobrist[i], candidate.clone())) {
                        placed = Some((i, 0, candidate, true));
                    } else {
                        backtrack = true; // this configuration failed before
                    }
                    break;
                }
                x = next[x];
            }
        }
        if placed.is_none() && !backtrack {
            assert!(cursor != END, "a return node must remain while ops remain");
            match nodes[cursor] {
                Node::Call(i) => {
                    let start = match resume {
                        Some((node, alt)) if node == cursor => {
                            resume = None;
                            alt
                        }
                        _ => 0,
                    };
                    let key = linearized ^ zobrist[i];
                    for (alt, candidate) in
                        ops[i].step.next(&state).into_iter().enumerate().skip(start)
                    {
                        if memo.insert((key, candidate.clone())) {
                            placed = Some((i, alt, candidate, false));
                            break;
                        }
                    }
                    if placed.is_none() {
                        cursor = next[cursor];
                        continue;
                    }
                }
                Node::Return(_) => backtrack = true,
            }
        }
        if let Some((i, alt, candidate, forced)) = placed {
            let previous = std::mem::replace(&mut state, candidate);
            stack.push(Frame {
                op: i,
                alt,
                previous,
                forced,
            });
            linearized ^= zobrist[i];
            unlink(&mut next, &mut prev, call_node[i]);
            if let Some(r) = return_node[i] {
                unlink(&mut next, &mut prev, r);
                remaining -= 1;
            }
            if stack.len() > deepest.0 {
                deepest = (stack.len(), state.clone(), Vec::new());
            }
            cursor = next[head];
            fresh_scan = true;
            continue;
        }
        debug_assert!(backtrack);
        if stack.len() == deepest.0 && deepest.2.is_empty() {
            // Remember what could not be placed here, for the report.
            let mut window = Vec::new();
            let mut x = next[head];
            while x != END {
                match nodes[x] {
                    Node::Call(i) => window.push(i),
                    Node::Return(i) => {
                        window.push(i);
                        break;
                    }
                }
                x = next[x];
            }
            deepest.2 = window;
        }
        // Undo forced placements, then resume the last choice point with its next choice.
        loop {
            let Some(frame) = stack.pop() else {
                return Err(failure_report(ops, history, &deepest));
            };
            if let Some(r) = return_node[frame.op] {
                relink(&mut next, &mut prev, r);
                remaining += 1;
            }
            relink(&mut next, &mut prev, call_node[frame.op]);
            linearized ^= zobrist[frame.op];
            state = frame.previous;
            if !frame.forced {
                resume = Some((call_node[frame.op], frame.alt + 1));
                cursor = call_node[frame.op];
                break;
            }
        }
    }
}

fn failure_report(
    ops: &[CheckOp],
    history: &History,
    deepest: &(usize, Vec<u32>, Vec<usize>),
) -> String {
    let (depth, state, window) = deepest;
    let mut text = format!(
        "not linearizable: at best {depth} of {} steps of this partition could be placed. \
         Model state there:\n",
        ops.len()
    );
    for (id, value) in state.iter().enumerate() {
        if *value != 0 {
            text.push_str(&format!(
                "  #{id} {} = L{}\n",
                history.universe.ids[id],
                value - 1
            ));
        }
    }
    text.push_str("None of these could be linearized next:\n");
    let mut seen = HashSet::new();
    for &i in window {
        if seen.insert(ops[i].origin) {
            text.push_str(&format!(
                "  {} [as {:?}]\n",
                describe(history, &history.ops[ops[i].origin]),
                ops[i].step
            ));
        }
    }
    text.push_str("The whole partition, by invocation:\n");
    let mut origins: Vec<usize> = ops.iter().map(|op| op.origin).collect();
    origins.sort();
    origins.dedup();
    let mut related: Vec<&Op> = origins.iter().map(|&o| &history.ops[o]).collect();
    related.sort_by_key(|op| op.invoke);
    for op in related.iter().take(600) {
        text.push_str(&format!("  {}\n", describe(history, op)));
    }
    text
}

// ---------------------------------------------------------------------------------------
// Backends
// ---------------------------------------------------------------------------------------

/// The pointer stores the checker runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// In-memory store and warehouse.
    Memory,
    /// Local-filesystem store and warehouse in a temporary directory.
    Local,
    /// Pointers and metadata on the S3-compatible server.
    S3,
    /// Pointers in DynamoDB Local, metadata on the S3-compatible server.
    DynamoDb,
}

impl Backend {
    /// A fresh, empty store and warehouse.
    pub async fn open(self) -> (Arc<dyn PointerStore>, Warehouse) {
        use parqdb_catalog::store::local::LocalStore;
        use parqdb_catalog::store::memory::MemoryStore;
        use parqdb_catalog::store::s3::S3Store;

        use super::services;
        match self {
            Backend::Memory => (
                Arc::new(MemoryStore::new()),
                Warehouse::in_memory("memory://lin/wh").expect("warehouse"),
            ),
            Backend::Local => {
                let dir = tempfile::tempdir().expect("temp dir").keep();
                let warehouse = Warehouse::local(&dir.join("warehouse")).expect("warehouse");
                let store = LocalStore::new(dir.join("warehouse").join("_catalog"));
                (Arc::new(store), warehouse)
            }
            Backend::S3 => {
                let bucket = services::new_bucket().await;
                let warehouse = services::s3_warehouse(&bucket, "wh");
                let store = S3Store::from_uri(
                    &format!("s3://{bucket}/wh/_catalog"),
                    &services::s3_options(),
                )
                .expect("store");
                (Arc::new(store), warehouse)
            }
            Backend::DynamoDb => {
                let bucket = services::new_bucket().await;
                let warehouse = services::s3_warehouse(&bucket, "wh");
                (Arc::new(services::dynamodb_store().await), warehouse)
            }
        }
    }
}

/// After a workload: one load per identifier, sequentially, through `catalog` (no faults),
/// appended to the history after everything else.
pub async fn final_loads(history: &mut History, catalog: &dyn IndexCatalog, pool: &Pool) {
    let recorder = Recorder::default();
    let start = history.ops.iter().map(|op| op.complete).max().unwrap_or(0) + 1;
    recorder.clock.store(start, Ordering::SeqCst);
    for id in 0..history.universe.ids.len() {
        perform(
            catalog,
            &history.universe,
            pool,
            &recorder,
            usize::MAX,
            Call::Load { id },
        )
        .await;
    }
    history.ops.extend(recorder.ops());
}

/// Check that no pointer record was applied twice: every applied write to an index key
/// carries a commit id no other applied write to that key carries.
pub fn assert_applied_once(writes: &[parqdb_catalog::store::faulty::AppliedWrite]) -> usize {
    let mut seen = HashSet::new();
    let mut count = 0;
    for write in writes {
        if !write.key.as_str().starts_with("i/") {
            continue;
        }
        let record: serde_json::Value =
            serde_json::from_slice(&write.value).expect("a JSON record");
        let commit = record["commit-id"].as_str().expect("commit-id").to_owned();
        assert!(
            seen.insert((write.key.clone(), commit.clone())),
            "the record with commit id {commit} was applied twice to {} (call {})",
            write.key,
            write.call
        );
        count += 1;
    }
    count
}
