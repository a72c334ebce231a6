//! The successor rules a commit checks between the base metadata and the new metadata.
//!
//! The metadata spec defines exactly two ways metadata changes from one file to the next
//! ("Snapshot Log and Updates"):
//!
//! * **(a) removal**: "a metadata update may remove non-current snapshots and their log
//!   entries while preserving `last-sequence-number`";
//! * **(b) publication**: a successor "generates a new positive snapshot ID; allocates
//!   `base.last-sequence-number + 1`; appends one snapshot using that ID and sequence;
//!   advances `last-sequence-number` and `current-snapshot-id`; appends one snapshot-log
//!   entry".
//!
//! **A successor is the base, plus at most one snapshot published by (b), minus any
//! snapshots that are non-current in the result (with their log entries), with
//! `last-sequence-number` preserved unless (b) advanced it**; nothing else changes except
//! `last-updated-ms` (never earlier than the base's) and `properties` (non-semantic). At
//! least one snapshot must be published or removed: a commit that changes nothing (or only
//! `last-updated-ms` and `properties`) is refused.
//!
//! "Non-current" is judged in the result, the metadata the update produces: a commit that
//! publishes a snapshot may remove the base's current snapshot, which the publication made
//! non-current (a writer that keeps only the newest snapshot publishes and expires in one
//! commit). Without a publication the current snapshot stays current, so it is never
//! removed.
//!
//! **Rollback is refused.** Moving `current-snapshot-id` back to a retained snapshot is
//! neither step: (a) preserves the current snapshot and (b) makes a *new* snapshot
//! current. The spec defines no other update, so such metadata is
//! `INVALID_INDEX_METADATA`. To return to an earlier state, publish a new snapshot with the
//! earlier snapshot's contents (it gets a new id and sequence number, as step (b) says).

use std::collections::BTreeSet;

use super::IndexMetadata;
use super::invariants::invalid;
use super::snapshot::{Snapshot, SnapshotLogEntry};
use crate::error::{Error, ErrorKind, Result};

impl IndexMetadata {
    /// Check that `self` may replace `base` in a commit (see the module docs).
    ///
    /// Errors: `INDEX_UUID_MISMATCH` if `index-uuid` differs; otherwise
    /// `INVALID_INDEX_METADATA`, naming the JSON path in `self`, if (in this order)
    /// - the current snapshot's identity fields differ from the base's current snapshot;
    /// - a snapshot retained from `base` changed, or a snapshot id of `base` names a
    ///   different snapshot;
    /// - more than one snapshot is new, or the base's current snapshot was removed
    ///   without a new snapshot taking its place;
    /// - a new snapshot's sequence number is not `base.last-sequence-number + 1`, its
    ///   identity fields differ from the base's current snapshot, or it is not made
    ///   current with `last-sequence-number` advanced to it;
    /// - without a new snapshot, `last-sequence-number` or `current-snapshot-id` changed
    ///   (a rollback);
    /// - `snapshot-log` is not the base's log without the removed snapshots' entries,
    ///   followed by exactly one entry for the new snapshot if there is one;
    /// - `last-updated-ms` is earlier than the base's;
    /// - nothing was removed or published (a no-op commit).
    pub fn check_successor_of(&self, base: &IndexMetadata) -> Result<()> {
        if self.index_uuid != base.index_uuid {
            return Err(Error::new(
                ErrorKind::IndexUuidMismatch,
                format!(
                    "index-uuid: {} differs from the base metadata's {}",
                    self.index_uuid, base.index_uuid
                ),
            ));
        }
        if let Some(field) = self
            .current_snapshot()
            .contents
            .identity_difference(&base.current_snapshot().contents)
        {
            return Err(invalid(format!(
                "snapshots[{}].{field}: identity field differs from the base metadata (changing it requires a new index-uuid)",
                self.current_index
            )));
        }
        let new = self.check_retained(base)?;
        let retained: BTreeSet<i64> = self
            .snapshots
            .iter()
            .map(|snapshot| snapshot.snapshot_id)
            .filter(|id| base.snapshot(*id).is_some())
            .collect();
        if new.is_none() && !retained.contains(&base.current_snapshot_id) {
            return Err(invalid(format!(
                "snapshots: the base metadata's current snapshot {} was removed without publishing a new one; only snapshots that are non-current in the new metadata may be removed",
                base.current_snapshot_id
            )));
        }
        let removed = base.snapshots.len() - retained.len();
        match new {
            Some((position, snapshot)) => self.check_published(base, position, snapshot)?,
            None => self.check_unpublished(base)?,
        }
        self.check_successor_log(base, &retained, new.map(|(_, snapshot)| snapshot))?;
        if self.last_updated_ms < base.last_updated_ms {
            return Err(invalid(format!(
                "last-updated-ms: {} is earlier than the base metadata's {}",
                self.last_updated_ms, base.last_updated_ms
            )));
        }
        if removed == 0 && new.is_none() {
            return Err(invalid(
                "snapshots: the new metadata neither removes a snapshot nor publishes one; a commit must change the index (a no-op commit is refused)"
                    .to_owned(),
            ));
        }
        Ok(())
    }

