//! [`LambdaCatalog`] against the real function binaries when invocations fail: throttling,
//! crashes before and after the function ran, lost responses, refused connections, and
//! the CLI's `--catalog lambda://PREFIX`.
//!
//! Faults are injected by the test kit's local Lambda host (`LambdaHost`), so every failure
//! is one the Lambda service can produce, and "did the mutation apply" is decided by the
//! real functions and store.
#![allow(clippy::disallowed_methods)] // tests may read the wall clock and draw random ids (unique names)

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use crate::support::fixture::{TestEnv, source};
use crate::support::lambda_host::{Clients, local_deployment};
use parqdb_catalog::Warehouse;
use parqdb_catalog::lambda::Operation;
use parqdb_catalog::remote::{FunctionNames, LambdaCatalog};
use parqdb_catalog::{ErrorKind, IndexIdentifier};
use parqdb_catalog::{IndexCatalog, RetryPolicy};
use parqdb_catalog_testkit::lambda::{Fault, LambdaHost};

fn fast_retries() -> RetryPolicy {
    RetryPolicy {
        max_attempts: 4,
        base_delay: Duration::from_millis(1),
        max_delay: Duration::from_millis(10),
    }
}

/// One started process per function; a catalog with fast retries and a 3 s attempt timeout.
async fn setup() -> (LambdaHost, TestEnv, tempfile::TempDir) {
    let deployment = local_deployment(1).await;
    let (host, warehouse, dir) = (deployment.host, deployment.warehouse, deployment.dir);
    // The attempt timeout is short (the hang tests wait it out): start it warm.
    host.ready().await;
    let catalog = host
        .catalog_with(fast_retries(), Some(Duration::from_secs(3)))
        .await;
    let env = TestEnv {
        catalog: Arc::new(catalog),
        warehouse,
        with_registry: None,
    };
    (host, env, dir)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn throttled_invocations_are_retried_and_never_run_twice() {
    let (host, env, _dir) = setup().await;
    let (index, base, location) = env.registered("throttled").await;
    let runs = host.runs(Operation::Load);
    host.inject(Operation::Load, &[Fault::Throttle, Fault::Throttle]);
    let pointer = env
        .catalog
        .load(&index)
        .await
        .expect("retried past the throttling");
    assert_eq!(pointer.metadata_location, location);
    assert_eq!(host.runs(Operation::Load), runs + 1);

    // A mutation is retried too: throttling means it did not run.
    let (_, next) = env.successor(&base, 2).await;
    host.inject(Operation::Commit, &[Fault::Throttle]);
    let result = env
        .commit(&index, 2, &location, &next)
        .await
        .expect("committed after a throttle");
    assert!(!result.already_applied);

    // Throttled beyond the attempts: the store is unavailable, and nothing ran.
    let runs = host.runs(Operation::Load);
    host.inject(Operation::Load, &[Fault::Throttle; 4]);
    let err = env.catalog.load(&index).await.expect_err("throttled out");
    assert_eq!(err.kind(), ErrorKind::StoreUnavailable, "{err}");
    assert_eq!(host.runs(Operation::Load), runs);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_retry_failures_that_may_have_run() {
    let (host, env, _dir) = setup().await;
    let (index, _, location) = env.registered("reads").await;
    host.inject(
        Operation::Load,
        &[
            Fault::CrashAfterRun,
            Fault::ServiceErrorBeforeRun,
            Fault::CrashBeforeRun,
        ],
    );
    let pointer = env.catalog.load(&index).await.expect("retried");
    assert_eq!(pointer.metadata_location, location);
    host.inject(Operation::List, &[Fault::CrashAfterRun]);
    let page = env
        .catalog
        .list(index.namespace(), None, None)
        .await
        .expect("retried");
    assert_eq!(page.identifiers, vec![index]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_that_ran_but_lost_its_answer_is_applied() {
    let (host, env, _dir) = setup().await;
    let (index, base, location) = env.registered("lost").await;

    let (second, second_location) = env.successor(&base, 2).await;
    host.inject(Operation::Commit, &[Fault::CrashAfterRun]);
    let result = env
        .commit(&index, 2, &location, &second_location)
        .await
        .expect("resolved by reading back");
    assert!(result.already_applied);
    assert_eq!(result.pointer.metadata_location, second_location);

    // The same with a response that never comes (the attempt times out).
    let (_, third_location) = env.successor(&second, 3).await;
    host.inject(Operation::Commit, &[Fault::HangAfterRun]);
    let result = env
        .commit(&index, 3, &second_location, &third_location)
        .await
        .expect("resolved by reading back");
    assert!(result.already_applied);
    assert_eq!(env.current(&index).await, third_location);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_that_may_not_have_run_is_unknown_not_failed() {
    let (host, env, _dir) = setup().await;
    let (index, base, location) = env.registered("unknown").await;
    let (_, next) = env.successor(&base, 2).await;
    for fault in [Fault::CrashBeforeRun, Fault::ServiceErrorBeforeRun] {
        let runs = host.runs(Operation::Commit);
        host.inject(Operation::Commit, &[fault]);
        let err = env
            .commit(&index, 2, &location, &next)
            .await
            .expect_err("outcome unknown");
        assert_eq!(
            err.kind(),
            ErrorKind::CommitStateUnknown,
            "{fault:?}: {err}"
        );
        assert!(err.message().contains("reload"), "{err}");
        // Never re-sent: the function did not run, and the pointer did not move.
        assert_eq!(host.runs(Operation::Commit), runs);
        assert_eq!(env.current(&index).await, location);
    }
    // Reloading and retrying then succeeds.
    let result = env
        .commit(&index, 2, &location, &next)
        .await
        .expect("committed");
    assert!(!result.already_applied);
}

/// A function that runs out of time answers `COMMIT_STATE_UNKNOWN` itself (see
/// `parqdb_catalog::lambda::deadline`); the client settles it by reading back, like any
/// invocation that may have run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_function_that_answers_commit_state_unknown_is_resolved_by_reading_back() {
    let (host, env, _dir) = setup().await;
    let (index, base, location) = env.registered("function-unknown").await;
    let (_, next) = env.successor(&base, 2).await;

    host.inject(Operation::Commit, &[Fault::UnknownBeforeRun]);
    let err = env
        .commit(&index, 2, &location, &next)
        .await
        .expect_err("not applied, so still unknown");
    assert_eq!(err.kind(), ErrorKind::CommitStateUnknown, "{err}");
    assert!(err.message().contains("reload"), "{err}");

    host.inject(Operation::Commit, &[Fault::UnknownAfterRun]);
    let result = env
        .commit(&index, 2, &location, &next)
        .await
        .expect("resolved by reading back");
    assert!(result.already_applied);
    assert_eq!(result.pointer.metadata_location, next);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn register_drop_rename_and_namespaces_resolve_by_reading_back() {
    let (host, env, _dir) = setup().await;
    let namespace = env.namespace("resolve").await;
    let (_, location) = env.new_index().await;
    let index = IndexIdentifier::new(namespace.clone(), "a").expect("valid");

    // register: applied iff the pointer equals what we registered.
    host.inject(Operation::Register, &[Fault::CrashBeforeRun]);
    let err = env
        .catalog
        .register(&index, Some(&source(1)), &location)
        .await
        .expect_err("unknown");
    assert_eq!(err.kind(), ErrorKind::CommitStateUnknown, "{err}");
    host.inject(Operation::Register, &[Fault::CrashAfterRun]);
    let pointer = env
        .catalog
        .register(&index, Some(&source(1)), &location)
        .await
        .expect("applied");
    assert_eq!(pointer.metadata_location, location);

    // rename: applied iff `to` holds what `from` had and `from` is gone.
    let to = IndexIdentifier::new(namespace.clone(), "b").expect("valid");
    host.inject(Operation::Rename, &[Fault::CrashBeforeRun]);
    let err = env.catalog.rename(&index, &to).await.expect_err("unknown");
    assert_eq!(err.kind(), ErrorKind::CommitStateUnknown, "{err}");
    host.inject(Operation::Rename, &[Fault::HangAfterRun]);
    let pointer = env.catalog.rename(&index, &to).await.expect("applied");
    assert_eq!(pointer.identifier, to);
    assert_eq!(pointer.metadata_location, location);

    // drop: applied iff absent.
    host.inject(Operation::Drop, &[Fault::CrashBeforeRun]);
    let err = env.catalog.drop_index(&to).await.expect_err("unknown");
    assert_eq!(err.kind(), ErrorKind::CommitStateUnknown, "{err}");
    host.inject(Operation::Drop, &[Fault::CrashAfterRun]);
    env.catalog.drop_index(&to).await.expect("applied");
    assert_eq!(
        env.catalog.load(&to).await.expect_err("gone").kind(),
        ErrorKind::IndexNotFound
    );

    // Namespaces: create applied iff it exists with our properties; drop iff absent.
    let child = namespace.child("child").expect("valid");
    let properties = BTreeMap::from([("owner".to_owned(), "me".to_owned())]);
    host.inject(Operation::Namespace, &[Fault::CrashBeforeRun]);
    let err = env
        .catalog
        .create_namespace(&child, properties.clone())
        .await
        .expect_err("unknown");
    assert_eq!(err.kind(), ErrorKind::CommitStateUnknown, "{err}");
    host.inject(Operation::Namespace, &[Fault::CrashAfterRun]);
    env.catalog
        .create_namespace(&child, properties.clone())
        .await
        .expect("applied");
    assert_eq!(
        env.catalog
            .namespace_properties(&child)
            .await
            .expect("props"),
        properties
    );
    host.inject(Operation::Namespace, &[Fault::CrashAfterRun]);
    env.catalog.drop_namespace(&child).await.expect("applied");
    assert!(!env.catalog.namespace_exists(&child).await.expect("exists"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typed_errors_keep_their_kind_and_message() {
    let (_host, env, _dir) = setup().await;
    let (index, base, _) = env.registered("typed").await;
    let (_, next) = env.successor(&base, 2).await;
    let (_, other) = env.successor(&base, 3).await;
    let err = env
        .commit(&index, 3, &next, &other)
        .await
        .expect_err("stale base");
    assert_eq!(err.kind(), ErrorKind::CommitConflict);
    assert!(!err.message().is_empty());
    let missing = IndexIdentifier::new(index.namespace().clone(), "missing").expect("valid");
    assert_eq!(
        env.catalog.load(&missing).await.expect_err("absent").kind(),
        ErrorKind::IndexNotFound
    );
    let err = env
        .catalog
        .list(index.namespace(), Some("garbage"), None)
        .await
        .expect_err("bad token");
    assert_eq!(err.kind(), ErrorKind::InvalidRequest);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_connection_never_ran_and_is_not_ambiguous() {
    let (_host, env, _dir) = setup().await;
    let (index, base, location) = env.registered("refused").await;
    let (_, next) = env.successor(&base, 2).await;
    // A port nobody listens on.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let endpoint = format!("http://{}", closed.local_addr().expect("address"));
    drop(closed);
    let offline = LambdaCatalog::builder(FunctionNames::with_prefix("anything-"))
        .client(_host.client())
        .endpoint(endpoint)
        .retry(fast_retries())
        .build()
        .await
        .expect("catalog");
    let err = offline
        .commit(&index, Some(&source(2)), &location, &next)
        .await
        .expect_err("refused");
    assert_eq!(err.kind(), ErrorKind::StoreUnavailable, "{err}");
    assert!(err.message().contains("after 4 attempts"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_function_is_a_configuration_error() {
    let (host, _env, _dir) = setup().await;
    let wrong = LambdaCatalog::builder(FunctionNames::with_prefix("no-such-stack-"))
        .client(host.client())
        .retry(fast_retries())
        .build()
        .await
        .expect("catalog");
    let namespace = parqdb_catalog::Namespace::new(["x"]).expect("valid");
    let err = wrong
        .namespace_exists(&namespace)
        .await
        .expect_err("no function");
    assert_eq!(err.kind(), ErrorKind::Configuration, "{err}");
    assert!(err.message().contains("no-such-stack-namespace"), "{err}");
}

/// `parqdb-catalog --catalog lambda://PREFIX ...` with `AWS_ENDPOINT_URL_LAMBDA`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_runs_against_a_deployment() {
    let (host, env, _dir) = setup().await;
    let warehouse: &Warehouse = &env.warehouse;
    let cli_at = |catalog: &str, args: &[&str]| {
        let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_parqdb-catalog"));
        command
            .args(["--catalog", catalog, "--warehouse", warehouse.root()])
            .args(args)
            .env("AWS_ENDPOINT_URL_LAMBDA", host.endpoint())
            .env("AWS_ACCESS_KEY_ID", "dummy")
            .env("AWS_SECRET_ACCESS_KEY", "dummy")
            .env("AWS_REGION", "us-east-1")
            .env_remove("PARQDB_CATALOG")
            .env_remove("PARQDB_WAREHOUSE");
        async move {
            let output = command.output().await.expect("CLI ran");
            let stream = if output.status.success() {
                &output.stdout
            } else {
                &output.stderr
            };
            let json: serde_json::Value = serde_json::from_slice(stream)
                .unwrap_or_else(|err| panic!("JSON output ({err}): {output:?}"));
            (output.status.code(), json)
        }
    };
    let uri = host.uri();
    let cli = |args: &[&str]| cli_at(&uri, args);
    let namespace = format!("cli-{}", uuid::Uuid::new_v4().simple());
    let (code, _) = cli(&["namespace", "create", "--namespace", &namespace]).await;
    assert_eq!(code, Some(0));
    // Metadata goes into the warehouse only after that first write claimed it (a warehouse
    // that already holds data is claimed only with `init --adopt`).
    let (_, location) = env.new_index().await;
    // Without --source the catalog (in the function) binds the metadata's source-table,
    // after the same checks in the same order as with one: the namespace first.
    let bad = env.write_raw(br#"{"format-version": 1}"#).await;
    let missing = format!("missing-{}", uuid::Uuid::new_v4().simple());
    let (code, err) = cli(&[
        "register",
        "--namespace",
        &missing,
        "--name",
        "emb",
        "--metadata",
        &bad,
    ])
    .await;
    assert_eq!(
        code,
        Some(ErrorKind::NamespaceNotFound.exit_code()),
        "{err}"
    );
    let (code, registered) = cli(&[
        "register",
        "--namespace",
        &namespace,
        "--name",
        "emb",
        "--metadata",
        &location,
    ])
    .await;
    assert_eq!(code, Some(0), "{registered}");
    assert_eq!(registered["metadata-location"], location.as_str());
    // A stale base is a lost race, whatever is wrong with the new metadata.
    let (code, err) = cli(&[
        "commit",
        "--namespace",
        &namespace,
        "--name",
        "emb",
        "--base",
        &bad,
        "--new",
        &bad,
    ])
    .await;
    assert_eq!(code, Some(ErrorKind::CommitConflict.exit_code()), "{err}");
    let (code, loaded) = cli(&["load", "--namespace", &namespace, "--name", "emb"]).await;
    assert_eq!(code, Some(0));
    assert_eq!(loaded["version"], registered["version"]);
    let (code, listed) = cli(&["list", "--namespace", &namespace]).await;
    assert_eq!(code, Some(0));
    assert_eq!(listed["identifiers"][0]["name"], "emb");
    let (code, err) = cli(&["load", "--namespace", &namespace, "--name", "nope"]).await;
    assert_eq!(code, Some(ErrorKind::IndexNotFound.exit_code()));
    assert_eq!(err["error"], "INDEX_NOT_FOUND");
    // The CLI invokes the alias `live` (the host serves it, as the stack does); another
    // qualifier is invoked as asked, and names no function here.
    let canary = format!("{uri}?qualifier=canary");
    let (code, err) = cli_at(
        &canary,
        &["load", "--namespace", &namespace, "--name", "emb"],
    )
    .await;
    assert_eq!(code, Some(ErrorKind::Configuration.exit_code()), "{err}");
    let expected = format!("{}load:canary", host.prefix());
    assert!(
        err["message"]
            .as_str()
            .unwrap_or_default()
            .contains(&expected),
        "{err}"
    );
    // Commands that need the store itself refuse a remote catalog.
    let (code, err) = cli(&["probe"]).await;
    assert_eq!(code, Some(ErrorKind::Configuration.exit_code()));
    assert!(
        err["message"]
            .as_str()
            .unwrap_or_default()
            .contains("lambda://"),
        "{err}"
    );
}
