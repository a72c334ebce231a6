//! The `gc` Lambda function's events: one step of a run (what the `gc-cycle` state
//! machine sends), or a whole run within the invocation's budget (a scheduled event).

use futures::StreamExt;
use serde_json::{Value, json};

use super::GarbageCollector;
use super::step::GcStep;
use crate::catalog::ownership::read_marker;
use crate::error::{Error, ErrorKind, Result};
use crate::warehouse::{GC_DIR, INDEXES_DIR, METADATA_DIR, Warehouse};

/// Answer one event at the catalog clock's current time.
///
/// * `{"step": "plan"}`, `{"step": "scan", "run": "<id>", "partition": 0}`, ... (see
///   [`GcStep`]): that step, stopping at the first page boundary after `budget`; the
///   answer is the [`StepOutcome`](super::StepOutcome) (`done`, `partitions`, `status`
///   and the step's report).
/// * any other JSON object (the raw EventBridge scheduled event, `{}` for a manual run):
///   as much of a whole run as fits in `budget` ([`GarbageCollector::collect`]); the next
///   event goes on where it stopped. The answer is the report, with `done` set once the
///   run has finished.
///
/// A run skipped because another run holds the lease is a success (`"status":
/// "skipped"`), not an error: overlapping schedules are expected. So is a plan step (or a
/// whole run) in a warehouse nobody has claimed that holds nothing at all under `_gc/`,
/// `metadata/` and `indexes/` — a freshly deployed stack before its first write: there is
/// nothing to collect, and the answer says so (`"status": "unclaimed"`, `"done": true`,
/// no run, no partitions) without writing anything. A warehouse without a marker that does
/// hold something is still refused (`INVALID_CONFIGURATION`: run `init --adopt`).
pub async fn run_scheduled_within(
    collector: &GarbageCollector,
    event: Value,
    budget: Option<std::time::Duration>,
) -> Result<Value> {
    if !event.is_object() {
        return Err(Error::new(
            ErrorKind::InvalidRequest,
            "the gc function expects a JSON object (a step such as {\"step\": \"plan\"}, an EventBridge scheduled event or {})",
        ));
    }
    let collector = match budget {
        Some(budget) => collector.within(budget),
        None => collector.clone(),
    };
    let now = collector.catalog().clock().now_ms();
    let step = event.get("step").and_then(Value::as_str);
    if matches!(step, None | Some("plan"))
        && unclaimed_and_empty(collector.catalog().warehouse()).await?
    {
        return Ok(json!({
            "step": step.unwrap_or("run"),
            "status": "unclaimed",
            "done": true,
            "run-id": null,
            "partitions": [],
            "warnings": [],
        }));
    }
    if event.get("step").is_some() {
        let step: GcStep = serde_json::from_value(event).map_err(|err| {
            Error::new(
                ErrorKind::InvalidRequest,
                format!("the gc step event is invalid: {err}"),
            )
        })?;
        let outcome = collector.step(step, now, collector.config().budget).await?;
        return Ok(outcome.to_json());
    }
    let report = collector.collect(now).await?;
    let mut value = report.to_json();
    if let Some(object) = value.as_object_mut() {
        let done = report.status != super::GcStatus::InProgress;
        object.insert("done".into(), done.into());
    }
    Ok(value)
}

/// [`run_scheduled_within`] without a budget.
pub async fn run_scheduled(collector: &GarbageCollector, event: Value) -> Result<Value> {
    run_scheduled_within(collector, event, None).await
}

/// Whether the warehouse has no ownership marker and no object under `_gc/`, `metadata/`
/// or `indexes/` (a claim always leaves `_gc/claims/`, a writer's first file lands in
/// `metadata/` or `indexes/`).
async fn unclaimed_and_empty(warehouse: &Warehouse) -> Result<bool> {
    if read_marker(warehouse).await?.is_some() {
        return Ok(false);
    }
    for dir in [GC_DIR, METADATA_DIR, INDEXES_DIR] {
        if warehouse.list(dir).next().await.transpose()?.is_some() {
            return Ok(false);
        }
    }
    Ok(true)
}
