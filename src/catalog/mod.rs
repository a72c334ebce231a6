//! The catalog protocol, written once over a [`PointerStore`](crate::store::PointerStore):
//! what [`Catalog`] documents (the operations, the order of checks, idempotent replay).
//!
//! The submodules: `record` (the pointer record, with the `previous-location` a replay is
//! recognised by), `write` (the compare-and-swap and the resolution of ambiguous
//! outcomes by reading back), `rename` (the rename protocol), `index` and `namespace`
//! (the operations), `publication` (what a register or commit checks of the metadata
//! file), `ownership` (the warehouse's owner marker) and `changelog` (the publications
//! the collector reads).

mod binding;
mod cache;
pub(crate) mod changelog;
mod index;
mod namespace;
pub(crate) mod ownership;
pub(crate) mod probe_memo;
mod publication;
#[cfg(feature = "test-util")]
#[doc(hidden)] // The pointer records' wire form, for the tests and fuzz targets.
pub mod record;
#[cfg(not(feature = "test-util"))]
pub(crate) mod record;
mod rename;
mod scan;
pub(crate) mod write;

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use serde::Serialize;
use tokio::sync::OnceCell;

pub use crate::retry::RetryPolicy;
pub use binding::SourceBinding;
pub(crate) use cache::MetadataCache;
#[doc(hidden)] // For the workspace's tests.
pub use publication::PUBLISH_WINDOW;

use crate::clock::{Clock, IdGenerator, RandomIds, SystemClock};
use crate::error::{Error, ErrorKind, Result};
use crate::family::FamilyRegistry;
use crate::identifier::{IndexIdentifier, Namespace};
use crate::metadata::{IndexMetadata, TableDefinition};
use crate::retry::Retry;
use crate::store::PointerStore;
use crate::store::{ProbeReport, probe};
use crate::warehouse::Warehouse;

/// Default and largest page size of listings.
pub(crate) const DEFAULT_PAGE_SIZE: usize = 100;
/// Largest page size of listings.
pub(crate) const MAX_PAGE_SIZE: usize = 1000;

/// What `load` returns: the current metadata location and source binding.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct IndexPointer {
    /// The identifier.
    pub identifier: IndexIdentifier,
    /// The absolute URI of the current metadata file.
    pub metadata_location: String,
    /// The source binding.
    pub source: TableDefinition,
    /// An opaque version token for reader caching (see [`IndexCatalog::load_if_changed`]).
    pub version: String,
}

/// The answer of [`IndexCatalog::load_if_changed`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LoadIfChanged {
    /// The pointer still has the given version.
    Unchanged,
    /// The pointer changed.
    Changed(Box<IndexPointer>),
}

/// What `commit` returns.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct CommitResult {
    /// The pointer after the commit.
    #[serde(flatten)]
    pub pointer: IndexPointer,
    /// `true` if an earlier attempt of this very commit had already landed.
    pub already_applied: bool,
}

/// One page of identifiers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct IdentifierPage {
    /// Identifiers directly in the namespace, in stable order.
    pub identifiers: Vec<IndexIdentifier>,
    /// The token of the next page, or `None` at the end.
    pub next_page_token: Option<String>,
}

/// One page of namespaces.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct NamespacePage {
    /// Direct child namespaces, in stable order.
    pub namespaces: Vec<Namespace>,
    /// The token of the next page, or `None` at the end.
    pub next_page_token: Option<String>,
}

/// The catalog interface, implemented by the embedded [`Catalog`] and by remote clients.
#[async_trait]
pub trait IndexCatalog: Send + Sync {
    /// The current metadata location and source binding, or `INDEX_NOT_FOUND`.
    async fn load(&self, identifier: &IndexIdentifier) -> Result<IndexPointer>;

    /// Like [`IndexCatalog::load`], but `Unchanged` if the pointer still has `version`.
    async fn load_if_changed(
        &self,
        identifier: &IndexIdentifier,
        version: &str,
    ) -> Result<LoadIfChanged>;

