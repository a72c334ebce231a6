//! Idempotent publication for at-least-once event delivery.

use super::engine::{Run, Step};
use super::{IDEMPOTENCY_KEY, MAX_IDEMPOTENCY_KEY_BYTES, METADATA_LOCATION, Published, Publisher};
use crate::error::{Error, ErrorKind, Result};
use crate::identifier::IndexIdentifier;
use crate::metadata::{IndexMetadata, SnapshotContents};
use crate::warehouse::Warehouse;

impl Publisher {
    /// Publish `contents` as a successor at most once per `idempotency_key`.
    ///
    /// The key is stored in the new snapshot's `summary` under
    /// `parqdb.idempotency-key`, together with the snapshot's metadata
    /// file under `parqdb.metadata-location`. Before every attempt
    /// (so also after losing a race to a concurrent duplicate), the current metadata's
    /// retained snapshots are searched for the key: if one carries it, nothing is
    /// published and its result is returned with `already_published: true` — the same
    /// `metadata_location`, `snapshot_id` and `sequence_number` as the first publication.
    ///
    /// **Limit:** replays are recognised only while the key's snapshot is retained in the
    /// current metadata; after it is expired, the same key publishes again.
    ///
    /// Errors: `INVALID_REQUEST` for an empty key, a key over
    /// 1,024 bytes or with
    /// control characters; otherwise as [`Publisher::publish`].
    pub async fn publish_idempotent(
        &self,
        identifier: &IndexIdentifier,
        idempotency_key: &str,
        contents: SnapshotContents,
    ) -> Result<Published> {
        check_key(idempotency_key)?;
        let mut contents = contents;
        contents
            .summary
            .insert(IDEMPOTENCY_KEY.to_owned(), idempotency_key.to_owned());
        let warehouse = self.inner.warehouse.clone();
        let run = self
            .run(identifier, |base| {
                if let Some(mut found) =
                    find_published(base.metadata, idempotency_key, base.location, &warehouse)
                {
                    found.attempts = base.attempt;
                    return Ok(Step::Finish(found));
                }
                self.successor(base, contents.clone()).map(Step::Commit)
            })
            .await?;
        Ok(match run {
            Run::Committed(committed) => committed.published(),
            Run::Finished(found) => found,
            Run::Failed(err) => return Err(err),
        })
    }
}

/// The publication of the retained snapshot carrying `key` (the lowest sequence number
/// if several do), with `already_published: true`.
///
/// Its location is the recorded `parqdb.metadata-location`, or `current_location` for a
/// snapshot that carries the key but no recorded location (published by another tool).
pub(crate) fn find_published(
    metadata: &IndexMetadata,
    key: &str,
    current_location: &str,
    warehouse: &Warehouse,
) -> Option<Published> {
    let snapshot = metadata
        .snapshots()
        .iter()
        .filter(|snapshot| {
            snapshot
                .summary()
                .get(IDEMPOTENCY_KEY)
                .is_some_and(|k| k == key)
        })
        .min_by_key(|snapshot| snapshot.sequence_number())?;
    let metadata_location = snapshot
        .summary()
        .get(METADATA_LOCATION)
        .map(|relative| warehouse.absolute(relative))
        .unwrap_or_else(|| current_location.to_owned());
    Some(Published {
        metadata_location,
        snapshot_id: snapshot.snapshot_id(),
        sequence_number: snapshot.sequence_number(),
        attempts: 0,
        already_published: true,
    })
}

/// `INVALID_REQUEST` unless `key` is a usable idempotency key.
pub(super) fn check_key(key: &str) -> Result<()> {
    let invalid =
        |why: &str| Error::new(ErrorKind::InvalidRequest, format!("idempotency-key: {why}"));
    if key.is_empty() {
        return Err(invalid("must not be empty"));
    }
    if key.len() > MAX_IDEMPOTENCY_KEY_BYTES {
        return Err(invalid(&format!(
            "has {} bytes, more than {MAX_IDEMPOTENCY_KEY_BYTES}",
            key.len()
        )));
    }
    if key.chars().any(char::is_control) {
        return Err(invalid("must not contain control characters"));
    }
    Ok(())
}
