//! The garbage collector at scale, CI-sized (issue 16): runs driven step by step as worker
//! processes (`parqdb-catalog gc step`, as the `gc-cycle` state machine invokes the `gc`
//! function) against a synthetic S3-compatible server whose warehouse is mostly generated
//! (`tests/it/support/gc_scale`). The full-size numbers come from
//! `examples/gc_scale_bench.rs` (BENCHMARKS.md, "Issue 16: GC at any scale").
//!
//! * kill anywhere: workers killed with SIGKILL at random points (a fixed seed), each
//!   killed step invoked again; every run still completes, nothing live is deleted, no
//!   retention clock restarts, every object is listed once or twice per run, and all the
//!   garbage is deleted in the end;
//! * scale-out: the same warehouse scanned by 1 and by 4 workers decides the same.
//!
//! Nothing here asserts a time.

use std::path::PathBuf;
use std::time::Duration;

use crate::support::gc_scale::driver::{Driver, Killer, RunStats, Setup, Workers, aws_env, setup};
use crate::support::gc_scale::server::{Census, Shape};

const LEASE: Duration = Duration::from_secs(6);

fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_parqdb-catalog"))
}

fn shape(objects: u64) -> Shape {
    Shape {
        bucket: "scale".into(),
        root: "wh".into(),
        objects,
        per_dir: 25,
        live_every: 100,
        mtime_ms: 1_600_000_000_000,
        latency: Duration::ZERO,
    }
}

/// Workers with a short retention, grace and condemnation delay (forced): the first run
/// tracks (and may condemn), a later one deletes.
fn workers(setup: &Setup, partitions: usize) -> Workers {
    let mut env = aws_env(&setup.server);
    for (name, value) in [
        ("PARQDB_GC_RETENTION", "1s".to_owned()),
        ("PARQDB_GC_GRACE", "1s".to_owned()),
        ("PARQDB_GC_CONDEMN_DELAY", "1s".to_owned()),
        ("PARQDB_GC_MAX_CLOCK_SKEW", "0s".to_owned()),
        ("PARQDB_GC_FORCE", "true".to_owned()),
        ("PARQDB_GC_PAGE_SIZE", "1000".to_owned()),
        ("PARQDB_GC_PARTITIONS", partitions.to_string()),
        ("PARQDB_GC_IO_CONCURRENCY", "16".to_owned()),
        ("PARQDB_GC_LEASE", format!("{}s", LEASE.as_secs())),
        ("PARQDB_GC_MAX_DELETES", "10000000".to_owned()),
    ] {
        env.push((name.to_owned(), value));
    }
    Workers {
        bin: bin(),
        warehouse: setup.server.warehouse(),
        catalog: setup.catalog.clone(),
        env,
        budget: Some("1s".into()),
        scratch: setup.dir.clone(),
        faketime: None,
    }
}

fn check_run(stats: &RunStats) {
    let json = stats.to_json();
    assert_eq!(
        stats.violations.live_deleted, 0,
        "live objects deleted: {json}"
    );
    assert_eq!(
        stats.violations.clock_restarts, 0,
        "a clock restarted: {json}"
    );
    assert_eq!(stats.violations.recondemned, 0, "condemned twice: {json}");
    assert_eq!(stats.census.live_deleted, 0, "{json}");
    assert_eq!(stats.census.live_tracked, 0, "live objects tracked: {json}");
    assert_eq!(stats.census.condemned_untracked, 0, "{json}");
    let [never, _, _, more] = stats.listed;
    assert_eq!(never, 0, "objects the scan never listed: {json}");
    assert_eq!(more, 0, "objects listed more than twice in one run: {json}");
    assert_eq!(
        stats.report["status"], "completed",
        "the run did not complete: {json}"
    );
}

#[test]
fn killed_anywhere_the_runs_complete_and_delete_only_garbage() {
    let dir = tempfile::tempdir().expect("dir");
    let setup = setup(shape(5_000), &bin(), dir.path(), 2);
    assert_eq!(setup.indexes, 2);
    // Retention counts from the first walk that finds an object unreachable.
    std::thread::sleep(Duration::from_millis(1200));
    let driver = Driver {
        server: &setup.server,
        workers: workers(&setup, 4),
        k: 4,
        killer: Killer::new(10, 0.3, 16),
        lease: LEASE,
        verbose: false,
        scan_limit: None,
    };
    let mut runs = Vec::new();
    // Track, condemn, delete; and release the deletion records (their ledger files) the
    // grace period after the deletes: each delete step releases its share until its budget
    // is spent, so with kills and a loaded machine that takes a few more runs.
    for _ in 0..10 {
        let stats = driver.run(Duration::from_secs(300));
        eprintln!("{}", stats.to_json());
        check_run(&stats);
        runs.push(stats);
        let census = setup.server.census();
        if census.deleted == census.garbage && census.overflow_ledger_files == 0 {
            break;
        }
        // Past the condemnation delay before the next run.
        std::thread::sleep(Duration::from_millis(1200));
    }
    let census: Census = setup.server.census();
    let summary: Vec<_> = runs.iter().map(RunStats::to_json).collect();
    assert_eq!(census.live, 50, "{summary:?}");
    assert_eq!(census.garbage, 4_950, "{summary:?}");
    assert_eq!(
        census.deleted, census.garbage,
        "all garbage deleted, its ledger cleared: {census:?} {summary:?}"
    );
    assert_eq!(census.overflow_ledger_files, 0, "{census:?}");
    assert!(
        driver.killer.kills() >= 5,
        "the kills happened: {} {summary:?}",
        driver.killer.kills()
    );
    // A killed invocation's ledger writes are in no report (its page was never written),
    // so the reports' `tracked` may fall short; deletions are confirmed by the pages.
    let tracked: u64 = runs.iter().map(|r| r.count("tracked")).sum();
    let deleted: u64 = runs.iter().map(|r| r.count("deleted")).sum();
    assert!(tracked <= 4_950, "{summary:?}");
    assert_eq!(deleted, 4_950, "{summary:?}");
}

