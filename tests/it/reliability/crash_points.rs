//! The reliability proof, part 3: crash points.
//!
//! A [`Crash`] hook lets an operation make `N` store calls and then "crashes" it: call
//! `N + 1` panics inside the operation's spawned task, or never answers and the task is
//! cancelled — every later call of that process fails the same way. For every `N` from 0
//! to the number of calls the operation makes, inside `register`, `commit`, `drop` and
//! `rename` (the atomic protocol on the memory store, the step-wise protocol on the memory
//! store with its transaction hidden and on local files), a FRESH catalog over the same
//! store must then see a consistent state:
//!
//! * every identifier loads as its state before or after the operation;
//! * a renamed index is never lost or duplicated: exactly one of source and destination is
//!   visible, before and after the next operation settles the interrupted rename;
//! * the next operation that touches the source completes or rolls back the interrupted
//!   rename (its record is no longer `moving`), and a rival who takes the destination in the
//!   meantime wins: the rename is rolled back, never completed over it;
//! * the catalog wrote and deleted no metadata file, and the files no pointer references are
//!   exactly the ones the interrupted writer wrote (plus, after a landed commit, the base it
//!   superseded, which is retained metadata rather than an orphan).
//!
//! (Crash points of the garbage collector are tested with the collector.)

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use crate::support::fixture::{TestEnv, source};
use crate::support::history::backends::catalog_over;
use async_trait::async_trait;
use futures::TryStreamExt;
use parqdb_catalog::IndexMetadata;
use parqdb_catalog::Warehouse;
use parqdb_catalog::catalog::record::{PointerRecord, PointerState};
use parqdb_catalog::store::LocalStore;
use parqdb_catalog::store::MemoryStore;
use parqdb_catalog::store::PointerStoreExt;
use parqdb_catalog::store::{Capabilities, PointerStore, StoreError};
use parqdb_catalog::{Catalog, IndexCatalog};
use parqdb_catalog::{ErrorKind, IndexIdentifier};
use parqdb_catalog_testkit::store::{Call, Hook, Hooked};
use tokio::sync::Notify;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CrashMode {
    /// The call panics inside the operation's task.
    Panic,
    /// The call never answers; the test cancels the task.
    Hang,
}

/// A store hook whose caller crashes at its `budget + 1`-th call.
struct Crash {
    budget: usize,
    mode: CrashMode,
    hide_transact: bool,
    calls: AtomicUsize,
    crashed: AtomicBool,
    notify: Notify,
}

impl Crash {
    fn new(budget: usize, mode: CrashMode, hide_transact: bool) -> Self {
        Crash {
            budget,
            mode,
            hide_transact,
            calls: AtomicUsize::new(0),
            crashed: AtomicBool::new(false),
            notify: Notify::new(),
        }
    }
}

#[async_trait]
impl Hook for Crash {
    async fn before(
        &self,
        _inner: &Arc<dyn PointerStore>,
        _call: Call<'_>,
    ) -> Result<(), StoreError> {
        let call = self.calls.fetch_add(1, Ordering::SeqCst);
        if call < self.budget {
            return Ok(());
        }
        self.crashed.store(true, Ordering::SeqCst);
        self.notify.notify_waiters();
        match self.mode {
            CrashMode::Panic => panic!("crash point: store call {call}"),
            CrashMode::Hang => std::future::pending().await,
        }
    }

