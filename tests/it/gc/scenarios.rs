//! Garbage-collector scenarios on the local-filesystem warehouse and pointer store (and,
//! where cheap, on the memory backends), under a simulated clock.

use std::time::Duration;

use object_store::ObjectStoreExt;

use crate::support::gc::{Backend, Env, HOUR, Layout, MINUTE, source_at, test_config};
use parqdb_catalog::ErrorKind;
use parqdb_catalog::IndexCatalog;
use parqdb_catalog::gc::{self, GarbageCollector, GcConfig, GcStatus};

async fn claimed(backend: Backend, seed: u64) -> Env {
    let env = Env::new(backend, seed);
    gc::claim(&env.catalog, env.now()).await.expect("claimed");
    env
}

/// Run GC every 10 minutes until `until`; return the time of the first deletion of any
/// of `watched` (if any).
async fn run_until(env: &Env, config: &GcConfig, until: i64, watched: &[String]) -> Option<i64> {
    let mut first = None;
    while env.now() < until {
        env.advance(10 * MINUTE);
        env.collect(config).await;
        if first.is_none() && !env.all_exist(watched).await {
            first = Some(env.now());
        }
    }
    first
}

#[tokio::test]
async fn a_dropped_index_is_collected_only_after_retention() {
    for backend in [Backend::Local, Backend::Memory] {
        let env = claimed(backend, 1).await;
        let config = test_config();
        let layout = Layout::under("dropped/1");
        let (id, _, location) = env.register("dropped", &layout).await;
        let keep = Layout::under("kept/1");
        let (_, _, kept_location) = env.register("kept", &keep).await;
        let mut doomed = layout.files();
        doomed.push(env.relative(&location));
        let mut live = keep.files();
        live.push(env.relative(&kept_location));

        env.advance(HOUR);
        env.catalog.drop_index(&id).await.expect("dropped");
        let dropped_at = env.now();

        // Before the retention window has passed, nothing is deleted (but the clock runs).
        let first = run_until(&env, &config, dropped_at + 2 * HOUR - MINUTE, &doomed).await;
        assert_eq!(first, None, "{backend:?}: deleted before retention");
        assert!(env.all_exist(&doomed).await);
        let report = env.collect(&config).await;
        assert_eq!(report.counts.deleted.objects, 0);
        assert!(
            report.counts.kept_by_retention.objects + report.counts.kept_by_condemn_delay.objects
                > 0
        );

        // After retention (+ condemnation delay and a run or two) it is gone, the live
        // index untouched, and the ledger empty.
        let first = run_until(&env, &config, dropped_at + 3 * HOUR, &doomed).await;
        let first = first.expect("collected after retention");
        assert!(
            first >= dropped_at + 2 * HOUR,
            "{backend:?}: deleted at {first}, dropped at {dropped_at}"
        );
        assert!(env.none_exist(&doomed).await, "{backend:?}: garbage left");
        assert!(
            env.all_exist(&live).await,
            "{backend:?}: live files deleted"
        );
        // (The deleted objects' condemnations stay until a run releases their deletion
        // records, the grace period after the deletes; files on a local disk land at the
        // real time, far ahead of this test's clock, so there the records stay.)
        let left = match backend {
            Backend::Local => env.unrecorded_ledger_files().await,
            _ => env.ledger_files().await,
        };
        assert_eq!(
            left,
            Vec::<String>::new(),
            "{backend:?}: ledger not cleared"
        );
        assert!(env.catalog.load(&env.id("kept").await).await.is_ok());
    }
}

#[tokio::test]
async fn orphans_of_a_crashed_commit_wait_for_grace_plus_retention() {
    let env = claimed(Backend::Local, 2).await;
    let config = test_config();
    let layout = Layout::under("idx/1");
    let (id, base, location) = env.register("idx", &layout).await;
    env.advance(HOUR);
    // The writer writes tables and a new metadata file, then dies before committing.
    let orphan_layout = Layout::under("idx/2");
    let (_, orphan_location) = env.successor(&base, &orphan_layout, None).await;
    let written_at = env.now();
    let mut orphans = orphan_layout.files();
    orphans.push(env.relative(&orphan_location));

    // In grace: untouched and not even tracked.
    env.advance(5 * MINUTE);
    let report = env.collect(&config).await;
    assert_eq!(report.counts.kept_by_grace.objects, orphans.len() as u64);
    assert_eq!(report.counts.tracked.objects, 0);

    let first = run_until(
        &env,
        &config,
        written_at + 10 * MINUTE + 2 * HOUR - MINUTE,
        &orphans,
    )
    .await;
    assert_eq!(first, None, "orphans deleted before grace + retention");
    let first = run_until(&env, &config, written_at + 3 * HOUR + 30 * MINUTE, &orphans).await;
    let first = first.expect("orphans collected");
    assert!(first >= written_at + 10 * MINUTE + 2 * HOUR);
    assert!(env.none_exist(&orphans).await);
    let mut live = layout.files();
    live.push(env.relative(&location));
    assert!(env.all_exist(&live).await);
    assert_eq!(
        env.catalog.load(&id).await.expect("live").metadata_location,
        location
    );
}

#[tokio::test]
async fn shared_centroids_stay_while_any_index_references_them() {
    let env = claimed(Backend::Local, 3).await;
    let config = test_config();
    // Shared centroids: their own metadata file and table.
    let centroids = Layout::under("centroids/1");
    let (_, centroids_location) = env.new_index(&centroids).await;
    let centroids_relative = env.relative(&centroids_location);
    let sharing = |tag: &str| Layout {
        centroids: centroids.centroids.clone(),
        postings: format!("indexes/{tag}/ivf_postings/"),
        centroids_metadata: Some(centroids_relative.clone()),
        source: crate::support::gc::source(),
    };
    let (a, _, a_location) = env.register("a", &sharing("a/1")).await;
    let (b, _, _) = env.register("b", &sharing("b/1")).await;
    let mut shared = centroids.files();
    shared.push(centroids_relative.clone());

    env.advance(HOUR);
    env.catalog.drop_index(&a).await.expect("dropped a");
    let a_postings: Vec<String> = ["part-0.parquet", "part-1.parquet"]
        .iter()
        .map(|f| format!("indexes/a/1/ivf_postings/{f}"))
        .collect();
    run_until(&env, &config, env.now() + 4 * HOUR, &[]).await;
    assert!(env.none_exist(&a_postings).await, "a's own files collected");
    assert!(!env.exists(&env.relative(&a_location)).await);
    assert!(
        env.all_exist(&shared).await,
        "shared centroids kept while b references them"
    );

    env.catalog.drop_index(&b).await.expect("dropped b");
    let dropped_b = env.now();
    let first = run_until(&env, &config, dropped_b + 5 * HOUR, &shared).await;
    assert!(first.expect("centroids collected") >= dropped_b + 2 * HOUR);
    assert!(
        env.none_exist(&shared).await,
        "centroids collected once nobody references them"
    );
    assert_eq!(env.managed_objects().await, Vec::<String>::new());
}

#[tokio::test]
async fn sibling_prefixes_are_not_confused() {
    let env = claimed(Backend::Local, 4).await;
    let config = test_config();
    let layout = Layout {
        centroids: "indexes/s/1/ivf_centroids/".into(),
        postings: "indexes/s/1/ivf_postings".into(), // no trailing slash in the metadata
        centroids_metadata: None,
        source: crate::support::gc::source(),
    };
    env.put("indexes/s/1/ivf_postings/part-0.parquet", b"live")
        .await;
    env.put("indexes/s/1/ivf_centroids/part-0.parquet", b"live")
        .await;
    env.put("indexes/s/1/ivf_postings_old/part-0.parquet", b"garbage")
        .await;
    env.put("indexes/s/1/ivf_postings.bak", b"garbage").await;
    let id = env.id("s").await;
    let location = env.write_metadata(&env.metadata_for(&layout)).await;
    env.catalog
        .register(&id, Some(&layout.source), &location)
        .await
        .expect("registered");

    run_until(&env, &config, env.now() + 4 * HOUR, &[]).await;
    assert!(env.exists("indexes/s/1/ivf_postings/part-0.parquet").await);
    assert!(env.exists("indexes/s/1/ivf_centroids/part-0.parquet").await);
    assert!(
        !env.exists("indexes/s/1/ivf_postings_old/part-0.parquet")
            .await
    );
    assert!(!env.exists("indexes/s/1/ivf_postings.bak").await);
}

