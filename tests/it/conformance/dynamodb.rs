//! The catalog conformance suite with pointers in DynamoDB Local and metadata on the
//! S3-compatible server.

catalog_conformance!(crate::support::services::dynamodb_env(), refusing: crate::support::services::dynamodb_refusing());
