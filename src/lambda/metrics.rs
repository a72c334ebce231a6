//! Per-invocation latency and outcome as CloudWatch Embedded Metric Format (EMF) lines.
//!
//! Each invocation prints one JSON line to stdout; CloudWatch Logs extracts the metric
//! `LatencyMs` (milliseconds) in the namespace [`NAMESPACE`], always under the `Stack`
//! dimension (the deployment: `PARQDB_STACK`, [`STACK_VARIABLE`], so that two stacks in
//! one account and region never share a series), four times: with `Operation` (the
//! function: `load`, `commit`, ...) × `Outcome` (`SUCCESS` or the error code, a closed
//! set); with `Operation` alone (its latency percentiles); with `Outcome` alone, so that
//! one alarm can watch an outcome (`STORE_UNAVAILABLE`, `COMMIT_STATE_UNKNOWN`, ...) across
//! every function; and with `Stack` alone, whose sample count is the number of typed
//! answers, which the template's failure alarm subtracts from Lambda's invocation count
//! and its error-rate alarms divide by. The line is
//! timestamped with the invocation's start, as Lambda's own invocation metrics are.
//! `RequestId` rides along as a property for log searches. No agent, no API call, no added
//! latency.
//!
//! The lines carry no `level`: they are not logs, and they are written whatever the log
//! level (see [`logging`](super::logging) for why Lambda's own log-level filter stays
//! open in the template).
//!
//! ```
//! use parqdb_catalog::lambda::metrics::{Outcome, emf_line};
//!
//! let line = emf_line("prod", 1_700_000_000_000, "commit", Outcome::Error("COMMIT_CONFLICT"), 12.5, "req-1");
//! let json: serde_json::Value = serde_json::from_str(&line)?;
//! assert_eq!(json["_aws"]["CloudWatchMetrics"][0]["Namespace"], "ParqDBCatalog");
//! assert_eq!(json["Stack"], "prod");
//! assert_eq!(json["Outcome"], "COMMIT_CONFLICT");
//! assert_eq!(json["LatencyMs"], 12.5);
//! # Ok::<(), serde_json::Error>(())
//! ```

use std::fmt;
use std::io::Write;
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

use crate::clock::{Clock, SystemClock};
use crate::error::Result;

/// The CloudWatch metric namespace.
pub const NAMESPACE: &str = "ParqDBCatalog";

/// The variable naming the deployment (the template sets it to the stack's name): the
/// `Stack` dimension of every metric.
pub const STACK_VARIABLE: &str = "PARQDB_STACK";

/// The `Stack` dimension when [`STACK_VARIABLE`] is unset or empty (a function run
/// outside the template).
pub const UNNAMED_STACK: &str = "unnamed";

/// The `Stack` dimension of this process: [`STACK_VARIABLE`], else [`UNNAMED_STACK`].
pub fn stack_from_env() -> String {
    std::env::var(STACK_VARIABLE)
        .ok()
        .filter(|stack| !stack.is_empty())
        .unwrap_or_else(|| UNNAMED_STACK.to_owned())
}

/// The `Outcome` dimension of one invocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The operation succeeded.
    Success,
    /// The operation failed with this error code.
    Error(&'static str),
}

impl Outcome {
    /// The outcome of a result.
    pub fn of<T>(result: &Result<T>) -> Outcome {
        match result {
            Ok(_) => Outcome::Success,
            Err(err) => Outcome::Error(err.code()),
        }
    }

    /// The dimension value: `SUCCESS` or the error code.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Success => "SUCCESS",
            Outcome::Error(code) => code,
        }
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One EMF line (no trailing newline).
pub fn emf_line(
    stack: &str,
    timestamp_ms: i64,
    operation: &str,
    outcome: Outcome,
    latency_ms: f64,
    request_id: &str,
) -> String {
    json!({
        "_aws": {
            "Timestamp": timestamp_ms,
            "CloudWatchMetrics": [{
                "Namespace": NAMESPACE,
                "Dimensions": [
                    ["Stack", "Operation", "Outcome"],
                    ["Stack", "Operation"],
                    ["Stack", "Outcome"],
                    ["Stack"],
                ],
                "Metrics": [{"Name": "LatencyMs", "Unit": "Milliseconds"}],
            }],
        },
        "Stack": stack,
        "Operation": operation,
        "Outcome": outcome.as_str(),
        "LatencyMs": latency_ms,
        "RequestId": request_id,
    })
    .to_string()
}

