//! Successor publication (issue 9): the publication suite on the in-memory and the
//! local-filesystem catalogs, and the event-driven refresh example end to end. The
//! throughput measurement is `cargo run --release --example publish_throughput`.

#[path = "../../../examples/refresh_on_s3_event.rs"]
#[allow(dead_code)]
mod refresh_example;

use std::sync::Arc;

use object_store::ObjectStoreExt;
use parqdb_catalog::IndexMetadata;
use parqdb_catalog::Warehouse;
use parqdb_catalog::refresh::{RefreshOutcome, RefreshReport};
use parqdb_catalog::store::LocalStore;
use parqdb_catalog::store::MemoryStore;
use parqdb_catalog::{Catalog, IndexCatalog};
use parqdb_catalog::{ErrorKind, IndexIdentifier, Namespace};
use parqdb_catalog::{Published, Publisher};

async fn memory() -> (Arc<dyn IndexCatalog>, Warehouse) {
    let warehouse = Warehouse::in_memory("memory://publish/wh").expect("warehouse");
    let catalog = Catalog::builder(Arc::new(MemoryStore::new()), warehouse.clone()).build();
    (Arc::new(catalog), warehouse)
}

fn local_catalog() -> Catalog {
    let dir = tempfile::tempdir().expect("temp dir").keep();
    let warehouse = Warehouse::local(&dir.join("warehouse")).expect("warehouse");
    let store = LocalStore::new(dir.join("warehouse").join("_catalog"));
    Catalog::builder(Arc::new(store), warehouse).build()
}

async fn local() -> (Arc<dyn IndexCatalog>, Warehouse) {
    let catalog = local_catalog();
    let warehouse = catalog.warehouse().clone();
    (Arc::new(catalog), warehouse)
}

mod memory_backend {
    use super::*;
    publish_suite!(memory());
}

mod local_backend {
    use super::*;
    publish_suite!(local());
}

const EVENT: &str = r#"{
  "version": "0", "id": "evt-1", "detail-type": "Object Created", "source": "aws.s3",
  "account": "123456789012", "time": "2025-06-15T12:00:00Z", "region": "us-east-1",
  "resources": ["arn:aws:s3:::example"],
  "detail": {"version": "0", "bucket": {"name": "example"},
             "object": {"key": "documents/part-1.parquet", "size": 4096, "sequencer": "01"},
             "request-id": "R1", "requester": "123456789012", "reason": "PutObject"}
}"#;

fn event(id: &str, key: &str, sequencer: &str, time: &str) -> Vec<u8> {
    EVENT
        .replace("evt-1", id)
        .replace("2025-06-15T12:00:00Z", time)
        .replace("documents/part-1.parquet", key)
        .replace("\"01\"", &format!("\"{sequencer}\""))
        .into_bytes()
}

/// The wall clock as S3 stamps an event's time (the writes of this test happen now).
#[allow(clippy::disallowed_methods)]
fn now() -> String {
    humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string()
}

