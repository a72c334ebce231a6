//! Red team 16e: attacks on commit 0d44d9b (no clock trusted on the store's time; standing
//! metadata clocks re-recorded under the current run's journal while re-incarnations are
//! about, newest journal winning ties; truncated chains count as re-incarnations).
//! A failing test is a bug; it is kept as it is.

use std::sync::Arc;
use std::time::Duration;

use crate::support::gc::hooked_store::{
    HookedStore, collect_in_background, process_over, resume_and_join,
};
use crate::support::gc::{Backend, Env, HOUR, Layout, MINUTE, test_config};
use parqdb_catalog::catalog::IndexCatalog;
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
    let env = Env::open(Backend::Memory, seed).await;
    let config = test_config();
    let store = Arc::new(
        HookedStore::new(Arc::new(env.sim.clone())).backdating(backdate.then(|| env.clock.clone())),
    );
    let mut runs = 0u64;
    let mut run = |env: &Env| {
        runs += 1;
        process_over(env, store.clone(), seed * 100 + runs, &config)
    };
    env.register("keep", &Layout::under("keep/1")).await;
    let layout = Layout::under("again/1");
    let (metadata, location) = env.new_index(&layout).await;
    let md = env.relative(&location);
    env.advance(HOUR);
    let p0 = run(&env).collect(env.now()).await.expect("P0");
    assert_eq!(p0.status, GcStatus::Completed, "{p0:?}");
    let tracked = env.entry_of(&md).await;
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
    let key = format!("_gc/ledger/{md}/o-");
    store.arm(move |k| k.contains(key.as_str()));
    let process1 = collect_in_background(&env, run(&env));
    let stalled = tokio::time::timeout(Duration::from_secs(5), store.paused())
        .await
        .is_ok();
    if !stalled {
        // No clock is written again for a standing one (the collector of issue 26 never
        // re-stamps): J runs through; the retention promise below must hold all the same.
        store.disarm();
        let r = process1.await.expect("joined").expect("J");
        assert_eq!(r.status, GcStatus::Completed, "{r:?}");
        let _ = strict_reincarnation_about;
        env.advance(MINUTE);
        let again = env.publish("again", &layout, &location).await;
        for _ in 0..2 {
            env.advance(MINUTE);
            let r = run(&env).collect(env.now()).await.expect("gc run");
            assert_eq!(r.status, GcStatus::Completed, "{r:?}");
        }
        env.lose_and_keep_through_retention(&again, &metadata, &location, &[md], async || {
            let r = run(&env).collect(env.now()).await.expect("gc run");
            assert_eq!(r.status, GcStatus::Completed, "{r:?}");
        })
        .await;
        return;
    }
    env.advance(20 * MINUTE);
    let again = env.publish("again", &layout, &location).await;
    env.advance(MINUTE);
    let j = run(&env).collect(env.now()).await.expect("J finished");
    assert_eq!(j.status, GcStatus::Completed, "{j:?}");
    env.advance(MINUTE);
    let p = run(&env).collect(env.now()).await.expect("P");
    assert_eq!(p.status, GcStatus::Completed, "{p:?}");
    eprintln!("entry after P: {:?}", env.entry_of(&md).await);
    env.advance(MINUTE);
    resume_and_join(&store, process1).await;
    eprintln!("entry after the late put: {:?}", env.entry_of(&md).await);

    env.lose_and_keep_through_retention(&again, &metadata, &location, &[md], async || {
        let r = run(&env).collect(env.now()).await.expect("gc run");
        assert_eq!(r.status, GcStatus::Completed, "{r:?}");
    })
    .await;
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
    let r0 = env.collect(&config).await;
    assert_eq!(r0.status, GcStatus::Completed);
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
        let r = env.collect(&config).await;
        assert_eq!(r.status, GcStatus::Completed, "{r:?}");
        assert!(env.exists(&o).await, "round {round}");
        eprintln!("round {round}: {:?}", env.entry_of(&o).await);
    }
    env.assert_kept_through_retention(last_loss, 10 * MINUTE, &[o], "", async || {
        let r = env.collect(&config).await;
        assert_eq!(r.status, GcStatus::Completed, "{r:?}");
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
