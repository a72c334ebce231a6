//! Red team of the durable, checkpointed, partitioned garbage collector (issue 16): runs
//! that span invocations, processes and clocks. Every test states an invariant of the
//! spec ("retention begins when a published object loses catalog reachability"; GC never
//! deletes a reachable object) or of the run protocol, and attacks it. A test that fails
//! is a bug: it is kept as it is, never ignored.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use object_store::{ObjectStoreExt, PutPayload};

use crate::support::gc::hooked_store::{
    HookedStore, collect_in_background, process_over, resume_and_join,
};
use crate::support::gc::{Backend, Env, HOUR, Layout, MINUTE, test_config};
use parqdb_catalog::ErrorKind;
use parqdb_catalog::IndexCatalog;
use parqdb_catalog::gc::{GarbageCollector, GcConfig, GcStatus, GcStep};

const DAY: i64 = 24 * HOUR;

// ---------------------------------------------------------------------------------------
// 1. A planner paused between its walk and its plan wakes after another run finished.
// ---------------------------------------------------------------------------------------

/// Retention starts when an object loses reachability, even when a collector process that
/// walked the catalog long ago (and was paused before writing its plan, past its lease)
/// wakes up after another run has planned and finished: its stale walk must never start
/// the retention clock of a file that was published after that walk.
#[tokio::test]
async fn retention_starts_at_loss_even_after_a_stale_planner_wakes_behind_a_finished_run() {
    let env = Env::open(Backend::Memory, 1601).await;
    let config = test_config();
    env.register("keep", &Layout::under("keep/1")).await;
    // A metadata file and its tables nobody has published yet (a register still to come).
    let layout = Layout::under("again/1");
    let (metadata, location) = env.new_index(&layout).await;
    env.advance(HOUR);

    // Process 1 walks (the file is unreachable) and stops right before writing its walk.
    let pausing = Arc::new(
        HookedStore::new(Arc::new(env.sim.clone())).pause_on(|key| key.ends_with("/observed.json")),
    );
    let process1 = collect_in_background(&env, process_over(&env, pausing.clone(), 7001, &config));
    pausing.paused().await;

    // Its lease expires; the file is published; another run plans, walks and finishes.
    env.advance(30 * MINUTE);
    let again = env.publish("again", &layout, &location).await;
    env.advance(MINUTE);
    let fresh = env.collect_completed(&config).await;

    // Process 1 wakes up and goes on (it may stop when it finds its lease taken).
    resume_and_join(&pausing, process1).await;
    env.advance(MINUTE);
    let next = env.collect(&config).await;
    eprintln!(
        "next call: run {} {:?} (fresh run {})",
        next.run_id, next.status, fresh.run_id
    );

    // The file loses reachability now, by a commit.
    // The superseded metadata file (its tables stay reachable through the successor).
    let watched = vec![env.relative(&location)];
    env.lose_and_keep_through_retention(&again, &metadata, &location, &watched, async || {
        env.collect(&config).await;
    })
    .await;
}

// ---------------------------------------------------------------------------------------
// 2. A finished run whose journal was pruned.
// ---------------------------------------------------------------------------------------

/// A run that finished is never resumed: every call of a warehouse collected once a week
/// (journals are pruned after 7 days) starts a new run.
#[tokio::test]
async fn a_finished_run_is_never_resumed_after_its_journal_is_pruned() {
    let env = Env::open(Backend::Memory, 1602).await;
    let config = test_config();
    env.register("keep", &Layout::under("keep/1")).await;
    let mut runs = Vec::new();
    for week in 0..4 {
        env.advance(8 * DAY);
        let report = env.collect(&config).await;
        assert_eq!(report.status, GcStatus::Completed, "week {week}");
        assert!(
            !runs.contains(&report.run_id),
            "week {week}: the call resumed run {} which had finished already (runs so far {runs:?})",
            report.run_id
        );
        runs.push(report.run_id);
    }
}

