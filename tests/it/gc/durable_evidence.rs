//! The collector dates every loss of reachability from durable evidence (issue 26): the
//! nine classes a fresh attack found with the default rules, one test each, on local files
//! and, where the class applies to object stores, on the S3-compatible server
//! (`PARQDB_TEST_S3_ENDPOINT`; `scripts/test.sh` starts one).
//!
//! Retention here is 2 h ([`test_config`]); "kept through retention" means every run made
//! every 10 minutes until a minute before the retention after the loss left the objects
//! in place.
#![allow(clippy::disallowed_methods)] // tests may read the wall clock and draw random ids (unique names)

use std::sync::Arc;
use std::time::Duration;

use crate::support::gc::hooked_store::HookedStore;
use crate::support::gc::{Backend, Env, HOUR, Layout, MINUTE, copy_dir, restore_into, test_config};
use parqdb_catalog::ErrorKind;
use parqdb_catalog::SeededIds;
use parqdb_catalog::gc::{self, GarbageCollector, GcConfig, GcStatus};
use parqdb_catalog::store::LocalStore;
use parqdb_catalog::store::PointerStore;
use parqdb_catalog::store::PointerStoreExt;
use parqdb_catalog::{Catalog, IndexCatalog};

const DAY: i64 = 24 * HOUR;

/// Run the collector every 10 minutes for `span`.
async fn runs_for(env: &Env, config: &GcConfig, span: i64) {
    let until = env.now() + span;
    while env.now() < until {
        env.advance(10 * MINUTE);
        let report = env.collect(config).await;
        assert_ne!(report.status, GcStatus::Skipped, "{report:?}");
    }
}

/// Every file a layout's tables and its metadata file hold.
fn objects(env: &Env, layout: &Layout, location: &str) -> Vec<String> {
    let mut all = layout.files();
    all.push(env.relative(location));
    all
}

// ---------------------------------------------------------------------------------------
// 1. Table locations through symbolic links (local).
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn class1_table_locations_through_symbolic_links_are_refused_and_link_targets_kept() {
    let env = Env::open(Backend::Local, 2601).await;
    let config = test_config();
    let root = env.local_dir.clone().expect("local");
    // A "current" layout: `indexes/u/current -> 7`.
    let real = Layout::under("u/7");
    env.write_tables(&real).await;
    std::os::unix::fs::symlink("7", root.join("indexes/u/current")).expect("link");
    let through = Layout::under("u/current");
    let metadata = env.metadata_for(&through);
    let location = env.write_metadata(&metadata).await;
    let id = env.id("current").await;
    let err = env
        .catalog
        .register(&id, Some(&through.source), &location)
        .await
        .expect_err("a table location through a link is refused");
    assert_eq!(err.kind(), ErrorKind::InvalidIndexMetadata, "{err}");
    assert!(err.message().contains("symbolic link"), "{err}");
    // The writer gives the layout up: its link goes (a link keeps what it leads to while
    // it is young, and a link made now lands at the real time, far ahead of this test's
    // clock).
    std::fs::remove_file(root.join("indexes/u/current")).expect("link removed");

    // A link that appears after register (the files moved, a link left in their place):
    // the collector keeps what the reference reaches through it.
    let moved = Layout::under("v/current");
    let (_, live) = env.new_index(&moved).await;
    let live_id = env.publish("live", &moved, &live).await;
    std::fs::rename(root.join("indexes/v/current"), root.join("indexes/v/8")).expect("move");
    std::os::unix::fs::symlink("8", root.join("indexes/v/current")).expect("link");
    // And tables reached through `elsewhere/w -> ../indexes/w`, bound by a record an
    // earlier version accepted.
    let behind = Layout::under("w/1");
    env.write_tables(&behind).await;
    std::fs::create_dir_all(root.join("elsewhere")).expect("dir");
    std::os::unix::fs::symlink("../indexes/w", root.join("elsewhere/w")).expect("link");
    let tabled = Layout {
        centroids: "elsewhere/w/1/ivf_centroids/".into(),
        postings: "elsewhere/w/1/ivf_postings/".into(),
        ..Layout::under("w/1")
    };
    let tabled_location = env.write_metadata(&env.metadata_for(&tabled)).await;
    let err = env
        .catalog
        .register(
            &env.id("tabled").await,
            Some(&tabled.source),
            &tabled_location,
        )
        .await
        .expect_err("refused too");
    assert_eq!(err.kind(), ErrorKind::InvalidIndexMetadata, "{err}");
    legacy_record(&env, "tabled-legacy", &tabled_location, &tabled.source).await;
    let since = env.now();
    runs_for(&env, &config, 2 * HOUR + 40 * MINUTE).await;
    assert!(env.catalog.load(&live_id).await.is_ok(), "still registered");
    for kept in [Layout::under("v/8").files(), behind.files()] {
        let gone = env.missing(&kept).await;
        assert!(
            gone.is_empty(),
            "live tables behind a link were deleted {} min after register: {gone:?}",
            (env.now() - since) / MINUTE
        );
    }
    // The files behind the refused register are ordinary garbage: collected.
    assert!(env.none_exist(&real.files()).await, "garbage stays");
}

/// A pointer record written the way an earlier version (or a hand) wrote it, bypassing
/// what register checks now.
async fn legacy_record(
    env: &Env,
    name: &str,
    location: &str,
    source: &parqdb_catalog::TableDefinition,
) {
    let id = env.id(name).await;
    let record = parqdb_catalog::catalog::record::PointerRecord::created(
        None,
        location.to_owned(),
        source.clone(),
        uuid::Uuid::new_v4(),
        env.now(),
    );
    env.pointer_store
        .put_listed(
            &id.store_key(),
            bytes::Bytes::from(record.to_bytes()),
            parqdb_catalog::store::PutMode::Create,
            record.listing(),
        )
        .await
        .expect("legacy record");
}

// ---------------------------------------------------------------------------------------
// 2. An identifier moving through old metadata.
// ---------------------------------------------------------------------------------------

async fn class2(backend: Backend, seed: u64) {
    let env = Env::open(backend, seed).await;
    let config = test_config();
    let l1 = Layout::under("ix/1");
    let (staging, m1, v1) = env.register("staging", &l1).await;
    let prod = env.publish("prod", &l1, &v1).await;
    // staging commits v1 → v2 → v3 → v4, keeping the two newest snapshots: snapshot 2's
    // tables are named by v2 and v3 only.
    let (l2, l3, l4) = (
        Layout::under("ix/2"),
        Layout::under("ix/3"),
        Layout::under("ix/4"),
    );
    let (m2, v2) = env.successor(&m1, &l2, Some(2)).await;
    let (m3, v3) = env.successor(&m2, &l3, Some(2)).await;
    let (_, v4) = env.successor(&m3, &l4, Some(2)).await;
    for (base, new) in [(&v1, &v2), (&v2, &v3), (&v3, &v4)] {
        env.catalog
            .commit(&staging, None, base, new)
            .await
            .expect("staging commits");
        env.advance(MINUTE);
    }
    // Runs track v2, v3 and snapshot 2's tables (nobody names them)…
    runs_for(&env, &config, HOUR + 30 * MINUTE).await;
    assert!(
        !env.entry_of(&env.relative(&v2)).await.is_empty(),
        "v2 is tracked"
    );
    // …and near the end of their retention, prod catches up commit by commit.
    let mut watched = objects(&env, &l2, &v2);
    watched.push(env.relative(&v3));
    for (base, new) in [(&v1, &v2), (&v2, &v3), (&v3, &v4)] {
        env.catalog
            .commit(&prod, None, base, new)
            .await
            .expect("prod catches up through the old files");
        env.advance(MINUTE);
    }
    let lost_at = env.now() - 2 * MINUTE;
    env.assert_kept_through_retention(
        lost_at,
        10 * MINUTE,
        &watched,
        " (prod named them)",
        async || {
            env.collect(&config).await;
        },
    )
    .await;
    // Liveness: they go once their retention from prod's commits has passed.
    runs_for(&env, &config, HOUR).await;
    assert!(env.none_exist(&watched).await, "never collected");
}

