//! A write: the key's lock, the condition, then a temporary file renamed over the record
//! (see "Compare-and-swap across processes" in the [module docs](super)).

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use super::record::{HEADER, class_name, read_record};
use super::{TEMP_COUNTER, names, unavailable};
use crate::store::{Listing, PutMode, StoreError, Version};

/// Set when the `put` future is dropped: its blocking write must not apply later.
pub(super) struct CancelOnDrop(pub(super) Arc<AtomicBool>);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

fn abandoned() -> StoreError {
    StoreError::fatal("the write was abandoned by its caller before it applied")
}

pub(super) fn put_blocking(
    root: &Path,
    path: &Path,
    value: &[u8],
    mode: &PutMode,
    listing: Listing,
    cancelled: &AtomicBool,
) -> Result<Version, StoreError> {
    let parent = path
        .parent()
        .ok_or_else(|| StoreError::fatal("key has no parent directory"))?;
    fs::create_dir_all(parent).map_err(unavailable)?;
    let mut lock_name = path.as_os_str().to_owned();
    lock_name.push(".lock");
    let lock = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(PathBuf::from(lock_name))
        .map_err(unavailable)?;
    lock.lock().map_err(unavailable)?;
    // The caller may have given up while this thread waited for the lock (a publish
    // window ran out): a write it no longer waits for must not apply later.
    if cancelled.load(Ordering::SeqCst) {
        return Err(abandoned());
    }

    let current = read_record(path)
        .map_err(unavailable)?
        .map(|record| record.generation);
    let generation = match (mode, current) {
        (PutMode::Create, None) => {
            // Name the key in its directory's journal before its file can exist.
            let name = path
                .file_name()
                .and_then(|n| n.to_str())
                .ok_or_else(|| StoreError::fatal("key has no file name"))?;
            names::journal(parent, name).map_err(unavailable)?;
            1
        }
        (PutMode::Create, Some(_)) => return Err(StoreError::AlreadyExists),
        (PutMode::Update(expected), Some(current)) if expected.as_str() == current.to_string() => {
            current + 1
        }
        (PutMode::Update(_), _) => return Err(StoreError::Precondition),
    };

    // From here on the write may land: an I/O failure is an ambiguous outcome.
    let temp_dir = root.join(".tmp");
    fs::create_dir_all(&temp_dir).map_err(unavailable)?;
    let temp = temp_dir.join(format!(
        "{}.{}",
        std::process::id(),
        TEMP_COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    let write = || -> io::Result<()> {
        let mut file = File::create(&temp)?;
        file.write_all(format!("{HEADER}{generation} {}\n", class_name(listing)).as_bytes())?;
        file.write_all(value)?;
        file.sync_all()?;
        if cancelled.load(Ordering::SeqCst) {
            return Err(io::Error::other("abandoned"));
        }
        fs::rename(&temp, path)?;
        File::open(parent)?.sync_all()
    };
    if let Err(err) = write() {
        let _ = fs::remove_file(&temp);
        return Err(StoreError::ambiguous(err));
    }
    drop(lock);
    Ok(Version::new(generation.to_string()))
}
