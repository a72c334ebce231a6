//! Temporary: latency measurement against DynamoDB Local (deleted after use).
use std::time::Instant;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::config::{BehaviorVersion, Credentials, Region};
use aws_sdk_dynamodb::types::AttributeValue;
use bytes::Bytes;
use parqdb_catalog::store::dynamodb::DynamoStore;
use parqdb_catalog::store::{PointerStore, PutMode, StoreKey};

fn stats(name: &str, mut v: Vec<f64>) {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let n = v.len();
    println!("{name}: n={n} median={:.2} ms p90={:.2} ms min={:.2} ms", v[n / 2], v[n * 9 / 10], v[0]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn measure() {
    let endpoint = std::env::var("PARQDB_TEST_DYNAMODB_ENDPOINT").unwrap();
    let config = aws_sdk_dynamodb::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .credentials_provider(Credentials::new("dummy", "dummy", None, None, "tests"))
        .endpoint_url(&endpoint)
        .build();
    let client = Client::from_conf(config);
    let table = format!("measure-{}", uuid::Uuid::new_v4().simple());
    let store = DynamoStore::new(client.clone(), table.clone());
    let t = Instant::now();
    store.create_table().await.unwrap();
    println!("create_table: {:.1} ms", t.elapsed().as_secs_f64() * 1e3);
    let key = StoreKey::new("i/a/b/=x").unwrap();
    let value = Bytes::from(vec![b'v'; 300]);
    let mut version = store.put(&key, value.clone(), PutMode::Create).await.unwrap();
    // warm up
    for _ in 0..50 {
        store.get(&key).await.unwrap();
    }
    let n = 300;
    let mut raw_get = Vec::new();
    for _ in 0..n {
        let t = Instant::now();
        client.get_item().table_name(&table)
            .key("pk", AttributeValue::S("i/a/b/=".into()))
            .key("sk", AttributeValue::S("x".into()))
            .consistent_read(true).send().await.unwrap();
        raw_get.push(t.elapsed().as_secs_f64() * 1e3);
    }
    stats("raw GetItem (consistent)", raw_get);
    let mut raw_put = Vec::new();
    let mut current: u64 = version.as_str().parse().unwrap();
    for _ in 0..n {
        let t = Instant::now();
        client.put_item().table_name(&table)
            .item("pk", AttributeValue::S("i/a/b/=".into()))
            .item("sk", AttributeValue::S("x".into()))
            .item("value", AttributeValue::B(aws_sdk_dynamodb::primitives::Blob::new(value.to_vec())))
            .item("version", AttributeValue::N((current + 1).to_string()))
            .condition_expression("#v = :expected")
            .expression_attribute_names("#v", "version")
            .expression_attribute_values(":expected", AttributeValue::N(current.to_string()))
            .send().await.unwrap();
        current += 1;
        raw_put.push(t.elapsed().as_secs_f64() * 1e3);
    }
    stats("raw conditional PutItem", raw_put);
    version = parqdb_catalog::store::Version::new(current.to_string());
    let mut get = Vec::new();
    for _ in 0..n {
        let t = Instant::now();
        store.get(&key).await.unwrap();
        get.push(t.elapsed().as_secs_f64() * 1e3);
    }
    stats("store.get", get);
    let mut put = Vec::new();
    for _ in 0..n {
        let t = Instant::now();
        version = store.put(&key, value.clone(), PutMode::Update(version.clone())).await.unwrap();
        put.push(t.elapsed().as_secs_f64() * 1e3);
    }
    stats("store.put(Update)", put);
    let mut unchanged = Vec::new();
    for _ in 0..n {
        let t = Instant::now();
        store.get_if_changed(&key, &version).await.unwrap();
        unchanged.push(t.elapsed().as_secs_f64() * 1e3);
    }
    stats("store.get_if_changed (unchanged)", unchanged);
}

#[tokio::test]
async fn from_env_endpoint() {
    // Run with AWS_ENDPOINT_URL_DYNAMODB, AWS_REGION and dummy credentials in the environment.
    let store = DynamoStore::from_env(format!("fromenv-{}", uuid::Uuid::new_v4().simple()), None).await.unwrap();
    store.create_table().await.unwrap();
    let key = StoreKey::new("f/=k").unwrap();
    store.put(&key, Bytes::from_static(b"x"), PutMode::Create).await.unwrap();
    println!("from_env via AWS_ENDPOINT_URL_DYNAMODB ok: {}", store.describe());
    let store = DynamoStore::from_env(store.table().to_owned(), Some(&std::env::var("PARQDB_TEST_DYNAMODB_ENDPOINT").unwrap())).await.unwrap();
    assert!(store.get(&key).await.unwrap().is_some());
    println!("from_env via explicit endpoint ok");
}
