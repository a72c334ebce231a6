//! The `refresh` binary with an external builder (issue 28): `PARQDB_REFRESH_BUILDER_FUNCTION`
//! names a function that the test kit's Lambda host runs (the `example-builder` binary,
//! the build contract `parqdb.refresh.build/1` over a real Invoke API); the refresh runs
//! against its own Runtime API as its SQS event source mapping drives it.
//!
//! A batch is built by one invocation of the builder and committed once; its
//! redelivery invokes nothing; a build that crashes, answers an error or does not answer
//! within the builder timeout fails the index, and exactly the batch's messages come back
//! in `batchItemFailures` (SQS delivers them again), until a build succeeds. The builder
//! refuses requests outside the contract with typed errors.
#![allow(clippy::disallowed_methods)] // tests read the wall clock (event times) and draw random ids

use std::time::{Duration, SystemTime};

use parqdb_catalog::CatalogConfig;
use parqdb_catalog::refresh::READ_START;
use parqdb_catalog::refresh::contract::BUILD_CONTRACT;
use parqdb_catalog::{Catalog, IndexCatalog};
use parqdb_catalog::{IndexIdentifier, Namespace};
use parqdb_catalog_testkit::lambda::{
    Env, Fault, Function, LambdaHost, binary, failed_ids, sqs_batch,
};
use serde_json::{Value, json};

/// The builder function's name behind the host.
const BUILDER: &str = "parqdb-test-example-builder";

fn var(name: &str, value: &str) -> (String, Option<String>) {
    (name.to_owned(), Some(value.to_owned()))
}

/// A warehouse on local files, the builder behind a Lambda host, and the refresh
/// function's environment (builder timeout `builder_timeout`).
struct Setup {
    warehouse: String,
    host: LambdaHost,
    refresh_env: Env,
    _dir: tempfile::TempDir,
}

async fn setup(builder_timeout: &str) -> Setup {
    let dir = tempfile::tempdir().expect("temp dir");
    let warehouse = format!("file://{}", dir.path().display());
    let host = LambdaHost::start_functions(
        vec![(
            BUILDER.to_owned(),
            binary("example-builder"),
            vec![var("PARQDB_WAREHOUSE", &warehouse)],
        )],
        1,
    )
    .await;
    let routes = json!([{"source": "s3://lake/docs/",
                         "index": {"namespace": ["search"], "name": "docs"}}]);
    let refresh_env = vec![
        var("PARQDB_WAREHOUSE", &warehouse),
        var("PARQDB_REFRESH_ROUTES", &routes.to_string()),
        var("PARQDB_REFRESH_BUILDER_FUNCTION", BUILDER),
        var("PARQDB_REFRESH_BUILDER_TIMEOUT", builder_timeout),
        var("PARQDB_FUNCTION_TIMEOUT", "60"),
        var("AWS_ENDPOINT_URL_LAMBDA", host.endpoint()),
        var("AWS_REGION", "us-east-1"),
        var("AWS_ACCESS_KEY_ID", "dummy"),
        var("AWS_SECRET_ACCESS_KEY", "dummy"),
    ];
    Setup {
        warehouse,
        host,
        refresh_env,
        _dir: dir,
    }
}

/// An S3 notification of `s3://lake/<key>`, written `seconds_ago` before now.
fn put(key: &str, sequencer: &str, seconds_ago: u64) -> String {
    let time = SystemTime::now() - Duration::from_secs(seconds_ago);
    json!({"Records": [{"eventVersion": "2.1", "eventSource": "aws:s3",
        "awsRegion": "us-east-1",
        "eventTime": humantime::format_rfc3339_millis(time).to_string(),
        "eventName": "ObjectCreated:Put", "userIdentity": {}, "requestParameters": {},
        "responseElements": {},
        "s3": {"bucket": {"name": "lake"},
               "object": {"key": key, "size": 8192, "sequencer": sequencer}}}]})
    .to_string()
}

