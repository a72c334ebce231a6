//! Red team 16e: attacks on commit 0d44d9b (no clock trusted on the store's time; standing
//! metadata clocks re-recorded under the current run's journal while re-incarnations are
//! about, newest journal winning ties; truncated chains count as re-incarnations).
//! A failing test is a bug; it is kept as it is.

use std::time::Duration;

use crate::support::gc::hooked_store::{LatePut, collect_in_background};
use crate::support::gc::{Backend, Env, HOUR, Layout, MINUTE, test_config};
use parqdb_catalog::IndexCatalog;
use parqdb_catalog::gc::{GcConfig, GcStatus};

// 1. A re-stamp put that stalls and lands behind finished runs.
//
// P0 tracks metadata file `o` (index X); a re-incarnation of key `r` is about, so the
// next run J re-records o's standing clock under its own journal. Process 1 runs J and
// stalls in that put. Its lease expires; `o` is registered (incarnation H, unknown to J's
// journal); another process finishes J; run P sees `o` reachable and clears its entry.
// Then process 1's re-stamp lands (P0's clock, J's journal). H commits away from `o`;
// `o` must stay 2 h.
async fn stalled_restamp(seed: u64, backdate: bool, strict_reincarnation_about: bool) {
    let mut stage = LatePut::stage(seed, backdate).await;
    let (env, md) = (&stage.env, &stage.md);
    env.advance(HOUR);
    stage.processes.completed_run(env, "P0").await;
    let tracked = env.entry_of(md).await;
    assert!(
        tracked.iter().any(|f| f.contains("/o-")),
        "o tracked: {tracked:?}"
    );
    // A re-incarnation within the horizon: drop `r`, register another index there.
    let (r, _, _) = env.register("r", &Layout::under("r/1")).await;
    if strict_reincarnation_about {
        env.catalog.drop_index(&r).await.expect("dropped");
        env.register("r", &Layout::under("r/2")).await;
    }
    env.advance(5 * MINUTE);
    stage.pause_at_the_clock_of_o();
    let process1 = collect_in_background(env, stage.processes.next(env));
    let stalled = tokio::time::timeout(Duration::from_secs(5), stage.store.paused())
        .await
        .is_ok();
    if !stalled {
        // No clock is written again for a standing one (the collector of issue 26 never
        // re-stamps): J runs through; the retention promise below must hold all the same.
        let env = &stage.env;
        stage.store.disarm();
        let r = process1.await.expect("joined").expect("J");
        assert_eq!(r.status, GcStatus::Completed, "{r:?}");
        let _ = strict_reincarnation_about;
        env.advance(MINUTE);
        let again = env.publish("again", &stage.layout, &stage.location).await;
        for _ in 0..2 {
            env.advance(MINUTE);
            stage.processes.completed_run(env, "gc run").await;
        }
        let o = [stage.md.clone()];
        env.lose_and_keep_through_retention(
            &again,
            &stage.metadata,
            &stage.location,
            &o,
            async || {
                stage.processes.completed_run(env, "gc run").await;
            },
        )
        .await;
        return;
    }
    let again = stage.publish_o_then_two_runs("J finished").await;
    eprintln!("entry after P: {:?}", stage.env.entry_of(&stage.md).await);
    stage.land_then_keep_o(&again, process1).await;
}

#[tokio::test]
async fn stalled_restamp_lands_behind_finished_runs_backdated() {
    stalled_restamp(16401, true, true).await;
}

#[tokio::test]
async fn stalled_restamp_lands_behind_finished_runs() {
    stalled_restamp(16402, false, true).await;
}

// 2. Re-stamps carry trust forward run after run. P0 tracks `o`; re-incarnations are about
//    (so every run re-stamps). Between every two runs an identifier of index X is dropped
//    and registered again with `o` and away (a new incarnation each time, never seen by a
//    walk while it names `o`); also a dry run in between. `o` must stay 2 h after its
//    last loss.
async fn churn_between_restamps(seed: u64, dry_between: bool) {
    let env = Env::open(Backend::Memory, seed).await;
    let config = test_config();
    let dry = GcConfig {
        dry_run: true,
        ..config.clone()
    };
    env.register("keep", &Layout::under("keep/1")).await;
    let o_layout = Layout::under("x/1");
    let (o_meta, o_loc) = env.new_index(&o_layout).await;
    let o = env.relative(&o_loc);
    let (r, _, _) = env.register("r", &Layout::under("r/1")).await;
    env.catalog.drop_index(&r).await.expect("dropped");
    env.register("r", &Layout::under("r/2")).await;
    env.advance(HOUR);
    env.collect_completed(&config).await;
    let x = env.id("x").await;
    let mut last_loss = env.now();
    for round in 0..6 {
        env.advance(5 * MINUTE);
        // o published and unpublished between runs by a fresh incarnation.
        env.catalog
            .register(&x, Some(&o_layout.source), &o_loc)
            .await
            .expect("registered o");
        env.advance(MINUTE);
        let layout = Layout::under(&format!("x/{}", round + 2));
        let (_, next) = env.successor(&o_meta, &layout, None).await;
        env.catalog
            .commit(&x, Some(&layout.source), &o_loc, &next)
            .await
            .expect("committed away from o");
        last_loss = env.now();
        env.catalog.drop_index(&x).await.expect("dropped x");
        if dry_between {
            env.advance(MINUTE);
            let d = env.collect(&dry).await;
            assert_eq!(d.status, GcStatus::DryRun, "{d:?}");
        }
        env.advance(5 * MINUTE);
        env.collect_completed(&config).await;
        assert!(env.exists(&o).await, "round {round}");
        eprintln!("round {round}: {:?}", env.entry_of(&o).await);
    }
    env.assert_kept_through_retention(last_loss, 10 * MINUTE, &[o], "", async || {
        env.collect_completed(&config).await;
    })
    .await;
}

#[tokio::test]
async fn churn_between_restamping_runs() {
    churn_between_restamps(16411, false).await;
}

#[tokio::test]
async fn churn_between_restamping_runs_with_dry_runs() {
    churn_between_restamps(16412, true).await;
}
