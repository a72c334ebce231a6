//! A run's durable state: what lets a run that spans many invocations (and many workers)
//! stop anywhere and go on where it stopped.
//!
//! Every file lives under `_gc/runs/<run-ms>-<run>/` (the run's journal suffix) and is
//! written once, with create-if-absent, like everything the collector writes under
//! `_gc/`:
//!
//! ```text
//! plan.json                 the run's decision time, rules, partitions, previous and dead runs
//! observed.json             the first walk: the reachable set R (sorted) and the evidence
//! metadata/<seq>.json       `metadata/`, page by page: candidates and what they reference
//! referenced.json           everything unreachable metadata names (rule (P)), once pass 1 is done
//! assessed/<seq>.json       the candidates of metadata page <seq>, decided: doomed files
//! assessed/<seq>.carried.json  the retention clocks of its candidates standing after
//!                           those decisions (written before the page)
//! scan/<p>/<seq>.json       partition <p> of `indexes/`, page by page: doomed objects
//! scan/<p>/<seq>.carried.json  the retention clocks standing after the page's decisions
//!                           (written before the page; see `carried`)
//! verified.json             the verification walk (R again) and every nested root found
//! verified-dangling/<id>.json  when a verification walk started, and the family
//!                           references it found naming no file (one file per walk,
//!                           written before `verified.json`)
//! guard/<ms>-<id>.json      what the delete steps' guard has read so far (a cache: the
//!                           change-log entries and the files it read, what they name,
//!                           what is still to read again; see `dangling`)
//! deleted/<m|p>/<seq>.json  deletion progress: one page of doomed objects each
//! swept/<m|p>/<seq>.json    ledger sweep progress, page by page
//! ```
//!
//! A sequence's files are numbered from 0; each carries the position after which its
//! listing resumes, whether the sequence is done, and the sequence's running totals, so
//! the newest file of a sequence is its whole state. A worker that loses the race to
//! write a page (two workers on one partition) reads the winner's page and goes on from
//! it. A dry run keeps the same files in a scratch in-memory warehouse.

use bytes::Bytes;
use futures::TryStreamExt;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::journal::{JournalRef, JournalState};
use super::reachability::Observation;
use super::refs::SelfCovering;
use super::report::GcCounts;
use crate::error::{Error, ErrorKind, Result};
use crate::warehouse::layout::RUNS_DIR;
use crate::warehouse::{Fetched, ListItem, ListRange, Listed, Positioned, Warehouse};

/// The run format this release plans new runs in (`plan-version` of `plan.json`; every
/// file of a run is of its plan's format). Version 3 dates every loss from walks and the
/// change log (see [`rules`](super::rules)).
pub(crate) const JOB_VERSION: i32 = 3;

/// The run formats this release resumes (and goes on writing, each in its own format).
///
/// A release that changes the run format ships in two steps, as readers go before
/// writers: first a release that resumes the new format but still plans in the old one
/// (it widens this range), then one that plans in the new format. During the second
/// release's deployment every invocation, of either release, can go on with every run, so
/// no run is given up and no retention clock restarts. `parse_plan` enforces the rest:
///
/// * a run of a format in this range is resumed;
/// * a run of a **newer** format (a release was skipped, or a deployment rolled back) is
///   left alone: every step that meets it fails with `UNSUPPORTED_FORMAT_VERSION`, writes
///   nothing, and never gives it up (`gc abandon` does, if the operator so decides);
/// * a run of an **older** format than the range (the formats before version 3 dated
///   losses by rules this release no longer trusts) is given up like a damaged one.
///
/// The unit test `every_resumed_run_format_reads_its_fixture` reads a real run of every
/// format in this range (`tests/fixtures/gc-runs/v<N>/`).
pub(crate) const RESUMED_JOB_VERSIONS: std::ops::RangeInclusive<i32> = 3..=JOB_VERSION;

/// The rules a run decides by, fixed when it is planned; a resumed run takes, for each,
/// the more conservative of these and its resumer's configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub(crate) struct Rules {
    pub retention_ms: i64,
    pub grace_ms: i64,
    pub delay_ms: i64,
    pub skew_ms: i64,
    /// How long after its change-log entry a publication has landed or failed, as every
    /// walk sees it: the publish window plus twice the skew.
    pub settle_ms: i64,
}

impl Rules {
    /// The more conservative of two rule sets.
    /// The rules `config` decides by.
    pub(crate) fn of(config: &super::GcConfig) -> Rules {
        use super::config::millis;
        Rules {
            retention_ms: millis(config.retention),
            grace_ms: millis(config.grace),
            delay_ms: millis(config.effective_condemn_delay()),
            skew_ms: millis(config.max_clock_skew),
            settle_ms: millis(crate::catalog::PUBLISH_WINDOW)
                .saturating_add(millis(config.max_clock_skew).saturating_mul(2)),
        }
    }

    pub(crate) fn strictest(self, other: Rules) -> Rules {
        Rules {
            retention_ms: self.retention_ms.max(other.retention_ms),
            grace_ms: self.grace_ms.max(other.grace_ms),
            delay_ms: self.delay_ms.max(other.delay_ms),
            skew_ms: self.skew_ms.max(other.skew_ms),
            settle_ms: self.settle_ms.max(other.settle_ms),
        }
    }

    /// The same bounds, as the decision rules take them.
    pub(crate) fn timing(&self) -> super::rules::Timing {
        super::rules::Timing {
            retention_ms: self.retention_ms,
            grace_ms: self.grace_ms,
            delay_ms: self.delay_ms,
            skew_ms: self.skew_ms,
            settle_ms: self.settle_ms,
        }
    }
}