#[tokio::test]
async fn class2_an_identifier_catching_up_through_old_metadata_restarts_retention_local() {
    class2(Backend::Local, 2602).await;
}
/// A commit retried long after its metadata file was written: the file (tracked as
/// garbage meanwhile) is published by it, and its retention starts from that commit's
/// successor, not from when the collector first saw it.
#[tokio::test]
async fn class2_a_commit_retried_much_later_with_an_old_file_restarts_retention() {
    let env = Env::open(Backend::Local, 2604).await;
    let config = test_config();
    let l1 = Layout::under("late/1");
    let (id, m1, v1) = env.register("late", &l1).await;
    let l2 = Layout::under("late/2");
    let (m2, v2) = env.successor(&m1, &l2, None).await;
    // The writer stalls before its commit; the file is tracked as garbage.
    runs_for(&env, &config, HOUR + 40 * MINUTE).await;
    assert!(
        !env.entry_of(&env.relative(&v2)).await.is_empty(),
        "v2 is tracked"
    );
    env.catalog
        .commit(&id, None, &v1, &v2)
        .await
        .expect("the late commit lands");
    env.advance(MINUTE);
    let lost_at = env
        .commit_away(&id, &m2, &v2, &Layout::under("late/3"))
        .await;
    let watched = objects(&env, &l2, &v2);
    env.assert_kept_through_retention(lost_at, 10 * MINUTE, &watched, "", async || {
        env.collect(&config).await;
    })
    .await;
}

// ---------------------------------------------------------------------------------------
// 3. Catalog state going backwards.
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn class3_restoring_a_pointer_store_backup_in_place_restarts_every_clock() {
    let env = Env::open(Backend::Local, 2605).await;
    let config = test_config();
    env.register("a", &Layout::under("a/1")).await;
    runs_for(&env, &config, 30 * MINUTE).await;
    let store = env.local_dir.clone().expect("local").join("_catalog");
    let backup = tempfile::tempdir().expect("backup");
    copy_dir(&store, backup.path());
    // Registered after the backup was taken, and live for a while.
    env.advance(20 * MINUTE);
    let b = Layout::under("b/1");
    let (_, _, location) = env.register("b", &b).await;
    runs_for(&env, &config, 40 * MINUTE).await;
    // The operator restores the backup in place, into the store's directory (a directory
    // restored in its place is another store: `gc::store_binding`): `b`'s record is gone.
    restore_into(backup.path(), &store);
    let lost_at = env.now();
    env.assert_kept_through_retention(
        lost_at,
        10 * MINUTE,
        &objects(&env, &b, &location),
        " (the backup was restored then)",
        async || {
            env.collect(&config).await;
        },
    )
    .await;
}

/// The whole warehouse — data, records and the collector's own `_gc/` — restored from a
/// backup that kept every file's times (`cp -a`), after `b` named `a`'s dropped files for
/// a while: with runs in between (second attack: the journals rolled back with the
/// records, so the records looked explained, and the restored ledger held a clock the
/// later runs had cleared) or without (third attack: the restored run looked unfinished,
/// was finished again, and its finish mark trusted every restored clock).
async fn whole_warehouse_restore(seed: u64, runs_while_b_lives: bool) {
    let env = Env::open(Backend::Local, seed).await;
    let config = test_config();
    let a = Layout::under("a/1");
    let (id, _, location) = env.register("a", &a).await;
    env.catalog.drop_index(&id).await.expect("dropped");
    // One run starts the clocks of `a`'s files; the backup holds it, finished.
    runs_for(&env, &config, 10 * MINUTE).await;
    let root = env.local_dir.clone().expect("local");
    let backup = tempfile::tempdir().expect("backup");
    let copy = |from: &std::path::Path, to: &std::path::Path| {
        let status = std::process::Command::new("cp")
            .arg("-a")
            .arg(from)
            .arg(to)
            .status()
            .expect("cp");
        assert!(
            status.success(),
            "cp -a {} {}",
            from.display(),
            to.display()
        );
    };
    copy(&root, &backup.path().join("wh"));
    // `b` names the same file after the backup, and is live for an hour.
    env.advance(20 * MINUTE);
    env.publish("b", &a, &location).await;
    if runs_while_b_lives {
        runs_for(&env, &config, HOUR).await;
    } else {
        env.advance(HOUR);
    }
    // The operator restores the backup in place, into the same directories (`rsync -a
    // --delete`; the pointer store's directory restored in its place would be another
    // store: `gc::store_binding`): `b` is gone, and so is every trace of it and of the
    // runs after the backup.
    restore_into(&backup.path().join("wh"), &root);
    let lost_at = env.now();
    env.assert_kept_through_retention(
        lost_at,
        10 * MINUTE,
        &objects(&env, &a, &location),
        " (the whole warehouse was restored from a backup then)",
        async || {
            env.collect(&config).await;
        },
    )
    .await;
}

#[tokio::test]
async fn class3_restoring_the_whole_warehouse_from_a_backup_restarts_every_clock() {
    whole_warehouse_restore(2606, true).await;
}

#[tokio::test]
async fn class3_a_restored_run_is_never_finished_again() {
    whole_warehouse_restore(2607, false).await;
}

async fn class3_hand_edit(backend: Backend, seed: u64) {
    let env = Env::open(backend, seed).await;
    let config = test_config();
    let l1 = Layout::under("edit/1");
    let (id, m1, v1) = env.register("edit", &l1).await;
    let key = id.store_key();
    let before = env.record_bytes(&key).await;
    runs_for(&env, &config, 30 * MINUTE).await;
    let l2 = Layout::under("edit/2");
    let (_, v2) = env.successor(&m1, &l2, None).await;
    env.catalog
        .commit(&id, None, &v1, &v2)
        .await
        .expect("committed");
    runs_for(&env, &config, 30 * MINUTE).await;
    // Someone writes the record's earlier bytes back by hand.
    env.put_record_back(&key, before).await;
    let lost_at = env.now();
    env.assert_kept_through_retention(
        lost_at,
        10 * MINUTE,
        &objects(&env, &l2, &v2),
        " (the record was edited back then)",
        async || {
            env.collect(&config).await;
        },
    )
    .await;
}

#[tokio::test]
async fn class3_a_record_edited_back_by_hand_restarts_every_clock_local() {
    class3_hand_edit(Backend::Local, 2606).await;
}
#[tokio::test]
async fn class3_adopting_a_stale_copy_of_the_pointer_store_restarts_every_clock() {
    let env = Env::open(Backend::Local, 2608).await;
    let config = test_config();
    let l1 = Layout::under("stale/1");
    let (id, m1, v1) = env.register("stale", &l1).await;
    runs_for(&env, &config, 20 * MINUTE).await;
    let store = env.local_dir.clone().expect("local").join("_catalog");
    let copy = tempfile::tempdir().expect("copy");
    copy_dir(&store, copy.path());
    let l2 = Layout::under("stale/2");
    let (_, v2) = env.successor(&m1, &l2, None).await;
    env.catalog
        .commit(&id, None, &v1, &v2)
        .await
        .expect("commit");
    runs_for(&env, &config, 40 * MINUTE).await;
    // The operator re-homes the catalog on the stale copy (`init --adopt`).
    let stale: Arc<dyn PointerStore> = Arc::new(LocalStore::new(copy.path()));
    let catalog = Catalog::builder(stale, env.warehouse.clone())
        .clock(env.clock.clone())
        .ids(Arc::new(SeededIds::new(2609)))
        .build();
    gc::adopt(&catalog, env.now()).await.expect("re-homed");
    let adopted_at = env.now();
    let watched = objects(&env, &l2, &v2);
    while env.now() < adopted_at + 2 * HOUR - MINUTE {
        env.advance(10 * MINUTE);
        let report = GarbageCollector::new(catalog.clone(), config.clone())
            .expect("gc")
            .collect(env.now())
            .await
            .expect("run");
        assert_eq!(report.status, GcStatus::Completed, "{report:?}");
        assert!(
            env.all_exist(&watched).await,
            "deleted {} min after the stale copy was adopted",
            (env.now() - adopted_at) / MINUTE
        );
    }
}

// ---------------------------------------------------------------------------------------
// 4. Source tables named in another spelling.
// ---------------------------------------------------------------------------------------

/// Register refuses every spelling of a source under the managed prefixes; a binding an
/// earlier version accepted (written here as a raw record) keeps the files it names.
async fn class4(env: Env, spellings: Vec<String>) {
    let config = test_config();
    env.register("keep", &Layout::under("keep/1")).await;
    let files = ["indexes/src/part-0.parquet", "indexes/src/part-1.parquet"];
    for file in files {
        env.put(file, b"source rows").await;
    }
    for (n, spelling) in spellings.iter().enumerate() {
        let layout = Layout {
            source: crate::support::gc::source_at(spelling),
            ..Layout::under(&format!("bound{n}/1"))
        };
        let (_, location) = env.new_index(&layout).await;
        let err = env
            .catalog
            .register(
                &env.id(&format!("bound{n}")).await,
                Some(&layout.source),
                &location,
            )
            .await
            .expect_err(spelling);
        assert_eq!(
            err.kind(),
            ErrorKind::InvalidIndexMetadata,
            "{spelling}: {err}"
        );
        // The record an earlier version wrote for it.
        legacy_record(&env, &format!("legacy{n}"), &location, &layout.source).await;
    }
    runs_for(&env, &config, 3 * HOUR).await;
    for file in files {
        assert!(
            env.exists(file).await,
            "{file}, bound by a live source, was deleted"
        );
    }
}

