//! The store contract on the DynamoDB store, against DynamoDB Local.
//!
//! `scripts/test.sh` starts DynamoDB Local (`scripts/services/dynamodb.sh`) and sets
//! `PARQDB_TEST_DYNAMODB_ENDPOINT`. Each test gets a fresh table.
#![allow(clippy::disallowed_methods)] // tests may read the wall clock and draw random ids (unique names)

use std::sync::Arc;

use crate::support::services;
use crate::support::store_suite::assert_unavailable;
use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::AttributeValue;
use bytes::Bytes;
use parqdb_catalog::ErrorKind;
use parqdb_catalog::store::PointerStoreExt;
use parqdb_catalog::store::dynamodb::DynamoStore;
use parqdb_catalog::store::{
    Listing, PointerStore, PutMode, StoreError, StoreKey, TxWrite, Version,
};

use crate::support::services::dynamodb_client_for as client_for;

/// A client for DynamoDB Local at `PARQDB_TEST_DYNAMODB_ENDPOINT` (the test fails,
/// naming `scripts/test.sh`, if it is not set).
fn client() -> Client {
    services::dynamodb_client()
}

fn table_name() -> String {
    format!("parqdb-test-{}", uuid::Uuid::new_v4().simple())
}

/// A store on a new, empty table.
async fn fresh_store() -> DynamoStore {
    services::dynamodb_store().await
}

async fn fresh() -> Arc<dyn PointerStore> {
    Arc::new(fresh_store().await)
}

store_contract!(fresh());

fn key(text: &str) -> StoreKey {
    StoreKey::new(text).expect("valid key")
}

fn tx(k: &StoreKey, value: &'static [u8], mode: PutMode) -> TxWrite {
    TxWrite {
        key: k.clone(),
        value: Bytes::from_static(value),
        mode,
        listing: Listing::Check,
    }
}

#[tokio::test]
async fn keys_at_the_length_limit_fit_and_longer_keys_are_typed_errors() {
    let store = fresh_store().await;
    // The longest store keys: a long leaf (sort key) and a long key without `=` (partition).
    let long_leaf = key(&format!("a/={}", "x".repeat(1021)));
    let long_partition = key(&format!("{}/=x", "p".repeat(1021)));
    let no_leaf = key(&"n".repeat(1024));
    for k in [&long_leaf, &long_partition, &no_leaf] {
        assert_eq!(k.as_str().len(), 1024);
        let v = store
            .put(k, Bytes::from_static(b"v"), PutMode::Create)
            .await
            .expect("put");
        let read = store.get(k).await.expect("get").expect("present");
        assert_eq!((read.value.as_ref(), read.version), (&b"v"[..], v));
    }
    let listed = store.list(&key("a/="), None, 10).await.expect("list");
    assert_eq!(listed.entries.len(), 1);
    assert_eq!(listed.entries[0].key, long_leaf);

    // One byte more is not a store key at all: a typed error before any request.
    let err = StoreKey::new(format!("a/={}", "x".repeat(1022))).expect_err("too long");
    assert_eq!(err.kind(), ErrorKind::InvalidRequest);

    // A value that would make the item larger than DynamoDB's 400 KB is refused, typed.
    let big = Bytes::from(vec![b'x'; 400 * 1024]);
    let refused = store
        .put(&key("a/=big"), big.clone(), PutMode::Create)
        .await;
    assert!(
        matches!(refused, Err(StoreError::NotSupported(_))),
        "{refused:?}"
    );
    let refused = store
        .transact(vec![TxWrite {
            key: key("a/=big"),
            value: big,
            mode: PutMode::Create,
            listing: Listing::Check,
        }])
        .await;
    assert!(
        matches!(refused, Err(StoreError::NotSupported(_))),
        "{refused:?}"
    );
    assert!(store.get(&key("a/=big")).await.expect("get").is_none());
    let fits = Bytes::from(vec![b'x'; 390 * 1024]);
    store
        .put(&key("a/=big"), fits.clone(), PutMode::Create)
        .await
        .expect("a 390 KB value fits");
    assert_eq!(
        store
            .get(&key("a/=big"))
            .await
            .expect("get")
            .expect("present")
            .value,
        fits
    );
}