/// What a run fixed when it was planned.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub(crate) struct Plan {
    pub plan_version: i32,
    pub run_id: Uuid,
    /// The run's journal time (its files' directory).
    pub run_ms: i64,
    /// The decision time: grace, retention and condemnation delays are measured against
    /// it in every invocation (a later invocation judges by this earlier time, which only
    /// keeps more).
    pub now_ms: i64,
    /// When the first walk started (no later than its first read).
    pub walk_start_ms: i64,
    /// When the first walk had finished.
    pub observed_ms: i64,
    /// The earliest walk any retention clock may come from: the warehouse's ownership
    /// epoch, or this run's walk when the change log cannot explain the catalog's records
    /// (see [`history`](super::history)).
    pub floor_ms: i64,
    pub rules: Rules,
    /// The latest run that finished before this one.
    pub previous: Option<JournalRef>,
    /// The newest journal that no longer counts, if newer than `previous` and of the
    /// current ownership epoch (`JournalFacts::untrusted`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub untrusted: Option<JournalRef>,
    /// Whether the warehouse was adopted since `previous` (`JournalFacts::adopted_since`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub adopted_since: bool,
    /// The ownership epoch the run was planned in: the marker's `created-ms` (absent in
    /// plans of earlier versions).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub epoch_ms: Option<i64>,
    /// Runs that wrote a journal but never finished (none of their ledger facts is
    /// trusted; this run marks them dead when it finishes).
    pub dead: Vec<JournalRef>,
    /// The partitions of `indexes/`.
    pub partitions: Vec<ListRange>,
    /// Most objects one partition (or `metadata/`) deletes in this run.
    pub max_doomed: u64,
    pub catalog_id: Uuid,
}

impl Plan {
    pub(crate) fn journal(&self) -> JournalRef {
        JournalRef {
            run_ms: self.run_ms,
            run_id: self.run_id,
        }
    }

    /// Why this run may no longer go on, if it may not: it was planned for another
    /// catalog (its files were copied here), or before the warehouse's current ownership
    /// epoch began (`epoch_ms`: an `init --adopt` since, as the restore procedure does: its
    /// walk and verification predate the restored pointers, round 38 K2), or a run it did
    /// not know of has finished since it was planned (a planner that paused past its lease
    /// wrote its plan behind that run, or this run finished long ago and its journal was
    /// pruned), or a run its plan did not count was started since its previous run and
    /// never finished (`started`: the run directories; what that run's walk found
    /// reachable is lost with it: round 133). Such a run's walk is older than facts another run has
    /// established, so it is never resumed; its journal counts as a dead run's and the
    /// next run restarts every clock once.
    ///
    /// Only runs serialised behind this one's lease can finish while it is unfinished,
    /// and this run acknowledges the dead runs of its plan itself, so a run that goes on
    /// legitimately is never superseded.
    pub(crate) fn superseded(
        &self,
        journals: &JournalState,
        started: &[JournalRef],
        owner: Uuid,
        epoch_ms: Option<i64>,
    ) -> Option<String> {
        if self.catalog_id != owner {
            return Some(format!(
                "gc run {} was planned by catalog {}, not by this warehouse's owner {owner}",
                self.run_id, self.catalog_id
            ));
        }
        // The epoch the plan was made in, where it says; else its time, counted as
        // before the adoption if it may have been by either clock (round 39 L3).
        let before = |epoch_ms: i64| match self.epoch_ms {
            Some(planned) => planned != epoch_ms,
            None => self.run_ms <= epoch_ms.saturating_add(self.rules.skew_ms),
        };
        if epoch_ms.is_some_and(before) {
            return Some(format!(
                "gc run {} was planned before the warehouse was adopted (a new ownership epoch): what it walked predates the adoption",
                self.run_id
            ));
        }
        let known = |journal: &JournalRef| {
            *journal == self.journal()
                || self.dead.contains(journal)
                // A journal whose finish mark no longer counts (`_gc/` restored or
                // copied): over, and untrusted; the plan counted it (its floor), and it
                // finished nothing since (round 133: else a run after a restore of `_gc/`
                // was superseded at every step).
                || journals.stale.contains(journal)
                // A mark left without its journal (pruned) by a run older than this one.
                || (!journals.journaled.contains(journal) && journal.order() < self.journal().order())
                || self
                    .previous
                    .is_some_and(|previous| journal.order() <= previous.order())
        };
        if let Some(newer) = journals
            .finished
            .iter()
            .filter(|journal| !known(journal))
            .max_by_key(|journal| journal.order())
        {
            return Some(format!(
                "gc run {} was superseded: run {} finished after it was planned",
                self.run_id, newer.run_id
            ));
        }
        // A run this plan did not count (its journal unfinished, or only its directory:
        // a plan step that stopped after its walk, or a walk written late, behind this
        // plan) and that is not over (neither finished nor marked dead): it was given up,
        // or this run was not resumable when it started, and what its walk found
        // reachable, possibly after this run's walk, is lost with it. Whatever its time: a
        // run older than the previous one that is not over landed after the previous run
        // had counted and marked every run it knew (round 134, F1). Only the next run,
        // which counts it and starts every clock again, goes on (round 133, G2 and G3).
        let counted = |run: &JournalRef| *run == self.journal() || self.dead.contains(run);
        let lost = journals
            .dead
            .iter()
            .chain(
                started
                    .iter()
                    .filter(|run| !journals.finished.contains(run)),
            )
            .filter(|run| !counted(run))
            .max_by_key(|run| run.order())?;
        Some(format!(
            "gc run {} was superseded: run {} was started after its previous run, never finished, and was not counted by its plan",
            self.run_id, lost.run_id
        ))
    }
}

/// An object listed by a scan, as the checkpoints keep it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub(crate) struct Object {
    pub name: String,
    pub size: u64,
    pub last_modified_ms: i64,
}

