//! The warehouse: the one object-store root that holds metadata and index files.
//!
//! A catalog is configured with one warehouse root URI (`file:///data/wh`,
//! `s3://bucket/wh`, `memory://name`). Every metadata location must be an absolute URI
//! under that root: same scheme and authority, and a path under the root's path on a
//! segment boundary, so `s3://b/wh` never accepts `s3://b/wh2/...`. Anything else is
//! [`ErrorKind::InvalidIndexMetadata`]. Objects are addressed by their **names** (see
//! [`names`](self#names)): the raw key below the root, the same spelling for a location in
//! metadata, a listed object and a deletion.
//!
//! Layout (the garbage collector's managed prefixes are `metadata/` and `indexes/`):
//!
//! ```text
//! <root>/_catalog-owner.json  the ownership marker: which catalog writes and collects here
//! <root>/_catalog/        pointer records of the embedded object-store catalog
//! <root>/_gc/             the garbage collector's ledger, journals and lease
//! <root>/metadata/<index-uuid>/<n>-<uuid>.metadata.json   immutable metadata files
//! <root>/indexes/<index-uuid>/<snapshot-id>/<role>/       immutable index tables
//! ```
//!
//! # Names
//! See the `names` submodule: a name is the raw `/`-joined key below the root
//! ([`object_name`]); a location is the root URI plus the name's segments, each
//! percent-encoded once ([`Warehouse::absolute`]). [`Warehouse::relative`] accepts any
//! spelling of a location inside the root and returns its name, refusing `.`/`..` and
//! empty segments and escaped `/`.

mod local;
mod names;
mod range;

use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;
use futures::StreamExt;
use futures::stream::BoxStream;
use object_store::path::Path;
use object_store::{ObjectMeta, ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload};
use url::Url;

pub use names::object_name;
pub(crate) use names::{aliases, is_within};
pub use range::{ListRange, Positioned};

use crate::error::{Error, ErrorKind, Result};
use crate::metadata::MAX_METADATA_BYTES;

/// The ownership marker's name under the warehouse root.
pub const OWNER_MARKER: &str = "_catalog-owner.json";
/// Where metadata files live: register and commit publish only files below it.
pub const METADATA_DIR: &str = "metadata";
/// Where index tables live.
pub const INDEXES_DIR: &str = "indexes";
/// The managed prefixes: the only places the garbage collector lists and deletes data.
pub const MANAGED_PREFIXES: [&str; 2] = [METADATA_DIR, INDEXES_DIR];
/// The garbage collector's own directory (ledger, journals, lease).
pub const GC_DIR: &str = "_gc";

/// One object found by a listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    /// Its name.
    pub name: String,
    /// Its size in bytes.
    pub size: u64,
    /// Its last-modified time (Unix epoch milliseconds).
    pub last_modified_ms: i64,
}

/// What a listing yields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListItem {
    /// An object.
    Object(Listed),
    /// Something that is not an object the collector may consider: a symbolic link, a file
    /// whose name is not UTF-8, ... (local warehouses only).
    Skipped {
        /// What was skipped.
        name: String,
        /// Why.
        reason: String,
    },
}

/// What became of one object a deletion was asked for.
#[derive(Debug)]
pub enum Deletion {
    /// Deleted now.
    Deleted,
    /// Already gone.
    Missing,
    /// Not deleted because deleting it could reach outside the warehouse (a symbolic
    /// link on the way, not a regular file).
    Refused(String),
    /// The store failed.
    Failed(Error),
}

/// The warehouse root and the object store that holds it.
#[derive(Debug, Clone)]
pub struct Warehouse {
    root: Url,
    /// The root path's decoded segments.
    root_segments: Vec<String>,
    prefix: Path,
    store: Arc<dyn ObjectStore>,
    /// The directory holding the objects, for warehouses on the local file system.
    local: Option<Arc<PathBuf>>,
}

impl Warehouse {
    /// A warehouse rooted at `root` (an absolute URI) whose objects live in `store` under
    /// `prefix` (the raw key of the root).
    pub fn new(root: &str, store: Arc<dyn ObjectStore>, prefix: Path) -> Result<Warehouse> {
        let (root, root_segments) = parse_root(root)?;
        Ok(Warehouse {
            root,
            root_segments,
            prefix,
            store,
            local: None,
        })
    }

