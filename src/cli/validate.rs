//! `parqdb-catalog validate FILE`.

use std::io::Read;

use clap::Args;

use crate::error::{Error, ErrorKind, Result};
use crate::family::FamilyRegistry;
use crate::metadata::{IndexMetadata, MAX_METADATA_BYTES};

#[derive(Debug, Args)]
pub(crate) struct ValidateArgs {
    /// The metadata file to validate.
    file: std::path::PathBuf,
}

pub(crate) fn run(args: &ValidateArgs) -> Result<serde_json::Value> {
    let unreadable = |err: std::io::Error| {
        Error::with_source(
            ErrorKind::InvalidRequest,
            format!("cannot read `{}`", args.file.display()),
            err,
        )
    };
    let file = std::fs::File::open(&args.file).map_err(unreadable)?;
    let mut bytes = Vec::new();
    // Read at most one byte past the limit: bounded memory whatever the file is.
    file.take(MAX_METADATA_BYTES as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(unreadable)?;
    let metadata = IndexMetadata::from_json_slice(&bytes, &FamilyRegistry::builtin())?;
    Ok(metadata.summary_json())
}
