//! Event-driven refresh that survives bursts: many source-change events in, one build and
//! at most one commit per index out.
//!
//! Source tables change in bursts (a batch job writes hundreds of Parquet files in a
//! minute), and S3, EventBridge, SQS and Lambda deliver every event at least once, in
//! any order. Publishing once per event would race hundreds of rebuilds on one pointer
//! and record hundreds of intermediate states. A [`RefreshRunner`] takes a batch of
//! [`SourceChange`]s and, for each index ([`Routes`] maps source tables to indexes):
//!
//! 1. **collapses** the index's changes to the newest one in S3's order of writes (the
//!    `sequencer`, compared as a hexadecimal number: [`SourcePosition`]), never arrival
//!    order;
//! 2. **skips** the batch if the index already has a snapshot built from that position
//!    or a later one (every snapshot the runner publishes records its position under
//!    [`SOURCE_POSITION`] and the state's idempotency key under
//!    [`IDEMPOTENCY_KEY`]: `s3://<bucket>/<key>#<sequencer>`
//!    of the newest write, derived from the source state, never from event ids);
//! 3. **builds once** with the user's [`IndexBuilder`];
//! 4. **publishes once** through the [`Publisher`] (bounded, jittered retries on lost
//!    races). After every lost race it looks again: if a snapshot of the same or a newer
//!    position was published meanwhile, this build is **discarded**, not committed
//!    ([`IndexRefresh::outcome`] `superseded`). So the positions along an index's snapshot
//!    chain only grow: no state is published twice and no older state replaces a newer
//!    one.
//!
//! An index that does not exist yet is created (and its namespace) by the first batch
//! that names it; concurrent creators settle on one and the others publish on top of it.
//!
//! ```
//! use std::sync::Arc;
//! use parqdb_catalog::catalog::Catalog;
//! use parqdb_catalog::publish::Publisher;
//! use parqdb_catalog::refresh::{PlaceholderBuilder, RefreshRunner, Routes, SourceChange};
//! use parqdb_catalog::store::memory::MemoryStore;
//! use parqdb_catalog::warehouse::Warehouse;
//! use parqdb_catalog::{IndexIdentifier, Namespace};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> parqdb_catalog::Result<()> {
//! let warehouse = Warehouse::in_memory("memory://docs/refresh")?;
//! let catalog = Catalog::builder(Arc::new(MemoryStore::new()), warehouse).build();
//! let docs = IndexIdentifier::new(Namespace::new(["search"])?, "docs")?;
//! let runner = RefreshRunner::new(
//!     Publisher::for_catalog(&catalog),
//!     Routes::new().route("s3://lake/docs/", docs.clone())?,
//!     PlaceholderBuilder,
//! );
//! // A burst: three files written, one delivered twice, out of order.
//! let burst = ["0A", "0C", "0B", "0C"]
//!     .iter()
//!     .enumerate()
//!     .map(|(n, seq)| SourceChange::new("lake", format!("docs/part-{n}.parquet"), *seq))
//!     .collect::<parqdb_catalog::Result<Vec<_>>>()?;
//! let report = runner.run(burst.clone()).await;
//! assert_eq!(report.builds, 1);
//! assert_eq!(report.commits, 1);
//! // Redelivered: nothing is built or committed again.
//! let again = runner.run(burst).await;
//! assert_eq!((again.builds, again.commits), (0, 0));
//! # Ok(()) }
//! ```

mod builder;
mod change;
#[cfg(feature = "lambda")]
mod events;
mod routes;

use std::collections::BTreeMap;

use futures::StreamExt;
use serde::Serialize;
use serde_json::Value;

pub use builder::{BuildRequest, IndexBuilder, PlaceholderBuilder};
pub use change::{SourceChange, SourcePosition};
#[cfg(feature = "lambda")]
pub use events::Delivery;
pub use routes::{Route, Routes};

use crate::error::{Error, ErrorKind, Result};
use crate::identifier::IndexIdentifier;
use crate::metadata::{IndexMetadata, SnapshotContents, TableDefinition};
use crate::publish::{IDEMPOTENCY_KEY, PublishOutcome, Published, Publisher};

/// The snapshot-summary key holding the [`SourcePosition`] a snapshot was built from.
pub const SOURCE_POSITION: &str = "parqdb.refresh.source-position";

/// How many indexes of one batch are refreshed concurrently by default.
const DEFAULT_CONCURRENCY: usize = 4;

/// Collapses source-change batches into one build and one publication per index (see the
/// [module docs](self)).
pub struct RefreshRunner<B> {
    publisher: Publisher,
    routes: Routes,
    builder: B,
    concurrency: usize,
}

