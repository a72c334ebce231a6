//! The catalog conformance suite on the in-memory store and warehouse.
mod common;

use std::sync::Arc;

use common::fixture::TestEnv;
use parqdb_catalog::catalog::Catalog;
use parqdb_catalog::store::memory::MemoryStore;
use parqdb_catalog::warehouse::Warehouse;

async fn fresh() -> TestEnv {
    let warehouse = Warehouse::in_memory("memory://conformance/wh").expect("warehouse");
    let catalog = Catalog::builder(Arc::new(MemoryStore::new()), warehouse.clone()).build();
    TestEnv {
        catalog: Arc::new(catalog),
        warehouse,
    }
}

catalog_conformance!(fresh());