    /// Create a source-bound mapping only if the identifier is absent. `source` is the
    /// source binding; `None` binds the metadata's current snapshot's `source-table`
    /// (which an explicit source must equal). Errors in the [order of checks](crate::Catalog#the-order-of-checks).
    async fn register(
        &self,
        identifier: &IndexIdentifier,
        source: Option<&TableDefinition>,
        metadata_location: &str,
    ) -> Result<IndexPointer> {
        self.register_with_binding(identifier, &SourceBinding::from(source), metadata_location)
            .await
    }

    /// [`IndexCatalog::register`] with the source binding as the request gave it, which
    /// may be malformed: the catalog judges it in the order of checks (a malformed one is
    /// `INVALID_INDEX_METADATA` where the binding is checked, after the catalog's state).
    async fn register_with_binding(
        &self,
        identifier: &IndexIdentifier,
        source: &SourceBinding,
        metadata_location: &str,
    ) -> Result<IndexPointer>;

    /// Replace the current location with `new` only if it equals `base`. `source` is the
    /// new source binding; `None` binds the new metadata's current snapshot's
    /// `source-table`. A retry of the commit that produced the current state succeeds
    /// with `already_applied` ([replays](crate::Catalog#idempotent-replay)). Errors in the
    /// [order of checks](crate::Catalog#the-order-of-checks).
    async fn commit(
        &self,
        identifier: &IndexIdentifier,
        source: Option<&TableDefinition>,
        base: &str,
        new: &str,
    ) -> Result<CommitResult> {
        self.commit_with_binding(identifier, &SourceBinding::from(source), base, new)
            .await
    }

    /// [`IndexCatalog::commit`] with the source binding as the request gave it (see
    /// [`IndexCatalog::register_with_binding`]).
    async fn commit_with_binding(
        &self,
        identifier: &IndexIdentifier,
        source: &SourceBinding,
        base: &str,
        new: &str,
    ) -> Result<CommitResult>;

    /// Remove the mapping (metadata and data stay), or `INDEX_NOT_FOUND`.
    async fn drop_index(&self, identifier: &IndexIdentifier) -> Result<()>;

    /// Move a mapping if `from` exists and `to` does not.
    async fn rename(&self, from: &IndexIdentifier, to: &IndexIdentifier) -> Result<IndexPointer>;

    /// Identifiers directly in `namespace`, paginated.
    async fn list(
        &self,
        namespace: &Namespace,
        page_token: Option<&str>,
        page_size: Option<usize>,
    ) -> Result<IdentifierPage>;

    /// Create a namespace (its parent must exist), or `ALREADY_EXISTS`.
    async fn create_namespace(
        &self,
        namespace: &Namespace,
        properties: BTreeMap<String, String>,
    ) -> Result<()>;

    /// Whether a namespace exists.
    async fn namespace_exists(&self, namespace: &Namespace) -> Result<bool>;

    /// A namespace's properties, or `NAMESPACE_NOT_FOUND`.
    async fn namespace_properties(&self, namespace: &Namespace)
    -> Result<BTreeMap<String, String>>;

    /// Direct children of `parent` (top-level namespaces for `None`), paginated.
    async fn list_namespaces(
        &self,
        parent: Option<&Namespace>,
        page_token: Option<&str>,
        page_size: Option<usize>,
    ) -> Result<NamespacePage>;

    /// Drop an empty namespace: `NAMESPACE_NOT_FOUND`, or `NAMESPACE_NOT_EMPTY` if it still
    /// holds indexes or namespaces.
    async fn drop_namespace(&self, namespace: &Namespace) -> Result<()>;
}

