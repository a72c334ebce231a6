//! Fuzz the strict metadata parser.
//!
//! Run from the repository root (nightly and cargo-fuzz required), seeding with the
//! fixtures:
//!
//! ```text
//! cargo +nightly fuzz run metadata_parse fuzz/corpus/metadata_parse \
//!     tests/fixtures/metadata/valid tests/fixtures/metadata/invalid
//! ```
//!
//! Properties: parsing never panics; it fails only with `INVALID_INDEX_METADATA` or
//! `UNSUPPORTED_FORMAT_VERSION`; accepted metadata round-trips byte-stably through its
//! canonical form.
#![no_main]

use std::sync::LazyLock;

use libfuzzer_sys::fuzz_target;
use parqdb_catalog::ErrorKind;
use parqdb_catalog::family::FamilyRegistry;
use parqdb_catalog::metadata::{IndexMetadata, SnapshotContents, TableDefinition};

static REGISTRY: LazyLock<FamilyRegistry> = LazyLock::new(FamilyRegistry::builtin);

fuzz_target!(|data: &[u8]| {
    match IndexMetadata::from_json_slice(data, &REGISTRY) {
        Ok(metadata) => {
            let canonical = metadata.to_json_vec();
            let again = IndexMetadata::from_json_slice(&canonical, &REGISTRY)
                .expect("the canonical form of valid metadata parses");
            assert_eq!(again, metadata);
            assert_eq!(again.to_json_vec(), canonical);
            let _ = metadata.warehouse_references(&REGISTRY);
            let _ = metadata.summary_json();
        }
        Err(err) => assert!(
            matches!(
                err.kind(),
                ErrorKind::InvalidIndexMetadata | ErrorKind::UnsupportedFormatVersion
            ),
            "unexpected error kind {}",
            err.code()
        ),
    }
    if let Ok(table) = TableDefinition::from_json_slice(data) {
        let json = serde_json::to_vec(&table).expect("serializes");
        assert_eq!(TableDefinition::from_json_slice(&json).ok(), Some(table));
    }
    let _ = SnapshotContents::from_json_slice(data);
});
