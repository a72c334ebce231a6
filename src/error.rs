//! The one public error type, [`Error`].

use std::fmt;

/// What went wrong, as a closed set of stable codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// Spec: a required namespace does not exist.
    NamespaceNotFound,
    /// Spec: the identifier does not exist.
    IndexNotFound,
    /// Spec: a register, rename destination or namespace already exists.
    AlreadyExists,
    /// Spec: metadata violates the format or snapshot invariants (also: a metadata
    /// location outside the warehouse or a metadata file that cannot be read).
    InvalidIndexMetadata,
    /// Spec: the metadata `format-version` is not supported.
    UnsupportedFormatVersion,
    /// Spec: new metadata belongs to another index.
    IndexUuidMismatch,
    /// Spec: the supplied base location is no longer current (a lost race).
    CommitConflict,
    /// A namespace segment or index name that no backend can store.
    InvalidIdentifier,
    /// A malformed request: bad arguments, unknown event fields, bad page token.
    InvalidRequest,
    /// A namespace cannot be dropped because it still holds indexes or namespaces.
    NamespaceNotEmpty,
    /// A mutation's outcome could not be determined (the write may or may not have
    /// applied). Nothing the writer wrote has been deleted; reload to find out.
    CommitStateUnknown,
    /// The backing store failed transiently (throttling, a timeout, a 5xx, a refused
    /// connection) and the operation did not apply: back off and retry.
    StoreUnavailable,
    /// The backing store refused the operation for good (access denied, a missing bucket
    /// or table, a function answering outside its contract): the operation did not apply
    /// and retrying cannot help until the deployment or its permissions are fixed.
    StoreRefused,
    /// A register, drop, rename or namespace operation (or a commit whose base stayed
    /// current) gave up after the record kept changing under concurrent writers. Nothing
    /// was applied; reload and retry. (Not `COMMIT_CONFLICT`, whose meaning is "the
    /// supplied base location is no longer current".)
    ConcurrentModification,
    /// The backing store does not honour conditional writes (failed capability probe)
    /// or lacks a feature the operation needs.
    StoreUnsupported,
    /// A stored catalog record (pointer or namespace record) could not be parsed.
    CorruptRecord,
    /// Invalid configuration: catalog or warehouse URI, environment, options.
    Configuration,
    /// The warehouse's ownership marker names another catalog: this catalog may neither
    /// write to it nor collect garbage in it (the message names the owner).
    WarehouseNotOwned,
}

impl ErrorKind {
    /// Every kind, in code order (for documentation and exhaustive tests).
    pub const ALL: [ErrorKind; 18] = [
        ErrorKind::NamespaceNotFound,
        ErrorKind::IndexNotFound,
        ErrorKind::AlreadyExists,
        ErrorKind::InvalidIndexMetadata,
        ErrorKind::UnsupportedFormatVersion,
        ErrorKind::IndexUuidMismatch,
        ErrorKind::CommitConflict,
        ErrorKind::InvalidIdentifier,
        ErrorKind::InvalidRequest,
        ErrorKind::NamespaceNotEmpty,
        ErrorKind::CommitStateUnknown,
        ErrorKind::StoreUnavailable,
        ErrorKind::StoreUnsupported,
        ErrorKind::CorruptRecord,
        ErrorKind::Configuration,
        ErrorKind::WarehouseNotOwned,
        ErrorKind::StoreRefused,
        ErrorKind::ConcurrentModification,
    ];

