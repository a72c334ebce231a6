//! A burst of source changes through the refresh runner, against the one-publish-per-event
//! baseline: how many builds and commits, how long, and whether any state was lost.
//!
//! ```text
//! cargo run --release --example refresh_burst -- --events 500
//! PARQDB_TEST_S3_ENDPOINT=http://127.0.0.1:9000 cargo run --release --example refresh_burst -- --backend s3
//! ```
//!
//! A burst is `--events` writes to one source table (increasing sequencers), shuffled,
//! with `--duplicates` of them delivered twice, cut into batches of `--batch` and
//! delivered to `--workers` concurrent workers (each its own runner and publisher over the
//! same catalog). A batch whose index failed is delivered again, as SQS would. Prints one
//! JSON object with the runner's and the baseline's numbers and the checks.
#![allow(clippy::disallowed_methods)] // an example may read the wall clock and draw random ids (unique names)

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use clap::Parser;
use parqdb_catalog::catalog::Catalog;
use parqdb_catalog::metadata::IndexMetadata;
use parqdb_catalog::publish::Publisher;
use parqdb_catalog::refresh::{
    BuildRequest, IndexBuilder, PlaceholderBuilder, RefreshRunner, Routes, SOURCE_POSITION,
    SourceChange, SourcePosition, published_position,
};
use parqdb_catalog::{IndexIdentifier, Namespace, Result};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use serde::Serialize;
use tokio::sync::Mutex;

/// The burst's shape.
#[derive(Debug, Clone, Parser)]
pub struct Burst {
    /// Source writes in the burst.
    #[arg(long, default_value_t = 500)]
    pub events: usize,
    /// Fraction of the writes delivered twice.
    #[arg(long, default_value_t = 0.1)]
    pub duplicates: f64,
    /// Events per delivered batch.
    #[arg(long, default_value_t = 10)]
    pub batch: usize,
    /// Concurrent workers.
    #[arg(long, default_value_t = 8)]
    pub workers: usize,
    /// Shuffle seed.
    #[arg(long, default_value_t = 7)]
    pub seed: u64,
    /// `local` (a temporary directory) or `s3` (a new bucket on PARQDB_TEST_S3_ENDPOINT).
    #[arg(long, default_value = "local")]
    pub backend: String,
    /// Skip the one-publish-per-event baseline.
    #[arg(long)]
    pub no_baseline: bool,
}

/// What one way of handling the burst did.
#[derive(Debug, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct Outcome {
    /// Batches delivered (redeliveries included).
    pub deliveries: usize,
    /// Builds run.
    pub builds: usize,
    /// Snapshots committed.
    pub commits: usize,
    /// Wall time in milliseconds.
    pub wall_ms: u128,
    /// Whether the final snapshot is built from the newest write.
    pub final_is_newest: bool,
    /// Writes newer than every published state (must be 0).
    pub lost_states: usize,
    /// Snapshots whose position does not grow along the chain (must be 0).
    pub duplicate_or_stale_snapshots: usize,
}

/// The burst's changes in delivery order, and the newest position.
pub fn changes(burst: &Burst) -> (Vec<SourceChange>, SourcePosition) {
    let mut rng = StdRng::seed_from_u64(burst.seed);
    let writes: Vec<SourceChange> = (0..burst.events)
        .map(|n| {
            SourceChange::new(
                "lake",
                format!("docs/part-{n:05}.parquet"),
                format!("{:018X}", 0x0061_F082_9932_9D00_u64 + 3 * n as u64),
            )
            .expect("change")
            .with_size(Some(1 << 20))
        })
        .collect();
    let newest = writes
        .iter()
        .map(SourceChange::position)
        .max()
        .expect("events");
    let mut delivered = writes.clone();
    let duplicates = (burst.events as f64 * burst.duplicates).round() as usize;
    delivered.extend((0..duplicates).map(|_| writes[rng.random_range(0..writes.len())].clone()));
    delivered.shuffle(&mut rng);
    (delivered, newest)
}

/// Counts builds while delegating to the placeholder builder.
struct Counting<'a>(&'a AtomicUsize);

#[async_trait::async_trait]
impl IndexBuilder for Counting<'_> {
    async fn build(
        &self,
        request: &BuildRequest<'_>,
    ) -> Result<parqdb_catalog::metadata::SnapshotContents> {
        self.0.fetch_add(1, Ordering::Relaxed);
        PlaceholderBuilder.build(request).await
    }
}

