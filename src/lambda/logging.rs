//! JSON logs through `tracing`, one object per line on stderr.
//!
//! Every line carries the innermost span's fields; during an invocation that is the
//! `invocation` span of [`observe`](super::handler::observe), so each line names the
//! `request_id` and the `operation`. The level comes from `RUST_LOG` (`target=level`
//! directives), else
//! `PARQDB_LOG_LEVEL` (the template's `LogLevel`), else Lambda's `AWS_LAMBDA_LOG_LEVEL`
//! (the function's `ApplicationLogLevel`), else `info`.
//!
//! The functions filter their own logs: the template leaves Lambda's log-level filter
//! wide open (`ApplicationLogLevel: TRACE`) and sets `PARQDB_LOG_LEVEL` instead, because
//! Lambda's filter also applies to the metric lines on stdout, which carry no `level` and
//! count as `INFO` — a `WARN` or `ERROR` filter in Lambda would drop every metric.
//!
//! Without `RUST_LOG`, the runtime's own `ERROR` line per failed invocation
//! (target `lambda_runtime::layers::panic`, the error's `Debug` form) is switched off:
//! [`observe`](super::handler::observe) already logs every outcome, at `WARN` for a
//! rejected request and at `ERROR` only for a failure of the catalog or its store.
//! A panic is logged as one JSON `ERROR` line too (the release profile aborts on panic).
//! Metrics go to stdout (see [`metrics`](super::metrics)), so the two never interleave
//! within a line.

use std::str::FromStr;

use tracing_subscriber::filter::{LevelFilter, Targets};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

/// The runtime's duplicate error line (see the module docs).
const RUNTIME_ERROR_LINE: &str = "lambda_runtime::layers::panic=off";

/// The filter: `RUST_LOG` as given (`level` and `target=level` directives, comma-separated;
/// a value that does not parse is ignored), else `PARQDB_LOG_LEVEL`, else
/// `AWS_LAMBDA_LOG_LEVEL`, else `info` — the latter three without the runtime's duplicate
/// error line. (A `Targets` filter rather than `EnvFilter`: the same directives without
/// span and field matching, and without a regex engine in every function binary.)
fn filter(variable: impl Fn(&str) -> Option<String>) -> Targets {
    if let Some(filter) = variable("RUST_LOG")
        .filter(|value| directives(value))
        .and_then(|value| Targets::from_str(&value).ok())
    {
        return filter;
    }
    let level = variable("PARQDB_LOG_LEVEL")
        .or_else(|| variable("AWS_LAMBDA_LOG_LEVEL"))
        .map(|level| level.to_ascii_lowercase())
        .unwrap_or_else(|| "info".to_owned());
    Targets::from_str(&format!("{level},{RUNTIME_ERROR_LINE}")).unwrap_or_else(|_| {
        Targets::from_str(&format!("info,{RUNTIME_ERROR_LINE}")).unwrap_or_default()
    })
}

/// Whether `value` is a list of `level`, `target` and `target=level` directives.
/// (`Targets` alone reads almost any text as a target name, so a typo would silence every
/// log line instead of being ignored.)
fn directives(value: &str) -> bool {
    let target = |name: &str| {
        !name.is_empty()
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | ':' | '-'))
    };
    let level = |name: &str| LevelFilter::from_str(name).is_ok();
    value
        .split(',')
        .map(str::trim)
        .filter(|directive| !directive.is_empty())
        .all(|directive| match directive.split_once('=') {
            Some((name, filter)) => target(name.trim()) && level(filter.trim()),
            None => level(directive) || target(directive),
        })
}

/// Install the JSON subscriber and the panic hook (once; later calls are no-ops).
pub fn init() {
    let filter = filter(|name| std::env::var(name).ok().filter(|v| !v.is_empty()));
    let layer = tracing_subscriber::fmt::layer()
        .json()
        .with_current_span(true)
        .with_span_list(false)
        .with_writer(std::io::stderr);
    let installed = tracing_subscriber::registry()
        .with(layer)
        .with(filter)
        .try_init();
    if installed.is_ok() {
        std::panic::set_hook(Box::new(|info| {
            tracing::error!(panic = %info, "panicked");
        }));
    }
}

#[cfg(test)]
mod tests {
    use tracing::Level;

    use super::*;

    fn with(vars: &[(&str, &str)]) -> Targets {
        filter(|name| {
            vars.iter()
                .find(|(key, _)| *key == name)
                .map(|(_, value)| (*value).to_owned())
        })
    }

    #[test]
    fn the_level_comes_from_rust_log_then_parqdb_then_lambda() {
        let quiet = with(&[
            ("PARQDB_LOG_LEVEL", "WARN"),
            ("AWS_LAMBDA_LOG_LEVEL", "TRACE"),
        ]);
        assert!(quiet.would_enable("parqdb_catalog", &Level::WARN));
        assert!(!quiet.would_enable("parqdb_catalog", &Level::INFO));
        assert!(!quiet.would_enable("lambda_runtime::layers::panic", &Level::ERROR));

        let lambda = with(&[("AWS_LAMBDA_LOG_LEVEL", "DEBUG")]);
        assert!(lambda.would_enable("parqdb_catalog", &Level::DEBUG));

        let rust_log = with(&[
            ("RUST_LOG", "warn,parqdb_catalog=trace"),
            ("PARQDB_LOG_LEVEL", "ERROR"),
        ]);
        assert!(rust_log.would_enable("parqdb_catalog::catalog", &Level::TRACE));
        assert!(!rust_log.would_enable("hyper", &Level::INFO));

        let default = with(&[("RUST_LOG", "not a filter!")]);
        assert!(default.would_enable("parqdb_catalog", &Level::INFO));
        assert!(!default.would_enable("parqdb_catalog", &Level::DEBUG));
    }
}