/// The one publication of a report (one index).
fn published(report: &RefreshReport) -> (&Published, bool) {
    assert_eq!(report.indexes.len(), 1, "{report:?}");
    match &report.indexes[0].outcome {
        RefreshOutcome::Published {
            published, created, ..
        } => (published, *created),
        other => panic!("not published: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refresh_example_end_to_end_on_local_files() {
    let catalog = local_catalog();
    let warehouse = catalog.warehouse().clone();
    let id = IndexIdentifier::new(
        Namespace::new(["examples"]).expect("valid"),
        "documents_embedding",
    )
    .expect("valid");
    let runner = refresh_example::runner(Publisher::for_catalog(&catalog), id.clone());

    // The first event creates the namespace and the index.
    let first = event("evt-1", "documents/part-1.parquet", "01", &now());
    let report = refresh_example::refresh(&runner, &first)
        .await
        .expect("created");
    let (created, was_created) = published(&report);
    assert_eq!(created.sequence_number, 1);
    assert!(was_created);
    // The next event publishes a successor; its redelivery publishes nothing.
    let second_time = now();
    let second = event("evt-2", "documents/part-2.parquet", "02", &second_time);
    let report = refresh_example::refresh(&runner, &second)
        .await
        .expect("refreshed");
    let refreshed = published(&report).0.clone();
    assert_eq!(refreshed.sequence_number, 2);
    let files_before = count_files(&warehouse).await;
    // A redelivery, the same S3 write delivered as another event (another EventBridge
    // id, the same S3 time), and an older write arriving late: the published snapshot's
    // read start contains them, so nothing is built or published again.
    let second_again = event(
        "evt-2-redelivered",
        "documents/part-2.parquet",
        "02",
        &second_time,
    );
    for replayed in [&first, &second, &second_again] {
        let replay = refresh_example::refresh(&runner, replayed)
            .await
            .expect("replayed");
        assert_eq!((replay.builds, replay.commits), (0, 0));
        match &replay.indexes[0].outcome {
            RefreshOutcome::AlreadyPublished {
                metadata_location, ..
            } => assert_eq!(metadata_location, &refreshed.metadata_location),
            other => panic!("not already published: {other:?}"),
        }
    }
    assert_eq!(
        count_files(&warehouse).await,
        files_before,
        "a redelivery writes nothing"
    );

    // The metadata names the event's source state and index tables that exist.
    let pointer = catalog.load(&id).await.expect("loaded");
    assert_eq!(pointer.metadata_location, refreshed.metadata_location);
    let metadata = read(&warehouse, &pointer.metadata_location).await;
    let current = metadata.current_snapshot();
    assert_eq!(
        current.contents().source_table.properties()["location"],
        "s3://example/documents/"
    );
    assert_eq!(
        current.contents().source_table.properties()["changed-object"],
        "documents/part-2.parquet"
    );
    assert_eq!(&pointer.source, &current.contents().source_table);
    assert_eq!(current.contents().indexed_rows, 4);
    let uuid = metadata.index_uuid().simple().to_string();
    for table in current.contents().index_tables.values() {
        let location = &table.properties()["location"];
        assert!(
            location.starts_with(&format!("indexes/{uuid}/")),
            "{location}"
        );
        let path = warehouse
            .path(&format!("{location}part-0.parquet"))
            .expect("valid name");
        warehouse
            .object_store()
            .head(&path)
            .await
            .expect("index table file exists");
    }

    // Concurrent deliveries of one new event publish it once.
    let third = event("evt-3", "documents/part-3.parquet", "03", &now());
    let reports =
        futures::future::join_all((0..4).map(|_| refresh_example::refresh(&runner, &third))).await;
    let reports: Vec<_> = reports.into_iter().map(|r| r.expect("refreshed")).collect();
    assert_eq!(reports.iter().map(|r| r.commits).sum::<usize>(), 1);
    let pointer = catalog.load(&id).await.expect("loaded");
    let metadata = read(&warehouse, &pointer.metadata_location).await;
    assert_eq!(metadata.current_snapshot().sequence_number(), 3);

    // Events that are not S3 Object Created events are rejected.
    for bad in [
        EVENT.replace("Object Created", "Object Deleted"),
        EVENT.replace("aws.s3", "aws.ec2"),
        r#"{"detail-type": "Object Created", "source": "aws.s3"}"#.to_owned(),
        "[]".to_owned(),
        "not json".to_owned(),
    ] {
        let err = refresh_example::refresh(&runner, bad.as_bytes())
            .await
            .expect_err("rejected");
        assert_eq!(err.kind(), ErrorKind::InvalidRequest);
    }
}

async fn count_files(warehouse: &Warehouse) -> usize {
    use futures::TryStreamExt;
    let listed: Vec<_> = warehouse
        .object_store()
        .list(Some(warehouse.prefix()))
        .try_collect()
        .await
        .expect("listed");
    listed.len()
}

async fn read(warehouse: &Warehouse, location: &str) -> IndexMetadata {
    crate::support::publish::read(warehouse, location).await
}