/// The embedded catalog over a pointer store and a warehouse.
///
/// [`Catalog`] implements every operation of the catalog spec — `load`, `register`,
/// `commit`, `drop`, `rename`, `list` — plus explicit namespaces, on any pointer store. All
/// semantics live here: identifier and metadata validation, the order of checks, the
/// compare-and-swap, ambiguous-outcome resolution, the rename protocol and the capability
/// probe. Backends only store bytes under conditions.
///
/// # The order of checks
/// Every entry point — this library's [`IndexCatalog`], the CLI, the Lambda functions and
/// the remote [`LambdaCatalog`](crate::remote::LambdaCatalog) — reaches these same
/// functions, so a request gets the same error whichever way it comes in. The catalog's
/// state is checked before the request's content: a writer that lost a race learns that
/// it lost the race, whatever else is wrong with its request.
///
/// | # | `register(identifier, source?, location)` | `commit(identifier, source?, base, new)` |
/// |---|---|---|
/// | 1 | request shape and identifier (`INVALID_REQUEST`, `INVALID_IDENTIFIER`; at the entry point) | same |
/// | 2 | the namespace exists (`NAMESPACE_NOT_FOUND`) | the identifier exists (`INDEX_NOT_FOUND`) |
/// | 3 | the identifier is absent (`ALREADY_EXISTS`) | `base` is current (`COMMIT_CONFLICT`), unless the request is a [replay](#idempotent-replay) |
/// | 4 | the metadata file: inside the warehouse, under `metadata/`, not condemned, readable; its `format-version` (`UNSUPPORTED_FORMAT_VERSION`), then its format and invariants (`INVALID_INDEX_METADATA`) | same, for `new` |
/// | 5 | — | the successor rules against `base` (`INDEX_UUID_MISMATCH`, then `INVALID_INDEX_METADATA`; see [`IndexMetadata::check_successor_of`]) |
/// | 6 | the source binding: an explicit `source` must be a table-definition equal to the current snapshot's `source-table`; none binds that `source-table` (`INVALID_INDEX_METADATA`, also for a malformed `source`: see [`SourceBinding`]) | same |
/// | 7 | family references the collector condemned (`INVALID_INDEX_METADATA`) | same, for references `base` did not have |
/// | 8 | the conditional write; lost to another register: `ALREADY_EXISTS`; the record kept changing: `CONCURRENT_MODIFICATION` | lost: re-evaluated from 2 (so a lost race is `COMMIT_CONFLICT`); the record kept changing with `base` current: `CONCURRENT_MODIFICATION` |
///
/// Before any of it, a catalog's first write probes the store and claims the warehouse
/// (`STORE_UNSUPPORTED`, `WAREHOUSE_NOT_OWNED`); store failures are `STORE_UNAVAILABLE`
/// (transient, retry after backing off) or `STORE_REFUSED` (permanent), and a write whose
/// outcome cannot be determined is `COMMIT_STATE_UNKNOWN`. drop, rename and the namespace
/// operations check existence first and give up under contention with
/// `CONCURRENT_MODIFICATION` too. `list` and the namespace listing check that the
/// namespace (the parent) exists (`NAMESPACE_NOT_FOUND`) before the page size and the page
/// token (`INVALID_REQUEST`).
///
/// The source binding defaults **in the catalog**, not at the entry point: a request
/// without a source costs the same checks in the same order as one with it.
///
/// # Idempotent replay
/// A commit whose `new` is already current succeeds with `already_applied: true` only if
/// it is a retry of the commit that made `new` current: the pointer record keeps the
/// location that commit replaced (`previous-location`), which must equal
/// `base`, and the requested source binding (by default `new`'s `source-table`) must equal
/// the stored one. Any other request whose `base` is not current is `COMMIT_CONFLICT`,
/// including a replay against a record written before `previous-location` existed (or one
/// created by register or rename, which replaced nothing).
///
/// ```
/// use std::sync::Arc;
/// use parqdb_catalog::{Catalog, IndexCatalog};
/// use parqdb_catalog::store::MemoryStore;
/// use parqdb_catalog::Warehouse;
/// use parqdb_catalog::{IndexIdentifier, Namespace};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> parqdb_catalog::Result<()> {
/// let warehouse = Warehouse::in_memory("memory://docs/wh")?;
/// let catalog = Catalog::builder(Arc::new(MemoryStore::new()), warehouse).build();
/// let docs = Namespace::new(["docs"])?;
/// catalog.create_namespace(&docs, Default::default()).await?;
/// let id = IndexIdentifier::new(docs, "embeddings")?;
/// assert_eq!(catalog.load(&id).await.unwrap_err().code(), "INDEX_NOT_FOUND");
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Catalog {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    store: Arc<dyn PointerStore>,
    warehouse: Warehouse,
    injected: Injected,
    cache: MetadataCache,
    retry: RetryPolicy,
    publish_window: std::time::Duration,
    probe_on_first_write: bool,
    probed: OnceCell<()>,
    /// When ownership of the warehouse was last confirmed (monotonic).
    owned: std::sync::Mutex<Option<std::time::Instant>>,
}

