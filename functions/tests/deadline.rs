//! The function binaries against a store that hangs: every invocation still answers a
//! typed error before its deadline, instead of being killed by Lambda (`Sandbox.Timedout`).
//!
//! The store is a local TCP server that accepts connections and never answers
//! ([`Silent`]); the functions reach it as their S3 endpoint (pointers and warehouse) or as
//! their DynamoDB endpoint (pointers; the warehouse is local). Each invocation gets a short
//! deadline from the test kit's Runtime API, which, like Lambda, turns an answer after the
//! deadline into `Sandbox.Timedout`: the assertions are on answer types, not on times.

use std::time::Duration;

use parqdb_catalog_testkit::fixture;
use parqdb_catalog_testkit::lambda::{Env, Function, TIMED_OUT};
use serde_json::{Value, json};
use tokio::io::AsyncReadExt;
use tokio::net::TcpListener;

/// The deadline of every invocation in these tests, and the functions' timeout.
const DEADLINE: Duration = Duration::from_secs(3);

/// A server on 127.0.0.1 that accepts every connection, reads what it is sent and never
/// answers. Dropping it stops accepting; open connections stay silent until the test ends.
struct Silent {
    endpoint: String,
    server: tokio::task::JoinHandle<()>,
}

impl Silent {
    async fn start() -> Silent {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let endpoint = format!("http://{}", listener.local_addr().expect("address"));
        let server = tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut buffer = [0u8; 4096];
                    while matches!(stream.read(&mut buffer).await, Ok(n) if n > 0) {}
                });
            }
        });
        Silent { endpoint, server }
    }
}

impl Drop for Silent {
    fn drop(&mut self) {
        self.server.abort();
    }
}

fn var(name: &str, value: &str) -> (String, Option<String>) {
    (name.to_owned(), Some(value.to_owned()))
}

/// Pointers and metadata in a bucket behind the silent endpoint.
fn s3_env(silent: &Silent) -> Env {
    vec![
        var("PARQDB_WAREHOUSE", "s3://silent-bucket/warehouse"),
        var("AWS_ENDPOINT_URL", &silent.endpoint),
        var("AWS_ALLOW_HTTP", "true"),
        var("AWS_REGION", "us-east-1"),
        var("AWS_ACCESS_KEY_ID", "dummy"),
        var("AWS_SECRET_ACCESS_KEY", "dummy"),
        var("PARQDB_FUNCTION_TIMEOUT", &DEADLINE.as_secs().to_string()),
    ]
}

/// Pointers in a DynamoDB table behind the silent endpoint, metadata in a local directory.
fn dynamodb_env(silent: &Silent, warehouse: &tempfile::TempDir) -> Env {
    vec![
        var(
            "PARQDB_WAREHOUSE",
            &format!("file://{}", warehouse.path().display()),
        ),
        var("PARQDB_CATALOG", "dynamodb://silent-table"),
        var("AWS_ENDPOINT_URL_DYNAMODB", &silent.endpoint),
        var("AWS_REGION", "us-east-1"),
        var("AWS_ACCESS_KEY_ID", "dummy"),
        var("AWS_SECRET_ACCESS_KEY", "dummy"),
        var("PARQDB_FUNCTION_TIMEOUT", &DEADLINE.as_secs().to_string()),
    ]
}

fn source() -> Value {
    json!({"provider": "parquet", "properties": {"location": "s3://example/documents/"}})
}

/// Valid snapshot contents for `publish` (which parses them before it needs the store).
fn snapshot() -> Value {
    serde_json::to_value(fixture::contents("x")).expect("json")
}

/// One event per function, each of which needs the store.
fn events(warehouse: &str) -> Vec<(&'static str, Value)> {
    let id = json!({"namespace": ["docs"], "name": "embeddings"});
    let metadata =
        format!("{warehouse}/metadata/0d2f5f0e-4a0e-4c54-9c3e-2a8e8f0c1b2a/00001-x.metadata.json");
    vec![
        ("load", json!({"identifier": id})),
        ("list", json!({"namespace": ["docs"]})),
        (
            "register",
            json!({"identifier": id, "source": source(), "metadata-location": metadata}),
        ),
        (
            "commit",
            json!({"identifier": id, "source": source(),
                   "base-metadata-location": metadata, "new-metadata-location": metadata}),
        ),
        ("drop", json!({"identifier": id})),
        (
            "rename",
            json!({"from": id, "to": {"namespace": ["docs"], "name": "renamed"}}),
        ),
        (
            "namespace",
            json!({"action": "create", "namespace": ["docs"]}),
        ),
        (
            "publish",
            json!({"identifier": id, "idempotency-key": "k", "snapshot": snapshot()}),
        ),
    ]
}

/// Each function, twice in one process: a typed answer before the deadline both times
/// (the process survives its first timed-out invocation and serves the next).
async fn every_function_answers_in_time(env: Env, warehouse: &str) {
    let mut tasks = tokio::task::JoinSet::new();
    for (name, event) in events(warehouse) {
        let env = env.clone();
        tasks.spawn(async move {
            let mut function = Function::start(name, &env).await;
            function.api.set_deadline(DEADLINE);
            for round in 1..=2 {
                let outcome = function.invoke(&event).await;
                let error_type = outcome.error_type().to_owned();
                assert_ne!(
                    error_type,
                    TIMED_OUT,
                    "{name} (round {round}) missed its deadline: {}",
                    outcome.error_message()
                );
                // Nothing was written, or a write never answered: either way the store's
                // failure is typed, never a crash or an untyped error.
                assert!(
                    ["STORE_UNAVAILABLE", "COMMIT_STATE_UNKNOWN"].contains(&error_type.as_str()),
                    "{name} (round {round}): {error_type}: {}",
                    outcome.error_message()
                );
                if name == "load" || name == "list" {
                    assert_eq!(error_type, "STORE_UNAVAILABLE", "{name}: a read");
                }
            }
            assert!(function.is_running(), "{name} stopped");
            let metrics = function.stdout.wait_until(|lines| lines.len() >= 2).await;
            for line in metrics {
                let metric: Value = serde_json::from_str(&line).expect("a metric line");
                assert_eq!(metric["Operation"], name, "{line}");
            }
        });
    }
    while let Some(result) = tasks.join_next().await {
        result.expect("the function answered in time");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_s3_store_gets_typed_errors_before_the_deadline() {
    let silent = Silent::start().await;
    every_function_answers_in_time(s3_env(&silent), "s3://silent-bucket/warehouse").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_dynamodb_store_gets_typed_errors_before_the_deadline() {
    let silent = Silent::start().await;
    let warehouse = tempfile::tempdir().expect("temp dir");
    let uri = format!("file://{}", warehouse.path().display());
    every_function_answers_in_time(dynamodb_env(&silent, &warehouse), &uri).await;
}
