//! Red team 16c: attacks on commits 2fed28c and a4be2e9 (`Known` = previous ∩ clock
//! journal; superseded runs). Late `u-`/`c-` writes by the previous run's own paused
//! process, late table clocks, reincarnation churn. A failing test is a bug; it is kept
//! as it is.

use std::sync::Arc;

use crate::support::gc::hooked_store::{
    HookedStore, collect_in_background, process_over, resume_and_join,
};
use crate::support::gc::{Backend, Env, HOUR, Layout, MINUTE, test_config};
use parqdb_catalog::IndexCatalog;
use parqdb_catalog::gc::GcStatus;

/// When the paused process's late put lands, relative to the run it belongs to (which
/// another process goes on with and finishes).
#[derive(Debug, Clone, Copy)]
enum Land {
    /// After the run's `.done` mark (no later run finished: the clock's journal is the
    /// previous finished run itself — `Known::for_clock`'s shortcut).
    AfterDone,
    /// After the run's sweep, before its `.done` mark.
    BeforeDone,
}

/// Process 1 plans run S while the old metadata file of `again/1` is unreachable and
/// pauses at the put `pause_on` names; its lease expires,
/// the file is registered, and process 2 goes on with S and finishes it (the late put
/// lands as `land` says). Then the file loses reachability by a commit, and for the
/// retention window (2 h) every object in `watched` must stay.
async fn late_write_by_the_previous_runs_own_process(
    seed: u64,
    pause_on: impl Fn(&str) -> LateWrite,
    watched_of: impl Fn(&str) -> Vec<String>,
    land: Land,
    warm_up: bool,
) {
    let env = Env::open(Backend::Memory, seed).await;
    let config = test_config();
    env.register("keep", &Layout::under("keep/1")).await;
    let layout = Layout::under("again/1");
    let (metadata, location) = env.new_index(&layout).await;
    let md = env.relative(&location);
    env.advance(HOUR);
    if warm_up {
        // A first run tracks the file; retention elapses (the next run condemns).
        env.collect_completed(&config).await;
        env.advance(3 * HOUR);
    }
    let late = pause_on(&md);
    let hooked = Arc::new(
        HookedStore::new(Arc::new(env.sim.clone()))
            .pause_on_put(move |key, body| late.matches(key, body)),
    );
    let slow = process_over(&env, hooked.clone(), seed + 1000, &config);
    let process1 = collect_in_background(&env, slow);
    hooked.paused().await;

    env.advance(20 * MINUTE);
    let again = env.publish("again", &layout, &location).await;
    env.advance(MINUTE);
    match land {
        Land::AfterDone => {
            env.collect_completed(&config).await;
            resume_and_join(&hooked, process1).await;
        }
        Land::BeforeDone => {
            let hooked2 = Arc::new(
                HookedStore::new(Arc::new(env.sim.clone()))
                    .pause_on(|k| k.contains("_gc/journal/") && k.ends_with(".done")),
            );
            let second = process_over(&env, hooked2.clone(), seed + 2000, &config);
            let process2 = collect_in_background(&env, second);
            hooked2.paused().await;
            resume_and_join(&hooked, process1).await;
            hooked2.resume();
            let s = process2
                .await
                .expect("joined")
                .expect("process 2 finishes S");
            assert_eq!(s.status, GcStatus::Completed, "{s:?}");
        }
    }
    let watched = watched_of(&md);
    for object in &watched {
        eprintln!(
            "entry of {object} after the late write: {:?}",
            env.entry_of(object).await
        );
    }
    eprintln!("journals: {:?}", env.journal_files().await);

    env.lose_and_keep_through_retention(&again, &metadata, &location, &watched, async || {
        env.collect(&config).await;
    })
    .await;
}

