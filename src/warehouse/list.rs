//! Listings below a name: every object recursively, or one directory's entries (on the
//! local file system, never following a symbolic link).

use futures::StreamExt;
use futures::stream::BoxStream;
use object_store::ObjectStore;

use super::{ListItem, Listed, Warehouse, local, unavailable};
use crate::error::{Error, ErrorKind, Result};

impl Warehouse {
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
}
