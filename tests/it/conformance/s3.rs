//! The catalog conformance suite with pointers and metadata on the S3-compatible server.

catalog_conformance!(crate::support::services::s3_env(), refusing: crate::support::services::s3_refusing());
