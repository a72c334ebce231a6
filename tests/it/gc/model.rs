//! The garbage-collection protocol as a model, checked exhaustively with `stateright` over
//! small configurations (issue 26).
//!
//! The model is the protocol of `src/gc` and `src/catalog/changelog.rs` with the storage
//! abstracted away: identifiers whose records point at metadata files, metadata files that
//! name tables, a change log, a ledger of clock facts and condemnations, and collector runs
//! that walk, read the log, assess each object, verify and delete, one step at a time. Every
//! decision a run takes comes from the **same functions the collector calls**
//! ([`parqdb_catalog::gc::rules`]): when a clock starts or stands, when an object is
//! condemned or doomed, whether it may still be deleted, which facts are trusted, which
//! records are explained, when a log entry has settled or was refused.
//!
//! Between any two steps of a run, anything else may happen: writers log and land
//! publications (registers and commits of any file at any identifier — an identifier
//! catching up through old metadata, a commit retried long after its file was written, new
//! metadata written at any time over an old index's tables, a refused publication that
//! leaves its entry), drop identifiers; an operator backs up and
//! restores the records, edits a record by hand or adopts the warehouse (records it
//! restores name files a pointer reached within the retention: a backup older than that
//! may name collected files, which no collector can prevent); the collector's store is
//! cloned (a copy the ownership check cannot tell apart, sharing the warehouse: the
//! ledger, the journals, the log), and from then on runs walk the clone (and the
//! original, where the configuration lets the owner collect) while writers write the
//! original (rule N) and, where the configuration lets them, the clone (never over a
//! record the original still holds from before the clone: assumption 7 of `gc`), and the
//! owner may still adopt the warehouse on the original (the other operator steps come
//! before the clone); a table becomes reachable for a while through a symbolic link no
//! change-log entry records (`Action::Link`); time passes; the run crashes (and a write it
//! had in flight lands later, as a paused process's would).
//!
//! Each run's log read holds the previous finished run's journal against its walk (rule
//! X): a record the journal saw that is gone, or that does not descend from the commit
//! seen (neither its chain nor the commit links from it lead there: `history::Stranger`),
//! and one the journal found vanished that is still gone or not back, is unexplained, and
//! its journal lists it as vanished. The journal says the epoch its run was planned in;
//! across an epoch change rule X skips only the records the adoption forgave: the commits
//! the newest finished journal saw or found vanished at a key where the adopting store
//! lacked a record or held one that does not descend from them — record by record, never
//! a whole key (GC round 115, F1).
//!
//! **Safety** (`always`): no object is deleted while a pointer reached it within the
//! retention before, nor while an existing metadata file names it; no pointer ever names a
//! deleted file. **Liveness** (`sometimes`, plus the bound the random simulation checks):
//! garbage that lost reachability is collected.
//!
//! `PARQDB_GC_MODEL_TIME`, `_PUBLISHES`, `_CLONE_PUBLISHES`, `_OPERATOR`, `_CRASHES`,
//! `_RUNS`, `_FORKS`, `_DROPS` and `_LINKS` widen the configuration (BENCHMARKS.md reports a larger
//! run).

use std::collections::BTreeMap;

use parqdb_catalog::gc::rules::{self, Clock, ClockDecision, Facts, Timing, Verdict, Walk};
use stateright::{Checker, Model, Property};

/// Metadata files `0..FILES`; tables `FILES..OBJECTS`.
const FILES: usize = 3;
const OBJECTS: usize = FILES + 2;
/// Which tables each metadata file names (a successor: v0 names t0, v1 names t0 and t1;
/// and `FRESH`, new metadata over v0's table t0).
const NAMES: [[bool; OBJECTS]; FILES] = [
    [false, false, false, true, false],
    [false, false, false, true, true],
    [false, false, false, true, false],
];
/// The metadata file a writer writes at any time (none exists at first): a backup's
/// metadata restored under a new name, or new metadata over an old index's tables.
const FRESH: usize = 2;
/// The table a symbolic link makes reachable while it is there (`Action::Link`).
const LINKED: usize = FILES + 1;
const KEYS: usize = 2;

/// Model time: one tick is one publish window.
const TIMING: Timing = Timing {
    retention_ms: 3,
    grace_ms: 0,
    delay_ms: 2,
    skew_ms: 0,
    settle_ms: 1,
};

/// A pointer record: its commit id and the one it replaced (the chain, one deep).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Record {
    Absent,
    Live {
        file: usize,
        commit: (u8, Option<u8>),
    },
    Dropped {
        file: usize,
        commit: (u8, Option<u8>),
    },
}

impl Record {
    /// Its commit id and the previous one.
    fn commit(self) -> Option<(u8, Option<u8>)> {
        match self {
            Record::Absent => None,
            Record::Live { commit, .. } | Record::Dropped { commit, .. } => Some(commit),
        }
    }

    /// A successor of this record with commit id `commit`.
    fn chain(self, commit: u8) -> (u8, Option<u8>) {
        (commit, self.commit().map(|(id, _)| id))
    }
}

/// A change-log entry.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Logged {
    at: i64,
    key: usize,
    commit: u8,
    publishes: Option<usize>,
    /// The file the write replaces (a commit's base, a dropped record's file).
    replaces: Option<usize>,
    /// Listed by the adoption that began the current epoch: logged before it, whatever
    /// the writers' clocks said (rule N judges only the entries an adoption did not list).
    released: bool,
}

/// A publication logged and not yet landed: it lands within the window of its entry.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Pending {
    key: usize,
    file: usize,
    commit: u8,
    deadline: i64,
    /// A writer of the clone of the store (`Action::PublishOnClone`): it lands there.
    clone: bool,
}

/// What a finished run's journal says: the commit its walk saw at each key, those it
/// found vanished (seen by an earlier journal and gone, or held by a record that does not
/// remember them: `History::vanished`), the ownership epoch the run was planned in, and
/// its floor (the next run's floor is never earlier: round 133, G4).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Journal {
    seen: [Option<u8>; KEYS],
    vanished: [Option<u8>; KEYS],
    epoch: i64,
    floor: i64,
}

/// The commits an adoption forgave at a key (`changelog::Forgiven`): of those the journal
/// it read lists there, at most the one seen and the one vanished.
type Forgiven = [Option<u8>; 2];

/// A clock fact in the ledger.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct Fact {
    clock: (i64, i64),
    run: u8,
    landed: i64,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
struct Entry {
    clocks: Vec<Fact>,
    /// A `c-` file (metadata files; tables under `clock_files`, an earlier release).
    condemned: Option<i64>,
    /// The condemnation markers that name the object (tables), by the time they landed:
    /// publication sees them; a run counts a condemnation the previous finished run
    /// carried only while its marker is here. The sweep leaves them (a marker names other
    /// objects too); a deletion's release clears them.
    markers: Vec<i64>,
}

