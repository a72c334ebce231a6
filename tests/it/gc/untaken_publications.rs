//! Rule N: a settled change-log entry whose write this pointer store never took keeps what
//! it publishes, until the store shows the write or `init --adopt` says the store is the
//! catalog. A block-level clone of a store's disk (a VM or EBS snapshot, `dd`) keeps its
//! inode and birth time, so it passes every ownership check; mounted on another host that
//! shares the warehouse, its collector saw none of the owner's later writes and deleted
//! them (GC round 109, F1). Commit links keep busy indexes collectable: a write the store
//! took shows which commit it replaced, however many commits ago its record forgot it.
#![allow(clippy::disallowed_methods)] // tests may read the wall clock and draw random ids (unique names)

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use object_store::ObjectStoreExt;

use async_trait::async_trait;
use parqdb_catalog::SeededIds;
use parqdb_catalog::gc::{self, GarbageCollector};
use parqdb_catalog::store::LocalStore;
use parqdb_catalog::store::{PointerStore, StoreError};
use parqdb_catalog::{Catalog, IndexCatalog};
use parqdb_catalog_testkit::store::{Call, Hook, Hooked};

use crate::support::gc::hooked_store::HookedStore;
use crate::support::gc::{Backend, Env, HOUR, Layout, MINUTE, copy_dir, test_config};
use parqdb_catalog::{IndexIdentifier, IndexMetadata};

/// A copy of a store that reports the original's location, as a clone of its disk does
/// (same path, inode and birth time).
struct PosingAs(Option<String>);

#[async_trait]
impl Hook for PosingAs {
    async fn before(
        &self,
        _inner: &Arc<dyn PointerStore>,
        _call: Call<'_>,
    ) -> Result<(), StoreError> {
        Ok(())
    }

    fn location(&self, _inner: Option<String>) -> Option<String> {
        self.0.clone()
    }
}

/// A store whose pointer writes never return: the writer is killed between its change-log
/// entry and its write.
struct WritesHang;

#[async_trait]
impl Hook for WritesHang {
    async fn before(
        &self,
        _inner: &Arc<dyn PointerStore>,
        call: Call<'_>,
    ) -> Result<(), StoreError> {
        if matches!(call, Call::Put { .. } | Call::Transact { .. }) {
            std::future::pending::<()>().await;
        }
        Ok(())
    }
}

/// A catalog on `env`'s store whose pointer writes never return (no probe first).
fn hanging_writer(env: &Env, seed: u64) -> Catalog {
    Catalog::builder(
        Arc::new(Hooked::new(env.pointer_store.clone(), WritesHang)),
        env.warehouse.clone(),
    )
    .clock(env.clock.clone())
    .ids(Arc::new(SeededIds::new(seed)))
    .probe_on_first_write(false)
    .build()
}

/// Run `operation` of a [`hanging_writer`] until it hangs in its pointer write, and kill it
/// there (after its change-log entry).
async fn killed_in_its_write<T: std::fmt::Debug>(
    operation: impl std::future::Future<Output = parqdb_catalog::Result<T>>,
) {
    let killed = tokio::time::timeout(Duration::from_millis(500), operation).await;
    assert!(killed.is_err(), "the writer hung in its write: {killed:?}");
}

/// Commit `id` from `head` (its metadata and location) to a successor under `tag` that
/// keeps one snapshot, through `catalog`: the successor and its location.
async fn commit_successor(
    env: &Env,
    catalog: &Catalog,
    id: &IndexIdentifier,
    head: (&IndexMetadata, &str),
    tag: &str,
) -> (IndexMetadata, String) {
    let next = Layout::under(tag);
    let (successor, at) = env.successor(head.0, &next, Some(1)).await;
    catalog
        .commit(id, Some(&next.source), head.1, &at)
        .await
        .expect("committed");
    (successor, at)
}

/// The warehouse's objects under `prefix`.
async fn objects_under(env: &Env, prefix: &str) -> BTreeSet<String> {
    env.objects()
        .await
        .into_iter()
        .filter(|name| name.starts_with(prefix))
        .collect()
}

