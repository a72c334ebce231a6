//! Successor publication for refresh jobs: what [`Publisher`] documents.

mod create;
mod engine;
mod expire;
mod idempotent;
mod outcome;
#[doc(hidden)] // The `publish` function's event contract: the handler layer of `functions/`.
pub mod request;

use std::fmt;
use std::sync::Arc;

use uuid::Uuid;

pub use crate::retry::{Jitter, PublishPolicy};
pub use outcome::{Declined, Expired, PublishOutcome, Published};

use crate::catalog::{Catalog, IndexCatalog, IndexPointer, Injected, MetadataCache};
use crate::clock::{Clock, IdGenerator};
use crate::error::Result;
use crate::identifier::IndexIdentifier;
use crate::metadata::{IndexMetadata, SnapshotContents};
use crate::warehouse::Warehouse;

use engine::{Run, Step};

/// The `summary` key holding the idempotency key of a snapshot published by
/// [`Publisher::publish_idempotent`].
#[doc(hidden)] // For the workspace's tests.
pub const IDEMPOTENCY_KEY: &str = "parqdb.idempotency-key";

/// The `summary` key holding the warehouse-relative metadata file that first published
/// the snapshot (recorded with `parqdb.idempotency-key`, so a replay returns the same
/// location).
pub(crate) const METADATA_LOCATION: &str = "parqdb.metadata-location";

/// The longest idempotency key, in bytes.
pub(crate) const MAX_IDEMPOTENCY_KEY_BYTES: usize = 1024;

/// How many parsed metadata files a publisher keeps (they are immutable).
const CACHE_CAPACITY: usize = 16;

