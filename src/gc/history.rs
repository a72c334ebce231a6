//! What the catalog did around a walk, from durable evidence only: the change log (see
//! `catalog::changelog`), read after the walk, against the records the walk found and the
//! records the previous finished run's walk found (its journal).
//!
//! * **Republished**: everything a logged register, commit or rename step names, and
//!   everything a logged write replaces (a commit's base, a dropped or moved record's
//!   location: current until the write, even where no walk saw it, as after a restored
//!   backup or a hand edit), with the time it was logged. A walk that started less than `settle` after that time may have
//!   missed the publication, so no retention clock of those objects may come from it
//!   (see [`rules`](super::rules)).
//! * **Unexplained**: a record whose commit id the previous finished run did not see at
//!   that key and no log entry announces, or a record that run saw and that is gone. The
//!   catalog wrote neither (a restored backup, a hand edit, a stale copy re-homed with
//!   `init --adopt`, a writer of an earlier version); what such records named before may
//!   have been reachable at any time since the previous run, so every retention clock
//!   restarts at this walk.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use futures::{StreamExt, TryStreamExt};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::journal::JournalFacts;
use super::refs::RefMap;
use super::rules::{self, Timing};
use crate::catalog::Catalog;
use crate::catalog::changelog;
use crate::error::{Error, ErrorKind, Result};
use crate::metadata::named::{is_metadata, names_of_metadata};

/// What the change log says about a walk.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub(crate) struct History {
    /// Everything a logged publication names, with the latest time it was logged.
    pub republished: RefMap,
    /// Why the catalog's records cannot be explained by the log, if they cannot.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unexplained: Vec<String>,
    /// Records the previous finished run's journal lists that the walk did not find (the
    /// catalog never removes a record, it writes tombstones: a pointer store's disk not
    /// mounted, a hand edit), with the commit id last seen. This run's journal lists them
    /// too, so they stay unexplained, and every clock restarts, in every run until they
    /// are back (round 36 H8: forgotten after one run, an index whose records were away
    /// longer than the retention lost its files).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub vanished: BTreeMap<String, Uuid>,
    /// How many log entries were read.
    #[serde(default)]
    pub changes: u64,
    /// The settled entries whose publication this pointer store never took (see
    /// [`untaken`](super::untaken)): what they publish is kept, and they are not pruned.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub untaken: BTreeSet<String>,
    /// Those of them that hold back the pruning of commit links (see `untaken::Untaken`).
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub pinning: BTreeSet<String>,
}

/// What a walk found that the change log must explain (see `reachability::Observation`).
pub(crate) struct Walked<'a> {
    /// Every record's store key and commit id.
    pub records: &'a BTreeMap<String, Uuid>,
    /// The writes of each record since the previous finished run's walk.
    pub changed: &'a BTreeMap<String, Vec<Uuid>>,
    /// Records that do not remember the commit seen at their key.
    pub unrelated: &'a BTreeMap<String, Stranger>,
    /// Keys of vanished records that hold a record that does not remember them.
    pub not_back: &'a BTreeSet<String>,
}

/// A record at a key that does not remember a commit a run saw there. A record's chain
/// shorter than `record::HISTORY` is its whole history since its key was absent: it
/// never held that commit (another disk's copy under a mount point, a register while the
/// seen record was away, a backup put back). A full chain has forgotten its beginning: it
/// descends from the seen commit if the commit links lead from its oldest remembered
/// commit back to it (a busy index), and is a stranger otherwise (`history` decides).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stranger {
    /// The oldest commit a full chain remembers; `None` for a whole chain.
    pub origin: Option<Uuid>,
}

/// How many unexplained records are named in a report before the rest are counted.
const NAMED: usize = 5;

