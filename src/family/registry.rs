//! The registry of index families and providers that metadata validation consults.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::{IndexFamily, IndexProvider, IvfFamily, ParquetProvider};

/// Index families and index-table providers by name.
///
/// Metadata naming an unregistered family or provider is invalid. The registry is cheap
/// to clone (it holds `Arc`s). Registering a name twice replaces the earlier entry.
#[derive(Debug, Clone)]
pub struct FamilyRegistry {
    families: BTreeMap<String, Arc<dyn IndexFamily>>,
    providers: BTreeMap<String, Arc<dyn IndexProvider>>,
}

impl FamilyRegistry {
    /// The built-in registry: the `ivf` family and the `parquet` provider.
    ///
    /// - The `ivf` (inverted file) family: schema version 1, roles `ivf_centroids` and
    ///   `ivf_postings`, metrics `l2_squared`, `cosine` and `inner_product`. Its optional
    ///   `ivf_centroids_metadata_location` parameter must be a warehouse-relative location
    ///   under `metadata/` (where metadata files live) and is reported to the garbage
    ///   collector; other parameters are not interpreted.
    /// - The `parquet` provider: every index table has a `location` property that is a
    ///   warehouse-relative directory prefix (see
    ///   [`validate_relative_location`](super::validate_relative_location)), taken
    ///   literally: a reader lists that prefix and never reads `*`, `[` or `{` in it as a
    ///   pattern (names may hold any character), and the collector keeps exactly what lies
    ///   below it. Other table properties and the provider-level properties are not
    ///   interpreted.
    pub fn builtin() -> Self {
        FamilyRegistry::empty()
            .with_family(Arc::new(IvfFamily))
            .with_provider(Arc::new(ParquetProvider))
    }

    /// A registry that knows no family and no provider.
    pub fn empty() -> Self {
        FamilyRegistry {
            families: BTreeMap::new(),
            providers: BTreeMap::new(),
        }
    }

    /// This registry plus `family` (replacing any family of the same name).
    pub fn with_family(mut self, family: Arc<dyn IndexFamily>) -> Self {
        self.families.insert(family.name().to_owned(), family);
        self
    }

    /// This registry plus `provider` (replacing any provider of the same name).
    pub fn with_provider(mut self, provider: Arc<dyn IndexProvider>) -> Self {
        self.providers.insert(provider.name().to_owned(), provider);
        self
    }

    /// The family called `name`, if registered.
    pub fn family(&self, name: &str) -> Option<&dyn IndexFamily> {
        self.families.get(name).map(|family| &**family)
    }

    /// The provider called `name`, if registered.
    pub fn provider(&self, name: &str) -> Option<&dyn IndexProvider> {
        self.providers.get(name).map(|provider| &**provider)
    }
}

impl Default for FamilyRegistry {
    fn default() -> Self {
        FamilyRegistry::builtin()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Hnsw;

    impl IndexFamily for Hnsw {
        fn name(&self) -> &str {
            "hnsw"
        }
        fn schema_versions(&self) -> &[i32] {
            &[1, 2]
        }
        fn roles(&self) -> &[&str] {
            &["graph"]
        }
        fn metrics(&self) -> &[&str] {
            &["cosine"]
        }
        fn warehouse_references<'a>(&self, _: &'a BTreeMap<String, String>) -> Vec<&'a str> {
            Vec::new()
        }
    }

    #[test]
    fn builtin_empty_and_extended() {
        let builtin = FamilyRegistry::default();
        assert_eq!(builtin.family("ivf").map(|f| f.name()), Some("ivf"));
        assert_eq!(
            builtin.provider("parquet").map(|p| p.name()),
            Some("parquet")
        );
        assert!(builtin.family("hnsw").is_none());

        let empty = FamilyRegistry::empty();
        assert!(empty.family("ivf").is_none());
        assert!(empty.provider("parquet").is_none());

        let extended = builtin.with_family(Arc::new(Hnsw));
        assert_eq!(
            extended.family("hnsw").map(|f| f.schema_versions()),
            Some(&[1, 2][..])
        );
        assert!(extended.family("ivf").is_some());
    }
}
