//! The journals of the collector's runs, and what they say about the ledger's facts.
//!
//! Every run that writes the ledger first writes `_gc/journal/<run-ms>-<run>.json`: the
//! commit id of every pointer record at its walk (the next run's
//! [`history`](super::history) explains the records it finds from these and the change
//! log). When it has finished (sweep included) it writes
//! `<run-ms>-<run>.<journal-landed-ms>.done`, naming when its journal landed (the store's
//! time); a run that gives up a dead run (killed for good, abandoned) marks it `.dead`,
//! which trusts none of its facts.
//!
//! A finish mark counts only while the journal it names still carries that landing time.
//! Every copy lands anew (an object store dates a copy when it is made; on a file system
//! the birth time, which nobody can set, is new), so a `_gc/` restored from a
//! backup, copied, or rolled back with the catalog finishes none of its runs: the restored
//! ledger's clocks are not trusted and start again at the next walk. A restore that
//! brings back the very same files (a file-system snapshot rolled back, the original tree
//! moved back) is not seen: the restore procedure's `init --adopt` starts a new epoch.
//!

use std::collections::{BTreeMap, HashMap, HashSet};

use bytes::Bytes;
use futures::TryStreamExt;
use serde::Serialize;
use uuid::Uuid;

use crate::error::Result;
use crate::warehouse::layout::JOURNAL_DIR;
use crate::warehouse::{Fetched, ListItem, Listed, Warehouse};

/// The journal of one run: its time and id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub(crate) struct JournalRef {
    pub run_ms: i64,
    pub run_id: Uuid,
}

impl JournalRef {
    /// The order of runs: by their time, then their id.
    pub(crate) fn order(&self) -> (i64, Uuid) {
        (self.run_ms, self.run_id)
    }

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
    /// Runs that wrote a journal but never finished (nor were marked dead).
    pub dead: Vec<JournalRef>,
    /// Runs whose finish mark no longer matches their journal (the journal directory was
    /// restored, copied, or had its attributes changed): over, and untrusted.
    pub stale: Vec<JournalRef>,
    /// Runs that are over: finished (whether their mark still counts or not) or marked
    /// dead. None is ever resumed.
    pub finished: HashSet<JournalRef>,
    /// Runs that finished, with when their finish mark landed (the store's time).
    pub done_at: HashMap<JournalRef, i64>,
    /// Runs whose journal exists (a mark may outlive its journal).
    pub journaled: HashSet<JournalRef>,
    /// The latest time of any journal, finished or not.
    pub latest_ms: Option<i64>,
    /// When each journal that exists landed (the store's time).
    pub landed: HashMap<JournalRef, i64>,
}

impl JournalState {
    /// Whether `run` finished late: its finish mark landed after the journal of a run
    /// ordered after it (both the store's times). Runs hold the lease in turn, so a
    /// finish mark lands before the next run plans, unless the finish was paused past
    /// its lease while a later run planned and counted it given up: that run's walk may
    /// have found reachable what the late run's facts date, and those facts may have
    /// landed after its sweep (round 140).
    pub(crate) fn finished_late(&self, run: &JournalRef) -> bool {
        let Some(done_at) = self.done_at.get(run) else {
            return false;
        };
        self.landed
            .iter()
            .any(|(later, landed)| later.order() > run.order() && landed < done_at)
    }

    /// The runs since the previous finished run whose journal is there and marked dead
    /// (or unstamped), not finished: a finish marked them and then failed, before its own
    /// finish mark.
    pub(crate) fn marked_dead(&self) -> impl Iterator<Item = &JournalRef> {
        self.finished.iter().filter(|run| {
            self.journaled.contains(run)
                && !self.done_at.contains_key(run)
                && !self.stale.contains(run)
                && self
                    .previous
                    .is_none_or(|previous| run.order() > previous.order())
        })
    }
}

/// The journal's version: 2 keeps each record's store key with its commit id.
const JOURNAL_VERSION: i32 = 2;