    /// A process-local warehouse (object_store's `InMemory`), for tests and examples.
    pub fn in_memory(root: &str) -> Result<Warehouse> {
        Warehouse::new(
            root,
            Arc::new(object_store::memory::InMemory::new()),
            Warehouse::root_key(root)?,
        )
    }

    /// The object-store key of a root URI's path, decoded (`s3://b/my%20wh` → `my wh`):
    /// the prefix of a warehouse whose store is the whole bucket.
    pub fn root_key(root: &str) -> Result<Path> {
        let (_, segments) = parse_root(root)?;
        Path::parse(segments.join("/")).map_err(|err| {
            Error::with_source(
                ErrorKind::Configuration,
                format!("warehouse `{root}` has an invalid path"),
                err,
            )
        })
    }

    /// A warehouse in a local directory (created if missing).
    pub fn local(dir: &std::path::Path) -> Result<Warehouse> {
        let dir = create_local_dir(dir)?;
        let root = Url::from_directory_path(&dir).map_err(|_| {
            Error::new(
                ErrorKind::Configuration,
                format!("{} is not an absolute path", dir.display()),
            )
        })?;
        let store = object_store::local::LocalFileSystem::new_with_prefix(&dir).map_err(|err| {
            Error::with_source(
                ErrorKind::Configuration,
                format!("cannot open {}", dir.display()),
                err,
            )
        })?;
        let mut warehouse = Warehouse::new(root.as_str(), Arc::new(store), Path::default())?;
        warehouse.local = Some(Arc::new(dir));
        Ok(warehouse)
    }

    /// Declare that this warehouse's objects are the files below the local directory
    /// `dir` (its prefix being the root of `dir`), as for [`Warehouse::local`] over a
    /// wrapped store: listings then never follow symbolic links, and nothing is deleted
    /// through a link or outside `dir`.
    pub fn with_local_dir(mut self, dir: &std::path::Path) -> Result<Warehouse> {
        let dir = create_local_dir(dir)?;
        self.local = Some(Arc::new(dir));
        Ok(self)
    }

    /// The root URI, without a trailing `/`.
    pub fn root(&self) -> &str {
        self.root.as_str().trim_end_matches('/')
    }

    /// The object store holding the warehouse.
    pub fn object_store(&self) -> &Arc<dyn ObjectStore> {
        &self.store
    }

    /// The object-store path of the warehouse root.
    pub fn prefix(&self) -> &Path {
        &self.prefix
    }

    /// The local directory of a warehouse on the local file system.
    pub fn local_dir(&self) -> Option<&std::path::Path> {
        self.local.as_deref().map(PathBuf::as_path)
    }

    /// The canonical absolute URI of the object `name` (a warehouse-relative location; a
    /// trailing `/` is dropped): the root URI plus the name's segments, each
    /// percent-encoded once.
    pub fn absolute(&self, name: &str) -> String {
        let mut url = self.root.clone();
        if let Ok(mut segments) = url.path_segments_mut() {
            segments
                .pop_if_empty()
                .extend(name.split('/').filter(|s| !s.is_empty()));
        }
        url.into()
    }

    /// The canonical form of a location inside the warehouse (see [`Warehouse::relative`]).
    pub fn canonical_location(&self, location: &str) -> Result<String> {
        Ok(self.absolute(&self.relative(location)?))
    }

    /// The object-store path of the object `name` (a warehouse-relative location), or
    /// [`ErrorKind::InvalidIndexMetadata`] if it is no valid name.
    pub fn path(&self, name: &str) -> Result<Path> {
        let name =
            object_name(name).map_err(|why| Error::new(ErrorKind::InvalidIndexMetadata, why))?;
        if self.local.is_some() && local::is_staging_name(&name) {
            return Err(Error::new(
                ErrorKind::InvalidIndexMetadata,
                format!(
                    "`{name}` cannot be addressed on a local warehouse: object_store keeps its multipart staging files under names ending in `#<digits>`"
                ),
            ));
        }
        Ok(self.key(&name))
    }

