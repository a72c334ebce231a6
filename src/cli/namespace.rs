//! `parqdb-catalog namespace create|list|drop|exists`.

use std::collections::BTreeMap;

use clap::{Args, Subcommand};
use serde_json::json;

use crate::catalog::IndexCatalog;
use crate::error::{Error, ErrorKind, Result};
use crate::identifier::Namespace;

#[derive(Debug, Subcommand)]
pub(crate) enum NamespaceCommand {
    /// Create a namespace (its parent must exist).
    Create(CreateArgs),
    /// List child namespaces (top-level ones without --namespace).
    List(ListArgs),
    /// Drop an empty namespace.
    Drop(NamespaceArgs),
    /// Print whether a namespace exists.
    Exists(NamespaceArgs),
}

#[derive(Debug, Args)]
pub(crate) struct NamespaceArgs {
    /// Namespace segment, outermost first (repeat for nested namespaces).
    #[arg(long = "namespace", required = true)]
    namespace: Vec<String>,
}

#[derive(Debug, Args)]
pub(crate) struct CreateArgs {
    #[command(flatten)]
    namespace: NamespaceArgs,
    /// A string property `KEY=VALUE` (repeatable).
    #[arg(long = "property")]
    properties: Vec<String>,
}

#[derive(Debug, Args)]
pub(crate) struct ListArgs {
    /// Parent namespace segment (repeatable; omit for top-level namespaces).
    #[arg(long = "namespace")]
    namespace: Vec<String>,
    /// Page size (1-1000).
    #[arg(long)]
    page_size: Option<usize>,
    /// Token of the page to fetch.
    #[arg(long)]
    page_token: Option<String>,
}

impl NamespaceArgs {
    pub(crate) fn namespace(&self) -> Result<Namespace> {
        Namespace::new(self.namespace.clone())
    }
}

fn properties(pairs: &[String]) -> Result<BTreeMap<String, String>> {
    let mut properties = BTreeMap::new();
    for pair in pairs {
        let (key, value) = pair.split_once('=').ok_or_else(|| {
            Error::new(
                ErrorKind::InvalidRequest,
                format!("property `{pair}` is not KEY=VALUE"),
            )
        })?;
        if properties
            .insert(key.to_owned(), value.to_owned())
            .is_some()
        {
            return Err(Error::new(
                ErrorKind::InvalidRequest,
                format!("property `{key}` given twice"),
            ));
        }
    }
    Ok(properties)
}

pub(crate) async fn run(
    command: &NamespaceCommand,
    catalog: &dyn IndexCatalog,
) -> Result<serde_json::Value> {
    match command {
        NamespaceCommand::Create(args) => {
            let namespace = args.namespace.namespace()?;
            let properties = properties(&args.properties)?;
            catalog
                .create_namespace(&namespace, properties.clone())
                .await?;
            Ok(json!({"namespace": namespace, "properties": properties}))
        }
        NamespaceCommand::List(args) => {
            let parent = if args.namespace.is_empty() {
                None
            } else {
                Some(Namespace::new(args.namespace.clone())?)
            };
            let page = catalog
                .list_namespaces(parent.as_ref(), args.page_token.as_deref(), args.page_size)
                .await?;
            Ok(serde_json::to_value(page).unwrap_or_default())
        }
        NamespaceCommand::Drop(args) => {
            let namespace = args.namespace()?;
            catalog.drop_namespace(&namespace).await?;
            Ok(json!({"namespace": namespace, "dropped": true}))
        }
        NamespaceCommand::Exists(args) => {
            let namespace = args.namespace()?;
            let exists = catalog.namespace_exists(&namespace).await?;
            Ok(json!({"namespace": namespace, "exists": exists}))
        }
    }
}
