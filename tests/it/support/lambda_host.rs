//! The catalog over the real function binaries: the test kit's local Lambda service
//! ([`LambdaHost`], `parqdb_catalog_testkit::lambda`) seen through a [`LambdaCatalog`],
//! over a local directory or DynamoDB Local.
//!
//! The binaries are found in `PARQDB_FUNCTIONS_BIN_DIR`, else next to this test executable
//! (`target/debug/`); `cargo test --workspace` builds them, alone run
//! `cargo build -p parqdb-catalog-functions --bins` first.

use std::sync::Arc;
use std::time::Duration;

use aws_sdk_lambda::config::{BehaviorVersion, Credentials, Region};
use parqdb_catalog::Warehouse;
use parqdb_catalog::remote::{FunctionNames, LambdaCatalog};
use parqdb_catalog::store::LocalStore;
use parqdb_catalog::{Catalog, RetryPolicy};
use parqdb_catalog_testkit::lambda::LambdaHost;

use super::fixture::{TestEnv, same_store};

/// The clients of a [`LambdaHost`].
pub trait Clients {
    /// A Lambda client for this host: dummy credentials, `us-east-1`.
    fn client(&self) -> aws_sdk_lambda::Client;

    /// A [`LambdaCatalog`] over this host's functions.
    async fn catalog(&self) -> LambdaCatalog;

    /// A [`LambdaCatalog`] with this retry policy and attempt timeout.
    async fn catalog_with(&self, retry: RetryPolicy, timeout: Option<Duration>) -> LambdaCatalog;
}

impl Clients for LambdaHost {
    fn client(&self) -> aws_sdk_lambda::Client {
        let config = aws_sdk_lambda::Config::builder()
            .behavior_version(BehaviorVersion::latest())
            .region(Region::new("us-east-1"))
            .credentials_provider(Credentials::new("dummy", "dummy", None, None, "tests"))
            .endpoint_url(self.endpoint())
            .build();
        aws_sdk_lambda::Client::from_conf(config)
    }

    async fn catalog(&self) -> LambdaCatalog {
        self.catalog_with(RetryPolicy::default(), None).await
    }

    async fn catalog_with(&self, retry: RetryPolicy, timeout: Option<Duration>) -> LambdaCatalog {
        let mut builder = LambdaCatalog::builder(FunctionNames::with_prefix(self.prefix()))
            .client(self.client())
            .retry(retry);
        if let Some(timeout) = timeout {
            builder = builder.attempt_timeout(timeout);
        }
        builder.build().await.expect("catalog")
    }
}

/// Processes per function in the conformance environments.
pub const PROCESSES: usize = 4;

/// A host running the functions over one backend, plus direct access to that backend.
pub struct Deployment {
    /// The local Lambda service.
    pub host: LambdaHost,
    /// The warehouse the functions use (a local directory), for writing metadata files.
    pub warehouse: Warehouse,
    /// The embedded catalog over the same pointer store and warehouse.
    pub embedded: Catalog,
    /// Keeps the directory alive.
    pub dir: tempfile::TempDir,
}

impl Deployment {
    /// The conformance environment over this deployment's [`LambdaCatalog`]; the host
    /// runs until the test's runtime shuts down.
    pub async fn into_env(self) -> TestEnv {
        let catalog = self.host.catalog().await;
        self.host.detach(self.dir);
        TestEnv {
            catalog: Arc::new(catalog),
            warehouse: self.warehouse,
            with_registry: Some(same_store(&self.embedded)),
        }
    }
}

/// Functions that keep warehouse and pointers (under `_catalog/`) in a fresh local
/// directory: the default deployment.
pub async fn local_deployment(processes: usize) -> Deployment {
    let dir = tempfile::tempdir().expect("temp dir");
    let root = dir.path().join("warehouse");
    let warehouse = Warehouse::local(&root).expect("warehouse");
    let env = [("PARQDB_WAREHOUSE", warehouse.root().to_owned())];
    let store = LocalStore::new(root.canonicalize().expect("canonical").join("_catalog"));
    Deployment {
        host: LambdaHost::start(&env, processes).await,
        embedded: Catalog::builder(Arc::new(store), warehouse.clone()).build(),
        warehouse,
        dir,
    }
}