    /// The path of a name already known to be valid.
    fn key(&self, name: &str) -> Path {
        let prefix = self.prefix.as_ref();
        let joined = if prefix.is_empty() {
            name.to_owned()
        } else {
            format!("{prefix}/{name}")
        };
        // A valid name below a valid prefix always parses.
        Path::parse(&joined).unwrap_or_else(|_| Path::from_iter(joined.split('/')))
    }

    /// The name of an absolute location, or [`ErrorKind::InvalidIndexMetadata`] if it is
    /// not inside the root. Any spelling of the URI is accepted (escaped or not, any
    /// case of escapes); `.`, `..` and empty segments, escaped `/`, queries, fragments and
    /// credentials are refused.
    pub fn relative(&self, location: &str) -> Result<String> {
        let outside = |why: &str| {
            Error::new(
                ErrorKind::InvalidIndexMetadata,
                format!(
                    "metadata location `{location}` is not inside the warehouse `{}`: {why}",
                    self.root()
                ),
            )
        };
        let url = Url::parse(location).map_err(|_| outside("not an absolute URI"))?;
        if url.scheme() != self.root.scheme()
            || url.host_str() != self.root.host_str()
            || url.port() != self.root.port()
        {
            return Err(outside("another scheme or authority"));
        }
        if url.query().is_some()
            || url.fragment().is_some()
            || !url.username().is_empty()
            || url.password().is_some()
        {
            return Err(outside("query, fragment or credentials are not allowed"));
        }
        // The path as written: `url` resolves `.`/`..` (also escaped ones), so the
        // segments are checked before it could.
        let written = written_path(location).ok_or_else(|| outside("no path"))?;
        if written.contains('\\') {
            return Err(outside(
                "a raw `\\` is ambiguous in a URI path; escape it as %5C",
            ));
        }
        let mut segments = written.split('/').skip(1);
        for root_segment in &self.root_segments {
            match segments.next().map(names::decode_segment) {
                Some(Ok(segment)) if segment == *root_segment => {}
                _ => return Err(outside("not under the root path")),
            }
        }
        let rest: Vec<String> = segments
            .map(names::decode_segment)
            .collect::<std::result::Result<_, _>>()
            .map_err(|why| outside(&why))?;
        if rest.is_empty() {
            return Err(outside("it names the root itself"));
        }
        Ok(rest.join("/"))
    }

    /// Read a metadata file by absolute location: [`ErrorKind::InvalidIndexMetadata`] if
    /// it is outside the warehouse, missing or too large.
    pub async fn read_metadata(&self, location: &str) -> Result<Bytes> {
        let name = self.relative(location)?;
        match self.get(&name, MAX_METADATA_BYTES as u64).await? {
            Fetched::Object(bytes, _) => Ok(bytes),
            Fetched::Missing => Err(Error::new(
                ErrorKind::InvalidIndexMetadata,
                format!("metadata file `{location}` does not exist"),
            )),
            Fetched::TooLarge(size) => Err(Error::new(
                ErrorKind::InvalidIndexMetadata,
                format!(
                    "metadata file `{location}` has {size} bytes, more than the limit of {MAX_METADATA_BYTES}"
                ),
            )),
        }
    }

    /// Write a new immutable object at the warehouse-relative location `name` with
    /// create-if-absent, and return its absolute location.
    pub async fn write_new(&self, name: &str, bytes: Bytes) -> Result<String> {
        let path = self.path(name)?;
        let location = self.absolute(name);
        match self.put_if_absent_at(&path, bytes).await {
            Ok(true) => Ok(location),
            Ok(false) => Err(Error::new(
                ErrorKind::AlreadyExists,
                format!("`{location}` already exists; metadata files are immutable"),
            )),
            // A create cannot miss its key: the bucket (or root) is missing.
            Err(err @ object_store::Error::NotFound { .. }) => Err(Error::with_source(
                ErrorKind::StoreRefused,
                format!("writing `{location}` failed: the warehouse's bucket or root is missing"),
                err,
            )),
            Err(err) => Err(unavailable(&location, err)),
        }
    }

