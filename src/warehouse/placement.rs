//! Where things sit: links on the way to an object about to be published, and a
//! warehouse this one is nested in.

use object_store::ObjectStoreExt;
use object_store::path::Path;

use super::layout::{GC_DIR, MANAGED_PREFIXES, OWNER_MARKER};
use super::link_search::LinksBelow;
use super::{Warehouse, local, unavailable};
use crate::error::{Error, ErrorKind, Result};

impl Warehouse {
    /// Refuse to publish the object `name` if, on a local warehouse, its path below the
    /// root passes through a symbolic link: the collector never follows links, so it
    /// could not see the file to keep what the file names ([`ErrorKind::InvalidIndexMetadata`]).
    pub(crate) async fn refuse_links(&self, name: &str) -> Result<()> {
        let Some(dir) = &self.local else {
            return Ok(());
        };
        let (dir, checked) = (dir.as_ref().clone(), name.to_owned());
        let linked = blocking("checking a location failed", move || {
            local::linked(&dir, &checked)
        })
        .await?;
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
    /// The names that `names` reach through symbolic links, on a local warehouse: for a
    /// name whose path passes through a link (`indexes/u/current -> 7`, `tables ->
    /// indexes`), the name of the path the link leads to, if that lies inside the
    /// warehouse. A listing never follows links, so it lists those objects under their real
    /// names; the collector keeps them by these. Each is paired with the name it came
    /// from. Empty on other stores.
    pub(crate) async fn link_targets(&self, names: Vec<String>) -> Result<Vec<(String, String)>> {
        let Some(dir) = &self.local else {
            return Ok(Vec::new());
        };
        let dir = dir.as_ref().clone();
        blocking("resolving links in the warehouse failed", move || {
            let mut targets = Vec::new();
            for name in names {
                if local::linked(&dir, &name).is_some() {
                    let path = dir.join(&name);
                    for target in super::links::linked_names(&dir, &path).0 {
                        targets.push((name.clone(), target));
                    }
                }
            }
            targets
        })
        .await
    }

    /// What the symbolic links `links` (names a listing skipped) lead to inside the
    /// warehouse, on a local warehouse, each with its link's name and when the link landed
    /// (the later of its modification and birth times: a copy that keeps an old
    /// modification time, `cp -a`, `tar x`, is new all the same). Empty on other stores; a
    /// name that is no link gives nothing. See [`link_names`] for what a link names.
    pub(crate) async fn link_targets_dated(
        &self,
        links: Vec<String>,
    ) -> Result<Vec<(String, String, i64)>> {
        let Some(dir) = &self.local else {
            return Ok(Vec::new());
        };
        let dir = dir.as_ref().clone();
        blocking("resolving links in the warehouse failed", move || {
            let mut targets = Vec::new();
            for name in links {
                let path = dir.join(&name);
                // One it cannot look at (too long to open by its name, refused) is left
                // to the search below live names (`links_below`), which keeps everything
                // while such a place lies below one: in garbage no reader reaches it
                // (round 67, U1).
                let Ok(meta) = std::fs::symlink_metadata(&path) else {
                    continue;
                };
                if !meta.file_type().is_symlink() {
                    continue;
                }
                let landed_ms = local::listed(name.clone(), &meta).landed_ms;
                for target in super::link_search::link_names(&dir, &path).names {
                    targets.push((name.clone(), target, landed_ms));
                }
            }
            targets
        })
        .await
    }

    /// What the symbolic links at or below the names `names`, in every spelling they have
    /// on disk (`indexes/n%20b/` for `indexes/n b`), lead to inside the warehouse, on a
    /// local warehouse (empty on other stores), and what the links at or below those lead
    /// to, to the end of every chain (a directory of links a live link leads to, a link to
    /// a link): a directory is walked without following links, each name the links lead
    /// to is walked once, and directories that changed while the walk ran are looked at
    /// again (a directory moved behind the walk; see `link_search`). The verification walk keeps these, so a link made in
    /// a live table (or a live source table inside the warehouse, which no listing of the
    /// collector covers) after the scans passed it still keeps what it leads to.
    ///
    /// A place below them the walk cannot read may hold a link to anything
    /// ([`LinksBelow::unread`]): a directory it may not open or whose path is too long to
    /// open by name (a reader that opens each directory from its parent reads it), a link
    /// too long to resolve by its name, a directory of another file system mounted there
    /// (GC round 66, as `Links::walk` answers since rounds 46 and 55).
    pub(crate) async fn links_below(&self, names: Vec<String>) -> Result<LinksBelow> {
        let Some(dir) = &self.local else {
            return Ok(LinksBelow::default());
        };
        let dir = dir.as_ref().clone();
        blocking("looking for links in the warehouse failed", move || {
            super::link_search::search(&dir, names)
        })
        .await
    }

    /// Where an overlay mount serves a local warehouse (a container's root file system
    /// aside), if one does: its layers show the warehouse's files at other paths, which
    /// the mount table cannot tell, so a reader may read any of them there (round 87, O1).
    pub(crate) async fn overlay_serving(&self) -> Result<Option<String>> {
        let Some(dir) = &self.local else {
            return Ok(None);
        };
        let dir = dir.as_ref().clone();
        blocking("reading the mount table failed", move || {
            let real = std::fs::canonicalize(&dir).ok()?;
            super::mounts::MountTable::read()
                .overlay_serving(&real)
                .map(|at| at.display().to_string())
        })
        .await
    }

    /// The warehouse root this one is nested in, if any: an ancestor directory holding
    /// an ownership marker whose `metadata/`, `indexes/` or `_gc/` contains this root.
    /// Such a warehouse would have its objects collected by the outer one.
    pub(crate) async fn enclosing_owner(&self) -> Result<Option<String>> {
        let nested_under = |child: &str| MANAGED_PREFIXES.contains(&child) || child == GC_DIR;
        if let Some(dir) = &self.local {
            let dir = dir.as_ref().clone();
            return blocking("checking the layout failed", move || {
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
            .await;
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
}

/// Run `work` on the blocking pool (file-system calls); a failure to run it is
/// [`ErrorKind::StoreUnavailable`], saying `what` failed.
async fn blocking<T: Send + 'static>(
    what: &'static str,
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|err| Error::with_source(ErrorKind::StoreUnavailable, what, err))
}

/// Below the directory `under` of the local warehouse `root`, a chain of `depth`
/// directories with 200-byte names (longer than a path can be opened by, from 21 on)
/// holding a symbolic link `shared` to `target`, each made from its parent's open
/// directory, as a writer that works relative to its directory makes them. For tests.
#[cfg(any(test, feature = "test-util"))]
pub fn deep_link(root: &std::path::Path, under: &str, depth: usize, target: &str) {
    use std::ffi::CString;
    use std::os::fd::AsRawFd;
    let dir = deep_chain(root, under, depth);
    let (target, link) = (
        CString::new(target).expect("c"),
        CString::new("shared").expect("c"),
    );
    // SAFETY: `symlinkat` in an open directory with NUL-terminated names.
    let linked = unsafe { libc::symlinkat(target.as_ptr(), dir.as_raw_fd(), link.as_ptr()) };
    assert_eq!(linked, 0, "linked");
}

/// The same chain as [`deep_link`] holding a regular file `part-0.parquet` instead of a
/// link. For tests.
#[cfg(any(test, feature = "test-util"))]
pub fn deep_file(root: &std::path::Path, under: &str, depth: usize) {
    use std::ffi::CString;
    use std::os::fd::{AsRawFd, FromRawFd};
    let dir = deep_chain(root, under, depth);
    let name = CString::new("part-0.parquet").expect("c");
    // SAFETY: `openat` in an open directory with a NUL-terminated name.
    let fd = unsafe {
        libc::openat(
            dir.as_raw_fd(),
            name.as_ptr(),
            libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL,
            0o644,
        )
    };
    assert!(fd >= 0, "created");
    // SAFETY: a descriptor `openat` just returned, owned here alone.
    drop(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) });
}

/// The chain of [`deep_link`] and [`deep_file`]: its deepest directory, open.
#[cfg(any(test, feature = "test-util"))]
fn deep_chain(root: &std::path::Path, under: &str, depth: usize) -> std::os::fd::OwnedFd {
    use std::ffi::CString;
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    std::fs::create_dir_all(root.join(under)).expect("made");
    let open = |at: i32, name: &CString| {
        // SAFETY: `openat` on an open directory and a NUL-terminated name.
        let fd = unsafe { libc::openat(at, name.as_ptr(), libc::O_DIRECTORY | libc::O_RDONLY) };
        assert!(fd >= 0, "opened");
        // SAFETY: a descriptor `openat` just returned, owned here alone.
        unsafe { OwnedFd::from_raw_fd(fd) }
    };
    let start = CString::new(root.join(under).into_os_string().into_encoded_bytes()).expect("c");
    let mut dir = open(libc::AT_FDCWD, &start);
    let name = CString::new("d".repeat(200)).expect("c");
    for _ in 0..depth {
        // SAFETY: `mkdirat` in an open directory with a NUL-terminated name.
        let made = unsafe { libc::mkdirat(dir.as_raw_fd(), name.as_ptr(), 0o755) };
        assert_eq!(made, 0, "made");
        dir = open(dir.as_raw_fd(), &name);
    }
    dir
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;

    /// Round 66 (helper-62, F1): a link in a live table whose path is too long to open by
    /// name (a reader that opens each directory from its parent follows it) may lead
    /// anywhere; a shallow one is followed.
    #[tokio::test]
    async fn a_link_below_a_name_too_deep_to_read_may_lead_anywhere() {
        let dir = tempfile::tempdir().expect("dir");
        let wh = Warehouse::local(dir.path()).expect("warehouse");
        wh.put_if_absent("indexes/old/z/part-0.parquet", Bytes::from_static(b"PAR1"))
            .await
            .expect("written");
        let target = dir.path().join("indexes/old/z");
        let target = target.to_str().expect("utf-8");
        deep_link(dir.path(), "indexes/shallow", 2, target);
        let below = wh
            .links_below(vec!["indexes/shallow".to_owned()])
            .await
            .expect("walked");
        assert_eq!(below.targets, ["indexes/old/z"]);
        assert_eq!(below.unread, None);
        deep_link(dir.path(), "indexes/deep", 22, target);
        let below = wh
            .links_below(vec!["indexes/deep".to_owned()])
            .await
            .expect("walked");
        assert!(
            below
                .unread
                .as_deref()
                .is_some_and(|why| why.contains("indexes/deep")),
            "{below:?}"
        );
        // U1: as deep, holding files and directories only, read through its parents: it
        // names nothing, and the search is not unread.
        deep_file(dir.path(), "indexes/plain", 40);
        let below = wh
            .links_below(vec!["indexes/plain".to_owned()])
            .await
            .expect("walked");
        assert_eq!(below.unread, None, "{below:?}");
        assert!(below.targets.is_empty(), "{below:?}");
    }
}
