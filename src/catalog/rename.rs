//! Rename: atomic on stores with multi-key writes, crash-safe on the others.
//!
//! # With an atomic multi-key write (memory, DynamoDB)
//! One transaction replaces the source record with a tombstone (conditional on its
//! version) and creates the destination record (conditional on its absence or on its
//! tombstone's version). A retried or ambiguous transaction is resolved by reading the
//! destination back: it remembers the rename's commit id if the transaction applied.
//!
//! # Without (object stores, local files)
//! Three conditional writes, each resolvable by its commit id:
//! 1. the source record goes from `live` to `moving`, carrying the intent
//!    `{to, destination-commit-id: r}`; a `moving` record is still visible as the source;
//! 2. whoever finds the destination free re-claims the source (`moving` again, a fresh
//!    commit id, conditional on the version it read), then creates the destination record
//!    with commit id `r` — **the linearization point**: from here on, a load of the source
//!    sees that the destination remembers `r` and answers `INDEX_NOT_FOUND`, and a load of
//!    the destination sees the index. The claim orders the creation after every rollback
//!    decided on an older view of the destination, so a settler with a stale view of the
//!    source cannot complete a rename that someone else rolled back;
//! 3. the source record goes from `moving` to a `dropped` tombstone.
//!
//! A crash leaves the source `moving`. Loads stay correct without repair (they check the
//! destination). The next mutation that touches the source settles the rename
//! (`settle_rename`): if the destination is free it completes step 2 itself —
//! idempotent with the original renamer, since both create the destination with the same
//! commit id and only one create can land — then step 3; if the destination was taken by
//! someone else, it rolls the source back to `live`. Commits on a `moving` source settle
//! the rename first, so a concurrent commit is never lost: it either lands before step 1
//! (and step 1 then fails its condition), or it sees the index renamed away.
//!
//! Known limit: a destination that went through a drop, a fresh register and more than
//! [`HISTORY`](super::record::HISTORY) further writes before anybody settles a crashed
//! rename no longer remembers `r`; the source would then be rolled back rather than
//! completed. Settling happens on the next touch of the source, so this needs a crash and
//! a long, busy silence on the source. (The renamer itself does not depend on that window
//! to report its outcome: when the destination has forgotten `r`, the source's tombstone
//! tells whether the rename landed.)

use bytes::Bytes;

use super::changelog::LoggedWrite;
use super::index::{MAX_REEVALUATIONS, Stored, Visibility, not_found};
use super::record::{PointerRecord, PointerState, RenameIntent};
use super::write::{WriteOutcome, read_with_retry};
use super::{Catalog, IndexPointer};
use crate::error::{Error, ErrorKind, Result};
use crate::identifier::IndexIdentifier;
use crate::store::{PutMode, StoreError, TxWrite};

fn already_exists(identifier: &IndexIdentifier) -> Error {
    Error::new(
        ErrorKind::AlreadyExists,
        format!("index {identifier} already exists"),
    )
}

impl Catalog {
    /// Whether the rename a `moving` record announces has landed at its destination.
    pub(crate) async fn rename_landed(&self, record: &PointerRecord) -> Result<bool> {
        let Some(intent) = &record.rename else {
            return Ok(false);
        };
        Ok(self
            .read_pointer(&intent.to)
            .await?
            .is_some_and(|dest| dest.record.remembers(intent.destination_commit_id)))
    }

    /// Drive an interrupted rename of `source` to completion, or roll it back if its
    /// destination was taken. Returns when the source is no longer `moving`.
    pub(crate) async fn settle_rename(
        &self,
        source: &IndexIdentifier,
        moving: &Stored,
    ) -> Result<()> {
        let Some(intent) = moving.record.rename.clone() else {
            return Ok(());
        };
        let mut current = moving.clone();
        let moving = &mut current;
        for _ in 0..MAX_REEVALUATIONS {
            let dest = self.read_pointer(&intent.to).await?;
            let landed = dest
                .as_ref()
                .is_some_and(|d| d.record.remembers(intent.destination_commit_id));
            let taken = dest
                .as_ref()
                .is_some_and(|d| d.record.state != PointerState::Dropped);
            if landed || taken {
                // Step 3 (complete) or roll back; losing this race means someone else did.
                let state = if landed {
                    PointerState::Dropped
                } else {
                    PointerState::Live
                };
                let mut record =
                    moving
                        .record
                        .successor(state, self.fresh_commit_id(), self.now_ms());
                if landed {
                    record.rename = Some(intent.clone());
                }
                self.write_pointer(source, Some(&*moving), &record).await?;
                return Ok(());
            }
            // The destination is free. Claim the source again (still `moving`, a fresh
            // commit id) before creating it: a settler that rolled the source back did so
            // on a view of the destination older than this claim, or the claim fails; so a
            // stale view of the source can never complete a rename that was rolled back.
            let mut claim = moving.record.successor(
                PointerState::Moving,
                self.fresh_commit_id(),
                self.now_ms(),
            );
            claim.rename = Some(intent.clone());
            match self.write_pointer(source, Some(moving), &claim).await? {
                WriteOutcome::Applied(Some(version)) => {
                    *moving = Stored {
                        record: claim,
                        version,
                    }
                }
                WriteOutcome::Applied(None) | WriteOutcome::Lost => {
                    match self.read_pointer(source).await? {
                        Some(now)
                            if now.record.state == PointerState::Moving
                                && now.record.rename == moving.record.rename =>
                        {
                            *moving = now;
                            continue;
                        }
                        // Completed or rolled back by someone else.
                        _ => return Ok(()),
                    }
                }
            }
            // Step 2: create the destination with the rename's commit id.
            let record = PointerRecord::created(
                dest.as_ref().map(|d| &d.record),
                moving.record.metadata_location.clone(),
                moving.record.source.clone(),
                intent.destination_commit_id,
                self.now_ms(),
            );
            self.write_pointer(&intent.to, dest.as_ref(), &record)
                .await?;
        }
        Err(Error::new(
            ErrorKind::ConcurrentModification,
            format!("the rename of {source} kept changing under concurrent writers; retry"),
        ))
    }

