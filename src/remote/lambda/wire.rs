//! The functions' answers, parsed strictly into the catalog's result types.
//!
//! The response side of the contract in [`crate::lambda::event`]: the same JSON the CLI
//! prints. Like events, answers are parsed strictly (unknown fields are refused): an
//! answer outside the contract means the client and the deployment disagree, which is
//! reported rather than guessed at: `STORE_REFUSED`, which retrying cannot fix.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::catalog::{CommitResult, IdentifierPage, IndexPointer, NamespacePage};
use crate::error::{Error, ErrorKind, Result};
use crate::identifier::{IndexIdentifier, Namespace};
use crate::lambda::Operation;
use crate::lambda::event::DropResponse;
use crate::metadata::TableDefinition;

/// Parse the answer of `operation` as `T`, or say how it violates the contract.
pub(super) fn parse<T: Answer>(operation: Operation, answer: Value) -> Result<T> {
    serde_path_to_error::deserialize::<_, T::Wire>(answer)
        .map(T::from_wire)
        .map_err(|err| {
            Error::new(
                ErrorKind::StoreRefused,
                format!(
                    "the `{operation}` function answered outside the contract (at `{}`): {}; \
                     are the client and the deployment the same version?",
                    err.path(),
                    err.inner()
                ),
            )
        })
}

/// A result type with its wire form.
pub(super) trait Answer: Sized {
    type Wire: DeserializeOwned;
    fn from_wire(wire: Self::Wire) -> Self;
}

#[derive(Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub(super) struct PointerWire {
    identifier: IndexIdentifier,
    metadata_location: String,
    source: TableDefinition,
    version: String,
}

impl Answer for IndexPointer {
    type Wire = PointerWire;
    fn from_wire(wire: PointerWire) -> IndexPointer {
        IndexPointer {
            identifier: wire.identifier,
            metadata_location: wire.metadata_location,
            source: wire.source,
            version: wire.version,
        }
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub(super) struct CommitWire {
    identifier: IndexIdentifier,
    metadata_location: String,
    source: TableDefinition,
    version: String,
    already_applied: bool,
}

impl Answer for CommitResult {
    type Wire = CommitWire;
    fn from_wire(wire: CommitWire) -> CommitResult {
        CommitResult {
            pointer: IndexPointer {
                identifier: wire.identifier,
                metadata_location: wire.metadata_location,
                source: wire.source,
                version: wire.version,
            },
            already_applied: wire.already_applied,
        }
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub(super) struct IdentifierPageWire {
    identifiers: Vec<IndexIdentifier>,
    next_page_token: Option<String>,
}

impl Answer for IdentifierPage {
    type Wire = IdentifierPageWire;
    fn from_wire(wire: IdentifierPageWire) -> IdentifierPage {
        IdentifierPage {
            identifiers: wire.identifiers,
            next_page_token: wire.next_page_token,
        }
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub(super) struct NamespacePageWire {
    namespaces: Vec<Namespace>,
    next_page_token: Option<String>,
}

impl Answer for NamespacePage {
    type Wire = NamespacePageWire;
    fn from_wire(wire: NamespacePageWire) -> NamespacePage {
        NamespacePage {
            namespaces: wire.namespaces,
            next_page_token: wire.next_page_token,
        }
    }
}

impl Answer for DropResponse {
    type Wire = DropResponse;
    fn from_wire(wire: DropResponse) -> DropResponse {
        wire
    }
}

/// `namespace` `create` and `properties`: `{"namespace": [...], "properties": {...}}`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct NamespaceProperties {
    #[allow(dead_code)]
    pub namespace: Namespace,
    pub properties: BTreeMap<String, String>,
}

impl Answer for NamespaceProperties {
    type Wire = NamespaceProperties;
    fn from_wire(wire: NamespaceProperties) -> NamespaceProperties {
        wire
    }
}

/// `namespace` `exists`: `{"namespace": [...], "exists": true}`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct NamespaceExists {
    #[allow(dead_code)]
    pub namespace: Namespace,
    pub exists: bool,
}

impl Answer for NamespaceExists {
    type Wire = NamespaceExists;
    fn from_wire(wire: NamespaceExists) -> NamespaceExists {
        wire
    }
}

/// `namespace` `drop`: `{"namespace": [...], "dropped": true}`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct NamespaceDropped {
    #[allow(dead_code)]
    pub namespace: Namespace,
    #[allow(dead_code)]
    pub dropped: bool,
}

impl Answer for NamespaceDropped {
    type Wire = NamespaceDropped;
    fn from_wire(wire: NamespaceDropped) -> NamespaceDropped {
        wire
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn id() -> Value {
        json!({"namespace": ["a"], "name": "x"})
    }

    fn source() -> Value {
        json!({"provider": "parquet", "properties": {"location": "s3://b/t/"}})
    }

    #[test]
    fn answers_parse_into_the_result_types() {
        let pointer = json!({
            "identifier": id(), "metadata-location": "file:///wh/m.json",
            "source": source(), "version": "v1",
        });
        let parsed: IndexPointer = parse(Operation::Load, pointer.clone()).expect("valid");
        assert_eq!(serde_json::to_value(&parsed).expect("json"), pointer);

        let mut commit = pointer.clone();
        commit["already-applied"] = json!(true);
        let parsed: CommitResult = parse(Operation::Commit, commit.clone()).expect("valid");
        assert!(parsed.already_applied);
        assert_eq!(serde_json::to_value(&parsed).expect("json"), commit);

        let page = json!({"identifiers": [id()], "next-page-token": null});
        let parsed: IdentifierPage = parse(Operation::List, page.clone()).expect("valid");
        assert_eq!(serde_json::to_value(&parsed).expect("json"), page);

        let page = json!({"namespaces": [["a"], ["b"]], "next-page-token": "t"});
        let parsed: NamespacePage = parse(Operation::Namespace, page.clone()).expect("valid");
        assert_eq!(serde_json::to_value(&parsed).expect("json"), page);
    }

    #[test]
    fn answers_outside_the_contract_are_reported() {
        let cases = [
            json!({"identifier": id(), "metadata-location": "m", "source": source()}),
            json!({"identifier": id(), "metadata-location": "m", "source": source(), "version": "v", "x": 1}),
            json!({"identifier": {"namespace": [], "name": "x"}, "metadata-location": "m", "source": source(), "version": "v"}),
            json!(null),
            json!("ok"),
        ];
        for answer in cases {
            let err = parse::<IndexPointer>(Operation::Load, answer.clone()).expect_err("rejected");
            assert_eq!(err.kind(), ErrorKind::StoreRefused, "{answer}");
            assert!(!err.is_retryable());
            assert!(err.message().contains("`load` function"), "{err}");
        }
    }
}
