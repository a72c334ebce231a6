//! Paginated listing of the records that may be visible.
//!
//! The store's [`PointerStoreExt::list_shown`](crate::store::PointerStoreExt::list_shown) leaves
//! out records written [`Listing::Hidden`] (tombstones) where it can. A listed record whose
//! value came with the listing is judged from its value; one without a value is judged
//! from its class when that is [`Listing::Shown`] (live: visible, nothing to read), and is
//! read otherwise (a `moving` record, or a store that cannot tell).

use std::future::Future;

use futures::{StreamExt, TryStreamExt};

use super::Catalog;
use super::write::store_error;
use crate::error::{Error, ErrorKind, Result};
use crate::store::PointerStoreExt;
use crate::store::{Listing, StoreKey, Versioned};

/// How many record bodies are fetched at once for stores whose listings carry none.
const FETCH_CONCURRENCY: usize = 32;

/// A listed record: its value, or `None` when the store's class says it is shown (visible
/// without reading it).
pub(crate) type Listed = (StoreKey, Option<Versioned>);

/// One page of records under a prefix.
pub(crate) struct RecordPage {
    pub records: Vec<Listed>,
    /// The last key the store listed (hidden records included): where the next page
    /// starts after.
    pub last: Option<StoreKey>,
    pub more: bool,
}

impl Catalog {
    /// Records under `prefix` after `start_after` that may be visible, from one store
    /// page of at most `limit` keys.
    ///
    /// Listings ask for a whole page (`limit` = the page size) even when fewer entries are
    /// missing, and stop early (the page token is the last consumed key): asking for only
    /// the missing ones would shrink every request as tombstones are skipped, turning one
    /// page into a geometric series of store requests.
    pub(crate) async fn scan(
        &self,
        prefix: &StoreKey,
        start_after: Option<&StoreKey>,
        limit: usize,
    ) -> Result<RecordPage> {
        let store = self.store().as_ref();
        let page = store
            .list_shown(prefix, start_after, limit)
            .await
            .map_err(|err| store_error(store, err))?;
        let last = page.entries.last().map(|entry| entry.key.clone());
        let records: Vec<Option<Listed>> = futures::stream::iter(page.entries)
            .map(|entry| async move {
                match (entry.value, entry.listing) {
                    (Some(value), _) => Ok(Some((entry.key, Some(value)))),
                    (None, Some(Listing::Shown)) => Ok(Some((entry.key, None))),
                    (None, Some(Listing::Hidden)) => Ok(None),
                    // Records are never deleted, but tolerate a vanished key.
                    (None, _) => Ok(store
                        .get(&entry.key)
                        .await
                        .map_err(|err| store_error(store, err))?
                        .map(|value| (entry.key, Some(value)))),
                }
            })
            .buffered(FETCH_CONCURRENCY)
            .try_collect::<Vec<_>>()
            .await?;
        Ok(RecordPage {
            records: records.into_iter().flatten().collect(),
            last,
            more: page.more,
        })
    }
}

impl Catalog {
    /// One page of what is visible under `prefix`: at most `size` items after the
    /// position `page_token` names, and the token of the next page (`None` at the end).
    /// `visible` judges a listed record (its value, or `None` when the store's class says
    /// it is shown); `decode` reads the key of a visible one.
    pub(crate) async fn list_visible<T, Judged>(
        &self,
        prefix: &StoreKey,
        page_token: Option<&str>,
        size: usize,
        visible: impl Fn(Option<Versioned>) -> Judged,
        decode: impl Fn(&str) -> Result<T>,
    ) -> Result<(Vec<T>, Option<String>)>
    where
        Judged: Future<Output = Result<bool>>,
    {
        let mut after = decode_page_token(prefix, page_token)?;
        let mut items = Vec::with_capacity(size);
        loop {
            let page = self.scan(prefix, after.as_ref(), size).await?;
            for (key, value) in page.records {
                if items.len() == size {
                    // Full, with listed records left over: the next page starts here.
                    return Ok((items, after.map(|key| key.as_str().to_owned())));
                }
                if visible(value).await? {
                    items.push(decode(key.as_str()).map_err(|err| {
                        Error::new(
                            ErrorKind::CorruptRecord,
                            format!("stored key `{key}`: {}", err.message()),
                        )
                    })?);
                }
                after = Some(key);
            }
            if !page.more {
                return Ok((items, None));
            }
            // Past the hidden records at the end of the page, too.
            after = page.last.or(after);
            if items.len() == size {
                return Ok((items, after.map(|key| key.as_str().to_owned())));
            }
        }
    }
}

/// The listing position encoded in a page token: a key under `prefix`.
fn decode_page_token(prefix: &StoreKey, token: Option<&str>) -> Result<Option<StoreKey>> {
    let Some(token) = token else {
        return Ok(None);
    };
    let invalid = || {
        Error::new(
            ErrorKind::InvalidRequest,
            format!("page token `{token}` is not valid here"),
        )
    };
    let key = StoreKey::new(token).map_err(|_| invalid())?;
    if !key.as_str().starts_with(prefix.as_str()) {
        return Err(invalid());
    }
    Ok(Some(key))
}