#[tokio::test]
async fn foreign_or_unmarked_warehouses_are_refused() {
    let env = Env::new(Backend::Local, 5);
    let layout = Layout::under("x/1");
    env.register("x", &layout).await;
    env.put("indexes/garbage/part-0", b"garbage").await;
    env.advance(10 * HOUR);
    // The first write claimed the warehouse; a warehouse without its marker (written by
    // an earlier version, or the marker removed by hand) is refused.
    std::fs::remove_file(
        env.local_dir
            .as_ref()
            .expect("local")
            .join(parqdb_catalog::warehouse::OWNER_MARKER),
    )
    .expect("marker removed");

    // No marker: refused.
    let err = env
        .gc(test_config())
        .collect(env.now())
        .await
        .expect_err("unmarked");
    assert_eq!(err.kind(), ErrorKind::Configuration);
    assert!(
        err.message().contains("no ownership marker"),
        "{}",
        err.message()
    );

    // Claimed by another catalog: this one is refused, even to claim it.
    let foreign = env.foreign_catalog(99);
    gc::adopt(&foreign, env.now())
        .await
        .expect("foreign adoption");
    let err = env
        .gc(test_config())
        .collect(env.now())
        .await
        .expect_err("foreign");
    assert_eq!(err.kind(), ErrorKind::WarehouseNotOwned);
    assert!(
        err.message().contains("owned by catalog"),
        "{}",
        err.message()
    );
    let err = gc::claim(&env.catalog, env.now())
        .await
        .expect_err("claim refused");
    assert_eq!(err.kind(), ErrorKind::WarehouseNotOwned);
    // The foreign catalog (with no pointers) may not delete this catalog's files either:
    // it owns the marker, so it runs, but only on its own empty catalog... which is exactly
    // why a warehouse has one owner. Nothing was deleted by the refused runs.
    assert!(env.exists("indexes/garbage/part-0").await);
    assert!(env.all_exist(&layout.files()).await);

    // Claiming is idempotent for the owner.
    let owner = Env::new(Backend::Memory, 6);
    let first = gc::claim(&owner.catalog, owner.now()).await.expect("claim");
    let again = gc::claim(&owner.catalog, owner.now() + 1)
        .await
        .expect("claim again");
    assert_eq!(first, again);
    assert_eq!(
        gc::verify_ownership(&owner.catalog).await.expect("owned"),
        first
    );
}

#[tokio::test]
async fn source_tables_are_never_deleted() {
    let env = claimed(Backend::Local, 7).await;
    let config = test_config();
    let outside = env.warehouse.absolute("sources/docs/");
    let inside = env.warehouse.absolute("indexes/sources/docs/");
    env.put("sources/docs/data-0.parquet", b"source").await;
    let mut layout = Layout::under("src/1");
    layout.source = source_at(&outside);
    let (id, _, _) = env.register("outside", &layout).await;
    // A source inside the managed prefixes is refused at publication: the collector would
    // take its files for garbage once no index names them.
    let mut layout2 = Layout::under("src/2");
    layout2.source = source_at(&inside);
    let (_, location) = env.new_index(&layout2).await;
    let err = env
        .catalog
        .register(&env.id("inside").await, Some(&layout2.source), &location)
        .await
        .expect_err("a source under indexes/");
    assert_eq!(err.kind(), ErrorKind::InvalidIndexMetadata, "{err}");

    run_until(&env, &config, env.now() + 4 * HOUR, &[]).await;
    assert!(env.exists("sources/docs/data-0.parquet").await);
    env.catalog.drop_index(&id).await.expect("dropped");
    let dropped = env.now();
    run_until(&env, &config, dropped + 6 * HOUR, &[]).await;
    // Outside the managed prefixes: never even listed, whatever happens.
    assert!(env.exists("sources/docs/data-0.parquet").await);
    assert!(
        env.sim
            .deletions()
            .iter()
            .all(|d| !d.path.contains("sources/docs/data-0"))
    );
}

#[tokio::test]
async fn re_registering_an_old_metadata_file_before_it_is_condemned_keeps_it() {
    let env = claimed(Backend::Local, 8).await;
    let config = test_config();
    let layout = Layout::under("old/1");
    let (id, _, location) = env.register("old", &layout).await;
    let mut objects = layout.files();
    objects.push(env.relative(&location));
    env.advance(HOUR);
    env.catalog.drop_index(&id).await.expect("dropped");

    // Run until the metadata file is tracked (its retention clock runs).
    let mut tracked = false;
    for _ in 0..40 {
        env.advance(10 * MINUTE);
        let report = env.collect(&config).await;
        assert_eq!(
            report.counts.condemned.objects, 0,
            "condemned before re-registering"
        );
        if report.counts.tracked.objects > 0 {
            tracked = true;
            break;
        }
    }
    assert!(tracked, "never tracked");

    // Someone registers the old metadata file again (allowed by the spec).
    env.advance(MINUTE);
    let again = env.id("old-again").await;
    env.catalog
        .register(&again, Some(&layout.source), &location)
        .await
        .expect("re-registered");
    env.advance(20 * MINUTE);
    let report = env.collect(&config).await;
    assert_eq!(report.counts.deleted.objects, 0);
    assert!(
        report.counts.ledger_files_cleared > 0,
        "the ledger entries are cleared"
    );
    run_until(&env, &config, env.now() + 6 * HOUR, &[]).await;
    assert!(
        env.all_exist(&objects).await,
        "a re-registered index lost files"
    );
    assert!(env.ledger_files().await.is_empty());
    assert_eq!(
        env.catalog
            .load(&again)
            .await
            .expect("live")
            .metadata_location,
        location
    );
}

/// Register an index `name`, drop it an hour later, and collect every ten minutes until a
/// run condemns its files (none deleted yet): its layout, its metadata location and its
/// files.
async fn dropped_until_condemned(
    env: &Env,
    config: &GcConfig,
    name: &str,
) -> (Layout, String, Vec<String>) {
    let layout = Layout::under(&format!("{name}/1"));
    let (id, _, location) = env.register(name, &layout).await;
    let mut objects = layout.files();
    objects.push(env.relative(&location));
    env.advance(HOUR);
    env.catalog.drop_index(&id).await.expect("dropped");
    let mut condemned = false;
    for _ in 0..40 {
        env.advance(10 * MINUTE);
        if env.collect(config).await.counts.condemned.objects > 0 {
            condemned = true;
            break;
        }
    }
    assert!(condemned, "never condemned");
    assert!(env.all_exist(&objects).await, "deleted at condemnation");
    (layout, location, objects)
}

/// Class 7 of the hostile-layout issue: once condemned, a metadata file is on its way
/// out; publishing it again is refused (typed), so no pointer can ever name it after its
/// deletion, and it is still collected.
#[tokio::test]
async fn a_condemned_metadata_file_cannot_be_registered_again_and_is_collected() {
    let env = claimed(Backend::Local, 9).await;
    let config = test_config();
    let (layout, location, objects) = dropped_until_condemned(&env, &config, "gone").await;

    let again = env.id("gone-again").await;
    let err = env
        .catalog
        .register(&again, Some(&layout.source), &location)
        .await
        .expect_err("a condemned file is not published");
    assert_eq!(err.kind(), ErrorKind::InvalidIndexMetadata);
    assert!(err.message().contains("condemned"), "{}", err.message());
    // Nor through a commit onto a live index of the same lineage.
    let live = Layout::under("gone/2");
    let (other, _, _) = env.register("other", &live).await;
    let base = env
        .catalog
        .load(&other)
        .await
        .expect("live")
        .metadata_location;
    let err = env
        .catalog
        .commit(&other, Some(&layout.source), &base, &location)
        .await
        .expect_err("a condemned file is not committed");
    assert_eq!(err.kind(), ErrorKind::InvalidIndexMetadata, "{err}");

    run_until(&env, &config, env.now() + 3 * HOUR, &[]).await;
    assert!(env.none_exist(&objects).await, "garbage left behind");
    assert!(env.catalog.load(&again).await.is_err());
}

