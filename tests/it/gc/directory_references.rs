//! Rule (P) in layouts where a reference names a directory that holds metadata files, and
//! (G) when a file's last-modified time is older than the file.
//!
//! * A metadata file that `R` covers only because a live index's table directory holds it
//!   is not one the walk read: what it names (an expired snapshot's tables) must stay while
//!   it exists, or registering it again (time travel) publishes a pointer to deleted tables.
//! * A metadata file whose tables live in its own directory names a directory that covers
//!   the file itself: that reference keeps the tables, and the file still goes first.
//! * A file copied in with its old modification time (`cp -p`, `rsync -a`) is kept at least
//!   the grace period after a run first saw it, even when the condemnation delay is
//!   shorter than the grace.

use crate::support::gc::{Backend, Env, HOUR, Layout, MINUTE, contents, test_config};
use bytes::Bytes;
use parqdb_catalog::IndexCatalog;
use parqdb_catalog::IndexMetadata;
use parqdb_catalog::family::FamilyRegistry;

const PASS_EVERY: i64 = 10 * MINUTE;

/// A new index's metadata for `layout`, written at the warehouse-relative `name`.
async fn metadata_at(env: &Env, layout: &Layout, name: &str) -> (IndexMetadata, String) {
    env.write_tables(layout).await;
    let metadata = env.metadata_for(layout);
    let location = env
        .warehouse
        .write_new(name, Bytes::from(metadata.to_json_vec()))
        .await
        .expect("metadata written");
    (metadata, location)
}

/// Index `x` keeps its centroids table in `metadata/shared/`, where its first metadata
/// file `m1` lives too; it commits twice, keeping those centroids, and expires the first
/// snapshot whose postings are in `indexes/v1/`. `m1` stays (the live centroids
/// directory covers it), so the postings it names stay with it (the walk reads it), and
/// publishing `m1` again publishes a complete index.
async fn covered_metadata_keeps_what_it_names(backend: Backend, seed: u64) {
    let env = Env::open(backend, seed).await;
    let config = test_config();
    let first = Layout {
        centroids: "metadata/shared/".to_owned(),
        ..Layout::under("v1")
    };
    let (m1_meta, m1) = metadata_at(&env, &first, "metadata/shared/00001.metadata.json").await;
    let x = env.publish("x", &first, &m1).await;
    let second = Layout {
        centroids: "metadata/shared/".to_owned(),
        ..Layout::under("v2")
    };
    let (m2_meta, m2) = env.successor(&m1_meta, &second, None).await;
    env.catalog
        .commit(&x, None, &m1, &m2)
        .await
        .expect("x moves on");
    let third = Layout {
        centroids: "metadata/shared/".to_owned(),
        ..Layout::under("v3")
    };
    let (_, m3) = env.successor(&m2_meta, &third, Some(2)).await;
    env.catalog
        .commit(&x, None, &m2, &m3)
        .await
        .expect("x moves on, expiring the snapshot with indexes/v1");
    let postings: Vec<String> = first
        .files()
        .into_iter()
        .filter(|name| name.starts_with("indexes/v1/"))
        .collect();
    let committed = env.now();
    while env.now() < committed + 3 * config.retention.as_millis() as i64 {
        env.advance(PASS_EVERY);
        env.collect(&config).await;
        let m1_exists = env.exists(&env.relative(&m1)).await;
        let gone = env.missing(&postings).await;
        assert!(
            !m1_exists || gone.is_empty(),
            "{} min after the commit: `{}` exists but the postings it names are gone: {gone:?}",
            (env.now() - committed) / MINUTE,
            env.relative(&m1)
        );
    }
    assert!(
        env.exists(&env.relative(&m1)).await,
        "m1 lies in x's live centroids directory"
    );
    // The walk reads the files of a live table placed under `metadata/` as family
    // references' files (round 58): what `m1` names is reachable, never condemned, so
    // registering `m1` again publishes a complete index.
    let again = env.id("x-then").await;
    env.catalog
        .register(&again, Some(&first.source), &m1)
        .await
        .expect("m1 is published again");
    assert!(env.all_exist(&first.files()).await, "m1 is complete");
}

