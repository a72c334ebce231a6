//! The garbage collector in a hostile-but-ordinary world: one named test per class of
//! layout that once made it delete live, foreign or outside data (location encodings,
//! foreign writers, nested roots, symbolic links, metadata outside `metadata/`, paused
//! runs with stale leases, the register/delete race), on the local file system, the
//! memory backend and, where the class applies, the S3-compatible server.
//!
//! Time is simulated (a `ManualClock`; every written object is stamped with it, also as
//! the real modification time of local files), so "days later" is one call.
#![allow(clippy::disallowed_methods)] // tests may read the wall clock and draw random ids (unique names)

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use crate::support::gc::hooked_store::{HookedStore, process_over};
use crate::support::gc::{
    Backend, Env, HOUR, Layout, MINUTE, copy_dir, set_mtime, symlink_at, test_config,
};
use bytes::Bytes;
use futures::TryStreamExt;
use object_store::ObjectStoreExt;
use parqdb_catalog::CatalogConfig;
use parqdb_catalog::Warehouse;
use parqdb_catalog::gc::{self, GarbageCollector, GcConfig, GcPhase, GcProgress, GcReport, GcStep};
use parqdb_catalog::{Catalog, IndexCatalog};
use parqdb_catalog::{ErrorKind, IndexIdentifier, Namespace};
use parqdb_catalog_testkit::store::{Call, Hook, Hooked};

/// Characters object_store's `PathPart` percent-encodes that metadata validation accepts.
const HOSTILE_SEGMENTS: [&str; 6] = ["ü", "a b", "~x", "[1]", "{c}^|`", "\"q\"<>*"];

/// Write a layout's files the way another engine does: at the raw keys.
async fn write_raw_tables(env: &Env, layout: &Layout) {
    for name in layout.files() {
        env.put_raw(&name, b"0123456789").await;
    }
}

/// How often the passes run: twice per condemnation delay and grace (10 min) would be
/// finer than any rule needs; every 20 minutes still gives each object several runs in
/// each state (tracked, condemned, deleted) within the 2 h retention, at half the cost on
/// the serialised S3 server (a run there costs about a second).
const PASS_EVERY: i64 = 20 * MINUTE;

/// Run the collector every [`PASS_EVERY`] for `hours`; the reports.
async fn passes(env: &Env, config: &GcConfig, hours: i64) -> Vec<GcReport> {
    let until = env.now() + hours * HOUR;
    let mut reports = Vec::new();
    while env.now() < until {
        env.advance(PASS_EVERY);
        reports.push(env.collect(config).await);
    }
    reports
}

fn deleted(reports: &[GcReport]) -> u64 {
    reports.iter().map(|r| r.counts.deleted.objects).sum()
}

/// A live index whose family file (no metadata) is `family`, written after the index was
/// registered (publication refuses such a file): six hours of runs complete, each saying
/// the file may name anything, and `victim`, which the file names, is still there.
async fn live_family_file_keeps(
    env: &Env,
    config: &GcConfig,
    family: String,
    victim: &str,
    case: &str,
) {
    let mut layout = Layout::under("live/1");
    layout.centroids_metadata = Some("metadata/live/centroids.json".to_owned());
    env.register("live", &layout).await;
    env.put_raw("metadata/live/centroids.json", family.into_bytes().leak())
        .await;
    let reports = passes(env, config, 6).await;
    assert!(
        reports.iter().all(|r| r.status == gc::GcStatus::Completed),
        "{case}"
    );
    assert!(
        reports.iter().all(|r| r.warnings.iter().any(|w| w.contains(
            "`metadata/live/centroids.json`, which live metadata reaches, may name any file"
        ))),
        "{case}: every run says why it keeps everything"
    );
    assert!(
        env.exists_raw(victim).await,
        "{case}: {victim} was deleted while a live family file names it"
    );
}

/// A new index whose tables are at `layout`, written raw; registered under `name`.
async fn register_raw(env: &Env, name: &str, layout: &Layout) -> (IndexIdentifier, String) {
    write_raw_tables(env, layout).await;
    let id = env.id(name).await;
    let metadata = parqdb_catalog::IndexMetadata::create(
        crate::support::gc::contents(layout),
        BTreeMap::new(),
        env.clock.as_ref(),
        env.catalog.ids().as_ref(),
        &parqdb_catalog::family::FamilyRegistry::builtin(),
    )
    .expect("valid metadata");
    let location = env.write_metadata(&metadata).await;
    env.catalog
        .register(&id, Some(&layout.source), &location)
        .await
        .expect("registered");
    (id, location)
}

// ---------------------------------------------------------------------------------------
// 1. Location encoding
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn class1_files_written_raw_at_encoded_locations_are_kept_while_live_and_collected_after() {
    for backend in [Backend::Memory, Backend::Local] {
        class1_files_written_raw_at_encoded_locations_are_kept_while_live_and_collected_after_on(
            backend,
        )
        .await;
    }
}

/// `class1_files_written_raw_at_encoded_locations_are_kept_while_live_and_collected_after` on one backend.
async fn class1_files_written_raw_at_encoded_locations_are_kept_while_live_and_collected_after_on(
    backend: Backend,
) {
    let env = Env::open(backend, 101).await;
    let config = test_config();
    let mut all = Vec::new();
    let mut ids = Vec::new();
    for (n, segment) in HOSTILE_SEGMENTS.iter().enumerate() {
        let layout = Layout {
            centroids: format!("indexes/{segment}/{n}/ivf_centroids/"),
            postings: format!("indexes/{segment}/{n}/ivf postings ~/"),
            ..Layout::under("unused")
        };
        let (id, location) = register_raw(&env, &format!("enc-{n}"), &layout).await;
        all.extend(layout.files());
        all.push(env.relative(&location));
        ids.push(id);
    }
    let reports = passes(&env, &config, 6).await;
    assert_eq!(deleted(&reports), 0, "{backend:?}: a live file was deleted");
    assert!(
        env.all_exist_raw(&all).await,
        "{backend:?}: live files lost"
    );

    // Liveness: once dropped, all of it is collected after retention.
    for id in &ids {
        env.catalog.drop_index(id).await.expect("dropped");
    }
    passes(&env, &config, 5).await;
    assert!(env.none_exist_raw(&all).await, "{backend:?}: garbage left");
}

/// For any location validation accepts, a file another engine wrote there is covered.
#[test]
fn class1_any_accepted_location_covers_what_another_engine_wrote_there() {
    use proptest::prelude::*;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let segment = prop::string::string_regex(
        "[a-zA-Z0-9 ~\\[\\]{}^|`\"<>*!$&'()+,;=@:_.\\-üéß漢字😀\u{00a0}\u{2028}]{1,12}",
    )
    .expect("regex");
    let location = prop::collection::vec(segment, 1..4);
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
        cases: 40,
        ..ProptestConfig::default()
    });
    let seed = std::sync::atomic::AtomicU64::new(1000);
    runner
        .run(&location, |segments| {
            let relative = format!("indexes/{}/", segments.join("/"));
            if parqdb_catalog::family::validate_relative_location(&relative).is_err() {
                return Ok(()); // validation refuses it: nothing to cover
            }
            let seed = seed.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            for backend in [Backend::Memory, Backend::Local] {
                runtime.block_on(async {
                    let env = Env::open(backend, seed).await;
                    let layout = Layout {
                        centroids: format!("{relative}c/"),
                        postings: relative.clone(),
                        ..Layout::under("unused")
                    };
                    register_raw(&env, "p", &layout).await;
                    let reports = passes(&env, &test_config(), 3).await;
                    assert_eq!(deleted(&reports), 0, "{backend:?} {relative:?}");
                    assert!(env.all_exist_raw(&layout.files()).await, "{relative:?}");
                });
            }
            Ok(())
        })
        .expect("every accepted location covers its files");
}

#[tokio::test]
async fn class1_metadata_locations_are_uris_with_one_canonical_form() {
    for backend in [Backend::Memory, Backend::Local] {
        class1_metadata_locations_are_uris_with_one_canonical_form_on(backend).await;
    }
}

/// `class1_metadata_locations_are_uris_with_one_canonical_form` on one backend.
async fn class1_metadata_locations_are_uris_with_one_canonical_form_on(backend: Backend) {
    let env = Env::open(backend, 102).await;
    let layout = Layout::under("uri/1");
    write_raw_tables(&env, &layout).await;
    let metadata = parqdb_catalog::IndexMetadata::create(
        crate::support::gc::contents(&layout),
        BTreeMap::new(),
        env.clock.as_ref(),
        env.catalog.ids().as_ref(),
        &parqdb_catalog::family::FamilyRegistry::builtin(),
    )
    .expect("metadata");
    // Another engine wrote the metadata file under a name that needs escaping.
    let name = "metadata/uri/café b~[1].metadata.json";
    env.put_raw(name, Box::leak(metadata.to_json_vec().into_boxed_slice()))
        .await;
    let escaped = format!(
        "{}/metadata/uri/caf%c3%a9%20b~%5B1%5D.metadata.json",
        env.warehouse.root()
    );
    let id = env.id("uri").await;
    let pointer = env
        .catalog
        .register(&id, Some(&layout.source), &escaped)
        .await
        .expect("an escaped URI registers");
    assert_eq!(pointer.metadata_location, env.warehouse.absolute(name));
    assert_eq!(env.relative(&pointer.metadata_location), name);
    let reports = passes(&env, &test_config(), 4).await;
    assert_eq!(deleted(&reports), 0);
    assert!(
        env.exists_raw(name).await,
        "{backend:?}: the metadata was deleted"
    );
    // Escaped separators and dot segments stay refused.
    for bad in [
        "metadata/a%2Fb.json",
        "metadata/%2e%2e/x.json",
        "metadata//x.json",
    ] {
        let location = format!("{}/{bad}", env.warehouse.root());
        let err = env
            .catalog
            .register(&env.id("bad").await, Some(&layout.source), &location)
            .await
            .expect_err(bad);
        assert_eq!(err.kind(), ErrorKind::InvalidIndexMetadata, "{bad}");
    }
}

// ---------------------------------------------------------------------------------------
// 2. Foreign writers
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn class2_a_second_catalog_cannot_write_into_an_owned_warehouse() {
    for backend in [Backend::Memory, Backend::Local] {
        class2_a_second_catalog_cannot_write_into_an_owned_warehouse_on(backend).await;
    }
}

/// `class2_a_second_catalog_cannot_write_into_an_owned_warehouse` on one backend.
async fn class2_a_second_catalog_cannot_write_into_an_owned_warehouse_on(backend: Backend) {
    let env = Env::open(backend, 201).await;
    let layout = Layout::under("own/1");
    let (owned_id, _, owned_location) = env.register("owned", &layout).await;
    let marker = gc::verify_ownership(&env.catalog).await.expect("owner");

    let foreign = env.foreign_catalog(202);
    let check = |result: parqdb_catalog::Result<()>, what: &str| {
        let err = result.expect_err(what);
        assert_eq!(err.kind(), ErrorKind::WarehouseNotOwned, "{what}: {err}");
        assert!(
            err.message().contains(&marker.catalog_id.to_string()),
            "{what}: the error names the owner: {err}"
        );
    };
    let ns = Namespace::new(["foreign"]).expect("ns");
    check(
        foreign.create_namespace(&ns, BTreeMap::new()).await,
        "namespace create",
    );
    let (_, location) = env.new_index(&Layout::under("foreign/1")).await;
    let id = IndexIdentifier::new(ns.clone(), "x").expect("id");
    check(
        foreign
            .register(&id, Some(&layout.source), &location)
            .await
            .map(|_| ()),
        "register",
    );
    check(
        foreign
            .commit(&owned_id, Some(&layout.source), &owned_location, &location)
            .await
            .map(|_| ()),
        "commit",
    );
    check(foreign.drop_index(&owned_id).await, "drop");
    check(gc::claim(&foreign, env.now()).await.map(|_| ()), "init");
    check(
        GarbageCollector::new(foreign.clone(), test_config())
            .expect("gc")
            .collect(env.now())
            .await
            .map(|_| ()),
        "gc",
    );
    // The owner is unaffected.
    env.catalog.load(&owned_id).await.expect("still live");
}

#[tokio::test]
async fn class2_two_catalogs_racing_for_a_fresh_warehouse_have_exactly_one_owner() {
    for backend in [Backend::Memory, Backend::Local] {
        class2_two_catalogs_racing_for_a_fresh_warehouse_have_exactly_one_owner_on(backend).await;
    }
}

/// `class2_two_catalogs_racing_for_a_fresh_warehouse_have_exactly_one_owner` on one backend.
async fn class2_two_catalogs_racing_for_a_fresh_warehouse_have_exactly_one_owner_on(
    backend: Backend,
) {
    for round in 0..4 {
        let env = Env::open_unclaimed(backend, 210 + round).await;
        let catalogs: Vec<Catalog> = (0..4).map(|n| env.foreign_catalog(300 + n)).collect();
        let results =
            futures::future::join_all(catalogs.iter().enumerate().map(|(n, catalog)| async move {
                let ns = Namespace::new([format!("n{n}")]).expect("ns");
                catalog.create_namespace(&ns, BTreeMap::new()).await
            }))
            .await;
        let winners = results.iter().filter(|r| r.is_ok()).count();
        assert_eq!(winners, 1, "{backend:?}: {results:?}");
        for result in results.iter().filter(|r| r.is_err()) {
            let kind = result.as_ref().expect_err("lost").kind();
            assert_eq!(kind, ErrorKind::WarehouseNotOwned, "{results:?}");
        }
    }
}

#[tokio::test]
async fn class2_an_unclaimed_warehouse_holding_data_is_taken_over_only_deliberately() {
    for backend in [Backend::Memory, Backend::Local] {
        class2_an_unclaimed_warehouse_holding_data_is_taken_over_only_deliberately_on(backend)
            .await;
    }
}

/// `class2_an_unclaimed_warehouse_holding_data_is_taken_over_only_deliberately` on one backend.
async fn class2_an_unclaimed_warehouse_holding_data_is_taken_over_only_deliberately_on(
    backend: Backend,
) {
    let env = Env::open_unclaimed(backend, 220).await;
    // Data but no marker: an earlier version wrote it, or its owner's marker was lost.
    let layout = Layout::under("old/1");
    let (_, location) = env.new_index(&layout).await;
    let ns = Namespace::new(["ns"]).expect("ns");
    // Written within the day, the files may be a first writer's preparation: a
    // stranger's claim would succeed now, but not once they are a day old.
    env.advance(wall_clock_ms() + 2 * DAY_MS - env.now());
    let err = env
        .catalog
        .create_namespace(&ns, BTreeMap::new())
        .await
        .expect_err("not claimed implicitly");
    assert_eq!(err.kind(), ErrorKind::Configuration, "{backend:?}: {err}");
    assert!(err.message().contains("init --adopt"), "{err}");
    let err = gc::claim(&env.catalog, env.now())
        .await
        .expect_err("init without --adopt");
    assert_eq!(err.kind(), ErrorKind::Configuration, "{err}");
    // Adopted deliberately, the warehouse is this catalog's.
    let marker = gc::adopt(&env.catalog, env.now()).await.expect("adopted");
    assert_eq!(
        gc::verify_ownership(&env.catalog).await.expect("owned"),
        marker
    );
    env.catalog
        .create_namespace(&ns, BTreeMap::new())
        .await
        .expect("owned now");
    let id = IndexIdentifier::new(ns, "old").expect("id");
    env.catalog
        .register(&id, Some(&layout.source), &location)
        .await
        .expect("registered");
    // Another catalog cannot adopt it away.
    let err = gc::adopt(&env.foreign_catalog(221), env.now())
        .await
        .expect_err("owned by another catalog");
    assert_eq!(err.kind(), ErrorKind::WarehouseNotOwned, "{err}");
}

#[tokio::test]
async fn class2_a_first_register_may_find_the_file_it_publishes() {
    // One pointer store, two warehouses: the second warehouse's first write is a register
    // of the metadata file the writer just put there (the namespace already exists).
    let first = Env::open(Backend::Memory, 230).await;
    let ns = first.namespace("shared").await;
    let second = Warehouse::in_memory("memory://second/wh").expect("warehouse");
    let catalog = Catalog::builder(first.pointer_store.clone(), second.clone()).build();
    let layout = Layout::under("x/1");
    for name in layout.files() {
        second
            .put_if_absent(&name, Bytes::from_static(b"0123456789"))
            .await
            .expect("table");
    }
    let metadata = parqdb_catalog::IndexMetadata::create(
        crate::support::gc::contents(&layout),
        BTreeMap::new(),
        first.clock.as_ref(),
        first.catalog.ids().as_ref(),
        &parqdb_catalog::family::FamilyRegistry::builtin(),
    )
    .expect("metadata");
    let location = second
        .write_new(
            "metadata/x/00001-a.metadata.json",
            Bytes::from(metadata.to_json_vec()),
        )
        .await
        .expect("metadata");
    let id = IndexIdentifier::new(ns, "x").expect("id");
    catalog
        .register(&id, Some(&layout.source), &location)
        .await
        .expect("the first write claims the warehouse it publishes into");
    gc::verify_ownership(&catalog).await.expect("claimed");
    // Another metadata file older than a day makes the warehouse used: a warehouse with
    // such a file and no marker is not claimed by a register of another one. A file
    // written within the day does not block the claim (a writer's own preparation).
    let third = Warehouse::in_memory("memory://third/wh").expect("warehouse");
    let later = Arc::new(parqdb_catalog::ManualClock::new(
        wall_clock_ms() + 2 * DAY_MS,
    ));
    let catalog = Catalog::builder(first.pointer_store.clone(), third.clone())
        .clock(later.clone())
        .build();
    third
        .write_new(
            "metadata/y/00001-b.metadata.json",
            Bytes::from(metadata.to_json_vec()),
        )
        .await
        .expect("other");
    let location = third
        .write_new(
            "metadata/x/00001-a.metadata.json",
            Bytes::from(metadata.to_json_vec()),
        )
        .await
        .expect("metadata");
    let err = catalog
        .register(
            &IndexIdentifier::new(first.namespace("shared").await, "y").expect("id"),
            Some(&layout.source),
            &location,
        )
        .await
        .expect_err("used warehouse");
    assert_eq!(err.kind(), ErrorKind::Configuration, "{err}");
    let fourth = Warehouse::in_memory("memory://fourth/wh").expect("warehouse");
    let catalog = Catalog::builder(first.pointer_store.clone(), fourth.clone()).build();
    let mut location = String::new();
    for name in [
        "metadata/y/00001-b.metadata.json",
        "metadata/x/00001-a.metadata.json",
    ] {
        location = fourth
            .write_new(name, Bytes::from(metadata.to_json_vec()))
            .await
            .expect("metadata");
    }
    catalog
        .register(
            &IndexIdentifier::new(first.namespace("shared").await, "z").expect("id"),
            Some(&layout.source),
            &location,
        )
        .await
        .expect("files written within the day do not block a first write");
    gc::verify_ownership(&catalog).await.expect("claimed");
}

const DAY_MS: i64 = 86_400_000;

/// The wall clock (object stores stamp objects with it).
fn wall_clock_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after the epoch")
        .as_millis() as i64
}

#[tokio::test]
async fn class2_a_moved_pointer_store_is_rehomed_deliberately() {
    use parqdb_catalog::store::LocalStore;
    let env = Env::open(Backend::Local, 240).await;
    env.register("live", &Layout::under("live/1")).await;
    let root = env.local_dir.clone().expect("local");
    let moved = root.parent().expect("parent").join("moved-catalog");
    std::fs::rename(root.join("_catalog"), &moved).expect("moved");
    let catalog = Catalog::builder(Arc::new(LocalStore::new(&moved)), env.warehouse.clone())
        .clock(env.clock.clone())
        .build();
    let err = catalog
        .create_namespace(&Namespace::new(["n"]).expect("ns"), BTreeMap::new())
        .await
        .expect_err("same id, another place: a copy or a move");
    assert_eq!(err.kind(), ErrorKind::WarehouseNotOwned, "{err}");
    assert!(err.message().contains("--adopt"), "{err}");
    gc::adopt(&catalog, env.now()).await.expect("re-homed");
    catalog
        .create_namespace(&Namespace::new(["n"]).expect("ns"), BTreeMap::new())
        .await
        .expect("the moved store writes");
    GarbageCollector::new(catalog, test_config())
        .expect("gc")
        .collect(env.now())
        .await
        .expect("and collects");
}

// ---------------------------------------------------------------------------------------
// 3. Nested roots
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn class3_a_warehouse_or_pointer_store_inside_a_managed_prefix_is_refused() {
    let dir = tempfile::tempdir().expect("dir");
    let outer = dir.path().join("outer");
    let config = CatalogConfig::new(Some(format!("file://{}", outer.display())), None);
    let catalog = config.build().await.expect("outer");
    gc::claim(&catalog, 1).await.expect("outer claimed");

    // A warehouse under the outer one's `indexes/` (or `metadata/`, `_gc/`).
    for managed in ["indexes", "metadata", "_gc"] {
        let inner = outer.join(managed).join("team").join("wh");
        let config = CatalogConfig::new(Some(format!("file://{}", inner.display())), None);
        let inner_catalog = config.build().await.expect("opens");
        let err = inner_catalog
            .create_namespace(&Namespace::new(["a"]).expect("ns"), BTreeMap::new())
            .await
            .expect_err("nested warehouse");
        assert_eq!(err.kind(), ErrorKind::Configuration, "{managed}: {err}");
        assert!(
            err.message().contains(&outer.display().to_string()),
            "{err}"
        );
        let err = gc::claim(&inner_catalog, 1)
            .await
            .expect_err("init refused");
        assert_eq!(err.kind(), ErrorKind::Configuration, "{managed}");
    }
    // A pointer store under its own warehouse's managed prefixes.
    for managed in ["metadata", "indexes", "_gc"] {
        let store = outer.join(managed).join("cat");
        let config = CatalogConfig::new(
            Some(format!("file://{}", outer.display())),
            Some(format!("file://{}", store.display())),
        );
        let err = config
            .build()
            .await
            .expect_err("store under managed prefix");
        assert_eq!(err.kind(), ErrorKind::Configuration, "{managed}: {err}");
    }
    // ... and under another claimed warehouse's.
    let other = dir.path().join("other");
    let config = CatalogConfig::new(
        Some(format!("file://{}", other.display())),
        Some(format!("file://{}", outer.join("indexes/cat").display())),
    );
    let err = config
        .build()
        .await
        .expect_err("store under another warehouse");
    assert_eq!(err.kind(), ErrorKind::Configuration, "{err}");
    // Outside the managed prefixes is fine.
    let config = CatalogConfig::new(
        Some(format!("file://{}", other.display())),
        Some(format!("file://{}", outer.join("pointers").display())),
    );
    config
        .build()
        .await
        .expect("a store beside the managed prefixes");
}
#[tokio::test]
async fn class3_nested_warehouses_and_pointer_stores_are_never_collected() {
    for backend in [Backend::Memory, Backend::Local] {
        class3_nested_warehouses_and_pointer_stores_are_never_collected_on(backend).await;
    }
}

