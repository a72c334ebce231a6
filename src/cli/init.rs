//! `parqdb-catalog init`: prepare a catalog for use.

use serde_json::json;

use crate::config::CatalogConfig;
use crate::error::Result;
use crate::gc;

/// Create a missing DynamoDB table or S3 bucket (local deployments), run the capability
/// probe, and claim the warehouse for this catalog (the garbage collector refuses to run
/// on a warehouse without its owner's marker). Idempotent.
pub(crate) async fn run(config: &CatalogConfig) -> Result<serde_json::Value> {
    let resources = config.create_missing_resources().await?;
    let catalog = config.build().await?;
    let probe = catalog.probe().await?.into_result()?;
    let marker = gc::claim(&catalog, catalog.clock().now_ms()).await?;
    Ok(json!({
        "resources": resources,
        "store": catalog.store().describe(),
        "warehouse": catalog.warehouse().root(),
        "probe-passed": probe.passed(),
        "owner": marker,
    }))
}
