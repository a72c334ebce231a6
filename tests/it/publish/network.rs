//! The publication suite on the network backends: pointers in DynamoDB Local and on the
//! S3-compatible server, metadata on the S3-compatible server.

use std::sync::Arc;

use parqdb_catalog::IndexCatalog;
use parqdb_catalog::Warehouse;

async fn s3() -> (Arc<dyn IndexCatalog>, Warehouse) {
    let env = crate::support::services::s3_env().await;
    (env.catalog, env.warehouse)
}

async fn dynamodb() -> (Arc<dyn IndexCatalog>, Warehouse) {
    let env = crate::support::services::dynamodb_env().await;
    (env.catalog, env.warehouse)
}

mod s3_backend {
    use super::*;
    publish_suite!(s3());
}

mod dynamodb_backend {
    use super::*;
    publish_suite!(dynamodb());
}
