//! The store contract on the local-filesystem store.

use std::sync::Arc;

use parqdb_catalog::store::LocalStore;
use parqdb_catalog::store::PointerStore;

async fn fresh() -> Arc<dyn PointerStore> {
    let dir = tempfile::tempdir().expect("temp dir").keep();
    Arc::new(LocalStore::new(dir))
}

store_contract!(fresh());
