//! The event/response contract of the catalog's Lambda functions, and the error contract.
//!
//! # Requests
//! Every event is one JSON object with kebab-case fields; unknown fields, missing fields,
//! `null` where a value is required, wrong types and positional arrays in place of objects
//! are `INVALID_REQUEST`, and so is an event over [`MAX_EVENT_BYTES`] or one that is not
//! JSON at all. Identifiers are `{"namespace": ["a", "b"], "name": "x"}` and namespaces
//! are `["a", "b"]`; a segment or name the catalog cannot store is `INVALID_IDENTIFIER`.
//! The `source` binding is a strict `table-definition` object; omitted (or `null`), the
//! catalog binds the metadata's current snapshot's `source-table`, with the same order of
//! checks as an explicit source (see [`crate::catalog`]). Optional fields may be omitted
//! or `null`.
//!
//! | function    | event                                                                    |
//! |-------------|--------------------------------------------------------------------------|
//! | `load`      | `{identifier}`                                                           |
//! | `register`  | `{identifier, source?, metadata-location}`                               |
//! | `commit`    | `{identifier, source?, base-metadata-location, new-metadata-location}`  |
//! | `drop`      | `{identifier}`                                                           |
//! | `rename`    | `{from, to}`                                                             |
//! | `list`      | `{namespace, page-token?, page-size?}`                                   |
//! | `namespace` | `{action: "create", namespace, properties?}`                             |
//! |             | `{action: "exists" \| "properties" \| "drop", namespace}`                |
//! |             | `{action: "list", namespace?, page-token?, page-size?}` (`namespace` is the parent; omitted: top level) |
//!
//! # Responses
//! The same JSON the CLI prints: `load`, `register` and `rename` answer an
//! [`IndexPointer`](crate::catalog::IndexPointer) (`identifier`, `metadata-location`,
//! `source`, `version`), `commit` a [`CommitResult`](crate::catalog::CommitResult) (the
//! pointer plus `already-applied`), `list` an [`IdentifierPage`](crate::catalog::IdentifierPage)
//! (`identifiers`, `next-page-token` — `null` on the last page), `drop` a [`DropResponse`],
//! and `namespace` a [`NamespaceResponse`].
//!
//! # Errors
//! A failed invocation is a Lambda function error whose `errorType` is the stable code of
//! the [`ErrorKind`] (`COMMIT_CONFLICT`, `INDEX_NOT_FOUND`, `INVALID_REQUEST`, ...; see
//! [`ErrorKind::code`]) and whose `errorMessage` is the human-readable message with its
//! causes. Callers (and Step Functions `Retry`/`Catch` rules) branch on `errorType`.

use std::collections::BTreeMap;

use lambda_runtime::Diagnostic;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

use crate::error::{Error, ErrorKind, Result};
use crate::identifier::{IndexIdentifier, Namespace};
use crate::json::{self, Object, StrictValue};
use crate::metadata::TableDefinition;
use crate::publish::request::PublishRequest;

/// Largest event a function accepts, in bytes of compact JSON. Catalog events are a few
/// hundred bytes; the bound keeps a hostile event from reaching the pointer store (whose
/// records must stay far below DynamoDB's 400 KB item limit).
pub const MAX_EVENT_BYTES: usize = 256 * 1024;

impl From<Error> for Diagnostic {
    /// `errorType` is the spec code, `errorMessage` the message with its causes.
    fn from(err: Error) -> Diagnostic {
        Diagnostic {
            error_type: err.code().to_owned(),
            error_message: err.full_message(),
        }
    }
}

/// The event payload of one invocation: one strict JSON document, or the reason it is not
/// one. Unlike a plain `serde_json::Value` payload (which the runtime would reject with
/// its own, untyped error, and which keeps the last of duplicate keys), a body that is not
/// JSON, or an object with a duplicate key at any depth, here becomes an `INVALID_REQUEST`
/// answer.
///
/// [`RawEvent::from_body`] reads a whole invocation body, so trailing data after the
/// document is refused too; the function binaries hand every body over that way. When
/// `lambda_runtime` deserializes a `RawEvent` itself, it reads the body's first JSON value
/// only and ignores what follows.
#[derive(Debug, Clone, PartialEq)]
pub struct RawEvent(Result<Value, String>);

