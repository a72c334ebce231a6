//! JSON logs through `tracing`, one object per line on stderr.
//!
//! Every line carries the innermost span's fields; during an invocation that is the
//! [`Handler`](super::Handler)'s `invocation` span, so each line names the `request_id`
//! and the `operation`. The level comes from `RUST_LOG`, else Lambda's
//! `AWS_LAMBDA_LOG_LEVEL` (set by the function's logging configuration), else `info`.
//! Metrics go to stdout (see [`metrics`](super::metrics)), so the two never interleave
//! within a line.

use tracing_subscriber::EnvFilter;

/// Install the JSON subscriber (once; later calls are no-ops).
pub fn init() {
    let filter = EnvFilter::try_from_default_env()
        .ok()
        .or_else(|| {
            let level = std::env::var("AWS_LAMBDA_LOG_LEVEL").ok()?;
            EnvFilter::try_new(level.to_ascii_lowercase()).ok()
        })
        .unwrap_or_else(|| EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .json()
        .with_env_filter(filter)
        .with_current_span(true)
        .with_span_list(false)
        .with_writer(std::io::stderr)
        .try_init();
}