/// The phase of the collector's current run.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Phase {
    /// Walked: the log is read next.
    Walked,
    /// The log is read: assessing next.
    Read,
    /// All assessed; verification next.
    Assessed,
    /// Verified; deleting next.
    Verified,
    /// Deleted; the ledger sweep next.
    Deleted,
    /// Swept; finish next.
    Swept,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Run {
    id: u8,
    phase: Phase,
    /// Whether it walks the clone of the store (else the original).
    clone: bool,
    /// The ownership epoch it was planned in.
    epoch: i64,
    /// The records rule X skips: across an epoch change, those the adoption forgave.
    forgiven: [Forgiven; KEYS],
    walk: i64,
    reachable: [bool; OBJECTS],
    records: [Option<(u8, Option<u8>)>; KEYS],
    republished: [Option<i64>; OBJECTS],
    /// What its log read found vanished (its journal lists them).
    vanished: [Option<u8>; KEYS],
    floor: i64,
    doomed: [Option<(Clock, i64)>; OBJECTS],
    reachable_again: [bool; OBJECTS],
    republished_again: [Option<i64>; OBJECTS],
    unexplained_again: bool,
    /// The clocks its scan pages carry (`gc::carried`): each assessed object's clock after
    /// its decision, with its condemnation on that clock (its marker's time), if any.
    carried: [Option<(Clock, Option<i64>)>; OBJECTS],
    /// Whether it reads the clocks the latest finished run carried: only if no run was
    /// started since that one finished (a crashed run's sweep may have cleared entries).
    reads_carried: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct State {
    now: i64,
    records: [Record; KEYS],
    next_commit: u8,
    log: Vec<Logged>,
    pending: Vec<Pending>,
    deleted: [bool; OBJECTS],
    /// When each deleted object was deleted: its deletion record's time.
    deleted_at: [Option<i64>; OBJECTS],
    /// The latest time a pointer reached each object, or a walk reached it through the
    /// link.
    last_reachable: [Option<i64>; OBJECTS],
    /// When `FRESH` was written, if it was.
    fresh_written: Option<i64>,
    ledger: [Entry; OBJECTS],
    /// The clocks (and condemnations) the latest finished run carried on its pages, less
    /// those of objects its verification walk reached (what the next run reads:
    /// `gc::carried`).
    carried: [Option<(Clock, Option<i64>)>; OBJECTS],
    /// Whether a run was started since the latest finished run finished.
    started_since_finish: bool,
    /// A clock fact a crashed run had in flight: it lands at any later step.
    in_flight: Option<(usize, Fact)>,
    /// Finished runs, with when they finished.
    done_at: BTreeMap<u8, i64>,
    /// The latest finished run's journal.
    journal: Option<Journal>,
    /// The records the adoption that began the current epoch forgave (`Action::Adopt`).
    forgiven: [Forgiven; KEYS],
    next_run: u8,
    run: Option<Run>,
    epoch: i64,
    /// The records an operator backed up, and when.
    backup: Option<([Record; KEYS], i64)>,
    /// The record no walk sees (its disk not mounted), if any: it is still there, and
    /// readers find it (they read it where the disk is mounted).
    hidden: Option<usize>,
    /// The commit links: each landed register or commit, and the commit it replaced.
    links: Vec<(u8, Option<u8>)>,
    /// Whether a symbolic link makes `LINKED` reachable (a live table's directory became a
    /// link to it): walks of either store follow it (it is in the warehouse), and no
    /// change-log entry records it.
    linked: bool,
    /// A copy of the records the ownership check cannot tell from them (a clone of the
    /// store's disk), taken at some point: from then on a run walks either, sharing the
    /// warehouse (the ledger, the journals, the log), while writers go on writing the
    /// original (rule N).
    forked: Option<[Record; KEYS]>,
    /// Budgets that keep the model finite.
    publishes_left: u8,
    clone_publishes_left: u8,
    drops_left: u8,
    operator_left: u8,
    crashes_left: u8,
    runs_left: u8,
    forks_left: u8,
    links_left: u8,
    /// The first safety violation seen, if any.
    violation: Option<String>,
    /// Whether anything has been collected.
    collected: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Action {
    Tick,
    /// A register or commit of `file` at `key` logs its entry; `refused`: its check found
    /// the file condemned (the entry stays, as a crashed writer's would).
    Publish {
        key: usize,
        file: usize,
    },
    /// A writer of the clone of the store registers or commits `file` at `key` there: it
    /// logs its entry in the shared change log, and lands on the clone's records (its
    /// commit link stored before, in the shared warehouse), as `Publish` and `Land` do on
    /// the original.
    PublishOnClone {
        key: usize,
        file: usize,
    },
    /// A writer writes `FRESH`.
    WriteFresh,
    Land(usize),
    Expire(usize),
    Drop(usize),
    Backup,
    Restore,
    HandEdit {
        key: usize,
        file: usize,
    },
    /// The owner runs `init --adopt` on the original.
    Adopt,
    /// The collector's store is cloned: from now on a run walks the clone or the original,
    /// writers write the original.
    Fork,
    StartRun {
        clone: bool,
    },
    ReadLog,
    /// Assess every unreachable object (each assessment reads only the run's walk and log
    /// and that object's ledger entry, so writers' steps commute with them); `late`: the
    /// first clock it starts is written but lands only later, and the run crashes.
    Assess {
        late: bool,
    },
    Verify,
    /// Delete every object still doomed (metadata first, as the delete steps do).
    Delete,
    /// Sweep the ledger: clear the entries of objects either walk reached (a deleted
    /// object's stays until its deletion record is released). A run that crashes after
    /// it has cleared them.
    Sweep,
    Finish,
    /// A run releases the ledger entry of a deleted object, once its deletion record is
    /// old enough (`rules::deletion_released`).
    Release(usize),
    Crash,
    LandInFlight,
    /// A symbolic link makes `LINKED` reachable (no change-log entry), until `Unlink`.
    Link,
    Unlink,
}

/// The configuration checked.
struct GcModel {
    /// Where the checked histories start.
    start: Start,
    max_time: i64,
    publishes: u8,
    /// Publications on the clone of the store, once there is one.
    clone_publishes: u8,
    operator: u8,
    crashes: u8,
    runs: u8,
    /// Clones of the store the collector walks (rule N).
    forks: u8,
    /// Identifiers dropped.
    drops: u8,
    /// Symbolic links made (each stays for a while).
    links: u8,
    /// Whether runs after a clone may walk the original too (else only the clone).
    owner_collects: bool,
    /// Whether they still may once the owner adopted the warehouse (else the owner's
    /// collector stops at its adoption).
    owner_collects_after_adopting: bool,
    /// Whether runs write the ledger's per-object clock files of tables beside the clocks
    /// their scan pages carry (the release before this one: a run takes the later of the
    /// two); else the pages alone carry the tables' clocks (this release, issue 29 step A).
    clock_files: bool,
}

/// Where the checked histories start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Start {
    /// Identifier 0 was just registered on file 0.
    Registered,
    /// Identifier 0 was dropped long ago (a finished run saw it so), and its metadata
    /// files are collected: only its tables are left.
    DroppedLongAgo,
    /// Identifier 0 was just registered on file 0, a finished run saw it, and then its
    /// record vanished from the walks (its pointer store's disk is not mounted).
    Vanished,
    /// Identifier 0 was just registered on file 0, the store cloned, and then identifier 1
    /// registered on file 1 in the original.
    ForkedThenRegistered,
}

/// What a set of records reaches: their files (live records) and the tables they name.
fn closure(files: impl Iterator<Item = usize>) -> [bool; OBJECTS] {
    let mut reached = [false; OBJECTS];
    for file in files {
        reached[file] = true;
        for (object, named) in NAMES[file].iter().enumerate() {
            reached[object] |= *named;
        }
    }
    reached
}

fn live_files(records: &[Record; KEYS]) -> impl Iterator<Item = usize> + '_ {
    records.iter().filter_map(|record| match record {
        Record::Live { file, .. } => Some(*file),
        _ => None,
    })
}

