//! The function binaries, run as real processes against a local Lambda Runtime API.
//!
//! Each test starts compiled binaries (`CARGO_BIN_EXE_*`, or `PARQDB_FUNCTIONS_BIN_DIR`)
//! with the variables the Lambda service sets, feeds them events through the test kit's
//! Runtime API (`parqdb_catalog_testkit::lambda`) and checks responses, `errorType`s,
//! metric lines and log lines.
//!
//! Backends: the lifecycle runs once per [`Backend`]; adding a backend is one function
//! that returns the environment and a writable warehouse.
#![allow(clippy::disallowed_methods)] // tests may read the wall clock and draw random ids (unique names)

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use parqdb_catalog::CatalogConfig;
use parqdb_catalog::IndexMetadata;
use parqdb_catalog::Warehouse;
use parqdb_catalog::family::FamilyRegistry;
use parqdb_catalog::lambda::Operation;
use parqdb_catalog::store::dynamodb::DynamoStore;
use parqdb_catalog::{RandomIds, SystemClock};
use parqdb_catalog_testkit::fixture::{contents, source};
use parqdb_catalog_testkit::lambda::{Env, Function, Outcome, failed_ids, sqs_batch};
use serde_json::{Value, json};

/// The functions of the catalog, by binary name.
fn catalog_functions() -> [&'static str; 7] {
    Operation::ALL.map(Operation::name)
}

/// Where the functions keep pointers and metadata, as the environment they get.
struct Backend {
    /// `PARQDB_*` variables for the functions.
    env: Env,
    /// The warehouse, for writing metadata files as a publisher would.
    warehouse: Warehouse,
    /// Keeps temporary directories alive.
    _dirs: Vec<tempfile::TempDir>,
}

fn file_uri(dir: &tempfile::TempDir) -> String {
    format!("file://{}", dir.path().display())
}

/// The default deployment: pointers under the warehouse's own `_catalog/`.
fn local_files() -> Backend {
    let dir = tempfile::tempdir().expect("temp dir");
    let uri = file_uri(&dir);
    Backend {
        env: vec![("PARQDB_WAREHOUSE".into(), Some(uri.clone()))],
        warehouse: CatalogConfig::new(Some(uri), None)
            .open_warehouse()
            .expect("warehouse"),
        _dirs: vec![dir],
    }
}

/// Pointers in a separate local directory (`PARQDB_CATALOG=file://...`).
fn separate_local_pointer_store() -> Backend {
    let warehouse = tempfile::tempdir().expect("temp dir");
    let pointers = tempfile::tempdir().expect("temp dir");
    let uri = file_uri(&warehouse);
    Backend {
        env: vec![
            ("PARQDB_WAREHOUSE".into(), Some(uri.clone())),
            ("PARQDB_CATALOG".into(), Some(file_uri(&pointers))),
        ],
        warehouse: CatalogConfig::new(Some(uri), None)
            .open_warehouse()
            .expect("warehouse"),
        _dirs: vec![warehouse, pointers],
    }
}

/// Pointers in a fresh DynamoDB Local table (`PARQDB_CATALOG=dynamodb://TABLE`), metadata
/// in a local warehouse. A [`Function`] starts with a clean environment, so the endpoint,
/// region and dummy credentials are passed explicitly.
async fn dynamodb_local() -> Backend {
    use aws_sdk_dynamodb::config::{BehaviorVersion, Credentials, Region};
    let endpoint = match std::env::var("PARQDB_TEST_DYNAMODB_ENDPOINT") {
        Ok(endpoint) if !endpoint.is_empty() => endpoint,
        _ => panic!(
            "PARQDB_TEST_DYNAMODB_ENDPOINT is not set: this test needs DynamoDB Local. Run \
             the suite with `scripts/test.sh`, which starts it."
        ),
    };
    let table = format!("parqdb-lambda-{}", uuid::Uuid::new_v4().simple());
    let config = aws_sdk_dynamodb::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .credentials_provider(Credentials::new("dummy", "dummy", None, None, "tests"))
        .endpoint_url(&endpoint)
        .build();
    DynamoStore::new(aws_sdk_dynamodb::Client::from_conf(config), table.clone())
        .create_table()
        .await
        .expect("table created");
    let warehouse = tempfile::tempdir().expect("temp dir");
    let uri = file_uri(&warehouse);
    let var = |name: &str, value: &str| (name.to_owned(), Some(value.to_owned()));
    Backend {
        env: vec![
            var("PARQDB_WAREHOUSE", &uri),
            var("PARQDB_CATALOG", &format!("dynamodb://{table}")),
            var("AWS_ENDPOINT_URL_DYNAMODB", &endpoint),
            var("AWS_REGION", "us-east-1"),
            var("AWS_ACCESS_KEY_ID", "dummy"),
            var("AWS_SECRET_ACCESS_KEY", "dummy"),
        ],
        warehouse: CatalogConfig::new(Some(uri), None)
            .open_warehouse()
            .expect("warehouse"),
        _dirs: vec![warehouse],
    }
}

