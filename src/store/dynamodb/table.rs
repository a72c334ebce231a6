//! The table: creating it with the documented schema, and what its description says.

use std::time::Duration;

use aws_sdk_dynamodb::config::http::HttpResponse;
use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::create_table::CreateTableError;
use aws_sdk_dynamodb::operation::describe_table::{DescribeTableError, DescribeTableOutput};
use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, KeySchemaElement, KeyType, LocalSecondaryIndex, Projection,
    ProjectionType, ScalarAttributeType, TableStatus,
};

use super::errors::{DynamoError, Failure, classify, describe_failure};
use super::{DynamoStore, LISTING, PARTITION_KEY, SHOWN_INDEX, SHOWN_SORT_KEY, SORT_KEY};
use crate::error::{Error, ErrorKind, Result};
use crate::store::StoreError;

/// How long [`DynamoStore::create_table`] waits for the table to become `ACTIVE`.
const TABLE_ACTIVE_TIMEOUT: Duration = Duration::from_secs(300);

impl DynamoStore {
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
            let described = self.describe_table().await.map_err(|err| {
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

    /// The table's description (`DescribeTable`).
    async fn describe_table(
        &self,
    ) -> std::result::Result<DescribeTableOutput, SdkError<DescribeTableError, HttpResponse>> {
        self.client
            .describe_table()
            .table_name(&self.table)
            .send()
            .await
    }

    /// The table's location as ownership binds it (see [`PointerStore::location`]):
    /// `dynamodb://TABLE?region=R&account=A&created=MS`, the region as the client is
    /// configured (else the ARN's), the account from the table's ARN and its creation time
    /// in epoch milliseconds. A description without an ARN or a creation time is
    /// [`StoreError::NotSupported`]: a location that leaves them out would let a copy pass.
    ///
    /// [`PointerStore::location`]: crate::store::PointerStore::location
    pub(super) async fn bound_location(&self) -> Result<String, StoreError> {
        let described = self.describe_table().await.map_err(|err| {
            let failure = classify(&err, describe_failure);
            self.error("DescribeTable", &err, failure, false)
        })?;
        let table = described.table;
        let table_arn = table.as_ref().and_then(|table| table.table_arn());
        // arn:<partition>:dynamodb:<region>:<account>:table/<name>
        let mut arn = table_arn.unwrap_or_default().split(':').skip(3);
        let (arn_region, account) = (arn.next(), arn.next());
        let created = table
            .as_ref()
            .and_then(|table| table.creation_date_time())
            .and_then(|time| time.to_millis().ok());
        let configured = self
            .client
            .config()
            .region()
            .map(|region| region.to_string());
        match (configured.as_deref().or(arn_region), account, created) {
            (Some(region), Some(account), Some(created))
                if !region.is_empty() && !account.is_empty() =>
            {
                Ok(format!(
                    "dynamodb://{}?region={region}&account={account}&created={created}",
                    self.table
                ))
            }
            _ => Err(StoreError::NotSupported(format!(
                "binding a warehouse to the table: DescribeTable answered without its region, account (ARN {table_arn:?}) or creation time"
            ))),
        }
    }

    /// Whether the table has the `shown` index with the documented schema; asked once.
    pub(super) async fn has_shown_index(&self) -> Result<bool, StoreError> {
        self.shown_index
            .get_or_try_init(|| async {
                let described = self.describe_table().await.map_err(|err| {
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
}
