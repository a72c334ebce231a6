//! Red team 16b: attacks on commit a4be2e9 (superseded runs, the planner's fence, pruning
//! every older run's files, dry abandon). A failing test is a bug; it is kept as it is.

use std::sync::Arc;
use std::time::Duration;

use crate::support::gc::hooked_store::{
    HookedStore, collect_in_background, process_over, resume_and_join,
};
use crate::support::gc::{Backend, Env, HOUR, Layout, MINUTE, test_config};
use parqdb_catalog::gc::{GcConfig, GcStatus, GcStep};

const DAY: i64 = 24 * HOUR;

// ---------------------------------------------------------------------------------------
// 1. A clock write that lands after its run finished (a pause between `hold_lease` and
//    the put; a slow/retried PUT), behind a finished run that saw the object reachable.
// ---------------------------------------------------------------------------------------

/// Retention starts at the loss: a retention clock from a run's old walk that is written
/// late (the writing process paused between its lease check and its put, while another
/// process finished the run and a later run finished too) must not date the loss of a
/// metadata file published in between back to that walk.
#[tokio::test]
async fn a_late_clock_write_behind_finished_runs_does_not_backdate_retention() {
    let env = Env::open(Backend::Memory, 16101).await;
    let config = test_config();
    env.register("keep", &Layout::under("keep/1")).await;
    // An old metadata file nobody has published yet (registered later: allowed).
    let layout = Layout::under("again/1");
    let (metadata, location) = env.new_index(&layout).await;
    let watched = env.relative(&location);
    env.advance(HOUR);

    // Process 1 plans run S (the file is unreachable) and stops right at the put of the
    // file's retention clock, after its lease check.
    let entry = format!("_gc/ledger/{watched}/o-");
    let hooked = Arc::new(
        HookedStore::new(Arc::new(env.sim.clone())).pause_on(move |key| key.contains(&entry)),
    );
    let process1 = collect_in_background(&env, process_over(&env, hooked.clone(), 7101, &config));
    hooked.paused().await;

    // Its lease expires; the file is published; another process goes on with S and
    // finishes it (S's verification walk sees the file reachable: its entry is cleared).
    env.advance(20 * MINUTE);
    let again = env.publish("again", &layout, &location).await;
    env.advance(MINUTE);
    let s = env.collect_completed(&config).await;
    // A later run finishes, seeing the file reachable (its journal lists the
    // registration's incarnation).
    env.advance(MINUTE);
    let x = env.collect_completed(&config).await;
    eprintln!("S {} X {}", s.run_id, x.run_id);

    // Process 1's put lands now.
    resume_and_join(&hooked, process1).await;
    let ledger: Vec<String> = env
        .ledger_files()
        .await
        .into_iter()
        .filter(|f| f.contains(&watched))
        .collect();
    eprintln!("ledger entry of the file after the late write: {ledger:?}");

    // The file loses reachability now, by a commit.
    env.lose_and_keep_through_retention(&again, &metadata, &location, &[watched], async || {
        env.collect(&config).await;
    })
    .await;
}

// ---------------------------------------------------------------------------------------
// 2. Finish marked a dead run done after pruning its journal, then failed; the run was
//    abandoned. A `.done` mark without its journal supersedes every later run.
// ---------------------------------------------------------------------------------------

/// Sets up: run D abandoned; `gap` later run F acknowledges D (marking it dead, and
/// pruning D's journal first if it is older than the journals kept) and fails writing its
/// own `.done`. Returns D's and F's ids.
async fn finish_fails_after_acknowledging(
    env: &Env,
    config: &GcConfig,
    gap: i64,
) -> (uuid::Uuid, uuid::Uuid) {
    env.register("keep", &Layout::under("keep/1")).await;
    env.advance(10 * MINUTE);
    let d = env
        .collect(&GcConfig {
            budget: Some(Duration::ZERO),
            ..config.clone()
        })
        .await;
    assert_eq!(d.status, GcStatus::InProgress);
    assert_eq!(
        env.gc(config.clone()).abandon().await.expect("abandon"),
        Some(d.run_id)
    );
    env.advance(gap);
    let d_id = d.run_id.simple().to_string();
    let hooked = Arc::new(
        HookedStore::new(Arc::new(env.sim.clone())).fail_on(move |key| {
            key.contains("_gc/journal/") && key.ends_with(".done") && !key.contains(&d_id)
        }),
    );
    let failing = process_over(env, hooked, 7201, config);
    let err = failing
        .collect(env.now())
        .await
        .expect_err("finish fails on its own .done");
    eprintln!("F failed: {err}");
    eprintln!("journals: {:?}", env.journal_files().await);
    let state = parqdb_catalog::gc::status(&env.catalog, env.now(), false)
        .await
        .expect("status");
    let f = state.current_run().expect("an unfinished run");
    (d.run_id, f)
}