    /// Read the object `name` unless it is larger than `max_bytes` (one GET: the size is
    /// checked from the response head before the body is read).
    pub async fn get(&self, name: &str, max_bytes: u64) -> Result<Fetched> {
        let path = self.path(name)?;
        let result = match self.store.get(&path).await {
            Ok(result) => result,
            Err(object_store::Error::NotFound { .. }) => return Ok(Fetched::Missing),
            Err(err) => return Err(unavailable(name, err)),
        };
        if result.meta.size > max_bytes {
            return Ok(Fetched::TooLarge(result.meta.size));
        }
        let listed = self.listed(&result.meta, name);
        match result.bytes().await {
            Ok(bytes) => Ok(Fetched::Object(bytes, listed)),
            Err(object_store::Error::NotFound { .. }) => Ok(Fetched::Missing),
            Err(err) => Err(unavailable(name, err)),
        }
    }

    /// The object `name`'s size and time, if it exists.
    pub async fn head(&self, name: &str) -> Result<Option<Listed>> {
        let path = self.path(name)?;
        match self.store.head(&path).await {
            Ok(meta) => Ok(Some(self.listed(&meta, name))),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(err) => Err(unavailable(name, err)),
        }
    }

    /// Create the object `name` unless it exists; `false` if it did.
    pub async fn put_if_absent(&self, name: &str, bytes: Bytes) -> Result<bool> {
        let path = self.path(name)?;
        self.put_if_absent_at(&path, bytes)
            .await
            .map_err(|err| unavailable(name, err))
    }

    /// Replace the object `name` unconditionally. Only for what an operator does
    /// deliberately (re-homing the ownership marker); data objects are immutable.
    pub(crate) async fn overwrite(&self, name: &str, bytes: Bytes) -> Result<()> {
        let path = self.path(name)?;
        self.store
            .put(&path, PutPayload::from_bytes(bytes))
            .await
            .map(|_| ())
            .map_err(|err| unavailable(name, err))
    }

    async fn put_if_absent_at(&self, path: &Path, bytes: Bytes) -> object_store::Result<bool> {
        let options = PutOptions {
            mode: PutMode::Create,
            ..PutOptions::default()
        };
        match self
            .store
            .put_opts(path, PutPayload::from_bytes(bytes), options)
            .await
        {
            Ok(_) => Ok(true),
            Err(object_store::Error::AlreadyExists { .. }) => Ok(false),
            Err(err) => Err(err),
        }
    }