/// Publishing again index tables the collector has condemned, under a **new** metadata
/// file (a backup's metadata restored under a new name, an old index's tables picked up by
/// a writer), is refused like republishing the condemned metadata file itself: by a
/// register, and by a commit that adds them to a live index. Before, only metadata files
/// and family references were checked, and such a publication that landed between a run's
/// verification walk and its deletes lost its tables.
#[tokio::test]
async fn condemned_index_tables_cannot_be_published_again_under_new_metadata() {
    for (n, backend) in [Backend::Memory, Backend::Local].into_iter().enumerate() {
        let env = claimed(backend, 12 + n as u64).await;
        let config = test_config();
        let (layout, _, _) = dropped_until_condemned(&env, &config, "old").await;

        // New metadata over the old tables, written now (young: never condemned itself).
        let fresh = env.write_metadata(&env.metadata_for(&layout)).await;
        let again = env.id("old-again").await;
        let err = env
            .catalog
            .register(&again, Some(&layout.source), &fresh)
            .await
            .expect_err("condemned tables are not published");
        assert_eq!(err.kind(), ErrorKind::InvalidIndexMetadata, "{err}");
        assert!(err.message().contains("condemned"), "{err}");
        assert!(err.message().contains("index table"), "{err}");
        // Nor through a fresh family reference: new metadata with new tables whose
        // centroids metadata (written now) names the old tables, as the walk reads it.
        let centroids = env.write_metadata(&env.metadata_for(&layout)).await;
        let through = Layout {
            centroids_metadata: Some(env.relative(&centroids)),
            ..Layout::under("through/1")
        };
        let (_, indirect) = env.new_index(&through).await;
        let err = env
            .catalog
            .register(&again, Some(&through.source), &indirect)
            .await
            .expect_err("condemned tables are not published through a family reference");
        assert_eq!(err.kind(), ErrorKind::InvalidIndexMetadata, "{err}");
        assert!(err.message().contains("referenced file names"), "{err}");

        // Nor added to a live index by a commit; a commit that keeps its own tables is not
        // refused for them.
        let live = Layout::under("live/1");
        let (other, base, base_location) = env.register("live", &live).await;
        let successor_over = async |layout: &Layout| {
            let next = base
                .successor(
                    crate::support::gc::contents(layout),
                    env.clock.as_ref(),
                    env.catalog.ids().as_ref(),
                    &parqdb_catalog::family::FamilyRegistry::builtin(),
                )
                .expect("successor");
            env.write_metadata(&next).await
        };
        let adding = successor_over(&layout).await;
        let err = env
            .catalog
            .commit(&other, Some(&layout.source), &base_location, &adding)
            .await
            .expect_err("condemned tables are not committed");
        assert_eq!(err.kind(), ErrorKind::InvalidIndexMetadata, "{err}");
        let keeping = successor_over(&live).await;
        env.catalog
            .commit(&other, Some(&live.source), &base_location, &keeping)
            .await
            .expect("a commit over its own tables");

        run_until(&env, &config, env.now() + 3 * HOUR, &[]).await;
        assert!(env.none_exist(&layout.files()).await, "garbage left behind");
        assert!(env.catalog.load(&again).await.is_err());
        assert!(env.all_exist(&live.files()).await, "live tables deleted");
    }
}

#[tokio::test]
async fn a_re_registration_racing_the_run_never_leaves_a_dangling_pointer() {
    // A register of a condemned file during the run's scan, verification or (the window
    // the module docs once admitted) right before its deletions is refused.
    for (n, phase) in [
        gc::GcPhase::ScanMetadata,
        gc::GcPhase::ScanIndexes,
        gc::GcPhase::Verify,
        gc::GcPhase::Delete,
    ]
    .into_iter()
    .enumerate()
    {
        for backend in [Backend::Memory, Backend::Local] {
            for (m, republish) in [Republish::TheFile, Republish::ItsTables]
                .into_iter()
                .enumerate()
            {
                race_at(backend, phase, republish, 90 + 10 * m as u64 + n as u64).await;
            }
        }
    }
}

/// Register an index over `indexes/old/1/`, drop it, and collect until a run of this
/// moment would delete its tables (a dry run tells): the next run deletes them.
async fn old_tables_doomed(env: &Env, config: &GcConfig) -> Layout {
    let old = Layout::under("old/1");
    let (old_id, _, _) = env.register("old", &old).await;
    env.advance(HOUR);
    env.catalog.drop_index(&old_id).await.expect("dropped");
    let dry_run = GcConfig {
        dry_run: true,
        ..config.clone()
    };
    let tables = old.files().len() as u64;
    for _ in 0..40 {
        env.advance(10 * MINUTE);
        if env.collect(&dry_run).await.counts.deleted.objects >= tables {
            return old;
        }
        env.collect(config).await;
    }
    panic!("the old tables were never doomed");
}

/// One run whose first delete phase starts with `work` (a writer acting between the
/// run's verification walk and its deletes); its report.
async fn run_with_first_delete(
    env: &Env,
    config: &GcConfig,
    work: impl Fn() + Send + Sync + 'static,
) -> gc::GcReport {
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = done.clone();
    let report = GarbageCollector::new(env.catalog.clone(), config.clone())
        .expect("gc")
        .with_progress(move |event| {
            let delete = gc::GcProgress::Phase {
                phase: gc::GcPhase::Delete,
            };
            if *event == delete && !flag.swap(true, std::sync::atomic::Ordering::SeqCst) {
                work();
            }
        })
        .collect(env.now())
        .await
        .expect("run");
    assert!(
        done.load(std::sync::atomic::Ordering::SeqCst),
        "the hook never ran"
    );
    report
}

/// Write `body` at `name` of the catalog's warehouse as a writer does: in place, whatever
/// is there.
async fn put_in_place(catalog: &parqdb_catalog::Catalog, name: &str, body: bytes::Bytes) {
    let warehouse = catalog.warehouse();
    warehouse
        .object_store()
        .put(
            &warehouse.path(name).expect("name"),
            object_store::PutPayload::from(body),
        )
        .await
        .expect("written");
}

/// Run `work` to its end on a thread and runtime of its own: what a synchronous progress
/// hook does to act in the middle of a run.
fn on_own_thread<T: Send + 'static>(work: impl Future<Output = T> + Send + 'static) -> T {
    std::thread::spawn(move || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime")
            .block_on(work)
    })
    .join()
    .expect("thread")
}

/// F1b of the attacks (`docs/gc-attacks.md`): a live index's family reference names a file
/// nobody has written yet (register accepts that), and a writer writes it for the first
/// time between a deleting run's verification walk and its deletes, naming the tables that
/// run is deleting. No publication happens, so no publication check can refuse it: the
/// collector reads the walk's dangling references again before every delete batch, and
/// the metadata of what the change log announced since the walk (an index registered
/// after it, F1b-late), and keeps what a file found there names.
#[tokio::test]
async fn a_file_first_written_at_a_dangling_reference_during_the_deletes_keeps_what_it_names() {
    for (n, backend) in [Backend::Memory, Backend::Local].into_iter().enumerate() {
        for (m, filling) in [
            Filling::Later,
            Filling::RegisteredLate,
            Filling::HalfWritten,
        ]
        .into_iter()
        .enumerate()
        {
            dangling_reference_filled_in(backend, filling, 40 + 3 * n as u64 + m as u64).await;
        }
    }
}

