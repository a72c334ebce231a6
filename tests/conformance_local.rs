//! The catalog conformance suite on the local-filesystem store and warehouse (the
//! embedded default).
mod common;

use std::sync::Arc;

use common::fixture::TestEnv;
use parqdb_catalog::catalog::Catalog;
use parqdb_catalog::store::local::LocalStore;
use parqdb_catalog::warehouse::Warehouse;

async fn fresh() -> TestEnv {
    let dir = tempfile::tempdir().expect("temp dir").keep();
    let warehouse = Warehouse::local(&dir.join("warehouse")).expect("warehouse");
    let store = LocalStore::new(dir.join("warehouse").join("_catalog"));
    let catalog = Catalog::builder(Arc::new(store), warehouse.clone()).build();
    TestEnv {
        catalog: Arc::new(catalog),
        warehouse,
    }
}

catalog_conformance!(fresh());