// ---------------------------------------------------------------------------------------
// 3. Step events naming the wrong run or partition, or out of order.
// ---------------------------------------------------------------------------------------

/// A step event for a run that does not exist, for a partition the run does not have, or
/// out of order, is refused and deletes nothing.
#[tokio::test]
async fn step_events_for_unknown_runs_partitions_or_out_of_order_are_refused() {
    let env = Env::open(Backend::Memory, 1603).await;
    let config = test_config();
    let live = Layout::under("live/1");
    let (_, _, live_location) = env.register("live", &live).await;
    let mut kept = live.files();
    kept.push(env.relative(&live_location));
    env.advance(10 * MINUTE);
    let gc = env.gc(config.clone());
    let plan = gc
        .step(GcStep::Plan, env.now(), None)
        .await
        .expect("plan step");
    assert!(plan.done);
    let run = plan.report.run_id;
    let partitions = plan.partitions;
    let stranger = uuid::Uuid::from_u128(0xdead);
    let now = env.now();
    for step in [
        GcStep::Scan {
            run: stranger,
            partition: 0,
        },
        GcStep::Verify { run: stranger },
        GcStep::Delete {
            run: stranger,
            partition: 0,
        },
        GcStep::Finish { run: stranger },
        GcStep::Scan {
            run,
            partition: partitions,
        },
        GcStep::Scan {
            run,
            partition: usize::MAX,
        },
        GcStep::Verify { run },
        GcStep::Delete { run, partition: 0 },
        GcStep::Finish { run },
    ] {
        let err = gc
            .step(step, now, None)
            .await
            .expect_err(&format!("{step:?} is refused"));
        assert_eq!(err.kind(), ErrorKind::InvalidRequest, "{step:?}: {err}");
    }
    assert!(env.missing(&kept).await.is_empty());
    // Out-of-range partitions of the delete step, once the run is ready for it.
    for partition in 0..partitions {
        gc.step(GcStep::Scan { run, partition }, now, None)
            .await
            .expect("scan");
    }
    gc.step(GcStep::Verify { run }, now, None)
        .await
        .expect("verify");
    let err = gc
        .step(
            GcStep::Delete {
                run,
                partition: partitions,
            },
            now,
            None,
        )
        .await
        .expect_err("no such partition");
    assert_eq!(err.kind(), ErrorKind::InvalidRequest, "{err}");
    assert!(env.missing(&kept).await.is_empty());
}

// ---------------------------------------------------------------------------------------
// 4. A step answering after its run was finished by another process.
// ---------------------------------------------------------------------------------------

/// A late step of a run another process finished is a no-op: it deletes nothing and does
/// not take the lease from the run that holds it now.
#[tokio::test]
async fn a_late_step_of_a_finished_run_is_a_no_op_and_takes_no_lease() {
    let env = Env::open(Backend::Memory, 1604).await;
    let config = test_config();
    let live = Layout::under("live/1");
    env.register("live", &live).await;
    env.advance(10 * MINUTE);
    let finished = env.collect_completed(&config).await;
    let old = finished.run_id;
    env.advance(MINUTE);
    let gc = env.gc(config.clone());
    let plan = gc.step(GcStep::Plan, env.now(), None).await.expect("plan");
    let current = plan.report.run_id;
    assert_ne!(current, old);
    for step in [
        GcStep::Plan,
        GcStep::Scan {
            run: old,
            partition: 0,
        },
        GcStep::Verify { run: old },
        GcStep::Delete {
            run: old,
            partition: 0,
        },
        GcStep::Finish { run: old },
    ] {
        let outcome = gc.step(step, env.now(), None).await.expect("late step");
        if step != GcStep::Plan {
            assert!(outcome.done, "{step:?}");
            assert_eq!(outcome.report.counts.deleted.objects, 0, "{step:?}");
        } else {
            assert_eq!(
                outcome.report.run_id, current,
                "the plan step resumes the open run"
            );
        }
    }
    // The current run still goes on: nobody else holds its lease.
    let gc2 = env.gc(GcConfig {
        lease_duration: Duration::from_secs(3600),
        ..config.clone()
    });
    let scan = gc2
        .step(
            GcStep::Scan {
                run: current,
                partition: 0,
            },
            env.now(),
            None,
        )
        .await
        .expect("scan");
    assert_ne!(
        scan.report.status,
        GcStatus::Skipped,
        "{:?}",
        scan.report.skipped_reason
    );
    assert!(env.missing(&live.files()).await.is_empty());
}