fn docs() -> IndexIdentifier {
    IndexIdentifier::new(Namespace::new(["search"]).expect("namespace"), "docs")
        .expect("identifier")
}

async fn catalog(warehouse: &str) -> Catalog {
    CatalogConfig::new(Some(warehouse.to_owned()), None)
        .build()
        .await
        .expect("catalog")
}

/// The refresh function's warning lines naming a failed index.
fn failure_logs(refresh: &Function) -> Vec<Value> {
    refresh
        .stderr
        .snapshot()
        .iter()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|line| {
            line["fields"]["message"] == "refresh failed; its changes are delivered again"
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refresh_builds_through_the_builder_function() {
    let setup = setup("20s").await;
    let mut refresh = Function::start("refresh", &setup.refresh_env).await;
    refresh.api.set_deadline(Duration::from_secs(60));
    let batch = [
        ("m1", put("docs/part-1.parquet", "0A", 30)),
        ("m2", put("docs/part-2.parquet", "0B", 29)),
        ("m3", put("docs/part-1.parquet", "0A", 30)), // m1's write, delivered again
        ("m4", put("docs/part-3.parquet", "03", 28)), // another key: its sequencer orders nothing
    ];
    let response = refresh.invoke(&sqs_batch(&batch)).await.response();
    assert_eq!(failed_ids(&response), Vec::<String>::new(), "{response}");
    assert_eq!(setup.host.runs_of(BUILDER), 1, "one build for the batch");

    // Committed once, with the builder's tables (written by the builder's process) and the
    // refresh's bookkeeping.
    let catalog = catalog(&setup.warehouse).await;
    let pointer = catalog.load(&docs()).await.expect("created by the batch");
    let metadata = catalog
        .read_metadata(&pointer.metadata_location)
        .await
        .expect("metadata");
    assert_eq!(metadata.snapshots().len(), 1);
    let current = metadata.current_snapshot();
    assert!(
        current.contents().summary.contains_key(READ_START),
        "{:?}",
        current.contents().summary
    );
    assert_eq!(
        current.contents().source_table.properties()["changed-object"],
        "docs/part-3.parquet",
        "the latest write by time"
    );
    let prefix = format!("indexes/{}/", metadata.index_uuid().simple());
    for table in current.contents().index_tables.values() {
        let location = &table.properties()["location"];
        assert!(location.starts_with(&prefix), "{location}");
        let written = catalog
            .warehouse()
            .head(&format!("{location}part-0.parquet"))
            .await
            .expect("a warehouse path");
        assert!(written.is_some(), "the builder wrote {location}");
    }

    // Redelivered: contained in the snapshot, nothing invoked, nothing committed.
    let response = refresh.invoke(&sqs_batch(&batch)).await.response();
    assert_eq!(failed_ids(&response), Vec::<String>::new(), "{response}");
    assert_eq!(setup.host.runs_of(BUILDER), 1);
    let again = catalog.load(&docs()).await.expect("loaded");
    assert_eq!(again.metadata_location, pointer.metadata_location);
    assert!(refresh.is_running());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_or_timed_out_build_redelivers_exactly_the_batch() {
    let setup = setup("2s").await;
    let mut refresh = Function::start("refresh", &setup.refresh_env).await;
    refresh.api.set_deadline(Duration::from_secs(60));
    let batch = [
        ("m1", put("docs/part-1.parquet", "0A", 30)),
        ("m2", "not an event".to_owned()),
        ("m3", put("docs/part-2.parquet", "0B", 29)),
        ("m4", put("elsewhere/x.parquet", "0C", 29)),
    ];
    let catalog = catalog(&setup.warehouse).await;
    let cases = [
        (Fault::CrashAfterRun, "Runtime.ExitError"),
        (Fault::UnknownBeforeRun, "COMMIT_STATE_UNKNOWN"),
        // The builder runs, but its answer never comes: the 2 s builder timeout ends it.
        (Fault::HangAfterRun, "did not answer within 2s"),
    ];
    for (n, (fault, mentions)) in cases.into_iter().enumerate() {
        setup.host.inject_into(BUILDER, &[fault]);
        let response = refresh.invoke(&sqs_batch(&batch)).await.response();
        // The index's messages, the unreadable one and the unrouted one: SQS delivers
        // them again. Nothing is committed.
        assert_eq!(
            failed_ids(&response),
            ["m1", "m2", "m3", "m4"],
            "{fault:?}: {response}"
        );
        assert!(
            catalog.load(&docs()).await.is_err(),
            "{fault:?}: nothing committed"
        );
        let logs = refresh
            .stderr
            .wait_for_count("refresh failed; its changes are delivered again", n + 1)
            .await;
        let failures = failure_logs(&refresh);
        let last = failures.last().unwrap_or_else(|| panic!("{logs:#?}"));
        assert_eq!(last["fields"]["error_type"], "STORE_UNAVAILABLE", "{last}");
        assert!(
            last["fields"]["error"]
                .as_str()
                .is_some_and(|error| error.contains(mentions) && error.contains(BUILDER)),
            "{fault:?}: {last}"
        );
    }

    // Delivered again once the builder works: built and committed once.
    let response = refresh.invoke(&sqs_batch(&batch)).await.response();
    assert_eq!(failed_ids(&response), ["m2", "m4"], "{response}");
    let pointer = catalog.load(&docs()).await.expect("committed");
    let metadata = catalog
        .read_metadata(&pointer.metadata_location)
        .await
        .expect("metadata");
    assert_eq!(metadata.snapshots().len(), 1);
    assert!(refresh.is_running());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_example_builder_refuses_requests_outside_the_contract() {
    let dir = tempfile::tempdir().expect("temp dir");
    let warehouse = format!("file://{}", dir.path().display());
    let mut builder =
        Function::start("example-builder", &[var("PARQDB_WAREHOUSE", &warehouse)]).await;
    let change = json!({"bucket": "lake", "key": "docs/p.parquet", "sequencer": "0A",
                        "time-ms": 1_750_000_000_000_i64});
    let valid = json!({
        "contract": BUILD_CONTRACT,
        "index": {"namespace": ["search"], "name": "docs"},
        "index-uuid": uuid::Uuid::new_v4(), "build-id": uuid::Uuid::new_v4(),
        "warehouse": warehouse, "table-prefix": "indexes/x/y/",
        "read-start-ms": 1_750_000_010_000_i64,
        "newest": change, "changed": [change], "changes": 1,
        "source-table": {"provider": "parquet", "properties": {"location": "s3://lake/docs/"}},
        "current-snapshot-id": null
    });
    let built = builder.invoke(&valid).await.response();
    assert_eq!(built["contract"], BUILD_CONTRACT);
    assert_eq!(built["build-id"], valid["build-id"]);
    assert_eq!(built["snapshot"]["index-family"], "ivf");

    let mut cases: Vec<(Value, &str)> = Vec::new();
    let mut unknown = valid.clone();
    unknown["priority"] = json!("high");
    cases.push((unknown, "priority"));
    let mut typed = valid.clone();
    typed["changes"] = json!("one");
    cases.push((typed, "changes"));
    let mut version = valid.clone();
    version["contract"] = json!("parqdb.refresh.build/2");
    cases.push((version, "parqdb.refresh.build/2"));
    let mut elsewhere = valid.clone();
    elsewhere["warehouse"] = json!("file:///elsewhere");
    cases.push((elsewhere, "warehouse"));
    for (request, mentions) in cases {
        let refused = builder.invoke(&request).await;
        assert_eq!(refused.error_type(), "INVALID_REQUEST", "{request}");
        assert!(
            refused.error_message().contains(mentions),
            "{mentions}: {}",
            refused.error_message()
        );
    }
    assert!(builder.is_running());
}
