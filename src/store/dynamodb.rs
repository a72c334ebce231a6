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
//! | `shown_sk`| S    | the sort key again, only on items written [`Listing::Shown`] or [`Listing::Check`]: the sort key of the sparse local secondary index `shown` |
//! | `listing` | N    | the item's [`Listing`] code (1 hidden, 2 shown, 3 check)      |
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
//! `Query` of the partition returns every identifier ever dropped. [`PointerStore::list_shown`]
//! queries the sparse **local** secondary index `shown` instead: an item is in it only
//! while it has `shown_sk`, i.e. while its value was not written [`Listing::Hidden`]. A
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
//! [`PointerStore::list`] needs a prefix that contains `=`: the part up to its first `=` is
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

use std::collections::HashMap;
use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::config::http::HttpResponse;
use aws_sdk_dynamodb::config::retry::RetryConfig;
use aws_sdk_dynamodb::config::timeout::TimeoutConfig;
use aws_sdk_dynamodb::config::{BehaviorVersion, Builder as ConfigBuilder};
use aws_sdk_dynamodb::error::{DisplayErrorContext, SdkError};
use aws_sdk_dynamodb::operation::create_table::CreateTableError;
use aws_sdk_dynamodb::operation::describe_table::DescribeTableError;
use aws_sdk_dynamodb::operation::get_item::GetItemError;
use aws_sdk_dynamodb::operation::put_item::PutItemError;
use aws_sdk_dynamodb::operation::query::QueryError;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, AttributeValue, BillingMode, KeySchemaElement, KeyType,
    LocalSecondaryIndex, Projection, ProjectionType, Put, ScalarAttributeType, TableStatus,
    TransactWriteItem,
};
use bytes::Bytes;

use super::timeouts::StoreTimeouts;
use super::{
    Capabilities, Changed, ListEntry, ListPage, Listing, PointerStore, PutMode, StoreError,
    StoreKey, TxWrite, Version, Versioned,
};
use crate::error::{Error, ErrorKind, Result};

/// The partition-key attribute of every item (type S): the store key up to and including
/// its first `=`. See the table schema above.
pub const PARTITION_KEY: &str = "pk";
/// The sort-key attribute of every item (type S): the rest of the store key, or `!` if it
/// is empty. See the table schema above.
pub const SORT_KEY: &str = "sk";
/// Record-bytes attribute.
const VALUE: &str = "value";
/// Version attribute (a reserved word in expressions: always written `#v`).
const VERSION: &str = "version";
/// The sort key of a key whose leaf is empty (no `=`, or nothing after its first `=`).
const NO_LEAF: &str = "!";
/// The sort-key attribute of the `shown` index, present only on shown items (type S).
pub const SHOWN_SORT_KEY: &str = "shown_sk";
/// The listing-class attribute (type N), projected into the `shown` index.
const LISTING: &str = "listing";
/// The sparse local secondary index of shown items.
pub const SHOWN_INDEX: &str = "shown";

/// DynamoDB's limit on a partition key, in bytes.
const MAX_PK_BYTES: usize = 2048;
/// DynamoDB's limit on a sort key, in bytes.
const MAX_SK_BYTES: usize = 1024;
/// DynamoDB's limit on an item (attribute names plus values), in bytes.
const MAX_ITEM_BYTES: usize = 400 * 1024;
/// The most a number attribute can take, in bytes (DynamoDB counts ~1 byte per two digits).
const MAX_NUMBER_BYTES: usize = 21;
/// DynamoDB's limit on the actions of one transaction.
const MAX_TRANSACTION_WRITES: usize = 100;