#[derive(Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
struct Journal {
    journal_version: i32,
    run_id: Uuid,
    now_ms: i64,
    /// Every pointer record's store key and commit id (version 2).
    #[serde(default)]
    records: BTreeMap<String, Uuid>,
    /// The commit ids of version 1 (no keys).
    #[serde(default)]
    writes: Vec<Uuid>,
    /// Records an earlier journal listed that this run's walk did not find, with the
    /// commit id last seen (see `History::vanished`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    vanished: BTreeMap<String, Uuid>,
    /// The ownership epoch the run was planned in: its marker's `created-ms` (absent in
    /// journals of earlier versions).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    epoch_ms: Option<i64>,
    /// The earliest walk a retention clock may come from, as the run's plan decided
    /// (absent in journals of earlier versions): what it voided stays void (round 133).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    floor_ms: Option<i64>,
}

/// What a run's journal says its walk saw.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct JournalFacts {
    /// Every record's store key and commit id.
    pub records: BTreeMap<String, Uuid>,
    /// Commit ids without keys (a journal of version 1).
    pub writes: HashSet<Uuid>,
    /// The journal is gone or unreadable (a torn write, a hand edit): what its run saw is
    /// unknown, so no record counts as explained by it.
    pub unknown: bool,
    /// Records that had vanished by the run's walk (a record the catalog never removes:
    /// its pointer store's disk not mounted), with the commit id last seen.
    pub vanished: BTreeMap<String, Uuid>,
    /// The run's time (its walk started then).
    pub run_ms: i64,
    /// The ownership epoch the run was planned in (`None`: a journal of an earlier
    /// version).
    pub epoch_ms: Option<i64>,
    /// The run's floor ([`Plan::floor_ms`](super::job::Plan::floor_ms); `None`: a journal
    /// of an earlier version): every clock from a walk before it was void in that run, and
    /// stays void in the next (one that run did not see, of an object it did not list,
    /// would otherwise stand again: round 133, G4).
    pub floor_ms: Option<i64>,
    /// What newer journals that no longer count list (their finish marks stale after a
    /// copy or a restore of `_gc/`, or runs that never finished): records that must still
    /// exist, with a commit id they held. Only their absence counts (filled by the plan).
    pub untrusted: BTreeMap<String, Uuid>,
    /// The warehouse was adopted since the run (filled by the plan): the records it saw
    /// that the adoption forgave (`gc::adoption`) are gone for good if missing now, not
    /// away.
    pub adopted_since: bool,
}

/// What the previous finished run saw at one key.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Seen<'a> {
    /// This commit id.
    At(Uuid),
    /// Any of these (a journal of version 1, without keys).
    AnyOf(&'a HashSet<Uuid>),
}

impl Seen<'_> {
    /// Whether the run saw `commit`.
    pub(crate) fn is(self, commit: Uuid) -> bool {
        match self {
            Seen::At(seen) => seen == commit,
            Seen::AnyOf(seen) => seen.contains(&commit),
        }
    }
}

impl JournalFacts {
    /// Take what a newer journal that no longer counts lists, the records it saw and those
    /// it had as vanished, as records that must still be there (`untrusted`).
    pub(crate) fn distrust(&mut self, newer: JournalFacts) {
        self.untrusted = newer.vanished;
        self.untrusted.extend(newer.records);
    }

    /// What the run saw at `key`.
    pub(crate) fn seen(&self, key: &str) -> Seen<'_> {
        match self.records.get(key) {
            Some(commit) => Seen::At(*commit),
            None => Seen::AnyOf(&self.writes),
        }
    }
}

/// How a journal file marks its run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mark {
    /// `<run-ms>-<run>.json`: the journal itself.
    Journal,
    /// `.<journal-landed-ms>.done`: the run finished, when its journal had landed (the
    /// store's time) at this instant.
    Done(i64),
    /// `.done` without the journal's time (an earlier version's mark): proves nothing,
    /// pruned with its journal.
    Unstamped,
    /// `.dead`: the run was given up.
    Dead,
}

