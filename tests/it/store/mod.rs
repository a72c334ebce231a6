//! The pointer-store contract (`support::store_suite`) per backend, and the capability
//! probe.
mod dynamodb;
mod local;
mod memory;
mod probe_refusal;
mod s3;