#[tokio::test]
async fn class4_sources_in_any_spelling_are_refused_and_kept_local() {
    let env = Env::open(Backend::Local, 2610).await;
    let root = env.local_dir.clone().expect("local");
    let link = tempfile::tempdir().expect("link dir");
    std::os::unix::fs::symlink(&root, link.path().join("wh")).expect("link");
    let abs = root.display().to_string();
    let spellings = vec![
        format!("{abs}/indexes/src/"),
        format!("{abs}//indexes/src"),
        format!("{abs}/./indexes/src/"),
        format!("FILE://{abs}/indexes/src"),
        format!("file:{abs}/indexes/src"),
        format!("{}/indexes/src", link.path().join("wh").display()),
        // Globs (DataFusion reads them as patterns): found by the attack on the result.
        format!("{abs}/index?s/src/*.parquet"),
        format!("{abs}/[i]ndexes/src/"),
    ];
    class4(env, spellings).await;
}
// ---------------------------------------------------------------------------------------
// 5. `init` over existing data.
// ---------------------------------------------------------------------------------------

async fn class5(backend: Backend, seed: u64) {
    let env = Env::open_unclaimed(backend, seed).await;
    let config = test_config();
    let shards = ["indexes/other/shard-0.bin", "indexes/other/shard-1.bin"];
    for shard in shards {
        env.put_dated(shard, b"another system's data", env.now() - 30 * DAY)
            .await;
    }
    let err = gc::claim(&env.catalog, env.now())
        .await
        .expect_err("a warehouse holding data is not claimed without --adopt");
    assert_eq!(err.kind(), ErrorKind::Configuration, "{err}");
    let err = env
        .catalog
        .create_namespace(
            &parqdb_catalog::Namespace::new(["ns"]).expect("ns"),
            Default::default(),
        )
        .await
        .expect_err("nor by a first write");
    assert_eq!(err.kind(), ErrorKind::Configuration, "{err}");
    gc::adopt(&env.catalog, env.now()).await.expect("adopted");
    let adopted_at = env.now();
    let watched: Vec<String> = shards.iter().map(|s| s.to_string()).collect();
    env.assert_kept_through_retention(
        adopted_at,
        10 * MINUTE,
        &watched,
        " (adopted then)",
        async || {
            env.collect(&config).await;
        },
    )
    .await;
}

#[tokio::test]
async fn class5_init_over_existing_data_is_refused_and_adoption_keeps_a_full_retention_local() {
    class5(Backend::Local, 2612).await;
}
// ---------------------------------------------------------------------------------------
// 6. A lease nothing releases.
// ---------------------------------------------------------------------------------------

async fn leave_lease(env: &Env, expires_ms: i64) {
    let generation = serde_json::json!({
        "holder": uuid::Uuid::new_v4(),
        "acquired-ms": env.now(),
        "expires-ms": expires_ms,
        "released": false,
    });
    env.warehouse
        .put_if_absent(
            "_gc/lease/00000000000000000001.json",
            bytes::Bytes::from(generation.to_string()),
        )
        .await
        .expect("lease written");
}

#[tokio::test]
async fn class6_a_lease_no_run_can_hold_is_refused_or_taken_over_and_abandon_breaks_one() {
    let config = test_config();
    let err = GcConfig {
        lease_duration: Duration::from_secs(3650 * 24 * 3600),
        ..config.clone()
    }
    .validate()
    .expect_err("a ten-year lease is refused");
    assert_eq!(err.kind(), ErrorKind::Configuration);

    // A run whose clock was years ahead (or an earlier version's unbounded lease) left it.
    let env = Env::open(Backend::Local, 2614).await;
    leave_lease(&env, env.now() + 3650 * DAY).await;
    env.collect_completed(&config).await;

    // A run killed before its plan left a lease for hours: `gc abandon` breaks it.
    let env = Env::open(Backend::Local, 2615).await;
    leave_lease(&env, env.now() + 5 * HOUR).await;
    assert_eq!(env.collect(&config).await.status, GcStatus::Skipped);
    env.gc(config.clone()).abandon().await.expect("abandon");
    env.collect_completed(&config).await;
}

// ---------------------------------------------------------------------------------------
// 7. One long key.
// ---------------------------------------------------------------------------------------

/// Whether the object `name` exists: through the file system on a local warehouse (the
/// object store's own writes go through a longer staging name), else through the store.
async fn exists_long(env: &Env, name: &str) -> bool {
    match &env.local_dir {
        Some(dir) => dir.join(name).exists(),
        None => env.exists_raw(name).await,
    }
}

async fn class7(env: Env, name: String) {
    let config = test_config();
    match &env.local_dir {
        Some(dir) => {
            let path = dir.join(&name);
            std::fs::create_dir_all(path.parent().expect("parent")).expect("dirs");
            std::fs::write(&path, b"garbage with a long name").expect("long file");
            crate::support::gc::set_mtime(&path, env.now());
        }
        None => env.put_raw(&name, b"garbage with a long name").await,
    }
    assert!(exists_long(&env, &name).await);
    env.put("indexes/short/part-0", b"garbage").await;
    let (id, _, _) = env.register("dead", &Layout::under("dead/1")).await;
    env.catalog.drop_index(&id).await.expect("dropped");
    let mut kept_long = false;
    let until = env.now() + 3 * HOUR;
    while env.now() < until {
        env.advance(10 * MINUTE);
        let report = env
            .gc(config.clone())
            .collect(env.now())
            .await
            .unwrap_or_else(|err| panic!("a long key stopped the run: {err}"));
        assert_eq!(report.status, GcStatus::Completed);
        kept_long |= serde_json::to_value(&report).expect("json")["kept-unmirrorable"]["objects"]
            .as_u64()
            .is_some_and(|n| n > 0);
    }
    assert!(kept_long, "the long key is reported");
    assert!(exists_long(&env, &name).await, "the long key is kept");
    assert!(
        !env.exists("indexes/short/part-0").await,
        "collection went on around it"
    );
}

#[tokio::test]
async fn class7_a_key_too_long_for_the_ledger_is_kept_and_collection_goes_on_local() {
    let env = Env::open(Backend::Local, 2616).await;
    let root_len = env
        .local_dir
        .as_ref()
        .expect("local")
        .display()
        .to_string()
        .len();
    // The longest path the file system takes: the file itself fits, its ledger entry not.
    let budget = 4095 - root_len - 1 - "indexes/".len();
    let mut name = String::from("indexes");
    let mut left = budget;
    while left > 0 {
        let segment = left.min(200);
        let segment = if left - segment == 0 {
            segment
        } else {
            segment.min(left - 2)
        };
        name.push('/');
        name.push_str(&"x".repeat(segment.max(1)));
        left = left.saturating_sub(segment + 1);
    }
    let path = env.local_dir.as_ref().expect("local").join(&name);
    assert!(path.display().to_string().len() <= 4095);
    class7(env, name).await;
}
// ---------------------------------------------------------------------------------------
// 8. A stray file naming the managed prefixes.
// ---------------------------------------------------------------------------------------

async fn class8(backend: Backend, seed: u64) {
    let env = Env::open(backend, seed).await;
    let config = test_config();
    env.put(
        "metadata/zz-notes.json",
        br#"{"format-version":2,"n":["indexes","metadata","indexes/","metadata/"]}"#,
    )
    .await;
    let dead = Layout::under("dead/1");
    let (id, _, location) = env.register("dead", &dead).await;
    env.catalog.drop_index(&id).await.expect("dropped");
    let garbage = objects(&env, &dead, &location);
    let mut unknown = 0;
    let until = env.now() + 3 * HOUR;
    while env.now() < until {
        env.advance(10 * MINUTE);
        unknown = unknown.max(
            env.collect(&config)
                .await
                .counts
                .kept_unknown_format
                .objects,
        );
    }
    assert!(
        env.none_exist(&garbage).await,
        "a stray note naming the managed prefixes stopped collection"
    );
    assert!(
        env.exists("metadata/zz-notes.json").await,
        "the stray is kept"
    );
    assert_eq!(unknown, 1, "and reported");
}

