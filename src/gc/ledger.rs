//! The durable GC ledger: when each unreachable object was first known unreachable, and
//! when it was condemned.
//!
//! The ledger mirrors the managed tree under `<root>/_gc/ledger/`: the entry of object
//! `indexes/a/1/ivf_postings/part-0` is the directory
//! `_gc/ledger/indexes/a/1/ivf_postings/part-0/`. The mirror can hold an entry for every
//! object the warehouse can hold (on a file system, an object is a file and therefore
//! never also a directory). An entry is a set of immutable files, each written with
//! create-if-absent, whose names carry the facts so one listing reads a whole entry:
//!
//! * `u-<ms>-<run-ms>-<run>.json` — the retention clock of the object starts at `<ms>`;
//!   run `<run>` (at `<run-ms>`) wrote it, and its journal lists the identifier
//!   incarnations that existed then (see below);
//! * `c-<ms>-<run-ms>-<run>.json` — the object was condemned at `<ms>`.
//!
//! # The journal
//! Every run that writes the ledger first writes `_gc/journal/<run-ms>-<run>.json`: the
//! `created-by` id of every pointer record's incarnation at its walk; when it has finished
//! (sweep included) it writes `<run-ms>-<run>.done`. Every completed run has looked at
//! every ledger entry, cleared those of reachable objects and raised the clocks evidence
//! demanded; so an incarnation listed by the previous completed run's journal existed while
//! every tracked object was unreachable, and cannot publish one later (within an
//! incarnation, commits only move forward). Only incarnations missing from that journal
//! can move a metadata file's clock (see the module docs of [`crate::gc`]).
//!
//! A journal without `.done` belongs to a run that died (or failed) after it may have seen
//! tracked objects reachable without clearing their entries. The next run therefore
//! treats every existing entry as seen reachable at its own start (raising the clocks),
//! and acknowledges the dead run with a `.done` once it has finished itself.
//!
//! Several files of a kind (two runs raced, or new evidence raised the clock) combine by
//! taking the **largest** value, which is always the conservative reading: a later clock
//! start and a later condemnation both delay deletion. A condemnation counts only if it was
//! made after the retention window of the current clock had passed, so raising the clock
//! voids older condemnations without rewriting them. An entry is cleared (its files
//! deleted) when its object is reachable again or gone. A lost entry (a crash between
//! deleting its files) is harmless: the next run starts a fresh, later clock.

use std::collections::HashSet;

use bytes::Bytes;
use futures::TryStreamExt;
use futures::stream::BoxStream;
use serde::Serialize;
use uuid::Uuid;

use crate::error::{Error, ErrorKind, Result};
use crate::warehouse::{Fetched, ListItem, ListRange, Listed, Positioned, Warehouse};

/// The ledger directory under the warehouse root.
pub const LEDGER_DIR: &str = "_gc/ledger";

const LEDGER_VERSION: i32 = 1;

/// The journal of one run: its time and id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub(crate) struct JournalRef {
    pub run_ms: i64,
    pub run_id: Uuid,
}

impl JournalRef {
    /// `<run-ms>-<run>`: how the run's files are named.
    pub(crate) fn suffix(&self) -> String {
        format!("{}-{}", self.run_ms.max(0), self.run_id.simple())
    }

    /// The journal a suffix names, if it is one this collector writes.
    pub(crate) fn parse_suffix(stem: &str) -> Option<JournalRef> {
        let (run_ms, run) = stem.split_once('-')?;
        let journal = JournalRef {
            run_ms: run_ms.parse().ok()?,
            run_id: Uuid::try_parse(run).ok()?,
        };
        (journal.suffix() == stem).then_some(journal)
    }
}