    /// The stable string code, e.g. `"COMMIT_CONFLICT"`.
    pub const fn code(self) -> &'static str {
        match self {
            ErrorKind::NamespaceNotFound => "NAMESPACE_NOT_FOUND",
            ErrorKind::IndexNotFound => "INDEX_NOT_FOUND",
            ErrorKind::AlreadyExists => "ALREADY_EXISTS",
            ErrorKind::InvalidIndexMetadata => "INVALID_INDEX_METADATA",
            ErrorKind::UnsupportedFormatVersion => "UNSUPPORTED_FORMAT_VERSION",
            ErrorKind::IndexUuidMismatch => "INDEX_UUID_MISMATCH",
            ErrorKind::CommitConflict => "COMMIT_CONFLICT",
            ErrorKind::InvalidIdentifier => "INVALID_IDENTIFIER",
            ErrorKind::InvalidRequest => "INVALID_REQUEST",
            ErrorKind::NamespaceNotEmpty => "NAMESPACE_NOT_EMPTY",
            ErrorKind::CommitStateUnknown => "COMMIT_STATE_UNKNOWN",
            ErrorKind::StoreUnavailable => "STORE_UNAVAILABLE",
            ErrorKind::StoreUnsupported => "STORE_UNSUPPORTED",
            ErrorKind::CorruptRecord => "CORRUPT_RECORD",
            ErrorKind::Configuration => "INVALID_CONFIGURATION",
            ErrorKind::WarehouseNotOwned => "WAREHOUSE_NOT_OWNED",
            ErrorKind::StoreRefused => "STORE_REFUSED",
            ErrorKind::ConcurrentModification => "CONCURRENT_MODIFICATION",
        }
    }

    /// The kind for a stable string code (the inverse of [`ErrorKind::code`]).
    pub fn from_code(code: &str) -> Option<ErrorKind> {
        ErrorKind::ALL.into_iter().find(|kind| kind.code() == code)
    }

    /// Whether retrying can help: a conflict (after reloading), an unknown commit state
    /// (after reloading), a concurrent modification (after reloading) and an unavailable
    /// store (after backing off). A refused store ([`ErrorKind::StoreRefused`]) is not.
    pub const fn is_retryable(self) -> bool {
        matches!(
            self,
            ErrorKind::CommitConflict
                | ErrorKind::CommitStateUnknown
                | ErrorKind::StoreUnavailable
                | ErrorKind::ConcurrentModification
        )
    }

    /// The CLI's process exit code for this kind (`0` is success, `2` a usage error).
    #[doc(hidden)] // The command's exit codes (README), for the CLI and its tests.
    pub const fn exit_code(self) -> i32 {
        match self {
            ErrorKind::NamespaceNotFound => 10,
            ErrorKind::IndexNotFound => 11,
            ErrorKind::AlreadyExists => 12,
            ErrorKind::InvalidIndexMetadata => 13,
            ErrorKind::UnsupportedFormatVersion => 14,
            ErrorKind::IndexUuidMismatch => 15,
            ErrorKind::CommitConflict => 16,
            ErrorKind::InvalidIdentifier => 17,
            ErrorKind::InvalidRequest => 18,
            ErrorKind::NamespaceNotEmpty => 19,
            ErrorKind::CommitStateUnknown => 20,
            ErrorKind::StoreUnavailable => 21,
            ErrorKind::StoreUnsupported => 22,
            ErrorKind::CorruptRecord => 23,
            ErrorKind::Configuration => 24,
            ErrorKind::WarehouseNotOwned => 25,
            ErrorKind::StoreRefused => 26,
            ErrorKind::ConcurrentModification => 27,
        }
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.code())
    }
}

/// The error returned by every fallible operation of this crate.
///
/// Every fallible operation in this crate returns [`Error`], whose [`ErrorKind`] is one of
/// the catalog spec's error codes (`COMMIT_CONFLICT`, `INDEX_NOT_FOUND`, ...) or one of the
/// implementation-specific kinds this crate adds (invalid identifier, commit state unknown,
/// store unavailable, ...). Callers branch on [`Error::kind`] (or on the stable string
/// [`Error::code`]), never on message text.
///
/// ```
/// use parqdb_catalog::{Error, ErrorKind};
///
/// let err = Error::new(ErrorKind::CommitConflict, "base metadata is no longer current");
/// assert_eq!(err.code(), "COMMIT_CONFLICT");
/// assert!(err.kind().is_retryable());
/// ```
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct Error {
    kind: ErrorKind,
    message: String,
    #[source]
    source: Option<Box<dyn std::error::Error + Send + Sync + 'static>>,
}