#[tokio::test]
async fn a_retried_transaction_is_applied_once() {
    let store = fresh_store().await;
    let (a, b) = (key("x/=a"), key("x/=b"));
    let va = store
        .put(&a, Bytes::from_static(b"a1"), PutMode::Create)
        .await
        .expect("create");
    let writes = vec![
        tx(&a, b"a2", PutMode::Update(va.clone())),
        tx(&b, b"b1", PutMode::Create),
    ];

    let first = store.transact(writes.clone()).await.expect("first attempt");
    // The same transaction again (a client retry after a lost response): its conditions no
    // longer hold, yet it answers success with the same versions and applies nothing more.
    let retry = store.transact(writes.clone()).await.expect("retry");
    assert_eq!(first, retry);
    let read_a = store.get(&a).await.expect("get").expect("a");
    let read_b = store.get(&b).await.expect("get").expect("b");
    assert_eq!(
        (read_a.value.as_ref(), &read_a.version),
        (&b"a2"[..], &first[0])
    );
    assert_eq!(
        (read_b.value.as_ref(), &read_b.version),
        (&b"b1"[..], &first[1])
    );

    // A different transaction on the same stale conditions is a new request and fails.
    let other = store
        .transact(vec![
            tx(&a, b"a3", PutMode::Update(va)),
            tx(&b, b"b2", PutMode::Create),
        ])
        .await;
    assert!(matches!(other, Err(StoreError::Precondition)), "{other:?}");

    // The versions the retry returned are the live ones.
    let next = store
        .put(
            &a,
            Bytes::from_static(b"a4"),
            PutMode::Update(retry[0].clone()),
        )
        .await;
    assert!(next.is_ok(), "{next:?}");
}

#[tokio::test]
async fn a_transaction_with_a_failed_condition_applies_nothing() {
    let store = fresh_store().await;
    let (a, b, c) = (key("x/=a"), key("x/=b"), key("x/=c"));
    let va = store
        .put(&a, Bytes::from_static(b"a1"), PutMode::Create)
        .await
        .expect("create");
    let vb = store
        .put(&b, Bytes::from_static(b"b1"), PutMode::Create)
        .await
        .expect("create");
    let vb2 = store
        .put(&b, Bytes::from_static(b"b2"), PutMode::Update(vb.clone()))
        .await
        .expect("update");

    for failing in [
        tx(&b, b"b3", PutMode::Update(vb.clone())), // stale version
        tx(&b, b"b3", PutMode::Create),             // already exists
        tx(&b, b"b3", PutMode::Update(Version::new("not-a-version"))), // never a version here
    ] {
        let result = store
            .transact(vec![
                tx(&a, b"a2", PutMode::Update(va.clone())),
                failing,
                tx(&c, b"c1", PutMode::Create),
            ])
            .await;
        assert!(
            matches!(result, Err(StoreError::Precondition)),
            "{result:?}"
        );
        let read_a = store.get(&a).await.expect("get").expect("a");
        assert_eq!((read_a.value.as_ref(), &read_a.version), (&b"a1"[..], &va));
        let read_b = store.get(&b).await.expect("get").expect("b");
        assert_eq!((read_b.value.as_ref(), &read_b.version), (&b"b2"[..], &vb2));
        assert!(store.get(&c).await.expect("get").is_none());
    }

    // Writing one key twice in a transaction is refused before sending.
    let twice = store
        .transact(vec![
            tx(&c, b"1", PutMode::Create),
            tx(&c, b"2", PutMode::Create),
        ])
        .await;
    assert_unavailable(&twice, false);
    assert!(
        store
            .transact(Vec::new())
            .await
            .expect("empty transaction")
            .is_empty()
    );
}