impl RawEvent {
    /// The event of the invocation body `body`: exactly one JSON document (UTF-8, no
    /// trailing data) whose objects have unique keys.
    ///
    /// ```
    /// use parqdb_catalog::lambda::RawEvent;
    ///
    /// assert!(RawEvent::from_body(br#"{"namespace": ["a"]}"#).into_value().is_ok());
    /// for body in [&br#"{"namespace": ["a"]} {}"#[..], br#"{"a": 1, "a": 2}"#, b"{"] {
    ///     let err = RawEvent::from_body(body).into_value().unwrap_err();
    ///     assert_eq!(err.code(), "INVALID_REQUEST");
    /// }
    /// ```
    pub fn from_body(body: &[u8]) -> RawEvent {
        RawEvent(
            json::from_slice(body)
                .map(|StrictValue(value)| value)
                .map_err(|err| refusal(err.path().unwrap_or("."), err.inner())),
        )
    }

    /// The JSON value, or `INVALID_REQUEST` if the body was not one strict JSON document.
    pub fn into_value(self) -> Result<Value> {
        self.0
            .map_err(|reason| invalid(format!("the event is not valid JSON: {reason}")))
    }
}

/// Why a body is not one strict JSON document, with the JSON path of the violation.
fn refusal(path: &str, reason: impl std::fmt::Display) -> String {
    if path == "." {
        reason.to_string()
    } else {
        format!("at `{path}`: {reason}")
    }
}

impl From<Value> for RawEvent {
    fn from(value: Value) -> Self {
        RawEvent(Ok(value))
    }
}

impl<'de> Deserialize<'de> for RawEvent {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        // Never fails: a syntax error, a duplicate key (or serde_json's nesting limit) is
        // kept as data.
        Ok(RawEvent(
            serde_path_to_error::deserialize(deserializer)
                .map(|StrictValue(value)| value)
                .map_err(|err| refusal(&err.path().to_string(), err.inner())),
        ))
    }
}

/// A request type of the contract: parsed strictly from an event, serialized by clients.
///
/// Every event is parsed the same way (the `publish` function's too, see
/// [`PublishRequest::from_event`]): a JSON object (`INVALID_REQUEST` for anything else), at
/// most [`MAX_EVENT_BYTES`] of compact JSON, with the JSON path of the first violation in
/// the message.
pub trait Request: Sized + Serialize {
    /// The function that serves this request.
    const OPERATION: super::Operation;

    /// Parse an event: `INVALID_REQUEST` for a malformed event, `INVALID_IDENTIFIER` for
    /// a name the catalog cannot store.
    fn from_event(event: Value) -> Result<Self>;
}

/// `load {identifier}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct LoadRequest {
    /// The index.
    pub identifier: IndexIdentifier,
}

/// `register {identifier, source?, metadata-location}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct RegisterRequest {
    /// The absent identifier to register.
    pub identifier: IndexIdentifier,
    /// The source binding (must equal the current snapshot's `source-table`; `None`: that
    /// `source-table`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<TableDefinition>,
    /// The absolute URI of the metadata file.
    pub metadata_location: String,
}

/// `commit {identifier, source?, base-metadata-location, new-metadata-location}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct CommitRequest {
    /// The index.
    pub identifier: IndexIdentifier,
    /// The source binding of the new metadata (`None`: its current snapshot's
    /// `source-table`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<TableDefinition>,
    /// The location the new metadata was based on.
    pub base_metadata_location: String,
    /// The new metadata's location.
    pub new_metadata_location: String,
}

/// `drop {identifier}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct DropRequest {
    /// The index.
    pub identifier: IndexIdentifier,
}

/// `rename {from, to}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct RenameRequest {
    /// The existing identifier.
    pub from: IndexIdentifier,
    /// The absent destination.
    pub to: IndexIdentifier,
}