/// What the journals say at the start of a run.
#[derive(Debug, Default)]
pub(crate) struct JournalState {
    /// The latest finished run.
    pub previous: Option<JournalRef>,
    /// Runs that wrote a journal but never finished.
    pub dead: Vec<JournalRef>,
    /// Runs that finished (or were acknowledged as dead by a finished run).
    pub finished: HashSet<JournalRef>,
    /// Runs whose journal exists (a `.done` mark may outlive its journal).
    pub journaled: HashSet<JournalRef>,
    /// The latest time of any journal, finished or not.
    pub latest_ms: Option<i64>,
}

/// The journal directory under the warehouse root.
pub const JOURNAL_DIR: &str = "_gc/journal";

#[derive(Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
struct Journal {
    journal_version: i32,
    run_id: Uuid,
    now_ms: i64,
    incarnations: Vec<Uuid>,
    /// The latest write (`commit-id`) of every pointer record; absent in journals of
    /// earlier versions (read as none: conservative).
    #[serde(default)]
    writes: Vec<Uuid>,
}

/// What a run's journal says its walk saw.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct JournalFacts {
    /// The `created-by` of every pointer record: the incarnations that existed.
    pub incarnations: HashSet<Uuid>,
    /// The `commit-id` of every pointer record: each record's state as the walk saw it.
    pub writes: HashSet<Uuid>,
}

impl JournalFacts {
    /// What both journals list.
    pub(crate) fn intersection(&self, other: &JournalFacts) -> JournalFacts {
        JournalFacts {
            incarnations: self
                .incarnations
                .intersection(&other.incarnations)
                .copied()
                .collect(),
            writes: self.writes.intersection(&other.writes).copied().collect(),
        }
    }
}

fn sorted(ids: &HashSet<Uuid>) -> Vec<Uuid> {
    let mut ids: Vec<Uuid> = ids.iter().copied().collect();
    ids.sort();
    ids
}

/// One object's ledger entry as read.
#[derive(Debug, Default, Clone)]
pub(crate) struct Entry {
    /// When the object's retention clock started (largest recorded).
    pub clock_start_ms: Option<i64>,
    /// The journal of the run that recorded that clock.
    pub clock_journal: Option<JournalRef>,
    /// When the object was last condemned (largest recorded).
    pub condemned_ms: Option<i64>,
    /// The entry's files (names).
    pub files: Vec<String>,
}

/// The kind of an entry file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// `u-<ms>`: the retention clock starts at `ms`.
    Clock,
    /// `c-<ms>`: condemned at `ms`.
    Condemned,
}

impl Kind {
    fn tag(self) -> &'static str {
        match self {
            Kind::Clock => "u",
            Kind::Condemned => "c",
        }
    }
}

#[derive(Serialize)]
#[serde(rename_all = "kebab-case")]
struct EntryFile<'a> {
    ledger_version: i32,
    object: &'a str,
    kind: &'static str,
    ms: i64,
    run_id: Uuid,
    reason: &'a str,
}

/// The ledger of one warehouse.
#[derive(Debug, Clone)]
pub(crate) struct Ledger {
    warehouse: Warehouse,
}

/// The latest condemnation of the object `name`, if its ledger entry holds any. Register
/// and commit refuse to publish a condemned object (see `catalog::publication`).
pub(crate) async fn condemnation(warehouse: &Warehouse, name: &str) -> Result<Option<i64>> {
    Ok(Ledger::new(warehouse).read(name).await?.condemned_ms)
}

/// Parse an entry file name: `<u|c>-<ms>-<run-ms>-<run>.json`.
fn parse_name(name: &str) -> Option<(Kind, i64, JournalRef)> {
    let stem = name.strip_suffix(".json")?;
    let mut parts = stem.split('-');
    let kind = match parts.next()? {
        "u" => Kind::Clock,
        "c" => Kind::Condemned,
        _ => return None,
    };
    let ms = parts.next()?.parse().ok()?;
    let run_ms = parts.next()?.parse().ok()?;
    let run_id = Uuid::try_parse(parts.next()?).ok()?;
    if parts.next().is_some() {
        return None;
    }
    Some((kind, ms, JournalRef { run_ms, run_id }))
}

