//! Builders: initial metadata and successors, exactly as the metadata spec's update
//! steps describe.

use std::collections::BTreeMap;

use super::IndexMetadata;
use super::invariants::{FamilyRules, Unchecked, invalid};
use super::snapshot::{Snapshot, SnapshotContents, SnapshotLogEntry};
use crate::clock::{Clock, IdGenerator};
use crate::error::Result;
use crate::family::FamilyRegistry;

/// How many ids to draw before giving up on finding an unused positive snapshot id.
const SNAPSHOT_ID_ATTEMPTS: usize = 64;

impl IndexMetadata {
    /// Initial metadata: a new `index-uuid` from `ids`, `last-sequence-number` 1, one
    /// snapshot (id from [`IdGenerator::positive_id`], sequence 1) that is current, one
    /// log entry, and every timestamp from `clock`.
    ///
    /// Errors: `INVALID_INDEX_METADATA` if `contents` break a rule (named by its path in
    /// the result, `snapshots[0]...`) or `ids` yields a nil UUID or no positive id.
    pub fn create(
        contents: SnapshotContents,
        properties: BTreeMap<String, String>,
        clock: &dyn Clock,
        ids: &dyn IdGenerator,
        registry: &FamilyRegistry,
    ) -> Result<IndexMetadata> {
        let index_uuid = ids.uuid();
        if index_uuid.is_nil() {
            return Err(invalid(
                "index-uuid: the id generator returned the nil UUID".to_owned(),
            ));
        }
        let snapshot_id = fresh_snapshot_id(ids, &[])?;
        let now = clock.now_ms();
        Unchecked {
            index_uuid,
            last_updated_ms: now,
            last_sequence_number: 1,
            current_snapshot_id: snapshot_id,
            snapshots: vec![Snapshot {
                snapshot_id,
                sequence_number: 1,
                timestamp_ms: now,
                contents,
            }],
            snapshot_log: vec![SnapshotLogEntry::new(now, snapshot_id)],
            properties,
        }
        .validate(FamilyRules::Check(registry))
    }

    /// The successor of `self` with a new current snapshot holding `contents`: a new
    /// positive snapshot id unused by any retained snapshot, sequence number
    /// `last-sequence-number + 1`, the snapshot and a log entry appended, and
    /// `last-sequence-number` and `current-snapshot-id` advanced. Its timestamps (snapshot,
    /// log entry, `last-updated-ms`) are `max(clock, self.last-updated-ms)`, so time never
    /// goes backwards. Properties and retained snapshots are kept. The result passes
    /// [`IndexMetadata::check_successor_of`] `self`.
    ///
    /// Errors: `INVALID_INDEX_METADATA` if `contents` change an identity field (that
    /// needs a new index) or break a rule.
    pub fn successor(
        &self,
        contents: SnapshotContents,
        clock: &dyn Clock,
        ids: &dyn IdGenerator,
        registry: &FamilyRegistry,
    ) -> Result<IndexMetadata> {
        if let Some(field) = contents.identity_difference(&self.current_snapshot().contents) {
            return Err(invalid(format!(
                "{field}: identity field differs from the current snapshot; changing it requires a new index (new index-uuid)"
            )));
        }
        let sequence_number = self
            .last_sequence_number
            .checked_add(1)
            .ok_or_else(|| invalid("last-sequence-number: no sequence number left".to_owned()))?;
        let snapshot_id = fresh_snapshot_id(ids, &self.snapshots)?;
        let now = clock.now_ms().max(self.last_updated_ms);

        let mut snapshots = self.snapshots.clone();
        snapshots.push(Snapshot {
            snapshot_id,
            sequence_number,
            timestamp_ms: now,
            contents,
        });
        let mut snapshot_log = self.snapshot_log.clone();
        snapshot_log.push(SnapshotLogEntry::new(now, snapshot_id));
        Unchecked {
            index_uuid: self.index_uuid,
            last_updated_ms: now,
            last_sequence_number: sequence_number,
            current_snapshot_id: snapshot_id,
            snapshots,
            snapshot_log,
            properties: self.properties.clone(),
        }
        .validate(FamilyRules::Check(registry))
    }
}

/// A positive snapshot id not used by `retained`.
fn fresh_snapshot_id(ids: &dyn IdGenerator, retained: &[Snapshot]) -> Result<i64> {
    for _ in 0..SNAPSHOT_ID_ATTEMPTS {
        let id = ids.positive_id();
        if id > 0 && retained.iter().all(|snapshot| snapshot.snapshot_id != id) {
            return Ok(id);
        }
    }
    Err(invalid(format!(
        "snapshot-id: no fresh positive snapshot id after {SNAPSHOT_ID_ATTEMPTS} attempts"
    )))
}
