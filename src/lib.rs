//! # ParqDB Catalog
//!
//! A serverless, object-store-only catalog for ParqDB vector indexes. See the README for
//! the tutorial and the architecture.
#![deny(missing_docs)]

pub mod clock;
pub mod error;
pub mod family;
pub mod identifier;
pub mod metadata;
pub mod store;

pub use clock::{Clock, IdGenerator, ManualClock, RandomIds, SeededIds, SystemClock};
pub use error::{Error, ErrorKind, Result};
pub use identifier::{IndexIdentifier, Namespace};
pub mod catalog;
pub mod warehouse;