#[tokio::test]
async fn class8_a_stray_file_naming_the_managed_prefixes_keeps_nothing_whole_local() {
    class8(Backend::Local, 2618).await;
}
// ---------------------------------------------------------------------------------------
// 9. A completed run reports failure.
// ---------------------------------------------------------------------------------------

/// An invocation frozen mid-run (SIGSTOP: a Lambda sandbox frozen at its timeout, a
/// process paused by its host) while another invocation goes on with the same run and
/// finishes it, then thawed (SIGCONT): it stops at its next fence, and — the run being
/// complete — reports success with a warning, not `COMMIT_CONFLICT`. Both are the real
/// command on a local warehouse.
#[tokio::test]
async fn class9_an_invocation_that_wakes_after_its_run_finished_reports_success() {
    let bin = env!("CARGO_BIN_EXE_parqdb-catalog");
    let gc = [
        "gc",
        "--retention",
        "1s",
        "--grace",
        "1s",
        "--condemn-delay",
        "1s",
        "--force",
        "--page-size",
        "5",
        "--workers",
        "1",
    ];
    let mut resumed_by_another = 0;
    for (trial, delay_ms) in [40u64, 80, 130, 200, 300, 450, 650, 900, 1300]
        .into_iter()
        .enumerate()
    {
        let dir = tempfile::tempdir().expect("dir");
        let wh = dir.path().join("wh");
        let cli = || {
            let mut command = std::process::Command::new(bin);
            command
                .arg("--warehouse")
                .arg(format!("file://{}", wh.display()))
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped());
            command
        };
        assert!(cli().arg("init").status().expect("init").success());
        for n in 0..400 {
            let path = wh.join(format!("indexes/g{}/part-{n}", n % 9));
            std::fs::create_dir_all(path.parent().expect("parent")).expect("dir");
            std::fs::write(&path, b"garbage").expect("file");
        }
        std::thread::sleep(Duration::from_millis(1100));
        let frozen = cli().args(gc).spawn().expect("spawned");
        let pid = frozen.id() as libc::pid_t;
        std::thread::sleep(Duration::from_millis(delay_ms));
        // SAFETY: signalling our own child process.
        unsafe { libc::kill(pid, libc::SIGSTOP) };
        let other = cli().args(gc).output().expect("ran");
        assert!(
            other.status.success(),
            "trial {trial}: {}",
            String::from_utf8_lossy(&other.stderr)
        );
        // SAFETY: as above.
        unsafe { libc::kill(pid, libc::SIGCONT) };
        let woke = frozen.wait_with_output().expect("waited");
        assert!(
            woke.status.success(),
            "trial {trial} (frozen after {delay_ms} ms): the thawed invocation failed: {}",
            String::from_utf8_lossy(&woke.stderr)
        );
        let run_id = |out: &[u8]| {
            serde_json::from_slice::<serde_json::Value>(out)
                .ok()
                .and_then(|v| v["run-id"].as_str().map(str::to_owned))
        };
        if run_id(&woke.stdout).is_some() && run_id(&woke.stdout) == run_id(&other.stdout) {
            resumed_by_another += 1;
        }
    }
    assert!(
        resumed_by_another > 0,
        "no trial froze an invocation whose run another one then finished"
    );
}

// ---------------------------------------------------------------------------------------
// The fresh attack on the result (issue 26): what it found, one test each.
// ---------------------------------------------------------------------------------------

/// An index whose successor expired its first tables (`l1`), condemned by the runs of a
/// full retention: `(env, id, backup of its record, (m1, its location), l1, v2's
/// location)`.
async fn condemned_first_version(
    backend: Backend,
    seed: u64,
) -> (
    Env,
    parqdb_catalog::IndexIdentifier,
    parqdb_catalog::store::Versioned,
    (parqdb_catalog::IndexMetadata, String),
    Layout,
    String,
) {
    let env = Env::open(backend, seed).await;
    let config = test_config();
    let l1 = Layout::under("old/1");
    let (id, m1, v1) = env.register("old", &l1).await;
    let backup = env
        .pointer_store
        .get(&id.store_key())
        .await
        .expect("read")
        .expect("record");
    runs_for(&env, &config, 30 * MINUTE).await;
    let (_, v2) = env.successor(&m1, &Layout::under("old/2"), Some(1)).await;
    env.catalog
        .commit(&id, None, &v1, &v2)
        .await
        .expect("committed");
    // Runs through the retention and the condemnation delay: v1 and l1 are condemned.
    runs_for(&env, &config, 2 * HOUR + 5 * MINUTE).await;
    (env, id, backup, (m1, v1), l1, v2)
}

/// A restored backup of the pointer store buried under more commits than a record's chain
/// remembers (16) before the next walk: the commit on top of the restored record names its
/// base, which was current until then.
#[tokio::test]
async fn attack_a_restored_backup_buried_under_many_commits_keeps_what_it_named() {
    let (env, id, backup, (m1, v1), l1, _) = condemned_first_version(Backend::Local, 2620).await;
    let config = test_config();
    let key = id.store_key();
    let current = env
        .pointer_store
        .get(&key)
        .await
        .expect("read")
        .expect("record");
    env.pointer_store
        .put(
            &key,
            backup.value.clone(),
            parqdb_catalog::store::PutMode::Update(current.version),
        )
        .await
        .expect("restored");
    let restored_at = env.now();
    // Eighteen commits on top of the restored record before any run walks.
    let (mut base, mut base_location) = (m1, v1.clone());
    for n in 0..18 {
        let (next, location) = env
            .successor(&base, &Layout::under(&format!("old/r{n}")), Some(1))
            .await;
        env.catalog
            .commit(&id, None, &base_location, &location)
            .await
            .expect("committed");
        (base, base_location) = (next, location);
    }
    env.assert_kept_through_retention(
        restored_at,
        10 * MINUTE,
        &objects(&env, &l1, &v1),
        " (a restored record named it then)",
        async || {
            env.collect(&config).await;
        },
    )
    .await;
}

/// A record edited back by hand to an earlier location, keeping its commit id, then
/// committed on once: the commit names its base.
#[tokio::test]
async fn attack_a_hand_rollback_keeping_the_commit_id_keeps_what_it_named() {
    let (env, id, _, (m1, v1), l1, v2) = condemned_first_version(Backend::Local, 2621).await;
    let config = test_config();
    let key = id.store_key();
    let current = env
        .pointer_store
        .get(&key)
        .await
        .expect("read")
        .expect("record");
    let text = String::from_utf8(current.value.to_vec()).expect("utf-8");
    assert!(text.contains(&v2), "{text}");
    let edited = text.replace(&v2, &v1);
    env.pointer_store
        .put(
            &key,
            bytes::Bytes::from(edited),
            parqdb_catalog::store::PutMode::Update(current.version),
        )
        .await
        .expect("hand edit");
    let rolled_back_at = env.now();
    env.advance(10 * MINUTE);
    // The job commits on from what it loads (v1's metadata as base).
    let loaded = env.catalog.load(&id).await.expect("loaded");
    assert_eq!(loaded.metadata_location, v1);
    let (_, next) = env.successor(&m1, &Layout::under("old/3"), Some(1)).await;
    env.catalog
        .commit(&id, None, &v1, &next)
        .await
        .expect("committed");
    env.assert_kept_through_retention(
        rolled_back_at,
        10 * MINUTE,
        &objects(&env, &l1, &v1),
        " (the record was rolled back to it then)",
        async || {
            env.collect(&config).await;
        },
    )
    .await;
}

/// A folder marker or `.keep` under the change log (what consoles and sync tools write) is
/// no entry: collection goes on.
async fn stray_in_change_log(backend: Backend, seed: u64) {
    let env = Env::open(backend, seed).await;
    let config = test_config();
    env.put("_gc/changes/.keep", b"").await;
    env.put("indexes/orphan/part-0.parquet", b"rows").await;
    runs_for(&env, &config, 3 * HOUR).await;
    assert!(
        !env.exists("indexes/orphan/part-0.parquet").await,
        "a stray object under the change log stopped collection"
    );
}

#[tokio::test]
async fn attack_a_stray_object_under_the_change_log_does_not_stop_collection_local() {
    stray_in_change_log(Backend::Local, 2622).await;
}
/// The tests on the S3-compatible server (`PARQDB_TEST_S3_ENDPOINT`): the whole suite
/// runs them, the fast tier does not (`tests/it/tiers.txt`).
mod s3 {
    use super::*;

