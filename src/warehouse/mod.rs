//! The warehouse: the one object-store root that holds metadata and index files (what
//! [`Warehouse`] documents).
//!
//! The submodules: `layout` (every reserved name and path: the catalog's, the
//! collector's), `names` (a name is the raw `/`-joined key below the root, `object_name`;
//! `Warehouse::relative` turns any spelling of a location inside the root into its name),
//! `location` (names, locations and store paths), `condemned` (what the collector's
//! ledger records as condemned, for publication), `objects` (reading and writing one
//! object), `list` and `range` (listings), `delete` (deletions), `placement` (links on the
//! way to an object, an enclosing warehouse), `local` (the local file system's listings and
//! checks) and `errors` (store errors as the crate's).

mod condemned;
mod deep;
mod delete;
mod errors;
pub(crate) mod layout;
mod link_search;
mod links;
mod list;
mod local;
mod local_files;
mod location;
mod mounts;
mod names;
mod objects;
mod outside;
mod placement;
mod stamp;
mod unlink;
#[cfg(any(test, feature = "test-util"))]
#[doc(hidden)] // A layout the tests of the collector make (tests/it/gc/hostile_layouts.rs).
pub use placement::{deep_file, deep_link};
mod keys;
mod range;
mod recognise;
#[cfg(feature = "s3")]
mod s3_list;
pub(crate) use recognise::NameReader;

use std::path::PathBuf;
use std::sync::Arc;

use object_store::path::Path;
use object_store::{ObjectMeta, ObjectStore};
use url::Url;

#[cfg(feature = "s3")]
#[doc(hidden)]
pub use keys::s3_key_lister;
#[doc(hidden)]
pub use keys::{KeyLister, RawEntry};
#[doc(hidden)] // For the workspace's tests.
pub use layout::OWNER_MARKER;
pub(crate) use layout::{GC_DIR, INDEXES_DIR, MANAGED_PREFIXES, METADATA_DIR};
pub(crate) use link_search::WideLink;
pub(crate) use location::resolve_existing;
pub(crate) use names::object_name;
pub(crate) use names::{aliases, is_within};
pub(crate) use objects::Fetched;
#[doc(hidden)] // With `Warehouse::list_range`, for tests/it/gc/hostile_layouts.rs.
pub use range::{ListRange, Positioned};

use self::errors::{is_missing, unavailable};
use crate::error::{Error, ErrorKind, Result};

/// One object found by a listing.
#[derive(Debug, Clone, PartialEq, Eq)]
#[doc(hidden)] // What `Warehouse::head` answers, for the workspace's tests.
pub struct Listed {
    /// Its name.
    pub name: String,
    /// Its size in bytes.
    pub size: u64,
    /// Its last-modified time (Unix epoch milliseconds).
    pub last_modified_ms: i64,
    /// When it landed in this store (Unix epoch milliseconds): in an object store its
    /// last-modified time (a copy is a new object); on a file system the later of its
    /// modification and birth times (the status-change time where no birth time is
    /// recorded), so a copy that keeps the original modification time (`cp -a`, `tar`, a
    /// backup restored in place) still lands when it is made — nobody can set either.
    pub landed_ms: i64,
}