/// Read the change log after a walk that made `observation` (the records it found, store
/// key → commit id, and the writes of each since the previous finished run's walk), given
/// what that walk found (`previous`), under the collector's `timing`.
/// The walk started at `walk_start_ms`, in the ownership epoch that began at `epoch_ms`.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn read(
    catalog: &Catalog,
    observation: Walked<'_>,
    previous: &JournalFacts,
    timing: &Timing,
    walk_start_ms: i64,
    epoch_ms: i64,
    concurrency: usize,
) -> Result<History> {
    let warehouse = catalog.warehouse();
    let log = changelog::read(warehouse, concurrency).await?;
    // Which commits each commit replaced, as the writes' links say (one listing).
    let links = changelog::Links::read(warehouse).await?;
    // What the claim or adoption that began the epoch released and forgave.
    let release = changelog::released_at(warehouse, epoch_ms).await?;
    let untaken = super::untaken::untaken(
        catalog,
        &log,
        observation.records,
        observation
            .records
            .values()
            .chain(observation.changed.values().flatten())
            .copied()
            .collect(),
        &links,
        walk_start_ms,
        release.as_ref().map(|release| &release.released),
        timing,
    )
    .await?;
    let mut history = History {
        changes: log.changes.len() as u64,
        untaken: untaken.entries,
        pinning: untaken.pinning,
        ..History::default()
    };
    let untaken_publications = untaken.publications;
    let untaken = &untaken_publications;
    for name in &log.unreadable {
        history.unexplained.push(format!(
            "`{}` under the change log is no entry this catalog wrote, or does not parse; what it announced is unknown",
            warehouse.absolute(name)
        ));
    }
    let (records, changed) = (observation.records, observation.changed);
    let mut logged: HashSet<Uuid> = HashSet::new();
    // Location -> (times it was published, times it was replaced).
    let mut published: HashMap<String, (Vec<i64>, Vec<i64>)> = HashMap::new();
    for change in &log.changes {
        for write in &change.writes {
            logged.extend(write.commit_ids.iter().copied());
            if let Some(location) = &write.publishes {
                published
                    .entry(location.clone())
                    .or_default()
                    .0
                    .push(change.at_ms);
            }
            if let Some(location) = &write.replaces {
                published
                    .entry(location.clone())
                    .or_default()
                    .1
                    .push(change.at_ms);
            }
        }
    }
    let mut unexplained = Vec::new();
    if previous.unknown {
        unexplained.push(
            "the journal of the previous finished gc run is gone or unreadable: what that run saw is unknown".to_owned(),
        );
    }
    for (key, writes) in changed {
        // Every write since the previous finished run's walk, as far as the record's
        // chain shows them: the catalog logged each before writing it.
        if let Some(commit) = writes
            .iter()
            .find(|commit| !rules::explained(false, logged.contains(commit)))
        {
            unexplained.push(format!(
                "record `{key}` holds (or went through) commit {commit}, which the previous finished gc run did not see there and the change log does not announce"
            ));
        }
    }
    let mut vanish = |key: &String, commit: Uuid, why: &str| {
        if history.vanished.insert(key.clone(), commit).is_none() {
            unexplained.push(format!(
                "record `{key}` {why} (a pointer store whose disk is not mounted? the catalog never removes a record: put it back; until then no retention clock runs. If the pointer store was restored from a backup on purpose, run `init --adopt`)"
            ));
        }
    };
    // A record that does not remember the commit seen at its key is the seen record
    // away, not its successor (rounds 37 J2 and 38 K1, K3, K4): unless its chain is full
    // and the commit links lead from its oldest remembered commit back to the seen one
    // (see `Stranger`; every pointer write stores its link before it is issued). That its
    // oldest commit was logged since is no evidence: a clone of the store committing more
    // than a chain remembers passed for the owner's successor, and its collector deleted
    // the owner's live index (round 111, F3; round 113, M1, through a commit without a
    // link). A backup put back in place is a stranger too, until `init --adopt` says it is
    // the catalog.
    let strange = |found: Option<&Stranger>, seen: Uuid| {
        found.is_some_and(|stranger| {
            stranger
                .origin
                .is_none_or(|origin| !links.descends([origin], seen))
        })
    };
    // Rule X across an adoption: the records the adoption forgave (those the adopting
    // store lacked, or held without descending from what the previous run saw: a backup
    // put back) are gone for good. Every other record the previous run saw must still be
    // there and descend from it: a copy of the store that passes the ownership check reads
    // the owner's adoption too, and forgetting the owner's records there let its collector
    // delete them (GC round 114, F1). Record by record: a key where the previous run saw
    // the copy's commit (as vanished) beside the owner's keeps the owner's judged (round
    // 115, F1). An epoch without a list (begun by an earlier release) forgives nothing.
    let forgiven = |(key, commit): &(&String, &Uuid)| {
        previous.adopted_since
            && release.as_ref().is_some_and(|release| {
                release
                    .forgiven
                    .get(*key)
                    .is_some_and(|commits| commits.contains(*commit))
            })
    };
    for (key, commit) in previous.records.iter().filter(|seen| !forgiven(seen)) {
        if !records.contains_key(key) {
            vanish(
                key,
                *commit,
                "which the previous finished gc run saw, is gone",
            );
        } else if strange(observation.unrelated.get(key), *commit) {
            vanish(
                key,
                *commit,
                "which the previous finished gc run saw, holds a record that does not descend from it (another copy under a mount point, or registered again while it was away, or put back from a backup)",
            );
        }
    }
    for (key, commit) in previous.vanished.iter().filter(|seen| !forgiven(seen)) {
        if !records.contains_key(key) || observation.not_back.contains(key) {
            vanish(
                key,
                *commit,
                "vanished in an earlier gc run and is not back",
            );
        }
    }
    for (key, commit) in &previous.untrusted {
        let gone = !records.contains_key(key) && !previous.records.contains_key(key);
        if gone || strange(observation.unrelated.get(key), *commit) {
            vanish(
                key,
                *commit,
                "is listed by a newer gc journal that no longer counts (`_gc/` copied or restored, a run abandoned) and is gone or holds a record that does not descend from it",
            );
        }
    }
    let count = unexplained.len();
    history
        .unexplained
        .extend(unexplained.into_iter().take(NAMED));
    if count > NAMED {
        history
            .unexplained
            .push(format!("and {} more such records", count - NAMED));
    }
    let registry = catalog.registry();
    let named: Vec<Option<(i64, Named, String)>> = futures::stream::iter(published)
        .map(|(location, (published, replaced))| async move {
            let Ok(name) = warehouse.relative(&location) else {
                return Ok::<_, Error>(None);
            };
            // An entry logged `settle` after the file's condemnation became visible
            // belongs to a publication that checked after it, and was refused: it
            // published nothing (a retried register of a condemned file must not delay
            // its collection). What a write replaces was current until it landed,
            // condemned or not (a restored backup, a hand edit no walk saw).
            let condemned = match published.is_empty() {
                true => None,
                false => warehouse.condemnation(&name).await?,
            };
            // A publication this store never took counts as published now, at every walk
            // until it is taken: another store may hold it (see `untaken`).
            let never_taken = |at: &i64| {
                untaken
                    .get(&location)
                    .is_some_and(|times| times.contains_key(at))
            };
            let Some(at) = published
                .into_iter()
                .filter(|at| !rules::refused(*at, condemned, timing))
                .map(|at| if never_taken(&at) { i64::MAX } else { at })
                .chain(replaced)
                .max()
            else {
                return Ok(None);
            };
            let named = match names_of_metadata(warehouse, registry, &name).await {
                Ok(names) => Named::Names(names),
                // It leads to a file that may name anything (too large to read, naming
                // too many files): a publication of it, landed or not (a register killed
                // or timed out before it withdrew its entry), may have made anything
                // reachable. Not an error: an error would stop every run until the entry
                // is gone, and after (no run finishes).
                Err(err) if err.kind() == ErrorKind::InvalidIndexMetadata => Named::Unknown {
                    why: err.message().to_owned(),
                    // The published file itself is no metadata: every writer refused it
                    // (it reads the file), in any store. Else what the file leads to
                    // changed since (a family reference's file written later): a writer
                    // may have published it.
                    publishable: is_metadata(warehouse, registry, &name).await?,
                },
                Err(err) => return Err(err),
            };
            Ok(Some((at, named, location)))
        })
        .buffer_unordered(concurrency.max(1))
        .try_collect()
        .await?;
    for (at, named, location) in named.into_iter().flatten() {
        match named {
            Named::Names(names) => {
                for name in names {
                    history.republished.insert(name, at);
                }
            }
            Named::Unknown { why, publishable } => {
                history.unexplained.push(format!(
                    "a logged publication may have made anything reachable: {why}"
                ));
                // No store took a publication of a file that is no metadata (every writer
                // refuses it): its entry is pruned once settled, or collection would stop
                // for good (round 34, finding 5). One of metadata that leads to such a
                // file stays untaken, keeping everything, until the store shows its write
                // or an adoption: what the file leads to may have changed since it was
                // published (pruning it let a clone's collector delete the owner's live
                // index: round 111, F1).
                if !publishable {
                    for entry in untaken
                        .get(&location)
                        .into_iter()
                        .flat_map(|at| at.values())
                        .flatten()
                    {
                        history.untaken.remove(entry);
                        history.pinning.remove(entry);
                    }
                }
            }
        }
    }
    history.republished.add_link_targets(warehouse).await?;
    Ok(history)
}