/// Publishes successor metadata for refresh jobs; cheap to clone and share between tasks.
///
/// Works against any [`IndexCatalog`] (embedded or remote) whose metadata lives in the
/// given [`Warehouse`].
///
/// A [`Publisher`] runs the metadata spec's six successor steps for one index and
/// repeats them when it loses the compare-and-swap:
///
/// 1. load the current pointer and read, parse and validate its metadata file;
/// 2. ask the caller what to publish on top of it (a closure, called again after every
///    lost race, which may decline: [`PublishOutcome::Declined`]);
/// 3. build the successor with [`IndexMetadata::successor`] (new snapshot id, sequence
///    `last-sequence-number + 1`, log entry), using the injected [`Clock`] and
///    [`IdGenerator`];
/// 4. write it with create-if-absent to a fresh, never reused location
///    `metadata/<index-uuid>/<sequence:05>-<uuid>.metadata.json` in the warehouse, and
///    read it back (it must parse, validate and equal what was built);
/// 5. commit it with the loaded location as base and the new snapshot's `source-table`
///    as the source binding;
/// 6. on `COMMIT_CONFLICT`, `CONCURRENT_MODIFICATION` or `STORE_UNAVAILABLE` (the
///    retryable failures that did not apply; never `STORE_REFUSED`), back off and go to 1,
///    at most [`PublishPolicy::max_attempts`] times.
///
/// # Ambiguous outcomes
/// A commit that ends in `COMMIT_STATE_UNKNOWN` may or may not have landed. Because
/// every metadata location is unique, re-issuing the *same* commit is safe, and the
/// publisher resolves the outcome by reloading: the pointer names our file, or the
/// current metadata retains our snapshot (a later writer built on it) → published; the
/// pointer still names the base → the same commit is re-issued; the current metadata
/// allocated our sequence number to another snapshot, or never reached it → our commit
/// lost, retry as after a conflict. Anything else (e.g. our snapshot may have been
/// published and expired since) is returned as `COMMIT_STATE_UNKNOWN`. The metadata
/// file written for the attempt is **never deleted** by the publisher: after an unknown
/// outcome it may be, or become, the current metadata (iceberg #4673, #13443); files of
/// lost attempts are orphans for the garbage collector.
///
/// # Idempotency
/// [`Publisher::publish_idempotent`] stores a caller-chosen key in the new snapshot's
/// `summary` under `parqdb.idempotency-key` (plus the snapshot's own metadata file under
/// `parqdb.metadata-location`) and, before every attempt, looks for a retained snapshot with
/// that key: if one exists, it returns the same [`Published`] result (location, snapshot
/// id, sequence number) with `already_published: true` instead of publishing twice.
/// **Limit:** a replay is recognised only while the key's snapshot is retained; once it
/// is expired ([`Publisher::expire`]) the same key publishes again. Keep retention longer
/// than the redelivery window of the event source.
///
/// ```
/// use std::collections::BTreeMap;
/// use std::sync::Arc;
/// use parqdb_catalog::{Catalog, IndexCatalog};
/// use parqdb_catalog::SnapshotContents;
/// use parqdb_catalog::Publisher;
/// use parqdb_catalog::store::MemoryStore;
/// use parqdb_catalog::Warehouse;
/// use parqdb_catalog::{IndexIdentifier, Namespace};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> parqdb_catalog::Result<()> {
/// let warehouse = Warehouse::in_memory("memory://docs/publish")?;
/// let catalog = Catalog::builder(Arc::new(MemoryStore::new()), warehouse.clone()).build();
/// let namespace = Namespace::new(["docs"])?;
/// catalog.create_namespace(&namespace, BTreeMap::new()).await?;
/// let id = IndexIdentifier::new(namespace, "embeddings")?;
///
/// let publisher = Publisher::new(Arc::new(catalog), warehouse);
/// let contents = |rows: i64| -> parqdb_catalog::Result<SnapshotContents> {
///     SnapshotContents::from_json_slice(format!(r#"{{
///         "source-table": {{"provider": "parquet", "properties": {{"location": "s3://b/docs/", "rows": "{rows}"}}}},
///         "vector-field": "embedding", "source-key-fields": ["id"], "indexed-rows": {rows},
///         "index-family": "ivf", "index-schema-version": 1, "metric": "cosine", "parameters": {{}},
///         "index-provider": {{"provider": "parquet", "properties": {{}}}},
///         "index-tables": {{
///             "ivf_centroids": {{"definition-version": 1, "properties": {{"location": "indexes/x/{rows}/ivf_centroids/"}}}},
///             "ivf_postings": {{"definition-version": 1, "properties": {{"location": "indexes/x/{rows}/ivf_postings/"}}}}
///         }}
///     }}"#).as_bytes())
/// };
/// let created = publisher.create_index(&id, contents(10)?, BTreeMap::new()).await?;
/// assert_eq!(created.sequence_number, 1);
///
/// let refreshed = publisher.publish(&id, |_current| Ok(Some(contents(20)?))).await?;
/// assert_eq!(refreshed.published().expect("not declined").sequence_number, 2);
///
/// let first = publisher.publish_idempotent(&id, "event-42", contents(30)?).await?;
/// let replay = publisher.publish_idempotent(&id, "event-42", contents(30)?).await?;
/// assert!(replay.already_published);
/// assert_eq!((replay.metadata_location, replay.snapshot_id), (first.metadata_location, first.snapshot_id));
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Publisher {
    inner: Arc<Inner>,
}

struct Inner {
    catalog: Arc<dyn IndexCatalog>,
    warehouse: Warehouse,
    injected: Injected,
    policy: PublishPolicy,
    retention: Option<Retention>,
    cache: MetadataCache,
}

/// Which snapshots a publication keeps when it also expires the others in the same commit
/// ([`PublisherBuilder::retention`]).
///
/// The new current snapshot is always kept; so is a snapshot among the `keep_last` with
/// the highest sequence numbers (the new one counts), or one whose `timestamp-ms` is
/// within `max_age` of the publisher's clock. With both `None` only the new snapshot is
/// kept. The old current snapshot is non-current once the new one is published, so it may
/// go too: `keep_last: Some(1)` keeps exactly the newest snapshot, in one commit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Retention {
    /// Keep the N snapshots with the highest sequence numbers.
    pub keep_last: Option<usize>,
    /// Keep the snapshots at most this old.
    pub max_age: Option<std::time::Duration>,
}

