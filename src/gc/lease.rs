//! The run lease: at most one collector run writes the ledger and deletes at a time.
//!
//! The lease is a sequence of immutable generation objects `<root>/_gc/lease/<gen>.json`
//! (zero-padded, so names sort numerically), each written with create-if-absent — the
//! only condition every object store offers (the local file system has no
//! replace-if-version). The highest generation is the lease's state, and the generation
//! number is the run's **fencing token**: it only ever grows.
//!
//! The holder is a **run**, not a process: a run's many invocations and its concurrent
//! workers (the partitions of one run scanned at once) all hold the lease as that run.
//!
//! * **acquire**: read the highest generation `g`; if it is held by another run and not
//!   expired, the lease is busy; otherwise create `g + 1` naming this run. Of several runs
//!   racing for `g + 1`, exactly one create succeeds (a sibling worker that loses the race
//!   to its own run holds the lease through the winner's generation).
//! * **renew** (before every destructive batch, and before the scan records a ledger
//!   fact once half the lease has passed): list the generations and read the highest:
//!   the run still holds the lease only if it names the run and is not released. If less
//!   than half of the lease is left, extend it by creating the next generation. If another
//!   run took the lease over after it expired, the highest generation names that run (or
//!   the create loses to it), and this run stops before deleting anything more. Listing
//!   matters: old generations are pruned, so a run paused past its expiry (SIGSTOP, a long
//!   GC pause, a slow store) could otherwise re-create a pruned generation and believe it
//!   still held the lease — a fence must never go backwards.
//! * **release** (when the run finishes): create a final generation marked released;
//!   every worker of the run still under way stops at its next renewal.
//!
//! Every eighth generation written prunes the generations older than the last few (never
//! the highest).
//!
//! A renewal also proves the run is on time: a held lease is only used within half its
//! duration of the renewal that proved it ([`Lease::fresh`]), on the monotonic clock and
//! in run time ([`Lease::needs_renewal`]). A crashed run's lease simply expires.
//!
//! Ledger facts are fenced too: a retention clock is derived from the run's walk, and is
//! only sound if no other run finished between that walk and the record (the next run's
//! lineage evidence trusts the latest finished run's journal). A run whose lease was
//! taken over while it was paused therefore stops before recording anything more. The lease fences runs against each other; what keeps a *paused* run from
//! deleting a re-published object is the condemnation protocol (see the module docs).

use std::time::Duration;

use bytes::Bytes;
use futures::TryStreamExt;
use serde::{Deserialize, Serialize};
use tokio::time::Instant;
use uuid::Uuid;

use super::config::MAX_LEASE;
use crate::error::{Error, ErrorKind, Result};
use crate::warehouse::layout::LEASE_DIR;
use crate::warehouse::{Fetched, ListItem, Warehouse};

/// How many old generations are kept for inspection.
const KEEP_GENERATIONS: u64 = 8;

/// How often a renewal looks again after losing a generation to a sibling worker.
const RENEW_ATTEMPTS: usize = 32;

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
struct Generation {
    holder: Uuid,
    acquired_ms: i64,
    expires_ms: i64,
    released: bool,
}

/// A held lease.
#[derive(Debug)]
pub(crate) struct Lease {
    warehouse: Warehouse,
    generation: u64,
    holder: Uuid,
    acquired_ms: i64,
    duration_ms: i64,
    /// When the held generation expires (run time).
    expires_ms: i64,
    /// When the latest renewal (or the acquisition) started, on the monotonic clock.
    proved_at: Instant,
}

/// The outcome of trying to acquire the lease.
#[derive(Debug)]
pub(crate) enum Acquired {
    /// This run holds the lease.
    Held(Box<Lease>),
    /// Another run holds it until `expires_ms`.
    Busy { holder: Uuid, expires_ms: i64 },
}

fn generation_name(generation: u64) -> String {
    format!("{LEASE_DIR}/{generation:020}.json")
}