/// Parse a journal file's name (`_gc/journal/<run-ms>-<run>.json` or `.done`, directly in
/// the journal directory): the journal and whether it is the `.done` mark.
fn parse_journal_file(name: &str) -> Option<(JournalRef, bool)> {
    let file = name.strip_prefix(JOURNAL_DIR)?.strip_prefix('/')?;
    if file.contains('/') {
        return None;
    }
    let (stem, done) = match file.strip_suffix(".json") {
        Some(stem) => (stem, false),
        None => (file.strip_suffix(".done")?, true),
    };
    JournalRef::parse_suffix(stem).map(|journal| (journal, done))
}

fn file_name(name: &str) -> &str {
    name.rsplit('/').next().unwrap_or(name)
}

impl Ledger {
    pub(crate) fn new(warehouse: &Warehouse) -> Self {
        Ledger {
            warehouse: warehouse.clone(),
        }
    }

    fn dir(&self, object: &str) -> String {
        format!("{LEDGER_DIR}/{object}")
    }

    /// The entry of the object `object` (empty if none).
    pub(crate) async fn read(&self, object: &str) -> Result<Entry> {
        let listed = self.warehouse.list_files(&self.dir(object)).await?;
        let mut entry = Entry::default();
        for file in listed {
            match parse_name(file_name(&file.name)) {
                // The largest clock; of equal ones, the one the latest run recorded (it
                // knew the most).
                Some((Kind::Clock, ms, journal))
                    if entry.clock_start_ms.zip(entry.clock_journal).is_none_or(
                        |(current, by)| {
                            (ms, journal.run_ms, journal.run_id) > (current, by.run_ms, by.run_id)
                        },
                    ) =>
                {
                    entry.clock_start_ms = Some(ms);
                    entry.clock_journal = Some(journal);
                }
                // A condemnation counts from when it became visible: its stamp, or the store's
                // time of the write if that is later (a slow or retried write must not let
                // the condemnation delay start before anyone could see it).
                Some((Kind::Condemned, ms, _))
                    if entry
                        .condemned_ms
                        .is_none_or(|current| ms.max(file.last_modified_ms) > current) =>
                {
                    entry.condemned_ms = Some(ms.max(file.last_modified_ms));
                }
                Some(_) => {}
                // Not a file this collector writes: never part of an entry, never deleted.
                None => continue,
            }
            entry.files.push(file.name);
        }
        Ok(entry)
    }

    /// Record a fact about `object` (create-if-absent; an identical fact is a no-op) and
    /// return the file that holds it.
    pub(crate) async fn record(
        &self,
        object: &str,
        kind: Kind,
        ms: i64,
        journal: JournalRef,
        reason: &str,
    ) -> Result<String> {
        let ms = ms.max(0);
        let file = format!(
            "{}/{}-{ms}-{}.json",
            self.dir(object),
            kind.tag(),
            journal.suffix()
        );
        let body = EntryFile {
            ledger_version: LEDGER_VERSION,
            object,
            kind: kind.tag(),
            ms,
            run_id: journal.run_id,
            reason,
        };
        let bytes = Bytes::from(serde_json::to_vec(&body).unwrap_or_default());
        self.warehouse.put_if_absent(&file, bytes).await?;
        Ok(file)
    }

    fn journal_name(&self, journal: JournalRef) -> String {
        format!("{JOURNAL_DIR}/{}.json", journal.suffix())
    }

    /// Write this run's journal: the incarnations and record states that exist now.
    pub(crate) async fn write_journal(
        &self,
        journal: JournalRef,
        facts: &JournalFacts,
    ) -> Result<()> {
        let body = Journal {
            journal_version: LEDGER_VERSION,
            run_id: journal.run_id,
            now_ms: journal.run_ms,
            incarnations: sorted(&facts.incarnations),
            writes: sorted(&facts.writes),
        };
        let bytes = Bytes::from(serde_json::to_vec(&body).unwrap_or_default());
        self.warehouse
            .put_if_absent(&self.journal_name(journal), bytes)
            .await
            .map(|_| ())
    }

