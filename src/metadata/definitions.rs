//! Provider definitions: the source `table-definition`, the `index-provider-definition`
//! and each `index-table-definition`.
//!
//! Each type can only hold valid values: the fields are private, the constructors check
//! them, and deserialization is strict (objects only, unknown fields, duplicate keys,
//! `null`, empty names and non-positive versions are rejected).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::parse::parse_strict;
use super::strict;
use crate::error::{Error, ErrorKind, Result};
use crate::json::strict_object;

fn invalid(message: String) -> Error {
    Error::new(ErrorKind::InvalidIndexMetadata, message)
}

fn require_non_empty(field: &str, value: &str) -> Result<()> {
    if value.is_empty() {
        return Err(invalid(format!("{field}: must not be an empty string")));
    }
    Ok(())
}

/// The external table catalog identifier inside a `table-definition`:
/// `{"catalog": "datafusion", "namespace": ["public"], "name": "documents"}`.
///
/// `catalog` is optional (omitted when absent, never `null`); `namespace` is required and
/// may be empty; every string is non-empty.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(remote = "Self", deny_unknown_fields, rename_all = "kebab-case")]
pub struct TableIdentifierRef {
    #[serde(
        default,
        deserialize_with = "strict::present_non_empty",
        skip_serializing_if = "Option::is_none"
    )]
    catalog: Option<String>,
    #[serde(deserialize_with = "strict::non_empty_items")]
    namespace: Vec<String>,
    #[serde(deserialize_with = "strict::non_empty")]
    name: String,
}

strict_object!(TableIdentifierRef);

impl TableIdentifierRef {
    /// A table identifier; `INVALID_INDEX_METADATA` if any string is empty.
    pub fn new(
        catalog: Option<String>,
        namespace: Vec<String>,
        name: impl Into<String>,
    ) -> Result<Self> {
        if let Some(catalog) = &catalog {
            require_non_empty("catalog", catalog)?;
        }
        for (position, segment) in namespace.iter().enumerate() {
            require_non_empty(&format!("namespace[{position}]"), segment)?;
        }
        let name = name.into();
        require_non_empty("name", &name)?;
        Ok(TableIdentifierRef {
            catalog,
            namespace,
            name,
        })
    }

    /// The external table catalog, if named.
    pub fn catalog(&self) -> Option<&str> {
        self.catalog.as_deref()
    }

    /// The namespace segments.
    pub fn namespace(&self) -> &[String] {
        &self.namespace
    }

    /// The table name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

/// A `table-definition`: the exact source table state, as a registered table-provider
/// factory (`provider`) and its versioned, non-secret `properties`, optionally with the
/// table's `identifier` in an external catalog.
///
/// Source tables are external: their properties are not interpreted by this crate. The
/// catalog stores a `TableDefinition` as the source binding and compares it for exact
/// equality.
///
/// ```
/// use parqdb_catalog::TableDefinition;
///
/// let json = br#"{"provider": "parquet", "properties": {"location": "s3://b/docs/"}}"#;
/// let table = TableDefinition::from_json_slice(json)?;
/// assert_eq!(table.provider(), "parquet");
/// assert!(table.identifier().is_none());
///
/// let duplicate = br#"{"provider": "parquet", "properties": {"a": "1", "a": "2"}}"#;
/// let err = TableDefinition::from_json_slice(duplicate).unwrap_err();
/// assert_eq!(err.code(), "INVALID_INDEX_METADATA");
/// assert!(err.message().contains("properties"));
/// # Ok::<(), parqdb_catalog::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(remote = "Self", deny_unknown_fields, rename_all = "kebab-case")]
pub struct TableDefinition {
    #[serde(
        default,
        deserialize_with = "strict::present",
        skip_serializing_if = "Option::is_none"
    )]
    identifier: Option<TableIdentifierRef>,
    #[serde(deserialize_with = "strict::non_empty")]
    provider: String,
    #[serde(deserialize_with = "crate::json::unique_map")]
    properties: BTreeMap<String, String>,
}

