//! Deletions: a batch through the store, or on the local file system one checked file at
//! a time.

use std::path::PathBuf;
use std::sync::Arc;

use futures::StreamExt;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};

use super::unlink::{self, Unlinked};
use super::{Deletion, Warehouse, unavailable};
use crate::error::{Error, ErrorKind};

/// How many objects a batch did not confirm are deleted alone at once.
const DELETES_ALONE_AT_ONCE: usize = 16;

impl Warehouse {
    /// On a local warehouse, remove the directory `dir` under `_gc/` and every directory
    /// below it that holds nothing (a pruned run's: a file system keeps them, and a file
    /// a browser drops into one later would make it a run again). Links are never
    /// followed; a directory that holds anything stays. Nothing to do on an object store.
    pub(crate) async fn remove_empty_directories(&self, dir: &str) {
        let Some(root) = self.local_dir() else {
            return;
        };
        let path = root.join(dir);
        let _ = tokio::task::spawn_blocking(move || remove_empty(&path)).await;
    }

    /// Delete files the collector wrote under `_gc/` (missing ones are fine, a refused one
    /// is logged and kept); how many are gone.
    pub(crate) async fn delete_own(&self, files: Vec<String>) -> crate::error::Result<usize> {
        if files.is_empty() {
            return Ok(0);
        }
        let mut deleted = 0;
        for (name, outcome) in self.delete(files).await {
            match outcome {
                Deletion::Deleted | Deletion::Missing => deleted += 1,
                Deletion::Refused(why) => {
                    tracing::warn!(file = %name, reason = %why, "gc file not deleted");
                }
                Deletion::Failed(err) => return Err(err),
            }
        }
        Ok(deleted)
    }

    /// Delete objects by name. On the local file system an object is only deleted through
    /// open directories, each checked, from the warehouse directory this process opened:
    /// never through a symbolic link or a mount point, and only a regular file (`unlink`).
    pub(crate) async fn delete(&self, names: Vec<String>) -> Vec<(String, Deletion)> {
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
        for result in results {
            match result {
                Ok(path) => {
                    done.insert(path);
                }
                Err(object_store::Error::NotFound { path, .. }) => {
                    done.insert(Path::parse(&path).unwrap_or_default());
                }
                // A key the batch refused, or a batch that failed whole: each of its
                // objects is deleted alone below, which says why.
                Err(_) => {}
            }
        }
        let (confirmed, unconfirmed): (Vec<_>, Vec<_>) =
            paths.into_iter().partition(|(_, path)| done.contains(path));
        outcomes.extend(
            confirmed
                .into_iter()
                .map(|(name, _)| (name, Deletion::Deleted)),
        );
        let alone: Vec<(String, Deletion)> = futures::stream::iter(unconfirmed)
            .map(|(name, path)| async move {
                let outcome = self.delete_alone(&name, &path).await;
                (name, outcome)
            })
            .buffered(DELETES_ALONE_AT_ONCE)
            .collect()
            .await;
        outcomes.extend(alone);
        outcomes
    }

    /// Delete one object the batch did not confirm, with the store's typed answer: gone
    /// (now or before) is deleted; a refusal of permission keeps it with a reason, so
    /// collection goes on around it (GC round 99: a bucket policy protecting one key made
    /// `DeleteObjects` answer `AccessDenied` for it alone, which stopped every run);
    /// anything else is the store failing.
    async fn delete_alone(&self, name: &str, path: &Path) -> Deletion {
        match self.store.delete(path).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Deletion::Deleted,
            Err(err) if refuses_permission(&err) => Deletion::Refused(format!(
                "`{name}` cannot be deleted by the collector (the store refused: {err}); it is kept: delete it by hand if it is garbage"
            )),
            Err(err) => Deletion::Failed(Error::new(
                ErrorKind::StoreUnavailable,
                format!("deleting `{name}` failed: {err}"),
            )),
        }
    }

    /// Delete one local object through open directories, each checked (`unlink`); over a
    /// store of the caller's, checked that way and then deleted by the store.
    async fn delete_local(&self, dir: &Arc<PathBuf>, name: &str, path: &Path) -> Deletion {
        let (dir, opened, checked) = (dir.clone(), self.local_opened.clone(), name.to_owned());
        let own = self.local_own_store;
        let work = move || match own {
            true => unlink::delete(&dir, &checked, &opened),
            false => unlink::check(&dir, &checked, &opened),
        };
        match tokio::task::spawn_blocking(work).await {
            Ok(Unlinked::Deleted) if !own => match self.store.delete(path).await {
                Ok(()) => Deletion::Deleted,
                Err(object_store::Error::NotFound { .. }) => Deletion::Missing,
                Err(err) => Deletion::Failed(unavailable(name, err)),
            },
            Ok(Unlinked::Deleted) => Deletion::Deleted,
            Ok(Unlinked::Missing) => Deletion::Missing,
            Ok(Unlinked::Refused(why)) => Deletion::Refused(why),
            Ok(Unlinked::Failed(why)) => {
                Deletion::Failed(Error::new(ErrorKind::StoreUnavailable, why))
            }
            Err(err) => Deletion::Failed(Error::with_source(
                ErrorKind::StoreUnavailable,
                "deleting a local file failed",
                err,
            )),
        }
    }
}

/// Whether a store's answer to a deletion refuses permission: object_store's
/// `PermissionDenied` (an HTTP 403), or the per-key answer `AccessDenied` of an S3
/// `DeleteObjects` batch, which object_store's S3 client (deleting one object too) gives as
/// a generic error whose text ends with the S3 error code (`… (code: AccessDenied)`); its
/// type is private. `tests/it/gc/hostile_layouts.rs` (`redteam99_…`) holds this against a
/// real server's answer.
fn refuses_permission(err: &object_store::Error) -> bool {
    match err {
        object_store::Error::PermissionDenied { .. } => true,
        object_store::Error::Generic { source, .. } => {
            source.to_string().ends_with("(code: AccessDenied)")
        }
        _ => false,
    }
}

/// Remove `path` and the directories below it, deepest first, where empty.
fn remove_empty(path: &std::path::Path) {
    let is_dir = std::fs::symlink_metadata(path).is_ok_and(|meta| meta.is_dir());
    if !is_dir {
        return;
    }
    for entry in std::fs::read_dir(path).into_iter().flatten().flatten() {
        remove_empty(&entry.path());
    }
    // Fails, harmlessly, where anything is left.
    let _ = std::fs::remove_dir(path);
}
