//! A burst of source changes through the refresh runner, against the one-publish-per-event
//! baseline: how many builds and commits, how long, and whether any state was lost.
//!
//! ```text
//! cargo run --release --example refresh_burst -- --events 500
//! PARQDB_TEST_S3_ENDPOINT=http://127.0.0.1:9000 cargo run --release --example refresh_burst -- --backend s3
//! ```
//!
//! A burst is `--events` writes to one source table, made one every `--write-every-ms`
//! while the workers run: each write is stamped with the clock when it is made (its S3 event time),
//! and every `--batch` writes a batch is delivered, drawn at random from the writes not yet
//! delivered (so events arrive late and out of order), with `--duplicates` of the batch's
//! size added as second deliveries of random earlier writes; what is left is delivered at
//! the end. `--workers` concurrent workers (each its own runner and publisher over the
//! same catalog, with a `--clock-skew-ms` allowance) take the batches; a batch whose index
//! failed is delivered again, as SQS would. Prints one JSON object with the runner's and
//! the baseline's numbers and the checks.
#![allow(clippy::disallowed_methods)] // an example may read the wall clock and draw random ids (unique names)

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use clap::Parser;
use parqdb_catalog::Catalog;
use parqdb_catalog::IndexMetadata;
use parqdb_catalog::Publisher;
use parqdb_catalog::refresh::{
    BuildRequest, IndexBuilder, PlaceholderBuilder, READ_START, RefreshRunner, Routes,
    SourceChange, published_read_start, snapshot_contains,
};
use parqdb_catalog::{Clock, IndexIdentifier, Namespace, Result, SystemClock};
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
    /// The runners' clock-skew allowance in milliseconds (the writes are stamped with the
    /// workers' own clock here, so any allowance is sound; a build waits up to it).
    #[arg(long, default_value_t = 20)]
    pub clock_skew_ms: u64,
    /// Milliseconds between two writes of the burst (0: as fast as possible).
    #[arg(long, default_value_t = 1)]
    pub write_every_ms: u64,
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
    /// Whether the final snapshot contains every write (by the ordering rule).
    pub final_contains_every_write: bool,
    /// Writes the final snapshot does not contain (must be 0).
    pub lost_states: usize,
    /// Snapshots whose read start does not exceed the previous one's (must be 0).
    pub duplicate_or_stale_snapshots: usize,
    /// The batches as delivered the first time (to deliver them again).
    #[serde(skip)]
    pub delivered: Vec<Vec<SourceChange>>,
}

impl Outcome {
    /// The outcome of a run that took `wall_ms` and ended with `metadata`: its
    /// `[deliveries, builds, commits]`, and the chain checks of `metadata` against
    /// `writes` ([`chain_checks`], allowance `skew`).
    fn measured(
        [deliveries, builds, commits]: [usize; 3],
        wall_ms: u128,
        metadata: &IndexMetadata,
        writes: &[SourceChange],
        skew: Duration,
        delivered: Vec<Vec<SourceChange>>,
    ) -> Outcome {
        let (duplicate_or_stale_snapshots, lost_states) = chain_checks(metadata, writes, skew);
        Outcome {
            deliveries,
            builds,
            commits,
            wall_ms,
            final_contains_every_write: lost_states == 0,
            lost_states,
            duplicate_or_stale_snapshots,
            delivered,
        }
    }
}

/// The burst's `n`th write, made at `time_ms`.
fn write(n: usize, time_ms: i64) -> SourceChange {
    let mut change = SourceChange::new(
        "lake",
        format!("docs/part-{n:05}.parquet"),
        format!("{:018X}", 0x0061_F082_9932_9D00_u64 + 3 * n as u64),
        time_ms,
    )
    .expect("change");
    change.size = Some(1 << 20);
    change
}

/// Counts builds while delegating to the placeholder builder.
struct Counting<'a>(&'a AtomicUsize);

#[async_trait::async_trait]
impl IndexBuilder for Counting<'_> {
    async fn build(&self, request: &BuildRequest<'_>) -> Result<parqdb_catalog::SnapshotContents> {
        self.0.fetch_add(1, Ordering::Relaxed);
        PlaceholderBuilder.build(request).await
    }
}

