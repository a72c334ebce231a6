//! One plain `async fn` per operation over a `&dyn IndexCatalog`, the [`dispatch`] by
//! [`Operation`], and the [`Handler`] the function binaries run.
//!
//! The operation functions parse the event ([`Request::from_event`]), call the catalog and
//! return the response type; they know nothing about spans, metrics or deadlines, so they
//! can be unit-tested with `LambdaEvent::new(payload, Context::default())` and reused by
//! any front end. [`Invocations`] adds what every invocation of every function needs —
//! the deadline ([`Deadline`]), a span carrying the request id, one outcome log line, one
//! EMF metric ([`observe`]) — for [`Handler::invoke`] and for the functions outside
//! [`Operation`] ([`publish`], [`gc`] and [`refresh`]).
//!
//! The `invocation` submodule holds what every invocation goes through ([`Invocations`],
//! [`Handler`], [`observe`]).

mod invocation;

use lambda_runtime::LambdaEvent;
use serde::Serialize;
use serde_json::Value;

use super::Operation;
use super::deadline::Deadline;
use super::event::{
    CommitRequest, DropRequest, DropResponse, ListRequest, LoadRequest, NamespaceRequest,
    NamespaceResponse, RegisterRequest, RenameRequest, Request,
};
use crate::catalog::{CommitResult, IdentifierPage, IndexCatalog, IndexPointer};
use crate::clock::{Clock, SystemClock};
use crate::error::{Error, ErrorKind, Result};
use crate::gc::GarbageCollector;
use crate::publish::request::PublishRequest;
use crate::publish::{Published, Publisher};
use crate::refresh::{Delivery, IndexBuilder, RefreshOutcome, RefreshRunner};

pub use self::invocation::{Handler, Invocations, observe};

/// `load {identifier}` → the current pointer, or `INDEX_NOT_FOUND`.
pub async fn load(catalog: &dyn IndexCatalog, event: LambdaEvent<Value>) -> Result<IndexPointer> {
    let request = LoadRequest::from_event(event.payload)?;
    catalog.load(&request.identifier).await
}

/// `register {identifier, source?, metadata-location}` → the new pointer.
pub async fn register(
    catalog: &dyn IndexCatalog,
    event: LambdaEvent<Value>,
) -> Result<IndexPointer> {
    let request = RegisterRequest::from_event(event.payload)?;
    catalog
        .register_with_binding(
            &request.identifier,
            &request.source,
            &request.metadata_location,
        )
        .await
}

/// `commit {identifier, source?, base-metadata-location, new-metadata-location}` → the
/// pointer after the commit and `already-applied`, or `COMMIT_CONFLICT`.
pub async fn commit(catalog: &dyn IndexCatalog, event: LambdaEvent<Value>) -> Result<CommitResult> {
    let request = CommitRequest::from_event(event.payload)?;
    catalog
        .commit_with_binding(
            &request.identifier,
            &request.source,
            &request.base_metadata_location,
            &request.new_metadata_location,
        )
        .await
}

/// `drop {identifier}` → `{"identifier": ..., "dropped": true}`, or `INDEX_NOT_FOUND`.
pub async fn drop_index(
    catalog: &dyn IndexCatalog,
    event: LambdaEvent<Value>,
) -> Result<DropResponse> {
    let request = DropRequest::from_event(event.payload)?;
    catalog.drop_index(&request.identifier).await?;
    Ok(DropResponse {
        identifier: request.identifier,
        dropped: true,
    })
}

/// `rename {from, to}` → the pointer under its new identifier.
pub async fn rename(catalog: &dyn IndexCatalog, event: LambdaEvent<Value>) -> Result<IndexPointer> {
    let request = RenameRequest::from_event(event.payload)?;
    catalog.rename(&request.from, &request.to).await
}

/// `list {namespace, page-token?, page-size?}` → one page of identifiers.
pub async fn list(catalog: &dyn IndexCatalog, event: LambdaEvent<Value>) -> Result<IdentifierPage> {
    let request = ListRequest::from_event(event.payload)?;
    catalog
        .list(
            &request.namespace,
            request.page_token.as_deref(),
            request.page_size,
        )
        .await
}