/// Deliver the burst to concurrent runners over `catalog` (which must be empty of the
/// index `search.docs`).
pub async fn with_runner(catalog: &Catalog, burst: &Burst) -> Outcome {
    let (delivered, newest) = changes(burst);
    let index = docs();
    let queue: Mutex<VecDeque<Vec<SourceChange>>> = Mutex::new(
        delivered
            .chunks(burst.batch.max(1))
            .map(<[SourceChange]>::to_vec)
            .collect(),
    );
    let builds = AtomicUsize::new(0);
    let deliveries = AtomicUsize::new(0);
    let commits = AtomicUsize::new(0);
    let started = Instant::now();
    let workers = (0..burst.workers.max(1)).map(|_| async {
        let runner = RefreshRunner::new(
            Publisher::for_catalog(catalog),
            Routes::new()
                .route("s3://lake/docs/", index.clone())
                .expect("route"),
            Counting(&builds),
        );
        loop {
            let Some(batch) = queue.lock().await.pop_front() else {
                break;
            };
            deliveries.fetch_add(1, Ordering::Relaxed);
            let report = runner.run(batch.clone()).await;
            commits.fetch_add(report.commits, Ordering::Relaxed);
            if !report.failed_changes().is_empty() {
                queue.lock().await.push_back(batch); // redelivered, as SQS would
            }
        }
    });
    futures::future::join_all(workers).await;
    let wall_ms = started.elapsed().as_millis();
    let (_, metadata) = Publisher::for_catalog(catalog)
        .load_current(&index)
        .await
        .expect("the index exists");
    let (duplicate_or_stale_snapshots, final_is_newest) = chain_checks(&metadata, &newest);
    let published = published_position(&metadata);
    Outcome {
        deliveries: deliveries.into_inner(),
        builds: builds.into_inner(),
        commits: commits.into_inner(),
        wall_ms,
        final_is_newest,
        lost_states: usize::from(published.is_none_or(|p| p < newest)),
        duplicate_or_stale_snapshots,
    }
}

/// The one-publish-per-event baseline: every delivered event rebuilds and publishes
/// (idempotent per write), by the same concurrent workers.
pub async fn per_event(catalog: &Catalog, burst: &Burst) -> Outcome {
    let (delivered, newest) = changes(burst);
    let index = docs();
    let publisher = Publisher::for_catalog(catalog);
    let queue = Mutex::new(delivered.into_iter().collect::<VecDeque<_>>());
    let (builds, deliveries, commits) = (
        AtomicUsize::new(0),
        AtomicUsize::new(0),
        AtomicUsize::new(0),
    );
    // The index exists before the burst, created from its oldest write.
    let first = SourceChange::new("lake", "docs/part-init.parquet", "0").expect("change");
    RefreshRunner::new(
        publisher.clone(),
        Routes::new()
            .route("s3://lake/docs/", index.clone())
            .expect("route"),
        PlaceholderBuilder,
    )
    .run(vec![first])
    .await;
    let started = Instant::now();
    let workers = (0..burst.workers.max(1)).map(|_| async {
        let publisher = Publisher::for_catalog(catalog);
        loop {
            let Some(change) = queue.lock().await.pop_front() else {
                break;
            };
            deliveries.fetch_add(1, Ordering::Relaxed);
            let outcome: Result<bool> = async {
                let (_, current) = publisher.load_current(&index).await?;
                let request = BuildRequest {
                    index: &index,
                    index_uuid: current.index_uuid(),
                    build_id: publisher.ids().uuid(),
                    newest: &change,
                    changes: 1,
                    source_table: current.current_snapshot().source_table().clone(),
                    current: Some(&current),
                    warehouse: publisher.warehouse(),
                };
                builds.fetch_add(1, Ordering::Relaxed);
                let mut contents = PlaceholderBuilder.build(&request).await?;
                contents
                    .summary
                    .insert(SOURCE_POSITION.to_owned(), change.position().to_string());
                let published = publisher
                    .publish_idempotent(&index, &change.state_key(), contents)
                    .await?;
                Ok(!published.already_published)
            }
            .await;
            match outcome {
                Ok(committed) => {
                    commits.fetch_add(usize::from(committed), Ordering::Relaxed);
                }
                Err(_) => queue.lock().await.push_back(change),
            }
        }
    });
    futures::future::join_all(workers).await;
    let wall_ms = started.elapsed().as_millis();
    let (_, metadata) = publisher.load_current(&index).await.expect("index");
    let (_, final_is_newest) = chain_checks(&metadata, &newest);
    Outcome {
        deliveries: deliveries.into_inner(),
        builds: builds.into_inner(),
        commits: commits.into_inner(),
        wall_ms,
        final_is_newest,
        // Arrival order decides the final state: whatever came last wins.
        lost_states: usize::from(!final_is_newest),
        duplicate_or_stale_snapshots: chain_checks(&metadata, &newest).0,
    }
}