// ---------------------------------------------------------------------------------------
// 5. A run resumed under another configuration.
// ---------------------------------------------------------------------------------------

/// A run planned with a 2 h retention and resumed by a collector configured with 1 minute
/// windows (forced), more partitions and another page size, decides by the plan's rules:
/// nothing whose 2 h have not passed is deleted by it.
#[tokio::test]
async fn a_run_resumed_with_shorter_windows_keeps_the_plans_rules() {
    let env = Env::open(Backend::Memory, 1605).await;
    let layout = Layout::under("gone/1");
    let (id, _, location) = env.register("gone", &layout).await;
    env.register("live", &Layout::under("live/1")).await;
    let mut watched = layout.files();
    watched.push(env.relative(&location));
    env.advance(HOUR);
    env.catalog.drop_index(&id).await.expect("dropped");
    let dropped_at = env.now();
    // Track the clocks with the real configuration.
    for _ in 0..3 {
        env.advance(10 * MINUTE);
        env.collect(&test_config()).await;
    }
    // A run planned now, stopped after its plan step.
    env.advance(MINUTE);
    let planned = env
        .collect(&GcConfig {
            budget: Some(Duration::ZERO),
            page_size: 2,
            ..test_config()
        })
        .await;
    assert_eq!(planned.status, GcStatus::InProgress);
    let run = planned.run_id;
    let short = GcConfig {
        retention: Duration::from_secs(60),
        grace: Duration::from_secs(60),
        condemn_delay: Some(Duration::from_secs(60)),
        max_clock_skew: Duration::from_secs(1),
        force: true,
        budget: Some(Duration::ZERO),
        page_size: 1,
        partitions: 7,
        ..test_config()
    };
    loop {
        env.advance(30 * MINUTE);
        let report = env.collect(&short).await;
        assert_eq!(report.run_id, run, "the planned run is resumed first");
        let gone = env.missing(&watched).await;
        assert!(
            env.now() >= dropped_at + 2 * HOUR || gone.is_empty(),
            "{} min after the drop, the resumed run deleted {gone:?}",
            (env.now() - dropped_at) / MINUTE
        );
        assert!(
            gone.is_empty(),
            "a run planned before retention elapsed deleted {gone:?}"
        );
        if report.status == GcStatus::Completed {
            break;
        }
    }
}

// ---------------------------------------------------------------------------------------
// 6. Steps invoked with clocks behind or ahead of the plan's.
// ---------------------------------------------------------------------------------------

async fn step_until_done(gc: &GarbageCollector, step: GcStep, now: i64) {
    for _ in 0..1000 {
        let outcome = gc
            .step(step, now, Some(Duration::ZERO))
            .await
            .expect("step");
        if outcome.done {
            return;
        }
    }
    panic!("{step:?} never finished");
}

