//! Retention clocks carried on the scan's pages (issue 29, step A): the scan of `indexes/`
//! writes no clock file, and a run reads the clocks the previous finished run carried for
//! the objects it lists, so no clock restarts from run to run — and a carried clock counts
//! no more than a clock file would: only the previous *finished* run's, and never before
//! its object was last written.

use crate::support::gc::{Backend, Env, HOUR, Layout, MINUTE, test_config};
use parqdb_catalog::IndexCatalog;
use parqdb_catalog::gc::{GcConfig, GcReport, GcStatus};

/// The clock files (`o-…`) of the ledger's entries of `indexes/`: none, since the scan's
/// pages carry those clocks.
async fn index_clock_files(env: &Env) -> Vec<String> {
    env.ledger_files()
        .await
        .into_iter()
        .filter(|file| {
            file.starts_with("_gc/ledger/indexes/")
                && file
                    .rsplit('/')
                    .next()
                    .is_some_and(|name| name.starts_with("o-"))
        })
        .collect()
}

/// A collection every 10 minutes until `until`, checking after each that no clock file of
/// `indexes/` was written; the reports.
async fn collect_on_pages_alone(env: &Env, config: &GcConfig, until: i64) -> Vec<GcReport> {
    let mut reports = Vec::new();
    while env.now() < until {
        env.advance(10 * MINUTE);
        let report = env.collect(config).await;
        assert_eq!(report.status, GcStatus::Completed, "{report:?}");
        reports.push(report);
        assert_eq!(index_clock_files(env).await, Vec::<String>::new());
    }
    reports
}

fn tracked(reports: &[GcReport]) -> u64 {
    reports
        .iter()
        .map(|report| report.counts.tracked.objects)
        .sum()
}

#[tokio::test]
async fn clocks_of_indexes_stand_from_run_to_run_on_the_scan_pages_alone() {
    for (backend, seed) in [(Backend::Local, 2901), (Backend::Memory, 2902)] {
        let env = Env::open(backend, seed).await;
        let config = test_config();
        let dropped = Layout::under("dropped/1");
        let (id, _, location) = env.register("dropped", &dropped).await;
        let kept = Layout::under("kept/1");
        let (_, _, kept_location) = env.register("kept", &kept).await;
        env.advance(HOUR);
        env.catalog.drop_index(&id).await.expect("dropped");
        let dropped_at = env.now();

        // Through the retention window nothing goes, though no run writes a clock file
        // for the tables.
        let reports = collect_on_pages_alone(&env, &config, dropped_at + 2 * HOUR - MINUTE).await;
        assert!(
            env.all_exist(&dropped.files()).await,
            "{backend:?}: deleted early"
        );
        // Each unreachable object was tracked once: its clock was carried from run to
        // run, never started again (the tables and the metadata file).
        let garbage = dropped.files().len() as u64 + 1;
        assert_eq!(tracked(&reports), garbage, "{backend:?}: clocks restarted");

        // And after retention the dropped index is collected on time, the live one kept.
        collect_on_pages_alone(&env, &config, dropped_at + 3 * HOUR).await;
        assert!(
            env.none_exist(&dropped.files()).await,
            "{backend:?}: not collected"
        );
        assert!(!env.all_exist(&[env.relative(&location)]).await);
        let mut live = kept.files();
        live.push(env.relative(&kept_location));
        assert!(
            env.all_exist(&live).await,
            "{backend:?}: live files deleted"
        );
    }
}