/// Write `metadata` to a fresh location in the warehouse.
async fn write(warehouse: &Warehouse, metadata: &IndexMetadata) -> String {
    let relative = format!(
        "metadata/{}/{:05}-{}.metadata.json",
        metadata.index_uuid(),
        metadata.last_sequence_number(),
        uuid::Uuid::new_v4()
    );
    warehouse
        .write_new(&relative, Bytes::from(metadata.to_json_vec()))
        .await
        .expect("metadata written")
}

async fn start_all(backend: &Backend) -> BTreeMap<&'static str, Function> {
    let mut functions = BTreeMap::new();
    for name in catalog_functions() {
        functions.insert(name, Function::start(name, &backend.env).await);
    }
    functions
}

fn f<'a>(functions: &'a mut BTreeMap<&'static str, Function>, name: &str) -> &'a mut Function {
    functions.get_mut(name).expect("started")
}

fn parse_lines(lines: &[String]) -> Vec<Value> {
    lines
        .iter()
        .map(|line| {
            serde_json::from_str(line).unwrap_or_else(|err| panic!("not JSON ({err}): {line}"))
        })
        .collect()
}

/// Metadata with the sample contents of `tag`: a new index's, or `base`'s successor (the
/// built-in families, the system clock, random ids).
fn sample_metadata(tag: &str, base: Option<&IndexMetadata>) -> IndexMetadata {
    let registry = FamilyRegistry::builtin();
    match base {
        None => IndexMetadata::create(
            contents(tag),
            BTreeMap::new(),
            &SystemClock,
            &RandomIds,
            &registry,
        ),
        Some(base) => base.successor(contents(tag), &SystemClock, &RandomIds, &registry),
    }
    .unwrap_or_else(|err| panic!("sample metadata {tag}: {err}"))
}