/// Every generation number present.
async fn generations(warehouse: &Warehouse) -> Result<Vec<u64>> {
    warehouse
        .list(LEASE_DIR)
        .try_filter_map(|item| async move {
            Ok(match item {
                // Only `_gc/lease/<20 digits>.json`, directly in the lease directory.
                ListItem::Object(listed) => listed
                    .name
                    .strip_prefix(LEASE_DIR)
                    .and_then(|rest| rest.strip_prefix('/'))
                    .and_then(|name| name.strip_suffix(".json"))
                    .and_then(|number| number.parse::<u64>().ok())
                    .filter(|generation| listed.name == generation_name(*generation)),
                ListItem::Skipped { .. } => None,
            })
        })
        .try_collect()
        .await
}

/// The highest generation number, if any.
async fn newest(warehouse: &Warehouse) -> Result<Option<u64>> {
    Ok(generations(warehouse).await?.into_iter().max())
}

/// The highest generation and its content, if any. A generation that cannot be read as a
/// lease (a torn write after a power loss, a hand edit) is held by an unknown run for the
/// longest lease any run may take, from when it landed: no run is fenced out early, and
/// none is fenced out for good.
async fn latest(warehouse: &Warehouse) -> Result<Option<(u64, Generation)>> {
    let Some(generation) = newest(warehouse).await? else {
        return Ok(None);
    };
    let name = generation_name(generation);
    let landed_ms = match warehouse.get(&name, 64 * 1024).await? {
        Fetched::Object(bytes, listed) => match serde_json::from_slice(&bytes) {
            Ok(content) => return Ok(Some((generation, content))),
            Err(_) => listed.last_modified_ms,
        },
        Fetched::TooLarge(_) => match warehouse.head(&name).await? {
            Some(listed) => listed.last_modified_ms,
            None => return Err(vanished(generation)),
        },
        Fetched::Missing => return Err(vanished(generation)),
    };
    let longest = i64::try_from(MAX_LEASE.as_millis()).unwrap_or(i64::MAX);
    Ok(Some((
        generation,
        Generation {
            holder: Uuid::nil(),
            acquired_ms: landed_ms,
            expires_ms: landed_ms.saturating_add(longest),
            released: false,
        },
    )))
}

fn vanished(generation: u64) -> Error {
    Error::new(
        ErrorKind::StoreUnavailable,
        format!("gc lease generation {generation} vanished while it was read; try again"),
    )
}

/// The lease as the latest generation records it (for `gc status`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) struct LeaseState {
    /// The fencing token.
    pub(crate) generation: u64,
    /// The run holding (or that last held) the lease.
    pub(crate) holder: Uuid,
    /// When that run acquired it.
    pub(crate) acquired_ms: i64,
    /// When it expires (or was released).
    pub(crate) expires_ms: i64,
    /// Whether it was released.
    pub(crate) released: bool,
}

/// The latest lease generation, if any.
pub(crate) async fn state(warehouse: &Warehouse) -> Result<Option<LeaseState>> {
    Ok(latest(warehouse)
        .await?
        .map(|(generation, content)| LeaseState {
            generation,
            holder: content.holder,
            acquired_ms: content.acquired_ms,
            expires_ms: content.expires_ms,
            released: content.released,
        }))
}

/// Create generation `generation`; `false` if it already exists.
async fn create(warehouse: &Warehouse, generation: u64, content: &Generation) -> Result<bool> {
    let bytes = serde_json::to_vec(content).unwrap_or_default();
    warehouse
        .put_if_absent(&generation_name(generation), Bytes::from(bytes))
        .await
}

/// The generation after `generation`; a generation so large that none can follow it is
/// not one this collector wrote (a fence must never wrap around).
fn successor(generation: u64) -> Result<u64> {
    generation.checked_add(1).ok_or_else(|| {
        Error::new(
            ErrorKind::CorruptRecord,
            format!(
                "gc lease generation `{}` is the largest possible one, so the lease can never be taken again; it was not written by a collector: remove it by hand",
                generation_name(generation)
            ),
        )
    })
}

