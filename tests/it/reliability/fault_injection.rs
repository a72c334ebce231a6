//! The reliability proof, part 2: commits under injected faults.
//!
//! Writers race to extend one index's chain through a [`FaultyStore`] that fails calls
//! before applying them, delays and throttles them, and — the cases unit tests miss —
//! applies writes and then reports `Ambiguous`, or reports the lost condition an SDK retry
//! would see after a lost response. Afterwards:
//!
//! * every acknowledged commit is in the final chain (its metadata's sequence number is on
//!   the chain from the current metadata back to the first), and every link of the chain
//!   was committed by an acknowledged commit or one whose outcome was reported unknown;
//! * nothing is applied twice: every pointer record the store really applied carries a
//!   commit id no other applied record of that key carries, and every metadata location
//!   was published at most once;
//! * every write the store applied while lying about it was either resolved by read-back
//!   (the commit was acknowledged) or reported as `COMMIT_STATE_UNKNOWN`; no definite
//!   failure (`COMMIT_CONFLICT`, `STORE_UNAVAILABLE`) hides a landed write.
//!
//! Also here: targeted, scripted faults at exact store calls (minimal reproductions).
#![allow(clippy::disallowed_methods)] // tests may read the wall clock and draw random ids (unique names)

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use crate::support::fixture::{TestEnv, source};
use crate::support::history::backends::{Backend, assert_applied_once, catalog_over};
use crate::support::history::{env_seeds, env_usize};
use async_trait::async_trait;
use bytes::Bytes;
use parqdb_catalog::IndexMetadata;
use parqdb_catalog::Warehouse;
use parqdb_catalog::catalog::record::{NamespaceRecord, PointerRecord, PointerState};
use parqdb_catalog::store::PointerStoreExt;
use parqdb_catalog::store::{PointerStore, PutMode, StoreError, StoreKey};
use parqdb_catalog::{Catalog, IndexCatalog};
use parqdb_catalog::{ErrorKind, IndexIdentifier, SystemClock};
use parqdb_catalog_testkit::faulty::{Fault, FaultConfig, FaultyStore};
use parqdb_catalog_testkit::store::{Call, Hook, Hooked};

// ---------------------------------------------------------------------------------------
// Racing writers under random faults
// ---------------------------------------------------------------------------------------

#[derive(Debug, Default)]
struct Outcomes {
    /// new location → base location, for every commit attempted.
    base_of: HashMap<String, String>,
    acknowledged: BTreeSet<String>,
    unknown: BTreeSet<String>,
    /// Definite failures other than a conflict (the write did not apply).
    failed: BTreeSet<String>,
    conflicts: usize,
}

