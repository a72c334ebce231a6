//! Fuzz target `key_decode`: see `bodies.rs` for the properties checked.
//!
//! ```text
//! cargo +nightly fuzz run key_decode fuzz/corpus/key_decode -- -max_total_time=600
//! ```
#![no_main]

#[path = "bodies.rs"]
mod bodies;

libfuzzer_sys::fuzz_target!(|data: &[u8]| bodies::key_decode(data));
