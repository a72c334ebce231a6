//! `parqdb-catalog register|load|commit|drop|rename|list`.

use clap::Args;
use serde_json::json;

use super::source::json_argument;
use crate::catalog::{IndexCatalog, SourceBinding};
use crate::error::Result;
use crate::identifier::{IndexIdentifier, Namespace};

#[derive(Debug, Args)]
pub(crate) struct IdentifierArgs {
    /// Namespace segment, outermost first (repeat for nested namespaces).
    #[arg(long = "namespace", required = true)]
    namespace: Vec<String>,
    /// Index name.
    #[arg(long)]
    name: String,
}

impl IdentifierArgs {
    fn identifier(&self) -> Result<IndexIdentifier> {
        IndexIdentifier::new(Namespace::new(self.namespace.clone())?, self.name.clone())
    }
}

#[derive(Debug, Args)]
pub(crate) struct RegisterArgs {
    #[command(flatten)]
    identifier: IdentifierArgs,
    /// Absolute URI of the metadata file.
    #[arg(long)]
    metadata: String,
    /// Source binding: a table-definition as inline JSON or a file (default: the current
    /// snapshot's `source-table`).
    #[arg(long)]
    source: Option<String>,
}

#[derive(Debug, Args)]
pub(crate) struct CommitArgs {
    #[command(flatten)]
    identifier: IdentifierArgs,
    /// The metadata location the new file was based on.
    #[arg(long)]
    base: String,
    /// The new metadata location.
    #[arg(long)]
    new: String,
    /// Source binding (default: the new current snapshot's `source-table`).
    #[arg(long)]
    source: Option<String>,
}

#[derive(Debug, Args)]
pub(crate) struct RenameArgs {
    #[command(flatten)]
    identifier: IdentifierArgs,
    /// Destination namespace segment (repeatable).
    #[arg(long = "to-namespace", required = true)]
    to_namespace: Vec<String>,
    /// Destination name.
    #[arg(long)]
    to_name: String,
}

#[derive(Debug, Args)]
pub(crate) struct ListArgs {
    /// Namespace segment (repeatable).
    #[arg(long = "namespace", required = true)]
    namespace: Vec<String>,
    /// Page size (1-1000).
    #[arg(long)]
    page_size: Option<usize>,
    /// Token of the page to fetch.
    #[arg(long)]
    page_token: Option<String>,
}

/// The source binding given on the command line, as given (a file that cannot be read is
/// `INVALID_REQUEST`). The catalog judges it in its order of checks, a malformed one too;
/// without one it binds the metadata's current snapshot's `source-table` itself, after
/// the same checks in the same order (see [`Catalog`](crate::Catalog#the-order-of-checks)).
fn source_binding(arg: Option<&str>) -> Result<SourceBinding> {
    Ok(match arg {
        None => SourceBinding::Snapshot,
        Some(arg) => SourceBinding::from_json_slice(&json_argument(arg, "source")?),
    })
}

pub(crate) async fn register(
    args: &RegisterArgs,
    catalog: &dyn IndexCatalog,
) -> Result<serde_json::Value> {
    let identifier = args.identifier.identifier()?;
    let source = source_binding(args.source.as_deref())?;
    let pointer = catalog
        .register_with_binding(&identifier, &source, &args.metadata)
        .await?;
    Ok(serde_json::to_value(pointer).unwrap_or_default())
}

pub(crate) async fn load(
    args: &IdentifierArgs,
    catalog: &dyn IndexCatalog,
) -> Result<serde_json::Value> {
    let pointer = catalog.load(&args.identifier()?).await?;
    Ok(serde_json::to_value(pointer).unwrap_or_default())
}

pub(crate) async fn commit(
    args: &CommitArgs,
    catalog: &dyn IndexCatalog,
) -> Result<serde_json::Value> {
    let identifier = args.identifier.identifier()?;
    let source = source_binding(args.source.as_deref())?;
    let result = catalog
        .commit_with_binding(&identifier, &source, &args.base, &args.new)
        .await?;
    Ok(serde_json::to_value(result).unwrap_or_default())
}

pub(crate) async fn drop(
    args: &IdentifierArgs,
    catalog: &dyn IndexCatalog,
) -> Result<serde_json::Value> {
    let identifier = args.identifier()?;
    catalog.drop_index(&identifier).await?;
    Ok(json!({"identifier": identifier, "dropped": true}))
}

pub(crate) async fn rename(
    args: &RenameArgs,
    catalog: &dyn IndexCatalog,
) -> Result<serde_json::Value> {
    let from = args.identifier.identifier()?;
    let to = IndexIdentifier::new(
        Namespace::new(args.to_namespace.clone())?,
        args.to_name.clone(),
    )?;
    let pointer = catalog.rename(&from, &to).await?;
    Ok(serde_json::to_value(pointer).unwrap_or_default())
}

pub(crate) async fn list(args: &ListArgs, catalog: &dyn IndexCatalog) -> Result<serde_json::Value> {
    let namespace = Namespace::new(args.namespace.clone())?;
    let page = catalog
        .list(&namespace, args.page_token.as_deref(), args.page_size)
        .await?;
    Ok(serde_json::to_value(page).unwrap_or_default())
}
