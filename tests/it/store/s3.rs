//! The store contract on the S3 store, against a local S3-compatible server (moto with
//! serialised requests, `scripts/services/moto.sh`) at `PARQDB_TEST_S3_ENDPOINT`.
//!
//! Every test makes its own bucket, so the tests run in parallel on one server.
#![allow(clippy::disallowed_methods)] // tests may read the wall clock and draw random ids (unique names)

use std::sync::Arc;

use bytes::Bytes;
use object_store::path::Path;
use object_store::{ObjectStoreExt, PutPayload};
use parqdb_catalog::store::PointerStoreExt;
use parqdb_catalog::store::probe;
use parqdb_catalog::store::s3::{S3Store, amazon_s3_builder, create_bucket};
use parqdb_catalog::store::{PointerStore, PutMode, StoreError, StoreKey};
use parqdb_catalog::{ErrorKind, RandomIds};

use crate::support::services::{new_bucket_named as new_bucket, s3_options as options};
use crate::support::store_suite::assert_unavailable;

fn store_in(bucket: &str, prefix: &str) -> S3Store {
    S3Store::from_uri(&format!("s3://{bucket}/{prefix}"), &options()).expect("S3 store")
}

async fn fresh() -> Arc<dyn PointerStore> {
    let bucket = new_bucket("parqdb-test-").await;
    Arc::new(store_in(&bucket, "catalog"))
}

store_contract!(fresh());

fn key(text: &str) -> StoreKey {
    StoreKey::new(text).expect("valid key")
}

#[tokio::test]
async fn creating_a_bucket_twice_is_fine() {
    let bucket = new_bucket("parqdb-test-").await;
    create_bucket(&bucket, &options())
        .await
        .expect("second create");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_cas_counter_with_16_writers() {
    crate::support::store_suite::racing_cas_counter(fresh().await, 16, 5).await;
}

/// Many rounds of 16 racing creates: exactly one winner each round. A server that checks
/// and writes without a lock (plain moto) lets two writers win in some rounds.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_creates_have_one_winner_in_every_round() {
    const ROUNDS: usize = 50;
    const WRITERS: usize = 16;
    let store = fresh().await;
    for round in 0..ROUNDS {
        let k = key(&format!("t/=race-{round}"));
        let barrier = Arc::new(tokio::sync::Barrier::new(WRITERS));
        let mut tasks = Vec::new();
        for writer in 0..WRITERS {
            let (store, k, barrier) = (store.clone(), k.clone(), barrier.clone());
            tasks.push(tokio::spawn(async move {
                barrier.wait().await;
                store
                    .put(&k, Bytes::from(writer.to_string()), PutMode::Create)
                    .await
            }));
        }
        let mut winners = Vec::new();
        for (writer, task) in tasks.into_iter().enumerate() {
            match task.await.expect("writer task") {
                Ok(_) => winners.push(writer),
                Err(StoreError::AlreadyExists) => {}
                Err(other) => panic!("unexpected store error: {other}"),
            }
        }
        assert_eq!(winners.len(), 1, "round {round}: winners {winners:?}");
        let stored = store.get(&k).await.expect("get").expect("present");
        assert_eq!(
            stored.value,
            Bytes::from(winners[0].to_string()),
            "round {round}"
        );
    }
}

#[tokio::test]
async fn keys_round_trip_verbatim() {
    let bucket = new_bucket("parqdb-test-").await;
    let store = store_in(&bucket, "cat");
    let names = [
        "i/a~2e~2f/=b+c",
        "i/a~2e~2f/=b-c",
        "i/a~2e~2f/=b_c",
        "i/a~2e~2f/=b~7e",
    ];
    for name in names {
        store
            .put(&key(name), Bytes::from(name.to_owned()), PutMode::Create)
            .await
            .expect("create");
        let read = store.get(&key(name)).await.expect("get").expect("present");
        assert_eq!(read.value.as_ref(), name.as_bytes());
    }
    let page = store
        .list(&key("i/a~2e~2f/="), None, 10)
        .await
        .expect("list");
    let mut expected = names.map(str::to_owned).to_vec();
    expected.sort();
    let listed: Vec<String> = page
        .entries
        .iter()
        .map(|e| e.key.as_str().to_owned())
        .collect();
    assert_eq!(listed, expected);
    assert!(
        page.entries.iter().all(|e| e.value.is_none()),
        "S3 listings carry no values"
    );
    assert!(!page.more);

    // The objects are where the module docs say: `<prefix>/<key>`, verbatim.
    let raw = amazon_s3_builder(&bucket, &options())
        .expect("builder")
        .build()
        .expect("client");
    let meta = raw
        .head(&Path::parse("cat/i/a~2e~2f/=b+c").expect("path"))
        .await
        .expect("head");
    // The value, then a listing-class trailer that makes `size % 4` the class (`put` writes
    // `check`, code 3).
    let value = "i/a~2e~2f/=b+c".len() as u64;
    assert!(
        (value + 5..value + 9).contains(&meta.size),
        "{} bytes",
        meta.size
    );
    assert_eq!(meta.size % 4, 3);
}

