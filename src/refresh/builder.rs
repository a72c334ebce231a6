//! What a refresh job plugs in: the index build for one source state.

use std::collections::BTreeMap;

use async_trait::async_trait;
use bytes::Bytes;
use uuid::Uuid;

use crate::error::Result;
use crate::identifier::IndexIdentifier;
use crate::metadata::{
    IndexMetadata, IndexTableDefinition, ProviderDefinition, SnapshotContents, TableDefinition,
};
use crate::warehouse::Warehouse;

use super::SourceChange;

/// Everything a build may use.
#[derive(Debug)]
pub struct BuildRequest<'a> {
    /// The index being refreshed.
    pub index: &'a IndexIdentifier,
    /// Its UUID (new for an index the runner creates): write tables under
    /// `indexes/<index-uuid>/<build-id>/`.
    pub index_uuid: Uuid,
    /// A fresh id for this build; never reuse an object path.
    pub build_id: Uuid,
    /// When the build starts reading the source (the runner's clock, Unix epoch
    /// milliseconds), recorded in the snapshot: read the source table only from now on —
    /// no listing or object cached from before — so the snapshot contains every write S3
    /// finished before (see "Ordering" in the [module docs](super)).
    pub read_start_ms: i64,
    /// The change of the burst with the latest time.
    pub newest: &'a SourceChange,
    /// Each changed object's latest write (by sequencer, among the changes of that
    /// object), in key order: what changed since the burst began, for an incremental
    /// build. The build must read the whole table as it is now, not only these.
    pub changed: &'a [SourceChange],
    /// How many changes (deliveries included) the burst collapsed into this build.
    pub changes: usize,
    /// The source table's definition for the snapshot (`parquet`, its location, the read
    /// start, the newest changed object and its sequencer). Use it as `source-table`.
    pub source_table: TableDefinition,
    /// The index's current metadata (`None` when the runner creates the index).
    pub current: Option<&'a IndexMetadata>,
    /// The warehouse to write index tables into.
    pub warehouse: &'a Warehouse,
}

/// Builds index tables for a source state and returns the snapshot that describes them.
///
/// Implement this for a real job (train IVF centroids, write posting lists); the runner
/// calls it at most once per index per batch, and publishes what it returns (adding its
/// bookkeeping to `summary`). Write every table to a fresh location below
/// `indexes/<index-uuid>/<build-id>/`: a build the runner discards (a newer state won)
/// leaves orphans for the garbage collector, never a half-overwritten table.
#[async_trait]
pub trait IndexBuilder: Send + Sync {
    /// Build the index for `request` and return the new snapshot's contents.
    async fn build(&self, request: &BuildRequest<'_>) -> Result<SnapshotContents>;
}

#[async_trait]
impl<T: IndexBuilder + ?Sized> IndexBuilder for Box<T> {
    async fn build(&self, request: &BuildRequest<'_>) -> Result<SnapshotContents> {
        (**self).build(request).await
    }
}

/// The index-table roles of the `ivf` family.
const IVF_ROLES: [&str; 2] = ["ivf_centroids", "ivf_postings"];

/// A demonstration builder: writes one placeholder file per `ivf` table
/// (`indexes/<index-uuid>/<build-id>/<role>/part-0.parquet`) and describes an `ivf`
/// index over the source's `embedding` field. Replace it with a real build.
#[derive(Debug, Clone, Copy, Default)]
pub struct PlaceholderBuilder;

#[async_trait]
impl IndexBuilder for PlaceholderBuilder {
    async fn build(&self, request: &BuildRequest<'_>) -> Result<SnapshotContents> {
        let build = request.build_id.simple();
        let mut index_tables = BTreeMap::new();
        for role in IVF_ROLES {
            let location = format!("indexes/{}/{build}/{role}/", request.index_uuid.simple());
            request
                .warehouse
                .write_new(
                    &format!("{location}part-0.parquet"),
                    Bytes::from(format!(
                        "placeholder {role} for {}",
                        request.newest.state_key()
                    )),
                )
                .await?;
            index_tables.insert(
                role.to_owned(),
                IndexTableDefinition::new(1, BTreeMap::from([("location".to_owned(), location)]))?,
            );
        }
        // Placeholder statistics: one row per KiB of the newest changed object.
        let indexed_rows = i64::try_from(request.newest.size.unwrap_or(0) / 1024)
            .unwrap_or(i64::MAX)
            .max(1);
        Ok(SnapshotContents {
            source_table: request.source_table.clone(),
            vector_field: "embedding".into(),
            source_key_fields: vec!["document_id".into()],
            indexed_rows,
            index_family: "ivf".into(),
            index_schema_version: 1,
            metric: "l2_squared".into(),
            parameters: BTreeMap::from([
                ("dimension".to_owned(), "768".to_owned()),
                ("nlist".to_owned(), "64".to_owned()),
            ]),
            index_provider: ProviderDefinition::new("parquet", BTreeMap::new())?,
            index_tables,
            summary: BTreeMap::new(),
        })
    }
}
