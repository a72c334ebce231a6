//! The catalog conformance suite on the in-memory store and warehouse.

use std::sync::Arc;

use crate::support::conformance::SharedCatalog;
use crate::support::fixture::{RefusingStore, TestEnv, same_store};
use parqdb_catalog::Catalog;
use parqdb_catalog::Warehouse;
use parqdb_catalog::store::MemoryStore;

async fn fresh() -> TestEnv {
    let warehouse = Warehouse::in_memory("memory://conformance/wh").expect("warehouse");
    let catalog = Catalog::builder(Arc::new(MemoryStore::new()), warehouse.clone()).build();
    TestEnv {
        with_registry: Some(same_store(&catalog)),
        catalog: Arc::new(catalog),
        warehouse,
    }
}

/// A catalog whose store refuses every call (access denied).
async fn refusing() -> SharedCatalog {
    let warehouse = Warehouse::in_memory("memory://conformance/refused").expect("warehouse");
    Arc::new(Catalog::builder(Arc::new(RefusingStore), warehouse).build())
}

catalog_conformance!(fresh(), refusing: refusing());
