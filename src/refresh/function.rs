//! [`LambdaBuilder`]: the refresh's builder as a Lambda function of its own.

use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_lambda::Client;
use aws_sdk_lambda::config::retry::RetryConfig;
use aws_sdk_lambda::config::timeout::TimeoutConfig;
use aws_sdk_lambda::config::{BehaviorVersion, Region};
use aws_sdk_lambda::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use aws_sdk_lambda::primitives::Blob;
use aws_sdk_lambda::types::InvocationType;
use serde::Deserialize;

use super::contract::{BuildFunctionRequest, BuildFunctionResponse};
use super::{BuildRequest, IndexBuilder};
use crate::aws_environment;
use crate::error::{Error, ErrorKind, Result};
use crate::metadata::SnapshotContents;

/// How long connecting to the Lambda API may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// An [`IndexBuilder`] that invokes a Lambda function (the user's
/// builder) under the [build contract](super::contract), so the deployed `refresh`
/// function runs a real build without being recompiled.
///
/// One synchronous `Invoke` (RequestResponse) per index and batch, bounded by the
/// builder timeout and never retried by the client: a build that fails or times out fails
/// the index (its messages are reported in `batchItemFailures`, SQS delivers them again
/// after the queue's visibility timeout, and after `RefreshMaxReceiveCount` deliveries
/// they move to the dead-letter queue). A builder still running when the timeout fires
/// may finish and write its tables, but only the refresh publishes, so they stay
/// unreferenced orphans for the garbage collector.
///
/// | what happened | error |
/// |---|---|
/// | the answer breaks the contract (unknown or ill-typed field, other version, other build id) | `INVALID_CONFIGURATION` |
/// | a function error `INVALID_REQUEST` (the builder refused the request: the two sides disagree on the contract) | `INVALID_CONFIGURATION` |
/// | any other function error (`Runtime.ExitError`, `Sandbox.Timedout`, the builder's own types and codes) | `STORE_UNAVAILABLE` (retryable) |
/// | no answer within the builder timeout | `STORE_UNAVAILABLE` (retryable) |
/// | throttled, or the request failed in transit | `STORE_UNAVAILABLE` (retryable) |
/// | no such function, access denied | `INVALID_CONFIGURATION` |
/// | the request is larger than Lambda accepts | `INVALID_REQUEST` |
#[derive(Debug, Clone)]
pub struct LambdaBuilder {
    client: Client,
    function: String,
    timeout: Duration,
}

/// Why a build through the function failed (converted into the public [`Error`]).
#[derive(Debug)]
enum BuildFunctionError {
    /// The answer is not a response of the contract.
    Contract(Error),
    /// The function answered an error.
    FunctionError { error_type: String, message: String },
    /// No answer within the timeout.
    TimedOut(Duration),
    /// The invocation failed before the function answered.
    Invoke {
        kind: ErrorKind,
        code: Option<String>,
        detail: String,
    },
}

impl BuildFunctionError {
    fn into_error(self, function: &str) -> Error {
        match self {
            BuildFunctionError::Contract(err) => Error::new(
                err.kind(),
                format!(
                    "the builder function `{function}` does not speak the build contract: {}",
                    err.message()
                ),
            ),
            BuildFunctionError::FunctionError {
                error_type,
                message,
            } => Error::new(
                if error_type == ErrorKind::InvalidRequest.code() {
                    ErrorKind::Configuration
                } else {
                    ErrorKind::StoreUnavailable
                },
                format!("the builder function `{function}` failed ({error_type}): {message}"),
            ),
            BuildFunctionError::TimedOut(timeout) => Error::new(
                ErrorKind::StoreUnavailable,
                format!(
                    "the builder function `{function}` did not answer within {}",
                    humantime::format_duration(timeout)
                ),
            ),
            BuildFunctionError::Invoke { kind, code, detail } => Error::new(
                kind,
                format!(
                    "invoking the builder function `{function}` failed ({}): {detail}",
                    code.as_deref().unwrap_or("no error code")
                ),
            ),
        }
    }
}

/// A function error's payload (`{"errorType", "errorMessage"}`, other fields ignored).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct FunctionErrorBody {
    #[serde(default)]
    error_type: Option<String>,
    #[serde(default)]
    error_message: Option<String>,
}

