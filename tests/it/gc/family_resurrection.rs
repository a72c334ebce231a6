//! A metadata file the collector already tracks as unreachable, picked up again by
//! *another* index through a family reference (`ivf_centroids_metadata_location`) and
//! dropped from it again between two runs. No pointer of the file's own index changes, so
//! no lineage evidence moves its retention clock; what keeps it is rule (P): an existing
//! metadata file names it, and that file is itself unreachable only since the reference was
//! committed away. The file must stay until a full retention after the last pointer that
//! reached it moved on.

use crate::support::gc::{Backend, Env, Layout, MINUTE, test_config};
use parqdb_catalog::IndexCatalog;

const PASS_EVERY: i64 = 10 * MINUTE;

async fn picked_up_and_dropped_again(seed: u64, between_runs: bool) {
    let env = Env::open(Backend::Memory, seed).await;
    let config = test_config();
    let retention = config.retention.as_millis() as i64;
    // Index `b`: its first metadata file `o` becomes unreachable and gets tracked.
    let (b_id, b_meta, b_first) = env.register("b", &Layout::under("b/1")).await;
    let o = env.relative(&b_first);
    let (_, b_next) = env.successor(&b_meta, &Layout::under("b/2"), None).await;
    env.catalog
        .commit(&b_id, None, &b_first, &b_next)
        .await
        .expect("b moves on");
    let (a_id, a_meta, a_base) = env.register("a", &Layout::under("a/1")).await;
    // Runs until `o`'s clock has nearly run out (tracked, not condemned).
    let mut tracked = false;
    while env.now() < crate::support::gc::START_MS + retention - 3 * PASS_EVERY {
        env.advance(PASS_EVERY);
        let report = env.collect(&config).await;
        tracked |= report.actions.iter().any(|a| a.path == o);
    }
    assert!(tracked, "the collector never tracked `{o}`");
    // Index `a` starts naming `o` as its centroids metadata …
    let mut with_ref = Layout::under("a/2");
    with_ref.centroids_metadata = Some(o.clone());
    let (a2_meta, a2) = env.successor(&a_meta, &with_ref, None).await;
    env.catalog
        .commit(&a_id, None, &a_base, &a2)
        .await
        .expect("a picks up o");
    if !between_runs {
        env.advance(PASS_EVERY);
        env.collect(&config).await;
    }
    env.advance(5 * MINUTE);
    // … and drops it again (the snapshot naming it expires).
    let (a3_meta, a3) = env.successor(&a2_meta, &Layout::under("a/3"), None).await;
    env.catalog
        .commit(&a_id, None, &a2, &a3)
        .await
        .expect("a moves on");
    let (_, a4) = env
        .successor(&a3_meta, &Layout::under("a/4"), Some(2))
        .await;
    env.catalog
        .commit(&a_id, None, &a3, &a4)
        .await
        .expect("a expires the snapshot naming o");
    let unreachable_since = env.now();
    let mut deleted_at = None;
    while env.now() < unreachable_since + 4 * retention {
        env.advance(PASS_EVERY);
        env.collect(&config).await;
        if !env.exists(&o).await {
            deleted_at = Some(env.now());
            break;
        }
    }
    let deleted_at = deleted_at.expect("`o` is garbage in the end and is collected");
    assert!(
        deleted_at >= unreachable_since + retention,
        "`{o}` was reachable through `a` until {unreachable_since} and deleted at {deleted_at}, {} min before its retention ended",
        (unreachable_since + retention - deleted_at) / MINUTE
    );
    assert!(
        !env.exists(&env.relative(&a2)).await && !env.exists(&env.relative(&a3)).await,
        "the files that named `o` go first"
    );
}

#[tokio::test]
async fn a_tracked_file_picked_up_and_dropped_between_two_runs_keeps_its_retention() {
    picked_up_and_dropped_again(9101, true).await;
}

#[tokio::test]
async fn a_tracked_file_picked_up_seen_reachable_and_dropped_keeps_its_retention() {
    picked_up_and_dropped_again(9102, false).await;
}