/// How long [`DynamoStore::create_table`] waits for the table to become `ACTIVE`.
const TABLE_ACTIVE_TIMEOUT: Duration = Duration::from_secs(300);

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
    /// Fails with [`ErrorKind::Configuration`] if the table name is not a valid DynamoDB
    /// table name or no region is configured. Each request attempt times out after 10 s
    /// (connecting after 3 s).
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

    /// Create the table with the documented schema (on-demand billing) if it does not
    /// exist, then wait until it is `ACTIVE` (at most five minutes).
    ///
    /// An existing table with another key schema is an [`ErrorKind::Configuration`] error;
    /// a refused request (access denied, invalid) is [`ErrorKind::StoreRefused`], another
    /// failed request [`ErrorKind::StoreUnavailable`].
    pub async fn create_table(&self) -> Result<()> {
        let attribute = |name: &str| {
            AttributeDefinition::builder()
                .attribute_name(name)
                .attribute_type(ScalarAttributeType::S)
                .build()
        };
        let key = |name: &str, key_type: KeyType| {
            KeySchemaElement::builder()
                .attribute_name(name)
                .key_type(key_type)
                .build()
        };
        let request = (|| {
            Ok::<_, aws_sdk_dynamodb::error::BuildError>(
                self.client
                    .create_table()
                    .table_name(&self.table)
                    .attribute_definitions(attribute(PARTITION_KEY)?)
                    .attribute_definitions(attribute(SORT_KEY)?)
                    .attribute_definitions(attribute(SHOWN_SORT_KEY)?)
                    .key_schema(key(PARTITION_KEY, KeyType::Hash)?)
                    .key_schema(key(SORT_KEY, KeyType::Range)?)
                    .local_secondary_indexes(
                        LocalSecondaryIndex::builder()
                            .index_name(SHOWN_INDEX)
                            .key_schema(key(PARTITION_KEY, KeyType::Hash)?)
                            .key_schema(key(SHOWN_SORT_KEY, KeyType::Range)?)
                            .projection(
                                Projection::builder()
                                    .projection_type(ProjectionType::Include)
                                    .non_key_attributes(LISTING)
                                    .build(),
                            )
                            .build()?,
                    )
                    .billing_mode(BillingMode::PayPerRequest),
            )
        })()
        .map_err(|err| {
            self.admin_error(
                "building the CreateTable request failed",
                err,
                Failure::Rejected,
            )
        })?;
        match request.send().await {
            Ok(_) => {}
            // The table exists or is being created: check its schema below.
            Err(err)
                if matches!(
                    err.as_service_error(),
                    Some(CreateTableError::ResourceInUseException(_))
                ) => {}
            Err(err) => {
                let failure = classify(&err, |_| None);
                return Err(self.admin_error(
                    "creating the table failed",
                    DynamoError::new("CreateTable", &self.table, &err),
                    failure,
                ));
            }
        }
        self.wait_until_active().await
    }

    async fn wait_until_active(&self) -> Result<()> {
        let deadline = tokio::time::Instant::now() + TABLE_ACTIVE_TIMEOUT;
        let mut pause = Duration::from_millis(100);
        loop {
            let described = self
                .client
                .describe_table()
                .table_name(&self.table)
                .send()
                .await
                .map_err(|err| {
                    let failure = classify(&err, |_| None);
                    self.admin_error(
                        "describing the table failed",
                        DynamoError::new("DescribeTable", &self.table, &err),
                        failure,
                    )
                })?;
            let table = described.table.ok_or_else(|| {
                Error::new(
                    ErrorKind::StoreUnavailable,
                    format!(
                        "DynamoDB described table `{}` without a description",
                        self.table
                    ),
                )
            })?;
            self.check_schema(&table)?;
            match table.table_status {
                Some(TableStatus::Active | TableStatus::Updating) => return Ok(()),
                Some(TableStatus::Creating) | None => {}
                Some(other) => {
                    return Err(Error::new(
                        ErrorKind::StoreUnavailable,
                        format!("DynamoDB table `{}` is {}", self.table, other.as_str()),
                    ));
                }
            }
            if tokio::time::Instant::now() + pause > deadline {
                return Err(Error::new(
                    ErrorKind::StoreUnavailable,
                    format!(
                        "DynamoDB table `{}` did not become ACTIVE within {} s",
                        self.table,
                        TABLE_ACTIVE_TIMEOUT.as_secs()
                    ),
                ));
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_secs(5));
        }
    }

    fn check_schema(&self, table: &aws_sdk_dynamodb::types::TableDescription) -> Result<()> {
        let key_schema: Vec<(&str, &KeyType)> = table
            .key_schema()
            .iter()
            .map(|k| (k.attribute_name(), k.key_type()))
            .collect();
        let string_attribute = |name: &str| {
            table.attribute_definitions().iter().any(|a| {
                a.attribute_name() == name && *a.attribute_type() == ScalarAttributeType::S
            })
        };
        let expected = [(PARTITION_KEY, &KeyType::Hash), (SORT_KEY, &KeyType::Range)];
        if key_schema == expected && string_attribute(PARTITION_KEY) && string_attribute(SORT_KEY) {
            Ok(())
        } else {
            Err(Error::new(
                ErrorKind::Configuration,
                format!(
                    "DynamoDB table `{}` exists with another key schema ({key_schema:?}); \
                     a catalog table has partition key `pk` (S) and sort key `sk` (S)",
                    self.table
                ),
            ))
        }
    }

    /// The public error of a failed table administration request: refused for good
    /// ([`ErrorKind::StoreRefused`]: access denied, invalid request) or transient.
    fn admin_error(
        &self,
        what: &str,
        source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
        failure: Failure,
    ) -> Error {
        let kind = match failure {
            Failure::Rejected => ErrorKind::StoreRefused,
            _ => ErrorKind::StoreUnavailable,
        };
        Error::with_source(
            kind,
            format!("DynamoDB table `{}`: {what}", self.table),
            source,
        )
    }

    /// A store error for a failed request: `write` says whether it may have changed data.
    fn error<E>(
        &self,
        operation: &'static str,
        err: &SdkError<E, HttpResponse>,
        failure: Failure,
        write: bool,
    ) -> StoreError
    where
        E: std::error::Error + 'static,
    {
        let source = DynamoError::new(operation, &self.table, err);
        match failure {
            Failure::Busy | Failure::NotSent => StoreError::unavailable(source),
            Failure::Unknown if write => StoreError::ambiguous(source),
            Failure::Unknown => StoreError::unavailable(source),
            Failure::Condition | Failure::Cancelled(_) | Failure::Rejected => {
                StoreError::fatal(source)
            }
        }
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

    fn corrupt(&self, key: &str, what: &str) -> StoreError {
        StoreError::fatal(format!(
            "DynamoDB table `{}`: the item of `{key}` is not a pointer record ({what})",
            self.table
        ))
    }

    fn decode_version(
        &self,
        key: &str,
        item: &HashMap<String, AttributeValue>,
    ) -> Result<Version, StoreError> {
        match item.get(VERSION) {
            Some(AttributeValue::N(n)) => match parse_version(n) {
                Some(n) => Ok(Version::new(n.to_string())),
                None => Err(self.corrupt(key, "its version is not a whole number")),
            },
            _ => Err(self.corrupt(key, "it has no numeric `version`")),
        }
    }

    fn decode(
        &self,
        key: &str,
        mut item: HashMap<String, AttributeValue>,
    ) -> Result<Versioned, StoreError> {
        let version = self.decode_version(key, &item)?;
        match item.remove(VALUE) {
            Some(AttributeValue::B(blob)) => Ok(Versioned {
                value: Bytes::from(blob.into_inner()),
                version,
            }),
            _ => Err(self.corrupt(key, "it has no binary `value`")),
        }
    }

    /// The conditional `Put` of one write, and the version it will create.
    fn prepare(
        &self,
        key: &StoreKey,
        value: Bytes,
        mode: &PutMode,
        listing: Listing,
    ) -> Result<(PreparedPut, Version), StoreError> {
        let (pk, sk) = item_key(key.as_str())?;
        let names: usize = [
            PARTITION_KEY,
            SORT_KEY,
            VALUE,
            VERSION,
            SHOWN_SORT_KEY,
            LISTING,
        ]
        .iter()
        .map(|name| name.len())
        .sum();
        let size =
            names + pk.len() + 2 * sk.len() + value.len() + MAX_NUMBER_BYTES + MAX_NUMBER_BYTES;
        if size > MAX_ITEM_BYTES {
            return Err(StoreError::NotSupported(format!(
                "a DynamoDB item holds at most {MAX_ITEM_BYTES} bytes; `{key}` with a value of \
                 {} bytes needs up to {size}",
                value.len()
            )));
        }
        let (version, condition) = match mode {
            PutMode::Create => (1, None),
            PutMode::Update(expected) => {
                let Some(expected) = parse_version(expected.as_str()) else {
                    return Err(StoreError::Precondition);
                };
                let next = expected.checked_add(1).ok_or_else(|| {
                    StoreError::fatal(format!("the version of `{key}` overflows"))
                })?;
                (next, Some(expected))
            }
        };
        let shown_sk = (listing != Listing::Hidden).then(|| sk.clone());
        let mut item = key_attributes(pk, sk);
        item.insert(VALUE.to_owned(), AttributeValue::B(Blob::new(value)));
        item.insert(VERSION.to_owned(), AttributeValue::N(version.to_string()));
        item.insert(
            LISTING.to_owned(),
            AttributeValue::N(listing.code().to_string()),
        );
        if let Some(shown_sk) = shown_sk {
            item.insert(SHOWN_SORT_KEY.to_owned(), AttributeValue::S(shown_sk));
        }
        let put = match condition {
            None => PreparedPut {
                item,
                condition: "attribute_not_exists(pk)",
                names: None,
                values: None,
            },
            Some(expected) => PreparedPut {
                item,
                condition: "#v = :expected",
                names: Some(HashMap::from([("#v".to_owned(), VERSION.to_owned())])),
                values: Some(HashMap::from([(
                    ":expected".to_owned(),
                    AttributeValue::N(expected.to_string()),
                )])),
            },
        };
        Ok((put, Version::new(version.to_string())))
    }

    /// Whether the table has the `shown` index with the documented schema; asked once.
    async fn has_shown_index(&self) -> Result<bool, StoreError> {
        self.shown_index
            .get_or_try_init(|| async {
                let described = self
                    .client
                    .describe_table()
                    .table_name(&self.table)
                    .send()
                    .await
                    .map_err(|err| {
                        let failure = classify(&err, describe_failure);
                        self.error("DescribeTable", &err, failure, false)
                    })?;
                let found = described.table.is_some_and(|table| {
                    table.local_secondary_indexes().iter().any(|index| {
                        let keys: Vec<(&str, &KeyType)> = index
                            .key_schema()
                            .iter()
                            .map(|k| (k.attribute_name(), k.key_type()))
                            .collect();
                        index.index_name() == Some(SHOWN_INDEX)
                            && keys
                                == [
                                    (PARTITION_KEY, &KeyType::Hash),
                                    (SHOWN_SORT_KEY, &KeyType::Range),
                                ]
                    })
                });
                if !found {
                    tracing::warn!(
                        table = %self.table,
                        "the table has no `{SHOWN_INDEX}` local secondary index (created before \
                         listing classes): listings query whole partitions, tombstones included"
                    );
                }
                Ok(found)
            })
            .await
            .copied()
    }

    async fn list_partition(
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
    ) -> Result<aws_sdk_dynamodb::operation::query::QueryOutput, StoreError> {
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

/// The parts of one conditional `Put`, shared by `PutItem` and `TransactWriteItems`.
struct PreparedPut {
    item: HashMap<String, AttributeValue>,
    condition: &'static str,
    names: Option<HashMap<String, String>>,
    values: Option<HashMap<String, AttributeValue>>,
}

#[async_trait]
impl PointerStore for DynamoStore {
    fn describe(&self) -> String {
        format!("dynamodb://{}", self.table)
    }

    fn location(&self) -> Option<String> {
        Some(self.describe())
    }

    async fn get(&self, key: &StoreKey) -> Result<Option<Versioned>, StoreError> {
        match self.get_item(key, false).await? {
            Some(item) => Ok(Some(self.decode(key.as_str(), item)?)),
            None => Ok(None),
        }
    }

    async fn put(
        &self,
        key: &StoreKey,
        value: Bytes,
        mode: PutMode,
    ) -> Result<Version, StoreError> {
        self.put_listed(key, value, mode, Listing::Check).await
    }

    async fn put_listed(
        &self,
        key: &StoreKey,
        value: Bytes,
        mode: PutMode,
        listing: Listing,
    ) -> Result<Version, StoreError> {
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

    async fn list(
        &self,
        prefix: &StoreKey,
        start_after: Option<&StoreKey>,
        limit: usize,
    ) -> Result<ListPage, StoreError> {
        self.list_partition(prefix, start_after, limit, false).await
    }

    async fn list_shown(
        &self,
        prefix: &StoreKey,
        start_after: Option<&StoreKey>,
        limit: usize,
    ) -> Result<ListPage, StoreError> {
        let shown = self.has_shown_index().await?;
        self.list_partition(prefix, start_after, limit, shown).await
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            atomic_multi_key_write: true,
        }
    }

    async fn get_if_changed(
        &self,
        key: &StoreKey,
        version: &Version,
    ) -> Result<Changed, StoreError> {
        let Some(item) = self.get_item(key, true).await? else {
            return Ok(Changed::Missing);
        };
        if self.decode_version(key.as_str(), &item)? == *version {
            return Ok(Changed::Unchanged);
        }
        Ok(match self.get(key).await? {
            Some(current) => Changed::Changed(current),
            None => Changed::Missing,
        })
    }

    async fn transact(&self, writes: Vec<TxWrite>) -> Result<Vec<Version>, StoreError> {
        if writes.is_empty() {
            return Ok(Vec::new());
        }
        if writes.len() > MAX_TRANSACTION_WRITES {
            return Err(StoreError::NotSupported(format!(
                "a DynamoDB transaction holds at most {MAX_TRANSACTION_WRITES} writes, got {}",
                writes.len()
            )));
        }
        let mut keys: Vec<&StoreKey> = writes.iter().map(|w| &w.key).collect();
        keys.sort();
        keys.dedup();
        if keys.len() != writes.len() {
            return Err(StoreError::fatal(
                "a transaction writes each key at most once",
            ));
        }
        let token = request_token(&self.table, &writes);
        let mut items = Vec::with_capacity(writes.len());
        let mut versions = Vec::with_capacity(writes.len());
        for write in writes {
            let (put, version) =
                self.prepare(&write.key, write.value, &write.mode, write.listing)?;
            let put = Put::builder()
                .table_name(&self.table)
                .set_item(Some(put.item))
                .condition_expression(put.condition)
                .set_expression_attribute_names(put.names)
                .set_expression_attribute_values(put.values)
                .build()
                .map_err(StoreError::fatal)?;
            items.push(TransactWriteItem::builder().put(put).build());
            versions.push(version);
        }
        let sent = self
            .client
            .transact_write_items()
            .set_transact_items(Some(items))
            .client_request_token(token)
            .send()
            .await;
        let err = match sent {
            Ok(_) => return Ok(versions),
            Err(err) => err,
        };
        match classify(&err, transact_failure) {
            Failure::Cancelled(reasons) => {
                let has = |code: &str| reasons.iter().any(|r| r == code);
                if has("ConditionalCheckFailed") {
                    Err(StoreError::Precondition)
                } else if has("TransactionConflict")
                    || has("ThrottlingError")
                    || has("ProvisionedThroughputExceeded")
                {
                    Err(self.error("TransactWriteItems", &err, Failure::Busy, true))
                } else {
                    Err(self.error("TransactWriteItems", &err, Failure::Rejected, true))
                }
            }
            Failure::Condition => Err(StoreError::Precondition),
            failure => Err(self.error("TransactWriteItems", &err, failure, true)),
        }
    }
}

/// What a failed request means for the caller, before it becomes a [`StoreError`].
#[derive(Debug)]
enum Failure {
    /// The request's condition failed.
    Condition,
    /// The transaction was cancelled, with these reason codes.
    Cancelled(Vec<String>),
    /// Throttled or in conflict with another transaction: not applied, retry later.
    Busy,
    /// The request was never sent (connection refused): not applied, retry later.
    NotSent,
    /// Maybe applied: a 5xx, a timeout, a broken connection, an unreadable response.
    Unknown,
    /// Refused for good: missing table, invalid request, access denied.
    Rejected,
}

fn classify<E>(err: &SdkError<E, HttpResponse>, service: fn(&E) -> Option<Failure>) -> Failure {
    match err {
        SdkError::ConstructionFailure(_) => Failure::Rejected,
        SdkError::TimeoutError(_) | SdkError::ResponseError(_) => Failure::Unknown,
        SdkError::DispatchFailure(failure) => match failure.as_connector_error() {
            Some(connector) if connection_refused(connector) => Failure::NotSent,
            _ if failure.is_user() => Failure::Rejected,
            _ => Failure::Unknown,
        },
        SdkError::ServiceError(context) => service(context.err()).unwrap_or_else(|| {
            if context.raw().status().is_server_error() {
                Failure::Unknown
            } else {
                Failure::Rejected
            }
        }),
        _ => Failure::Unknown,
    }
}

/// Whether a connection was refused somewhere in the chain: the request was never sent.
fn connection_refused(err: &(dyn std::error::Error + 'static)) -> bool {
    let mut cause = Some(err);
    while let Some(err) = cause {
        if let Some(io) = err.downcast_ref::<std::io::Error>()
            && io.kind() == std::io::ErrorKind::ConnectionRefused
        {
            return true;
        }
        cause = err.source();
    }
    false
}

fn get_failure(err: &GetItemError) -> Option<Failure> {
    match err {
        GetItemError::ProvisionedThroughputExceededException(_)
        | GetItemError::RequestLimitExceeded(_)
        | GetItemError::ThrottlingException(_) => Some(Failure::Busy),
        GetItemError::InternalServerError(_) => Some(Failure::Unknown),
        GetItemError::ResourceNotFoundException(_) | GetItemError::InvalidEndpointException(_) => {
            Some(Failure::Rejected)
        }
        _ => None,
    }
}

fn describe_failure(err: &DescribeTableError) -> Option<Failure> {
    match err {
        DescribeTableError::InternalServerError(_) => Some(Failure::Unknown),
        DescribeTableError::ResourceNotFoundException(_)
        | DescribeTableError::InvalidEndpointException(_) => Some(Failure::Rejected),
        _ => None,
    }
}

fn query_failure(err: &QueryError) -> Option<Failure> {
    match err {
        QueryError::ProvisionedThroughputExceededException(_)
        | QueryError::RequestLimitExceeded(_)
        | QueryError::ThrottlingException(_) => Some(Failure::Busy),
        QueryError::InternalServerError(_) => Some(Failure::Unknown),
        QueryError::ResourceNotFoundException(_) | QueryError::InvalidEndpointException(_) => {
            Some(Failure::Rejected)
        }
        _ => None,
    }
}

fn put_failure(err: &PutItemError) -> Option<Failure> {
    match err {
        PutItemError::ConditionalCheckFailedException(_) => Some(Failure::Condition),
        PutItemError::ProvisionedThroughputExceededException(_)
        | PutItemError::RequestLimitExceeded(_)
        | PutItemError::ThrottlingException(_)
        | PutItemError::TransactionConflictException(_)
        | PutItemError::ReplicatedWriteConflictException(_) => Some(Failure::Busy),
        PutItemError::InternalServerError(_) => Some(Failure::Unknown),
        PutItemError::ResourceNotFoundException(_)
        | PutItemError::InvalidEndpointException(_)
        | PutItemError::ItemCollectionSizeLimitExceededException(_) => Some(Failure::Rejected),
        _ => None,
    }
}

fn transact_failure(err: &TransactWriteItemsError) -> Option<Failure> {
    match err {
        TransactWriteItemsError::TransactionCanceledException(cancelled) => {
            Some(Failure::Cancelled(
                cancelled
                    .cancellation_reasons()
                    .iter()
                    .filter_map(|reason| reason.code().map(str::to_owned))
                    .collect(),
            ))
        }
        TransactWriteItemsError::ProvisionedThroughputExceededException(_)
        | TransactWriteItemsError::RequestLimitExceeded(_)
        | TransactWriteItemsError::ThrottlingException(_) => Some(Failure::Busy),
        // The first attempt of this very transaction is still running.
        TransactWriteItemsError::TransactionInProgressException(_)
        | TransactWriteItemsError::InternalServerError(_) => Some(Failure::Unknown),
        TransactWriteItemsError::ResourceNotFoundException(_)
        | TransactWriteItemsError::InvalidEndpointException(_)
        | TransactWriteItemsError::IdempotentParameterMismatchException(_) => {
            Some(Failure::Rejected)
        }
        _ => None,
    }
}

/// A failed DynamoDB request, as text: SDK types never leave this module.
#[derive(Debug)]
struct DynamoError {
    operation: &'static str,
    table: String,
    detail: String,
}

impl DynamoError {
    fn new<E, R>(operation: &'static str, table: &str, err: &SdkError<E, R>) -> Self
    where
        E: std::error::Error + 'static,
        R: fmt::Debug,
    {
        DynamoError {
            operation,
            table: table.to_owned(),
            detail: DisplayErrorContext(err).to_string(),
        }
    }
}

impl fmt::Display for DynamoError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "DynamoDB {} on table `{}` failed: {}",
            self.operation, self.table, self.detail
        )
    }
}

impl std::error::Error for DynamoError {}

/// The partition and sort key of a store key (see the module docs).
fn item_key(key: &str) -> Result<(String, String), StoreError> {
    let (pk, leaf) = match key.find('=') {
        Some(at) => key.split_at(at + 1),
        None => (key, ""),
    };
    let sk = if leaf.is_empty() { NO_LEAF } else { leaf };
    check_key_sizes(key, pk, sk)?;
    Ok((pk.to_owned(), sk.to_owned()))
}

fn check_key_sizes(key: &str, pk: &str, sk: &str) -> Result<(), StoreError> {
    if pk.len() > MAX_PK_BYTES || sk.len() > MAX_SK_BYTES {
        return Err(StoreError::NotSupported(format!(
            "`{key}` does not fit a DynamoDB item key: partition key of {} bytes (at most \
             {MAX_PK_BYTES}), sort key of {} bytes (at most {MAX_SK_BYTES})",
            pk.len(),
            sk.len()
        )));
    }
    Ok(())
}

/// The key attributes of an item.
fn key_attributes(pk: String, sk: String) -> HashMap<String, AttributeValue> {
    HashMap::from([
        (PARTITION_KEY.to_owned(), AttributeValue::S(pk)),
        (SORT_KEY.to_owned(), AttributeValue::S(sk)),
    ])
}

/// The store key of an item, if the item is one this store wrote.
fn key_of_item(item: &HashMap<String, AttributeValue>) -> Option<StoreKey> {
    let (Some(AttributeValue::S(pk)), Some(AttributeValue::S(sk))) =
        (item.get(PARTITION_KEY), item.get(SORT_KEY))
    else {
        return None;
    };
    let text = if sk == NO_LEAF {
        pk.clone()
    } else {
        format!("{pk}{sk}")
    };
    let key = StoreKey::new(text).ok()?;
    // Only the canonical split decodes, so a foreign item never aliases a real key.
    match item_key(key.as_str()) {
        Ok((p, s)) if p == *pk && s == *sk => Some(key),
        _ => None,
    }
}

/// A version token as this store writes it: a canonical decimal number.
fn parse_version(token: &str) -> Option<u64> {
    let n: u64 = token.parse().ok()?;
    (n.to_string() == token).then_some(n)
}

/// The client configuration of [`DynamoStore::from_env_with`]: aws-config's standard chain
/// (environment, profiles, SSO, web identity, container and instance credentials).
#[cfg(feature = "credential-chain")]
async fn client_config(
    endpoint: Option<&str>,
    timeouts: TimeoutConfig,
    retries: RetryConfig,
) -> Result<aws_sdk_dynamodb::Config> {
    let mut loader = aws_config::defaults(BehaviorVersion::latest())
        .timeout_config(timeouts)
        .retry_config(retries);
    if let Some(endpoint) = endpoint {
        loader = loader.endpoint_url(endpoint);
    }
    let config = loader.load().await;
    if config.region().is_none() {
        return Err(Error::new(
            ErrorKind::Configuration,
            "no AWS region is configured for DynamoDB: set AWS_REGION or a profile region",
        ));
    }
    Ok(aws_sdk_dynamodb::Config::from(&config))
}

/// The client configuration of [`DynamoStore::from_env_with`] without the
/// `credential-chain` feature (the Lambda functions): region, credentials and endpoint
/// from the environment only, which is where Lambda puts them (`AWS_REGION` or
/// `AWS_DEFAULT_REGION`; `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`;
/// `AWS_ENDPOINT_URL_DYNAMODB` or `AWS_ENDPOINT_URL`). This leaves aws-config and the STS
/// client out of the binary.
#[cfg(not(feature = "credential-chain"))]
async fn client_config(
    endpoint: Option<&str>,
    timeouts: TimeoutConfig,
    retries: RetryConfig,
) -> Result<aws_sdk_dynamodb::Config> {
    use aws_sdk_dynamodb::config::{Credentials, Region};

    let var = |name: &str| std::env::var(name).ok().filter(|value| !value.is_empty());
    let missing = |what: &str| {
        Error::new(
            ErrorKind::Configuration,
            format!(
                "no {what} is configured for DynamoDB: this build reads the environment only \
                 (the `credential-chain` feature adds profiles and instance credentials)"
            ),
        )
    };
    let region = var("AWS_REGION")
        .or_else(|| var("AWS_DEFAULT_REGION"))
        .ok_or_else(|| missing("region (AWS_REGION)"))?;
    let (Some(key_id), Some(secret)) = (var("AWS_ACCESS_KEY_ID"), var("AWS_SECRET_ACCESS_KEY"))
    else {
        return Err(missing(
            "credentials (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)",
        ));
    };
    let credentials = Credentials::new(
        key_id,
        secret,
        var("AWS_SESSION_TOKEN"),
        None,
        "environment",
    );
    let mut builder = aws_sdk_dynamodb::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new(region))
        .credentials_provider(credentials)
        .timeout_config(timeouts)
        .retry_config(retries);
    let endpoint = endpoint
        .map(str::to_owned)
        .or_else(|| var("AWS_ENDPOINT_URL_DYNAMODB"))
        .or_else(|| var("AWS_ENDPOINT_URL"));
    if let Some(endpoint) = endpoint {
        builder = builder.endpoint_url(endpoint);
    }
    Ok(builder.build())
}

