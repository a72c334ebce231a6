//! Catalog configuration: which pointer store and which warehouse, from URIs.
//!
//! | `--catalog` / `PARQDB_CATALOG`  | pointer store                                   |
//! |---------------------------------|-------------------------------------------------|
//! | (unset)                         | the warehouse's own store, under `_catalog/`    |
//! | `file:///abs/dir`               | [`LocalStore`] in that directory                |
//! | `memory://`                     | [`MemoryStore`] (process-local)                 |
//!
//! | `--warehouse` / `PARQDB_WAREHOUSE` | warehouse                                     |
//! |------------------------------------|-----------------------------------------------|
//! | (unset)                            | `file://$PWD/warehouse`                       |
//! | `file:///abs/dir`                  | a local directory (created if missing)        |
//! | `memory://name`                    | process-local, for tests                      |
//!
//! ```
//! use parqdb_catalog::config::CatalogConfig;
//!
//! let dir = tempfile::tempdir()?;
//! let config = CatalogConfig::new(Some(format!("file://{}", dir.path().display())), None);
//! let catalog = config.build()?;
//! assert!(catalog.store().describe().ends_with("/_catalog"));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::path::PathBuf;
use std::sync::Arc;

use url::Url;

use crate::catalog::Catalog;
use crate::error::{Error, ErrorKind, Result};
use crate::store::PointerStore;
use crate::store::local::LocalStore;
use crate::store::memory::MemoryStore;
use crate::warehouse::Warehouse;

/// The directory the catalog's own pointer records use inside a warehouse.
pub const CATALOG_DIR: &str = "_catalog";

/// Where the catalog keeps pointers and metadata.
#[derive(Debug, Clone, Default)]
pub struct CatalogConfig {
    /// The warehouse root URI (default `file://$PWD/warehouse`).
    pub warehouse: Option<String>,
    /// The pointer-store URI (default: the warehouse's own store).
    pub catalog: Option<String>,
}

impl CatalogConfig {
    /// A configuration from optional URIs.
    pub fn new(warehouse: Option<String>, catalog: Option<String>) -> Self {
        CatalogConfig { warehouse, catalog }
    }

    /// A configuration from `PARQDB_WAREHOUSE` and `PARQDB_CATALOG`.
    pub fn from_env() -> Self {
        let var = |name| std::env::var(name).ok().filter(|v: &String| !v.is_empty());
        CatalogConfig::new(var("PARQDB_WAREHOUSE"), var("PARQDB_CATALOG"))
    }

    /// The warehouse URI in effect.
    pub fn warehouse_uri(&self) -> Result<String> {
        match &self.warehouse {
            Some(uri) => Ok(uri.clone()),
            None => {
                let cwd = std::env::current_dir().map_err(|err| {
                    Error::with_source(ErrorKind::Configuration, "cannot read the working directory", err)
                })?;
                Ok(format!("file://{}", cwd.join("warehouse").display()))
            }
        }
    }

    /// Open the warehouse.
    pub fn open_warehouse(&self) -> Result<Warehouse> {
        let uri = self.warehouse_uri()?;
        let url = parse(&uri, "warehouse")?;
        match url.scheme() {
            "file" => Warehouse::local(&local_path(&url, &uri)?),
            "memory" => Warehouse::in_memory(&uri),
            other => Err(unsupported("warehouse", other, &uri)),
        }
    }

    /// Open the pointer store (for `warehouse` when it is the warehouse's own store).
    pub fn open_store(&self, warehouse: &Warehouse) -> Result<Arc<dyn PointerStore>> {
        let uri = match &self.catalog {
            Some(uri) => uri.clone(),
            None => format!("{}/{CATALOG_DIR}", warehouse.root()),
        };
        let url = parse(&uri, "catalog")?;
        match url.scheme() {
            "file" => Ok(Arc::new(LocalStore::new(local_path(&url, &uri)?))),
            "memory" => Ok(Arc::new(MemoryStore::new())),
            other => Err(unsupported("catalog", other, &uri)),
        }
    }

    /// Open the warehouse and the pointer store and build a catalog.
    pub fn build(&self) -> Result<Catalog> {
        let warehouse = self.open_warehouse()?;
        let store = self.open_store(&warehouse)?;
        Ok(Catalog::builder(store, warehouse).build())
    }
}

fn parse(uri: &str, what: &str) -> Result<Url> {
    Url::parse(uri).map_err(|err| {
        Error::new(
            ErrorKind::Configuration,
            format!("{what} URI `{uri}` is not an absolute URI: {err}"),
        )
    })
}

fn local_path(url: &Url, uri: &str) -> Result<PathBuf> {
    if url.host_str().is_some_and(|h| !h.is_empty() && h != "localhost") {
        return Err(Error::new(
            ErrorKind::Configuration,
            format!("`{uri}` names a remote host; use file:///absolute/path"),
        ));
    }
    url.to_file_path().map_err(|_| {
        Error::new(ErrorKind::Configuration, format!("`{uri}` is not an absolute file path"))
    })
}

fn unsupported(what: &str, scheme: &str, uri: &str) -> Error {
    Error::new(
        ErrorKind::Configuration,
        format!("{what} URI `{uri}`: the scheme `{scheme}` is not supported"),
    )
}
