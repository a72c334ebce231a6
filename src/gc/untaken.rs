//! The logged publications this pointer store never took.
//!
//! A change-log entry is written before its write (see `catalog::changelog`), so a settled
//! entry whose write this store does not hold is one of three things: a write that lost
//! and said so (its writer withdraws the entry), a writer stopped between its entry and
//! its write (killed), or a write that **another pointer store** took — a copy of this one
//! that the ownership check cannot tell from it (a cloned disk or host, which keeps the
//! directory's inode and birth time; a backup restored *into* the store's directory; a
//! replica under the store's own name) and that went on writing. The collector cannot see
//! that store, and nothing in this one tells the last two cases apart, so what such an
//! entry publishes is kept: it counts as published at every walk (no retention clock
//! starts), and the entry is never pruned — until this store shows the write (a record
//! that remembers one of its commit ids, or a write this store took that replaced what it
//! published), or `init --adopt` says this store is the catalog: the entries the adoption
//! found in the log (`_gc/adoptions/<ms>.json`, written before its marker) are judged as
//! before (a publication restarts clocks when it was logged; the epoch floor gives
//! everything a full retention from the adoption). Which entries came before the epoch is
//! decided by that list, not by clocks: a writer whose clock is behind the adopter's dates
//! a later entry before the epoch (the model check found it at once). An epoch an earlier
//! release began (no list) releases nothing. GC round
//! 109, F1: a clone of the owner's disk on another host, sharing the warehouse, deleted
//! the owner's later index — none of its records differed from the owner's.
//!
//! What it costs: one `PUT` of an empty link beside each pointer write; one listing of
//! the links per run (`history::read`, which follows them for rule X too); one read of the record at a
//! key whose settled entry neither the walk nor a link explains; and a killed writer's
//! metadata file (and the files only it names) stays until an adoption, reported in every
//! run.

use std::collections::{BTreeMap, BTreeSet};

use uuid::Uuid;

use crate::catalog::Catalog;
use crate::catalog::changelog::{self, Change, ChangeLog, Links, LoggedWrite};
use crate::error::Result;

use super::rules::{self, Timing};

/// The settled entries of the current epoch whose publication this store never took.
#[derive(Debug, Default)]
pub(crate) struct Untaken {
    /// The entries' names.
    pub entries: BTreeSet<String>,
    /// The metadata locations they publish, with the times they were logged and the
    /// entries logged then.
    pub publications: BTreeMap<String, BTreeMap<i64, BTreeSet<String>>>,
    /// Those of them whose commit some link names as the commit it replaced: only through
    /// such a link can a later write show them taken, so only they hold back the pruning
    /// of links (a writer killed before its write, whose commit no writer ever read,
    /// holds back nothing: GC round 111, F2).
    pub pinning: BTreeSet<String>,
}

/// Which publications of `log` this store never took, judged after a walk that started at
/// `walk_start_ms` and found `records` (store key -> commit id) and the commits `walked`
/// (every record's, and the writes of each since the previous run), in an ownership epoch
/// whose claim or adoption released the entries `released` (`None`: it listed none).
#[allow(clippy::too_many_arguments)]
pub(crate) async fn untaken(
    catalog: &Catalog,
    log: &ChangeLog,
    records: &BTreeMap<String, Uuid>,
    walked: Vec<Uuid>,
    links: &Links,
    walk_start_ms: i64,
    released: Option<&BTreeSet<String>>,
    timing: &Timing,
) -> Result<Untaken> {
    // Every write of the log, with its entry.
    let logged: Vec<(&Change, &LoggedWrite)> = log
        .changes
        .iter()
        .flat_map(|change| change.writes.iter().map(move |write| (change, write)))
        .collect();
    // Judged: a settled publication the claim or adoption that began the current epoch
    // did not release (`changelog::record_release`).
    let settled: Vec<usize> = (0..logged.len())
        .filter(|at| {
            let (change, write) = logged[*at];
            write.publishes.is_some() && rules::settled(change.at_ms, walk_start_ms, timing)
        })
        .collect();
    if settled.is_empty() {
        return Ok(Untaken::default());
    }
    let judged: Vec<usize> = settled
        .into_iter()
        .filter(|at| {
            let change = logged[*at].0;
            // An epoch without a list (begun by an earlier release, or its list lost)
            // releases nothing: its clock dates nothing before it (GC round 113, M2: an
            // earlier release's adoption released the owner's writes on a clone).
            released.is_none_or(|released| !released.contains(&change.name))
        })
        .collect();
    if judged.is_empty() {
        return Ok(Untaken::default());
    }
    let commits: Vec<&[Uuid]> = judged
        .iter()
        .map(|at| logged[*at].1.commit_ids.as_slice())
        .collect();
    // What the walk holds: every record's commit, and its writes since the previous run.
    let mut held = walked;
    let base = |commit: Uuid| links.bases(commit);
    let taken = rules::taken(&commits, held.iter().copied(), base);
    // The rest: read each key's record again (its chain remembers more than the writes
    // since the previous run).
    let keys: BTreeSet<&str> = judged
        .iter()
        .zip(&taken)
        .filter(|(_, taken)| !**taken)
        .map(|(at, _)| logged[*at].1.key.as_str())
        .collect();
    if keys.is_empty() {
        return Ok(Untaken::default());
    }
    for key in keys {
        // Only a record the walk saw as it is now: a write that landed after the walk is
        // in no journal this run writes, and an entry it took away from rule N would leave
        // a copy of the store that lacks it nothing to keep its files by (GC round 114,
        // F2). The next walk sees it.
        if let Some(chain) = changelog::chain_at(catalog, key).await?
            && records.get(key) == Some(&chain.commit_id())
        {
            held.extend(chain.commits());
        }
    }
    let taken = rules::taken(&commits, held, base);
    let mut untaken = Untaken::default();
    for (at, _) in judged.iter().zip(taken).filter(|(_, taken)| !*taken) {
        let (change, write) = logged[*at];
        untaken.entries.insert(change.name.clone());
        if write.commit_ids.iter().any(|id| links.replaced(*id)) {
            untaken.pinning.insert(change.name.clone());
        }
        if let Some(location) = &write.publishes {
            untaken
                .publications
                .entry(location.clone())
                .or_default()
                .entry(change.at_ms)
                .or_default()
                .insert(change.name.clone());
        }
    }
    Ok(untaken)
}