async fn chain_under_faults(
    backend: Backend,
    rate: f64,
    seed: u64,
    writers: usize,
    per_writer: usize,
) {
    let (raw, warehouse) = backend.open().await;
    let faulty = Arc::new(FaultyStore::new(
        raw.clone(),
        FaultConfig {
            max_delay: std::time::Duration::from_millis(3),
            ..FaultConfig::uniform(seed, rate)
        },
    ));
    faulty.set_enabled(false);
    let env = TestEnv {
        catalog: Arc::new(catalog_over(faulty.clone(), &warehouse, true)),
        warehouse: warehouse.clone(),
        with_registry: None,
    };
    let (index, initial, root) = env.registered("chain").await;
    let metadata: Arc<Mutex<HashMap<String, IndexMetadata>>> =
        Arc::new(Mutex::new(HashMap::from([(root.clone(), initial)])));
    let outcomes = Arc::new(Mutex::new(Outcomes::default()));
    faulty.set_enabled(true);

    let mut tasks = Vec::new();
    for writer in 0..writers {
        let catalog = catalog_over(faulty.clone(), &warehouse, false);
        let env = env.clone();
        let index = index.clone();
        let metadata = metadata.clone();
        let outcomes = outcomes.clone();
        tasks.push(tokio::spawn(async move {
            let mut landed = 0;
            let mut attempts = 0;
            while landed < per_writer && attempts < per_writer * 40 {
                attempts += 1;
                let current = match catalog.load(&index).await {
                    Ok(pointer) => pointer.metadata_location,
                    Err(err) if err.kind() == ErrorKind::StoreUnavailable => continue,
                    Err(err) => panic!("load: {err}"),
                };
                let base = metadata.lock().unwrap()[&current].clone();
                let trimmed = base
                    .expire_snapshots(Some(3), None, &SystemClock)
                    .expect("expire");
                let version = (writer * 100_000 + attempts) as u32;
                let (next, location) = env.successor(&trimmed, version).await;
                metadata.lock().unwrap().insert(location.clone(), next);
                outcomes
                    .lock()
                    .unwrap()
                    .base_of
                    .insert(location.clone(), current.clone());
                let result = catalog
                    .commit(&index, Some(&source(version)), &current, &location)
                    .await;
                let mut outcomes = outcomes.lock().unwrap();
                match result {
                    Ok(done) => {
                        assert_eq!(done.pointer.metadata_location, location);
                        outcomes.acknowledged.insert(location);
                        landed += 1;
                    }
                    Err(err) => match err.kind() {
                        ErrorKind::CommitConflict => outcomes.conflicts += 1,
                        ErrorKind::CommitStateUnknown => {
                            outcomes.unknown.insert(location);
                        }
                        ErrorKind::StoreUnavailable => {
                            outcomes.failed.insert(location);
                        }
                        _ => panic!("commit: {err}"),
                    },
                }
            }
        }));
    }
    for task in tasks {
        task.await.expect("writer");
    }
    faulty.set_enabled(false);
    let stats = faulty.stats();
    let outcomes = std::mem::take(&mut *outcomes.lock().unwrap());

    // The final chain, from the current metadata back to the first.
    let fresh = catalog_over(raw.clone(), &warehouse, false);
    let mut location = fresh.load(&index).await.expect("load").metadata_location;
    let last_sequence = env.read(&location).await.last_sequence_number();
    let mut chain = Vec::new();
    while location != root {
        chain.push(location.clone());
        location = outcomes.base_of[&location].clone();
    }
    chain.reverse();
    assert_eq!(
        chain.len() as i64 + 1,
        last_sequence,
        "one sequence number per link"
    );
    let on_chain: BTreeSet<String> = chain.iter().cloned().collect();
    for acknowledged in &outcomes.acknowledged {
        assert!(
            on_chain.contains(acknowledged),
            "acknowledged commit {acknowledged} is not in the final chain"
        );
    }
    for link in &on_chain {
        assert!(
            outcomes.acknowledged.contains(link) || outcomes.unknown.contains(link),
            "{link} is in the chain but its commit was reported as failed"
        );
    }
    // Nothing applied twice: each pointer record once, each location published once.
    let writes = faulty.applied_writes();
    let applied = assert_applied_once(&writes);
    let mut published: BTreeMap<String, usize> = BTreeMap::new();
    for write in writes.iter().filter(|w| w.key == index.store_key()) {
        let record = PointerRecord::from_bytes(&write.value).expect("record");
        *published.entry(record.metadata_location).or_default() += 1;
    }
    for (location, times) in &published {
        assert_eq!(*times, 1, "{location} was published {times} times");
    }
    let published: BTreeSet<String> = published.into_keys().filter(|l| *l != root).collect();
    assert_eq!(
        published, on_chain,
        "published locations are exactly the chain"
    );
    let resolved_unknown = outcomes.unknown.intersection(&on_chain).count();
    println!(
        "{backend:?} seed {seed}: {writers} writers; {} acknowledged commits all in the chain of {} links (sequence {last_sequence}); \
         {} unknown outcomes ({resolved_unknown} of them landed), {} conflicts, {} store-unavailable; \
         {applied} pointer writes applied, none twice; {stats}",
        outcomes.acknowledged.len(),
        chain.len(),
        outcomes.unknown.len(),
        outcomes.conflicts,
        outcomes.failed.len(),
    );
    assert!(stats.injected() > 0, "no faults were injected");
}