impl fmt::Debug for Publisher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Publisher")
            .field("warehouse", &self.inner.warehouse.root())
            .field("policy", &self.inner.policy)
            .finish_non_exhaustive()
    }
}

/// Configures a [`Publisher`].
pub struct PublisherBuilder {
    catalog: Arc<dyn IndexCatalog>,
    warehouse: Warehouse,
    injected: Injected,
    policy: PublishPolicy,
    retention: Option<Retention>,
}

impl fmt::Debug for PublisherBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PublisherBuilder")
            .field("warehouse", &self.warehouse.root())
            .field("policy", &self.policy)
            .finish_non_exhaustive()
    }
}

impl PublisherBuilder {
    crate::catalog::injection_setters!("index UUIDs, snapshot ids, file names");

    /// Use this retry policy (default: [`PublishPolicy::default`]).
    pub fn policy(mut self, policy: PublishPolicy) -> Self {
        self.policy = policy;
        self
    }

    /// Expire, in the commit of every publication ([`Publisher::publish`],
    /// [`Publisher::publish_idempotent`]), the snapshots `retention` does not keep
    /// (default: none are expired). One commit instead of a publication and an
    /// [`expire`](Publisher::expire).
    pub fn retention(mut self, retention: Retention) -> Self {
        self.retention = Some(retention);
        self
    }

    /// The publisher.
    pub fn build(self) -> Publisher {
        Publisher {
            inner: Arc::new(Inner {
                catalog: self.catalog,
                warehouse: self.warehouse,
                injected: self.injected,
                policy: self.policy,
                retention: self.retention,
                cache: MetadataCache::new(CACHE_CAPACITY),
            }),
        }
    }
}

impl Publisher {
    /// Configure a publisher for `catalog`, writing metadata into `warehouse` (the
    /// warehouse the catalog reads from).
    pub fn builder(catalog: Arc<dyn IndexCatalog>, warehouse: Warehouse) -> PublisherBuilder {
        PublisherBuilder {
            catalog,
            warehouse,
            injected: Injected::default(),
            policy: PublishPolicy::default(),
            retention: None,
        }
    }

    /// A publisher with the default registry, clock, ids and policy.
    pub fn new(catalog: Arc<dyn IndexCatalog>, warehouse: Warehouse) -> Publisher {
        Publisher::builder(catalog, warehouse).build()
    }

    /// A publisher for an embedded catalog, sharing its warehouse, registry, clock and ids.
    pub fn for_catalog(catalog: &Catalog) -> Publisher {
        PublisherBuilder {
            injected: catalog.injected().clone(),
            ..Publisher::builder(Arc::new(catalog.clone()), catalog.warehouse().clone())
        }
        .build()
    }

    /// The catalog.
    pub fn catalog(&self) -> &Arc<dyn IndexCatalog> {
        &self.inner.catalog
    }

    /// The warehouse metadata is written to.
    pub fn warehouse(&self) -> &Warehouse {
        &self.inner.warehouse
    }

    /// The id generator (e.g. for unique index-table locations).
    pub fn ids(&self) -> &Arc<dyn IdGenerator> {
        &self.inner.injected.ids
    }

