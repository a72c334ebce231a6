//! Fuzz the strict metadata parser.
//!
//! Run from the repository root (nightly and cargo-fuzz required), seeding with the
//! fixtures:
//!
//! ```text
//! cargo +nightly fuzz run metadata_parse fuzz/corpus/metadata_parse \
//!     tests/fixtures/metadata/valid tests/fixtures/metadata/invalid
//! ```
//!
//! The properties checked are `bodies::metadata_parse`'s (shared with the smoke test
//! `tests/it/fuzz_bodies.rs`): parsing never panics; it fails only with
//! `INVALID_INDEX_METADATA` or `UNSUPPORTED_FORMAT_VERSION`; accepted metadata round-trips
//! byte-stably through its canonical form.
#![no_main]

#[path = "bodies.rs"]
mod bodies;

libfuzzer_sys::fuzz_target!(|data: &[u8]| bodies::metadata_parse(data));