/// `list {namespace, page-token?, page-size?}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct ListRequest {
    /// The namespace whose direct indexes to list.
    pub namespace: Namespace,
    /// The `next-page-token` of the previous page.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub page_token: Option<String>,
    /// At most this many identifiers (1..=1000, default 100).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub page_size: Option<usize>,
}

/// The `namespace` function's request, selected by `action`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(
    tag = "action",
    rename_all = "kebab-case",
    rename_all_fields = "kebab-case"
)]
pub enum NamespaceRequest {
    /// Create a namespace (its parent must exist).
    Create {
        /// The new namespace.
        namespace: Namespace,
        /// Its properties (default none).
        properties: BTreeMap<String, String>,
    },
    /// Whether a namespace exists.
    Exists {
        /// The namespace.
        namespace: Namespace,
    },
    /// Direct child namespaces of `namespace`, or the top-level ones.
    List {
        /// The parent (`None`: top level).
        #[serde(rename = "namespace", skip_serializing_if = "Option::is_none")]
        parent: Option<Namespace>,
        /// The `next-page-token` of the previous page.
        #[serde(skip_serializing_if = "Option::is_none")]
        page_token: Option<String>,
        /// At most this many namespaces (1..=1000, default 100).
        #[serde(skip_serializing_if = "Option::is_none")]
        page_size: Option<usize>,
    },
    /// Drop an empty namespace.
    Drop {
        /// The namespace.
        namespace: Namespace,
    },
    /// A namespace's properties.
    Properties {
        /// The namespace.
        namespace: Namespace,
    },
}

/// What `drop` answers: `{"identifier": {...}, "dropped": true}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct DropResponse {
    /// The dropped index.
    pub identifier: IndexIdentifier,
    /// Always `true` (a failed drop is an error).
    pub dropped: bool,
}

/// What the `namespace` function answers, by action.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged, rename_all_fields = "kebab-case")]
pub enum NamespaceResponse {
    /// `create` and `properties`: `{"namespace": [...], "properties": {...}}`.
    Properties {
        /// The namespace.
        namespace: Namespace,
        /// Its properties.
        properties: BTreeMap<String, String>,
    },
    /// `exists`: `{"namespace": [...], "exists": true}`.
    Exists {
        /// The namespace.
        namespace: Namespace,
        /// Whether it exists.
        exists: bool,
    },
    /// `drop`: `{"namespace": [...], "dropped": true}`.
    Dropped {
        /// The namespace.
        namespace: Namespace,
        /// Always `true` (a failed drop is an error).
        dropped: bool,
    },
    /// `list`: `{"namespaces": [[...]], "next-page-token": "..." | null}`.
    Page(crate::catalog::NamespacePage),
}

fn invalid(message: impl Into<String>) -> Error {
    Error::new(ErrorKind::InvalidRequest, message)
}

/// Parse `event` into the wire struct `T`: objects only, with the JSON path of the first
/// violation in the message.
fn parse<T: DeserializeOwned>(operation: &str, event: Value) -> Result<T> {
    check_size(&event)?;
    let shape = match &event {
        Value::Object(_) => None,
        Value::Null => Some("null"),
        Value::Bool(_) => Some("a boolean"),
        Value::Number(_) => Some("a number"),
        Value::String(_) => Some("a string"),
        Value::Array(_) => Some("an array"),
    };
    if let Some(shape) = shape {
        return Err(invalid(format!(
            "a `{operation}` event must be a JSON object, got {shape}"
        )));
    }
    json::from_value(event).map_err(|err| match err.path() {
        None => invalid(format!("invalid `{operation}` event: {}", err.inner())),
        Some(path) => invalid(format!(
            "invalid `{operation}` event at `{path}`: {}",
            err.inner()
        )),
    })
}

