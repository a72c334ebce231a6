//! The built-in `parquet` index-table provider.

use std::collections::BTreeMap;

use super::{IndexProvider, validate_relative_location};

/// The property holding an index table's warehouse-relative directory prefix.
pub(crate) const LOCATION: &str = "location";

/// The `parquet` provider, as [`FamilyRegistry::builtin`](super::FamilyRegistry::builtin)
/// describes it.
#[derive(Debug, Default, Clone, Copy)]
#[doc(hidden)] // Built in (`FamilyRegistry::builtin`).
pub struct ParquetProvider;

impl IndexProvider for ParquetProvider {
    fn name(&self) -> &str {
        "parquet"
    }

    fn validate_table(&self, properties: &BTreeMap<String, String>) -> Result<(), String> {
        let location = properties
            .get(LOCATION)
            .ok_or_else(|| format!("missing required property `{LOCATION}`"))?;
        validate_relative_location(location).map_err(|err| format!("property `{LOCATION}`: {err}"))
    }

    fn table_location<'a>(&self, properties: &'a BTreeMap<String, String>) -> Option<&'a str> {
        properties.get(LOCATION).map(String::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn location_is_required_and_relative() {
        let provider = ParquetProvider;
        let ok = BTreeMap::from([(LOCATION.to_owned(), "indexes/a/1/ivf_postings/".to_owned())]);
        assert_eq!(provider.validate_table(&ok), Ok(()));
        assert_eq!(
            provider.table_location(&ok),
            Some("indexes/a/1/ivf_postings/")
        );

        let missing = BTreeMap::new();
        let err = provider.validate_table(&missing).expect_err("missing");
        assert!(
            err.contains("missing required property `location`"),
            "{err}"
        );
        assert_eq!(provider.table_location(&missing), None);

        let bad = BTreeMap::from([(LOCATION.to_owned(), "/abs/".to_owned())]);
        let err = provider.validate_table(&bad).expect_err("absolute");
        assert!(err.contains("property `location`"), "{err}");
    }
}
