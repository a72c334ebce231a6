//! Snapshot expiry: removing non-current snapshots and their log entries.

use std::collections::BTreeSet;

use super::IndexMetadata;
use super::invariants::{FamilyRules, Unchecked};
use crate::clock::Clock;
use crate::error::Result;

impl IndexMetadata {
    /// New metadata without the expired snapshots and their `snapshot-log` entries.
    ///
    /// A snapshot is retained if it is current, if it is among the `keep_last` snapshots
    /// with the highest sequence numbers (when `Some`), or if its `timestamp-ms` is at
    /// least `newer_than_ms` (when `Some`); with both `None` only the current snapshot is
    /// retained. `index-uuid`, `last-sequence-number`, `current-snapshot-id` and
    /// properties are preserved; `last-updated-ms` becomes `max(clock, self.last-updated-ms)`.
    /// The result validates and, if it removes at least one snapshot, passes
    /// [`IndexMetadata::check_successor_of`] `self` (removing nothing is a no-op, which a
    /// commit refuses; [`Publisher::expire`](crate::publish::Publisher::expire) then
    /// commits nothing).
    pub fn expire_snapshots(
        &self,
        keep_last: Option<usize>,
        newer_than_ms: Option<i64>,
        clock: &dyn Clock,
    ) -> Result<IndexMetadata> {
        let mut by_sequence: Vec<_> = self.snapshots.iter().collect();
        by_sequence.sort_by_key(|snapshot| std::cmp::Reverse(snapshot.sequence_number));
        let newest: BTreeSet<i64> = by_sequence
            .iter()
            .take(keep_last.unwrap_or(0))
            .map(|snapshot| snapshot.snapshot_id)
            .collect();
        let snapshots: Vec<_> = self
            .snapshots
            .iter()
            .filter(|snapshot| {
                snapshot.snapshot_id == self.current_snapshot_id
                    || newest.contains(&snapshot.snapshot_id)
                    || newer_than_ms.is_some_and(|cutoff| snapshot.timestamp_ms >= cutoff)
            })
            .cloned()
            .collect();
        let retained: BTreeSet<i64> = snapshots.iter().map(|s| s.snapshot_id).collect();
        let snapshot_log = self
            .snapshot_log
            .iter()
            .filter(|entry| retained.contains(&entry.snapshot_id()))
            .copied()
            .collect();
        Unchecked {
            index_uuid: self.index_uuid,
            last_updated_ms: clock.now_ms().max(self.last_updated_ms),
            last_sequence_number: self.last_sequence_number,
            current_snapshot_id: self.current_snapshot_id,
            snapshots,
            snapshot_log,
            properties: self.properties.clone(),
        }
        .validate(FamilyRules::AlreadyChecked)
    }
}