strict_object!(TableDefinition);

impl TableDefinition {
    /// A table definition without identifier; `INVALID_INDEX_METADATA` if `provider` is
    /// empty.
    pub fn new(provider: impl Into<String>, properties: BTreeMap<String, String>) -> Result<Self> {
        let provider = provider.into();
        require_non_empty("provider", &provider)?;
        Ok(TableDefinition {
            identifier: None,
            provider,
            properties,
        })
    }

    /// This definition with `identifier` set.
    pub fn with_identifier(mut self, identifier: TableIdentifierRef) -> Self {
        self.identifier = Some(identifier);
        self
    }

    /// Parse one strict `table-definition` JSON object (`INVALID_INDEX_METADATA` naming
    /// the JSON path on any violation).
    pub fn from_json_slice(bytes: &[u8]) -> Result<Self> {
        parse_strict(bytes, "table definition")
    }

    /// The table identifier in its external catalog, if recorded.
    pub fn identifier(&self) -> Option<&TableIdentifierRef> {
        self.identifier.as_ref()
    }

    /// The table-provider factory name.
    pub fn provider(&self) -> &str {
        &self.provider
    }

    /// The provider's properties.
    pub fn properties(&self) -> &BTreeMap<String, String> {
        &self.properties
    }
}

/// An `index-provider-definition`: the provider of a snapshot's physical index tables
/// and its provider-level properties.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(remote = "Self", deny_unknown_fields, rename_all = "kebab-case")]
pub struct ProviderDefinition {
    #[serde(deserialize_with = "strict::non_empty")]
    provider: String,
    #[serde(deserialize_with = "crate::json::unique_map")]
    properties: BTreeMap<String, String>,
}

strict_object!(ProviderDefinition);

impl ProviderDefinition {
    /// A provider definition; `INVALID_INDEX_METADATA` if `provider` is empty.
    pub fn new(provider: impl Into<String>, properties: BTreeMap<String, String>) -> Result<Self> {
        let provider = provider.into();
        require_non_empty("provider", &provider)?;
        Ok(ProviderDefinition {
            provider,
            properties,
        })
    }

    /// The provider name.
    pub fn provider(&self) -> &str {
        &self.provider
    }

    /// The provider-level properties.
    pub fn properties(&self) -> &BTreeMap<String, String> {
        &self.properties
    }
}

/// An `index-table-definition`: a positive `definition-version` and provider-specific
/// `properties` (for `parquet`, a warehouse-relative `location`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(remote = "Self", deny_unknown_fields, rename_all = "kebab-case")]
pub struct IndexTableDefinition {
    #[serde(deserialize_with = "strict::positive_i32")]
    definition_version: i32,
    #[serde(deserialize_with = "crate::json::unique_map")]
    properties: BTreeMap<String, String>,
}

strict_object!(IndexTableDefinition);

impl IndexTableDefinition {
    /// An index-table definition; `INVALID_INDEX_METADATA` if `definition_version` is not
    /// positive. Provider rules are checked when metadata is built.
    pub fn new(definition_version: i32, properties: BTreeMap<String, String>) -> Result<Self> {
        if definition_version <= 0 {
            return Err(invalid(format!(
                "definition-version: must be positive, got {definition_version}"
            )));
        }
        Ok(IndexTableDefinition {
            definition_version,
            properties,
        })
    }

    /// The positive definition version.
    pub fn definition_version(&self) -> i32 {
        self.definition_version
    }

