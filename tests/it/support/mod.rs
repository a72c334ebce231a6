//! Shared test harness: the store contract and the catalog conformance suite, written once
//! and instantiated per backend.
#![allow(dead_code, unused_macros)]
#![allow(clippy::disallowed_methods)] // tests may read the wall clock and draw random ids (unique names)

pub mod conformance;
pub mod fixture;
pub mod history;
pub mod lambda_host;
pub mod services;
pub mod store_suite;
