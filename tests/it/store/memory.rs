//! The store contract on the in-memory store.

use std::sync::Arc;

use parqdb_catalog::store::MemoryStore;
use parqdb_catalog::store::PointerStore;

async fn fresh() -> Arc<dyn PointerStore> {
    Arc::new(MemoryStore::new())
}

store_contract!(fresh());