/// Wait until the change log holds `count` entries (a writer held at its pointer write
/// has logged its own): a condition, not a time.
async fn entries_logged(env: &Env, count: usize) {
    tokio::time::timeout(Duration::from_secs(30), async {
        while objects_under(env, "_gc/changes/").await.len() < count {
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("the writer logs its entry");
}

/// A catalog on `store` over `env`'s warehouse (a process of its own: no cached check).
fn catalog_on(env: &Env, store: Arc<dyn PointerStore>, seed: u64) -> Catalog {
    Catalog::builder(store, env.warehouse.clone())
        .clock(env.clock.clone())
        .ids(Arc::new(SeededIds::new(seed)))
        .build()
}

/// Round 109, F1: a clone of the owner's store (it passes the ownership check) collects
/// hourly for three days while the owner writes on and does not collect. The owner's
/// index registered after the clone, and the commit that replaced the clone's view of an
/// earlier one, stay whole; every run of the clone says what it keeps and why.
#[tokio::test]
async fn redteam109_a_clone_that_passes_for_the_store_never_collects_the_owners_later_writes() {
    let env = Env::open(Backend::Local, 2700).await;
    let config = test_config();
    let (early, metadata, v1) = env.register("early", &Layout::under("early/1")).await;
    let store = env.local_dir.clone().expect("local").join("_catalog");
    let disk = tempfile::tempdir().expect("clone");
    copy_dir(&store, disk.path());
    let owner_location = env.pointer_store.location().await.expect("location");
    let clone: Arc<dyn PointerStore> = Arc::new(Hooked::new(
        Arc::new(LocalStore::new(disk.path())),
        PosingAs(owner_location),
    ));
    // The owner writes on: a new index, and a commit of the early one.
    env.advance(MINUTE);
    let later = Layout::under("later/1");
    let (_, _, location) = env.register("later", &later).await;
    let next = Layout::under("early/2");
    env.commit_away(&early, &metadata, &v1, &next).await;
    let current = env
        .catalog
        .load(&early)
        .await
        .expect("loaded")
        .metadata_location;
    let watched: Vec<String> = later
        .files()
        .into_iter()
        .chain(next.files())
        .chain([env.relative(&location), env.relative(&current)])
        .collect();
    let mut unwarned = Vec::new();
    for hour in 0..3 * 24 {
        env.advance(HOUR);
        let report = GarbageCollector::new(catalog_on(&env, clone.clone(), 2701), config.clone())
            .expect("collector")
            .collect(env.now())
            .await
            .expect("the clone passes for the store and collects");
        assert!(
            env.all_exist(&watched).await,
            "hour {hour}: the clone deleted {:?}",
            env.missing(&watched).await
        );
        if !report
            .warnings
            .iter()
            .any(|w| w.contains("this pointer store never took"))
        {
            unwarned.push((hour, report.warnings));
        }
    }
    assert!(
        unwarned.is_empty(),
        "runs without the warning: {unwarned:?}"
    );
}

/// A writer killed between its change-log entry and its pointer write leaves a publication
/// no store took: what it names is kept (a leak, reported in every run, never a deletion)
/// until `init --adopt` says the store is the catalog; then it is collected after a full
/// retention.
#[tokio::test]
async fn a_publication_whose_writer_never_wrote_is_kept_until_adopted() {
    let env = Env::open(Backend::Memory, 2710).await;
    let config = test_config();
    let (id, metadata, v1) = env.register("killed", &Layout::under("killed/1")).await;
    let next = Layout::under("killed/2");
    let (_, orphan) = env.successor(&metadata, &next, None).await;
    let hanging = hanging_writer(&env, 2711);
    let logged = |objects: Vec<String>| {
        objects
            .into_iter()
            .filter(|name| name.starts_with("_gc/changes/"))
            .count()
    };
    let before = logged(env.objects().await);
    env.advance(MINUTE);
    killed_in_its_write(hanging.commit(&id, Some(&next.source), &v1, &orphan)).await;
    assert_eq!(
        logged(env.objects().await),
        before + 1,
        "its change-log entry is stored"
    );
    let kept: Vec<String> = next
        .files()
        .into_iter()
        .chain([env.relative(&orphan)])
        .collect();
    for _ in 0..12 {
        env.advance(HOUR);
        let report = env.collect(&config).await;
        assert!(
            report
                .warnings
                .iter()
                .any(|w| w.contains("this pointer store never took")),
            "{:?}",
            report.warnings
        );
        assert!(env.all_exist(&kept).await, "{:?}", env.missing(&kept).await);
    }
    env.advance(MINUTE);
    gc::adopt(&env.catalog, env.now()).await.expect("adopted");
    for _ in 0..12 {
        env.advance(HOUR);
        env.collect(&config).await;
    }
    assert!(env.none_exist(&kept).await, "collected after the adoption");
    assert_eq!(
        env.catalog
            .load(&id)
            .await
            .expect("loaded")
            .metadata_location,
        v1
    );
}

/// An index that commits more often between two runs than its record remembers
/// (`HISTORY`) is collected all the same: the links of the commits the store took lead
/// back through every commit it replaced.
#[tokio::test]
async fn a_busy_index_whose_records_forgot_commits_between_runs_is_collected() {
    let env = Env::open(Backend::Memory, 2720).await;
    let config = test_config();
    let (id, mut metadata, mut location) = env.register("busy", &Layout::under("busy/0")).await;
    env.collect(&config).await;
    let mut superseded = vec![env.relative(&location)];
    for n in 1..=40 {
        env.advance(1_000);
        let (successor, at) = commit_successor(
            &env,
            &env.catalog,
            &id,
            (&metadata, &location),
            &format!("busy/{n}"),
        )
        .await;
        superseded.push(env.relative(&at));
        (metadata, location) = (successor, at);
    }
    superseded.pop();
    for _ in 0..24 {
        env.advance(10 * MINUTE);
        let report = env.collect(&config).await;
        assert!(
            !report
                .warnings
                .iter()
                .any(|w| w.contains("this pointer store never took")),
            "{:?}",
            report.warnings
        );
    }
    assert!(
        env.none_exist(&superseded).await,
        "left: {:?}",
        superseded.len() - env.missing(&superseded).await.len()
    );
    assert!(env.exists(&env.relative(&location)).await);
}

/// A clone of the owner's store, and a collector on it while the owner does not collect.
struct ClonedStore {
    store: Arc<dyn PointerStore>,
    _disk: tempfile::TempDir,
}

impl ClonedStore {
    /// A block-level copy of `env`'s local store as it is now.
    async fn of(env: &Env) -> ClonedStore {
        let store = env.local_dir.clone().expect("local").join("_catalog");
        let disk = tempfile::tempdir().expect("clone");
        copy_dir(&store, disk.path());
        let owner_location = env.pointer_store.location().await.expect("location");
        ClonedStore {
            store: Arc::new(Hooked::new(
                Arc::new(LocalStore::new(disk.path())),
                PosingAs(owner_location),
            )),
            _disk: disk,
        }
    }

    fn catalog(&self, env: &Env) -> Catalog {
        catalog_on(env, self.store.clone(), 2790)
    }

    /// One run of a collector on the clone, now.
    async fn collect(&self, env: &Env) -> gc::GcReport {
        GarbageCollector::new(self.catalog(env), gc::GcConfig::default())
            .expect("collector")
            .collect(env.now())
            .await
            .expect("the clone collects")
    }

    /// Collect on the clone daily for `days`; the first of `watched` it deleted, if any.
    async fn collect_daily(&self, env: &Env, days: usize, watched: &[String]) -> Vec<String> {
        for _ in 0..days {
            env.advance(24 * HOUR);
            self.collect(env).await;
            let missing = env.missing(watched).await;
            if !missing.is_empty() {
                return missing;
            }
        }
        Vec::new()
    }
}

/// The owner's index `a` when its store was cloned, and what the owner's commit of it to
/// `next` an hour later reaches (the new metadata and `next`'s files).
struct ClonedThenCommitted {
    clone: ClonedStore,
    id: IndexIdentifier,
    /// `a`'s first metadata and its location, which the clone still points at.
    cloned: (IndexMetadata, String),
    watched: Vec<String>,
}

impl ClonedThenCommitted {
    async fn on(env: &Env, next: &Layout) -> ClonedThenCommitted {
        let (id, metadata, v1) = env.register("a", &Layout::under("a/1")).await;
        let clone = ClonedStore::of(env).await;
        env.advance(HOUR);
        env.commit_away(&id, &metadata, &v1, next).await;
        let current = env
            .catalog
            .load(&id)
            .await
            .expect("loaded")
            .metadata_location;
        let watched = next
            .files()
            .into_iter()
            .chain([env.relative(&current)])
            .collect();
        ClonedThenCommitted {
            clone,
            id,
            cloned: (metadata, v1),
            watched,
        }
    }

    /// `on`, and then the owner's collector runs once, an hour later (its entry taken).
    async fn collected_by_owner(env: &Env, next: &Layout) -> ClonedThenCommitted {
        let cloned = ClonedThenCommitted::on(env, next).await;
        env.advance(HOUR);
        env.collect_completed(&gc::GcConfig::default()).await;
        cloned
    }

    /// The clone's writer commits its own successors of `a`, a minute apart, more often
    /// than a record remembers.
    async fn commit_on_the_clone_past_a_records_memory(&self, env: &Env) {
        let writer = self.clone.catalog(env);
        let mut head = self.cloned.clone();
        for n in 0..=parqdb_catalog::catalog::record::HISTORY {
            env.advance(MINUTE);
            let tag = format!("a/clone{n}");
            head = commit_successor(env, &writer, &self.id, (&head.0, &head.1), &tag).await;
        }
    }
}

/// Round 111, F1: the owner's later snapshot names a family reference (centroids) that an
/// engine writes afterwards as a file that is no index metadata. The clone cannot tell
/// what the owner's publication names any more; its untaken entry must still keep
/// everything, not be pruned (it was, and the clone's collector deleted the owner's
/// current metadata and tables).
#[tokio::test]
async fn redteam111_an_untaken_publication_whose_names_became_unknown_is_not_pruned() {
    let env = Env::open(Backend::Local, 2730).await;
    let mut next = Layout::under("a/2");
    next.centroids_metadata = Some("metadata/centroids-a2.json".to_owned());
    let ClonedThenCommitted { clone, watched, .. } = ClonedThenCommitted::on(&env, &next).await;
    env.advance(MINUTE);
    env.put(
        "metadata/centroids-a2.json",
        b"{\"format\":\"centroids-v1\"}",
    )
    .await;
    let deleted = clone.collect_daily(&env, 24, &watched).await;
    assert!(deleted.is_empty(), "the clone deleted {deleted:?}");
}

/// Round 111, F3: the owner commits and collects once (its entry taken and pruned), then a
/// clone taken before that commit commits the same index more often than a record
/// remembers. That the clone's oldest remembered commit was logged since the owner's run
/// is no evidence that it descends from the owner's commit: the owner's record is away
/// for the clone's collector, which deleted the owner's current metadata and tables.
#[tokio::test]
async fn redteam111_a_busy_clone_does_not_pass_for_the_owners_successor() {
    let env = Env::open(Backend::Local, 2740).await;
    let cloned = ClonedThenCommitted::collected_by_owner(&env, &Layout::under("a/owner")).await;
    cloned.commit_on_the_clone_past_a_records_memory(&env).await;
    let deleted = cloned.clone.collect_daily(&env, 24, &cloned.watched).await;
    assert!(deleted.is_empty(), "the clone deleted {deleted:?}");
}

/// Round 111, F2: a writer killed between its entry and its write leaves an untaken entry
/// (kept until an adoption); the links of the writes after it are pruned all the same — no
/// write ever read its commit, so no link can show it taken — instead of one more link
/// kept per pointer write for as long as the entry stays.
#[tokio::test]
async fn redteam111_a_killed_writers_entry_does_not_keep_every_later_link() {
    let env = Env::open(Backend::Memory, 2750).await;
    let config = test_config();
    let (id, mut metadata, mut location) = env.register("a", &Layout::under("a/0")).await;
    env.advance(MINUTE);
    let hanging = hanging_writer(&env, 2751);
    let stuck = Layout::under("a/stuck");
    let (_, orphan) = env.successor(&metadata, &stuck, None).await;
    killed_in_its_write(hanging.commit(&id, Some(&stuck.source), &location, &orphan)).await;
    let links = async || objects_under(&env, "_gc/links/").await.len();
    let mut most = 0;
    for day in 0..10 {
        for n in 0..5 {
            env.advance(HOUR);
            let (successor, at) = commit_successor(
                &env,
                &env.catalog,
                &id,
                (&metadata, &location),
                &format!("a/{day}-{n}"),
            )
            .await;
            (metadata, location) = (successor, at);
        }
        env.advance(19 * HOUR);
        env.collect_completed(&config).await;
        if day > 0 {
            most = most.max(links().await);
        }
    }
    assert!(
        most <= 5,
        "links kept after a daily run: at most {most} (5 writes a day)"
    );
    assert!(
        env.exists(&env.relative(&orphan)).await,
        "the killed writer's metadata stays until an adoption"
    );
}

/// Round 112, A1: the owner's operator adopts (as the warning about a killed writer's
/// entry says) while a clone of the store collects. The adoption releases only the entries
/// whose publication the owner's store did not take (the killed writer's); the owner's
/// later writes, which the clone lacks, stay judged there and kept.
#[tokio::test]
async fn redteam112_an_adoption_by_the_owner_releases_nothing_a_clone_lacks() {
    let env = Env::open(Backend::Local, 2760).await;
    let ClonedThenCommitted { clone, watched, .. } =
        ClonedThenCommitted::on(&env, &Layout::under("a/2")).await;
    let hanging = hanging_writer(&env, 2761);
    let stuck = Layout::under("b/1");
    let (_, orphan) = env.new_index(&stuck).await;
    let b = env.id("b").await;
    killed_in_its_write(hanging.register(&b, Some(&stuck.source), &orphan)).await;
    env.advance(HOUR);
    gc::adopt(&env.catalog, env.now()).await.expect("adopted");
    let deleted = clone.collect_daily(&env, 24, &watched).await;
    assert!(deleted.is_empty(), "the clone deleted {deleted:?}");
    // The owner collects what the adoption released, after a full retention.
    for _ in 0..10 {
        env.advance(24 * HOUR);
        env.collect_completed(&gc::GcConfig::default()).await;
    }
    assert!(
        env.none_exist(&stuck.files()).await,
        "released and collected"
    );
    assert!(env.all_exist(&watched).await);
}

/// Round 112, L1 and round 113, L3: a commit whose link cannot be stored is not issued (a
/// lost link broke the chain of evidence: first collection stopped for good, then the
/// entries behind it stayed untaken), and its entry is withdrawn: the pointer is unchanged,
/// and the next commit goes on.
#[tokio::test]
async fn redteam113_a_write_whose_link_cannot_be_stored_is_not_issued() {
    let env = Env::open(Backend::Memory, 2770).await;
    let (id, metadata, v1) = env.register("a", &Layout::under("a/1")).await;
    let refusing =
        HookedStore::new(Arc::new(env.sim.clone())).fail_on(|key| key.contains("_gc/links/"));
    let warehouse = parqdb_catalog::Warehouse::new(
        env.warehouse.root(),
        Arc::new(refusing),
        env.warehouse.prefix().clone(),
    )
    .expect("warehouse");
    let writer = Catalog::builder(env.pointer_store.clone(), warehouse)
        .clock(env.clock.clone())
        .ids(Arc::new(SeededIds::new(2771)))
        .build();
    let entries = async || objects_under(&env, "_gc/changes/").await.len();
    let before = entries().await;
    let next = Layout::under("a/2");
    let (_, v2) = env.successor(&metadata, &next, None).await;
    writer
        .commit(&id, Some(&next.source), &v1, &v2)
        .await
        .expect_err("no link, no write");
    assert_eq!(
        env.catalog
            .load(&id)
            .await
            .expect("loaded")
            .metadata_location,
        v1
    );
    assert_eq!(entries().await, before, "its entry is withdrawn");
    env.catalog
        .commit(&id, Some(&next.source), &v1, &v2)
        .await
        .expect("the next commit goes on");
}

/// Round 113, A2: the owner adopts while one of its own commits is in flight (its entry
/// logged, its pointer write landing after the adoption read the records). An adoption
/// releases no entry logged within a publish window and the skew of it, so the clone
/// still keeps that commit's files.
#[tokio::test]
async fn redteam113_an_adoption_racing_a_write_in_flight_releases_nothing_of_it() {
    let env = Env::open(Backend::Local, 2780).await;
    let ClonedThenCommitted { clone, id, .. } =
        ClonedThenCommitted::on(&env, &Layout::under("a/2")).await;
    let current = env.catalog.load(&id).await.expect("loaded");
    let base = env
        .catalog
        .read_metadata(&current.metadata_location)
        .await
        .expect("metadata");
    env.advance(HOUR);
    let next = Layout::under("a/3");
    let (_, v3) = env.successor(&base, &next, Some(1)).await;
    let (slow, gate) = Gate::writer(&env, 2781);
    let in_flight = {
        let (id, source, base, v3) = (
            id.clone(),
            next.source.clone(),
            current.metadata_location.clone(),
            v3.clone(),
        );
        tokio::spawn(async move { slow.commit(&id, Some(&source), &base, &v3).await })
    };
    entries_logged(&env, 3).await;
    gc::adopt(&env.catalog, env.now()).await.expect("adopted");
    gate.add_permits(1);
    tokio::time::timeout(Duration::from_secs(30), in_flight)
        .await
        .expect("the commit ends")
        .expect("task")
        .expect("the commit lands");
    let watched: Vec<String> = next
        .files()
        .into_iter()
        .chain([env.relative(&v3)])
        .collect();
    let deleted = clone.collect_daily(&env, 24, &watched).await;
    assert!(deleted.is_empty(), "the clone deleted {deleted:?}");
}

/// A store whose pointer writes wait until the gate opens (`add_permits`).
struct Gate(Arc<tokio::sync::Semaphore>);

impl Gate {
    /// A writer over `env`'s store whose pointer writes wait at the gate returned.
    fn writer(env: &Env, seed: u64) -> (Catalog, Arc<tokio::sync::Semaphore>) {
        let gate = Arc::new(tokio::sync::Semaphore::new(0));
        let writer = Catalog::builder(
            Arc::new(Hooked::new(env.pointer_store.clone(), Gate(gate.clone()))),
            env.warehouse.clone(),
        )
        .clock(env.clock.clone())
        .ids(Arc::new(SeededIds::new(seed)))
        .probe_on_first_write(false)
        .build();
        (writer, gate)
    }
}

#[async_trait]
impl Hook for Gate {
    async fn before(
        &self,
        _inner: &Arc<dyn PointerStore>,
        call: Call<'_>,
    ) -> Result<(), StoreError> {
        if matches!(call, Call::Put { .. }) {
            let _open = self.0.acquire().await;
        }
        Ok(())
    }
}

/// Round 113, M1: the clone's writer is of an earlier release (it stores no commit links)
/// and commits more often than a record remembers. Nothing links the clone's record back to
/// the commit the owner's run saw, so it is away, and the owner's files are kept.
#[tokio::test]
async fn redteam113_a_busy_clone_without_links_does_not_pass_for_the_owners_successor() {
    let env = Env::open(Backend::Local, 2790).await;
    let cloned = ClonedThenCommitted::collected_by_owner(&env, &Layout::under("a/owner")).await;
    let links = async || objects_under(&env, "_gc/links/").await;
    let owners = links().await;
    cloned.commit_on_the_clone_past_a_records_memory(&env).await;
    for link in links().await.difference(&owners) {
        env.warehouse
            .object_store()
            .delete(&env.warehouse.path(link).expect("path"))
            .await
            .expect("as an earlier release's writer left none");
    }
    let deleted = cloned.clone.collect_daily(&env, 24, &cloned.watched).await;
    assert!(deleted.is_empty(), "the clone deleted {deleted:?}");
}

/// Round 113, M2: the owner adopts with an earlier release, which lists nothing: an epoch
/// without a list releases nothing, so the owner's writes the clone lacks stay judged there.
#[tokio::test]
async fn redteam113_an_adoption_without_a_list_releases_nothing() {
    let env = Env::open(Backend::Local, 2795).await;
    let ClonedThenCommitted { clone, watched, .. } =
        ClonedThenCommitted::on(&env, &Layout::under("a/2")).await;
    env.advance(HOUR);
    let marker = gc::adopt(&env.catalog, env.now()).await.expect("adopted");
    env.warehouse
        .object_store()
        .delete(
            &env.warehouse
                .path(&format!("_gc/adoptions/{:020}.json", marker.created_ms))
                .expect("path"),
        )
        .await
        .expect("as an earlier release's adoption wrote none");
    let deleted = clone.collect_daily(&env, 24, &watched).await;
    assert!(deleted.is_empty(), "the clone deleted {deleted:?}");
}

/// Round 114, F1: after the clone, the owner commits `a` and registers `b`, collects (its
/// entries taken by its store, and pruned) and adopts its own warehouse. The clone reads
/// the owner's adoption as the start of its own epoch; the records the owner's run saw are
/// still to be there: the clone lacks `b` and holds `a` before the owner's commit, so both
/// are away, and it keeps their files (it forgot them, and deleted them).
#[tokio::test]
async fn redteam114_the_owners_adoption_forgives_no_record_on_a_clone() {
    let env = Env::open(Backend::Local, 2800).await;
    let ClonedThenCommitted {
        clone, mut watched, ..
    } = ClonedThenCommitted::on(&env, &Layout::under("a/2")).await;
    let registered = Layout::under("b/1");
    let (b, _, _) = env.register("b", &registered).await;
    let current = env
        .catalog
        .load(&b)
        .await
        .expect("loaded")
        .metadata_location;
    watched.extend(registered.files());
    watched.push(env.relative(&current));
    env.advance(HOUR);
    env.collect_completed(&gc::GcConfig::default()).await;
    assert!(
        !env.objects()
            .await
            .iter()
            .any(|name| name.starts_with("_gc/changes/")),
        "the owner's run pruned the entries its store took"
    );
    env.advance(HOUR);
    gc::adopt(&env.catalog, env.now()).await.expect("adopted");
    let deleted = clone.collect_daily(&env, 24, &watched).await;
    assert!(deleted.is_empty(), "the clone deleted {deleted:?}");
}

/// Round 115, F1: both the owner and a clone of its store commit index `a` (the same
/// workload runs on both hosts). A journal then lists `a` with one store's commit seen
/// and the other's vanished; the owner's operator adopts, as the collector's warning says.
/// The adoption forgives the clone's commit there, not the key: the clone's collector
/// still holds the owner's commit against its record (the owner's run pruned its entry,
/// so rule N no longer does), and keeps the owner's metadata and tables. It deleted them
/// when the adoption forgave the whole key. Twice: the owner adopting after its own run
/// (its journal: its commit seen, the clone's vanished) and right after the clone's
/// (the clone's commit seen, the owner's vanished).
#[tokio::test]
async fn redteam115_an_adoption_forgives_a_commit_not_the_key_both_stores_wrote() {
    for (owner_collects_last, seed) in [(true, 2810), (false, 2815)] {
        let env = Env::open(Backend::Local, seed).await;
        let cloned = ClonedThenCommitted::collected_by_owner(&env, &Layout::under("a/2")).await;
        assert!(
            objects_under(&env, "_gc/changes/").await.is_empty(),
            "the owner's run pruned the entries its store took"
        );
        let (metadata, v1) = &cloned.cloned;
        let writer = cloned.clone.catalog(&env);
        commit_successor(&env, &writer, &cloned.id, (metadata, v1), "a/clone").await;
        env.advance(HOUR);
        let report = cloned.clone.collect(&env).await;
        assert!(
            report
                .warnings
                .iter()
                .any(|warning| warning.contains("does not descend")),
            "the clone's run finds the owner's commit gone: {:?}",
            report.warnings
        );
        if owner_collects_last {
            env.advance(HOUR);
            env.collect_completed(&gc::GcConfig::default()).await;
        }
        env.advance(HOUR);
        gc::adopt(&env.catalog, env.now()).await.expect("adopted");
        let deleted = cloned.clone.collect_daily(&env, 24, &cloned.watched).await;
        assert!(
            deleted.is_empty(),
            "owner collects last: {owner_collects_last}; the clone deleted {deleted:?}"
        );
    }
}

/// Round 114, F2: a write that lands after a run's walk is in no journal of that run, so
/// the run does not count its entry taken: pruned, it left a copy of the store that lacks
/// the write nothing to keep its files by. (A rename's steps have no publish window; here
/// a commit held in flight until the run reads the record again stands for one.) The next
/// run's walk sees the write, and prunes the entry.
#[tokio::test]
async fn redteam114_a_write_landing_after_the_walk_does_not_take_its_entry() {
    let env = Env::open(Backend::Local, 2805).await;
    let (id, metadata, v1) = env.register("a", &Layout::under("a/1")).await;
    env.advance(HOUR);
    let next = Layout::under("a/2");
    let (_, v2) = env.successor(&metadata, &next, Some(1)).await;
    let (slow, gate) = Gate::writer(&env, 2806);
    let (landed_tx, landed) = tokio::sync::oneshot::channel();
    {
        let (id, source, v1, v2) = (id.clone(), next.source.clone(), v1.clone(), v2.clone());
        tokio::spawn(async move {
            let landed = slow.commit(&id, Some(&source), &v1, &v2).await;
            let _ = landed_tx.send(landed.map(|_| ()));
        });
    }
    entries_logged(&env, 2).await;
    let entries = async || objects_under(&env, "_gc/changes/").await;
    let logged = entries().await;
    assert_eq!(logged.len(), 2, "the register's and the commit's entries");
    env.advance(HOUR);
    // The owner's collector: its walk sees `a` at its register; when the run reads `a`
    // again, the commit lands first.
    let lands = LandsWhenRead {
        key: id.store_key(),
        gate,
        landed: tokio::sync::Mutex::new(Some(landed)),
    };
    let collector = catalog_on(
        &env,
        Arc::new(Hooked::new(env.pointer_store.clone(), lands)),
        2807,
    );
    let report = GarbageCollector::new(collector, gc::GcConfig::default())
        .expect("collector")
        .collect(env.now())
        .await
        .expect("collected");
    assert_eq!(report.status, gc::GcStatus::Completed, "{report:?}");
    let current = env
        .catalog
        .load(&id)
        .await
        .expect("loaded")
        .metadata_location;
    assert_eq!(current, v2, "the commit landed during the run");
    let left = entries().await;
    assert_eq!(left.len(), 1, "the commit's entry stays: {left:?}");
    env.advance(HOUR);
    env.collect_completed(&gc::GcConfig::default()).await;
    assert!(entries().await.is_empty(), "the next run's walk took it");
}

/// A store whose first read of `key` waits until the write held at `gate` has landed.
struct LandsWhenRead {
    key: parqdb_catalog::store::StoreKey,
    gate: Arc<tokio::sync::Semaphore>,
    landed: tokio::sync::Mutex<Option<tokio::sync::oneshot::Receiver<parqdb_catalog::Result<()>>>>,
}

#[async_trait]
impl Hook for LandsWhenRead {
    async fn before(
        &self,
        _inner: &Arc<dyn PointerStore>,
        call: Call<'_>,
    ) -> Result<(), StoreError> {
        if let Call::Get { key } = call
            && *key == self.key
            && let Some(landed) = self.landed.lock().await.take()
        {
            self.gate.add_permits(1);
            landed
                .await
                .expect("the writer answers")
                .expect("the commit lands");
        }
        Ok(())
    }
}
