//! The catalog conformance suite with pointers and metadata on the S3-compatible server.
mod common;

catalog_conformance!(common::services::s3_env(), refusing: common::services::s3_refusing());