impl Error {
    /// A new error of `kind` with a human-readable message.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Error {
            kind,
            message: message.into(),
            source: None,
        }
    }

    /// A new error of `kind` caused by `source`.
    pub fn with_source(
        kind: ErrorKind,
        message: impl Into<String>,
        source: impl Into<Box<dyn std::error::Error + Send + Sync + 'static>>,
    ) -> Self {
        Error {
            kind,
            message: message.into(),
            source: Some(source.into()),
        }
    }

    /// The kind of error.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The stable string code, e.g. `"INDEX_NOT_FOUND"`.
    pub fn code(&self) -> &'static str {
        self.kind.code()
    }

    /// The human-readable message (without the code).
    pub fn message(&self) -> &str {
        &self.message
    }

    /// Whether retrying (after reloading or backing off) can help.
    pub fn is_retryable(&self) -> bool {
        self.kind.is_retryable()
    }

    /// The error as the JSON object the CLI and the Lambda layer print:
    /// `{"error": "<CODE>", "message": "..."}`.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({ "error": self.code(), "message": self.full_message() })
    }

    /// The message followed by the chain of causes.
    pub fn full_message(&self) -> String {
        let mut text = self.message.clone();
        let mut cause = std::error::Error::source(self);
        while let Some(err) = cause {
            let part = err.to_string();
            if !text.contains(&part) {
                text.push_str(": ");
                text.push_str(&part);
            }
            cause = err.source();
        }
        text
    }
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_and_are_unique() {
        let mut seen = std::collections::HashSet::new();
        for kind in ErrorKind::ALL {
            assert!(seen.insert(kind.code()), "duplicate code {}", kind.code());
            assert_eq!(ErrorKind::from_code(kind.code()), Some(kind));
        }
        assert_eq!(ErrorKind::from_code("NOPE"), None);
    }

    #[test]
    fn spec_codes_are_exact() {
        let spec = [
            "NAMESPACE_NOT_FOUND",
            "INDEX_NOT_FOUND",
            "ALREADY_EXISTS",
            "INVALID_INDEX_METADATA",
            "UNSUPPORTED_FORMAT_VERSION",
            "INDEX_UUID_MISMATCH",
            "COMMIT_CONFLICT",
        ];
        for code in spec {
            assert!(
                ErrorKind::from_code(code).is_some(),
                "missing spec code {code}"
            );
        }
    }

    #[test]
    fn exit_codes_are_distinct_and_not_reserved() {
        let mut seen = std::collections::HashSet::new();
        for kind in ErrorKind::ALL {
            let code = kind.exit_code();
            assert!(code > 2, "{kind} uses a reserved exit code");
            assert!(seen.insert(code));
        }
    }

    #[test]
    fn retryability_follows_the_kind() {
        assert!(ErrorKind::CommitConflict.is_retryable());
        assert!(ErrorKind::StoreUnavailable.is_retryable());
        assert!(ErrorKind::ConcurrentModification.is_retryable());
        assert!(!ErrorKind::StoreRefused.is_retryable());
        assert!(!ErrorKind::InvalidIndexMetadata.is_retryable());
        assert!(!ErrorKind::IndexNotFound.is_retryable());
    }

    #[test]
    fn json_form_names_code_and_causes() {
        let io = std::io::Error::other("disk on fire");
        let err = Error::with_source(ErrorKind::StoreUnavailable, "read failed", io);
        let json = err.to_json();
        assert_eq!(json["error"], "STORE_UNAVAILABLE");
        assert_eq!(json["message"], "read failed: disk on fire");
    }
}
