//! Snapshot expiry as a commit, with the publication retry loop.

use std::collections::BTreeSet;

use super::engine::{Run, Step};
use super::{Expired, Publisher};
use crate::error::Result;
use crate::identifier::IndexIdentifier;

impl Publisher {
    /// Remove expired snapshots: commit [`expire_snapshots`] of the current metadata
    /// (no new snapshot), with the same retry loop as [`Publisher::publish`].
    ///
    /// A snapshot is retained if it is current, among the `keep_last` snapshots with the
    /// highest sequence numbers (when `Some`), or has `timestamp-ms >= newer_than_ms`
    /// (when `Some`); with both `None` only the current snapshot is retained.
    /// `last-sequence-number` is preserved. If nothing would be removed, nothing is
    /// written or committed and the current location is returned.
    ///
    /// Expiry ends idempotent replay detection for the removed snapshots' keys (see
    /// [`Publisher::publish_idempotent`]). Data files are not deleted here; that is the
    /// garbage collector's job.
    ///
    /// [`expire_snapshots`]: crate::metadata::IndexMetadata::expire_snapshots
    pub async fn expire(
        &self,
        identifier: &IndexIdentifier,
        keep_last: Option<usize>,
        newer_than_ms: Option<i64>,
    ) -> Result<Expired> {
        let clock = self.inner.injected.clock.clone();
        let run = self
            .run(identifier, |base| {
                let expired =
                    base.metadata
                        .expire_snapshots(keep_last, newer_than_ms, clock.as_ref())?;
                if expired.snapshots().len() == base.metadata.snapshots().len() {
                    return Ok(Step::Finish(Expired {
                        metadata_location: base.location.to_owned(),
                        current_snapshot_id: base.metadata.current_snapshot_id(),
                        last_sequence_number: base.metadata.last_sequence_number(),
                        expired_snapshot_ids: Vec::new(),
                        retained_snapshots: base.metadata.snapshots().len(),
                        attempts: base.attempt,
                    }));
                }
                Ok(Step::Commit(expired))
            })
            .await?;
        Ok(match run {
            Run::Committed(committed) => {
                let retained: BTreeSet<i64> = committed
                    .metadata
                    .snapshots()
                    .iter()
                    .map(|s| s.snapshot_id())
                    .collect();
                let mut expired_snapshot_ids: Vec<i64> = committed
                    .base
                    .snapshots()
                    .iter()
                    .map(|s| s.snapshot_id())
                    .filter(|id| !retained.contains(id))
                    .collect();
                expired_snapshot_ids.sort_unstable();
                Expired {
                    metadata_location: committed.location,
                    current_snapshot_id: committed.metadata.current_snapshot_id(),
                    last_sequence_number: committed.metadata.last_sequence_number(),
                    expired_snapshot_ids,
                    retained_snapshots: retained.len(),
                    attempts: committed.attempts,
                }
            }
            Run::Finished(expired) => expired,
            Run::Failed(err) => return Err(err),
        })
    }
}
