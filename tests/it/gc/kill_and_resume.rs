//! Kill anywhere (issue 16): a garbage-collection run killed at a random request — any
//! read, listing page, ledger write, checkpoint, lease generation or deletion, a write
//! applied with its answer lost — is resumed by the next call from its last checkpoint,
//! again and again, and still: finishes, deletes nothing live, restarts no retention
//! clock, and lists no object more than twice in a run (a run lists each page once and
//! keeps that listing before working on it; a store page that reaches past a partition's
//! end lists the next partition's first objects once more).
//!
//! `PARQDB_GC_KILLS` sets how many kills (default 100, 20 at `PARQDB_TEST_SCALE=quick`).
#![allow(clippy::disallowed_methods)] // tests may read the wall clock and draw random ids (unique names)

use std::collections::{BTreeMap, BTreeSet};

use crate::support::gc::{Backend, Env, HOUR, Layout, MINUTE, test_config};
use parqdb_catalog::IndexCatalog;
use parqdb_catalog::gc::{self, GcConfig, GcStatus};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

fn files(layout: &Layout) -> Vec<String> {
    [&layout.centroids, &layout.postings]
        .into_iter()
        .map(|dir| format!("{dir}part-0.parquet"))
        .collect()
}

/// Every object whose retention clock was raised (or restarted) after it was first
/// recorded: the clocks of `indexes/` as every run's scan pages carried them, and those of
/// `metadata/` as the ledger's clock files (`o-…`) hold them, added to `seen` (which
/// remembers the clocks of pages and files since removed).
async fn raised_clocks(
    env: &Env,
    seen: &mut BTreeMap<String, BTreeSet<(i64, i64)>>,
) -> Vec<String> {
    for (_, object, start, walk) in env.carried_clocks().await {
        seen.entry(object).or_default().insert((start, walk));
    }
    for name in env.objects().await {
        let Some(rest) = name.strip_prefix("_gc/ledger/") else {
            continue;
        };
        let Some((object, file)) = rest.rsplit_once('/') else {
            continue;
        };
        if file.starts_with("o-") {
            // The file's name carries the clock: `o-<clock>-<walk>-…`.
            seen.entry(object.to_owned())
                .or_default()
                .insert(clock_of_file(file));
        }
    }
    seen.iter()
        .filter(|(_, clocks)| clocks.len() > 1)
        .map(|(object, _)| object.clone())
        .collect()
}

/// The (start, walk) of a clock file's name `o-<clock>-<walk>-<run-ms>-<run>.json`.
fn clock_of_file(file: &str) -> (i64, i64) {
    let mut fields = file["o-".len()..].split('-');
    let mut number = || {
        fields
            .next()
            .and_then(|field| field.parse().ok())
            .unwrap_or_else(|| panic!("a clock file's name: {file}"))
    };
    (number(), number())
}