    #[tokio::test]
    async fn class2_an_identifier_catching_up_through_old_metadata_restarts_retention_s3() {
        class2(Backend::S3, 2603).await;
    }

    #[tokio::test]
    async fn class3_a_record_edited_back_by_hand_restarts_every_clock_s3() {
        class3_hand_edit(Backend::S3, 2607).await;
    }

    #[tokio::test]
    async fn class4_sources_in_any_spelling_are_refused_and_kept_s3() {
        let env = Env::open(Backend::S3, 2611).await;
        let root = env.warehouse.root().to_owned();
        let bucket = root
            .strip_prefix("s3://")
            .and_then(|rest| rest.split('/').next())
            .expect("bucket")
            .to_owned();
        let spellings = vec![
            format!("s3://{bucket}/wh//indexes/src"),
            format!("s3a://{bucket}/wh/./indexes/src/"),
            format!("https://{bucket}.s3.us-east-1.amazonaws.com/wh/indexes/src/"),
            format!("http://127.0.0.1:9000/{bucket}/wh/indexes/src"),
            // A user or a port before the bucket: object_store reads the host alone
            // (GC round 117, F1).
            format!("s3://reader@{bucket}/wh/indexes/src/"),
            format!("s3://{bucket}:443/wh/indexes/src/"),
            format!("s3a://key:secret@{bucket}:9000/wh//indexes/src"),
            // What the `url` crate (object_store, DataFusion) reads in them: a backslash
            // as `/`, a percent-encoded host, a tab dropped, `?` ending the authority
            // (GC round 118, F1).
            format!("https://{bucket}.s3.amazonaws.com\\wh/indexes/src/"),
            format!(
                "https://%{:02X}{}.s3.amazonaws.com/wh/indexes/src/",
                bucket.as_bytes()[0],
                &bucket[1..]
            ),
            format!("s3://{bucket}/w\th/indexes/src/"),
            format!("s3://{bucket}?/wh/indexes/src/"),
        ];
        class4(env, spellings).await;
    }

    #[tokio::test]
    async fn class5_init_over_existing_data_is_refused_and_adoption_keeps_a_full_retention_s3() {
        class5(Backend::S3, 2613).await;
    }

    #[tokio::test]
    async fn class7_a_key_too_long_for_the_ledger_is_kept_and_collection_goes_on_s3() {
        let env = Env::open(Backend::S3, 2617).await;
        // S3 allows 1,024 bytes; the ledger's mirror of this key would not fit.
        let name = format!("indexes/{}/{}", "y".repeat(500), "z".repeat(480));
        class7(env, name).await;
    }

    #[tokio::test]
    async fn class8_a_stray_file_naming_the_managed_prefixes_keeps_nothing_whole_s3() {
        class8(Backend::S3, 2619).await;
    }

    #[tokio::test]
    async fn attack_a_stray_object_under_the_change_log_does_not_stop_collection_s3() {
        stray_in_change_log(Backend::S3, 2623).await;
    }
}

/// The tests with pointers in DynamoDB Local (`PARQDB_TEST_DYNAMODB_ENDPOINT`): the whole
/// suite runs them, the fast tier does not (`tests/it/tiers.txt`).
/// Round 105, F1: a claim writes its binding record before the marker, so no claim that
/// stops between them leaves an exact marker without the record (which let a looser marker
/// pass again); and a claim that stopped after the record claims on its next try (its own
/// record is no evidence that somebody else used the warehouse).
#[tokio::test]
async fn redteam105_a_claim_writes_its_binding_record_before_its_marker() {
    let env = Env::open_unclaimed(Backend::Memory, 2641).await;
    let over = |fail: fn(&str) -> bool| {
        let store = HookedStore::new(Arc::new(env.sim.clone())).fail_on(fail);
        let warehouse = parqdb_catalog::Warehouse::new(
            env.warehouse.root(),
            Arc::new(store),
            env.warehouse.prefix().clone(),
        )
        .expect("warehouse");
        Catalog::builder(env.pointer_store.clone(), warehouse)
            .clock(env.clock.clone())
            .ids(Arc::new(SeededIds::new(2641)))
            .build()
    };
    let no_record = over(|key| key.ends_with(".bound"));
    gc::claim(&no_record, env.now())
        .await
        .expect_err("the binding record cannot be written");
    assert!(
        !env.exists_raw("_catalog-owner.json").await,
        "no marker without its binding record"
    );
    let no_marker = over(|key| key.ends_with("_catalog-owner.json"));
    gc::claim(&no_marker, env.now())
        .await
        .expect_err("the marker cannot be written");
    assert!(!env.exists_raw("_catalog-owner.json").await);
    let marker = gc::claim(&env.catalog, env.now())
        .await
        .expect("the claim goes on past its own binding record");
    let id = marker.catalog_id;
    assert!(
        env.exists_raw(&format!("_gc/claims/{id}.bound")).await,
        "the record of the stopped claim"
    );
    assert!(env.exists_raw("_catalog-owner.json").await);
}

/// A binding record alone is no evidence that a warehouse was used: it goes before its
/// claim's marker, so a catalog racing for a fresh warehouse may see another's record
/// before that marker, and must go on to lose (or win) the race for the marker, answering
/// `WAREHOUSE_NOT_OWNED` if it loses, not take the warehouse for a used one
/// (`gc::hostile_layouts::class2_two_catalogs_racing_for_a_fresh_warehouse_have_exactly_one_owner`
/// caught it, now and then).
#[tokio::test]
async fn a_binding_record_alone_is_no_evidence_of_use() {
    let env = Env::open_unclaimed(Backend::Memory, 2645).await;
    let stranger = uuid::Uuid::new_v4();
    env.put(&format!("_gc/claims/{stranger}.bound"), b"{}")
        .await;
    let marker = gc::claim(&env.catalog, env.now())
        .await
        .expect("a claim under way elsewhere is no use of the warehouse");
    assert_ne!(marker.catalog_id, stranger);
}

/// Round 107, F2: a local store writes a file as a staging file `<name>#<n>` renamed into
/// place; a claim stopped between the two leaves the binding record's staging file, which
/// is no more evidence of use than the record itself.
#[tokio::test]
async fn redteam107_a_binding_records_staging_file_is_no_evidence_of_use() {
    let env = Env::open_unclaimed(Backend::Local, 2647).await;
    let claims = env.local_dir.clone().expect("local").join("_gc/claims");
    std::fs::create_dir_all(&claims).expect("dir");
    std::fs::write(
        claims.join(format!("{}.bound#1", uuid::Uuid::new_v4())),
        b"{",
    )
    .expect("staging file");
    gc::claim(&env.catalog, env.now())
        .await
        .expect("a stopped write of a binding record is no use of the warehouse");
}

/// Round 107, F3: a young file that shows a warehouse (or a pointer store) nested inside
/// this one is evidence of use: a stranger claimed the directory enclosing a warehouse
/// claimed within the day, and the inner owner was then refused as nested.
#[tokio::test]
async fn redteam107_a_young_warehouse_inside_is_evidence_of_use() {
    let env = Env::open_unclaimed(Backend::Local, 2648).await;
    env.put("indexes/wh/_catalog-owner.json", b"{}").await;
    let err = gc::claim(&env.catalog, env.now())
        .await
        .expect_err("a warehouse inside is somebody's");
    assert_eq!(err.kind(), ErrorKind::Configuration, "{err}");
    assert!(
        err.message().contains("indexes/wh/_catalog-owner.json"),
        "{err}"
    );
}

/// Round 106, F2: only the warehouse's owner may give up a run or break the run lease; a
/// stranger's catalog (any pointer store pointed at the warehouse) gave up the owner's
/// run, and could have again before every one of its runs finished.
#[tokio::test]
async fn redteam106_a_stranger_may_not_abandon_the_owners_run_or_break_its_lease() {
    use parqdb_catalog::gc::GcStep;
    let env = Env::open(Backend::Local, 2643).await;
    let config = test_config();
    env.register("live", &Layout::under("live/1")).await;
    let planned = env
        .gc(config.clone())
        .step(GcStep::Plan, env.now(), None)
        .await
        .expect("the owner plans a run");
    let run = planned.report.run_id;
    let dir = tempfile::tempdir().expect("dir");
    let stranger = Catalog::builder(Arc::new(LocalStore::new(dir.path())), env.warehouse.clone())
        .clock(env.clock.clone())
        .ids(Arc::new(SeededIds::new(2644)))
        .build();
    let collector = GarbageCollector::new(stranger, config.clone()).expect("collector");
    let refusals = [
        collector
            .abandon()
            .await
            .expect_err("a stranger may not abandon"),
        collector
            .break_lease()
            .await
            .expect_err("a stranger may not break the lease"),
    ];
    for err in refusals {
        assert_eq!(err.kind(), ErrorKind::WarehouseNotOwned, "{err}");
    }
    let scanned = env
        .gc(config)
        .step(GcStep::Scan { run, partition: 0 }, env.now(), None)
        .await
        .expect("the owner's run goes on");
    assert_eq!(scanned.report.run_id, run);
}

