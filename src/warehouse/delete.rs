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

impl Warehouse {
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