/// `INVALID_REQUEST` if the compact JSON form of `event` exceeds [`MAX_EVENT_BYTES`]
/// (counted without buffering, stopping at the limit).
fn check_size(event: &Value) -> Result<()> {
    struct Counter(usize);
    impl std::io::Write for Counter {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            if self.0 > MAX_EVENT_BYTES {
                return Err(std::io::Error::other("over the limit"));
            }
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut counter = Counter(0);
    match serde_json::to_writer(&mut counter, event) {
        Ok(()) => Ok(()),
        Err(_) => Err(invalid(format!(
            "the event is larger than {MAX_EVENT_BYTES} bytes"
        ))),
    }
}

/// `{"namespace": [...], "name": "..."}` before validation.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct IdentifierWire {
    namespace: Vec<String>,
    name: String,
}

impl Object<IdentifierWire> {
    /// The validated identifier; `INVALID_IDENTIFIER` naming `field` otherwise.
    fn validate(self, field: &str) -> Result<IndexIdentifier> {
        let Object(IdentifierWire { namespace, name }) = self;
        Namespace::new(namespace)
            .and_then(|namespace| IndexIdentifier::new(namespace, name))
            .map_err(|err| in_field(field, err))
    }
}

fn namespace(field: &str, segments: Vec<String>) -> Result<Namespace> {
    Namespace::new(segments).map_err(|err| in_field(field, err))
}

fn in_field(field: &str, err: Error) -> Error {
    Error::new(err.kind(), format!("`{field}`: {}", err.message()))
}

/// An identifier-only event (`load`, `drop`).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct IdentifierEvent {
    identifier: Object<IdentifierWire>,
}

impl IdentifierEvent {
    /// The validated identifier of an identifier-only event of `operation`.
    fn parse(operation: super::Operation, event: Value) -> Result<IndexIdentifier> {
        let wire: IdentifierEvent = parse(operation.name(), event)?;
        wire.identifier.validate("identifier")
    }
}

impl Request for LoadRequest {
    const OPERATION: super::Operation = super::Operation::Load;

    fn from_event(event: Value) -> Result<Self> {
        let identifier = IdentifierEvent::parse(Self::OPERATION, event)?;
        Ok(LoadRequest { identifier })
    }
}

impl Request for DropRequest {
    const OPERATION: super::Operation = super::Operation::Drop;

    fn from_event(event: Value) -> Result<Self> {
        let identifier = IdentifierEvent::parse(Self::OPERATION, event)?;
        Ok(DropRequest { identifier })
    }
}

/// `impl Request` for an event of an identifier, an optional source binding and the
/// operation's metadata locations (`register`, `commit`): one wire struct of those fields,
/// then the identifier validated.
macro_rules! sourced_request {
    ($request:ident, $operation:ident, $($location:ident),+) => {
        impl Request for $request {
            const OPERATION: super::Operation = super::Operation::$operation;

            fn from_event(event: Value) -> Result<Self> {
                #[derive(Deserialize)]
                #[serde(rename_all = "kebab-case", deny_unknown_fields)]
                struct Wire {
                    identifier: Object<IdentifierWire>,
                    source: Option<TableDefinition>,
                    $($location: String,)+
                }
                let wire: Wire = parse(Self::OPERATION.name(), event)?;
                Ok($request {
                    identifier: wire.identifier.validate("identifier")?,
                    source: wire.source,
                    $($location: wire.$location,)+
                })
            }
        }
    };
}

sourced_request!(RegisterRequest, Register, metadata_location);
sourced_request!(
    CommitRequest,
    Commit,
    base_metadata_location,
    new_metadata_location
);

impl Request for RenameRequest {
    const OPERATION: super::Operation = super::Operation::Rename;

    fn from_event(event: Value) -> Result<Self> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Wire {
            from: Object<IdentifierWire>,
            to: Object<IdentifierWire>,
        }
        let wire: Wire = parse(Self::OPERATION.name(), event)?;
        Ok(RenameRequest {
            from: wire.from.validate("from")?,
            to: wire.to.validate("to")?,
        })
    }
}

impl Request for ListRequest {
    const OPERATION: super::Operation = super::Operation::List;