#[tokio::test]
async fn a_metadata_file_covered_by_a_live_table_directory_keeps_what_it_names_memory() {
    covered_metadata_keeps_what_it_names(Backend::Memory, 9301).await;
}

#[tokio::test]
async fn a_metadata_file_covered_by_a_live_table_directory_keeps_what_it_names_local() {
    covered_metadata_keeps_what_it_names(Backend::Local, 9302).await;
}

/// A writer puts its tables in `metadata/i/` (the centroids directly in it) and, half an
/// hour later, its metadata file `m` in the same directory, then dies before registering. The metadata file names the
/// directory that holds it; its tables must outlive it all the same (every run: `m`
/// exists only with all its tables), and in the end all of it is collected.
async fn self_covering_reference_keeps_tables_until_the_file_goes(backend: Backend, seed: u64) {
    let env = Env::open(backend, seed).await;
    let config = test_config();
    let layout = Layout {
        centroids: "metadata/i/".to_owned(),
        postings: "metadata/i/ivf_postings/".to_owned(),
        ..Layout::under("unused")
    };
    env.write_tables(&layout).await;
    // One of the tables is a JSON manifest that names its own directory too.
    let manifest = "metadata/i/manifest.json";
    env.put(manifest, br#"{"location": "metadata/i/"}"#).await;
    let mut tables = layout.files();
    tables.push(manifest.to_owned());
    env.advance(30 * MINUTE);
    let metadata = env.metadata_for(&layout);
    let m = "metadata/i/00001.metadata.json";
    env.warehouse
        .write_new(m, Bytes::from(metadata.to_json_vec()))
        .await
        .expect("metadata written");
    // A successor naming the same tables, in the same directory: the two files do not
    // keep each other.
    let next = metadata
        .successor(
            contents(&layout),
            env.clock.as_ref(),
            env.catalog.ids().as_ref(),
            &FamilyRegistry::builtin(),
        )
        .expect("valid successor");
    let m2 = "metadata/i/00002.metadata.json";
    env.warehouse
        .write_new(m2, Bytes::from(next.to_json_vec()))
        .await
        .expect("metadata written");
    let start = env.now();
    let mut all_gone_at = None;
    while env.now() < start + 8 * HOUR {
        env.advance(PASS_EVERY);
        env.collect(&config).await;
        let gone = env.missing(&tables).await;
        for file in [m, m2] {
            if env.exists(file).await {
                assert!(
                    gone.is_empty(),
                    "{} min after `{file}` was written it exists, but tables it names are gone: {gone:?}",
                    (env.now() - start) / MINUTE
                );
            }
        }
        if gone.len() == tables.len() && env.none_exist(&[m.into(), m2.into()]).await {
            all_gone_at = Some(env.now());
            break;
        }
    }
    assert!(
        all_gone_at.is_some(),
        "the abandoned files are garbage and are all collected in the end"
    );
}

#[tokio::test]
async fn a_reference_covering_the_file_naming_it_keeps_the_tables_until_the_file_goes_memory() {
    self_covering_reference_keeps_tables_until_the_file_goes(Backend::Memory, 9303).await;
}

#[tokio::test]
async fn a_reference_covering_the_file_naming_it_keeps_the_tables_until_the_file_goes_local() {
    self_covering_reference_keeps_tables_until_the_file_goes(Backend::Local, 9304).await;
}

/// A quiet catalog (nothing changed for hours), a collector whose condemnation delay (2
/// min) is far shorter than its grace (30 min), and a writer that copies prebuilt tables
/// in with their modification times kept (a day old), then registers them 25 minutes
/// later. The tables must still be there.
async fn copied_tables_keep_their_grace(backend: Backend, seed: u64) {
    let env = Env::open(backend, seed).await;
    let mut config = test_config();
    config.grace = std::time::Duration::from_secs(30 * 60);
    config.condemn_delay = Some(std::time::Duration::from_secs(2 * 60));
    config.force = true;
    env.register("quiet", &Layout::under("quiet/1")).await;
    env.advance(3 * HOUR);
    env.collect(&config).await;
    let copied = Layout::under("copied/1");
    let day_ago = env.now() - 24 * HOUR;
    for name in copied.files() {
        env.put_dated(&name, b"0123456789", day_ago).await;
    }
    let copied_at = env.now();
    while env.now() < copied_at + 25 * MINUTE {
        env.advance(2 * MINUTE);
        env.collect(&config).await;
        let gone = env.missing(&copied.files()).await;
        assert!(
            gone.is_empty(),
            "{} min after the copy (grace 30 min), copied tables are gone: {gone:?}",
            (env.now() - copied_at) / MINUTE
        );
    }
    let metadata = env.metadata_for(&copied);
    let location = env.write_metadata(&metadata).await;
    env.publish("copied", &copied, &location).await;
    for _ in 0..10 {
        env.advance(2 * MINUTE);
        env.collect(&config).await;
    }
    assert!(
        env.all_exist(&copied.files()).await,
        "the published tables are live"
    );
}

#[tokio::test]
async fn tables_copied_in_with_old_times_keep_their_grace_memory() {
    copied_tables_keep_their_grace(Backend::Memory, 9305).await;
}

#[tokio::test]
async fn tables_copied_in_with_old_times_keep_their_grace_local() {
    copied_tables_keep_their_grace(Backend::Local, 9306).await;
}

/// Another engine's keys with a C1 control character (U+0085, U+009B): ordinary store
/// keys, but no metadata can name them. They are reported and left alone, and
/// collection goes on around them.
#[tokio::test]
async fn keys_no_metadata_can_name_are_left_alone_and_collection_goes_on() {
    let env = Env::open(Backend::Memory, 9307).await;
    let config = test_config();
    env.register("live", &Layout::under("live/1")).await;
    env.put("indexes/garbage/1/part-0", b"x").await;
    let odd = [
        "indexes/odd\u{85}name/part-0",
        "metadata/odd\u{9b}.metadata.json",
    ];
    for name in odd {
        env.put_raw(name, b"{}").await;
    }
    let mut warned = false;
    for _ in 0..40 {
        env.advance(PASS_EVERY);
        let report = env.collect(&config).await;
        warned |= report.warnings.iter().any(|w| w.contains("odd"));
    }
    assert!(warned, "the odd keys are reported");
    assert!(
        !env.exists("indexes/garbage/1/part-0").await,
        "collection went on around them"
    );
    for name in odd {
        assert!(env.exists_raw(name).await, "{name:?} is never deleted");
    }
}

/// A metadata file at a name the collector takes for another catalog's structure (it
/// never reads those, so it could not keep what the file names) is not published.
#[tokio::test]
async fn metadata_at_a_nested_catalog_structure_is_never_published() {
    let env = Env::open(Backend::Memory, 9308).await;
    let layout = Layout::under("n/1");
    for (tag, name) in [
        ("gc", "metadata/a/_gc/00001.metadata.json"),
        ("records", "metadata/x/i/ns/=m"),
        ("marker", "metadata/b/_catalog/00001.metadata.json"),
    ] {
        let (_, location) = metadata_at(&env, &layout, name).await;
        let err = env
            .catalog
            .register(&env.id(tag).await, Some(&layout.source), &location)
            .await
            .expect_err("refused");
        assert_eq!(
            err.kind(),
            parqdb_catalog::ErrorKind::InvalidIndexMetadata,
            "{name}: {err}"
        );
        assert!(err.message().contains("another catalog"), "{name}: {err}");
    }
}
