//! The DynamoDB pointer store.
//!
//! Every store key is one item of one table. Reads are strongly consistent, writes are
//! conditional `PutItem`s, multi-key writes are one `TransactWriteItems`, and a listing is
//! a paginated `Query` of one partition (never a `Scan`).
//!
//! # Table schema
//!
//! | attribute | type | role                                                          |
//! |-----------|------|---------------------------------------------------------------|
//! | `pk`      | S    | partition key: the store key up to and including its first `=` (the whole key if it has no `=`) |
//! | `sk`      | S    | sort key: the rest of the store key (the leaf), or `!` if the rest is empty |
//! | `value`   | B    | the record bytes                                              |
//! | `version` | N    | the version token: `1` when created, `+1` on every replace    |
//! | `shown_sk`| S    | the sort key again, only on items written [`Listing::Shown`](crate::store::Listing::Shown) or [`Listing::Check`](crate::store::Listing::Check): the sort key of the sparse local secondary index `shown` |
//! | `listing` | N    | the item's [`Listing`](crate::store::Listing) code (1 hidden, 2 shown, 3 check)      |
//!
//! Billing is on demand; there is one local secondary index, no TTL and no streams. Create
//! the table with [`DynamoStore::create_table`] (`parqdb-catalog init`) or with:
//!
//! ```text
//! aws dynamodb create-table \
//!     --table-name parqdb-catalog \
//!     --attribute-definitions AttributeName=pk,AttributeType=S AttributeName=sk,AttributeType=S \
//!         AttributeName=shown_sk,AttributeType=S \
//!     --key-schema AttributeName=pk,KeyType=HASH AttributeName=sk,KeyType=RANGE \
//!     --local-secondary-indexes 'IndexName=shown,KeySchema=[{AttributeName=pk,KeyType=HASH},{AttributeName=shown_sk,KeyType=RANGE}],Projection={ProjectionType=INCLUDE,NonKeyAttributes=[listing]}' \
//!     --billing-mode PAY_PER_REQUEST
//! aws dynamodb wait table-exists --table-name parqdb-catalog
//! ```
//!
//! # The `shown` index
//! A namespace's partition holds its tombstones too (records are never deleted), so a
//! `Query` of the partition returns every identifier ever dropped. [`PointerStoreExt::list_shown`](crate::store::PointerStoreExt::list_shown)
//! queries the sparse **local** secondary index `shown` instead: an item is in it only
//! while it has `shown_sk`, i.e. while its value was not written [`Listing::Hidden`](crate::store::Listing::Hidden). A
//! local index, unlike a global one, answers strongly consistent reads, so a listing still
//! sees every write that completed before it started; one `Query` per page returns only
//! shown items, with their keys and class (`INCLUDE` projection: no values, which keeps the
//! index small and pages large). Costs: a local index must be created with the table, and
//! it limits each partition (one namespace's records) to 10 GB, some ten million records.
//! A table created without it (before this version) still works: `list_shown` finds out
//! once per process with `DescribeTable`, warns, and queries the partition as `list` does.
//!
//! How keys map to items (`!` is outside the key alphabet and sorts before every character
//! of it, so it can never be a real leaf and the item of a key equal to its partition sorts
//! first, as the key does):
//!
//! | store key               | `pk`              | `sk`   |
//! |-------------------------|-------------------|--------|
//! | `i/a/b/=x` (index)      | `i/a/b/=`         | `x`    |
//! | `n/a/=b` (namespace)    | `n/a/=`           | `b`    |
//! | `n/=a` (top level)      | `n/=`             | `a`    |
//! | `_probe/7f3e/=k`        | `_probe/7f3e/=`   | `k`    |
//! | `_catalog/owner` (no `=`) | `_catalog/owner` | `!`   |
//!
//! Every key the identifier codec produces has exactly one `=`, before its leaf, so the
//! indexes of a namespace (prefix `i/a/b/=`) or its child namespaces (prefix `n/a/=`) are
//! exactly one partition. Items written by anything else are ignored by listings and
//! reported as corrupt by reads.
//!
//! Limits: DynamoDB allows 2,048 bytes of partition key, 1,024 bytes of sort key and
//! 400 KB per item. [`StoreKey`]s are at most 1,024 bytes, so every key fits; a value that
//! would make the item larger than 400 KB is refused with [`StoreError::NotSupported`]
//! before anything is sent.
//!
//! # Conditions and versions
//! - [`PutMode::Create`] is a `PutItem` with `attribute_not_exists(pk)`; a failed condition is
//!   [`StoreError::AlreadyExists`].
//! - [`PutMode::Update`] is a `PutItem` with `#v = :expected` (`#v` = `version`); a failed
//!   condition (another version, or no item) is [`StoreError::Precondition`].
//!
//! The new version is known before the request is sent (`1`, or the expected version plus
//! one), so a write needs no read-back. Versions never repeat for a key because the catalog
//! never deletes records (a dropped mapping is a tombstone record): do not delete items by
//! hand or enable TTL on the table. A version token that is not a canonical decimal number
//! can match no item, so an update with one fails with [`StoreError::Precondition`] without
//! a request.
//!
//! # Transactions
//! [`PointerStore::transact`] sends one `TransactWriteItems` of conditional `Put`s (at most
//! 100, each key at most once). Its `ClientRequestToken` is a hash of the table and of the
//! writes (keys, conditions and values), so a retry of the same transaction within
//! DynamoDB's 10-minute idempotency window is applied at most once, and answers success
//! with the same versions if the first attempt succeeded. Because catalog records carry
//! unique commit ids, two identical write sets are the same commit. (A retry after the
//! window is a new request: if the first attempt had applied, its conditions now fail and
//! it reports [`StoreError::Precondition`]; the catalog tells that case apart by reading its
//! commit id back, as for any ambiguous outcome.) A cancellation with a
//! `ConditionalCheckFailed` reason is [`StoreError::Precondition`] (nothing applied); one
//! caused only by `TransactionConflict` or throttling is a retryable
//! [`StoreError::Unavailable`].
//!
//! # Listing
//! [`PointerStoreExt::list`](crate::store::PointerStoreExt::list) needs a prefix that contains `=`: the part up to its first `=` is
//! the partition, the rest (usually empty) a `begins_with` condition on the sort key. It
//! queries with `ConsistentRead`, `Limit` and `ExclusiveStartKey` (derived from
//! `start_after`), follows DynamoDB's own pagination (1 MB per response) until the page is
//! full, and returns values with the keys. A prefix without `=` would span partitions and
//! need a `Scan`: it is refused with [`StoreError::NotSupported`].
//!
//! # Errors and retries
//! | DynamoDB outcome                                                   | read                | write                |
//! |--------------------------------------------------------------------|---------------------|----------------------|
//! | `ConditionalCheckFailedException`                                  | —                   | `AlreadyExists` / `Precondition` |
//! | throttling, `TransactionConflict`, connection refused              | `Unavailable` (retryable) | `Unavailable` (retryable) |
//! | 5xx, timeout, broken connection, unreadable response, `TransactionInProgressException` | `Unavailable` (retryable) | `Ambiguous` |
//! | missing table, validation error, access denied, bad configuration  | `Unavailable` (not retryable) | `Unavailable` (not retryable) |
//!
//! The catalog reports a non-retryable `Unavailable` as `STORE_REFUSED` (retrying cannot
//! help) and a retryable one as `STORE_UNAVAILABLE`.
//!
//! The SDK's own retries stay on for reads and transactions (a transaction retry reuses the
//! request token, so it is idempotent) but are switched off for `PutItem`: a conditional
//! put retried after a lost response would fail its condition against its own first
//! attempt and be misreported as a lost race. The catalog backs off and resolves ambiguous
//! outcomes itself. SDK types never leave this module.
//!
//! # Configuration
//! [`DynamoStore::from_env`] uses the standard AWS chain (`AWS_REGION`, `AWS_PROFILE`,
//! `AWS_ACCESS_KEY_ID`, instance and container credentials, ...) with the
//! `credential-chain` feature (part of the default `cli`), and the environment only
//! without it (the Lambda functions, whose region and credentials Lambda puts there). The
//! endpoint is the explicit `endpoint` argument if given, else `AWS_ENDPOINT_URL_DYNAMODB`
//! or `AWS_ENDPOINT_URL`, else DynamoDB's regional endpoint. [`DynamoStore::new`] takes a
//! client configured any other way.

