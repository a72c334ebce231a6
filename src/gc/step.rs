//! Steps: the units of work one invocation does for a run, and what each one needs.
//!
//! A run proceeds through five steps; each can stop at a page boundary (its deadline)
//! and be called again, and the per-partition steps can run on many workers at once:
//!
//! | step | work | workers |
//! |---|---|---|
//! | [`GcStep::Plan`] | start a run (or resume the unfinished one): ownership, lease, journal, the first walk, the partitions; then `metadata/` in two passes (read what unreachable metadata names, then decide each file) | one |
//! | [`GcStep::Scan`] | list and decide partition `p` of `indexes/` | one per partition |
//! | [`GcStep::Verify`] | the verification walk; delete the doomed metadata files | one |
//! | [`GcStep::Delete`] | delete partition `p`'s doomed objects; sweep its ledger entries | one per partition |
//! | [`GcStep::Finish`] | sweep the ledger of `metadata/`; mark the run finished; release the lease | one |
//!
//! The [`GarbageCollector::collect`](super::GarbageCollector::collect) driver runs them
//! in this order in one process; the `gc-cycle` state machine runs them as Lambda
//! invocations (a `Map` over the partitions for `scan` and `delete`). How an invocation
//! finds and holds its run is the `run` submodule's.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::report::GcReport;

/// One step of a run: what one invocation of the `gc` function does (see the
/// module docs). As an event: `{"step": "plan"}`,
/// `{"step": "scan", "run": "<run id>", "partition": 3}`, ...
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "step", rename_all = "kebab-case", deny_unknown_fields)]
pub enum GcStep {
    /// Start a run, or resume the unfinished one, and read `metadata/`.
    Plan,
    /// Scan one partition of `indexes/`.
    Scan {
        /// The run (from the plan step's outcome).
        run: Uuid,
        /// The partition, `0..partitions`.
        partition: usize,
    },
    /// Walk the catalog again; delete doomed metadata files.
    Verify {
        /// The run.
        run: Uuid,
    },
    /// Delete one partition's doomed objects and sweep its ledger entries.
    Delete {
        /// The run.
        run: Uuid,
        /// The partition.
        partition: usize,
    },
    /// Finish the run.
    Finish {
        /// The run.
        run: Uuid,
    },
}

impl GcStep {
    /// The step's name (`plan`, `scan`, ...).
    pub fn name(&self) -> &'static str {
        match self {
            GcStep::Plan => "plan",
            GcStep::Scan { .. } => "scan",
            GcStep::Verify { .. } => "verify",
            GcStep::Delete { .. } => "delete",
            GcStep::Finish { .. } => "finish",
        }
    }
}

/// Most per-object actions (and warnings) a step's answer names.
pub const STEP_ACTIONS: usize = 20;

/// What one step did.
#[derive(Debug, Clone)]
pub struct StepOutcome {
    /// The step.
    pub step: GcStep,
    /// Whether the step's work for its run (and partition) is complete; if not, call the
    /// same step again.
    pub done: bool,
    /// The run's partitions of `indexes/` (`0..n`; from the plan step).
    pub partitions: usize,
    /// This invocation's report: its counts, actions and warnings. The finish step's is
    /// the whole run's counts.
    pub report: GcReport,
}

impl StepOutcome {
    /// The outcome as the `gc` function answers: the report's fields plus `step`, `done`
    /// and `partitions` (a list `[0, 1, ...]` a state machine `Map` iterates over).
    pub(crate) fn to_json(&self) -> serde_json::Value {
        let mut report = self.report.clone();
        // A state machine task's result is at most 256 KiB: the answer names a few
        // actions (every one is in the counts, and the CLI's `collect` lists them all).
        if report.actions.len() > STEP_ACTIONS {
            report.actions.truncate(STEP_ACTIONS);
            report.actions_truncated = true;
        }
        if report.warnings.len() > STEP_ACTIONS {
            let more = report.warnings.len() - STEP_ACTIONS;
            report.warnings.truncate(STEP_ACTIONS);
            report.warnings.push(format!(
                "... and {more} more warnings (in the function's log)"
            ));
        }
        let mut value = report.to_json();
        if let Some(object) = value.as_object_mut() {
            object.insert("step".into(), self.step.name().into());
            object.insert("done".into(), self.done.into());
            object.insert(
                "partitions".into(),
                (0..self.partitions).collect::<Vec<_>>().into(),
            );
        }
        value
    }
}
