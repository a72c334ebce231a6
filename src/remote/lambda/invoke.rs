//! One `Invoke` (RequestResponse) with retries, and the classification of every way it
//! can end.
//!
//! SDK-level retries are disabled on the client: the SDK would re-send a timed-out
//! invocation, which for a mutation could run it twice without anyone noticing. Instead
//! each attempt's failure is classified here:
//!
//! | what happened                                                            | class        |
//! |--------------------------------------------------------------------------|--------------|
//! | `200` with a payload                                                     | answer       |
//! | function error whose `errorType` is a catalog code (`COMMIT_CONFLICT`, ...) | typed error |
//! | function error `COMMIT_STATE_UNKNOWN` (the function ran out of time after sending a pointer write, or could not resolve one) | may have run |
//! | function error with any other `errorType` (`Runtime.ExitError`, `Sandbox.Timedout`, no type) | may have run |
//! | `429` / `TooManyRequestsException`, `EC2ThrottledException`, a function not ready yet | retry |
//! | the request never left: failed before transmit (credentials, signing), or the connection was refused | retry (refused) or final |
//! | no such function, access denied (`INVALID_CONFIGURATION`), request too large (`INVALID_REQUEST`), other `4xx` (`STORE_REFUSED`) | final, did not run |
//! | `5xx`: a start-up failure of the execution environment (ENI, KMS, EFS mount, ...) | final, did not run (`STORE_REFUSED`) |
//! | other `5xx` (`ServiceException`), a timeout, a broken connection or response | may have run |
//!
//! Reads retry "may have run" with backoff too; mutations hand it to the caller, which
//! resolves it by reading back (see [`super`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use aws_sdk_lambda::Client;
use aws_sdk_lambda::config::interceptors::BeforeTransmitInterceptorContextRef;
use aws_sdk_lambda::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_sdk_lambda::error::{BoxError, DisplayErrorContext, ProvideErrorMetadata, SdkError};
use aws_sdk_lambda::operation::invoke::{InvokeError, InvokeOutput};
use aws_sdk_lambda::primitives::Blob;
use aws_sdk_lambda::types::InvocationType;
use serde::Deserialize;
use serde_json::Value;

use super::names::FunctionNames;
use crate::catalog::RetryPolicy;
use crate::clock::IdGenerator;
use crate::error::{Error, ErrorKind, Result};
use crate::lambda::Operation;
use crate::lambda::event::Request;

/// How an invocation that did not answer ended.
#[derive(Debug)]
pub(super) enum Failure {
    /// The function answered this error, or the invocation certainly did not run: final.
    Final(Error),
    /// The function may have run (and a mutation may have applied); the detail says why
    /// the outcome is unknown.
    Ambiguous(String),
}

/// Whether retrying an attempt whose outcome is unknown is safe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Idempotence {
    /// A read: retry anything transient.
    Read,
    /// A mutation: retry only what certainly did not run.
    Mutation,
}

/// The classification of one attempt.
enum Attempt {
    Answer(Value),
    Final(Error),
    /// Did not run; retrying may help.
    Retry(String),
    /// May have run.
    Ambiguous(String),
}

/// Invokes the functions of one deployment.
#[derive(Debug, Clone)]
pub(super) struct Invoker {
    pub client: Client,
    pub names: FunctionNames,
    pub retry: RetryPolicy,
    /// The source of the backoff's jitter.
    pub ids: Arc<dyn IdGenerator>,
}

impl Invoker {
    /// Invoke the function of `R` with `request` and return its JSON answer.
    pub async fn invoke<R: Request>(
        &self,
        request: &R,
        idempotence: Idempotence,
    ) -> Result<Value, Failure> {
        let operation = R::OPERATION;
        let payload = serde_json::to_vec(request).map_err(|err| {
            Failure::Final(Error::with_source(
                ErrorKind::InvalidRequest,
                format!("cannot encode the `{operation}` event"),
                err,
            ))
        })?;
        let mut attempt = 0;
        loop {
            attempt += 1;
            let detail = match self.attempt(operation, &payload).await {
                Attempt::Answer(value) => return Ok(value),
                Attempt::Final(err) => return Err(Failure::Final(err)),
                Attempt::Ambiguous(detail) if idempotence == Idempotence::Mutation => {
                    return Err(Failure::Ambiguous(detail));
                }
                Attempt::Retry(detail) | Attempt::Ambiguous(detail) => detail,
            };
            tracing::debug!(%operation, attempt, %detail, "invocation failed; retrying");
            if attempt >= self.retry.max_attempts {
                return Err(Failure::Final(Error::new(
                    ErrorKind::StoreUnavailable,
                    format!(
                        "the `{operation}` function ({}) kept failing after {attempt} attempts: {detail}",
                        self.names.get(operation)
                    ),
                )));
            }
            self.retry.back_off(attempt, self.ids.as_ref()).await;
        }
    }