/// Functions that keep pointers in a fresh DynamoDB Local table
/// (`PARQDB_TEST_DYNAMODB_ENDPOINT`) and metadata in a fresh local directory.
pub async fn dynamodb_deployment(processes: usize) -> Deployment {
    let store = super::services::dynamodb_store().await;
    let endpoint =
        std::env::var("PARQDB_TEST_DYNAMODB_ENDPOINT").expect("checked by dynamodb_store");
    let dir = tempfile::tempdir().expect("temp dir");
    let warehouse = Warehouse::local(&dir.path().join("warehouse")).expect("warehouse");
    let env = [
        ("PARQDB_WAREHOUSE", warehouse.root().to_owned()),
        ("PARQDB_CATALOG", format!("dynamodb://{}", store.table())),
        ("AWS_ENDPOINT_URL_DYNAMODB", endpoint),
        ("AWS_ACCESS_KEY_ID", "dummy".to_owned()),
        ("AWS_SECRET_ACCESS_KEY", "dummy".to_owned()),
        ("AWS_REGION", "us-east-1".to_owned()),
    ];
    Deployment {
        host: LambdaHost::start(&env, processes).await,
        embedded: Catalog::builder(Arc::new(store), warehouse.clone()).build(),
        warehouse,
        dir,
    }
}

/// The conformance environment: a [`LambdaCatalog`] over functions on local files.
pub async fn local_env() -> TestEnv {
    local_deployment(PROCESSES).await.into_env().await
}

/// The conformance environment: a [`LambdaCatalog`] over functions on DynamoDB Local.
pub async fn dynamodb_env() -> TestEnv {
    dynamodb_deployment(PROCESSES).await.into_env().await
}

/// A [`LambdaCatalog`] over functions whose pointer directory lies below a regular file:
/// every store call is refused for good, and the functions say so (`STORE_REFUSED`).
pub async fn local_refusing() -> super::conformance::SharedCatalog {
    let dir = tempfile::tempdir().expect("temp dir");
    let warehouse = Warehouse::local(&dir.path().join("warehouse")).expect("warehouse");
    let blocker = dir.path().join("blocker");
    std::fs::write(&blocker, b"a regular file").expect("blocker");
    let catalog = url::Url::from_file_path(blocker.join("_catalog")).expect("file URI");
    let env = [
        ("PARQDB_WAREHOUSE", warehouse.root().to_owned()),
        ("PARQDB_CATALOG", catalog.to_string()),
    ];
    let host = LambdaHost::start(&env, 1).await;
    let remote = host.catalog().await;
    host.detach(dir);
    Arc::new(remote)
}

/// A [`LambdaCatalog`] over functions whose DynamoDB table does not exist.
pub async fn dynamodb_refusing() -> super::conformance::SharedCatalog {
    let endpoint = std::env::var("PARQDB_TEST_DYNAMODB_ENDPOINT")
        .expect("PARQDB_TEST_DYNAMODB_ENDPOINT is set (run scripts/test.sh)");
    let dir = tempfile::tempdir().expect("temp dir");
    let warehouse = Warehouse::local(&dir.path().join("warehouse")).expect("warehouse");
    let env = [
        ("PARQDB_WAREHOUSE", warehouse.root().to_owned()),
        (
            "PARQDB_CATALOG",
            format!(
                "dynamodb://parqdb-missing-{}",
                uuid::Uuid::new_v4().simple()
            ),
        ),
        ("AWS_ENDPOINT_URL_DYNAMODB", endpoint),
        ("AWS_ACCESS_KEY_ID", "dummy".to_owned()),
        ("AWS_SECRET_ACCESS_KEY", "dummy".to_owned()),
        ("AWS_REGION", "us-east-1".to_owned()),
    ];
    let host = LambdaHost::start(&env, 1).await;
    let remote = host.catalog().await;
    host.detach(dir);
    Arc::new(remote)
}
