//! Event-driven refresh that survives bursts: many source-change events in, one build and
//! at most one commit per index out.
//!
//! Source tables change in bursts (a batch job writes hundreds of Parquet files in a
//! minute), and S3, EventBridge, SQS and Lambda deliver every event at least once, in any
//! order. Publishing once per event would race hundreds of rebuilds on one pointer and
//! record hundreds of intermediate states. A [`RefreshRunner`] takes a batch of
//! [`SourceChange`]s and, for each index ([`Routes`] maps source tables to indexes):
//!
//! 1. **skips** the batch if the index has a snapshot that already contains every change
//!    of it (the ordering rule below): redeliveries and late older writes build nothing;
//! 2. **waits** until its clock reads at least the batch's latest change time plus the
//!    clock-skew allowance (usually not at all: events are seconds old), then takes that
//!    reading as the build's **read start** and **builds once** with the user's
//!    [`IndexBuilder`], which reads the source table from then on;
//! 3. **publishes once** through the [`Publisher`] (bounded, jittered retries on lost
//!    races), recording the read start in the snapshot's summary under `parqdb.refresh.read-start-ms`
//!    (and the state's idempotency key, `<table location>@<read-start-ms>`, under
//!    `parqdb.idempotency-key`). After every lost race it looks again: if a snapshot with the
//!    same or a later read start, or one that contains the whole batch (a concurrent
//!    delivery of it), was published meanwhile, this build is **discarded**, not
//!    committed ([`RefreshOutcome::Superseded`]). So the read starts along an index's
//!    snapshot chain only grow: no state is published twice and no older state replaces a
//!    newer one.
//!
//! An index that does not exist yet is created (and its namespace) by the first batch
//! that names it; concurrent creators settle on one and the others publish on top of it.
//!
//! The builder runs in the runner's process ([`PlaceholderBuilder`], or your own
//! [`IndexBuilder`]), or in a Lambda function of its own under a versioned JSON contract
//! ([`contract`]; `LambdaBuilder`, with the `builder-function` feature): how the deployed
//! `refresh` function runs a real build without being recompiled.
//!
//! # Ordering: is a write already in a snapshot?
//!
//! S3's `sequencer` orders the events **of one object key** only; across keys it gives no
//! order (and other S3-compatible servers stamp unsynchronised clocks). The runner uses it
//! only between writes of the same key: of several changes of one object in a batch, the
//! one with the greatest sequencer is the object's state ([`BuildRequest::changed`]), and
//! a snapshot that contains it contains the earlier ones. Whether a snapshot contains a
//! write is decided by time, soundly across keys:
//!
//! > A snapshot whose build started reading the source at `R` (its `parqdb.refresh.read-start-ms`, the
//! > refresh function's clock) **contains** a write whose event time is `t` (S3's clock,
//! > [`SourceChange::time_ms`]) if `t + skew ≤ R`, where `skew` is the clock-skew
//! > allowance ([`RefreshRunner::with_clock_skew`], default 2 s). A batch is
//! > skipped if the newest read start of the index's retained snapshots
//! > (the newest read start a retained snapshot records) contains each of its objects' newest changes.
//!
//! This holds under these assumptions, which the allowance must cover:
//!
//! - **Consistency**: S3 is strongly consistent: a read or listing that starts after a
//!   write completed returns it (or a later write of the key). A builder reads the source
//!   table only after the runner called it (no listing cached from before `R`).
//! - **Event time**: the time of an S3 event (a notification's `eventTime`, "when S3
//!   finished processing the request", or EventBridge's `time`) is taken at its latest
//!   instant (whole seconds are read as the second's last millisecond); the write is
//!   readable no later than that instant plus the part of the allowance not spent on
//!   clocks.
//! - **Clocks**: S3's clock and the clock of every refresh function differ by less than
//!   the allowance (AWS synchronises both with the Amazon Time Sync Service, well below a
//!   second; the default allowance is two seconds).
//!
//! Then `t + skew ≤ R` means the write completed before the read started, so the build saw
//! it. The wait in step 2 makes every snapshot contain the whole batch it was built for
//! (each change `t` of it has `t + skew ≤ R`), so a redelivered change is skipped; and a
//! write made after the build started reading has `t + skew > R` whatever its sequencer,
//! so it is built. A change stamped further ahead of the function's clock than twice the
//! allowance breaks the clock assumption: its index fails (`INVALID_REQUEST`) and the
//! changes are delivered again. Snapshots without a `parqdb.refresh.read-start-ms` (committed by other
//! writers, or by runners before this rule) contain nothing by this rule: the next batch
//! builds.
//!
//! ```
//! use std::sync::Arc;
//! use parqdb_catalog::Catalog;
//! use parqdb_catalog::Publisher;
//! use parqdb_catalog::refresh::{PlaceholderBuilder, RefreshRunner, Routes, SourceChange};
//! use parqdb_catalog::store::MemoryStore;
//! use parqdb_catalog::Warehouse;
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
//! // A burst (S3 finished the writes at these times): three files written, one delivered
//! // twice, out of order.
//! let burst = [("0A", 1_750_000_000_000), ("0C", 1_750_000_000_020), ("0B", 1_750_000_000_010)]
//!     .iter()
//!     .enumerate()
//!     .map(|(n, (seq, time_ms))| {
//!         SourceChange::new("lake", format!("docs/part-{n}.parquet"), *seq, *time_ms)
//!     })
//!     .collect::<parqdb_catalog::Result<Vec<_>>>()?;
//! let mut delivered = burst.clone();
//! delivered.push(burst[1].clone());
//! let report = runner.run(delivered.clone()).await;
//! assert_eq!(report.builds, 1);
//! assert_eq!(report.commits, 1);
//! // Redelivered: nothing is built or committed again.
//! let again = runner.run(delivered).await;
//! assert_eq!((again.builds, again.commits), (0, 0));
//! # Ok(()) }
//! ```

