//! object_store errors as the crate's: refused for good, or unavailable.

use crate::error::{Error, ErrorKind};

/// The public error of a failed warehouse call: [`ErrorKind::StoreRefused`] when retrying
/// cannot fix it (access denied, an unusable path or configuration, a local path component
/// that is no directory), else [`ErrorKind::StoreUnavailable`].
pub(super) fn unavailable(what: &str, err: object_store::Error) -> Error {
    if is_permanent(&err) {
        return Error::with_source(
            ErrorKind::StoreRefused,
            format!(
                "the warehouse refused access to `{what}`; retrying cannot help until the store or its permissions are fixed"
            ),
            err,
        );
    }
    Error::with_source(
        ErrorKind::StoreUnavailable,
        format!("reading or writing `{what}` failed"),
        err,
    )
}

/// Whether an object-store failure is permanent: a refusal by the server or the file
/// system, or a request that can never be valid.
fn is_permanent(err: &object_store::Error) -> bool {
    use object_store::Error as E;
    if matches!(
        err,
        E::PermissionDenied { .. }
            | E::Unauthenticated { .. }
            | E::NotImplemented { .. }
            | E::NotSupported { .. }
            | E::InvalidPath { .. }
            | E::UnknownConfigurationKey { .. }
    ) {
        return true;
    }
    // The local file system reports its I/O errors as `Generic`.
    let mut cause = std::error::Error::source(err);
    while let Some(inner) = cause {
        if let Some(io) = inner.downcast_ref::<std::io::Error>() {
            return crate::store::local::is_permanent(io.kind());
        }
        cause = inner.source();
    }
    false
}

/// Whether an object-store failure says there is no object at the name: not found, or (on
/// a file system) what [`is_missing_io`] says no file can be read at.
pub(super) fn is_missing(err: &object_store::Error) -> bool {
    if matches!(err, object_store::Error::NotFound { .. }) {
        return true;
    }
    let mut cause = std::error::Error::source(err);
    while let Some(inner) = cause {
        if let Some(io) = inner.downcast_ref::<std::io::Error>() {
            return is_missing_io(io);
        }
        cause = inner.source();
    }
    false
}

/// Whether a file-system failure says no file can be read at the path: not found, a file
/// where a directory of the path would be, a loop of symbolic links on the path, or a
/// name too long for the file system (no file can have it).
pub(super) fn is_missing_io(err: &std::io::Error) -> bool {
    matches!(
        err.kind(),
        std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
    ) || matches!(
        err.raw_os_error(),
        Some(libc::ELOOP) | Some(libc::ENAMETOOLONG)
    )
}
