//! The catalog conformance suite (`support::conformance`), instantiated per backend.
mod dynamodb;
mod lambda_dynamodb;
mod lambda_local;
mod local;
mod memory;
mod s3;
