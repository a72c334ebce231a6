//! Catalog configuration: which pointer store and which warehouse, from URIs (what
//! [`CatalogConfig`] documents).

use std::path::PathBuf;
use std::sync::Arc;

use url::Url;

use crate::catalog::{Catalog, IndexCatalog};
use crate::error::{Error, ErrorKind, Result};
#[cfg(feature = "remote")]
use crate::remote::LambdaCatalog;
use crate::store::PointerStore;
#[cfg(feature = "dynamodb")]
use crate::store::dynamodb::DynamoStore;
use crate::store::local::LocalStore;
use crate::store::memory::MemoryStore;
#[cfg(feature = "s3")]
use crate::store::s3::{S3Options, S3Store, amazon_s3_builder};
use crate::store::timeouts::StoreTimeouts;
use crate::warehouse::Warehouse;
use crate::warehouse::layout::CATALOG_DIR;

/// The scheme of remote catalog URIs (`lambda://PREFIX`), recognised in every build so
/// that a build without the `remote` feature names the missing feature.
const LAMBDA_SCHEME: &str = "lambda://";

/// Where the catalog keeps pointers and metadata.
///
/// | `--catalog` / `PARQDB_CATALOG`  | pointer store                                   |
/// |---------------------------------|-------------------------------------------------|
/// | (unset)                         | the warehouse's own store, under `_catalog/`    |
/// | `file:///abs/dir` (the CLI: also `/abs/dir`, `./dir`) | [`LocalStore`] in that directory |
/// | `memory://`                     | [`MemoryStore`] (process-local)                 |
/// | `s3://bucket/prefix`            | [`S3Store`] (S3, MinIO, other S3-compatible servers) |
/// | `dynamodb://TABLE`              | [`DynamoStore`] on that table                   |
/// | `lambda://PREFIX`               | no store: the deployed functions' alias `live`, `PREFIXload:live`, `PREFIXcommit:live`, ... (`?qualifier=` picks another) through [`LambdaCatalog`] ([`CatalogConfig::connect`] only) |
///
/// | `--warehouse` / `PARQDB_WAREHOUSE` | warehouse                                     |
/// |------------------------------------|-----------------------------------------------|
/// | (unset)                            | `file://$PWD/warehouse`                       |
/// | `file:///abs/dir` (the CLI: also `/abs/dir`, `./dir`) | a local directory (created if missing) |
/// | `memory://name`                    | process-local, for tests                      |
/// | `s3://bucket/prefix`               | an S3 bucket prefix                           |
///
/// A relative `file:` URI (`file:wh`) is refused: URL parsers read it from the root of the
/// file system.
///
/// S3 endpoints, region and credentials come from the standard `AWS_*` environment
/// (`AWS_ENDPOINT_URL`, `AWS_ALLOW_HTTP`, `AWS_REGION`, keys or the instance role), or from
/// [`CatalogConfig::s3`]; DynamoDB uses `aws-config`'s standard chain, with
/// `AWS_ENDPOINT_URL_DYNAMODB` / `AWS_ENDPOINT_URL` or [`CatalogConfig::dynamodb_endpoint`]
/// as endpoint override; Lambda likewise, with `AWS_ENDPOINT_URL_LAMBDA` /
/// `AWS_ENDPOINT_URL` or [`CatalogConfig::lambda_endpoint`].
///
/// [`CatalogConfig::with_store_timeouts`] bounds every request of the store clients (S3
/// and DynamoDB, pointers and warehouse alike) below a caller's budget; the Lambda
/// functions derive it from their timeout ([`StoreTimeouts`](crate::store::StoreTimeouts)).
///
/// [`CatalogConfig::build`] builds the embedded [`Catalog`] (direct store access);
/// [`CatalogConfig::connect`] builds whichever catalog the URI names — the embedded one,
/// or the remote [`LambdaCatalog`] for `lambda://` — as an `Arc<dyn IndexCatalog>`. The
/// warehouse is still needed next to a remote catalog to read and write metadata files.
///
/// ```
/// use parqdb_catalog::CatalogConfig;
///
/// let dir = tempfile::tempdir()?;
/// let config = CatalogConfig::new(Some(format!("file://{}", dir.path().display())), None);
/// # tokio::runtime::Runtime::new()?.block_on(async {
/// let catalog = config.build().await?;
/// assert!(catalog.store().describe().ends_with("/_catalog"));
/// # Ok::<(), parqdb_catalog::Error>(()) })?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Default)]
pub struct CatalogConfig {
    /// The warehouse root URI (default `file://$PWD/warehouse`; set by [`CatalogConfig::new`]).
    pub(crate) warehouse: Option<String>,
    /// The pointer-store URI (default: the warehouse's own store; set by
    /// [`CatalogConfig::new`]).
    pub(crate) catalog: Option<String>,
    /// S3 options on top of the `AWS_*` environment.
    #[cfg(feature = "s3")]
    pub s3: S3Options,
    /// DynamoDB endpoint override.
    pub dynamodb_endpoint: Option<String>,
    /// Lambda endpoint override (for `lambda://` catalogs).
    pub lambda_endpoint: Option<String>,
    /// Bounds on every S3 and DynamoDB request (default: the clients' own, which suit
    /// batch jobs rather than functions with a timeout). Explicit S3 settings in
    /// [`CatalogConfig::s3`] win over these. Set by [`CatalogConfig::with_store_timeouts`].
    pub(crate) store_timeouts: Option<StoreTimeouts>,
}

