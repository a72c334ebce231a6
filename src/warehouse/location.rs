//! Locations and paths: the absolute URI of a name, the name of a location inside the
//! root, and the store path of a name (see "Names" in the [module docs](super)).

use object_store::path::Path;
use url::Url;

use super::{Warehouse, local, names, object_name};
use crate::error::{Error, ErrorKind, Result};

impl Warehouse {
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
    pub(crate) fn canonical_location(&self, location: &str) -> Result<String> {
        Ok(self.absolute(&self.relative(location)?))
    }

    /// The object-store path of the object `name` (a warehouse-relative location), or
    /// [`ErrorKind::InvalidIndexMetadata`] if it is no valid name.
    #[doc(hidden)] // Storage helpers for the workspace's tests.
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
    /// The name of an absolute location, or [`ErrorKind::InvalidIndexMetadata`] if it is
    /// not inside the root. Any spelling of the URI is accepted (escaped or not, any
    /// case of escapes); `.`, `..` and empty segments, escaped `/`, queries, fragments and
    /// credentials are refused.
    #[doc(hidden)] // Storage helpers for the workspace's tests.
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
}

/// The part of `location` after `scheme://authority`, before any query or fragment.
fn written_path(location: &str) -> Option<&str> {
    let (_, rest) = location.split_once("://")?;
    let rest = rest.split(['?', '#']).next()?;
    rest.find('/').map(|at| &rest[at..])
}

/// `path` with its longest existing ancestor resolved (symbolic links, `..`).
pub(crate) fn resolve_existing(path: &std::path::Path) -> std::path::PathBuf {
    let mut missing = Vec::new();
    let mut existing = path.to_path_buf();
    loop {
        if let Ok(resolved) = existing.canonicalize() {
            return missing
                .iter()
                .rev()
                .fold(resolved, |acc, part| acc.join(part));
        }
        match (
            existing.file_name().map(|n| n.to_owned()),
            existing.parent(),
        ) {
            (Some(name), Some(parent)) => {
                missing.push(name);
                existing = parent.to_path_buf();
            }
            _ => return path.to_path_buf(),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use object_store::memory::InMemory;

    use super::*;

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
}