/// Where the batches come from: made while the workers run ([`with_runner`]), or given.
enum Source<'a> {
    Burst(&'a Burst),
    Batches(Vec<Vec<SourceChange>>),
}

/// Make the burst's writes while the workers run and deliver them to concurrent runners
/// over `catalog` (which must be empty of the index `search.docs`, or hold it from an
/// earlier burst).
pub async fn with_runner(catalog: &Catalog, burst: &Burst) -> Outcome {
    deliver(catalog, burst, Source::Burst(burst)).await
}

/// Deliver `batches` (an earlier outcome's `delivered`) again, as SQS or EventBridge may.
pub async fn redeliver(
    catalog: &Catalog,
    burst: &Burst,
    batches: Vec<Vec<SourceChange>>,
) -> Outcome {
    deliver(catalog, burst, Source::Batches(batches)).await
}

async fn deliver(catalog: &Catalog, burst: &Burst, source: Source<'_>) -> Outcome {
    let index = docs();
    let queue: Mutex<VecDeque<Vec<SourceChange>>> = Mutex::new(VecDeque::new());
    let producing = AtomicUsize::new(1);
    let delivered: Mutex<Vec<Vec<SourceChange>>> = Mutex::new(Vec::new());
    let writes: Mutex<Vec<SourceChange>> = Mutex::new(Vec::new());
    let builds = AtomicUsize::new(0);
    let deliveries = AtomicUsize::new(0);
    let commits = AtomicUsize::new(0);
    let started = Instant::now();
    let skew = Duration::from_millis(burst.clock_skew_ms);
    let producer = async {
        match source {
            Source::Batches(batches) => {
                writes
                    .lock()
                    .await
                    .extend(batches.iter().flatten().cloned());
                queue.lock().await.extend(batches);
            }
            Source::Burst(burst) => {
                let mut rng = StdRng::seed_from_u64(burst.seed);
                let size = burst.batch.max(1);
                let mut pending: Vec<SourceChange> = Vec::new();
                let mut made: Vec<SourceChange> = Vec::new();
                let push = |batch: Vec<SourceChange>| async {
                    delivered.lock().await.push(batch.clone());
                    queue.lock().await.push_back(batch);
                };
                for n in 0..burst.events {
                    if burst.write_every_ms > 0 {
                        tokio::time::sleep(Duration::from_millis(burst.write_every_ms)).await;
                    }
                    let change = write(n, SystemClock.now_ms());
                    made.push(change.clone());
                    pending.push(change);
                    if pending.len() >= 2 * size || n + 1 == burst.events {
                        while pending.len() >= size
                            || (n + 1 == burst.events && !pending.is_empty())
                        {
                            pending.shuffle(&mut rng);
                            let take = size.min(pending.len());
                            let mut batch: Vec<SourceChange> =
                                pending.split_off(pending.len() - take);
                            let duplicates = (take as f64 * burst.duplicates).round() as usize;
                            for _ in 0..duplicates {
                                batch.push(made[rng.random_range(0..made.len())].clone());
                            }
                            batch.shuffle(&mut rng);
                            push(batch).await;
                            if n + 1 != burst.events {
                                break;
                            }
                        }
                        // Let the workers take the batch while the next writes are made.
                        tokio::task::yield_now().await;
                    }
                }
                writes.lock().await.extend(made);
            }
        }
        producing.store(0, Ordering::SeqCst);
    };
    let workers = (0..burst.workers.max(1)).map(|_| async {
        let runner = RefreshRunner::new(
            Publisher::for_catalog(catalog),
            Routes::new()
                .route("s3://lake/docs/", index.clone())
                .expect("route"),
            Counting(&builds),
        )
        .with_clock_skew(skew)
        .expect("allowance");
        loop {
            let next = queue.lock().await.pop_front();
            let Some(batch) = next else {
                if producing.load(Ordering::SeqCst) == 0 && queue.lock().await.is_empty() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
                continue;
            };
            deliveries.fetch_add(1, Ordering::Relaxed);
            let report = runner.run(batch.clone()).await;
            commits.fetch_add(report.commits, Ordering::Relaxed);
            if !report.failed_changes().is_empty() {
                queue.lock().await.push_back(batch); // redelivered, as SQS would
            }
        }
    });
    futures::future::join(producer, futures::future::join_all(workers)).await;
    let wall_ms = started.elapsed().as_millis();
    let (_, metadata) = Publisher::for_catalog(catalog)
        .load_current(&index)
        .await
        .expect("the index exists");
    Outcome::measured(
        [deliveries, builds, commits].map(AtomicUsize::into_inner),
        wall_ms,
        &metadata,
        &writes.into_inner(),
        skew,
        delivered.into_inner(),
    )
}

