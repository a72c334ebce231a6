//! Event-driven refresh under bursts (issue 21): a burst of source writes — made while
//! concurrent workers build, delivered late and out of order, some twice — ends in few
//! commits whose final snapshot contains every write, with no state lost and none
//! published twice; on local files and on the S3-compatible server. Full-size numbers:
//! `cargo run --release --example refresh_burst` (BENCHMARKS.md).
#![allow(clippy::int_plus_one)] // `deliveries + workers - 1` spells out the bound it checks

use super::refresh_burst::{Burst, catalog, redeliver, with_runner};

fn burst(events: usize, backend: &str) -> Burst {
    Burst {
        events,
        duplicates: 0.1,
        batch: 10,
        workers: 4,
        seed: 21,
        clock_skew_ms: 5,
        write_every_ms: 1,
        backend: backend.into(),
        no_baseline: true,
    }
}

fn check(outcome: &super::refresh_burst::Outcome, burst: &Burst) {
    assert!(outcome.final_contains_every_write, "{outcome:?}");
    assert_eq!(outcome.lost_states, 0, "{outcome:?}");
    assert_eq!(outcome.duplicate_or_stale_snapshots, 0, "{outcome:?}");
    let batches = (burst.events as f64 * 1.1 / burst.batch as f64).ceil() as usize;
    // At most one build and one commit per delivered batch, far fewer than one per event;
    // except that workers racing to create the index each build once for their own index
    // uuid, and every loser of that race builds again on top of the winner's snapshot.
    assert!(
        outcome.builds < outcome.deliveries + burst.workers,
        "{outcome:?}"
    );
    assert!(outcome.commits <= outcome.builds, "{outcome:?}");
    assert!(
        outcome.commits >= 1 && outcome.commits <= batches,
        "{outcome:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_burst_on_local_files_publishes_the_newest_state_once() {
    let burst = burst(200, "local");
    let outcome = with_runner(&catalog("local").await, &burst).await;
    check(&outcome, &burst);
}
#[tokio::test]
async fn a_redelivered_burst_builds_and_commits_nothing() {
    let burst = burst(40, "local");
    let catalog = catalog("local").await;
    let first = with_runner(&catalog, &burst).await;
    check(&first, &burst);
    let again = redeliver(&catalog, &burst, first.delivered.clone()).await;
    assert_eq!((again.builds, again.commits), (0, 0), "{again:?}");
    assert_eq!(again.deliveries, first.delivered.len());
    assert!(again.final_contains_every_write);
}

mod runner {
    use std::sync::Arc;

    use parqdb_catalog::Catalog;
    use parqdb_catalog::Publisher;
    use parqdb_catalog::SnapshotContents;
    use parqdb_catalog::Warehouse;
    use parqdb_catalog::refresh::{
        BuildRequest, IndexBuilder, PlaceholderBuilder, READ_START, RefreshOutcome, RefreshRunner,
        Routes, SourceChange,
    };
    use parqdb_catalog::store::MemoryStore;
    use parqdb_catalog::{Error, ErrorKind, ManualClock, Result};

    use super::super::refresh_burst::docs;

    /// A catalog whose clock (the runners' read starts) is `clock`.
    fn catalog(clock: &Arc<ManualClock>) -> Catalog {
        let warehouse = Warehouse::in_memory("memory://refresh/wh").expect("warehouse");
        Catalog::builder(Arc::new(MemoryStore::new()), warehouse)
            .clock(clock.clone())
            .build()
    }

    fn routes() -> Routes {
        Routes::new()
            .route("s3://lake/docs/", docs())
            .expect("route")
    }

    /// A runner over `catalog` with [`routes`] and `builder`.
    fn docs_runner<B: IndexBuilder>(catalog: &Catalog, builder: B) -> RefreshRunner<B> {
        RefreshRunner::new(Publisher::for_catalog(catalog), routes(), builder)
    }

    /// A write of `docs/part-<n>.parquet` that S3 finished at `time_ms`.
    fn change(n: u32, sequencer: &str, time_ms: i64) -> SourceChange {
        SourceChange::new("lake", format!("docs/part-{n}.parquet"), sequencer, time_ms)
            .expect("change")
    }

    #[tokio::test]
    async fn an_older_state_delivered_late_is_already_published() {
        let clock = Arc::new(ManualClock::new(100_000));
        let catalog = catalog(&clock);
        let runner = docs_runner(&catalog, PlaceholderBuilder);
        let newer = runner
            .run(vec![change(2, "20", 50_000), change(1, "10", 40_000)])
            .await;
        assert!(matches!(
            newer.indexes[0].outcome,
            RefreshOutcome::Published {
                created: true,
                read_start_ms: 100_000,
                ..
            }
        ));
        assert_eq!(newer.indexes[0].newest, change(2, "20", 50_000));
        clock.advance(1_000);
        let late = runner.run(vec![change(1, "10", 40_000)]).await;
        assert_eq!((late.builds, late.commits), (0, 0));
        assert!(matches!(
            late.indexes[0].outcome,
            RefreshOutcome::AlreadyPublished {
                read_start_ms: 100_000,
                ..
            }
        ));
        // A write S3 finished within the allowance (2 s) of that read start may not have
        // been read: it is built, whatever its sequencer.
        let close = runner.run(vec![change(3, "01", 98_500)]).await;
        assert_eq!((close.builds, close.commits), (1, 1), "{close:?}");
    }

    #[tokio::test]
    async fn a_change_stamped_too_far_ahead_of_the_clock_is_delivered_again() {
        let clock = Arc::new(ManualClock::new(100_000));
        let catalog = catalog(&clock);
        let runner = docs_runner(&catalog, PlaceholderBuilder);
        // 2 s allowance: a change may be up to 2 s ahead (the build then waits up to 4 s);
        // 10 s ahead breaks the clock assumption.
        let report = runner
            .run(vec![change(1, "01", 50_000), change(2, "02", 110_000)])
            .await;
        assert_eq!(report.failed_changes(), vec![0, 1]);
        assert!(matches!(
            &report.indexes[0].outcome,
            RefreshOutcome::Failed { code, .. } if code == "INVALID_REQUEST"
        ));
        assert_eq!((report.builds, report.commits), (0, 0));
        assert!(
            docs_runner(&catalog, PlaceholderBuilder)
                .with_clock_skew(std::time::Duration::from_secs(3600))
                .is_err()
        );
    }

    #[tokio::test]
    async fn unrouted_changes_and_failed_builds_are_reported_not_dropped() {
        struct Failing;
        #[async_trait::async_trait]
        impl IndexBuilder for Failing {
            async fn build(&self, _: &BuildRequest<'_>) -> Result<SnapshotContents> {
                Err(Error::new(ErrorKind::StoreUnavailable, "source unreadable"))
            }
        }
        let clock = Arc::new(ManualClock::new(100_000));
        let catalog = catalog(&clock);
        let runner = docs_runner(&catalog, Failing);
        let other = SourceChange::new("lake", "elsewhere/x.parquet", "5", 0).expect("change");
        let report = runner
            .run(vec![change(1, "1", 0), other, change(2, "2", 0)])
            .await;
        assert_eq!(report.unrouted, vec![1]);
        assert_eq!(report.failed_changes(), vec![0, 2]);
        assert!(matches!(
            &report.indexes[0].outcome,
            RefreshOutcome::Failed { code, retryable: true, .. } if code == "STORE_UNAVAILABLE"
        ));
        assert_eq!(report.commits, 0);
    }

    #[tokio::test]
    async fn a_build_that_loses_to_a_newer_state_is_discarded() {
        /// Publishes a newer state (through another runner, reading later) while building.
        struct Overtaken(Catalog, Arc<ManualClock>);
        #[async_trait::async_trait]
        impl IndexBuilder for Overtaken {
            async fn build(&self, request: &BuildRequest<'_>) -> Result<SnapshotContents> {
                self.1.set(40_000);
                let newer = docs_runner(&self.0, PlaceholderBuilder);
                let report = newer.run(vec![change(9, "90", 35_000)]).await;
                assert_eq!(report.commits, 1, "{report:?}");
                PlaceholderBuilder.build(request).await
            }
        }
        let clock = Arc::new(ManualClock::new(10_000));
        let catalog = catalog(&clock);
        let seed = docs_runner(&catalog, PlaceholderBuilder);
        assert_eq!(seed.run(vec![change(1, "10", 1_000)]).await.commits, 1);
        clock.set(30_000);
        let runner = docs_runner(&catalog, Overtaken(catalog.clone(), clock.clone()));
        let report = runner.run(vec![change(5, "50", 20_000)]).await;
        assert_eq!((report.builds, report.commits), (1, 0), "{report:?}");
        assert!(matches!(
            report.indexes[0].outcome,
            RefreshOutcome::Superseded {
                read_start_ms: Some(40_000),
                ..
            }
        ));
        let (_, current) = Publisher::for_catalog(&catalog)
            .load_current(&docs())
            .await
            .expect("index");
        assert_eq!(
            current.snapshots().len(),
            2,
            "the discarded build was never committed"
        );
        assert_eq!(
            current.current_snapshot().contents().summary[READ_START],
            "40000"
        );
    }
}

/// The tests on the S3-compatible server (`PARQDB_TEST_S3_ENDPOINT`): the whole suite
/// runs them, the fast tier does not (`tests/it/tiers.txt`).
mod s3 {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn a_burst_on_the_s3_compatible_server_publishes_the_newest_state_once() {
        let burst = burst(100, "s3");
        let outcome = with_runner(&catalog("s3").await, &burst).await;
        check(&outcome, &burst);
    }
}