/// Configures a [`Catalog`].
#[derive(Debug)]
pub struct CatalogBuilder {
    store: Arc<dyn PointerStore>,
    warehouse: Warehouse,
    injected: Injected,
    cache_capacity: usize,
    retry: RetryPolicy,
    publish_window: std::time::Duration,
    probe_on_first_write: bool,
}

/// What a catalog (and a publisher) is given rather than builds: the index families and
/// providers metadata is validated against, the clock and the id generator.
#[derive(Debug, Clone)]
pub(crate) struct Injected {
    pub registry: FamilyRegistry,
    pub clock: Arc<dyn Clock>,
    pub ids: Arc<dyn IdGenerator>,
}

impl Default for Injected {
    /// The built-in families, the system clock and random ids.
    fn default() -> Self {
        Injected {
            registry: FamilyRegistry::builtin(),
            clock: Arc::new(SystemClock),
            ids: Arc::new(RandomIds),
        }
    }
}

/// The setters of a builder's [`Injected`] field `injected` ([`CatalogBuilder`] and
/// [`PublisherBuilder`](crate::publish::PublisherBuilder)); `$ids` says what the ids are
/// for.
macro_rules! injection_setters {
    ($ids:literal) => {
        /// Use these index families and providers (default: the built-ins).
        pub fn registry(mut self, registry: $crate::family::FamilyRegistry) -> Self {
            self.injected.registry = registry;
            self
        }

        /// Use this clock (default: the system clock).
        pub fn clock(mut self, clock: std::sync::Arc<dyn $crate::clock::Clock>) -> Self {
            self.injected.clock = clock;
            self
        }

        #[doc = concat!("Use this id generator for ", $ids, " and backoff jitter (default: random).")]
        pub fn ids(mut self, ids: std::sync::Arc<dyn $crate::clock::IdGenerator>) -> Self {
            self.injected.ids = ids;
            self
        }
    };
}
pub(crate) use injection_setters;

impl CatalogBuilder {
    injection_setters!("commit ids, record ids");

    /// Cache at most this many parsed metadata files (default 128).
    pub fn cache_capacity(mut self, capacity: usize) -> Self {
        self.cache_capacity = capacity;
        self
    }

    /// Use this retry policy for store calls.
    pub fn retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    /// Bound register and commit by a shorter window than the default 60 s (longer ones
    /// are capped: the garbage collector's safety argument relies on the bound).
    pub fn publish_window(mut self, window: std::time::Duration) -> Self {
        self.publish_window = window.min(PUBLISH_WINDOW);
        self
    }

    /// Whether to run the capability probe before the first write (default `true`; a
    /// recent pass recorded in the store counts, see `catalog::probe_memo`). Turn it off only for
    /// a store you have probed yourself.
    pub fn probe_on_first_write(mut self, probe: bool) -> Self {
        self.probe_on_first_write = probe;
        self
    }

    /// The catalog.
    pub fn build(self) -> Catalog {
        Catalog {
            inner: Arc::new(Inner {
                store: self.store,
                warehouse: self.warehouse,
                injected: self.injected,
                cache: MetadataCache::new(self.cache_capacity),
                retry: self.retry,
                publish_window: self.publish_window,
                probe_on_first_write: self.probe_on_first_write,
                probed: OnceCell::new(),
                owned: std::sync::Mutex::new(None),
            }),
        }
    }
}

