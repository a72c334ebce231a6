//! The [`KeyLister`] of an S3 warehouse: the store's `ListObjectsV2`
//! (`store::s3::lister`), which returns every key as it is, where object_store fails a
//! whole page on one key it cannot parse (see the `keys` module).

use std::sync::Arc;

use futures::StreamExt;
use futures::stream::BoxStream;

use super::keys::{KeyLister, RawEntry};
use crate::error::{Error, ErrorKind, Result};
use crate::store::s3::lister::{ListFailure, ListedKey, PageRequest, S3Lister};

fn entry(listed: ListedKey) -> RawEntry {
    RawEntry {
        key: listed.key,
        size: listed.size,
        last_modified_ms: listed.last_modified_ms,
    }
}

/// A failed listing of `prefix` as the crate's error.
fn failed(prefix: &str, failure: ListFailure) -> Error {
    if failure.refused {
        return Error::with_source(
            ErrorKind::StoreRefused,
            format!(
                "the warehouse refused to list `{prefix}`; retrying cannot help until the store or its permissions are fixed"
            ),
            failure,
        );
    }
    Error::with_source(
        ErrorKind::StoreUnavailable,
        format!("listing `{prefix}` failed"),
        failure,
    )
}

#[async_trait::async_trait]
impl KeyLister for S3Lister {
    fn keys(
        self: Arc<Self>,
        prefix: String,
        start_after: Option<String>,
    ) -> BoxStream<'static, Result<RawEntry>> {
        // (the token of the next page, whether the listing has ended)
        let pages = futures::stream::try_unfold((None::<String>, false), move |(token, ended)| {
            let (this, prefix, start_after) = (self.clone(), prefix.clone(), start_after.clone());
            async move {
                if ended {
                    return Ok(None);
                }
                let request = PageRequest {
                    // The offset of the listing's first page; the token carries it on.
                    start_after: token.is_none().then_some(start_after.as_deref()).flatten(),
                    ..PageRequest::default()
                };
                let page = this
                    .page(&prefix, request, token)
                    .await
                    .map_err(|failure| failed(&prefix, failure))?;
                let ended = page.next.is_none();
                Ok(Some((page.objects, (page.next, ended))))
            }
        });
        pages
            .map(|page: Result<Vec<ListedKey>>| match page {
                Ok(objects) => {
                    futures::stream::iter(objects.into_iter().map(|o| Ok(entry(o)))).boxed()
                }
                Err(err) => futures::stream::iter([Err(err)]).boxed(),
            })
            .flatten()
            .boxed()
    }

    async fn directory(&self, prefix: &str) -> Result<(Vec<RawEntry>, Vec<String>)> {
        let (mut objects, mut prefixes, mut token) = (Vec::new(), Vec::new(), None);
        let request = PageRequest {
            delimiter: true,
            ..PageRequest::default()
        };
        loop {
            let page = self
                .page(prefix, request, token)
                .await
                .map_err(|failure| failed(prefix, failure))?;
            objects.extend(page.objects.into_iter().map(entry));
            prefixes.extend(page.prefixes);
            match page.next {
                Some(next) => token = Some(next),
                None => return Ok((objects, prefixes)),
            }
        }
    }
}