#[tokio::test]
async fn listing_follows_dynamodb_pagination() {
    let store = fresh_store().await;
    // 12 items of 200 KB: DynamoDB answers a Query with at most 1 MB, so one page of the
    // store spans several DynamoDB responses.
    let names: Vec<String> = (0..12).map(|i| format!("p/=k{i:02}")).collect();
    for name in &names {
        let mut value = name.clone().into_bytes();
        value.resize(200 * 1024, b'.');
        store
            .put(&key(name), Bytes::from(value), PutMode::Create)
            .await
            .expect("create");
    }
    store
        .put(
            &key("p/deeper/=k"),
            Bytes::from_static(b"x"),
            PutMode::Create,
        )
        .await
        .expect("create");
    store
        .put(&key("p2/=k"), Bytes::from_static(b"x"), PutMode::Create)
        .await
        .expect("create");

    // DynamoDB itself paginates this partition.
    let raw = client()
        .query()
        .table_name(store.table())
        .key_condition_expression("pk = :pk")
        .expression_attribute_values(":pk", AttributeValue::S("p/=".into()))
        .consistent_read(true)
        .send()
        .await
        .expect("raw query");
    assert!(
        raw.items().len() < names.len() && raw.last_evaluated_key().is_some(),
        "{} items",
        raw.items().len()
    );

    let check = |page: &parqdb_catalog::store::ListPage| {
        for entry in &page.entries {
            let value = &entry
                .value
                .as_ref()
                .expect("values come with the listing")
                .value;
            assert!(value.starts_with(entry.key.as_str().as_bytes()) && value.len() == 200 * 1024);
        }
    };
    let all = store.list(&key("p/="), None, 1000).await.expect("list");
    check(&all);
    let keys: Vec<&str> = all.entries.iter().map(|e| e.key.as_str()).collect();
    assert_eq!(keys, names);
    assert!(!all.more);

    for limit in [1, 5, 12] {
        let mut seen = Vec::new();
        let mut after: Option<StoreKey> = None;
        loop {
            let page = store
                .list(&key("p/="), after.as_ref(), limit)
                .await
                .expect("list");
            check(&page);
            assert!(page.entries.len() <= limit);
            seen.extend(page.entries.iter().map(|e| e.key.as_str().to_owned()));
            after = page.entries.last().map(|e| e.key.clone());
            if !page.more {
                break;
            }
            assert_eq!(
                page.entries.len(),
                limit,
                "a page with more to follow is full"
            );
        }
        assert_eq!(seen, names, "limit {limit}");
    }
}

/// Listing follows the trait's definition (keys that start with the prefix and sort after
/// `start_after`, ascending, at most `limit`) for every prefix, position and limit,
/// including keys without `=`, keys equal to a prefix and prefixes with text after the `=`.
#[tokio::test]
async fn listing_matches_its_definition() {
    let store = fresh_store().await;
    let mut keys = vec![
        "l/=",
        "l/=+x",
        "l/=-x",
        "l/=0",
        "l/=a",
        "l/=ab",
        "l/=ab/c",
        "l/=ab=c",
        "l/=b",
        "l/=~2e",
        "l/a/=x",
        "l2/=a",
        "l",
        "l/x",
        "_catalog/owner",
    ];
    for k in &keys {
        store
            .put(&key(k), Bytes::from(*k), PutMode::Create)
            .await
            .expect("create");
    }
    keys.sort_unstable();
    for k in ["l", "l/x", "_catalog/owner", "l/="] {
        let read = store.get(&key(k)).await.expect("get").expect("present");
        assert_eq!(read.value.as_ref(), k.as_bytes());
    }
    let prefixes = [
        "l/=", "l/=a", "l/=ab", "l/=ab=", "l/a/=", "l2/=", "l3/=", "l/=z",
    ];
    let positions = [
        None,
        Some("a"),
        Some("l/a"),
        Some("l/="),
        Some("l/=+"),
        Some("l/=a"),
        Some("l/=aa"),
        Some("l/=ab"),
        Some("l/=ab/c"),
        Some("l/=b"),
        Some("l/=zz"),
        Some("z"),
    ];
    for prefix in prefixes {
        for after in positions {
            for limit in [0, 1, 2, 100] {
                let matching: Vec<&str> = keys
                    .iter()
                    .copied()
                    .filter(|k| k.starts_with(prefix) && after.is_none_or(|a| *k > a))
                    .collect();
                let want: Vec<&str> = matching.iter().copied().take(limit).collect();
                let got = store
                    .list(&key(prefix), after.map(key).as_ref(), limit)
                    .await
                    .expect("list");
                let names: Vec<&str> = got.entries.iter().map(|e| e.key.as_str()).collect();
                let case = format!("prefix {prefix}, after {after:?}, limit {limit}");
                assert_eq!(names, want, "{case}");
                assert_eq!(got.more, matching.len() > limit, "{case}");
                for entry in &got.entries {
                    let value = entry.value.as_ref().expect("value");
                    assert_eq!(
                        value.value.as_ref(),
                        entry.key.as_str().as_bytes(),
                        "{case}"
                    );
                }
            }
        }
    }
    // A prefix without `=` would need a scan.
    let refused = store.list(&key("l"), None, 10).await;
    assert!(
        matches!(refused, Err(StoreError::NotSupported(_))),
        "{refused:?}"
    );
}

