//! JSON logs through `tracing`, one object per line on stderr.
//!
//! Every line carries the innermost span's fields; during an invocation that is the
//! `invocation` span of [`observe`](super::handler::observe), so each line names the
//! `request_id` and the `operation`. The level comes from `RUST_LOG` (full control),
//! else Lambda's `AWS_LAMBDA_LOG_LEVEL` (set by the function's logging configuration),
//! else `info`. Without `RUST_LOG`, the runtime's own `ERROR` line per failed invocation
//! (target `lambda_runtime::layers::panic`, the error's `Debug` form) is switched off:
//! [`observe`](super::handler::observe) already logs every outcome, at `WARN` for a
//! rejected request and at `ERROR` only for a failure of the catalog or its store.
//! A panic is logged as one JSON `ERROR` line too (the release profile aborts on panic).
//! Metrics go to stdout (see [`metrics`](super::metrics)), so the two never interleave
//! within a line.

use tracing_subscriber::EnvFilter;

/// The runtime's duplicate error line (see the module docs).
const RUNTIME_ERROR_LINE: &str = "lambda_runtime::layers::panic=off";

/// Install the JSON subscriber and the panic hook (once; later calls are no-ops).
pub fn init() {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| {
        let level = std::env::var("AWS_LAMBDA_LOG_LEVEL")
            .map(|level| level.to_ascii_lowercase())
            .unwrap_or_else(|_| "info".to_owned());
        EnvFilter::try_new(format!("{level},{RUNTIME_ERROR_LINE}"))
            .unwrap_or_else(|_| EnvFilter::new(format!("info,{RUNTIME_ERROR_LINE}")))
    });
    let installed = tracing_subscriber::fmt()
        .json()
        .with_env_filter(filter)
        .with_current_span(true)
        .with_span_list(false)
        .with_writer(std::io::stderr)
        .try_init();
    if installed.is_ok() {
        std::panic::set_hook(Box::new(|info| {
            tracing::error!(panic = %info, "panicked");
        }));
    }
}
