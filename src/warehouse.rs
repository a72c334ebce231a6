//! The warehouse: the one object-store root that holds metadata and index files.
//!
//! A catalog is configured with one warehouse root URI (`file:///data/wh`,
//! `s3://bucket/wh`, `memory://name`). Every metadata location must be an absolute URI
//! under that root: same scheme and authority, and a path under the root's path on a
//! segment boundary, so `s3://b/wh` never accepts `s3://b/wh2/...`. Anything else is
//! [`ErrorKind::InvalidIndexMetadata`].
//!
//! Layout (the garbage collector's managed prefixes are `metadata/` and `indexes/`):
//!
//! ```text
//! <root>/_catalog/        pointer records of the embedded object-store catalog
//! <root>/metadata/<index-uuid>/<n>-<uuid>.metadata.json   immutable metadata files
//! <root>/indexes/<index-uuid>/<snapshot-id>/<role>/       immutable index tables
//! ```

use std::sync::Arc;

use bytes::Bytes;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload};
use url::Url;

use crate::error::{Error, ErrorKind, Result};
use crate::metadata::MAX_METADATA_BYTES;

/// The warehouse root and the object store that holds it.
#[derive(Debug, Clone)]
pub struct Warehouse {
    root: Url,
    prefix: Path,
    store: Arc<dyn ObjectStore>,
}

impl Warehouse {
    /// A warehouse rooted at `root` (an absolute URI) whose objects live in `store` under
    /// `prefix`.
    pub fn new(root: &str, store: Arc<dyn ObjectStore>, prefix: Path) -> Result<Warehouse> {
        let root = parse_root(root)?;
        Ok(Warehouse {
            root,
            prefix,
            store,
        })
    }

    /// A process-local warehouse (object_store's `InMemory`), for tests and examples.
    pub fn in_memory(root: &str) -> Result<Warehouse> {
        let url = parse_root(root)?;
        let prefix = Path::from(url.path());
        Warehouse::new(
            root,
            Arc::new(object_store::memory::InMemory::new()),
            prefix,
        )
    }

    /// A warehouse in a local directory (created if missing).
    pub fn local(dir: &std::path::Path) -> Result<Warehouse> {
        std::fs::create_dir_all(dir).map_err(|err| {
            Error::with_source(
                ErrorKind::Configuration,
                format!("cannot create warehouse directory {}", dir.display()),
                err,
            )
        })?;
        let dir = dir.canonicalize().map_err(|err| {
            Error::with_source(
                ErrorKind::Configuration,
                format!("cannot resolve {}", dir.display()),
                err,
            )
        })?;
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
        Warehouse::new(root.as_str(), Arc::new(store), Path::default())
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

    /// The absolute URI of a warehouse-relative location.
    pub fn absolute(&self, relative: &str) -> String {
        format!("{}/{}", self.root(), relative.trim_start_matches('/'))
    }

    /// The object-store path of a warehouse-relative location.
    pub fn path(&self, relative: &str) -> Path {
        let mut parts: Vec<object_store::path::PathPart<'_>> = self.prefix.parts().collect();
        parts.extend(
            relative
                .split('/')
                .filter(|s| !s.is_empty())
                .map(Into::into),
        );
        Path::from_iter(parts)
    }

    /// The warehouse-relative form of an absolute location, or
    /// [`ErrorKind::InvalidIndexMetadata`] if it is not under the root.
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
        if url.as_str() != location {
            // `url` resolves `..`, `%2e%2e` and the like: only canonical locations are
            // accepted, so the stored location is exactly the object that was validated.
            return Err(outside("not in canonical form"));
        }
        if url.scheme() != self.root.scheme()
            || url.host_str() != self.root.host_str()
            || url.port() != self.root.port()
        {
            return Err(outside("another scheme or authority"));
        }
        if url.query().is_some() || url.fragment().is_some() || !url.username().is_empty() {
            return Err(outside("query, fragment or credentials are not allowed"));
        }
        let root_path = self.root.path().trim_end_matches('/');
        let rest = url
            .path()
            .strip_prefix(root_path)
            .and_then(|rest| rest.strip_prefix('/'))
            .ok_or_else(|| outside("not under the root path"))?;
        if rest.is_empty()
            || rest.split('/').any(|segment| {
                segment.is_empty() || segment == "." || segment == ".." || segment.contains('%')
            })
        {
            return Err(outside("the path has empty, `.`, `..` or escaped segments"));
        }
        Ok(rest.to_owned())
    }

    /// Read a metadata file by absolute location: [`ErrorKind::InvalidIndexMetadata`] if
    /// it is outside the warehouse, missing or too large.
    pub async fn read_metadata(&self, location: &str) -> Result<Bytes> {
        let relative = self.relative(location)?;
        let path = self.path(&relative);
        // One GET: its response head carries the size, checked before the body is read.
        let result = match self.store.get(&path).await {
            Ok(result) => result,
            Err(object_store::Error::NotFound { .. }) => {
                return Err(Error::new(
                    ErrorKind::InvalidIndexMetadata,
                    format!("metadata file `{location}` does not exist"),
                ));
            }
            Err(err) => return Err(unavailable(location, err)),
        };
        if result.meta.size > MAX_METADATA_BYTES as u64 {
            return Err(Error::new(
                ErrorKind::InvalidIndexMetadata,
                format!(
                    "metadata file `{location}` has {} bytes, more than the limit of {MAX_METADATA_BYTES}",
                    result.meta.size
                ),
            ));
        }
        result
            .bytes()
            .await
            .map_err(|err| unavailable(location, err))
    }

    /// Write a new immutable object at a warehouse-relative location with
    /// create-if-absent, and return its absolute location.
    pub async fn write_new(&self, relative: &str, bytes: Bytes) -> Result<String> {
        let location = self.absolute(relative);
        let options = PutOptions {
            mode: PutMode::Create,
            ..PutOptions::default()
        };
        match self
            .store
            .put_opts(&self.path(relative), PutPayload::from_bytes(bytes), options)
            .await
        {
            Ok(_) => Ok(location),
            Err(object_store::Error::AlreadyExists { .. }) => Err(Error::new(
                ErrorKind::AlreadyExists,
                format!("`{location}` already exists; metadata files are immutable"),
            )),
            Err(err) => Err(unavailable(&location, err)),
        }
    }
}

fn unavailable(location: &str, err: object_store::Error) -> Error {
    Error::with_source(
        ErrorKind::StoreUnavailable,
        format!("reading or writing `{location}` failed"),
        err,
    )
}

fn parse_root(root: &str) -> Result<Url> {
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
    Ok(url)
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
            "s3://b/wh//a.json",
            "s3://b/wh/a.json?x=1",
            "s3://user@b/wh/a.json",
        ] {
            let err = wh.relative(outside).expect_err(outside);
            assert_eq!(err.kind(), ErrorKind::InvalidIndexMetadata, "{outside}");
        }
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