impl Catalog {
    /// Configure a catalog whose pointers live in `store` and whose metadata lives in
    /// `warehouse`.
    pub fn builder(store: Arc<dyn PointerStore>, warehouse: Warehouse) -> CatalogBuilder {
        CatalogBuilder {
            store,
            warehouse,
            injected: Injected::default(),
            cache_capacity: cache::DEFAULT_CAPACITY,
            retry: RetryPolicy::default(),
            publish_window: PUBLISH_WINDOW,
            probe_on_first_write: true,
        }
    }

    /// The pointer store.
    pub fn store(&self) -> &Arc<dyn PointerStore> {
        &self.inner.store
    }

    /// The warehouse.
    pub fn warehouse(&self) -> &Warehouse {
        &self.inner.warehouse
    }

    /// The index families and providers.
    pub fn registry(&self) -> &FamilyRegistry {
        &self.inner.injected.registry
    }

    /// The clock.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.inner.injected.clock
    }

    /// The id generator.
    pub fn ids(&self) -> &Arc<dyn IdGenerator> {
        &self.inner.injected.ids
    }

    /// The families, clock and id generator, together.
    pub(crate) fn injected(&self) -> &Injected {
        &self.inner.injected
    }

    /// Run the capability probe now and return its report (also when it fails).
    pub async fn probe(&self) -> Result<ProbeReport> {
        probe(self.inner.store.as_ref(), self.inner.injected.ids.as_ref()).await
    }

    /// Make sure this catalog owns its warehouse: claim it if it is unclaimed and unused,
    /// refuse it (`WAREHOUSE_NOT_OWNED`) if another catalog (or a copy of this one's store)
    /// owns it, or (`INVALID_CONFIGURATION`) if it lies inside another warehouse's managed
    /// prefixes or holds data without a marker. Every write does this before its first
    /// store call (a confirmation is trusted for a minute, `OWNERSHIP_TTL`); call it to
    /// do it up front (at start-up).
    pub async fn claim_warehouse(&self) -> Result<()> {
        self.ensure_owned(None).await
    }

    async fn ensure_owned(&self, publishing: Option<&str>) -> Result<()> {
        let fresh = |at: &Option<std::time::Instant>| {
            at.is_some_and(|at| at.elapsed() < ownership::OWNERSHIP_TTL)
        };
        if fresh(&self.inner.owned.lock().unwrap_or_else(|e| e.into_inner())) {
            return Ok(());
        }
        let started = std::time::Instant::now();
        ownership::ensure_owned(self, publishing).await?;
        *self.inner.owned.lock().unwrap_or_else(|e| e.into_inner()) = Some(started);
        Ok(())
    }

    /// Before a write: refuse a store that fails the probe (once per catalog; skipped while
    /// the store holds a recent pass, see [`probe_memo`]), and make
    /// sure this catalog owns its warehouse ([`Catalog::claim_warehouse`]; `publishing` is
    /// the name of the metadata file a register or commit publishes, which a first write
    /// may find in an otherwise unused warehouse).
    async fn ensure_writable(&self, publishing: Option<&str>) -> Result<()> {
        if self.inner.probe_on_first_write {
            self.inner
                .probed
                .get_or_try_init(|| probe_memo::probe_unless_recent(self))
                .await?;
        }
        self.ensure_owned(publishing).await
    }

    /// Read, parse and validate a metadata file (cached by location).
    pub async fn read_metadata(&self, location: &str) -> Result<Arc<IndexMetadata>> {
        let inner = &self.inner;
        inner
            .cache
            .get_or_read(&inner.warehouse, &inner.injected.registry, location)
            .await
    }

    /// Read, parse and validate a metadata file from the warehouse, bypassing the cache
    /// (and refreshing it). register and commit read the file they are about to publish
    /// this way, so a file the garbage collector has deleted is never published.
    pub(crate) async fn read_metadata_from_warehouse(
        &self,
        location: &str,
    ) -> Result<Arc<IndexMetadata>> {
        let inner = &self.inner;
        inner
            .cache
            .read(&inner.warehouse, &inner.injected.registry, location)
            .await
    }

    /// Read a commit's base metadata: the cached parse if there is one (valid metadata is
    /// a valid base), else parsed as a base only
    /// ([`IndexMetadata::from_json_slice_as_base`], not cached): of the base, the
    /// successor rules use only identity fields, ids, sequence numbers and the log, and
    /// today's rules judge the new metadata, not the base.
    pub(crate) async fn read_base_metadata(&self, location: &str) -> Result<Arc<IndexMetadata>> {
        if let Some(cached) = self.inner.cache.get(location) {
            return Ok(cached);
        }
        crate::metadata::read_base_metadata(&self.inner.warehouse, location)
            .await
            .map(Arc::new)
    }

    fn now_ms(&self) -> i64 {
        self.inner.injected.clock.now_ms()
    }

    /// The retry policy of store calls, its jitter drawn from the id generator.
    pub(crate) fn retry(&self) -> Retry<'_> {
        Retry {
            policy: &self.inner.retry,
            random: self.inner.injected.ids.as_ref(),
            stop: None,
        }
    }
}