#[tokio::test]
async fn listing_skips_foreign_objects_and_respects_prefixes() {
    let bucket = new_bucket("parqdb-test-").await;
    let store = store_in(&bucket, "a");
    let sibling = store_in(&bucket, "a2");
    for name in ["n/=x", "n/=y", "n/=z"] {
        store
            .put(&key(name), Bytes::from_static(b"v"), PutMode::Create)
            .await
            .expect("create");
    }
    sibling
        .put(&key("n/=w"), Bytes::from_static(b"v"), PutMode::Create)
        .await
        .expect("create");
    let raw = amazon_s3_builder(&bucket, &options())
        .expect("builder")
        .build()
        .expect("client");
    for foreign in ["a/n/=x.json", "a/n/=X", "a/n/=xx/part.parquet"] {
        raw.put(
            &Path::parse(foreign).expect("path"),
            PutPayload::from_static(b"f"),
        )
        .await
        .expect("foreign put");
    }

    let all = store.list(&key("n/="), None, 100).await.expect("list");
    let listed: Vec<&str> = all.entries.iter().map(|e| e.key.as_str()).collect();
    assert_eq!(listed, ["n/=x", "n/=y", "n/=z"]);

    let after = store
        .list(&key("n/="), Some(&key("n/=x")), 1)
        .await
        .expect("list");
    let listed: Vec<&str> = after.entries.iter().map(|e| e.key.as_str()).collect();
    assert_eq!((listed.as_slice(), after.more), (["n/=y"].as_slice(), true));

    let none = store.list(&key("n/="), None, 0).await.expect("list");
    assert!(none.entries.is_empty() && none.more);

    let root = store_in(&bucket, "");
    let from_root = root.list(&key("a2/n/="), None, 10).await.expect("list");
    let listed: Vec<&str> = from_root.entries.iter().map(|e| e.key.as_str()).collect();
    assert_eq!(listed, ["a2/n/=w"]);
}

/// Keys object_store cannot parse (an empty, `.` or `..` segment, a control character)
/// are ordinary S3 keys a stray writer may put below the store's prefix. object_store
/// failed the whole listing page on one, which stopped every listing of the prefix — the
/// collector's walk too (GC round 94). The store lists with `ListObjectsV2` itself and
/// skips them as foreign objects.
#[tokio::test]
async fn listing_skips_keys_object_store_cannot_parse() {
    let bucket = new_bucket("parqdb-test-").await;
    let store = store_in(&bucket, "a");
    for name in ["n/=x", "n/=y"] {
        store
            .put(&key(name), Bytes::from_static(b"v"), PutMode::Create)
            .await
            .expect("create");
    }
    let raw = crate::support::services::raw_s3_client();
    for odd in [
        "a/n//=w",
        "a/n/=x/./y",
        "a/n/=x\u{1}",
        "a/n/=x/../z",
        "a/n/",
        "a/n/=y/",
    ] {
        raw.put_object()
            .bucket(&bucket)
            .key(odd)
            .body(b"f".to_vec().into())
            .send()
            .await
            .expect("an ordinary S3 key");
    }
    let all = store.list(&key("n/="), None, 100).await.expect("list");
    let listed: Vec<&str> = all.entries.iter().map(|e| e.key.as_str()).collect();
    assert_eq!(listed, ["n/=x", "n/=y"]);
    for limit in 1..=2 {
        let mut after: Option<StoreKey> = None;
        let mut seen = Vec::new();
        loop {
            let page = store
                .list(&key("n/="), after.as_ref(), limit)
                .await
                .expect("page");
            seen.extend(page.entries.iter().map(|e| e.key.as_str().to_owned()));
            after = page.entries.last().map(|e| e.key.clone());
            if !page.more {
                break;
            }
        }
        assert_eq!(seen, ["n/=x", "n/=y"], "pages of {limit}");
    }
}

#[tokio::test]
async fn get_if_changed_asks_the_server() {
    crate::support::store_suite::get_if_changed_answers(&*fresh().await).await;
}

#[tokio::test]
async fn a_missing_bucket_is_a_fatal_error_and_fails_the_probe() {
    let bucket = format!("parqdb-missing-{}", uuid::Uuid::new_v4().simple());
    let store = store_in(&bucket, "catalog");
    assert!(store.get(&key("i/=x")).await.expect("get").is_none());
    let write = store
        .put(&key("i/=x"), Bytes::from_static(b"v"), PutMode::Create)
        .await;
    assert_unavailable(&write, false);
    let err = probe(&store, &RandomIds)
        .await
        .expect_err("probe cannot write");
    // A missing bucket is permanent: retrying cannot help.
    assert_eq!(err.kind(), ErrorKind::StoreRefused, "{err}");
    assert!(!err.is_retryable());
}

/// A bucket on which the server ignores `If-Match` (moto_serialised.py strips it for
/// buckets named `lying-*`), like MinIO once did for missing keys: the probe must refuse it.
#[tokio::test]
async fn the_probe_refuses_a_server_that_ignores_if_match() {
    let bucket = new_bucket("lying-").await;
    let store = store_in(&bucket, "catalog");

    // The lie, shown directly: a stale replace "succeeds" and a replace creates a key.
    let k = key("i/=k");
    let v1 = store
        .put(&k, Bytes::from_static(b"one"), PutMode::Create)
        .await
        .expect("create");
    store
        .put(&k, Bytes::from_static(b"two"), PutMode::Update(v1.clone()))
        .await
        .expect("update");
    let stale = store
        .put(
            &k,
            Bytes::from_static(b"three"),
            PutMode::Update(v1.clone()),
        )
        .await;
    assert!(
        stale.is_ok(),
        "the lying bucket should accept a stale replace: {stale:?}"
    );

    let report = probe(&store, &RandomIds).await.expect("probe ran");
    assert!(!report.passed(), "{report:#?}");
    let failed: Vec<&str> = report
        .checks
        .iter()
        .filter(|c| !c.passed)
        .map(|c| c.name)
        .collect();
    for check in [
        "replace with a wrong version fails",
        "replace with a stale version fails",
        "replace on a missing key fails",
        "replace on a missing key creates nothing",
    ] {
        assert!(failed.contains(&check), "{check} not failed: {report:#?}");
    }
    let err = report.into_result().expect_err("refused");
    assert_eq!(err.kind(), ErrorKind::StoreUnsupported);
}
