//! The scheduled run: what the `gc` Lambda function (an EventBridge schedule) does.

use serde_json::Value;

use super::GarbageCollector;
use crate::error::{Error, ErrorKind, Result};

/// Run `collector` once for a scheduled event at the catalog clock's current time and
/// return the report as JSON.
///
/// The event is the raw EventBridge scheduled event (`{"source": "aws.events",
/// "detail-type": "Scheduled Event", ...}`); its content is not interpreted beyond being a
/// JSON object, so a manual invocation with `{}` works too. A run skipped because another
/// run holds the lease is a success (`"status": "skipped"`), not an error: overlapping
/// schedules are expected.
pub async fn run_scheduled(collector: &GarbageCollector, event: Value) -> Result<Value> {
    run_scheduled_within(collector, event, None).await
}

/// Like [`run_scheduled`], scanning for at most `budget` (an invocation's time to its
/// deadline, less what verifying, deleting and sweeping need): a warehouse too large for
/// one invocation is collected over several, each a finished run (see
/// [budgeted runs](super#budgeted-runs)).
pub async fn run_scheduled_within(
    collector: &GarbageCollector,
    event: Value,
    budget: Option<std::time::Duration>,
) -> Result<Value> {
    let budgeted;
    let collector = match budget {
        Some(budget) => {
            budgeted = collector.within(budget);
            &budgeted
        }
        None => collector,
    };
    if !event.is_object() {
        return Err(Error::new(
            ErrorKind::InvalidRequest,
            "the gc function expects a JSON object (an EventBridge scheduled event or {})",
        ));
    }
    let now = collector.catalog().clock().now_ms();
    let report = collector.collect(now).await?;
    Ok(report.to_json())
}