/// What a batch did.
#[derive(Debug, Default, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct RefreshReport {
    /// One entry per index the batch named, in identifier order.
    pub indexes: Vec<IndexRefresh>,
    /// Changes no route contains (by their position in the batch).
    pub unrouted: Vec<usize>,
    /// Builds run.
    pub builds: usize,
    /// Snapshots committed (index creations included).
    pub commits: usize,
}

/// What happened to one index.
#[derive(Debug, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct IndexRefresh {
    /// The index.
    pub index: IndexIdentifier,
    /// The batch positions of its changes.
    pub changes: Vec<usize>,
    /// The newest change, which the build read at least.
    pub newest: SourceChange,
    /// The outcome.
    pub outcome: RefreshOutcome,
}

/// The outcome for one index.
#[derive(Debug, Serialize)]
#[serde(tag = "outcome", rename_all = "kebab-case")]
pub enum RefreshOutcome {
    /// A snapshot built from the newest change was committed (`created`: together with the
    /// index).
    Published {
        /// The publication.
        #[serde(flatten)]
        published: Published,
        /// Whether the index was created by this batch.
        created: bool,
    },
    /// A snapshot of this position or a later one was already published: nothing built.
    AlreadyPublished {
        /// The current metadata location.
        metadata_location: String,
        /// The position already published.
        position: SourcePosition,
    },
    /// Built, but a newer state was published while this one raced: discarded.
    Superseded {
        /// The current metadata location.
        metadata_location: String,
        /// The position that won.
        position: Option<SourcePosition>,
    },
    /// The refresh failed; the changes should be delivered again (`retryable`) or need
    /// attention.
    Failed {
        /// The error code.
        code: String,
        /// The message.
        message: String,
        /// Whether the same batch may succeed later.
        retryable: bool,
    },
}

impl RefreshOutcome {
    /// Whether the index's changes are handled (published, or covered by a publication).
    pub fn is_done(&self) -> bool {
        !matches!(self, RefreshOutcome::Failed { .. })
    }
}

impl RefreshReport {
    /// The report as JSON.
    pub fn to_json(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }

    /// The batch positions of the changes whose index failed (to redeliver).
    pub fn failed_changes(&self) -> Vec<usize> {
        let mut failed: Vec<usize> = self
            .indexes
            .iter()
            .filter(|index| !index.outcome.is_done())
            .flat_map(|index| index.changes.iter().copied())
            .collect();
        failed.sort_unstable();
        failed
    }
}

/// The newest position any retained snapshot of `metadata` was built from.
pub fn published_position(metadata: &IndexMetadata) -> Option<SourcePosition> {
    metadata
        .snapshots()
        .iter()
        .filter_map(|snapshot| snapshot.summary().get(SOURCE_POSITION))
        .filter_map(|text| SourcePosition::from_text(text))
        .max()
}

impl<B: IndexBuilder> RefreshRunner<B> {
    /// A runner publishing through `publisher`, routing with `routes`, building with
    /// `builder`.
    pub fn new(publisher: Publisher, routes: Routes, builder: B) -> Self {
        RefreshRunner {
            publisher,
            routes,
            builder,
            concurrency: DEFAULT_CONCURRENCY,
        }
    }

    /// Refresh at most `concurrency` indexes of a batch at once (default 4).
    pub fn concurrency(mut self, concurrency: usize) -> Self {
        self.concurrency = concurrency.max(1);
        self
    }

    /// The publisher.
    pub fn publisher(&self) -> &Publisher {
        &self.publisher
    }

    /// Refresh every index `changes` name; one index's failure does not stop the others
    /// (see [`RefreshReport::failed_changes`]).
    pub async fn run(&self, changes: Vec<SourceChange>) -> RefreshReport {
        let mut groups: BTreeMap<String, (Route, Vec<usize>)> = BTreeMap::new();
        let mut report = RefreshReport::default();
        for (n, change) in changes.iter().enumerate() {
            match self.routes.find(change) {
                Some(route) => {
                    groups
                        .entry(route.index().to_string())
                        .or_insert_with(|| (route, Vec::new()))
                        .1
                        .push(n);
                }
                None => report.unrouted.push(n),
            }
        }
        let changes = &changes;
        let mut refreshed: Vec<(IndexRefresh, bool)> = futures::stream::iter(groups.into_values())
            .map(|(route, members)| async move {
                // Newest by position; among equal positions (redeliveries), the first.
                let newest = members
                    .iter()
                    .map(|&n| &changes[n])
                    .max_by(|a, b| a.position().cmp(&b.position()))
                    .cloned()
                    .unwrap_or_else(|| changes[members[0]].clone());
                let mut built = false;
                let outcome = match self
                    .refresh(&route, &newest, members.len(), &mut built)
                    .await
                {
                    Ok(outcome) => outcome,
                    Err(err) => RefreshOutcome::Failed {
                        code: err.code().to_owned(),
                        message: err.full_message(),
                        retryable: err.kind().is_retryable(),
                    },
                };
                (
                    IndexRefresh {
                        index: route.index().clone(),
                        changes: members,
                        newest,
                        outcome,
                    },
                    built,
                )
            })
            .buffer_unordered(self.concurrency)
            .collect()
            .await;
        refreshed.sort_by_key(|(index, _)| index.index.to_string());
        for (index, built) in refreshed {
            report.builds += usize::from(built);
            report.commits += usize::from(matches!(
                &index.outcome,
                RefreshOutcome::Published { published, .. } if !published.already_published
            ));
            report.indexes.push(index);
        }
        report
    }