/// A run whose steps are invoked with clocks behind the plan's (an NTP step, a worker
/// host lagging) or far ahead of it (a worker with a bad clock) deletes nothing before
/// its retention has passed since the loss.
#[tokio::test]
async fn steps_with_clocks_behind_or_ahead_of_the_plan_delete_nothing_early() {
    let env = Env::open(Backend::Memory, 1606).await;
    let config = GcConfig {
        page_size: 2,
        ..test_config()
    };
    let layout = Layout::under("gone/1");
    let (id, _, location) = env.register("gone", &layout).await;
    env.register("live", &Layout::under("live/1")).await;
    let mut watched = layout.files();
    watched.push(env.relative(&location));
    env.advance(HOUR);
    env.catalog.drop_index(&id).await.expect("dropped");
    let dropped_at = env.now();
    let gc = env.gc(config.clone());
    for (behind, ahead) in [
        (0, 30 * DAY),
        (DAY, 0),
        (DAY, 30 * DAY),
        (3 * HOUR, 3 * HOUR),
    ] {
        env.advance(20 * MINUTE);
        let now = env.now();
        let plan = gc.step(GcStep::Plan, now, None).await.expect("plan");
        let run = plan.report.run_id;
        let mut clocks = [now - behind, now + ahead].into_iter().cycle();
        for partition in 0..plan.partitions {
            step_until_done(&gc, GcStep::Scan { run, partition }, clocks.next().unwrap()).await;
        }
        step_until_done(&gc, GcStep::Verify { run }, clocks.next().unwrap()).await;
        for partition in 0..plan.partitions {
            step_until_done(
                &gc,
                GcStep::Delete { run, partition },
                clocks.next().unwrap(),
            )
            .await;
        }
        step_until_done(&gc, GcStep::Finish { run }, now).await;
        let gone = env.missing(&watched).await;
        assert!(
            gone.is_empty() || env.now() >= dropped_at + 2 * HOUR,
            "{} min after the drop (steps {behind} ms behind / {ahead} ms ahead): deleted {gone:?}",
            (env.now() - dropped_at) / MINUTE
        );
    }
}

// ---------------------------------------------------------------------------------------
// 7. Odd names at partition and page boundaries.
// ---------------------------------------------------------------------------------------

/// Live tables in directories whose names sort around partition boundaries (`a`, `a b`,
/// `a-b`, `a.c`, `a%20b`, `a~`, unicode...) are never deleted, whatever page and partition
/// they fall in and however runs stop and resume; the garbage next to them is collected.
#[tokio::test]
async fn odd_names_at_partition_and_page_boundaries_keep_live_tables() {
    let tags = [
        "a", "a b", "a!", "a+b", "a-b", "a.c", "a~", "ab", "ü b", "日本", "zz",
    ];
    let config = GcConfig {
        budget: Some(Duration::ZERO),
        page_size: 6,
        partitions: 5,
        ..test_config()
    };
    for backend in [Backend::Memory, Backend::Local] {
        let env = Env::open(backend, 1607).await;
        let mut live = Vec::new();
        let mut garbage = Vec::new();
        for (at, tag) in tags.iter().enumerate() {
            let layout = Layout::under(&format!("{tag}/1"));
            let (_, _, location) = env.register(&format!("live{at}"), &layout).await;
            live.extend(layout.files());
            live.push(env.relative(&location));
            let doomed = Layout::under(&format!("{tag}/2"));
            let (id, _, location) = env.register(&format!("gone{at}"), &doomed).await;
            garbage.extend(doomed.files());
            garbage.push(env.relative(&location));
            env.catalog.drop_index(&id).await.expect("dropped");
        }
        if backend == Backend::Memory {
            // Objects directly in `indexes/`, named like the boundaries themselves.
            for name in ["indexes/a", "indexes/a b", "indexes/zz"] {
                env.put(name, b"garbage").await;
                garbage.push(name.to_owned());
            }
        }
        let dropped_at = env.now();
        while env.now() < dropped_at + 8 * HOUR {
            env.advance(2 * MINUTE);
            let report = env.collect(&config).await;
            if std::env::var_os("REDTEAM_TRACE").is_some() {
                eprintln!(
                    "{} {:?} {:?} deleted {}",
                    (env.now() - dropped_at) / MINUTE,
                    report.run_id,
                    report.status,
                    report.counts.deleted.objects
                );
            }
            let gone = env.missing(&live).await;
            assert!(
                gone.is_empty(),
                "{backend:?}: live objects deleted: {gone:?}"
            );
            if env.now() < dropped_at + 2 * HOUR {
                let gone = env.missing(&garbage).await;
                assert!(
                    gone.is_empty(),
                    "{backend:?}: deleted before retention: {gone:?}"
                );
            }
        }
        let left: Vec<String> = {
            let mut left = Vec::new();
            for name in &garbage {
                if env.exists(name).await {
                    left.push(name.clone());
                }
            }
            left
        };
        assert!(
            left.is_empty(),
            "{backend:?}: garbage never collected: {left:?}"
        );
    }
}