/// An object a run will delete unless verification says otherwise.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub(crate) struct Doomed {
    pub name: String,
    pub size: u64,
    /// Its retention clock.
    pub clock_ms: i64,
    /// When the walk that started the clock began.
    pub clock_walk_ms: i64,
    pub ledger_files: Vec<String>,
    /// When it was condemned.
    pub condemned_ms: i64,
    /// The condemnation marker that holds its condemnation, if one does (its path): the
    /// deletion's record names it, and releasing the record clears it once every name it
    /// lists is deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub marker: Option<String>,
}

impl Doomed {
    /// Its retention clock.
    pub(crate) fn clock(&self) -> super::rules::Clock {
        super::rules::Clock {
            start_ms: self.clock_ms,
            walk_ms: self.clock_walk_ms,
        }
    }

    /// Why it is deleted, under `rules`.
    pub(crate) fn reason(&self, rules: &Rules) -> String {
        let duration = |ms: i64| {
            super::config::format_duration(std::time::Duration::from_millis(ms.max(0) as u64))
        };
        format!(
            "unreachable since {}, retention {} elapsed; condemned at {}, condemnation delay {} elapsed",
            self.clock_ms,
            duration(rules.retention_ms),
            self.condemned_ms,
            duration(rules.delay_ms)
        )
    }
}

/// One page of a sequence.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub(crate) struct Page {
    /// Its number in the sequence.
    pub seq: u64,
    /// The listing position after which the next page begins (listing sequences; a
    /// deletion page covers the input page of its own number).
    pub after: Option<String>,
    /// Whether the sequence is complete with this page.
    pub done: bool,
    /// The sequence's totals up to and including this page.
    pub totals: GcCounts,
    /// Metadata pass 1: unreachable metadata files to decide.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub candidates: Vec<Object>,
    /// Metadata pass 1: what they reference (rule (P)).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub referenced: Vec<String>,
    /// Metadata pass 1: references covering the file that names them (rule (P)).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub self_covering: Vec<SelfCovering>,
    /// Objects to delete, decided on this page.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub doomed: Vec<Doomed>,
    /// How many objects the sequence doomed up to and including this page.
    #[serde(default)]
    pub doomed_total: u64,
    /// Nested catalog structures found so far in the sequence.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nested: Vec<String>,
    /// What the symbolic links found so far in the sequence lead to (a local warehouse):
    /// a link names its target, which is kept while the link is there.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub linked: Vec<String>,
    /// Warnings of this page.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

/// The clocks one scan page carries (`scan/<p>/<seq>.carried.json`), or one assessed page of
/// `metadata/` (`assessed/<seq>.carried.json`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub(crate) struct CarriedPage {
    /// The first object the page listed, in the warehouse's listing order (none if the
    /// page listed no object).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first: Option<String>,
    /// The last object the page listed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last: Option<String>,
    /// Every unreachable object of the page whose retention clock stands after the run's
    /// decision, in listing order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub clocks: Vec<CarriedClock>,
}

/// One carried clock.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub(crate) struct CarriedClock {
    pub name: String,
    pub start_ms: i64,
    pub walk_ms: i64,
    /// The object's condemnation on this clock, if it has one (see
    /// [`carried`](super::carried)).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub condemned: Option<CarriedCondemnation>,
}

/// A condemnation a page carries: made at `ms`, and findable by publication through the
/// marker `marker` (the name of a file of the entry of the object's directory, see
/// [`layout::parse_marker`](crate::warehouse::layout::parse_marker)). It counts only while
/// the marker is there, from the later of `ms` and the marker's last-modified time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub(crate) struct CarriedCondemnation {
    pub ms: i64,
    pub marker: String,
}

impl CarriedPage {
    /// The page of a listing whose objects are `listed` (in listing order), carrying
    /// `clocks` (in any order), each with its condemnation if it has one.
    pub(crate) fn of(
        warehouse: &Warehouse,
        listed: &[String],
        mut clocks: Vec<(String, super::rules::Clock, Option<CarriedCondemnation>)>,
    ) -> CarriedPage {
        clocks.sort_by(|(a, ..), (b, ..)| warehouse.name_order(a, b));
        CarriedPage {
            first: listed.first().cloned(),
            last: listed.last().cloned(),
            clocks: clocks
                .into_iter()
                .map(|(name, clock, condemned)| CarriedClock {
                    name,
                    start_ms: clock.start_ms,
                    walk_ms: clock.walk_ms,
                    condemned,
                })
                .collect(),
        }
    }
}

/// One listed entry, as a page's listing keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub(crate) struct StoredItem {
    pub position: String,
    pub name: String,
    pub size: u64,
    pub last_modified_ms: i64,
    /// Why the listing skipped it (not an object the collector may touch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skipped: Option<String>,
}

impl StoredItem {
    pub(crate) fn of(entry: Positioned) -> StoredItem {
        let position = entry.position;
        match entry.item {
            ListItem::Object(listed) => StoredItem {
                position,
                name: listed.name,
                size: listed.size,
                last_modified_ms: listed.last_modified_ms,
                skipped: None,
            },
            ListItem::Skipped { name, reason } => StoredItem {
                position,
                name,
                size: 0,
                last_modified_ms: 0,
                skipped: Some(reason),
            },
        }
    }

    /// The listing item it was.
    pub(crate) fn item(&self) -> ListItem {
        match &self.skipped {
            // A name kept by an earlier version that no metadata can name is left alone.
            None => match crate::warehouse::object_name(&self.name) {
                Ok(_) => ListItem::Object(Listed {
                    name: self.name.clone(),
                    size: self.size,
                    last_modified_ms: self.last_modified_ms,
                    // A stored listing keeps the modification time only; the scan never
                    // asks when a data object landed.
                    landed_ms: self.last_modified_ms,
                }),
                Err(why) => ListItem::Skipped {
                    name: self.name.clone(),
                    reason: format!("not an object name the catalog can address: {why}"),
                },
            },
            Some(reason) => ListItem::Skipped {
                name: self.name.clone(),
                reason: reason.clone(),
            },
        }
    }
}