#[tokio::test]
async fn get_if_changed_reports_all_three_answers() {
    crate::support::store_suite::get_if_changed_answers(&fresh_store().await).await;
}

#[tokio::test]
async fn create_table_is_idempotent_and_checks_the_schema() {
    let store = fresh_store().await;
    store.create_table().await.expect("again");

    // A table with another key schema is a configuration error, not a store to use.
    let other = table_name();
    let client = client();
    client
        .create_table()
        .table_name(&other)
        .attribute_definitions(
            aws_sdk_dynamodb::types::AttributeDefinition::builder()
                .attribute_name("id")
                .attribute_type(aws_sdk_dynamodb::types::ScalarAttributeType::S)
                .build()
                .expect("attribute"),
        )
        .key_schema(
            aws_sdk_dynamodb::types::KeySchemaElement::builder()
                .attribute_name("id")
                .key_type(aws_sdk_dynamodb::types::KeyType::Hash)
                .build()
                .expect("key"),
        )
        .billing_mode(aws_sdk_dynamodb::types::BillingMode::PayPerRequest)
        .send()
        .await
        .expect("create foreign table");
    let err = DynamoStore::new(client, other)
        .create_table()
        .await
        .expect_err("wrong schema");
    assert_eq!(err.kind(), ErrorKind::Configuration, "{err}");
}

#[tokio::test]
async fn a_missing_table_is_a_non_retryable_failure() {
    let store = DynamoStore::new(client(), table_name());
    let read = store.get(&key("m/=k")).await;
    assert_unavailable(&read, false);
    let write = store
        .put(&key("m/=k"), Bytes::from_static(b"x"), PutMode::Create)
        .await;
    assert_unavailable(&write, false);
    let message = write.expect_err("failed").to_string();
    assert!(message.contains(store.table()), "{message}");
}

#[tokio::test]
async fn a_refused_connection_did_not_apply() {
    // Nothing listens on a port that was just released.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port();
    let store = DynamoStore::new(
        client_for(&format!("http://127.0.0.1:{port}")),
        "parqdb-unreachable",
    );
    let write = store
        .put(&key("r/=k"), Bytes::from_static(b"x"), PutMode::Create)
        .await;
    assert_unavailable(&write, true);
    let read = store.get(&key("r/=k")).await;
    assert_unavailable(&read, true);
    let transaction = store
        .transact(vec![tx(&key("r/=k"), b"x", PutMode::Create)])
        .await;
    assert_unavailable(&transaction, true);
}

#[tokio::test]
async fn describe_names_the_table() {
    let store = DynamoStore::new(client(), "parqdb-catalog");
    assert_eq!(store.describe(), "dynamodb://parqdb-catalog");
    assert!(store.capabilities().atomic_multi_key_write);
}

/// What the fake DynamoDB endpoint does with every request.
#[derive(Clone, Copy)]
enum Reply {
    /// Answer with this status and JSON body.
    With(u16, &'static str),
    /// Read the request, then close the connection without answering.
    Close,
    /// Read the request and never answer.
    Hang,
}

/// A one-trick HTTP server on 127.0.0.1 standing in for DynamoDB, counting the requests
/// it receives: the failures DynamoDB Local cannot be made to produce.
async fn fake_dynamodb(reply: Reply) -> (String, Arc<std::sync::atomic::AtomicUsize>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let endpoint = format!("http://{}", listener.local_addr().expect("addr"));
    let requests = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = requests.clone();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let counter = counter.clone();
            tokio::spawn(async move {
                // Read the head, then as many body bytes as it announces.
                let mut request = Vec::new();
                let mut buffer = [0u8; 4096];
                let complete = |request: &[u8]| -> bool {
                    let Some(end) = request.windows(4).position(|w| w == b"\r\n\r\n") else {
                        return false;
                    };
                    let head = String::from_utf8_lossy(&request[..end]).to_ascii_lowercase();
                    let length = head
                        .lines()
                        .find_map(|line| line.strip_prefix("content-length:"))
                        .and_then(|v| v.trim().parse::<usize>().ok())
                        .unwrap_or(0);
                    request.len() >= end + 4 + length
                };
                while !complete(&request) {
                    match socket.read(&mut buffer).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => request.extend_from_slice(&buffer[..n]),
                    }
                }
                counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                match reply {
                    Reply::With(status, body) => {
                        let response = format!(
                            "HTTP/1.1 {status} Fake\r\nContent-Type: application/x-amz-json-1.0\r\n\
                             Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
                            body.len()
                        );
                        let _ = socket.write_all(response.as_bytes()).await;
                        let _ = socket.shutdown().await;
                    }
                    Reply::Close => drop(socket),
                    Reply::Hang => {
                        tokio::time::sleep(std::time::Duration::from_secs(60)).await;
                        drop(socket);
                    }
                }
            });
        }
    });
    (endpoint, requests)
}

