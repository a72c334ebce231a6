//! Per-operation latency of the Lambda path (`LambdaCatalog` → local Lambda host → real
//! function binary → store) against the embedded catalog on the same backend, in the same
//! run, interleaved. Reports; asserts nothing.
//!
//! ```text
//! cargo build -p parqdb-catalog-functions --bins
//! cargo run --example lambda_latency                                   # local files
//! PARQDB_TEST_DYNAMODB_ENDPOINT=... cargo run --example lambda_latency # and DynamoDB Local
//! ```
//!
//! `PARQDB_LATENCY_ROUNDS` sets the samples per operation (default 200);
//! `PARQDB_FUNCTIONS_BIN_DIR=target/release` measures release binaries (else the ones next
//! to this example's build, `target/debug/`). The Lambda host and the sample index are the
//! integration tests' (`tests/it/support`).
#![allow(clippy::disallowed_methods)] // a measurement reads the wall clock

// The parts of the integration tests' support this measurement runs on (they name each
// other as `super::`).
#[allow(dead_code)]
#[path = "../tests/it/support/conformance.rs"]
mod conformance;
#[allow(dead_code)]
#[path = "../tests/it/support/fixture.rs"]
mod fixture;
#[allow(dead_code)]
#[path = "../tests/it/support/lambda_host.rs"]
mod lambda_host;
#[allow(dead_code)]
#[path = "../tests/it/support/services.rs"]
mod services;

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fixture::{TestEnv, source};
use lambda_host::{Clients, Deployment, dynamodb_deployment, local_deployment};
use parqdb_catalog::IndexCatalog;
use parqdb_catalog::{IndexIdentifier, Namespace};

fn rounds() -> usize {
    std::env::var("PARQDB_LATENCY_ROUNDS")
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(200)
}

/// Latency samples of one operation through one path.
#[derive(Default)]
struct Samples(Vec<Duration>);

impl Samples {
    async fn time<T>(&mut self, operation: impl Future<Output = parqdb_catalog::Result<T>>) -> T {
        let started = Instant::now();
        let result = operation.await.expect("operation succeeded");
        self.0.push(started.elapsed());
        result
    }

    fn percentile(&self, p: f64) -> f64 {
        let mut sorted = self.0.clone();
        sorted.sort();
        let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
        sorted[index].as_secs_f64() * 1000.0
    }
}

struct Route {
    env: TestEnv,
    namespace: Namespace,
    indexes: Vec<IndexIdentifier>,
}

impl Route {
    async fn new(catalog: Arc<dyn IndexCatalog>, deployment: &Deployment, tag: &str) -> Route {
        let env = TestEnv {
            catalog,
            warehouse: deployment.warehouse.clone(),
            with_registry: None,
        };
        let namespace = env.namespace(tag).await;
        Route {
            env,
            namespace,
            indexes: Vec::new(),
        }
    }
}

/// Measure `rounds` register, load, commit and list calls through both paths, alternating.
async fn measure(backend: &str, deployment: Deployment) {
    let rounds = rounds();
    let lambda: Arc<dyn IndexCatalog> = Arc::new(deployment.host.catalog().await);
    let embedded: Arc<dyn IndexCatalog> = Arc::new(deployment.embedded.clone());
    let mut paths = [
        Route::new(embedded, &deployment, "embedded").await,
        Route::new(lambda, &deployment, "lambda").await,
    ];
    let mut samples: BTreeMap<(&str, usize), Samples> = BTreeMap::new();
    // Warm-up: every function process initialises, probes the store and fills its cache.
    for path in &paths {
        for _ in 0..20 {
            let (id, _, _) = path.env.registered("warm").await;
            path.env.catalog.load(&id).await.expect("load");
            path.env
                .catalog
                .list(id.namespace(), None, None)
                .await
                .expect("list");
        }
    }

    // Metadata files are written outside the measurement.
    let mut initial = Vec::new();
    for _ in 0..rounds * 2 {
        initial.push(paths[0].env.new_index().await);
    }
    for round in 0..rounds {
        for (n, path) in paths.iter_mut().enumerate() {
            let id =
                IndexIdentifier::new(path.namespace.clone(), format!("i{round:05}")).expect("id");
            let (_, location) = &initial[round * 2 + n];
            samples
                .entry(("register", n))
                .or_default()
                .time(path.env.catalog.register(&id, Some(&source(1)), location))
                .await;
            path.indexes.push(id);
        }
    }
    for round in 0..rounds {
        for (n, path) in paths.iter().enumerate() {
            samples
                .entry(("load", n))
                .or_default()
                .time(path.env.catalog.load(&path.indexes[round]))
                .await;
        }
    }
    let mut successors = Vec::new();
    for (base, location) in &initial {
        successors.push((location.clone(), paths[0].env.successor(base, 2).await.1));
    }
    for round in 0..rounds {
        for (n, path) in paths.iter().enumerate() {
            let (base, new) = &successors[round * 2 + n];
            samples
                .entry(("commit", n))
                .or_default()
                .time(
                    path.env
                        .catalog
                        .commit(&path.indexes[round], Some(&source(2)), base, new),
                )
                .await;
        }
    }
    for _ in 0..rounds {
        for (n, path) in paths.iter().enumerate() {
            samples
                .entry(("list", n))
                .or_default()
                .time(path.env.catalog.list(&path.namespace, None, Some(100)))
                .await;
        }
    }

    println!("\n{backend}: {rounds} sequential calls per operation and path, interleaved (ms)");
    println!(
        "{:<10} {:>14} {:>14} {:>14} {:>14} {:>14} {:>14}",
        "operation",
        "embedded p50",
        "lambda p50",
        "embedded p90",
        "lambda p90",
        "embedded p99",
        "lambda p99"
    );
    for operation in ["load", "register", "commit", "list"] {
        let e = &samples[&(operation, 0)];
        let l = &samples[&(operation, 1)];
        println!(
            "{operation:<10} {:>14.2} {:>14.2} {:>14.2} {:>14.2} {:>14.2} {:>14.2}",
            e.percentile(0.5),
            l.percentile(0.5),
            e.percentile(0.9),
            l.percentile(0.9),
            e.percentile(0.99),
            l.percentile(0.99),
        );
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    measure("local files", local_deployment(2).await).await;
    if std::env::var_os("PARQDB_TEST_DYNAMODB_ENDPOINT").is_some() {
        measure("DynamoDB Local + local files", dynamodb_deployment(2).await).await;
    }
}