/// A DynamoDB table name: 3 to 255 of `[A-Za-z0-9_.-]`.
fn check_table_name(table: &str) -> Result<()> {
    let valid = (3..=255).contains(&table.len())
        && table
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'));
    if valid {
        Ok(())
    } else {
        Err(Error::new(
            ErrorKind::Configuration,
            format!("`{table}` is not a DynamoDB table name (3 to 255 of A-Z a-z 0-9 _ . -)"),
        ))
    }
}

/// The `ClientRequestToken` of a transaction: a 128-bit FNV-1a hash of the table and the
/// writes, so that a retry of the same transaction reuses it. DynamoDB compares the
/// parameters of requests that share a token, so a (vanishingly unlikely) collision fails
/// with `IdempotentParameterMismatchException` instead of skipping a write.
fn request_token(table: &str, writes: &[TxWrite]) -> String {
    const OFFSET: u128 = 0x6c62_272e_07bb_0142_62b8_2175_6295_c58d;
    const PRIME: u128 = 0x0000_0000_0100_0000_0000_0000_0000_013b;
    let mut hash = OFFSET;
    let mut feed = |bytes: &[u8]| {
        // Length-prefixed, so that field boundaries are part of the hash.
        for &byte in (bytes.len() as u64).to_le_bytes().iter().chain(bytes) {
            hash ^= u128::from(byte);
            hash = hash.wrapping_mul(PRIME);
        }
    };
    feed(b"parqdb-transact-v1");
    feed(table.as_bytes());
    for write in writes {
        feed(write.key.as_str().as_bytes());
        match &write.mode {
            PutMode::Create => feed(b"create"),
            PutMode::Update(version) => {
                feed(b"update");
                feed(version.as_str().as_bytes());
            }
        }
        feed(&write.value);
        feed(&[write.listing.code()]);
    }
    format!("{hash:032x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(key: &str) -> (String, String) {
        item_key(key).expect("fits")
    }

    #[test]
    fn keys_map_to_the_documented_items() {
        assert_eq!(split("i/a/b/=x"), ("i/a/b/=".into(), "x".into()));
        assert_eq!(split("n/a/=b"), ("n/a/=".into(), "b".into()));
        assert_eq!(split("n/=a"), ("n/=".into(), "a".into()));
        assert_eq!(
            split("_probe/7f3e/=k"),
            ("_probe/7f3e/=".into(), "k".into())
        );
        assert_eq!(
            split("_catalog/owner"),
            ("_catalog/owner".into(), "!".into())
        );
        assert_eq!(split("a/="), ("a/=".into(), "!".into()));
        assert_eq!(split("a=/b=c"), ("a=".into(), "/b=c".into()));
    }

    #[test]
    fn items_decode_to_their_keys_and_only_canonical_items_decode() {
        for key in ["i/a/b/=x", "_catalog/owner", "a/=", "a=/b=c", "t/=+x"] {
            let (pk, sk) = split(key);
            let item = HashMap::from([
                (PARTITION_KEY.to_owned(), AttributeValue::S(pk)),
                (SORT_KEY.to_owned(), AttributeValue::S(sk)),
            ]);
            assert_eq!(
                key_of_item(&item).map(|k| k.as_str().to_owned()),
                Some(key.to_owned())
            );
        }
        for (pk, sk) in [
            ("i/a/", "=x"),
            ("a", "b"),
            ("a/=", ""),
            ("A/=", "x"),
            ("a/=", "."),
        ] {
            let item = HashMap::from([
                (PARTITION_KEY.to_owned(), AttributeValue::S(pk.into())),
                (SORT_KEY.to_owned(), AttributeValue::S(sk.into())),
            ]);
            assert!(key_of_item(&item).is_none(), "{pk} {sk} decoded");
        }
    }

    #[test]
    fn the_no_leaf_sort_key_sorts_before_every_leaf() {
        for c in ['+', '-', '/', '0', '=', '_', 'a', '~'] {
            assert!(NO_LEAF < c.to_string().as_str(), "{c}");
        }
    }

    #[test]
    fn oversized_item_keys_are_typed_errors() {
        let err = check_key_sizes("k", &"p".repeat(MAX_PK_BYTES + 1), "s").expect_err("too long");
        assert!(matches!(err, StoreError::NotSupported(_)), "{err:?}");
        let err = check_key_sizes("k", "p", &"s".repeat(MAX_SK_BYTES + 1)).expect_err("too long");
        assert!(matches!(err, StoreError::NotSupported(_)), "{err:?}");
        assert!(check_key_sizes("k", &"p".repeat(MAX_PK_BYTES), &"s".repeat(MAX_SK_BYTES)).is_ok());
        // Every valid store key fits.
        let longest = format!("a/={}", "x".repeat(1021));
        assert!(item_key(StoreKey::new(longest).expect("1024 bytes").as_str()).is_ok());
    }

    #[test]
    fn versions_are_canonical_numbers() {
        assert_eq!(parse_version("1"), Some(1));
        assert_eq!(parse_version("18446744073709551615"), Some(u64::MAX));
        for bad in [
            "",
            "01",
            "+1",
            "-1",
            "1.0",
            "\"1\"",
            "x",
            "18446744073709551616",
        ] {
            assert_eq!(parse_version(bad), None, "{bad}");
        }
    }

    #[test]
    fn request_tokens_are_deterministic_and_fit_dynamodb() {
        let write = |key: &str, value: &'static [u8], mode: PutMode| TxWrite {
            key: StoreKey::new(key).expect("key"),
            value: Bytes::from_static(value),
            mode,
            listing: Listing::Check,
        };
        let a = vec![
            write("x/=a", b"1", PutMode::Create),
            write("x/=b", b"2", PutMode::Update(Version::new("3"))),
        ];
        let token = request_token("t", &a);
        assert_eq!(token.len(), 32);
        assert!(token.len() <= 36 && token.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_eq!(token, request_token("t", &a.clone()));
        assert_ne!(token, request_token("u", &a));
        let b = vec![
            write("x/=a", b"1", PutMode::Create),
            write("x/=b", b"2", PutMode::Update(Version::new("4"))),
        ];
        assert_ne!(token, request_token("t", &b));
        let c = vec![write("x/=a", b"12", PutMode::Create)];
        let d = vec![write("x/=a1", b"2", PutMode::Create)];
        assert_ne!(request_token("t", &c), request_token("t", &d));
    }

    #[test]
    fn table_names_are_checked() {
        assert!(check_table_name("parqdb-catalog").is_ok());
        assert!(check_table_name("a.b_C-9").is_ok());
        for bad in ["", "ab", "a b", "a/b", &"x".repeat(256)] {
            let err = check_table_name(bad).expect_err("invalid");
            assert_eq!(err.kind(), ErrorKind::Configuration);
        }
    }
}
