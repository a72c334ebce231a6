//! The warehouse objects a metadata file references (for the garbage collector).

use std::collections::BTreeSet;

use super::{IndexMetadata, TableDefinition};
use crate::family::FamilyRegistry;
use crate::warehouse::NameReader;

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

impl TableDefinition {
    /// Every name of the warehouse a source-table property may denote, in any engine's
    /// spelling (`NameReader::names_of_location` of the warehouse): source bindings are written by other
    /// engines, and when unsure whether a source names warehouse objects, the garbage
    /// collector keeps them and register refuses them under the managed prefixes.
    pub(crate) fn warehouse_names(&self, reader: &mut NameReader<'_>) -> Vec<String> {
        self.properties()
            .values()
            .flat_map(|value| reader.names_of_source(value))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::warehouse::Warehouse;

    #[test]
    fn sources_in_other_engines_spellings_are_inside_the_warehouse() {
        let warehouse = Warehouse::in_memory("s3://b/wh").expect("warehouse");
        let source = |location: &str| {
            TableDefinition::new(
                "parquet",
                std::collections::BTreeMap::from([
                    ("definition-version".to_owned(), "1".to_owned()),
                    ("location".to_owned(), location.to_owned()),
                ]),
            )
            .expect("source")
        };
        for spelling in [
            "s3://b/wh/indexes/src/",
            "s3a://b/wh/indexes/src",
            "s3n://b/wh/indexes/src/",
            "S3://b/wh/./indexes/src",
        ] {
            assert!(
                source(spelling)
                    .warehouse_names(&mut warehouse.name_reader())
                    .contains(&"indexes/src".to_owned()),
                "{spelling}"
            );
        }
        assert!(
            source("s3a://other/wh/indexes/src")
                .warehouse_names(&mut warehouse.name_reader())
                .is_empty()
        );
    }
}