impl CatalogConfig {
    /// A configuration from optional URIs.
    pub fn new(warehouse: Option<String>, catalog: Option<String>) -> Self {
        CatalogConfig {
            warehouse,
            catalog,
            ..CatalogConfig::default()
        }
    }

    /// [`CatalogConfig::new`] from what a person types (the CLI): a plain path (`/data/wh`,
    /// `./wh`, `wh`) is read as the local directory it names, relative to the working
    /// directory. A deployment's configuration ([`CatalogConfig::from_env`]) takes URIs
    /// only: there a plain path is a mistake to report, not a directory to create.
    #[cfg(feature = "cli")]
    pub(crate) fn typed(warehouse: Option<String>, catalog: Option<String>) -> Self {
        CatalogConfig::new(
            warehouse.map(plain_path_as_uri),
            catalog.map(plain_path_as_uri),
        )
    }

    /// Refuse a local warehouse or pointer-store directory that does not exist, rather
    /// than create it: for the CLI's commands that only act on what is there (`load`,
    /// `list`, `commit`, `drop`, `gc`, …), where a missing directory is a mistyped path.
    #[cfg(feature = "cli")]
    pub(crate) fn require_existing_dirs(&self) -> Result<()> {
        let warehouse = self.warehouse_uri()?;
        for (what, uri, option) in [
            ("warehouse", Some(&warehouse), "--warehouse"),
            ("catalog", self.catalog.as_ref(), "--catalog"),
        ] {
            let Some(uri) = uri else { continue };
            let Ok(url) = parse(uri, what) else { continue };
            if url.scheme() != "file" {
                continue;
            }
            let dir = local_path(&url, uri)?;
            if !dir.exists() {
                return Err(Error::new(
                    ErrorKind::Configuration,
                    format!(
                        "the {what} directory {} does not exist: check `{option}` (`init`, `register` and `namespace create` create it)",
                        dir.display()
                    ),
                ));
            }
        }
        Ok(())
    }

    /// A configuration from `PARQDB_WAREHOUSE` and `PARQDB_CATALOG`.
    pub fn from_env() -> Self {
        let var = |name| std::env::var(name).ok().filter(|v: &String| !v.is_empty());
        CatalogConfig::new(var("PARQDB_WAREHOUSE"), var("PARQDB_CATALOG"))
    }

