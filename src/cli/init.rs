//! `parqdb-catalog init`: prepare a catalog for use.

use clap::Args;
use serde_json::json;

use crate::config::CatalogConfig;
use crate::error::Result;
use crate::gc;

/// What `init` may claim.
#[derive(Debug, Default, Args)]
pub(crate) struct InitArgs {
    /// Take over a warehouse that holds data but no ownership marker (written by an earlier
    /// version, or its owner's marker was lost), re-home the marker after moving this
    /// catalog's pointer store, or start a new epoch after restoring a backup (every gc
    /// retention clock starts again): you assert that this catalog's pointers are the only
    /// ones naming the warehouse's data.
    #[arg(long)]
    adopt: bool,
}

/// Create a missing DynamoDB table or S3 bucket (local deployments), run the capability
/// probe, and claim the warehouse for this catalog (every write and the garbage collector
/// refuse a warehouse another catalog owns). Idempotent.
pub(crate) async fn run(config: &CatalogConfig, args: &InitArgs) -> Result<serde_json::Value> {
    let resources = config.create_missing_resources().await?;
    let catalog = config.build().await?;
    let probe = catalog.probe().await?.into_result()?;
    let now = catalog.clock().now_ms();
    let marker = if args.adopt {
        gc::adopt(&catalog, now).await?
    } else {
        gc::claim(&catalog, now).await?
    };
    Ok(json!({
        "resources": resources,
        "store": catalog.store().describe(),
        "warehouse": catalog.warehouse().root(),
        "probe-passed": probe.passed(),
        "owner": marker,
    }))
}