    fn from_event(event: Value) -> Result<Self> {
        #[derive(Deserialize)]
        #[serde(rename_all = "kebab-case", deny_unknown_fields)]
        struct Wire {
            namespace: Vec<String>,
            page_token: Option<String>,
            page_size: Option<usize>,
        }
        let wire: Wire = parse(Self::OPERATION.name(), event)?;
        Ok(ListRequest {
            namespace: namespace("namespace", wire.namespace)?,
            page_token: wire.page_token,
            page_size: wire.page_size,
        })
    }
}

/// The `namespace` function's actions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
enum Action {
    Create,
    Exists,
    List,
    Drop,
    Properties,
}

impl Request for NamespaceRequest {
    const OPERATION: super::Operation = super::Operation::Namespace;

    fn from_event(event: Value) -> Result<Self> {
        // One flat wire struct, then a per-action check of which fields are allowed: the
        // messages name the action and the field, and no field is silently ignored.
        #[derive(Deserialize)]
        #[serde(rename_all = "kebab-case", deny_unknown_fields)]
        struct Wire {
            action: Action,
            namespace: Option<Vec<String>>,
            properties: Option<BTreeMap<String, String>>,
            page_token: Option<String>,
            page_size: Option<usize>,
        }
        let wire: Wire = parse(Self::OPERATION.name(), event)?;
        let not_allowed = |field: &str, present: bool| {
            if present {
                Err(invalid(format!(
                    "invalid `namespace` event: `{field}` is not allowed with action `{}`",
                    action_name(wire.action)
                )))
            } else {
                Ok(())
            }
        };
        if wire.action != Action::Create {
            not_allowed("properties", wire.properties.is_some())?;
        }
        if wire.action != Action::List {
            not_allowed("page-token", wire.page_token.is_some())?;
            not_allowed("page-size", wire.page_size.is_some())?;
        }
        let required = |segments: Option<Vec<String>>| match segments {
            Some(segments) => namespace("namespace", segments),
            None => Err(invalid(format!(
                "invalid `namespace` event: action `{}` requires `namespace`",
                action_name(wire.action)
            ))),
        };
        Ok(match wire.action {
            Action::Create => NamespaceRequest::Create {
                namespace: required(wire.namespace)?,
                properties: wire.properties.unwrap_or_default(),
            },
            Action::Exists => NamespaceRequest::Exists {
                namespace: required(wire.namespace)?,
            },
            Action::List => NamespaceRequest::List {
                parent: wire
                    .namespace
                    .map(|segments| namespace("namespace", segments))
                    .transpose()?,
                page_token: wire.page_token,
                page_size: wire.page_size,
            },
            Action::Drop => NamespaceRequest::Drop {
                namespace: required(wire.namespace)?,
            },
            Action::Properties => NamespaceRequest::Properties {
                namespace: required(wire.namespace)?,
            },
        })
    }
}

impl PublishRequest {
    /// Parse the `publish` function's event, `{identifier, idempotency-key, snapshot}`
    /// (see [`crate::publish::request`]), under the contract of every [`Request`]: the same
    /// size limit, strictness and messages (``invalid `publish` event at `<path>`: ...``).
    /// The function is not a catalog operation (no [`Operation`](super::Operation)), so
    /// the type is no `Request` itself.
    pub fn from_event(event: Value) -> Result<Self> {
        parse("publish", event)
    }
}