/// Parse a journal file's name (`_gc/journal/<run-ms>-<run>.json`,
/// `<run-ms>-<run>.<journal-landed-ms>.done` or `<run-ms>-<run>.dead`, directly in the
/// journal directory).
fn parse_journal_file(name: &str) -> Option<(JournalRef, Mark)> {
    let file = name.strip_prefix(JOURNAL_DIR)?.strip_prefix('/')?;
    if file.contains('/') {
        return None;
    }
    let (stem, mark) = if let Some(stem) = file.strip_suffix(".json") {
        (stem, Mark::Journal)
    } else if let Some(stem) = file.strip_suffix(".done") {
        match stem.rsplit_once('.') {
            Some((stem, landed)) => {
                let landed_ms: i64 = landed.parse().ok()?;
                if landed_ms.to_string() != landed {
                    return None;
                }
                (stem, Mark::Done(landed_ms))
            }
            // A mark without the journal's time (an earlier version's) proves nothing.
            None => (stem, Mark::Unstamped),
        }
    } else {
        (file.strip_suffix(".dead")?, Mark::Dead)
    };
    JournalRef::parse_suffix(stem).map(|journal| (journal, mark))
}

/// The journals of one warehouse.
#[derive(Debug, Clone)]
pub(crate) struct Journals {
    warehouse: Warehouse,
}

impl Journals {
    pub(crate) fn new(warehouse: &Warehouse) -> Self {
        Journals {
            warehouse: warehouse.clone(),
        }
    }

    fn name(&self, journal: JournalRef) -> String {
        format!("{JOURNAL_DIR}/{}.json", journal.suffix())
    }

    /// Write this run's journal: every record's commit id at its walk, the records that
    /// had vanished, and the ownership epoch the run was planned in.
    pub(crate) async fn write(
        &self,
        journal: JournalRef,
        records: &BTreeMap<String, Uuid>,
        vanished: &BTreeMap<String, Uuid>,
        (epoch_ms, floor_ms): (Option<i64>, Option<i64>),
    ) -> Result<()> {
        let body = Journal {
            journal_version: JOURNAL_VERSION,
            run_id: journal.run_id,
            now_ms: journal.run_ms,
            records: records.clone(),
            writes: Vec::new(),
            vanished: vanished.clone(),
            epoch_ms,
            floor_ms,
        };
        let bytes = Bytes::from(serde_json::to_vec(&body).unwrap_or_default());
        self.warehouse
            .put_if_absent(&self.name(journal), bytes)
            .await
            .map(|_| ())
    }

    /// Whether a run's journal exists.
    pub(crate) async fn exists(&self, journal: JournalRef) -> Result<bool> {
        Ok(self.warehouse.head(&self.name(journal)).await?.is_some())
    }

    /// What a run starts from: the `previous` finished run's journal, and the records a
    /// newer journal that no longer counts lists (`untrusted`), as the run's plan chose
    /// them. The plan and the verification read the same facts.
    pub(crate) async fn previous_facts(
        &self,
        previous: Option<JournalRef>,
        untrusted: Option<JournalRef>,
    ) -> Result<JournalFacts> {
        let mut facts = match previous {
            Some(previous) => self.read(previous).await?,
            None => JournalFacts::default(),
        };
        if let Some(newer) = untrusted {
            facts.distrust(self.read(newer).await?);
        }
        Ok(facts)
    }

    /// What a run's journal lists; [`JournalFacts::unknown`] if it is gone or unreadable (a
    /// torn write, a hand edit): then no record counts as explained by it, and no clock
    /// from before the reading run's walk stands.
    pub(crate) async fn read(&self, journal: JournalRef) -> Result<JournalFacts> {
        let unknown = JournalFacts {
            unknown: true,
            ..JournalFacts::default()
        };
        let bytes = match self.warehouse.get(&self.name(journal), u64::MAX).await? {
            Fetched::Object(bytes, _) => bytes,
            Fetched::Missing | Fetched::TooLarge(_) => return Ok(unknown),
        };
        let Ok(body) = serde_json::from_slice::<Journal>(&bytes) else {
            return Ok(unknown);
        };
        Ok(JournalFacts {
            records: body.records,
            writes: body.writes.into_iter().collect(),
            unknown: false,
            vanished: body.vanished,
            run_ms: body.now_ms,
            epoch_ms: body.epoch_ms,
            floor_ms: body.floor_ms,
            untrusted: BTreeMap::new(),
            adopted_since: false,
        })
    }

