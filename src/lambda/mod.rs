//! The Lambda handler layer: the event/response contract and the handlers the function
//! binaries in `functions/` call.
//!
//! One Lambda function per catalog operation — `load`, `register`, `commit`, `drop`,
//! `rename`, `list` — plus one `namespace` function whose `action` field selects
//! `create`, `exists`, `list`, `drop` or `properties`. Namespace administration is rare
//! and shares one IAM surface, so one function keeps the deployment small, while the
//! index operations (the hot path, and the ones that need different permissions:
//! `load` is read-only) stay separately deployable, scalable and alarmed.
//!
//! * [`event`]: the request types (kebab-case JSON, strict) and the extra response
//!   types; the error contract (`errorType` is the spec code).
//! * [`handler`]: one plain `async fn` per operation over a `&dyn IndexCatalog` (and
//!   [`handler::publish`], [`handler::gc`]), the [`Invocations`] every invocation goes
//!   through (deadline, span, outcome log line, latency metric), and the [`Handler`] of
//!   the catalog operations.
//! * [`deadline`]: every invocation answers before its deadline, with a typed error if
//!   the store is too slow.
//! * [`metrics`]: CloudWatch Embedded Metric Format lines.
//! * [`logging`]: JSON logs through `tracing`.
//!
//! ```
//! use lambda_runtime::{Context, LambdaEvent};
//! use parqdb_catalog::CatalogConfig;
//! use parqdb_catalog::lambda::handler;
//! use serde_json::json;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> parqdb_catalog::Result<()> {
//! let catalog = CatalogConfig::new(Some("memory://docs/wh".into()), Some("memory://".into()))
//!     .build()
//!     .await?;
//! let event = json!({"action": "create", "namespace": ["docs"]});
//! handler::namespace(&catalog, LambdaEvent::new(event, Context::default())).await?;
//!
//! let event = json!({"identifier": {"namespace": ["docs"], "name": "embeddings"}});
//! let err = handler::load(&catalog, LambdaEvent::new(event, Context::default())).await.unwrap_err();
//! assert_eq!(err.code(), "INDEX_NOT_FOUND");
//!
//! let event = json!({"identifier": {"namespace": ["docs"], "name": "embeddings"}, "extra": 1});
//! let err = handler::load(&catalog, LambdaEvent::new(event, Context::default())).await.unwrap_err();
//! assert_eq!(err.code(), "INVALID_REQUEST");
//! # Ok(()) }
//! ```

pub mod deadline;
pub mod event;
pub mod handler;
pub mod logging;
pub mod metrics;

pub use event::RawEvent;
pub use handler::{Handler, Invocations};

/// The catalog operation a Lambda function serves (one function per operation).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Operation {
    /// `load {identifier}`.
    Load,
    /// `register {identifier, source, metadata-location}`.
    Register,
    /// `commit {identifier, source, base-metadata-location, new-metadata-location}`.
    Commit,
    /// `drop {identifier}`.
    Drop,
    /// `rename {from, to}`.
    Rename,
    /// `list {namespace, page-token?, page-size?}`.
    List,
    /// `namespace {action, namespace?, properties?, page-token?, page-size?}`.
    Namespace,
}

impl Operation {
    /// Every operation, in the order of the spec.
    pub const ALL: [Operation; 7] = [
        Operation::Load,
        Operation::Register,
        Operation::Commit,
        Operation::Drop,
        Operation::Rename,
        Operation::List,
        Operation::Namespace,
    ];

    /// The operation's name: the function binary's name and the `Operation` metric
    /// dimension.
    pub const fn name(self) -> &'static str {
        match self {
            Operation::Load => "load",
            Operation::Register => "register",
            Operation::Commit => "commit",
            Operation::Drop => "drop",
            Operation::Rename => "rename",
            Operation::List => "list",
            Operation::Namespace => "namespace",
        }
    }
}

impl std::fmt::Display for Operation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}