    /// The provider-specific properties.
    pub fn properties(&self) -> &BTreeMap<String, String> {
        &self.properties
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(json: &str) -> Result<TableDefinition> {
        TableDefinition::from_json_slice(json.as_bytes())
    }

    fn rejects(json: &str, fragment: &str) {
        let err = parse(json).expect_err(json);
        assert_eq!(err.kind(), ErrorKind::InvalidIndexMetadata, "{json}");
        assert!(
            err.message().contains(fragment),
            "{json}: {}",
            err.message()
        );
    }

    #[test]
    fn table_definition_round_trips() {
        let json = r#"{"identifier": {"catalog": "datafusion", "namespace": ["public"], "name": "documents"}, "provider": "parquet", "properties": {"location": "s3://example/documents/"}}"#;
        let table = parse(json).expect("valid");
        let identifier = table.identifier().expect("identifier");
        assert_eq!(identifier.catalog(), Some("datafusion"));
        assert_eq!(identifier.namespace(), ["public"]);
        assert_eq!(identifier.name(), "documents");
        let again =
            TableDefinition::from_json_slice(&serde_json::to_vec(&table).expect("serialize"))
                .expect("reparse");
        assert_eq!(again, table);

        let built = TableDefinition::new(
            "parquet",
            BTreeMap::from([("location".to_owned(), "s3://example/documents/".to_owned())]),
        )
        .expect("valid")
        .with_identifier(
            TableIdentifierRef::new(
                Some("datafusion".to_owned()),
                vec!["public".to_owned()],
                "documents",
            )
            .expect("valid"),
        );
        assert_eq!(built, table);
    }

    #[test]
    fn optional_fields_may_be_absent_but_not_null() {
        let bare = parse(
            r#"{"provider": "p", "properties": {}, "identifier": {"namespace": [], "name": "t"}}"#,
        )
        .expect("valid");
        assert_eq!(
            bare.identifier().and_then(TableIdentifierRef::catalog),
            None
        );
        assert_eq!(
            serde_json::to_value(&bare).expect("json")["identifier"],
            serde_json::json!({"namespace": [], "name": "t"})
        );
        rejects(
            r#"{"identifier": null, "provider": "p", "properties": {}}"#,
            "identifier",
        );
        rejects(
            r#"{"identifier": {"catalog": null, "namespace": [], "name": "t"}, "provider": "p", "properties": {}}"#,
            "identifier.catalog",
        );
    }

    #[test]
    fn strictness() {
        rejects(r#"{"provider": "p"}"#, "missing field `properties`");
        rejects(r#"{"provider": "", "properties": {}}"#, "provider");
        rejects(r#"{"provider": "p", "properties": {}, "x": 1}"#, "x");
        rejects(
            r#"{"provider": "p", "provider": "q", "properties": {}}"#,
            "duplicate field",
        );
        rejects(
            r#"{"provider": "p", "properties": {"a": "1", "a": "1"}}"#,
            "properties",
        );
        rejects(
            r#"{"provider": "p", "properties": {"a": 1}}"#,
            "properties.a",
        );
        rejects(r#"["p", {}]"#, "JSON object");
        rejects(r#"{"provider": "p", "properties": {}} x"#, "trailing");
        rejects(
            r#"{"identifier": {"namespace": [""], "name": "t"}, "provider": "p", "properties": {}}"#,
            "identifier.namespace[0]",
        );
    }

    #[test]
    fn constructors_validate() {
        assert!(TableDefinition::new("", BTreeMap::new()).is_err());
        assert!(ProviderDefinition::new("", BTreeMap::new()).is_err());
        assert!(IndexTableDefinition::new(0, BTreeMap::new()).is_err());
        assert!(IndexTableDefinition::new(-1, BTreeMap::new()).is_err());
        assert_eq!(
            IndexTableDefinition::new(3, BTreeMap::new())
                .map(|t| t.definition_version())
                .ok(),
            Some(3)
        );
        assert!(TableIdentifierRef::new(Some(String::new()), vec![], "t").is_err());
        assert!(TableIdentifierRef::new(None, vec![String::new()], "t").is_err());
        assert!(TableIdentifierRef::new(None, vec![], "").is_err());
    }
}
