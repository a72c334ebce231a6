//! Fuzz target `lambda_event`: see `bodies.rs` for the properties checked.
//!
//! ```text
//! cargo +nightly fuzz run lambda_event fuzz/corpus/lambda_event -- -max_total_time=600
//! ```
#![no_main]

#[path = "bodies.rs"]
mod bodies;

libfuzzer_sys::fuzz_target!(|data: &[u8]| bodies::lambda_event(data));