#[tokio::test]
async fn a_rewritten_object_starts_a_new_clock_whatever_was_carried() {
    let env = Env::open(Backend::Memory, 2903).await;
    let config = test_config();
    let dropped = Layout::under("dropped/1");
    let (id, _, _) = env.register("dropped", &dropped).await;
    env.advance(HOUR);
    env.catalog.drop_index(&id).await.expect("dropped");
    let dropped_at = env.now();
    collect_on_pages_alone(&env, &config, dropped_at + HOUR).await;
    // A writer puts new bytes at one of the garbage names: young again.
    let files = dropped.files();
    let rewritten = files[0].clone();
    env.put(&rewritten, b"rewritten").await;
    let rewritten_at = env.now();
    collect_on_pages_alone(&env, &config, dropped_at + 3 * HOUR).await;
    let others: Vec<String> = files[1..].to_vec();
    assert!(env.none_exist(&others).await, "the rest is collected");
    assert!(
        env.all_exist(std::slice::from_ref(&rewritten)).await,
        "the rewritten object went with the clock carried from before it was written"
    );
    // Its own clock runs from after the rewrite (grace, then retention).
    collect_on_pages_alone(&env, &config, rewritten_at + 3 * HOUR).await;
    assert!(
        env.none_exist(&[rewritten]).await,
        "collected in its own time"
    );
}

#[tokio::test]
async fn a_run_that_never_finished_carries_nothing() {
    let env = Env::open(Backend::Memory, 2904).await;
    let config = test_config();
    let dropped = Layout::under("dropped/1");
    let (id, _, _) = env.register("dropped", &dropped).await;
    env.advance(HOUR);
    env.catalog.drop_index(&id).await.expect("dropped");
    env.advance(10 * MINUTE);
    // A run goes as far as its scans (each carrying the clocks it starts), and is then
    // given up.
    let carried_pages = || async {
        env.objects()
            .await
            .into_iter()
            .filter(|name| name.starts_with("_gc/runs/") && name.ends_with(".carried.json"))
            .count()
    };
    // (Processes that die after more and more requests, each resuming the run.)
    let mut point = 0;
    while carried_pages().await == 0 {
        point += 4;
        assert!(point < 2_000, "the scans never ran");
        if let Some(outcome) = env.collect_killed_after(&config, point).await {
            let report = outcome.expect("a run that was not killed answers");
            match report.status {
                // Killed right after taking the lease for a new run: it stands until it
                // expires.
                GcStatus::Skipped => env.advance(16 * MINUTE),
                status => panic!("the run was not killed before its end: {status:?}"),
            }
        }
    }
    let mut started = 0;
    for file in dropped.files() {
        started += usize::from(env.newest_carried_clock(&file).await.is_some());
    }
    assert!(started > 0, "the given-up run started clocks");
    env.gc(config.clone()).abandon().await.expect("abandoned");
    // The next run trusts no clock of the run given up: it tracks the tables (and the
    // metadata file) again.
    env.advance(10 * MINUTE);
    let report = env.collect_completed(&config).await;
    assert_eq!(
        report.counts.tracked.objects,
        dropped.files().len() as u64 + 1,
        "{report:?}"
    );
}

/// `gc status --ledger` counts what the pages carry: every unreachable object whose clock
/// runs, though the scan wrote no clock file for the tables.
#[tokio::test]
async fn the_status_of_the_ledger_counts_the_clocks_the_pages_carry() {
    let env = Env::open(Backend::Memory, 2905).await;
    let config = test_config();
    let dropped = Layout::under("dropped/1");
    let (id, _, _) = env.register("dropped", &dropped).await;
    env.register("kept", &Layout::under("kept/1")).await;
    env.advance(HOUR);
    env.catalog.drop_index(&id).await.expect("dropped");
    env.advance(10 * MINUTE);
    let report = env.collect_completed(&config).await;
    let garbage = dropped.files().len() as u64 + 1;
    assert_eq!(report.counts.tracked.objects, garbage, "{report:?}");
    assert_eq!(index_clock_files(&env).await, Vec::<String>::new());
    let state = parqdb_catalog::gc::status(&env.catalog, env.now(), true)
        .await
        .expect("status");
    let state = serde_json::to_value(&state).expect("json");
    assert_eq!(
        state["ledger"]["tracked-objects"],
        serde_json::json!(garbage),
        "{state}"
    );
}
