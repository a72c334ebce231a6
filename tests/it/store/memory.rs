//! The store contract on the in-memory store.

use std::sync::Arc;

use parqdb_catalog::store::PointerStore;
use parqdb_catalog::store::memory::MemoryStore;

async fn fresh() -> Arc<dyn PointerStore> {
    Arc::new(MemoryStore::new())
}

store_contract!(fresh());
