//! The durable GC ledger: when each unreachable object's retention clock started, and when
//! it was condemned.
//!
//! The ledger mirrors the managed tree under `<root>/_gc/ledger/`: the entry of object
//! `indexes/a/1/ivf_postings/part-0` is the directory
//! `_gc/ledger/indexes/a/1/ivf_postings/part-0/`. The mirror can hold an entry for every
//! object the warehouse can hold (on a file system, an object is a file and therefore
//! never also a directory). An entry is a set of immutable files, each written with
//! create-if-absent, whose names carry the facts so one listing reads a whole entry:
//!
//! * `o-<clock>-<walk>-<run-ms>-<run>.json` — the walk that started at `<walk>` and ended
//!   at `<clock>` found the object unreachable: its retention clock starts at `<clock>`
//!   (see [`rules`](super::rules) for when it stands). Run `<run>` (at `<run-ms>`) wrote
//!   it; it is **trusted** only while it is that run's own, or once the run has finished
//!   and if it landed before the run's finish mark (the store's times): a fact of a run
//!   that died, or written by an invocation of a run that landed after the run finished,
//!   was never looked at by the runs that came after, and counts for nothing;
//! * `c-<ms>-<run-ms>-<run>.json` — the object was condemned at `<ms>` (or when the file
//!   landed, if later);
//! * `u-<ms>-<run-ms>-<run>.json` — a clock of an earlier version (dated by rules that
//!   could date a loss too early): never trusted, cleared by the sweep.
//!
//! Which facts are trusted depends on the runs' journals (the `journal` submodule).
//!
//! Several files of a kind combine by taking the **largest** value, which is always the
//! conservative reading: a later clock start and a later condemnation both delay
//! deletion. A condemnation counts only if it was made after the retention window of the
//! current clock had passed, so a new clock voids older condemnations without rewriting
//! them. An entry is cleared (its files deleted) when its object is reachable again or
//! gone — but the entry of an object gone with a condemnation stays until the deletion's
//! record releases it (`release`: the grace period after the deletes, so publication goes
//! on refusing what a writer picked up before they happened) or, without a record, until
//! the condemnation expires ([`rules::CONDEMNATION_HORIZON_MS`](super::rules::CONDEMNATION_HORIZON_MS)).
//! A lost entry (a crash between deleting its files) is harmless: the next run starts a
//! fresh, later clock.
//!
//! The clocks of `indexes/` are carried on the scan's pages instead (see
//! [`carried`](super::carried)): the scan writes no clock file, and an entry's clock is the
//! later of its trusted clock files (of `metadata/`, or written by an earlier release) and
//! the clock the previous finished run carried for its object.
//!
//! So are their condemnations (issue 29, step B2): a scan page that condemns objects of
//! `indexes/` writes, for each directory holding some, one **condemnation marker**
//! `n-<ms>-<run-ms>-<run>-<page>.json` in that directory's entry, whose body lists the
//! base names it condemns (what publication reads, [`layout`](crate::warehouse::layout)),
//! then carries each condemnation with its clock (`ms` and the marker's name). The next
//! run counts a carried condemnation only while its marker is there, from the later of
//! `ms` and the marker's last-modified time (publication could not see it before), and
//! carries it on while its clock stands. A marker is no fact of its directory as an
//! object: entry readers skip it. It goes when releasing a deletion's record finds every
//! name it lists deleted with that record (`release`), or, failing that, when the sweep
//! finds its condemnation expired; until then publication refuses its names (a name
//! condemned and then reachable again too: the conservative reading). A page written
//! twice (a killed invocation's page redone) leaves a marker no page carries: it refuses
//! its names until it expires, and counts for nothing else.
//!
//! # Reading it at the cost of a listing
//! A run never asks for one entry at a time: the scan reads the entries of each page of
//! objects it lists with one ranged listing of the mirror (`Ledger::read_page`: one
//! request per 1,000 ledger files), and the same listing shows the entries of objects the
//! page no longer holds, which it clears. The sweep after the deletes lists the mirror
//! once more for the objects reachable at either walk. Only publication asks for one
//! entry, the condemnation of the file it publishes (`Warehouse::condemnation`, in the
//! warehouse layout).

use std::collections::{BTreeMap, HashMap, HashSet};

use bytes::Bytes;
use futures::TryStreamExt;
use futures::stream::BoxStream;
use serde::Serialize;
use uuid::Uuid;

use super::job::CarriedCondemnation;
use super::journal::{JournalRef, Journals};
use super::rules::Clock;
use crate::error::{Error, ErrorKind, Result};
use crate::warehouse::layout::{
    Fact, FactRun, LEDGER_DIR, MarkerBody, condemnation_visible, ledger_entry, ledger_holds,
    parse_fact, parse_marker,
};
use crate::warehouse::{ListItem, ListRange, Listed, Positioned, Warehouse};

