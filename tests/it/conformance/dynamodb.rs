//! The catalog conformance suite with pointers in DynamoDB Local and metadata on the
//! S3-compatible server.
mod common;

catalog_conformance!(common::services::dynamodb_env(), refusing: common::services::dynamodb_refusing());
