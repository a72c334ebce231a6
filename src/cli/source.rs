//! Arguments that name JSON: inline or a file.

use std::io::Read;

use crate::error::{Error, ErrorKind, Result};
use crate::metadata::MAX_METADATA_BYTES;

/// Read `arg` as inline JSON if it starts with `{`, else as a file path. A file is read up
/// to one byte past the metadata size limit, so memory stays bounded whatever it holds
/// (the parsers then reject it as too large).
pub(crate) fn json_argument(arg: &str, what: &str) -> Result<Vec<u8>> {
    if arg.trim_start().starts_with('{') {
        return Ok(arg.as_bytes().to_vec());
    }
    let unreadable = |err: std::io::Error| {
        Error::with_source(
            ErrorKind::InvalidRequest,
            format!("cannot read {what} file `{arg}`"),
            err,
        )
    };
    let file = std::fs::File::open(arg).map_err(unreadable)?;
    let mut bytes = Vec::new();
    // One byte past the limit is enough for the strict parsers to reject it as too large.
    file.take(MAX_METADATA_BYTES as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(unreadable)?;
    Ok(bytes)
}
