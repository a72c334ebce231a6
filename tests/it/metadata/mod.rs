//! Metadata parsing against the fixtures.
mod fixtures;