/// Snapshots (by sequence number) whose recorded position does not exceed the previous
/// one's, and whether the current snapshot's position is `newest`.
pub fn chain_checks(metadata: &IndexMetadata, newest: &SourcePosition) -> (usize, bool) {
    let mut snapshots: Vec<_> = metadata.snapshots().iter().collect();
    snapshots.sort_by_key(|snapshot| snapshot.sequence_number());
    let mut previous: Option<SourcePosition> = None;
    let mut bad = 0;
    for snapshot in snapshots {
        let position = snapshot
            .summary()
            .get(SOURCE_POSITION)
            .and_then(|text| SourcePosition::from_text(text));
        if let (Some(previous), Some(position)) = (&previous, &position)
            && position <= previous
        {
            bad += 1;
        }
        if position.is_some() {
            previous = position;
        }
    }
    let current = metadata
        .current_snapshot()
        .summary()
        .get(SOURCE_POSITION)
        .and_then(|text| SourcePosition::from_text(text));
    (bad, current.as_ref() == Some(newest))
}

/// The burst's index.
pub fn docs() -> IndexIdentifier {
    IndexIdentifier::new(Namespace::new(["search"]).expect("ns"), "docs").expect("id")
}

/// A fresh catalog on `backend`.
pub async fn catalog(backend: &str) -> Catalog {
    let uri = match backend {
        "local" => {
            let dir = tempfile::tempdir().expect("temp dir").keep();
            format!("file://{}", dir.join("warehouse").display())
        }
        "s3" => {
            let endpoint = std::env::var("PARQDB_TEST_S3_ENDPOINT")
                .expect("PARQDB_TEST_S3_ENDPOINT names the S3-compatible server");
            let options = s3_options(&endpoint);
            let bucket = format!("parqdb-burst-{}", uuid::Uuid::new_v4().simple());
            parqdb_catalog::store::s3::create_bucket(&bucket, &options)
                .await
                .expect("bucket");
            let warehouse = parqdb_catalog::warehouse::Warehouse::new(
                &format!("s3://{bucket}/wh"),
                Arc::new(
                    parqdb_catalog::store::s3::amazon_s3_builder(&bucket, &options)
                        .expect("builder")
                        .build()
                        .expect("client"),
                ),
                object_store::path::Path::from("wh"),
            )
            .expect("warehouse");
            let store = parqdb_catalog::store::s3::S3Store::from_uri(
                &format!("s3://{bucket}/wh/_catalog"),
                &options,
            )
            .expect("store");
            return Catalog::builder(Arc::new(store), warehouse).build();
        }
        other => panic!("unknown backend `{other}` (local or s3)"),
    };
    parqdb_catalog::config::CatalogConfig::new(Some(uri), None)
        .build()
        .await
        .expect("catalog")
}

fn s3_options(endpoint: &str) -> parqdb_catalog::store::s3::S3Options {
    parqdb_catalog::store::s3::S3Options {
        endpoint: Some(endpoint.to_owned()),
        region: Some("us-east-1".into()),
        allow_http: Some(true),
        access_key_id: Some("parqdb-test".into()),
        secret_access_key: Some("parqdb-test".into()),
        ..Default::default()
    }
}

#[tokio::main]
async fn main() {
    let burst = Burst::parse();
    let runner = with_runner(&catalog(&burst.backend).await, &burst).await;
    let baseline = if burst.no_baseline {
        None
    } else {
        Some(per_event(&catalog(&burst.backend).await, &burst).await)
    };
    let ratio = |f: fn(&Outcome) -> f64| baseline.as_ref().map(|b| f(b) / f(&runner).max(1.0));
    println!(
        "{}",
        serde_json::to_string_pretty(&serde_json::json!({
            "burst": {
                "events": burst.events, "duplicates": burst.duplicates,
                "batch": burst.batch, "workers": burst.workers, "backend": burst.backend,
            },
            "runner": runner,
            "one-publish-per-event": baseline,
            "baseline/runner": {
                "commits": ratio(|o| o.commits as f64),
                "builds": ratio(|o| o.builds as f64),
                "wall": ratio(|o| o.wall_ms as f64),
            },
        }))
        .unwrap_or_default()
    );
}