    /// Whether a run's journal exists.
    pub(crate) async fn journal_exists(&self, journal: JournalRef) -> Result<bool> {
        Ok(self
            .warehouse
            .head(&self.journal_name(journal))
            .await?
            .is_some())
    }

    /// What a run's journal lists (nothing if it is gone: conservative).
    pub(crate) async fn read_journal(&self, journal: JournalRef) -> Result<JournalFacts> {
        let bytes = match self
            .warehouse
            .get(&self.journal_name(journal), u64::MAX)
            .await?
        {
            Fetched::Object(bytes, _) => bytes,
            Fetched::Missing | Fetched::TooLarge(_) => return Ok(JournalFacts::default()),
        };
        let body: Journal = serde_json::from_slice(&bytes).map_err(|err| {
            Error::new(
                ErrorKind::CorruptRecord,
                format!("gc journal {} is invalid: {err}", journal.suffix()),
            )
        })?;
        Ok(JournalFacts {
            incarnations: body.incarnations.into_iter().collect(),
            writes: body.writes.into_iter().collect(),
        })
    }

    fn done_name(&self, journal: JournalRef) -> String {
        format!("{JOURNAL_DIR}/{}.done", journal.suffix())
    }

    /// Mark a run finished (its own, or a dead one acknowledged).
    pub(crate) async fn mark_done(&self, journal: JournalRef) -> Result<()> {
        self.warehouse
            .put_if_absent(&self.done_name(journal), Bytes::from_static(b"{}"))
            .await
            .map(|_| ())
    }

    /// Every file of the journal directory.
    async fn journal_files(&self) -> Result<Vec<Listed>> {
        self.warehouse
            .list(JOURNAL_DIR)
            .try_filter_map(|item| async move {
                Ok(match item {
                    ListItem::Object(listed) => Some(listed),
                    ListItem::Skipped { .. } => None,
                })
            })
            .try_collect()
            .await
    }

    /// The latest finished run's journal, and the runs that wrote a journal but never
    /// finished.
    pub(crate) async fn journal_state(&self) -> Result<JournalState> {
        let listed = self.journal_files().await?;
        let mut journals = HashSet::new();
        let mut done = HashSet::new();
        for file in &listed {
            match parse_journal_file(&file.name) {
                Some((journal, false)) => {
                    journals.insert(journal);
                }
                Some((journal, true)) => {
                    done.insert(journal);
                }
                None => {}
            }
        }
        let latest_ms = journals.iter().map(|j| j.run_ms).max();
        let previous = journals
            .iter()
            .filter(|j| done.contains(*j))
            .max_by_key(|j| (j.run_ms, j.run_id))
            .copied();
        let mut dead: Vec<JournalRef> = journals
            .iter()
            .filter(|j| !done.contains(j))
            .copied()
            .collect();
        dead.sort_by_key(|j| (j.run_ms, j.run_id));
        Ok(JournalState {
            previous,
            dead,
            latest_ms,
            finished: done,
            journaled: journals,
        })
    }

    /// Delete journals of runs before `before_ms`; returns how many. Only files this
    /// collector writes there (`<run-ms>-<run>.json` and `.done`) are ever deleted.
    pub(crate) async fn prune_journals(&self, before_ms: i64) -> Result<usize> {
        let old: Vec<String> = self
            .journal_files()
            .await?
            .into_iter()
            .filter(|file| {
                parse_journal_file(&file.name)
                    .is_some_and(|(journal, _)| journal.run_ms < before_ms)
            })
            .map(|file| file.name)
            .collect();
        self.delete(old).await
    }