const INTERNAL_ERROR: &str =
    r#"{"__type":"com.amazonaws.dynamodb.v20120810#InternalServerError","message":"fake"}"#;
const THROUGHPUT: &str = r#"{"__type":"com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException","message":"fake"}"#;
const THROTTLING: &str =
    r#"{"__type":"com.amazonaws.dynamodb.v20120810#ThrottlingException","message":"fake"}"#;
const CONDITION: &str = r#"{"__type":"com.amazonaws.dynamodb.v20120810#ConditionalCheckFailedException","message":"fake"}"#;
const VALIDATION: &str =
    r#"{"__type":"com.amazon.coral.validate#ValidationException","message":"fake"}"#;
const CANCELLED_BY_CONFLICT: &str = r#"{"__type":"com.amazonaws.dynamodb.v20120810#TransactionCanceledException","Message":"fake","CancellationReasons":[{"Code":"None"},{"Code":"TransactionConflict","Message":"fake"}]}"#;
const CANCELLED_BY_CONDITION: &str = r#"{"__type":"com.amazonaws.dynamodb.v20120810#TransactionCanceledException","Message":"fake","CancellationReasons":[{"Code":"ConditionalCheckFailed","Message":"fake"},{"Code":"TransactionConflict","Message":"fake"}]}"#;
const IN_PROGRESS: &str = r#"{"__type":"com.amazonaws.dynamodb.v20120810#TransactionInProgressException","message":"fake"}"#;

async fn fake_store(reply: Reply) -> (DynamoStore, Arc<std::sync::atomic::AtomicUsize>) {
    let (endpoint, requests) = fake_dynamodb(reply).await;
    // The SDK's standard retries (3 attempts), with short pauses to keep the test quick.
    let retries = aws_sdk_dynamodb::config::retry::RetryConfig::standard()
        .with_max_attempts(3)
        .with_initial_backoff(std::time::Duration::from_millis(10));
    let config = client_for(&endpoint)
        .config()
        .to_builder()
        .retry_config(retries)
        .build();
    (
        DynamoStore::new(Client::from_conf(config), "parqdb-fake"),
        requests,
    )
}

fn sent(requests: &std::sync::atomic::AtomicUsize) -> usize {
    requests.swap(0, std::sync::atomic::Ordering::SeqCst)
}

fn one_write() -> Vec<TxWrite> {
    vec![tx(&key("f/=k"), b"x", PutMode::Create)]
}

#[tokio::test]
async fn a_server_error_on_a_write_is_ambiguous_and_not_retried() {
    let (store, requests) = fake_store(Reply::With(500, INTERNAL_ERROR)).await;
    let k = key("f/=k");
    let write = store
        .put(&k, Bytes::from_static(b"x"), PutMode::Create)
        .await;
    assert!(matches!(write, Err(StoreError::Ambiguous(_))), "{write:?}");
    // A conditional put is sent once: an SDK retry could fail its condition against the
    // first attempt and turn a success into a lost race.
    assert_eq!(sent(&requests), 1);
    let transaction = store.transact(one_write()).await;
    assert!(
        matches!(transaction, Err(StoreError::Ambiguous(_))),
        "{transaction:?}"
    );
    // Reads and transactions (idempotent through their request token) keep SDK retries.
    assert_eq!(sent(&requests), 3);
    let read = store.get(&k).await;
    assert_unavailable(&read, true);
    assert_eq!(sent(&requests), 3);
}