impl State {
    /// What a walk of `records` reaches: what they name, and what the link makes
    /// reachable. A walk that finds the link dates `LINKED`'s reachability: nothing dates
    /// it otherwise (a link made and gone between two walks is invisible to every
    /// collector), so no object is deleted within the retention after a walk that reached
    /// it through the link.
    fn walk(&mut self, records: &[Record; KEYS]) -> [bool; OBJECTS] {
        let mut reached = closure(live_files(records));
        if self.linked {
            reached[LINKED] = true;
            self.last_reachable[LINKED] = Some(self.now);
        }
        reached
    }

    /// The records as a walk of the clone (`clone`) or of the original finds them (a
    /// hidden one is absent).
    fn walked(&self, clone: bool) -> Option<[Record; KEYS]> {
        let mut walked = if clone { self.forked? } else { self.records };
        if let Some(key) = self.hidden {
            walked[key] = Record::Absent;
        }
        Some(walked)
    }

    /// What the change log says after a walk that saw `records`: the latest entry that
    /// may have published each object (refused entries excluded), whether a record is
    /// unexplained, and which records the journal lists that the walk finds vanished
    /// (rule X: gone, or held by a record that does not descend from them; not the
    /// records in `forgiven`).
    fn read_log(
        &self,
        records: &[Option<(u8, Option<u8>)>; KEYS],
        walk: i64,
        forgiven: &[Forgiven; KEYS],
    ) -> ([Option<i64>; OBJECTS], bool, [Option<u8>; KEYS]) {
        let mut republished = [None; OBJECTS];
        let untaken = self.untaken(records, walk);
        for (entry, untaken) in self.log.iter().zip(untaken) {
            // What it published, unless refused — at every walk if the store never took
            // it (rule N) —; what it replaced, in any case.
            let published = entry
                .publishes
                .filter(|file| !rules::refused(entry.at, self.ledger[*file].condemned, &TIMING));
            let at = if untaken { i64::MAX } else { entry.at };
            for (file, at) in published
                .map(|file| (file, at))
                .into_iter()
                .chain(entry.replaces.map(|file| (file, entry.at)))
            {
                for (object, named) in closure(std::iter::once(file)).iter().enumerate() {
                    if *named {
                        republished[object] = republished[object].max(Some(at));
                    }
                }
            }
        }
        let mut unexplained = false;
        let mut vanished = [None; KEYS];
        let logged = |commit: u8| self.log.iter().any(|entry| entry.commit == commit);
        for (key, record) in records.iter().enumerate() {
            let seen = self.journal.and_then(|journal| journal.seen[key]);
            if let Some((commit, previous)) = record {
                // Every write since the previous finished run's walk, as far as the chain
                // shows them, must be logged.
                for write in [Some(*commit), *previous].into_iter().flatten() {
                    if Some(write) == seen {
                        break;
                    }
                    unexplained |= !rules::explained(false, logged(write));
                }
            }
            // Rule X: a record the journal saw is gone, or is a stranger (it does not
            // descend from the commit seen: `history::Stranger`); one it found vanished is
            // still gone, or not back (the record does not remember it). Not a record the
            // adoption forgave: that commit at that key.
            let Some(journal) = self.journal else {
                continue;
            };
            let judged = |commit: &u8| !forgiven[key].contains(&Some(*commit));
            if let Some(seen) = journal.seen[key].filter(judged)
                && !self.descends(*record, seen)
            {
                unexplained = true;
                vanished[key] = Some(seen);
            }
            if let Some(gone) = journal.vanished[key].filter(judged)
                && !record
                    .is_some_and(|(commit, previous)| commit == gone || previous == Some(gone))
            {
                unexplained = true;
                vanished[key] = vanished[key].or(Some(gone));
            }
        }
        (republished, unexplained, vanished)
    }

    /// A register or commit of `file` at `key` over `base`, by a writer of the original
    /// or (`clone`) of the clone: it logs its entry, and the check for condemnations runs
    /// in the same window: a condemned file, or one over condemned tables, is refused (its
    /// entry stays: the writer crashed before withdrawing it); else the write is pending.
    fn publish(&mut self, key: usize, file: usize, base: Record, clone: bool) {
        let commit = self.fresh_commit();
        let replaces = match base {
            Record::Live { file, .. } => Some(file),
            _ => None,
        };
        self.log.push(Logged {
            at: self.now,
            key,
            commit,
            publishes: Some(file),
            replaces,
            released: false,
        });
        if !self.refuses(base, file) {
            self.pending.push(Pending {
                key,
                file,
                commit,
                deadline: self.now + 1,
                clone,
            });
        }
    }

    /// The commits `commit` replaced, as the commit links say.
    fn bases(&self, commit: u8) -> Vec<u8> {
        self.links
            .iter()
            .filter(|(linked, _)| *linked == commit)
            .filter_map(|(_, base)| *base)
            .collect()
    }

    /// Whether a record descends from `seen`: its chain holds it, or the commit links
    /// lead from a commit of its chain back to it (`rules::taken`).
    fn descends(&self, record: Option<(u8, Option<u8>)>, seen: u8) -> bool {
        let Some((commit, previous)) = record else {
            return false;
        };
        let held = [Some(commit), previous].into_iter().flatten();
        rules::taken(&[&[seen]], held, |commit| self.bases(commit))[0]
    }

    /// The records an adoption by a store holding `records` forgives: those of the newest
    /// finished journal (its records, and its vanished records) whose commit the store's
    /// record at their key does not descend from (or it lacks one there), each commit on
    /// its own (`gc::adoption::forgiven`).
    fn forgiven(&self, records: &[Option<(u8, Option<u8>)>; KEYS]) -> [Forgiven; KEYS] {
        let Some(journal) = self.journal else {
            return [[None; 2]; KEYS];
        };
        std::array::from_fn(|key| {
            [journal.seen[key], journal.vanished[key]]
                .map(|seen| seen.filter(|seen| !self.descends(records[key], *seen)))
        })
    }

