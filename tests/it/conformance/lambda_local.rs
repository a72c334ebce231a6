//! The catalog conformance suite through [`LambdaCatalog`], the remote client, against the
//! real function binaries served by the local Lambda host (`common::lambda_host`), with
//! warehouse and pointers on the local filesystem.
//!
//! [`LambdaCatalog`]: parqdb_catalog::remote::LambdaCatalog
mod common;

catalog_conformance!(common::lambda_host::local_env(), refusing: common::lambda_host::local_refusing());
