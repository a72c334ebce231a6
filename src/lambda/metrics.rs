//! Per-invocation latency and outcome as CloudWatch Embedded Metric Format (EMF) lines.
//!
//! Each invocation prints one JSON line to stdout; CloudWatch Logs extracts the metric
//! `LatencyMs` (milliseconds) in the namespace [`NAMESPACE`] three times: with the
//! dimensions `Operation` (the function: `load`, `commit`, ...) × `Outcome` (`SUCCESS` or
//! the error code, a closed set); with `Outcome` alone, so that one alarm can watch an
//! outcome (`STORE_UNAVAILABLE`, `COMMIT_STATE_UNKNOWN`, ...) across every function; and
//! without dimensions, whose sample count is the number of typed answers, which the
//! template's failure alarm subtracts from Lambda's invocation count. The line is
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
//! let line = emf_line(1_700_000_000_000, "commit", Outcome::Error("COMMIT_CONFLICT"), 12.5, "req-1");
//! let json: serde_json::Value = serde_json::from_str(&line)?;
//! assert_eq!(json["_aws"]["CloudWatchMetrics"][0]["Namespace"], "ParqDBCatalog");
//! assert_eq!(json["Outcome"], "COMMIT_CONFLICT");
//! assert_eq!(json["LatencyMs"], 12.5);
//! # Ok::<(), serde_json::Error>(())
//! ```

use std::fmt;
use std::io::Write;
use std::sync::{Arc, Mutex};

use serde_json::json;

use crate::clock::{Clock, SystemClock};
use crate::error::Result;

/// The CloudWatch metric namespace.
pub const NAMESPACE: &str = "ParqDBCatalog";

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
                "Dimensions": [["Operation", "Outcome"], ["Outcome"], []],
                "Metrics": [{"Name": "LatencyMs", "Unit": "Milliseconds"}],
            }],
        },
        "Operation": operation,
        "Outcome": outcome.as_str(),
        "LatencyMs": latency_ms,
        "RequestId": request_id,
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
    clock: Arc<dyn Clock>,
    sink: Sink,
}

impl Metrics {
    /// Print to stdout, timestamped by the system clock (what the functions use).
    pub fn stdout() -> Self {
        Metrics {
            clock: Arc::new(SystemClock),
            sink: Sink::Stdout,
        }
    }

    /// Keep the lines in memory (for tests); returns the metrics and the lines.
    pub fn in_memory() -> (Self, Arc<Mutex<Vec<String>>>) {
        let lines = Arc::new(Mutex::new(Vec::new()));
        let metrics = Metrics {
            clock: Arc::new(SystemClock),
            sink: Sink::Memory(lines.clone()),
        };
        (metrics, lines)
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
        let line = emf_line(timestamp_ms, operation, outcome, latency_ms, request_id);
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
    use super::*;
    use crate::clock::ManualClock;

    #[test]
    fn lines_follow_the_emf_specification() {
        let (metrics, lines) = Metrics::in_memory();
        let metrics = metrics.with_clock(Arc::new(ManualClock::new(42)));
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
                        "Dimensions": [["Operation", "Outcome"], ["Outcome"], []],
                        "Metrics": [{"Name": "LatencyMs", "Unit": "Milliseconds"}],
                    }],
                },
                "Operation": "load",
                "Outcome": "SUCCESS",
                "LatencyMs": 3.25,
                "RequestId": "abc",
            })
        );
        assert!(!lines[0].contains('\n'));
    }
}
