//! Event-driven refresh.
// The burst generator and runner of `examples/refresh_burst.rs`, shared by both modules.
#[path = "../../../examples/refresh_burst.rs"]
#[allow(dead_code)]
mod refresh_burst;

mod burst;
mod ordering;
