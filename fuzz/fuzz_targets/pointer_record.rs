//! Fuzz target `pointer_record`: see `bodies.rs` for the properties checked.
//!
//! ```text
//! cargo +nightly fuzz run pointer_record fuzz/corpus/pointer_record -- -max_total_time=600
//! ```
#![no_main]

#[path = "bodies.rs"]
mod bodies;

libfuzzer_sys::fuzz_target!(|data: &[u8]| bodies::pointer_record(data));
