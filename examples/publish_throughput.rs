//! A measurement, not a test: publications per second and attempts per publication for 1,
//! 4 and 16 concurrent publishers on one index, on local files and in memory (reported,
//! not asserted). The publishers are the integration tests' publication suite's
//! (`tests/it/support/publish`).
//!
//! ```sh
//! cargo run --release --example publish_throughput
//! ```
#![allow(clippy::disallowed_methods)] // a measurement reads the wall clock

/// The publication suite of the integration tests.
#[path = "../tests/it/support/publish/mod.rs"]
mod publish;

use std::sync::Arc;

use parqdb_catalog::Warehouse;
use parqdb_catalog::store::LocalStore;
use parqdb_catalog::store::MemoryStore;
use parqdb_catalog::{Catalog, IndexCatalog};

fn memory() -> (Arc<dyn IndexCatalog>, Warehouse) {
    let warehouse = Warehouse::in_memory("memory://publish/wh").expect("warehouse");
    let catalog = Catalog::builder(Arc::new(MemoryStore::new()), warehouse.clone()).build();
    (Arc::new(catalog), warehouse)
}

fn local(dir: &std::path::Path) -> (Arc<dyn IndexCatalog>, Warehouse) {
    let warehouse = Warehouse::local(&dir.join("warehouse")).expect("warehouse");
    let store = LocalStore::new(dir.join("warehouse").join("_catalog"));
    let catalog = Catalog::builder(Arc::new(store), warehouse.clone()).build();
    (Arc::new(catalog), warehouse)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 4)]
async fn main() {
    for (publishers, each) in [(1, 100), (4, 25), (16, 8)] {
        let dir = tempfile::tempdir().expect("temp dir");
        let (catalog, warehouse) = local(dir.path());
        let policy = publish::tight_loop_policy();
        let stats =
            publish::concurrent_publishers(catalog, warehouse, publishers, each, policy).await;
        println!("local files: {stats}");
    }
    for (publishers, each) in [(1, 100), (4, 25), (16, 8)] {
        let (catalog, warehouse) = memory();
        let policy = publish::tight_loop_policy();
        let stats =
            publish::concurrent_publishers(catalog, warehouse, publishers, each, policy).await;
        println!("memory:      {stats}");
    }
}