fn lost() -> Error {
    Error::new(
        ErrorKind::CommitConflict,
        "this gc run lost its lease to another run (it ran longer than the lease without renewing); stopping before deleting more",
    )
}

impl Lease {
    /// Acquire the lease for run `holder` at `now_ms` for `duration_ms`.
    pub(crate) async fn acquire(
        warehouse: &Warehouse,
        holder: Uuid,
        now_ms: i64,
        duration_ms: i64,
    ) -> Result<Acquired> {
        let next = match latest(warehouse).await? {
            Some((generation, current))
                if !current.released && current.holder != holder && current.expires_ms > now_ms =>
            {
                if plausible(&current, now_ms) {
                    return Ok(Acquired::Busy {
                        holder: current.holder,
                        expires_ms: current.expires_ms,
                    });
                }
                // No holder on a sane clock writes an expiry this far ahead (a run with
                // its clock years ahead, a lease of an earlier version without a bound):
                // take it over; the holder's next renewal finds the newer generation.
                tracing::warn!(
                    holder = %current.holder,
                    expires_ms = current.expires_ms,
                    "gc: taking over a lease that expires implausibly far ahead"
                );
                successor(generation)?
            }
            Some((generation, _)) => successor(generation)?,
            None => 1,
        };
        let content = Generation {
            holder,
            acquired_ms: now_ms,
            expires_ms: now_ms.saturating_add(duration_ms),
            released: false,
        };
        let proved_at = Instant::now();
        let mut next = next;
        let mut created = create(warehouse, next, &content).await?;
        // A name no generation was written at (a directory or a dangling link made by
        // hand there) is occupied but never listed: go on past it, or every later run
        // would be fenced out for good.
        for _ in 0..RENEW_ATTEMPTS {
            if created
                || newest(warehouse)
                    .await?
                    .is_some_and(|newest| newest >= next)
            {
                break;
            }
            next = successor(next)?;
            created = create(warehouse, next, &content).await?;
        }
        if created {
            prune(warehouse, next).await?;
            Ok(Acquired::Held(Box::new(Lease {
                warehouse: warehouse.clone(),
                generation: next,
                holder,
                acquired_ms: now_ms,
                duration_ms,
                expires_ms: content.expires_ms,
                proved_at,
            })))
        } else {
            // Another run won generation `next` — or a sibling worker of this run, whose
            // generation holds the lease for this one too.
            match latest(warehouse).await? {
                Some((generation, current)) if current.holder == holder && !current.released => {
                    Ok(Acquired::Held(Box::new(Lease {
                        warehouse: warehouse.clone(),
                        generation,
                        holder,
                        acquired_ms: now_ms,
                        duration_ms,
                        expires_ms: current.expires_ms,
                        proved_at,
                    })))
                }
                Some((_, current)) => Ok(Acquired::Busy {
                    holder: current.holder,
                    expires_ms: current.expires_ms,
                }),
                None => Err(Error::new(
                    ErrorKind::StoreUnavailable,
                    "the gc lease vanished while acquiring it",
                )),
            }
        }
    }