/// What one page listed, kept before the page is worked on: a page redone after a crash
/// works on this listing instead of listing again, so a run lists each object once.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub(crate) struct Listing {
    pub entries: Vec<StoredItem>,
    /// Whether the listing reached the end of its range.
    pub done: bool,
}

/// A walk, as stored.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub(crate) struct Walk {
    pub observation: Observation,
    /// Every nested root the scans found (verification walk only).
    #[serde(default)]
    pub nested: Vec<String>,
    /// What every symbolic link the scans found leads to (verification walk only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub linked: Vec<String>,
}

/// `referenced.json`.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub(crate) struct Referenced {
    pub names: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub self_covering: Vec<SelfCovering>,
    pub totals: GcCounts,
}

/// A sequence of pages: `metadata`, `assessed`, `scan/<p>`, `deleted/<p>`, `swept/<p>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Seq {
    Metadata,
    Assessed,
    Scan(usize),
    DeletedMetadata,
    Deleted(usize),
    SweptMetadata,
    Swept(usize),
}

impl Seq {
    pub(crate) fn dir(&self) -> String {
        match self {
            Seq::Metadata => "metadata".into(),
            Seq::Assessed => "assessed".into(),
            Seq::Scan(p) => format!("scan/{p}"),
            Seq::DeletedMetadata => "deleted/m".into(),
            Seq::Deleted(p) => format!("deleted/{p}"),
            Seq::SweptMetadata => "swept/m".into(),
            Seq::Swept(p) => format!("swept/{p}"),
        }
    }
}

/// The files of one run.
#[derive(Debug, Clone)]
pub(crate) struct Job {
    /// Where the files live: the warehouse, or a scratch one for a dry run.
    store: Warehouse,
    dir: String,
}

fn corrupt(name: &str, why: impl std::fmt::Display) -> Error {
    Error::new(
        ErrorKind::CorruptRecord,
        format!(
            "gc run state `{name}` is invalid: {why}. If it was damaged, give the run up with `parqdb-catalog gc abandon` (safe: the next run starts its retention clocks again)"
        ),
    )
}

/// Parse the plan `name` holds: a plan of a format this release resumes
/// ([`RESUMED_JOB_VERSIONS`]); `UNSUPPORTED_FORMAT_VERSION` for a plan of a newer format
/// (the run is left to the release that planned it); `CORRUPT_RECORD` for a damaged plan
/// or one of a format older than this release resumes (the run is given up).
pub(crate) fn parse_plan(name: &str, bytes: &[u8]) -> Result<Plan> {
    /// What every format's plan says first.
    #[derive(Deserialize)]
    #[serde(rename_all = "kebab-case")]
    struct Format {
        plan_version: i32,
    }
    let version = serde_json::from_slice::<Format>(bytes)
        .map_err(|err| corrupt(name, err))?
        .plan_version;
    let (oldest, newest) = (RESUMED_JOB_VERSIONS.start(), RESUMED_JOB_VERSIONS.end());
    if version > *newest {
        return Err(Error::new(
            ErrorKind::UnsupportedFormatVersion,
            format!(
                "gc run state `{name}` is of run format {version}, planned by a newer release (this one resumes formats {oldest} to {newest}): the run is left to that release and nothing is done. Deploy the release that planned it (or a later one); or give the run up with `parqdb-catalog gc abandon`, which restarts the retention clocks it recorded"
            ),
        ));
    }
    if version < *oldest {
        return Err(corrupt(
            name,
            format!(
                "run format {version} is older than this release resumes ({oldest} to {newest})"
            ),
        ));
    }
    serde_json::from_slice(bytes).map_err(|err| corrupt(name, err))
}

/// The runs whose directory holds anything, by journal (unordered): a plan, or only the
/// walk of a plan step that stopped before its plan. On a file system a directory
/// outlives the files pruned from it: only one that still holds a file counts (a write's
/// staging copy a kill left too: a walk may have been on its way; round 136, A).
pub(crate) async fn planned_runs(warehouse: &Warehouse) -> Result<Vec<JournalRef>> {
    let segments = warehouse.segments(RUNS_DIR).await?;
    let mut runs = Vec::new();
    for segment in &segments {
        let Some(run) = JournalRef::parse_suffix(segment) else {
            continue;
        };
        if warehouse.local_dir().is_some() {
            let mut files = warehouse.list(&format!("{RUNS_DIR}/{segment}"));
            if futures::StreamExt::next(&mut files)
                .await
                .transpose()?
                .is_none()
            {
                continue;
            }
        }
        runs.push(run);
    }
    Ok(runs)
}

impl Page {
    /// This page, counting its doomed objects after the `before` of earlier pages.
    pub(crate) fn counting_doomed(mut self, before: u64) -> Page {
        self.doomed_total = before + self.doomed.len() as u64;
        self
    }
}

impl Job {
    /// The files of the run with journal `journal` in `store`.
    pub(crate) fn new(store: &Warehouse, journal: JournalRef) -> Job {
        Job {
            store: store.clone(),
            dir: format!("{RUNS_DIR}/{}", journal.suffix()),
        }
    }

    /// The directory of the run's files (a name).
    pub(crate) fn dir(&self) -> &str {
        &self.dir
    }

    async fn read<T: DeserializeOwned>(&self, file: &str) -> Result<Option<T>> {
        self.read_at_most(file, u64::MAX).await
    }

    /// [`Job::read`] of a file of at most `max` bytes (a larger one is damaged).
    async fn read_at_most<T: DeserializeOwned>(&self, file: &str, max: u64) -> Result<Option<T>> {
        let name = format!("{}/{file}", self.dir);
        match self.store.get(&name, max).await? {
            Fetched::Object(bytes, _) => serde_json::from_slice(&bytes)
                .map(Some)
                .map_err(|err| corrupt(&name, err)),
            Fetched::Missing => Ok(None),
            Fetched::TooLarge(_) => Err(corrupt(&name, "too large")),
        }
    }

