//! A store that ignores its write conditions fails the capability probe, and the catalog
//! refuses to write to it.

use std::sync::Arc;

use crate::support::fixture::{TestEnv, source};
use async_trait::async_trait;
use parqdb_catalog::Warehouse;
use parqdb_catalog::store::MemoryStore;
use parqdb_catalog::store::PointerStoreExt;
use parqdb_catalog::store::{Capabilities, PointerStore, PutMode, StoreError, StoreKey};
use parqdb_catalog::{Catalog, IndexCatalog};
use parqdb_catalog::{ErrorKind, IndexIdentifier, Namespace, RandomIds};
use parqdb_catalog_testkit::store::{Call, Hook, Hooked};

/// Accepts `Update` with any version, and `Update` on a missing key (like MinIO once did):
/// every update becomes one of the current version, or a create. No transactions.
struct IgnoresIfMatch;

#[async_trait]
impl Hook for IgnoresIfMatch {
    async fn before(
        &self,
        inner: &Arc<dyn PointerStore>,
        call: Call<'_>,
    ) -> Result<(), StoreError> {
        if let Call::Put { key, mode } = call
            && matches!(mode, PutMode::Update(_))
        {
            *mode = match inner.get(key).await? {
                Some(current) => PutMode::Update(current.version),
                None => PutMode::Create,
            };
        }
        Ok(())
    }

    fn capabilities(&self, _inner: Capabilities) -> Capabilities {
        Capabilities::default()
    }
}

/// A memory store that ignores its write conditions.
fn ignores_if_match() -> Arc<Hooked<IgnoresIfMatch>> {
    Arc::new(Hooked::new(Arc::new(MemoryStore::new()), IgnoresIfMatch))
}

#[tokio::test]
async fn probe_fails_on_a_store_that_ignores_if_match() {
    let report = parqdb_catalog::store::probe(ignores_if_match().as_ref(), &RandomIds)
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
    let store = ignores_if_match();
    let warehouse = Warehouse::in_memory("memory://probe/wh").expect("warehouse");
    let catalog = Catalog::builder(store.clone(), warehouse.clone()).build();
    let env = TestEnv {
        catalog: Arc::new(catalog.clone()),
        warehouse,
        with_registry: None,
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
