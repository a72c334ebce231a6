//! `parqdb-catalog validate FILE [--base BASE]`.

use std::io::Read;
use std::path::Path;

use clap::Args;

use crate::error::{Error, ErrorKind, Result};
use crate::family::FamilyRegistry;
use crate::metadata::{IndexMetadata, MAX_METADATA_BYTES};

#[derive(Debug, Args)]
pub(crate) struct ValidateArgs {
    /// The metadata file to validate: a path or a `file://` URI (as `load` prints it).
    file: std::path::PathBuf,
    /// Also check that FILE may replace this metadata file in a commit (the successor
    /// rules: same index, at most one new snapshot published by the spec's steps,
    /// non-current snapshots removed with their log entries, nothing else changed).
    #[arg(long, value_name = "BASE")]
    base: Option<std::path::PathBuf>,
}

fn read(path: &Path) -> Result<IndexMetadata> {
    IndexMetadata::from_json_slice(&read_bytes(path)?, &FamilyRegistry::builtin())
}

/// The local file a path or a `file://` URI names (a metadata location as `load` and
/// `commit` print it).
fn local_path(given: &Path) -> std::path::PathBuf {
    given
        .to_str()
        .and_then(|text| url::Url::parse(text).ok())
        .filter(|url| url.scheme() == "file")
        .and_then(|url| url.to_file_path().ok())
        .unwrap_or_else(|| given.to_path_buf())
}

fn read_bytes(given: &Path) -> Result<Vec<u8>> {
    let path = &local_path(given);
    let unreadable = |err: std::io::Error| {
        Error::with_source(
            ErrorKind::InvalidRequest,
            format!("cannot read `{}`", path.display()),
            err,
        )
    };
    let file = std::fs::File::open(path).map_err(unreadable)?;
    let mut bytes = Vec::new();
    // Read at most one byte past the limit: bounded memory whatever the file is.
    file.take(MAX_METADATA_BYTES as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(unreadable)?;
    Ok(bytes)
}

pub(crate) fn run(args: &ValidateArgs) -> Result<serde_json::Value> {
    let metadata = read(&args.file)?;
    let mut summary = metadata.summary_json();
    if let Some(base) = &args.base {
        // Read as a commit reads its base: today's rules judge FILE, not the base.
        let base = read_bytes(base)
            .and_then(|bytes| IndexMetadata::from_json_slice_as_base(&bytes))
            .map_err(|err| {
                Error::new(
                    err.kind(),
                    format!("base metadata `{}`: {}", base.display(), err.message()),
                )
            })?;
        metadata.check_successor_of(&base)?;
        summary["successor-of-base"] = serde_json::Value::Bool(true);
    }
    Ok(summary)
}
