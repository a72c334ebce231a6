//! What a run did (or, dry, would do), and the progress events it emits.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::config::GcConfig;
use super::reachability::RootStats;

/// A count of objects and their bytes.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Tally {
    /// Objects.
    pub objects: u64,
    /// Their total size in bytes.
    pub bytes: u64,
}

impl Tally {
    /// Count one object of `bytes` bytes.
    pub(crate) fn add(&mut self, bytes: u64) {
        self.objects += 1;
        self.bytes += bytes;
    }

    /// Add another count.
    pub(crate) fn merge(&mut self, other: Tally) {
        self.objects += other.objects;
        self.bytes += other.bytes;
    }
}

/// The counts of a run (or of part of one: a page, a partition), flattened into
/// [`GcReport`] (its JSON has them at the top level).
///
/// Every object listed under the managed prefixes is counted in `scanned` and in exactly
/// one of `reachable`, `kept-nested`, `kept-unknown-format`, `kept-by-grace`,
/// `kept-by-retention`, `kept-by-condemn-delay`, `kept-by-reference`,
/// `kept-at-verification`, `deferred` or `deleted` (in a dry run, `deleted` counts what
/// would be deleted). `tracked` and `condemned` count ledger transitions made (or, dry,
/// that would be made) by the run.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", default, deny_unknown_fields)]
pub struct GcCounts {
    /// Objects listed under `metadata/` and `indexes/`.
    pub scanned: Tally,
    /// Reachable from a root.
    pub reachable: Tally,
    /// Inside a subtree that holds another warehouse's ownership marker or a pointer
    /// store's records: never collected (a nested warehouse or pointer store).
    pub kept_nested: Tally,
    /// Under `metadata/`, index metadata of a format version this collector does not
    /// understand: never deleted, and whatever it may name is kept with it.
    pub kept_unknown_format: Tally,
    /// Listing entries that are no objects the collector may touch (symbolic links,
    /// file names that are not UTF-8): never followed, never deleted.
    pub skipped: u64,
    /// Unreachable but younger than the grace period (maybe an in-flight writer's).
    pub kept_by_grace: Tally,
    /// Unreachable for less than the retention period.
    pub kept_by_retention: Tally,
    /// Unreachable, but named by a publication the catalog logged too recently for this
    /// run's walk to date the loss (a later run starts its clock).
    pub kept_recently_published: Tally,
    /// Unreachable, but its name is too long for the ledger to mirror (the store's key
    /// limit): never tracked, so never deleted. Remove such objects by hand.
    pub kept_unmirrorable: Tally,
    /// Condemned less than the condemnation delay ago.
    pub kept_by_condemn_delay: Tally,
    /// Past retention, but referenced by an unreachable metadata file that still exists
    /// (it goes first; this object follows in a later run).
    pub kept_by_reference: Tally,
    /// Doomed, but reachable again (or newly evidenced) at the verification walk.
    pub kept_at_verification: Tally,
    /// Deletable, but over this run's deletion limit.
    pub deferred: Tally,
    /// Deleted (dry run: would be deleted).
    pub deleted: Tally,
    /// Objects whose retention clock this run started.
    pub tracked: Tally,
    /// Objects this run condemned.
    pub condemned: Tally,
    /// Ledger files removed because their object is reachable again or gone.
    pub ledger_files_cleared: u64,
}

impl GcCounts {
    /// Add `other` to these counts.
    pub(crate) fn merge(&mut self, other: &GcCounts) {
        self.scanned.merge(other.scanned);
        self.reachable.merge(other.reachable);
        self.kept_nested.merge(other.kept_nested);
        self.kept_unknown_format.merge(other.kept_unknown_format);
        self.skipped += other.skipped;
        self.kept_by_grace.merge(other.kept_by_grace);
        self.kept_by_retention.merge(other.kept_by_retention);
        self.kept_recently_published
            .merge(other.kept_recently_published);
        self.kept_unmirrorable.merge(other.kept_unmirrorable);
        self.kept_by_condemn_delay
            .merge(other.kept_by_condemn_delay);
        self.kept_by_reference.merge(other.kept_by_reference);
        self.kept_at_verification.merge(other.kept_at_verification);
        self.deferred.merge(other.deferred);
        self.deleted.merge(other.deleted);
        self.tracked.merge(other.tracked);
        self.condemned.merge(other.condemned);
        self.ledger_files_cleared += other.ledger_files_cleared;
    }
}

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum GcStatus {
    /// The run completed (it may have deleted nothing).
    Completed,
    /// A dry run: nothing was written or deleted.
    DryRun,
    /// Another run holds the lease; this one did nothing.
    Skipped,
    /// The invocation stopped at its deadline (or budget) with the run unfinished; the
    /// next invocation goes on where it stopped.
    InProgress,
}