    async fn attempt(&self, operation: Operation, payload: &[u8]) -> Attempt {
        let function = self.names.get(operation);
        let transmitted = Arc::new(AtomicBool::new(false));
        let result = self
            .client
            .invoke()
            .function_name(function)
            .invocation_type(InvocationType::RequestResponse)
            .payload(Blob::new(payload))
            .customize()
            .interceptor(TransmitWitness(transmitted.clone()))
            .send()
            .await;
        match result {
            Ok(output) => answer(operation, function, output),
            Err(err) => failure(function, &err, transmitted.load(Ordering::SeqCst)),
        }
    }
}

/// Records that the request was handed to the HTTP client: before that, nothing was sent.
#[derive(Debug)]
struct TransmitWitness(Arc<AtomicBool>);

impl Intercept for TransmitWitness {
    fn name(&self) -> &'static str {
        "TransmitWitness"
    }

    fn read_before_transmit(
        &self,
        _context: &BeforeTransmitInterceptorContextRef<'_>,
        _runtime_components: &RuntimeComponents,
        _cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        self.0.store(true, Ordering::SeqCst);
        Ok(())
    }
}

/// The error body of a function error: `{"errorType": "...", "errorMessage": "..."}`
/// (fields beyond these, such as `stackTrace`, are ignored: the body is the runtime's, not
/// the contract's).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct FunctionErrorBody {
    error_type: Option<String>,
    error_message: Option<String>,
}

fn answer(operation: Operation, function: &str, output: InvokeOutput) -> Attempt {
    let payload = output
        .payload()
        .map(|blob| blob.as_ref())
        .unwrap_or_default();
    if let Some(kind) = output.function_error() {
        let body: Option<FunctionErrorBody> = serde_json::from_slice(payload).ok();
        let (error_type, message) = match body {
            Some(body) => (body.error_type, body.error_message.unwrap_or_default()),
            None => (None, String::from_utf8_lossy(payload).into_owned()),
        };
        return match error_type.as_deref().and_then(ErrorKind::from_code) {
            // The function itself does not know whether its write applied: read back.
            Some(ErrorKind::CommitStateUnknown) => Attempt::Ambiguous(format!(
                "`{function}` answered COMMIT_STATE_UNKNOWN: {message}"
            )),
            Some(code) => Attempt::Final(Error::new(code, message)),
            None => Attempt::Ambiguous(format!(
                "`{function}` failed with {kind} error `{}`: {message}",
                error_type.as_deref().unwrap_or("(no errorType)")
            )),
        };
    }
    match serde_json::from_slice(payload) {
        Ok(value) => Attempt::Answer(value),
        Err(err) => Attempt::Ambiguous(format!(
            "`{function}` answered a `{operation}` invocation with a payload that is not JSON: {err}"
        )),
    }
}

/// Lambda errors that mean the execution environment could not start: nothing ran.
const START_FAILURES: [&str; 22] = [
    "CodeArtifactUserDeletedException",
    "CodeArtifactUserFailedException",
    "CodeArtifactUserPendingException",
    "CodeSigningConfigNotFoundException",
    "EC2AccessDeniedException",
    "EC2UnexpectedException",
    "EFSMountConnectivityException",
    "EFSMountFailureException",
    "EFSMountTimeoutException",
    "ENILimitReachedException",
    "InvalidRuntimeException",
    "InvalidSecurityGroupIDException",
    "InvalidSubnetIDException",
    "InvalidZipFileException",
    "KMSAccessDeniedException",
    "KMSDisabledException",
    "KMSInvalidStateException",
    "KMSNotFoundException",
    "SnapStartException",
    "SnapStartTimeoutException",
    "SubnetIPAddressLimitReachedException",
    "UnsupportedMediaTypeException",
];

/// Lambda errors after which the same request may succeed: nothing ran.
const RETRYABLE: [&str; 5] = [
    "TooManyRequestsException",
    "EC2ThrottledException",
    "ResourceNotReadyException",
    "ResourceConflictException",
    "SnapStartNotReadyException",
];