/// `class3_nested_warehouses_and_pointer_stores_are_never_collected` on one backend.
async fn class3_nested_warehouses_and_pointer_stores_are_never_collected_on(backend: Backend) {
    let env = Env::open(backend, 301).await;
    let config = test_config();
    let live = Layout::under("live/1");
    env.register("live", &live).await;
    // Made before anything could refuse them (another version, by hand).
    let nested = [
        "indexes/team/wh2/_catalog-owner.json",
        "indexes/team/wh2/_catalog/i/ns/=x",
        "indexes/team/wh2/metadata/u/00001-a.metadata.json",
        "indexes/team/wh2/indexes/u/1/ivf_postings/part-0.parquet",
        "indexes/team/wh2/_gc/ledger/indexes/u/1/u-1-1-0.json",
        "metadata/cat/i/ns/=idx",
        "metadata/cat/n/=ns",
        "metadata/cat/_meta/=catalog-id",
    ];
    for name in nested {
        env.put_raw(name, b"{}").await;
    }
    env.put_raw("indexes/garbage/1/part-0", b"x").await;
    let reports = passes(&env, &config, 8).await;
    let nested: Vec<String> = nested.iter().map(|s| s.to_string()).collect();
    assert!(
        env.all_exist_raw(&nested).await,
        "{backend:?}: nested data deleted"
    );
    assert!(
        reports.iter().any(|r| r.counts.kept_nested.objects > 0
            && r.warnings.iter().any(|w| w.contains("indexes/team/wh2"))),
        "{backend:?}: reported"
    );
    // The rest of the warehouse is still collected.
    assert!(
        !env.exists_raw("indexes/garbage/1/part-0").await,
        "{backend:?}"
    );
    assert!(env.all_exist_raw(&live.files()).await);

    // A warehouse rooted at `indexes/` itself (its `_gc/` shows it): nothing below
    // `indexes/` is collected any more, and the run says why.
    env.put_raw("indexes/_gc/lease/00000000000000000001.json", b"{}")
        .await;
    env.put_raw("indexes/garbage/2/part-0", b"x").await;
    let reports = passes(&env, &config, 8).await;
    assert!(
        env.exists_raw("indexes/garbage/2/part-0").await,
        "{backend:?}"
    );
    assert!(
        reports
            .iter()
            .all(|r| r.warnings.iter().any(|w| w.contains("`indexes`"))),
        "{backend:?}: reported"
    );
}

// ---------------------------------------------------------------------------------------
// 4. Symbolic links (local)
// ---------------------------------------------------------------------------------------

/// Round 45's K10, round 72 (helper-68, F1): a link in a live table to the warehouse
/// root makes a reader of the table read everything: nothing is deleted while it is
/// there, and the warning names it; once it is removed, collection goes on. The same link
/// in garbage does not stop collection.
#[tokio::test]
async fn class4_a_link_to_the_root_in_a_live_table_keeps_everything_and_says_which() {
    let mut all = None;
    let reports =
        while_a_wide_link_is_there(412, &["indexes", "metadata"], |root, live, junk, now| {
            let link = root.join(format!("{}all", live.postings));
            symlink_at("../../../..", &link, now);
            symlink_at(
                "../../../..",
                &root.join(format!("{}all", junk.postings)),
                now,
            );
            all = Some(format!("{}all", live.postings));
            link
        })
        .await;
    let all = all.expect("made");
    let warned = reports
        .iter()
        .flat_map(|report| &report.warnings)
        .any(|warning| {
            warning.contains(&all)
                && warning.contains("a reader of a table the collector keeps")
                && warning.contains("whole of `metadata` and `indexes`")
        });
    assert!(warned, "no warning names the link");
}

/// Round 74 (helper-69, F1 and U1): a link to the whole of `indexes/` that a reader of a
/// live table reaches through another link (`sub -> ../mid`, `mid/all -> ..`) keeps all
/// of `indexes/` (and no more: the dropped indexes' metadata goes), wherever it lies; one
/// in garbage whose name is no name (not UTF-8) does not stop collection.
#[tokio::test]
async fn class4_a_link_to_a_whole_prefix_reached_through_a_link_keeps_everything_there() {
    use std::os::unix::ffi::OsStrExt;
    let reports = while_a_wide_link_is_there(413, &["indexes"], |root, live, junk, now| {
        std::fs::create_dir_all(root.join("indexes/mid")).expect("dir");
        symlink_at(root.join("indexes"), &root.join("indexes/mid/all"), now);
        let sub = root.join(format!("{}sub", live.postings));
        symlink_at(root.join("indexes/mid"), &sub, now);
        let unnamed = std::ffi::OsStr::from_bytes(b"z\xfc");
        symlink_at("../../..", &root.join(&junk.postings).join(unnamed), now);
        sub
    })
    .await;
    assert!(
        deleted(&reports) > 0,
        "the dropped indexes' metadata files were kept too"
    );
}

/// Round 75 (round 74's K1): a link to the whole of `indexes/` in a table only an existing
/// metadata file names (a dropped index, rule P) keeps all of `indexes/` while that file
/// is there: a reader of it reads everything there. It keeps no metadata file (neither
/// itself nor another: metadata goes before what it names), so once the file is gone, so
/// is everything else. Round 76 (helper-70, F4): the same through a link to all of
/// `metadata/` (which keeps nothing for that reader) and one there to `indexes/`.
#[tokio::test]
async fn class4_a_link_to_a_whole_prefix_in_a_table_old_metadata_names_keeps_it_until_that_goes() {
    let direct: &[(&str, &str)] = &[("indexes/old/1/ivf_postings/all", "../../..")];
    let chained: &[(&str, &str)] = &[
        ("indexes/old/1/ivf_postings/m", "../../../../metadata"),
        ("metadata/junk/idx", "../../indexes"),
    ];
    for (seed, links) in [(414, direct), (417, chained)] {
        let env = Env::open(Backend::Local, seed).await;
        let config = test_config();
        let root = env.local_dir.clone().expect("local");
        let (old, junk) = (Layout::under("old/1"), Layout::under("junk/1"));
        let (old_id, _, old_metadata) = env.register("old", &old).await;
        let (junk_id, _, _) = env.register("junk", &junk).await;
        for (at, to) in links {
            std::fs::create_dir_all(root.join(at).parent().expect("parent")).expect("dir");
            symlink_at(to, &root.join(at), env.now());
        }
        let wide = links.last().expect("a link").0;
        env.catalog.drop_index(&old_id).await.expect("dropped");
        env.catalog.drop_index(&junk_id).await.expect("dropped");
        let old_metadata = env.relative(&old_metadata);
        let mut metadata_gone = false;
        let mut warned = false;
        for report in passes(&env, &config, 12).await {
            warned |= report.warnings.iter().any(|warning| {
                warning.contains(wide)
                    && warning.contains("a reader of a table existing metadata names")
                    && warning.contains("whole of `indexes`")
            });
            for action in report
                .actions
                .iter()
                .filter(|a| a.action == gc::ActionKind::Delete)
            {
                if action.path.starts_with("indexes/") {
                    assert!(
                        metadata_gone,
                        "{} was deleted while {old_metadata}, whose table links to all of indexes/, exists ({links:?})",
                        action.path
                    );
                }
            }
            metadata_gone |= !env.exists(&old_metadata).await;
        }
        assert!(warned, "no warning names the link {wide}");
        assert!(metadata_gone, "the old metadata file was kept");
        assert!(
            !env.exists(&junk.files()[0]).await,
            "collection did not go on"
        );
        assert!(
            !env.exists(&old.files()[0]).await,
            "collection did not go on"
        );
    }
}

/// Round 76 (helper-70, F2, F2b): a reader who reaches a link to a whole prefix reads the
/// links there too: a link to `indexes/` in a live table and one in garbage there to
/// `metadata/` (or the other way round) keep both prefixes while the first is there.
#[tokio::test]
async fn class4_links_to_whole_prefixes_reached_through_one_another_keep_all_they_lead_to() {
    for (seed, first, second, to) in [
        (415, "../../..", "indexes/mid/meta", "../../metadata"),
        (
            416,
            "../../../../metadata",
            "metadata/extra/idx",
            "../../indexes",
        ),
    ] {
        while_a_wide_link_is_there(seed, &["indexes", "metadata"], |root, live, _, now| {
            std::fs::create_dir_all(root.join(second).parent().expect("parent")).expect("dir");
            symlink_at(to, &root.join(second), now);
            let link = root.join(format!("{}all", live.postings));
            symlink_at(first, &link, now);
            link
        })
        .await;
    }
}

/// Round 76 (helper-70, F3): a live source table outside the warehouse holding a link to
/// all of `indexes/` makes its reader read every link there: one to `metadata/` keeps
/// that too.
#[tokio::test]
async fn class4_a_source_linking_to_a_whole_prefix_reads_the_links_there() {
    let outside = tempfile::tempdir().expect("dir");
    let ext = outside.path().join("ext");
    std::fs::create_dir_all(&ext).expect("dir");
    let live = Layout {
        source: crate::support::gc::source_at(&format!("{}/", ext.display())),
        ..Layout::under("live/1")
    };
    // While the source's link is there all of `indexes/` is reachable: nothing there goes;
    // once it is gone, the link to `metadata/` is garbage's.
    let reports = while_a_wide_link_of_a_live_table_is_there(
        418,
        live,
        &["indexes", "metadata"],
        |root, _, _, now| {
            std::fs::create_dir_all(root.join("indexes/mid")).expect("dir");
            symlink_at("../../metadata", &root.join("indexes/mid/meta"), now);
            symlink_at(root.join("indexes"), &ext.join("all"), now);
            ext.join("all")
        },
    )
    .await;
    assert!(
        reports
            .iter()
            .flat_map(|report| &report.warnings)
            .any(|warning| warning.contains("indexes/mid/meta")
                && warning.contains("whole of `metadata`")),
        "no warning names the link"
    );
}

/// Round 76 (helper-70, F1, F1b): a live table located at a whole prefix (`indexes/`) is
/// read whole, links there too: one to `metadata/` keeps all of it while it is there.
#[tokio::test]
async fn class4_a_table_at_a_whole_prefix_reads_the_links_there() {
    let env = Env::open(Backend::Local, 419).await;
    let config = test_config();
    let root = env.local_dir.clone().expect("local");
    let old = Layout::under("old/1");
    let (old_id, _, old_metadata) = env.register("old", &old).await;
    let live = Layout {
        postings: "indexes/".to_owned(),
        ..Layout::under("live/1")
    };
    env.register("live", &live).await;
    std::fs::create_dir_all(root.join("indexes/live")).expect("dir");
    let link = root.join("indexes/live/meta");
    symlink_at("../../metadata", &link, env.now());
    env.catalog.drop_index(&old_id).await.expect("dropped");
    let old_metadata = env.relative(&old_metadata);
    let reports = passes(&env, &config, 8).await;
    assert_eq!(
        deleted(&reports),
        0,
        "a file the live table reaches was deleted"
    );
    assert!(env.exists(&old_metadata).await);
    std::fs::remove_file(&link).expect("removed");
    passes(&env, &config, 8).await;
    assert!(
        !env.exists(&old_metadata).await,
        "the dropped index's metadata was not collected"
    );
    assert!(
        env.all_exist(&old.files()).await,
        "all of indexes/ is the live table's"
    );
}

/// Three indexes `old`, `junk` (both dropped) and `live`, with `make(root, live, junk,
/// now)`'s links to whole prefixes: nothing under `kept` is deleted while they are there;
/// once the link `make` returns is removed, collection goes on (`old`'s files go). The
/// reports of the runs while it was there.
async fn while_a_wide_link_is_there(
    seed: u64,
    kept: &[&str],
    make: impl FnOnce(&std::path::Path, &Layout, &Layout, i64) -> std::path::PathBuf,
) -> Vec<GcReport> {
    while_a_wide_link_of_a_live_table_is_there(seed, Layout::under("live/1"), kept, make).await
}

/// [`while_a_wide_link_is_there`] with the live index's tables and source `live`.
async fn while_a_wide_link_of_a_live_table_is_there(
    seed: u64,
    live: Layout,
    kept: &[&str],
    make: impl FnOnce(&std::path::Path, &Layout, &Layout, i64) -> std::path::PathBuf,
) -> Vec<GcReport> {
    let env = Env::open(Backend::Local, seed).await;
    let config = test_config();
    let root = env.local_dir.clone().expect("local");
    let (old, junk) = (Layout::under("old/1"), Layout::under("junk/1"));
    let (old_id, _, _) = env.register("old", &old).await;
    let (junk_id, _, _) = env.register("junk", &junk).await;
    env.register("live", &live).await;
    let removed_later = make(&root, &live, &junk, env.now());
    env.catalog.drop_index(&old_id).await.expect("dropped");
    env.catalog.drop_index(&junk_id).await.expect("dropped");
    let reports = passes(&env, &config, 8).await;
    for action in reports.iter().flat_map(|report| &report.actions) {
        assert!(
            action.action != gc::ActionKind::Delete
                || !kept
                    .iter()
                    .any(|prefix| action.path.starts_with(&format!("{prefix}/"))),
            "{} was deleted while a reader of a live table reads all of {kept:?}",
            action.path
        );
    }
    assert!(env.all_exist(&old.files()).await);
    std::fs::remove_file(&removed_later).expect("removed");
    let after = passes(&env, &config, 8).await;
    assert!(deleted(&after) > 0, "collection did not resume");
    assert!(!env.exists(&format!("{}part-0.parquet", old.postings)).await);
    reports
}

/// Round 33, finding 5 (`docs/gc-attacks.md`): a symbolic link below a live table's
/// directory leads to a file of a dropped index (a writer sharing files between versions
/// by link). The listing never follows the link, and the file it leads to lies in an
/// unreachable directory: the link names it, so it is kept while the link is there; the
/// rest of the dropped index is collected.
#[tokio::test]
async fn class4_a_link_below_a_live_table_keeps_what_it_leads_to() {
    let (env, config, root, old, old_id, live) = old_and_live(403).await;
    let shared = format!("{}part-0.parquet", old.postings);
    symlink_at(
        "../../../old/1/ivf_postings/part-0.parquet",
        &root.join(format!("{}shared.parquet", live.postings)),
        env.now(),
    );
    symlink_at(
        root.join(&old.centroids),
        &root.join(format!("{}shared-dir", live.centroids)),
        env.now(),
    );
    env.catalog.drop_index(&old_id).await.expect("dropped");
    let reports = passes(&env, &config, 8).await;
    assert!(deleted(&reports) > 0, "nothing was collected");
    assert!(
        env.exists(&shared).await,
        "the file a live table links to was deleted"
    );
    let linked_dir: Vec<String> = old
        .files()
        .into_iter()
        .filter(|file| file.starts_with(&old.centroids))
        .collect();
    assert!(
        env.all_exist(&linked_dir).await,
        "the directory a live table links to was emptied"
    );
    let others: Vec<String> = old
        .files()
        .into_iter()
        .filter(|file| *file != shared && !file.starts_with(&old.centroids))
        .collect();
    assert!(!others.is_empty());
    assert!(
        env.none_exist(&others).await,
        "the rest of the dropped index is still collected"
    );
    assert!(std::fs::read(root.join(format!("{}shared.parquet", live.postings))).is_ok());
}

/// Round 33b, finding 3: a link the scans never see still keeps what it leads to. (a) A
/// link made in a live table after the scans passed it, before the verification walk;
/// (b) a link in a live source table inside the warehouse, outside the managed prefixes
/// (no listing of the collector covers it). The verification walk looks for links at and
/// below every reachable name.
#[tokio::test]
async fn class4_a_link_the_scans_never_saw_keeps_what_it_leads_to() {
    let env = Env::open(Backend::Local, 404).await;
    let config = test_config();
    let root = env.local_dir.clone().expect("local");
    let (old_a, old_b) = (Layout::under("olda/1"), Layout::under("oldb/1"));
    let (a_id, _, _) = env.register("olda", &old_a).await;
    let (b_id, _, _) = env.register("oldb", &old_b).await;
    std::fs::create_dir_all(root.join("src")).expect("source dir");
    let live = Layout {
        source: crate::support::gc::source_at(&env.warehouse.absolute("src/")),
        ..Layout::under("live/1")
    };
    env.register("live", &live).await;
    // (b) in the live source table, from the start.
    let in_source = format!("{}part-0.parquet", old_b.postings);
    symlink_at(
        root.join(&in_source),
        &root.join("src/b.parquet"),
        env.now(),
    );
    env.catalog.drop_index(&a_id).await.expect("dropped");
    env.catalog.drop_index(&b_id).await.expect("dropped");
    // (a) in the live table, made as the verification walk of the run that deletes its
    // target starts (after every scan of that run).
    let in_table = format!("{}part-0.parquet", old_a.postings);
    let (from, to) = (
        root.join(&in_table),
        root.join(format!("{}late-link.parquet", live.postings)),
    );
    let made = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let dry_run = GcConfig {
        dry_run: true,
        ..config.clone()
    };
    for _ in 0..(8 * HOUR / PASS_EVERY) {
        env.advance(PASS_EVERY);
        let dooms = env
            .collect(&dry_run)
            .await
            .actions
            .iter()
            .any(|action| action.path == in_table && action.action == gc::ActionKind::Delete);
        let (from, to, flag, now) = (from.clone(), to.clone(), made.clone(), env.now());
        let gc = GarbageCollector::new(env.catalog.clone(), config.clone())
            .expect("gc")
            .with_progress(move |event| {
                let verifying = GcProgress::Phase {
                    phase: GcPhase::Verify,
                };
                if dooms
                    && *event == verifying
                    && !flag.swap(true, std::sync::atomic::Ordering::SeqCst)
                {
                    symlink_at(&from, &to, now);
                }
            });
        gc.collect(env.now()).await.expect("run");
    }
    assert!(
        made.load(std::sync::atomic::Ordering::SeqCst),
        "no run doomed the file"
    );
    assert!(
        env.exists(&in_table).await,
        "the file a link made after the scans leads to was deleted"
    );
    assert!(
        env.exists(&in_source).await,
        "the file a source table's link leads to was deleted"
    );
    let others: Vec<String> = old_a
        .files()
        .into_iter()
        .chain(old_b.files())
        .filter(|file| *file != in_table && *file != in_source)
        .collect();
    assert!(
        env.none_exist(&others).await,
        "the rest of the dropped indexes is still collected"
    );
}

/// Round 43, H2: a live source table outside the warehouse whose directory holds links
/// into it (below a subdirectory, and behind a link to another directory outside): a
/// listing that follows links (`object_store`'s local listing, so DataFusion's) reads what
/// they lead to. The collector keeps it while the links are there, collects the rest, and
/// collects it too once they are gone.
#[tokio::test]
async fn class4_links_in_a_source_directory_outside_keep_what_they_lead_to() {
    let env = Env::open(Backend::Local, 405).await;
    let config = test_config();
    let root = env.local_dir.clone().expect("local");
    let outside = tempfile::tempdir().expect("dir");
    let (ext, far) = (outside.path().join("ext"), outside.path().join("far"));
    std::fs::create_dir_all(ext.join("a/b")).expect("dirs");
    std::fs::create_dir_all(&far).expect("dirs");
    let (old_a, old_b) = (Layout::under("olda/1"), Layout::under("oldb/1"));
    let (a_id, _, _) = env.register("olda", &old_a).await;
    let (b_id, _, _) = env.register("oldb", &old_b).await;
    let live = Layout {
        source: crate::support::gc::source_at(&format!("{}/", ext.display())),
        ..Layout::under("live/1")
    };
    env.register("live", &live).await;
    let linked_file = format!("{}part-0.parquet", old_b.centroids);
    symlink_at(root.join(&old_a.postings), &ext.join("a/b/s"), env.now());
    symlink_at(&far, &ext.join("far"), env.now());
    symlink_at(root.join(&linked_file), &far.join("f.parquet"), env.now());
    env.catalog.drop_index(&a_id).await.expect("dropped");
    env.catalog.drop_index(&b_id).await.expect("dropped");
    let reports = passes(&env, &config, 8).await;
    assert!(deleted(&reports) > 0, "nothing was collected");
    let kept: Vec<String> = old_a
        .files()
        .into_iter()
        .filter(|file| file.starts_with(&old_a.postings))
        .chain([linked_file.clone()])
        .collect();
    assert!(
        env.all_exist(&kept).await,
        "a file a live source's directory links to was deleted"
    );
    let others: Vec<String> = old_a
        .files()
        .into_iter()
        .chain(old_b.files())
        .filter(|file| !kept.contains(file))
        .collect();
    assert!(!others.is_empty());
    assert!(
        env.none_exist(&others).await,
        "the rest of the dropped indexes is still collected"
    );
    std::fs::remove_file(ext.join("a/b/s")).expect("unlinked");
    std::fs::remove_file(far.join("f.parquet")).expect("unlinked");
    passes(&env, &config, 8).await;
    assert!(
        env.none_exist(&kept).await,
        "what the links led to is collected once they are gone"
    );
}

/// Round 86: a live source whose directory comes to hold a link into a process's view
/// (`/proc/self/cwd`, which leads where each reader stands) may lead to anything: the
/// collector keeps everything while it is there, and every run says which record's source
/// keeps it (it used to keep everything silently). Once the link is gone, collection goes
/// on.
#[tokio::test]
async fn class4_a_source_that_may_lead_anywhere_keeps_everything_and_says_so() {
    let env = Env::open(Backend::Local, 412).await;
    let config = test_config();
    let outside = tempfile::tempdir().expect("dir");
    let ext = outside.path().join("ext");
    std::fs::create_dir_all(&ext).expect("dirs");
    let old = Layout::under("old/1");
    let (old_id, _, _) = env.register("old", &old).await;
    let live = Layout {
        source: crate::support::gc::source_at(&format!("{}/", ext.display())),
        ..Layout::under("live/1")
    };
    env.register("live", &live).await;
    std::os::unix::fs::symlink("/proc/self/cwd", ext.join("here")).expect("linked");
    env.catalog.drop_index(&old_id).await.expect("dropped");
    let reports = passes(&env, &config, 8).await;
    assert_eq!(
        deleted(&reports),
        0,
        "everything is kept while it may be read"
    );
    assert!(
        reports.iter().all(|report| report
            .warnings
            .iter()
            .any(|warning| warning.contains("may lead to any file under"))),
        "every run says why"
    );
    std::fs::remove_file(ext.join("here")).expect("unlinked");
    passes(&env, &config, 8).await;
    assert!(
        env.none_exist(&old.files()).await,
        "collected once it is gone"
    );
}

