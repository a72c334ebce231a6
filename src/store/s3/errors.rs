//! object_store errors as store errors: what a failed read or conditional `PUT` means
//! for the catalog (see "Conditional-write outcomes" in the [module docs](super)).

use crate::store::{PutMode, StoreError};

/// Is this object_store error certain to have happened before any request was sent?
fn never_sent(err: &object_store::Error) -> bool {
    matches!(
        err,
        object_store::Error::NotImplemented { .. }
            | object_store::Error::NotSupported { .. }
            | object_store::Error::InvalidPath { .. }
            | object_store::Error::UnknownConfigurationKey { .. }
    )
}

fn is_auth(err: &object_store::Error) -> bool {
    matches!(
        err,
        object_store::Error::PermissionDenied { .. } | object_store::Error::Unauthenticated { .. }
    )
}

/// Map a failed read (GET, list) to a store error.
pub(super) fn read_error(err: object_store::Error) -> StoreError {
    if is_auth(&err) || never_sent(&err) {
        StoreError::fatal(err)
    } else {
        StoreError::unavailable(err)
    }
}

/// Map a failed conditional PUT to a store error; `sent` is the number of attempts that
/// may have reached the server.
pub(super) fn put_error(err: object_store::Error, mode: &PutMode, sent: usize) -> StoreError {
    use object_store::Error as E;
    match (mode, &err) {
        (
            PutMode::Create,
            E::AlreadyExists { .. } | E::Precondition { .. } | E::NotModified { .. },
        ) => StoreError::AlreadyExists,
        (
            PutMode::Update(_),
            E::AlreadyExists { .. }
            | E::Precondition { .. }
            | E::NotModified { .. }
            | E::NotFound { .. },
        ) => StoreError::Precondition,
        // A create cannot miss its key: the bucket is missing.
        (PutMode::Create, E::NotFound { .. }) => StoreError::fatal(err),
        _ if never_sent(&err) => StoreError::fatal(err),
        _ if is_auth(&err) && sent <= 1 => StoreError::fatal(err),
        _ if sent == 0 => StoreError::unavailable(err),
        _ => StoreError::ambiguous(err),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Version;

    fn os_error(kind: &str) -> object_store::Error {
        let source: Box<dyn std::error::Error + Send + Sync> = kind.to_owned().into();
        match kind {
            "exists" => object_store::Error::AlreadyExists {
                path: "p".into(),
                source,
            },
            "precondition" => object_store::Error::Precondition {
                path: "p".into(),
                source,
            },
            "not-modified" => object_store::Error::NotModified {
                path: "p".into(),
                source,
            },
            "not-found" => object_store::Error::NotFound {
                path: "p".into(),
                source,
            },
            "denied" => object_store::Error::PermissionDenied {
                path: "p".into(),
                source,
            },
            "not-implemented" => object_store::Error::NotImplemented {
                operation: "put".into(),
                implementer: "s3".into(),
            },
            _ => object_store::Error::Generic {
                store: "S3",
                source,
            },
        }
    }

    #[test]
    fn put_errors_map_to_store_outcomes() {
        let create = PutMode::Create;
        let update = PutMode::Update(Version::new("\"e\""));
        let kind = |err: StoreError| match err {
            StoreError::AlreadyExists => "already-exists",
            StoreError::Precondition => "precondition",
            StoreError::Ambiguous(_) => "ambiguous",
            StoreError::Unavailable {
                retryable: true, ..
            } => "unavailable",
            StoreError::Unavailable {
                retryable: false, ..
            } => "fatal",
            StoreError::NotSupported(_) => "not-supported",
            StoreError::Corrupt(_) => "corrupt",
        };
        let cases = [
            ("exists", &create, 1, "already-exists"),
            ("precondition", &create, 1, "already-exists"),
            ("not-modified", &create, 1, "already-exists"),
            ("not-found", &create, 1, "fatal"),
            ("exists", &update, 3, "precondition"),
            ("precondition", &update, 1, "precondition"),
            ("not-found", &update, 1, "precondition"),
            ("not-modified", &update, 1, "precondition"),
            ("denied", &update, 1, "fatal"),
            ("denied", &update, 2, "ambiguous"),
            ("not-implemented", &create, 0, "fatal"),
            ("generic", &create, 0, "unavailable"),
            ("generic", &update, 0, "unavailable"),
            ("generic", &create, 1, "ambiguous"),
            ("generic", &update, 4, "ambiguous"),
        ];
        for (error, mode, sent, expected) in cases {
            assert_eq!(
                kind(put_error(os_error(error), mode, sent)),
                expected,
                "{error} on {mode:?} after {sent} sent attempts"
            );
        }
        assert!(matches!(
            read_error(os_error("generic")),
            StoreError::Unavailable {
                retryable: true,
                ..
            }
        ));
        assert!(matches!(
            read_error(os_error("denied")),
            StoreError::Unavailable {
                retryable: false,
                ..
            }
        ));
    }
}
