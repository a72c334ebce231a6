//! The local services the network-backend tests run against: the S3-compatible server at
//! `PARQDB_TEST_S3_ENDPOINT` and DynamoDB Local at `PARQDB_TEST_DYNAMODB_ENDPOINT`, both
//! started by `scripts/test.sh`. A missing variable fails the test; nothing skips. The one
//! copy of the service setup: the conformance and store suites, the garbage collector's
//! harness (`support::gc`) and the Lambda host build on it.

use std::sync::Arc;
use std::time::Duration;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::config::{BehaviorVersion, Credentials, Region};
use parqdb_catalog::Catalog;
use parqdb_catalog::Warehouse;
use parqdb_catalog::store::dynamodb::DynamoStore;
use parqdb_catalog::store::s3::{S3Options, S3Store, amazon_s3_builder, create_bucket};

use super::fixture::{TestEnv, same_store};

fn required(variable: &str, service: &str) -> String {
    match std::env::var(variable) {
        Ok(value) if !value.is_empty() => value,
        _ => panic!(
            "{variable} is not set: this test needs {service}. Run the suite with \
             `scripts/test.sh` (see the README), which installs and starts it, or start it with \
             `scripts/services/<service>.sh start DIR` and export the variables in DIR/env."
        ),
    }
}

/// Options for the local S3-compatible server: dummy credentials, plain HTTP.
pub fn s3_options() -> S3Options {
    S3Options {
        endpoint: Some(required(
            "PARQDB_TEST_S3_ENDPOINT",
            "the S3-compatible server (moto)",
        )),
        region: Some("us-east-1".into()),
        allow_http: Some(true),
        access_key_id: Some("parqdb-test".into()),
        secret_access_key: Some("parqdb-test".into()),
        max_retries: Some(2),
        retry_timeout: Some(Duration::from_secs(30)),
        ..S3Options::default()
    }
}

/// An aws-sdk-s3 client of the test server: keys as they are, past object_store's parsing.
pub fn raw_s3_client() -> aws_sdk_s3::Client {
    use aws_sdk_s3::config::{Credentials, Region};
    let options = s3_options();
    aws_sdk_s3::Client::from_conf(
        aws_sdk_s3::config::Builder::new()
            .behavior_version(aws_sdk_s3::config::BehaviorVersion::latest())
            .endpoint_url(options.endpoint.expect("endpoint"))
            .region(Region::new("us-east-1"))
            .credentials_provider(Credentials::new(
                "parqdb-test",
                "parqdb-test",
                None,
                None,
                "t",
            ))
            .force_path_style(true)
            .build(),
    )
}

/// A new, empty bucket.
pub async fn new_bucket() -> String {
    new_bucket_named("parqdb-test-").await
}

/// A new, empty bucket whose name starts with `prefix`.
pub async fn new_bucket_named(prefix: &str) -> String {
    let bucket = format!("{prefix}{}", uuid::Uuid::new_v4().simple());
    create_bucket(&bucket, &s3_options())
        .await
        .expect("create bucket");
    bucket
}

/// A warehouse at `s3://bucket/prefix` on the local server.
pub fn s3_warehouse(bucket: &str, prefix: &str) -> Warehouse {
    let store = amazon_s3_builder(bucket, &s3_options())
        .expect("builder")
        .build()
        .expect("S3 client");
    Warehouse::new(
        &format!("s3://{bucket}/{prefix}"),
        Arc::new(store),
        object_store::path::Path::from(prefix),
    )
    .expect("warehouse")
}

/// A client for DynamoDB Local (it needs some credentials and a region, any will do).
pub fn dynamodb_client() -> Client {
    dynamodb_client_for(&required(
        "PARQDB_TEST_DYNAMODB_ENDPOINT",
        "DynamoDB Local (dynamodb)",
    ))
}

/// A client for the DynamoDB API at `endpoint` (DynamoDB Local or a test's fake server),
/// with dummy credentials.
pub fn dynamodb_client_for(endpoint: &str) -> Client {
    let config = aws_sdk_dynamodb::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .credentials_provider(Credentials::new("dummy", "dummy", None, None, "tests"))
        .endpoint_url(endpoint)
        .build();
    Client::from_conf(config)
}

/// A pointer store on a new DynamoDB Local table.
pub async fn dynamodb_store() -> DynamoStore {
    let store = DynamoStore::new(
        dynamodb_client(),
        format!("parqdb-test-{}", uuid::Uuid::new_v4().simple()),
    );
    store.create_table().await.expect("create table");
    store
}

/// A catalog whose pointers and metadata live in a new bucket of the S3-compatible server.
pub async fn s3_env() -> TestEnv {
    let bucket = new_bucket().await;
    let warehouse = s3_warehouse(&bucket, "wh");
    let store =
        S3Store::from_uri(&format!("s3://{bucket}/wh/_catalog"), &s3_options()).expect("store");
    let catalog = Catalog::builder(Arc::new(store), warehouse.clone()).build();
    TestEnv {
        with_registry: Some(same_store(&catalog)),
        catalog: Arc::new(catalog),
        warehouse,
    }
}

/// A catalog whose pointers live in a new DynamoDB Local table and whose metadata lives in
/// a new bucket of the S3-compatible server.
pub async fn dynamodb_env() -> TestEnv {
    let bucket = new_bucket().await;
    let warehouse = s3_warehouse(&bucket, "wh");
    let store = dynamodb_store().await;
    let catalog = Catalog::builder(Arc::new(store), warehouse.clone()).build();
    TestEnv {
        with_registry: Some(same_store(&catalog)),
        catalog: Arc::new(catalog),
        warehouse,
    }
}

/// A catalog whose pointer store is a bucket that does not exist (its metadata bucket
/// does): every write is refused for good.
pub async fn s3_refusing() -> super::conformance::SharedCatalog {
    let warehouse = s3_warehouse(&new_bucket().await, "wh");
    let missing = format!("parqdb-missing-{}", uuid::Uuid::new_v4().simple());
    let store =
        S3Store::from_uri(&format!("s3://{missing}/_catalog"), &s3_options()).expect("store");
    Arc::new(Catalog::builder(Arc::new(store), warehouse).build())
}

/// A catalog whose pointer store is a DynamoDB table that does not exist: refused for good.
pub async fn dynamodb_refusing() -> super::conformance::SharedCatalog {
    let warehouse = s3_warehouse(&new_bucket().await, "wh");
    let store = DynamoStore::new(
        dynamodb_client(),
        format!("parqdb-missing-{}", uuid::Uuid::new_v4().simple()),
    );
    Arc::new(Catalog::builder(Arc::new(store), warehouse).build())
}