/// What a run did to one object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ActionKind {
    /// Deleted (dry run: would delete).
    Delete,
    /// Condemned: retention has elapsed; deleted by a later run if still unreachable.
    Condemn,
    /// First recorded as unreachable: its retention clock started.
    Track,
}

/// One per-object action, with the reason.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct GcAction {
    /// Warehouse-relative path.
    pub path: String,
    /// Size in bytes.
    pub size: u64,
    /// What was (or would be) done.
    pub action: ActionKind,
    /// Why.
    pub reason: String,
}

/// The report of one [`collect`](super::GarbageCollector::collect) run; its counts are
/// [`GcCounts`].
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct GcReport {
    /// This run's id.
    pub run_id: Uuid,
    /// How the run ended.
    pub status: GcStatus,
    /// Why the run was skipped, if it was.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skipped_reason: Option<String>,
    /// The run's logical time (Unix epoch milliseconds).
    pub now_ms: i64,
    /// The configuration.
    pub config: GcConfig,
    /// The owning catalog's id.
    pub catalog_id: Option<Uuid>,
    /// What the walk over the pointer records found.
    pub roots: RootStats,
    /// What the run counted.
    #[serde(flatten)]
    pub counts: GcCounts,
    /// Per-object actions, at most `config.max-reported-actions`.
    pub actions: Vec<GcAction>,
    /// Whether `actions` was cut short.
    pub actions_truncated: bool,
    /// Things an operator should know (dangling references, invalid dropped metadata).
    pub warnings: Vec<String>,
    /// Where the run stands: its phase and, per partition of `indexes/`, its progress
    /// (`null` for a dry run, which keeps no state).
    #[doc(hidden)] // Reported by the step API of the gc function.
    pub progress: Option<RunProgress>,
}

/// Where a run stands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct RunProgress {
    /// The phase the run is in (`done` once finished).
    pub phase: GcPhase,
    /// How many partitions `indexes/` is split into.
    pub partitions: usize,
    /// How many steps (invocations) this report covers.
    pub steps: u64,
}

impl GcReport {
    pub(crate) fn new(run_id: Uuid, now_ms: i64, config: &GcConfig) -> GcReport {
        GcReport {
            run_id,
            status: if config.dry_run {
                GcStatus::DryRun
            } else {
                GcStatus::Completed
            },
            skipped_reason: None,
            now_ms,
            config: config.clone(),
            catalog_id: None,
            roots: RootStats::default(),
            counts: GcCounts::default(),
            actions: Vec::new(),
            actions_truncated: false,
            warnings: Vec::new(),
            progress: None,
        }
    }

    /// Add `counts` to this report's.
    pub(crate) fn add_counts(&mut self, counts: &GcCounts) {
        self.counts.merge(counts);
    }

    pub(crate) fn act(&mut self, path: &str, size: u64, action: ActionKind, reason: String) {
        if self.actions.len() < self.config.max_reported_actions {
            self.actions.push(GcAction {
                path: path.to_owned(),
                size,
                action,
                reason,
            });
        } else {
            self.actions_truncated = true;
        }
    }

    /// The report as JSON.
    pub(crate) fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(self).unwrap_or(serde_json::Value::Null)
    }
}

/// A phase of a run, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum GcPhase {
    /// Checking the warehouse's ownership marker.
    CheckOwnership,
    /// Acquiring the run lease.
    AcquireLease,
    /// Walking the pointer records and their metadata.
    ComputeReachability,
    /// Scanning `metadata/`.
    ScanMetadata,
    /// Scanning `indexes/`.
    ScanIndexes,
    /// Re-walking the catalog right before deleting.
    Verify,
    /// Deleting.
    Delete,
    /// Clearing ledger entries of reachable or vanished objects.
    SweepLedger,
    /// Done.
    Done,
}

/// A progress event (for a progress bar).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case", tag = "event")]
pub enum GcProgress {
    /// A phase started.
    Phase {
        /// The phase.
        phase: GcPhase,
    },
    /// Objects scanned so far in this run.
    Scanned {
        /// Objects.
        objects: u64,
        /// Bytes.
        bytes: u64,
    },
    /// Objects deleted so far, of how many doomed.
    Deleted {
        /// Deleted so far.
        objects: u64,
        /// Doomed in this run.
        of: u64,
    },
}