/// Round 51: a source outside the warehouse named in a spelling a shell reads otherwise
/// than its letters (`plain/"it's"/` opens `plain/it's`, here a link to a dropped index's
/// table; `$'it\x27s'` and `$'\u0069t\x27s'` the same) is refused at register with the
/// cause, and nothing is registered; the plain spelling of the same directory is accepted.
/// Round 52 (F2, F3): the same behind another store's URI chaining a `file://` one, and
/// percent-encoded.
#[tokio::test]
async fn class4_a_source_a_shell_reads_otherwise_is_refused() {
    let env = Env::open(Backend::Local, 408).await;
    let root = env.local_dir.clone().expect("local");
    let outside = tempfile::tempdir().expect("dir");
    let plain = outside.path().join("plain");
    std::fs::create_dir_all(plain.join("elsewhere")).expect("dir");
    let old = Layout::under("old/1");
    let (old_id, _, _) = env.register("old", &old).await;
    env.catalog.drop_index(&old_id).await.expect("dropped");
    symlink_at(root.join(&old.postings), &plain.join("it's"), env.now());
    let id = env.id("live").await;
    let p = plain.display();
    // Round 52: a chain (fsspec's `::`) behind another store's URI, and quotes
    // percent-encoded, too.
    for location in [
        format!(r#"{p}/"it's"/"#),
        format!(r#"{p}/$'it\x27s'/"#),
        format!(r#"{p}/$'\u0069t\x27s'/"#),
        format!("{p}/$DIR/"),
        format!(r#"zip://part-0.parquet::file://{p}/"it's"/part-0.parquet"#),
        format!(r#"s3://b/k::file://{p}/$'\u0069t\x27s'/part-0.parquet"#),
        format!("zip://part-0.parquet::file://$PWD/{p}/"),
        format!("file://{p}/%22it%27s%22/"),
    ] {
        let spelling = location.as_str();
        let live = Layout {
            source: crate::support::gc::source_at(&location),
            ..Layout::under("live/1")
        };
        let (_, location) = env.new_index(&live).await;
        let err = env
            .catalog
            .register(&id, Some(&live.source), &location)
            .await
            .expect_err(spelling);
        assert_eq!(
            err.kind(),
            ErrorKind::InvalidIndexMetadata,
            "{spelling}: {err}"
        );
        assert!(
            err.message().contains("a quote, a backslash, a `$`"),
            "{spelling}: {err}"
        );
        let missing = env.catalog.load(&id).await.expect_err("nothing registered");
        assert_eq!(missing.kind(), ErrorKind::IndexNotFound, "{spelling}");
    }
    let live = Layout {
        source: crate::support::gc::source_at(&format!("{}/elsewhere/", plain.display())),
        ..Layout::under("live/2")
    };
    let (_, location) = env.new_index(&live).await;
    env.catalog
        .register(&id, Some(&live.source), &location)
        .await
        .expect("a plain spelling is registered");
}

/// Round 33c, L1: a writer links a dropped index's file into its new, unpublished table
/// while the collector has condemned it (its scans never see a link made later, nor its
/// verification walk a table nobody publishes yet), then registers: the register is
/// refused, as one naming the condemned file itself is (the condemnation stays until the
/// deletes' record is released), so no live table links to a deleted file.
#[tokio::test]
async fn class4_a_new_table_linking_to_a_condemned_file_is_refused() {
    let env = Env::open(Backend::Local, 405).await;
    let root = env.local_dir.clone().expect("local");
    let target = condemned_old_file(&env).await;
    let new = Layout::under("new/1");
    let (_, location) = env.new_index(&new).await;
    std::os::unix::fs::symlink(
        root.join(&target),
        root.join(format!("{}linked.parquet", new.postings)),
    )
    .expect("link");
    refused_for_a_link(&env, &new, &location).await;
}

/// Round 68 (helper-64, F4): a new table published as `indexes/n b/…` whose files sit
/// under another spelling on disk (`indexes/n%20b/…`, which the collector keeps for it and
/// a reader of it may open), holding a link to a condemned file: registering it is
/// refused, as for a link under the spelling the metadata gives.
#[tokio::test]
async fn class4_a_new_table_linking_to_a_condemned_file_under_another_spelling_is_refused() {
    let env = Env::open(Backend::Local, 411).await;
    let root = env.local_dir.clone().expect("local");
    let target = condemned_old_file(&env).await;
    let new = Layout::under("n b/1");
    let (_, location) = env.new_index(&new).await;
    for stored in [
        "indexes/n%20b/1/ivf_postings",
        "indexes/%6E b/1/ivf_postings",
    ] {
        std::fs::create_dir_all(root.join(stored)).expect("dir");
        std::os::unix::fs::symlink(root.join(&target), root.join(stored).join("linked.parquet"))
            .expect("link");
        refused_for_a_link(&env, &new, &location).await;
        std::fs::remove_dir_all(root.join(stored.split('/').take(2).collect::<Vec<_>>().join("/")))
            .expect("removed");
    }
}

/// Round 34, finding 1: the same refusal for a link below anything else a publication
/// newly makes reachable: (a) a new source table inside the warehouse; (b) a table a new
/// family reference's file names.
#[tokio::test]
async fn class4_a_new_source_or_referenced_table_linking_to_a_condemned_file_is_refused() {
    let env = Env::open(Backend::Local, 406).await;
    let root = env.local_dir.clone().expect("local");
    let target = condemned_old_file(&env).await;

    std::fs::create_dir_all(root.join("sources/docs")).expect("dir");
    std::os::unix::fs::symlink(root.join(&target), root.join("sources/docs/part-0.parquet"))
        .expect("link");
    let sourced = Layout {
        source: crate::support::gc::source_at(&format!(
            "{}/",
            env.warehouse.absolute("sources/docs")
        )),
        ..Layout::under("sourced/1")
    };
    let (_, location) = env.new_index(&sourced).await;
    refused_for_a_link(&env, &sourced, &location).await;

    std::fs::create_dir_all(root.join("indexes/shared/c")).expect("dir");
    std::os::unix::fs::symlink(
        root.join(&target),
        root.join("indexes/shared/c/part-0.parquet"),
    )
    .expect("link");
    env.put_raw(
        "metadata/referenced-c.json",
        br#"{"centroid-tables": ["indexes/shared/c/"]}"#,
    )
    .await;
    let referencing = Layout {
        centroids_metadata: Some("metadata/referenced-c.json".to_owned()),
        ..Layout::under("referencing/1")
    };
    let (_, location) = env.new_index(&referencing).await;
    refused_for_a_link(&env, &referencing, &location).await;
}

/// Round 77 (helper-71, G1): a live index's family file written after the verification
/// walk (the delete guard's own case), whose table links to all of `metadata/`, where a
/// link to all of `indexes/` lies: the guard reads the family file before the deletes and
/// keeps everything its reader reaches, through both links.
#[tokio::test]
async fn class4_a_late_family_file_keeps_what_its_reader_reaches_through_whole_prefixes() {
    let env = Env::open(Backend::Local, 420).await;
    let config = GcConfig {
        partitions: 1,
        ..test_config()
    };
    let root = env.local_dir.clone().expect("local");
    let old = Layout::under("old/1");
    let (old_id, _, _) = env.register("old", &old).await;
    let family = "metadata/fam/v1.metadata.json";
    let live = Layout {
        centroids_metadata: Some(family.to_owned()),
        ..Layout::under("live/1")
    };
    env.register("live", &live).await;
    let fam = Layout::under("fam/1");
    let (_, fam_location) = env.new_index(&fam).await;
    let fam_bytes = std::fs::read(root.join(env.relative(&fam_location))).expect("family");
    symlink_at(
        "../../../../metadata",
        &root.join(format!("{}all", fam.centroids)),
        env.now(),
    );
    std::fs::create_dir_all(root.join("metadata/junk")).expect("dir");
    symlink_at("../../indexes", &root.join("metadata/junk/idx"), env.now());
    env.catalog.drop_index(&old_id).await.expect("dropped");
    let target = format!("{}part-0.parquet", old.postings);
    let dry_run = GcConfig {
        dry_run: true,
        ..config.clone()
    };
    let mut written = false;
    for _ in 0..(8 * HOUR / PASS_EVERY) {
        env.advance(PASS_EVERY);
        let dooms = !written
            && env
                .collect(&dry_run)
                .await
                .actions
                .iter()
                .any(|action| action.path == target && action.action == gc::ActionKind::Delete);
        run_with_a_change(&env, &config, ChangeAfter::Verify, async || {
            if dooms {
                std::fs::create_dir_all(root.join("metadata/fam")).expect("dir");
                std::fs::write(root.join(family), &fam_bytes).expect("family file");
                written = true;
            }
        })
        .await;
    }
    assert!(written, "no run doomed the file");
    assert!(
        env.all_exist(&old.files()).await,
        "a file the late family file's reader reaches was deleted"
    );
}

/// Where [`run_with_a_change`] makes its change.
#[derive(Clone, Copy, PartialEq, Eq)]
enum ChangeAfter {
    /// Between the scan and the verification walk.
    Scan,
    /// Between the verification walk and the deletes.
    Verify,
}

/// One run of `config` (one partition) driven step by step, with `change` made after the
/// step `after`.
async fn run_with_a_change(
    env: &Env,
    config: &GcConfig,
    after: ChangeAfter,
    change: impl AsyncFnOnce(),
) {
    let gc = env.gc(config.clone());
    let planned = gc.step(GcStep::Plan, env.now(), None).await.expect("plan");
    let run = planned.report.run_id;
    let steps = [
        GcStep::Scan { run, partition: 0 },
        GcStep::Verify { run },
        GcStep::Delete { run, partition: 0 },
        GcStep::Finish { run },
    ];
    let changed_after = match after {
        ChangeAfter::Scan => 1,
        ChangeAfter::Verify => 2,
    };
    let (before, rest) = steps.split_at(changed_after);
    for step in before {
        gc.step(*step, env.now(), None).await.expect("step");
    }
    change().await;
    for step in rest {
        gc.step(*step, env.now(), None).await.expect("step");
    }
}

/// Round 67 (helper-63, D): a live table located at `indexes/tilde~/…` whose files also
/// sit under another spelling of that location (`indexes/tilde%7E/…`, as a writer that
/// percent-encodes `~` stores them; the collector keeps both), where a link into an old
/// table is made after the scan that would delete it passed: the verification walk looks
/// for links below every spelling of a live name, and the old table is kept.
#[tokio::test]
async fn class4_a_link_in_another_spelling_of_a_live_table_keeps_what_it_leads_to() {
    let env = Env::open(Backend::Local, 408).await;
    let config = GcConfig {
        partitions: 1,
        ..test_config()
    };
    let root = env.local_dir.clone().expect("local");
    let (old, live) = (Layout::under("old/1"), Layout::under("tilde~/1"));
    let (old_id, _, _) = env.register("old", &old).await;
    env.register("live", &live).await;
    let stored = root.join(live.postings.replace('~', "%7E"));
    std::fs::create_dir_all(&stored).expect("dir");
    std::fs::write(stored.join("part-0.parquet"), b"PAR1").expect("written");
    env.catalog.drop_index(&old_id).await.expect("dropped");
    let target = format!("{}part-0.parquet", old.postings);
    assert!(
        env.collect_until_doomed(&config, &target).await,
        "never doomed"
    );
    run_with_a_change(&env, &config, ChangeAfter::Scan, async || {
        symlink_at(root.join(&old.postings), &stored.join("l"), env.now());
    })
    .await;
    assert!(
        env.exists(&target).await,
        "a file a link in the live table leads to was deleted"
    );
}

/// Round 67 (helper-63, A and C): a link into an old table made in a live table after the
/// scan passed it, the index then committed away from that table (its old snapshots
/// expired) before the verification walk: a reader of the replaced metadata still reads
/// the table and follows the link, so the walk looks for links below what the change log
/// says was replaced too, and the old table is kept.
#[tokio::test]
async fn class4_a_link_in_a_table_replaced_before_the_verification_walk_keeps_what_it_leads_to() {
    let env = Env::open(Backend::Local, 409).await;
    let config = GcConfig {
        partitions: 1,
        ..test_config()
    };
    let root = env.local_dir.clone().expect("local");
    let (old, live) = (Layout::under("old/1"), Layout::under("t2/1"));
    let (old_id, _, _) = env.register("old", &old).await;
    let (live_id, metadata, location) = env.register("live", &live).await;
    env.catalog.drop_index(&old_id).await.expect("dropped");
    let target = format!("{}part-0.parquet", old.postings);
    assert!(
        env.collect_until_doomed(&config, &target).await,
        "never doomed"
    );
    run_with_a_change(&env, &config, ChangeAfter::Scan, async || {
        symlink_at(
            root.join(&old.postings),
            &root.join(&live.postings).join("l"),
            env.now(),
        );
        let next = Layout::under("t3/1");
        let (_, successor) = env.successor(&metadata, &next, Some(1)).await;
        env.catalog
            .commit(&live_id, Some(&next.source), &location, &successor)
            .await
            .expect("committed away");
    })
    .await;
    assert!(
        env.exists(&target).await,
        "a file a link in the replaced table leads to was deleted"
    );
}

/// A local warehouse whose collector's clock is a day past the real one: links made now,
/// dated by their birth (real) time, are old to it.
async fn past_the_real_clock(seed: u64) -> Env {
    let env = Env::open(Backend::Local, seed).await;
    let real_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after the epoch")
        .as_millis() as i64;
    env.advance(real_ms - env.now() + 24 * HOUR);
    env
}

/// Round 67 (helper-63, C): a link whose name is not UTF-8 (the listing cannot name it,
/// so its target cannot be looked up by the name it shows), old to the collector, in a
/// table the index was committed away from: while the table is kept (the replaced
/// metadata still names it, rule P), so is what the link leads to.
#[tokio::test]
async fn class4_an_unnameable_link_in_a_kept_table_keeps_what_it_leads_to() {
    use std::os::unix::ffi::OsStringExt;
    let env = past_the_real_clock(411).await;
    let config = test_config();
    let root = env.local_dir.clone().expect("local");
    let (old, t2) = (Layout::under("old/1"), Layout::under("t2/1"));
    let (old_id, _, _) = env.register("old", &old).await;
    let (live_id, metadata, location) = env.register("live", &t2).await;
    let name = std::ffi::OsString::from_vec(b"l\xff".to_vec());
    std::os::unix::fs::symlink(root.join(&old.postings), root.join(&t2.postings).join(name))
        .expect("linked");
    env.catalog.drop_index(&old_id).await.expect("dropped");
    let (kept, linked) = (
        format!("{}part-0.parquet", t2.postings),
        format!("{}part-0.parquet", old.postings),
    );
    // Long past its retention, the old table is kept only by the live table's link.
    passes(&env, &config, 4).await;
    assert!(env.exists(&linked).await, "kept while the table is live");
    let next = Layout::under("t3/1");
    let (_, successor) = env.successor(&metadata, &next, Some(1)).await;
    env.catalog
        .commit(&live_id, Some(&next.source), &location, &successor)
        .await
        .expect("committed away");
    checked_passes(&env, &config, 8, "unnameable link", async |_| {
        if env.exists(&kept).await {
            assert!(
                env.exists(&linked).await,
                "a file a link in a kept table leads to was deleted"
            );
        }
    })
    .await;
}

/// Round 67 (helper-63, U1) and round 68: a directory too deep to open by its path in
/// garbage may hold a link a reader follows (every link in the warehouse keeps what it
/// leads to, wherever it lies): no run deletes anything while it is there, and every run
/// that would says where it is; once it is gone, collection goes on.
#[tokio::test]
async fn class4_a_place_too_deep_to_read_pauses_collection_and_says_where() {
    let (env, config, root, old, old_id, _) = old_and_live(410).await;
    parqdb_catalog::warehouse::deep_link(&root, "indexes/junk", 22, "/nowhere");
    env.catalog.drop_index(&old_id).await.expect("dropped");
    let reports = passes(&env, &config, 8).await;
    assert_eq!(deleted(&reports), 0, "nothing is deleted while it is there");
    assert!(
        reports.iter().any(|report| report
            .warnings
            .iter()
            .any(|warning| warning.contains("indexes/junk") && warning.contains("cannot be read"))),
        "a run says where it is"
    );
    std::fs::remove_dir_all(root.join("indexes/junk")).expect("removed");
    passes(&env, &config, 8).await;
    assert!(
        env.none_exist(&old.files()).await,
        "the dropped index is collected once it is gone"
    );
}

/// U1 (recorded since round 55): a directory too deep to open by its path that holds only
/// files and directories (an engine's deep partitions, or anyone's) is read through its
/// parents: it names nothing, and collection goes on around it (its files, which no
/// listing can name, are kept). It used to pause every delete for as long as it was there.
#[tokio::test]
async fn class4_a_place_too_deep_to_open_by_path_holding_only_files_does_not_stop_collection() {
    let (env, config, root, old, old_id, live) = old_and_live(411).await;
    parqdb_catalog::warehouse::deep_file(&root, "indexes/junk", 40);
    // and one inside the live table: read by the search from the live names
    parqdb_catalog::warehouse::deep_file(&root, live.postings.trim_end_matches('/'), 40);
    env.catalog.drop_index(&old_id).await.expect("dropped");
    let reports = passes(&env, &config, 8).await;
    assert!(
        env.none_exist(&old.files()).await,
        "the dropped index is collected while the deep directories are there"
    );
    assert!(
        !reports
            .iter()
            .flat_map(|report| &report.warnings)
            .any(|warning| warning.contains("nothing is deleted this run")),
        "no run paused"
    );
    assert!(
        env.all_exist(&live.files()).await,
        "the live index is whole"
    );
    assert!(
        root.join("indexes/junk").exists(),
        "the deep directory stays"
    );
}

/// Round 66 (helper-62, F4): a new table holding a link too deep to open by its path (a
/// reader that opens each directory from its parent follows it) may lead to a condemned
/// file the check cannot see: registering it is refused, saying why.
#[tokio::test]
async fn class4_a_new_table_with_a_place_the_check_cannot_read_is_refused() {
    let env = Env::open(Backend::Local, 407).await;
    let root = env.local_dir.clone().expect("local");
    let target = condemned_old_file(&env).await;
    let deep = Layout::under("deep/1");
    let (_, location) = env.new_index(&deep).await;
    parqdb_catalog::warehouse::deep_link(
        &root,
        deep.postings.trim_end_matches('/'),
        22,
        root.join(&target).to_str().expect("utf-8"),
    );
    let err = env
        .catalog
        .register(&env.id("deep").await, Some(&deep.source), &location)
        .await
        .expect_err("a table the check cannot read is refused");
    assert_eq!(err.kind(), ErrorKind::InvalidIndexMetadata, "{err}");
    assert!(err.message().contains("cannot be read"), "{err}");
}

/// Drop an index and collect until its first postings file is condemned; its name.
async fn condemned_old_file(env: &Env) -> String {
    let config = test_config();
    let old = Layout::under("old/1");
    let (old_id, _, _) = env.register("old", &old).await;
    env.catalog.drop_index(&old_id).await.expect("dropped");
    let target = format!("{}part-0.parquet", old.postings);
    assert!(
        env.collect_until_doomed(&config, &target).await,
        "the old file was never condemned"
    );
    target
}

/// Registering `location` (written for `layout`) is refused for a link to a condemned file.
async fn refused_for_a_link(env: &Env, layout: &Layout, location: &str) {
    let err = env
        .catalog
        .register(&env.id("new").await, Some(&layout.source), location)
        .await
        .expect_err("a new table linking to a condemned file is refused");
    assert_eq!(err.kind(), ErrorKind::InvalidIndexMetadata, "{err}");
    // A source directory's links are read as the source naming what they lead to (round
    // 43, H2), so a source linking to a condemned file may be refused first for naming a
    // file under `indexes/`.
    // A directory a family file names is read as the walk reads it, and a link there is
    // refused as naming what the collector does not read (round 58); a family file that is
    // no metadata is refused first (round 62).
    assert!(
        err.message().contains("symbolic link in a new table")
            || err
                .message()
                .contains("under the warehouse's `metadata/`, `indexes/`")
            || err
                .message()
                .contains("a symbolic link; the collector never follows")
            || err.message().contains("is no metadata"),
        "{err}"
    );
}

/// Round 34, findings 3 and 4: links the collector's clock sees as old (made long before
/// the runs), in a live table: (a) a link whose name is not UTF-8 (another engine's
/// Latin-1 name); (b) a link to a directory of links (`shared -> pool/s1`, whose
/// `part-0.parquet` leads to a dropped index's file): every link on the way counts, to the
/// end of the chain.
#[tokio::test]
async fn class4_old_links_in_a_live_table_keep_what_they_lead_to_whatever_their_names_and_chains() {
    use std::os::unix::ffi::{OsStrExt, OsStringExt};
    let env = past_the_real_clock(407).await;
    let config = test_config();
    let root = env.local_dir.clone().expect("local");
    let (a, b) = (Layout::under("olda/1"), Layout::under("oldb/1"));
    let (a_id, _, _) = env.register("olda", &a).await;
    let (b_id, _, _) = env.register("oldb", &b).await;
    let live = Layout::under("live/1");
    env.register("live", &live).await;
    let named = format!("{}part-0.parquet", a.postings);
    let chained = format!("{}part-0.parquet", b.postings);
    let mut latin1 = root.join(&live.postings).into_os_string().into_vec();
    latin1.extend_from_slice(b"part-\xe9.parquet");
    symlink_at(
        root.join(&named),
        std::path::Path::new(std::ffi::OsStr::from_bytes(&latin1)),
        env.now(),
    );
    std::fs::create_dir_all(root.join("indexes/pool/s1")).expect("dir");
    symlink_at(
        root.join(&chained),
        &root.join("indexes/pool/s1/part-0.parquet"),
        env.now(),
    );
    symlink_at(
        root.join("indexes/pool/s1"),
        &root.join(format!("{}shared", live.postings)),
        env.now(),
    );
    env.catalog.drop_index(&a_id).await.expect("dropped");
    env.catalog.drop_index(&b_id).await.expect("dropped");
    let reports = passes(&env, &config, 8).await;
    assert!(deleted(&reports) > 0, "nothing was collected");
    assert!(
        env.exists(&named).await,
        "the file a live link with a Latin-1 name leads to was deleted"
    );
    assert!(
        env.exists(&chained).await,
        "the file at the end of a live chain of links was deleted"
    );
    let rest: Vec<String> = a
        .files()
        .into_iter()
        .chain(b.files())
        .filter(|file| *file != named && *file != chained)
        .collect();
    assert!(
        env.none_exist(&rest).await,
        "the rest of the dropped indexes is still collected"
    );
}

/// Twelve hours of runs while a record is away: each completes and warns, and `live` stays.
async fn kept_while_away(env: &Env, config: &GcConfig, live: &[String], what: &str) {
    let away = passes(env, config, 12).await;
    assert!(away.iter().all(|r| r.status == gc::GcStatus::Completed));
    assert!(
        away.iter()
            .all(|r| r.warnings.iter().any(|w| w.contains("put it back"))),
        "{what}: every run while it is away says so"
    );
    assert!(
        env.all_exist_raw(live).await,
        "{what}: {:?}",
        env.missing(live).await
    );
}

/// A pointer store's namespace directory on a disk that does not mount: its mount point
/// is an empty directory.
struct Outage {
    namespace: std::path::PathBuf,
    disk: tempfile::TempDir,
}

impl Outage {
    fn begin(namespace: &std::path::Path) -> Outage {
        let disk = tempfile::tempdir().expect("the disk, while not mounted");
        std::fs::rename(namespace, disk.path().join("ns")).expect("unmounted");
        std::fs::create_dir(namespace).expect("the empty mount point");
        Outage {
            namespace: namespace.to_path_buf(),
            disk,
        }
    }

    /// Where the namespace directory is while the disk is away.
    fn away(&self) -> std::path::PathBuf {
        self.disk.path().join("ns")
    }

    /// Every run while the disk is away keeps the `live` files and says so; then the disk
    /// mounts again, and the index `id` loads `location` with every `live` file there.
    async fn end(
        self,
        env: &Env,
        config: &GcConfig,
        (id, location): (&IndexIdentifier, &str),
        live: &[String],
        what: &str,
    ) {
        kept_while_away(env, config, live, what).await;
        std::fs::remove_dir_all(&self.namespace).expect("mount point");
        std::fs::rename(self.away(), &self.namespace).expect("mounted again");
        passes(env, config, 1).await;
        assert_eq!(load_location(env, id).await, location, "{what}");
        assert!(env.all_exist_raw(live).await, "{what}");
    }
}

/// Where the index `id` points now.
async fn load_location(env: &Env, id: &IndexIdentifier) -> String {
    env.catalog.load(id).await.expect("loads").metadata_location
}

/// The directory of the local pointer store that holds the record of index `name`.
fn directory_of_record(env: &Env, name: &str) -> std::path::PathBuf {
    let file = format!("={name}");
    walkdir::WalkDir::new(env.local_dir.clone().expect("local").join("_catalog"))
        .into_iter()
        .filter_map(Result::ok)
        .find(|entry| entry.file_name().to_str() == Some(file.as_str()))
        .expect("the record file")
        .into_path()
        .parent()
        .expect("its directory")
        .to_path_buf()
}

/// Round 35 G1: an operator moved the pointer store's namespace directory to another disk
/// and left a symbolic link. `load` follows it, and so does the walk the collector finds
/// its roots by: the index's files stay while it is live. A link that leads nowhere (the
/// other disk not mounted) stops collection with an error; it never hides the index.
#[tokio::test]
async fn class4_records_behind_a_link_in_the_pointer_store_keep_their_files() {
    let env = Env::open(Backend::Local, 905).await;
    let config = test_config();
    let layout = Layout::under("live/1");
    let (id, _, location) = env.register("live", &layout).await;
    let namespace = directory_of_record(&env, "live");
    let disk = tempfile::tempdir().expect("another disk");
    let moved = disk.path().join("ns");
    std::fs::rename(&namespace, &moved).expect("moved");
    std::os::unix::fs::symlink(&moved, &namespace).expect("link");
    let reports = passes(&env, &config, 6).await;
    assert!(reports.iter().all(|r| r.status == gc::GcStatus::Completed));
    assert_eq!(load_location(&env, &id).await, location);
    let mut live = layout.files();
    live.push(env.relative(&location));
    assert!(
        env.all_exist_raw(&live).await,
        "{:?}",
        env.missing(&live).await
    );

    std::fs::rename(&moved, disk.path().join("unmounted")).expect("unmounted");
    env.advance(PASS_EVERY);
    let err = env
        .gc(config.clone())
        .collect(env.now())
        .await
        .expect_err("a link that leads nowhere");
    assert!(
        err.full_message().contains("leads nowhere"),
        "{}",
        err.full_message()
    );
    assert!(env.all_exist_raw(&live).await);
}

/// Round 36 H8: the pointer store's disk is not mounted for longer than the retention (an
/// empty mount point where the namespace's records were). The catalog never removes a
/// record, so a record that vanished is unexplained in every run until it is back, not
/// only in the first: no clock runs, nothing the index names is deleted, and once the
/// disk is back the index loads its files.
#[tokio::test]
async fn class4_records_away_longer_than_the_retention_keep_their_files() {
    let env = Env::open(Backend::Local, 906).await;
    let config = test_config();
    let layout = Layout::under("live/1");
    let (id, _, location) = env.register("live", &layout).await;
    let mut live = layout.files();
    live.push(env.relative(&location));
    passes(&env, &config, 1).await;
    let namespace = directory_of_record(&env, "live");
    let disk = tempfile::tempdir().expect("the disk, while not mounted");
    std::fs::rename(&namespace, disk.path().join("ns")).expect("unmounted");
    std::fs::create_dir(&namespace).expect("the empty mount point");
    kept_while_away(&env, &config, &live, "away").await;
    std::fs::remove_dir(&namespace).expect("mount point");
    std::fs::rename(disk.path().join("ns"), &namespace).expect("mounted again");
    let back = passes(&env, &config, 6).await;
    assert!(
        !back
            .last()
            .expect("a run")
            .warnings
            .iter()
            .any(|w| w.contains("put it back"))
    );
    assert!(
        env.all_exist_raw(&live).await,
        "{:?}",
        env.missing(&live).await
    );
    assert_eq!(load_location(&env, &id).await, location);
}

/// Round 37 J1 and J2: while a record is away (its disk not mounted), the collector's
/// journals are copied back in place (a migration with `cp -a`, a restore of `_gc/`: every
/// finish mark goes stale), or the same identifier is registered again, the new record
/// landing in the empty mount point at the same key. Neither makes the away record count
/// as back: nothing it names is deleted, and once the disk is back the index loads them.
/// Round 39: nor does the new record's chain outgrowing its bound across runs (L1), a
/// register logged by a clock behind the collector's (L2), or an adoption by a clock
/// ahead of it just before the last run that saw the record (L4).
#[tokio::test]
async fn class4_a_record_away_stays_away_through_a_journal_copy_or_a_register_at_its_key() {
    for what in [
        "journals copied",
        "registered after a run",
        "registered before a run",
        "registered and committed past the chain's bound",
        "registered by a clock behind",
        "adopted by a clock ahead",
    ] {
        let env = Env::open(Backend::Local, 907).await;
        let config = test_config();
        let layout = Layout::under("live/1");
        let (id, _, location) = env.register("live", &layout).await;
        let mut live = layout.files();
        live.push(env.relative(&location));
        passes(&env, &config, 1).await;
        if what == "adopted by a clock ahead" {
            gc::adopt(&env.catalog, env.now() + 4 * MINUTE)
                .await
                .expect("adopted");
            // A run right after, by the collector's clock still before the adoption.
            env.collect_completed(&config).await;
        }
        let outage = Outage::begin(&directory_of_record(&env, "live"));
        match what {
            "journals copied" => {
                passes(&env, &config, 1).await;
                let journal = env.local_dir.clone().expect("local").join("_gc/journal");
                let copy = tempfile::tempdir().expect("a copy");
                copy_dir(&journal, copy.path());
                std::fs::remove_dir_all(&journal).expect("removed");
                copy_dir(copy.path(), &journal);
            }
            "registered after a run" => {
                passes(&env, &config, 1).await;
                env.register("live", &Layout::under("live/2")).await;
            }
            "registered and committed past the chain's bound" => {
                passes(&env, &config, 1).await;
                let again = Layout::under("live/2");
                let (id, mut metadata, mut current) = env.register("live", &again).await;
                for commit in 0..20 {
                    let next = Layout::under(&format!("live/2/{commit}"));
                    let (successor, location) = env.successor(&metadata, &next, None).await;
                    env.catalog
                        .commit(&id, Some(&next.source), &current, &location)
                        .await
                        .expect("committed");
                    (metadata, current) = (successor, location);
                    passes(&env, &config, 1).await;
                }
            }
            "registered by a clock behind" => {
                let now = env.now();
                env.clock.set(now - 4 * MINUTE);
                env.register("live", &Layout::under("live/2")).await;
                env.clock.set(now);
            }
            "adopted by a clock ahead" => {
                passes(&env, &config, 1).await;
            }
            _ => {
                env.register("live", &Layout::under("live/2")).await;
            }
        }
        outage
            .end(&env, &config, (&id, &location), &live, what)
            .await;
    }
}

/// Round 38 K1, K3 and K4: three more ways a record away shows another at its key. K1:
/// the record was seen only by a run that never finished (its journal no longer counts),
/// and the identifier is registered again while the disk is away. K3: the disk fails to
/// mount twice, and the second time the mount point still holds what the first outage's
/// register wrote there. K4: the namespace directory was moved to its own disk the usual
/// way, an older copy of it left behind under the mount point; the disk does not mount.
/// In each, the record at the key does not descend from the one a run saw: that one is
/// away, and nothing it names is deleted.
#[tokio::test]
async fn class4_a_record_away_stays_away_behind_another_record_at_its_key() {
    for what in ["K1 abandoned run", "K3 second outage", "K4 older copy"] {
        let env = Env::open(Backend::Local, 910).await;
        let config = test_config();
        let layout = Layout::under("live/1");
        let mut older = None;
        if what.starts_with("K1") {
            passes(&env, &config, 1).await;
        }
        let (id, metadata, first) = env.register("live", &layout).await;
        let namespace = directory_of_record(&env, "live");
        if what.starts_with("K4") {
            let copy = tempfile::tempdir().expect("the copy left behind");
            copy_dir(&namespace, copy.path());
            older = Some(copy);
        }
        // The live version: a commit to `live/2`.
        let current = Layout::under("live/2");
        let (_, location) = env.successor(&metadata, &current, None).await;
        env.catalog
            .commit(&id, Some(&current.source), &first, &location)
            .await
            .expect("committed");
        let mut live = current.files();
        live.push(env.relative(&location));
        if what.starts_with("K1") {
            env.advance(PASS_EVERY);
            env.gc(config.clone())
                .step(GcStep::Plan, env.now(), None)
                .await
                .expect("planned");
            env.gc(config.clone()).abandon().await.expect("abandoned");
        } else {
            passes(&env, &config, 1).await;
        }
        let outage = Outage::begin(&namespace);
        match what {
            "K1 abandoned run" => {
                env.register("live", &Layout::under("live/3")).await;
            }
            "K3 second outage" => {
                env.register("live", &Layout::under("live/3")).await;
                kept_while_away(&env, &config, &live, what).await;
                // The disk mounts over what the outage wrote; a run sees it back.
                let shadow = tempfile::tempdir().expect("under the mount point");
                std::fs::rename(&namespace, shadow.path().join("ns")).expect("hidden");
                std::fs::rename(outage.away(), &namespace).expect("mounted");
                passes(&env, &config, 1).await;
                // It fails again: the mount point shows the first outage's record.
                std::fs::rename(&namespace, outage.away()).expect("unmounted");
                std::fs::rename(shadow.path().join("ns"), &namespace).expect("shown");
            }
            _ => {
                let older = older.take().expect("the older copy");
                copy_dir(older.path(), &namespace);
            }
        }
        outage
            .end(&env, &config, (&id, &location), &live, what)
            .await;
    }
}

/// A record put back in place from a backup taken before the previous run, then written
/// over by the catalog (a register over the restored tombstone), looks exactly like an
/// older copy of the pointer store under the mount point of a disk that did not mount
/// (round 38 K4): its chain does not remember what that run saw. It is the newer record
/// away: every run says so and keeps everything, until `init --adopt` says the pointer
/// store as it is now is the catalog; then what the restore made unreachable goes after a
/// full retention. (Round 37 had taken a chain that starts before the previous run for a
/// restore, which deleted K4's live files; the release simulation found that the older
/// rule, a chain starting since, stalled for good.)
#[tokio::test]
async fn class4_a_record_put_back_from_a_backup_is_away_until_adopted() {
    for backend in [Backend::Memory, Backend::Local] {
        let env = Env::open(backend, 908).await;
        let config = test_config();
        let (id, _, _) = env.register("x", &Layout::under("x/1")).await;
        env.catalog.drop_index(&id).await.expect("dropped");
        let key = id.store_key();
        let backup = env.record_bytes(&key).await;
        let second = Layout::under("x/2");
        let (_, _, second_location) = env.register("x", &second).await;
        passes(&env, &config, 1).await;
        env.put_record_back(&key, backup).await;
        let third = Layout::under("x/3");
        let (_, _, location) = env.register("x", &third).await;
        let mut away = second.files();
        away.push(env.relative(&second_location));
        kept_while_away(&env, &config, &away, &format!("{backend:?}")).await;
        gc::adopt(&env.catalog, env.now()).await.expect("adopted");
        passes(&env, &config, 12).await;
        assert_eq!(
            env.missing(&away).await.len(),
            away.len(),
            "{backend:?}: once adopted, what the restore made unreachable is collected"
        );
        let mut live = third.files();
        live.push(env.relative(&location));
        assert!(env.all_exist_raw(&live).await, "{backend:?}");
    }
}

#[tokio::test]
async fn class4_symbolic_links_are_never_followed_and_nothing_outside_is_deleted() {
    let env = Env::open(Backend::Local, 401).await;
    let config = test_config();
    let root = env.local_dir.clone().expect("local");
    let outside = root.parent().expect("parent").join("outside");
    std::fs::create_dir_all(outside.join("deep")).expect("outside");
    let precious = [outside.join("a.parquet"), outside.join("deep/b.parquet")];
    for file in &precious {
        std::fs::write(file, b"precious").expect("outside file");
        set_mtime(file, env.now());
    }
    std::fs::create_dir_all(root.join("indexes/u/1")).expect("dirs");
    std::fs::create_dir_all(root.join("metadata")).expect("dirs");
    std::os::unix::fs::symlink(&outside, root.join("indexes/linked")).expect("dir link");
    std::os::unix::fs::symlink(&outside, root.join("metadata/linked")).expect("dir link");
    std::os::unix::fs::symlink(&precious[0], root.join("indexes/u/1/file-link"))
        .expect("file link");
    env.put("indexes/garbage/part-0", b"garbage").await;
    let live = Layout::under("live/1");
    env.register("live", &live).await;

    let reports = passes(&env, &config, 8).await;
    for file in &precious {
        assert!(file.exists(), "{} was deleted", file.display());
    }
    for link in ["indexes/linked", "metadata/linked", "indexes/u/1/file-link"] {
        assert!(
            std::fs::symlink_metadata(root.join(link)).is_ok(),
            "the link {link} was deleted"
        );
    }
    assert!(
        reports.iter().all(|r| r.counts.skipped > 0),
        "links are reported"
    );
    assert!(
        !env.exists("indexes/garbage/part-0").await,
        "garbage is still collected"
    );

    // A managed prefix that is itself a link is not followed either.
    let env = Env::open(Backend::Local, 402).await;
    let root = env.local_dir.clone().expect("local");
    let elsewhere = root.parent().expect("parent").join("elsewhere");
    std::fs::create_dir_all(elsewhere.join("x")).expect("dir");
    std::fs::write(elsewhere.join("x/part-0"), b"precious").expect("file");
    set_mtime(&elsewhere.join("x/part-0"), env.now());
    std::fs::remove_dir_all(root.join("indexes")).ok();
    std::os::unix::fs::symlink(&elsewhere, root.join("indexes")).expect("prefix link");
    // Tables behind the linked prefix are refused for publication…
    let (_, location) = env.new_index(&Layout::under("ok/1")).await;
    let err = env
        .catalog
        .register(
            &env.id("ok").await,
            Some(&crate::support::gc::source()),
            &location,
        )
        .await
        .expect_err("tables behind a link");
    assert_eq!(err.kind(), ErrorKind::InvalidIndexMetadata, "{err}");
    passes(&env, &config, 8).await;
    assert!(
        elsewhere.join("x/part-0").exists(),
        "deleted through a linked prefix"
    );
}

// ---------------------------------------------------------------------------------------
// 5. Metadata outside `metadata/`
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn class5_metadata_outside_the_metadata_directory_is_never_published() {
    for backend in [Backend::Memory, Backend::Local] {
        class5_metadata_outside_the_metadata_directory_is_never_published_on(backend).await;
    }
}

/// `class5_metadata_outside_the_metadata_directory_is_never_published` on one backend.
async fn class5_metadata_outside_the_metadata_directory_is_never_published_on(backend: Backend) {
    let env = Env::open(backend, 501).await;
    let layout = Layout::under("m/1");
    let (id, metadata, base) = env.register("m", &layout).await;
    let next = metadata
        .successor(
            crate::support::gc::contents(&layout),
            env.clock.as_ref(),
            env.catalog.ids().as_ref(),
            &parqdb_catalog::family::FamilyRegistry::builtin(),
        )
        .expect("successor");
    for place in [
        "indexes/m/next.metadata.json",
        "next.metadata.json",
        "other/n.json",
    ] {
        let location = env
            .warehouse
            .write_new(place, Bytes::from(next.to_json_vec()))
            .await
            .expect("written");
        let err = env
            .catalog
            .commit(&id, Some(&layout.source), &base, &location)
            .await
            .expect_err(place);
        assert_eq!(err.kind(), ErrorKind::InvalidIndexMetadata, "{place}");
        assert!(err.message().contains("metadata/"), "{err}");
        let err = env
            .catalog
            .register(&env.id("elsewhere").await, Some(&layout.source), &location)
            .await
            .expect_err(place);
        assert_eq!(err.kind(), ErrorKind::InvalidIndexMetadata, "{place}");
    }
    // A family reference to metadata outside `metadata/` is invalid metadata.
    let mut contents = crate::support::gc::contents(&layout);
    contents.parameters.insert(
        "ivf_centroids_metadata_location".into(),
        "indexes/c/centroids.metadata.json".into(),
    );
    let err = parqdb_catalog::IndexMetadata::create(
        contents,
        BTreeMap::new(),
        env.clock.as_ref(),
        env.catalog.ids().as_ref(),
        &parqdb_catalog::family::FamilyRegistry::builtin(),
    )
    .expect_err("centroids outside metadata/");
    assert_eq!(err.kind(), ErrorKind::InvalidIndexMetadata);
}

#[tokio::test]
async fn class5_nothing_is_published_into_the_collectors_own_places() {
    for backend in [Backend::Memory, Backend::Local] {
        let env = Env::open(backend, 503).await;
        let inside = |relative: &str| format!("{}/{relative}", env.warehouse.root());
        let cases: Vec<(&str, Layout)> = vec![
            (
                "tables under _gc/",
                Layout {
                    centroids: "_gc/t/c/".into(),
                    ..Layout::under("g/1")
                },
            ),
            (
                "tables under _catalog/",
                Layout {
                    postings: "_catalog/t/p/".into(),
                    ..Layout::under("g/2")
                },
            ),
            (
                "a source under indexes/",
                Layout {
                    source: crate::support::gc::source_at(&inside("indexes/src/")),
                    ..Layout::under("g/3")
                },
            ),
            (
                "a source under metadata/ (Hadoop spelling)",
                Layout {
                    source: crate::support::gc::source_at(
                        &inside("metadata/src/").replacen("file:///", "file:/", 1),
                    ),
                    ..Layout::under("g/4")
                },
            ),
        ];
        for (n, (what, layout)) in cases.into_iter().enumerate() {
            let (_, location) = env.new_index(&layout).await;
            let id = env.id(&format!("bad-{n}")).await;
            let result = env
                .catalog
                .register(&id, Some(&layout.source), &location)
                .await;
            let err = result.expect_err(what);
            assert_eq!(
                err.kind(),
                ErrorKind::InvalidIndexMetadata,
                "{backend:?} {what}: {err}"
            );
        }
    }
}

#[tokio::test]
async fn class5_a_stray_file_of_an_unknown_format_keeps_what_it_names_and_collection_goes_on() {
    for backend in [Backend::Memory, Backend::Local] {
        class5_a_stray_file_of_an_unknown_format_keeps_what_it_names_and_collection_goes_on_on(
            backend,
        )
        .await;
    }
}

/// `class5_a_stray_file_of_an_unknown_format_keeps_what_it_names_and_collection_goes_on` on one backend.
async fn class5_a_stray_file_of_an_unknown_format_keeps_what_it_names_and_collection_goes_on_on(
    backend: Backend,
) {
    let env = Env::open(backend, 502).await;
    let config = test_config();
    env.register("live", &Layout::under("live/1")).await;
    env.put_raw(
        "metadata/stray/v2.metadata.json",
        br#"{"format-version": 2, "tables": {"t": "indexes/named-by-v2/"}}"#,
    )
    .await;
    env.put_raw("indexes/named-by-v2/part-0", b"x").await;
    env.put_raw(
        "metadata/broken/v1.metadata.json",
        br#"{"format-version": 1, "oops": ["indexes/named-by-broken/"]}"#,
    )
    .await;
    env.put_raw("indexes/named-by-broken/part-0", b"x").await;
    env.put_raw("indexes/plain-garbage/part-0", b"x").await;

    let reports = passes(&env, &config, 4).await;
    assert!(reports.iter().all(|r| r.status == gc::GcStatus::Completed));
    assert!(
        reports
            .iter()
            .any(|r| r.counts.kept_unknown_format.objects == 1)
    );
    assert!(
        !env.exists_raw("indexes/plain-garbage/part-0").await,
        "{backend:?}"
    );
    assert!(env.exists_raw("metadata/stray/v2.metadata.json").await);
    assert!(env.exists_raw("indexes/named-by-v2/part-0").await);
    // The broken v1 file goes after retention, strictly before what it names.
    let more = passes(&env, &config, 4).await;
    assert!(
        !env.exists_raw("metadata/broken/v1.metadata.json").await,
        "{backend:?}"
    );
    assert!(
        !env.exists_raw("indexes/named-by-broken/part-0").await,
        "{backend:?}"
    );
    let when = |name: &str| {
        env.sim
            .deletions()
            .iter()
            .find(|d| d.path.ends_with(name))
            .map(|d| d.at_ms)
            .expect("deleted")
    };
    assert!(
        when("metadata/broken/v1.metadata.json") < when("indexes/named-by-broken/part-0"),
        "{backend:?}: the metadata file goes first"
    );
    assert!(env.exists_raw("metadata/stray/v2.metadata.json").await);
    assert!(env.exists_raw("indexes/named-by-v2/part-0").await);
    assert!(more.iter().all(|r| r.status == gc::GcStatus::Completed));
}

/// Found while writing the stray generator of the hostile simulation (gc_simulation.rs,
/// whose strays now do this): a stray file of another format
/// naming its engine's data by a relative location with a `%` (which this catalog's
/// metadata may not contain, but another format may) did not protect it: the string was
/// not taken for a name at all.
#[tokio::test]
async fn class5_a_stray_file_keeps_what_it_names_with_a_percent_sign() {
    for backend in [Backend::Memory, Backend::Local] {
        let env = Env::open(backend, 503).await;
        let config = test_config();
        env.register("live", &Layout::under("live/1")).await;
        env.put_raw(
            "metadata/stray/v2.metadata.json",
            br#"{"format-version": 2, "tables": ["indexes/50%off/", "indexes/a%41b/c"]}"#,
        )
        .await;
        env.put_raw(
            "metadata/broken/v1.metadata.json",
            br#"{"format-version": 1, "oops": "indexes/100%/"}"#,
        )
        .await;
        let named = [
            "indexes/50%off/part-0.parquet",
            "indexes/a%41b/c/part-0.parquet",
            "indexes/100%/part-0.parquet",
        ];
        for name in named {
            env.put_raw(name, b"their data").await;
        }
        env.advance(HOUR);
        // The broken file is newer than what it names.
        env.put_raw(
            "metadata/broken/v1.metadata.json",
            br#"{"format-version": 1, "oops": "indexes/100%/"}"#,
        )
        .await;
        let reports = passes(&env, &config, 2).await;
        assert!(reports.iter().all(|r| r.status == gc::GcStatus::Completed));
        for name in named {
            assert!(
                env.exists_raw(name).await,
                "{backend:?}: {name} was deleted while a stray names it"
            );
        }
        // Once the broken file is gone, what only it named goes too.
        passes(&env, &config, 6).await;
        assert!(!env.exists_raw("metadata/broken/v1.metadata.json").await);
        assert!(!env.exists_raw("indexes/100%/part-0.parquet").await);
        assert!(env.exists_raw("indexes/50%off/part-0.parquet").await);
        assert!(env.exists_raw("indexes/a%41b/c/part-0.parquet").await);
    }
}

/// Round 35 G3 and G6, round 36: a live family reference whose file is no metadata names
/// objects in the forms a reader of a JSON document may take: relative to the file itself
/// (`centroids-0.bin` beside it, `../../../indexes/…`), several in one string (one per
/// line, comma-separated), and so do the JSON objects it names in turn. Round 62: what
/// else a reader of its format takes from it no catalog knows (where its strings lead,
/// on which file system), so publication refuses it, and written after publication it
/// keeps everything while it is live, plain garbage too.
#[tokio::test]
async fn class5_a_live_family_file_that_is_no_metadata_is_refused_or_keeps_everything() {
    let named = [
        "metadata/c/v1/centroids-0.bin",
        "metadata/c/v1/centroids-1.bin",
        "indexes/old1/part-0",
        "indexes/old2/part-0",
        "indexes/old3/part-0",
        "indexes/old4/part-0",
        "indexes/old5/part-0",
        "indexes/old8/part-0",
        "indexes/old9/part-0",
    ];
    for backend in [Backend::Memory, Backend::Local] {
        let env = Env::open(backend, 504).await;
        let config = test_config();
        for name in named {
            env.put_raw(name, b"\x00\x01their data").await;
        }
        env.put_raw("indexes/plain-garbage/part-0", b"x").await;
        env.put_raw("indexes/c1/manifest.json", br#"{"t": "../old4/part-0"}"#)
            .await;
        env.put_raw(
            "metadata/c/v1/manifest.json",
            br#"{"t": "../../../indexes/old5/part-0"}"#,
        )
        .await;
        let mut layout = Layout::under("live/1");
        layout.centroids_metadata = Some("metadata/c/v1/centroids.json".to_owned());
        // Published while the family file is not there yet, then written.
        let (metadata, location) = env.new_index(&layout).await;
        drop(metadata);
        let id = env.id("live").await;
        env.catalog
            .register(&id, Some(&layout.source), &location)
            .await
            .expect("registered");
        env.put_raw(
            "metadata/c/v1/centroids.json",
            br#"{"files": ["centroids-0.bin", "./centroids-1.bin"],
                 "postings-from": "../../../indexes/old1/part-0",
                 "lines": "indexes/old2/part-0\nindexes/old3/part-0",
                 "csv": "indexes/old8/part-0,indexes/old9/part-0",
                 "chain": ["indexes/c1/manifest.json", "manifest.json"]}"#,
        )
        .await;
        // Published over the file, it is refused.
        let other = env.id("refused").await;
        let refused = env
            .catalog
            .register(&other, Some(&layout.source), &location)
            .await
            .expect_err("a family file that is no metadata is refused");
        assert_eq!(refused.kind(), ErrorKind::InvalidIndexMetadata, "{refused}");
        assert!(
            refused.message().contains("is no metadata"),
            "{backend:?}: {refused}"
        );
        let reports = passes(&env, &config, 6).await;
        assert!(
            reports.iter().all(|r| r.status == gc::GcStatus::Completed),
            "{backend:?}"
        );
        assert!(
            env.exists_raw("indexes/plain-garbage/part-0").await,
            "{backend:?}: nothing is collected while the family file is live"
        );
        for name in named {
            assert!(
                env.exists_raw(name).await,
                "{backend:?}: {name} was deleted while the live family file names it"
            );
        }
    }
}

/// Round 52, F1: a live family file's string in a spelling a shell reads otherwise than its
/// letters (`plain/"it's"/…` opens `plain/it's/…`, here a link outside the warehouse to a
/// dropped index's table; `$'it\x27s'`, `\u0073` the same) may name anything: everything
/// is kept while the file is live. A stray file no index reaches with such a string (an
/// apostrophe in a note) keeps everything only while it exists: it goes, then the rest.
#[tokio::test]
async fn class5_a_family_string_a_shell_reads_otherwise_keeps_everything_while_live() {
    let spellings = [r#"\"it's\""#, r#"$'it\\x27s'"#, r#"$'i\\u0074\\x27s'"#];
    for (n, spelling) in spellings.into_iter().enumerate() {
        let env = Env::open(Backend::Local, 520 + n as u64).await;
        let config = test_config();
        let root = env.local_dir.clone().expect("local");
        let outside = tempfile::tempdir().expect("dir");
        let plain = outside.path().join("plain");
        std::fs::create_dir_all(&plain).expect("dir");
        let old = Layout::under("old/1");
        let (old_id, _, _) = env.register("old", &old).await;
        env.catalog.drop_index(&old_id).await.expect("dropped");
        let victim = format!("{}part-0.parquet", old.postings);
        symlink_at(root.join(&old.postings), &plain.join("it's"), env.now());
        let family = format!(
            r#"{{"centroids": ["{}/{spelling}/part-0.parquet"]}}"#,
            plain.display()
        );
        live_family_file_keeps(&env, &config, family, &victim, spelling).await;
    }
    let env = Env::open(Backend::Local, 529).await;
    let config = test_config();
    env.register("live", &Layout::under("live/1")).await;
    env.put_raw(
        "metadata/stray/v1.metadata.json",
        br#"{"note": "Bob's rebuild of indexes/x/"}"#,
    )
    .await;
    env.put_raw("indexes/plain-garbage/part-0", b"x").await;
    passes(&env, &config, 12).await;
    assert!(!env.exists_raw("metadata/stray/v1.metadata.json").await);
    assert!(
        !env.exists_raw("indexes/plain-garbage/part-0").await,
        "collection goes on once the stray file is gone"
    );
}

/// Files under `metadata/` whose reading gives up (they may name any file: a string a
/// shell reads otherwise on a local warehouse, a string longer than any name on every
/// store) go first: each keeps all of `indexes/` while it exists, but not the others, nor
/// a stray that names one of them, so two of them never keep each other and everything
/// is collected in time; every run reports them.
#[tokio::test]
async fn class8_files_that_may_name_anything_go_first() {
    for (n, backend) in [Backend::Local, Backend::Memory].into_iter().enumerate() {
        let env = Env::open(backend, 540 + n as u64).await;
        let config = test_config();
        env.register("live", &Layout::under("live/1")).await;
        let anything = |note: &str| match backend {
            Backend::Local => format!(r#"{{"note": "{note}: Bob's rebuild of indexes/x/"}}"#),
            _ => format!(
                r#"{{"note": "{note}", "path": "indexes/{}"}}"#,
                "x/".repeat(20_000)
            ),
        };
        let strays = [
            "metadata/a.json",
            "metadata/b/notes.metadata.json",
            "metadata/b/deep/c",
        ];
        for stray in strays {
            env.put_raw(stray, anything(stray).into_bytes().leak())
                .await;
        }
        // A stray naming one of them as written, and one naming their directory.
        env.put_raw("metadata/d.json", br#"{"n": "metadata/a.json"}"#)
            .await;
        env.put_raw("metadata/b/e.json", br#"{"n": "metadata/b"}"#)
            .await;
        env.put_raw("indexes/plain-garbage/part-0", b"x").await;
        let reports = passes(&env, &config, 16).await;
        let first = &reports[0];
        for stray in strays {
            assert!(
                first
                    .warnings
                    .iter()
                    .any(|w| w.starts_with(&format!("`{stray}` may name any file"))),
                "{backend:?}: {stray} is reported: {:?}",
                first.warnings
            );
        }
        for gone in strays.into_iter().chain([
            "metadata/d.json",
            "metadata/b/e.json",
            "indexes/plain-garbage/part-0",
        ]) {
            assert!(
                !env.exists_raw(gone).await,
                "{backend:?}: {gone} is still there: files that may name anything kept each other"
            );
        }
        assert_eq!(
            env.collect(&config).await.counts.reachable.objects,
            env.collect(&config).await.counts.scanned.objects,
            "{backend:?}: only the live index is left"
        );
    }
}

/// Round 100, F2: an empty garbage object whose `HEAD` the store refuses without a key
/// the collector does not have (S3 answers `400` for an object written with a
/// customer-provided encryption key, SSE-C: an engine's empty `_SUCCESS` marker, say)
/// stopped every run at the delete step's second look at it, `gc abandon` and every new
/// run too. It may have been written since, so it is kept with a warning, and collection
/// goes on around it.
#[tokio::test]
async fn redteam100_an_empty_object_the_store_will_not_describe_never_stops_collection() {
    let env = Env::open(Backend::Memory, 1510).await;
    let config = test_config();
    let live = Layout::under("live/1");
    env.register("live", &live).await;
    env.put("indexes/tmp/job1/_SUCCESS", b"").await;
    env.put("indexes/orphan/1/part-0", b"x").await;
    let store = HookedStore::new(Arc::new(env.sim.clone()))
        .refuse_heads_on(|key| key.ends_with("/_SUCCESS"));
    let gc = process_over(&env, Arc::new(store), 1510, &config);
    let mut warned = false;
    for _ in 0..(6 * HOUR / PASS_EVERY) {
        env.advance(PASS_EVERY);
        let report = gc
            .collect(env.now())
            .await
            .unwrap_or_else(|err| panic!("a run stopped: {err}"));
        warned |= report.warnings.iter().any(|warning| {
            warning.contains("indexes/tmp/job1/_SUCCESS") && warning.contains("it is kept")
        });
    }
    assert!(
        !env.exists("indexes/orphan/1/part-0").await,
        "garbage beside it is collected"
    );
    assert!(
        env.exists("indexes/tmp/job1/_SUCCESS").await,
        "the object the store will not describe is kept"
    );
    assert!(warned, "a run says why it was kept");
    assert!(
        env.all_exist(&live.files()).await,
        "the live index is whole"
    );
}

/// Round 57 (helper-53): a file under `metadata/` that is live only because a live
/// directory holds it (a family file names the directory, or an index table lies under
/// `metadata/`) is read by the metadata pass, not by the walk. When its reading gives up
/// (a path through `/proc/self/root`, a quoted name, a `**` glob) or it is too large to
/// read, it keeps everything while it is live: the file it names is not deleted, nor is
/// one that may name anything itself.
#[tokio::test]
async fn class5_a_live_file_in_a_live_directory_that_may_name_anything_keeps_everything() {
    let cases = [
        ("family directory", "/proc/self/root"),
        ("table under metadata/", "quote"),
        ("family directory", "globstar"),
        ("family directory", "a target that gives up too"),
        ("table under metadata/", "larger than any file read"),
    ];
    for (n, (live, spelling)) in cases.into_iter().enumerate() {
        let env = Env::open(Backend::Local, 550 + n as u64).await;
        let config = test_config();
        let root = env.local_dir.clone().expect("local");
        let target = "metadata/data/x.json";
        let body: &[u8] = match spelling {
            "a target that gives up too" => br#"{"note": "Bob's centroids"}"#,
            _ => br#"{"centroids": [[0.1, 0.2]]}"#,
        };
        env.put_raw(target, body).await;
        let named = match spelling {
            "/proc/self/root" => format!("/proc/self/root{}/{target}", root.display()),
            "globstar" => "metadata/**/x.json".to_owned(),
            "larger than any file read" => target.to_owned(),
            _ => "metadata/data/'x'.json".to_owned(),
        };
        // Written after the index was registered: publication refuses files that are no
        // metadata where a family reference leads (round 62).
        let mut layout = Layout::under("live/1");
        let holder = if live == "family directory" {
            layout.centroids_metadata = Some("metadata/fam/centroids.json".to_owned());
            "metadata/fam/parts/manifest.json"
        } else {
            layout.centroids = "metadata/cent/".to_owned();
            "metadata/cent/manifest.json"
        };
        env.register("live", &layout).await;
        if live == "family directory" {
            env.put_raw(
                "metadata/fam/centroids.json",
                br#"{"parts": "metadata/fam/parts/"}"#,
            )
            .await;
        }
        let holding = format!(r#"{{"payload": "{named}"}}"#);
        env.put_raw(holder, holding.into_bytes().leak()).await;
        if spelling == "larger than any file read" {
            // Grown after registration (publication refuses a file that large), sparse:
            // past the largest file whose strings are read, no disk used.
            let file = std::fs::OpenOptions::new()
                .write(true)
                .open(root.join(holder))
                .expect("holder");
            file.set_len(1_100_000_000).expect("sparse");
        }
        if spelling == "larger than any file read" {
            // The walk reads the live directory's files: this one cannot be read to the
            // end, so every run stops before deleting anything, as for a family file.
            for _ in 0..12 {
                env.advance(PASS_EVERY * 6);
                let run = GarbageCollector::new(env.catalog.clone(), config.clone())
                    .expect("gc")
                    .collect(env.now())
                    .await;
                let err = run.expect_err("stopped");
                assert!(err.message().contains("cannot be read to the end"), "{err}");
            }
        } else {
            let reports = passes(&env, &config, 12).await;
            assert!(
                reports.iter().all(|r| r.status == gc::GcStatus::Completed),
                "{live}, {spelling}"
            );
        }
        assert!(
            env.exists_raw(target).await,
            "{live}, {spelling}: {target} was deleted while a live file may name it"
        );
        assert!(env.exists_raw(holder).await, "{live}, {spelling}");
    }
}

/// Round 58 (helper-54, F1): a symbolic link in a directory a live family file names, or
/// in an index table placed under `metadata/`, leads to JSON the collector does not read
/// (outside the warehouse, or under `indexes/`): publication refuses such a directory, and
/// a link made there after registration makes the walk keep everything, with a warning.
#[tokio::test]
async fn class4_a_link_in_a_live_directory_is_refused_or_keeps_everything() {
    for (n, table) in [false, true].into_iter().enumerate() {
        let env = Env::open(Backend::Local, 560 + n as u64).await;
        let config = test_config();
        let root = env.local_dir.clone().expect("local");
        let outside = tempfile::tempdir().expect("dir");
        let target = "metadata/data/x.json";
        env.put_raw(target, br#"{"centroids": [[0.1]]}"#).await;
        std::fs::write(
            outside.path().join("m.json"),
            format!(r#"{{"payload": "{target}"}}"#),
        )
        .expect("outside json");
        let mut layout = Layout::under("live/1");
        let directory = if table {
            layout.centroids = "metadata/cent/".to_owned();
            env.put_raw("metadata/cent/part-0.parquet", b"PAR1").await;
            "metadata/cent"
        } else {
            env.put_raw(
                "metadata/fam/centroids.json",
                br#"{"parts": "metadata/fam/parts/"}"#,
            )
            .await;
            env.put_raw("metadata/fam/parts/part-0.json", br#"{"n": 1}"#)
                .await;
            layout.centroids_metadata = Some("metadata/fam/centroids.json".to_owned());
            "metadata/fam/parts"
        };
        symlink_at(
            outside.path().join("m.json"),
            &root.join(directory).join("m.json"),
            env.now(),
        );
        let (metadata, location) = env.new_index(&layout).await;
        drop(metadata);
        let id = env.id("live").await;
        let refused = env
            .catalog
            .register(&id, Some(&layout.source), &location)
            .await
            .expect_err("refused");
        assert_eq!(
            refused.kind(),
            parqdb_catalog::ErrorKind::InvalidIndexMetadata,
            "{refused}"
        );
        // The family file is no metadata: refused for that first (round 62).
        assert!(
            refused.message().contains("symbolic link")
                || refused.message().contains("is no metadata"),
            "{refused}"
        );
        // Registered first, the link (and the family file) made after: every run keeps
        // everything.
        std::fs::remove_file(root.join(directory).join("m.json")).expect("unlinked");
        let family = root.join("metadata/fam/centroids.json");
        let family_text = std::fs::read(&family).ok();
        if family_text.is_some() {
            std::fs::remove_file(&family).expect("family file removed");
        }
        env.catalog
            .register(&id, Some(&layout.source), &location)
            .await
            .expect("registered");
        if let Some(text) = family_text {
            std::fs::write(&family, text).expect("family file written");
        }
        symlink_at(
            outside.path().join("m.json"),
            &root.join(directory).join("m.json"),
            env.now(),
        );
        let reports = passes(&env, &config, 12).await;
        assert!(
            reports.iter().all(|r| r
                .warnings
                .iter()
                .any(|w| w.contains("symbolic link") || w.contains("it is no metadata"))),
            "table {table}: every run says why it keeps everything"
        );
        assert!(
            env.exists_raw(target).await,
            "table {table}: {target} was deleted"
        );
    }
}

/// Round 59 (helper-55): a live family file (no metadata) names JSON the collector must
/// read to know what it names: (A) a directory inside the warehouse beside the managed
/// prefixes (`extra/d/`), read as the walk reads directories under them; (B) a file or a
/// directory outside the warehouse, by absolute path or `file:` URI, which the collector
/// does not read: it may name anything. Rounds 60–61: the same by a path relative to the
/// root, and where nothing is there yet (an absolute path; a relative one into a directory
/// outside). A dropped index's table the JSON names stays.
#[tokio::test]
async fn class5_a_family_file_naming_json_beside_or_outside_the_managed_prefixes_keeps_it() {
    let cases = [
        "beside",
        "outside path",
        "outside uri",
        "outside directory",
        "outside, relative to the root",
        "outside, nothing there yet",
        "outside, relative to the root, nothing there yet",
    ];
    for (n, case) in cases.into_iter().enumerate() {
        let env = Env::open(Backend::Local, 570 + n as u64).await;
        let config = test_config();
        let old = Layout::under("old/1");
        let (old_id, _, _) = env.register("old", &old).await;
        env.catalog.drop_index(&old_id).await.expect("dropped");
        let victim = format!("{}part-0.parquet", old.postings);
        let naming = format!(r#"{{"tables": ["{victim}"]}}"#);
        let outside = tempfile::tempdir().expect("dir");
        let named = match case {
            "beside" => {
                env.put_raw("extra/d/g.json", naming.into_bytes().leak())
                    .await;
                "extra/d/".to_owned()
            }
            _ => {
                let root = env.local_dir.clone().expect("local");
                let naming = naming.replace(&victim, &format!("{}/{victim}", root.display()));
                // Beside the warehouse directory, for a path relative to the root.
                let beside = root.with_file_name(format!("outside-{n}"));
                let dir = match case {
                    "outside, relative to the root"
                    | "outside, relative to the root, nothing there yet" => beside.clone(),
                    _ => outside.path().to_path_buf(),
                };
                std::fs::create_dir_all(dir.join("d")).expect("dir");
                let json = dir.join("d/g.json");
                // Nothing there yet: a file may appear there at any time, which no run
                // reads, so the path alone (or a directory outside on its way) may name
                // anything.
                if !case.ends_with("nothing there yet") {
                    std::fs::write(&json, naming).expect("json");
                }
                match case {
                    "outside path" | "outside, nothing there yet" => json.display().to_string(),
                    "outside uri" => format!("file://{}", json.display()),
                    "outside, relative to the root"
                    | "outside, relative to the root, nothing there yet" => {
                        format!("../outside-{n}/d/g.json")
                    }
                    _ => format!("{}/d/", dir.display()),
                }
            }
        };
        let family = format!(r#"{{"parts": "{named}"}}"#);
        live_family_file_keeps(&env, &config, family, &victim, case).await;
    }
}

/// Round 61 (helper-57): JSON outside the warehouse that a live family file leads to by
/// spellings and from places round 60's outside rule did not try, though the name reading
/// does: a `file:` URI and an absolute path whose `..` follows a link (their letters lead
/// back inside; the second names nothing yet), a `file:` URI with a host, the `local:`
/// scheme, a path relative to the directory holding the warehouse, percent-encoded dot
/// segments, and the directory holding the warehouse, which holds the JSON directly. Each
/// may name anything: a dropped index's table the JSON names stays.
#[tokio::test]
async fn class5_every_path_a_family_string_leads_outside_by_keeps_what_is_there() {
    let cases = [
        "file URI, `..` after a link",
        "absolute path, `..` after a link, nothing there yet",
        "file URI with a host",
        "local scheme",
        "relative to the directory holding the warehouse",
        "percent-encoded dot segments",
        "the directory holding the warehouse",
    ];
    for (n, case) in cases.into_iter().enumerate() {
        let env = Env::open(Backend::Local, 590 + n as u64).await;
        let config = test_config();
        let old = Layout::under("old/1");
        let (old_id, _, _) = env.register("old", &old).await;
        env.catalog.drop_index(&old_id).await.expect("dropped");
        let victim = format!("{}part-0.parquet", old.postings);
        let root = env.local_dir.clone().expect("local");
        let parent = root.parent().expect("parent").to_path_buf();
        let naming = format!(r#"{{"tables": ["{}/{victim}"]}}"#, root.display());
        let beside = parent.join("outside");
        std::fs::create_dir_all(beside.join("d")).expect("dir");
        std::fs::write(beside.join("d/g.json"), &naming).expect("json");
        // `beside/l/../..` is `far` for the file system, `parent` by its letters.
        std::fs::create_dir_all(beside.join("far/a/b/warehouse")).expect("dir");
        std::os::unix::fs::symlink(beside.join("far/a/b"), beside.join("l")).expect("link");
        std::fs::create_dir_all(beside.join("far/warehouse")).expect("dir");
        std::fs::write(beside.join("far/warehouse/g.json"), &naming).expect("json");
        let named = match case {
            "file URI, `..` after a link" => {
                format!("file://{}/l/../../warehouse/g.json", beside.display())
            }
            "absolute path, `..` after a link, nothing there yet" => {
                format!("{}/l/../../warehouse/later.json", beside.display())
            }
            "file URI with a host" => format!("file://127.0.0.1{}/d/g.json", beside.display()),
            "local scheme" => format!("local://{}/d/g.json", beside.display()),
            "relative to the directory holding the warehouse" => "outside/d/g.json".to_owned(),
            "percent-encoded dot segments" => "%2e%2e/outside/d/g.json".to_owned(),
            _ => {
                std::fs::write(parent.join("g.json"), &naming).expect("json");
                format!("{}/", parent.display())
            }
        };
        let family = format!(r#"{{"parts": "{named}"}}"#);
        live_family_file_keeps(&env, &config, family, &victim, case).await;
    }
}

/// Round 53: what a live family file that is no metadata names, past the limits of
/// reading its strings: a string longer than any name as written, which a reader that
/// collapses repeated slashes makes into a live table's path (A1), and a path behind a
/// stray quote in a comment of JSON with comments, which shifts the pairing of quotes
/// (A3). Both keep what they may name while the file is live.
#[tokio::test]
async fn class5_a_family_file_past_the_string_readers_limits_keeps_what_it_may_name() {
    for backend in [Backend::Memory, Backend::Local] {
        for (n, overlong) in [true, false].into_iter().enumerate() {
            let env = Env::open(backend, 530 + n as u64).await;
            let config = test_config();
            let old = Layout::under("old/1");
            let (old_id, _, _) = env.register("old", &old).await;
            env.catalog.drop_index(&old_id).await.expect("dropped");
            let victim = format!("{}part-0.parquet", old.postings);
            let root = env.warehouse.root().trim_end_matches('/').to_owned();
            let family = match overlong {
                true => format!(
                    r#"{{"centroids": ["{root}{}{victim}"]}}"#,
                    "/".repeat(25_000)
                ),
                false => format!(
                    "{{ // centroids of the 5\" sample\n  \"centroids\": \"{root}/{victim}\" }}"
                ),
            };
            let case = format!("{backend:?}, overlong {overlong}");
            live_family_file_keeps(&env, &config, family, &victim, &case).await;
        }
    }
}

// ---------------------------------------------------------------------------------------
// 6. Lease fencing
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn class6_a_paused_run_whose_lease_was_taken_over_stops_before_deleting() {
    for backend in [Backend::Memory, Backend::Local] {
        let env = Env::open(backend, 601).await;
        let config = GcConfig {
            lease_duration: Duration::from_secs(5 * 60),
            ..test_config()
        };
        let dead = Layout::under("dead/1");
        let (id, _, location) = env.register("dead", &dead).await;
        env.advance(HOUR);
        env.catalog.drop_index(&id).await.expect("dropped");
        let mut doomed = dead.files();
        doomed.push(env.relative(&location));
        // Condemn everything, with a dry run telling when a real run would delete.
        for _ in 0..40 {
            env.advance(10 * MINUTE);
            let dry = GcConfig {
                dry_run: true,
                ..config.clone()
            };
            if env.collect(&dry).await.counts.deleted.objects > 0 {
                break;
            }
            env.collect(&config).await;
        }

        // Run A pauses right before deleting (a SIGSTOP, a long pause) ...
        let (paused_tx, paused_rx) = std::sync::mpsc::channel::<()>();
        let (resume_tx, resume_rx) = std::sync::mpsc::channel::<()>();
        let resume_rx = std::sync::Mutex::new(resume_rx);
        let a = GarbageCollector::new(env.catalog.clone(), config.clone())
            .expect("gc")
            .with_progress(move |event| {
                if *event
                    == (GcProgress::Phase {
                        phase: GcPhase::Delete,
                    })
                {
                    paused_tx.send(()).ok();
                    resume_rx.lock().expect("lock").recv().ok();
                }
            });
        let now = env.now();
        let run_a = tokio::task::spawn_blocking(move || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime")
                .block_on(a.collect(now))
        });
        tokio::task::spawn_blocking(move || paused_rx.recv())
            .await
            .expect("join")
            .expect("A reached its deletions");
        // ... while its lease expires and other runs (which delete nothing here: their
        // retention is longer) take the lease over many times, pruning generations.
        let patient = GcConfig {
            retention: Duration::from_secs(1000 * 3600),
            ..config.clone()
        };
        for _ in 0..12 {
            env.advance(10 * MINUTE);
            let report = env.collect(&patient).await;
            assert_eq!(report.status, gc::GcStatus::Completed);
        }
        let before = env.sim.deletions().len();
        resume_tx.send(()).expect("resume A");
        let outcome = run_a.await.expect("join");
        // A stops at its fence: with its run finished by the runs that took over, it
        // reports that run (with a warning); else it fails with `COMMIT_CONFLICT`.
        match outcome {
            Ok(report) => assert!(
                report
                    .warnings
                    .iter()
                    .any(|w| w.contains("by another invocation")),
                "{backend:?}: {report:?}"
            ),
            Err(err) => assert_eq!(err.kind(), ErrorKind::CommitConflict, "{backend:?}: {err}"),
        }
        assert_eq!(
            env.sim.deletions().len(),
            before,
            "{backend:?}: the stale run deleted"
        );
        assert!(env.all_exist_raw(&doomed).await);
    }
}

/// Found while writing the paused-run generator of the hostile simulation
/// (gc_simulation.rs): a run's time is fixed when it is
/// called, but a run paused before it walks the catalog (here: right after taking its
/// lease, before computing reachability) sees what changed during the pause. An old
/// metadata file a commit made unreachable during the pause was then given a retention
/// clock at the run's stale time, before it was even unreachable, and a later run
/// deleted it less than the retention period after the commit.
#[tokio::test]
async fn class6_a_paused_run_starts_no_retention_clock_before_what_it_saw() {
    for (backend, phase) in [
        (Backend::Memory, GcPhase::ComputeReachability),
        (Backend::Memory, GcPhase::AcquireLease),
        (Backend::Local, GcPhase::CheckOwnership),
    ] {
        let env = Env::open(backend, 603).await;
        let config = GcConfig {
            lease_duration: Duration::from_secs(5 * 60),
            ..test_config()
        };
        let layout = Layout::under("p/1");
        let (id, metadata, base) = env.register("p", &layout).await;
        env.advance(HOUR);

        // Run A pauses at `phase` ...
        let (paused_tx, paused_rx) = std::sync::mpsc::channel::<()>();
        let (resume_tx, resume_rx) = std::sync::mpsc::channel::<()>();
        let resume_rx = std::sync::Mutex::new(resume_rx);
        let a = GarbageCollector::new(env.catalog.clone(), config.clone())
            .expect("gc")
            .with_progress(move |event| {
                if *event == (GcProgress::Phase { phase }) {
                    paused_tx.send(()).ok();
                    resume_rx.lock().expect("lock").recv().ok();
                }
            });
        let now = env.now();
        let run_a = tokio::task::spawn_blocking(move || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime")
                .block_on(a.collect(now))
        });
        tokio::task::spawn_blocking(move || paused_rx.recv())
            .await
            .expect("join")
            .expect("A paused");
        // ... for half an hour, during which a commit makes the old metadata unreachable.
        env.advance(30 * MINUTE);
        let (_, new) = env.successor(&metadata, &Layout::under("p/2"), None).await;
        env.catalog
            .commit(&id, Some(&layout.source), &base, &new)
            .await
            .expect("committed");
        let committed = env.now();
        env.advance(MINUTE);
        resume_tx.send(()).expect("resume A");
        let report = run_a.await.expect("join").expect("A finished");
        assert_eq!(report.status, gc::GcStatus::Completed);

        // Later runs may delete the old metadata only a retention period after the commit.
        let old = env.relative(&base);
        let reports = passes(&env, &config, 5).await;
        assert!(deleted(&reports) > 0, "{backend:?}: nothing collected");
        let deletion = env
            .sim
            .deletions()
            .into_iter()
            .find(|d| d.path.ends_with(&old))
            .expect("the old metadata is collected");
        assert!(
            deletion.at_ms >= committed + 2 * HOUR,
            "{backend:?}, paused at {phase:?}: {old} deleted {} min after it became unreachable",
            (deletion.at_ms - committed) / MINUTE
        );
    }
}

/// A run paused after its walk, whose lease another run took over meanwhile, must not
/// record retention clocks from that stale walk: here an old metadata file was registered
/// again and committed away during the pause, the other run (which saw it reachable)
/// finished, and the resumed run then started its clock at its walk.
#[tokio::test]
async fn class6_a_run_that_lost_its_lease_records_no_clock_from_its_stale_walk() {
    for backend in [Backend::Memory, Backend::Local] {
        let env = Env::open(backend, 604).await;
        let config = GcConfig {
            lease_duration: Duration::from_secs(5 * 60),
            ..test_config()
        };
        env.register("other", &Layout::under("other/1")).await;
        // A writer wrote an index and crashed before registering it.
        let layout = Layout::under("w/1");
        let (metadata, location) = env.new_index(&layout).await;
        env.advance(HOUR);

        // Run A walks (the metadata is unreachable), then pauses ...
        let (paused_tx, paused_rx) = std::sync::mpsc::channel::<()>();
        let (resume_tx, resume_rx) = std::sync::mpsc::channel::<()>();
        let resume_rx = std::sync::Mutex::new(resume_rx);
        let a = GarbageCollector::new(env.catalog.clone(), config.clone())
            .expect("gc")
            .with_progress(move |event| {
                let phase = GcPhase::ScanMetadata;
                if *event == (GcProgress::Phase { phase }) {
                    paused_tx.send(()).ok();
                    resume_rx.lock().expect("lock").recv().ok();
                }
            });
        let now = env.now();
        let run_a = tokio::task::spawn_blocking(move || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime")
                .block_on(a.collect(now))
        });
        tokio::task::spawn_blocking(move || paused_rx.recv())
            .await
            .expect("join")
            .expect("A paused");
        // ... past its lease; the file is registered, another run (which sees it
        // reachable) finishes, and a commit makes the file unreachable again.
        env.advance(10 * MINUTE);
        let id = env.id("w").await;
        env.catalog
            .register(&id, Some(&layout.source), &location)
            .await
            .expect("registered");
        let report = env.collect(&config).await;
        assert_eq!(report.status, gc::GcStatus::Completed);
        env.advance(30 * MINUTE);
        let (_, new) = env.successor(&metadata, &Layout::under("w/2"), None).await;
        env.catalog
            .commit(&id, Some(&layout.source), &location, &new)
            .await
            .expect("committed");
        let committed = env.now();
        env.advance(MINUTE);
        resume_tx.send(()).expect("resume A");
        let outcome = run_a.await.expect("join");
        if let Err(err) = &outcome {
            assert_eq!(err.kind(), ErrorKind::CommitConflict, "{backend:?}: {err}");
        }

        // The file goes only a retention period after the commit.
        let old = env.relative(&location);
        passes(&env, &config, 5).await;
        let deletion = env
            .sim
            .deletions()
            .into_iter()
            .find(|d| d.path.ends_with(&old))
            .expect("the old metadata is collected");
        assert!(
            deletion.at_ms >= committed + 2 * HOUR,
            "{backend:?}: {old} deleted {} min after it became unreachable",
            (deletion.at_ms - committed) / MINUTE
        );
    }
}

// ---------------------------------------------------------------------------------------
// 7. The register/delete race
// ---------------------------------------------------------------------------------------

/// A pointer store hook: writes of index records (or reads) never answer.
struct Hanging {
    hang_puts: bool,
    hang_gets: std::sync::atomic::AtomicBool,
}

#[async_trait::async_trait]
impl Hook for Hanging {
    async fn before(
        &self,
        _inner: &Arc<dyn parqdb_catalog::store::PointerStore>,
        call: Call<'_>,
    ) -> Result<(), parqdb_catalog::store::StoreError> {
        let hang = match call {
            Call::Get { .. } | Call::GetIfChanged { .. } => {
                self.hang_gets.load(std::sync::atomic::Ordering::SeqCst)
            }
            Call::Put { key, .. } => self.hang_puts && key.as_str().starts_with("i/"),
            Call::List { .. } | Call::Transact { .. } => false,
        };
        if hang {
            futures::future::pending::<()>().await;
        }
        Ok(())
    }
}

#[tokio::test]
async fn class7_publications_are_bounded_by_the_publish_window() {
    let env = Env::open(Backend::Memory, 702).await;
    let layout = Layout::under("w/1");
    let (id, metadata, base) = env.register("w", &layout).await;
    let (_, new) = env.successor(&metadata, &Layout::under("w/2"), None).await;
    let raw = env.pointer_store.clone();
    let warehouse = env.warehouse.clone();
    let setup = env.catalog.clone();

    // The write never answers: the outcome is unknown at the end of the window.
    let hanging = Arc::new(Hooked::new(
        raw.clone(),
        Hanging {
            hang_puts: true,
            hang_gets: false.into(),
        },
    ));
    let catalog = Catalog::builder(hanging.clone(), warehouse.clone())
        .probe_on_first_write(false)
        .publish_window(Duration::from_millis(300))
        .build();
    catalog.claim_warehouse().await.expect("owned");
    let err = catalog
        .commit(&id, Some(&crate::support::gc::source()), &base, &new)
        .await
        .expect_err("hangs");
    assert_eq!(err.kind(), ErrorKind::CommitStateUnknown, "{err}");

    // Reads never answer: nothing is written, the operation fails within the window.
    let hanging = Arc::new(Hooked::new(
        raw.clone(),
        Hanging {
            hang_puts: false,
            hang_gets: false.into(),
        },
    ));
    let catalog = Catalog::builder(hanging.clone(), warehouse.clone())
        .probe_on_first_write(false)
        .publish_window(Duration::from_millis(300))
        .build();
    catalog.claim_warehouse().await.expect("owned");
    let changes = |objects: Vec<String>| -> Vec<String> {
        objects
            .into_iter()
            .filter(|name| name.starts_with("_gc/changes/"))
            .collect()
    };
    let logged_before = changes(env.objects().await);
    hanging
        .hook()
        .hang_gets
        .store(true, std::sync::atomic::Ordering::SeqCst);
    let started = std::time::Instant::now();
    let result = tokio::time::timeout(
        Duration::from_secs(30),
        catalog.commit(&id, Some(&crate::support::gc::source()), &base, &new),
    )
    .await
    .expect("bounded by the window");
    let err = result.expect_err("hangs");
    assert!(started.elapsed() < Duration::from_secs(30));
    assert!(
        matches!(
            err.kind(),
            ErrorKind::StoreUnavailable | ErrorKind::CommitStateUnknown
        ),
        "{err}"
    );
    assert_eq!(
        setup.load(&id).await.expect("load").metadata_location,
        base,
        "nothing was written"
    );
    // Round 34 F5: an operation the window cut off before it wrote withdraws its
    // change-log entry (left behind, it delays collection).
    if err.kind() == ErrorKind::StoreUnavailable {
        assert_eq!(
            changes(env.objects().await),
            logged_before,
            "the entry of a publication that wrote nothing is withdrawn"
        );
    }
}

#[test]
fn class7_the_collector_refuses_a_condemn_delay_within_the_publish_window() {
    let short = GcConfig {
        condemn_delay: Some(parqdb_catalog::catalog::PUBLISH_WINDOW),
        ..GcConfig::default()
    };
    let err = short.validate().expect_err("too short");
    assert_eq!(err.kind(), ErrorKind::Configuration);
    assert!(err.message().contains("publish window"), "{err}");
    GcConfig {
        force: true,
        ..short
    }
    .validate()
    .expect("forced");
}

#[tokio::test]
async fn class7_a_condemned_centroids_file_is_not_picked_up_by_a_commit() {
    let env = Env::open(Backend::Memory, 701).await;
    let config = test_config();
    // An index whose centroids metadata is shared, then dropped: the centroids file is
    // condemned.
    let (_, centroids_location) = env.new_index(&Layout::under("c/1")).await;
    let centroids = env.relative(&centroids_location);
    let mut old = Layout::under("old/1");
    old.centroids_metadata = Some(centroids.clone());
    let (old_id, _, _) = env.register("old", &old).await;
    let live = Layout::under("live/1");
    let (live_id, live_meta, live_base) = env.register("live", &live).await;
    env.advance(HOUR);
    env.catalog.drop_index(&old_id).await.expect("dropped");
    let mut condemned = false;
    for _ in 0..60 {
        env.advance(10 * MINUTE);
        let report = env.collect(&config).await;
        if report
            .actions
            .iter()
            .any(|a| a.path == centroids && a.action == gc::ActionKind::Condemn)
        {
            condemned = true;
            break;
        }
    }
    assert!(condemned, "the shared centroids were never condemned");
    // A commit that starts using the condemned centroids file is refused.
    let mut next = Layout::under("live/2");
    next.centroids_metadata = Some(centroids.clone());
    let (_, new) = env.successor(&live_meta, &next, None).await;
    let err = env
        .catalog
        .commit(&live_id, Some(&next.source), &live_base, &new)
        .await
        .expect_err("condemned reference");
    assert_eq!(err.kind(), ErrorKind::InvalidIndexMetadata, "{err}");
    assert!(err.message().contains("condemned"), "{err}");
}

// ---------------------------------------------------------------------------------------
// Red team (issue 15 review): setups the classes above do not cover yet. Each test fails
// on the code it was written against; see the commit message for the finding.
// ---------------------------------------------------------------------------------------

/// Run the collector every 10 minutes for `hours`, asserting every run succeeds and
/// calling `check` after each.
async fn checked_passes(
    env: &Env,
    config: &GcConfig,
    hours: i64,
    what: &str,
    mut check: impl AsyncFnMut(&GcReport),
) -> Vec<GcReport> {
    let until = env.now() + hours * HOUR;
    let mut reports = Vec::new();
    while env.now() < until {
        env.advance(PASS_EVERY);
        let report = match env.gc(config.clone()).collect(env.now()).await {
            Ok(report) => report,
            Err(err) => panic!("{what}: a gc run failed: {err}"),
        };
        check(&report).await;
        reports.push(report);
    }
    reports
}

/// A stray object_store multipart staging file (`<name>#<digits>`, what
/// `LocalFileSystem::put_multipart` leaves behind when a writer dies) under `metadata/`
/// or `indexes/` must not make every run fail: object_store cannot address such a name,
/// so the collector must skip it.
#[tokio::test]
async fn redteam_liveness_object_store_staging_files_do_not_stop_collection() {
    for stray in [
        "metadata/u/00001-x.metadata.json#1",
        "indexes/stale/1/ivf_postings/part-0.parquet#2",
    ] {
        let env = Env::open(Backend::Local, 1501).await;
        let config = test_config();
        env.register("live", &Layout::under("live/1")).await;
        let root = env.local_dir.clone().expect("local");
        let path = root.join(stray);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("dirs");
        std::fs::write(&path, b"{}").expect("stray");
        set_mtime(&path, env.now());
        // ... and a ledger entry an earlier version wrote for it.
        let entry = root.join(format!(
            "_gc/ledger/{stray}/u-1-1-00000000000000000000000000000001.json"
        ));
        std::fs::create_dir_all(entry.parent().expect("parent")).expect("dirs");
        std::fs::write(&entry, b"{}").expect("ledger entry");
        env.put("indexes/garbage/1/part-0", b"x").await;
        checked_passes(&env, &config, 6, stray, async |_| {}).await;
        assert!(
            !env.exists("indexes/garbage/1/part-0").await,
            "{stray}: garbage is still collected"
        );
        assert!(
            path.exists(),
            "{stray}: never deleted (nothing can name it)"
        );
    }
}

/// An S3 client of the test server (raw keys, past object_store's parsing) and the
/// warehouse's bucket.
fn raw_s3(env: &Env) -> (aws_sdk_s3::Client, String) {
    let bucket = env
        .warehouse
        .root()
        .strip_prefix("s3://")
        .and_then(|rest| rest.split('/').next())
        .expect("bucket")
        .to_owned();
    (crate::support::services::raw_s3_client(), bucket)
}

/// The scan reads a page's ledger entries with one listing bounded by the page's listed
/// names. A name the local listing skips (not UTF-8, or a control character) is shown as
/// its path, which sorts nowhere near the page: when it ended a page, the bound came
/// from it, no entry of the page was read, and every object of the page had its clock
/// restarted on every run (found by the attack on the page-wise ledger).
#[tokio::test]
async fn redteam_liveness_a_page_ending_on_a_skipped_name_still_collects_its_objects() {
    let env = Env::open(Backend::Local, 1503).await;
    let config = GcConfig {
        page_size: 10,
        partitions: 1,
        ..test_config()
    };
    env.register("live", &Layout::under("live/1")).await;
    let garbage: Vec<String> = (0..9).map(|i| format!("indexes/g/f{i}")).collect();
    for name in &garbage {
        env.put(name, b"x").await;
    }
    let root = env.local_dir.clone().expect("local");
    let skipped = root.join("indexes/g/zz\u{1}");
    std::fs::write(&skipped, b"x").expect("a file name with a control character");
    set_mtime(&skipped, env.now());
    checked_passes(&env, &config, 6, "skipped name", async |_| {}).await;
    for name in &garbage {
        assert!(!env.exists(name).await, "`{name}` is collected");
    }
    assert!(skipped.exists(), "a skipped file is never deleted");
}
/// An empty object doomed by a run's scan whose name holds a new file by the time the
/// run deletes (a folder marker's name where a writer then put a file) is kept: deleting
/// the name would delete the new file.
#[tokio::test]
async fn redteam_an_empty_doomed_object_whose_name_holds_a_new_file_is_kept() {
    let env = Env::open(Backend::Memory, 1506).await;
    let config = GcConfig {
        partitions: 1,
        ..test_config()
    };
    env.register("live", &Layout::under("live/1")).await;
    env.put("indexes/t/k", b"").await;
    // Tracked, then condemned after the 2 h retention.
    passes(&env, &config, 2).await;
    env.advance(20 * MINUTE);
    env.collect(&config).await;
    env.advance(20 * MINUTE);
    let gc = env.gc(config.clone());
    let planned = gc.step(GcStep::Plan, env.now(), None).await.expect("plan");
    let run = planned.report.run_id;
    gc.step(GcStep::Scan { run, partition: 0 }, env.now(), None)
        .await
        .expect("scan");
    env.put("indexes/t/k", b"a file a writer is about to publish")
        .await;
    for step in [
        GcStep::Verify { run },
        GcStep::Delete { run, partition: 0 },
        GcStep::Finish { run },
    ] {
        gc.step(step, env.now(), None).await.expect("step");
    }
    assert!(env.exists("indexes/t/k").await, "the new file is kept");
}
/// Rule (P) must use the same "any spelling" matching as reachability: tables an earlier
/// writer stored under object_store's `PathPart` spelling (`~` → `%7E`), which the
/// collector keeps while live because an alias of their name is reachable, must also be
/// kept while an unreachable metadata file naming them exists. Here a rename (a new
/// incarnation of the index) moves the old metadata file's retention clock later than its
/// tables', so the tables come up for deletion first; (P) is what must hold them.
#[tokio::test]
async fn redteam_p_tables_in_an_earlier_writers_spelling_outlive_the_metadata_naming_them() {
    use parqdb_catalog::IndexMetadata;
    use parqdb_catalog::family::FamilyRegistry;
    for backend in [Backend::Memory, Backend::Local] {
        for encoded in [false, true] {
            let env = Env::open(backend, 1503).await;
            let config = test_config();
            let old = Layout {
                centroids: "indexes/t~1/ivf_centroids/".into(),
                postings: "indexes/t~1/ivf_postings/".into(),
                ..Layout::under("unused")
            };
            let stored: Vec<String> = old
                .files()
                .into_iter()
                .map(|name| {
                    if encoded {
                        name.replace('~', "%7E")
                    } else {
                        name
                    }
                })
                .collect();
            for name in &stored {
                let name: &'static str = Box::leak(name.clone().into_boxed_str());
                env.put_raw(name, b"0123456789").await;
            }
            let metadata = IndexMetadata::create(
                crate::support::gc::contents(&old),
                BTreeMap::new(),
                env.clock.as_ref(),
                env.catalog.ids().as_ref(),
                &FamilyRegistry::builtin(),
            )
            .expect("metadata");
            let m1 = env.write_metadata(&metadata).await;
            let m1_name = env.relative(&m1);
            let id = env.id("a").await;
            env.catalog
                .register(&id, Some(&old.source), &m1)
                .await
                .expect("registered");
            let reports = passes(&env, &config, 2).await;
            assert_eq!(deleted(&reports), 0, "{backend:?} encoded={encoded}: live");
            // Commit away from M1 (its tables are no longer in any retained snapshot).
            // (Two commits: a commit may only remove snapshots that were not current.)
            let (m2_metadata, m2) = env.successor(&metadata, &Layout::under("t2/1"), None).await;
            env.catalog
                .commit(&id, Some(&old.source), &m1, &m2)
                .await
                .expect("committed");
            let expired = m2_metadata
                .expire_snapshots(Some(1), None, env.clock.as_ref())
                .expect("expired");
            let m3 = env.write_metadata(&expired).await;
            env.catalog
                .commit(&id, None, &m2, &m3)
                .await
                .expect("expired M1's snapshot");
            passes(&env, &config, 1).await;
            // A rename: a new incarnation of the same index, which may have re-published M1.
            env.catalog
                .rename(&id, &env.id("b").await)
                .await
                .expect("renamed");
            let what = format!("{backend:?} encoded={encoded}");
            checked_passes(&env, &config, 8, &what, async |_| {
                if env.exists_raw(&m1_name).await {
                    assert!(
                        env.all_exist_raw(&stored).await,
                        "{what}: tables were deleted while the metadata file naming them \
                         still exists (and, not condemned yet, can be registered again)"
                    );
                }
            })
            .await;
        }
    }
}

/// Nothing a live index names may be deleted, wherever it is: a table location under
/// `_gc/` (validation accepts any relative location) must either be refused at publication
/// or survive the ledger sweep and journal pruning.
#[tokio::test]
async fn redteam_live_tables_under_the_collectors_own_directory_are_never_deleted() {
    for backend in [Backend::Memory, Backend::Local] {
        let env = Env::open(backend, 1504).await;
        let config = test_config();
        let layout = Layout {
            centroids: "_gc/ledger/t/ivf_centroids/".into(),
            postings: "_gc/journal/t/ivf_postings/".into(),
            ..Layout::under("unused")
        };
        // Iceberg/Spark-style data file names start with digits and a dash.
        env.put("_gc/journal/t/ivf_postings/00000-0-data.parquet", b"x")
            .await;
        let mut live = layout.files();
        live.push("_gc/journal/t/ivf_postings/00000-0-data.parquet".into());
        let id = env.id("gcdir").await;
        let (_, location) = env.new_index(&layout).await;
        match env
            .catalog
            .register(&id, Some(&layout.source), &location)
            .await
        {
            Err(err) if err.kind() == ErrorKind::InvalidIndexMetadata => continue, // refused: fine
            Err(err) => panic!("{backend:?}: {err}"),
            Ok(_) => {}
        }
        passes(&env, &config, 8).await;
        env.catalog.load(&id).await.expect("still live");
        for name in &live {
            assert!(
                env.exists(name).await,
                "{backend:?}: the live table file {name} was deleted"
            );
        }
    }
}

/// A source table bound inside the warehouse is the user's data ("never owned, hence never
/// deleted"). Written the way Hadoop/Spark print local paths (`file:/dir/...`) or with
/// S3A's scheme (`s3a://bucket/...`), it must not be deleted while the index is live (or
/// the binding must be refused).
#[tokio::test]
async fn redteam_a_live_source_table_inside_the_warehouse_is_never_deleted() {
    for backend in [Backend::Local] {
        redteam_a_live_source_table_inside_the_warehouse_is_never_deleted_on(backend).await;
    }
}

/// `redteam_a_live_source_table_inside_the_warehouse_is_never_deleted` on one backend.
async fn redteam_a_live_source_table_inside_the_warehouse_is_never_deleted_on(backend: Backend) {
    let env = Env::open(backend, 1505).await;
    let config = test_config();
    let location = match backend {
        Backend::Local => format!(
            "file:{}/indexes/src/",
            env.local_dir.as_ref().expect("local").display()
        ),
        _ => format!(
            "{}/indexes/src/",
            env.warehouse.root().replacen("s3://", "s3a://", 1)
        ),
    };
    env.put("indexes/src/part-0.parquet", b"source rows").await;
    let layout = Layout {
        source: crate::support::gc::source_at(&location),
        ..Layout::under("srcidx/1")
    };
    let id = env.id("src").await;
    let (_, metadata_location) = env.new_index(&layout).await;
    match env
        .catalog
        .register(&id, Some(&layout.source), &metadata_location)
        .await
    {
        Err(err) if err.kind() == ErrorKind::InvalidIndexMetadata => return, // refused: fine
        Err(err) => panic!("{backend:?}: {err}"),
        Ok(_) => {}
    }
    passes(&env, &config, 8).await;
    env.catalog.load(&id).await.expect("still live");
    assert!(
        env.exists("indexes/src/part-0.parquet").await,
        "{backend:?}: the live index's source table `{location}` was deleted"
    );
}

/// A warehouse whose marker was lost (a lifecycle rule, a partial restore, a clean-up
/// script) still holds the owner's live indexes: a stranger's first write must not claim
/// it silently (after which the stranger's collector deletes the owner's live data).
#[tokio::test]
async fn redteam_a_warehouse_that_lost_its_marker_is_not_taken_over_by_a_stranger() {
    for backend in [Backend::Memory, Backend::Local] {
        let env = Env::open(backend, 1506).await;
        let config = test_config();
        let live = Layout::under("live/1");
        let (id, _, location) = env.register("live", &live).await;
        let mut owned = live.files();
        owned.push(env.relative(&location));
        lose_marker(&env).await;
        let stranger = env.foreign_catalog(1507);
        let what = format!("{backend:?}: a stranger");
        intruder_deletes_nothing(&env, stranger, &config, &id, &owned, &what).await;
    }
}

/// The ownership marker goes (a lifecycle rule, a partial restore, a clean-up script).
async fn lose_marker(env: &Env) {
    env.warehouse
        .object_store()
        .delete(
            &env.warehouse
                .path(parqdb_catalog::warehouse::OWNER_MARKER)
                .expect("name"),
        )
        .await
        .expect("marker lost");
}

/// `intruder` (a stranger's catalog, or a copy of the owner's) writes into `env`'s
/// warehouse; if it may, its collector runs every ten minutes for eight hours. The owner's
/// index `id` and every file of `owned` must outlive it.
async fn intruder_deletes_nothing(
    env: &Env,
    intruder: Catalog,
    config: &GcConfig,
    id: &IndexIdentifier,
    owned: &[String],
    what: &str,
) {
    let took_over = intruder
        .create_namespace(&Namespace::new(["mine"]).expect("ns"), BTreeMap::new())
        .await;
    if took_over.is_ok() {
        let collector = GarbageCollector::new(intruder, config.clone()).expect("gc");
        let until = env.now() + 8 * HOUR;
        while env.now() < until {
            env.advance(10 * MINUTE);
            collector
                .collect(env.now())
                .await
                .unwrap_or_else(|err| panic!("{what}: its gc failed: {err}"));
        }
    }
    for name in owned {
        assert!(
            env.exists(name).await,
            "{what}: the owner's live file {name} was deleted after it claimed the warehouse"
        );
    }
    env.catalog
        .load(id)
        .await
        .unwrap_or_else(|err| panic!("{what}: the owner's index is not live: {err}"));
}

/// A copy of the pointer store (a backup restored elsewhere, a DynamoDB point-in-time
/// restore into a new table, a cloned staging catalog) carries the owner's catalog id.
/// It must not pass as the owner: otherwise two catalogs write into one warehouse and the
/// owner's collector deletes the copy's live indexes (and the copy's, the owner's).
#[tokio::test]
async fn redteam_a_copy_of_the_pointer_store_does_not_pass_as_the_owner() {
    use parqdb_catalog::store::LocalStore;
    let env = Env::open(Backend::Local, 1508).await;
    let config = test_config();
    env.register("live", &Layout::under("live/1")).await;
    let root = env.local_dir.clone().expect("local");
    let staging = root.parent().expect("parent").join("staging-catalog");
    copy_dir(&root.join("_catalog"), &staging);
    let clone = Catalog::builder(Arc::new(LocalStore::new(&staging)), env.warehouse.clone())
        .clock(env.clock.clone())
        .ids(Arc::new(parqdb_catalog::SeededIds::new(1509)))
        .build();
    let layout = Layout::under("staging/1");
    let (_, location) = env.new_index(&layout).await;
    let ns = Namespace::new(["staging"]).expect("ns");
    let id = IndexIdentifier::new(ns.clone(), "idx").expect("id");
    let written = match clone.create_namespace(&ns, BTreeMap::new()).await {
        Ok(()) => clone
            .register(&id, Some(&layout.source), &location)
            .await
            .map(|_| ()),
        Err(err) => Err(err),
    };
    if let Err(err) = written {
        assert_eq!(err.kind(), ErrorKind::WarehouseNotOwned, "{err}");
        return; // refused: fine
    }
    passes(&env, &config, 8).await;
    clone.load(&id).await.expect("live in the copy");
    let mut live = layout.files();
    live.push(env.relative(&location));
    for name in &live {
        assert!(
            env.exists(name).await,
            "the copy's live file {name} was deleted by the owner's collector"
        );
    }
}

/// Metadata published through a symbolic link under `metadata/` (register reads through
/// it) is invisible to the collector's listing, so (P) cannot see it: after a drop its
/// tables were deleted while the file stayed registrable. Either refuse such a location or
/// keep what the file names while it exists.
#[tokio::test]
async fn redteam_metadata_behind_a_link_under_metadata_keeps_its_tables() {
    let env = Env::open(Backend::Local, 1510).await;
    let config = test_config();
    let root = env.local_dir.clone().expect("local");
    let shared = root.parent().expect("parent").join("shared-metadata");
    std::fs::create_dir_all(&shared).expect("dir");
    std::fs::create_dir_all(root.join("metadata")).expect("dir");
    std::os::unix::fs::symlink(&shared, root.join("metadata/ext")).expect("link");
    let layout = Layout::under("linked/1");
    env.write_tables(&layout).await;
    let metadata = parqdb_catalog::IndexMetadata::create(
        crate::support::gc::contents(&layout),
        BTreeMap::new(),
        env.clock.as_ref(),
        env.catalog.ids().as_ref(),
        &parqdb_catalog::family::FamilyRegistry::builtin(),
    )
    .expect("metadata");
    let location = env
        .warehouse
        .write_new(
            "metadata/ext/m.metadata.json",
            Bytes::from(metadata.to_json_vec()),
        )
        .await
        .expect("written through the link");
    let id = env.id("linked").await;
    match env
        .catalog
        .register(&id, Some(&layout.source), &location)
        .await
    {
        Err(err) if err.kind() == ErrorKind::InvalidIndexMetadata => return, // refused: fine
        Err(err) => panic!("{err}"),
        Ok(_) => {}
    }
    env.advance(HOUR);
    env.catalog.drop_index(&id).await.expect("dropped");
    let tables = layout.files();
    checked_passes(&env, &config, 8, "linked", async |_| {
        if shared.join("m.metadata.json").exists() {
            for name in &tables {
                assert!(
                    env.exists(name).await,
                    "{name} was deleted while the metadata file naming it (behind the link) still exists and can be registered again"
                );
            }
        }
    })
    .await;
}

/// A stray lease generation with the largest number must not panic the collector (nor
/// wrap the fence around in release builds).
#[tokio::test]
async fn redteam_a_stray_lease_generation_does_not_panic_the_collector() {
    let env = Env::open(Backend::Memory, 1511).await;
    let config = test_config();
    env.register("live", &Layout::under("live/1")).await;
    env.put(
        &format!("_gc/lease/{}.json", u64::MAX),
        br#"{"holder":"00000000-0000-0000-0000-000000000001","acquired-ms":0,"expires-ms":0,"released":true}"#,
    )
    .await;
    env.advance(10 * MINUTE);
    let collector = env.gc(config);
    let now = env.now();
    let outcome = tokio::spawn(async move { collector.collect(now).await }).await;
    match outcome {
        Err(join) => panic!("the collector panicked: {join}"),
        Ok(Ok(_)) => {}
        Ok(Err(err)) => assert_eq!(err.kind(), ErrorKind::CorruptRecord, "{err}"),
    }
}

/// A stray JSON file under `metadata/` whose strings happen to name a managed prefix
/// (`"metadata"`, `"indexes"`: any tool's config or notes) must not stop all collection
/// for good; its "references" kept everything below both prefixes, itself included, so
/// nothing was ever deleted again (and no warning said why).
#[tokio::test]
async fn redteam_liveness_a_stray_json_naming_a_managed_prefix_does_not_stop_collection() {
    for backend in [Backend::Memory, Backend::Local] {
        let env = Env::open(backend, 1512).await;
        let config = test_config();
        let live = Layout::under("live/1");
        env.register("live", &live).await;
        env.put_raw(
            "metadata/notes.json",
            br#"{"layout": {"metadata": "metadata", "tables": "indexes"}}"#,
        )
        .await;
        env.put("indexes/garbage/1/part-0", b"x").await;
        passes(&env, &config, 8).await;
        assert!(
            !env.exists("indexes/garbage/1/part-0").await,
            "{backend:?}: garbage is never collected any more"
        );
        assert!(
            !env.exists_raw("metadata/notes.json").await,
            "{backend:?}: the stray file keeps itself forever"
        );
        assert!(env.all_exist_raw(&live.files()).await, "{backend:?}");
    }
}

/// The publish window must bound when a pointer write can become visible, not only when
/// the caller hears back: once register reports that the window ran out, the write must
/// not land later. The local pointer store writes in a blocking thread that waits for the
/// key's lock (held here as by a paused writer of the same key, or a hung file system)
/// and is not cancelled with the operation, so the register lands whenever the lock is
/// released: after the collector's verification walk, a pointer to a deleted file.
#[tokio::test]
async fn redteam_a_register_that_ran_out_of_its_window_never_lands_later() {
    use parqdb_catalog::store::LocalStore;
    let env = Env::open(Backend::Local, 1513).await;
    let layout = Layout::under("late/1");
    let (_, location) = env.new_index(&layout).await;
    let id = env.id("late").await;
    let root = env.local_dir.clone().expect("local");
    let lock_path = root.join("_catalog/i/ns/=late.lock");
    std::fs::create_dir_all(lock_path.parent().expect("parent")).expect("dir");
    let held = std::fs::File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .expect("lock file");
    held.lock().expect("held by a paused writer");
    let catalog = Catalog::builder(
        Arc::new(LocalStore::new(root.join("_catalog"))),
        env.warehouse.clone(),
    )
    .probe_on_first_write(false)
    .publish_window(Duration::from_millis(300))
    .build();
    catalog.claim_warehouse().await.expect("owned");
    let err = catalog
        .register(&id, Some(&layout.source), &location)
        .await
        .expect_err("the window runs out");
    assert_eq!(err.kind(), ErrorKind::CommitStateUnknown, "{err}");
    // Long after the window (and after any collector run that started then) the lock goes.
    tokio::time::sleep(Duration::from_millis(200)).await;
    held.unlock().expect("released");
    drop(held);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let late = env.catalog.load(&id).await;
    assert!(
        late.is_err(),
        "the register landed after its publish window ran out: {late:?}"
    );
}

/// The owner's claim record (`_gc/claims/<id>.json`) is only "this catalog's own" if it
/// names this catalog's pointer store: a copy of the owner's pointer store (a restored
/// backup, a cloned staging catalog) carries the owner's id. Once the marker is lost, the
/// copy must not take the record for its own, re-claim the warehouse (locking the owner
/// out) and then collect the owner's indexes published after the copy was taken.
#[tokio::test]
async fn redteam16_a_copy_of_the_pointer_store_does_not_reclaim_a_warehouse_that_lost_its_marker() {
    use parqdb_catalog::store::LocalStore;
    let env = Env::open(Backend::Local, 1601).await;
    let config = test_config();
    env.register("old", &Layout::under("old/1")).await;
    let root = env.local_dir.clone().expect("local");
    let staging = root.parent().expect("parent").join("staging-catalog");
    copy_dir(&root.join("_catalog"), &staging);
    // The owner goes on publishing after the copy was taken.
    let newer = Layout::under("newer/1");
    let (newer_id, _, location) = env.register("newer", &newer).await;
    let mut owned = newer.files();
    owned.push(env.relative(&location));
    std::fs::remove_file(root.join(parqdb_catalog::warehouse::OWNER_MARKER)).expect("marker lost");
    let clone = Catalog::builder(Arc::new(LocalStore::new(&staging)), env.warehouse.clone())
        .clock(env.clock.clone())
        .ids(Arc::new(parqdb_catalog::SeededIds::new(1602)))
        .build();
    let what = "a copy of the owner's pointer store";
    intruder_deletes_nothing(&env, clone, &config, &newer_id, &owned, what).await;
}

/// A warehouse claimed without leaving a claim record (claimed by a version before claim
/// records, or a claim that stopped between the marker and the record) and in use for
/// less than `UNCLAIMED_METADATA_AGE` must still not be taken over by a stranger once its
/// marker is lost: the owner's writes leave the record the first claim did not.
#[tokio::test]
async fn redteam16_a_warehouse_claimed_without_a_claim_record_is_not_taken_over() {
    for backend in [Backend::Memory, Backend::Local] {
        redteam16_a_warehouse_claimed_without_a_claim_record_is_not_taken_over_on(backend).await;
    }
}

/// `redteam16_a_warehouse_claimed_without_a_claim_record_is_not_taken_over` on one backend.
async fn redteam16_a_warehouse_claimed_without_a_claim_record_is_not_taken_over_on(
    backend: Backend,
) {
    let env = Env::open(backend, 1603).await;
    let config = test_config();
    for record in env.objects().await {
        if record.starts_with("_gc/claims/") {
            env.warehouse
                .object_store()
                .delete(&env.warehouse.path(&record).expect("name"))
                .await
                .expect("no claim record");
        }
    }
    let live = Layout::under("live/1");
    let (id, _, location) = env.register("live", &live).await;
    let mut owned = live.files();
    owned.push(env.relative(&location));
    env.advance(HOUR);
    lose_marker(&env).await;
    let stranger = env.foreign_catalog(1604);
    let what = format!("{backend:?}: a stranger");
    intruder_deletes_nothing(&env, stranger, &config, &id, &owned, &what).await;
}

/// Runs of many steps (issue 16) in a hostile `_gc/runs/`: a page claiming a partition
/// done before its scan (so its nested warehouse is never seen by that run), a doomed
/// list naming live files (and ledger files that are none), and stray files another
/// engine wrote into a run's directory: nothing live, nested or foreign is deleted, and
/// the next runs still collect everything. (`_gc/` is the collector's own, like its
/// ledger: a doomed entry naming an unreachable object is trusted as a condemnation is.)
#[tokio::test]
async fn redteam16_forged_run_pages_never_delete_live_or_foreign_files() {
    for backend in [Backend::Local, Backend::Memory] {
        redteam16_forged_run_pages_never_delete_live_or_foreign_files_on(backend).await;
    }
}

/// `redteam16_forged_run_pages_never_delete_live_or_foreign_files` on one backend.
async fn redteam16_forged_run_pages_never_delete_live_or_foreign_files_on(backend: Backend) {
    let config = GcConfig {
        budget: Some(Duration::ZERO),
        page_size: 1,
        partitions: 2,
        ..test_config()
    };
    let env = Env::open(backend, 1605).await;
    let live = Layout::under("m-live/1");
    env.register("live", &live).await;
    let garbage: Vec<String> = ["a", "b", "c", "d"]
        .iter()
        .map(|dir| format!("indexes/{dir}/1/part-0.parquet"))
        .collect();
    for name in &garbage {
        env.put(name, b"garbage").await;
    }
    env.put("indexes/z/wh/_catalog-owner.json", b"nested").await;
    env.put("indexes/z/wh/data/part-0", b"nested").await;
    env.advance(10 * MINUTE);
    // Plan a run, then forge its pages before its scan begins.
    let report = env.collect(&config).await;
    let run = report.run_id;
    let run_dir = env
        .objects()
        .await
        .into_iter()
        .find(|name| name.starts_with("_gc/runs/") && name.ends_with("/plan.json"))
        .map(|plan| plan.trim_end_matches("/plan.json").to_owned())
        .expect("a planned run");
    let mut doomed = Vec::new();
    for name in live.files() {
        doomed.push(serde_json::json!({
            "name": name, "size": 1, "clock-ms": 0, "clock-walk-ms": 0,
            "ledger-files": [name.clone(), "_gc/lease/00000000000000000001.json"],
            "condemned-ms": 7_200_001,
        }));
    }
    let forged = serde_json::json!({
        "seq": 0, "after": null, "done": true, "totals": {}, "doomed": doomed, "doomed-total": 9,
    });
    env.warehouse
        .put_if_absent(
            &format!("{run_dir}/scan/1/0000000000.json"),
            Bytes::from(forged.to_string()),
        )
        .await
        .expect("forged");
    for stray in [
        "notes.txt",
        "scan/x/0000000000.json",
        "scan/0/part-0.parquet",
    ] {
        env.warehouse
            .put_if_absent(&format!("{run_dir}/{stray}"), Bytes::from_static(b"stray"))
            .await
            .expect("stray");
    }
    // Until the forged run and two more have finished and collected the garbage, and
    // then for as long again (at most 12 h).
    let (start, until) = (env.now(), env.now() + 12 * HOUR);
    let mut finished = std::collections::BTreeSet::new();
    let mut stop_at = until;
    while env.now() < stop_at {
        if stop_at == until
            && finished.contains(&run)
            && finished.len() >= 3
            && env.none_exist(&garbage).await
        {
            stop_at = env.now() + (env.now() - start);
        }
        env.advance(2 * MINUTE);
        let report = env.collect(&config).await;
        if report.status == gc::GcStatus::Completed {
            finished.insert(report.run_id);
        }
        for name in live.files() {
            assert!(
                env.exists(&name).await,
                "{backend:?}: live `{name}` deleted"
            );
        }
        assert!(
            env.exists("indexes/z/wh/data/part-0").await,
            "{backend:?}: nested data deleted"
        );
        for stray in [
            "notes.txt",
            "scan/x/0000000000.json",
            "scan/0/part-0.parquet",
        ] {
            assert!(
                env.exists(&format!("{run_dir}/{stray}")).await,
                "{backend:?}: stray {stray} in a run's directory deleted"
            );
        }
    }
    assert!(
        finished.contains(&run),
        "{backend:?}: the forged run finished"
    );
    assert!(finished.len() >= 3, "{backend:?}: {finished:?}");
    for name in &garbage {
        assert!(
            !env.exists(name).await,
            "{backend:?}: `{name}` not collected"
        );
    }

    // A pointer store's records in a top-level directory named like a catalog
    // structure make all of `indexes/` nested, whichever partition and page they fall
    // in and whichever step of which run deletes.
    let env = Env::open(backend, 1606).await;
    let kept = [
        "indexes/a/1/part-0.parquet",
        "indexes/n/ns/=idx",
        "indexes/stray.parquet",
        "indexes/zz/1/part-0.parquet",
    ];
    for name in kept {
        env.put(name, b"kept").await;
    }
    // Long enough for every object's retention, condemnation and delay to pass, and
    // for four runs to finish after that (at most 10 h).
    let (deletable, until) = (env.now() + 3 * HOUR, env.now() + 10 * HOUR);
    let mut finished_after = 0;
    while env.now() < until && finished_after < 4 {
        env.advance(2 * MINUTE);
        let report = env.collect(&config).await;
        if report.status == gc::GcStatus::Completed && env.now() > deletable {
            finished_after += 1;
        }
    }
    for name in kept {
        assert!(
            env.exists(name).await,
            "{backend:?}: `{name}` below a nested root at indexes/ deleted"
        );
    }
}

/// Runs whose calls all happen at one time (a coarse clock, a state machine invoking the
/// next step at once) or at times that go backwards (an NTP step, workers on hosts whose
/// clocks differ) still finish, one page at a time, and collect.
#[tokio::test]
async fn redteam16_liveness_runs_finish_when_call_times_tie_or_go_backwards() {
    let config = GcConfig {
        budget: Some(Duration::ZERO),
        page_size: 1,
        partitions: 3,
        ..test_config()
    };
    for backend in [Backend::Local, Backend::Memory] {
        let env = Env::open(backend, 1607).await;
        let dirs = ["a", "b", "c", "d", "e", "f"];
        for dir in dirs {
            env.put(&format!("indexes/{dir}/1/part-0.parquet"), b"garbage")
                .await;
        }
        env.advance(10 * MINUTE);
        let now = env.now();
        for (label, times) in [
            ("at one time", vec![now; 200]),
            (
                "going backwards",
                (0..200)
                    .map(|n| now + HOUR - n * 10_000)
                    .collect::<Vec<i64>>(),
            ),
        ] {
            let mut finished = 0;
            for at in times {
                let report = env.gc(config.clone()).collect(at).await.expect("run");
                finished += u32::from(report.status == gc::GcStatus::Completed);
            }
            assert!(
                finished >= 2,
                "{backend:?}: runs {label} finished {finished} times"
            );
        }
    }
}

/// The tests on the S3-compatible server (`PARQDB_TEST_S3_ENDPOINT`): the whole suite
/// runs them, the fast tier does not (`tests/it/tiers.txt`).
mod s3 {
    use super::*;

    #[tokio::test]
    async fn class3_a_pointer_store_inside_an_s3_warehouse_managed_prefix_is_refused() {
        let endpoint = crate::support::services::s3_options()
            .endpoint
            .expect("endpoint");
        let mut config = CatalogConfig::new(
            Some("s3://bucket-x/wh".into()),
            Some("s3://bucket-x/wh/metadata/cat".into()),
        );
        config.s3.endpoint = Some(endpoint);
        config.s3.allow_http = Some(true);
        config.s3.region = Some("us-east-1".into());
        let err = config.build().await.expect_err("refused");
        assert_eq!(err.kind(), ErrorKind::Configuration, "{err}");
    }

    #[tokio::test]
    async fn class1_files_written_raw_at_encoded_locations_are_kept_while_live_and_collected_after()
    {
        super::class1_files_written_raw_at_encoded_locations_are_kept_while_live_and_collected_after_on(Backend::S3).await;
    }

    #[tokio::test]
    async fn class1_metadata_locations_are_uris_with_one_canonical_form() {
        super::class1_metadata_locations_are_uris_with_one_canonical_form_on(Backend::S3).await;
    }

    #[tokio::test]
    async fn class2_a_second_catalog_cannot_write_into_an_owned_warehouse() {
        super::class2_a_second_catalog_cannot_write_into_an_owned_warehouse_on(Backend::S3).await;
    }

    #[tokio::test]
    async fn class2_two_catalogs_racing_for_a_fresh_warehouse_have_exactly_one_owner() {
        super::class2_two_catalogs_racing_for_a_fresh_warehouse_have_exactly_one_owner_on(
            Backend::S3,
        )
        .await;
    }

    #[tokio::test]
    async fn class2_an_unclaimed_warehouse_holding_data_is_taken_over_only_deliberately() {
        super::class2_an_unclaimed_warehouse_holding_data_is_taken_over_only_deliberately_on(
            Backend::S3,
        )
        .await;
    }

    #[tokio::test]
    async fn class3_nested_warehouses_and_pointer_stores_are_never_collected() {
        super::class3_nested_warehouses_and_pointer_stores_are_never_collected_on(Backend::S3)
            .await;
    }

    #[tokio::test]
    async fn class5_metadata_outside_the_metadata_directory_is_never_published() {
        super::class5_metadata_outside_the_metadata_directory_is_never_published_on(Backend::S3)
            .await;
    }

    #[tokio::test]
    async fn class5_a_stray_file_of_an_unknown_format_keeps_what_it_names_and_collection_goes_on() {
        super::class5_a_stray_file_of_an_unknown_format_keeps_what_it_names_and_collection_goes_on_on(Backend::S3).await;
    }

    #[tokio::test]
    async fn redteam_a_live_source_table_inside_the_warehouse_is_never_deleted() {
        super::redteam_a_live_source_table_inside_the_warehouse_is_never_deleted_on(Backend::S3)
            .await;
    }

    #[tokio::test]
    async fn redteam16_a_warehouse_claimed_without_a_claim_record_is_not_taken_over() {
        super::redteam16_a_warehouse_claimed_without_a_claim_record_is_not_taken_over_on(
            Backend::S3,
        )
        .await;
    }

    #[tokio::test]
    async fn redteam16_forged_run_pages_never_delete_live_or_foreign_files() {
        super::redteam16_forged_run_pages_never_delete_live_or_foreign_files_on(Backend::S3).await;
    }

    /// An S3 folder marker `k/` lists under the name `k` too: a page holding both decides
    /// the same name twice, and both must see its ledger entry, or the second restarts its
    /// clock on every run and `k` is never collected (found by the attack on the page-wise
    /// ledger).
    #[tokio::test]
    async fn redteam_liveness_a_folder_marker_does_not_keep_its_file_forever() {
        let env = Env::open(Backend::S3, 1504).await;
        let config = test_config();
        env.register("live", &Layout::under("live/1")).await;
        for name in ["indexes/a/w", "indexes/a/x", "indexes/a/y"] {
            env.put(name, b"x").await;
        }
        let (s3, bucket) = raw_s3(&env);
        s3.put_object()
            .bucket(&bucket)
            .key("wh/indexes/a/x/")
            .body(Vec::new().into())
            .send()
            .await
            .expect("a folder marker");
        checked_passes(&env, &config, 6, "folder marker", async |_| {}).await;
        for name in ["indexes/a/w", "indexes/a/x", "indexes/a/y"] {
            assert!(!env.exists(name).await, "`{name}` is collected");
        }
    }

    /// A folder marker `k/` is no object: an S3 listing shows it (object_store drops the
    /// `/`, so it lists as `k` after the keys `k-…`) as skipped, never as a second `k`; the
    /// second attack on the page-wise ledger had an old marker tracked, condemned and doomed
    /// under the name of a young file written at `k`, which the run then deleted.
    #[tokio::test]
    async fn redteam_an_s3_folder_marker_lists_as_skipped_never_as_its_files_name() {
        let env = Env::open(Backend::S3, 1505).await;
        let (s3, bucket) = raw_s3(&env);
        for key in [
            "wh/indexes/t/k",
            "wh/indexes/t/k-1",
            "wh/indexes/t/k/",
            "wh/indexes/t/k/x",
        ] {
            s3.put_object()
                .bucket(&bucket)
                .key(key)
                .body(Vec::new().into())
                .send()
                .await
                .expect("put");
        }
        let range = parqdb_catalog::warehouse::ListRange::whole("indexes");
        let listed: Vec<_> = env
            .warehouse
            .list_range(&range, None)
            .try_collect()
            .await
            .expect("listed");
        let shown: Vec<(Option<&str>, String)> = listed
            .iter()
            .map(|entry| {
                let name = match &entry.item {
                    parqdb_catalog::warehouse::ListItem::Object(listed) => listed.name.clone(),
                    parqdb_catalog::warehouse::ListItem::Skipped { name, .. } => name.clone(),
                };
                (entry.item.name(), name)
            })
            .collect();
        assert_eq!(
            shown,
            [
                (Some("indexes/t/k"), "indexes/t/k".to_owned()),
                (Some("indexes/t/k-1"), "indexes/t/k-1".to_owned()),
                (None, "indexes/t/k/".to_owned()),
                (Some("indexes/t/k/x"), "indexes/t/k/x".to_owned()),
            ]
        );
        // Resumed after any entry, the listing goes on with the objects after it.
        let objects = |entries: &[parqdb_catalog::warehouse::Positioned]| -> Vec<String> {
            entries
                .iter()
                .filter_map(|entry| entry.item.name().map(str::to_owned))
                .collect()
        };
        for (at, entry) in listed.iter().enumerate() {
            let rest: Vec<_> = env
                .warehouse
                .list_range(&range, Some(&entry.position))
                .try_collect()
                .await
                .expect("resumed");
            assert_eq!(
                objects(&rest),
                objects(&listed[at + 1..]),
                "resumed after {}",
                entry.position
            );
        }
    }

    /// An S3 warehouse (seeded `seed`) holding a live index, a garbage file and the raw keys
    /// `odd`, collected for six hours under `config` (each report checked by `check`): the
    /// garbage must go, the live index and every odd key stay. The reports.
    async fn collect_beside_odd_keys(
        seed: u64,
        odd: &[&str],
        config: &GcConfig,
        check: impl AsyncFnMut(&GcReport),
    ) -> Vec<GcReport> {
        let env = Env::open(Backend::S3, seed).await;
        let live = Layout::under("live/1");
        env.register("live", &live).await;
        env.put("indexes/garbage/1/part-0", b"x").await;
        let (s3, bucket) = raw_s3(&env);
        for key in odd {
            s3.put_object()
                .bucket(&bucket)
                .key(*key)
                .body(b"x".to_vec().into())
                .send()
                .await
                .expect("an ordinary S3 key");
        }
        let reports = checked_passes(&env, config, 6, "odd keys", check).await;
        assert!(
            !env.exists("indexes/garbage/1/part-0").await,
            "garbage is collected"
        );
        assert!(
            env.all_exist(&live.files()).await,
            "the live index is whole"
        );
        for key in odd {
            s3.head_object()
                .bucket(&bucket)
                .key(*key)
                .send()
                .await
                .unwrap_or_else(|err| panic!("{key:?} is kept: {err:?}"));
        }
        reports
    }

    /// Forbid every deletion under the warehouse prefixes `prefixes` with a bucket policy
    /// (what an operator protecting them writes); the raw client and bucket, to lift it.
    async fn deny_deletes_under(env: &Env, prefixes: &[&str]) -> (aws_sdk_s3::Client, String) {
        let (s3, bucket) = raw_s3(env);
        let resources: Vec<String> = prefixes
            .iter()
            .map(|prefix| format!("arn:aws:s3:::{bucket}/wh/{prefix}*"))
            .collect();
        let policy = serde_json::json!({
            "Version": "2012-10-17",
            "Statement": [{
                "Effect": "Deny",
                "Principal": "*",
                "Action": "s3:DeleteObject",
                "Resource": resources,
            }],
        });
        s3.put_bucket_policy()
            .bucket(&bucket)
            .policy(policy.to_string())
            .send()
            .await
            .expect("a bucket policy");
        (s3, bucket)
    }

    /// The ledger of a page is read from the previous page's last position moved below
    /// `_gc/ledger/`. When that entry was a skipped key (`garbage//k1`), the position went
    /// through an object_store `Path`, which drops the empty segment: the ledger read began
    /// after `…/garbage/k1`, past the entry of `garbage/1/part-0`, whose clock then started
    /// again on every run, for ever (round 97, F1).
    #[tokio::test]
    async fn redteam97_a_skipped_key_ending_a_page_moves_below_the_ledger_as_it_is() {
        let odd = ["wh/indexes/garbage//k0", "wh/indexes/garbage//k1"];
        let config = GcConfig {
            page_size: 2,
            ..test_config()
        };
        collect_beside_odd_keys(1507, &odd, &config, async |_| {}).await;
    }

    /// A bucket policy may forbid deleting some keys (a prefix an operator protects, a
    /// role scoped too narrowly): `DeleteObjects` then answers `AccessDenied` for those keys
    /// alone and deletes the rest. Such an object failed its batch, and with it every run,
    /// each resuming on the same batch: nothing more was ever collected (round 99). It is
    /// kept with a warning, as a local file the collector may not delete is, and
    /// collection goes on around it.
    #[tokio::test]
    async fn redteam99_an_object_the_bucket_policy_forbids_deleting_never_stops_collection() {
        let env = Env::open(Backend::S3, 1508).await;
        let live = Layout::under("live/1");
        env.register("live", &live).await;
        env.put("indexes/garbage/1/part-0", b"x").await;
        env.put("indexes/protected/1/part-0", b"x").await;
        // A key ending in a space: an XML reader that trimmed the answer's text would
        // not find the refused key among those asked for.
        env.put("indexes/protected/2/part-0 ", b"x").await;
        // A stray under `metadata/` that names nothing keeps nothing: kept alike.
        env.put("metadata/protected/notes.json", br#"{"note": "x"}"#)
            .await;
        deny_deletes_under(&env, &["indexes/protected/", "metadata/protected/"]).await;
        let reports =
            checked_passes(&env, &test_config(), 6, "a protected object", async |_| {}).await;
        assert!(
            !env.exists("indexes/garbage/1/part-0").await,
            "garbage beside the protected object is collected"
        );
        for protected in [
            "indexes/protected/1/part-0",
            "indexes/protected/2/part-0 ",
            "metadata/protected/notes.json",
        ] {
            assert!(
                env.exists(protected).await,
                "the object the policy protects is kept: {protected:?}"
            );
        }
        assert!(
            env.all_exist(&live.files()).await,
            "the live index is whole"
        );
        for protected in [
            "indexes/protected/1/part-0",
            "metadata/protected/notes.json",
        ] {
            assert!(
                reports
                    .iter()
                    .any(|report| report.warnings.iter().any(|warning| {
                        warning.starts_with(&format!("`{protected}` was not deleted"))
                    })),
                "a run says {protected} could not be deleted"
            );
        }
    }

    /// Round 100, F1: a file under `metadata/` that may name anything keeps all of
    /// `indexes/` until it is collected itself. A bucket policy that keeps it from being
    /// deleted made round 99 keep it with a warning, run after run, and nothing under
    /// `indexes/` was ever collected again while every run reported success. A refused
    /// deletion under `metadata/` stops the run instead, naming the file and the cure; once
    /// the policy is lifted, collection goes on.
    #[tokio::test]
    async fn redteam100_a_metadata_file_the_policy_keeps_stops_the_run_naming_it() {
        let env = Env::open(Backend::S3, 1509).await;
        let live = Layout::under("live/1");
        env.register("live", &live).await;
        env.put("indexes/orphan/1/part-0", b"x").await;
        let anything = format!(r#"{{"note": "{}"}}"#, "A".repeat(30_000));
        env.put("metadata/old/notes.json", anything.into_bytes().leak())
            .await;
        let (s3, bucket) = deny_deletes_under(&env, &["metadata/old/"]).await;
        let config = test_config();
        let mut stopped = None;
        for _ in 0..(6 * HOUR / PASS_EVERY) {
            env.advance(PASS_EVERY);
            if let Err(err) = env.gc(config.clone()).collect(env.now()).await {
                stopped = Some(err);
                break;
            }
        }
        let err = stopped.expect("a run stops on the metadata file it may not delete");
        assert_eq!(err.kind(), ErrorKind::StoreRefused, "{err}");
        assert!(
            err.message().contains("metadata/old/notes.json"),
            "the error names the file: {err}"
        );
        assert!(
            env.exists("indexes/orphan/1/part-0").await,
            "everything under indexes/ is kept while the file exists"
        );
        s3.delete_bucket_policy()
            .bucket(&bucket)
            .send()
            .await
            .expect("the policy lifted");
        checked_passes(&env, &config, 6, "the policy lifted", async |_| {}).await;
        assert!(
            !env.exists("metadata/old/notes.json").await,
            "the file goes once it may"
        );
        assert!(
            !env.exists("indexes/orphan/1/part-0").await,
            "then the garbage under indexes/ goes"
        );
        assert!(
            env.all_exist(&live.files()).await,
            "the live index is whole"
        );
    }

    /// A skipped key's raw key may be a listing position: the last entry of a page (where
    /// the next page starts after it) or, as a directory, a partition boundary. A server
    /// that echoes `StartAfter` unencoded (moto) failed every response once that position
    /// held a character XML cannot carry (round 96, F1): every run stopped, `gc abandon`
    /// too. With one entry per page and many partitions, each odd key is a page's last
    /// entry; none may stop collection, and each is kept.
    #[tokio::test]
    async fn redteam96_a_skipped_key_at_a_listing_position_never_stops_collection() {
        let odd = [
            "wh/indexes/zz\u{FFFF}/x.parquet",
            "wh/indexes/b\u{1}.parquet",
            "wh/indexes/c\u{FFFE}",
            "wh/indexes/garbage/1/part-0\u{FFFF}",
        ];
        let config = GcConfig {
            page_size: 1,
            partitions: 8,
            ..test_config()
        };
        collect_beside_odd_keys(1506, &odd, &config, async |_| {}).await;
    }

    /// S3 keys `object_store::path::Path::parse` refuses (an empty segment, a `.` or `..`
    /// segment, a control character) and folder markers are ordinary S3 keys that any
    /// engine may write (`…/ivf_postings/` joined with `/part-0`). Listed through
    /// object_store, one of them under a managed prefix failed every listing, so every run
    /// stopped for good (round 94, F1); a marker first in its directory listed as an object
    /// named like the directory, which runs then "deleted" (F2). The warehouse lists with
    /// `ListObjectsV2` itself: each such key is kept and reported as skipped, no deletion
    /// names it or a directory, and collection goes on around it.
    #[tokio::test]
    async fn redteam94_s3_keys_object_store_cannot_parse_are_kept_and_collection_goes_on() {
        let odd = [
            "wh/indexes/stray//part-0",
            "wh/indexes//lead",
            "wh/metadata/./x.metadata.json",
            "wh/metadata//y.metadata.json",
            "wh/indexes/x/../y",
            "wh/indexes/ctl\u{1}z",
            "wh/indexes/garbage/",
            "wh/indexes/live/",
            "wh/indexes/live/1/",
            "wh/metadata/",
        ];
        let reports = collect_beside_odd_keys(1502, &odd, &test_config(), async |report| {
            assert!(
                report.counts.skipped >= odd.len() as u64,
                "every odd key is listed and skipped: {:?}",
                report.warnings
            );
        })
        .await;
        let deleted: Vec<&str> = reports
            .iter()
            .flat_map(|report| &report.actions)
            .filter(|action| action.action == parqdb_catalog::gc::ActionKind::Delete)
            .map(|action| action.path.as_str())
            .collect();
        assert!(
            deleted
                .iter()
                .all(|path| path.ends_with("indexes/garbage/1/part-0")),
            "only the garbage file is deleted: {deleted:?}"
        );
    }
}

/// Round 34, finding 5: a register that died (killed, or timed out) before withdrawing
/// its change-log entry, whose metadata may name anything (a sparse file over the 1 GiB a
/// collector reads of a file that is no metadata). What it may have made reachable is
/// unknown, so the run that reads the entry restarts every clock — and finishes, pruning
/// the settled entry: collection goes on after one retention (it stopped for good).
#[tokio::test]
async fn a_logged_publication_that_may_name_anything_delays_collection_but_never_stops_it() {
    let env = Env::open(Backend::Local, 408).await;
    let config = test_config();
    let root = env.local_dir.clone().expect("local");
    let old = Layout::under("old/1");
    let (old_id, _, _) = env.register("old", &old).await;
    env.catalog.drop_index(&old_id).await.expect("dropped");
    let huge = std::fs::File::create(root.join("metadata/huge.json")).expect("file");
    huge.set_len((1 << 30) + 1).expect("sparse");
    set_mtime(&root.join("metadata/huge.json"), env.now());
    let entry = serde_json::json!({
        "change-version": 1,
        "at-ms": env.now(),
        "writes": [{
            "key": "i/ghost",
            "commit-ids": [uuid::Uuid::new_v4()],
            "publishes": env.warehouse.absolute("metadata/huge.json"),
        }],
    });
    std::fs::create_dir_all(root.join("_gc/changes")).expect("dir");
    std::fs::write(
        root.join(format!(
            "_gc/changes/{:020}-{}.json",
            env.now(),
            uuid::Uuid::new_v4().simple()
        )),
        serde_json::to_vec(&entry).expect("json"),
    )
    .expect("entry");
    // `passes` fails on the first run that fails.
    let reports = passes(&env, &config, 8).await;
    assert!(
        reports[0]
            .warnings
            .iter()
            .any(|w| w.contains("may have made anything reachable")),
        "{:?}",
        reports[0].warnings
    );
    assert!(
        env.none_exist(&old.files()).await,
        "the dropped index was never collected"
    );
}

/// A local warehouse (seeded `seed`) holding an index `old/1`, to be dropped, and a live
/// index `live/1`: the layout most class-4 cases put garbage and live data in.
async fn old_and_live(
    seed: u64,
) -> (
    Env,
    GcConfig,
    std::path::PathBuf,
    Layout,
    IndexIdentifier,
    Layout,
) {
    let env = Env::open(Backend::Local, seed).await;
    let root = env.local_dir.clone().expect("local");
    let old = Layout::under("old/1");
    let (old_id, _, _) = env.register("old", &old).await;
    let live = Layout::under("live/1");
    env.register("live", &live).await;
    (env, test_config(), root, old, old_id, live)
}
