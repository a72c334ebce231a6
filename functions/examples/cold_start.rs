//! A measurement, not a test: the median time from process start to the first poll of the
//! Runtime API's `/invocation/next`, five starts per function binary, each run against a
//! local Lambda Runtime API (`parqdb_catalog_testkit::lambda`) on a warehouse in a
//! temporary directory. Prints the table; asserts nothing.
//!
//! ```sh
//! cargo build -p parqdb-catalog-functions --bins
//! cargo run -p parqdb-catalog-functions --example cold_start
//! # the release binaries (BENCHMARKS.md, "Issue 18"):
//! cargo build --release -p parqdb-catalog-functions --bins
//! PARQDB_FUNCTIONS_BIN_DIR=$PWD/target/release cargo run -p parqdb-catalog-functions --example cold_start
//! ```
//!
//! Without `PARQDB_FUNCTIONS_BIN_DIR` it starts the binaries next to its own build
//! (`target/debug/` for `cargo run --example`).
#![allow(clippy::disallowed_methods)] // a measurement reads the wall clock

use parqdb_catalog::lambda::Operation;
use parqdb_catalog_testkit::lambda::{Env, Function};
use serde_json::json;

/// Every function binary of the crate: the catalog's operations, then the others.
fn functions() -> impl Iterator<Item = &'static str> {
    Operation::ALL
        .map(Operation::name)
        .into_iter()
        .chain(["publish", "gc", "refresh"])
}

/// Starts per function.
const STARTS: usize = 5;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let dir = tempfile::tempdir().expect("temp dir");
    let routes = json!([{"source": "s3://lake/docs/",
                         "index": {"namespace": ["search"], "name": "docs"}}]);
    let env: Env = vec![
        (
            "PARQDB_WAREHOUSE".into(),
            Some(format!("file://{}", dir.path().display())),
        ),
        ("PARQDB_REFRESH_ROUTES".into(), Some(routes.to_string())),
    ];
    println!("time from process start to the first poll of /invocation/next ({STARTS} starts):");
    for name in functions() {
        let mut samples = Vec::new();
        for _ in 0..STARTS {
            let mut function = Function::start(name, &env).await;
            samples.push(function.time_to_first_poll().await);
        }
        samples.sort();
        println!(
            "{name:>10}: median {:?} (min {:?}, max {:?})",
            samples[STARTS / 2],
            samples[0],
            samples[STARTS - 1]
        );
    }
}