    fn mark_name(&self, journal: JournalRef, mark: &str) -> String {
        format!("{JOURNAL_DIR}/{}.{mark}", journal.suffix())
    }

    /// Mark this run finished. The mark records when the run's journal landed (the
    /// store's time); it counts only while the journal still has that time, so a journal
    /// directory restored from a backup or copied (every copy lands anew) finishes no
    /// run, and no clock of the restored ledger is trusted (see [`JournalState`]).
    pub(crate) async fn mark_done(&self, journal: JournalRef) -> Result<()> {
        let own = self.name(journal);
        // A journal that is gone (deleted by hand) leaves a mark that proves nothing.
        let landed_ms = self
            .files()
            .await?
            .into_iter()
            .find(|file| file.name == own)
            .map_or(-1, |file| file.landed_ms);
        let mark = format!("{JOURNAL_DIR}/{}.{landed_ms}.done", journal.suffix());
        self.warehouse
            .put_if_absent(&mark, Bytes::from_static(b"{}"))
            .await
            .map(|_| ())
    }

    /// Mark a dead run given up: none of its facts is ever trusted.
    pub(crate) async fn mark_dead(&self, journal: JournalRef) -> Result<()> {
        self.warehouse
            .put_if_absent(&self.mark_name(journal, "dead"), Bytes::from_static(b"{}"))
            .await
            .map(|_| ())
    }