    /// Prove this run still holds the lease at `now_ms`, extending it if less than half
    /// of it is left, or fail if another run has taken it over.
    ///
    /// The lease is this run's while its newest generation names the run and is not
    /// released; the workers of one run share it, so a generation a sibling worker wrote
    /// proves it as well as this worker's own. A generation is only written when the
    /// lease must be extended: the next after the newest, with create-if-absent, so of a
    /// renewal and a takeover racing for it exactly one wins (a takeover needs the lease
    /// expired, and a proof is only used within half the lease of it).
    pub(crate) async fn renew(&mut self, now_ms: i64) -> Result<()> {
        let started = Instant::now();
        for _ in 0..RENEW_ATTEMPTS {
            let Some((newest, current)) = latest(&self.warehouse).await? else {
                return Err(lost());
            };
            if current.holder != self.holder || current.released {
                return Err(lost());
            }
            if current.expires_ms > now_ms.saturating_add(self.duration_ms / 2) {
                self.generation = newest;
                self.expires_ms = current.expires_ms;
                self.proved_at = started;
                return Ok(());
            }
            let content = Generation {
                holder: self.holder,
                acquired_ms: self.acquired_ms,
                expires_ms: now_ms.saturating_add(self.duration_ms),
                released: false,
            };
            let next = successor(newest)?;
            if create(&self.warehouse, next, &content).await? {
                prune(&self.warehouse, next).await?;
                self.generation = next;
                self.expires_ms = content.expires_ms;
                self.proved_at = started;
                return Ok(());
            }
            // A sibling worker (or another run) wrote that generation first: look again.
        }
        Err(lost())
    }

    /// Whether the lease must be renewed before the run acts on it at `now_ms` (run
    /// time): half its duration has passed since the latest proof, on the monotonic clock
    /// or in run time (a run paused by SIGSTOP or in a simulation sees only one of them
    /// move).
    pub(crate) fn needs_renewal(&self, now_ms: i64) -> bool {
        !self.fresh() || now_ms >= self.expires_ms.saturating_sub(self.duration_ms / 2)
    }

    /// Whether the latest proof of holding the lease is recent enough to act on: within
    /// half the lease duration (on the monotonic clock).
    pub(crate) fn fresh(&self) -> bool {
        let half = Duration::from_millis(u64::try_from(self.duration_ms / 2).unwrap_or(0));
        self.proved_at.elapsed() < half
    }

    /// Release the lease and remove old generations.
    pub(crate) async fn release(self, now_ms: i64) -> Result<()> {
        let content = Generation {
            holder: self.holder,
            acquired_ms: self.acquired_ms,
            expires_ms: now_ms,
            released: true,
        };
        let last = successor(self.generation)?;
        if create(&self.warehouse, last, &content).await? {
            prune(&self.warehouse, last).await?;
        }
        Ok(())
    }
}

/// Whether a held generation's expiry is one a holder could have written: no more than
/// the longest lease (plus an hour of clock skew) after `now_ms`.
fn plausible(current: &Generation, now_ms: i64) -> bool {
    let longest = i64::try_from(MAX_LEASE.as_millis()).unwrap_or(i64::MAX);
    current.expires_ms <= now_ms.saturating_add(longest).saturating_add(3_600_000)
}

/// Break the lease, whoever holds it (`gc abandon`): write a newer generation marked
/// released, so every worker of the holder stops at its next renewal (the fencing token
/// only grows) and the next run may take the lease at once. The holder, if the lease was
/// held.
pub(crate) async fn break_lease(warehouse: &Warehouse, now_ms: i64) -> Result<Option<Uuid>> {
    for _ in 0..RENEW_ATTEMPTS {
        let Some((generation, current)) = latest(warehouse).await? else {
            return Ok(None);
        };
        if current.released {
            return Ok(None);
        }
        let content = Generation {
            holder: current.holder,
            acquired_ms: current.acquired_ms,
            expires_ms: now_ms,
            released: true,
        };
        if create(warehouse, successor(generation)?, &content).await? {
            return Ok(Some(current.holder));
        }
    }
    Err(Error::new(
        ErrorKind::ConcurrentModification,
        "the gc lease kept changing while breaking it; retry",
    ))
}

