//! Where things sit: links on the way to an object about to be published, and a
//! warehouse this one is nested in.

use object_store::ObjectStoreExt;
use object_store::path::Path;

use super::layout::{GC_DIR, MANAGED_PREFIXES, OWNER_MARKER};
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
                let Ok(meta) = std::fs::symlink_metadata(&path) else {
                    continue;
                };
                if !meta.file_type().is_symlink() {
                    continue;
                }
                let landed_ms = local::listed(name.clone(), &meta).landed_ms;
                for target in link_names(&dir, &path) {
                    targets.push((name.clone(), target, landed_ms));
                }
            }
            targets
        })
        .await
    }

    /// What the symbolic links at or below the names `names` lead to inside the warehouse,
    /// on a local warehouse (empty on other stores), and what the links at or below those
    /// lead to, to the end of every chain (a directory of links a live link leads to, a
    /// link to a link): a directory is walked without following links, and each name the
    /// links lead to is walked once. The verification walk keeps these, so a link made in
    /// a live table (or a live source table inside the warehouse, which no listing of the
    /// collector covers) after the scans passed it still keeps what it leads to.
    pub(crate) async fn links_below(&self, names: Vec<String>) -> Result<Vec<String>> {
        let Some(dir) = &self.local else {
            return Ok(Vec::new());
        };
        let dir = dir.as_ref().clone();
        blocking("looking for links in the warehouse failed", move || {
            let mut targets = Vec::new();
            let mut walked: std::collections::HashSet<String> = names.iter().cloned().collect();
            let mut frontier = names;
            while let Some(name) = frontier.pop() {
                let walk = walkdir::WalkDir::new(dir.join(&name))
                    .follow_links(false)
                    .same_file_system(true);
                for entry in walk.into_iter().filter_map(|entry| entry.ok()) {
                    if entry.file_type().is_symlink() {
                        for target in link_names(&dir, entry.path()) {
                            if walked.insert(target.clone()) {
                                frontier.push(target.clone());
                            }
                            targets.push(target);
                        }
                    }
                }
            }
            targets.sort_unstable();
            targets.dedup();
            targets
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

/// What the symbolic link at `path` names: the names inside the warehouse `dir` it leads
/// to, but never a managed prefix as a whole, the collector's or the catalog's own
/// directories, or the root (a link to all of `indexes/` names nothing, as a string naming
/// it does: it must not stop collection). Unless following it gave up at a bound (a
/// directory outside with more entries than a walk for links reads): then it may lead
/// anywhere, and names every managed prefix.
fn link_names(dir: &std::path::Path, path: &std::path::Path) -> Vec<String> {
    // The link's own name may be any bytes (not UTF-8: another engine's Latin-1 name);
    // what counts is where it leads.
    let (names, gave_up) = super::links::linked_names(dir, path);
    if gave_up {
        return MANAGED_PREFIXES.iter().map(|p| (*p).to_owned()).collect();
    }
    names
        .into_iter()
        .filter(|name| {
            let top = name.split('/').next().unwrap_or_default();
            !name.is_empty()
                && !MANAGED_PREFIXES.contains(&name.as_str())
                && top != GC_DIR
                && top != super::layout::CATALOG_DIR
                && name != OWNER_MARKER
        })
        .collect()
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