    /// Every snapshot of `self` whose id `base` has is identical to it; at most one is
    /// new. Returns the new one with its position.
    fn check_retained(&self, base: &IndexMetadata) -> Result<Option<(usize, &Snapshot)>> {
        let mut new: Option<(usize, &Snapshot)> = None;
        for (position, snapshot) in self.snapshots.iter().enumerate() {
            let id = snapshot.snapshot_id;
            match base.snapshot(id) {
                Some(previous) if previous == snapshot => {}
                Some(previous)
                    if previous.sequence_number == snapshot.sequence_number
                        && previous.timestamp_ms == snapshot.timestamp_ms =>
                {
                    return Err(invalid(format!(
                        "snapshots[{position}]: snapshot {id} retained from the base metadata changed content"
                    )));
                }
                Some(_) => {
                    return Err(invalid(format!(
                        "snapshots[{position}].snapshot-id: {id} is the id of a different snapshot in the base metadata"
                    )));
                }
                None => {
                    if let Some((first, _)) = new {
                        return Err(invalid(format!(
                            "snapshots[{position}]: a second new snapshot (snapshots[{first}] is new too); a commit publishes at most one snapshot"
                        )));
                    }
                    new = Some((position, snapshot));
                }
            }
        }
        Ok(new)
    }

    /// Step (b): the new snapshot took `base.last-sequence-number + 1`, keeps the logical
    /// identity, and `last-sequence-number` and `current-snapshot-id` advanced to it.
    fn check_published(
        &self,
        base: &IndexMetadata,
        position: usize,
        snapshot: &Snapshot,
    ) -> Result<()> {
        let next = base.last_sequence_number.checked_add(1).ok_or_else(|| {
            invalid(format!(
                "snapshots[{position}]: the base metadata has allocated every sequence number"
            ))
        })?;
        if snapshot.sequence_number != next {
            let why = if snapshot.sequence_number <= base.last_sequence_number {
                "the base metadata already allocated it"
            } else {
                "sequence numbers are allocated one at a time"
            };
            return Err(invalid(format!(
                "snapshots[{position}].sequence-number: new snapshot {} has sequence number {}, expected base last-sequence-number + 1 = {next} ({why})",
                snapshot.snapshot_id, snapshot.sequence_number
            )));
        }
        if let Some(field) = snapshot
            .contents
            .identity_difference(&base.current_snapshot().contents)
        {
            return Err(invalid(format!(
                "snapshots[{position}].{field}: identity field differs from the base metadata (changing it requires a new index-uuid)"
            )));
        }
        if self.last_sequence_number != next {
            return Err(invalid(format!(
                "last-sequence-number: {} must advance to the new snapshot's sequence number {next}",
                self.last_sequence_number
            )));
        }
        if self.current_snapshot_id != snapshot.snapshot_id {
            return Err(invalid(format!(
                "current-snapshot-id: {} must advance to the new snapshot {}",
                self.current_snapshot_id, snapshot.snapshot_id
            )));
        }
        Ok(())
    }

    /// Without step (b): `last-sequence-number` and `current-snapshot-id` are preserved.
    fn check_unpublished(&self, base: &IndexMetadata) -> Result<()> {
        if self.last_sequence_number != base.last_sequence_number {
            let why = if self.last_sequence_number < base.last_sequence_number {
                "is less than"
            } else {
                "raises, without publishing a snapshot,"
            };
            return Err(invalid(format!(
                "last-sequence-number: {} {why} the base metadata's {}; only publishing a snapshot advances it",
                self.last_sequence_number, base.last_sequence_number
            )));
        }
        if self.current_snapshot_id != base.current_snapshot_id {
            return Err(invalid(format!(
                "current-snapshot-id: {} moves the current snapshot away from the base metadata's {} without publishing a new snapshot (a rollback, which the metadata spec does not define)",
                self.current_snapshot_id, base.current_snapshot_id
            )));
        }
        Ok(())
    }

    /// The log is the base's without the removed snapshots' entries, then one entry for
    /// the new snapshot if there is one.
    fn check_successor_log(
        &self,
        base: &IndexMetadata,
        retained: &BTreeSet<i64>,
        new: Option<&Snapshot>,
    ) -> Result<()> {
        let kept: Vec<&SnapshotLogEntry> = base
            .snapshot_log
            .iter()
            .filter(|entry| retained.contains(&entry.snapshot_id()))
            .collect();
        let expected_len = kept.len() + usize::from(new.is_some());
        for (position, (entry, expected)) in self.snapshot_log.iter().zip(&kept).enumerate() {
            if entry != *expected {
                return Err(invalid(format!(
                    "snapshot-log[{position}]: expected the base metadata's entry {{timestamp-ms: {}, snapshot-id: {}}} (a log entry is removed only with its snapshot, and kept entries keep their order)",
                    expected.timestamp_ms(),
                    expected.snapshot_id()
                )));
            }
        }
        if self.snapshot_log.len() != expected_len {
            let what = match new {
                Some(snapshot) => format!(
                    "the base metadata's {} kept entries and one entry for the new snapshot {}",
                    kept.len(),
                    snapshot.snapshot_id
                ),
                None => format!(
                    "the base metadata's {} kept entries and nothing else (no snapshot is published)",
                    kept.len()
                ),
            };
            return Err(invalid(format!(
                "snapshot-log: has {} entries, expected {what}",
                self.snapshot_log.len()
            )));
        }
        if let (Some(snapshot), Some(last)) = (new, self.snapshot_log.last())
            && last.snapshot_id() != snapshot.snapshot_id
        {
            return Err(invalid(format!(
                "snapshot-log[{}].snapshot-id: the appended entry names {}, expected the new snapshot {}",
                self.snapshot_log.len() - 1,
                last.snapshot_id(),
                snapshot.snapshot_id
            )));
        }
        Ok(())
    }
}