#[tokio::test]
async fn runs_killed_anywhere_resume_and_never_delete_live_data() {
    let kills = crate::support::scale::knob("PARQDB_GC_KILLS", 100, 20) as usize;
    let env = Env::open(Backend::Memory, 1601).await;
    let mut rng = StdRng::seed_from_u64(1601);
    let mut live = Vec::new();
    for n in 0..3 {
        let layout = Layout::under(&format!("live{n}/1"));
        let (_, _, location) = env.register(&format!("live{n}"), &layout).await;
        live.extend(files(&layout));
        live.push(env.relative(&location));
    }
    let mut garbage = Vec::new();
    for n in 0..4 {
        let layout = Layout::under(&format!("dead{n}/1"));
        let (id, _, location) = env.register(&format!("dead{n}"), &layout).await;
        env.catalog.drop_index(&id).await.expect("dropped");
        garbage.extend(files(&layout));
        garbage.push(env.relative(&location));
    }
    for n in 0..20 {
        let name: &'static str = Box::leak(format!("indexes/stray{n:02}/part-0").into_boxed_str());
        env.put(name, b"garbage").await;
        garbage.push(name.to_owned());
    }
    let config = GcConfig {
        page_size: 3,
        partitions: 4,
        workers: 2,
        delete_batch_size: 2,
        ..test_config()
    };
    env.advance(HOUR);
    // How many requests an uninterrupted run makes: kill points fall inside that.
    let mut span = 40;
    let mut killed = 0;
    let mut finished = 0;
    let mut runs: BTreeMap<uuid::Uuid, usize> = BTreeMap::new();
    let mut clocks = BTreeMap::new();
    while killed < kills {
        env.advance(rng.random_range(1..20) * MINUTE);
        let point = rng.random_range(0..span);
        let outcome = env.collect_killed_after(&config, point).await;
        match outcome {
            None => {
                killed += 1;
                // Later kill points after a kill, earlier after a finished run: about
                // half of the calls are killed, anywhere in a run.
                span += 25;
            }
            Some(report) => {
                let report = report.expect("a run that was not killed succeeds");
                if report.status == GcStatus::Skipped {
                    // Killed right after taking the lease for a new run, before its plan:
                    // that run may still be walking, so its lease stands until it expires.
                    env.advance(16 * MINUTE);
                    continue;
                }
                assert_eq!(report.status, GcStatus::Completed, "{report:?}");
                finished += 1;
                *runs.entry(report.run_id).or_default() += 1;
                span = (span * 3 / 4).max(40);
            }
        }
        for name in &live {
            assert!(
                env.exists(name).await,
                "live `{name}` deleted after {killed} kills"
            );
        }
        let raised = raised_clocks(&env, &mut clocks).await;
        assert!(raised.is_empty(), "retention clocks restarted: {raised:?}");
    }
    // Then without kills: every garbage object goes, every live one stays.
    let until = env.now() + 6 * HOUR;
    while env.now() < until {
        env.advance(20 * MINUTE);
        env.sim.reset_listed();
        env.collect_completed(&config).await;
        for (object, times) in env.sim.listed() {
            if managed(&object) {
                assert!(
                    times <= 2,
                    "`{object}` listed {times} times by one whole run"
                );
            }
        }
    }
    for name in &live {
        assert!(env.exists(name).await, "live `{name}` deleted");
    }
    for name in &garbage {
        assert!(!env.exists(name).await, "garbage `{name}` left behind");
    }
    assert!(raised_clocks(&env, &mut clocks).await.is_empty());
    assert!(
        garbage.iter().all(|name| clocks.contains_key(name)),
        "every garbage object's clock was seen: {clocks:?}"
    );
    let state = gc::status(&env.catalog, env.now(), false)
        .await
        .expect("status");
    assert!(state.unfinished_runs().is_empty(), "{state:?}");
    assert!(
        finished > 0 && killed == kills,
        "{killed} kills, {finished} runs finished"
    );
}

/// Per run, with kills in the middle of it: no object is listed more than twice (its own
/// partition's page, once — a page redone after a kill works on the listing kept for it —
/// and the page of the partition before, whose last store page may reach past its end).
#[tokio::test]
async fn a_killed_run_lists_each_object_at_most_twice() {
    let env = Env::open(Backend::Memory, 1602).await;
    let mut rng = StdRng::seed_from_u64(1602);
    for n in 0..60 {
        let name: &'static str =
            Box::leak(format!("indexes/d{:02}/part-{n}", n % 7).into_boxed_str());
        env.put(name, b"garbage").await;
    }
    let config = GcConfig {
        page_size: 4,
        partitions: 3,
        workers: 1,
        ..test_config()
    };
    for _ in 0..5 {
        env.advance(30 * MINUTE);
        env.sim.reset_listed();
        let runs_before = planned(&env).await;
        env.sim.reset_listed();
        // Kill the run several times, then let it finish.
        for attempt in 0.. {
            assert!(attempt < 300, "the run does not progress between kills");
            let point = rng.random_range(1..400);
            if let Some(report) = env.collect_killed_after(&config, point).await {
                match report.expect("run").status {
                    GcStatus::Completed => break,
                    // Killed right after taking the lease for a new run (see above).
                    GcStatus::Skipped => env.advance(16 * MINUTE),
                    other => panic!("{other:?}"),
                }
            }
        }
        // A kill right after a run finished makes the next call start another one.
        let listed = env.sim.listed();
        let runs = planned(&env)
            .await
            .iter()
            .filter(|run| !runs_before.contains(*run))
            .count();
        for (object, times) in &listed {
            if managed(object) {
                assert!(
                    *times as usize <= 2 * runs,
                    "`{object}` listed {times} times in {runs} run(s)"
                );
            }
        }
    }
}

/// The runs that have a plan.
async fn planned(env: &Env) -> Vec<String> {
    env.objects()
        .await
        .into_iter()
        .filter(|name| name.starts_with("_gc/runs/") && name.ends_with("/plan.json"))
        .collect()
}

/// Whether a store key is an object of a managed prefix (not the collector's own files).
fn managed(key: &str) -> bool {
    !key.contains("/_gc/") && (key.contains("/indexes/") || key.contains("/metadata/"))
}