const LEDGER_VERSION: i32 = 2;

/// A clock fact of an entry, as read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ClockFile {
    pub clock: Clock,
    /// The run that wrote it.
    pub journal: JournalRef,
    /// When it landed (the store's time).
    pub landed_ms: i64,
}

/// One object's ledger entry as read.
#[derive(Debug, Default, Clone)]
pub(crate) struct LedgerEntry {
    /// Its clock facts (current format).
    pub clocks: Vec<ClockFile>,
    /// When the object was last condemned (largest recorded).
    pub condemned_ms: Option<i64>,
    /// The entry's files (names).
    pub files: Vec<String>,
    /// The clock the previous finished run carried on its scan page, where it counts
    /// (see [`carried`](super::carried)).
    pub carried: Option<Clock>,
    /// Whether the clock files of runs before the current one are superseded and do not
    /// count: the previous finished run reached the object or carries its clocks on its
    /// pages (see [`CarriedReader::superseding`](super::carried::CarriedReader)).
    pub superseded: bool,
    /// The condemnation the previous finished run carried on that clock, if its marker is
    /// there (it is then part of `condemned_ms`).
    pub marker: Option<CarriedCondemnation>,
}

impl LedgerEntry {
    /// Add a listed file of the entry (a file this collector does not write is left out:
    /// never part of an entry, never deleted).
    fn add(&mut self, file: Listed) {
        match parse_name(file_name(&file.name)) {
            Some((Kind::Clock(clock), journal)) => self.clocks.push(ClockFile {
                clock,
                journal,
                landed_ms: file.landed_ms,
            }),
            // A condemnation counts from when it became visible.
            Some((Kind::Condemned(ms), _)) => {
                let visible = condemnation_visible(ms, file.last_modified_ms);
                self.condemned_ms = Some(self.condemned_ms.map_or(visible, |c| c.max(visible)));
            }
            Some((Kind::Legacy, _)) => {}
            None => return,
        }
        self.files.push(file.name);
    }

    /// Whether the entry of an object that is gone stays: it holds a condemnation that
    /// has not expired. The deletion's record releases it once no publication can still
    /// check it (`release`); without one, it expires (see
    /// [`rules::condemnation_expired`](super::rules::condemnation_expired)).
    fn stays_when_gone(&self, now_ms: i64) -> bool {
        self.condemned_ms
            .is_some_and(|condemned| !super::rules::condemnation_expired(condemned, now_ms))
    }

    /// The latest clock that `trust` trusts, of its clock files and the carried one; of
    /// superseded clock files, only the current run's count.
    pub(crate) fn trusted_clock(&self, trust: &Trust) -> Option<Clock> {
        self.clocks
            .iter()
            .filter(|file| trust.trusts(file) && (!self.superseded || trust.wrote(file)))
            .map(|file| file.clock)
            .chain(self.carried)
            .max_by_key(|clock| (clock.start_ms, clock.walk_ms))
    }
}

/// The page of a listing whose ledger entries [`Ledger::read_page`] reads.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PageScope<'a> {
    /// The range the page belongs to (a partition of `indexes/`, or `metadata/`).
    pub range: &'a ListRange,
    /// The listing position of the previous page's last entry (`None` for the range's
    /// first page).
    pub after: Option<&'a str>,
    /// Every name the page listed (objects and skipped entries), in listing order.
    pub listed: &'a [String],
    /// Whether the page is the range's last.
    pub done: bool,
    /// The run's decision time (whether a gone object's condemnation has expired).
    pub now_ms: i64,
}

/// What [`Ledger::read_page`] found.
#[derive(Debug, Default)]
pub(crate) struct PageEntries {
    /// The entries of the listed objects that have one.
    pub entries: HashMap<String, LedgerEntry>,
    /// The files of entries whose object is gone.
    pub gone: Vec<String>,
    /// How many ledger files the listing returned (what the page cost).
    pub examined: usize,
}

/// How many stamps [`Ledger::record_marker`] tries.
const MARKER_ATTEMPTS: i64 = 16;

/// The most files of gone objects one page clears (the rest: a later run's).
const MAX_GONE_PER_PAGE: usize = 10_000;

/// The most earlier names one page looks up (see [`Ledger::read_page`]).
const MAX_EARLIER_PER_PAGE: usize = 100;

/// Which runs' clock facts count: the current run's, and those of finished runs that
/// landed before their run's finish mark.
#[derive(Debug, Clone, Default)]
pub(crate) struct Trust {
    pub current: Option<JournalRef>,
    pub done_at: HashMap<JournalRef, i64>,
}

impl Trust {
    /// Whether the current run wrote the clock fact `file`.
    pub(crate) fn wrote(&self, file: &ClockFile) -> bool {
        Some(file.journal) == self.current
    }