//!
//! The submodules: `config` (client configuration), `table` (creating and describing the
//! table), `item` (keys, versions and the conditional `Put` of an item), `list` (partition
//! queries), `transact` (`TransactWriteItems`) and `errors` (SDK errors as store errors).

mod config;
mod errors;
mod item;
mod list;
mod table;
mod transact;

use std::collections::HashMap;
use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::config::Builder as ConfigBuilder;
use aws_sdk_dynamodb::config::retry::RetryConfig;
use aws_sdk_dynamodb::config::timeout::TimeoutConfig;
use aws_sdk_dynamodb::types::AttributeValue;
use bytes::Bytes;

use self::config::{check_table_name, client_config};
use self::errors::{Failure, classify, get_failure, put_failure};
use self::item::{item_key, key_attributes};
use super::timeouts::StoreTimeouts;
use super::{
    Capabilities, Changed, GetOptions, ListOptions, ListPage, PointerStore, PutMode, PutOptions,
    StoreError, StoreKey, TxWrite, Version,
};
use crate::error::Result;

/// The partition-key attribute of every item (type S): the store key up to and including
/// its first `=`. See the table schema above.
#[doc(hidden)] // For the template's tests (tests/it/infra).
pub const PARTITION_KEY: &str = "pk";
/// The sort-key attribute of every item (type S): the rest of the store key, or `!` if it
/// is empty. See the table schema above.
#[doc(hidden)] // For the template's tests (tests/it/infra).
pub const SORT_KEY: &str = "sk";
/// Record-bytes attribute.
const VALUE: &str = "value";
/// Version attribute (a reserved word in expressions: always written `#v`).
const VERSION: &str = "version";
/// The sort key of a key whose leaf is empty (no `=`, or nothing after its first `=`).
const NO_LEAF: &str = "!";
/// The sort-key attribute of the `shown` index, present only on shown items (type S).
#[doc(hidden)] // For the template's tests (tests/it/infra).
pub const SHOWN_SORT_KEY: &str = "shown_sk";
/// The listing-class attribute (type N), projected into the `shown` index.
const LISTING: &str = "listing";
/// The sparse local secondary index of shown items.
#[doc(hidden)] // For the template's tests (tests/it/infra).
pub const SHOWN_INDEX: &str = "shown";