    pub(crate) async fn rename_pointer(
        &self,
        from: &IndexIdentifier,
        to: &IndexIdentifier,
    ) -> Result<IndexPointer> {
        self.ensure_writable(None).await?;
        for _ in 0..MAX_REEVALUATIONS {
            let source = match self.visibility(self.read_pointer(from).await?).await? {
                Visibility::Visible(stored) if stored.record.state == PointerState::Moving => {
                    self.settle_rename(from, &stored).await?;
                    continue;
                }
                Visibility::Visible(stored) => stored,
                Visibility::RenamedAway(stored) => {
                    self.settle_rename(from, &stored).await?;
                    return Err(not_found(from));
                }
                Visibility::Absent(_) => return Err(not_found(from)),
            };
            if from == to {
                // The source exists, so the destination (the same pointer) exists too.
                return Err(already_exists(to));
            }
            self.require_namespace(to.namespace()).await?;
            let dest = match self.visibility(self.read_pointer(to).await?).await? {
                // Both must exist at one instant: the source must not have changed since.
                Visibility::Visible(_) => match self.read_pointer(from).await? {
                    Some(now) if now.version == source.version => return Err(already_exists(to)),
                    _ => continue,
                },
                Visibility::RenamedAway(stored) => {
                    self.settle_rename(to, &stored).await?;
                    continue;
                }
                Visibility::Absent(dest) => dest,
            };
            let intent = RenameIntent {
                to: to.clone(),
                destination_commit_id: self.fresh_commit_id(),
            };
            let landed = if self.store().capabilities().atomic_multi_key_write {
                self.rename_atomically(from, &source, dest.as_ref(), &intent)
                    .await?
            } else {
                self.rename_in_steps(from, &source, &intent).await?
            };
            if landed {
                // The rename is done: answer it even if `to` cannot be read now, or was
                // dropped again since (the caller must not retry a rename that landed).
                return Ok(self
                    .load_pointer(to)
                    .await
                    .unwrap_or_else(|_| IndexPointer {
                        identifier: to.clone(),
                        metadata_location: source.record.metadata_location.clone(),
                        source: source.record.source.clone(),
                        version: String::new(),
                    }));
            }
        }
        Err(Error::new(
            ErrorKind::ConcurrentModification,
            format!("{from} or {to} kept changing under concurrent writers; retry"),
        ))
    }

    /// Step 1, then settle. `Ok(false)`: step 1 lost a race, re-evaluate.
    async fn rename_in_steps(
        &self,
        from: &IndexIdentifier,
        source: &Stored,
        intent: &RenameIntent,
    ) -> Result<bool> {
        let mut moving =
            source
                .record
                .successor(PointerState::Moving, self.fresh_commit_id(), self.now_ms());
        moving.rename = Some(intent.clone());
        let version = match self.write_pointer(from, Some(source), &moving).await? {
            WriteOutcome::Lost => return Ok(false),
            WriteOutcome::Applied(Some(version)) => Some(version),
            // Ours landed but was superseded already: someone settled it.
            WriteOutcome::Applied(None) => None,
        };
        // Step 1 landed: the rename may now complete whenever anyone touches the source,
        // so any failure from here on leaves its outcome unknown, never failed.
        let settled = match version {
            Some(version) => {
                self.settle_rename(
                    from,
                    &Stored {
                        record: moving,
                        version,
                    },
                )
                .await
            }
            None => Ok(()),
        };
        let report = match settled {
            Ok(()) => {
                self.finish_rename_report(from, source.record.created_by, intent)
                    .await
            }
            Err(err) => Err(err),
        };
        report.map_err(|err| match err.kind() {
            ErrorKind::AlreadyExists | ErrorKind::CommitStateUnknown => err,
            _ => Error::with_source(
                ErrorKind::CommitStateUnknown,
                format!(
                    "the outcome of renaming {from} to {} is unknown; reload both",
                    intent.to
                ),
                err,
            ),
        })
    }

