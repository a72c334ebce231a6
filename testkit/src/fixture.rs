//! The sample index of the test suites: snapshot contents of the built-in `ivf` family
//! with `parquet` index tables, built from a parquet source table.
//!
//! A test that needs other values changes only those, with struct update syntax:
//!
//! ```
//! use parqdb_catalog::SnapshotContents;
//! use parqdb_catalog_testkit::fixture;
//!
//! let contents = SnapshotContents {
//!     source_table: fixture::source(2),
//!     metric: "cosine".into(),
//!     ..fixture::contents("v2")
//! };
//! assert_eq!(contents.index_tables.len(), 2);
//! ```

use std::collections::BTreeMap;
use std::fmt;

use parqdb_catalog::{IndexTableDefinition, ProviderDefinition, SnapshotContents, TableDefinition};

/// Where the sample source table lives.
pub const SOURCE_LOCATION: &str = "s3://example/documents/";

/// The sample source table at `table_version` (distinct versions make distinct states).
pub fn source(table_version: impl fmt::Display) -> TableDefinition {
    let properties = BTreeMap::from([
        ("definition-version".to_owned(), "1".to_owned()),
        ("location".to_owned(), SOURCE_LOCATION.to_owned()),
        ("table-version".to_owned(), table_version.to_string()),
    ]);
    TableDefinition::new("parquet", properties).expect("valid source")
}

/// The two `ivf` index tables, at these locations.
fn tables(centroids: &str, postings: &str) -> BTreeMap<String, IndexTableDefinition> {
    let table = |location: &str| {
        IndexTableDefinition::new(
            1,
            BTreeMap::from([("location".to_owned(), location.to_owned())]),
        )
        .expect("valid table")
    };
    BTreeMap::from([
        ("ivf_centroids".to_owned(), table(centroids)),
        ("ivf_postings".to_owned(), table(postings)),
    ])
}

/// The sample snapshot contents, its index tables under `indexes/{tag}/{role}/`.
pub fn contents(tag: &str) -> SnapshotContents {
    contents_at(
        &format!("indexes/{tag}/ivf_centroids/"),
        &format!("indexes/{tag}/ivf_postings/"),
    )
}

/// The sample snapshot contents with its index tables at these locations: 1000 rows of
/// [`source`] version 1 indexed on `embedding` (key `document_id`), `l2_squared`, `nlist`
/// 16, no summary.
pub fn contents_at(centroids: &str, postings: &str) -> SnapshotContents {
    SnapshotContents {
        source_table: source(1),
        vector_field: "embedding".into(),
        source_key_fields: vec!["document_id".into()],
        indexed_rows: 1000,
        index_family: "ivf".into(),
        index_schema_version: 1,
        metric: "l2_squared".into(),
        parameters: BTreeMap::from([("nlist".to_owned(), "16".to_owned())]),
        index_provider: ProviderDefinition::new("parquet", BTreeMap::new())
            .expect("valid provider"),
        index_tables: tables(centroids, postings),
        summary: BTreeMap::new(),
    }
}