/// A pointer store in one DynamoDB table (see the [module docs](self) for the schema).
///
/// Cloning is cheap and clones share the client's connection pool.
#[derive(Debug, Clone)]
pub struct DynamoStore {
    client: Client,
    table: String,
    /// Whether the table has the `shown` index (asked once, on the first `list_shown`).
    shown_index: std::sync::Arc<tokio::sync::OnceCell<bool>>,
}

impl DynamoStore {
    /// A store on `table` through a client configured by the caller (credentials, region,
    /// endpoint, timeouts). The table name is not checked until the first request.
    pub fn new(client: Client, table: impl Into<String>) -> Self {
        DynamoStore {
            client,
            table: table.into(),
            shown_index: Default::default(),
        }
    }

    /// A store on `table` with the standard AWS configuration chain (environment, profile,
    /// instance or container credentials) and `endpoint` if given (else
    /// `AWS_ENDPOINT_URL_DYNAMODB` / `AWS_ENDPOINT_URL`, else the regional endpoint).
    ///
    /// Fails with [`ErrorKind::Configuration`](crate::error::ErrorKind::Configuration) if
    /// the table name is not a valid DynamoDB table name or no region is configured. Each
    /// request attempt times out after 10 s (connecting after 3 s).
    pub async fn from_env(table: impl Into<String>, endpoint: Option<&str>) -> Result<Self> {
        Self::from_env_with(table, endpoint, None).await
    }

    /// [`DynamoStore::from_env`], with every request bounded by `timeouts` if given: the
    /// connect and attempt timeouts, a timeout on the whole call with its retries, and at
    /// most `max_retries` retries of reads and transactions.
    pub async fn from_env_with(
        table: impl Into<String>,
        endpoint: Option<&str>,
        timeouts: Option<&StoreTimeouts>,
    ) -> Result<Self> {
        let table = table.into();
        check_table_name(&table)?;
        let (timeout_config, retry_config) = match timeouts {
            None => (
                TimeoutConfig::builder()
                    .connect_timeout(Duration::from_secs(3))
                    .operation_attempt_timeout(Duration::from_secs(10))
                    .build(),
                RetryConfig::standard(),
            ),
            Some(timeouts) => (
                TimeoutConfig::builder()
                    .connect_timeout(timeouts.connect)
                    .operation_attempt_timeout(timeouts.attempt)
                    .operation_timeout(timeouts.call)
                    .build(),
                RetryConfig::standard()
                    .with_max_attempts(u32::try_from(timeouts.max_retries + 1).unwrap_or(u32::MAX)),
            ),
        };
        let config = client_config(endpoint, timeout_config, retry_config).await?;
        Ok(DynamoStore::new(Client::from_conf(config), table))
    }

