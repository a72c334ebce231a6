//! The catalog conformance suite through [`LambdaCatalog`], the remote client, against the
//! real function binaries served by the local Lambda host (`crate::support::lambda_host`), with
//! warehouse and pointers on the local filesystem.
//!
//! [`LambdaCatalog`]: parqdb_catalog::remote::LambdaCatalog

catalog_conformance!(crate::support::lambda_host::local_env(), refusing: crate::support::lambda_host::local_refusing());
