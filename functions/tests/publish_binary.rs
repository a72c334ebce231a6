//! The `publish` function binary, run as a real process against the test kit's local
//! Lambda Runtime API, on the default deployment (pointers under the warehouse's own
//! `_catalog/` in a local directory).

use std::collections::BTreeMap;

use parqdb_catalog::CatalogConfig;
use parqdb_catalog::IndexCatalog;
use parqdb_catalog::Publisher;
use parqdb_catalog::SnapshotContents;
use parqdb_catalog::{IndexIdentifier, Namespace};
use parqdb_catalog_testkit::fixture;
use parqdb_catalog_testkit::lambda::Function;
use serde_json::{Value, json};

/// The sample contents of source version `version` (`cosine`: a successor with another
/// metric is invalid).
fn contents(version: &str) -> SnapshotContents {
    SnapshotContents {
        source_table: fixture::source(version),
        metric: "cosine".into(),
        ..fixture::contents(version)
    }
}

#[tokio::test(flavor = "current_thread")]
async fn publish_function_publishes_once_per_key() {
    let warehouse_dir = tempfile::tempdir().expect("temp dir");
    let uri = format!("file://{}", warehouse_dir.path().display());
    let catalog = CatalogConfig::new(Some(uri.clone()), None)
        .build()
        .await
        .expect("catalog");
    let publisher = Publisher::for_catalog(&catalog);
    let namespace = Namespace::new(["docs"]).expect("valid");
    catalog
        .create_namespace(&namespace, BTreeMap::new())
        .await
        .expect("namespace");
    let id = IndexIdentifier::new(namespace, "embeddings").expect("valid");
    let created = publisher
        .create_index(&id, contents("1"), BTreeMap::new())
        .await
        .expect("created");

    let mut function = Function::start("publish", &[("PARQDB_WAREHOUSE".into(), Some(uri))]).await;
    let request = json!({
        "identifier": {"namespace": ["docs"], "name": "embeddings"},
        "idempotency-key": "event-1",
        "snapshot": serde_json::to_value(contents("2")).expect("json"),
    });
    let first = function.invoke(&request).await.response();
    assert_eq!(first["sequence-number"], 2);
    assert_eq!(first["already-published"], false);
    assert_eq!(first["attempts"], 1);
    let location = first["metadata-location"]
        .as_str()
        .expect("location")
        .to_owned();
    let index_dir = created
        .metadata_location
        .rsplit_once('/')
        .expect("a file")
        .0;
    assert!(
        location.starts_with(index_dir),
        "{location} is next to {index_dir}"
    );
    assert_eq!(
        catalog.load(&id).await.expect("loaded").metadata_location,
        location
    );

    // Redelivery: the same publication, nothing new.
    let replay = function.invoke(&request).await.response();
    assert_eq!(replay["already-published"], true);
    assert_eq!(replay["metadata-location"], first["metadata-location"]);
    assert_eq!(replay["snapshot-id"], first["snapshot-id"]);
    assert_eq!(replay["sequence-number"], 2);

    // Errors carry the code as errorType, and the process keeps serving.
    let mut unknown = request.clone();
    unknown["extra"] = json!(true);
    let outcome = function.invoke(&unknown).await;
    assert_eq!(outcome.error_type(), "INVALID_REQUEST");
    assert!(
        outcome.error_message().contains("extra"),
        "{}",
        outcome.error_message()
    );
    let (_, outcome) = function.invoke_raw(b"{\"identifier\": ".to_vec()).await;
    assert_eq!(outcome.error_type(), "INVALID_REQUEST");
    let mut missing = request.clone();
    missing["identifier"]["name"] = json!("missing");
    assert_eq!(
        function.invoke(&missing).await.error_type(),
        "INDEX_NOT_FOUND"
    );
    let mut changed = request.clone();
    changed["idempotency-key"] = json!("event-2");
    changed["snapshot"]["metric"] = json!("l2_squared");
    assert_eq!(
        function.invoke(&changed).await.error_type(),
        "INVALID_INDEX_METADATA"
    );

    let next: Value = {
        let mut next = request.clone();
        next["idempotency-key"] = json!("event-3");
        next["snapshot"] = serde_json::to_value(contents("3")).expect("json");
        function.invoke(&next).await.response()
    };
    assert_eq!(next["sequence-number"], 3);
    assert!(function.is_running());
}
