//! The catalog conformance suite on the local-filesystem store and warehouse (the
//! embedded default).

use std::sync::Arc;

use crate::support::conformance::SharedCatalog;
use crate::support::fixture::{TestEnv, same_store};
use parqdb_catalog::Catalog;
use parqdb_catalog::Warehouse;
use parqdb_catalog::store::LocalStore;

async fn fresh() -> TestEnv {
    let dir = tempfile::tempdir().expect("temp dir").keep();
    let warehouse = Warehouse::local(&dir.join("warehouse")).expect("warehouse");
    let store = LocalStore::new(dir.join("warehouse").join("_catalog"));
    let catalog = Catalog::builder(Arc::new(store), warehouse.clone()).build();
    TestEnv {
        with_registry: Some(same_store(&catalog)),
        catalog: Arc::new(catalog),
        warehouse,
    }
}

/// A catalog whose pointer directory lies below a regular file: every file-system call
/// fails with "not a directory", which no retry fixes.
async fn refusing() -> SharedCatalog {
    let dir = tempfile::tempdir().expect("temp dir").keep();
    let warehouse = Warehouse::local(&dir.join("warehouse")).expect("warehouse");
    std::fs::write(dir.join("blocker"), b"a regular file").expect("blocker");
    let store = LocalStore::new(dir.join("blocker").join("_catalog"));
    Arc::new(Catalog::builder(Arc::new(store), warehouse).build())
}

catalog_conformance!(fresh(), refusing: refusing());