    /// Every file of the journal directory.
    async fn files(&self) -> Result<Vec<Listed>> {
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

    /// The latest finished run's journal, the finished runs, and the runs that wrote a
    /// journal but never finished.
    pub(crate) async fn state(&self) -> Result<JournalState> {
        let listed = self.files().await?;
        let mut landed: HashMap<JournalRef, i64> = HashMap::new();
        let mut done: Vec<(JournalRef, i64, i64)> = Vec::new();
        let mut finished = HashSet::new();
        for file in &listed {
            match parse_journal_file(&file.name) {
                Some((journal, Mark::Journal)) => {
                    landed.insert(journal, file.landed_ms);
                }
                Some((journal, Mark::Done(journal_ms))) => {
                    done.push((journal, journal_ms, file.landed_ms));
                }
                Some((journal, Mark::Dead)) => {
                    finished.insert(journal);
                }
                Some((journal, Mark::Unstamped)) => {
                    finished.insert(journal);
                }
                None => {}
            }
        }
        // A finish mark counts only while its journal still landed when the mark says:
        // a restored or copied journal directory lands anew, and finishes nothing.
        // A run with a mark that no longer counts is still over: it is never resumed nor
        // finished again (that would stamp the copy and trust everything restored with
        // it), and none of its facts is trusted.
        let mut done_at = HashMap::new();
        let mut stale = Vec::new();
        for (journal, journal_ms, mark_ms) in done {
            finished.insert(journal);
            if landed.get(&journal) == Some(&journal_ms) {
                done_at.insert(journal, mark_ms);
            } else if landed.contains_key(&journal) {
                stale.push(journal);
            }
        }
        stale.retain(|journal| !done_at.contains_key(journal));
        stale.sort_by_key(JournalRef::order);
        stale.dedup();
        let journals: HashSet<JournalRef> = landed.keys().copied().collect();
        let latest_ms = journals.iter().map(|j| j.run_ms).max();
        let previous = journals
            .iter()
            .filter(|j| done_at.contains_key(*j))
            .max_by_key(|j| j.order())
            .copied();
        let mut dead: Vec<JournalRef> = journals
            .iter()
            .filter(|j| !finished.contains(j))
            .copied()
            .collect();
        dead.sort_by_key(JournalRef::order);
        Ok(JournalState {
            previous,
            dead,
            stale,
            finished,
            done_at,
            journaled: journals,
            latest_ms,
            landed,
        })
    }

    /// Delete journals of runs before `before_ms` with their marks, but the marks of those
    /// in `listed` (runs whose directory is still there: a run without its marks would
    /// look like one no finished run counted, round 135, K1; a mark without its journal
    /// still says the run is over); returns how many. Only files this collector writes
    /// there (`<run-ms>-<run>.json`, `.<ms>.done` and `.dead`) are ever deleted.
    pub(crate) async fn prune(
        &self,
        before_ms: i64,
        listed: &HashSet<JournalRef>,
    ) -> Result<usize> {
        let old: Vec<String> = self
            .files()
            .await?
            .into_iter()
            .filter(|file| {
                parse_journal_file(&file.name).is_some_and(|(journal, mark)| {
                    journal.run_ms < before_ms
                        && (!listed.contains(&journal) || matches!(mark, Mark::Journal))
                })
            })
            .map(|file| file.name)
            .collect();
        self.warehouse.delete_own(old).await
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// The journal of run `id` at `run_ms`.
    pub(crate) fn journal(run_ms: i64, id: u128) -> JournalRef {
        JournalRef {
            run_ms,
            run_id: Uuid::from_u128(id),
        }
    }

    #[test]
    fn only_the_collectors_own_journal_files_are_recognised() {
        let journal = journal(5, 7);
        for (file, mark) in [
            (
                format!("{JOURNAL_DIR}/{}.json", journal.suffix()),
                Mark::Journal,
            ),
            (
                format!("{JOURNAL_DIR}/{}.1700000000123.done", journal.suffix()),
                Mark::Done(1_700_000_000_123),
            ),
            (
                format!("{JOURNAL_DIR}/{}.dead", journal.suffix()),
                Mark::Dead,
            ),
            // An earlier version's mark, without the journal's time, proves nothing.
            (
                format!("{JOURNAL_DIR}/{}.done", journal.suffix()),
                Mark::Unstamped,
            ),
        ] {
            assert_eq!(parse_journal_file(&file), Some((journal, mark)));
        }
        for foreign in [
            format!("{JOURNAL_DIR}/t/{}.json", journal.suffix()),
            format!("{JOURNAL_DIR}/t/ivf_postings/00000-0-data.parquet"),
            format!("{JOURNAL_DIR}/0-part.parquet"),
            format!("{JOURNAL_DIR}/{}.01.done", journal.suffix()),
        ] {
            assert_eq!(parse_journal_file(&foreign), None, "{foreign}");
        }
    }

    /// Round 140: a run whose finish mark landed after the journal of a later run (its
    /// finish paused past its lease while that run planned) finished late; a mark that
    /// landed before every later journal did not, and nor did a run that never finished.
    #[test]
    fn a_finish_mark_landing_after_a_later_runs_journal_is_late() {
        let (early, late, later) = (journal(100, 1), journal(200, 2), journal(300, 3));
        let state = JournalState {
            landed: [(early, 101), (late, 201), (later, 301)].into(),
            done_at: [(early, 150), (late, 350)].into(),
            ..JournalState::default()
        };
        assert!(!state.finished_late(&early));
        assert!(state.finished_late(&late));
        assert!(!state.finished_late(&later));
    }

    /// Found by the second issue-26 attack: a warehouse restored from a backup (catalog
    /// and `_gc/` together) rolled the journals back with the records, so the restored
    /// ledger's clocks stood as if nothing had happened since the backup. A restored
    /// journal lands anew, and its run's finish mark no longer counts.
    #[tokio::test]
    async fn a_restored_journal_finishes_nothing() {
        let warehouse = Warehouse::in_memory("memory://restore/wh").expect("warehouse");
        let journals = Journals::new(&warehouse);
        let (first, second) = (journal(100, 1), journal(200, 2));
        for run in [first, second] {
            journals
                .write(run, &BTreeMap::new(), &BTreeMap::new(), (None, None))
                .await
                .expect("written");
            journals.mark_done(run).await.expect("done");
        }
        let state = journals.state().await.expect("state");
        assert_eq!(state.previous, Some(second));
        assert!(state.done_at.contains_key(&first) && state.dead.is_empty());
        // The backup is copied back over the journal directory: every copy lands anew
        // (copied again until the store's millisecond clock has moved on).
        for file in journals.files().await.expect("listed") {
            let Fetched::Object(bytes, _) =
                warehouse.get(&file.name, u64::MAX).await.expect("read")
            else {
                panic!("{} is there", file.name);
            };
            loop {
                warehouse
                    .overwrite(&file.name, bytes.clone())
                    .await
                    .expect("restored");
                let copy = warehouse
                    .head(&file.name)
                    .await
                    .expect("head")
                    .expect("there");
                if copy.landed_ms != file.landed_ms {
                    break;
                }
            }
        }
        let state = journals.state().await.expect("state");
        assert_eq!(state.previous, None, "no restored run counts as finished");
        assert!(state.done_at.is_empty(), "{:?}", state.done_at);
        assert_eq!(state.stale, vec![first, second]);
        // Nor is a restored run resumed and finished again, which would stamp the copy.
        assert!(state.dead.is_empty(), "{:?}", state.dead);
        assert!(state.finished.contains(&first) && state.finished.contains(&second));
    }

    #[tokio::test]
    async fn journals_round_trip_and_are_pruned() {
        let warehouse = Warehouse::in_memory("memory://journal/wh").expect("warehouse");
        let journals = Journals::new(&warehouse);
        let (old, new, given_up) = (journal(100, 1), journal(200, 2), journal(150, 3));
        let records = BTreeMap::from([
            ("i/a".to_owned(), Uuid::from_u128(9)),
            ("i/b".to_owned(), Uuid::from_u128(8)),
        ]);
        journals
            .write(old, &records, &BTreeMap::new(), (Some(7), Some(5)))
            .await
            .expect("written");
        journals
            .write(new, &BTreeMap::new(), &BTreeMap::new(), (None, None))
            .await
            .expect("written");
        journals
            .write(given_up, &BTreeMap::new(), &BTreeMap::new(), (None, None))
            .await
            .expect("written");
        assert_eq!(
            journals.read(old).await.expect("read"),
            JournalFacts {
                records: records.clone(),
                writes: HashSet::new(),
                unknown: false,
                vanished: BTreeMap::new(),
                run_ms: old.run_ms,
                epoch_ms: Some(7),
                floor_ms: Some(5),
                untrusted: BTreeMap::new(),
                adopted_since: false,
            }
        );
        let state = journals.state().await.expect("state");
        assert_eq!(
            (state.previous, state.dead.clone()),
            (None, vec![old, given_up, new])
        );
        journals.mark_done(old).await.expect("done");
        journals.mark_dead(given_up).await.expect("dead");
        let state = journals.state().await.expect("state");
        assert_eq!((state.previous, state.dead), (Some(old), vec![new]));
        assert!(state.done_at.contains_key(&old));
        assert!(
            !state.done_at.contains_key(&given_up),
            "a dead run is not trusted"
        );
        assert!(state.finished.contains(&given_up));
        // A run whose directory is still there keeps its marks (not its journal).
        let listed = HashSet::from([given_up]);
        assert_eq!(journals.prune(180, &listed).await.expect("pruned"), 3);
        assert!(
            journals
                .state()
                .await
                .expect("state")
                .finished
                .contains(&given_up)
        );
        assert_eq!(
            journals.prune(180, &HashSet::new()).await.expect("pruned"),
            1
        );
        let missing = journals.read(old).await.expect("read");
        assert!(
            missing.unknown && missing.records.is_empty(),
            "a missing journal is unknown: {missing:?}"
        );
        journals
            .warehouse
            .overwrite(&journals.name(new), Bytes::new())
            .await
            .expect("truncated");
        assert!(
            journals.read(new).await.expect("read").unknown,
            "an empty (torn) journal is unknown, not an error"
        );
    }
}