    /// Write `value` to `file` unless it exists; `false` if it did.
    async fn write<T: Serialize>(&self, file: &str, value: &T) -> Result<bool> {
        let name = format!("{}/{file}", self.dir);
        let bytes = serde_json::to_vec(value).map_err(|err| corrupt(&name, err))?;
        self.store.put_if_absent(&name, Bytes::from(bytes)).await
    }

    /// The run's plan, if it was written (see [`parse_plan`] for its errors).
    pub(crate) async fn plan(&self) -> Result<Option<Plan>> {
        let name = format!("{}/plan.json", self.dir);
        match self.store.get(&name, u64::MAX).await? {
            Fetched::Object(bytes, _) => parse_plan(&name, &bytes).map(Some),
            Fetched::Missing => Ok(None),
            Fetched::TooLarge(_) => Err(corrupt(&name, "too large")),
        }
    }

    pub(crate) async fn write_plan(&self, plan: &Plan) -> Result<bool> {
        self.write("plan.json", plan).await
    }

    /// Mark the run abandoned: it is never resumed.
    pub(crate) async fn abandon(&self) -> Result<()> {
        self.write("abandoned.json", &serde_json::json!({"abandoned": true}))
            .await
            .map(|_| ())
    }

    /// Whether the run was abandoned.
    pub(crate) async fn abandoned(&self) -> Result<bool> {
        Ok(self
            .store
            .head(&format!("{}/abandoned.json", self.dir))
            .await?
            .is_some())
    }

    pub(crate) async fn observed(&self) -> Result<Option<Walk>> {
        self.read("observed.json").await
    }

    pub(crate) async fn write_observed(&self, walk: &Walk) -> Result<bool> {
        self.write("observed.json", walk).await
    }

    pub(crate) async fn verified(&self) -> Result<Option<Walk>> {
        self.read("verified.json").await
    }

    pub(crate) async fn write_verified(&self, walk: &Walk) -> Result<bool> {
        self.write("verified.json", walk).await
    }

    /// Keep when a verification walk started and the family references it found naming
    /// no file, before its `verified.json` is written: whichever worker's walk that file
    /// keeps, its references are among those [`Job::dangling`] reads, and it started no
    /// earlier than the earliest start.
    pub(crate) async fn write_dangling(&self, walk: Uuid, dangling: &Dangling) -> Result<()> {
        let file = format!("{DANGLING_DIR}/{}.json", walk.simple());
        self.write(&file, dangling).await.map(|_| ())
    }

    /// What the run's verification walks found (their references together, the earliest
    /// start); `None` if none kept it (a walk of an earlier release).
    pub(crate) async fn dangling(&self) -> Result<Option<Dangling>> {
        let dir = format!("{}/{DANGLING_DIR}", self.dir);
        let mut found: Option<Dangling> = None;
        for listed in self.store.list_files(&dir).await? {
            if !is_own_file(&self.dir, &listed.name) {
                continue;
            }
            let file = listed.name[self.dir.len() + 1..].to_owned();
            if let Some(walk) = self.read::<Dangling>(&file).await? {
                let all = found.get_or_insert_with(|| Dangling {
                    walk_start_ms: walk.walk_start_ms,
                    ..Dangling::default()
                });
                all.walk_start_ms = all.walk_start_ms.min(walk.walk_start_ms);
                all.references.extend(walk.references);
                all.directories.extend(walk.directories);
            }
        }
        Ok(found)
    }

    /// Keep what the delete steps' guard has read, at `at_ms` (see `dangling`).
    pub(crate) async fn write_guard(
        &self,
        at_ms: i64,
        id: Uuid,
        guard: &super::dangling::DanglingReferences,
    ) -> Result<()> {
        let file = format!("{GUARD_DIR}/{:020}-{}.json", at_ms.max(0), id.simple());
        self.write(&file, guard).await.map(|_| ())
    }

    /// The newest [`GUARDS_READ`] files the delete steps' guard kept (each holds what its
    /// writer had read from the newest ones before it). A file that does not parse is
    /// left out: the guard reads its sources again.
    pub(crate) async fn guards(&self) -> Result<Vec<super::dangling::DanglingReferences>> {
        let dir = format!("{}/{GUARD_DIR}", self.dir);
        let mut files: Vec<String> = self
            .store
            .list_files(&dir)
            .await?
            .into_iter()
            .filter(|listed| is_own_file(&self.dir, &listed.name))
            .map(|listed| listed.name[self.dir.len() + 1..].to_owned())
            .collect();
        files.sort_unstable();
        let mut guards = Vec::new();
        for file in files.iter().rev().take(GUARDS_READ) {
            match self.read(file).await {
                Ok(Some(guard)) => guards.push(guard),
                Ok(None) => {}
                Err(err) if err.kind() == ErrorKind::CorruptRecord => {
                    tracing::warn!(file = %file, error = %err, "gc: a guard file does not parse; its sources are read again");
                }
                Err(err) => return Err(err),
            }
        }
        Ok(guards)
    }

    pub(crate) async fn referenced(&self) -> Result<Option<Referenced>> {
        self.read("referenced.json").await
    }

    pub(crate) async fn write_referenced(&self, referenced: &Referenced) -> Result<bool> {
        self.write("referenced.json", referenced).await
    }

    fn page_file(seq: &Seq, number: u64) -> String {
        format!("{}/{number:010}.json", seq.dir())
    }

