//! A store that ignores its write conditions fails the capability probe, and the catalog
//! refuses to write to it.
mod common;

use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use common::fixture::{TestEnv, source};
use parqdb_catalog::catalog::{Catalog, IndexCatalog};
use parqdb_catalog::store::memory::MemoryStore;
use parqdb_catalog::store::{
    ListPage, PointerStore, PutMode, StoreError, StoreKey, Version, Versioned,
};
use parqdb_catalog::warehouse::Warehouse;
use parqdb_catalog::{ErrorKind, IndexIdentifier, Namespace, RandomIds};

/// Accepts `Update` with any version, and `Update` on a missing key (like MinIO once did).
#[derive(Debug, Clone, Default)]
struct IgnoresIfMatch(MemoryStore);

#[async_trait]
impl PointerStore for IgnoresIfMatch {
    fn describe(&self) -> String {
        "ignores-if-match".into()
    }
    async fn get(&self, key: &StoreKey) -> Result<Option<Versioned>, StoreError> {
        self.0.get(key).await
    }
    async fn put(
        &self,
        key: &StoreKey,
        value: Bytes,
        mode: PutMode,
    ) -> Result<Version, StoreError> {
        match mode {
            PutMode::Create => self.0.put(key, value, PutMode::Create).await,
            PutMode::Update(_) => match self.0.get(key).await? {
                Some(current) => {
                    self.0
                        .put(key, value, PutMode::Update(current.version))
                        .await
                }
                None => self.0.put(key, value, PutMode::Create).await,
            },
        }
    }
    async fn list(
        &self,
        prefix: &StoreKey,
        after: Option<&StoreKey>,
        limit: usize,
    ) -> Result<ListPage, StoreError> {
        self.0.list(prefix, after, limit).await
    }
}

#[tokio::test]
async fn probe_fails_on_a_store_that_ignores_if_match() {
    let report = parqdb_catalog::store::probe::probe(&IgnoresIfMatch::default(), &RandomIds)
        .await
        .expect("probe ran");
    assert!(!report.passed());
    let failed: Vec<_> = report
        .checks
        .iter()
        .filter(|c| !c.passed)
        .map(|c| c.name)
        .collect();
    assert!(
        failed.contains(&"replace with a stale version fails"),
        "{failed:?}"
    );
    assert!(
        failed.contains(&"replace on a missing key fails"),
        "{failed:?}"
    );
    assert_eq!(
        report.into_result().expect_err("refused").kind(),
        ErrorKind::StoreUnsupported
    );
}

#[tokio::test]
async fn the_catalog_refuses_to_write_to_such_a_store() {
    let store = IgnoresIfMatch::default();
    let warehouse = Warehouse::in_memory("memory://probe/wh").expect("warehouse");
    let catalog = Catalog::builder(Arc::new(store.clone()), warehouse.clone()).build();
    let env = TestEnv {
        catalog: Arc::new(catalog.clone()),
        warehouse,
    };
    let namespace = Namespace::new(["ns"]).expect("valid");
    let err = catalog
        .create_namespace(&namespace, Default::default())
        .await
        .expect_err("refused");
    assert_eq!(err.kind(), ErrorKind::StoreUnsupported);
    let (_, location) = env.new_index().await;
    let id = IndexIdentifier::new(namespace.clone(), "x").expect("valid");
    let err = catalog
        .register(&id, Some(&source(1)), &location)
        .await
        .expect_err("refused");
    assert_eq!(err.kind(), ErrorKind::StoreUnsupported);
    // Nothing but probe keys was written.
    for prefix in ["n/=", "i/ns/="] {
        let page = store
            .list(&StoreKey::new(prefix).expect("key"), None, 10)
            .await
            .expect("list");
        assert!(page.entries.is_empty(), "{prefix}: {:?}", page.entries);
    }
}

#[tokio::test]
async fn a_correct_store_passes_and_the_cli_probe_says_so() {
    let dir = tempfile::tempdir().expect("temp dir");
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_parqdb-catalog"))
        .args([
            "--warehouse",
            &format!("file://{}", dir.path().display()),
            "probe",
        ])
        .output()
        .expect("ran");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON report");
    let checks = report["checks"].as_array().expect("checks");
    assert!(checks.len() >= 6);
    assert!(checks.iter().all(|c| c["passed"] == true));
}