/// How the file at a live index's family reference comes to name the old tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Filling {
    /// Written during the deletes; the index was registered before the run.
    Later,
    /// The index is registered during the deletes, then the file is written.
    RegisteredLate,
    /// The file is being written in place at the verification walk (half of it there),
    /// and finished during the deletes.
    HalfWritten,
}

/// [`a_file_first_written_at_a_dangling_reference_during_the_deletes_keeps_what_it_names`]
/// for one [`Filling`].
async fn dangling_reference_filled_in(backend: Backend, filling: Filling, seed: u64) {
    let registered_late = filling == Filling::RegisteredLate;
    let env = claimed(backend, seed).await;
    let config = test_config();
    let later = "metadata/centroids-written-later.json".to_owned();
    let live = Layout {
        centroids_metadata: Some(later.clone()),
        ..Layout::under("live/1")
    };
    let live_id = env.id("live").await;
    if !registered_late {
        let (_, location) = env.new_index(&live).await;
        env.catalog
            .register(&live_id, Some(&live.source), &location)
            .await
            .expect("registered");
    }
    let old = old_tables_doomed(&env, &config).await;
    let tables = old.files().len() as u64;
    if filling == Filling::HalfWritten {
        env.put(&later, b"{\"tables\": [").await;
    }
    // A late index's files are written now (young: within the grace period).
    let live_location = match registered_late {
        true => env.new_index(&live).await.1,
        false => {
            env.catalog
                .load(&live_id)
                .await
                .expect("live")
                .metadata_location
        }
    };
    // The file, naming the old tables, is written once the run has verified and decided
    // what to delete: at its first delete phase (after registering the index, if late).
    let body = bytes::Bytes::from(env.metadata_for(&old).to_json_vec());
    let (catalog, name) = (env.catalog.clone(), later.clone());
    let (id, source, location) = (live_id.clone(), live.source.clone(), live_location.clone());
    let report = run_with_first_delete(&env, &config, move || {
        let (catalog, name, body) = (catalog.clone(), name.clone(), body.clone());
        let (id, source, location) = (id.clone(), source.clone(), location.clone());
        on_own_thread(async move {
            if registered_late {
                catalog
                    .register(&id, Some(&source), &location)
                    .await
                    .expect("registered during the deletes");
            }
            // Written (or finished) in place.
            put_in_place(&catalog, &name, body).await;
        });
    })
    .await;
    assert!(
        env.all_exist(&old.files()).await,
        "tables a live index names were deleted ({filling:?}): {:?}",
        report.actions
    );
    // Kept at the verification walk, or, where the half-written file may name anything
    // (on local files its cut-off text is read in every pairing of its quotes), by the
    // walk itself, which says so.
    let named_anything = report
        .warnings
        .iter()
        .any(|warning| warning.contains(&later) && warning.contains("may name any file"));
    assert!(
        report.counts.kept_at_verification.objects >= tables
            || (named_anything && report.counts.deleted.objects == 0),
        "{backend:?} {filling:?}: {:?} {:?}",
        report.counts,
        report.warnings
    );
    assert!(
        report
            .warnings
            .iter()
            .any(|warning| warning.contains(&later)),
        "{:?}",
        report.warnings
    );
    // Every later run reads the file through the live pointer: the tables stay.
    run_until(&env, &config, env.now() + 3 * HOUR, &[]).await;
    assert!(env.all_exist(&old.files()).await, "deleted by a later run");
    assert!(env.all_exist(&live.files()).await, "live tables deleted");
    env.catalog.load(&live_id).await.expect("the live index");
}