/// The EMF line of one gc invocation, from its answer (`report` as the `gc` function
/// returns it), under the dimensions `Stack` × `Operation` (`gc`): what this invocation did (objects
/// scanned, reachable, condemned and deleted, bytes deleted; `PartitionsDone` 1 when it
/// completed a partition's scan or deletion), and once a run has finished
/// (`RunsCompleted` 1) the run's `RunDurationMs`, the bytes past retention it still kept
/// (waiting for their condemnation delay, for the metadata naming them to go, or over the
/// run's deletion limit), and `ObjectsKeptForOperator`: objects it keeps until an operator
/// looks (files under `metadata/` of a format it does not understand, names too long for
/// its ledger). The step and status are properties of the line.
pub fn gc_emf_line(stack: &str, timestamp_ms: i64, report: &Value) -> String {
    let count = |field: &str, unit: &str| report[field][unit].as_u64().unwrap_or(0);
    // A run's end: the finish step's (or a whole run's) answer, not a repeated step of a
    // run that had finished already (whose answer carries no progress).
    // An unclaimed, empty warehouse (a fresh stack) had nothing to collect: its cycle
    // counts as a completed run.
    let finished = (report["status"] == "completed" && report["progress"]["phase"] == "done")
        || report["status"] == "unclaimed";
    let kept_past_retention = ["kept-by-condemn-delay", "kept-by-reference", "deferred"]
        .iter()
        .map(|field| count(field, "bytes"))
        .sum::<u64>();
    let partition_step = matches!(report["step"].as_str(), Some("scan" | "delete"));
    let partitions_done = u64::from(partition_step && report["done"] == true);
    let mut metrics = vec![
        json!({"Name": "ObjectsScanned", "Unit": "Count"}),
        json!({"Name": "ObjectsReachable", "Unit": "Count"}),
        json!({"Name": "ObjectsCondemned", "Unit": "Count"}),
        json!({"Name": "ObjectsDeleted", "Unit": "Count"}),
        json!({"Name": "BytesDeleted", "Unit": "Bytes"}),
        json!({"Name": "PartitionsDone", "Unit": "Count"}),
        json!({"Name": "RunsCompleted", "Unit": "Count"}),
    ];
    let mut line = json!({
        "Stack": stack,
        "Operation": "gc",
        "Status": report["status"],
        "Step": report["step"].as_str().unwrap_or("run"),
        "RunId": report["run-id"],
        "ObjectsScanned": count("scanned", "objects"),
        "ObjectsReachable": count("reachable", "objects"),
        "ObjectsCondemned": count("condemned", "objects"),
        "ObjectsDeleted": count("deleted", "objects"),
        "BytesDeleted": count("deleted", "bytes"),
        "PartitionsDone": partitions_done,
        "RunsCompleted": u64::from(finished),
    });
    if finished {
        metrics.push(json!({"Name": "BytesKeptPastRetention", "Unit": "Bytes"}));
        metrics.push(json!({"Name": "ObjectsKeptForOperator", "Unit": "Count"}));
        metrics.push(json!({"Name": "RunDurationMs", "Unit": "Milliseconds"}));
        line["BytesKeptPastRetention"] = kept_past_retention.into();
        line["ObjectsKeptForOperator"] = (count("kept-unknown-format", "objects")
            + count("kept-unmirrorable", "objects"))
        .into();
        let started = report["now-ms"].as_i64().unwrap_or(timestamp_ms);
        line["RunDurationMs"] = timestamp_ms.saturating_sub(started).max(0).into();
    }
    line["_aws"] = json!({
        "Timestamp": timestamp_ms,
        "CloudWatchMetrics": [{
            "Namespace": NAMESPACE,
            "Dimensions": [["Stack", "Operation"]],
            "Metrics": metrics,
        }],
    });
    line.to_string()
}

