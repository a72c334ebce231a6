//! Paginated listing of records, with bodies, whatever the store returns.

use futures::{StreamExt, TryStreamExt};

use super::Catalog;
use super::write::store_error;
use crate::error::{Error, ErrorKind, Result};
use crate::store::{StoreKey, Versioned};

/// How many record bodies are fetched at once for stores whose listings carry none.
const FETCH_CONCURRENCY: usize = 32;

/// One page of records under a prefix.
pub(crate) struct RecordPage {
    pub records: Vec<(StoreKey, Versioned)>,
    pub more: bool,
}

impl Catalog {
    /// Records under `prefix` after `start_after`, at most `limit`, with their bodies.
    pub(crate) async fn scan(
        &self,
        prefix: &StoreKey,
        start_after: Option<&StoreKey>,
        limit: usize,
    ) -> Result<RecordPage> {
        let store = self.store().as_ref();
        let page = store
            .list(prefix, start_after, limit)
            .await
            .map_err(|err| store_error(store, err))?;
        let records: Vec<Option<(StoreKey, Versioned)>> = futures::stream::iter(page.entries)
            .map(|entry| async move {
                match entry.value {
                    Some(value) => Ok(Some((entry.key, value))),
                    // Records are never deleted, but tolerate a vanished key.
                    None => Ok(store
                        .get(&entry.key)
                        .await
                        .map_err(|err| store_error(store, err))?
                        .map(|value| (entry.key, value))),
                }
            })
            .buffered(FETCH_CONCURRENCY)
            .try_collect::<Vec<_>>()
            .await?;
        Ok(RecordPage {
            records: records.into_iter().flatten().collect(),
            more: page.more,
        })
    }
}

/// The listing position encoded in a page token: a key under `prefix`.
pub(crate) fn decode_page_token(
    prefix: &StoreKey,
    token: Option<&str>,
) -> Result<Option<StoreKey>> {
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
