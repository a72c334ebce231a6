//! Arguments that name JSON: inline or a file.

use crate::error::{Error, ErrorKind, Result};

/// Read `arg` as inline JSON if it starts with `{`, else as a file path.
pub(crate) fn json_argument(arg: &str, what: &str) -> Result<Vec<u8>> {
    if arg.trim_start().starts_with('{') {
        return Ok(arg.as_bytes().to_vec());
    }
    std::fs::read(arg).map_err(|err| {
        Error::with_source(ErrorKind::InvalidRequest, format!("cannot read {what} file `{arg}`"), err)
    })
}