    /// Whether the clock fact `file` counts.
    pub(crate) fn trusts(&self, file: &ClockFile) -> bool {
        super::rules::trusts(
            Some(file.journal) == self.current,
            file.landed_ms,
            self.done_at.get(&file.journal).copied(),
        )
    }
}

/// The kind of an entry file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// `o-<clock>-<walk>`: a walk found the object unreachable.
    Clock(Clock),
    /// `c-<ms>`: condemned at `ms`.
    Condemned(i64),
    /// `u-<ms>`: a clock of an earlier version (never trusted).
    Legacy,
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

/// Parse an entry file name (see the layout's ledger facts).
fn parse_name(name: &str) -> Option<(Kind, JournalRef)> {
    let (fact, FactRun { run_ms, run_id }) = parse_fact(name)?;
    let kind = match fact {
        Fact::Clock { start_ms, walk_ms } => Kind::Clock(Clock { start_ms, walk_ms }),
        Fact::Condemned(ms) => Kind::Condemned(ms),
        Fact::Legacy => Kind::Legacy,
    };
    Some((kind, JournalRef { run_ms, run_id }))
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

    /// The journals of the same warehouse.
    pub(crate) fn journals(&self) -> Journals {
        Journals::new(&self.warehouse)
    }

    fn dir(&self, object: &str) -> String {
        ledger_entry(object)
    }

    /// Whether the ledger can hold an entry for `object`: its mirror, plus the longest
    /// fact's name, fits the store's key limit.
    pub(crate) fn mirrors(&self, object: &str) -> bool {
        ledger_holds(self.warehouse.max_name_len(), object)
    }

    /// The entry of the object `object` (empty if none).
    pub(crate) async fn read(&self, object: &str) -> Result<LedgerEntry> {
        let listed = self.warehouse.list_files(&self.dir(object)).await?;
        let mut entry = LedgerEntry::default();
        for file in listed {
            entry.add(file);
        }
        Ok(entry)
    }

    /// The entries of the objects one page of a listing holds, and the files of entries
    /// whose object the page shows is gone, from one ranged listing of the mirror (one
    /// request per page of ledger files, not one per object).
    ///
    /// The facts of an object `k` are the mirror's files `<ledger>/k/<fact>`. They are
    /// listed in the warehouse's order, which is not always the order of the objects
    /// themselves (on an object store `k/…` sorts after `k-1/…`), so the listing starts
    /// after the mirror of the previous page's last name (every fact of a later name sorts
    /// after it) and ends past the facts of the last listed name (past the whole range for
    /// the range's last page); a listed name that the last one extends with a byte up to
    /// `/` (`v1.json` of `v1.json.bak`), whose facts sort after all of those, is read on
    /// its own. Every listed object's entry is complete. An entry of a
    /// name between the previous page's last name and this page's last one that the page
    /// did not list is gone. So is one of an earlier name that sorts into this page's
    /// listing (a name that the previous page's last name extends, `v1.json` of
    /// `v1.json.bak`) and that a `HEAD` finds missing. An entry the bounds leave out (a
    /// file directly in the prefix, named like the start of the next partition) stays for
    /// a later run: a stale entry never dates a newer object, whose clock cannot stand
    /// before it was written (see `rules`).
    pub(crate) async fn read_page(&self, scope: PageScope<'_>) -> Result<PageEntries> {
        let warehouse = &self.warehouse;
        let PageScope {
            range,
            after,
            listed,
            done,
            now_ms,
        } = scope;
        let order = |a: &str, b: &str| warehouse.name_order(a, b);
        let mirror = format!("{LEDGER_DIR}/{}", range.prefix);
        // Past the facts of the last listed name; for the last page, past the whole range.
        // On an object store the facts of a listed name that the last one extends with a
        // byte up to `/` (`v1.json` of `v1.json.bak`) sort after the last one's, possibly
        // after every later name's: those few are read on their own instead of stretching
        // the range over what follows.
        let last = listed.last().map(String::as_str);
        let listed_end = last.map(|last| format!("{LEDGER_DIR}/{last}/~"));
        let stretching: Vec<&str> = match last {
            Some(last) if warehouse.orders_bytewise() => listed
                .iter()
                .map(String::as_str)
                .filter(|name| {
                    last.strip_prefix(*name)
                        .and_then(|rest| rest.bytes().next())
                        .is_some_and(|byte| byte <= b'/')
                })
                .collect(),
            _ => Vec::new(),
        };
        let end = match (done, warehouse.range_end_under(range, &mirror)) {
            (true, None) => None,
            (true, Some(range_end)) => Some(match listed_end {
                Some(listed_end) if order(&listed_end, &range_end).is_gt() => listed_end,
                _ => range_end,
            }),
            (false, _) => match listed_end {
                Some(listed_end) => Some(listed_end),
                None => return Ok(PageEntries::default()),
            },
        };
        // The previous page's last name; unknown if its position names no UTF-8 path (an
        // entry the listing skipped): then no entry counts as gone on this page.
        let after_name = after.map(|position| warehouse.name_at(position));
        let gone_known = !matches!(after_name, Some(None));
        let after_name = after_name.flatten();
        let start = after.and_then(|position| warehouse.position_under(LEDGER_DIR, position));
        let whole = ListRange::new(&mirror, range.from.clone(), None);
        let names: HashSet<&str> = listed
            .iter()
            .map(String::as_str)
            .filter(|name| !stretching.contains(name))
            .collect();
        let mut page = PageEntries::default();
        for name in &stretching {
            let entry = self.read(name).await?;
            if !entry.files.is_empty() {
                page.entries.insert((*name).to_owned(), entry);
            }
        }
        let mut earlier: BTreeMap<String, LedgerEntry> = BTreeMap::new();
        let mut gone: BTreeMap<String, LedgerEntry> = BTreeMap::new();
        let mut gone_files = 0;
        let mut files = self.warehouse.list_range(&whole, start.as_deref());
        while let Some(item) = files.try_next().await? {
            page.examined += 1;
            let ListItem::Object(file) = item.item else {
                continue;
            };
            if end
                .as_deref()
                .is_some_and(|end| order(&file.name, end).is_gt())
            {
                break;
            }
            let Some(object) = self.object_of(&file.name) else {
                continue;
            };
            if names.contains(object.as_str()) {
                page.entries.entry(object).or_default().add(file);
                continue;
            }
            if stretching.contains(&object.as_str())
                || !gone_known
                || !warehouse.range_holds(range, &object)
            {
                continue;
            }
            match after_name.as_deref().map(|after| order(&object, after)) {
                // The previous page's last entry itself: listed there.
                Some(std::cmp::Ordering::Equal) => {}
                Some(std::cmp::Ordering::Less) => {
                    if earlier.len() < MAX_EARLIER_PER_PAGE || earlier.contains_key(&object) {
                        earlier.entry(object).or_default().add(file);
                    }
                }
                _ => {
                    let within = done || last.is_some_and(|last| order(&object, last).is_lt());
                    if within && gone_files < MAX_GONE_PER_PAGE {
                        gone_files += 1;
                        gone.entry(object).or_default().add(file);
                    }
                }
            }
        }
        drop(files);
        for (object, entry) in earlier {
            match warehouse.head(&object).await {
                Ok(None) => {
                    gone.insert(object, entry);
                }
                Ok(Some(_)) => {}
                // Not a name an object can have: its files are left alone.
                Err(err) if err.kind() == crate::error::ErrorKind::InvalidIndexMetadata => {}
                Err(err) => return Err(err),
            }
        }
        for entry in gone.into_values() {
            if !entry.stays_when_gone(now_ms) {
                page.gone.extend(entry.files);
            }
        }
        Ok(page)
    }

    /// Record that the walk `clock` found `object` unreachable (create-if-absent; the same
    /// fact twice is a no-op) and return the file that holds it.
    pub(crate) async fn record_clock(
        &self,
        object: &str,
        clock: Clock,
        journal: JournalRef,
        reason: &str,
    ) -> Result<String> {
        let name = format!(
            "o-{}-{}-{}.json",
            clock.start_ms.max(0),
            clock.walk_ms.max(0),
            journal.suffix()
        );
        self.write_fact(object, name, "clock", clock.start_ms, journal, reason)
            .await
    }

    /// Record that `object` was condemned at `ms` and return the file that holds it.
    pub(crate) async fn record_condemnation(
        &self,
        object: &str,
        ms: i64,
        journal: JournalRef,
        reason: &str,
    ) -> Result<String> {
        let name = format!("c-{}-{}.json", ms.max(0), journal.suffix());
        self.write_fact(object, name, "condemned", ms, journal, reason)
            .await
    }

    async fn write_fact(
        &self,
        object: &str,
        name: String,
        kind: &'static str,
        ms: i64,
        journal: JournalRef,
        reason: &str,
    ) -> Result<String> {
        let file = format!("{}/{name}", self.dir(object));
        let body = EntryFile {
            ledger_version: LEDGER_VERSION,
            object,
            kind,
            ms: ms.max(0),
            run_id: journal.run_id,
            reason,
        };
        let bytes = Bytes::from(serde_json::to_vec(&body).unwrap_or_default());
        self.warehouse.put_if_absent(&file, bytes).await?;
        Ok(file)
    }

    /// The condemnation markers of the entry of the directory `dir`: each marker's file
    /// name, with its last-modified time (one ranged listing).
    pub(crate) async fn markers(&self, dir: &str) -> Result<HashMap<String, i64>> {
        let entry = ledger_entry(dir);
        // Every marker of the directory, and nothing that sorts outside `n-`…`n.`.
        let range = ListRange::new(&entry, Some("n-".to_owned()), Some("n.".to_owned()));
        let mut listed = self.warehouse.list_range(&range, None);
        let mut markers = HashMap::new();
        while let Some(item) = listed.try_next().await? {
            let ListItem::Object(file) = item.item else {
                continue;
            };
            let Some((parent, last)) = file.name.rsplit_once('/') else {
                continue;
            };
            if parent == entry && parse_marker(last).is_some() {
                markers.insert(last.to_owned(), file.last_modified_ms);
            }
        }
        Ok(markers)
    }

    /// Record that page `page` of run `journal` condemned, at `ms`, the objects of the
    /// directory `dir` whose base names are `names`: one marker (create-if-absent), whose
    /// file name is returned with the stamp it carries. A marker of the same name already
    /// there that lists every one of `names` (the same page written before by an
    /// invocation that died before its page, or by a stalled worker) is the one: it has
    /// condemned them since it landed. Another (another partition's page of the same
    /// number, or a page decided otherwise) is left alone, and the stamp moves on by a
    /// millisecond (a later stamp only delays a deletion).
    pub(crate) async fn record_marker(
        &self,
        dir: &str,
        names: Vec<String>,
        ms: i64,
        journal: JournalRef,
        page: u64,
    ) -> Result<CarriedCondemnation> {
        let body = serde_json::to_vec(&MarkerBody {
            names: names.clone(),
        })
        .unwrap_or_default();
        let body = Bytes::from(body);
        let entry = ledger_entry(dir);
        for stamp in ms.max(0)..ms.max(0).saturating_add(MARKER_ATTEMPTS) {
            let marker = format!("n-{stamp}-{}-{page}.json", journal.suffix());
            let path = format!("{entry}/{marker}");
            let written = self.warehouse.put_if_absent(&path, body.clone()).await?
                || self
                    .warehouse
                    .marker_names(&path)
                    .await?
                    .is_some_and(|listed| names.iter().all(|name| listed.contains(name)));
            if written {
                return Ok(CarriedCondemnation { ms: stamp, marker });
            }
        }
        Err(Error::new(
            ErrorKind::StoreUnavailable,
            format!(
                "gc stopped: {MARKER_ATTEMPTS} condemnation markers of page {page} of `{dir}` were already there; a rerun resumes safely"
            ),
        ))
    }

    /// Whether the listed ledger file `file` is a condemnation marker whose condemnation
    /// expired at `now_ms` ([`rules::condemnation_expired`](super::rules::condemnation_expired)):
    /// no run acts on it any more, and publication need no longer see it.
    pub(crate) fn marker_expired(&self, file: &Listed, now_ms: i64) -> bool {
        parse_marker(file_name(&file.name)).is_some_and(|(ms, _)| {
            let visible = condemnation_visible(ms, file.last_modified_ms);
            super::rules::condemnation_expired(visible, now_ms)
        })
    }

    /// Delete condemnation markers (missing ones are fine); how many are gone. Only names
    /// of markers under the ledger are deleted, whoever passes them.
    pub(crate) async fn delete_markers(&self, files: Vec<String>) -> Result<usize> {
        let (own, foreign): (Vec<String>, Vec<String>) = files.into_iter().partition(|name| {
            name.starts_with(&format!("{LEDGER_DIR}/")) && parse_marker(file_name(name)).is_some()
        });
        for name in foreign {
            tracing::warn!(file = %name, "gc: not deleting a file that is no condemnation marker");
        }
        self.warehouse.delete_own(own).await
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

    /// Delete ledger entry files (missing ones are fine); returns how many are gone. Only
    /// names of files this collector writes there are deleted, whoever passes them (a name
    /// read back from a run's state included).
    pub(crate) async fn delete(&self, files: Vec<String>) -> Result<usize> {
        let (own, foreign): (Vec<String>, Vec<String>) = files
            .into_iter()
            .partition(|name| self.object_of(name).is_some());
        for name in foreign {
            tracing::warn!(file = %name, "gc: not deleting a file that is no ledger entry");
        }
        self.warehouse.delete_own(own).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::gc::journal::tests::journal;

    #[test]
    fn entry_file_names_parse() {
        let journal = journal(5, 7);
        let clock = Clock {
            start_ms: 17,
            walk_ms: 12,
        };
        assert_eq!(
            parse_name(&format!("o-17-12-{}.json", journal.suffix())),
            Some((Kind::Clock(clock), journal))
        );
        assert_eq!(
            parse_name(&format!("c-0-{}.json", journal.suffix())),
            Some((Kind::Condemned(0), journal))
        );
        assert_eq!(
            parse_name(&format!("u-17-{}.json", journal.suffix())),
            Some((Kind::Legacy, journal))
        );
        for foreign in [
            "x-1-5-00000000000000000000000000000007.json",
            "u-1.json",
            "u-a-5-00000000000000000000000000000007.json",
            "o-1-5-00000000000000000000000000000007.json",
        ] {
            assert_eq!(parse_name(foreign), None, "{foreign}");
        }
    }

    #[test]
    fn only_the_collectors_own_files_are_recognised() {
        let journal = journal(5, 7);
        let warehouse = Warehouse::in_memory("memory://own/wh").expect("warehouse");
        let ledger = Ledger::new(&warehouse);
        let entry = format!("{LEDGER_DIR}/indexes/a/u-1-{}.json", journal.suffix());
        assert_eq!(ledger.object_of(&entry).as_deref(), Some("indexes/a"));
        assert_eq!(
            ledger.object_of(&format!("{LEDGER_DIR}/t/ivf_centroids/part-0.parquet")),
            None
        );
        // A condemnation marker is no fact of its directory as an object: never part of
        // an entry, never cleared as a gone object's file (`warehouse::layout`).
        let marker = format!("{LEDGER_DIR}/indexes/a/n-1-{}-0.json", journal.suffix());
        assert_eq!(ledger.object_of(&marker), None);
    }

    #[tokio::test]
    async fn clocks_count_only_for_their_own_run_or_once_it_finished_before_they_landed() {
        let warehouse = Warehouse::in_memory("memory://ledger/wh").expect("warehouse");
        let ledger = Ledger::new(&warehouse);
        let (first, second) = (journal(1, 1), journal(2, 2));
        let object = "indexes/a/1/ivf_postings/part-0";
        assert!(ledger.read(object).await.expect("read").clocks.is_empty());
        let early = Clock {
            start_ms: 10,
            walk_ms: 8,
        };
        let late = Clock {
            start_ms: 30,
            walk_ms: 28,
        };
        ledger
            .record_clock(object, early, first, "seen")
            .await
            .expect("clock");
        ledger
            .record_clock(object, late, second, "seen again")
            .await
            .expect("clock");
        ledger
            .record_clock(object, late, second, "again")
            .await
            .expect("idempotent");
        // The in-memory store stamps last-modified times from the wall clock.
        let before_condemning = crate::clock::Clock::now_ms(&crate::clock::SystemClock);
        ledger
            .record_condemnation(object, 50, second, "condemned")
            .await
            .expect("condemn");
        // A child object's entry is not part of its parent's.
        ledger
            .record_clock(&format!("{object}/x"), early, first, "child")
            .await
            .expect("child");
        let entry = ledger.read(object).await.expect("read");
        assert_eq!(entry.clocks.len(), 2);
        let nobody = Trust::default();
        assert_eq!(entry.trusted_clock(&nobody), None, "no run finished");
        let own = Trust {
            current: Some(second),
            ..Trust::default()
        };
        assert_eq!(entry.trusted_clock(&own), Some(late));
        let finished_first = Trust {
            current: None,
            done_at: HashMap::from([(first, i64::MAX)]),
        };
        assert_eq!(entry.trusted_clock(&finished_first), Some(early));
        let landed_after_finish = Trust {
            current: None,
            done_at: HashMap::from([(first, 0)]),
        };
        assert_eq!(entry.trusted_clock(&landed_after_finish), None);
        // Where the previous run reached the object or carries its clocks (superseded),
        // only the current run's own clock files count (round 141): a finished run's file
        // found there landed after a sweep, whatever the store's time says.
        let superseded = LedgerEntry {
            superseded: true,
            ..entry.clone()
        };
        assert_eq!(superseded.trusted_clock(&finished_first), None);
        let own_after_finished = Trust {
            current: Some(second),
            done_at: HashMap::from([(first, i64::MAX)]),
        };
        assert_eq!(superseded.trusted_clock(&own_after_finished), Some(late));
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

    /// Names over an alphabet that makes listing order and mirror order disagree (bytes
    /// below and above `/`, and the mirror's own `~`), some of them prefixes of others.
    fn names() -> impl proptest::strategy::Strategy<Value = Vec<(String, bool, bool)>> {
        use proptest::prelude::*;
        let segment = proptest::collection::vec(
            prop_oneof![
                Just('a'),
                Just('b'),
                Just('-'),
                Just('.'),
                Just('!'),
                Just('~')
            ],
            1..4,
        )
        .prop_map(|chars| chars.into_iter().collect::<String>())
        .prop_filter("a name has no `.` or `..` segment", |segment| {
            segment != "." && segment != ".."
        });
        let name = proptest::collection::vec(segment, 1..4)
            .prop_map(|segments| format!("indexes/{}", segments.join("/")));
        // (name, the object exists, it has ledger facts)
        proptest::collection::btree_map(name, (any::<bool>(), any::<bool>()), 1..24).prop_map(
            |objects| {
                objects
                    .into_iter()
                    .map(|(name, (exists, facts))| (name, exists, facts))
                    .collect()
            },
        )
    }

    /// Every page of `range`'s listing, `page` entries at a time, read with
    /// `read_page` after the previous page's last position: each page's listed names and
    /// what the read found. `last_done`: the last page ends the range.
    async fn read_pages(
        warehouse: &Warehouse,
        range: &ListRange,
        page: usize,
        last_done: bool,
    ) -> Vec<(Vec<String>, PageEntries)> {
        let ledger = Ledger::new(warehouse);
        let listed: Vec<Positioned> = warehouse
            .list_range(range, None)
            .try_collect()
            .await
            .expect("listed");
        let chunks: Vec<&[Positioned]> = listed.chunks(page).collect();
        let count = chunks.len().max(1);
        let mut after: Option<String> = None;
        let mut pages = Vec::new();
        for index in 0..count {
            let chunk = chunks.get(index).copied().unwrap_or(&[]);
            let names: Vec<String> = chunk
                .iter()
                .filter_map(|entry| entry.item.name().map(str::to_owned))
                .collect();
            let read = ledger
                .read_page(PageScope {
                    range,
                    after: after.as_deref(),
                    listed: &names,
                    done: last_done && index + 1 == count,
                    // Every condemnation expired: the entries of gone objects are cleared.
                    now_ms: i64::MAX,
                })
                .await
                .expect("page");
            if let Some(last) = chunk.last() {
                after = Some(last.position.clone());
            }
            pages.push((names, read));
        }
        pages
    }

    /// Read every page of every partition of `indexes/` with `read_page`, `page` entries
    /// at a time, and check it against reading each entry on its own: every listed
    /// object's entry is complete and exact, and nothing counted gone exists.
    async fn check_pages(
        warehouse: &Warehouse,
        objects: &[(String, bool, bool)],
        page: usize,
        parts: usize,
    ) {
        let ledger = Ledger::new(warehouse);
        let run = journal(1, 1);
        let clock = Clock {
            start_ms: 5,
            walk_ms: 4,
        };
        let mut existing = HashSet::new();
        for (name, exists, facts) in objects {
            if *exists {
                warehouse
                    .put_if_absent(name, Bytes::from_static(b"x"))
                    .await
                    .expect("object");
                existing.insert(name.clone());
            }
            if *facts {
                ledger
                    .record_clock(name, clock, run, "t")
                    .await
                    .expect("clock");
                ledger
                    .record_condemnation(name, 9, run, "t")
                    .await
                    .expect("condemned");
            }
        }
        let segments = warehouse.segments("indexes").await.expect("segments");
        let mut cleared = HashSet::new();
        for range in ListRange::split("indexes", &segments, parts) {
            for (names, read) in read_pages(warehouse, &range, page, true).await {
                for name in &names {
                    let mut expected = ledger.read(name).await.expect("entry").files;
                    let mut got = read
                        .entries
                        .get(name)
                        .map(|entry| entry.files.clone())
                        .unwrap_or_default();
                    expected.sort();
                    got.sort();
                    assert_eq!(got, expected, "the entry of `{name}` in {range:?}");
                }
                for file in &read.gone {
                    let object = ledger.object_of(file).expect("a ledger file");
                    assert!(
                        !existing.contains(&object),
                        "`{object}` exists but was counted gone"
                    );
                    cleared.insert(object);
                }
            }
        }
        // Every gone object's entry is found, but for a file directly in `indexes/` whose
        // name another name extends with a byte up to `/` (its entry may sort past the
        // end of its partition: left for a later run).
        for (name, exists, facts) in objects {
            let direct = name.matches('/').count() == 1;
            let extended = objects.iter().any(|(other, _, _)| {
                other
                    .strip_prefix(name.as_str())
                    .is_some_and(|rest| rest.bytes().next().is_some_and(|b| b <= b'/'))
            });
            let plain = !(direct && extended);
            if *facts && !*exists && plain {
                assert!(
                    cleared.contains(name),
                    "the entry of gone `{name}` was not found"
                );
            }
        }
    }

    /// The most ledger files one page of `page` names lists, with every name tracked.
    async fn most_examined(warehouse: &Warehouse, names: &[String], page: usize) -> usize {
        let ledger = Ledger::new(warehouse);
        let run = journal(1, 1);
        let clock = Clock {
            start_ms: 5,
            walk_ms: 4,
        };
        for name in names {
            warehouse
                .put_if_absent(name, Bytes::from_static(b"x"))
                .await
                .expect("object");
            ledger
                .record_clock(name, clock, run, "t")
                .await
                .expect("clock");
        }
        let mut most = 0;
        for (names, read) in read_pages(warehouse, &ListRange::whole("indexes"), page, false).await
        {
            assert_eq!(read.entries.len(), names.len(), "every listed name's entry");
            most = most.max(read.examined);
        }
        most
    }

    /// A page's listing of the ledger costs what the page's entries hold, not what the
    /// rest of the partition holds: the first page of a partition, a page entering a new
    /// directory, and a page whose first name every later name extends with `-` (on an
    /// object store `k/…` sorts after `k-…/…`) stop past their own names.
    #[tokio::test]
    async fn a_page_lists_the_ledger_of_its_own_names_only() {
        let directories: Vec<String> = (0..10)
            .flat_map(|d| (0..20).map(move |f| format!("indexes/d-{d}/part-{f:03}.parquet")))
            .collect();
        // A spine: `z`, `z!0`…, then `z-`, `z-!0`…, each page starting with a name that
        // every later one extends.
        let spine: Vec<String> = (0..10)
            .flat_map(|d| {
                let stem = format!("indexes/s/z{}", "-".repeat(d));
                std::iter::once(stem.clone()).chain((0..9).map(move |f| format!("{stem}!{f}")))
            })
            .collect();
        for names in [directories, spine] {
            let memory = Warehouse::in_memory("memory://cost/wh").expect("warehouse");
            let dir = tempfile::tempdir().expect("dir");
            let local = Warehouse::local(dir.path()).expect("warehouse");
            for warehouse in [memory, local] {
                // Its ten files, the previous page's last one (the listing starts at its
                // name), the one past them that ends the listing, and a name read on its
                // own.
                let most = most_examined(&warehouse, &names, 10).await;
                assert!(most <= 12, "{most} ledger files listed for a page of 10");
            }
        }
    }

    /// The entry of a gone object that holds a condemnation stays (publication refuses the
    /// name until the deletion's record releases it, or the condemnation expires); one
    /// with clocks only is cleared.
    #[tokio::test]
    async fn a_gone_objects_condemnation_stays_until_it_expires() {
        let warehouse = Warehouse::in_memory("memory://gone/wh").expect("warehouse");
        let ledger = Ledger::new(&warehouse);
        let run = journal(1, 1);
        let clock = Clock {
            start_ms: 5,
            walk_ms: 4,
        };
        let (condemned, tracked, listed) = (
            "indexes/a/condemned",
            "indexes/a/tracked",
            "indexes/a/z-listed",
        );
        for name in [condemned, tracked] {
            ledger
                .record_clock(name, clock, run, "t")
                .await
                .expect("clock");
        }
        ledger
            .record_condemnation(condemned, 9, run, "t")
            .await
            .expect("condemned");
        warehouse
            .put_if_absent(listed, Bytes::from_static(b"x"))
            .await
            .expect("object");
        let entry = ledger.read(condemned).await.expect("entry");
        let visible = entry.condemned_ms.expect("condemned");
        let range = ListRange::whole("indexes");
        let gone_at = |now_ms: i64| {
            let ledger = ledger.clone();
            let range = range.clone();
            async move {
                let read = ledger
                    .read_page(PageScope {
                        range: &range,
                        after: None,
                        listed: &[listed.to_owned()],
                        done: true,
                        now_ms,
                    })
                    .await
                    .expect("page");
                let mut objects: Vec<String> = read
                    .gone
                    .iter()
                    .filter_map(|file| ledger.object_of(file))
                    .collect();
                objects.dedup();
                objects
            }
        };
        assert_eq!(gone_at(visible + 1).await, [tracked]);
        let expired = visible + super::super::rules::CONDEMNATION_HORIZON_MS;
        assert_eq!(gone_at(expired - 1).await, [tracked]);
        assert_eq!(gone_at(expired).await, [condemned, tracked]);
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]
        #[test]
        fn a_page_reads_exactly_the_entries_of_what_it_lists(
            objects in names(),
            page in 1usize..5,
            parts in 1usize..4,
        ) {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            runtime.block_on(async {
                let memory = Warehouse::in_memory("memory://pages/wh").expect("warehouse");
                check_pages(&memory, &objects, page, parts).await;
                // A directory cannot also be a file: keep the names that fit a file system.
                let mut fitting: Vec<(String, bool, bool)> = Vec::new();
                for object in &objects {
                    let clash = fitting.iter().any(|(other, _, _)| {
                        other == &object.0
                            || other.starts_with(&format!("{}/", object.0))
                            || object.0.starts_with(&format!("{other}/"))
                    });
                    if !clash {
                        fitting.push(object.clone());
                    }
                }
                let dir = tempfile::tempdir().expect("dir");
                let local = Warehouse::local(dir.path()).expect("warehouse");
                check_pages(&local, &fitting, page, parts).await;
            });
        }
    }
}