// ---------------------------------------------------------------------------------------
// 8. Damaged run files.
// ---------------------------------------------------------------------------------------

/// A run whose `plan.json` is truncated (a torn copy, a bad restore) is never resumed on
/// it, and retention still counts from the loss: a dropped index survives 2 h after its
/// drop, live ones forever.
#[tokio::test]
async fn a_truncated_plan_neither_stops_collection_nor_shortens_retention() {
    let env = Env::open(Backend::Memory, 1608).await;
    let config = test_config();
    let layout = Layout::under("gone/1");
    let (id, _, location) = env.register("gone", &layout).await;
    let live = Layout::under("live/1");
    let (_, _, live_location) = env.register("live", &live).await;
    let mut watched = layout.files();
    watched.push(env.relative(&location));
    let mut kept = live.files();
    kept.push(env.relative(&live_location));
    env.advance(HOUR);
    env.catalog.drop_index(&id).await.expect("dropped");
    let dropped_at = env.now();
    for round in 0..3 {
        env.advance(10 * MINUTE);
        let stopped = env.collect_without_budget(&config).await;
        // (A call that found the previous torn run's lease still held planned nothing.)
        if let Some((plan, bytes)) = plan_of(&env, stopped.run_id).await {
            let torn = Bytes::copy_from_slice(&bytes[..bytes.len() / 2 + round]);
            overwrite(&env, &plan, torn).await;
        }
    }
    let mut completed = BTreeSet::new();
    while env.now() < dropped_at + 2 * HOUR - MINUTE {
        env.advance(5 * MINUTE);
        let report = env.collect(&config).await;
        if report.status == GcStatus::Completed {
            completed.insert(report.run_id);
        }
        let gone = env.missing(&watched).await;
        assert!(
            gone.is_empty(),
            "{} min after the drop: deleted {gone:?}",
            (env.now() - dropped_at) / MINUTE
        );
    }
    assert!(completed.len() >= 3, "runs completed: {completed:?}");
    while env.now() < dropped_at + 4 * HOUR {
        env.advance(10 * MINUTE);
        env.collect(&config).await;
    }
    assert!(env.missing(&kept).await.is_empty(), "live files deleted");
    assert_eq!(
        env.missing(&watched).await.len(),
        watched.len(),
        "garbage left"
    );
}

// ---------------------------------------------------------------------------------------
// 9. A dry run's `abandon`.
// ---------------------------------------------------------------------------------------

/// A dry run writes nothing: `abandon` on a dry-run collector leaves the unfinished run
/// as it was, and the next call resumes it.
#[tokio::test]
async fn a_dry_run_abandon_leaves_the_unfinished_run_alone() {
    let env = Env::open(Backend::Memory, 1609).await;
    let config = test_config();
    env.register("live", &Layout::under("live/1")).await;
    env.advance(10 * MINUTE);
    let stopped = env.collect_without_budget(&config).await;
    assert_eq!(stopped.status, GcStatus::InProgress);
    let before = env.objects().await;
    let dry = env.gc(GcConfig {
        dry_run: true,
        ..config.clone()
    });
    let abandoned = dry.abandon().await.expect("dry abandon");
    eprintln!("dry abandon answered {abandoned:?}");
    assert_eq!(
        env.objects().await,
        before,
        "a dry run wrote to the warehouse"
    );
    env.advance(MINUTE);
    let next = env.collect(&config).await;
    assert_eq!(
        (next.run_id, next.status),
        (stopped.run_id, GcStatus::Completed),
        "{:?}",
        next.skipped_reason
    );
}