/// The one-publish-per-event baseline: every delivered event rebuilds and publishes
/// (idempotent per write), by the same concurrent workers.
pub async fn per_event(
    catalog: &Catalog,
    burst: &Burst,
    delivered: &[Vec<SourceChange>],
) -> Outcome {
    let index = docs();
    let publisher = Publisher::for_catalog(catalog);
    let writes: Vec<SourceChange> = delivered.iter().flatten().cloned().collect();
    let queue = Mutex::new(writes.iter().cloned().collect::<VecDeque<_>>());
    let (builds, deliveries, commits) = (
        AtomicUsize::new(0),
        AtomicUsize::new(0),
        AtomicUsize::new(0),
    );
    // The index exists before the burst, created from a write before it.
    let first = SourceChange::new("lake", "docs/part-init.parquet", "0", 0).expect("change");
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
                let read_start_ms = publisher.clock().now_ms();
                let request = BuildRequest {
                    index: &index,
                    index_uuid: current.index_uuid(),
                    build_id: publisher.ids().uuid(),
                    read_start_ms,
                    newest: &change,
                    changed: std::slice::from_ref(&change),
                    changes: 1,
                    source_table: current.current_snapshot().contents().source_table.clone(),
                    current: Some(&current),
                    warehouse: publisher.warehouse(),
                };
                builds.fetch_add(1, Ordering::Relaxed);
                let mut contents = PlaceholderBuilder.build(&request).await?;
                contents
                    .summary
                    .insert(READ_START.to_owned(), read_start_ms.to_string());
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
    Outcome::measured(
        [deliveries, builds, commits].map(AtomicUsize::into_inner),
        wall_ms,
        &metadata,
        &writes,
        Duration::from_millis(burst.clock_skew_ms),
        Vec::new(),
    )
}

/// Snapshots (by sequence number) whose read start does not exceed the previous one's,
/// and how many of `writes` the newest read start of the retained snapshots does not
/// contain (the ordering rule with allowance `skew`).
pub fn chain_checks(
    metadata: &IndexMetadata,
    writes: &[SourceChange],
    skew: Duration,
) -> (usize, usize) {
    let mut snapshots: Vec<_> = metadata.snapshots().iter().collect();
    snapshots.sort_by_key(|snapshot| snapshot.sequence_number());
    let mut previous: Option<i64> = None;
    let mut bad = 0;
    for snapshot in snapshots {
        let read_start = snapshot
            .contents()
            .summary
            .get(READ_START)
            .and_then(|text| text.parse::<i64>().ok());
        if let (Some(previous), Some(read_start)) = (previous, read_start)
            && read_start <= previous
        {
            bad += 1;
        }
        if read_start.is_some() {
            previous = read_start;
        }
    }
    let lost = match published_read_start(metadata) {
        None => writes.len(),
        Some(read_start) => writes
            .iter()
            .filter(|write| !snapshot_contains(read_start, write, skew))
            .count(),
    };
    (bad, lost)
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
            let warehouse = parqdb_catalog::Warehouse::new(
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
    parqdb_catalog::CatalogConfig::new(Some(uri), None)
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
        Some(per_event(&catalog(&burst.backend).await, &burst, &runner.delivered).await)
    };
    let ratio = |f: fn(&Outcome) -> f64| baseline.as_ref().map(|b| f(b) / f(&runner).max(1.0));
    println!(
        "{}",
        serde_json::to_string_pretty(&serde_json::json!({
            "burst": {
                "events": burst.events, "duplicates": burst.duplicates,
                "batch": burst.batch, "workers": burst.workers, "backend": burst.backend,
                "clock-skew-ms": burst.clock_skew_ms, "write-every-ms": burst.write_every_ms,
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