mod builder;
mod change;
pub mod contract;
#[cfg(feature = "lambda")]
mod events;
#[cfg(feature = "builder-function")]
mod function;
mod routes;

use std::collections::BTreeMap;
use std::time::Duration;

use futures::StreamExt;
use serde::Serialize;

pub use builder::{BuildRequest, IndexBuilder, PlaceholderBuilder};
pub use change::SourceChange;
#[cfg(feature = "lambda")]
#[doc(hidden)] // The `refresh` function's events: the handler layer of `functions/`.
pub use events::Delivery;
#[cfg(feature = "builder-function")]
pub use function::LambdaBuilder;
pub use routes::{Route, Routes};

use crate::error::{Error, ErrorKind, Result};
use crate::identifier::IndexIdentifier;
use crate::metadata::{IndexMetadata, SnapshotContents, TableDefinition};
use crate::publish::{IDEMPOTENCY_KEY, PublishOutcome, Published, Publisher};

/// The snapshot-summary key holding the build's read start: the refresh function's clock
/// (Unix epoch milliseconds, decimal) when the build started reading the source table
/// (see "Ordering" in the [module docs](self)).
#[doc(hidden)] // For the functions crate, its tests and the refresh bench.
pub const READ_START: &str = "parqdb.refresh.read-start-ms";

/// The default clock-skew allowance: how far S3's clock and a refresh function's clock may
/// differ, plus how long after its event time a write may take to become readable.
#[doc(hidden)] // For the refresh function.
pub const DEFAULT_CLOCK_SKEW: Duration = Duration::from_secs(2);

/// The largest clock-skew allowance [`RefreshRunner::with_clock_skew`] accepts (a build may
/// wait up to twice the allowance).
pub(crate) const MAX_CLOCK_SKEW: Duration = Duration::from_secs(60);

/// How many indexes of one batch are refreshed concurrently by default.
const DEFAULT_CONCURRENCY: usize = 4;