mod dynamodb {
    use super::*;

    /// A new DynamoDB Local table, its client, and a local warehouse its catalog owns.
    async fn owner_env(seed: u64) -> (aws_sdk_dynamodb::Client, String, Env) {
        use parqdb_catalog::store::dynamodb::DynamoStore;
        let client = crate::support::services::dynamodb_client();
        let table = format!("parqdb-gc-{}", uuid::Uuid::new_v4().simple());
        let store = DynamoStore::new(client.clone(), table.clone());
        store.create_table().await.expect("table");
        let env = Env::open_with_pointers(Backend::Local, seed, Arc::new(store)).await;
        (client, table, env)
    }

    /// Round 102, F1: a table's name is unique only within its account and region. A
    /// backup restored under the same name in a recovery region (or a Global Tables
    /// replica) carries every item, the catalog id included; bound to the name alone, it
    /// passed for the owner: its writers published into the warehouse and the owner's
    /// collector deleted what they published, and its collector deleted the owner's live
    /// data. Bound to the table's region, it is a copy: its writes and its collector are
    /// refused.
    #[tokio::test]
    async fn redteam102_a_same_named_table_in_another_region_is_a_copy() {
        use aws_sdk_dynamodb::config::Region;
        use parqdb_catalog::store::dynamodb::DynamoStore;
        let (client, table, env) = owner_env(2625).await;
        let config = test_config();
        let live = Layout::under("ddb/1");
        let (id, _, v1) = env.register("ddb", &live).await;
        runs_for(&env, &config, 30 * MINUTE).await;
        // The table restored in another region under its own name: every item.
        let west = aws_sdk_dynamodb::Client::from_conf(
            client
                .config()
                .to_builder()
                .region(Region::new("us-west-2"))
                .build(),
        );
        let copy = DynamoStore::new(west.clone(), table.clone());
        copy.create_table().await.expect("the restored table");
        restore_items(&client, &west, &table).await;
        let restored = Catalog::builder(Arc::new(copy), env.warehouse.clone())
            .clock(env.clock.clone())
            .ids(Arc::new(SeededIds::new(2626)))
            .build();
        env.refused_copy(restored, &config, &id, &v1).await;
        runs_for(&env, &config, 3 * HOUR).await;
        assert!(
            env.all_exist(&objects(&env, &live, &v1)).await,
            "the owner's index is whole"
        );
    }

