//! The local-filesystem pointer store: the embedded default.
//!
//! Each key is one file under the root directory (`i/a/=x` is `<root>/i/a/=x`). The file
//! holds a one-line header with the record's generation and its [`Listing`](crate::store::Listing) class
//! (`hidden`, `shown` or `check`; files written before classes existed have none and list as
//! unknown), then the value:
//!
//! ```text
//! parqdb-pointer 7 shown
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
//! The write runs on a blocking thread. If the `put` future is dropped (its caller gave
//! up, e.g. a publish window ran out) while the thread waits for the lock or writes, the
//! write is abandoned before its `rename`, so it never applies after its caller stopped
//! waiting for it.
//!
//! Readers take no lock: `rename` makes every read see one complete version. Generations
//! only grow because records are never deleted (the catalog writes tombstones), so a
//! version is never reused. Lock and temporary files contain a `.`, which no store key can,
//! so listings never see them.
//!
//! # Listing without scanning the directory
//! `readdir` is unordered, so a page of a sorted listing would cost a scan and a sort of
//! the whole directory. Listings of identifiers and namespaces (prefixes whose last segment
//! starts with `=`) use a per-directory name index instead, which works because names are
//! only ever added (records are never deleted):
//! - `<dir>/.names`, a journal: a create appends the new name (one line, under an `flock`
//!   of the journal, `fsync`ed) before the record file exists, so the journal always names
//!   every record file (and perhaps a few that a crash never created: listings skip them);
//! - `<dir>/.names.index`, a sorted snapshot: a header (`parqdb-names`, the journal length
//!   it covers, the count), a table of offsets, then the names. A listing binary-searches it
//!   (`O(log n)` small reads), reads the page's names, merges the journal's tail (the names
//!   appended since the snapshot, at most `JOURNAL_TAIL` (256 KiB) bytes), and reads each record
//!   of the page. When the tail outgrows that bound, or the snapshot is missing (a
//!   directory written before the index existed), the lister rebuilds the snapshot under
//!   the journal's lock from the old snapshot (or a directory scan) and the journal: an
//!   `O(n)` step every `JOURNAL_TAIL` (256 KiB) bytes of new names, not per page.
//!
//! Other prefixes (the garbage collector lists the whole `i` tree) scan the directories.
//!
//! The root must be on a local POSIX file system (`flock` is not reliable over NFS).
//!
//! The submodules: `record` (the file format), `write` (the locked compare-and-swap),
//! `list` (listings) and `names` (the name index).

mod list;
mod names;
mod record;
mod write;

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64};

use async_trait::async_trait;
use bytes::Bytes;

use self::record::{read_record, versioned};
use self::write::{CancelOnDrop, put_blocking};
use super::{
    Changed, GetOptions, ListOptions, ListPage, PointerStore, PutOptions, StoreError, StoreKey,
    Version,
};

/// Numbers the temporary files of this process (record writes and name-index snapshots).
static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// A pointer store in a local directory, safe across threads and processes: the embedded
/// default.
///
/// Each key is one file under the root (`i/a/=x` is `<root>/i/a/=x`). A write takes an
/// exclusive `flock` on the key's lock file (the operating system releases it when the
/// holder exits, so a crashed writer never blocks a key), checks the condition, writes a
/// temporary file, `fsync`s it and renames it over the key's file; readers take no lock and
/// always see one complete version. A write whose caller gave up is abandoned before its
/// rename, so it never applies later. Listings of identifiers and namespaces read a sorted
/// per-directory name index rather than scanning the directory.
///
/// The root must be on a local POSIX file system (`flock` is not reliable over NFS).
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

/// The location of the store at `root`: its canonical path, then the directory's inode
/// and, where the file system keeps one, its birth time in nanoseconds
/// (`file:///srv/catalog?inode=1234&born=1750000000123456789`). A copy of the directory
/// (a backup restored at the same path, a copy on another host that shares the
/// warehouse) has the same path but is another directory, and no copy keeps a birth
/// time; a directory removed and created again may get its inode back, never its birth
/// time. Moving the directory within its file system keeps both. Until the directory
/// exists (before the first write) the path alone: a store without records holds no
/// catalog id, so no marker can be bound to it.
fn instance(root: &Path) -> io::Result<String> {
    use std::os::unix::fs::MetadataExt;
    let path = match root.canonicalize() {
        Ok(path) => path,
        Err(err) if err.kind() == io::ErrorKind::NotFound => {
            return Ok(format!("file://{}", root.display()));
        }
        Err(err) => return Err(err),
    };
    let meta = std::fs::metadata(&path)?;
    let mut location = format!("file://{}?inode={}", path.display(), meta.ino());
    if let Ok(born) = meta.created() {
        let born = match born.duration_since(std::time::UNIX_EPOCH) {
            Ok(since) => since.as_nanos() as i128,
            Err(before) => -(before.duration().as_nanos() as i128),
        };
        location.push_str(&format!("&born={born}"));
    }
    Ok(location)
}

/// A failed file-system call that did not apply: permanent (`fatal`) when retrying cannot
/// fix it — no permission, a read-only file system, a path component that is a file —
/// else retryable; a damaged pointer file is [`StoreError::Corrupt`].
fn unavailable(err: io::Error) -> StoreError {
    if err.kind() == io::ErrorKind::InvalidData {
        StoreError::Corrupt(err.to_string())
    } else if is_permanent(err.kind()) {
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

#[async_trait]
impl PointerStore for LocalStore {
    fn describe(&self) -> String {
        format!("file://{}", self.root.display())
    }

    async fn location(&self) -> Result<Option<String>, StoreError> {
        let root = self.root.clone();
        let location = tokio::task::spawn_blocking(move || instance(&root))
            .await
            .map_err(StoreError::unavailable)?
            .map_err(unavailable)?;
        Ok(Some(location))
    }

    async fn get_opts(
        &self,
        key: &StoreKey,
        options: GetOptions<'_>,
    ) -> Result<Changed, StoreError> {
        let path = self.path(key);
        let record = tokio::task::spawn_blocking(move || read_record(&path))
            .await
            .map_err(StoreError::unavailable)?
            .map_err(unavailable)?;
        Ok(Changed::of(record.map(versioned), options))
    }

    async fn put_opts(
        &self,
        key: &StoreKey,
        value: Bytes,
        options: PutOptions,
    ) -> Result<Version, StoreError> {
        let (root, path) = (self.root.clone(), self.path(key));
        let cancelled = Arc::new(AtomicBool::new(false));
        let _cancel_on_drop = CancelOnDrop(cancelled.clone());
        let PutOptions { mode, listing } = options;
        tokio::task::spawn_blocking(move || {
            put_blocking(&root, &path, &value, &mode, listing, &cancelled)
        })
        .await
        .map_err(StoreError::ambiguous)?
    }

    async fn list_opts(
        &self,
        prefix: &StoreKey,
        options: ListOptions<'_>,
    ) -> Result<ListPage, StoreError> {
        self.list_blocking(prefix, options.start_after, options.limit, options.shown)
            .await
    }
}