    /// Refresh one index to `newest`.
    async fn refresh(
        &self,
        route: &Route,
        newest: &SourceChange,
        changes: usize,
        built: &mut bool,
    ) -> Result<RefreshOutcome> {
        let index = route.index();
        let position = newest.position();
        // Two rounds: if a concurrent runner creates the index first, publish on top.
        for _ in 0..2 {
            match self.publisher.load_current(index).await {
                Ok((pointer, current)) => {
                    if let Some(published) = published_position(&current)
                        && published >= position
                    {
                        return Ok(RefreshOutcome::AlreadyPublished {
                            metadata_location: pointer.metadata_location,
                            position: published,
                        });
                    }
                    let contents = self
                        .build(route, newest, changes, current.index_uuid(), Some(&current))
                        .await?;
                    *built = true;
                    let outcome = self
                        .publisher
                        .publish(index, |current| {
                            Ok(match published_position(current) {
                                Some(published) if published >= position => None,
                                _ => Some(contents.clone()),
                            })
                        })
                        .await?;
                    return Ok(match outcome {
                        PublishOutcome::Published(published) => RefreshOutcome::Published {
                            published,
                            created: false,
                        },
                        PublishOutcome::Declined(declined) => {
                            let position = self
                                .publisher
                                .load_current(index)
                                .await
                                .ok()
                                .and_then(|(_, current)| published_position(&current));
                            RefreshOutcome::Superseded {
                                metadata_location: declined.metadata_location,
                                position,
                            }
                        }
                    });
                }
                Err(err) if err.kind() == ErrorKind::IndexNotFound => {
                    match self
                        .publisher
                        .catalog()
                        .create_namespace(index.namespace(), BTreeMap::new())
                        .await
                    {
                        Ok(()) => {}
                        Err(err) if err.kind() == ErrorKind::AlreadyExists => {}
                        Err(err) => return Err(err),
                    }
                    let index_uuid = self.publisher.ids().uuid();
                    let contents = self.build(route, newest, changes, index_uuid, None).await?;
                    *built = true;
                    match self
                        .publisher
                        .create_index_with_uuid(index, index_uuid, contents, BTreeMap::new())
                        .await
                    {
                        Ok(published) => {
                            return Ok(RefreshOutcome::Published {
                                published,
                                created: true,
                            });
                        }
                        Err(err) if err.kind() == ErrorKind::AlreadyExists => continue,
                        Err(err) => return Err(err),
                    }
                }
                Err(err) => return Err(err),
            }
        }
        Err(Error::new(
            ErrorKind::CommitConflict,
            format!("{index} was created and dropped concurrently; deliver the changes again"),
        ))
    }

    /// Run the builder and stamp the snapshot with the state it was built from.
    async fn build(
        &self,
        route: &Route,
        newest: &SourceChange,
        changes: usize,
        index_uuid: uuid::Uuid,
        current: Option<&IndexMetadata>,
    ) -> Result<SnapshotContents> {
        let request = BuildRequest {
            index: route.index(),
            index_uuid,
            build_id: self.publisher.ids().uuid(),
            newest,
            changes,
            source_table: source_table(route, newest)?,
            current,
            warehouse: self.publisher.warehouse(),
        };
        let mut contents = self.builder.build(&request).await?;
        contents
            .summary
            .insert(IDEMPOTENCY_KEY.to_owned(), newest.state_key());
        contents
            .summary
            .insert(SOURCE_POSITION.to_owned(), newest.position().to_string());
        contents
            .summary
            .insert("refresh-changes".to_owned(), changes.to_string());
        Ok(contents)
    }
}

/// The source table's definition after `newest`: a `parquet` table at the route's
/// location, naming the newest changed object and its sequencer.
fn source_table(route: &Route, newest: &SourceChange) -> Result<TableDefinition> {
    let mut properties = BTreeMap::from([
        ("definition-version".to_owned(), "1".to_owned()),
        ("location".to_owned(), route.table_location(newest)),
        ("changed-object".to_owned(), newest.key.clone()),
        (
            "changed-object-sequencer".to_owned(),
            newest.position().hex().to_owned(),
        ),
    ]);
    if let Some(version) = &newest.version_id {
        properties.insert("changed-object-version-id".to_owned(), version.clone());
    }
    TableDefinition::new("parquet", properties)
}