fn failure(function: &str, err: &SdkError<InvokeError>, transmitted: bool) -> Attempt {
    let detail = format!("invoking `{function}`: {}", DisplayErrorContext(err));
    if let SdkError::ServiceError(context) = err {
        let status = context.raw().status().as_u16();
        let code = context.err().code().unwrap_or_default();
        if status == 429 || RETRYABLE.contains(&code) {
            return Attempt::Retry(detail);
        }
        if code == "ResourceNotFoundException" || status == 403 || code == "AccessDeniedException" {
            return Attempt::Final(Error::new(ErrorKind::Configuration, detail));
        }
        if matches!(
            code,
            "InvalidRequestContentException"
                | "RequestTooLargeException"
                | "SerializedRequestEntityTooLargeException"
                | "InvalidParameterValueException"
        ) {
            return Attempt::Final(Error::new(ErrorKind::InvalidRequest, detail));
        }
        if (400..500).contains(&status) || START_FAILURES.contains(&code) {
            // Refused for good (the function cannot start, the request is refused):
            // retrying cannot help until the deployment is fixed.
            return Attempt::Final(Error::new(ErrorKind::StoreRefused, detail));
        }
        return Attempt::Ambiguous(detail);
    }
    if !transmitted {
        // Failed while building, signing or resolving the endpoint: nothing was sent.
        return match err {
            SdkError::TimeoutError(_) => Attempt::Retry(detail),
            _ => Attempt::Final(Error::new(ErrorKind::Configuration, detail)),
        };
    }
    if let SdkError::DispatchFailure(dispatch) = err {
        if refused(err) {
            return Attempt::Retry(detail);
        }
        if dispatch.is_user() {
            return Attempt::Final(Error::new(ErrorKind::Configuration, detail));
        }
    }
    // A timeout, a broken connection or an unreadable response after the request left.
    Attempt::Ambiguous(detail)
}

/// Whether the connection was refused or unroutable: the request never left.
fn refused(err: &(dyn std::error::Error + 'static)) -> bool {
    let mut cause = Some(err);
    while let Some(err) = cause {
        if let Some(io) = err.downcast_ref::<std::io::Error>()
            && matches!(
                io.kind(),
                std::io::ErrorKind::ConnectionRefused
                    | std::io::ErrorKind::AddrNotAvailable
                    | std::io::ErrorKind::HostUnreachable
                    | std::io::ErrorKind::NetworkUnreachable
            )
        {
            return true;
        }
        cause = err.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn output(function_error: Option<&str>, payload: &str) -> InvokeOutput {
        let mut output = InvokeOutput::builder()
            .status_code(200)
            .payload(Blob::new(payload.as_bytes()));
        if let Some(kind) = function_error {
            output = output.function_error(kind);
        }
        output.build()
    }

    #[test]
    fn catalog_error_types_become_typed_errors() {
        let body = r#"{"errorType": "COMMIT_CONFLICT", "errorMessage": "stale base"}"#;
        match answer(Operation::Commit, "f", output(Some("Unhandled"), body)) {
            Attempt::Final(err) => {
                assert_eq!(err.kind(), ErrorKind::CommitConflict);
                assert_eq!(err.message(), "stale base");
            }
            _ => panic!("expected a typed error"),
        }
    }

    #[test]
    fn every_catalog_code_keeps_its_kind_and_retryability() {
        // COMMIT_STATE_UNKNOWN is settled by reading back instead (see
        // `other_function_errors_are_ambiguous`).
        for kind in ErrorKind::ALL
            .into_iter()
            .filter(|kind| *kind != ErrorKind::CommitStateUnknown)
        {
            let body = format!(r#"{{"errorType": "{}", "errorMessage": "m"}}"#, kind.code());
            match answer(Operation::Commit, "f", output(Some("Unhandled"), &body)) {
                Attempt::Final(err) => {
                    assert_eq!(err.kind(), kind);
                    assert_eq!(err.is_retryable(), kind.is_retryable());
                }
                _ => panic!("{kind}: expected a typed error"),
            }
        }
    }

    #[test]
    fn other_function_errors_are_ambiguous() {
        for body in [
            r#"{"errorType": "Runtime.ExitError", "errorMessage": "exit status 101"}"#,
            r#"{"errorMessage": "Task timed out after 30.00 seconds"}"#,
            r#"{"errorType": "COMMIT_STATE_UNKNOWN", "errorMessage": "out of time after the write"}"#,
            "not json",
        ] {
            assert!(
                matches!(
                    answer(Operation::Commit, "f", output(Some("Unhandled"), body)),
                    Attempt::Ambiguous(_)
                ),
                "{body}"
            );
        }
    }

    #[test]
    fn answers_are_json() {
        assert!(matches!(
            answer(Operation::Load, "f", output(None, r#"{"a": 1}"#)),
            Attempt::Answer(_)
        ));
        assert!(matches!(
            answer(Operation::Load, "f", output(None, "{")),
            Attempt::Ambiguous(_)
        ));
    }

    #[test]
    fn refused_connections_are_found_in_the_chain() {
        let io = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        let wrapped = Error::with_source(ErrorKind::StoreUnavailable, "outer", io);
        assert!(refused(&wrapped));
        let reset = std::io::Error::from(std::io::ErrorKind::ConnectionReset);
        assert!(!refused(&Error::with_source(
            ErrorKind::StoreUnavailable,
            "outer",
            reset
        )));
    }
}
