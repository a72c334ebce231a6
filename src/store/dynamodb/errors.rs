//! SDK errors as store errors: what a failed request means for the caller (see "Errors
//! and retries" in the [module docs](super)). SDK types never leave the store.

use std::fmt;

use aws_sdk_dynamodb::config::http::HttpResponse;
use aws_sdk_dynamodb::error::{DisplayErrorContext, SdkError};
use aws_sdk_dynamodb::operation::describe_table::DescribeTableError;
use aws_sdk_dynamodb::operation::get_item::GetItemError;
use aws_sdk_dynamodb::operation::put_item::PutItemError;
use aws_sdk_dynamodb::operation::query::QueryError;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;

use super::DynamoStore;
use crate::store::StoreError;

impl DynamoStore {
    /// A store error for a failed request: `write` says whether it may have changed data.
    pub(super) fn error<E>(
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
}

/// What a failed request means for the caller, before it becomes a [`StoreError`].
#[derive(Debug)]
pub(super) enum Failure {
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

pub(super) fn classify<E>(
    err: &SdkError<E, HttpResponse>,
    service: fn(&E) -> Option<Failure>,
) -> Failure {
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

pub(super) fn get_failure(err: &GetItemError) -> Option<Failure> {
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

pub(super) fn describe_failure(err: &DescribeTableError) -> Option<Failure> {
    match err {
        DescribeTableError::InternalServerError(_) => Some(Failure::Unknown),
        DescribeTableError::ResourceNotFoundException(_)
        | DescribeTableError::InvalidEndpointException(_) => Some(Failure::Rejected),
        _ => None,
    }
}

pub(super) fn query_failure(err: &QueryError) -> Option<Failure> {
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

pub(super) fn put_failure(err: &PutItemError) -> Option<Failure> {
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

pub(super) fn transact_failure(err: &TransactWriteItemsError) -> Option<Failure> {
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
pub(super) struct DynamoError {
    operation: &'static str,
    table: String,
    detail: String,
}

impl DynamoError {
    pub(super) fn new<E, R>(operation: &'static str, table: &str, err: &SdkError<E, R>) -> Self
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
