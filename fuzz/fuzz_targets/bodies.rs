//! The properties the fuzz targets check, as plain functions over arbitrary bytes.
//!
//! Shared by the cargo-fuzz targets in this directory (nightly) and by the stable
//! smoke test `tests/it/fuzz_bodies.rs`, which runs each body over a seed corpus plus seeded
//! random mutations. Every function panics when a property breaks and returns normally
//! otherwise.
#![allow(dead_code)]

use std::fmt::Debug;
use std::sync::LazyLock;

use parqdb_catalog::catalog::record::{NamespaceRecord, PointerRecord};
use parqdb_catalog::family::FamilyRegistry;
use parqdb_catalog::lambda::event::{
    CommitRequest, DropRequest, ListRequest, LoadRequest, NamespaceRequest, RawEvent,
    RegisterRequest, RenameRequest, Request,
};
use parqdb_catalog::store::StoreKey;
use parqdb_catalog::{ErrorKind, IndexIdentifier, Namespace};
use parqdb_catalog::{IndexMetadata, SnapshotContents, TableDefinition};

static REGISTRY: LazyLock<FamilyRegistry> = LazyLock::new(FamilyRegistry::builtin);

/// `key_decode`: the storage-key codec. Decoding arbitrary text never panics and fails
/// only with `INVALID_IDENTIFIER`; whatever decodes is the canonical encoding of what it
/// decodes to (the codec is injective); and any identifier built from arbitrary segments
/// encodes to a valid store key that decodes back to it.
pub fn key_decode(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    for key in [text.to_string(), format!("i/{text}"), format!("n/{text}")] {
        match IndexIdentifier::from_store_key(&key) {
            Ok(id) => {
                assert_eq!(
                    id.store_key().as_str(),
                    key,
                    "non-canonical index key decoded"
                );
                assert!(
                    StoreKey::new(key.clone()).is_ok(),
                    "decoded an invalid store key {key:?}"
                );
            }
            Err(err) => assert_eq!(err.kind(), ErrorKind::InvalidIdentifier, "{key:?}: {err}"),
        }
        match Namespace::from_store_key(&key) {
            Ok(namespace) => {
                assert_eq!(
                    namespace.store_key().as_str(),
                    key,
                    "non-canonical namespace key decoded"
                );
                assert!(
                    StoreKey::new(key.clone()).is_ok(),
                    "decoded an invalid store key {key:?}"
                );
            }
            Err(err) => assert_eq!(err.kind(), ErrorKind::InvalidIdentifier, "{key:?}: {err}"),
        }
    }
    // The bytes as segments (split at 0xff): encode, then decode.
    let mut parts: Vec<String> = data
        .split(|&b| b == 0xff)
        .map(|part| String::from_utf8_lossy(part).into_owned())
        .collect();
    let name = parts.pop().unwrap_or_default();
    match Namespace::new(parts.clone()) {
        Ok(namespace) => {
            let key = namespace.store_key();
            assert!(StoreKey::new(key.as_str()).is_ok());
            assert_eq!(
                Namespace::from_store_key(key.as_str()).expect("round trip"),
                namespace
            );
            for prefix in [namespace.children_prefix(), namespace.indexes_prefix()] {
                assert!(StoreKey::new(prefix.as_str()).is_ok());
            }
            match IndexIdentifier::new(namespace, name) {
                Ok(id) => {
                    let key = id.store_key();
                    assert!(StoreKey::new(key.as_str()).is_ok());
                    assert!(
                        key.as_str()
                            .starts_with(id.namespace().indexes_prefix().as_str())
                    );
                    assert_eq!(
                        IndexIdentifier::from_store_key(key.as_str()).expect("round trip"),
                        id
                    );
                }
                Err(err) => assert_eq!(err.kind(), ErrorKind::InvalidIdentifier),
            }
        }
        Err(err) => assert_eq!(err.kind(), ErrorKind::InvalidIdentifier),
    }
}

/// `pointer_record`: the stored records. Parsing never panics and fails only with
/// `CORRUPT_RECORD`; an accepted record round-trips byte-stably through its serialisation.
pub fn pointer_record(data: &[u8]) {
    match PointerRecord::from_bytes(data) {
        Ok(record) => {
            let bytes = record.to_bytes();
            let again = PointerRecord::from_bytes(&bytes).expect("a serialised record parses");
            assert_eq!(again, record);
            assert_eq!(again.to_bytes(), bytes);
            let _ = record.remembers(record.commit_id);
        }
        Err(err) => assert_eq!(err.kind(), ErrorKind::CorruptRecord, "{err}"),
    }
    match NamespaceRecord::from_bytes(data) {
        Ok(record) => {
            let bytes = record.to_bytes();
            let again = NamespaceRecord::from_bytes(&bytes).expect("a serialised record parses");
            assert_eq!(again, record);
            assert_eq!(again.to_bytes(), bytes);
        }
        Err(err) => assert_eq!(err.kind(), ErrorKind::CorruptRecord, "{err}"),
    }
}

fn request<R: Request + PartialEq + Debug>(value: &serde_json::Value) {
    match R::from_event(value.clone()) {
        Ok(request) => {
            let json = serde_json::to_value(&request).expect("a request serialises");
            let again = R::from_event(json).expect("a serialised request parses");
            assert_eq!(again, request);
        }
        Err(err) => assert!(
            matches!(
                err.kind(),
                ErrorKind::InvalidRequest | ErrorKind::InvalidIdentifier
            ),
            "{}: {err}",
            err.code()
        ),
    }
}

/// `lambda_event`: the Lambda event contract. Any body is either not JSON (an
/// `INVALID_REQUEST` answer, never a panic) or parses, for every function, into a request
/// that round-trips through its JSON, or fails with `INVALID_REQUEST`/`INVALID_IDENTIFIER`.
pub fn lambda_event(data: &[u8]) {
    let Ok(raw) = serde_json::from_slice::<RawEvent>(data) else {
        return; // trailing bytes after one JSON value: rejected by the runtime's decoder
    };
    let value = match raw.into_value() {
        Ok(value) => value,
        Err(err) => {
            assert_eq!(err.kind(), ErrorKind::InvalidRequest);
            return;
        }
    };
    request::<LoadRequest>(&value);
    request::<RegisterRequest>(&value);
    request::<CommitRequest>(&value);
    request::<DropRequest>(&value);
    request::<RenameRequest>(&value);
    request::<ListRequest>(&value);
    request::<NamespaceRequest>(&value);
}

/// `metadata_parse`: the strict metadata parser. Parsing never panics; it fails only with
/// `INVALID_INDEX_METADATA` or `UNSUPPORTED_FORMAT_VERSION`; accepted metadata round-trips
/// byte-stably through its canonical form.
pub fn metadata_parse(data: &[u8]) {
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
}