    /// The numbers of a sequence's pages, ascending.
    pub(crate) async fn page_numbers(&self, seq: &Seq) -> Result<Vec<u64>> {
        let dir = format!("{}/{}", self.dir, seq.dir());
        let mut numbers: Vec<u64> = self
            .store
            .list_files(&dir)
            .await?
            .into_iter()
            .filter_map(|listed| {
                let file = listed.name.rsplit('/').next()?;
                let number: u64 = file.strip_suffix(".json")?.parse().ok()?;
                (file == format!("{number:010}.json")).then_some(number)
            })
            .collect();
        numbers.sort_unstable();
        Ok(numbers)
    }

    /// Page `number` of a sequence.
    pub(crate) async fn page(&self, seq: &Seq, number: u64) -> Result<Option<Page>> {
        self.read(&Self::page_file(seq, number)).await
    }

    /// The newest page of a sequence.
    pub(crate) async fn last_page(&self, seq: &Seq) -> Result<Option<Page>> {
        match self.page_numbers(seq).await?.last() {
            Some(number) => self.page(seq, *number).await,
            None => Ok(None),
        }
    }

    fn listing_file(seq: &Seq, number: u64) -> String {
        format!("{}/{number:010}.listed.json", seq.dir())
    }

    /// The listing of page `number` of a sequence, if it was kept.
    pub(crate) async fn listing(&self, seq: &Seq, number: u64) -> Result<Option<Listing>> {
        self.read(&Self::listing_file(seq, number)).await
    }

    /// Keep the listing of page `number`; if another worker kept one first, theirs.
    pub(crate) async fn write_listing(
        &self,
        seq: &Seq,
        number: u64,
        listing: Listing,
    ) -> Result<Listing> {
        let file = Self::listing_file(seq, number);
        if self.write(&file, &listing).await? {
            return Ok(listing);
        }
        self.read(&file)
            .await?
            .ok_or_else(|| corrupt(&format!("{}/{file}", self.dir), "vanished after a write"))
    }

    /// The newest page of each of `seqs`, read `concurrency` at a time.
    pub(crate) async fn last_pages(
        &self,
        seqs: &[Seq],
        concurrency: usize,
    ) -> Result<Vec<Option<Page>>> {
        use futures::StreamExt;
        futures::stream::iter(seqs.iter().cloned())
            .map(|seq| async move { self.last_page(&seq).await })
            .buffered(concurrency.max(1))
            .try_collect()
            .await
    }

    fn carried_file(seq: &Seq, number: u64) -> String {
        format!("{}/{number:010}.carried.json", seq.dir())
    }

    /// The clocks page `number` of a sequence carries, if they were written
    /// (`CORRUPT_RECORD` if they are damaged, or larger than `max` bytes).
    pub(crate) async fn carried(
        &self,
        seq: &Seq,
        number: u64,
        max: u64,
    ) -> Result<Option<CarriedPage>> {
        self.read_at_most(&Self::carried_file(seq, number), max)
            .await
    }

    /// The numbers of a sequence's pages that carry clocks (the page and its clocks were
    /// both written), ascending, from one listing.
    pub(crate) async fn carrying_pages(&self, seq: &Seq) -> Result<Vec<u64>> {
        let dir = format!("{}/{}", self.dir, seq.dir());
        let listed = self.store.list_files(&dir).await?;
        let names: std::collections::HashSet<&str> = listed
            .iter()
            .filter_map(|listed| listed.name.rsplit('/').next())
            .collect();
        let mut numbers: Vec<u64> = names
            .iter()
            .filter_map(|file| {
                let number: u64 = file.strip_suffix(".carried.json")?.parse().ok()?;
                let canonical = *file == format!("{number:010}.carried.json");
                (canonical && names.contains(format!("{number:010}.json").as_str()))
                    .then_some(number)
            })
            .collect();
        numbers.sort_unstable();
        Ok(numbers)
    }

    /// Write the clocks page `number` of a sequence carries, before the page itself (a
    /// page that exists has its clocks written); if another worker wrote them first, theirs
    /// stand.
    pub(crate) async fn write_carried(
        &self,
        seq: &Seq,
        number: u64,
        carried: &CarriedPage,
    ) -> Result<()> {
        self.write(&Self::carried_file(seq, number), carried)
            .await
            .map(|_| ())
    }

    /// Write `page` (its `seq` is its number); if another worker wrote that page first,
    /// return theirs instead.
    pub(crate) async fn write_page(&self, seq: &Seq, page: Page) -> Result<Page> {
        let file = Self::page_file(seq, page.seq);
        if self.write(&file, &page).await? {
            return Ok(page);
        }
        self.read(&file)
            .await?
            .ok_or_else(|| corrupt(&format!("{}/{file}", self.dir), "vanished after a write"))
    }

    /// Every file of the run (names) that the collector writes there, for pruning:
    /// nothing else under the directory is ever deleted.
    pub(crate) async fn own_files(&self) -> Result<Vec<String>> {
        let dir = self.dir.clone();
        self.store
            .list(&self.dir)
            .try_filter_map(|item| {
                let dir = dir.clone();
                async move {
                    Ok(match item {
                        ListItem::Object(listed) if is_own_file(&dir, &listed.name) => {
                            Some(listed.name)
                        }
                        _ => None,
                    })
                }
            })
            .try_collect()
            .await
    }

    /// The store the files live in.
    pub(crate) fn store(&self) -> &Warehouse {
        &self.store
    }
}

/// Where a run keeps its verification walks' dangling references.
const DANGLING_DIR: &str = "verified-dangling";

/// Where the delete steps' guard keeps what it has read.
const GUARD_DIR: &str = "guard";

/// How many of the newest guard files a delete step reads.
const GUARDS_READ: usize = 4;

/// When one verification walk started, and the family references it found naming no
/// file.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub(crate) struct Dangling {
    pub walk_start_ms: i64,
    pub references: std::collections::BTreeSet<String>,
    /// The directories whose files the walk read as family references' (listed again
    /// before every batch).
    #[serde(default, skip_serializing_if = "std::collections::BTreeSet::is_empty")]
    pub directories: std::collections::BTreeSet<String>,
}