/// Collapses source-change batches into one build and one publication per index (see the
/// [module docs](self)).
pub struct RefreshRunner<B> {
    publisher: Publisher,
    routes: Routes,
    builder: B,
    concurrency: usize,
    clock_skew_ms: i64,
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
    /// The change with the latest time (among equal times, the later write of one object,
    /// else the first delivered).
    pub newest: SourceChange,
    /// The outcome.
    pub outcome: RefreshOutcome,
}

/// The outcome for one index.
#[derive(Debug, Serialize)]
#[serde(tag = "outcome", rename_all = "kebab-case")]
pub enum RefreshOutcome {
    /// A snapshot containing every change was committed (`created`: together with the
    /// index).
    Published {
        /// The publication.
        #[serde(flatten)]
        published: Published,
        /// Whether the index was created by this batch.
        created: bool,
        /// The build's read start (`parqdb.refresh.read-start-ms`).
        read_start_ms: i64,
    },
    /// A retained snapshot already contains every change: nothing built.
    AlreadyPublished {
        /// The current metadata location.
        metadata_location: String,
        /// The newest read start of the retained snapshots.
        read_start_ms: i64,
    },
    /// Built, but a snapshot that contains every change too (with the same or a later read
    /// start, or containing the whole batch) was published while this one raced:
    /// discarded.
    Superseded {
        /// The current metadata location.
        metadata_location: String,
        /// The read start that won, if it could be read.
        read_start_ms: Option<i64>,
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
    /// Whether the index's changes are handled (published, or contained in a publication).
    pub(crate) fn is_done(&self) -> bool {
        !matches!(self, RefreshOutcome::Failed { .. })
    }
}

impl RefreshReport {
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

/// The newest read start (`parqdb.refresh.read-start-ms`) any retained snapshot of `metadata` records.
#[doc(hidden)] // For the refresh bench (examples/refresh_burst.rs).
pub fn published_read_start(metadata: &IndexMetadata) -> Option<i64> {
    metadata
        .snapshots()
        .iter()
        .filter_map(|snapshot| snapshot.summary().get(READ_START))
        .filter_map(|text| text.parse::<i64>().ok())
        .filter(|ms| *ms >= 0)
        .max()
}

/// The ordering rule (see the [module docs](self)): whether a build that started reading
/// the source at `read_start_ms` contains `change`, given the clock-skew allowance.
#[doc(hidden)] // For the refresh bench (examples/refresh_burst.rs).
pub fn snapshot_contains(read_start_ms: i64, change: &SourceChange, clock_skew: Duration) -> bool {
    change.time_ms.saturating_add(millis(clock_skew)) <= read_start_ms
}

fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

/// One index's changes in a batch.
struct Group {
    route: Route,
    /// Batch positions.
    members: Vec<usize>,
    /// The change with the latest time.
    newest: SourceChange,
    /// Each changed object's latest write (greatest sequencer), in key order.
    changed: Vec<SourceChange>,
}

impl Group {
    fn new(route: Route, members: Vec<usize>, changes: &[SourceChange]) -> Group {
        let mut newest = changes[members[0]].clone();
        let mut changed: BTreeMap<(&str, &str), &SourceChange> = BTreeMap::new();
        for change in members.iter().map(|&n| &changes[n]) {
            let later_write = change.same_object(&newest) && change.position() > newest.position();
            if change.time_ms > newest.time_ms || (change.time_ms == newest.time_ms && later_write)
            {
                newest = change.clone();
            }
            changed
                .entry((change.bucket.as_str(), change.key.as_str()))
                .and_modify(|latest| {
                    if change.position() > latest.position() {
                        *latest = change;
                    }
                })
                .or_insert(change);
        }
        Group {
            route,
            members,
            newest,
            changed: changed.into_values().cloned().collect(),
        }
    }
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
            clock_skew_ms: millis(DEFAULT_CLOCK_SKEW),
        }
    }

