//! What the publisher returns.

use serde::Serialize;

/// A snapshot that is (or was) published: the metadata file that introduced it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct Published {
    /// The absolute URI of the metadata file whose commit published the snapshot.
    pub metadata_location: String,
    /// The published snapshot.
    pub snapshot_id: i64,
    /// Its sequence number.
    pub sequence_number: i64,
    /// Attempts (load → build → write → commit rounds) this call used.
    pub attempts: u32,
    /// `true` if this call found the snapshot already published (an idempotent replay)
    /// and published nothing.
    pub already_published: bool,
}

/// The closure passed to [`Publisher::publish`](super::Publisher::publish) declined to
/// build a successor of the current metadata (its change is no longer valid). Nothing
/// was committed by the final attempt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct Declined {
    /// The current metadata location the closure declined to build on.
    pub metadata_location: String,
    /// Its current snapshot.
    pub current_snapshot_id: i64,
    /// Its `last-sequence-number`.
    pub last_sequence_number: i64,
    /// Attempts this call used (including the declined one).
    pub attempts: u32,
}

/// The result of [`Publisher::publish`](super::Publisher::publish).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "outcome", rename_all = "kebab-case")]
pub enum PublishOutcome {
    /// A successor was committed (or found already published).
    Published(Published),
    /// The closure returned `None`.
    Declined(Declined),
}

impl PublishOutcome {
    /// The publication, unless the closure declined.
    pub fn published(self) -> Option<Published> {
        match self {
            PublishOutcome::Published(published) => Some(published),
            PublishOutcome::Declined(_) => None,
        }
    }
}

/// The result of [`Publisher::expire`](super::Publisher::expire).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct Expired {
    /// The current metadata location afterwards (unchanged if nothing expired).
    pub metadata_location: String,
    /// The current snapshot (never expired).
    pub current_snapshot_id: i64,
    /// `last-sequence-number`, preserved by expiry.
    pub last_sequence_number: i64,
    /// The snapshots removed, by id (empty if nothing was committed).
    pub expired_snapshot_ids: Vec<i64>,
    /// How many snapshots the current metadata retains.
    pub retained_snapshots: usize,
    /// Attempts this call used.
    pub attempts: u32,
}
