//! # ParqDB Catalog
//!
//! A serverless, object-store-only catalog for ParqDB vector indexes. See the README for
//! the tutorial and the architecture.
#![deny(missing_docs)]

#[cfg(feature = "cli")]
pub mod bench;
pub mod catalog;
#[cfg(feature = "cli")]
pub mod cli;
pub mod clock;
pub mod config;
pub mod error;
pub mod family;
pub mod gc;
pub mod identifier;
mod json;
#[cfg(feature = "lambda")]
pub mod lambda;
pub mod metadata;
pub mod publish;
pub mod refresh;
#[cfg(feature = "remote")]
pub mod remote;
mod retry;
pub mod store;
pub mod warehouse;

pub use clock::{Clock, IdGenerator, ManualClock, RandomIds, SeededIds, SystemClock};
pub use error::{Error, ErrorKind, Result};
pub use identifier::{IndexIdentifier, Namespace};
