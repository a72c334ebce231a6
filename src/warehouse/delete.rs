//! Deletions: a batch through the store, or on the local file system one checked file at
//! a time.

use std::path::PathBuf;
use std::sync::Arc;

use futures::StreamExt;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};

use super::{Deletion, Warehouse, local, unavailable};
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

    /// Delete objects by name. On the local file system an object is only deleted if no
    /// component of its path below the root is a symbolic link or on another file system
    /// and it is a regular file, checked right before that object's deletion.
    pub(crate) async fn delete(&self, names: Vec<String>) -> Vec<(String, Deletion)> {
        let mut outcomes = Vec::with_capacity(names.len());
        let mut paths = Vec::with_capacity(names.len());
        // The warehouse directory as the batch first finds it (round 89, R2).
        let batch = Arc::new(std::sync::Mutex::new(super::mounts::BatchRoot::default()));
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
                    let outcome = self.delete_local(dir, &batch, &name, &path).await;
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
    /// Check one local object and delete it right away (the check and the deletion of a
    /// file are adjacent, not a batch apart).
    async fn delete_local(
        &self,
        dir: &Arc<PathBuf>,
        batch: &Arc<std::sync::Mutex<super::mounts::BatchRoot>>,
        name: &str,
        path: &Path,
    ) -> Deletion {
        let (dir, batch, checked) = (dir.clone(), batch.clone(), name.to_owned());
        let check = move || match batch.lock() {
            Ok(mut batch) => local::deletable(&dir, &checked, &mut batch),
            Err(_) => Err("the check of the warehouse directory failed".to_owned()),
        };
        match tokio::task::spawn_blocking(check).await {
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
}
