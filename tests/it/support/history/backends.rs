//! The stores and warehouses a workload runs on, and the catalog over them.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use parqdb_catalog::Warehouse;
use parqdb_catalog::store::PointerStore;
use parqdb_catalog::{Catalog, RetryPolicy};

/// A quick retry policy for tests (same attempts as the default, shorter waits).
pub fn quick_retry() -> RetryPolicy {
    RetryPolicy {
        max_attempts: 6,
        base_delay: Duration::from_millis(1),
        max_delay: Duration::from_millis(50),
    }
}

/// A catalog over `store` and `warehouse` with the quick retry policy.
pub fn catalog_over(store: Arc<dyn PointerStore>, warehouse: &Warehouse, probe: bool) -> Catalog {
    Catalog::builder(store, warehouse.clone())
        .retry(quick_retry())
        .probe_on_first_write(probe)
        .build()
}

/// The pointer stores the checker runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// In-memory store and warehouse.
    Memory,
    /// Local-filesystem store and warehouse in a temporary directory.
    Local,
    /// Pointers and metadata on the S3-compatible server.
    S3,
    /// Pointers in DynamoDB Local, metadata on the S3-compatible server.
    DynamoDb,
}

impl Backend {
    /// A fresh, empty store and warehouse.
    pub async fn open(self) -> (Arc<dyn PointerStore>, Warehouse) {
        use parqdb_catalog::store::LocalStore;
        use parqdb_catalog::store::MemoryStore;
        use parqdb_catalog::store::s3::S3Store;

        use crate::support::services;
        match self {
            Backend::Memory => (
                Arc::new(MemoryStore::new()),
                Warehouse::in_memory("memory://lin/wh").expect("warehouse"),
            ),
            Backend::Local => {
                let dir = tempfile::tempdir().expect("temp dir").keep();
                let warehouse = Warehouse::local(&dir.join("warehouse")).expect("warehouse");
                let store = LocalStore::new(dir.join("warehouse").join("_catalog"));
                (Arc::new(store), warehouse)
            }
            Backend::S3 => {
                let bucket = services::new_bucket().await;
                let warehouse = services::s3_warehouse(&bucket, "wh");
                let store = S3Store::from_uri(
                    &format!("s3://{bucket}/wh/_catalog"),
                    &services::s3_options(),
                )
                .expect("store");
                (Arc::new(store), warehouse)
            }
            Backend::DynamoDb => {
                let bucket = services::new_bucket().await;
                let warehouse = services::s3_warehouse(&bucket, "wh");
                (Arc::new(services::dynamodb_store().await), warehouse)
            }
        }
    }
}

/// Check that no pointer record was applied twice: every applied write to an index key
/// carries a commit id no other applied write to that key carries.
pub fn assert_applied_once(writes: &[parqdb_catalog_testkit::faulty::AppliedWrite]) -> usize {
    let mut seen = HashSet::new();
    let mut count = 0;
    for write in writes {
        if !write.key.as_str().starts_with("i/") {
            continue;
        }
        let record: serde_json::Value =
            serde_json::from_slice(&write.value).expect("a JSON record");
        let commit = record["commit-id"].as_str().expect("commit-id").to_owned();
        assert!(
            seen.insert((write.key.clone(), commit.clone())),
            "the record with commit id {commit} was applied twice to {} (call {})",
            write.key,
            write.call
        );
        count += 1;
    }
    count
}