/// Every [`KEEP_GENERATIONS`]th generation written, remove the generations older than the
/// last few before it (never the newest): a run of many invocations writes one or more
/// generations in each, and each acquisition and renewal lists them.
async fn prune(warehouse: &Warehouse, written: u64) -> Result<()> {
    let keep_from = written.saturating_sub(KEEP_GENERATIONS);
    if keep_from == 0 || !written.is_multiple_of(KEEP_GENERATIONS) {
        return Ok(());
    }
    let all = generations(warehouse).await?;
    let newest = all.iter().copied().max().unwrap_or(0);
    let old: Vec<String> = all
        .into_iter()
        .filter(|g| *g < keep_from && *g < newest)
        .map(generation_name)
        .collect();
    for (_, outcome) in warehouse.delete(old).await {
        if let crate::warehouse::Deletion::Failed(err) = outcome {
            return Err(err);
        }
    }
    Ok(())
}

/// The run's lease (none for a dry run), shared by a step's concurrent assessments.
pub(crate) type SharedLease = tokio::sync::Mutex<Option<Lease>>;

/// Renew the lease (proving this run holds the newest generation) and check that the
/// proof is fresh, right before a destructive step.
pub(crate) async fn fence(lease: Option<&mut Lease>, now_ms: i64) -> Result<()> {
    let Some(lease) = lease else {
        return Ok(());
    };
    lease.renew(now_ms).await?;
    if lease.fresh() {
        Ok(())
    } else {
        Err(Error::new(
            ErrorKind::CommitConflict,
            "this gc run was paused for longer than half its lease while renewing it; stopping before acting on it",
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Found by the second issue-26 attack: an empty newest generation (a torn write after
    /// a power loss) made every acquisition, `gc status` and `gc abandon` fail for good.
    #[tokio::test]
    async fn an_unreadable_generation_is_held_for_the_longest_lease_then_taken_over() {
        let warehouse = Warehouse::in_memory("memory://lease/wh").expect("warehouse");
        let name = generation_name(7);
        warehouse
            .put_if_absent(&name, Bytes::new())
            .await
            .expect("written");
        let landed = warehouse
            .head(&name)
            .await
            .expect("head")
            .expect("there")
            .last_modified_ms;
        let state = state(&warehouse)
            .await
            .expect("status answers")
            .expect("a lease");
        assert_eq!((state.generation, state.holder), (7, Uuid::nil()));
        let longest = i64::try_from(MAX_LEASE.as_millis()).expect("ms");
        assert_eq!(state.expires_ms, landed + longest);
        let run = Uuid::from_u128(1);
        let busy = Lease::acquire(&warehouse, run, landed + longest - 1, 60_000)
            .await
            .expect("answers");
        assert!(matches!(busy, Acquired::Busy { .. }), "{busy:?}");
        let held = Lease::acquire(&warehouse, run, landed + longest, 60_000)
            .await
            .expect("answers");
        let Acquired::Held(lease) = held else {
            panic!("taken over once the longest lease has passed: {held:?}");
        };
        assert_eq!(
            lease.generation, 8,
            "the fence goes on from the torn generation"
        );
    }

    /// Found by the fourth issue-26 attack: a directory made by hand at the next
    /// generation's name (never listed as a generation) fenced every run out for good.
    #[tokio::test]
    async fn a_name_occupied_by_something_else_is_passed_over() {
        let dir = tempfile::tempdir().expect("dir");
        let warehouse = Warehouse::local(dir.path()).expect("warehouse");
        let run = Uuid::from_u128(1);
        let Acquired::Held(lease) = Lease::acquire(&warehouse, run, 1_000, 60_000)
            .await
            .expect("answers")
        else {
            panic!("a fresh lease is free");
        };
        lease.release(2_000).await.expect("released");
        let newest = newest(&warehouse).await.expect("listed").expect("one");
        std::fs::create_dir_all(dir.path().join(generation_name(newest + 1))).expect("dir");
        let held = Lease::acquire(&warehouse, Uuid::from_u128(2), 3_000, 60_000)
            .await
            .expect("answers");
        let Acquired::Held(lease) = held else {
            panic!("a directory at the next name does not hold the lease: {held:?}");
        };
        assert_eq!(lease.generation, newest + 2);
    }
}