fn action_name(action: Action) -> &'static str {
    match action {
        Action::Create => "create",
        Action::Exists => "exists",
        Action::List => "list",
        Action::Drop => "drop",
        Action::Properties => "properties",
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use serde_json::json;

    use super::*;

    fn code<T: std::fmt::Debug>(result: Result<T>) -> &'static str {
        result.expect_err("rejected").code()
    }

    fn id() -> Value {
        json!({"namespace": ["a", "b"], "name": "x"})
    }

    fn source() -> Value {
        json!({"provider": "parquet", "properties": {"location": "s3://b/t/"}})
    }

    #[test]
    fn requests_round_trip_through_their_json() {
        let register = json!({
            "identifier": id(),
            "source": source(),
            "metadata-location": "file:///wh/metadata/m.json",
        });
        let request = RegisterRequest::from_event(register.clone()).expect("valid");
        assert_eq!(request.identifier.name(), "x");
        assert_eq!(
            serde_json::to_value(&request).expect("serializes"),
            register
        );

        let commit = json!({
            "identifier": id(),
            "source": source(),
            "base-metadata-location": "file:///wh/a.json",
            "new-metadata-location": "file:///wh/b.json",
        });
        let request = CommitRequest::from_event(commit.clone()).expect("valid");
        assert_eq!(serde_json::to_value(&request).expect("serializes"), commit);

        // `source` is optional (omitted or null): the catalog defaults it.
        let mut defaulted = commit.clone();
        defaulted.as_object_mut().expect("object").remove("source");
        let request = CommitRequest::from_event(defaulted.clone()).expect("valid");
        assert_eq!(request.source, None);
        assert_eq!(
            serde_json::to_value(&request).expect("serializes"),
            defaulted
        );
        let mut null = register.clone();
        null["source"] = Value::Null;
        let request = RegisterRequest::from_event(null).expect("valid");
        assert_eq!(request.source, None);

        let rename = json!({"from": id(), "to": {"namespace": ["c"], "name": "y"}});
        let request = RenameRequest::from_event(rename.clone()).expect("valid");
        assert_eq!(serde_json::to_value(&request).expect("serializes"), rename);

        let list = json!({"namespace": ["a"], "page-token": null, "page-size": 5});
        let request = ListRequest::from_event(list).expect("valid");
        assert_eq!(request.page_size, Some(5));
        assert_eq!(request.page_token, None);

        for event in [
            json!({"action": "create", "namespace": ["a"], "properties": {"owner": "me"}}),
            json!({"action": "exists", "namespace": ["a"]}),
            json!({"action": "list", "namespace": ["a"], "page-token": "t", "page-size": 2}),
            json!({"action": "drop", "namespace": ["a"]}),
            json!({"action": "properties", "namespace": ["a"]}),
        ] {
            let request = NamespaceRequest::from_event(event.clone()).expect("valid");
            assert_eq!(serde_json::to_value(&request).expect("serializes"), event);
        }
        let top = NamespaceRequest::from_event(json!({"action": "list"})).expect("valid");
        assert_eq!(
            top,
            NamespaceRequest::List {
                parent: None,
                page_token: None,
                page_size: None
            }
        );
    }

    #[test]
    fn malformed_events_are_invalid_requests() {
        let cases = [
            json!({"identifier": id(), "extra": 1}),
            json!({"identifier": {"namespace": ["a"], "name": "x", "extra": 1}}),
            json!({"identifier": {"namespace": "a", "name": "x"}}),
            json!({"identifier": {"namespace": [1], "name": "x"}}),
            json!({"identifier": {"namespace": ["a"]}}),
            json!({"identifier": [["a"], "x"]}),
            json!({"identifier": null}),
            json!({}),
            json!([id()]),
            json!("load"),
            json!(null),
            json!(42),
        ];
        for event in cases {
            let err = LoadRequest::from_event(event.clone()).expect_err("rejected");
            assert_eq!(err.code(), "INVALID_REQUEST", "{event}: {err}");
        }
    }

    #[test]
    fn messages_name_the_json_path() {
        let err =
            LoadRequest::from_event(json!({"identifier": {"namespace": ["a", 7], "name": "x"}}))
                .expect_err("rejected");
        assert!(err.message().contains("identifier.namespace[1]"), "{err}");
        let err = LoadRequest::from_event(json!({"identifer": id()})).expect_err("rejected");
        assert!(err.message().contains("unknown field `identifer`"), "{err}");
    }

    #[test]
    fn unstorable_names_are_invalid_identifiers() {
        assert_eq!(
            code(LoadRequest::from_event(
                json!({"identifier": {"namespace": [], "name": "x"}})
            )),
            "INVALID_IDENTIFIER"
        );
        let err = RenameRequest::from_event(
            json!({"from": id(), "to": {"namespace": ["a"], "name": ""}}),
        )
        .expect_err("rejected");
        assert_eq!(err.code(), "INVALID_IDENTIFIER");
        assert!(err.message().starts_with("`to`"), "{err}");
        assert_eq!(
            code(ListRequest::from_event(json!({"namespace": [""]}))),
            "INVALID_IDENTIFIER"
        );
    }

    #[test]
    fn sources_are_strict() {
        for bad in [
            json!({"provider": "parquet"}),
            json!({"provider": "parquet", "properties": {}, "extra": 1}),
            json!({"provider": "", "properties": {}}),
            json!({"provider": "parquet", "properties": {"a": 1}}),
            json!(["parquet", {}]),
        ] {
            let event =
                json!({"identifier": id(), "source": bad, "metadata-location": "file:///m"});
            assert_eq!(code(RegisterRequest::from_event(event)), "INVALID_REQUEST");
        }
    }

    #[test]
    fn namespace_actions_allow_only_their_fields() {
        for event in [
            json!({"namespace": ["a"]}),
            json!({"action": "rename", "namespace": ["a"]}),
            json!({"action": "exists"}),
            json!({"action": "exists", "namespace": ["a"], "properties": {}}),
            json!({"action": "create", "namespace": ["a"], "page-size": 1}),
            json!({"action": "drop", "namespace": ["a"], "page-token": "t"}),
            json!({"action": "list", "extra": true}),
            json!({"action": "list", "page-size": -1}),
            json!({"action": "create", "namespace": ["a"], "properties": {"k": 1}}),
        ] {
            assert_eq!(code(NamespaceRequest::from_event(event)), "INVALID_REQUEST");
        }
    }

    #[test]
    fn oversized_events_are_rejected_before_parsing() {
        let huge = "x".repeat(MAX_EVENT_BYTES);
        let err =
            LoadRequest::from_event(json!({"identifier": {"namespace": ["a"], "name": huge}}))
                .expect_err("rejected");
        assert_eq!(err.code(), "INVALID_REQUEST");
        assert!(err.message().contains("larger than"), "{err}");
    }

    /// What `lambda_runtime` does with the body (it does not check for trailing data).
    pub(crate) fn as_the_runtime_would(body: &[u8]) -> RawEvent {
        let mut deserializer = serde_json::Deserializer::from_slice(body);
        serde_path_to_error::deserialize(&mut deserializer).expect("never fails")
    }

    #[test]
    fn raw_events_keep_syntax_errors_as_data() {
        let nested = format!("{}{}", "[".repeat(1000), "]".repeat(1000));
        for body in [&br#"{"identifier": tru"#[..], b"", b"{", nested.as_bytes()] {
            let raw = as_the_runtime_would(body);
            assert_eq!(code(raw.into_value()), "INVALID_REQUEST");
        }
        let raw = as_the_runtime_would(br#"{"a": 1}"#);
        assert_eq!(raw.into_value().expect("json"), json!({"a": 1}));
    }

    #[test]
    fn bodies_are_one_document_with_unique_keys() {
        let body = br#"{"identifier": {"namespace": ["a"], "name": "x"}}"#;
        assert_eq!(
            RawEvent::from_body(body).into_value().expect("valid"),
            json!({"identifier": {"namespace": ["a"], "name": "x"}})
        );
        for (body, mentions) in [
            (
                &br#"{"identifier": {"namespace": ["a"], "name": "x"}} {}"#[..],
                "trailing",
            ),
            (
                br#"{"identifier": {"namespace": ["a"], "name": "x", "name": "y"}}"#,
                "`identifier`",
            ),
            (
                br#"{"identifier": {}, "identifier": {}}"#,
                "duplicate key \"identifier\"",
            ),
            (br#"{"a": [{"k": 1, "k": 1}]}"#, "`a[0]`"),
            (b"{\"a\": \"\xff\"}", "not valid JSON"),
            (b"", "EOF"),
        ] {
            let err = RawEvent::from_body(body).into_value().expect_err("refused");
            assert_eq!(err.code(), "INVALID_REQUEST");
            assert!(err.message().contains(mentions), "{mentions}: {err}");
        }
        // What the runtime reads itself: duplicate keys are refused there too.
        let raw = as_the_runtime_would(br#"{"identifier": {}, "identifier": {}}"#);
        let err = raw.into_value().expect_err("refused");
        assert!(err.message().contains("duplicate key"), "{err}");
    }

    fn snapshot() -> Value {
        json!({
            "source-table": source(),
            "vector-field": "embedding", "source-key-fields": ["id"], "indexed-rows": 1,
            "index-family": "ivf", "index-schema-version": 1, "metric": "cosine",
            "parameters": {}, "index-provider": {"provider": "parquet", "properties": {}},
            "index-tables": {
                "ivf_centroids": {"definition-version": 1, "properties": {"location": "c/"}},
                "ivf_postings": {"definition-version": 1, "properties": {"location": "p/"}}
            }
        })
    }

    #[test]
    fn publish_events_follow_the_same_contract() {
        let event = json!({"identifier": id(), "idempotency-key": "k", "snapshot": snapshot()});
        let request = PublishRequest::from_event(event.clone()).expect("valid");
        assert_eq!(request.identifier.name(), "x");
        assert_eq!(request.idempotency_key, "k");

        let err = PublishRequest::from_event(json!([event.clone()])).expect_err("array");
        assert_eq!(err.code(), "INVALID_REQUEST");
        assert!(
            err.message()
                .contains("a `publish` event must be a JSON object, got an array"),
            "{err}"
        );
        let mut unknown = event.clone();
        unknown["snapshot"]["surprise"] = json!(true);
        let err = PublishRequest::from_event(unknown).expect_err("unknown field");
        assert!(
            err.message()
                .starts_with("invalid `publish` event at `snapshot.surprise`: unknown field"),
            "{err}"
        );
        let mut positional = event.clone();
        positional["identifier"] = json!([["a", "b"], "x"]);
        assert_eq!(
            code(PublishRequest::from_event(positional)),
            "INVALID_REQUEST"
        );
        let mut huge = event;
        huge["idempotency-key"] = json!("k".repeat(MAX_EVENT_BYTES));
        let err = PublishRequest::from_event(huge).expect_err("too large");
        assert!(err.message().contains("larger than"), "{err}");
    }

    #[test]
    fn errors_become_diagnostics_with_the_spec_code() {
        let io = std::io::Error::other("socket closed");
        let err = Error::with_source(ErrorKind::StoreUnavailable, "read failed", io);
        let diagnostic = Diagnostic::from(err);
        assert_eq!(diagnostic.error_type, "STORE_UNAVAILABLE");
        assert_eq!(diagnostic.error_message, "read failed: socket closed");
        let diagnostic = Diagnostic::from(Error::new(ErrorKind::CommitConflict, "stale base"));
        assert_eq!(diagnostic.error_type, "COMMIT_CONFLICT");
    }

    #[test]
    fn responses_serialize_as_documented() {
        let identifier: IndexIdentifier = serde_json::from_value(id()).expect("valid");
        let dropped = DropResponse {
            identifier,
            dropped: true,
        };
        assert_eq!(
            serde_json::to_value(&dropped).expect("serializes"),
            json!({"identifier": id(), "dropped": true})
        );
        let namespace = Namespace::new(["a"]).expect("valid");
        let exists = NamespaceResponse::Exists {
            namespace: namespace.clone(),
            exists: false,
        };
        assert_eq!(
            serde_json::to_value(&exists).expect("serializes"),
            json!({"namespace": ["a"], "exists": false})
        );
        let page = NamespaceResponse::Page(crate::catalog::NamespacePage {
            namespaces: vec![namespace],
            next_page_token: None,
        });
        assert_eq!(
            serde_json::to_value(&page).expect("serializes"),
            json!({"namespaces": [["a"]], "next-page-token": null})
        );
    }
}
