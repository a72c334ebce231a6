//! The integration tests of `parqdb-catalog`: one test binary (`cargo test --test it`),
//! one module per subject, named by what it proves.
//!
//! Two tiers, decided by module path (`tests/it/tiers.txt`): the fast tier
//! (`scripts/test.sh --fast`) runs the modules on memory and local files at the quick
//! scale, without services; the whole suite (`scripts/test.sh`) runs every test, against
//! the S3-compatible server, DynamoDB Local, the function binaries and libfaketime too.
//! `tiers::every_test_belongs_to_a_tier` fails if a test belongs to neither.
// Tests may read the wall clock and draw random ids (unique names).
#![allow(clippy::disallowed_methods)]

#[macro_use]
mod support;

mod cli;
mod conformance;
mod fuzz_bodies;
mod gc;
mod infra;
mod metadata;
mod public_api;
mod publish;
mod refresh;
mod reliability;
mod remote;
mod spec_rules;
mod store;
mod tiers;