    /// Every ledger file, streamed.
    pub(crate) fn list(&self) -> BoxStream<'static, Result<ListItem>> {
        self.warehouse.list(LEDGER_DIR)
    }

    /// The ledger entries of the objects of `range` (a range of a managed prefix), after
    /// the position `after`: the same bounds below the ledger's mirror of that prefix.
    pub(crate) fn list_range(
        &self,
        range: &ListRange,
        after: Option<&str>,
    ) -> BoxStream<'static, Result<Positioned>> {
        let mirrored = range.under(&format!("{LEDGER_DIR}/{}", range.prefix));
        self.warehouse.list_range(&mirrored, after)
    }

    /// The object a ledger file belongs to; `None` for a file this collector does not
    /// write (the sweep never deletes those).
    pub(crate) fn object_of(&self, file: &str) -> Option<String> {
        let relative = file.strip_prefix(LEDGER_DIR)?.strip_prefix('/')?;
        let (object, name) = relative.rsplit_once('/')?;
        parse_name(name)?;
        Some(object.to_owned())
    }

    /// Delete ledger entry files and journals (missing ones are fine); returns how many
    /// are gone. Only names of files this collector writes there are deleted, whoever
    /// passes them (a name read back from a run's state included).
    pub(crate) async fn delete(&self, files: Vec<String>) -> Result<usize> {
        let (own, foreign): (Vec<String>, Vec<String>) = files
            .into_iter()
            .partition(|name| self.object_of(name).is_some() || parse_journal_file(name).is_some());
        for name in foreign {
            tracing::warn!(file = %name, "gc: not deleting a file that is no ledger entry or journal");
        }
        delete_own(&self.warehouse, own).await
    }
}

