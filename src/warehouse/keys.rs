//! A store's own listing of keys, for warehouses whose object_store client cannot list
//! every key the store holds.
//!
//! object_store turns every key of an S3 listing page into a `Path` and fails the whole
//! page on a key it cannot parse: an empty, `.` or `..` segment (`indexes/a/1//part-0`,
//! from an engine that joined `…/ivf_postings/` and `/part-0`) or a control character.
//! One such key anywhere in a managed prefix would stop every listing of it, and with it
//! every collection, for good (GC round 94, F1). A warehouse with a [`KeyLister`] (an S3
//! warehouse opened from its URI) lists with it instead: such a key is a skipped entry
//! (kept, never read or deleted) and the listing goes on; so is a folder marker (`k/`,
//! whose `/` object_store drops: round 94, F2).

use std::sync::Arc;

use futures::stream::BoxStream;

use super::{ListItem, Listed, Warehouse, object_name};
use crate::error::Result;

/// One key of a listing, as the store returned it.
#[doc(hidden)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawEntry {
    /// The key, exactly.
    pub key: String,
    /// Its size in bytes.
    pub size: u64,
    /// Its last-modified time (Unix epoch milliseconds).
    pub last_modified_ms: i64,
}

/// A store's listing of its keys as they are.
#[doc(hidden)] // The S3 warehouse's, and the tests' simulated stores'.
#[async_trait::async_trait]
pub trait KeyLister: Send + Sync + std::fmt::Debug {
    /// Every key that starts with `prefix` and sorts after `start_after`, in the store's
    /// (byte) order, page by page.
    fn keys(
        self: Arc<Self>,
        prefix: String,
        start_after: Option<String>,
    ) -> BoxStream<'static, Result<RawEntry>>;

    /// The objects directly below `prefix` (a key ending in `/`) and the common prefixes
    /// of the keys further below (each ending in `/`).
    async fn directory(&self, prefix: &str) -> Result<(Vec<RawEntry>, Vec<String>)>;
}

/// The key lister of the bucket `builder` is configured for (its endpoint, region and
/// addressing style), signing with `credentials` (those of the store built from it):
/// `ListObjectsV2` with aws-sdk-s3. `None` when the configuration holds a setting the
/// lister would not carry over (a proxy, say): the warehouse then lists through
/// object_store.
#[cfg(feature = "s3")]
#[doc(hidden)]
pub fn s3_key_lister(
    builder: &object_store::aws::AmazonS3Builder,
    credentials: object_store::aws::AwsCredentialProvider,
) -> Option<Arc<dyn KeyLister>> {
    let lister = crate::store::s3::lister::S3Lister::new(builder, credentials)?;
    Some(Arc::new(lister))
}

impl Warehouse {
    /// This warehouse with its listings made by `lister` (an S3 warehouse opened from its
    /// URI; a test's simulated store).
    #[doc(hidden)]
    pub fn with_key_lister(mut self, lister: Arc<dyn KeyLister>) -> Self {
        self.key_lister = Some(lister);
        self
    }

    /// Its key lister, if it lists with one.
    pub(super) fn key_lister(&self) -> Option<Arc<dyn KeyLister>> {
        self.key_lister.clone()
    }

    /// The key prefix of everything below the name `name` (`<root key>/<name>/`; the whole
    /// root for an empty name).
    pub(super) fn key_prefix(&self, name: &str) -> String {
        let key = self.key(name);
        match key.as_ref() {
            "" => String::new(),
            key => format!("{key}/"),
        }
    }

    /// What a listing yields for a key: an object, or a skipped entry for a key the
    /// catalog cannot address (object_store cannot parse it, or it is a folder marker).
    pub(super) fn item_of_key(&self, entry: &RawEntry) -> ListItem {
        let key = entry.key.as_str();
        let prefix = self.prefix.as_ref();
        let name = match prefix {
            "" => Some(key),
            prefix => key
                .strip_prefix(prefix)
                .and_then(|rest| rest.strip_prefix('/')),
        };
        let Some(name) = name.filter(|name| !name.is_empty()) else {
            return ListItem::Skipped {
                name: key.to_owned(),
                reason: "not below the warehouse root".to_owned(),
            };
        };
        if key.ends_with('/') {
            return ListItem::Skipped {
                name: name.to_owned(),
                reason: "a folder marker (a key ending in `/`), not an object".to_owned(),
            };
        }
        if let Err(err) = object_store::path::Path::parse(key) {
            return ListItem::Skipped {
                name: name.to_owned(),
                reason: format!("a key the object store client cannot address ({err})"),
            };
        }
        match object_name(name) {
            Ok(_) => ListItem::Object(Listed {
                name: name.to_owned(),
                size: entry.size,
                last_modified_ms: entry.last_modified_ms,
                landed_ms: entry.last_modified_ms,
            }),
            Err(why) => ListItem::Skipped {
                name: name.to_owned(),
                reason: format!("not an object name the catalog can address: {why}"),
            },
        }
    }

    /// The subdirectories directly in `prefix` (see `Warehouse::segments`): a common
    /// prefix the catalog could not name is no partition boundary (its keys fall into
    /// whichever range they sort in).
    pub(super) async fn key_segments(
        &self,
        lister: &dyn KeyLister,
        prefix: &str,
    ) -> Result<Vec<String>> {
        let base = self.key_prefix(prefix);
        let (_, prefixes) = lister.directory(&base).await?;
        let mut segments: Vec<String> = prefixes
            .iter()
            .filter_map(|common| common.strip_prefix(&base)?.strip_suffix('/'))
            // Only a segment the catalog could name is a boundary (a position the listing
            // resumes at): one object_store cannot parse, or that holds a character XML
            // cannot carry, is not (rounds 94 and 96).
            .filter(|segment| {
                object_store::path::Path::parse(format!("{base}{segment}")).is_ok()
                    && super::names::check_segment(segment).is_ok()
            })
            .map(str::to_owned)
            .collect();
        segments.sort_by(|a, b| format!("{a}/").cmp(&format!("{b}/")));
        segments.dedup();
        Ok(segments)
    }

    /// The objects directly in the directory `dir`.
    pub(super) async fn key_files(&self, lister: &dyn KeyLister, dir: &str) -> Result<Vec<Listed>> {
        let (objects, _) = lister.directory(&self.key_prefix(dir)).await?;
        Ok(objects
            .iter()
            .filter_map(|entry| match self.item_of_key(entry) {
                ListItem::Object(listed) => Some(listed),
                ListItem::Skipped { .. } => None,
            })
            .collect())
    }
}