// ---------------------------------------------------------------------------------------
// 10. A run directory copied from another catalog's warehouse.
// ---------------------------------------------------------------------------------------

/// Retention starts at the loss even when `_gc/runs/` holds an unfinished run planned by
/// another catalog (a warehouse copied with `aws s3 sync`, a restored backup): that run's
/// walk is not this catalog's and must never start this catalog's retention clocks.
#[tokio::test]
async fn a_run_copied_from_another_catalogs_warehouse_never_starts_clocks_here() {
    let here = Env::open(Backend::Memory, 1610).await;
    let there = Env::open(Backend::Memory, 1611).await;
    let config = test_config();
    here.register("keep", &Layout::under("keep/1")).await;
    let layout = Layout::under("again/1");
    let (id, metadata, location) = here.register("again", &layout).await;
    here.advance(HOUR);
    there.advance(HOUR);
    // The other warehouse stops a run after its plan step.
    let foreign = there.collect_without_budget(&config).await;
    assert_eq!(foreign.status, GcStatus::InProgress);
    here.advance(5 * MINUTE);
    assert_eq!(here.collect(&config).await.status, GcStatus::Completed);
    here.advance(5 * MINUTE);
    for name in there.objects().await {
        // Copied right after the other run wrote its plan (before its journal).
        if !name.starts_with("_gc/runs/")
            || !(name.ends_with("/plan.json") || name.ends_with("/observed.json"))
        {
            continue;
        }
        let bytes = there
            .warehouse
            .object_store()
            .get(&there.warehouse.path(&name).expect("path"))
            .await
            .expect("get")
            .bytes()
            .await
            .expect("bytes");
        here.warehouse
            .put_if_absent(&name, bytes)
            .await
            .expect("copied");
    }
    // The next call goes on with the copied run (if it does not, nothing happens here).
    here.advance(MINUTE);
    let report = here.collect(&config).await;
    eprintln!(
        "call: run {} {:?} (foreign {})",
        report.run_id, report.status, foreign.run_id
    );
    // The live file loses reachability now.
    let watched = vec![here.relative(&location)];
    here.lose_and_keep_through_retention(&id, &metadata, &location, &watched, async || {
        here.collect(&config).await;
    })
    .await;
}

// ---------------------------------------------------------------------------------------
// 11. A run planned by a newer release (a release skipped, or a deployment rolled back).
// ---------------------------------------------------------------------------------------

/// The plan file of run `run` (its name) and its bytes, if it has one.
async fn plan_of(env: &Env, run: uuid::Uuid) -> Option<(String, Bytes)> {
    let name = env.objects().await.into_iter().find(|name| {
        name.starts_with("_gc/runs/")
            && name.ends_with("/plan.json")
            && name.contains(&run.simple().to_string())
    })?;
    let path = env.warehouse.path(&name).expect("path");
    let bytes = env
        .warehouse
        .object_store()
        .get(&path)
        .await
        .expect("plan")
        .bytes()
        .await
        .expect("bytes");
    Some((name, bytes))
}

/// The plan file of run `run` (its name), its bytes, and the same plan as a newer release
/// would write it: the next run format, with a field this release does not know.
async fn plan_and_newer(env: &Env, run: uuid::Uuid) -> (String, Bytes, Bytes) {
    let (name, bytes) = plan_of(env, run).await.expect("the run's plan");
    let mut newer: serde_json::Value = serde_json::from_slice(&bytes).expect("json");
    newer["plan-version"] = (newer["plan-version"].as_i64().expect("version") + 1).into();
    newer["a-field-of-the-next-format"] = true.into();
    let newer = Bytes::from(serde_json::to_vec(&newer).expect("json"));
    (name, bytes, newer)
}

async fn overwrite(env: &Env, name: &str, bytes: Bytes) {
    env.warehouse
        .object_store()
        .put(
            &env.warehouse.path(name).expect("path"),
            PutPayload::from(bytes),
        )
        .await
        .expect("overwritten");
}

