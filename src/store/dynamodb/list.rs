//! Listings: a paginated `Query` of one partition, of the table or of the `shown` index
//! (see "Listing" and "The `shown` index" in the [module docs](super)).

use std::collections::HashMap;

use aws_sdk_dynamodb::operation::query::QueryOutput;
use aws_sdk_dynamodb::types::AttributeValue;

use super::errors::{classify, query_failure};
use super::item::{item_key, key_attributes, key_of_item};
use super::{DynamoStore, LISTING, PARTITION_KEY, SHOWN_INDEX, SHOWN_SORT_KEY, SORT_KEY};
use crate::store::{ListEntry, ListPage, Listing, StoreError, StoreKey};

impl DynamoStore {
    pub(super) async fn list_partition(
        &self,
        prefix: &StoreKey,
        start_after: Option<&StoreKey>,
        limit: usize,
        shown: bool,
    ) -> Result<ListPage, StoreError> {
        let prefix = prefix.as_str();
        let Some(at) = prefix.find('=') else {
            return Err(StoreError::NotSupported(format!(
                "DynamoDB lists only under prefixes that contain `=` (one partition); \
                 `{prefix}` would need a table scan"
            )));
        };
        let (pk, rest) = (&prefix[..=at], &prefix[at + 1..]);
        // Keys under the prefix are >= the prefix: start before, inside, or past them all.
        let mut start = match start_after.map(StoreKey::as_str) {
            Some(after) if after.starts_with(prefix) => {
                let (pk, sk) = item_key(after)?;
                let mut start = key_attributes(pk, sk.clone());
                if shown {
                    // An index's exclusive start key names the index key and the table key.
                    start.insert(SHOWN_SORT_KEY.to_owned(), AttributeValue::S(sk));
                }
                Some(start)
            }
            Some(after) if after > prefix => return Ok(ListPage::default()),
            _ => None,
        };
        let mut page = ListPage::default();
        loop {
            // Ask for one entry more than the page holds, to know whether more follow.
            let wanted = limit.saturating_add(1) - page.entries.len();
            let output = self.query(pk, rest, start, wanted, shown).await?;
            for item in output.items.unwrap_or_default() {
                let Some(key) = key_of_item(&item) else {
                    tracing::warn!(table = %self.table, "skipping an item that is not a pointer record");
                    continue;
                };
                let listing = match item.get(LISTING) {
                    Some(AttributeValue::N(n)) => n.parse().ok().and_then(Listing::from_code),
                    _ => None,
                };
                let value = if shown {
                    // Keys and class only: the index projects no values.
                    if listing.is_none() {
                        return Err(self.corrupt(key.as_str(), "it has no listing class"));
                    }
                    None
                } else {
                    Some(self.decode(key.as_str(), item)?)
                };
                page.entries.push(ListEntry {
                    key,
                    value,
                    listing,
                });
            }
            if page.entries.len() > limit {
                page.entries.truncate(limit);
                page.more = true;
                return Ok(page);
            }
            match output.last_evaluated_key {
                Some(last) => start = Some(last),
                None => return Ok(page),
            }
        }
    }

    async fn query(
        &self,
        pk: &str,
        rest: &str,
        start: Option<HashMap<String, AttributeValue>>,
        limit: usize,
        shown: bool,
    ) -> Result<QueryOutput, StoreError> {
        let sort_key = if shown { SHOWN_SORT_KEY } else { SORT_KEY };
        let mut request = self
            .client
            .query()
            .table_name(&self.table)
            .set_index_name(shown.then(|| SHOWN_INDEX.to_owned()))
            .consistent_read(true)
            .limit(i32::try_from(limit).unwrap_or(i32::MAX))
            .expression_attribute_names("#pk", PARTITION_KEY)
            .expression_attribute_values(":pk", AttributeValue::S(pk.to_owned()))
            .set_exclusive_start_key(start);
        request = if rest.is_empty() {
            request.key_condition_expression("#pk = :pk")
        } else {
            request
                .key_condition_expression("#pk = :pk AND begins_with(#sk, :rest)")
                .expression_attribute_names("#sk", sort_key)
                .expression_attribute_values(":rest", AttributeValue::S(rest.to_owned()))
        };
        request.send().await.map_err(|err| {
            let failure = classify(&err, query_failure);
            self.error("Query", &err, failure, false)
        })
    }
}