/// Whether `name` is a file a run writes in its directory `dir`.
fn is_own_file(dir: &str, name: &str) -> bool {
    let Some(file) = name
        .strip_prefix(dir)
        .and_then(|rest| rest.strip_prefix('/'))
    else {
        return false;
    };
    if [
        "plan.json",
        "observed.json",
        "referenced.json",
        "verified.json",
        "abandoned.json",
    ]
    .contains(&file)
    {
        return true;
    }
    let parts: Vec<&str> = file.split('/').collect();
    let is_id = |id: &str| id.len() == 32 && Uuid::try_parse(id).is_ok();
    if let [DANGLING_DIR, walk] = parts.as_slice() {
        return walk.strip_suffix(".json").is_some_and(is_id);
    }
    if let [GUARD_DIR, guard] = parts.as_slice() {
        return guard
            .strip_suffix(".json")
            .and_then(|stem| stem.split_once('-'))
            .is_some_and(|(ms, id)| {
                ms.len() == 20 && ms.bytes().all(|b| b.is_ascii_digit()) && is_id(id)
            });
    }
    let page = parts.last().is_some_and(|page| {
        let stem = page.strip_suffix(".json");
        let stem = stem.map(|stem| {
            stem.strip_suffix(".listed")
                .or_else(|| stem.strip_suffix(".carried"))
                .unwrap_or(stem)
        });
        stem.is_some_and(|digits| digits.len() == 10 && digits.bytes().all(|b| b.is_ascii_digit()))
    });
    let numbered =
        |part: &str| part == "m" || part.parse::<usize>().is_ok_and(|n| n.to_string() == part);
    page && match parts.as_slice() {
        ["metadata" | "assessed", _] => true,
        ["scan", partition, _] => partition
            .parse::<usize>()
            .is_ok_and(|n| n.to_string() == *partition),
        ["deleted" | "swept", sequence, _] => numbered(sequence),
        _ => false,
    }
}

/// What a run's pages say about one partition (for `gc status`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) struct PartitionProgress {
    /// The partition's number.
    pub(crate) partition: usize,
    /// Pages scanned.
    pub(crate) scanned_pages: u64,
    /// Whether its scan is complete.
    pub(crate) scanned: bool,
    /// Pages of doomed objects processed.
    pub(crate) deleted_pages: u64,
    /// Whether its deletions are complete.
    pub(crate) deleted: bool,
    /// Whether its ledger sweep is complete.
    pub(crate) swept: bool,
    /// Objects listed so far.
    pub(crate) objects: u64,
}
/// The counts of `plan`'s run: the sum of every sequence's newest page (what a late step of
/// a finished run reports too; nothing once the run's files are pruned).
pub(crate) async fn run_totals(job: &Job, plan: &Plan, concurrency: usize) -> Result<GcCounts> {
    let mut sequences = vec![
        Seq::Metadata,
        Seq::Assessed,
        Seq::DeletedMetadata,
        Seq::SweptMetadata,
    ];
    for partition in 0..plan.partitions.len() {
        sequences.extend([
            Seq::Scan(partition),
            Seq::Deleted(partition),
            Seq::Swept(partition),
        ]);
    }
    let mut totals = GcCounts::default();
    for page in job
        .last_pages(&sequences, concurrency)
        .await?
        .into_iter()
        .flatten()
    {
        totals.merge(&page.totals);
    }
    Ok(totals)
}

#[cfg(test)]
mod formats {
    //! The run formats this release resumes, held to real runs: `tests/fixtures/gc-runs/
    //! v<N>/` keeps every file of two runs of format `N` (one that deleted metadata files,
    //! one that deleted index objects), written by the release that planned in `N`. A
    //! change to a run file's shape that this release cannot read fails here: either keep
    //! reading the old shape, or plan in a new format (`JOB_VERSION`) and keep resuming
    //! the old one (`RESUMED_JOB_VERSIONS`), adding the new format's fixture (a finished
    //! `parqdb-catalog gc` on the `demo` warehouse, run by `faketime` at +2h, +8d2h,
    //! +8d4h and +8d6h, with `--partitions 2 --page-size 5`, keeps the runs to copy from
    //! `warehouse/_gc/runs/`).

    use std::collections::BTreeSet;
    use std::path::{Path, PathBuf};

    use super::*;