/// The metric line of one `refresh` batch, under the dimensions `Stack` × `Operation`
/// (`refresh`):
/// source changes delivered, changes no route contains, messages whose body carried no
/// usable S3 write, indexes the batch named, builds run, snapshots committed, and indexes
/// whose refresh failed (their messages are delivered again). `Builds` and `Commits`
/// against `Changes` is what a burst collapsed to.
pub fn refresh_emf_line(
    stack: &str,
    timestamp_ms: i64,
    report: &crate::refresh::RefreshReport,
    rejected_messages: usize,
) -> String {
    let failed = report
        .indexes
        .iter()
        .filter(|index| !index.outcome.is_done())
        .count();
    let changes = report
        .indexes
        .iter()
        .map(|index| index.changes.len())
        .sum::<usize>()
        + report.unrouted.len();
    json!({
        "_aws": {
            "Timestamp": timestamp_ms,
            "CloudWatchMetrics": [{
                "Namespace": NAMESPACE,
                "Dimensions": [["Stack", "Operation"]],
                "Metrics": [
                    {"Name": "Changes", "Unit": "Count"},
                    {"Name": "UnroutedChanges", "Unit": "Count"},
                    {"Name": "RejectedMessages", "Unit": "Count"},
                    {"Name": "Indexes", "Unit": "Count"},
                    {"Name": "Builds", "Unit": "Count"},
                    {"Name": "Commits", "Unit": "Count"},
                    {"Name": "FailedIndexes", "Unit": "Count"},
                ],
            }],
        },
        "Stack": stack,
        "Operation": "refresh",
        "Changes": changes,
        "UnroutedChanges": report.unrouted.len(),
        "RejectedMessages": rejected_messages,
        "Indexes": report.indexes.len(),
        "Builds": report.builds,
        "Commits": report.commits,
        "FailedIndexes": failed,
    })
    .to_string()
}

/// Where metric lines go.
#[derive(Debug, Clone)]
enum Sink {
    Stdout,
    Memory(Arc<Mutex<Vec<String>>>),
}

/// Records one EMF line per invocation.
#[derive(Debug, Clone)]
pub struct Metrics {
    stack: String,
    clock: Arc<dyn Clock>,
    sink: Sink,
}

impl Metrics {
    /// Print to stdout, timestamped by the system clock, under this process's `Stack`
    /// ([`stack_from_env`]): what the functions use.
    pub fn stdout() -> Self {
        Metrics {
            stack: stack_from_env(),
            clock: Arc::new(SystemClock),
            sink: Sink::Stdout,
        }
    }

    /// Keep the lines in memory (for tests); returns the metrics and the lines.
    pub fn in_memory() -> (Self, Arc<Mutex<Vec<String>>>) {
        let lines = Arc::new(Mutex::new(Vec::new()));
        let metrics = Metrics {
            stack: UNNAMED_STACK.to_owned(),
            clock: Arc::new(SystemClock),
            sink: Sink::Memory(lines.clone()),
        };
        (metrics, lines)
    }

    /// Record under the `Stack` dimension `stack` instead.
    pub fn with_stack(mut self, stack: &str) -> Self {
        self.stack = stack.to_owned();
        self
    }

    /// Timestamp lines with `clock` instead.
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// The current time of this recorder's clock (Unix epoch milliseconds).
    pub fn now_ms(&self) -> i64 {
        self.clock.now_ms()
    }

    /// Record one invocation that ends now. A failing stdout is ignored (metrics never
    /// fail a request).
    pub fn record(&self, operation: &str, outcome: Outcome, latency_ms: f64, request_id: &str) {
        self.record_at(self.now_ms(), operation, outcome, latency_ms, request_id);
    }

