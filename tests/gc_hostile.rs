//! The garbage collector in a hostile-but-ordinary world: one named test per class of
//! layout that once made it delete live, foreign or outside data (location encodings,
//! foreign writers, nested roots, symbolic links, metadata outside `metadata/`, paused
//! runs with stale leases, the register/delete race), on the local file system, the
//! memory backend and, where the class applies, the S3-compatible server.
//!
//! Time is simulated (a `ManualClock`; every written object is stamped with it, also as
//! the real modification time of local files), so "days later" is one call.
mod gc_support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use gc_support::{Backend, Env, HOUR, Layout, MINUTE, set_mtime, test_config};
use parqdb_catalog::catalog::{Catalog, IndexCatalog};
use parqdb_catalog::config::CatalogConfig;
use parqdb_catalog::gc::{self, GarbageCollector, GcConfig, GcPhase, GcProgress, GcReport};
use parqdb_catalog::{ErrorKind, IndexIdentifier, Namespace};

/// Characters object_store's `PathPart` percent-encodes that metadata validation accepts.
const HOSTILE_SEGMENTS: [&str; 6] = ["ü", "a b", "~x", "[1]", "{c}^|`", "\"q\"<>*"];

fn files(layout: &Layout) -> Vec<String> {
    [&layout.centroids, &layout.postings]
        .into_iter()
        .flat_map(|dir| {
            [
                format!("{dir}part-0.parquet"),
                format!("{dir}part-1.parquet"),
            ]
        })
        .collect()
}

/// Write a layout's files the way another engine does: at the raw keys.
async fn write_raw_tables(env: &Env, layout: &Layout) {
    for name in files(layout) {
        env.put_raw(&name, b"0123456789").await;
    }
}

async fn all_exist_raw(env: &Env, names: &[String]) -> bool {
    for name in names {
        if !env.exists_raw(name).await {
            return false;
        }
    }
    true
}

async fn none_exist_raw(env: &Env, names: &[String]) -> bool {
    for name in names {
        if env.exists_raw(name).await {
            return false;
        }
    }
    true
}

/// Run the collector every 10 minutes for `hours`; the reports.
async fn passes(env: &Env, config: &GcConfig, hours: i64) -> Vec<GcReport> {
    let until = env.now() + hours * HOUR;
    let mut reports = Vec::new();
    while env.now() < until {
        env.advance(10 * MINUTE);
        reports.push(env.collect(config).await);
    }
    reports
}

fn deleted(reports: &[GcReport]) -> u64 {
    reports.iter().map(|r| r.deleted.objects).sum()
}

/// A new index whose tables are at `layout`, written raw; registered under `name`.
async fn register_raw(env: &Env, name: &str, layout: &Layout) -> (IndexIdentifier, String) {
    write_raw_tables(env, layout).await;
    let id = env.id(name).await;
    let metadata = parqdb_catalog::metadata::IndexMetadata::create(
        gc_support::contents(layout),
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
    for backend in [Backend::Memory, Backend::Local, Backend::S3] {
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
            all.extend(files(&layout));
            all.push(env.relative(&location));
            ids.push(id);
        }
        let reports = passes(&env, &config, 6).await;
        assert_eq!(deleted(&reports), 0, "{backend:?}: a live file was deleted");
        assert!(
            all_exist_raw(&env, &all).await,
            "{backend:?}: live files lost"
        );

        // Liveness: once dropped, all of it is collected after retention.
        for id in &ids {
            env.catalog.drop_index(id).await.expect("dropped");
        }
        passes(&env, &config, 5).await;
        assert!(
            none_exist_raw(&env, &all).await,
            "{backend:?}: garbage left"
        );
    }
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
                    assert!(all_exist_raw(&env, &files(&layout)).await, "{relative:?}");
                });
            }
            Ok(())
        })
        .expect("every accepted location covers its files");
}

