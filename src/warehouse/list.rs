//! Listings below a name: every object recursively, or one directory's entries (on the
//! local file system, never following a symbolic link).

use futures::StreamExt;
use futures::stream::BoxStream;
use object_store::ObjectStore;

use super::{ListItem, Listed, Warehouse, local, unavailable};
use crate::error::Result;

impl Warehouse {
    /// Every object below the name `prefix`, recursively. On the local file system
    /// symbolic links are never followed (they are reported as [`ListItem::Skipped`]).
    pub(crate) fn list(&self, prefix: &str) -> BoxStream<'static, Result<ListItem>> {
        if let Some(dir) = &self.local {
            return local::list(dir.as_ref().clone(), prefix.to_owned());
        }
        if let Some(lister) = self.key_lister() {
            let this = self.clone();
            return lister
                .keys(self.key_prefix(prefix), None)
                .map(move |entry| entry.map(|entry| this.item_of_key(&entry)))
                .boxed();
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

    /// The objects directly in the directory `dir` (not below it).
    pub(crate) async fn list_files(&self, dir: &str) -> Result<Vec<Listed>> {
        if let Some(lister) = self.key_lister() {
            return Box::pin(self.key_files(lister.as_ref(), dir)).await;
        }
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
