//! What the integration tests share: the store contract and the catalog conformance suite,
//! written once and instantiated per backend; the local services and the Lambda host; the
//! garbage collector's harness and its scale server; the publication suite; the template
//! reader; the state-machine interpreter.
#![allow(dead_code, unused_macros)]

pub mod asl;
#[macro_use]
pub mod conformance;
pub mod faketime;
pub mod fixture;
pub mod gc;
pub mod gc_scale;
pub mod history;
pub mod infra;
pub mod lambda_host;
#[macro_use]
pub mod publish;
pub mod scale;
pub mod services;
#[macro_use]
pub mod store_suite;