    /// After settling: did the rename land, or was the destination taken?
    ///
    /// The destination remembers only the last [`HISTORY`](super::record::HISTORY) commit
    /// ids, so when it has forgotten the rename the source decides: the source's incarnation
    /// ended in a tombstone carrying this rename (landed), or went on without it (rolled
    /// back). Anything else cannot be told apart and is `COMMIT_STATE_UNKNOWN`.
    async fn finish_rename_report(
        &self,
        from: &IndexIdentifier,
        incarnation: uuid::Uuid,
        intent: &RenameIntent,
    ) -> Result<bool> {
        let dest = self.read_pointer(&intent.to).await?;
        if dest.is_some_and(|d| d.record.remembers(intent.destination_commit_id)) {
            return Ok(true);
        }
        let unknown = || {
            Error::new(
                ErrorKind::CommitStateUnknown,
                format!(
                    "the outcome of renaming {from} to {} is unknown; reload both",
                    intent.to
                ),
            )
        };
        match self.read_pointer(from).await? {
            Some(source) if source.record.created_by == incarnation => {
                let ours = source
                    .record
                    .rename
                    .as_ref()
                    .is_some_and(|r| r.destination_commit_id == intent.destination_commit_id);
                match source.record.state {
                    PointerState::Dropped if ours => Ok(true),
                    PointerState::Moving if ours => Err(unknown()),
                    _ => Err(already_exists(&intent.to)),
                }
            }
            _ => Err(unknown()),
        }
    }

    /// One transaction. `Ok(false)`: a condition failed, re-evaluate.
    async fn rename_atomically(
        &self,
        from: &IndexIdentifier,
        source: &Stored,
        dest: Option<&Stored>,
        intent: &RenameIntent,
    ) -> Result<bool> {
        let mut tombstone =
            source
                .record
                .successor(PointerState::Dropped, self.fresh_commit_id(), self.now_ms());
        tombstone.rename = Some(intent.clone());
        let created = PointerRecord::created(
            dest.map(|d| &d.record),
            source.record.metadata_location.clone(),
            source.record.source.clone(),
            intent.destination_commit_id,
            self.now_ms(),
        );
        let writes = vec![
            TxWrite {
                key: from.store_key(),
                value: Bytes::from(tombstone.to_bytes()),
                mode: PutMode::Update(source.version.clone()),
                listing: tombstone.listing(),
            },
            TxWrite {
                key: intent.to.store_key(),
                value: Bytes::from(created.to_bytes()),
                listing: created.listing(),
                mode: match dest {
                    None => PutMode::Create,
                    Some(dest) => PutMode::Update(dest.version.clone()),
                },
            },
        ];
        // The entry, and the links of the two writes (which commits they replace, for the
        // collector: `gc::untaken`), are stored before the transaction is issued.
        let (entry, tombstone_link, created_link) = futures::join!(
            self.log_writes(vec![
                LoggedWrite::of(from, &tombstone),
                LoggedWrite::of(&intent.to, &created),
            ]),
            self.log_link(tombstone.commit_id, Some(source.record.commit_id)),
            self.log_link(created.commit_id, dest.map(|dest| dest.record.commit_id)),
        );
        let entry = entry?;
        if let Err(err) = tombstone_link.and(created_link) {
            self.withdraw_entry(entry).await;
            return Err(err);
        }
        let store = self.store().as_ref();
        let retry = self.retry();
        let mut ambiguous = false;
        for attempt in 1..=retry.max_attempts() {
            super::write::note_pointer_write();
            match store.transact(writes.clone()).await {
                Ok(_) => return Ok(true),
                Err(StoreError::Precondition) | Err(StoreError::AlreadyExists) => {}
                Err(StoreError::Ambiguous(_)) => ambiguous = true,
                Err(StoreError::Unavailable {
                    retryable: true, ..
                }) => {
                    retry.back_off(attempt).await;
                    continue;
                }
                Err(err) => return Err(super::write::store_error(store, err)),
            }
            // The transaction may have landed: a failed read-back leaves it unknown.
            let read = read_with_retry(store, &intent.to.store_key(), retry)
                .await
                .map_err(|err| {
                    Error::with_source(
                        ErrorKind::CommitStateUnknown,
                        format!(
                            "the outcome of renaming {from} to {} is unknown; reload both",
                            intent.to
                        ),
                        err,
                    )
                })?;
            let landed = read
                .map(|v| PointerRecord::from_bytes(&v.value))
                .transpose()?
                .is_some_and(|d| d.remembers(intent.destination_commit_id));
            if landed {
                return Ok(true);
            }
            if !ambiguous {
                // Lost, and no attempt can land later: it announced nothing.
                self.withdraw_entry(entry).await;
                return Ok(false);
            }
            retry.back_off(attempt).await;
        }
        Err(Error::new(
            ErrorKind::CommitStateUnknown,
            format!(
                "the outcome of renaming {from} to {} is unknown; reload both",
                intent.to
            ),
        ))
    }
}