#[tokio::test]
async fn class1_metadata_locations_are_uris_with_one_canonical_form() {
    for backend in [Backend::Memory, Backend::Local, Backend::S3] {
        let env = Env::open(backend, 102).await;
        let layout = Layout::under("uri/1");
        write_raw_tables(&env, &layout).await;
        let metadata = parqdb_catalog::metadata::IndexMetadata::create(
            gc_support::contents(&layout),
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
}

// ---------------------------------------------------------------------------------------
// 2. Foreign writers
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn class2_a_second_catalog_cannot_write_into_an_owned_warehouse() {
    for backend in [Backend::Memory, Backend::Local, Backend::S3] {
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
}

#[tokio::test]
async fn class2_two_catalogs_racing_for_a_fresh_warehouse_have_exactly_one_owner() {
    for backend in [Backend::Memory, Backend::Local, Backend::S3] {
        for round in 0..4 {
            let env = Env::open(backend, 210 + round).await;
            let catalogs: Vec<Catalog> = (0..4).map(|n| env.foreign_catalog(300 + n)).collect();
            let results = futures::future::join_all(catalogs.iter().enumerate().map(
                |(n, catalog)| async move {
                    let ns = Namespace::new([format!("n{n}")]).expect("ns");
                    catalog.create_namespace(&ns, BTreeMap::new()).await
                },
            ))
            .await;
            let winners = results.iter().filter(|r| r.is_ok()).count();
            assert_eq!(winners, 1, "{backend:?}: {results:?}");
            for result in results.iter().filter(|r| r.is_err()) {
                let kind = result.as_ref().expect_err("lost").kind();
                assert_eq!(kind, ErrorKind::WarehouseNotOwned, "{results:?}");
            }
        }
    }
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
async fn class3_a_pointer_store_inside_an_s3_warehouse_managed_prefix_is_refused() {
    let endpoint = std::env::var("PARQDB_TEST_S3_ENDPOINT").expect("the S3-compatible server");
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
async fn class3_nested_warehouses_and_pointer_stores_are_never_collected() {
    for backend in [Backend::Memory, Backend::Local, Backend::S3] {
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
            all_exist_raw(&env, &nested).await,
            "{backend:?}: nested data deleted"
        );
        assert!(
            reports.iter().any(|r| r.kept_nested.objects > 0
                && r.warnings.iter().any(|w| w.contains("indexes/team/wh2"))),
            "{backend:?}: reported"
        );
        // The rest of the warehouse is still collected.
        assert!(
            !env.exists_raw("indexes/garbage/1/part-0").await,
            "{backend:?}"
        );
        assert!(all_exist_raw(&env, &files(&live)).await);

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
}

// ---------------------------------------------------------------------------------------
// 4. Symbolic links (local)
// ---------------------------------------------------------------------------------------

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
    assert!(reports.iter().all(|r| r.skipped > 0), "links are reported");
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
    env.register("ok", &Layout::under("ok/1")).await;
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
    for backend in [Backend::Memory, Backend::Local, Backend::S3] {
        let env = Env::open(backend, 501).await;
        let layout = Layout::under("m/1");
        let (id, metadata, base) = env.register("m", &layout).await;
        let next = metadata
            .successor(
                gc_support::contents(&layout),
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
        let mut contents = gc_support::contents(&layout);
        contents.parameters.insert(
            "ivf_centroids_metadata_location".into(),
            "indexes/c/centroids.metadata.json".into(),
        );
        let err = parqdb_catalog::metadata::IndexMetadata::create(
            contents,
            BTreeMap::new(),
            env.clock.as_ref(),
            env.catalog.ids().as_ref(),
            &parqdb_catalog::family::FamilyRegistry::builtin(),
        )
        .expect_err("centroids outside metadata/");
        assert_eq!(err.kind(), ErrorKind::InvalidIndexMetadata);
    }
}

#[tokio::test]
async fn class5_a_stray_file_of_an_unknown_format_keeps_what_it_names_and_collection_goes_on() {
    for backend in [Backend::Memory, Backend::Local, Backend::S3] {
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
        assert!(reports.iter().any(|r| r.kept_unknown_format.objects == 1));
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
        let mut doomed = files(&dead);
        doomed.push(env.relative(&location));
        // Condemn everything, with a dry run telling when a real run would delete.
        for _ in 0..40 {
            env.advance(10 * MINUTE);
            let dry = GcConfig {
                dry_run: true,
                ..config.clone()
            };
            if env.collect(&dry).await.deleted.objects > 0 {
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
        let err = outcome.expect_err("A lost its lease");
        assert_eq!(err.kind(), ErrorKind::CommitConflict, "{backend:?}: {err}");
        assert_eq!(
            env.sim.deletions().len(),
            before,
            "{backend:?}: the stale run deleted"
        );
        assert!(all_exist_raw(&env, &doomed).await);
    }
}

// ---------------------------------------------------------------------------------------
// 7. The register/delete race
// ---------------------------------------------------------------------------------------

/// A pointer store whose writes (or reads) never answer.
#[derive(Debug)]
struct Hanging {
    inner: Arc<dyn parqdb_catalog::store::PointerStore>,
    hang_puts: bool,
    hang_gets: std::sync::atomic::AtomicBool,
}

#[async_trait::async_trait]
impl parqdb_catalog::store::PointerStore for Hanging {
    fn describe(&self) -> String {
        "hanging".into()
    }
    fn capabilities(&self) -> parqdb_catalog::store::Capabilities {
        self.inner.capabilities()
    }
    async fn get(
        &self,
        key: &parqdb_catalog::store::StoreKey,
    ) -> Result<Option<parqdb_catalog::store::Versioned>, parqdb_catalog::store::StoreError> {
        if self.hang_gets.load(std::sync::atomic::Ordering::SeqCst) {
            futures::future::pending::<()>().await;
        }
        self.inner.get(key).await
    }
    async fn put(
        &self,
        key: &parqdb_catalog::store::StoreKey,
        value: Bytes,
        mode: parqdb_catalog::store::PutMode,
    ) -> Result<parqdb_catalog::store::Version, parqdb_catalog::store::StoreError> {
        if self.hang_puts && key.as_str().starts_with("i/") {
            futures::future::pending::<()>().await;
        }
        self.inner.put(key, value, mode).await
    }
    async fn list(
        &self,
        prefix: &parqdb_catalog::store::StoreKey,
        after: Option<&parqdb_catalog::store::StoreKey>,
        limit: usize,
    ) -> Result<parqdb_catalog::store::ListPage, parqdb_catalog::store::StoreError> {
        self.inner.list(prefix, after, limit).await
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
    let hanging = Arc::new(Hanging {
        inner: raw.clone(),
        hang_puts: true,
        hang_gets: false.into(),
    });
    let catalog = Catalog::builder(hanging.clone(), warehouse.clone())
        .probe_on_first_write(false)
        .publish_window(Duration::from_millis(300))
        .build();
    catalog.claim_warehouse().await.expect("owned");
    let err = catalog
        .commit(&id, Some(&gc_support::source()), &base, &new)
        .await
        .expect_err("hangs");
    assert_eq!(err.kind(), ErrorKind::CommitStateUnknown, "{err}");

    // Reads never answer: nothing is written, the operation fails within the window.
    let hanging = Arc::new(Hanging {
        inner: raw.clone(),
        hang_puts: false,
        hang_gets: false.into(),
    });
    let catalog = Catalog::builder(hanging.clone(), warehouse.clone())
        .probe_on_first_write(false)
        .publish_window(Duration::from_millis(300))
        .build();
    catalog.claim_warehouse().await.expect("owned");
    hanging
        .hang_gets
        .store(true, std::sync::atomic::Ordering::SeqCst);
    let started = std::time::Instant::now();
    let result = tokio::time::timeout(
        Duration::from_secs(30),
        catalog.commit(&id, Some(&gc_support::source()), &base, &new),
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