/// A run of a newer run format is neither resumed nor given up by this release: every
/// step that meets it fails with `UNSUPPORTED_FORMAT_VERSION` and writes nothing (no new
/// run over it, no dead mark), so when its release is back the run goes on where it
/// stopped and no retention clock starts again. Only the operator's `gc abandon` gives it
/// up.
#[tokio::test]
async fn a_run_of_a_newer_format_is_left_alone_until_its_release_is_back() {
    let env = Env::open(Backend::Memory, 1611).await;
    let config = test_config();
    let (id, _, _) = env.register("gone", &Layout::under("gone/1")).await;
    let (_, _, live_location) = env.register("live", &Layout::under("live/1")).await;
    env.advance(HOUR);
    env.catalog.drop_index(&id).await.expect("dropped");
    env.advance(10 * MINUTE);
    let stopped = env.collect_without_budget(&config).await;
    assert_eq!(stopped.status, GcStatus::InProgress);
    let (plan, ours, newer) = plan_and_newer(&env, stopped.run_id).await;
    overwrite(&env, &plan, newer).await;

    // This release meets the run at every step, any time later, and leaves it alone.
    let before = env.objects().await;
    for _ in 0..3 {
        env.advance(DAY);
        let gc = env.gc(config.clone());
        let steps = [
            gc.collect(env.now()).await.map(|report| report.status),
            gc.resume(env.now()).await.map(|report| report.status),
            gc.step(GcStep::Plan, env.now(), None)
                .await
                .map(|outcome| outcome.report.status),
            gc.step(
                GcStep::Scan {
                    run: stopped.run_id,
                    partition: 0,
                },
                env.now(),
                None,
            )
            .await
            .map(|outcome| outcome.report.status),
        ];
        for answer in steps {
            let err = answer.expect_err("a run of a newer format must stop this release");
            assert_eq!(err.kind(), ErrorKind::UnsupportedFormatVersion, "{err}");
            assert!(err.message().contains("gc abandon"), "{err}");
        }
        assert_eq!(env.objects().await, before, "this release wrote or deleted");
        // `gc status` still answers, and says why nothing goes on.
        let state = parqdb_catalog::gc::status(&env.catalog, env.now(), false)
            .await
            .expect("status");
        assert!(
            state.warnings().iter().any(|w| w.contains("newer release")),
            "{:?}",
            state.warnings()
        );
    }

    // Its release is back: the same run goes on, and no clock restarted for it.
    overwrite(&env, &plan, ours).await;
    let resumed = env.collect(&config).await;
    assert_eq!(
        (resumed.run_id, resumed.status),
        (stopped.run_id, GcStatus::Completed),
        "{:?} {:?}",
        resumed.skipped_reason,
        resumed.warnings
    );
    env.advance(MINUTE);
    let next = env.collect(&config).await;
    assert!(
        next.warnings.iter().all(|w| !w.contains("start again")),
        "a clock restarted: {:?}",
        next.warnings
    );
    assert!(
        env.missing(&[env.relative(&live_location)])
            .await
            .is_empty()
    );

    // The operator gives a newer release's run up: the next run starts over it.
    env.advance(MINUTE);
    let stopped = env.collect_without_budget(&config).await;
    assert_eq!(stopped.status, GcStatus::InProgress);
    let (plan, _, newer) = plan_and_newer(&env, stopped.run_id).await;
    overwrite(&env, &plan, newer).await;
    let abandoned = env.gc(config.clone()).abandon().await.expect("abandon");
    assert_eq!(abandoned, Some(stopped.run_id));
    env.advance(MINUTE);
    let after = env.collect(&config).await;
    assert_ne!(after.run_id, stopped.run_id);
    assert_eq!(after.status, GcStatus::Completed, "{:?}", after.warnings);
    assert!(
        after.warnings.iter().any(|w| w.contains("did not finish")),
        "the given-up run's clocks must start again: {:?}",
        after.warnings
    );
    assert!(
        env.missing(&[env.relative(&live_location)])
            .await
            .is_empty()
    );
}