    /// Record one invocation, timestamped `timestamp_ms` (its start).
    pub fn record_at(
        &self,
        timestamp_ms: i64,
        operation: &str,
        outcome: Outcome,
        latency_ms: f64,
        request_id: &str,
    ) {
        let line = emf_line(
            &self.stack,
            timestamp_ms,
            operation,
            outcome,
            latency_ms,
            request_id,
        );
        match &self.sink {
            Sink::Stdout => {
                let mut stdout = std::io::stdout().lock();
                let _ = writeln!(stdout, "{line}").and_then(|()| stdout.flush());
            }
            Sink::Memory(lines) => {
                if let Ok(mut lines) = lines.lock() {
                    lines.push(line);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_gc_invocation_becomes_one_emf_line() {
        let finish = serde_json::json!({
            "status": "completed", "run-id": "r", "step": "finish", "done": true,
            "now-ms": 2, "progress": {"phase": "done", "partitions": 4, "steps": 1},
            "scanned": {"objects": 10, "bytes": 1000},
            "reachable": {"objects": 6, "bytes": 600},
            "condemned": {"objects": 1, "bytes": 10},
            "deleted": {"objects": 2, "bytes": 200},
            "kept-by-condemn-delay": {"objects": 1, "bytes": 10},
            "kept-by-reference": {"objects": 1, "bytes": 30},
            "deferred": {"objects": 0, "bytes": 0},
            "kept-unknown-format": {"objects": 1, "bytes": 5},
            "kept-unmirrorable": {"objects": 2, "bytes": 7},
        });
        let line: Value = serde_json::from_str(&gc_emf_line("s", 5, &finish)).expect("JSON");
        assert_eq!(line["Stack"], "s");
        assert_eq!(
            line["_aws"]["CloudWatchMetrics"][0]["Dimensions"],
            json!([["Stack", "Operation"]])
        );
        assert_eq!(line["ObjectsKeptForOperator"], 3);
        assert_eq!(line["Operation"], "gc");
        assert_eq!(line["Step"], "finish");
        assert_eq!(line["ObjectsDeleted"], 2);
        assert_eq!(line["BytesDeleted"], 200);
        assert_eq!(line["BytesKeptPastRetention"], 40);
        assert_eq!(line["RunsCompleted"], 1);
        assert_eq!(line["RunDurationMs"], 3);
        assert_eq!(line["PartitionsDone"], 0);
        let names = |line: &Value| -> Vec<String> {
            line["_aws"]["CloudWatchMetrics"][0]["Metrics"]
                .as_array()
                .expect("metrics")
                .iter()
                .filter_map(|metric| metric["Name"].as_str().map(str::to_owned))
                .collect()
        };
        for name in names(&line) {
            assert!(line[&name].is_u64(), "{name} has a value");
        }
        // A partition's scan completing: counted, and no run totals.
        let scan = serde_json::json!({
            "status": "in-progress", "run-id": "r", "step": "scan", "done": true,
            "progress": {"phase": "scan-indexes", "partitions": 4, "steps": 1},
            "scanned": {"objects": 1000, "bytes": 1},
            "kept-by-reference": {"objects": 1, "bytes": 30},
        });
        let line: Value = serde_json::from_str(&gc_emf_line("s", 5, &scan)).expect("JSON");
        assert_eq!(line["PartitionsDone"], 1);
        assert_eq!(line["RunsCompleted"], 0);
        assert!(line.get("BytesKeptPastRetention").is_none());
        assert!(!names(&line).contains(&"BytesKeptPastRetention".to_owned()));
        for name in names(&line) {
            assert!(line[&name].is_u64(), "{name} has a value");
        }
    }

    use super::*;
    use crate::clock::ManualClock;

    #[test]
    fn lines_follow_the_emf_specification() {
        let (metrics, lines) = Metrics::in_memory();
        let metrics = metrics
            .with_clock(Arc::new(ManualClock::new(42)))
            .with_stack("prod");
        metrics.record("load", Outcome::Success, 3.25, "abc");
        let lines = lines.lock().expect("lock").clone();
        let json: serde_json::Value = serde_json::from_str(&lines[0]).expect("json");
        assert_eq!(
            json,
            json!({
                "_aws": {
                    "Timestamp": 42,
                    "CloudWatchMetrics": [{
                        "Namespace": "ParqDBCatalog",
                        "Dimensions": [
                            ["Stack", "Operation", "Outcome"],
                            ["Stack", "Operation"],
                            ["Stack", "Outcome"],
                            ["Stack"],
                        ],
                        "Metrics": [{"Name": "LatencyMs", "Unit": "Milliseconds"}],
                    }],
                },
                "Stack": "prod",
                "Operation": "load",
                "Outcome": "SUCCESS",
                "LatencyMs": 3.25,
                "RequestId": "abc",
            })
        );
        assert!(!lines[0].contains('\n'));
    }
}