    /// Bound every store request by `timeouts` (see [`StoreTimeouts`](crate::store::StoreTimeouts)).
    pub fn with_store_timeouts(mut self, timeouts: StoreTimeouts) -> Self {
        self.store_timeouts = Some(timeouts);
        self
    }

    /// The S3 options in effect: [`CatalogConfig::s3`], completed by the store timeouts.
    #[cfg(feature = "s3")]
    pub(crate) fn s3_options(&self) -> S3Options {
        let mut options = self.s3.clone();
        if let Some(timeouts) = &self.store_timeouts {
            options.max_retries.get_or_insert(timeouts.max_retries);
            options
                .retry_timeout
                .get_or_insert(timeouts.call.saturating_sub(timeouts.attempt));
            for (key, value) in [
                ("timeout", timeouts.attempt),
                ("connect_timeout", timeouts.connect),
            ] {
                if !options.config.iter().any(|(set, _)| set == key) {
                    let value = format!("{}ms", value.as_millis());
                    options.config.push((key.to_owned(), value));
                }
            }
        }
        options
    }

    /// The warehouse URI in effect.
    pub fn warehouse_uri(&self) -> Result<String> {
        match &self.warehouse {
            Some(uri) => Ok(uri.clone()),
            None => {
                let cwd = std::env::current_dir().map_err(|err| {
                    Error::with_source(
                        ErrorKind::Configuration,
                        "cannot read the working directory",
                        err,
                    )
                })?;
                file_uri(&cwd.join("warehouse"), "the default warehouse")
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
            #[cfg(feature = "s3")]
            "s3" => {
                let (bucket, _) = bucket_and_prefix(&url, &uri)?;
                let builder = amazon_s3_builder(&bucket, &self.s3_options())?;
                let store = builder.clone().build().map_err(|err| {
                    Error::with_source(ErrorKind::Configuration, format!("warehouse `{uri}`"), err)
                })?;
                let lister = crate::warehouse::s3_key_lister(&builder, store.credentials().clone());
                let warehouse = Warehouse::new(&uri, Arc::new(store), Warehouse::root_key(&uri)?)?;
                Ok(match lister {
                    Some(lister) => warehouse.with_key_lister(lister),
                    None => warehouse,
                })
            }
            other => Err(unsupported("warehouse", other, &uri)),
        }
    }

    /// Open the pointer store (for `warehouse` when it is the warehouse's own store).
    pub(crate) async fn open_store(&self, warehouse: &Warehouse) -> Result<Arc<dyn PointerStore>> {
        let uri = match &self.catalog {
            Some(uri) => uri.clone(),
            None => format!("{}/{CATALOG_DIR}", warehouse.root()),
        };
        if uri.starts_with(LAMBDA_SCHEME) {
            return Err(Error::new(
                ErrorKind::Configuration,
                format!(
                    "catalog URI `{uri}` names the deployed Lambda functions, not a pointer store; \
                     this command needs direct store access (give it the deployment's store URI)"
                ),
            ));
        }
        let url = parse(&uri, "catalog")?;
        match url.scheme() {
            "file" => Ok(Arc::new(LocalStore::new(local_path(&url, &uri)?))),
            "memory" => Ok(Arc::new(MemoryStore::new())),
            #[cfg(feature = "s3")]
            "s3" => Ok(Arc::new(S3Store::from_uri(&uri, &self.s3_options())?)),
            #[cfg(feature = "dynamodb")]
            "dynamodb" => {
                let table = url.host_str().unwrap_or_default();
                if table.is_empty() || !matches!(url.path(), "" | "/") {
                    return Err(Error::new(
                        ErrorKind::Configuration,
                        format!("catalog URI `{uri}` must be dynamodb://TABLE"),
                    ));
                }
                let endpoint = self.dynamodb_endpoint.as_deref();
                let timeouts = self.store_timeouts.as_ref();
                Ok(Arc::new(
                    DynamoStore::from_env_with(table, endpoint, timeouts).await?,
                ))
            }
            other => Err(unsupported("catalog", other, &uri)),
        }
    }

    /// Create what a local deployment may lack: the DynamoDB table of a `dynamodb://`
    /// catalog (on-demand billing, the documented key schema) and the bucket of an `s3://`
    /// warehouse. Production tables and buckets come from `infra/`; existing ones are left
    /// as they are. Returns what was checked or created.
    #[cfg(feature = "admin")]
    pub(crate) async fn create_missing_resources(&self) -> Result<Vec<String>> {
        let mut done = Vec::new();
        let warehouse = self.warehouse_uri()?;
        let url = parse(&warehouse, "warehouse")?;
        if url.scheme() == "s3" {
            let (bucket, _) = bucket_and_prefix(&url, &warehouse)?;
            crate::store::s3::create_bucket(&bucket, &self.s3).await?;
            done.push(format!("bucket s3://{bucket}"));
        }
        if let Some(catalog) = &self.catalog {
            let url = parse(catalog, "catalog")?;
            if url.scheme() == "dynamodb" {
                let table = url.host_str().unwrap_or_default();
                let store = DynamoStore::from_env(table, self.dynamodb_endpoint.as_deref()).await?;
                store.create_table().await?;
                done.push(format!("table dynamodb://{table}"));
            }
        }
        Ok(done)
    }

    /// Open the warehouse and the pointer store and build a catalog. A pointer store placed
    /// inside a warehouse's `metadata/`, `indexes/` or `_gc/` (where a garbage collector
    /// would take its records for garbage) is refused.
    pub async fn build(&self) -> Result<Catalog> {
        let warehouse = self.open_warehouse()?;
        self.check_store_placement(&warehouse)?;
        let store = self.open_store(&warehouse).await?;
        Ok(Catalog::builder(store, warehouse).build())
    }

    /// Refuse a pointer store inside its own warehouse's managed prefixes or `_gc/`, or a
    /// local one inside any claimed warehouse's.
    fn check_store_placement(&self, warehouse: &Warehouse) -> Result<()> {
        let Some(uri) = &self.catalog else {
            return Ok(()); // the default `_catalog/` is outside the managed prefixes
        };
        let Ok(url) = Url::parse(uri) else {
            return Ok(()); // open_store reports it
        };
        let refuse = |inside: &str| {
            Err(Error::new(
                ErrorKind::Configuration,
                format!(
                    "the pointer store `{uri}` lies inside {inside}, whose garbage collector would delete its records; place it outside `metadata/`, `indexes/` and `_gc/`"
                ),
            ))
        };
        let reserved = |segment: &str| {
            crate::warehouse::MANAGED_PREFIXES.contains(&segment)
                || segment == crate::warehouse::GC_DIR
        };
        match url.scheme() {
            "file" => {
                let Ok(dir) = local_path(&url, uri) else {
                    return Ok(());
                };
                let dir = crate::warehouse::resolve_existing(&dir);
                if let Some(root) = warehouse.local_dir()
                    && let Ok(rest) = dir.strip_prefix(root)
                    && rest
                        .components()
                        .next()
                        .is_some_and(|first| reserved(&first.as_os_str().to_string_lossy()))
                {
                    return refuse(&format!("its warehouse `{}`", warehouse.root()));
                }
                let mut child = dir.file_name().map(|n| n.to_string_lossy().into_owned());
                for ancestor in dir.ancestors().skip(1) {
                    if child.as_deref().is_some_and(reserved)
                        && ancestor.join(crate::warehouse::OWNER_MARKER).exists()
                    {
                        return refuse(&format!("the warehouse at `{}`", ancestor.display()));
                    }
                    child = ancestor
                        .file_name()
                        .map(|n| n.to_string_lossy().into_owned());
                }
                Ok(())
            }
            "s3" => {
                let warehouse_uri = self.warehouse_uri()?;
                let Ok(warehouse_url) = Url::parse(&warehouse_uri) else {
                    return Ok(());
                };
                if warehouse_url.scheme() != "s3" || warehouse_url.host_str() != url.host_str() {
                    return Ok(());
                }
                let root = Warehouse::root_key(&warehouse_uri)?;
                let store = Warehouse::root_key(uri)?;
                let first = store
                    .prefix_match(&root)
                    .and_then(|mut rest| rest.next().map(|part| part.as_ref().to_owned()));
                if first.as_deref().is_some_and(reserved) {
                    refuse(&format!("its warehouse `{warehouse_uri}`"))
                } else {
                    Ok(())
                }
            }
            _ => Ok(()),
        }
    }

    /// Whether the catalog URI names a remote catalog (`lambda://`).
    pub(crate) fn is_remote(&self) -> bool {
        self.catalog
            .as_deref()
            .is_some_and(|uri| uri.starts_with(LAMBDA_SCHEME))
    }

    /// The catalog the URI names: the remote [`LambdaCatalog`] for `lambda://PREFIX`,
    /// else the embedded catalog of [`CatalogConfig::build`].
    pub async fn connect(&self) -> Result<Arc<dyn IndexCatalog>> {
        match &self.catalog {
            #[cfg(feature = "remote")]
            Some(uri) if self.is_remote() => Ok(Arc::new(
                LambdaCatalog::from_uri(uri, self.lambda_endpoint.as_deref()).await?,
            )),
            #[cfg(not(feature = "remote"))]
            Some(uri) if self.is_remote() => Err(unsupported("catalog", "lambda", uri)),
            _ => Ok(Arc::new(self.build().await?)),
        }
    }
}

/// A URI as given; a plain path (no scheme) as the `file:` URI of the directory it names,
/// relative to the working directory. A path that cannot be made absolute stays as given,
/// for [`parse`] to report.
#[cfg(feature = "cli")]
fn plain_path_as_uri(given: String) -> String {
    if given.is_empty() || Url::parse(&given) != Err(url::ParseError::RelativeUrlWithoutBase) {
        return given;
    }
    std::path::absolute(&given)
        .ok()
        .and_then(|path| Url::from_file_path(path).ok())
        .map_or(given, String::from)
}

/// The `file:` URI of an absolute path, percent-encoded (a `#`, `?` or `%` in a directory
/// name is part of the path, not a fragment, a query or an escape).
fn file_uri(path: &std::path::Path, what: &str) -> Result<String> {
    Url::from_file_path(path).map(String::from).map_err(|()| {
        Error::new(
            ErrorKind::Configuration,
            format!("{what} `{}` is not an absolute path", path.display()),
        )
    })
}

/// Parse a URI, refusing a `file:` URI that does not start its path with `/` (`file:wh`,
/// `file:./wh`): URL parsers read it as `/wh`, at the root of the file system, where the
/// writer of a relative path never meant it.
fn parse(uri: &str, what: &str) -> Result<Url> {
    let url = Url::parse(uri).map_err(|err| {
        Error::new(
            ErrorKind::Configuration,
            format!("{what} URI `{uri}` is not an absolute URI: {err}"),
        )
    })?;
    let after_scheme = uri.trim_start().split_once(':').map(|(_, rest)| rest);
    if url.scheme() == "file" && !after_scheme.is_some_and(|rest| rest.starts_with('/')) {
        return Err(Error::new(
            ErrorKind::Configuration,
            format!(
                "{what} URI `{uri}` is a relative `file:` URI, which URL parsers read from the root of the file system; give `file:///absolute/path` or a plain path (`./dir`, `/abs/dir`)"
            ),
        ));
    }
    Ok(url)
}

#[cfg(feature = "s3")]
fn bucket_and_prefix(url: &Url, uri: &str) -> Result<(String, String)> {
    let bucket = url.host_str().unwrap_or_default();
    if bucket.is_empty() {
        return Err(Error::new(
            ErrorKind::Configuration,
            format!("`{uri}` names no bucket"),
        ));
    }
    Ok((bucket.to_owned(), url.path().trim_matches('/').to_owned()))
}

fn local_path(url: &Url, uri: &str) -> Result<PathBuf> {
    if url
        .host_str()
        .is_some_and(|h| !h.is_empty() && h != "localhost")
    {
        return Err(Error::new(
            ErrorKind::Configuration,
            format!("`{uri}` names a remote host; use file:///absolute/path"),
        ));
    }
    url.to_file_path().map_err(|_| {
        Error::new(
            ErrorKind::Configuration,
            format!("`{uri}` is not an absolute file path"),
        )
    })
}

fn unsupported(what: &str, scheme: &str, uri: &str) -> Error {
    // Schemes this crate knows but this build left out (see the cargo features).
    let feature = match scheme {
        "s3" if cfg!(not(feature = "s3")) => Some("s3"),
        "dynamodb" if cfg!(not(feature = "dynamodb")) => Some("dynamodb"),
        "lambda" if cfg!(not(feature = "remote")) => Some("remote"),
        _ => None,
    };
    let message = match feature {
        Some(feature) => format!(
            "{what} URI `{uri}`: this build has no `{scheme}` support (cargo feature `{feature}`)"
        ),
        None => format!("{what} URI `{uri}`: the scheme `{scheme}` is not supported"),
    };
    Error::new(ErrorKind::Configuration, message)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg(feature = "cli")]
    fn a_plain_path_names_the_local_directory_from_the_working_directory() {
        let cwd = std::env::current_dir().expect("cwd");
        let config = CatalogConfig::typed(Some("wh".to_owned()), Some("./pointers".to_owned()));
        let warehouse = Url::parse(&config.warehouse_uri().expect("uri")).expect("url");
        assert_eq!(warehouse.to_file_path(), Ok(cwd.join("wh")));
        let catalog = Url::parse(config.catalog.as_deref().expect("catalog")).expect("url");
        assert_eq!(catalog.to_file_path(), Ok(cwd.join("./pointers")));
        let absolute = CatalogConfig::typed(Some("/data/my wh#1".to_owned()), None);
        let url = Url::parse(&absolute.warehouse_uri().expect("uri")).expect("url");
        assert_eq!(url.to_file_path(), Ok(PathBuf::from("/data/my wh#1")));
        // URIs stay as they are.
        for uri in ["s3://b/wh", "memory://x", "file:///abs/wh", "dynamodb://t"] {
            let config = CatalogConfig::typed(Some(uri.to_owned()), Some(uri.to_owned()));
            assert_eq!(config.warehouse_uri().expect("uri"), uri);
            assert_eq!(config.catalog.as_deref(), Some(uri));
        }
    }

    #[test]
    fn a_relative_file_uri_is_refused_not_read_from_the_root() {
        for uri in ["file:wh", "file:./wh", "FILE:wh"] {
            let err = CatalogConfig::new(Some(uri.to_owned()), None)
                .open_warehouse()
                .expect_err(uri);
            assert_eq!(err.kind(), ErrorKind::Configuration, "{uri}");
            assert!(
                err.message().contains("relative `file:` URI"),
                "{uri}: {err}"
            );
        }
        for uri in ["file:/abs/wh", "file:///abs/wh", "file://localhost/abs/wh"] {
            assert!(parse(uri, "warehouse").is_ok(), "{uri}");
        }
    }

    #[test]
    fn the_default_warehouse_keeps_special_characters_in_its_path() {
        let dir = std::env::current_dir().expect("cwd").join("a#b?c%d");
        let uri = file_uri(&dir, "the default warehouse").expect("uri");
        assert_eq!(Url::parse(&uri).expect("url").to_file_path(), Ok(dir));
    }
}