/// The late put.
enum LateWrite {
    /// Of a ledger file whose key contains this.
    Ledger(String),
    /// Of a scan page's clocks file that carries the clock of this table.
    Carried(&'static str),
}

impl LateWrite {
    fn matches(&self, key: &str, body: &[u8]) -> bool {
        match self {
            LateWrite::Ledger(part) => key.contains(part.as_str()),
            LateWrite::Carried(table) => {
                key.ends_with(".carried.json")
                    && String::from_utf8_lossy(body).contains(&format!("\"{table}\""))
            }
        }
    }
}

fn clock_of(object: &str) -> LateWrite {
    LateWrite::Ledger(format!("_gc/ledger/{object}/o-"))
}

const TABLE: &str = "indexes/again/1/ivf_postings/part-0.parquet";

// 1. Late `u-` of a metadata file by the previous run's own paused process.

#[tokio::test]
async fn late_metadata_clock_of_the_previous_run_landing_after_its_done() {
    late_write_by_the_previous_runs_own_process(
        16201,
        clock_of,
        |md| vec![md.to_owned()],
        Land::AfterDone,
        false,
    )
    .await;
}

#[tokio::test]
async fn late_metadata_clock_of_the_previous_run_landing_before_its_done() {
    late_write_by_the_previous_runs_own_process(
        16202,
        clock_of,
        |md| vec![md.to_owned()],
        Land::BeforeDone,
        false,
    )
    .await;
}

// 2. Late clocks of an index table, on its scan page (no uuid: no incarnation check;
//    rule (P) only).

#[tokio::test]
async fn late_table_clock_of_the_previous_run_landing_after_its_done() {
    late_write_by_the_previous_runs_own_process(
        16203,
        |_| LateWrite::Carried(TABLE),
        |md| vec![md.to_owned(), TABLE.to_owned()],
        Land::AfterDone,
        false,
    )
    .await;
}

#[tokio::test]
async fn late_table_clock_of_the_previous_run_landing_before_its_done() {
    late_write_by_the_previous_runs_own_process(
        16204,
        |_| LateWrite::Carried(TABLE),
        |md| vec![md.to_owned(), TABLE.to_owned()],
        Land::BeforeDone,
        false,
    )
    .await;
}

// 3. Late `c-` (a condemnation written after the object was published again and its
//    entry swept).

#[tokio::test]
async fn late_condemnation_of_the_previous_run_landing_after_its_done() {
    late_write_by_the_previous_runs_own_process(
        16205,
        |md| LateWrite::Ledger(format!("_gc/ledger/{md}/c-")),
        |md| vec![md.to_owned(), TABLE.to_owned()],
        Land::AfterDone,
        true,
    )
    .await;
}

#[tokio::test]
async fn late_condemnation_of_the_previous_run_landing_before_its_done() {
    late_write_by_the_previous_runs_own_process(
        16206,
        |md| LateWrite::Ledger(format!("_gc/ledger/{md}/c-")),
        |md| vec![md.to_owned(), TABLE.to_owned()],
        Land::BeforeDone,
        true,
    )
    .await;
}

// 4. Liveness: with `strict_reincarnation` (the default), a name that is dropped and
//    registered again between every two runs raises every unreachable metadata file's
//    clock in the whole warehouse, every run: nothing under `metadata/` (nor the tables
//    its files name, rule (P)) is ever collected.

async fn name_reuse(seed: u64, churn: bool) {
    let env = Env::open(Backend::Memory, seed).await;
    let config = test_config();
    env.register("keep", &Layout::under("keep/1")).await;
    let (old, metadata, location) = env.register("old", &Layout::under("old/1")).await;
    let old_md = env.relative(&location);
    let (_, successor) = env
        .successor(&metadata, &Layout::under("old/2"), None)
        .await;
    env.catalog
        .commit(
            &old,
            Some(&Layout::under("old/1").source),
            &location,
            &successor,
        )
        .await
        .expect("committed");
    let lost_at = env.now();
    let scratch = env.id("scratch").await;
    env.register("scratch", &Layout::under("scratch/0")).await;
    for cycle in 1..=12 {
        env.advance(30 * MINUTE);
        // A nightly-rebuild style job: drop the scratch index and create it again.
        if churn {
            env.catalog.drop_index(&scratch).await.expect("dropped");
            env.register("scratch", &Layout::under(&format!("scratch/{cycle}")))
                .await;
        }
        env.advance(30 * MINUTE);
        env.collect_completed(&config).await;
    }
    eprintln!("entry: {:?}", env.entry_of(&old_md).await);
    assert!(
        !env.exists(&old_md).await,
        "{} h after losing reachability (retention 2 h, hourly runs) the old metadata file \
         is still there: every run's reincarnation raised its clock again",
        (env.now() - lost_at) / HOUR
    );
}

#[tokio::test]
async fn a_name_reused_between_every_two_runs_stops_collection_forever() {
    name_reuse(16207, true).await;
}

/// Control: the same history without the reuse collects the file.
#[tokio::test]
async fn control_without_name_reuse_the_old_metadata_file_is_collected() {
    name_reuse(16208, false).await;
}
