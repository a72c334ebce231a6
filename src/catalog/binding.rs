//! The source binding of a register or commit request, as the request gives it.

use serde::{Serialize, Serializer};
use serde_json::Value;

use crate::error::{Error, ErrorKind, Result};
use crate::metadata::TableDefinition;

/// The longest text of a malformed source binding kept to pass on (a remote client sends
/// it in the event); longer text is cut, which changes only the message.
const MAX_MALFORMED_TEXT: usize = 1024;

/// The source binding a register or commit request gives: none, a table-definition, or
/// something that is not a table-definition.
///
/// Every entry point (the CLI's `--source`, the `source` of a Lambda event, the remote
/// client) hands the binding to the catalog as given, and the catalog judges it at one
/// place in the [order of checks](crate::Catalog#the-order-of-checks): after the catalog's state
/// and the metadata, where it compares the binding with the current snapshot's
/// `source-table`. A malformed binding is `INVALID_INDEX_METADATA` there, like a
/// table-definition that differs from the `source-table`; on an existing identifier a
/// register answers `ALREADY_EXISTS` first, whatever the binding.
///
/// ```
/// use parqdb_catalog::SourceBinding;
///
/// let malformed = SourceBinding::from_json_slice(br#"{"provider": ""}"#);
/// assert!(matches!(malformed, SourceBinding::Malformed(_)));
/// let table = SourceBinding::from_json_slice(br#"{"provider": "parquet", "properties": {}}"#);
/// assert!(table.table().is_some());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum SourceBinding {
    /// None given: the catalog binds the metadata's current snapshot's `source-table`.
    #[default]
    Snapshot,
    /// A table-definition, which must equal the current snapshot's `source-table`.
    Table(TableDefinition),
    /// What the request gave that is not a table-definition: the JSON value, or the text
    /// of an argument that is not JSON. Kept as given so a remote client passes it on.
    Malformed(Value),
}

impl SourceBinding {
    /// The binding a JSON value gives: `null` is none, a valid table-definition is one,
    /// anything else is [`SourceBinding::Malformed`].
    #[doc(hidden)] // The `source` of a Lambda event: the handler layer's parsing.
    pub fn from_json_value(value: Value) -> SourceBinding {
        if value.is_null() {
            return SourceBinding::Snapshot;
        }
        match serde_json::to_vec(&value)
            .ok()
            .and_then(|bytes| TableDefinition::from_json_slice(&bytes).ok())
        {
            Some(table) => SourceBinding::Table(table),
            None => SourceBinding::Malformed(value),
        }
    }

    /// The binding a document gives (the CLI's `--source`): a valid table-definition, or
    /// [`SourceBinding::Malformed`] with the JSON value, or the text as given where the
    /// bytes are no JSON or their value hides what is wrong with them (a duplicate key:
    /// the value keeps one).
    pub fn from_json_slice(bytes: &[u8]) -> SourceBinding {
        if let Ok(table) = TableDefinition::from_json_slice(bytes) {
            return SourceBinding::Table(table);
        }
        let hides_nothing = |value: &Value| {
            matches!(
                SourceBinding::from_json_value(value.clone()),
                SourceBinding::Malformed(_)
            )
        };
        match serde_json::from_slice::<Value>(bytes) {
            Ok(value)
                if !value.is_null()
                    && bytes.len() <= MAX_MALFORMED_TEXT
                    && hides_nothing(&value) =>
            {
                SourceBinding::Malformed(value)
            }
            _ => {
                let text = String::from_utf8_lossy(bytes);
                let cut: String = text.chars().take(MAX_MALFORMED_TEXT).collect();
                SourceBinding::Malformed(Value::String(cut))
            }
        }
    }

    /// The table-definition, if one was given.
    pub fn table(&self) -> Option<&TableDefinition> {
        match self {
            SourceBinding::Table(table) => Some(table),
            _ => None,
        }
    }

    /// Whether no binding was given.
    #[doc(hidden)] // For the Lambda event's serialization (`skip_serializing_if`).
    pub fn is_snapshot(&self) -> bool {
        matches!(self, SourceBinding::Snapshot)
    }

    /// The binding as the catalog uses it: `None` (bind the `source-table`), the
    /// table-definition, or, for a malformed binding, `INVALID_INDEX_METADATA` saying why
    /// it is not a table-definition.
    pub(crate) fn checked(&self) -> Result<Option<&TableDefinition>> {
        match self {
            SourceBinding::Snapshot => Ok(None),
            SourceBinding::Table(table) => Ok(Some(table)),
            SourceBinding::Malformed(value) => {
                // Text as given (no JSON, or JSON whose value hides the fault) is judged as
                // the document it is; a JSON value as itself.
                let document = match value {
                    Value::String(text) if text.trim_start().starts_with(['{', '[']) => {
                        text.as_bytes().to_vec()
                    }
                    _ => serde_json::to_vec(value).unwrap_or_default(),
                };
                let why = match TableDefinition::from_json_slice(&document) {
                    Err(err) => err.message().to_owned(),
                    // A string that is a valid table-definition's text: a JSON string, not
                    // the object.
                    Ok(_) => {
                        "a JSON string holding a table-definition's text, not the object".to_owned()
                    }
                };
                Err(Error::new(
                    ErrorKind::InvalidIndexMetadata,
                    format!("the source binding is not a table-definition: {why}"),
                ))
            }
        }
    }
}