/// What a logged publication names.
enum Named {
    Names(Vec<String>),
    /// It may name anything (why); whether the published file itself is metadata a writer
    /// accepts (what it leads to may name anything).
    Unknown {
        why: String,
        publishable: bool,
    },
}

impl History {
    /// The warning for the publications this store never took, if there are any.
    pub(crate) fn untaken_warning(&self) -> Option<String> {
        let first = self.untaken.first()?;
        Some(format!(
            "{} change-log entries (the first `{first}`) announce publications this pointer store never took: what they publish is kept, and collection of it waits. Either their writers were stopped between logging and writing, or another pointer store with this catalog's id took them — a copy the ownership check cannot tell from this one (a cloned disk or host, a backup restored into the store's directory, a replica) that is still writing: stop it. If this store is the catalog's and no copy writes, `parqdb-catalog init --adopt` releases them (adopting restarts every retention clock)",
            self.untaken.len()
        ))
    }

    /// The earliest walk a retention clock may come from, given the ownership epoch
    /// `epoch_ms` and this history's walk starting at `walk_start_ms`: that walk itself
    /// when the records cannot be explained, or when a run planned since the previous
    /// finished run never finished (`given_up`).
    pub(crate) fn floor(&self, epoch_ms: i64, walk_start_ms: i64, given_up: bool) -> i64 {
        rules::floor(
            epoch_ms,
            given_up || !self.unexplained.is_empty(),
            walk_start_ms,
        )
    }
}
