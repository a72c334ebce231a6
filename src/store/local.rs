//! The local-filesystem pointer store: the embedded default.
//!
//! Each key is one file under the root directory (`i/a/=x` is `<root>/i/a/=x`). The file
//! holds a one-line header with the record's generation, then the value:
//!
//! ```text
//! parqdb-pointer 7
//! {"record-version":1, ...}
//! ```
//!
//! # Compare-and-swap across processes
//! object_store's `LocalFileSystem` has create-if-absent but no replace-if-version, so this
//! store implements both itself:
//! 1. open (creating) the key's lock file `<file>.lock` and take an exclusive `flock` on it;
//!    the operating system releases the lock when the holder exits, so a crashed writer
//!    never blocks the key;
//! 2. read the current generation and check the condition (`Create`: no file; `Update(v)`:
//!    generation `v`);
//! 3. write `generation + 1` and the value to a temporary file under `<root>/.tmp`, `fsync`
//!    it, and `rename` it over the key's file (atomic on POSIX file systems), then `fsync`
//!    the directory;
//! 4. release the lock.
//!
//! Readers take no lock: `rename` makes every read see one complete version. Generations
//! only grow because records are never deleted (the catalog writes tombstones), so a
//! version is never reused. Lock and temporary files contain a `.`, which no store key can,
//! so listings never see them.
//!
//! The root must be on a local POSIX file system (`flock` is not reliable over NFS).

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use bytes::Bytes;

use super::{ListEntry, ListPage, PointerStore, PutMode, StoreError, StoreKey, Version, Versioned};

const HEADER: &str = "parqdb-pointer ";
static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// A pointer store in a local directory, safe across threads and processes.
#[derive(Debug, Clone)]
pub struct LocalStore {
    root: PathBuf,
}

impl LocalStore {
    /// A store rooted at `root` (created on first write).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        LocalStore { root: root.into() }
    }

    /// The root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    fn path(&self, key: &StoreKey) -> PathBuf {
        self.root.join(key.as_str())
    }
}

/// A failed file-system call that did not apply: permanent (`fatal`) when retrying cannot
/// fix it — no permission, a read-only file system, a path component that is a file, a
/// corrupt pointer file — else retryable.
fn unavailable(err: io::Error) -> StoreError {
    if is_permanent(err.kind()) {
        StoreError::fatal(err)
    } else {
        StoreError::unavailable(err)
    }
}

/// The I/O error kinds that retrying cannot fix.
pub(crate) fn is_permanent(kind: io::ErrorKind) -> bool {
    matches!(
        kind,
        io::ErrorKind::PermissionDenied
            | io::ErrorKind::ReadOnlyFilesystem
            | io::ErrorKind::NotADirectory
            | io::ErrorKind::IsADirectory
            | io::ErrorKind::InvalidFilename
            | io::ErrorKind::InvalidInput
            | io::ErrorKind::InvalidData
            | io::ErrorKind::Unsupported
    )
}

/// Read a record file: `None` if absent.
fn read_record(path: &Path) -> io::Result<Option<(u64, Bytes)>> {
    let mut file = match File::open(path) {
        Ok(file) => file,
        Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(err) => return Err(err),
    };
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)?;
    let corrupt = || {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{} is not a pointer file", path.display()),
        )
    };
    let newline = bytes.iter().position(|&b| b == b'\n').ok_or_else(corrupt)?;
    let header = std::str::from_utf8(&bytes[..newline]).map_err(|_| corrupt())?;
    let generation = header
        .strip_prefix(HEADER)
        .and_then(|g| g.parse::<u64>().ok())
        .ok_or_else(corrupt)?;
    Ok(Some((
        generation,
        Bytes::copy_from_slice(&bytes[newline + 1..]),
    )))
}

fn versioned((generation, value): (u64, Bytes)) -> Versioned {
    Versioned {
        value,
        version: Version::new(generation.to_string()),
    }
}

fn put_blocking(
    root: &Path,
    path: &Path,
    value: &[u8],
    mode: &PutMode,
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

    let current = read_record(path)
        .map_err(unavailable)?
        .map(|(generation, _)| generation);
    let generation = match (mode, current) {
        (PutMode::Create, None) => 1,
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
        file.write_all(format!("{HEADER}{generation}\n").as_bytes())?;
        file.write_all(value)?;
        file.sync_all()?;
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

/// Every key under `dir` (relative key text `base`) whose text starts with `prefix`.
fn collect_keys(dir: &Path, base: &str, prefix: &str, out: &mut Vec<String>) -> io::Result<()> {
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(err) => return Err(err),
    };
    for entry in entries {
        let entry = entry?;
        let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
            continue;
        };
        let key = if base.is_empty() {
            name.clone()
        } else {
            format!("{base}/{name}")
        };
        if StoreKey::new(key.clone()).is_err() {
            continue; // lock files, temporary files, anything foreign
        }
        let file_type = entry.file_type()?;
        if file_type.is_dir() {
            let dir_key = format!("{key}/");
            if dir_key.starts_with(prefix) || prefix.starts_with(&dir_key) {
                collect_keys(&entry.path(), &key, prefix, out)?;
            }
        } else if file_type.is_file() && key.starts_with(prefix) {
            out.push(key);
        }
    }
    Ok(())
}

#[async_trait]
impl PointerStore for LocalStore {
    fn describe(&self) -> String {
        format!("file://{}", self.root.display())
    }

    async fn get(&self, key: &StoreKey) -> Result<Option<Versioned>, StoreError> {
        let path = self.path(key);
        let record = tokio::task::spawn_blocking(move || read_record(&path))
            .await
            .map_err(StoreError::unavailable)?
            .map_err(unavailable)?;
        Ok(record.map(versioned))
    }

    async fn put(
        &self,
        key: &StoreKey,
        value: Bytes,
        mode: PutMode,
    ) -> Result<Version, StoreError> {
        let (root, path) = (self.root.clone(), self.path(key));
        tokio::task::spawn_blocking(move || put_blocking(&root, &path, &value, &mode))
            .await
            .map_err(StoreError::ambiguous)?
    }

    async fn list(
        &self,
        prefix: &StoreKey,
        start_after: Option<&StoreKey>,
        limit: usize,
    ) -> Result<ListPage, StoreError> {
        let root = self.root.clone();
        let prefix = prefix.as_str().to_owned();
        let start_after = start_after.map(|k| k.as_str().to_owned());
        tokio::task::spawn_blocking(move || {
            let dir = match prefix.rfind('/') {
                Some(at) => &prefix[..at],
                None => "",
            };
            let mut keys = Vec::new();
            collect_keys(&root.join(dir), dir, &prefix, &mut keys).map_err(unavailable)?;
            keys.sort_unstable();
            let mut page = ListPage::default();
            for key in keys {
                if start_after
                    .as_ref()
                    .is_some_and(|after| key.as_str() <= after.as_str())
                {
                    continue;
                }
                if page.entries.len() == limit {
                    page.more = true;
                    break;
                }
                // A key listed but gone by now cannot happen (records are never deleted);
                // skip it rather than fail if something foreign removed it.
                if let Some(record) = read_record(&root.join(&key)).map_err(unavailable)? {
                    page.entries.push(ListEntry {
                        key: StoreKey::new(key).map_err(StoreError::fatal)?,
                        value: Some(versioned(record)),
                    });
                }
            }
            Ok(page)
        })
        .await
        .map_err(StoreError::unavailable)?
    }
}