#[tokio::test]
async fn a_closed_connection_or_a_timeout_on_a_write_is_ambiguous() {
    let (store, _) = fake_store(Reply::Close).await;
    let k = key("f/=k");
    let write = store
        .put(&k, Bytes::from_static(b"x"), PutMode::Create)
        .await;
    assert!(matches!(write, Err(StoreError::Ambiguous(_))), "{write:?}");
    let transaction = store.transact(one_write()).await;
    assert!(
        matches!(transaction, Err(StoreError::Ambiguous(_))),
        "{transaction:?}"
    );
    let read = store.get(&k).await;
    assert_unavailable(&read, true);

    let (endpoint, _) = fake_dynamodb(Reply::Hang).await;
    let config = client_for(&endpoint)
        .config()
        .to_builder()
        .timeout_config(
            aws_sdk_dynamodb::config::timeout::TimeoutConfig::builder()
                .operation_attempt_timeout(std::time::Duration::from_millis(300))
                .build(),
        )
        .retry_config(aws_sdk_dynamodb::config::retry::RetryConfig::disabled())
        .build();
    let store = DynamoStore::new(Client::from_conf(config), "parqdb-fake");
    let write = store
        .put(&k, Bytes::from_static(b"x"), PutMode::Create)
        .await;
    assert!(matches!(write, Err(StoreError::Ambiguous(_))), "{write:?}");
    let read = store.get(&k).await;
    assert_unavailable(&read, true);
}

#[tokio::test]
async fn throttling_did_not_apply_and_is_retryable() {
    for body in [THROUGHPUT, THROTTLING] {
        let (store, requests) = fake_store(Reply::With(400, body)).await;
        let k = key("f/=k");
        let write = store
            .put(&k, Bytes::from_static(b"x"), PutMode::Create)
            .await;
        assert_unavailable(&write, true);
        assert_eq!(sent(&requests), 1);
        let read = store.get(&k).await;
        assert_unavailable(&read, true);
        assert_eq!(sent(&requests), 3);
        let transaction = store.transact(one_write()).await;
        assert_unavailable(&transaction, true);
        assert_eq!(sent(&requests), 3);
    }
}

#[tokio::test]
async fn condition_failures_and_cancellations_map_to_their_outcomes() {
    let (store, _) = fake_store(Reply::With(400, CONDITION)).await;
    let k = key("f/=k");
    let create = store
        .put(&k, Bytes::from_static(b"x"), PutMode::Create)
        .await;
    assert!(
        matches!(create, Err(StoreError::AlreadyExists)),
        "{create:?}"
    );
    let update = store
        .put(
            &k,
            Bytes::from_static(b"x"),
            PutMode::Update(Version::new("3")),
        )
        .await;
    assert!(
        matches!(update, Err(StoreError::Precondition)),
        "{update:?}"
    );

    let two = || {
        vec![
            tx(&key("f/=a"), b"x", PutMode::Create),
            tx(&key("f/=b"), b"x", PutMode::Create),
        ]
    };
    let (store, _) = fake_store(Reply::With(400, CANCELLED_BY_CONFLICT)).await;
    let conflict = store.transact(two()).await;
    assert_unavailable(&conflict, true);
    let (store, _) = fake_store(Reply::With(400, CANCELLED_BY_CONDITION)).await;
    let condition = store.transact(two()).await;
    assert!(
        matches!(condition, Err(StoreError::Precondition)),
        "{condition:?}"
    );
    let (store, _) = fake_store(Reply::With(400, IN_PROGRESS)).await;
    let in_progress = store.transact(two()).await;
    assert!(
        matches!(in_progress, Err(StoreError::Ambiguous(_))),
        "{in_progress:?}"
    );
}

#[tokio::test]
async fn a_rejected_request_is_not_retryable() {
    let (store, _) = fake_store(Reply::With(400, VALIDATION)).await;
    let k = key("f/=k");
    let write = store
        .put(&k, Bytes::from_static(b"x"), PutMode::Create)
        .await;
    assert_unavailable(&write, false);
    let read = store.get(&k).await;
    assert_unavailable(&read, false);
    let list = store.list(&key("f/="), None, 10).await;
    assert_unavailable(&list, false);
}