    /// Every object below the name `prefix`, recursively. On the local file system
    /// symbolic links are never followed (they are reported as [`ListItem::Skipped`]).
    pub fn list(&self, prefix: &str) -> BoxStream<'static, Result<ListItem>> {
        if let Some(dir) = &self.local {
            return local::list(dir.as_ref().clone(), prefix.to_owned());
        }
        let this = self.clone();
        let what = prefix.to_owned();
        self.store
            .list(Some(&self.key(prefix)))
            .map(move |meta| match meta {
                Ok(meta) => Ok(this.item_of(&meta)),
                Err(err) => Err(unavailable(&what, err)),
            })
            .boxed()
    }

    /// The listing entry of an object the store listed.
    fn item_of(&self, meta: &ObjectMeta) -> ListItem {
        match self.name_of(&meta.location) {
            Some(name) => ListItem::Object(self.listed(meta, &name)),
            None => ListItem::Skipped {
                name: meta.location.to_string(),
                reason: "not below the warehouse root".to_owned(),
            },
        }
    }

    /// The entries directly in the directory `dir`: its objects (as [`Warehouse::list`]
    /// reports them) and the names of its subdirectories, sorted. On the local file
    /// system, as with `list`, no symbolic link is followed.
    pub async fn list_children(&self, dir: &str) -> Result<(Vec<ListItem>, Vec<String>)> {
        if let Some(root) = &self.local {
            let (root, dir) = (root.as_ref().clone(), dir.to_owned());
            return tokio::task::spawn_blocking(move || local::children(&root, &dir))
                .await
                .map_err(|err| {
                    Error::new(
                        ErrorKind::StoreUnavailable,
                        format!("listing the warehouse failed: {err}"),
                    )
                })?;
        }
        let listed = self
            .store
            .list_with_delimiter(Some(&self.key(dir)))
            .await
            .map_err(|err| unavailable(dir, err))?;
        let items = listed
            .objects
            .iter()
            .map(|meta| self.item_of(meta))
            .collect();
        let mut dirs: Vec<String> = listed
            .common_prefixes
            .iter()
            .filter_map(|prefix| self.name_of(prefix))
            .collect();
        dirs.sort();
        Ok((items, dirs))
    }

    /// The objects directly in the directory `dir` (not below it).
    pub async fn list_files(&self, dir: &str) -> Result<Vec<Listed>> {
        let listed = self
            .store
            .list_with_delimiter(Some(&self.key(dir)))
            .await
            .map_err(|err| unavailable(dir, err))?;
        Ok(listed
            .objects
            .iter()
            .filter_map(|meta| {
                let name = self.name_of(&meta.location)?;
                Some(self.listed(meta, &name))
            })
            .collect())
    }

    /// Delete objects by name. On the local file system an object is only deleted if no
    /// component of its path below the root is a symbolic link or on another file system
    /// and it is a regular file, checked right before that object's deletion.
    pub async fn delete(&self, names: Vec<String>) -> Vec<(String, Deletion)> {
        let mut outcomes = Vec::with_capacity(names.len());
        let mut paths = Vec::with_capacity(names.len());
        for name in names {
            let path = match self.path(&name) {
                Ok(path) => path,
                Err(err) => {
                    outcomes.push((name, Deletion::Refused(err.message().to_owned())));
                    continue;
                }
            };
            match &self.local {
                Some(dir) => {
                    let outcome = self.delete_local(dir, &name, &path).await;
                    outcomes.push((name, outcome));
                }
                None => paths.push((name, path)),
            }
        }
        if paths.is_empty() {
            return outcomes;
        }
        let requested: Vec<object_store::Result<Path>> =
            paths.iter().map(|(_, path)| Ok(path.clone())).collect();
        let results: Vec<object_store::Result<Path>> = self
            .store
            .delete_stream(futures::stream::iter(requested).boxed())
            .collect()
            .await;
        let mut done = std::collections::HashSet::new();
        let mut failure: Option<object_store::Error> = None;
        for result in results {
            match result {
                Ok(path) => {
                    done.insert(path);
                }
                Err(object_store::Error::NotFound { path, .. }) => {
                    done.insert(Path::parse(&path).unwrap_or_default());
                }
                Err(err) => {
                    failure.get_or_insert(err);
                }
            }
        }
        for (name, path) in paths {
            if done.contains(&path) {
                outcomes.push((name, Deletion::Deleted));
                continue;
            }
            // Not confirmed: gone means deleted (by us or an earlier attempt).
            let outcome = match self.store.head(&path).await {
                Err(object_store::Error::NotFound { .. }) => Deletion::Deleted,
                _ => Deletion::Failed(match &failure {
                    Some(err) => Error::new(
                        ErrorKind::StoreUnavailable,
                        format!("deleting `{name}` failed: {err}"),
                    ),
                    None => Error::new(
                        ErrorKind::StoreUnavailable,
                        format!("deleting `{name}` was not confirmed"),
                    ),
                }),
            };
            outcomes.push((name, outcome));
        }
        outcomes
    }

    /// Refuse to publish the object `name` if, on a local warehouse, its path below the
    /// root passes through a symbolic link: the collector never follows links, so it
    /// could not see the file to keep what the file names ([`ErrorKind::InvalidIndexMetadata`]).
    pub async fn refuse_links(&self, name: &str) -> Result<()> {
        let Some(dir) = &self.local else {
            return Ok(());
        };
        let (dir, checked) = (dir.as_ref().clone(), name.to_owned());
        let linked = tokio::task::spawn_blocking(move || local::linked(&dir, &checked))
            .await
            .map_err(|err| {
                Error::with_source(
                    ErrorKind::StoreUnavailable,
                    "checking a location failed",
                    err,
                )
            })?;
        match linked {
            None => Ok(()),
            Some(why) => Err(Error::new(
                ErrorKind::InvalidIndexMetadata,
                format!(
                    "`{}` cannot be published: {why}; the garbage collector never follows links, so it could not keep what the file names. Place the file itself in the warehouse",
                    self.absolute(name)
                ),
            )),
        }
    }

    /// Check one local object and delete it right away (the check and the deletion of a
    /// file are adjacent, not a batch apart).
    async fn delete_local(&self, dir: &Arc<PathBuf>, name: &str, path: &Path) -> Deletion {
        let (dir, checked) = (dir.clone(), name.to_owned());
        match tokio::task::spawn_blocking(move || local::deletable(&dir, &checked)).await {
            Ok(Ok(Some(()))) => {}
            Ok(Ok(None)) => return Deletion::Missing,
            Ok(Err(why)) => return Deletion::Refused(why),
            Err(err) => {
                return Deletion::Failed(Error::with_source(
                    ErrorKind::StoreUnavailable,
                    "checking a deletion failed",
                    err,
                ));
            }
        }
        match self.store.delete(path).await {
            Ok(()) => Deletion::Deleted,
            Err(object_store::Error::NotFound { .. }) => Deletion::Missing,
            Err(err) => Deletion::Failed(unavailable(name, err)),
        }
    }

    /// The warehouse root this one is nested in, if any: an ancestor directory holding
    /// an ownership marker whose `metadata/`, `indexes/` or `_gc/` contains this root.
    /// Such a warehouse would have its objects collected by the outer one.
    pub async fn enclosing_owner(&self) -> Result<Option<String>> {
        let nested_under = |child: &str| MANAGED_PREFIXES.contains(&child) || child == GC_DIR;
        if let Some(dir) = &self.local {
            let dir = dir.as_ref().clone();
            return tokio::task::spawn_blocking(move || {
                let mut child = dir.file_name().map(|n| n.to_string_lossy().into_owned());
                for ancestor in dir.ancestors().skip(1) {
                    if child.as_deref().is_some_and(nested_under)
                        && ancestor.join(OWNER_MARKER).exists()
                    {
                        return Some(ancestor.display().to_string());
                    }
                    child = ancestor
                        .file_name()
                        .map(|n| n.to_string_lossy().into_owned());
                }
                None
            })
            .await
            .map_err(|err| {
                Error::with_source(
                    ErrorKind::StoreUnavailable,
                    "checking the layout failed",
                    err,
                )
            });
        }
        let parts: Vec<String> = self
            .prefix
            .parts()
            .map(|part| part.as_ref().to_owned())
            .collect();
        for at in 0..parts.len() {
            if !nested_under(&parts[at]) {
                continue;
            }
            let ancestor = parts[..at].join("/");
            let marker = if ancestor.is_empty() {
                OWNER_MARKER.to_owned()
            } else {
                format!("{ancestor}/{OWNER_MARKER}")
            };
            let marker = Path::parse(&marker).unwrap_or_default();
            match self.store.head(&marker).await {
                Ok(_) => return Ok(Some(format!("`{ancestor}` of the same store"))),
                Err(object_store::Error::NotFound { .. }) => {}
                Err(err) => return Err(unavailable(OWNER_MARKER, err)),
            }
        }
        Ok(None)
    }

    fn name_of(&self, path: &Path) -> Option<String> {
        let parts = path.prefix_match(&self.prefix)?;
        let joined = parts
            .map(|part| part.as_ref().to_owned())
            .collect::<Vec<_>>()
            .join("/");
        (!joined.is_empty()).then_some(joined)
    }

    fn listed(&self, meta: &ObjectMeta, name: &str) -> Listed {
        Listed {
            name: name.to_owned(),
            size: meta.size,
            last_modified_ms: meta.last_modified.timestamp_millis(),
        }
    }
}