    /// A marker written before DynamoDB stores were bound to their region names the table
    /// alone: the release that binds them must go on writing to and collecting in its own
    /// warehouses (with a warning until `init --adopt` rebinds the marker).
    #[tokio::test]
    async fn a_marker_naming_the_table_alone_is_still_the_owners() {
        let (_, table, env) = owner_env(2627).await;
        let config = test_config();
        let live = Layout::under("ddb/1");
        let (_, _, v1) = env.register("ddb", &live).await;
        let marker = env
            .local_dir
            .clone()
            .expect("local")
            .join("_catalog-owner.json");
        let mut written: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&marker).expect("marker")).expect("json");
        let bound = written["catalog"].as_str().expect("catalog").to_owned();
        let attributes = bound
            .strip_prefix(&format!("dynamodb://{table}?"))
            .expect("a new marker binds the table by its name and attributes");
        let keys: Vec<&str> = attributes
            .split('&')
            .map(|pair| pair.split_once('=').expect("key=value").0)
            .collect();
        assert_eq!(
            keys,
            ["region", "account", "created"],
            "a new marker binds the table's region, account and creation time: {bound}"
        );
        assert!(bound.contains("region=us-east-1&"), "{bound}");
        assert_eq!(
            written["marker-version"], 2,
            "a marker binding a table as one instance is one earlier releases cannot read"
        );
        // Earlier releases wrote version 1.
        written["marker-version"] = 1.into();
        // Markers of two earlier releases: the table alone, then the table and its region.
        // An earlier release never wrote the mark of an exact binding.
        let catalog_id = written["catalog-id"]
            .as_str()
            .expect("catalog id")
            .to_owned();
        let binding = env
            .local_dir
            .clone()
            .expect("local")
            .join(format!("_gc/claims/{catalog_id}.bound"));
        std::fs::remove_file(&binding).expect("this release marks its exact binding");
        let claim = binding.with_extension("json");
        let mut orphans = 0;
        for (older, missing) in [
            (
                format!("dynamodb://{table}"),
                "without its region, account and creation time",
            ),
            (
                format!("dynamodb://{table}?region=us-east-1"),
                "without its account and creation time",
            ),
        ] {
            written["catalog"] = older.into();
            std::fs::write(&marker, serde_json::to_vec(&written).expect("json")).expect("marker");
            // ... and its claim record, a copy of the marker it wrote.
            std::fs::write(&claim, serde_json::to_vec(&written).expect("json")).expect("claim");
            env.collects_with_warning(env.catalog.clone(), &config, missing)
                .await;
            orphans += 1;
            let orphan = format!("indexes/orphan/{orphans}/part-0");
            env.put(&orphan, b"x").await;
            let later = Layout::under(&format!("ddb/later-{orphans}"));
            env.register(&format!("later{orphans}"), &later).await;
            runs_for(&env, &config, 20 * HOUR).await;
            assert!(!env.exists(&orphan).await, "the owner still collects");
            assert!(
                env.all_exist(&objects(&env, &live, &v1)).await,
                "the owner's index is whole"
            );
        }
    }

    /// Every item of `table` as `from` sees it, put into the same-named table `to` sees (a
    /// backup restored in another region or account).
    async fn restore_items(
        from: &aws_sdk_dynamodb::Client,
        to: &aws_sdk_dynamodb::Client,
        table: &str,
    ) {
        transfer(from, table, to, table).await;
    }

    /// Every item of the table `from` put into the table `to` (a backup, and its restore).
    async fn copy_items(client: &aws_sdk_dynamodb::Client, from: &str, to: &str) {
        transfer(client, from, client, to).await;
    }

    async fn transfer(
        source: &aws_sdk_dynamodb::Client,
        from: &str,
        target: &aws_sdk_dynamodb::Client,
        to: &str,
    ) {
        let items = source
            .scan()
            .table_name(from)
            .send()
            .await
            .expect("scan")
            .items
            .unwrap_or_default();
        assert!(!items.is_empty(), "the table holds the catalog");
        for item in items {
            target
                .put_item()
                .table_name(to)
                .set_item(Some(item))
                .send()
                .await
                .expect("item copied");
        }
    }

    /// Round 103, F1: a backup restored under the table's name in **another account**,
    /// same region (AWS Backup's cross-account copy), carries the catalog id; bound to the
    /// name and region, it passed for the owner and its collector deleted the owner's live
    /// index. Bound to the table's account and creation time, it is a copy: its writes
    /// and its collector are refused, and the owner's index stays whole. (DynamoDB Local
    /// keeps one database per access key: a second key stands in for a second account; its
    /// ARNs name one account for all, so the table's creation time tells them apart, as it
    /// tells apart any restored table on AWS.)
    #[tokio::test]
    async fn redteam103_a_same_named_table_in_another_account_is_a_copy() {
        let (client, table, env) = owner_env(2629).await;
        let config = test_config();
        let live = Layout::under("ddb/1");
        let (id, _, v1) = env.register("ddb", &live).await;
        runs_for(&env, &config, 30 * MINUTE).await;
        let restored = cross_account_copy(&client, &table, &env, 2630).await;
        let err = env.refused_copy(restored, &config, &id, &v1).await;
        assert!(err.message().contains("account="), "{err}");
        let later = Layout::under("ddb/2");
        let (_, _, v2) = env.register("later", &later).await;
        runs_for(&env, &config, 3 * HOUR).await;
        assert!(
            env.all_exist(&objects(&env, &live, &v1)).await,
            "the owner's index is whole"
        );
        assert!(
            env.all_exist(&objects(&env, &later, &v2)).await,
            "the owner's later index is whole"
        );
    }

    /// The owner's marker (its path and what it holds) and its binding and claim records,
    /// in a local warehouse.
    struct OwnerFiles {
        marker: std::path::PathBuf,
        written: serde_json::Value,
        binding: std::path::PathBuf,
        claim: std::path::PathBuf,
    }

    impl OwnerFiles {
        fn of(env: &Env) -> OwnerFiles {
            let dir = env.local_dir.clone().expect("local");
            let marker = dir.join("_catalog-owner.json");
            let written: serde_json::Value =
                serde_json::from_slice(&std::fs::read(&marker).expect("marker")).expect("json");
            let id = written["catalog-id"].as_str().expect("id").to_owned();
            OwnerFiles {
                binding: dir.join(format!("_gc/claims/{id}.bound")),
                claim: dir.join(format!("_gc/claims/{id}.json")),
                marker,
                written,
            }
        }
    }

    /// A copy in another account (every item of the owner's table, under its name) and
    /// the copy's catalog, refused as a copy so far.
    async fn cross_account_copy(
        client: &aws_sdk_dynamodb::Client,
        table: &str,
        env: &Env,
        seed: u64,
    ) -> Catalog {
        use aws_sdk_dynamodb::config::Credentials;
        use parqdb_catalog::store::dynamodb::DynamoStore;
        let other_account = aws_sdk_dynamodb::Client::from_conf(
            client
                .config()
                .to_builder()
                .credentials_provider(Credentials::new(
                    "AnotherAccount",
                    "dummy",
                    None,
                    None,
                    "tests",
                ))
                .build(),
        );
        let copy = DynamoStore::new(other_account.clone(), table.to_owned());
        copy.create_table().await.expect("the restored table");
        restore_items(client, &other_account, table).await;
        Catalog::builder(Arc::new(copy), env.warehouse.clone())
            .clock(env.clock.clone())
            .ids(Arc::new(SeededIds::new(seed)))
            .build()
    }

    /// Round 104, F1: once the owner has bound the warehouse exactly, a marker of the
    /// same catalog that binds it less (an earlier release's `init --adopt`, run from a
    /// copy in another account) is not honoured as an earlier release's marker would be:
    /// honoured, it let the copy pass too, and the copy's collector deleted the owner's
    /// live index. Both are refused until `init --adopt` runs with this release from the
    /// owner's table; then the owner goes on and the copy is refused again.
    #[tokio::test]
    async fn redteam104_a_marker_loosened_after_an_exact_binding_is_refused() {
        let (client, table, env) = owner_env(2633).await;
        let config = test_config();
        let live = Layout::under("ddb/1");
        let (_, _, v1) = env.register("ddb", &live).await;
        let copy = cross_account_copy(&client, &table, &env, 2634).await;
        // An earlier release's `init --adopt` in the copy's account: the marker now names
        // the table and its region alone.
        let marker = env
            .local_dir
            .clone()
            .expect("local")
            .join("_catalog-owner.json");
        let mut written: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&marker).expect("marker")).expect("json");
        written["catalog"] = format!("dynamodb://{table}?region=us-east-1").into();
        written["created-ms"] = env.now().into();
        written["marker-version"] = 1.into();
        std::fs::write(&marker, serde_json::to_vec(&written).expect("json")).expect("marker");
        // A new process of the owner (a catalog trusts its last check for a minute).
        let owner = Catalog::builder(env.pointer_store.clone(), env.warehouse.clone())
            .clock(env.clock.clone())
            .ids(Arc::new(SeededIds::new(2637)))
            .build();
        for catalog in [&owner, &copy] {
            let ns = parqdb_catalog::Namespace::new(["after"]).expect("ns");
            let err = catalog
                .create_namespace(&ns, std::collections::BTreeMap::new())
                .await
                .expect_err("a loosened marker binds nobody");
            assert_eq!(err.kind(), ErrorKind::WarehouseNotOwned, "{err}");
            assert!(err.message().contains("init --adopt"), "{err}");
            let err = GarbageCollector::new(catalog.clone(), config.clone())
                .expect("collector")
                .collect(env.now())
                .await
                .expect_err("nor may anybody collect under it");
            assert_eq!(err.kind(), ErrorKind::WarehouseNotOwned, "{err}");
        }
        gc::adopt(&owner, env.now())
            .await
            .expect("the owner adopts with this release");
        let later = Layout::under("ddb/2");
        let (_, _, v2) = env.register("later", &later).await;
        let err = GarbageCollector::new(copy, config.clone())
            .expect("collector")
            .collect(env.now())
            .await
            .expect_err("the copy is refused again");
        assert_eq!(err.kind(), ErrorKind::WarehouseNotOwned, "{err}");
        runs_for(&env, &config, 3 * HOUR).await;
        assert!(env.all_exist(&objects(&env, &live, &v1)).await);
        assert!(env.all_exist(&objects(&env, &later, &v2)).await);
    }

    /// Round 105, F2: a marker binding a table as one instance is version 2, which earlier
    /// releases refuse to read (so none of them rewrites it looser with `init --adopt`, or
    /// collects under it); and a version-2 marker that binds less than it says was changed
    /// by hand: it binds nobody, binding record or not.
    #[tokio::test]
    async fn redteam105_an_exact_marker_loosened_binds_nobody_even_without_its_binding_record() {
        let (client, table, env) = owner_env(2639).await;
        let config = test_config();
        env.register("ddb", &Layout::under("ddb/1")).await;
        let OwnerFiles {
            marker,
            mut written,
            binding,
            ..
        } = OwnerFiles::of(&env);
        assert_eq!(written["marker-version"], 2);
        std::fs::remove_file(&binding).expect("binding record");
        written["catalog"] = format!("dynamodb://{table}?region=us-east-1").into();
        std::fs::write(&marker, serde_json::to_vec(&written).expect("json")).expect("marker");
        let copy = cross_account_copy(&client, &table, &env, 2640).await;
        let err = GarbageCollector::new(copy, config)
            .expect("collector")
            .collect(env.now())
            .await
            .expect_err("a version-2 marker binds exactly or not at all");
        assert_eq!(err.kind(), ErrorKind::WarehouseNotOwned, "{err}");
    }

    /// Round 107, F1: the binding record is repaired by the owner's next write when it is
    /// lost, and a claim record holding the exact marker shows the exact binding too: with
    /// the marker and the binding record both removed (a rollback's step, a cleanup tool)
    /// and a looser marker written in their place (an earlier release's adoption from a
    /// copy's account), the copy's collector deleted the owner's live data.
    #[tokio::test]
    async fn redteam107_a_lost_binding_record_is_repaired_and_the_claim_record_shows_it_too() {
        let (client, table, env) = owner_env(2649).await;
        let config = test_config();
        let live = Layout::under("ddb/1");
        let (_, _, v1) = env.register("ddb", &live).await;
        let OwnerFiles {
            marker,
            mut written,
            binding,
            ..
        } = OwnerFiles::of(&env);
        let owner = |seed| {
            Catalog::builder(env.pointer_store.clone(), env.warehouse.clone())
                .clock(env.clock.clone())
                .ids(Arc::new(SeededIds::new(seed)))
                .build()
        };
        std::fs::remove_file(&binding).expect("binding record");
        let ns = parqdb_catalog::Namespace::new(["repaired"]).expect("ns");
        owner(2650)
            .create_namespace(&ns, std::collections::BTreeMap::new())
            .await
            .expect("the owner writes");
        assert!(
            binding.exists(),
            "the owner's write repairs the binding record"
        );
        std::fs::remove_file(&binding).expect("binding record");
        written["catalog"] = format!("dynamodb://{table}?region=us-east-1").into();
        written["marker-version"] = 1.into();
        std::fs::write(&marker, serde_json::to_vec(&written).expect("json")).expect("marker");
        let copy = cross_account_copy(&client, &table, &env, 2651).await;
        let err = GarbageCollector::new(copy, config.clone())
            .expect("collector")
            .collect(env.now())
            .await
            .expect_err("the claim record shows the exact binding");
        assert_eq!(err.kind(), ErrorKind::WarehouseNotOwned, "{err}");
        assert!(err.message().contains(".json"), "{err}");
        let ns = parqdb_catalog::Namespace::new(["after"]).expect("ns");
        let err = owner(2652)
            .create_namespace(&ns, std::collections::BTreeMap::new())
            .await
            .expect_err("nor does the looser marker bind the owner");
        assert_eq!(err.kind(), ErrorKind::WarehouseNotOwned, "{err}");
        assert!(env.all_exist(&objects(&env, &live, &v1)).await);
    }

    /// Round 108: an exact marker of version 1 (as no release wrote, but as a hand edit
    /// leaves) gets its binding record repaired by the owner's next write too; and a claim
    /// record binding the table more exactly than the marker shows the exact binding for
    /// every store, the copy's included (it named the owner's location, so it stopped only
    /// the owner).
    #[tokio::test]
    async fn redteam108_a_claim_record_binding_more_than_the_marker_refuses_every_store() {
        let (client, table, env) = owner_env(2653).await;
        let config = test_config();
        let live = Layout::under("ddb/1");
        let (_, _, v1) = env.register("ddb", &live).await;
        let OwnerFiles {
            marker,
            mut written,
            binding,
            claim,
        } = OwnerFiles::of(&env);
        written["marker-version"] = 1.into();
        for file in [&marker, &claim] {
            std::fs::write(file, serde_json::to_vec(&written).expect("json")).expect("written");
        }
        std::fs::remove_file(&binding).expect("binding record");
        let owner = Catalog::builder(env.pointer_store.clone(), env.warehouse.clone())
            .clock(env.clock.clone())
            .ids(Arc::new(SeededIds::new(2654)))
            .build();
        let ns = parqdb_catalog::Namespace::new(["repaired"]).expect("ns");
        owner
            .create_namespace(&ns, std::collections::BTreeMap::new())
            .await
            .expect("the owner writes");
        assert!(
            binding.exists(),
            "an exact marker's binding record is repaired"
        );
        std::fs::remove_file(&binding).expect("binding record");
        written["catalog"] = format!("dynamodb://{table}?region=us-east-1").into();
        std::fs::write(&marker, serde_json::to_vec(&written).expect("json")).expect("marker");
        let copy = cross_account_copy(&client, &table, &env, 2655).await;
        let err = GarbageCollector::new(copy, config)
            .expect("collector")
            .collect(env.now())
            .await
            .expect_err("the claim record binds the table more exactly than the marker");
        assert_eq!(err.kind(), ErrorKind::WarehouseNotOwned, "{err}");
        assert!(env.all_exist(&objects(&env, &live, &v1)).await);
    }

    /// Round 104, F2: every step checks ownership, not only the plan step. A copy refused
    /// at the plan could go on with the owner's run by its id (its scan, verification and
    /// deletes), its verification walking the copy's records.
    #[tokio::test]
    async fn redteam104_a_copy_may_not_go_on_with_the_owners_run() {
        use parqdb_catalog::gc::GcStep;
        let (client, table, env) = owner_env(2635).await;
        let config = test_config();
        let live = Layout::under("ddb/1");
        env.register("ddb", &live).await;
        let planned = GarbageCollector::new(env.catalog.clone(), config.clone())
            .expect("collector")
            .step(GcStep::Plan, env.now(), None)
            .await
            .expect("the owner plans a run");
        let run = planned.report.run_id;
        let copy = cross_account_copy(&client, &table, &env, 2636).await;
        let collector = GarbageCollector::new(copy, config.clone()).expect("collector");
        for step in [
            GcStep::Scan { run, partition: 0 },
            GcStep::Verify { run },
            GcStep::Delete { run, partition: 0 },
            GcStep::Finish { run },
        ] {
            let err = collector
                .step(step, env.now(), None)
                .await
                .expect_err("a copy may not go on with the owner's run");
            assert_eq!(err.kind(), ErrorKind::WarehouseNotOwned, "{step:?}: {err}");
        }
    }

    /// A table deleted and restored from a backup under its own name is a new table: the
    /// catalog refuses to write to or collect in the warehouse until the operator adopts
    /// it (which restarts every retention clock: a restore never shortens retention), and
    /// then goes on.
    #[tokio::test]
    async fn a_table_restored_under_its_own_name_is_adopted_before_it_writes() {
        use parqdb_catalog::store::dynamodb::DynamoStore;
        let (client, table, env) = owner_env(2631).await;
        let config = test_config();
        let live = Layout::under("ddb/1");
        let (id, _, v1) = env.register("ddb", &live).await;
        runs_for(&env, &config, 30 * MINUTE).await;
        // The backup: every item, kept aside in another table.
        let backup = format!("{table}-backup");
        DynamoStore::new(client.clone(), backup.clone())
            .create_table()
            .await
            .expect("backup table");
        copy_items(&client, &table, &backup).await;
        let original = env.pointer_store.location().await.expect("location");
        client
            .delete_table()
            .table_name(&table)
            .send()
            .await
            .expect("table deleted");
        let restored_store = DynamoStore::new(client.clone(), table.clone());
        restored_store.create_table().await.expect("restored table");
        assert_ne!(
            restored_store.location().await.expect("location"),
            original,
            "the restored table is another instance of the name (its creation time)"
        );
        copy_items(&client, &backup, &table).await;
        let restored = Catalog::builder(Arc::new(restored_store), env.warehouse.clone())
            .clock(env.clock.clone())
            .ids(Arc::new(SeededIds::new(2632)))
            .build();
        assert_eq!(
            restored.load(&id).await.expect("load").metadata_location,
            v1
        );
        let ns = parqdb_catalog::Namespace::new(["after"]).expect("ns");
        let err = restored
            .create_namespace(&ns, std::collections::BTreeMap::new())
            .await
            .expect_err("a restored table is not the owner until adopted");
        assert_eq!(err.kind(), ErrorKind::WarehouseNotOwned, "{err}");
        let marker = parqdb_catalog::gc::adopt(&restored, env.now())
            .await
            .expect("adopted");
        assert!(marker.catalog.contains("created="), "{}", marker.catalog);
        restored
            .create_namespace(&ns, std::collections::BTreeMap::new())
            .await
            .expect("the adopted table writes");
        let collector = GarbageCollector::new(restored, config.clone()).expect("collector");
        let report = collector
            .collect(env.now())
            .await
            .expect("the adopted table collects");
        assert!(
            report.warnings.iter().all(|w| !w.contains("without its")),
            "{:?}",
            report.warnings
        );
        assert!(
            env.all_exist(&objects(&env, &live, &v1)).await,
            "the index is whole"
        );
    }

    /// On DynamoDB the walk reaches index records through namespace records: a partial
    /// restore (or a hand edit) that leaves out a namespace item hides its index records from
    /// the listing, though `load` still reads them. A record the previous finished run saw is
    /// read directly, and stays a root while it exists.
    #[tokio::test]
    async fn attack_a_dynamodb_record_whose_namespace_item_is_gone_stays_a_root() {
        use aws_sdk_dynamodb::types::AttributeValue;
        let client = crate::support::services::dynamodb_client();
        let table = format!("parqdb-gc-{}", uuid::Uuid::new_v4().simple());
        let store =
            parqdb_catalog::store::dynamodb::DynamoStore::new(client.clone(), table.clone());
        store.create_table().await.expect("table");
        let env = Env::open_with_pointers(Backend::Local, 2624, Arc::new(store)).await;
        let config = test_config();
        let l1 = Layout::under("ddb/1");
        let (id, _, v1) = env.register("ddb", &l1).await;
        runs_for(&env, &config, 30 * MINUTE).await;
        // The namespace item goes (a partial restore of the `i/...` items only).
        let namespace_key = id.namespace().store_key();
        let (pk, sk) = match namespace_key.as_str().split_once('=') {
            Some((head, "")) => (format!("{head}="), "!".to_owned()),
            Some((head, leaf)) => (format!("{head}="), leaf.to_owned()),
            None => (namespace_key.as_str().to_owned(), "!".to_owned()),
        };
        let deleted = client
            .delete_item()
            .table_name(&table)
            .key(
                parqdb_catalog::store::dynamodb::PARTITION_KEY,
                AttributeValue::S(pk),
            )
            .key(
                parqdb_catalog::store::dynamodb::SORT_KEY,
                AttributeValue::S(sk),
            )
            .return_values(aws_sdk_dynamodb::types::ReturnValue::AllOld)
            .send()
            .await
            .expect("namespace item deleted");
        assert!(
            deleted.attributes.is_some(),
            "no namespace item at that key"
        );
        assert_eq!(
            env.catalog
                .load(&id)
                .await
                .expect("still loads")
                .metadata_location,
            v1
        );
        runs_for(&env, &config, 3 * HOUR).await;
        assert!(
            env.all_exist(&objects(&env, &l1, &v1)).await,
            "a loadable index's files were deleted: {:?}",
            env.missing(&objects(&env, &l1, &v1)).await
        );
    }
}