/// namespace create → register → commit → stale commit → load → rename → list → drop →
/// load, across seven processes sharing one backend.
async fn lifecycle(backend: Backend) {
    let first = sample_metadata("a", None);
    let second = sample_metadata("b", Some(&first));
    let losing = sample_metadata("c", Some(&first));

    let mut functions = start_all(&backend).await;
    let ns = json!(["docs", "v1"]);
    let id = json!({"namespace": ns, "name": "embeddings"});
    let renamed = json!({"namespace": ns, "name": "embeddings-2"});
    let source = serde_json::to_value(source(1)).expect("json");

    let namespace = f(&mut functions, "namespace");
    let created = namespace
        .invoke(&json!({"action": "create", "namespace": ["docs"]}))
        .await;
    assert_eq!(
        created.response(),
        json!({"namespace": ["docs"], "properties": {}})
    );
    let created = namespace
        .invoke(&json!({"action": "create", "namespace": ns, "properties": {"owner": "search"}}))
        .await;
    assert_eq!(
        created.response(),
        json!({"namespace": ns, "properties": {"owner": "search"}})
    );
    let again = namespace
        .invoke(&json!({"action": "create", "namespace": ns}))
        .await;
    assert_eq!(again.error_type(), "ALREADY_EXISTS");
    let properties = namespace
        .invoke(&json!({"action": "properties", "namespace": ns}))
        .await;
    assert_eq!(
        properties.response()["properties"],
        json!({"owner": "search"})
    );
    let children = namespace
        .invoke(&json!({"action": "list", "namespace": ["docs"]}))
        .await;
    assert_eq!(
        children.response(),
        json!({"namespaces": [ns], "next-page-token": null})
    );

    // The metadata files go into the warehouse only now: the first write (the namespace
    // creation above) claimed it while it was unused, as a deployment's first write does
    // (a warehouse that already holds data is claimed only with `init --adopt`).
    let first_location = write(&backend.warehouse, &first).await;
    let second_location = write(&backend.warehouse, &second).await;
    let losing_location = write(&backend.warehouse, &losing).await;
    let register = json!({"identifier": id, "source": source, "metadata-location": first_location});
    let registered = f(&mut functions, "register")
        .invoke(&register)
        .await
        .response();
    assert_eq!(registered["identifier"], id);
    assert_eq!(registered["metadata-location"], json!(first_location));
    assert_eq!(registered["source"], source);
    assert!(
        registered["version"]
            .as_str()
            .is_some_and(|v| !v.is_empty()),
        "{registered}"
    );
    let twice = f(&mut functions, "register").invoke(&register).await;
    assert_eq!(twice.error_type(), "ALREADY_EXISTS");
    // A malformed source binding: the catalog's state first, then INVALID_INDEX_METADATA
    // where the binding is checked, as in the CLI and the library (issue 27, item 3).
    let malformed = json!({"provider": ""});
    let existing = f(&mut functions, "register")
        .invoke(
            &json!({"identifier": id, "source": malformed, "metadata-location": first_location}),
        )
        .await;
    assert_eq!(existing.error_type(), "ALREADY_EXISTS");
    let absent = json!({"namespace": ns, "name": "absent"});
    let refused = f(&mut functions, "register")
        .invoke(&json!({"identifier": absent, "source": malformed, "metadata-location": first_location}))
        .await;
    assert_eq!(refused.error_type(), "INVALID_INDEX_METADATA");
    let stale = f(&mut functions, "commit")
        .invoke(&json!({
            "identifier": id,
            "source": malformed,
            "base-metadata-location": losing_location,
            "new-metadata-location": second_location,
        }))
        .await;
    assert_eq!(stale.error_type(), "COMMIT_CONFLICT");
    let refused = f(&mut functions, "commit")
        .invoke(&json!({
            "identifier": id,
            "source": malformed,
            "base-metadata-location": first_location,
            "new-metadata-location": second_location,
        }))
        .await;
    assert_eq!(refused.error_type(), "INVALID_INDEX_METADATA");

    let commit = |base: &str, new: &str| {
        json!({
            "identifier": id,
            "source": source,
            "base-metadata-location": base,
            "new-metadata-location": new,
        })
    };
    let committed = f(&mut functions, "commit")
        .invoke(&commit(&first_location, &second_location))
        .await
        .response();
    assert_eq!(committed["metadata-location"], json!(second_location));
    assert_eq!(committed["already-applied"], json!(false));
    assert_ne!(committed["version"], registered["version"]);
    let stale = f(&mut functions, "commit")
        .invoke(&commit(&first_location, &losing_location))
        .await;
    assert_eq!(stale.error_type(), "COMMIT_CONFLICT");
    assert!(!stale.error_message().is_empty());

    let loaded = f(&mut functions, "load")
        .invoke(&json!({"identifier": id}))
        .await
        .response();
    assert_eq!(loaded["metadata-location"], json!(second_location));
    assert_eq!(loaded["version"], committed["version"]);
    assert_eq!(loaded["source"], source);

    let moved = f(&mut functions, "rename")
        .invoke(&json!({"from": id, "to": renamed}))
        .await
        .response();
    assert_eq!(moved["identifier"], renamed);
    assert_eq!(moved["metadata-location"], json!(second_location));
    let gone = f(&mut functions, "load")
        .invoke(&json!({"identifier": id}))
        .await;
    assert_eq!(gone.error_type(), "INDEX_NOT_FOUND");

    let listed = f(&mut functions, "list")
        .invoke(&json!({"namespace": ns}))
        .await
        .response();
    assert_eq!(
        listed,
        json!({"identifiers": [renamed], "next-page-token": null})
    );
    let missing = f(&mut functions, "list")
        .invoke(&json!({"namespace": ["nope"]}))
        .await;
    assert_eq!(missing.error_type(), "NAMESPACE_NOT_FOUND");
    let bad_size = f(&mut functions, "list")
        .invoke(&json!({"namespace": ns, "page-size": 0}))
        .await;
    assert_eq!(bad_size.error_type(), "INVALID_REQUEST");
    // The catalog's state before the request's content (issue 27, item 4).
    let missing_bad_size = f(&mut functions, "list")
        .invoke(&json!({"namespace": ["nope"], "page-size": 0}))
        .await;
    assert_eq!(missing_bad_size.error_type(), "NAMESPACE_NOT_FOUND");

    let dropped = f(&mut functions, "drop")
        .invoke(&json!({"identifier": renamed}))
        .await
        .response();
    assert_eq!(dropped, json!({"identifier": renamed, "dropped": true}));
    let gone = f(&mut functions, "load")
        .invoke(&json!({"identifier": renamed}))
        .await;
    assert_eq!(gone.error_type(), "INDEX_NOT_FOUND");
    let twice = f(&mut functions, "drop")
        .invoke(&json!({"identifier": renamed}))
        .await;
    assert_eq!(twice.error_type(), "INDEX_NOT_FOUND");

    let namespace = f(&mut functions, "namespace");
    let dropped = namespace
        .invoke(&json!({"action": "drop", "namespace": ns}))
        .await;
    assert_eq!(
        dropped.response(),
        json!({"namespace": ns, "dropped": true})
    );
    let exists = namespace
        .invoke(&json!({"action": "exists", "namespace": ns}))
        .await;
    assert_eq!(exists.response(), json!({"namespace": ns, "exists": false}));

    // Observability: one EMF line per invocation, JSON logs carrying the request id.
    let load = f(&mut functions, "load");
    let metrics = load.stdout.wait_until(|lines| lines.len() >= 3).await;
    let metrics = parse_lines(&metrics);
    let outcomes: Vec<&str> = metrics
        .iter()
        .map(|m| m["Outcome"].as_str().unwrap_or("?"))
        .collect();
    assert_eq!(outcomes, ["SUCCESS", "INDEX_NOT_FOUND", "INDEX_NOT_FOUND"]);
    for metric in &metrics {
        let directive = &metric["_aws"]["CloudWatchMetrics"][0];
        assert_eq!(directive["Namespace"], "ParqDBCatalog");
        assert_eq!(
            directive["Dimensions"],
            json!([
                ["Stack", "Operation", "Outcome"],
                ["Stack", "Operation"],
                ["Stack", "Outcome"],
                ["Stack"]
            ])
        );
        assert!(metric["Stack"].is_string(), "{metric}");
        assert_eq!(directive["Metrics"][0]["Name"], "LatencyMs");
        assert_eq!(metric["Operation"], "load");
        assert!(
            metric["LatencyMs"].as_f64().is_some_and(|ms| ms >= 0.0),
            "{metric}"
        );
        assert!(
            metric["_aws"]["Timestamp"]
                .as_i64()
                .is_some_and(|ts| ts > 0),
            "{metric}"
        );
    }
    let request_ids: Vec<&str> = metrics
        .iter()
        .map(|m| m["RequestId"].as_str().unwrap_or(""))
        .collect();
    let logs = load
        .stderr
        .wait_until(|lines| {
            request_ids
                .iter()
                .all(|id| lines.iter().any(|line| line.contains(id)))
        })
        .await;
    let logs = parse_lines(&logs);
    assert!(
        logs.iter()
            .any(|line| line["fields"]["message"] == "catalog ready")
    );
    // Lines inside an invocation carry its id: ours in the `invocation` span, the
    // runtime's own in its `Lambda runtime invoke` span.
    for line in logs.iter().filter(|line| line.get("span").is_some()) {
        let span = &line["span"];
        let id = span["request_id"]
            .as_str()
            .or(span["requestId"].as_str())
            .unwrap_or("");
        assert!(
            request_ids.contains(&id),
            "log line without a known request id: {line}"
        );
    }
    let outcomes: Vec<(&str, &str)> = logs
        .iter()
        .filter(|line| line["span"]["name"] == "invocation")
        .map(|line| {
            (
                line["level"].as_str().unwrap_or(""),
                line["fields"]["outcome"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(
        outcomes,
        [
            ("INFO", "SUCCESS"),
            ("WARN", "INDEX_NOT_FOUND"),
            ("WARN", "INDEX_NOT_FOUND")
        ]
    );
    for f in functions.values_mut() {
        assert!(f.is_running(), "{} stopped", f.name);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lifecycle_on_local_files() {
    lifecycle(local_files()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lifecycle_on_dynamodb_local() {
    lifecycle(dynamodb_local().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lifecycle_on_a_separate_local_pointer_store() {
    lifecycle(separate_local_pointer_store()).await;
}

/// Events every function must answer with `INVALID_REQUEST` (and keep serving).
fn malformed_events() -> Vec<(&'static str, Vec<u8>)> {
    let huge = format!(
        r#"{{"identifier": {{"namespace": ["a"], "name": "{}"}}}}"#,
        "x".repeat(2 << 20)
    );
    let deep = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
    vec![
        ("unknown field", br#"{"identifier": {"namespace": ["a"], "name": "x"}, "namespace": ["a"], "action": "exists", "bogus": 1}"#.to_vec()),
        ("wrong type", br#"{"identifier": 7, "namespace": 7, "from": 7, "to": 7, "action": 7}"#.to_vec()),
        ("not an object (array)", br#"[{"namespace": ["a"], "name": "x"}]"#.to_vec()),
        ("not an object (string)", br#""load""#.to_vec()),
        ("not an object (null)", b"null".to_vec()),
        ("missing fields", b"{}".to_vec()),
        ("huge payload", huge.into_bytes()),
        ("deeply nested", deep.into_bytes()),
        ("not JSON", br#"{"identifier": "#.to_vec()),
        ("empty body", Vec::new()),
        ("not UTF-8", vec![0xff, 0xfe, b'{']),
    ]
}

/// A valid event for `name` (it may fail, but not with `INVALID_REQUEST`).
fn valid_event(name: &str) -> Value {
    let id = json!({"namespace": ["absent"], "name": "x"});
    match name {
        "load" | "drop" => json!({"identifier": id}),
        "register" => {
            json!({"identifier": id, "source": serde_json::to_value(source(1)).expect("json"), "metadata-location": "file:///nowhere.json"})
        }
        "commit" => json!({
            "identifier": id,
            "source": serde_json::to_value(source(1)).expect("json"),
            "base-metadata-location": "file:///a.json",
            "new-metadata-location": "file:///b.json",
        }),
        "rename" => json!({"from": id, "to": {"namespace": ["absent"], "name": "y"}}),
        "list" => json!({"namespace": ["absent"]}),
        "namespace" => json!({"action": "exists", "namespace": ["absent"]}),
        other => panic!("unknown function {other}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_events_are_invalid_requests_and_the_function_keeps_serving() {
    let backend = local_files();
    let mut tasks = tokio::task::JoinSet::new();
    for name in catalog_functions() {
        let env = backend.env.clone();
        tasks.spawn(async move {
            let mut function = Function::start(name, &env).await;
            for (case, body) in malformed_events() {
                let (_, outcome) = function.invoke_raw(body).await;
                assert_eq!(
                    outcome.error_type(),
                    "INVALID_REQUEST",
                    "{name}: {case}: {outcome:?}"
                );
                assert!(!outcome.error_message().is_empty(), "{name}: {case}");
                let valid = function.invoke(&valid_event(name)).await;
                if let Outcome::Error {
                    error_type,
                    error_message,
                    ..
                } = &valid
                {
                    assert_ne!(
                        error_type, "INVALID_REQUEST",
                        "{name} after {case}: {error_message}"
                    );
                }
            }
            assert!(function.is_running(), "{name} stopped");
            let invocations = 2 * malformed_events().len();
            let metrics = function
                .stdout
                .wait_until(|lines| lines.len() >= invocations)
                .await;
            assert_eq!(
                metrics.len(),
                invocations,
                "{name}: one metric line per invocation"
            );
        });
    }
    while let Some(result) = tasks.join_next().await {
        result.expect("function checks passed");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_configuration_is_reported_before_polling() {
    let dir = tempfile::tempdir().expect("temp dir");
    let cases: Vec<(&str, Env)> = vec![
        (
            "function timeout not a number",
            vec![
                ("PARQDB_WAREHOUSE".into(), Some(file_uri(&dir))),
                ("PARQDB_FUNCTION_TIMEOUT".into(), Some("30s".into())),
            ],
        ),
        (
            "unsupported warehouse scheme",
            vec![("PARQDB_WAREHOUSE".into(), Some("ftp://host/wh".into()))],
        ),
        (
            "catalog URI is not a URI",
            vec![
                ("PARQDB_WAREHOUSE".into(), Some(file_uri(&dir))),
                ("PARQDB_CATALOG".into(), Some("not a uri".into())),
            ],
        ),
        (
            "missing Lambda variable",
            vec![
                ("PARQDB_WAREHOUSE".into(), Some(file_uri(&dir))),
                ("AWS_LAMBDA_FUNCTION_NAME".into(), None),
            ],
        ),
        (
            "malformed Lambda variable",
            vec![
                ("PARQDB_WAREHOUSE".into(), Some(file_uri(&dir))),
                (
                    "AWS_LAMBDA_FUNCTION_MEMORY_SIZE".into(),
                    Some("lots".into()),
                ),
            ],
        ),
    ];
    let gc_cases: Vec<(&str, Env)> = vec![
        (
            "gc retention not a duration",
            vec![
                ("PARQDB_WAREHOUSE".into(), Some(file_uri(&dir))),
                ("PARQDB_GC_RETENTION".into(), Some("a week".into())),
            ],
        ),
        (
            "gc retention below its floor",
            vec![
                ("PARQDB_WAREHOUSE".into(), Some(file_uri(&dir))),
                ("PARQDB_GC_RETENTION".into(), Some("1m".into())),
            ],
        ),
    ];
    let refresh_cases: Vec<(&str, Env)> = vec![
        (
            "refresh without routes",
            vec![("PARQDB_WAREHOUSE".into(), Some(file_uri(&dir)))],
        ),
        (
            "refresh routes not JSON",
            vec![
                ("PARQDB_WAREHOUSE".into(), Some(file_uri(&dir))),
                (
                    "PARQDB_REFRESH_ROUTES".into(),
                    Some("s3://lake/docs/".into()),
                ),
            ],
        ),
        (
            "refresh route with an unknown field",
            vec![
                ("PARQDB_WAREHOUSE".into(), Some(file_uri(&dir))),
                (
                    "PARQDB_REFRESH_ROUTES".into(),
                    Some(format!(
                        r#"[{{"source": "s3://lake/docs/", "index": {}, "x": 1}}]"#,
                        docs_index()
                    )),
                ),
            ],
        ),
        (
            "refresh concurrency out of range",
            vec![
                ("PARQDB_WAREHOUSE".into(), Some(file_uri(&dir))),
                ("PARQDB_REFRESH_ROUTES".into(), Some(docs_routes())),
                ("PARQDB_REFRESH_CONCURRENCY".into(), Some("0".into())),
            ],
        ),
        (
            "refresh clock skew not a duration",
            vec![
                ("PARQDB_WAREHOUSE".into(), Some(file_uri(&dir))),
                ("PARQDB_REFRESH_ROUTES".into(), Some(docs_routes())),
                ("PARQDB_REFRESH_CLOCK_SKEW".into(), Some("a bit".into())),
            ],
        ),
        (
            "refresh clock skew above its ceiling",
            vec![
                ("PARQDB_WAREHOUSE".into(), Some(file_uri(&dir))),
                ("PARQDB_REFRESH_ROUTES".into(), Some(docs_routes())),
                ("PARQDB_REFRESH_CLOCK_SKEW".into(), Some("1h".into())),
            ],
        ),
        (
            "refresh builder timeout beyond the function's",
            vec![
                ("PARQDB_WAREHOUSE".into(), Some(file_uri(&dir))),
                ("PARQDB_REFRESH_ROUTES".into(), Some(docs_routes())),
                (
                    "PARQDB_REFRESH_BUILDER_FUNCTION".into(),
                    Some("builder".into()),
                ),
                ("PARQDB_FUNCTION_TIMEOUT".into(), Some("60".into())),
                ("PARQDB_REFRESH_BUILDER_TIMEOUT".into(), Some("60s".into())),
                ("AWS_REGION".into(), Some("us-east-1".into())),
                ("AWS_ACCESS_KEY_ID".into(), Some("dummy".into())),
                ("AWS_SECRET_ACCESS_KEY".into(), Some("dummy".into())),
            ],
        ),
        (
            "refresh builder function without a region",
            vec![
                ("PARQDB_WAREHOUSE".into(), Some(file_uri(&dir))),
                ("PARQDB_REFRESH_ROUTES".into(), Some(docs_routes())),
                (
                    "PARQDB_REFRESH_BUILDER_FUNCTION".into(),
                    Some("builder".into()),
                ),
            ],
        ),
    ];
    let cases = cases
        .into_iter()
        .map(|(case, env)| (case, "load", env))
        .chain(gc_cases.into_iter().map(|(case, env)| (case, "gc", env)))
        .chain(
            refresh_cases
                .into_iter()
                .map(|(case, env)| (case, "refresh", env)),
        );
    for (case, binary, env) in cases {
        let mut function = Function::start(binary, &env).await;
        let status = function.exit_status().await;
        assert!(!status.success(), "{case}: exited with {status}");
        assert_eq!(function.api.polls(), 0, "{case}: polled for events");
        let init_error = function
            .api
            .init_error()
            .unwrap_or_else(|| panic!("{case}: no /init/error"));
        assert_eq!(init_error.error_type(), "INVALID_CONFIGURATION", "{case}");
        let logs = parse_lines(&function.stderr.wait_until(|lines| !lines.is_empty()).await);
        assert!(
            logs.iter().any(|line| line["level"] == "ERROR"
                && line["fields"]["error_type"] == "INVALID_CONFIGURATION"),
            "{case}: {logs:#?}"
        );
        assert!(
            !function
                .stderr
                .snapshot()
                .iter()
                .any(|line| line.contains("panicked")),
            "{case}: panicked"
        );
    }
}

/// `gc` on a warehouse its catalog claimed (by a first write through `namespace`): a
/// scheduled event runs one collection, bounded by the invocation's deadline (its scan
/// budget is half of the time left), and answers the run's report.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gc_collects_a_claimed_warehouse_within_its_deadline() {
    let backend = local_files();
    let mut namespace = Function::start("namespace", &backend.env).await;
    let created = namespace
        .invoke(&json!({"action": "create", "namespace": ["docs"]}))
        .await;
    assert_eq!(created.response()["namespace"], json!(["docs"]));
    let gc_env: Env = backend
        .env
        .iter()
        .cloned()
        .chain([("PARQDB_GC_DRY_RUN".into(), Some("true".into()))])
        .collect();
    let mut gc = Function::start("gc", &gc_env).await;
    gc.api.set_deadline(Duration::from_secs(30));
    let report = gc.invoke(&json!({})).await.response();
    assert_eq!(report["status"], "dry-run", "{report}");
    // Two metric lines: the run's numbers and the invocation's outcome.
    let metrics = parse_lines(&gc.stdout.wait_until(|lines| lines.len() >= 2).await);
    let outcome = metrics
        .iter()
        .find(|line| line.get("Outcome").is_some())
        .expect("the outcome line");
    assert_eq!(outcome["Operation"], "gc");
    assert_eq!(outcome["Outcome"], "SUCCESS");
    let run = metrics
        .iter()
        .find(|line| line.get("ObjectsScanned").is_some())
        .expect("the run's line");
    assert_eq!(run["Operation"], "gc");
    assert_eq!(run["Status"], "dry-run");
}

/// The index the refresh tests route `s3://lake/docs/` to.
fn docs_index() -> Value {
    json!({"namespace": ["search"], "name": "docs"})
}

/// `PARQDB_REFRESH_ROUTES`: `s3://lake/docs/` refreshes search/docs.
fn docs_routes() -> String {
    json!([{"source": "s3://lake/docs/", "index": docs_index()}]).to_string()
}

fn refresh_env(backend: &Backend) -> Env {
    backend
        .env
        .iter()
        .cloned()
        .chain([("PARQDB_REFRESH_ROUTES".into(), Some(docs_routes()))])
        .collect()
}

/// An EventBridge `Object Created` event for `s3://lake/<key>`, written at `sequencer`
/// `seconds` after 2025-06-15T12:00:00Z (the event's `time`).
fn object_created(event_id: &str, key: &str, sequencer: &str, seconds: u32) -> Value {
    let time = format!("2025-06-15T12:{:02}:{:02}Z", seconds / 60, seconds % 60);
    object_created_at(event_id, key, sequencer, &time)
}

/// An EventBridge `Object Created` event for `s3://lake/<key>` at `time` (RFC 3339).
fn object_created_at(event_id: &str, key: &str, sequencer: &str, time: &str) -> Value {
    json!({
        "version": "0", "id": event_id, "detail-type": "Object Created", "source": "aws.s3",
        "account": "123456789012", "time": time, "region": "us-east-1",
        "resources": ["arn:aws:s3:::lake"],
        "detail": {"version": "0", "bucket": {"name": "lake"},
                   "object": {"key": key, "size": 8192, "sequencer": sequencer},
                   "request-id": "R", "requester": "123456789012", "reason": "PutObject"}
    })
}

/// `refresh` as its SQS event source mapping drives it: a burst (shuffled, one write
/// delivered twice) collapses to one build and one commit of the newest write; a message
/// that is not an S3 event and a change no route contains are the only batch item
/// failures; the redelivered batch builds and commits nothing; the index is created on
/// first use and loads through the catalog with the newest source state.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refresh_collapses_an_sqs_batch_and_reports_only_its_failed_messages() {
    let backend = local_files();
    let mut refresh = Function::start("refresh", &refresh_env(&backend)).await;
    refresh.api.set_deadline(Duration::from_secs(60));
    let burst = [
        (
            "m1",
            object_created("e1", "docs/part-1.parquet", "0A", 1).to_string(),
        ),
        (
            "m2",
            object_created("e3", "docs/part-3.parquet", "0C", 3).to_string(),
        ),
        ("m3", "not an event".to_owned()),
        (
            "m4",
            object_created("e2", "docs/part-2.parquet", "0B", 2).to_string(),
        ),
        (
            "m5",
            object_created("e9", "other/part-1.parquet", "0D", 4).to_string(),
        ),
        // The write of m2, delivered again as another EventBridge event.
        (
            "m6",
            object_created("e3-again", "docs/part-3.parquet", "0C", 3).to_string(),
        ),
    ];
    let response = refresh.invoke(&sqs_batch(&burst)).await.response();
    assert_eq!(failed_ids(&response), ["m3", "m5"], "{response}");

    let catalog = CatalogConfig::new(Some(backend.env[0].1.clone().expect("warehouse")), None)
        .build()
        .await
        .expect("catalog");
    let docs = parqdb_catalog::IndexIdentifier::new(
        parqdb_catalog::Namespace::new(["search"]).expect("namespace"),
        "docs",
    )
    .expect("identifier");
    let pointer = parqdb_catalog::IndexCatalog::load(&catalog, &docs)
        .await
        .expect("created by the first batch");
    let metadata = catalog
        .read_metadata(&pointer.metadata_location)
        .await
        .expect("metadata");
    assert_eq!(metadata.snapshots().len(), 1, "one commit for the burst");
    let current = metadata.current_snapshot();
    assert_eq!(
        current.contents().source_table.properties()["changed-object"],
        "docs/part-3.parquet"
    );
    assert_eq!(
        current.contents().source_table.properties()["location"],
        "s3://lake/docs/"
    );

    // The batch again (SQS redelivers at least once): nothing to build or commit.
    let again: Vec<(&str, String)> = burst
        .iter()
        .filter(|(id, _)| !["m3", "m5"].contains(id))
        .cloned()
        .collect();
    let response = refresh.invoke(&sqs_batch(&again)).await.response();
    assert_eq!(failed_ids(&response), Vec::<String>::new(), "{response}");
    let still = parqdb_catalog::IndexCatalog::load(&catalog, &docs)
        .await
        .expect("loaded");
    assert_eq!(still.metadata_location, pointer.metadata_location);

    // One batch metric line per invocation, besides the outcome line.
    let metrics = parse_lines(&refresh.stdout.wait_until(|lines| lines.len() >= 4).await);
    let batches: Vec<&Value> = metrics
        .iter()
        .filter(|line| line.get("Builds").is_some())
        .collect();
    assert_eq!(batches.len(), 2, "{metrics:#?}");
    assert_eq!(
        (
            &batches[0]["Changes"],
            &batches[0]["Builds"],
            &batches[0]["Commits"]
        ),
        (&json!(5), &json!(1), &json!(1)),
        "{}",
        batches[0]
    );
    assert_eq!(batches[0]["UnroutedChanges"], 1);
    assert_eq!(batches[0]["RejectedMessages"], 1);
    assert_eq!(
        (&batches[1]["Builds"], &batches[1]["Commits"]),
        (&json!(0), &json!(0))
    );

    // A newer write (made now, after the batch's build read the table), delivered by
    // EventBridge directly (no queue): the runner's report.
    #[allow(clippy::disallowed_methods)] // S3 stamps the write with the wall clock
    let now = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();
    let report = refresh
        .invoke(&object_created_at("e4", "docs/part-4.parquet", "0E", &now))
        .await
        .response();
    assert_eq!(
        (&report["builds"], &report["commits"]),
        (&json!(1), &json!(1)),
        "{report}"
    );
    // ... and one no route contains: a typed error, so Lambda's retries take over.
    let unrouted = refresh
        .invoke(&object_created("e5", "elsewhere/x.parquet", "0F", 5))
        .await;
    assert_eq!(unrouted.error_type(), "INVALID_REQUEST", "{unrouted:?}");
    assert!(refresh.is_running());
}

/// `publish`, `gc` and `refresh` go through the same invocation plumbing as the catalog operations:
/// one metric line per invocation (`Operation` is the function), one outcome log line in
/// the invocation's span, and typed errors for malformed events.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publish_and_gc_are_observed_like_every_function() {
    let backend = local_files();
    let gc_env: Env = backend
        .env
        .iter()
        .cloned()
        .chain([
            ("PARQDB_GC_RETENTION".into(), Some("7d".into())),
            ("PARQDB_GC_GRACE".into(), Some("1h".into())),
        ])
        .collect();
    for (name, env) in [
        ("publish", backend.env.clone()),
        ("gc", gc_env),
        ("refresh", refresh_env(&backend)),
    ] {
        let mut function = Function::start(name, &env).await;
        let outcome = function.invoke(&json!([])).await;
        assert_eq!(
            outcome.error_type(),
            "INVALID_REQUEST",
            "{name}: {outcome:?}"
        );
        let (request_id, outcome) = function.invoke_raw(b"{not json".to_vec()).await;
        assert_eq!(
            outcome.error_type(),
            "INVALID_REQUEST",
            "{name}: {outcome:?}"
        );
        let metrics = parse_lines(&function.stdout.wait_until(|lines| lines.len() >= 2).await);
        assert_eq!(metrics.len(), 2, "{name}: one metric line per invocation");
        for metric in &metrics {
            assert_eq!(metric["Operation"], name, "{metric}");
            assert_eq!(metric["Outcome"], "INVALID_REQUEST", "{metric}");
        }
        assert_eq!(metrics[1]["RequestId"], request_id.as_str());
        let logs = parse_lines(
            &function
                .stderr
                .wait_for_count("invocation rejected", 2)
                .await,
        );
        let outcome_lines: Vec<&Value> = logs
            .iter()
            .filter(|line| line["fields"]["message"] == "invocation rejected")
            .collect();
        assert_eq!(outcome_lines.len(), 2, "{name}: {logs:#?}");
        for line in outcome_lines {
            assert_eq!(line["level"], "WARN", "{line}");
            assert_eq!(line["span"]["operation"], name, "{line}");
            assert_eq!(line["fields"]["outcome"], "INVALID_REQUEST", "{line}");
        }
        assert!(function.is_running(), "{name} stopped");
    }
}