    /// Refresh at most `concurrency` indexes of a batch at once (default 4).
    pub fn concurrency(mut self, concurrency: usize) -> Self {
        self.concurrency = concurrency.max(1);
        self
    }

    /// The clock-skew allowance of the ordering rule (default 2 s; see
    /// the [module docs](self)). `INVALID_CONFIGURATION` above 60 s.
    pub fn with_clock_skew(mut self, clock_skew: Duration) -> Result<Self> {
        if clock_skew > MAX_CLOCK_SKEW {
            return Err(Error::new(
                ErrorKind::Configuration,
                format!(
                    "a clock-skew allowance of {} is more than the {} a refresh accepts",
                    humantime::format_duration(clock_skew),
                    humantime::format_duration(MAX_CLOCK_SKEW)
                ),
            ));
        }
        self.clock_skew_ms = millis(clock_skew);
        Ok(self)
    }

    /// The clock-skew allowance.
    pub(crate) fn clock_skew(&self) -> Duration {
        Duration::from_millis(u64::try_from(self.clock_skew_ms).unwrap_or(0))
    }

    /// Refresh every index `changes` name; one index's failure does not stop the others
    /// (see [`RefreshReport::failed_changes`]).
    pub async fn run(&self, changes: Vec<SourceChange>) -> RefreshReport {
        let mut routed: BTreeMap<String, (Route, Vec<usize>)> = BTreeMap::new();
        let mut report = RefreshReport::default();
        for (n, change) in changes.iter().enumerate() {
            match self.routes.find(change) {
                Some(route) => {
                    routed
                        .entry(route.index().to_string())
                        .or_insert_with(|| (route, Vec::new()))
                        .1
                        .push(n);
                }
                None => report.unrouted.push(n),
            }
        }
        let groups: Vec<Group> = routed
            .into_values()
            .map(|(route, members)| Group::new(route, members, &changes))
            .collect();
        let mut refreshed: Vec<(IndexRefresh, bool)> = futures::stream::iter(groups)
            .map(|group| async move {
                let mut built = false;
                let outcome = match self.refresh(&group, &mut built).await {
                    Ok(outcome) => outcome,
                    Err(err) => RefreshOutcome::Failed {
                        code: err.code().to_owned(),
                        message: err.full_message(),
                        retryable: err.kind().is_retryable(),
                    },
                };
                (
                    IndexRefresh {
                        index: group.route.index().clone(),
                        changes: group.members,
                        newest: group.newest,
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

    /// Whether a snapshot with read start `read_start_ms` contains every change of `group`
    /// (each object's latest write).
    fn contains_all(&self, read_start_ms: i64, group: &Group) -> bool {
        group
            .changed
            .iter()
            .all(|change| snapshot_contains(read_start_ms, change, self.clock_skew()))
    }

    /// Refresh one index to contain `group`.
    async fn refresh(&self, group: &Group, built: &mut bool) -> Result<RefreshOutcome> {
        let index = group.route.index();
        // Two rounds: if a concurrent runner creates the index first, publish on top.
        for _ in 0..2 {
            match self.publisher.load_current(index).await {
                Ok((pointer, current)) => {
                    if let Some(published) = published_read_start(&current)
                        && self.contains_all(published, group)
                    {
                        return Ok(RefreshOutcome::AlreadyPublished {
                            metadata_location: pointer.metadata_location,
                            read_start_ms: published,
                        });
                    }
                    let read_start = self.read_start(group).await?;
                    let contents = self
                        .build(group, read_start, current.index_uuid(), Some(&current))
                        .await?;
                    *built = true;
                    let outcome = self
                        .publisher
                        .publish(index, |current| {
                            // Declined if a snapshot published meanwhile read later, or
                            // contains the whole batch already (a concurrent delivery).
                            Ok(match published_read_start(current) {
                                Some(published)
                                    if published >= read_start
                                        || self.contains_all(published, group) =>
                                {
                                    None
                                }
                                _ => Some(contents.clone()),
                            })
                        })
                        .await?;
                    return Ok(match outcome {
                        PublishOutcome::Published(published) => RefreshOutcome::Published {
                            published,
                            created: false,
                            read_start_ms: read_start,
                        },
                        PublishOutcome::Declined(declined) => {
                            let read_start_ms = self
                                .publisher
                                .load_current(index)
                                .await
                                .ok()
                                .and_then(|(_, current)| published_read_start(&current));
                            RefreshOutcome::Superseded {
                                metadata_location: declined.metadata_location,
                                read_start_ms,
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
                    let read_start = self.read_start(group).await?;
                    let contents = self.build(group, read_start, index_uuid, None).await?;
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
                                read_start_ms: read_start,
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

    /// The build's read start: the clock once it reads at least every change's time plus
    /// the allowance (waiting for it if needed), so that the snapshot contains the whole
    /// batch by the ordering rule.
    async fn read_start(&self, group: &Group) -> Result<i64> {
        let latest = group
            .changed
            .iter()
            .map(|change| change.time_ms)
            .max()
            .unwrap_or(0);
        let due = latest.saturating_add(self.clock_skew_ms);
        let clock = self.publisher.clock();
        let now = clock.now_ms();
        if now >= due {
            return Ok(now);
        }
        let wait = due - now;
        if wait > self.clock_skew_ms.saturating_mul(2) {
            return Err(Error::new(
                ErrorKind::InvalidRequest,
                format!(
                    "a change of {} is stamped {} ms ahead of this function's clock, more than the clock-skew allowance ({} ms) explains; it is delivered again",
                    group.route.index(),
                    latest - now,
                    self.clock_skew_ms
                ),
            ));
        }
        tokio::time::sleep(Duration::from_millis(u64::try_from(wait).unwrap_or(0))).await;
        let now = clock.now_ms();
        if now < due {
            return Err(Error::new(
                ErrorKind::StoreUnavailable,
                format!(
                    "the clock reads {now} ms after waiting for {due} ms (the batch's latest change plus the clock-skew allowance); try again"
                ),
            ));
        }
        Ok(now)
    }

    /// Run the builder and stamp the snapshot with the state it was built from.
    async fn build(
        &self,
        group: &Group,
        read_start_ms: i64,
        index_uuid: uuid::Uuid,
        current: Option<&IndexMetadata>,
    ) -> Result<SnapshotContents> {
        let request = BuildRequest {
            index: group.route.index(),
            index_uuid,
            build_id: self.publisher.ids().uuid(),
            read_start_ms,
            newest: &group.newest,
            changed: &group.changed,
            changes: group.members.len(),
            source_table: source_table(&group.route, &group.newest, read_start_ms)?,
            current,
            warehouse: self.publisher.warehouse(),
        };
        let mut contents = self.builder.build(&request).await?;
        contents.summary.insert(
            IDEMPOTENCY_KEY.to_owned(),
            format!(
                "{}@{read_start_ms}",
                group.route.table_location(&group.newest)
            ),
        );
        contents
            .summary
            .insert(READ_START.to_owned(), read_start_ms.to_string());
        contents.summary.insert(
            "refresh-changes".to_owned(),
            group.members.len().to_string(),
        );
        Ok(contents)
    }
}

/// The source table's definition for a build reading from `read_start_ms`: a `parquet`
/// table at the route's location as S3 served it from then on, naming the newest changed
/// object and its sequencer.
fn source_table(
    route: &Route,
    newest: &SourceChange,
    read_start_ms: i64,
) -> Result<TableDefinition> {
    let mut properties = BTreeMap::from([
        ("definition-version".to_owned(), "1".to_owned()),
        ("location".to_owned(), route.table_location(newest)),
        ("read-start-ms".to_owned(), read_start_ms.to_string()),
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