pub(crate) fn page_size(requested: Option<usize>) -> Result<usize> {
    match requested {
        None => Ok(DEFAULT_PAGE_SIZE),
        Some(size) if (1..=MAX_PAGE_SIZE).contains(&size) => Ok(size),
        Some(size) => Err(Error::new(
            ErrorKind::InvalidRequest,
            format!("page size must be between 1 and {MAX_PAGE_SIZE}, got {size}"),
        )),
    }
}

#[async_trait]
impl IndexCatalog for Catalog {
    async fn load(&self, identifier: &IndexIdentifier) -> Result<IndexPointer> {
        self.load_pointer(identifier).await
    }

    async fn load_if_changed(
        &self,
        identifier: &IndexIdentifier,
        version: &str,
    ) -> Result<LoadIfChanged> {
        self.load_pointer_if_changed(identifier, version).await
    }

    async fn register_with_binding(
        &self,
        identifier: &IndexIdentifier,
        source: &SourceBinding,
        metadata_location: &str,
    ) -> Result<IndexPointer> {
        self.register_pointer(identifier, source, metadata_location)
            .await
    }

    async fn commit_with_binding(
        &self,
        identifier: &IndexIdentifier,
        source: &SourceBinding,
        base: &str,
        new: &str,
    ) -> Result<CommitResult> {
        self.commit_pointer(identifier, source, base, new).await
    }

    async fn drop_index(&self, identifier: &IndexIdentifier) -> Result<()> {
        self.drop_pointer(identifier).await
    }

    async fn rename(&self, from: &IndexIdentifier, to: &IndexIdentifier) -> Result<IndexPointer> {
        self.rename_pointer(from, to).await
    }

    async fn list(
        &self,
        namespace: &Namespace,
        page_token: Option<&str>,
        page_size: Option<usize>,
    ) -> Result<IdentifierPage> {
        self.list_pointers(namespace, page_token, page_size).await
    }

    async fn create_namespace(
        &self,
        namespace: &Namespace,
        properties: BTreeMap<String, String>,
    ) -> Result<()> {
        self.create_namespace_record(namespace, properties).await
    }

    async fn namespace_exists(&self, namespace: &Namespace) -> Result<bool> {
        Ok(self
            .namespace_record(namespace)
            .await?
            .is_some_and(|(record, _)| record.exists))
    }

    async fn namespace_properties(
        &self,
        namespace: &Namespace,
    ) -> Result<BTreeMap<String, String>> {
        self.namespace_properties_of(namespace).await
    }

    async fn list_namespaces(
        &self,
        parent: Option<&Namespace>,
        page_token: Option<&str>,
        page_size: Option<usize>,
    ) -> Result<NamespacePage> {
        self.list_namespace_records(parent, page_token, page_size)
            .await
    }

    async fn drop_namespace(&self, namespace: &Namespace) -> Result<()> {
        self.drop_namespace_record(namespace).await
    }
}