    /// Which entries of the log publish what a walk that saw `records` at `walk` finds
    /// never taken (rule N, by the collector's `rules::taken`): settled, not released by
    /// the adoption that began the current epoch (what the log held and the adopting store
    /// did not take), and neither held by a record (its chain, one deep) nor replaced by a
    /// commit held (the commit links).
    fn untaken(&self, records: &[Option<(u8, Option<u8>)>; KEYS], walk: i64) -> Vec<bool> {
        self.log
            .iter()
            .zip(self.taken(records))
            .map(|(entry, taken)| {
                entry.publishes.is_some()
                    && !entry.released
                    && rules::settled(entry.at, walk, &TIMING)
                    && !taken
            })
            .collect()
    }

    /// Which entries of the log `records` took (rule N's `rules::taken`).
    fn taken(&self, records: &[Option<(u8, Option<u8>)>; KEYS]) -> Vec<bool> {
        let commits: Vec<[u8; 1]> = self.log.iter().map(|entry| [entry.commit]).collect();
        let writes: Vec<&[u8]> = commits.iter().map(|commit| commit.as_slice()).collect();
        let held = records
            .iter()
            .flatten()
            .flat_map(|(commit, previous)| [Some(*commit), *previous])
            .flatten();
        rules::taken(&writes, held, |commit| self.bases(commit))
    }

    fn trusted_clock(&self, object: usize, run: u8) -> Option<Clock> {
        self.ledger[object]
            .clocks
            .iter()
            .filter(|fact| {
                rules::trusts(
                    fact.run == run,
                    fact.landed,
                    self.done_at.get(&fact.run).copied(),
                )
            })
            .map(|fact| Clock {
                start_ms: fact.clock.0,
                walk_ms: fact.clock.1,
            })
            .max_by_key(|clock| (clock.start_ms, clock.walk_ms))
    }

    /// The current run's ledger sweep: clear the entries of objects either walk reached
    /// (a deleted object's stays until its deletion record is released).
    fn sweep(&mut self) -> Option<()> {
        let run = self.run.as_mut()?;
        run.phase = Phase::Swept;
        let run = run.clone();
        for object in 0..OBJECTS {
            if (run.reachable[object] || run.reachable_again[object]) && !self.deleted[object] {
                let markers = std::mem::take(&mut self.ledger[object].markers);
                self.ledger[object] = Entry {
                    markers,
                    ..Entry::default()
                };
            }
        }
        Some(())
    }

    /// Whether `object` exists: written and not deleted.
    fn exists(&self, object: usize) -> bool {
        !self.deleted[object] && (object != FRESH || self.fresh_written.is_some())
    }

    /// Whether existing metadata names `object` (rule (P)).
    fn referenced(&self, object: usize) -> bool {
        (0..FILES).any(|file| self.exists(file) && NAMES[file][object])
    }

    /// Whether a publication of `file` over the record `base` finds something condemned
    /// (rule C): the file, or a table it names that the record's current file does not.
    fn refuses(&self, base: Record, file: usize) -> bool {
        let base = match base {
            Record::Live { file, .. } => Some(file),
            _ => None,
        };
        self.condemned(file)
            || (FILES..OBJECTS).any(|table| {
                NAMES[file][table]
                    && !base.is_some_and(|base| NAMES[base][table])
                    && self.condemned(table)
            })
    }

    fn condemned(&self, object: usize) -> bool {
        let entry = &self.ledger[object];
        entry.condemned.is_some_and(|c| c <= self.now)
            || entry.markers.iter().any(|m| *m <= self.now)
    }

    /// Whether some publication could still make `file` current: a register refuses it
    /// if it or a table it names is condemned (a commit over a base that names the table
    /// keeps that table reachable anyway).
    fn publishable(&self, file: usize) -> bool {
        !self.condemned(file)
            && (FILES..OBJECTS).all(|table| !NAMES[file][table] || !self.condemned(table))
    }

    fn fresh_commit(&mut self) -> u8 {
        self.next_commit += 1;
        self.next_commit
    }

    /// After every step: what pointers reach now, and whether any names a deleted file.
    fn observe(&mut self) {
        let reached = closure(live_files(&self.records));
        for (object, &reached) in reached.iter().enumerate() {
            if reached {
                self.last_reachable[object] = Some(self.now);
                if self.deleted[object] && self.violation.is_none() {
                    self.violation = Some(format!("a pointer names deleted object {object}"));
                }
            }
        }
    }

    fn delete(&mut self, object: usize) {
        if let Some(last) = self.last_reachable[object]
            && self.now - last < TIMING.retention_ms
            && self.violation.is_none()
        {
            self.violation = Some(format!(
                "object {object} deleted at {} though reachable at {last}",
                self.now
            ));
        }
        // Rule (P) protects what a metadata file that may still be published names (new
        // metadata written over condemned tables never is: rule C).
        let named = (0..FILES)
            .any(|file| self.exists(file) && NAMES[file][object] && self.publishable(file));
        if named && self.violation.is_none() {
            self.violation = Some(format!("object {object} deleted while metadata names it"));
        }
        self.collected = true;
        self.deleted[object] = true;
        self.deleted_at[object] = Some(self.now);
    }
}

