//! The workload: a universe of identifiers, a pool of real metadata files, and clients
//! that issue random operations against a catalog, each recorded in a [`History`].

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use parqdb_catalog::IndexCatalog;
use parqdb_catalog::{ErrorKind, IndexIdentifier, SystemClock};
use parqdb_catalog::{IndexMetadata, TableDefinition};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::{Call, History, Loc, Op, Recorder, Ret, Universe, env_usize, mix};
use crate::support::fixture::TestEnv;

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
        self.metadata(loc)
            .current_snapshot()
            .contents()
            .source_table
            .clone()
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
