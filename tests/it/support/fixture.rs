//! A catalog under test plus a warehouse to write real metadata files into.

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use parqdb_catalog::Warehouse;
use parqdb_catalog::family::FamilyRegistry;
use parqdb_catalog::store::{
    Changed, GetOptions, ListOptions, ListPage, PointerStore, PutOptions, StoreError, StoreKey,
    Version,
};
use parqdb_catalog::{Catalog, CommitResult, IndexCatalog};
use parqdb_catalog::{IndexIdentifier, Namespace, RandomIds, SystemClock};
use parqdb_catalog::{IndexMetadata, SnapshotContents};
use parqdb_catalog_testkit::fixture;
pub use parqdb_catalog_testkit::fixture::source;

/// What a conformance test needs: the catalog interface and direct warehouse access.
#[derive(Clone)]
pub struct TestEnv {
    /// The catalog under test (embedded or remote).
    pub catalog: Arc<dyn IndexCatalog>,
    /// The warehouse the catalog reads metadata from.
    pub warehouse: Warehouse,
    /// Embedded catalogs over the same pointer store and warehouse with other index
    /// families: another version of the catalog, whose rules differ (the conformance
    /// environments have one).
    pub with_registry: Option<WithRegistry>,
}

/// Builds an embedded catalog over an environment's pointer store and warehouse that
/// validates metadata against the given families.
pub type WithRegistry = Arc<dyn Fn(FamilyRegistry) -> Catalog + Send + Sync>;

/// [`WithRegistry`] over `catalog`'s pointer store and warehouse.
pub fn same_store(catalog: &Catalog) -> WithRegistry {
    let (store, warehouse) = (catalog.store().clone(), catalog.warehouse().clone());
    Arc::new(move |registry| {
        Catalog::builder(store.clone(), warehouse.clone())
            .registry(registry)
            .build()
    })
}

/// The sample snapshot contents of source version `source_version`, with `rows` rows and
/// index tables under `tag`.
fn contents(source_version: u32, rows: i64, tag: &str) -> SnapshotContents {
    SnapshotContents {
        source_table: source(source_version),
        indexed_rows: rows,
        ..fixture::contents(tag)
    }
}

impl TestEnv {
    /// Write `metadata` to a fresh location and return the location.
    pub async fn write(&self, metadata: &IndexMetadata) -> String {
        let relative = format!(
            "metadata/{}/{:05}-{}.metadata.json",
            metadata.index_uuid(),
            metadata.last_sequence_number(),
            uuid::Uuid::new_v4()
        );
        self.warehouse
            .write_new(&relative, Bytes::from(metadata.to_json_vec()))
            .await
            .expect("metadata written")
    }

    /// Write raw bytes to a fresh metadata location.
    pub async fn write_raw(&self, bytes: &[u8]) -> String {
        let relative = format!("metadata/raw/{}.metadata.json", uuid::Uuid::new_v4());
        self.warehouse
            .write_new(&relative, Bytes::copy_from_slice(bytes))
            .await
            .expect("raw file written")
    }

    /// Initial metadata for a new index, written; returns it and its location.
    pub async fn new_index(&self) -> (IndexMetadata, String) {
        let tag = uuid::Uuid::new_v4().simple().to_string();
        let metadata = IndexMetadata::create(
            contents(1, 1000, &tag),
            BTreeMap::new(),
            &SystemClock,
            &RandomIds,
            &FamilyRegistry::builtin(),
        )
        .expect("valid initial metadata");
        let location = self.write(&metadata).await;
        (metadata, location)
    }

    /// A successor of `base` built from `source_version`, written.
    pub async fn successor(
        &self,
        base: &IndexMetadata,
        source_version: u32,
    ) -> (IndexMetadata, String) {
        let tag = uuid::Uuid::new_v4().simple().to_string();
        let metadata = base
            .successor(
                contents(source_version, 1000 + i64::from(source_version), &tag),
                &SystemClock,
                &RandomIds,
                &FamilyRegistry::builtin(),
            )
            .expect("valid successor");
        let location = self.write(&metadata).await;
        (metadata, location)
    }

    /// Commit `index` from `base` to `next`, a successor built from `source_version`
    /// ([`TestEnv::successor`]): the catalog's answer.
    pub async fn commit(
        &self,
        index: &IndexIdentifier,
        source_version: u32,
        base: &str,
        next: &str,
    ) -> parqdb_catalog::Result<CommitResult> {
        self.catalog
            .commit(index, Some(&source(source_version)), base, next)
            .await
    }

    /// The metadata location `index`'s pointer holds now.
    pub async fn current(&self, index: &IndexIdentifier) -> String {
        self.catalog
            .load(index)
            .await
            .expect("load")
            .metadata_location
    }

    /// Read a metadata file back.
    pub async fn read(&self, location: &str) -> IndexMetadata {
        let bytes = self
            .warehouse
            .read_metadata(location)
            .await
            .expect("readable");
        IndexMetadata::from_json_slice(&bytes, &FamilyRegistry::builtin()).expect("valid")
    }

    /// A fresh namespace (unique per test) that exists.
    pub async fn namespace(&self, name: &str) -> Namespace {
        let namespace =
            Namespace::new([format!("{name}-{}", uuid::Uuid::new_v4().simple())]).expect("valid");
        self.catalog
            .create_namespace(&namespace, BTreeMap::new())
            .await
            .expect("namespace created");
        namespace
    }

    /// A registered index in a fresh namespace.
    pub async fn registered(&self, name: &str) -> (IndexIdentifier, IndexMetadata, String) {
        let namespace = self.namespace("ns").await;
        let id = IndexIdentifier::new(namespace, name).expect("valid");
        let (metadata, location) = self.new_index().await;
        self.catalog
            .register(&id, Some(&source(1)), &location)
            .await
            .expect("registered");
        (id, metadata, location)
    }
}

/// A pointer store that refuses every call for good, as a backend does for access denied
/// (the in-memory backend has no such failure of its own).
#[derive(Debug)]
pub struct RefusingStore;

#[async_trait]
impl PointerStore for RefusingStore {
    fn describe(&self) -> String {
        "refusing://access-denied".to_owned()
    }

    async fn get_opts(&self, _: &StoreKey, _: GetOptions<'_>) -> Result<Changed, StoreError> {
        Err(StoreError::fatal("access denied"))
    }

    async fn put_opts(&self, _: &StoreKey, _: Bytes, _: PutOptions) -> Result<Version, StoreError> {
        Err(StoreError::fatal("access denied"))
    }

    async fn list_opts(&self, _: &StoreKey, _: ListOptions<'_>) -> Result<ListPage, StoreError> {
        Err(StoreError::fatal("access denied"))
    }
}
