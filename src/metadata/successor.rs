//! The successor rules a commit checks between the base metadata and the new metadata.

use super::IndexMetadata;
use super::invariants::invalid;
use crate::{Error, ErrorKind, Result};

impl IndexMetadata {
    /// Check that `self` may replace `base` in a commit.
    ///
    /// Errors: `INDEX_UUID_MISMATCH` if `index-uuid` differs; `INVALID_INDEX_METADATA` if
    /// an identity field (`vector-field`, `source-key-fields`, `index-family`, `metric`)
    /// differs, `last-sequence-number` or `last-updated-ms` decreases, a snapshot
    /// retained from `base` changed content, a snapshot id of `base` is reused for a
    /// different snapshot, or a snapshot not in `base` has a sequence number that `base`
    /// had already allocated (at most `base.last-sequence-number`).
    ///
    /// Removing non-current snapshots of `base` (expiry) is allowed.
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
        if self.last_sequence_number < base.last_sequence_number {
            return Err(invalid(format!(
                "last-sequence-number: {} is less than the base metadata's {}",
                self.last_sequence_number, base.last_sequence_number
            )));
        }
        if self.last_updated_ms < base.last_updated_ms {
            return Err(invalid(format!(
                "last-updated-ms: {} is earlier than the base metadata's {}",
                self.last_updated_ms, base.last_updated_ms
            )));
        }
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
                None if snapshot.sequence_number <= base.last_sequence_number => {
                    return Err(invalid(format!(
                        "snapshots[{position}].sequence-number: new snapshot {id} has sequence number {} but the base metadata already allocated up to {}",
                        snapshot.sequence_number, base.last_sequence_number
                    )));
                }
                None => {}
            }
        }
        Ok(())
    }
}