/// `namespace {action, ...}` → the action's answer (see [`NamespaceResponse`]).
pub async fn namespace(
    catalog: &dyn IndexCatalog,
    event: LambdaEvent<Value>,
) -> Result<NamespaceResponse> {
    Ok(match NamespaceRequest::from_event(event.payload)? {
        NamespaceRequest::Create {
            namespace,
            properties,
        } => {
            catalog
                .create_namespace(&namespace, properties.clone())
                .await?;
            NamespaceResponse::Properties {
                namespace,
                properties,
            }
        }
        NamespaceRequest::Exists { namespace } => {
            let exists = catalog.namespace_exists(&namespace).await?;
            NamespaceResponse::Exists { namespace, exists }
        }
        NamespaceRequest::List {
            parent,
            page_token,
            page_size,
        } => NamespaceResponse::Page(
            catalog
                .list_namespaces(parent.as_ref(), page_token.as_deref(), page_size)
                .await?,
        ),
        NamespaceRequest::Drop { namespace } => {
            catalog.drop_namespace(&namespace).await?;
            NamespaceResponse::Dropped {
                namespace,
                dropped: true,
            }
        }
        NamespaceRequest::Properties { namespace } => {
            let properties = catalog.namespace_properties(&namespace).await?;
            NamespaceResponse::Properties {
                namespace,
                properties,
            }
        }
    })
}

/// `publish {identifier, idempotency-key, snapshot}` → the publication (see
/// [`crate::publish::request`]): the `publish` function of refresh jobs.
pub async fn publish(publisher: &Publisher, event: LambdaEvent<Value>) -> Result<Published> {
    let request = PublishRequest::from_event(event.payload)?;
    request.publish(publisher).await
}

/// One gc event → one step of a run, or as much of a whole run as fits (see
/// [`crate::gc::run_scheduled_within`]): the `gc` function.
///
/// The invocation works for at most [`gc_budget`] of its time (or the collector's
/// configured budget, if smaller) and then stops at the next page boundary, its progress
/// checkpointed, so it answers before its deadline instead of being cut off by it; the
/// next invocation goes on where it stopped.
pub async fn gc(collector: &GarbageCollector, event: LambdaEvent<Value>) -> Result<Value> {
    let started_ms = SystemClock.now_ms();
    let budget = gc_budget(event.context.deadline, started_ms);
    let report = crate::gc::run_scheduled_within(collector, event.payload, budget).await?;
    // The run's own numbers, besides the invocation's outcome line (never dropped by the
    // log level: metric lines are printed, not logged).
    let stack = super::metrics::stack_from_env();
    println!(
        "{}",
        super::metrics::gc_emf_line(&stack, started_ms, &report)
    );
    for warning in report["warnings"].as_array().into_iter().flatten() {
        tracing::warn!(warning = %warning.as_str().unwrap_or_default(), "gc run");
    }
    Ok(report)
}