/// Round 57 (helper-53): a file under `metadata/` that may name anything, in a directory
/// no live index names yet, goes first: it keeps all of `indexes/`, not the old metadata
/// file it may name, which is condemned and deleted; here it is young (not condemned). An index whose family file names that
/// directory, registered during the deleting run (after its walks), would make that file
/// live: publication reads the files of a directory it names under `metadata/` as the
/// walk does, finds one that may name anything, and refuses while anything there is
/// condemned. Whatever happens, no live index names a deleted file.
#[tokio::test]
async fn a_directory_holding_a_file_that_may_name_anything_is_not_published_over_condemned_files() {
    for (n, backend) in [Backend::Memory, Backend::Local].into_iter().enumerate() {
        let env = claimed(backend, 70 + n as u64).await;
        let config = test_config();
        let old = Layout::under("old/1");
        let (old_id, _, old_location) = env.register("old", &old).await;
        let old_metadata = env.relative(&old_location);
        env.advance(HOUR);
        env.catalog.drop_index(&old_id).await.expect("dropped");
        assert!(
            env.collect_until_doomed(&config, &old_metadata).await,
            "{backend:?}: the old metadata file was never doomed"
        );
        // Written now (young: not condemned), a string longer than any name: it may name
        // anything, on every store.
        let holder = "metadata/fam/parts/manifest.json";
        let anything = format!(r#"{{"payload": "metadata/{}"}}"#, "x/".repeat(20_000));
        env.put(holder, anything.into_bytes().leak()).await;
        env.put(
            "metadata/fam/centroids.json",
            br#"{"parts": "metadata/fam/parts/"}"#,
        )
        .await;
        let live = Layout {
            centroids_metadata: Some("metadata/fam/centroids.json".to_owned()),
            ..Layout::under("live/1")
        };
        let (_, live_location) = env.new_index(&live).await;
        let live_id = env.id("live").await;
        let registered = std::sync::Arc::new(std::sync::Mutex::new(None));
        let outcome = registered.clone();
        let (catalog, id, source) = (env.catalog.clone(), live_id.clone(), live.source.clone());
        let gc = GarbageCollector::new(env.catalog.clone(), config.clone())
            .expect("gc")
            .with_progress(move |event| {
                let delete = gc::GcProgress::Phase {
                    phase: gc::GcPhase::Delete,
                };
                if *event != delete || outcome.lock().expect("lock").is_some() {
                    return;
                }
                let (catalog, id, source) = (catalog.clone(), id.clone(), source.clone());
                let location = live_location.clone();
                let result =
                    on_own_thread(
                        async move { catalog.register(&id, Some(&source), &location).await },
                    );
                *outcome.lock().expect("lock") = Some(result.map_err(|err| err.kind()));
            });
        gc.collect(env.now()).await.expect("run");
        let result = registered
            .lock()
            .expect("lock")
            .take()
            .expect("the hook ran");
        match result {
            Err(kind) => assert_eq!(kind, ErrorKind::InvalidIndexMetadata, "{backend:?}"),
            Ok(_) => assert!(
                env.exists(&old_metadata).await,
                "{backend:?}: deleted while a live directory's file may name it"
            ),
        }
        assert!(
            result.is_err(),
            "{backend:?}: registered over a condemned file the directory's file may name"
        );
        run_until(&env, &config, env.now() + 3 * HOUR, &[]).await;
        assert!(
            !env.exists(&old_metadata).await,
            "{backend:?}: the old metadata file is collected once nothing live may name it"
        );
    }
}

/// Round 58 (helper-54, F2 and F3): a live index's family reference names a directory
/// (`metadata/fam/parts`, a directory; round 62: a family file that is no metadata may name anything,
/// so a directory is reached through metadata only); a writer puts a JSON file there that
/// names the tables a deleting run has doomed, after the run's verification walk. The guard
/// lists the directory again before every delete batch, and the walks read its files as
/// family references' files: the tables are kept, by this run and every later one.
#[tokio::test]
async fn a_file_appearing_in_a_live_directory_during_the_deletes_keeps_what_it_names() {
    for (n, directory) in ["metadata/fam/parts"].into_iter().enumerate() {
        for (m, backend) in [Backend::Memory, Backend::Local].into_iter().enumerate() {
            let env = claimed(backend, 80 + 2 * n as u64 + m as u64).await;
            let config = test_config();
            let live = Layout {
                centroids_metadata: Some(directory.to_owned()),
                ..Layout::under("live/1")
            };
            env.register("live", &live).await;
            let old = old_tables_doomed(&env, &config).await;
            let file = format!("{directory}/manifest.json");
            let body = format!(r#"{{"tables": ["{}", "{}"]}}"#, old.centroids, old.postings);
            let (catalog, name) = (env.catalog.clone(), file.clone());
            let report = run_with_first_delete(&env, &config, move || {
                let (catalog, name, body) = (catalog.clone(), name.clone(), body.clone());
                on_own_thread(async move {
                    put_in_place(&catalog, &name, body.into()).await;
                });
            })
            .await;
            assert!(
                env.all_exist(&old.files()).await,
                "{backend:?} {directory}: tables a file in a live directory names were deleted: {:?}",
                report.actions
            );
            run_until(&env, &config, env.now() + 3 * HOUR, &[]).await;
            assert!(
                env.all_exist(&old.files()).await,
                "{backend:?} {directory}: deleted by a later run"
            );
        }
    }
}

/// C1 of the attacks (`docs/gc-attacks.md`): the guard of the delete steps reads the
/// metadata of every publication the change log announced since the verification walk.
/// Each partition's delete step starts from what the run's earlier steps kept
/// (`guard/` in the run's directory), so such metadata is read once per run, not once
/// per step of every partition; and what it names is still kept by every step.
#[tokio::test]
async fn the_guard_reads_a_logged_publication_once_per_run_not_once_per_partition() {
    use crate::support::gc::hooked_store::{HookedStore, process_over};

    let env = claimed(Backend::Memory, 61).await;
    let partitions = 6;
    let config = GcConfig {
        partitions,
        workers: 1,
        delete_batch_size: 1,
        ..test_config()
    };
    // Old tables in every partition (one top-level directory each), doomed.
    let mut old = Vec::new();
    for n in 0..partitions {
        let layout = Layout::under(&format!("old{n}/1"));
        let (id, _, _) = env.register(&format!("old{n}"), &layout).await;
        env.catalog.drop_index(&id).await.expect("dropped");
        old.push(layout);
    }
    let files: Vec<String> = old.iter().flat_map(Layout::files).collect();
    let dry_run = GcConfig {
        dry_run: true,
        ..config.clone()
    };
    let mut doomed = false;
    for _ in 0..40 {
        env.advance(10 * MINUTE);
        if env.collect(&dry_run).await.counts.deleted.objects >= files.len() as u64 {
            doomed = true;
            break;
        }
        env.collect(&config).await;
    }
    assert!(doomed, "the old tables were never doomed");
    // An index registered during the deletes: the guard reads its metadata.
    let late = Layout::under("late/1");
    let (_, location) = env.new_index(&late).await;
    let metadata = env.relative(&location);
    let id = env.id("late").await;
    let catalog = env.catalog.clone();
    let hooked = std::sync::Arc::new(HookedStore::new(std::sync::Arc::new(env.sim.clone())));
    let registered = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = registered.clone();
    let source = late.source.clone();
    // Reads of the file before the deletes (the run's pass over `metadata/`).
    let before = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let (reads_before, store, name) = (before.clone(), hooked.clone(), metadata.clone());
    let gc = process_over(&env, hooked.clone(), 6101, &config).with_progress(move |event| {
        let delete = gc::GcProgress::Phase {
            phase: gc::GcPhase::Delete,
        };
        if *event == delete && !flag.swap(true, std::sync::atomic::Ordering::SeqCst) {
            reads_before.store(store.reads_of(&name), std::sync::atomic::Ordering::SeqCst);
            let (catalog, id, source, location) = (
                catalog.clone(),
                id.clone(),
                source.clone(),
                location.clone(),
            );
            on_own_thread(async move {
                catalog
                    .register(&id, Some(&source), &location)
                    .await
                    .expect("registered during the deletes")
            });
        }
    });
    let report = gc.collect(env.now()).await.expect("run");
    assert!(
        registered.load(std::sync::atomic::Ordering::SeqCst),
        "the hook never ran"
    );
    assert!(env.none_exist(&files).await, "{:?}", report.actions);
    assert!(
        env.all_exist(&late.files()).await,
        "the late index's tables were deleted"
    );
    assert_eq!(
        hooked.reads_of(&metadata) - before.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "the metadata of the late registration, read by the guards of {partitions} partitions' delete steps"
    );
}

/// A family reference names a file: one ending with `/` is refused (the collector reads
/// the name without the slash, while on an object store the key with it is another
/// object, which no walk would read: what it names would not be kept).
#[tokio::test]
async fn a_family_reference_ending_with_a_slash_is_refused() {
    for (n, backend) in [Backend::Memory, Backend::Local].into_iter().enumerate() {
        let env = claimed(backend, 60 + n as u64).await;
        let layout = Layout {
            centroids_metadata: Some("metadata/c/centroids.json/".to_owned()),
            ..Layout::under("slashed/1")
        };
        let (_, location) = env.new_index(&layout).await;
        let id = env.id("slashed").await;
        let err = env
            .catalog
            .register(&id, Some(&layout.source), &location)
            .await
            .expect_err("a slashed family reference is refused");
        assert_eq!(err.kind(), ErrorKind::InvalidIndexMetadata, "{err}");
        assert!(err.message().contains("ends with `/`"), "{err}");
        // Without the slash it is published.
        let plain = Layout {
            centroids_metadata: Some("metadata/c/centroids.json".to_owned()),
            ..layout.clone()
        };
        let (_, location) = env.new_index(&plain).await;
        env.catalog
            .register(&id, Some(&plain.source), &location)
            .await
            .expect("registered");
    }
}

/// A family reference to a file larger than any metadata file the collector reads is
/// refused: the walk would read no name in it, and what it names would be collected while
/// the index is live.
#[tokio::test]
async fn a_family_reference_to_a_file_too_large_to_read_is_refused() {
    let env = claimed(Backend::Memory, 62).await;
    let huge = "metadata/c/huge-centroids.json";
    let size = parqdb_catalog::MAX_METADATA_BYTES + 1;
    env.warehouse
        .put_if_absent(huge, bytes::Bytes::from(vec![b' '; size]))
        .await
        .expect("written");
    let layout = Layout {
        centroids_metadata: Some(huge.to_owned()),
        ..Layout::under("huge/1")
    };
    let (_, location) = env.new_index(&layout).await;
    let id = env.id("huge").await;
    let err = env
        .catalog
        .register(&id, Some(&layout.source), &location)
        .await
        .expect_err("a reference too large to read is refused");
    assert_eq!(err.kind(), ErrorKind::InvalidIndexMetadata, "{err}");
    assert!(
        err.message().contains("bytes the garbage collector reads"),
        "{err}"
    );
}

/// Round 33, finding 1 (`docs/gc-attacks.md`): a file at a live family reference too
/// large to be metadata names old tables, either directly or one family reference further
/// down (written after the register, which register allows), or names a metadata file
/// beside the tables (outside `metadata/`, round 33b) that names them. It cannot be
/// parsed, but every string in it that names an object counts, read chunk by chunk, and
/// a file it names that may be metadata is read as a family reference's is: the old
/// tables stay, through every run.
#[tokio::test]
async fn a_family_file_too_large_to_parse_keeps_what_it_names() {
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum Way {
        Late,
        Nested,
        Through,
    }
    let size = parqdb_catalog::MAX_METADATA_BYTES + 1;
    for (n, way) in [Way::Late, Way::Nested, Way::Through]
        .into_iter()
        .enumerate()
    {
        let env = claimed(Backend::Memory, 63 + n as u64).await;
        let config = test_config();
        let old = Layout::under("old/1");
        let (old_id, _, _) = env.register("old", &old).await;
        env.catalog.drop_index(&old_id).await.expect("dropped");
        let through = "indexes/c/h.json";
        let named = match way {
            Way::Through => {
                let metadata = env.metadata_for(&old);
                env.warehouse
                    .put_if_absent(through, bytes::Bytes::from(metadata.to_json_vec()))
                    .await
                    .expect("written");
                format!("\"{through}\"")
            }
            _ => format!("\"{}\", \"{}\"", old.centroids, old.postings),
        };
        let mut huge = format!("{{\"tables\": [{named}], \"pad\": \"").into_bytes();
        huge.resize(size, b'x');
        huge.extend_from_slice(b"\"}");
        let (reference, huge_name) = match way {
            Way::Late => ("metadata/c/late.json", "metadata/c/late.json"),
            Way::Nested | Way::Through => ("metadata/c/f.json", "metadata/c/g.json"),
        };
        if way != Way::Late {
            let between = env.metadata_for(&Layout {
                centroids_metadata: Some(huge_name.to_owned()),
                ..Layout::under("between/1")
            });
            env.warehouse
                .put_if_absent(reference, bytes::Bytes::from(between.to_json_vec()))
                .await
                .expect("written");
        }
        let live = Layout {
            centroids_metadata: Some(reference.to_owned()),
            ..Layout::under("live/1")
        };
        env.register("live", &live).await;
        // Written after the register (publication refuses a file it cannot read to the
        // end, and one that is no metadata: round 62).
        env.warehouse
            .put_if_absent(huge_name, bytes::Bytes::from(huge))
            .await
            .expect("written after the register");
        run_until(&env, &config, env.now() + 8 * HOUR, &[]).await;
        assert!(
            env.all_exist(&old.files()).await,
            "tables a live family file names were deleted ({way:?})"
        );
        assert!(env.all_exist(&live.files()).await, "live tables deleted");
    }
}

/// Round 33b, finding 4: a file at a live family reference larger than any file whose
/// strings are read (a sparse file costs nothing on disk) may name anything: the walk
/// stops, nothing is deleted, and the error names the file.
#[tokio::test]
async fn a_family_file_too_large_to_read_stops_the_deletes() {
    let env = claimed(Backend::Local, 66).await;
    let config = test_config();
    let old = Layout::under("old/1");
    let (old_id, _, _) = env.register("old", &old).await;
    env.catalog.drop_index(&old_id).await.expect("dropped");
    let reference = "metadata/c/sparse.json";
    let live = Layout {
        centroids_metadata: Some(reference.to_owned()),
        ..Layout::under("live/1")
    };
    env.register("live", &live).await;
    let root = env.local_dir.clone().expect("local");
    std::fs::create_dir_all(root.join("metadata/c")).expect("dir");
    std::fs::File::create(root.join(reference))
        // More than the 1 GiB whose strings a run reads.
        .and_then(|file| file.set_len((1 << 30) + 1))
        .expect("sparse file");
    let mut errors = 0;
    for _ in 0..48 {
        env.advance(10 * MINUTE);
        let gc = GarbageCollector::new(env.catalog.clone(), config.clone()).expect("gc");
        if let Err(err) = gc.collect(env.now()).await {
            assert_eq!(err.kind(), ErrorKind::InvalidIndexMetadata, "{err}");
            assert!(err.message().contains("sparse.json"), "{err}");
            errors += 1;
        }
    }
    assert_eq!(errors, 48, "every run stops at the walk");
    assert!(
        env.all_exist(&old.files()).await,
        "deleted while the walk cannot finish"
    );
}

/// New metadata over an old index's condemned tables, written during the run that deletes
/// them (after its metadata pass: rule P cannot see it) and registered right after that
/// run, within the grace period of writing it (assumption 3): the deleted tables'
/// condemnations are still in the ledger, so the register is refused, and they are
/// released only once no such publication can be under way.
#[tokio::test]
async fn metadata_written_during_the_deleting_run_is_refused_after_it() {
    for (n, backend) in [Backend::Memory, Backend::Local].into_iter().enumerate() {
        let env = claimed(backend, 50 + n as u64).await;
        let config = test_config();
        let old = old_tables_doomed(&env, &config).await;
        let tables = old.files().len() as u64;
        // A writer picks the tables up while they exist, once the run has read
        // `metadata/`: its new metadata names them.
        let body = bytes::Bytes::from(env.metadata_for(&old).to_json_vec());
        let fresh = "metadata/picked-up-old-tables.json".to_owned();
        let (warehouse, name) = (env.catalog.warehouse().clone(), fresh.clone());
        let written = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = written.clone();
        let gc = GarbageCollector::new(env.catalog.clone(), config.clone())
            .expect("gc")
            .with_progress(move |event| {
                let scanning = gc::GcProgress::Phase {
                    phase: gc::GcPhase::ScanIndexes,
                };
                if *event == scanning && !flag.swap(true, std::sync::atomic::Ordering::SeqCst) {
                    let (warehouse, name, body) = (warehouse.clone(), name.clone(), body.clone());
                    on_own_thread(async move { warehouse.put_if_absent(&name, body).await })
                        .expect("written");
                }
            });
        let report = gc.collect(env.now()).await.expect("run");
        assert!(
            written.load(std::sync::atomic::Ordering::SeqCst),
            "the hook never ran"
        );
        assert!(
            report.counts.deleted.objects >= tables,
            "{:?}",
            report.actions
        );
        assert!(env.none_exist(&old.files()).await, "the tables were kept");
        // Right after the run, and up to the grace period after the file was written
        // (10 minutes here), with runs in between, the register is refused: it would
        // publish deleted tables.
        for _ in 0..3 {
            let again = env.id("picked-up").await;
            let err = env
                .catalog
                .register(&again, Some(&old.source), &env.warehouse.absolute(&fresh))
                .await
                .expect_err("deleted tables are not published");
            assert_eq!(err.kind(), ErrorKind::InvalidIndexMetadata, "{err}");
            assert!(err.message().contains("condemned"), "{err}");
            env.advance(4 * MINUTE);
            env.collect(&config).await;
        }
        // Once no publication of metadata written before the deletes can be under way,
        // the deleted tables' ledger entries are released. (Files on a local disk land at
        // the real time, far ahead of this test's clock: there the records' time has not
        // come.)
        if backend == Backend::Local {
            continue;
        }
        run_until(&env, &config, env.now() + 3 * HOUR, &[]).await;
        let ledger: Vec<String> = env
            .ledger_files()
            .await
            .into_iter()
            .filter(|file| file.starts_with("_gc/ledger/indexes/old/"))
            .collect();
        assert!(ledger.is_empty(), "ledger entries left: {ledger:?}");
    }
}

/// What a racing register publishes again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Republish {
    /// The condemned metadata file itself.
    TheFile,
    /// A new metadata file over the condemned tables, raced against the run that deletes
    /// the tables.
    ItsTables,
}

async fn race_at(backend: Backend, phase: gc::GcPhase, republish: Republish, seed: u64) {
    let env = claimed(backend, seed).await;
    let config = test_config();
    let layout = Layout::under("race/1");
    let (id, _, location) = env.register("race", &layout).await;
    let mut objects = layout.files();
    objects.push(env.relative(&location));
    env.advance(HOUR);
    env.catalog.drop_index(&id).await.expect("dropped");
    // Get everything condemned long enough ago: until the run of this moment would delete
    // (the metadata file goes first, its tables a run later).
    // (A dry run first: the real run of the same moment would delete.)
    let tables = layout.files().len() as u64;
    let doomed = |report: &gc::GcReport| match republish {
        Republish::TheFile => report.counts.deleted.objects > 0,
        Republish::ItsTables => report.counts.deleted.objects >= tables,
    };
    let dry_run = GcConfig {
        dry_run: true,
        ..config.clone()
    };
    for _ in 0..40 {
        env.advance(10 * MINUTE);
        if doomed(&env.collect(&dry_run).await) {
            break;
        }
        env.collect(&config).await;
    }
    let dry = env.collect(&dry_run).await;
    assert!(doomed(&dry), "nothing doomed: {:?}", dry.actions);
    let catalog = env.catalog.clone();
    let source = layout.source.clone();
    let register_location = match republish {
        Republish::TheFile => location.clone(),
        Republish::ItsTables => env.write_metadata(&env.metadata_for(&layout)).await,
    };
    let again = env.id("race-again").await;
    let published = again.clone();
    let registered = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = registered.clone();
    let gc = GarbageCollector::new(env.catalog.clone(), config.clone())
        .expect("gc")
        .with_progress(move |event| {
            if *event == (gc::GcProgress::Phase { phase })
                && !flag.swap(true, std::sync::atomic::Ordering::SeqCst)
            {
                // Register synchronously from the progress hook, between the two walks.
                let (catalog, source, location, again) = (
                    catalog.clone(),
                    source.clone(),
                    register_location.clone(),
                    again.clone(),
                );
                let outcome = on_own_thread(async move {
                    catalog.register(&again, Some(&source), &location).await
                });
                // The file or its tables are condemned: the register is refused,
                // whatever the phase.
                let err = outcome.expect_err("a condemned file is not published");
                assert_eq!(err.kind(), ErrorKind::InvalidIndexMetadata, "{err}");
            }
        });
    let report = gc.collect(env.now()).await.expect("run");
    assert!(
        registered.load(std::sync::atomic::Ordering::SeqCst),
        "the hook never ran"
    );
    // No pointer names a deleted file.
    assert!(
        env.catalog.load(&published).await.is_err(),
        "a pointer was published"
    );
    let next = env.collect(&config).await;
    assert_eq!(next.status, GcStatus::Completed, "{:?}", next.warnings);
    match republish {
        Republish::TheFile => assert!(report.counts.deleted.objects > 0, "{:?}", report.actions),
        // The refused register's change-log entry names the tables: a run that reads it
        // before deleting keeps them, and they go a retention later.
        Republish::ItsTables => {
            run_until(&env, &config, env.now() + 4 * HOUR, &[]).await;
            assert!(env.none_exist(&objects).await, "garbage left behind");
        }
    }
}

#[tokio::test]
async fn concurrent_runs_never_delete_live_files() {
    let env = claimed(Backend::Local, 10).await;
    let config = test_config();
    let live = Layout::under("live/1");
    env.register("live", &live).await;
    let dead = Layout::under("dead/1");
    let (id, _, dead_location) = env.register("dead", &dead).await;
    env.advance(HOUR);
    env.catalog.drop_index(&id).await.expect("dropped");
    let mut garbage = dead.files();
    garbage.push(env.relative(&dead_location));
    let mut statuses = Vec::new();
    while env.now() < START + 6 * HOUR {
        env.advance(10 * MINUTE);
        let (first, second) = (env.gc(config.clone()), env.gc(config.clone()));
        let (a, b) = tokio::join!(first.collect(env.now()), second.collect(env.now()));
        statuses.push(a.expect("run a").status);
        statuses.push(b.expect("run b").status);
        assert!(
            env.all_exist(&live.files()).await,
            "a live file was deleted"
        );
    }
    assert!(statuses.contains(&GcStatus::Completed));
    assert!(env.none_exist(&garbage).await, "garbage left behind");
}

const START: i64 = crate::support::gc::START_MS;

#[tokio::test]
async fn a_run_that_dies_mid_delete_is_resumed_safely() {
    for backend in [Backend::Local, Backend::Memory] {
        let env = claimed(backend, 11).await;
        let config = GcConfig {
            delete_batch_size: 2,
            ..test_config()
        };
        let live = Layout::under("live/1");
        let (_, _, live_location) = env.register("live", &live).await;
        let mut live_files = live.files();
        live_files.push(env.relative(&live_location));
        let mut garbage = Vec::new();
        for n in 0..3 {
            let layout = Layout::under(&format!("dead/{n}"));
            let (id, _, location) = env.register(&format!("dead{n}"), &layout).await;
            env.catalog.drop_index(&id).await.expect("dropped");
            garbage.extend(layout.files());
            garbage.push(env.relative(&location));
        }
        // Let everything become deletable, as seen by a dry run.
        let dry = GcConfig {
            dry_run: true,
            ..config.clone()
        };
        for _ in 0..30 {
            env.advance(10 * MINUTE);
            if env.collect(&dry).await.counts.deleted.objects > 1 {
                break;
            }
            env.collect(&config.clone()).await;
        }
        // The run dies after one delete.
        env.sim.fail_deletes_after(Some(1));
        let err = env
            .gc(config.clone())
            .collect(env.now())
            .await
            .expect_err("died");
        assert_eq!(err.kind(), ErrorKind::StoreUnavailable, "{backend:?}");
        assert!(env.all_exist(&live_files).await);
        // The failed run is unfinished: the next call goes on with it from its last
        // checkpoint (no retention clock restarts) and finishes it.
        let state = gc::status(&env.catalog, env.now(), false)
            .await
            .expect("status");
        let failed = state.current_run().expect("the failed run is unfinished");
        let phase = state.phase().expect("its phase");
        assert!(
            matches!(phase, gc::GcPhase::Verify | gc::GcPhase::Delete),
            "{backend:?}: {phase:?}"
        );
        env.sim.fail_deletes_after(None);
        let report = env.collect_completed(&config).await;
        assert_eq!(report.run_id, failed, "{backend:?}: resumed");
        assert!(
            !report.warnings.iter().any(|w| w.contains("did not finish")),
            "{:?}",
            report.warnings
        );
        run_until(&env, &config, env.now() + 3 * HOUR, &[]).await;
        assert!(env.none_exist(&garbage).await, "{backend:?}: garbage left");
        assert!(
            env.all_exist(&live_files).await,
            "{backend:?}: live files deleted"
        );
        // (On local files the deletion records land at the real time, far ahead of this
        // test's clock: there they are not released yet, and must list what is left.)
        let left = match backend {
            Backend::Local => env.unrecorded_ledger_files().await,
            _ => env.ledger_files().await,
        };
        assert!(left.is_empty(), "{backend:?}: ledger not cleared: {left:?}");
    }
}

#[tokio::test]
async fn dry_runs_report_and_change_nothing() {
    let env = claimed(Backend::Local, 12).await;
    let config = test_config();
    let layout = Layout::under("dry/1");
    let (id, _, _) = env.register("dry", &layout).await;
    env.catalog.drop_index(&id).await.expect("dropped");
    env.advance(HOUR);
    env.collect(&config).await; // tracked
    env.advance(3 * HOUR);
    env.collect(&config).await; // condemned
    env.advance(20 * MINUTE);
    let before = env.objects().await;
    let dry = env
        .collect(&GcConfig {
            dry_run: true,
            ..config.clone()
        })
        .await;
    assert_eq!(dry.status, GcStatus::DryRun);
    assert_eq!(
        env.objects().await,
        before,
        "a dry run changed the warehouse"
    );
    assert!(dry.counts.deleted.objects > 0);
    assert!(
        dry.actions
            .iter()
            .any(|a| a.reason.starts_with("would delete"))
    );
    let json = serde_json::to_value(&dry).expect("JSON");
    for field in [
        "scanned",
        "reachable",
        "condemned",
        "deleted",
        "kept-by-grace",
        "kept-by-retention",
    ] {
        assert!(json.get(field).is_some(), "report lacks {field}");
    }
    assert_eq!(
        json["scanned"]["objects"],
        serde_json::json!(dry.counts.scanned.objects)
    );
    let real = env.collect(&config).await;
    assert_eq!(
        real.counts.deleted.objects + real.counts.kept_by_reference.objects,
        dry.counts.deleted.objects + dry.counts.kept_by_reference.objects
    );
}

#[tokio::test]
async fn an_unreadable_root_aborts_the_run() {
    let env = claimed(Backend::Local, 13).await;
    let config = test_config();
    let layout = Layout::under("broken/1");
    let (_, _, location) = env.register("broken", &layout).await;
    env.put("indexes/garbage/part-0", b"garbage").await;
    env.advance(10 * HOUR);
    env.collect(&config).await;
    env.advance(3 * HOUR);
    // The live index's metadata file disappears (an operator's mistake).
    env.warehouse
        .object_store()
        .delete(
            &env.warehouse
                .path(&env.relative(&location))
                .expect("valid name"),
        )
        .await
        .expect("deleted");
    let err = env
        .gc(config.clone())
        .collect(env.now())
        .await
        .expect_err("aborted");
    assert_eq!(err.kind(), ErrorKind::InvalidIndexMetadata);
    assert!(
        err.message().contains("does not exist"),
        "{}",
        err.message()
    );
    assert!(env.all_exist(&layout.files()).await);
    assert!(
        env.exists("indexes/garbage/part-0").await,
        "deleted on incomplete knowledge"
    );
}

#[tokio::test]
async fn unsafe_settings_are_refused() {
    let env = claimed(Backend::Memory, 14).await;
    let short = GcConfig {
        retention: Duration::from_secs(60),
        ..GcConfig::default()
    };
    let err = GarbageCollector::new(env.catalog.clone(), short.clone()).expect_err("refused");
    assert_eq!(err.kind(), ErrorKind::Configuration);
    assert!(
        GarbageCollector::new(
            env.catalog.clone(),
            GcConfig {
                force: true,
                ..short
            }
        )
        .is_ok()
    );
}

#[tokio::test]
async fn a_killed_run_is_resumed_by_the_next_call_without_restarting_clocks() {
    let env = claimed(Backend::Local, 15).await;
    let config = test_config();
    let live = Layout::under("live/1");
    env.register("live", &live).await;
    let dead = Layout::under("dead/1");
    let (id, _, _) = env.register("dead", &dead).await;
    env.catalog.drop_index(&id).await.expect("dropped");
    env.advance(HOUR);
    // Kill a run (drop its future) as soon as it starts scanning.
    let notify = std::sync::Arc::new(tokio::sync::Notify::new());
    let signal = notify.clone();
    let gc = env.gc(config.clone()).with_progress(move |event| {
        if *event
            == (gc::GcProgress::Phase {
                phase: gc::GcPhase::ScanIndexes,
            })
        {
            signal.notify_one();
        }
    });
    tokio::select! {
        biased;
        _ = notify.notified() => {}
        result = gc.collect(env.now()) => panic!("the run was not killed: {result:?}"),
    }
    drop(gc);
    let killed = gc::status(&env.catalog, env.now(), false)
        .await
        .expect("status")
        .current_run()
        .expect("the killed run is unfinished");
    // The next call holds the same run's lease at once and finishes it.
    let report = env.collect_completed(&config).await;
    assert_eq!(report.run_id, killed);
    assert!(
        !report.warnings.iter().any(|w| w.contains("did not finish")),
        "{:?}",
        report.warnings
    );
    let state = gc::status(&env.catalog, env.now(), false)
        .await
        .expect("status");
    assert!(state.current_run().is_none(), "{state:?}");
    assert!(state.unfinished_runs().is_empty(), "{state:?}");
    run_until(&env, &config, env.now() + 4 * HOUR, &[]).await;
    assert!(env.all_exist(&live.files()).await);
    assert!(env.none_exist(&dead.files()).await);
}

/// Runs stopped by their budget (issue 16): with a zero budget every call does one page
/// of one step (pages of two objects, three partitions), checkpointed, and the next call
/// goes on where it stopped — through many calls and many runs no retention clock
/// restarts, nothing live or nested is deleted (a nested warehouse whose marker sorts
/// after some of its data, in another page), and everything a whole run would collect is
/// collected.
#[tokio::test]
async fn runs_stopped_by_their_budget_go_on_page_by_page_and_collect_everything() {
    for backend in [Backend::Local, Backend::Memory] {
        let env = claimed(backend, 31).await;
        let live = Layout::under("m-live/1");
        env.register("live", &live).await;
        let garbage: Vec<String> = ["a", "b", "c", "d", "e", "f"]
            .iter()
            .map(|dir| format!("indexes/{dir}/1/part-0.parquet"))
            .collect();
        for name in &garbage {
            let name: &'static str = Box::leak(name.clone().into_boxed_str());
            env.put(name, b"garbage").await;
        }
        let nested = [
            "indexes/c/wh/0-data/part-0",
            "indexes/c/wh/0-data/part-1",
            "indexes/c/wh/_catalog-owner.json",
            "indexes/c/wh/z-data/part-0",
        ];
        for name in nested {
            env.put(name, b"nested").await;
        }
        let config = GcConfig {
            budget: Some(Duration::ZERO),
            page_size: 2,
            partitions: 3,
            ..test_config()
        };
        let mut restarted = false;
        let mut calls = 0;
        let mut finished = std::collections::BTreeSet::new();
        let mut phases = std::collections::BTreeSet::new();
        let until = env.now() + 8 * HOUR;
        while env.now() < until {
            env.advance(2 * MINUTE);
            let report = env.collect(&config).await;
            calls += 1;
            restarted |= report.warnings.iter().any(|w| w.contains("did not finish"));
            match report.status {
                GcStatus::Completed => {
                    finished.insert(report.run_id);
                }
                GcStatus::InProgress => {
                    phases.insert(format!("{:?}", report.progress.expect("progress").phase));
                }
                other => panic!("{backend:?}: {other:?}"),
            }
            for name in live.files() {
                assert!(
                    env.exists(&name).await,
                    "{backend:?}: live `{name}` deleted"
                );
            }
            for name in nested {
                assert!(
                    env.exists(name).await,
                    "{backend:?}: nested `{name}` deleted"
                );
            }
        }
        assert!(!restarted, "{backend:?}: a resumed run restarts no clock");
        assert!(
            finished.len() >= 3,
            "{backend:?}: {calls} calls finished {finished:?}"
        );
        for phase in ["ScanMetadata", "ScanIndexes", "Delete"] {
            assert!(
                phases.contains(phase),
                "{backend:?}: never stopped in {phase}: {phases:?}"
            );
        }
        for name in &garbage {
            assert!(!env.exists(name).await, "{backend:?}: `{name}` collected");
        }
        let state = gc::status(&env.catalog, env.now(), true)
            .await
            .expect("status");
        assert!(state.last_finished_run().is_some());
        assert!(!state.running() || state.current_run().is_some());
    }
}

/// Condemnation markers (`_gc/ledger/<directory>/n-<ms>-<run-ms>-<run>-<page>.json`: one
/// file per directory and page naming what it condemns, the format issue 29's step B2
/// moves `indexes/` condemnations to) are read by publication like `c-` files: new
/// metadata over tables a marker condemns is refused until the marker goes. (A file named
/// itself, beside files a marker names: `warehouse::condemned`'s unit test.)
#[tokio::test]
async fn tables_a_condemnation_marker_names_cannot_be_published_under_new_metadata() {
    for (n, backend) in [Backend::Memory, Backend::Local].into_iter().enumerate() {
        let env = claimed(backend, 40 + n as u64).await;
        let layout = Layout::under("marked/1");
        env.write_tables(&layout).await;
        let postings = layout.postings.trim_end_matches('/');
        let marker = format!(
            "_gc/ledger/{postings}/n-5-1700000000000-0123456789abcdef0123456789abcdef-0.json"
        );
        let path = env.warehouse.path(&marker).expect("a name");
        env.warehouse
            .object_store()
            .put(&path, r#"{"names": ["part-1.parquet"]}"#.into())
            .await
            .expect("marker");
        let fresh = env.write_metadata(&env.metadata_for(&layout)).await;
        let id = env.id("marked").await;
        let err = env
            .catalog
            .register(&id, Some(&layout.source), &fresh)
            .await
            .expect_err("a table holding a file a marker condemns is not published");
        assert_eq!(err.kind(), ErrorKind::InvalidIndexMetadata, "{err}");
        assert!(err.message().contains("condemned"), "{err}");
        assert!(err.message().contains("part-1.parquet"), "{err}");
        // Once the marker is gone (its condemnations released), the same publication goes.
        env.warehouse
            .object_store()
            .delete(&path)
            .await
            .expect("released");
        env.catalog
            .register(&id, Some(&layout.source), &fresh)
            .await
            .expect("published once nothing is condemned");
    }
}