impl Model for GcModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        // Identifier 0 is registered on file 0 (logged at time 0).
        let mut state = State {
            now: 0,
            records: [
                Record::Live {
                    file: 0,
                    commit: (1, None),
                },
                Record::Absent,
            ],
            next_commit: 1,
            log: vec![Logged {
                at: 0,
                key: 0,
                commit: 1,
                publishes: Some(0),
                replaces: None,
                released: false,
            }],
            pending: Vec::new(),
            deleted: [false; OBJECTS],
            deleted_at: [None; OBJECTS],
            last_reachable: [None; OBJECTS],
            fresh_written: None,
            ledger: Default::default(),
            carried: [None; OBJECTS],
            started_since_finish: false,
            in_flight: None,
            done_at: BTreeMap::new(),
            journal: None,
            forgiven: [[None; 2]; KEYS],
            next_run: 1,
            run: None,
            epoch: 0,
            backup: None,
            hidden: None,
            forked: None,
            links: Vec::new(),
            linked: false,
            publishes_left: self.publishes,
            clone_publishes_left: self.clone_publishes,
            drops_left: self.drops,
            operator_left: self.operator,
            crashes_left: self.crashes,
            runs_left: self.runs,
            forks_left: self.forks,
            links_left: self.links,
            violation: None,
            collected: false,
        };
        if self.start == Start::DroppedLongAgo {
            let commit = (2, Some(1));
            state.records[0] = Record::Dropped { file: 0, commit };
            state.next_commit = 2;
            state.log.clear();
            state.journal = Some(Journal {
                seen: [Some(2), None],
                vanished: [None; KEYS],
                epoch: 0,
                floor: 0,
            });
            state.done_at.insert(0, 0);
            state.drops_left = 0;
            for file in 0..FRESH {
                state.deleted[file] = true;
            }
        }
        if self.start == Start::Vanished {
            state.journal = Some(Journal {
                seen: [Some(1), None],
                vanished: [None; KEYS],
                epoch: 0,
                floor: 0,
            });
            state.done_at.insert(0, 0);
            state.hidden = Some(0);
        }
        if self.start == Start::ForkedThenRegistered {
            state.forked = Some(state.records);
            state.next_commit = 2;
            state.records[1] = Record::Live {
                file: 1,
                commit: (2, None),
            };
            state.links.push((2, None));
            state.log.push(Logged {
                at: 0,
                key: 1,
                commit: 2,
                publishes: Some(1),
                replaces: None,
                released: false,
            });
        }
        state.observe();
        vec![state]
    }

    fn actions(&self, state: &State, actions: &mut Vec<Action>) {
        if state.violation.is_some() {
            return;
        }
        if state.now < self.max_time {
            actions.push(Action::Tick);
        }
        // A writer picks up tables that exist, and publishes a file whose tables exist
        // when its publication starts (gc assumption 3).
        let tables_exist =
            |file: usize| (FILES..OBJECTS).all(|table| !NAMES[file][table] || state.exists(table));
        if state.publishes_left > 0 {
            // (Only where the histories start with tables left over: elsewhere it adds
            // interleavings and nothing the configuration reaches.)
            if self.start == Start::DroppedLongAgo
                && state.fresh_written.is_none()
                && tables_exist(FRESH)
            {
                actions.push(Action::WriteFresh);
            }
            // Or it publishes the file it wrote within the grace period of writing it
            // (assumption 3), whatever happened to its tables meanwhile.
            let just_written = |file: usize| {
                file == FRESH
                    && state
                        .fresh_written
                        .is_some_and(|at| state.now <= at + TIMING.grace_ms)
            };
            for key in 0..KEYS {
                for file in 0..FILES {
                    if state.exists(file) && (tables_exist(file) || just_written(file)) {
                        actions.push(Action::Publish { key, file });
                    }
                }
            }
        }
        // A writer of the clone publishes there in the same way (the configurations with a
        // clone write no `FRESH`), right after the clone as the clone itself is taken
        // (`PARQDB_GC_MODEL_FORK_ANYTIME` lets it write at any step): both hosts run the
        // same workload. Never over a record the original still holds from before the
        // clone: to the clone's collector that is the one store moving on, and it deletes
        // what the idle original still names (assumption 7 of `gc`: round 116, F1, a stated
        // limit). Nor the file the original holds at that key (with both stores reaching
        // the same files, nothing the write does can lose them: it only adds histories).
        let clone_writes_now = (state.now == 0 && state.next_run == 1) || fork_anytime();
        if let Some(forked) = state.forked
            && state.clone_publishes_left > 0
            && clone_writes_now
        {
            for (key, (copy, original)) in forked.iter().zip(&state.records).enumerate() {
                let shared = matches!(copy, Record::Live { .. }) && copy == original;
                let held = match original {
                    Record::Live { file, .. } => Some(*file),
                    _ => None,
                };
                for file in 0..FILES {
                    if !shared && held != Some(file) && state.exists(file) && tables_exist(file) {
                        actions.push(Action::PublishOnClone { key, file });
                    }
                }
            }
        }
        for (at, pending) in state.pending.iter().enumerate() {
            if state.now <= pending.deadline {
                actions.push(Action::Land(at));
            } else {
                actions.push(Action::Expire(at));
            }
        }
        if state.drops_left > 0 {
            for key in 0..KEYS {
                if matches!(state.records[key], Record::Live { .. }) {
                    actions.push(Action::Drop(key));
                }
            }
        }
        // A clone of the store's disk, collecting while the original writes on: taken at
        // the start, after any writes then (a clone taken later only holds more of the
        // original's writes, which it then takes; `PARQDB_GC_MODEL_FORK_ANYTIME` lets it
        // happen between any two runs, for a deeper run).
        let fork_now = state.run.is_none() && (state.now == 0 || fork_anytime());
        if state.forks_left > 0 && state.forked.is_none() && fork_now {
            actions.push(Action::Fork);
        }
        // The operator's steps are on the original; only the owner's adoption follows a
        // fork (the others multiply the histories).
        if state.operator_left > 0 && state.forked.is_none() {
            match state.backup {
                None => actions.push(Action::Backup),
                // A backup older than the retention cannot be restored: what it names may
                // be collected (the reader-safety period is all a collector promises).
                Some((_, taken)) if state.now - taken < TIMING.retention_ms => {
                    actions.push(Action::Restore)
                }
                Some(_) => {}
            }
            // An operator points a record at a file as a backup younger than the
            // retention would: one a pointer reached within the retention.
            if state.last_reachable[0].is_some_and(|at| state.now - at < TIMING.retention_ms) {
                actions.push(Action::HandEdit { key: 0, file: 0 });
            }
        }
        if state.operator_left > 0 {
            actions.push(Action::Adopt);
        }
        if state.in_flight.is_some() {
            actions.push(Action::LandInFlight);
        }
        if state.linked {
            actions.push(Action::Unlink);
        } else if state.links_left > 0 && state.exists(LINKED) {
            actions.push(Action::Link);
        }
        for object in 0..OBJECTS {
            let releasable = state.deleted_at[object]
                .is_some_and(|at| rules::deletion_released(at, state.now, &TIMING));
            if releasable && state.ledger[object] != Entry::default() {
                actions.push(Action::Release(object));
            }
        }
        let Some(run) = &state.run else {
            if state.runs_left > 0 {
                // (After a clone, the operator's one step is the adoption.)
                let owner_collects = self.owner_collects
                    && (self.owner_collects_after_adopting || state.operator_left > 0);
                if state.forked.is_none() || owner_collects {
                    actions.push(Action::StartRun { clone: false });
                }
                if state.forked.is_some() {
                    actions.push(Action::StartRun { clone: true });
                }
            }
            return;
        };
        match run.phase {
            Phase::Walked => actions.push(Action::ReadLog),
            Phase::Read => {
                actions.push(Action::Assess { late: false });
                if state.crashes_left > 0 && state.in_flight.is_none() {
                    actions.push(Action::Assess { late: true });
                }
            }
            Phase::Assessed => actions.push(Action::Verify),
            Phase::Verified => actions.push(Action::Delete),
            // (Without crashes, a sweep and the finish are one step: nothing can come
            // between them that the model tells apart.)
            Phase::Deleted if state.crashes_left > 0 => actions.push(Action::Sweep),
            Phase::Deleted | Phase::Swept => actions.push(Action::Finish),
        }
        if state.crashes_left > 0 {
            actions.push(Action::Crash);
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut state = last.clone();
        match action {
            Action::Tick => state.now += 1,
            Action::Publish { key, file } => {
                state.publishes_left -= 1;
                let base = state.records[key];
                state.publish(key, file, base, false);
            }
            Action::PublishOnClone { key, file } => {
                state.clone_publishes_left -= 1;
                let base = state.forked?[key];
                state.publish(key, file, base, true);
            }
            Action::WriteFresh => state.fresh_written = Some(state.now),
            Action::Land(at) => {
                let pending = state.pending.remove(at);
                // The store its writer writes: the original, or the clone.
                let records = match pending.clone {
                    true => state.forked.as_mut()?,
                    false => &mut state.records,
                };
                let base = records[pending.key].commit().map(|(id, _)| id);
                state.links.push((pending.commit, base));
                records[pending.key] = Record::Live {
                    file: pending.file,
                    commit: records[pending.key].chain(pending.commit),
                };
            }
            Action::Expire(at) => {
                state.pending.remove(at);
            }
            Action::Drop(key) => {
                state.drops_left -= 1;
                let Record::Live { file, .. } = state.records[key] else {
                    return None;
                };
                let commit = state.fresh_commit();
                state.log.push(Logged {
                    at: state.now,
                    key,
                    commit,
                    publishes: None,
                    replaces: Some(file),
                    released: false,
                });
                state.records[key] = Record::Dropped {
                    file,
                    commit: state.records[key].chain(commit),
                };
            }
            Action::Backup => state.backup = Some((state.records, state.now)),
            Action::Restore => {
                state.operator_left -= 1;
                state.records = state.backup?.0;
            }
            Action::HandEdit { key, file } => {
                state.operator_left -= 1;
                let commit = state.fresh_commit();
                state.records[key] = Record::Live {
                    file,
                    commit: state.records[key].chain(commit),
                };
            }
            Action::Adopt => {
                state.operator_left -= 1;
                state.epoch = state.now;
                // The adopting store is the original. The adoption forgives the records of
                // the newest finished journal it lacks or holds a stranger at, and releases
                // what the log holds, settled, and it did not take
                // (`changelog::record_release`).
                let records = state.walked(false)?.map(Record::commit);
                state.forgiven = state.forgiven(&records);
                let taken = state.taken(&records);
                let now = state.now;
                for (entry, taken) in state.log.iter_mut().zip(taken) {
                    entry.released |= !taken && rules::settled(entry.at, now, &TIMING);
                }
            }
            Action::Fork => {
                state.forks_left -= 1;
                state.forked = Some(state.records);
            }
            Action::StartRun { clone } => {
                state.runs_left -= 1;
                let id = state.next_run;
                state.next_run += 1;
                let walked = state.walked(clone)?;
                let records = walked.map(Record::commit);
                // Across an epoch change (the previous journal was planned before the
                // current epoch's adoption), rule X skips the records the adoption forgave.
                let forgiven = match state.journal {
                    Some(journal) if journal.epoch != state.epoch => state.forgiven,
                    _ => [[None; 2]; KEYS],
                };
                state.run = Some(Run {
                    id,
                    phase: Phase::Walked,
                    clone,
                    epoch: state.epoch,
                    forgiven,
                    walk: state.now,
                    reachable: state.walk(&walked),
                    records,
                    republished: [None; OBJECTS],
                    vanished: [None; KEYS],
                    floor: 0,
                    doomed: [None; OBJECTS],
                    reachable_again: [false; OBJECTS],
                    republished_again: [None; OBJECTS],
                    unexplained_again: false,
                    carried: [None; OBJECTS],
                    reads_carried: !state.started_since_finish,
                });
                state.started_since_finish = true;
            }
            Action::ReadLog => {
                let run = state.run.as_ref()?;
                let (republished, unexplained, vanished) =
                    state.read_log(&run.records, run.walk, &run.forgiven);
                // A run started since the latest finished one never finished: what its walk
                // found reachable is lost with it (round 133, J1).
                let given_up = !run.reads_carried;
                // What the previous finished run voided stays void (round 133, G4).
                let inherited = state.journal.map_or(i64::MIN, |journal| journal.floor);
                let floor =
                    rules::floor(state.epoch, unexplained || given_up, run.walk).max(inherited);
                let run = state.run.as_mut()?;
                run.republished = republished;
                run.vanished = vanished;
                run.floor = floor;
                run.phase = Phase::Read;
            }
            Action::Assess { late } => {
                let run = state.run.clone()?;
                let walk = Walk {
                    start_ms: run.walk,
                    end_ms: run.walk,
                };
                let mut late_written = false;
                for object in 0..OBJECTS {
                    if !state.exists(object) || run.reachable[object] {
                        continue;
                    }
                    let carried = state.carried[object].filter(|_| run.reads_carried);
                    let marked = carried
                        .and_then(|(_, condemned)| condemned)
                        .filter(|ms| state.ledger[object].markers.contains(ms));
                    let facts = Facts {
                        last_modified_ms: match object {
                            FRESH => state.fresh_written?,
                            _ => 0,
                        },
                        republished_ms: run.republished[object],
                        // The later of its clock files and the clock the previous finished
                        // run carried.
                        clock: state
                            .trusted_clock(object, run.id)
                            .into_iter()
                            .chain(carried.map(|(clock, _)| clock))
                            .max_by_key(|clock| (clock.start_ms, clock.walk_ms)),
                        // A `c-` file, or the condemnation the previous run carried while
                        // its marker is there.
                        condemned_ms: state.ledger[object].condemned.max(marked),
                    };
                    // Decided at the run's time (its walk's start), as every invocation of
                    // a run decides by its plan's time; facts are stamped when written.
                    let (decision, verdict) = rules::decide(
                        &facts,
                        walk,
                        run.floor,
                        run.walk,
                        state.referenced(object),
                        &TIMING,
                    );
                    // The scan's pages carry the clocks of tables (`indexes/`); the clock
                    // files of metadata files are always written.
                    let table = object >= FILES;
                    let markers = table && !self.clock_files;
                    if table {
                        // A condemnation goes on with its clock (a new clock voids it).
                        let restarted = matches!(decision, ClockDecision::Starts(_));
                        let condemned = marked.filter(|_| !restarted);
                        state.run.as_mut()?.carried[object] =
                            decision.clock().map(|clock| (clock, condemned));
                    }
                    if let ClockDecision::Starts(clock) = decision
                        // A new clock of an entry that holds clock files is a file too
                        // (round 131, F1).
                        && (self.clock_files || !table || !state.ledger[object].clocks.is_empty())
                    {
                        let fact = Fact {
                            clock: (clock.start_ms, clock.walk_ms),
                            run: run.id,
                            landed: state.now,
                        };
                        if late && !late_written {
                            // The write is in flight when the run crashes.
                            late_written = true;
                            state.crashes_left -= 1;
                            state.in_flight = Some((object, fact));
                            state.run = None;
                            break;
                        }
                        state.ledger[object].clocks.push(fact);
                        state.ledger[object].clocks.sort();
                    }
                    match verdict {
                        Verdict::Condemn if markers => {
                            // The page writes the marker, then its clocks and itself: a
                            // run that crashes in between leaves the marker alone.
                            state.ledger[object].markers.push(state.now);
                            if late && !late_written {
                                late_written = true;
                                state.crashes_left -= 1;
                                state.run = None;
                                break;
                            }
                            let carried = &mut state.run.as_mut()?.carried[object];
                            *carried = carried.map(|(clock, _)| (clock, Some(state.now)));
                        }
                        Verdict::Condemn => state.ledger[object].condemned = Some(state.now),
                        Verdict::Delete => {
                            let clock = decision.clock()?;
                            let condemned = facts.condemned_ms?;
                            state.run.as_mut()?.doomed[object] = Some((clock, condemned));
                        }
                        _ => {}
                    }
                }
                if late && !late_written {
                    return None;
                }
                if let Some(run) = state.run.as_mut() {
                    run.phase = Phase::Assessed;
                }
            }
            Action::Verify => {
                let run = state.run.as_ref()?;
                let walked = state.walked(run.clone)?;
                let (republished, unexplained, _) =
                    state.read_log(&walked.map(Record::commit), state.now, &run.forgiven);
                let reachable = state.walk(&walked);
                let run = state.run.as_mut()?;
                run.reachable_again = reachable;
                run.republished_again = republished;
                run.unexplained_again = unexplained;
                run.phase = Phase::Verified;
            }
            Action::Delete => {
                let run = state.run.clone()?;
                for object in 0..OBJECTS {
                    let Some((clock, condemned)) = run.doomed[object] else {
                        continue;
                    };
                    let facts = Facts {
                        last_modified_ms: i64::MIN,
                        republished_ms: run.republished_again[object],
                        clock: Some(clock),
                        condemned_ms: Some(condemned),
                    };
                    let floor = if run.unexplained_again {
                        i64::MAX
                    } else {
                        run.floor
                    };
                    if !run.reachable_again[object]
                        && rules::still_deletable(
                            clock, condemned, &facts, floor, run.walk, &TIMING,
                        )
                    {
                        state.delete(object);
                    }
                }
                state.run.as_mut()?.phase = Phase::Deleted;
            }
            Action::Sweep => {
                state.sweep()?;
            }
            Action::Finish => {
                if state.run.as_ref()?.phase == Phase::Deleted {
                    state.sweep()?;
                }
                let run = state.run.take()?;
                // The clocks its pages carry, but not of what its verification walk reached
                // (its sweep cleared their entries).
                state.carried = std::array::from_fn(|object| {
                    run.carried[object].filter(|_| !run.reachable_again[object])
                });
                state.started_since_finish = false;
                state.done_at.insert(run.id, state.now);
                // The journal lists what the walk saw, what its log read found vanished
                // (`History::vanished`), the epoch the run was planned in, and its floor.
                state.journal = Some(Journal {
                    seen: run.records.map(|record| record.map(|(commit, _)| commit)),
                    vanished: run.vanished,
                    epoch: run.epoch,
                    floor: run.floor,
                });
                let untaken = state.untaken(&run.records, run.walk);
                let mut untaken = untaken.into_iter();
                state.log.retain(|entry| {
                    untaken.next().unwrap_or(true) || !rules::settled(entry.at, run.walk, &TIMING)
                });
            }
            Action::Release(object) => state.ledger[object] = Entry::default(),
            Action::Crash => {
                state.crashes_left -= 1;
                state.run = None;
            }
            Action::LandInFlight => {
                let (object, mut fact) = state.in_flight.take()?;
                fact.landed = state.now;
                state.ledger[object].clocks.push(fact);
                state.ledger[object].clocks.sort();
            }
            Action::Link => {
                state.links_left -= 1;
                state.linked = true;
            }
            Action::Unlink => state.linked = false,
        }
        state.observe();
        Some(state)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(
                "nothing live, retained or named is deleted",
                |_, state: &State| state.violation.is_none(),
            ),
            // (Not while a record is away: then nothing is, by design; nor where nothing
            // loses reachability.)
            Property::sometimes("garbage is collected", |model: &GcModel, state: &State| {
                state.collected
                    || model.start == Start::Vanished
                    || (model.start == Start::ForkedThenRegistered && model.drops == 0)
            }),
        ]
    }
}

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Whether a clone of the store may be taken at any step between runs (else before the
/// first run).
fn fork_anytime() -> bool {
    std::env::var_os("PARQDB_GC_MODEL_FORK_ANYTIME").is_some()
}

/// Check every property over every interleaving of `model` (depth-first: memory holds
/// the visited states' fingerprints and one path); the states explored.
fn check(model: GcModel) -> (usize, usize, usize) {
    let checker = model
        .checker()
        .threads(1)
        .timeout(std::time::Duration::from_secs(env_number(
            "PARQDB_GC_MODEL_TIMEOUT_SECS",
            3600,
        )))
        .spawn_dfs()
        .join();
    checker.assert_properties();
    (
        checker.state_count(),
        checker.unique_state_count(),
        checker.max_depth(),
    )
}

/// `default`, unless `PARQDB_GC_MODEL_*` widen it (a deeper run: BENCHMARKS.md).
fn configured(default: GcModel) -> GcModel {
    GcModel {
        start: default.start,
        max_time: env_number("PARQDB_GC_MODEL_TIME", default.max_time as u64) as i64,
        publishes: env_number("PARQDB_GC_MODEL_PUBLISHES", default.publishes.into()) as u8,
        clone_publishes: env_number(
            "PARQDB_GC_MODEL_CLONE_PUBLISHES",
            default.clone_publishes.into(),
        ) as u8,
        operator: env_number("PARQDB_GC_MODEL_OPERATOR", default.operator.into()) as u8,
        crashes: env_number("PARQDB_GC_MODEL_CRASHES", default.crashes.into()) as u8,
        runs: env_number("PARQDB_GC_MODEL_RUNS", default.runs.into()) as u8,
        forks: env_number("PARQDB_GC_MODEL_FORKS", default.forks.into()) as u8,
        drops: env_number("PARQDB_GC_MODEL_DROPS", default.drops.into()) as u8,
        links: env_number("PARQDB_GC_MODEL_LINKS", default.links.into()) as u8,
        owner_collects: default.owner_collects,
        owner_collects_after_adopting: default.owner_collects_after_adopting,
        clock_files: default.clock_files,
    }
}

fn check_configured(name: &str, default: GcModel) {
    let model = configured(default);
    let described = format!(
        "{name}: time {}, publications {} (on a clone {}), operator actions {}, crashes {}, \
         runs {}, forks {}, links {}, clock files {}",
        model.max_time,
        model.publishes,
        model.clone_publishes,
        model.operator,
        model.crashes,
        model.runs,
        model.forks,
        model.links,
        model.clock_files
    );
    let started = std::time::Instant::now();
    let (states, unique, depth) = check(model);
    eprintln!(
        "gc model ({described}): {states} states explored ({unique} unique, depth {depth}) in {:?}",
        started.elapsed()
    );
}

/// The suite's configurations differ from this one in a field or two.
const SMALL: GcModel = GcModel {
    start: Start::Registered,
    max_time: 5,
    publishes: 0,
    clone_publishes: 0,
    operator: 0,
    crashes: 0,
    runs: 3,
    forks: 0,
    drops: 1,
    links: 0,
    owner_collects: false,
    owner_collects_after_adopting: true,
    clock_files: false,
};

/// Writers register and commit any file at any identifier, publications land late or
/// fail, identifiers drop, while runs come and go.
#[test]
fn publications_never_let_a_run_delete_within_retention() {
    check_configured(
        "publications",
        GcModel {
            publishes: 1,
            ..SMALL
        },
    );
}

/// A writer writes new metadata over an old index's tables at any time — after they
/// were condemned, between a run's verification walk and its deletes — and registers it:
/// publication refuses tables with a condemnation below them (rule C), so no pointer ever
/// names a deleted table.
#[test]
fn new_metadata_over_condemned_tables_never_leaves_a_dangling_pointer() {
    check_configured(
        "new metadata over old tables",
        GcModel {
            start: Start::DroppedLongAgo,
            publishes: 1,
            ..SMALL
        },
    );
}

/// An operator backs up and restores the records, edits one by hand, or adopts the
/// warehouse, between any two steps of any run.
#[test]
fn restores_hand_edits_and_adoption_never_let_a_run_delete_within_retention() {
    check_configured(
        "operator",
        GcModel {
            operator: 1,
            ..SMALL
        },
    );
}

/// The collector's store is cloned at any step (a block-level copy of its disk, which the
/// ownership check cannot tell from it) and the collector walks the clone from then on,
/// while writers register and commit on the original: what they publish is never taken
/// by the clone, so nothing it names is deleted (rule N; GC round 109, F1).
#[test]
fn a_clone_of_the_store_never_lets_a_run_delete_what_the_original_reaches() {
    check_configured(
        "a clone of the store",
        GcModel {
            max_time: 7,
            publishes: 1,
            forks: 1,
            ..SMALL
        },
    );
}

/// After a clone of the store, the owner registers on the original, its collector runs
/// there (its journal lists the new record; it prunes the entry its store took), the owner
/// adopts the warehouse, and then the clone's collector runs past the retention: the
/// owner's journal still counts for every key the adoption did not forgive, so the clone's
/// runs find the owner's record gone and keep what it names (GC round 114, F1: with every
/// key skipped across an epoch change, the clone's collector deleted its metadata).
#[test]
fn an_adoption_after_a_clone_never_lets_the_clone_forget_the_owners_records() {
    check_configured(
        "an adoption after a clone",
        GcModel {
            start: Start::ForkedThenRegistered,
            max_time: 7,
            operator: 1,
            runs: 4,
            drops: 0,
            owner_collects: true,
            ..SMALL
        },
    );
}

/// After a clone of the store, both stores write the same identifier: the owner registered
/// it on the original, and a writer of the clone registers it there on another file. A
/// journal then lists the owner's commit and the clone's at that key (one seen, the other
/// vanished), the owner's run prunes its entry, the owner adopts the warehouse (forgiving
/// the clone's commit, which its store does not descend from), and the clone's collector
/// runs past the retention: the owner's commit still counts there, so the clone's runs find
/// it gone and keep what it names (GC round 115, F1: with the whole key forgiven, the
/// clone's collector deleted the owner's metadata and its table at time 7: the owner's run
/// and the clone's at time 2, the latter starting their clocks, the adoption in that tick,
/// and two more runs on the clone).
///
/// The owner's collector stops at its adoption here: where the original writes nothing
/// more, its later runs only leave journals of the new epoch, against which the clone's
/// runs judge every record. Both limits keep the check near a minute in a debug build:
/// letting the owner collect on takes half as long again, letting the clone write at any
/// step more than ten times as long (`PARQDB_GC_MODEL_FORK_ANYTIME`).
#[test]
fn an_adoption_forgives_records_not_keys_when_both_stores_write() {
    check_configured(
        "both stores write, then an adoption",
        GcModel {
            start: Start::ForkedThenRegistered,
            max_time: 7,
            clone_publishes: 1,
            operator: 1,
            runs: 4,
            drops: 0,
            owner_collects: true,
            owner_collects_after_adopting: false,
            ..SMALL
        },
    );
}

/// A run crashes at any step, one of its clock writes landing at any later time (after
/// later runs finished).
#[test]
fn crashes_and_late_writes_never_let_a_run_delete_within_retention() {
    check_configured(
        "crashes",
        GcModel {
            max_time: 6,
            crashes: 1,
            ..SMALL
        },
    );
}

/// A record a finished run saw vanishes from the walks (its pointer store's disk is not
/// mounted) for longer than the retention, and comes back: it stays unexplained in every
/// run while it is away, so nothing it names is deleted (round 36 H8: with the record
/// forgotten after one run, its files went).
#[test]
fn records_away_longer_than_the_retention_never_lose_their_files() {
    check_configured(
        "vanishing records",
        GcModel {
            start: Start::Vanished,
            max_time: 7,
            runs: 4,
            ..SMALL
        },
    );
}

/// The previous release's ledger (issue 29, step A, first half): runs write the tables'
/// clock files beside the clocks their scan pages carry, and take the later of the two.
/// The same properties hold with writers publishing anything anywhere, new metadata over
/// condemned tables, an operator restoring, editing or adopting, and runs that crash (their
/// pages count for nothing, their clock files once trusted).
#[test]
fn clock_files_beside_the_pages_keep_every_property() {
    for (name, model) in [
        (
            "clock files and pages, publications",
            GcModel {
                publishes: 1,
                clock_files: true,
                ..SMALL
            },
        ),
        (
            "clock files and pages, new metadata over old tables",
            GcModel {
                start: Start::DroppedLongAgo,
                publishes: 1,
                clock_files: true,
                ..SMALL
            },
        ),
        (
            "clock files and pages, operator",
            GcModel {
                operator: 1,
                clock_files: true,
                ..SMALL
            },
        ),
        (
            "clock files and pages, crashes",
            GcModel {
                max_time: 6,
                crashes: 1,
                clock_files: true,
                ..SMALL
            },
        ),
    ] {
        check_configured(name, model);
    }
}

/// A table becomes reachable through a symbolic link no change-log entry records (a live
/// table's directory replaced by a link to it), for a while, with runs that crash at any
/// step, in both worlds of the tables' clocks (clock files beside the pages, or the pages
/// alone): a crashed run's walk that found it reachable is lost with the run, so the next
/// run starts every clock again (round 133, J1: with the clock files, the next run took
/// the clock file of the run before the link, and the table went two ticks after the
/// link was gone, with a retention of three).
#[test]
fn a_link_no_log_records_and_a_crashed_run_never_let_a_run_delete_within_retention() {
    for clock_files in [true, false] {
        check_configured(
            "a link no log records, crashes",
            GcModel {
                start: Start::DroppedLongAgo,
                max_time: 6,
                crashes: 1,
                runs: 4,
                links: 1,
                clock_files,
                ..SMALL
            },
        );
    }
}
