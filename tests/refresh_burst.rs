//! Event-driven refresh under bursts (issue 21): a burst of source writes — shuffled, some
//! delivered twice, in batches handled by concurrent workers — ends in few commits whose
//! final snapshot is the newest write, with no state lost and none published twice; on
//! local files and on the S3-compatible server. Full-size numbers:
//! `cargo run --release --example refresh_burst` (BENCHMARKS.md).

#[path = "../examples/refresh_burst.rs"]
#[allow(dead_code)]
mod refresh_burst;

use refresh_burst::{Burst, catalog, with_runner};

fn burst(events: usize, backend: &str) -> Burst {
    Burst {
        events,
        duplicates: 0.1,
        batch: 10,
        workers: 4,
        seed: 21,
        backend: backend.into(),
        no_baseline: true,
    }
}

fn check(outcome: &refresh_burst::Outcome, burst: &Burst) {
    assert!(outcome.final_is_newest, "{outcome:?}");
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

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_burst_on_the_s3_compatible_server_publishes_the_newest_state_once() {
    let burst = burst(100, "s3");
    let outcome = with_runner(&catalog("s3").await, &burst).await;
    check(&outcome, &burst);
}

#[tokio::test]
async fn a_redelivered_burst_builds_and_commits_nothing() {
    let burst = burst(40, "local");
    let catalog = catalog("local").await;
    let first = with_runner(&catalog, &burst).await;
    check(&first, &burst);
    let again = with_runner(&catalog, &burst).await;
    assert_eq!((again.builds, again.commits), (0, 0), "{again:?}");
    assert!(again.final_is_newest);
}

mod runner {
    use std::sync::Arc;

    use parqdb_catalog::catalog::Catalog;
    use parqdb_catalog::metadata::SnapshotContents;
    use parqdb_catalog::publish::Publisher;
    use parqdb_catalog::refresh::{
        BuildRequest, IndexBuilder, PlaceholderBuilder, RefreshOutcome, RefreshRunner, Routes,
        SourceChange,
    };
    use parqdb_catalog::store::memory::MemoryStore;
    use parqdb_catalog::warehouse::Warehouse;
    use parqdb_catalog::{Error, ErrorKind, Result};

    use super::refresh_burst::docs;

    fn catalog() -> Catalog {
        let warehouse = Warehouse::in_memory("memory://refresh/wh").expect("warehouse");
        Catalog::builder(Arc::new(MemoryStore::new()), warehouse).build()
    }

    fn routes() -> Routes {
        Routes::new()
            .route("s3://lake/docs/", docs())
            .expect("route")
    }

    fn change(n: u32, sequencer: &str) -> SourceChange {
        SourceChange::new("lake", format!("docs/part-{n}.parquet"), sequencer).expect("change")
    }

    #[tokio::test]
    async fn an_older_state_delivered_late_is_already_published() {
        let catalog = catalog();
        let runner = RefreshRunner::new(
            Publisher::for_catalog(&catalog),
            routes(),
            PlaceholderBuilder,
        );
        let newer = runner.run(vec![change(2, "20"), change(1, "10")]).await;
        assert!(matches!(
            newer.indexes[0].outcome,
            RefreshOutcome::Published { created: true, .. }
        ));
        assert_eq!(newer.indexes[0].newest, change(2, "20"));
        let late = runner.run(vec![change(1, "10")]).await;
        assert_eq!((late.builds, late.commits), (0, 0));
        assert!(matches!(
            late.indexes[0].outcome,
            RefreshOutcome::AlreadyPublished { .. }
        ));
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
        let catalog = catalog();
        let runner = RefreshRunner::new(Publisher::for_catalog(&catalog), routes(), Failing);
        let other = SourceChange::new("lake", "elsewhere/x.parquet", "5").expect("change");
        let report = runner
            .run(vec![change(1, "1"), other, change(2, "2")])
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
        /// Publishes a newer state (through another runner) while building.
        struct Overtaken(Catalog);
        #[async_trait::async_trait]
        impl IndexBuilder for Overtaken {
            async fn build(&self, request: &BuildRequest<'_>) -> Result<SnapshotContents> {
                let newer = RefreshRunner::new(
                    Publisher::for_catalog(&self.0),
                    routes(),
                    PlaceholderBuilder,
                );
                let report = newer.run(vec![change(9, "90")]).await;
                assert_eq!(report.commits, 1, "{report:?}");
                PlaceholderBuilder.build(request).await
            }
        }
        let catalog = catalog();
        let seed = RefreshRunner::new(
            Publisher::for_catalog(&catalog),
            routes(),
            PlaceholderBuilder,
        );
        assert_eq!(seed.run(vec![change(1, "10")]).await.commits, 1);
        let runner = RefreshRunner::new(
            Publisher::for_catalog(&catalog),
            routes(),
            Overtaken(catalog.clone()),
        );
        let report = runner.run(vec![change(5, "50")]).await;
        assert_eq!((report.builds, report.commits), (1, 0), "{report:?}");
        assert!(matches!(
            report.indexes[0].outcome,
            RefreshOutcome::Superseded { .. }
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
    }
}