    fn fixtures() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/gc-runs")
    }

    fn files(dir: &Path) -> Vec<PathBuf> {
        let mut found = Vec::new();
        for entry in std::fs::read_dir(dir).expect("fixture directory") {
            let path = entry.expect("fixture entry").path();
            if path.is_dir() {
                found.extend(files(&path));
            } else {
                found.push(path);
            }
        }
        found
    }

    /// Read one run file as this release reads it; its kind.
    fn read(run: &Path, file: &Path) -> std::result::Result<&'static str, String> {
        let name = file
            .strip_prefix(run)
            .expect("below the run")
            .to_string_lossy();
        let bytes = std::fs::read(file).map_err(|err| err.to_string())?;
        fn parse<T: DeserializeOwned>(bytes: &[u8]) -> std::result::Result<T, String> {
            serde_json::from_slice(bytes).map_err(|err| err.to_string())
        }
        let top = name.split('/').next().unwrap_or_default();
        Ok(match (top, name.as_ref()) {
            (_, "plan.json") => {
                parse_plan(&name, &bytes).map_err(|err| err.to_string())?;
                "plan"
            }
            (_, "observed.json" | "verified.json") => {
                parse::<Walk>(&bytes)?;
                "walk"
            }
            (_, "referenced.json") => {
                parse::<Referenced>(&bytes)?;
                "referenced"
            }
            (_, listed) if listed.ends_with(".listed.json") => {
                parse::<Listing>(&bytes)?;
                "listing"
            }
            (_, carried) if carried.ends_with(".carried.json") => {
                parse::<CarriedPage>(&bytes)?;
                "carried clocks"
            }
            ("metadata", _) => {
                let page: Page = parse(&bytes)?;
                if page.candidates.is_empty() {
                    "page"
                } else {
                    "metadata candidates"
                }
            }
            ("assessed" | "scan", _) => {
                let page: Page = parse(&bytes)?;
                if page.doomed.is_empty() {
                    "page"
                } else {
                    "doomed"
                }
            }
            ("deleted" | "swept", _) => {
                parse::<Page>(&bytes)?;
                "page"
            }
            _ => return Err("not a file of a run".to_owned()),
        })
    }

    #[test]
    fn every_resumed_run_format_reads_its_fixture() {
        let mut versions = BTreeSet::new();
        for entry in std::fs::read_dir(fixtures()).expect("tests/fixtures/gc-runs") {
            let dir = entry.expect("fixture entry").path();
            let version: i32 = dir
                .file_name()
                .and_then(|name| name.to_str()?.strip_prefix('v')?.parse().ok())
                .unwrap_or_else(|| panic!("{}: not a `v<N>` directory", dir.display()));
            assert!(
                RESUMED_JOB_VERSIONS.contains(&version),
                "fixture of run format {version}, which this release no longer resumes: remove it"
            );
            versions.insert(version);
            let mut kinds = BTreeSet::new();
            for run in std::fs::read_dir(&dir).expect("runs") {
                let run = run.expect("run").path();
                let plan = std::fs::read(run.join("plan.json")).expect("plan.json");
                assert_eq!(
                    parse_plan("plan.json", &plan).expect("plan").plan_version,
                    version,
                    "{}",
                    run.display()
                );
                for file in files(&run) {
                    let kind =
                        read(&run, &file).unwrap_or_else(|why| panic!("{}: {why}", file.display()));
                    kinds.insert(kind);
                }
            }
            let every = [
                "plan",
                "walk",
                "referenced",
                "listing",
                "page",
                "metadata candidates",
                "doomed",
            ];
            assert_eq!(
                kinds,
                every.into_iter().collect(),
                "the fixture of format {version} must show every kind of run file"
            );
        }
        assert_eq!(
            versions,
            RESUMED_JOB_VERSIONS.collect(),
            "every run format this release resumes needs its fixture"
        );
    }

    fn plan_of(version: i32, extra: &str) -> Vec<u8> {
        let run = std::fs::read_dir(fixtures().join(format!("v{JOB_VERSION}")))
            .expect("fixture")
            .next()
            .expect("a run")
            .expect("run")
            .path();
        let mut plan: serde_json::Value =
            serde_json::from_slice(&std::fs::read(run.join("plan.json")).expect("plan"))
                .expect("json");
        plan["plan-version"] = version.into();
        if !extra.is_empty() {
            plan[extra] = true.into();
        }
        serde_json::to_vec(&plan).expect("json")
    }

    #[test]
    fn a_plan_of_a_newer_format_is_left_alone_and_an_older_one_given_up() {
        let newer = parse_plan("plan.json", &plan_of(JOB_VERSION + 1, "a-new-field"))
            .expect_err("a newer format");
        assert_eq!(newer.kind(), ErrorKind::UnsupportedFormatVersion, "{newer}");
        assert!(newer.message().contains("left to that release"), "{newer}");
        let older = parse_plan("plan.json", &plan_of(RESUMED_JOB_VERSIONS.start() - 1, ""))
            .expect_err("an older format");
        assert_eq!(older.kind(), ErrorKind::CorruptRecord, "{older}");
        let unknown = parse_plan("plan.json", &plan_of(JOB_VERSION, "a-new-field"))
            .expect_err("an unknown field of this format");
        assert_eq!(unknown.kind(), ErrorKind::CorruptRecord, "{unknown}");
        assert!(
            parse_plan("plan.json", b"[1]")
                .is_err_and(|err| err.kind() == ErrorKind::CorruptRecord)
        );
    }
}

#[cfg(test)]
mod dangling {
    use std::collections::BTreeSet;

    use super::*;
    use crate::gc::journal::tests::journal;

    #[tokio::test]
    async fn every_verification_walks_dangling_references_are_read_and_pruned_with_the_run() {
        let warehouse = Warehouse::in_memory("memory://job/wh").expect("warehouse");
        let job = Job::new(&warehouse, journal(3, 9));
        assert_eq!(job.dangling().await.expect("none"), None);
        let first = BTreeSet::from(["metadata/a.json".to_owned()]);
        let second = BTreeSet::from(["metadata/b.json".to_owned()]);
        for (id, walk_start_ms, references) in
            [(1, 20, &first), (2, 10, &second), (3, 30, &BTreeSet::new())]
        {
            let dangling = Dangling {
                walk_start_ms,
                references: references.clone(),
                directories: references
                    .iter()
                    .map(|name| format!("{name}-dir"))
                    .collect(),
            };
            job.write_dangling(Uuid::from_u128(id), &dangling)
                .await
                .expect("written");
        }
        // A file the collector does not write there is neither read nor pruned.
        let foreign = format!("{}/{DANGLING_DIR}/notes.json", job.dir);
        warehouse
            .put_if_absent(&foreign, Bytes::from_static(b"{}"))
            .await
            .expect("foreign");
        let both = Dangling {
            walk_start_ms: 10,
            references: first.union(&second).cloned().collect(),
            directories: first
                .union(&second)
                .map(|name| format!("{name}-dir"))
                .collect(),
        };
        assert_eq!(job.dangling().await.expect("read"), Some(both));
        let own = job.own_files().await.expect("own");
        assert_eq!(own.len(), 3, "{own:?}");
        assert!(!own.contains(&foreign));
    }
}