/// What [`Warehouse::get`] found.
#[derive(Debug)]
pub enum Fetched {
    /// The object's bytes and listing entry.
    Object(Bytes, Listed),
    /// It is larger than the limit (its size).
    TooLarge(u64),
    /// It does not exist.
    Missing,
}

/// The part of `location` after `scheme://authority`, before any query or fragment.
fn written_path(location: &str) -> Option<&str> {
    let (_, rest) = location.split_once("://")?;
    let rest = rest.split(['?', '#']).next()?;
    rest.find('/').map(|at| &rest[at..])
}

fn create_local_dir(dir: &std::path::Path) -> Result<PathBuf> {
    std::fs::create_dir_all(dir).map_err(|err| {
        Error::with_source(
            ErrorKind::Configuration,
            format!("cannot create warehouse directory {}", dir.display()),
            err,
        )
    })?;
    dir.canonicalize().map_err(|err| {
        Error::with_source(
            ErrorKind::Configuration,
            format!("cannot resolve {}", dir.display()),
            err,
        )
    })
}

/// The public error of a failed warehouse call: [`ErrorKind::StoreRefused`] when retrying
/// cannot fix it (access denied, an unusable path or configuration, a local path component
/// that is no directory), else [`ErrorKind::StoreUnavailable`].
fn unavailable(what: &str, err: object_store::Error) -> Error {
    if is_permanent(&err) {
        return Error::with_source(
            ErrorKind::StoreRefused,
            format!(
                "the warehouse refused access to `{what}`; retrying cannot help until the store or its permissions are fixed"
            ),
            err,
        );
    }
    Error::with_source(
        ErrorKind::StoreUnavailable,
        format!("reading or writing `{what}` failed"),
        err,
    )
}