/// Chains on `backend` with ten percent faults, one per seed (`PARQDB_LIN_SEEDS` or
/// `seeds`), `PARQDB_FAULT_WRITERS` writers of `PARQDB_FAULT_COMMITS` commits each.
async fn chains_under_ten_percent_faults(backend: Backend, seeds: &[u64]) {
    for seed in env_seeds(seeds) {
        chain_under_faults(
            backend,
            0.10,
            seed,
            env_usize("PARQDB_FAULT_WRITERS", 6),
            env_usize("PARQDB_FAULT_COMMITS", 10),
        )
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn memory_chain_under_ten_percent_faults() {
    chains_under_ten_percent_faults(Backend::Memory, &[1, 2, 3]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn local_chain_under_ten_percent_faults() {
    chains_under_ten_percent_faults(Backend::Local, &[1, 2]).await;
}
/// A heavier fault mix: a third of all calls faulty, half of the write faults lies.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn memory_chain_under_heavy_faults() {
    for seed in env_seeds(&[5, 6]) {
        chain_under_faults(Backend::Memory, 0.33, seed, 4, 8).await;
    }
}

// ---------------------------------------------------------------------------------------
// Scripted faults and interference at exact store calls
// ---------------------------------------------------------------------------------------

type Interference =
    Box<dyn Fn(Arc<dyn PointerStore>) -> futures::future::BoxFuture<'static, ()> + Send + Sync>;

/// Runs `interfere` against the inner store right before the call numbered `at`.
struct Interfere {
    calls: AtomicUsize,
    at: usize,
    interfere: Interference,
}

#[async_trait]
impl Hook for Interfere {
    async fn before(
        &self,
        inner: &Arc<dyn PointerStore>,
        _call: Call<'_>,
    ) -> Result<(), StoreError> {
        if self.calls.fetch_add(1, Ordering::SeqCst) == self.at {
            (self.interfere)(inner.clone()).await;
        }
        Ok(())
    }
}

/// A catalog over `faulty` that already owns its warehouse, and the number of its next
/// store call: the ownership check's own store call comes before any scripted fault, so
/// scripts count the operation's calls from there.
async fn claimed_over(faulty: &Arc<FaultyStore>, warehouse: &Warehouse) -> (Catalog, u64) {
    let catalog = catalog_over(faulty.clone(), warehouse, false);
    catalog.claim_warehouse().await.expect("owned");
    (catalog, faulty.calls())
}

async fn memory_env() -> (Arc<dyn PointerStore>, TestEnv) {
    let (raw, warehouse) = Backend::Memory.open().await;
    let env = TestEnv {
        catalog: Arc::new(catalog_over(raw.clone(), &warehouse, true)),
        warehouse,
        with_registry: None,
    };
    (raw, env)
}

/// `raw` without transactions (renames go step by step), injecting no fault of its own.
fn step_wise(raw: &Arc<dyn PointerStore>) -> Arc<FaultyStore> {
    Arc::new(FaultyStore::new(
        raw.clone(),
        FaultConfig::none(1).hiding_transact(),
    ))
}

/// [`memory_env`] with an index `name` registered (its identifier and location) and the
/// identifier `to` beside it, for a rename.
async fn rename_env(
    name: &str,
) -> (
    Arc<dyn PointerStore>,
    TestEnv,
    IndexIdentifier,
    String,
    IndexIdentifier,
) {
    let (raw, env) = memory_env().await;
    let (from, _, location) = env.registered(name).await;
    let to = IndexIdentifier::new(from.namespace().clone(), "to").expect("valid");
    (raw, env, from, location, to)
}

/// Rewrite `id`'s record as a concurrent rename that rolled back leaves it: live, same
/// location, a new commit id.
async fn rewrite_in_place(store: Arc<dyn PointerStore>, id: IndexIdentifier) {
    let current = store
        .get(&id.store_key())
        .await
        .expect("read")
        .expect("present");
    let record = PointerRecord::from_bytes(&current.value).expect("record");
    let same = record.successor(PointerState::Live, uuid::Uuid::new_v4(), record.updated_ms);
    store
        .put(
            &id.store_key(),
            Bytes::from(same.to_bytes()),
            PutMode::Update(current.version),
        )
        .await
        .expect("rewritten");
}

/// Found by the linearizability check: a rename that lost its destination and rolled
/// back rewrote the source record with its location unchanged; a commit racing with it
/// lost its compare-and-swap and reported `COMMIT_CONFLICT` although its base was still
/// the current location. The commit must re-evaluate and land.
#[tokio::test]
async fn commit_survives_a_rewrite_that_keeps_its_base() {
    let (raw, env) = memory_env().await;
    let (id, metadata, base) = env.registered("rewritten").await;
    let (_, new) = env.successor(&metadata, 2).await;
    let hooked = Arc::new(Hooked::new(
        raw.clone(),
        Interfere {
            calls: AtomicUsize::new(0),
            at: 1, // the commit's put (call 0 reads the pointer)
            interfere: Box::new({
                let id = id.clone();
                move |store| Box::pin(rewrite_in_place(store, id.clone()))
            }),
        },
    ));
    let catalog = catalog_over(hooked, &env.warehouse, false);
    let done = catalog
        .commit(&id, Some(&source(2)), &base, &new)
        .await
        .expect("the base is still current: the commit lands");
    assert!(!done.already_applied);
    assert_eq!(env.current(&id).await, new);
}

/// A commit whose put landed but whose response said `Precondition` (an SDK retry after
/// a lost response) is resolved by reading back: acknowledged, applied once.
#[tokio::test]
async fn commit_put_that_lands_and_reports_a_conflict_is_acknowledged() {
    for fault in [Fault::ApplyThenConflict, Fault::ApplyThenAmbiguous] {
        let (raw, env) = memory_env().await;
        let (id, metadata, base) = env.registered("lied").await;
        let (_, new) = env.successor(&metadata, 2).await;
        let faulty = Arc::new(FaultyStore::new(raw.clone(), FaultConfig::none(1)));
        let (catalog, at) = claimed_over(&faulty, &env.warehouse).await;
        faulty.script(at + 1, fault); // call 0 reads the pointer, call 1 is the put
        let done = catalog
            .commit(&id, Some(&source(2)), &base, &new)
            .await
            .expect("resolved by read-back");
        assert!(!done.already_applied, "{fault:?}");
        assert_eq!(faulty.applied_writes().len(), 1, "{fault:?}: applied once");
        assert_eq!(env.current(&id).await, new);
    }
}

/// A register whose create landed but answered `AlreadyExists` is acknowledged.
#[tokio::test]
async fn register_create_that_lands_and_reports_already_exists_is_acknowledged() {
    let (raw, env) = memory_env().await;
    let namespace = env.namespace("lied").await;
    let id = IndexIdentifier::new(namespace, "x").expect("valid");
    let (_, location) = env.new_index().await;
    let faulty = Arc::new(FaultyStore::new(raw.clone(), FaultConfig::none(1)));
    let (catalog, at) = claimed_over(&faulty, &env.warehouse).await;
    faulty.script(at + 2, Fault::ApplyThenConflict); // namespace, pointer, then the create
    catalog
        .register(&id, Some(&source(1)), &location)
        .await
        .expect("resolved by read-back");
    assert_eq!(faulty.applied_writes().len(), 1);
}

/// When the write landed and every read-back fails, the answer is `COMMIT_STATE_UNKNOWN`
/// (never a definite failure), and a retry of the same commit finds it applied.
#[tokio::test]
async fn unresolvable_outcome_is_commit_state_unknown() {
    let (raw, env) = memory_env().await;
    let (id, metadata, base) = env.registered("unknown").await;
    let (_, new) = env.successor(&metadata, 2).await;
    let faulty = Arc::new(FaultyStore::new(raw.clone(), FaultConfig::none(1)));
    let (catalog, at) = claimed_over(&faulty, &env.warehouse).await;
    faulty.script(at + 1, Fault::ApplyThenAmbiguous);
    for call in 2..40 {
        faulty.script(at + call, Fault::FailBefore);
    }
    let err = catalog
        .commit(&id, Some(&source(2)), &base, &new)
        .await
        .expect_err("unresolvable");
    assert_eq!(err.kind(), ErrorKind::CommitStateUnknown, "{err}");
    let again = env
        .catalog
        .commit(&id, Some(&source(2)), &base, &new)
        .await
        .expect("retry");
    assert!(again.already_applied);
    // The new metadata file is still there: nothing the writer wrote was deleted.
    env.read(&new).await;
}

/// The step-wise rename: step 1 (source `moving`) landed, then every read fails. The
/// rename may still complete (the next touch of the source settles it), so its answer
/// must be `COMMIT_STATE_UNKNOWN`, not a definite failure.
#[tokio::test]
async fn step_wise_rename_that_cannot_settle_is_commit_state_unknown() {
    let (raw, env, from, location, to) = rename_env("moving").await;
    let faulty = step_wise(&raw);
    let (catalog, at) = claimed_over(&faulty, &env.warehouse).await;
    // Calls: 0 read source, 1 namespace, 2 read destination, 3 step 1; then fail reads.
    for call in 4..40 {
        faulty.script(at + call, Fault::FailBefore);
    }
    let err = catalog.rename(&from, &to).await.expect_err("cannot settle");
    assert_eq!(err.kind(), ErrorKind::CommitStateUnknown, "{err}");
    // The next mutation of the source completes the rename.
    let fresh = catalog_over(raw.clone(), &env.warehouse, false);
    let dropped = fresh.drop_index(&from).await;
    assert_eq!(dropped.map_err(|e| e.kind()), Err(ErrorKind::IndexNotFound));
    assert_eq!(
        fresh.load(&to).await.expect("renamed").metadata_location,
        location
    );
}

/// A rename that landed must not be reported as failed because the read that builds its
/// answer failed (or found the destination already dropped again): the caller would
/// retry a rename that is done.
#[tokio::test]
async fn landed_rename_is_acknowledged_even_if_the_read_after_it_fails() {
    for hide_transact in [false, true] {
        let (raw, env, from, location, to) = rename_env("landed").await;
        let config = if hide_transact {
            FaultConfig::none(1).hiding_transact()
        } else {
            FaultConfig::none(1)
        };
        let faulty = Arc::new(FaultyStore::new(raw.clone(), config));
        let (catalog, at) = claimed_over(&faulty, &env.warehouse).await;
        // Fail every call after the rename is known to have landed. Atomic: 0 source,
        // 1 namespace, 2 destination, 3 transaction. Step-wise: 0-2 the same, 3 step 1,
        // 4-8 settle (read the destination, claim the source, create the destination,
        // read it, tombstone the source), 9 confirm.
        let writes_before_answer = if hide_transact { 10 } else { 4 };
        for call in writes_before_answer..60 {
            faulty.script(at + call, Fault::FailBefore);
        }
        let pointer = catalog.rename(&from, &to).await.unwrap_or_else(|err| {
            panic!("hide transact {hide_transact}: the rename landed: {err}")
        });
        assert_eq!(pointer.metadata_location, location);
        assert_eq!(pointer.identifier, to);
        assert_eq!(
            env.catalog
                .load(&to)
                .await
                .expect("moved")
                .metadata_location,
            location
        );
    }
}

/// The atomic rename: the transaction landed but answered `Ambiguous` (or the lost
/// condition of a retried request), and every read-back fails. The rename may have landed,
/// so the answer must be `COMMIT_STATE_UNKNOWN`.
#[tokio::test]
async fn atomic_rename_that_cannot_be_read_back_is_commit_state_unknown() {
    for fault in [Fault::ApplyThenAmbiguous, Fault::ApplyThenConflict] {
        let (raw, env, from, location, to) = rename_env("atomic").await;
        let faulty = Arc::new(FaultyStore::new(raw.clone(), FaultConfig::none(1)));
        let (catalog, at) = claimed_over(&faulty, &env.warehouse).await;
        // 0 source, 1 namespace, 2 destination, 3 the transaction; then reads fail.
        faulty.script(at + 3, fault);
        for call in 4..60 {
            faulty.script(at + call, Fault::FailBefore);
        }
        let err = catalog
            .rename(&from, &to)
            .await
            .expect_err("cannot be read back");
        assert_eq!(
            err.kind(),
            ErrorKind::CommitStateUnknown,
            "{fault:?}: {err}"
        );
        assert_eq!(
            env.catalog
                .load(&to)
                .await
                .expect("it did land")
                .metadata_location,
            location
        );
    }
}

/// Found by the linearizability check: a rename read its source (present), then its
/// destination (present) — but in between another client had renamed the source onto the
/// destination. `ALREADY_EXISTS` claims both existed at one instant, which never happened;
/// at the time of the second read the answer is `INDEX_NOT_FOUND`.
#[tokio::test]
async fn rename_reports_already_exists_only_if_both_existed_at_once() {
    let (raw, env, from, _, to) = rename_env("coexist").await;
    let warehouse = env.warehouse.clone();
    let hooked = Arc::new(Hooked::new(
        raw.clone(),
        Interfere {
            calls: AtomicUsize::new(0),
            at: 2, // 0 reads the source, 1 the namespace, 2 the destination
            interfere: Box::new({
                let (from, to) = (from.clone(), to.clone());
                move |store| {
                    let (from, to, warehouse) = (from.clone(), to.clone(), warehouse.clone());
                    Box::pin(async move {
                        let other = catalog_over(store, &warehouse, false);
                        other.rename(&from, &to).await.expect("the other rename");
                    })
                }
            }),
        },
    ));
    let catalog = catalog_over(hooked, &env.warehouse, false);
    let err = catalog
        .rename(&from, &to)
        .await
        .expect_err("the source is gone");
    assert_eq!(err.kind(), ErrorKind::IndexNotFound, "{err}");
}

/// Drops `id` (through a catalog of its own) right after the first read of its pointer,
/// before the call that follows it.
struct DropAfterFirstRead {
    id: IndexIdentifier,
    warehouse: Warehouse,
    read: AtomicBool,
    dropped: AtomicBool,
}

#[async_trait]
impl Hook for DropAfterFirstRead {
    async fn before(
        &self,
        inner: &Arc<dyn PointerStore>,
        call: Call<'_>,
    ) -> Result<(), StoreError> {
        if self.read.load(Ordering::SeqCst) && !self.dropped.swap(true, Ordering::SeqCst) {
            let other = catalog_over(inner.clone(), &self.warehouse, false);
            other.drop_index(&self.id).await.expect("the rival drop");
        }
        if matches!(call, Call::Get { key } if *key == self.id.store_key()) {
            self.read.store(true, Ordering::SeqCst);
        }
        Ok(())
    }
}

/// Found by the linearizability check (DynamoDB): `rename(x, x)` read `x` live, then a
/// rival dropped it before the destination read, which found `x` free. The rename then sent
/// one transaction writing `x` twice, which the store refused (`STORE_REFUSED`). The source
/// existing at the first read makes the destination exist then too: `ALREADY_EXISTS`.
#[tokio::test]
async fn rename_onto_itself_is_already_exists_even_if_dropped_meanwhile() {
    for atomic in [true, false] {
        let (raw, env) = memory_env().await;
        let (from, _, _) = env.registered("itself").await;
        let inner: Arc<dyn PointerStore> = if atomic { raw.clone() } else { step_wise(&raw) };
        let hooked: Arc<dyn PointerStore> = Arc::new(Hooked::new(
            inner,
            DropAfterFirstRead {
                id: from.clone(),
                warehouse: env.warehouse.clone(),
                read: AtomicBool::new(false),
                dropped: AtomicBool::new(false),
            },
        ));
        let catalog = catalog_over(hooked, &env.warehouse, false);
        let err = catalog
            .rename(&from, &from)
            .await
            .expect_err("a rename onto itself never moves");
        assert_eq!(
            err.kind(),
            ErrorKind::AlreadyExists,
            "atomic {atomic}: {err}"
        );
    }
}

/// Found by the linearizability check (memory store, step-wise rename, faults): a renamer
/// read its destination free, then stalled before creating it. Meanwhile a rival took the
/// destination, a settler saw it taken and rolled the source back to `live`, and the rival
/// dropped the destination again. The renamer then created the destination from its stale
/// view and reported success: the index was visible at both names.
#[tokio::test]
async fn stale_renamer_cannot_complete_a_rolled_back_rename() {
    // Interfere before the renamer re-claims the source (call 5), and after it (call 6,
    // right before it creates the destination).
    for at in [5, 6] {
        stale_renamer(at).await;
    }
}

async fn stale_renamer(at: usize) {
    let (raw, env, from, location, to) = rename_env("stale").await;
    let warehouse = env.warehouse.clone();
    let rival_metadata = env.new_index().await.1;
    let hidden = step_wise(&raw);
    let hooked = Arc::new(Hooked::new(
        hidden.clone(),
        Interfere {
            calls: AtomicUsize::new(0),
            // 0 source, 1 namespace, 2 destination, 3 step 1, 4 destination again, then
            // (before the fix: 5 step 2) 5 the claim of the source, 6 step 2.
            at,
            interfere: Box::new({
                let (from, to) = (from.clone(), to.clone());
                move |store| {
                    let (from, to, warehouse, rival) = (
                        from.clone(),
                        to.clone(),
                        warehouse.clone(),
                        rival_metadata.clone(),
                    );
                    Box::pin(async move {
                        let other = catalog_over(store, &warehouse, false);
                        other
                            .register(&to, Some(&source(1)), &rival)
                            .await
                            .expect("the rival takes the destination");
                        // Touching the source settles the rename: the destination is taken, so
                        // it rolls back (the rename onto itself then finds it existing).
                        let settled = other.rename(&from, &from).await;
                        assert_eq!(
                            settled.map_err(|e| e.kind()).err(),
                            Some(ErrorKind::AlreadyExists)
                        );
                        other
                            .drop_index(&to)
                            .await
                            .expect("the rival drops it again");
                    })
                }
            }),
        },
    ));
    let catalog = catalog_over(hooked, &env.warehouse, false);
    let renamed = catalog.rename(&from, &to).await;
    let fresh = catalog_over(raw.clone(), &env.warehouse, false);
    let at_from = fresh.load(&from).await.ok().map(|p| p.metadata_location);
    let at_to = fresh.load(&to).await.ok().map(|p| p.metadata_location);
    match renamed {
        Ok(_) => assert_eq!(
            (at_from, at_to.as_deref()),
            (None, Some(location.as_str())),
            "renamed (at {at})"
        ),
        Err(err) => {
            assert_eq!(err.kind(), ErrorKind::AlreadyExists, "{err}");
            assert_eq!(
                (at_from.as_deref(), at_to),
                (Some(location.as_str()), None),
                "rolled back (at {at})"
            );
        }
    }
}

/// Found by the long linearizability run (16 clients × 2000 operations, step-wise rename,
/// faults): a slow renamer confirmed its landed rename by looking for its commit id in the
/// destination's history — but the destination had been written more than `HISTORY` times
/// since and had forgotten it, so the renamer reported `ALREADY_EXISTS` for a rename that
/// had moved the index.
#[tokio::test]
async fn renamer_outlived_by_its_destination_history_still_reports_success() {
    let (raw, env, from, location, to) = rename_env("forgotten").await;
    let hidden = step_wise(&raw);
    let hooked = Arc::new(Hooked::new(
        hidden.clone(),
        Interfere {
            calls: AtomicUsize::new(0),
            // 0 source, 1 namespace, 2 destination, 3 step 1, 4 destination, 5 claim,
            // 6 create the destination, 7 destination (landed), 8 step 3, 9 the confirmation.
            at: 9,
            interfere: Box::new({
                let to = to.clone();
                move |store| {
                    let to = to.clone();
                    Box::pin(async move {
                        // Others drop the destination, register it again and commit to it
                        // more times than it remembers.
                        let key = to.store_key();
                        let current = store.get(&key).await.expect("read").expect("present");
                        let record = PointerRecord::from_bytes(&current.value).expect("record");
                        let tombstone =
                            record.successor(PointerState::Dropped, uuid::Uuid::new_v4(), 1);
                        let version = store
                            .put(
                                &key,
                                Bytes::from(tombstone.to_bytes()),
                                PutMode::Update(current.version),
                            )
                            .await
                            .expect("dropped");
                        let again = PointerRecord::created(
                            Some(&tombstone),
                            record.metadata_location.clone(),
                            record.source.clone(),
                            uuid::Uuid::new_v4(),
                            2,
                        );
                        store
                            .put(
                                &key,
                                Bytes::from(again.to_bytes()),
                                PutMode::Update(version),
                            )
                            .await
                            .expect("registered again");
                        for _ in 0..parqdb_catalog::catalog::record::HISTORY {
                            rewrite_in_place(store.clone(), to.clone()).await;
                        }
                    })
                }
            }),
        },
    ));
    let catalog = catalog_over(hooked, &env.warehouse, false);
    let pointer = catalog
        .rename(&from, &to)
        .await
        .expect("the rename landed and must be reported so");
    assert_eq!(pointer.metadata_location, location);
    let fresh = catalog_over(raw.clone(), &env.warehouse, false);
    assert!(fresh.load(&from).await.is_err());
    assert_eq!(
        fresh.load(&to).await.expect("moved").metadata_location,
        location
    );
}

/// A store hook: another writer rewrites a record in place (same content, a new commit id,
/// as a rename that rolled back does) just before every conditional update of it: every
/// update loses, and the record keeps changing.
struct Rival;

impl Rival {
    async fn rewrite(store: &Arc<dyn PointerStore>, key: &StoreKey) {
        let Ok(Some(current)) = store.get(key).await else {
            return;
        };
        let value = if key.as_str().starts_with("i/") {
            let record = PointerRecord::from_bytes(&current.value).expect("pointer record");
            record
                .successor(record.state, uuid::Uuid::new_v4(), record.updated_ms)
                .to_bytes()
        } else if key.as_str().starts_with("n/") {
            let record = NamespaceRecord::from_bytes(&current.value).expect("namespace record");
            NamespaceRecord::new(
                Some(&record),
                record.exists,
                record.properties.clone(),
                uuid::Uuid::new_v4(),
                record.updated_ms,
            )
            .to_bytes()
        } else {
            return;
        };
        store
            .put(key, Bytes::from(value), PutMode::Update(current.version))
            .await
            .expect("the rival's write");
    }
}

#[async_trait]
impl Hook for Rival {
    async fn before(
        &self,
        inner: &Arc<dyn PointerStore>,
        call: Call<'_>,
    ) -> Result<(), StoreError> {
        match call {
            Call::Put {
                key,
                mode: PutMode::Update(_),
            } => {
                Rival::rewrite(inner, key).await;
            }
            Call::Transact { writes } => {
                for write in writes {
                    if matches!(write.mode, PutMode::Update(_)) {
                        Rival::rewrite(inner, &write.key).await;
                    }
                }
            }
            _ => {}
        }
        Ok(())
    }
}

/// Issue 17, item 5: an operation that keeps losing its conditional write to a record
/// that keeps changing gives up with `CONCURRENT_MODIFICATION` (retryable, nothing
/// applied) — not `COMMIT_CONFLICT`, which means "the supplied base is no longer current".
#[tokio::test]
async fn operations_that_keep_losing_give_up_with_concurrent_modification() {
    let (raw, env) = memory_env().await;
    let (index, base, base_location) = env.registered("contended").await;
    let (_, next_location) = env.successor(&base, 2).await;
    let child = index.namespace().child("child").expect("valid");
    env.catalog
        .create_namespace(&child, BTreeMap::new())
        .await
        .expect("child");
    let contended = catalog_over(
        Arc::new(Hooked::new(raw.clone(), Rival)),
        &env.warehouse,
        false,
    );
    let to = IndexIdentifier::new(index.namespace().clone(), "to").expect("valid");
    let results = [
        ("drop", contended.drop_index(&index).await.err()),
        (
            "commit whose base stays current",
            contended
                .commit(&index, None, &base_location, &next_location)
                .await
                .err(),
        ),
        (
            "drop namespace",
            contended.drop_namespace(&child).await.err(),
        ),
        ("rename", contended.rename(&index, &to).await.err()),
    ];
    for (what, err) in results {
        let err =
            err.unwrap_or_else(|| panic!("{what}: succeeded against a rival that always wins"));
        assert_eq!(
            err.kind(),
            ErrorKind::ConcurrentModification,
            "{what}: {err}"
        );
        assert!(err.is_retryable(), "{what}");
    }
    // Nothing was applied.
    assert_eq!(env.current(&index).await, base_location);
    assert!(env.catalog.namespace_exists(&child).await.expect("exists"));
    assert_eq!(
        env.catalog.load(&to).await.map_err(|e| e.kind()).err(),
        Some(ErrorKind::IndexNotFound)
    );
}

/// The tests on the S3-compatible server (`PARQDB_TEST_S3_ENDPOINT`): the whole suite
/// runs them, the fast tier does not (`tests/it/tiers.txt`).
mod s3 {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn s3_chain_under_faults() {
        chain_under_faults(Backend::S3, 0.10, 7, 4, 5).await;
    }
}

/// The tests with pointers in DynamoDB Local (`PARQDB_TEST_DYNAMODB_ENDPOINT`): the whole
/// suite runs them, the fast tier does not (`tests/it/tiers.txt`).
mod dynamodb {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn dynamodb_chain_under_faults() {
        chain_under_faults(Backend::DynamoDb, 0.10, 7, 4, 5).await;
    }
}
