//! The event/response contract of the catalog's Lambda functions, and the error contract.
//!
//! # Requests
//! Every event is one JSON object with kebab-case fields; unknown fields, missing fields,
//! `null` where a value is required, wrong types and positional arrays in place of objects
//! are `INVALID_REQUEST`, and so is an event over [`MAX_EVENT_BYTES`], one that is not
//! JSON at all, one with a duplicate key at any depth, or one followed by trailing data
//! ([`RawEvent`]). The `publish` function's event follows the same contract
//! ([`PublishRequest::from_event`]). Identifiers are `{"namespace": ["a", "b"], "name": "x"}` and namespaces
//! are `["a", "b"]`; a segment or name the catalog cannot store is `INVALID_IDENTIFIER`.
//! The `source` binding is any JSON value, passed to the catalog as given
//! ([`SourceBinding`]): the catalog judges it in its order of checks, after the catalog's
//! state and the metadata, and a value that is not a strict `table-definition` object is
//! `INVALID_INDEX_METADATA` there (as in the CLI and the library). Omitted (or `null`), the
//! catalog binds the metadata's current snapshot's `source-table`, with the same order of
//! checks as an explicit source (see [`Catalog`](crate::Catalog#the-order-of-checks)). Optional fields may be omitted
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

use crate::catalog::SourceBinding;
use crate::error::{Error, ErrorKind, Result};
use crate::identifier::{IndexIdentifier, Namespace};
use crate::json::{self, Object, StrictValue};
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
    /// The source binding (must equal the current snapshot's `source-table`; none: that
    /// `source-table`).
    #[serde(skip_serializing_if = "SourceBinding::is_snapshot")]
    pub source: SourceBinding,
    /// The absolute URI of the metadata file.
    pub metadata_location: String,
}

/// `commit {identifier, source?, base-metadata-location, new-metadata-location}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct CommitRequest {
    /// The index.
    pub identifier: IndexIdentifier,
    /// The source binding of the new metadata (none: its current snapshot's
    /// `source-table`).
    #[serde(skip_serializing_if = "SourceBinding::is_snapshot")]
    pub source: SourceBinding,
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
                    source: Option<Value>,
                    $($location: String,)+
                }
                let wire: Wire = parse(Self::OPERATION.name(), event)?;
                Ok($request {
                    identifier: wire.identifier.validate("identifier")?,
                    // Judged by the catalog, in its order of checks.
                    source: wire.source.map_or(SourceBinding::Snapshot, SourceBinding::from_json_value),
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
pub(crate) mod tests;
