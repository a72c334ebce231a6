//! The warehouse objects a metadata file references (for the garbage collector).

use std::collections::BTreeSet;

use super::IndexMetadata;
use crate::family::FamilyRegistry;

impl IndexMetadata {
    /// The warehouse-relative locations this metadata references, sorted and without
    /// duplicates: every retained snapshot's index-table locations (as reported by its
    /// provider's [`table_location`](crate::family::IndexProvider::table_location), a
    /// directory prefix for `parquet`) plus the locations named by family parameters
    /// ([`IndexFamily::warehouse_references`](crate::family::IndexFamily::warehouse_references)).
    ///
    /// Pass the registry the metadata was validated with: a family or provider missing
    /// from `registry` contributes no references.
    pub fn warehouse_references(&self, registry: &FamilyRegistry) -> Vec<String> {
        let mut references = BTreeSet::new();
        for snapshot in &self.snapshots {
            if let Some(provider) = registry.provider(snapshot.index_provider().provider()) {
                for table in snapshot.index_tables().values() {
                    if let Some(location) = provider.table_location(table.properties()) {
                        references.insert(location.to_owned());
                    }
                }
            }
            if let Some(family) = registry.family(snapshot.index_family()) {
                for location in family.warehouse_references(snapshot.parameters()) {
                    references.insert(location.to_owned());
                }
            }
        }
        references.into_iter().collect()
    }
}