impl From<Option<&TableDefinition>> for SourceBinding {
    fn from(source: Option<&TableDefinition>) -> Self {
        source.map_or(SourceBinding::Snapshot, |table| {
            SourceBinding::Table(table.clone())
        })
    }
}

impl From<TableDefinition> for SourceBinding {
    fn from(table: TableDefinition) -> Self {
        SourceBinding::Table(table)
    }
}

/// As given: `null` for none, the table-definition, or the malformed value.
impl Serialize for SourceBinding {
    fn serialize<S: Serializer>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error> {
        match self {
            SourceBinding::Snapshot => serializer.serialize_none(),
            SourceBinding::Table(table) => table.serialize(serializer),
            SourceBinding::Malformed(value) => value.serialize(serializer),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bindings_are_kept_as_given_and_judged_once() {
        let table = br#"{"provider": "parquet", "properties": {"location": "s3://b/t/"}}"#;
        let given = SourceBinding::from_json_slice(table);
        let parsed = given.checked().expect("a table").expect("given");
        assert_eq!(parsed.provider(), "parquet");
        assert_eq!(
            SourceBinding::from_json_value(serde_json::to_value(&given).expect("JSON")),
            given,
            "a table-definition round-trips through JSON"
        );
        for bad in [
            &br#"{"provider": ""}"#[..],
            br#"{"provider": "parquet", "properties": {}, "extra": 1}"#,
            br#"["parquet", {}]"#,
            b"{not json",
            b"\xff\xfe",
        ] {
            let binding = SourceBinding::from_json_slice(bad);
            assert!(
                matches!(binding, SourceBinding::Malformed(_)),
                "{binding:?}"
            );
            let err = binding.checked().expect_err("malformed");
            assert_eq!(err.kind(), ErrorKind::InvalidIndexMetadata, "{err}");
            assert!(err.message().contains("not a table-definition"), "{err}");
            // Passed on as JSON (a remote client's event), it stays malformed.
            let again =
                SourceBinding::from_json_value(serde_json::to_value(&binding).expect("JSON"));
            assert_eq!(again, binding);
        }
        let long = vec![b'x'; 5 * MAX_MALFORMED_TEXT];
        match SourceBinding::from_json_slice(&long) {
            SourceBinding::Malformed(Value::String(text)) => {
                assert_eq!(text.len(), MAX_MALFORMED_TEXT);
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(SourceBinding::from(None), SourceBinding::Snapshot);
        assert!(SourceBinding::Snapshot.checked().expect("none").is_none());
    }

    fn why(given: &str) -> String {
        let err = SourceBinding::from_json_slice(given.as_bytes())
            .checked()
            .expect_err("malformed");
        assert_eq!(err.kind(), ErrorKind::InvalidIndexMetadata, "{given}");
        err.message().to_owned()
    }

    #[test]
    fn a_malformed_binding_says_what_is_wrong_with_it_as_given() {
        for (given, says) in [
            (
                r#"{"provider":"parquet","provider":"x","properties":{}}"#,
                "duplicate field `provider`",
            ),
            (
                r#"{"provider":"parquet","properties":{"a":"1","a":"2"}}"#,
                "duplicate key \"a\"",
            ),
            (
                r#"{"provider":"parquet","properties":{"location":"s3://a/b""#,
                "EOF while parsing",
            ),
            (
                r#"{"provider":"parquet","properties":{}} trailing"#,
                "trailing characters",
            ),
            (r#"{"provider":1}"#, "provider: invalid type: integer"),
            (
                r#""{\"provider\":\"parquet\",\"properties\":{}}""#,
                "a JSON string holding",
            ),
            ("[1, 2]", "invalid type: sequence"),
        ] {
            let message = why(given);
            assert!(message.contains(says), "{given}: {message}");
        }
    }

    #[test]
    fn text_as_given_passes_through_a_remote_hop_with_the_same_verdict() {
        let given = br#"{"provider":"parquet","provider":"x","properties":{}}"#;
        let here = SourceBinding::from_json_slice(given);
        let sent = serde_json::to_value(&here).expect("serializes");
        let there = SourceBinding::from_json_value(sent);
        assert_eq!(
            here.checked().expect_err("malformed").message(),
            there.checked().expect_err("malformed").message()
        );
    }
}
