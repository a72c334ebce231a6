//! Index families and index-table providers.
//!
//! Common index metadata does not interpret family parameters or physical table
//! locations: an [`IndexFamily`] defines its supported schema versions, metrics, the exact
//! set of index-table roles and its parameters, and an [`IndexProvider`] validates the
//! properties of the physical index tables it opens (including location rules). Both are
//! looked up by name in a [`FamilyRegistry`]; [`FamilyRegistry::builtin`] knows the `ivf`
//! family and the `parquet` provider.
//!
//! ```
//! use parqdb_catalog::family::FamilyRegistry;
//!
//! let registry = FamilyRegistry::builtin();
//! let ivf = registry.family("ivf").expect("built in");
//! assert_eq!(ivf.roles(), ["ivf_centroids", "ivf_postings"]);
//! assert!(registry.provider("parquet").is_some());
//! assert!(registry.family("hnsw").is_none());
//! ```

use std::collections::BTreeMap;

mod ivf;
mod location;
mod parquet;
mod registry;

#[doc(hidden)] // Built in (`FamilyRegistry::builtin`); named by the conformance tests.
pub use ivf::IvfFamily;
pub use location::validate_relative_location;
#[doc(hidden)] // Built in (`FamilyRegistry::builtin`).
pub use parquet::ParquetProvider;
pub use registry::FamilyRegistry;

/// An index family: the semantic rules for one kind of index (e.g. `ivf`).
///
/// Error messages returned by the validation methods carry no JSON path; the caller
/// prefixes the path of the validated object.
pub trait IndexFamily: Send + Sync + std::fmt::Debug {
    /// The family identifier stored in `index-family`.
    fn name(&self) -> &str;

    /// The supported `index-schema-version` values.
    fn schema_versions(&self) -> &[i32];

    /// The exact set of index-table roles (the keys of `index-tables`).
    fn roles(&self) -> &[&str];

    /// The supported distance metrics.
    fn metrics(&self) -> &[&str];

    /// Validate the family `parameters` of one snapshot. The error message should start
    /// with the offending parameter name.
    fn validate_parameters(&self, parameters: &BTreeMap<String, String>) -> Result<(), String> {
        let _ = parameters;
        Ok(())
    }

    /// Warehouse-relative object locations named by `parameters` (for `ivf`:
    /// `ivf_centroids_metadata_location`), for the garbage collector.
    fn warehouse_references<'a>(&self, parameters: &'a BTreeMap<String, String>) -> Vec<&'a str>;
}

/// A provider of physical index tables (e.g. `parquet`).
pub trait IndexProvider: Send + Sync + std::fmt::Debug {
    /// The provider name stored in `index-provider.provider`.
    fn name(&self) -> &str;

    /// Validate the provider-level `index-provider.properties`. The default accepts any.
    fn validate_provider_properties(
        &self,
        properties: &BTreeMap<String, String>,
    ) -> Result<(), String> {
        let _ = properties;
        Ok(())
    }

    /// Validate one index table's `properties`; the error message carries no JSON path
    /// (the caller prefixes it) and should name the offending property.
    fn validate_table(&self, properties: &BTreeMap<String, String>) -> Result<(), String>;

    /// The warehouse-relative location of a table (a directory prefix), if the provider
    /// has one.
    fn table_location<'a>(&self, properties: &'a BTreeMap<String, String>) -> Option<&'a str>;
}