/// Delete files the collector wrote under `_gc/` (missing ones are fine); how many are
/// gone.
pub(crate) async fn delete_own(warehouse: &Warehouse, files: Vec<String>) -> Result<usize> {
    if files.is_empty() {
        return Ok(0);
    }
    let mut deleted = 0;
    for (name, outcome) in warehouse.delete(files).await {
        match outcome {
            crate::warehouse::Deletion::Deleted | crate::warehouse::Deletion::Missing => {
                deleted += 1
            }
            crate::warehouse::Deletion::Refused(why) => {
                tracing::warn!(file = %name, reason = %why, "gc file not deleted");
            }
            crate::warehouse::Deletion::Failed(err) => return Err(err),
        }
    }
    Ok(deleted)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_file_names_parse() {
        let run = Uuid::from_u128(7);
        let journal = JournalRef {
            run_ms: 5,
            run_id: run,
        };
        let name = format!("u-17-{}.json", journal.suffix());
        assert_eq!(parse_name(&name), Some((Kind::Clock, 17, journal)));
        assert_eq!(
            parse_name(&format!("c-0-{}.json", journal.suffix())),
            Some((Kind::Condemned, 0, journal))
        );
        assert_eq!(
            parse_name("x-1-5-00000000000000000000000000000007.json"),
            None
        );
        assert_eq!(parse_name("u-1.json"), None);
        assert_eq!(
            parse_name("u-a-5-00000000000000000000000000000007.json"),
            None
        );
    }

    #[test]
    fn only_the_collectors_own_files_are_recognised() {
        let journal = JournalRef {
            run_ms: 5,
            run_id: Uuid::from_u128(7),
        };
        let json = format!("{JOURNAL_DIR}/{}.json", journal.suffix());
        let done = format!("{JOURNAL_DIR}/{}.done", journal.suffix());
        assert_eq!(parse_journal_file(&json), Some((journal, false)));
        assert_eq!(parse_journal_file(&done), Some((journal, true)));
        for foreign in [
            format!("{JOURNAL_DIR}/t/{}.json", journal.suffix()),
            format!("{JOURNAL_DIR}/t/ivf_postings/00000-0-data.parquet"),
            format!("{JOURNAL_DIR}/0-part.parquet"),
        ] {
            assert_eq!(parse_journal_file(&foreign), None, "{foreign}");
        }
        let warehouse = Warehouse::in_memory("memory://own/wh").expect("warehouse");
        let ledger = Ledger::new(&warehouse);
        let entry = format!("{LEDGER_DIR}/indexes/a/u-1-{}.json", journal.suffix());
        assert_eq!(ledger.object_of(&entry).as_deref(), Some("indexes/a"));
        assert_eq!(
            ledger.object_of(&format!("{LEDGER_DIR}/t/ivf_centroids/part-0.parquet")),
            None
        );
    }

    #[tokio::test]
    async fn entries_combine_by_the_largest_value() {
        let warehouse = Warehouse::in_memory("memory://ledger/wh").expect("warehouse");
        let ledger = Ledger::new(&warehouse);
        let first = JournalRef {
            run_ms: 1,
            run_id: Uuid::from_u128(1),
        };
        let second = JournalRef {
            run_ms: 2,
            run_id: Uuid::from_u128(2),
        };
        let object = "indexes/a/1/ivf_postings/part-0";
        assert!(
            ledger
                .read(object)
                .await
                .expect("read")
                .clock_start_ms
                .is_none()
        );
        ledger
            .record(object, Kind::Clock, 10, first, "seen")
            .await
            .expect("clock");
        ledger
            .record(object, Kind::Clock, 30, second, "raised")
            .await
            .expect("clock");
        ledger
            .record(object, Kind::Clock, 30, second, "again")
            .await
            .expect("idempotent");
        // The in-memory store stamps last-modified times from the wall clock.
        let before_condemning = crate::clock::Clock::now_ms(&crate::clock::SystemClock);
        ledger
            .record(object, Kind::Condemned, 50, second, "condemned")
            .await
            .expect("condemn");
        // A child object's entry is not part of its parent's.
        ledger
            .record(&format!("{object}/x"), Kind::Clock, 99, first, "child")
            .await
            .expect("child");
        let entry = ledger.read(object).await.expect("read");
        assert_eq!(entry.clock_start_ms, Some(30));
        assert_eq!(entry.clock_journal, Some(second));
        // A condemnation counts from when it became visible (the file's last-modified
        // time), never from an earlier stamp.
        assert!(
            entry.condemned_ms.is_some_and(|ms| ms >= before_condemning),
            "{entry:?}"
        );
        assert_eq!(entry.files.len(), 3);
        assert_eq!(ledger.object_of(&entry.files[0]).as_deref(), Some(object));
        assert_eq!(ledger.delete(entry.files).await.expect("deleted"), 3);
        assert!(ledger.read(object).await.expect("read").files.is_empty());
    }

    #[tokio::test]
    async fn journals_round_trip_and_are_pruned() {
        let warehouse = Warehouse::in_memory("memory://journal/wh").expect("warehouse");
        let ledger = Ledger::new(&warehouse);
        let old = JournalRef {
            run_ms: 100,
            run_id: Uuid::from_u128(1),
        };
        let new = JournalRef {
            run_ms: 200,
            run_id: Uuid::from_u128(2),
        };
        let facts = JournalFacts {
            incarnations: [Uuid::from_u128(9), Uuid::from_u128(8)].into(),
            writes: [Uuid::from_u128(7)].into(),
        };
        ledger.write_journal(old, &facts).await.expect("written");
        ledger
            .write_journal(new, &JournalFacts::default())
            .await
            .expect("written");
        assert_eq!(ledger.read_journal(old).await.expect("read"), facts);
        let state = ledger.journal_state().await.expect("state");
        assert_eq!((state.previous, state.dead.clone()), (None, vec![old, new]));
        ledger.mark_done(old).await.expect("done");
        let state = ledger.journal_state().await.expect("state");
        assert_eq!((state.previous, state.dead), (Some(old), vec![new]));
        assert_eq!(ledger.prune_journals(150).await.expect("pruned"), 2);
        assert_eq!(
            ledger.read_journal(old).await.expect("read"),
            JournalFacts::default(),
            "a missing journal lists nothing"
        );
        assert_eq!(
            ledger.read_journal(new).await.expect("read"),
            JournalFacts::default()
        );
    }
}