/// A retried finish after acknowledging the dead runs goes on and completes.
#[tokio::test]
async fn a_finish_retried_after_acknowledging_dead_runs_completes() {
    let env = Env::open(Backend::Memory, 16102).await;
    let config = test_config();
    let (_, f) = finish_fails_after_acknowledging(&env, &config, 8 * DAY).await;
    env.advance(MINUTE);
    let retried = env.collect(&config).await;
    assert_eq!((retried.run_id, retried.status), (f, GcStatus::Completed));
    env.advance(MINUTE);
    let next = env
        .collect(&GcConfig {
            budget: Some(Duration::ZERO),
            ..config.clone()
        })
        .await;
    env.advance(MINUTE);
    let resumed = env.collect(&config).await;
    assert_eq!(
        (resumed.run_id, resumed.status),
        (next.run_id, GcStatus::Completed)
    );
}

/// GC in step mode (the `gc-cycle` state machine) keeps completing runs after an operator
/// abandoned a run whose finish had failed: a run that goes on legitimately is never
/// superseded. Also on a warehouse where no run has finished yet, and the dead run's
/// journal is still there (the finish pruned nothing): the dead mark the failed finish
/// left was there before the next plan, so it is no run that "finished after" it (else
/// every later run was superseded at its first scan step, for ever).
#[tokio::test]
async fn step_mode_completes_after_abandoning_a_run_whose_finish_failed() {
    for gap in [8 * DAY, HOUR] {
        let env = Env::open(Backend::Memory, 16103).await;
        let config = test_config();
        let (_, f) = finish_fails_after_acknowledging(&env, &config, gap).await;
        assert_eq!(
            env.gc(config.clone()).abandon().await.expect("abandon"),
            Some(f)
        );
        eprintln!("journals after abandon: {:?}", env.journal_files().await);
        for cycle in 0..3 {
            env.advance(HOUR);
            let gc = env.gc(config.clone());
            let now = env.now();
            let plan = gc.step(GcStep::Plan, now, None).await.expect("plan");
            assert!(plan.done, "gap {gap}, cycle {cycle}");
            let run = plan.report.run_id;
            for partition in 0..plan.partitions {
                let scan = gc.step(GcStep::Scan { run, partition }, now, None).await;
                assert!(
                    scan.is_ok(),
                    "gap {gap}, cycle {cycle}: the scan step of the run the plan step just started was refused: {:?}",
                    scan.err().map(|e| e.to_string())
                );
            }
            gc.step(GcStep::Verify { run }, now, None)
                .await
                .expect("verify");
            for partition in 0..plan.partitions {
                gc.step(GcStep::Delete { run, partition }, now, None)
                    .await
                    .expect("delete");
            }
            let finish = gc
                .step(GcStep::Finish { run }, now, None)
                .await
                .expect("finish");
            assert!(
                finish.done && finish.report.status == GcStatus::Completed,
                "gap {gap}, cycle {cycle}"
            );
        }
    }
}

/// Round 38 K2: the restore procedure (infra/README.md) puts the pointer store back and
/// adopts the warehouse. A run planned (walked, even verified) before the adoption must
/// never go on after it: its walk predates the restored pointers, and its deletes would
/// take their files. It is superseded; the next run walks the restored state. Round 39
/// L3: also when the adoption comes within the clock-skew allowance of the plan (a
/// scripted restore): the plan says which epoch it was made in, and clocks are not
/// compared.
#[tokio::test]
async fn a_run_planned_before_an_adoption_is_never_resumed() {
    for gap in [HOUR, MINUTE, 0] {
        let env = Env::open(Backend::Memory, 16104).await;
        let config = test_config();
        env.register("keep", &Layout::under("keep/1")).await;
        env.advance(HOUR);
        let planned = env
            .gc(config.clone())
            .step(GcStep::Plan, env.now(), None)
            .await
            .expect("planned");
        let before = planned.report.run_id;
        env.advance(gap);
        parqdb_catalog::gc::adopt(&env.catalog, env.now())
            .await
            .expect("adopted");
        // The next run comes once the planned run's lease has expired.
        env.advance(MINUTE + config.lease_duration.as_millis() as i64);
        let report = env.collect(&config).await;
        assert_ne!(
            report.run_id, before,
            "{gap}: the run planned before the adoption went on"
        );
        assert!(
            report.warnings.iter().any(|w| w.contains("did not finish")),
            "{gap}: {:?}",
            report.warnings
        );
    }
}