/// What a listing yields.
#[doc(hidden)] // What `Warehouse::list_range` yields, for tests/it/gc/hostile_layouts.rs.
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
pub(crate) enum Deletion {
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
///
/// A catalog is configured with one warehouse root URI (`file:///data/wh`,
/// `s3://bucket/wh`, `memory://name`). Every metadata location must be an absolute URI
/// under that root: same scheme and authority, and a path under the root's path on a
/// segment boundary, so `s3://b/wh` never accepts `s3://b/wh2/...`. Anything else is
/// [`ErrorKind::InvalidIndexMetadata`]. Objects are addressed by their **names** (see
/// [names](#names)): the raw key below the root, the same spelling for a location in
/// metadata, a listed object and a deletion.
///
/// Layout: the garbage collector's managed prefixes are `metadata/` (immutable metadata
/// files) and `indexes/` (immutable index tables), and the catalog's and collector's own
/// files live under `_catalog/`, `_gc/` and the ownership marker `_catalog-owner.json`.
///
/// # Names
/// A name is the raw `/`-joined key below the root; a location is the root URI plus the
/// name's segments, each percent-encoded once ([`Warehouse::absolute`]). The catalog
/// accepts any spelling of a location inside the root and stores its name, refusing
/// `.`/`..` and empty segments and escaped `/`.
#[derive(Debug, Clone)]
pub struct Warehouse {
    root: Url,
    /// The root path's decoded segments.
    root_segments: Vec<String>,
    prefix: Path,
    store: Arc<dyn ObjectStore>,
    /// The directory holding the objects, for warehouses on the local file system.
    local: Option<Arc<PathBuf>>,
    /// That directory as it was given, made absolute but with its links not resolved
    /// (`./warehouse -> /disk2/wh`): an engine may stand above either spelling.
    local_as_given: Option<Arc<PathBuf>>,
    /// That directory as this process opened it: nothing is deleted once another one is
    /// there (`unlink`).
    local_opened: Arc<std::sync::OnceLock<unlink::RootIdentity>>,
    /// Whether the store is this warehouse's own over that directory (`Warehouse::local`),
    /// so that deletions unlink through the checked directories, or a store of the
    /// caller's (`with_local_dir`), which deletes by path after the check.
    local_own_store: bool,
    /// The store's own listing of keys, where object_store's cannot list every key (the
    /// `keys` module).
    key_lister: Option<Arc<dyn KeyLister>>,
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
            local_as_given: None,
            local_opened: Arc::default(),
            local_own_store: false,
            key_lister: None,
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
    pub(crate) fn root_key(root: &str) -> Result<Path> {
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
        let given = dir;
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
        warehouse.opened_at(&dir);
        warehouse.local = Some(Arc::new(dir));
        warehouse.local_as_given = as_given(given);
        warehouse.local_own_store = true;
        Ok(warehouse)
    }

    /// Declare that this warehouse's objects are the files below the local directory
    /// `dir` (its prefix being the root of `dir`), as for [`Warehouse::local`] over a
    /// wrapped store: listings then never follow symbolic links, and nothing is deleted
    /// through a link or outside `dir`.
    pub fn with_local_dir(mut self, dir: &std::path::Path) -> Result<Warehouse> {
        self.local_as_given = as_given(dir);
        let dir = create_local_dir(dir)?;
        self.opened_at(&dir);
        self.local = Some(Arc::new(dir));
        self.local_own_store = false;
        Ok(self)
    }

    /// Record the local directory `dir` as this process opens it (else its first deletion
    /// records it).
    fn opened_at(&mut self, dir: &std::path::Path) {
        self.local_opened = Arc::default();
        if let Ok(identity) = unlink::RootIdentity::of(dir) {
            let _ = self.local_opened.set(identity);
        }
    }

    /// The root URI, without a trailing `/`.
    pub fn root(&self) -> &str {
        self.root.as_str().trim_end_matches('/')
    }

    /// The longest name an object of this warehouse may have: the store's key limit less
    /// the root (S3 and the other object stores: 1,024 bytes of key; local files: 4,095
    /// bytes of path).
    #[doc(hidden)] // For tests/it/gc/simulation.rs.
    pub fn max_name_len(&self) -> usize {
        match &self.local {
            Some(dir) => 4095usize.saturating_sub(dir.as_os_str().len() + 1),
            None => {
                let prefix = self.prefix.as_ref().len();
                1024usize.saturating_sub(if prefix == 0 { 0 } else { prefix + 1 })
            }
        }
    }

    /// The object store holding the warehouse.
    pub fn object_store(&self) -> &Arc<dyn ObjectStore> {
        &self.store
    }

    /// The object-store path of the warehouse root.
    #[doc(hidden)] // Storage helpers for the workspace's tests.
    pub fn prefix(&self) -> &Path {
        &self.prefix
    }

    /// The local directory of a warehouse on the local file system.
    pub(crate) fn local_dir(&self) -> Option<&std::path::Path> {
        self.local.as_deref().map(PathBuf::as_path)
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

    /// The listing entry of an object the store listed.
    fn item_of(&self, meta: &ObjectMeta) -> ListItem {
        match self.name_of(&meta.location) {
            // A key the store holds but no metadata can name (a control character another
            // engine wrote, say) is reported and left alone, never read or deleted.
            Some(name) => match object_name(&name) {
                Ok(_) => ListItem::Object(self.listed(meta, &name)),
                Err(why) => ListItem::Skipped {
                    name,
                    reason: format!("not an object name the catalog can address: {why}"),
                },
            },
            None => ListItem::Skipped {
                name: meta.location.to_string(),
                reason: "not below the warehouse root".to_owned(),
            },
        }
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
            landed_ms: meta.last_modified.timestamp_millis(),
        }
    }
}

/// `dir` made absolute against the working directory, its links and `..` kept as written.
fn as_given(dir: &std::path::Path) -> Option<Arc<PathBuf>> {
    std::path::absolute(dir).ok().map(Arc::new)
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
}