/// One delivery of source changes (an SQS batch, an EventBridge `Object Created` event or
/// an S3 notification; see [`crate::refresh::Delivery`]) → one build and at most one
/// commit per index ([`RefreshRunner::run`]): the `refresh` function.
///
/// An SQS batch is answered with the partial-batch response
/// (`{"batchItemFailures": [{"itemIdentifier": <message id>}, ...]}`, for an event source
/// mapping with `ReportBatchItemFailures`): the messages whose body carries no usable S3
/// write, and those with a change whose index failed or that no route contains, are
/// delivered again; the rest are done. Any other event is answered with the runner's
/// report, or fails with the first failed index's error code (`INVALID_REQUEST` for an
/// unrouted change), so Lambda's retries and on-failure destination take over.
///
/// Every batch prints its metric line ([`super::metrics::refresh_emf_line`]) and logs
/// each rejected message, failed index and unrouted change as a warning.
pub async fn refresh<B: IndexBuilder>(
    runner: &RefreshRunner<B>,
    event: LambdaEvent<Value>,
) -> Result<Value> {
    let started_ms = SystemClock.now_ms();
    let delivery = Delivery::parse(event.payload)?;
    for (message_id, why) in delivery.rejected() {
        tracing::warn!(
            message_id,
            error_type = why.code(),
            error = %why.full_message(),
            "refresh: the message carries no usable S3 write; it is delivered again until the dead-letter queue takes it"
        );
    }
    let report = runner.run(delivery.changes().to_vec()).await;
    println!(
        "{}",
        super::metrics::refresh_emf_line(
            &super::metrics::stack_from_env(),
            started_ms,
            &report,
            delivery.rejected().count()
        )
    );
    for &n in &report.unrouted {
        tracing::warn!(
            change = %delivery.changes()[n].uri(),
            "refresh: no route contains the changed object (PARQDB_REFRESH_ROUTES)"
        );
    }
    let mut first_failure = None;
    for index in &report.indexes {
        match &index.outcome {
            RefreshOutcome::Failed {
                code,
                message,
                retryable,
            } => {
                tracing::warn!(
                    index = %index.index,
                    error_type = %code,
                    error = %message,
                    retryable,
                    "refresh failed; its changes are delivered again"
                );
                first_failure.get_or_insert((code, message));
            }
            outcome => {
                tracing::info!(index = %index.index, changes = index.changes.len(), outcome = ?outcome, "refreshed")
            }
        }
    }
    if delivery.is_sqs() {
        return serde_json::to_value(delivery.batch_item_failures(&report)).map_err(|err| {
            Error::with_source(
                ErrorKind::InvalidRequest,
                "the response cannot be written",
                err,
            )
        });
    }
    if let Some((code, message)) = first_failure {
        return Err(Error::new(
            ErrorKind::from_code(code).unwrap_or(ErrorKind::StoreUnavailable),
            message.clone(),
        ));
    }
    if let Some(&n) = report.unrouted.first() {
        return Err(Error::new(
            ErrorKind::InvalidRequest,
            format!(
                "no route contains `{}` (PARQDB_REFRESH_ROUTES)",
                delivery.changes()[n].uri()
            ),
        ));
    }
    Ok(serde_json::to_value(&report).unwrap_or(serde_json::Value::Null))
}

/// The working budget of a `gc` invocation whose deadline is `deadline_ms`, at `now_ms`:
/// three quarters of the time the invocation has ([`Deadline`]'s budget: to the deadline,
/// less the margin); the rest is for the page that is under way when it is spent (a page
/// is at most `PARQDB_GC_PAGE_SIZE` objects). `None` without a deadline
/// (`Context::default()`): work until the run is complete.
///
/// ```
/// use std::time::Duration;
/// use parqdb_catalog::lambda::handler::gc_budget;
///
/// // 900 s to the deadline: work for 674.625 s.
/// assert_eq!(gc_budget(900_000, 0), Some(Duration::from_millis(674_625)));
/// assert_eq!(gc_budget(0, 0), None);
/// ```
pub fn gc_budget(deadline_ms: u64, now_ms: i64) -> Option<std::time::Duration> {
    Deadline::default()
        .budget(deadline_ms, now_ms)
        .map(|left| left * 3 / 4)
}

/// Any operation's response (serialized without a tag: each is the operation's JSON).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum Response {
    /// `load`, `register`, `rename`.
    Pointer(IndexPointer),
    /// `commit`.
    Commit(CommitResult),
    /// `drop`.
    Dropped(DropResponse),
    /// `list`.
    Page(IdentifierPage),
    /// `namespace`.
    Namespace(NamespaceResponse),
}