impl LambdaBuilder {
    /// Invoke `function` (a name or ARN, optionally qualified) with `client`, waiting at
    /// most `timeout` for each build. The client's own retries and timeouts are replaced:
    /// one attempt, bounded by `timeout`.
    pub fn new(client: &Client, function: impl Into<String>, timeout: Duration) -> LambdaBuilder {
        let config = client
            .config()
            .to_builder()
            .retry_config(RetryConfig::disabled())
            .timeout_config(
                TimeoutConfig::builder()
                    .connect_timeout(CONNECT_TIMEOUT)
                    .operation_timeout(timeout)
                    .operation_attempt_timeout(timeout)
                    .build(),
            )
            .build();
        LambdaBuilder {
            client: Client::from_conf(config),
            function: function.into(),
            timeout,
        }
    }

    /// [`LambdaBuilder::new`] with a client configured from the environment only, as
    /// Lambda provides it: `AWS_REGION` (or `AWS_DEFAULT_REGION`), `AWS_ACCESS_KEY_ID`,
    /// `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`, and `AWS_ENDPOINT_URL_LAMBDA` (or
    /// `AWS_ENDPOINT_URL`) for another endpoint. `INVALID_CONFIGURATION` without a region
    /// or credentials, or for an empty function name.
    pub fn from_env(function: &str, timeout: Duration) -> Result<LambdaBuilder> {
        if function.is_empty() {
            return Err(Error::new(
                ErrorKind::Configuration,
                "no function name is configured for invoking the builder function",
            ));
        }
        let (region, credentials) =
            aws_environment::region_and_credentials("for invoking the builder function")?;
        let mut config = aws_sdk_lambda::Config::builder()
            .behavior_version(BehaviorVersion::latest())
            .region(Region::new(region))
            .credentials_provider(credentials);
        if let Some(endpoint) = aws_environment::endpoint("LAMBDA") {
            config = config.endpoint_url(endpoint);
        }
        Ok(LambdaBuilder::new(
            &Client::from_conf(config.build()),
            function,
            timeout,
        ))
    }

    /// The function invoked.
    pub fn function(&self) -> &str {
        &self.function
    }

    async fn invoke(
        &self,
        request: &BuildRequest<'_>,
    ) -> std::result::Result<SnapshotContents, BuildFunctionError> {
        let body = BuildFunctionRequest::new(request).to_json_vec();
        let sent = self
            .client
            .invoke()
            .function_name(&self.function)
            .invocation_type(InvocationType::RequestResponse)
            .payload(Blob::new(body))
            .send()
            .await;
        let output = match sent {
            Ok(output) => output,
            Err(SdkError::TimeoutError(_)) => {
                return Err(BuildFunctionError::TimedOut(self.timeout));
            }
            Err(err) => {
                let code = err.code().map(str::to_owned);
                let kind = match code.as_deref() {
                    Some(
                        "ResourceNotFoundException"
                        | "AccessDeniedException"
                        | "InvalidParameterValueException",
                    ) => ErrorKind::Configuration,
                    Some("RequestTooLargeException") => ErrorKind::InvalidRequest,
                    _ => ErrorKind::StoreUnavailable,
                };
                return Err(BuildFunctionError::Invoke {
                    kind,
                    code,
                    detail: DisplayErrorContext(&err).to_string(),
                });
            }
        };
        let payload = output.payload().map(Blob::as_ref).unwrap_or_default();
        if output.function_error().is_some() {
            let body: Option<FunctionErrorBody> = serde_json::from_slice(payload).ok();
            let (error_type, message) = match body {
                Some(body) => (
                    body.error_type.unwrap_or_else(|| "Unhandled".to_owned()),
                    body.error_message.unwrap_or_default(),
                ),
                None => (
                    "Unhandled".to_owned(),
                    String::from_utf8_lossy(payload).into_owned(),
                ),
            };
            return Err(BuildFunctionError::FunctionError {
                error_type,
                message,
            });
        }
        BuildFunctionResponse::from_json_slice(payload, request.build_id)
            .map(|response| response.snapshot)
            .map_err(BuildFunctionError::Contract)
    }
}

#[async_trait]
impl IndexBuilder for LambdaBuilder {
    async fn build(&self, request: &BuildRequest<'_>) -> Result<SnapshotContents> {
        self.invoke(request)
            .await
            .map_err(|err| err.into_error(&self.function))
    }
}