    /// The clock (snapshot times; a refresh's read start).
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.inner.injected.clock
    }

    /// Publish a successor built from what `f` returns for the current metadata.
    ///
    /// `f` is called with the current metadata on every attempt, i.e. again after each
    /// lost race, so it can re-validate its change against what others published:
    /// `Ok(Some(contents))` publishes `contents` as the new current snapshot, `Ok(None)`
    /// declines (the change is no longer valid) and ends the call with
    /// [`PublishOutcome::Declined`] — a normal outcome, not an error — and `Err` ends the
    /// call with that error. If `contents.summary` carries `parqdb.idempotency-key`, the
    /// snapshot also records its metadata file under `parqdb.metadata-location`.
    ///
    /// Errors: `INDEX_NOT_FOUND`; `INVALID_INDEX_METADATA` if the current metadata or the
    /// successor is invalid (e.g. `contents` change an identity field); the last
    /// `COMMIT_CONFLICT`, `CONCURRENT_MODIFICATION` or `STORE_UNAVAILABLE` after
    /// [`PublishPolicy::max_attempts`] attempts; `STORE_REFUSED` at once (not retried); `COMMIT_STATE_UNKNOWN` if a commit's outcome cannot be resolved (its
    /// metadata file is left in place; reload to find out).
    pub async fn publish<F>(&self, identifier: &IndexIdentifier, mut f: F) -> Result<PublishOutcome>
    where
        F: FnMut(&IndexMetadata) -> Result<Option<SnapshotContents>> + Send,
    {
        let run = self
            .run(identifier, |base| match f(base.metadata)? {
                None => Ok(Step::Finish(Declined {
                    metadata_location: base.location.to_owned(),
                    current_snapshot_id: base.metadata.current_snapshot_id(),
                    last_sequence_number: base.metadata.last_sequence_number(),
                    attempts: base.attempt,
                })),
                Some(contents) => self.successor(base, contents).map(Step::Commit),
            })
            .await?;
        Ok(match run {
            Run::Committed(committed) => PublishOutcome::Published(committed.published()),
            Run::Finished(declined) => PublishOutcome::Declined(declined),
            Run::Failed(err) => return Err(err),
        })
    }

    /// The successor of `base` with `contents` as the new current snapshot, without the
    /// snapshots the [`Retention`] (if any) does not keep.
    fn successor(
        &self,
        base: &engine::Base<'_>,
        mut contents: SnapshotContents,
    ) -> Result<IndexMetadata> {
        let sequence = base.metadata.last_sequence_number().saturating_add(1);
        record_location(
            &mut contents,
            &metadata_path(base.metadata.index_uuid(), sequence, base.file_id),
        );
        let clock = self.inner.injected.clock.as_ref();
        let successor = base.metadata.successor(
            contents,
            clock,
            self.inner.injected.ids.as_ref(),
            &self.inner.injected.registry,
        )?;
        match self.inner.retention {
            None => Ok(successor),
            Some(retention) => {
                let newer_than_ms = retention.max_age.map(|age| {
                    let age_ms = i64::try_from(age.as_millis()).unwrap_or(i64::MAX);
                    clock.now_ms().saturating_sub(age_ms)
                });
                successor.expire_snapshots(retention.keep_last, newer_than_ms, clock)
            }
        }
    }

    /// The current pointer of `identifier` and its parsed, validated metadata (e.g. to
    /// find the index UUID or an earlier publication before building index tables).
    pub async fn load_current(
        &self,
        identifier: &IndexIdentifier,
    ) -> Result<(IndexPointer, Arc<IndexMetadata>)> {
        let pointer = self.inner.catalog.load(identifier).await?;
        let metadata = self.read_metadata(&pointer.metadata_location).await?;
        Ok((pointer, metadata))
    }

    /// Read, parse and validate a metadata file (cached by location: files are immutable).
    async fn read_metadata(&self, location: &str) -> Result<Arc<IndexMetadata>> {
        let inner = &self.inner;
        inner
            .cache
            .get_or_read(&inner.warehouse, &inner.injected.registry, location)
            .await
    }
}

/// The warehouse-relative location of a new metadata file.
pub(crate) fn metadata_path(index_uuid: Uuid, sequence: i64, file_id: Uuid) -> String {
    format!("metadata/{index_uuid}/{sequence:05}-{file_id}.metadata.json")
}

/// Record `relative` under `parqdb.metadata-location` if the contents carry an idempotency key.
fn record_location(contents: &mut SnapshotContents, relative: &str) {
    if contents.summary.contains_key(IDEMPOTENCY_KEY) {
        contents
            .summary
            .insert(METADATA_LOCATION.to_owned(), relative.to_owned());
    }
}