#[test]
fn one_or_four_workers_decide_the_same() {
    let mut decided = Vec::new();
    for k in [1, 4] {
        let dir = tempfile::tempdir().expect("dir");
        let setup = setup(shape(3_000), &bin(), dir.path(), 1);
        let driver = Driver {
            server: &setup.server,
            workers: workers(&setup, 4),
            k,
            killer: Killer::none(),
            lease: LEASE,
            verbose: false,
            scan_limit: None,
        };
        let stats = driver.run(Duration::from_secs(300));
        check_run(&stats);
        assert_eq!(stats.partitions, 4);
        let [_, once, twice, _] = stats.listed;
        assert_eq!((once, twice), (3_000, 0), "{}", stats.to_json());
        // At the cost of the listing: one ledger write per object whose clock starts,
        // and a fixed amount of bookkeeping per run and partition, never a request per
        // object to read the ledger (one per object of the earlier ledger reads made it
        // three per object).
        let tracked = stats.count("tracked");
        assert!(
            stats.requests.total() <= tracked + 1_000,
            "{tracked} tracked, {} requests: {}",
            stats.requests.total(),
            stats.to_json()
        );
        decided.push((
            stats.count("scanned"),
            stats.count("reachable"),
            stats.count("tracked"),
            stats.count("deleted"),
            setup.server.census(),
        ));
    }
    assert_eq!(decided[0], decided[1]);
    assert_eq!(decided[0].2, 2_950);
}

/// A whole cycle's requests for `objects` objects in directories of `per_dir`, one
/// partition and one worker: track, condemn, delete, release, each its own run.
fn cycle_requests(objects: u64, per_dir: u64) -> (u64, Census, Vec<serde_json::Value>) {
    let dir = tempfile::tempdir().expect("dir");
    let setup = setup(
        Shape {
            per_dir,
            ..shape(objects)
        },
        &bin(),
        dir.path(),
        1,
    );
    // One invocation per step: the budget's stops are a fixed cost per invocation.
    let workers = Workers {
        budget: None,
        ..workers(&setup, 1)
    };
    let driver = Driver {
        server: &setup.server,
        workers,
        k: 1,
        killer: Killer::none(),
        lease: LEASE,
        verbose: false,
        scan_limit: None,
    };
    std::thread::sleep(Duration::from_millis(1200));
    let mut runs = Vec::new();
    for _ in 0..4 {
        let stats = driver.run(Duration::from_secs(300));
        check_run(&stats);
        runs.push(stats);
        // Past the retention, the condemnation delay and the grace before the next run.
        std::thread::sleep(Duration::from_millis(1200));
    }
    let total = runs.iter().map(|run| run.requests.total()).sum();
    let summary = runs.iter().map(RunStats::to_json).collect();
    (total, setup.server.census(), summary)
}

/// Issue 29: the collector's bookkeeping is per listing page, not per object. Twice the
/// garbage in directories of 1,000 costs a whole cycle (four runs: track, condemn,
/// delete, release) a few requests per 1,000 more objects and run (the listing, the
/// ledger's listing, the page's files, a marker per directory and the `DeleteObjects`),
/// never one per object: a regression to a request per object (a `c-` file, a ledger
/// lookup) would add 1,000 per 1,000.
#[test]
fn a_whole_cycle_costs_requests_per_page_not_per_object() {
    let (small, small_census, small_runs) = cycle_requests(4_000, 1_000);
    let (large, large_census, large_runs) = cycle_requests(8_000, 1_000);
    for (census, runs) in [(small_census, &small_runs), (large_census, &large_runs)] {
        assert_eq!(census.deleted, census.garbage, "{census:?} {runs:?}");
        assert_eq!(census.overflow_ledger_files, 0, "{census:?} {runs:?}");
    }
    let more_garbage = large_census.garbage - small_census.garbage;
    let more_requests = large.saturating_sub(small);
    // Per 1,000 more garbage objects and run: at most 15 requests (measured: about 10).
    assert!(
        more_requests * 1_000 <= more_garbage * 4 * 15,
        "{more_requests} more requests for {more_garbage} more garbage objects: \
         {small_runs:?} {large_runs:?}"
    );
}
