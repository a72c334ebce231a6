//! Condemnations of `indexes/` as markers (issue 29, step B2): a condemning page writes one
//! marker per directory naming what it condemns there, and carries each condemnation on
//! its clocks file; the deleting run counts a carried condemnation only while its marker is
//! there; releasing a deletion's record clears a marker whose names are all deleted.

use object_store::ObjectStoreExt;

use crate::support::gc::{Backend, Env, HOUR, Layout, MINUTE, test_config};
use parqdb_catalog::ErrorKind;
use parqdb_catalog::IndexCatalog;
use parqdb_catalog::gc::{self, GcConfig};

async fn claimed(backend: Backend, seed: u64) -> Env {
    let env = Env::new(backend, seed);
    gc::claim(&env.catalog, env.now()).await.expect("claimed");
    env
}

/// The ledger's files under `indexes/`: condemnation markers, and `c-` files.
async fn table_ledger(env: &Env) -> (Vec<String>, Vec<String>) {
    let files: Vec<String> = env
        .ledger_files()
        .await
        .into_iter()
        .filter(|file| file.starts_with("_gc/ledger/indexes/"))
        .collect();
    let last = |file: &String| file.rsplit('/').next().unwrap_or_default().to_owned();
    let markers = files
        .iter()
        .filter(|file| last(file).starts_with("n-"))
        .cloned()
        .collect();
    let condemnations = files
        .iter()
        .filter(|file| last(file).starts_with("c-"))
        .cloned()
        .collect();
    (markers, condemnations)
}

/// Register `layout` as `name`, drop it an hour later, and collect every ten minutes until
/// a run condemns something: the time of that run.
async fn dropped_until_condemned(env: &Env, config: &GcConfig, name: &str, layout: &Layout) -> i64 {
    env.register(name, layout).await;
    env.advance(HOUR);
    let id = env.id(name).await;
    env.catalog.drop_index(&id).await.expect("dropped");
    for _ in 0..40 {
        env.advance(10 * MINUTE);
        if env.collect(config).await.counts.condemned.objects > 0 {
            return env.now();
        }
    }
    panic!("never condemned");
}

#[tokio::test]
async fn tables_are_condemned_by_one_marker_per_directory_and_released_with_their_deletion() {
    for (n, backend) in [Backend::Memory, Backend::Local].into_iter().enumerate() {
        let env = claimed(backend, 60 + n as u64).await;
        let config = test_config();
        let layout = Layout::under("marked/1");
        dropped_until_condemned(&env, &config, "marked", &layout).await;

        // One marker per directory of condemned tables, and no `c-` file of any table.
        let (markers, condemnations) = table_ledger(&env).await;
        assert_eq!(condemnations, Vec::<String>::new(), "{backend:?}");
        let mut dirs: Vec<&str> = markers
            .iter()
            .map(|marker| marker.rsplit_once('/').expect("a directory").0)
            .collect();
        dirs.sort();
        let expected: Vec<String> = [&layout.centroids, &layout.postings]
            .into_iter()
            .map(|dir| format!("_gc/ledger/{}", dir.trim_end_matches('/')))
            .collect();
        assert_eq!(dirs, expected, "{backend:?}: {markers:?}");
        assert!(env.all_exist(&layout.files()).await, "{backend:?}");

        // Publication finds the tables condemned.
        let fresh = env.write_metadata(&env.metadata_for(&layout)).await;
        let again = env.id("marked-again").await;
        let err = env
            .catalog
            .register(&again, Some(&layout.source), &fresh)
            .await
            .expect_err("condemned tables are not published");
        assert_eq!(err.kind(), ErrorKind::InvalidIndexMetadata, "{err}");
        assert!(err.message().contains("condemned"), "{err}");
        // (The refused metadata file would keep what it names while it exists: rule P.)
        let path = env.warehouse.path(&env.relative(&fresh)).expect("a name");
        env.warehouse
            .object_store()
            .delete(&path)
            .await
            .expect("removed");

        // Deleted after the delay; the deletion's record lists the markers, and releasing
        // it (the grace period later) clears them.
        for _ in 0..12 {
            env.advance(10 * MINUTE);
            env.collect(&config).await;
        }
        assert!(
            env.none_exist(&layout.files()).await,
            "{backend:?}: not collected"
        );
        let (markers, _) = table_ledger(&env).await;
        match backend {
            // Files on a local disk land at the real time, far ahead of this test's clock:
            // the records are not released yet, but they list the markers.
            Backend::Local => assert_eq!(
                env.unrecorded_ledger_files().await,
                Vec::<String>::new(),
                "{backend:?}"
            ),
            _ => assert_eq!(markers, Vec::<String>::new(), "{backend:?}: markers left"),
        }
    }
}

/// A condemnation the previous run carried counts only while its marker is there: without
/// it, publication could not see the condemnation, so the tables are condemned again (a
/// new marker) and deleted no sooner than the delay after that.
#[tokio::test]
async fn a_carried_condemnation_whose_marker_is_gone_is_made_again_before_any_delete() {
    for (n, backend) in [Backend::Memory, Backend::Local].into_iter().enumerate() {
        let env = claimed(backend, 62 + n as u64).await;
        let config = test_config();
        let delay = config.condemn_delay.expect("a delay").as_millis() as i64;
        let layout = Layout::under("unmarked/1");
        dropped_until_condemned(&env, &config, "unmarked", &layout).await;
        let (markers, _) = table_ledger(&env).await;
        assert_eq!(markers.len(), 2, "{backend:?}: {markers:?}");
        for marker in &markers {
            let path = env.warehouse.path(marker).expect("a name");
            env.warehouse
                .object_store()
                .delete(&path)
                .await
                .expect("marker removed");
        }

        let mut marked_again = None;
        let mut deleted = None;
        for _ in 0..18 {
            env.advance(10 * MINUTE);
            env.collect(&config).await;
            let (markers, _) = table_ledger(&env).await;
            if marked_again.is_none() && !markers.is_empty() {
                marked_again = Some(env.now());
            }
            if deleted.is_none() && !env.all_exist(&layout.files()).await {
                deleted = Some(env.now());
            }
        }
        let marked_again = marked_again.expect("condemned again");
        let deleted = deleted.expect("collected");
        assert!(
            deleted >= marked_again + delay,
            "{backend:?}: deleted at {deleted}, condemned again at {marked_again}"
        );
        assert!(env.none_exist(&layout.files()).await, "{backend:?}");
    }
}
