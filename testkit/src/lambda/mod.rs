//! The catalog's function binaries, run as Lambda runs them, on 127.0.0.1.
//!
//! * [`RuntimeApi`]: the Runtime API of one function for one or more processes, with
//!   Lambda's invocation deadlines ([`TIMED_OUT`] for an answer after it).
//! * [`Function`]: one process of a binary against its own Runtime API, fed events one at
//!   a time, its stdout (metric lines) and stderr (log lines) collected — for tests of the
//!   binaries themselves.
//! * [`LambdaHost`]: every catalog function behind the Invoke API, each a pool of
//!   processes that are restarted when they crash, with injected [`Fault`]s (throttling,
//!   crashes before or after the function ran, hangs, lost outcomes) — for tests of the
//!   clients.
//! * [`sqs_batch`] and [`failed_ids`]: the SQS batch event of an event source mapping and
//!   the messages a partial-batch response hands back.
//!
//! The binaries are found in `PARQDB_FUNCTIONS_BIN_DIR`, else next to the test executable
//! (`target/debug/`): `cargo test --workspace` builds them; for the library's tests alone
//! run `cargo build -p parqdb-catalog-functions --bins` first.

mod host;
mod http;
mod process;
mod runtime;
mod sqs;

pub use host::{Fault, LambdaHost};
pub use process::{Env, Function, Lines, TIMEOUT, binary, functions_bin_dir};
pub use runtime::{Answer, DEFAULT_DEADLINE, Outcome, RuntimeApi, TIMED_OUT};
pub use sqs::{failed_ids, sqs_batch};