/// Run `operation` on one event.
pub async fn dispatch(
    operation: Operation,
    catalog: &dyn IndexCatalog,
    event: LambdaEvent<Value>,
) -> Result<Response> {
    Ok(match operation {
        Operation::Load => Response::Pointer(load(catalog, event).await?),
        Operation::Register => Response::Pointer(register(catalog, event).await?),
        Operation::Commit => Response::Commit(commit(catalog, event).await?),
        Operation::Drop => Response::Dropped(drop_index(catalog, event).await?),
        Operation::Rename => Response::Pointer(rename(catalog, event).await?),
        Operation::List => Response::Page(list(catalog, event).await?),
        Operation::Namespace => Response::Namespace(namespace(catalog, event).await?),
    })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Arc;

    use bytes::Bytes;
    use lambda_runtime::Context;
    use serde_json::json;

    use super::*;
    use crate::catalog::Catalog;
    use crate::clock::{RandomIds, SystemClock};
    use crate::family::FamilyRegistry;
    use crate::metadata::{
        IndexMetadata, IndexTableDefinition, ProviderDefinition, SnapshotContents, TableDefinition,
    };
    use crate::store::memory::MemoryStore;
    use crate::warehouse::Warehouse;

    fn catalog() -> Catalog {
        let warehouse = Warehouse::in_memory("memory://lambda/wh").expect("warehouse");
        Catalog::builder(Arc::new(MemoryStore::new()), warehouse).build()
    }

    fn event(payload: Value) -> LambdaEvent<Value> {
        LambdaEvent::new(payload, Context::default())
    }

    async fn call(
        operation: Operation,
        catalog: &Catalog,
        event: LambdaEvent<Value>,
    ) -> Result<Value> {
        let response = dispatch(operation, catalog, event).await?;
        Ok(serde_json::to_value(response).expect("serializes"))
    }

    fn source() -> TableDefinition {
        TableDefinition::new(
            "parquet",
            BTreeMap::from([("location".to_owned(), "s3://example/docs/".to_owned())]),
        )
        .expect("valid source")
    }

    fn contents(tag: &str) -> SnapshotContents {
        let table = |role: &str| {
            IndexTableDefinition::new(
                1,
                BTreeMap::from([("location".to_owned(), format!("indexes/{tag}/{role}/"))]),
            )
            .expect("valid table")
        };
        SnapshotContents {
            source_table: source(),
            vector_field: "embedding".into(),
            source_key_fields: vec!["document_id".into()],
            indexed_rows: 10,
            index_family: "ivf".into(),
            index_schema_version: 1,
            metric: "l2_squared".into(),
            parameters: BTreeMap::from([("nlist".to_owned(), "4".to_owned())]),
            index_provider: ProviderDefinition::new("parquet", BTreeMap::new())
                .expect("valid provider"),
            index_tables: BTreeMap::from([
                ("ivf_centroids".to_owned(), table("ivf_centroids")),
                ("ivf_postings".to_owned(), table("ivf_postings")),
            ]),
            summary: BTreeMap::new(),
        }
    }

    async fn write(catalog: &Catalog, metadata: &IndexMetadata, n: u32) -> String {
        let relative = format!("metadata/{}/{n:05}.metadata.json", metadata.index_uuid());
        catalog
            .warehouse()
            .write_new(&relative, Bytes::from(metadata.to_json_vec()))
            .await
            .expect("written")
    }

    #[tokio::test]
    async fn operations_answer_the_documented_json() {
        let catalog = catalog();
        // As `parqdb-catalog init` does: the warehouse is claimed before it holds data.
        catalog.claim_warehouse().await.expect("claimed");
        let registry = FamilyRegistry::builtin();
        let first = IndexMetadata::create(
            contents("a"),
            BTreeMap::new(),
            &SystemClock,
            &RandomIds,
            &registry,
        )
        .expect("metadata");
        let first_location = write(&catalog, &first, 1).await;
        let second = first
            .successor(contents("b"), &SystemClock, &RandomIds, &registry)
            .expect("successor");
        let second_location = write(&catalog, &second, 2).await;
        let id = json!({"namespace": ["docs"], "name": "emb"});
        let source = serde_json::to_value(source()).expect("json");

        let created = namespace(
            &catalog,
            event(json!({"action": "create", "namespace": ["docs"]})),
        )
        .await
        .expect("created");
        assert_eq!(
            serde_json::to_value(created).expect("json"),
            json!({"namespace": ["docs"], "properties": {}})
        );

        let registered = call(
            Operation::Register,
            &catalog,
            event(json!({"identifier": id, "source": source, "metadata-location": first_location})),
        )
        .await
        .expect("registered");
        assert_eq!(registered["metadata-location"], json!(first_location));
        assert_eq!(registered["source"], source);
        assert_eq!(registered["identifier"], id);
        assert!(registered["version"].is_string());

        let commit_event = json!({
            "identifier": id,
            "source": source,
            "base-metadata-location": first_location,
            "new-metadata-location": second_location,
        });
        let committed = call(Operation::Commit, &catalog, event(commit_event.clone()))
            .await
            .expect("committed");
        assert_eq!(committed["metadata-location"], json!(second_location));
        assert_eq!(committed["already-applied"], json!(false));

        let losing = first
            .successor(contents("c"), &SystemClock, &RandomIds, &registry)
            .expect("successor");
        let losing_location = write(&catalog, &losing, 3).await;
        let stale = json!({
            "identifier": id,
            "source": source,
            "base-metadata-location": first_location,
            "new-metadata-location": losing_location,
        });
        let err = commit(&catalog, event(stale))
            .await
            .expect_err("stale base");
        assert_eq!(err.code(), "COMMIT_CONFLICT", "{err}");

        let listed = call(
            Operation::List,
            &catalog,
            event(json!({"namespace": ["docs"]})),
        )
        .await
        .expect("listed");
        assert_eq!(
            listed,
            json!({"identifiers": [id], "next-page-token": null})
        );

        let to = json!({"namespace": ["docs"], "name": "renamed"});
        let renamed = call(
            Operation::Rename,
            &catalog,
            event(json!({"from": id, "to": to})),
        )
        .await
        .expect("renamed");
        assert_eq!(renamed["identifier"], to);
        assert_eq!(renamed["metadata-location"], json!(second_location));

        let dropped = call(Operation::Drop, &catalog, event(json!({"identifier": to})))
            .await
            .expect("dropped");
        assert_eq!(dropped, json!({"identifier": to, "dropped": true}));
        let err = load(&catalog, event(json!({"identifier": to})))
            .await
            .expect_err("gone");
        assert_eq!(err.code(), "INDEX_NOT_FOUND");

        let exists = call(
            Operation::Namespace,
            &catalog,
            event(json!({"action": "exists", "namespace": ["docs"]})),
        )
        .await
        .expect("answered");
        assert_eq!(exists, json!({"namespace": ["docs"], "exists": true}));
        let page = call(
            Operation::Namespace,
            &catalog,
            event(json!({"action": "list"})),
        )
        .await
        .expect("listed");
        assert_eq!(
            page,
            json!({"namespaces": [["docs"]], "next-page-token": null})
        );
        let dropped = call(
            Operation::Namespace,
            &catalog,
            event(json!({"action": "drop", "namespace": ["docs"]})),
        )
        .await
        .expect("dropped");
        assert_eq!(dropped, json!({"namespace": ["docs"], "dropped": true}));
        let err = namespace(
            &catalog,
            event(json!({"action": "properties", "namespace": ["docs"]})),
        )
        .await
        .expect_err("gone");
        assert_eq!(err.code(), "NAMESPACE_NOT_FOUND");
    }

    #[tokio::test]
    async fn every_operation_rejects_malformed_events_with_a_typed_error() {
        let catalog = catalog();
        for operation in Operation::ALL {
            for payload in [
                json!(null),
                json!([]),
                json!("x"),
                json!({"unknown": 1}),
                json!({}),
            ] {
                let err = call(operation, &catalog, event(payload.clone()))
                    .await
                    .expect_err("rejected");
                assert_eq!(
                    err.code(),
                    "INVALID_REQUEST",
                    "{operation} {payload}: {err}"
                );
            }
        }
    }
}
