//! Reading a local warehouse's files directly, where `object_store` cannot or must not: a
//! name it cannot address (its multipart staging names, `x#1`, which another program may
//! still have written), a file too large to hold (read chunk by chunk), and never anything
//! but a regular file: opening a FIFO waits for a writer forever, and a socket, a device
//! or a directory holds no object.

use std::path::Path;

use bytes::Bytes;
use tokio::io::AsyncReadExt;

use super::Fetched;
use super::errors::is_missing_io;
use super::local::listed;

/// How much of a file one read takes.
const CHUNK_BYTES: usize = 1 << 20;

/// The metadata of the regular file at `path` (following links, as a read does), or
/// `None` if no regular file can be read there.
pub(super) async fn regular_file(path: &Path) -> std::io::Result<Option<std::fs::Metadata>> {
    match tokio::fs::metadata(path).await {
        Ok(meta) if meta.is_file() => Ok(Some(meta)),
        Ok(_) => Ok(None),
        Err(err) if is_missing_io(&err) => Ok(None),
        Err(err) => Err(err),
    }
}

/// Read the file `name` at `path` unless it is larger than `max_bytes`.
pub(super) async fn get(path: &Path, name: &str, max_bytes: u64) -> std::io::Result<Fetched> {
    let Some(meta) = regular_file(path).await? else {
        return Ok(Fetched::Missing);
    };
    if meta.len() > max_bytes {
        return Ok(Fetched::TooLarge(meta.len()));
    }
    match tokio::fs::read(path).await {
        Ok(bytes) => Ok(Fetched::Object(
            Bytes::from(bytes),
            listed(name.to_owned(), &meta),
        )),
        Err(err) if is_missing_io(&err) => Ok(Fetched::Missing),
        Err(err) => Err(err),
    }
}

/// Hand the file at `path` to `each`, chunk by chunk; `false` if there is none.
pub(super) async fn read_chunks(
    path: &Path,
    each: &mut (dyn FnMut(&[u8]) + Send),
) -> std::io::Result<bool> {
    if regular_file(path).await?.is_none() {
        return Ok(false);
    }
    let mut file = match tokio::fs::File::open(path).await {
        Ok(file) => file,
        Err(err) if is_missing_io(&err) => return Ok(false),
        Err(err) => return Err(err),
    };
    let mut buffer = vec![0; CHUNK_BYTES];
    loop {
        let read = file.read(&mut buffer).await?;
        if read == 0 {
            return Ok(true);
        }
        each(&buffer[..read]);
    }
}