/// Whether an object-store failure is permanent: a refusal by the server or the file
/// system, or a request that can never be valid.
fn is_permanent(err: &object_store::Error) -> bool {
    use object_store::Error as E;
    if matches!(
        err,
        E::PermissionDenied { .. }
            | E::Unauthenticated { .. }
            | E::NotImplemented { .. }
            | E::NotSupported { .. }
            | E::InvalidPath { .. }
            | E::UnknownConfigurationKey { .. }
    ) {
        return true;
    }
    // The local file system reports its I/O errors as `Generic`.
    let mut cause = std::error::Error::source(err);
    while let Some(inner) = cause {
        if let Some(io) = inner.downcast_ref::<std::io::Error>() {
            return crate::store::local::is_permanent(io.kind());
        }
        cause = inner.source();
    }
    false
}

fn parse_root(root: &str) -> Result<(Url, Vec<String>)> {
    let invalid = |why: &str| {
        Error::new(
            ErrorKind::Configuration,
            format!("warehouse `{root}` is not a valid root URI: {why}"),
        )
    };
    let url = Url::parse(root).map_err(|_| invalid("not an absolute URI"))?;
    if url.query().is_some() || url.fragment().is_some() {
        return Err(invalid("query and fragment are not allowed"));
    }
    if url.cannot_be_a_base() {
        return Err(invalid("not a hierarchical URI"));
    }
    let path = url.path();
    let inner = path.strip_prefix('/').unwrap_or(path);
    let inner = inner.strip_suffix('/').unwrap_or(inner);
    if inner.split('/').any(str::is_empty) && !inner.is_empty() {
        return Err(invalid("the path has an empty segment"));
    }
    let segments = inner
        .split('/')
        .filter(|segment| !segment.is_empty())
        .map(names::decode_segment)
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|why| invalid(&why))?;
    Ok((url, segments))
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::memory::InMemory;

    fn warehouse(root: &str) -> Warehouse {
        Warehouse::new(root, Arc::new(InMemory::new()), Path::from("wh")).expect("valid root")
    }

    #[test]
    fn locations_must_be_under_the_root_on_a_segment_boundary() {
        let wh = warehouse("s3://b/wh");
        assert_eq!(
            wh.relative("s3://b/wh/metadata/a.json").expect("inside"),
            "metadata/a.json"
        );
        let wh_slash = warehouse("s3://b/wh/");
        assert_eq!(
            wh_slash.relative("s3://b/wh/m.json").expect("inside"),
            "m.json"
        );
        for outside in [
            "s3://b/wh2/metadata/a.json",
            "s3://b/wh",
            "s3://b/wh/",
            "s3://c/wh/a.json",
            "file:///wh/a.json",
            "wh/a.json",
            "/wh/a.json",
            "s3://b/wh/../x/a.json",
            "s3://b/wh/a/%2e%2e/b.json",
            "s3://b/wh/a/./b.json",
            "s3://b/wh/a/%2E/b.json",
            "s3://b/wh//a.json",
            "s3://b/wh/a.json?x=1",
            "s3://b/wh/a.json#f",
            "s3://user@b/wh/a.json",
            "s3://b/wh/a%2Fb.json",
            "s3://b/wh/a%2fb.json",
            "s3://b/wh/a%FF.json",
            "s3://b/wh/a%00.json",
            "s3://b/%77h/../wh/a.json",
        ] {
            let err = wh.relative(outside).expect_err(outside);
            assert_eq!(err.kind(), ErrorKind::InvalidIndexMetadata, "{outside}");
        }
    }

    #[test]
    fn roots_with_empty_segments_are_refused() {
        for bad in ["s3://b//wh", "s3://b/a//wh/", "file:///data//wh"] {
            let err =
                Warehouse::new(bad, Arc::new(InMemory::new()), Path::from("wh")).expect_err(bad);
            assert_eq!(err.kind(), ErrorKind::Configuration, "{bad}");
        }
        for ok in ["s3://b", "s3://b/", "s3://b/wh/", "file:///data/wh/"] {
            Warehouse::new(ok, Arc::new(InMemory::new()), Path::from("wh")).expect(ok);
        }
    }

    #[test]
    fn every_spelling_of_a_location_has_one_name_and_one_canonical_uri() {
        let wh = warehouse("file:///data/wh");
        for spelling in [
            "file:///data/wh/metadata/caf%C3%A9.json",
            "file:///data/wh/metadata/caf%c3%a9.json",
            "file:///data/wh/metadata/café.json",
            "file:///data/%77h/metadata/caf%C3%A9.json",
        ] {
            assert_eq!(wh.relative(spelling).expect(spelling), "metadata/café.json");
            assert_eq!(
                wh.canonical_location(spelling).expect(spelling),
                "file:///data/wh/metadata/caf%C3%A9.json"
            );
        }
        assert_eq!(
            wh.relative("file:///data/wh/metadata/a%20b.json")
                .expect("space"),
            "metadata/a b.json"
        );
        assert_eq!(
            wh.absolute("metadata/a b.json"),
            "file:///data/wh/metadata/a%20b.json"
        );
        assert_eq!(
            wh.absolute("indexes/a~b/[c]/"),
            "file:///data/wh/indexes/a~b/[c]"
        );
        assert_eq!(
            wh.relative("file:///data/wh/m/100%25.json")
                .expect("percent"),
            "m/100%.json"
        );
        assert_eq!(wh.absolute("m/100%.json"), "file:///data/wh/m/100%25.json");
        let escaped_root = warehouse("s3://b/my%20wh");
        assert_eq!(
            escaped_root
                .relative("s3://b/my%20wh/metadata/x.json")
                .expect("x"),
            "metadata/x.json"
        );
        assert_eq!(
            escaped_root.absolute("metadata/x.json"),
            "s3://b/my%20wh/metadata/x.json"
        );
    }

    #[tokio::test]
    async fn metadata_files_are_written_once_and_read_back() {
        let wh = warehouse("memory://test/wh");
        let location = wh
            .write_new("metadata/x/1.metadata.json", Bytes::from_static(b"{}"))
            .await
            .expect("written");
        assert_eq!(location, "memory://test/wh/metadata/x/1.metadata.json");
        assert_eq!(
            wh.read_metadata(&location).await.expect("read").as_ref(),
            b"{}"
        );
        let again = wh
            .write_new("metadata/x/1.metadata.json", Bytes::from_static(b"[]"))
            .await;
        assert_eq!(
            again.expect_err("immutable").kind(),
            ErrorKind::AlreadyExists
        );
        let missing = wh
            .read_metadata("memory://test/wh/metadata/none.json")
            .await;
        assert_eq!(
            missing.expect_err("missing").kind(),
            ErrorKind::InvalidIndexMetadata
        );
    }
}
