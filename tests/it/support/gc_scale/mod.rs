//! The garbage collector at scale: a synthetic S3-compatible server whose warehouse
//! generates most of its listings (see [`server`]), and a driver that runs gc runs step by
//! step as worker processes, as the `gc-cycle` state machine does (see [`driver`]).
//! Shared by `tests/it/gc/scale.rs` (CI size) and `examples/gc_scale_bench.rs` (full size).
#![allow(dead_code)]
#![allow(clippy::disallowed_methods)] // tests may read the wall clock and draw random ids (unique names)

pub mod driver;
pub mod server;