    /// The table name.
    pub fn table(&self) -> &str {
        &self.table
    }
    async fn get_item(
        &self,
        key: &StoreKey,
        version_only: bool,
    ) -> Result<Option<HashMap<String, AttributeValue>>, StoreError> {
        let (pk, sk) = item_key(key.as_str())?;
        let mut request = self
            .client
            .get_item()
            .table_name(&self.table)
            .set_key(Some(key_attributes(pk, sk)))
            .consistent_read(true);
        if version_only {
            request = request
                .projection_expression("#v")
                .expression_attribute_names("#v", VERSION);
        }
        match request.send().await {
            Ok(output) => Ok(output.item),
            Err(err) => {
                let failure = classify(&err, get_failure);
                Err(self.error("GetItem", &err, failure, false))
            }
        }
    }
}

#[async_trait]
impl PointerStore for DynamoStore {
    fn describe(&self) -> String {
        format!("dynamodb://{}", self.table)
    }

    /// The table as one instance: its name, region, account and creation time
    /// (`dynamodb://TABLE?region=R&account=A&created=MS`, from `DescribeTable`). A
    /// table's name is unique only within its account and region, and a table restored
    /// from a backup is a new table: a same-named table in another region (GC round 102)
    /// or account (round 103: AWS Backup's cross-account copy), or one deleted and
    /// restored under its name, is another store, and a copy of this one carries its
    /// catalog id. Bound to the name (or the name and region) alone, such a copy passed
    /// for the owner and collected the owner's live data.
    async fn location(&self) -> Result<Option<String>, StoreError> {
        self.bound_location().await.map(Some)
    }

    async fn get_opts(
        &self,
        key: &StoreKey,
        options: GetOptions<'_>,
    ) -> Result<Changed, StoreError> {
        if let Some(version) = options.if_changed_from {
            // Ask for the version alone first: an unchanged record costs no value bytes.
            let Some(item) = self.get_item(key, true).await? else {
                return Ok(Changed::Missing);
            };
            if self.decode_version(key.as_str(), &item)? == *version {
                return Ok(Changed::Unchanged);
            }
        }
        Ok(match self.get_item(key, false).await? {
            Some(item) => Changed::Changed(self.decode(key.as_str(), item)?),
            None => Changed::Missing,
        })
    }

    async fn put_opts(
        &self,
        key: &StoreKey,
        value: Bytes,
        options: PutOptions,
    ) -> Result<Version, StoreError> {
        let PutOptions { mode, listing } = options;
        let (put, version) = self.prepare(key, value, &mode, listing)?;
        let sent = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(put.item))
            .condition_expression(put.condition)
            .set_expression_attribute_names(put.names)
            .set_expression_attribute_values(put.values)
            .customize()
            .config_override(ConfigBuilder::default().retry_config(RetryConfig::disabled()))
            .send()
            .await;
        match sent {
            Ok(_) => Ok(version),
            Err(err) => match (classify(&err, put_failure), mode) {
                (Failure::Condition, PutMode::Create) => Err(StoreError::AlreadyExists),
                (Failure::Condition, PutMode::Update(_)) => Err(StoreError::Precondition),
                (failure, _) => Err(self.error("PutItem", &err, failure, true)),
            },
        }
    }

    async fn list_opts(
        &self,
        prefix: &StoreKey,
        options: ListOptions<'_>,
    ) -> Result<ListPage, StoreError> {
        let shown = options.shown && self.has_shown_index().await?;
        self.list_partition(prefix, options.start_after, options.limit, shown)
            .await
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            atomic_multi_key_write: true,
        }
    }

    async fn transact(&self, writes: Vec<TxWrite>) -> Result<Vec<Version>, StoreError> {
        self.transact_write_items(writes).await
    }
}
