//! Listings: `ListObjectsV2` pages under the store's prefix, classified by object size
//! where sizes are trusted.

use object_store::list::{PaginatedListOptions, PaginatedListStore};
use object_store::path::Path;

use super::classes::class_of_size;
use super::errors::read_error;
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
            let max_keys = wanted.clamp(1, MAX_KEYS_PER_REQUEST);
            let (mut objects, next) = self
                .list_request(
                    &object_prefix,
                    offset.as_deref(),
                    max_keys,
                    page_token.take(),
                )
                .await?;
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
            match next {
                Some(token) => page_token = Some(token),
                None => return Ok(page),
            }
        }
    }

    /// One `ListObjectsV2` request: the keys (object names) and sizes after `offset` (the
    /// first request of a listing) or from `token`, and the next page's token. With the
    /// store's own lister, keys object_store cannot parse are listed too (and skipped by
    /// the caller); else through object_store, which fails the page on one.
    async fn list_request(
        &self,
        prefix: &str,
        offset: Option<&str>,
        max_keys: usize,
        token: Option<String>,
    ) -> Result<(Vec<(String, u64)>, Option<String>), StoreError> {
        if let Some(lister) = &self.lister {
            let request = PageRequest {
                start_after: if token.is_none() { offset } else { None },
                max_keys: Some(max_keys),
                ..PageRequest::default()
            };
            let page = lister
                .page(prefix, request, token)
                .await
                .map_err(|failure| {
                    if failure.refused {
                        StoreError::fatal(failure)
                    } else {
                        StoreError::unavailable(failure)
                    }
                })?;
            let objects = page.objects.into_iter().map(|o| (o.key, o.size)).collect();
            return Ok((objects, page.next));
        }
        let options = PaginatedListOptions {
            offset: offset.map(str::to_owned),
            max_keys: Some(max_keys),
            page_token: token,
            ..PaginatedListOptions::default()
        };
        let response = self
            .client
            .list_paginated(Some(prefix), options)
            .await
            .map_err(read_error)?;
        let objects = response
            .result
            .objects
            .into_iter()
            .map(|meta| (meta.location.as_ref().to_owned(), meta.size))
            .collect();
        Ok((objects, response.page_token))
    }
}