    /// Without its transaction when hidden (the store then refuses `transact`).
    fn capabilities(&self, inner: Capabilities) -> Capabilities {
        if self.hide_transact {
            Capabilities::default()
        } else {
            inner
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Flavor {
    /// Memory store: rename is one transaction.
    MemoryAtomic,
    /// Memory store with the transaction hidden: the step-wise rename.
    MemoryStepWise,
    /// Local files: the step-wise rename across files.
    Local,
}

impl Flavor {
    fn open(self) -> (Arc<dyn PointerStore>, Warehouse) {
        match self {
            Flavor::MemoryAtomic | Flavor::MemoryStepWise => (
                Arc::new(MemoryStore::new()),
                Warehouse::in_memory("memory://crash/wh").expect("warehouse"),
            ),
            Flavor::Local => {
                let dir = tempfile::tempdir().expect("temp dir").keep();
                let warehouse = Warehouse::local(&dir.join("warehouse")).expect("warehouse");
                let store = LocalStore::new(dir.join("warehouse").join("_catalog"));
                (Arc::new(store), warehouse)
            }
        }
    }

    fn hide_transact(self) -> bool {
        self == Flavor::MemoryStepWise
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Operation {
    Register,
    Commit,
    Drop,
    Rename,
}

/// One world: a store, a warehouse, a source `from` (and destination `to`) and the metadata
/// files the test wrote.
struct World {
    raw: Arc<dyn PointerStore>,
    env: TestEnv,
    from: IndexIdentifier,
    to: IndexIdentifier,
    m0: (IndexMetadata, String),
    /// The successor of `m0` a commit proposes.
    s: Option<String>,
    written: BTreeSet<String>,
}

impl World {
    async fn new(flavor: Flavor, operation: Operation) -> World {
        let (raw, warehouse) = flavor.open();
        let setup = catalog_over(raw.clone(), &warehouse, true);
        let env = TestEnv {
            catalog: Arc::new(setup),
            warehouse,
            with_registry: None,
        };
        let a = env.namespace("crash-a").await;
        let b = env.namespace("crash-b").await;
        let from = IndexIdentifier::new(a, "source").expect("valid");
        let to = IndexIdentifier::new(b, "destination").expect("valid");
        let m0 = env.new_index().await;
        let mut written = BTreeSet::from([m0.1.clone()]);
        if operation != Operation::Register {
            env.catalog
                .register(&from, Some(&source(1)), &m0.1)
                .await
                .expect("registered");
        }
        let s = if operation == Operation::Commit {
            let (_, location) = env.successor(&m0.0, 2).await;
            written.insert(location.clone());
            Some(location)
        } else {
            None
        };
        World {
            raw,
            env,
            from,
            to,
            m0,
            s,
            written,
        }
    }

    async fn run(&self, catalog: &Catalog, operation: Operation) -> parqdb_catalog::Result<()> {
        match operation {
            Operation::Register => catalog
                .register(&self.from, Some(&source(1)), &self.m0.1)
                .await
                .map(|_| ()),
            Operation::Commit => {
                let s = self.s.as_deref().expect("successor");
                catalog
                    .commit(&self.from, Some(&source(2)), &self.m0.1, s)
                    .await
                    .map(|_| ())
            }
            Operation::Drop => catalog.drop_index(&self.from).await,
            Operation::Rename => catalog.rename(&self.from, &self.to).await.map(|_| ()),
        }
    }

    fn fresh(&self) -> Catalog {
        catalog_over(self.raw.clone(), &self.env.warehouse, false)
    }

    async fn location(&self, catalog: &Catalog, id: &IndexIdentifier) -> Option<String> {
        match catalog.load(id).await {
            Ok(pointer) => Some(pointer.metadata_location),
            Err(err) if err.kind() == ErrorKind::IndexNotFound => None,
            Err(err) => panic!("load {id}: {err}"),
        }
    }

    async fn raw_state(&self, id: &IndexIdentifier) -> Option<PointerState> {
        let stored = self.raw.get(&id.store_key()).await.expect("read");
        stored.map(|v| {
            PointerRecord::from_bytes(&v.value)
                .expect("a valid record")
                .state
        })
    }

    /// The rename's source record is no longer `Moving` (`what`: the case, for the message).
    async fn assert_source_settled(&self, what: &str) {
        assert_ne!(
            self.raw_state(&self.from).await,
            Some(PointerState::Moving),
            "{what}"
        );
    }

    /// Every metadata file in the warehouse.
    async fn metadata_files(&self) -> BTreeSet<String> {
        let warehouse = &self.env.warehouse;
        let prefix = warehouse.path("metadata").expect("valid name");
        let skip = warehouse.prefix().parts().count();
        let objects: Vec<_> = warehouse
            .object_store()
            .list(Some(&prefix))
            .try_collect()
            .await
            .expect("listed");
        objects
            .into_iter()
            .map(|meta| {
                let relative: Vec<String> = meta
                    .location
                    .parts()
                    .skip(skip)
                    .map(|part| part.as_ref().to_owned())
                    .collect();
                warehouse.absolute(&relative.join("/"))
            })
            .collect()
    }

    /// The catalog wrote and deleted no metadata; the unreferenced files are `expected`.
    async fn assert_orphans(&self, catalog: &Catalog, expected: &[&str], what: &str) {
        let files = self.metadata_files().await;
        assert_eq!(
            files, self.written,
            "{what}: the catalog wrote or deleted metadata files"
        );
        let mut referenced = BTreeSet::new();
        for id in [&self.from, &self.to] {
            if let Some(location) = self.location(catalog, id).await {
                referenced.insert(location);
            }
        }
        let unreferenced: BTreeSet<String> = files.difference(&referenced).cloned().collect();
        let expected: BTreeSet<String> = expected.iter().map(|s| (*s).to_owned()).collect();
        assert_eq!(
            unreferenced, expected,
            "{what}: unreferenced metadata files"
        );
    }
}

/// Run `operation` in a task over a store that crashes after `budget` calls. Returns the
/// operation's result if it finished, `None` if it crashed; and the calls it made.
async fn crash_run(
    world: &Arc<World>,
    flavor: Flavor,
    operation: Operation,
    budget: usize,
    mode: CrashMode,
) -> (Option<parqdb_catalog::Result<()>>, usize) {
    let store = Arc::new(Hooked::new(
        world.raw.clone(),
        Crash::new(budget, mode, flavor.hide_transact()),
    ));
    let catalog = catalog_over(store.clone(), &world.env.warehouse, false);
    let task = {
        let world = world.clone();
        tokio::spawn(async move { world.run(&catalog, operation).await })
    };
    let crashed = store.hook().notify.notified();
    tokio::pin!(crashed);
    crashed.as_mut().enable();
    let result = if store.hook().crashed.load(Ordering::SeqCst) {
        None
    } else {
        let mut task = task;
        tokio::select! {
            joined = &mut task => match joined {
                Ok(result) => Some(result),
                Err(err) if err.is_panic() => None,
                Err(err) => panic!("task failed: {err}"),
            },
            _ = &mut crashed => {
                task.abort();
                // `Ok` if it finished before the abort took hold.
                task.await.ok()
            }
        }
    };
    (result, store.hook().calls.load(Ordering::SeqCst))
}

async fn calls_of(flavor: Flavor, operation: Operation) -> usize {
    let world = Arc::new(World::new(flavor, operation).await);
    let (result, calls) = crash_run(&world, flavor, operation, usize::MAX, CrashMode::Panic).await;
    result
        .expect("no crash")
        .expect("the operation succeeds without a crash");
    calls
}

/// [`crash_everywhere`] on each of `flavors` in turn.
async fn crash_everywhere_on(flavors: &[Flavor], operation: Operation) {
    for &flavor in flavors {
        crash_everywhere(flavor, operation).await;
    }
}

/// Crash `operation` after every possible number of store calls and check the world.
async fn crash_everywhere(flavor: Flavor, operation: Operation) {
    let calls = calls_of(flavor, operation).await;
    let mut outcomes = BTreeSet::new();
    for mode in [CrashMode::Panic, CrashMode::Hang] {
        for budget in 0..=calls {
            for variant in 0..if operation == Operation::Rename { 2 } else { 1 } {
                let what = format!(
                    "{flavor:?} {operation:?} crash after {budget} of {calls} calls ({mode:?}, variant {variant})"
                );
                let world = Arc::new(World::new(flavor, operation).await);
                let (result, _) = crash_run(&world, flavor, operation, budget, mode).await;
                if budget == calls {
                    assert!(matches!(result, Some(Ok(()))), "{what}: {result:?}");
                } else {
                    assert!(result.is_none(), "{what}: expected a crash, got {result:?}");
                }
                let landed = check_after_crash(&world, operation, variant, &what).await;
                outcomes.insert(landed);
            }
        }
    }
    // Crashing early leaves the state before; crashing late the state after.
    assert_eq!(
        outcomes,
        BTreeSet::from([false, true]),
        "{flavor:?} {operation:?}"
    );
    println!(
        "{flavor:?} {operation:?}: {calls} store calls, crashed at each of 0..={calls} in both modes: consistent"
    );
}

/// Check the world after a crash with a fresh catalog; return whether the operation
/// landed.
async fn check_after_crash(
    world: &World,
    operation: Operation,
    variant: usize,
    what: &str,
) -> bool {
    let fresh = world.fresh();
    let m0 = world.m0.1.as_str();
    let from = world.location(&fresh, &world.from).await;
    let to = world.location(&fresh, &world.to).await;
    if operation != Operation::Rename {
        assert_eq!(to, None, "{what}: the destination was never touched");
    }
    match operation {
        Operation::Register | Operation::Drop => {
            let landed = if operation == Operation::Register {
                from.is_some()
            } else {
                from.is_none()
            };
            if let Some(location) = &from {
                assert_eq!(location, m0, "{what}");
            }
            let orphans: &[&str] = if from.is_some() { &[] } else { &[m0] };
            world.assert_orphans(&fresh, orphans, what).await;
            // The next operation completes normally.
            if from.is_some() {
                fresh
                    .drop_index(&world.from)
                    .await
                    .expect("drop after the crash");
            } else {
                fresh
                    .register(&world.from, Some(&source(1)), m0)
                    .await
                    .expect("register after the crash");
            }
            landed
        }
        Operation::Commit => {
            let s = world.s.as_deref().expect("successor");
            let location = from.expect("the index stays registered");
            assert!(location == m0 || location == s, "{what}: {location}");
            let landed = location == s;
            let orphans: &[&str] = if landed { &[m0] } else { &[s] };
            world.assert_orphans(&fresh, orphans, what).await;
            // Re-running the interrupted commit either lands it or finds it landed.
            let again = fresh
                .commit(&world.from, Some(&source(2)), m0, s)
                .await
                .expect("retried commit");
            assert_eq!(again.already_applied, landed, "{what}");
            landed
        }
        Operation::Rename => check_rename(world, &fresh, from, to, variant, what).await,
    }
}

async fn check_rename(
    world: &World,
    fresh: &Catalog,
    from: Option<String>,
    to: Option<String>,
    variant: usize,
    what: &str,
) -> bool {
    let m0 = world.m0.1.as_str();
    // Never lost, never duplicated.
    match (&from, &to) {
        (Some(location), None) | (None, Some(location)) => assert_eq!(location, m0, "{what}"),
        other => panic!("{what}: source and destination are {other:?}"),
    }
    let landed = to.is_some();
    world.assert_orphans(fresh, &[], what).await;
    if variant == 0 {
        // The next operation touching the source settles the rename.
        let (_, location) = world.env.successor(&world.m0.0, 3).await;
        let committed = fresh
            .commit(&world.from, Some(&source(3)), m0, &location)
            .await;
        let source_state = world.raw_state(&world.from).await;
        assert_ne!(
            source_state,
            Some(PointerState::Moving),
            "{what}: the source is still moving after a commit touched it"
        );
        let from_now = world.location(fresh, &world.from).await;
        let to_now = world.location(fresh, &world.to).await;
        match committed {
            Ok(_) => {
                assert!(
                    !landed,
                    "{what}: the landed rename was undone by a commit on its source"
                );
                assert_eq!(
                    (from_now.as_deref(), to_now),
                    (Some(location.as_str()), None),
                    "{what}"
                );
            }
            Err(err) if err.kind() == ErrorKind::IndexNotFound => {
                // The interrupted rename was completed first (it may not have been visible
                // yet: its outcome was unknown, and it may take effect now).
                assert_eq!((from_now, to_now.as_deref()), (None, Some(m0)), "{what}");
            }
            Err(err) => panic!("{what}: commit after the crash: {err}"),
        }
        landed
    } else {
        // A rival registers the destination if it is free; the rename must then be rolled
        // back, never completed over the rival.
        let rival = world.env.new_index().await.1;
        let registered = fresh.register(&world.to, Some(&source(1)), &rival).await;
        match registered {
            Ok(_) => {
                assert!(!landed, "{what}: registered over a visible destination");
                // Touch the source: it rolls back and stays.
                let (_, location) = world.env.successor(&world.m0.0, 3).await;
                fresh
                    .commit(&world.from, Some(&source(3)), m0, &location)
                    .await
                    .unwrap_or_else(|err| {
                        panic!("{what}: the source must survive a lost rename: {err}")
                    });
                world.assert_source_settled(what).await;
                assert_eq!(
                    world.location(fresh, &world.to).await.as_deref(),
                    Some(rival.as_str()),
                    "{what}"
                );
                assert_eq!(
                    world.location(fresh, &world.from).await.as_deref(),
                    Some(location.as_str()),
                    "{what}"
                );
            }
            Err(err) if err.kind() == ErrorKind::AlreadyExists => {
                assert!(landed, "{what}: the destination was free");
                // Touch the source: it is gone, and its record is settled.
                let dropped = fresh.drop_index(&world.from).await;
                assert_eq!(
                    dropped.map_err(|e| e.kind()),
                    Err(ErrorKind::IndexNotFound),
                    "{what}"
                );
                world.assert_source_settled(what).await;
                assert_eq!(
                    world.location(fresh, &world.to).await.as_deref(),
                    Some(m0),
                    "{what}"
                );
            }
            Err(err) => panic!("{what}: register at the destination: {err}"),
        }
        landed
    }
}

#[tokio::test]
async fn register_crash_points() {
    crash_everywhere_on(&[Flavor::MemoryAtomic, Flavor::Local], Operation::Register).await;
}

#[tokio::test]
async fn commit_crash_points() {
    crash_everywhere_on(&[Flavor::MemoryAtomic, Flavor::Local], Operation::Commit).await;
}

#[tokio::test]
async fn drop_crash_points() {
    crash_everywhere_on(&[Flavor::MemoryAtomic, Flavor::Local], Operation::Drop).await;
}

#[tokio::test]
async fn atomic_rename_crash_points() {
    crash_everywhere(Flavor::MemoryAtomic, Operation::Rename).await;
}

#[tokio::test]
async fn step_wise_rename_crash_points() {
    crash_everywhere_on(&[Flavor::MemoryStepWise, Flavor::Local], Operation::Rename).await;
}
