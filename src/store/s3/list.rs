//! Listings: `ListObjectsV2` pages under the store's prefix, classified by object size
//! where sizes are trusted.

use object_store::path::Path;

use super::classes::class_of_size;
use super::lister::PageRequest;
use super::{MAX_KEYS_PER_REQUEST, S3Store};
use crate::store::{ListEntry, ListPage, Listing, StoreError, StoreKey};

impl S3Store {
    /// One page of at most `limit` keys under `prefix` after `start_after`; with
    /// `shown_only`, where sizes are trusted, classified and without hidden objects.
    pub(super) async fn list_classified(
        &self,
        prefix: &StoreKey,
        start_after: Option<&StoreKey>,
        limit: usize,
        shown_only: bool,
    ) -> Result<ListPage, StoreError> {
        let classes = shown_only && self.sizes_trusted().await?;
        let object_prefix = self.object_name(prefix.as_str());
        let offset = start_after.map(|after| self.object_name(after.as_str()));
        let mut page = ListPage::default();
        let mut page_token = None;
        loop {
            // Always a whole page (`limit + 1`: one more tells whether more follow), never
            // only the entries still missing: skipped tombstones would shrink every request
            // and turn one page into a geometric series of requests.
            let wanted = limit.saturating_add(1);
            let request = PageRequest {
                start_after: if page_token.is_none() {
                    offset.as_deref()
                } else {
                    None
                },
                max_keys: Some(wanted.clamp(1, MAX_KEYS_PER_REQUEST)),
                ..PageRequest::default()
            };
            let response = self
                .lister
                .page(&object_prefix, request, page_token.take())
                .await
                .map_err(|failure| {
                    if failure.refused {
                        StoreError::fatal(failure)
                    } else {
                        StoreError::unavailable(failure)
                    }
                })?;
            let mut objects: Vec<(String, u64)> = response
                .objects
                .into_iter()
                .map(|listed| (listed.key, listed.size))
                .collect();
            objects.sort_unstable();
            for (object, size) in objects {
                // S3 filters by the raw prefix; foreign objects (keys outside the store's
                // alphabet, or that object_store cannot address) are skipped.
                let Some(key) = self.store_key(&object) else {
                    continue;
                };
                if Path::parse(&object).is_err() {
                    continue;
                }
                if !key.as_str().starts_with(prefix.as_str())
                    || start_after.is_some_and(|after| key <= *after)
                {
                    continue;
                }
                let listing = if classes { class_of_size(size) } else { None };
                if listing == Some(Listing::Hidden) {
                    continue;
                }
                if page.entries.len() == limit {
                    page.more = true;
                    return Ok(page);
                }
                page.entries.push(ListEntry {
                    key,
                    value: None,
                    listing,
                });
            }
            match response.next {
                Some(token) => page_token = Some(token),
                None => return Ok(page),
            }
        }
    }
}
