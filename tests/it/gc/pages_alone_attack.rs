//! GC round 131, a fresh attack on the pages alone carrying the clocks of `indexes/`
//! (issue 29, step A, second release): with no clock file written for a table, a run that
//! cannot read the previous run's pages fell back to a clock file an earlier release wrote
//! before the clock restarted (F1: deleted 90 minutes after the loss, with a retention of
//! two hours), and a plan step stopped before its plan made the next run start every clock
//! again (F2; since round 133 only one that stopped before writing its walk restarts
//! none). Each failed before its fix (`docs/gc-attacks.md`, round 131).

use std::sync::Arc;

use object_store::ObjectStoreExt;

use crate::support::gc::hooked_store::{HookedStore, process_over};
use crate::support::gc::{Backend, Env, HOUR, Layout, MINUTE, test_config};
use parqdb_catalog::IndexCatalog;
use parqdb_catalog::gc::{GcConfig, GcStatus, GcStep};

/// Give up a new run right after its plan (`gc abandon`): a run planned between the
/// previous finished run and the next, so the next one carries nothing.
async fn plan_and_give_up(env: &Env, config: &GcConfig) {
    let gc = env.gc(config.clone());
    while !gc
        .step(GcStep::Plan, env.now(), None)
        .await
        .expect("plan")
        .done
    {}
    gc.abandon().await.expect("abandoned");
}

/// F1: the tables of a dropped index were tracked by a run of the earlier release (clock
/// files, trusted), then published again (the old metadata file registered) and dropped
/// again; the next run restarts their clocks on its pages. A run is given up after it, so
/// the run after that carries nothing and reads the clock files: it must find the restart
/// there, not the earlier release's clock from before the publication (whose change-log
/// entries the restarting run pruned).
#[tokio::test]
async fn f1_a_clock_restarted_on_the_pages_is_never_undone_by_an_older_clock_file() {
    let env = Env::open(Backend::Memory, 13101).await;
    let config = test_config();
    env.register("keep", &Layout::under("keep/1")).await;
    let old = Layout::under("old/1");
    let (id, _, location) = env.register("old", &old).await;
    env.advance(HOUR);
    env.catalog.drop_index(&id).await.expect("dropped");
    // E: finished; an earlier release wrote a clock file per table beside its pages (the
    // same clocks, landed with the run, so trusted).
    env.advance(10 * MINUTE);
    env.collect_completed(&config).await;
    let mut written = 0;
    for (run, object, start, walk) in env.carried_clocks().await {
        if object.starts_with("indexes/old/") {
            env.put_raw(
                &format!("_gc/ledger/{object}/o-{start}-{walk}-{run}.json"),
                b"{}",
            )
            .await;
            written += 1;
        }
    }
    assert!(written > 0, "E tracked the tables");
    // The old metadata file is registered again, then dropped: the tables lose
    // reachability (through rule P) now.
    env.advance(10 * MINUTE);
    let again = env.publish("again", &old, &location).await;
    env.advance(30 * MINUTE);
    env.catalog.drop_index(&again).await.expect("dropped again");
    let lost_at = env.now();
    // F: restarts the tables' clocks after the publication, and prunes its log entries.
    env.advance(10 * MINUTE);
    env.collect_completed(&config).await;
    let table = old.files()[0].clone();
    assert!(
        env.newest_carried_clock(&table)
            .await
            .expect("F carries it")
            >= lost_at,
        "F restarted the clock"
    );
    // G: planned, then given up.
    env.advance(5 * MINUTE);
    plan_and_give_up(&env, &config).await;
    // H: carries nothing from F; its clock comes from the files.
    env.advance(5 * MINUTE);
    env.collect_completed(&config).await;
    let clock = env.newest_carried_clock(&table).await.expect("H tracks it");
    assert!(
        clock >= lost_at,
        "H dated the loss at {clock}, before it happened ({lost_at}): the earlier release's clock file came back"
    );
    // And nothing goes before the retention has passed since the loss, even with the
    // metadata file that keeps them (rule P) removed by hand.
    let path = env.warehouse.path(&env.relative(&location)).expect("name");
    env.warehouse
        .object_store()
        .delete(&path)
        .await
        .expect("removed");
    env.assert_kept_through_retention(
        lost_at,
        10 * MINUTE,
        &old.files(),
        " (round 131, F1)",
        async || {
            env.collect(&config).await;
        },
    )
    .await;
}

/// F2: a plan step that stops before writing anything (here its walk's write fails) left
/// nothing behind: the next run carries every clock and restarts none. One that stops
/// after writing its walk and before its plan (its plan's write fails) is a run in
/// between since round 133 (G1: that walk may have found objects reachable through links
/// no change-log entry records, `gc::carried_attack::g1_…`): every clock starts again.
#[tokio::test]
async fn f2_a_plan_step_stopped_before_its_walk_restarts_no_clock() {
    plan_step_stopped(13102, "/observed.json").await;
}

#[tokio::test]
async fn f2_a_plan_step_stopped_after_its_walk_restarts_every_clock() {
    plan_step_stopped(13104, "/plan.json").await;
}

async fn plan_step_stopped(seed: u64, failing_write: &'static str) {
    let restarts = failing_write == "/plan.json";
    let env = Env::open(Backend::Memory, seed).await;
    let config = test_config();
    env.register("keep", &Layout::under("keep/1")).await;
    let dropped = Layout::under("dropped/1");
    let (id, _, _) = env.register("dropped", &dropped).await;
    env.advance(HOUR);
    env.catalog.drop_index(&id).await.expect("dropped");
    let dropped_at = env.now();
    env.advance(10 * MINUTE);
    let first = env.collect_completed(&config).await;
    assert!(first.counts.tracked.objects > 0, "{first:?}");
    // A plan step whose walk (or plan) cannot be written.
    env.advance(10 * MINUTE);
    let failing = Arc::new(
        HookedStore::new(Arc::new(env.sim.clone()))
            .fail_on(move |key| key.ends_with(failing_write)),
    );
    let failed = process_over(&env, failing, seed + 1, &config)
        .collect(env.now())
        .await;
    assert!(failed.is_err(), "{failed:?}");
    // Once its lease has expired, the next run carries every clock, or starts them all
    // again.
    env.advance(20 * MINUTE);
    let next = env.collect_completed(&config).await;
    assert_eq!(next.status, GcStatus::Completed, "{next:?}");
    let restarted = next.counts.tracked.objects > 0;
    assert_eq!(
        restarted, restarts,
        "clocks started again after a plan step that failed at `{failing_write}`: {next:?}"
    );
    assert_eq!(
        next.warnings.iter().any(|w| w.contains("did not finish")),
        restarts,
        "{:?}",
        next.warnings
    );
    // And the tables go on time (a retention after the restart, if there was one).
    let due = match restarts {
        true => env.now() + 2 * HOUR + 40 * MINUTE,
        false => dropped_at + 2 * HOUR + 40 * MINUTE,
    };
    while env.now() < due {
        env.advance(10 * MINUTE);
        env.collect(&config).await;
    }
    assert!(env.none_exist(&dropped.files()).await, "collected on time");
}
