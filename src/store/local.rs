//! The local-filesystem pointer store: the embedded default.
//!
//! Each key is one file under the root directory (`i/a/=x` is `<root>/i/a/=x`). The file
//! holds a one-line header with the record's generation and its [`Listing`] class
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
//!   appended since the snapshot, at most [`JOURNAL_TAIL`] bytes), and reads each record
//!   of the page. When the tail outgrows that bound, or the snapshot is missing (a
//!   directory written before the index existed), the lister rebuilds the snapshot under
//!   the journal's lock from the old snapshot (or a directory scan) and the journal: an
//!   `O(n)` step every [`JOURNAL_TAIL`] bytes of new names, not per page.
//!
//! Other prefixes (the garbage collector lists the whole `i` tree) scan the directories.
//!
//! The root must be on a local POSIX file system (`flock` is not reliable over NFS).

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use async_trait::async_trait;
use bytes::Bytes;

use super::{
    ListEntry, ListPage, Listing, PointerStore, PutMode, StoreError, StoreKey, Version, Versioned,
};

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

/// One record file: its generation, its class (if the header has one) and its value.
struct Record {
    generation: u64,
    listing: Option<Listing>,
    value: Bytes,
}

fn class_name(listing: Listing) -> &'static str {
    match listing {
        Listing::Hidden => "hidden",
        Listing::Shown => "shown",
        Listing::Check => "check",
    }
}

/// Read a record file: `None` if absent.
fn read_record(path: &Path) -> io::Result<Option<Record>> {
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
    let mut fields = header.strip_prefix(HEADER).ok_or_else(corrupt)?.split(' ');
    let generation = fields
        .next()
        .and_then(|g| g.parse::<u64>().ok())
        .ok_or_else(corrupt)?;
    let listing = match fields.next() {
        None => None,
        Some("hidden") => Some(Listing::Hidden),
        Some("shown") => Some(Listing::Shown),
        Some("check") => Some(Listing::Check),
        Some(_) => return Err(corrupt()),
    };
    if fields.next().is_some() {
        return Err(corrupt());
    }
    Ok(Some(Record {
        generation,
        listing,
        value: Bytes::copy_from_slice(&bytes[newline + 1..]),
    }))
}

fn versioned(record: Record) -> Versioned {
    Versioned {
        value: record.value,
        version: Version::new(record.generation.to_string()),
    }
}

/// Set when the `put` future is dropped: its blocking write must not apply later.
struct CancelOnDrop(Arc<AtomicBool>);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

fn abandoned() -> StoreError {
    StoreError::fatal("the write was abandoned by its caller before it applied")
}

fn put_blocking(
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

/// A page of the files of `dir` whose names start with `leaf` (which starts with `=`, so
/// every match is a record file), through the directory's name index.
fn list_indexed(
    root: &Path,
    dir: &str,
    leaf: &str,
    start_after: Option<&str>,
    limit: usize,
    shown_only: bool,
) -> Result<ListPage, StoreError> {
    let dir_prefix = format!("{dir}/");
    // The first name the page may hold is the first one after `after` (exclusive).
    let after = match start_after {
        None => None,
        Some(after) => match after.strip_prefix(&dir_prefix) {
            Some(rest) => Some(rest),
            None if after < dir_prefix.as_str() => None,
            None => return Ok(ListPage::default()),
        },
    };
    let path = root.join(dir);
    let mut names = match names::Index::open(&path).map_err(unavailable)? {
        Some(index) => index.names_from(leaf, after).map_err(unavailable)?,
        None => return Ok(ListPage::default()),
    };
    let mut page = ListPage::default();
    while let Some(name) = names.next().map_err(unavailable)? {
        if !name.starts_with(leaf) {
            break;
        }
        if page.entries.len() == limit {
            page.more = true;
            break;
        }
        // A journaled name whose create never completed has no file: skip it.
        let Some(record) = read_record(&path.join(&name)).map_err(unavailable)? else {
            continue;
        };
        if shown_only && record.listing == Some(Listing::Hidden) {
            continue;
        }
        page.entries.push(ListEntry {
            key: StoreKey::new(format!("{dir_prefix}{name}")).map_err(StoreError::fatal)?,
            listing: record.listing,
            value: Some(versioned(record)),
        });
    }
    Ok(page)
}

/// The per-directory name index (see the module docs).
mod names {
    use std::fs::{self, File, OpenOptions};
    use std::io::{self, Read, Write};
    use std::os::unix::fs::FileExt;
    use std::path::Path;

    use super::TEMP_COUNTER;

    const JOURNAL: &str = ".names";
    const SNAPSHOT: &str = ".names.index";
    const MAGIC: &[u8; 16] = b"parqdb-names-v1\n";
    /// Header: magic, journal bytes covered, entry count.
    const HEADER_LEN: u64 = 16 + 8 + 8;
    /// How many journal bytes a listing merges before it rebuilds the snapshot.
    pub(super) const JOURNAL_TAIL: u64 = 256 * 1024;
    /// Names read from the snapshot per read.
    const CHUNK: u64 = 1024;

    fn invalid(what: &str) -> io::Error {
        io::Error::new(io::ErrorKind::InvalidData, format!("name index: {what}"))
    }

    /// Append `name` to `dir`'s journal, durably, before its file is created.
    pub(super) fn journal(dir: &Path, name: &str) -> io::Result<()> {
        let mut file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join(JOURNAL))?;
        file.lock()?;
        file.write_all(format!("{name}\n").as_bytes())?;
        file.sync_data()
    }

    /// A sorted snapshot and the journal's tail.
    pub(super) struct Index {
        snapshot: File,
        count: u64,
        tail: Vec<String>,
    }

    fn complete_lines(bytes: &[u8]) -> Vec<String> {
        // A last line without its newline is an append still under way: its file does not
        // exist yet, so leaving it out is right.
        let end = bytes
            .iter()
            .rposition(|&b| b == b'\n')
            .map_or(0, |at| at + 1);
        String::from_utf8_lossy(&bytes[..end])
            .lines()
            .filter(|line| !line.is_empty())
            .map(str::to_owned)
            .collect()
    }

    fn read_from(path: &Path, offset: u64) -> io::Result<Vec<u8>> {
        let mut file = match File::open(path) {
            Ok(file) => file,
            Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(err) => return Err(err),
        };
        let mut bytes = Vec::new();
        std::io::Seek::seek(&mut file, io::SeekFrom::Start(offset))?;
        file.read_to_end(&mut bytes)?;
        Ok(bytes)
    }

    fn header(snapshot: &File) -> io::Result<(u64, u64)> {
        let mut header = [0u8; HEADER_LEN as usize];
        snapshot.read_exact_at(&mut header, 0)?;
        if &header[..16] != MAGIC {
            return Err(invalid("bad magic"));
        }
        let number = |at: usize| {
            let mut bytes = [0u8; 8];
            bytes.copy_from_slice(&header[at..at + 8]);
            u64::from_le_bytes(bytes)
        };
        Ok((number(16), number(24)))
    }

    impl Index {
        /// The index of `dir`, rebuilt first if missing or behind; `None` if `dir` does not
        /// exist.
        pub(super) fn open(dir: &Path) -> io::Result<Option<Index>> {
            if !dir.is_dir() {
                return Ok(None);
            }
            let journal_len = fs::metadata(dir.join(JOURNAL)).map_or(0, |m| m.len());
            let snapshot = match File::open(dir.join(SNAPSHOT)) {
                Ok(file) => Some(file),
                Err(err) if err.kind() == io::ErrorKind::NotFound => None,
                Err(err) => return Err(err),
            };
            let current = match snapshot {
                Some(snapshot) => {
                    let (covered, count) = header(&snapshot)?;
                    (journal_len.saturating_sub(covered) <= JOURNAL_TAIL)
                        .then_some((snapshot, covered, count))
                }
                None => None,
            };
            let (snapshot, covered, count) = match current {
                Some(current) => current,
                None => rebuild(dir)?,
            };
            let tail = complete_lines(&read_from(&dir.join(JOURNAL), covered)?);
            let mut tail: Vec<String> = tail;
            tail.sort_unstable();
            tail.dedup();
            Ok(Some(Index {
                snapshot,
                count,
                tail,
            }))
        }

        fn offset(&self, i: u64) -> io::Result<u64> {
            let mut bytes = [0u8; 8];
            self.snapshot
                .read_exact_at(&mut bytes, HEADER_LEN + 8 * i)?;
            Ok(u64::from_le_bytes(bytes))
        }

        fn names_base(&self) -> u64 {
            HEADER_LEN + 8 * (self.count + 1)
        }

        /// Entries `from..to` of the snapshot.
        fn read(&self, from: u64, to: u64) -> io::Result<Vec<String>> {
            if from >= to {
                return Ok(Vec::new());
            }
            let mut offsets = vec![0u8; 8 * (to - from + 1) as usize];
            self.snapshot
                .read_exact_at(&mut offsets, HEADER_LEN + 8 * from)?;
            let offsets: Vec<u64> = offsets
                .chunks_exact(8)
                .map(|c| u64::from_le_bytes(c.try_into().unwrap_or_default()))
                .collect();
            let (start, end) = (offsets[0], offsets[offsets.len() - 1]);
            if end < start {
                return Err(invalid("offsets out of order"));
            }
            let mut blob = vec![0u8; (end - start) as usize];
            self.snapshot
                .read_exact_at(&mut blob, self.names_base() + start)?;
            offsets
                .windows(2)
                .map(|w| {
                    let bytes = blob
                        .get((w[0] - start) as usize..(w[1] - start) as usize)
                        .ok_or_else(|| invalid("offsets out of range"))?;
                    String::from_utf8(bytes.to_vec()).map_err(|_| invalid("a name is not UTF-8"))
                })
                .collect()
        }

        /// The first snapshot position whose name is `> bound` (or `>=` when `inclusive`).
        fn position(&self, bound: &str, inclusive: bool) -> io::Result<u64> {
            let (mut lo, mut hi) = (0, self.count);
            while lo < hi {
                let mid = lo + (hi - lo) / 2;
                let (start, end) = (self.offset(mid)?, self.offset(mid + 1)?);
                let mut name = vec![0u8; end.saturating_sub(start) as usize];
                self.snapshot
                    .read_exact_at(&mut name, self.names_base() + start)?;
                let before = if inclusive {
                    name.as_slice() < bound.as_bytes()
                } else {
                    name.as_slice() <= bound.as_bytes()
                };
                if before {
                    lo = mid + 1;
                } else {
                    hi = mid;
                }
            }
            Ok(lo)
        }

        /// Names `>= leaf` and `> after`, ascending, snapshot and tail merged.
        pub(super) fn names_from(self, leaf: &str, after: Option<&str>) -> io::Result<Names> {
            let start = match after {
                Some(after) if after >= leaf => self.position(after, false)?,
                _ => self.position(leaf, true)?,
            };
            let keep = |name: &String| {
                name.as_str() >= leaf && after.is_none_or(|after| name.as_str() > after)
            };
            let tail: Vec<String> = self.tail.iter().filter(|n| keep(n)).cloned().collect();
            Ok(Names {
                index: self,
                next: start,
                buffer: Vec::new(),
                tail: tail.into_iter().rev().collect(),
                last: None,
            })
        }
    }

    /// A merged, deduplicated, ascending stream of names.
    pub(super) struct Names {
        index: Index,
        next: u64,
        /// Snapshot names read ahead, reversed (pop from the end).
        buffer: Vec<String>,
        /// Tail names, reversed.
        tail: Vec<String>,
        last: Option<String>,
    }

    impl Names {
        pub(super) fn next(&mut self) -> io::Result<Option<String>> {
            loop {
                if self.buffer.is_empty() && self.next < self.index.count {
                    let to = (self.next + CHUNK).min(self.index.count);
                    let mut chunk = self.index.read(self.next, to)?;
                    chunk.reverse();
                    self.buffer = chunk;
                    self.next = to;
                }
                let name = match (self.buffer.last(), self.tail.last()) {
                    (None, None) => return Ok(None),
                    (Some(_), None) => self.buffer.pop(),
                    (None, Some(_)) => self.tail.pop(),
                    (Some(a), Some(b)) if a <= b => self.buffer.pop(),
                    (Some(_), Some(_)) => self.tail.pop(),
                };
                if name.is_some() && name != self.last {
                    self.last.clone_from(&name);
                    return Ok(name);
                }
            }
        }
    }

    /// Rebuild the snapshot of `dir` under the journal's lock: the old snapshot (or a scan
    /// of the directory, for a directory indexed for the first time) and the journal.
    fn rebuild(dir: &Path) -> io::Result<(File, u64, u64)> {
        let journal = OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join(JOURNAL))?;
        journal.lock()?;
        let journal_bytes = read_from(&dir.join(JOURNAL), 0)?;
        let covered = journal_bytes
            .iter()
            .rposition(|&b| b == b'\n')
            .map_or(0, |at| at + 1) as u64;
        let mut names: Vec<String> = complete_lines(&journal_bytes);
        match File::open(dir.join(SNAPSHOT)) {
            Ok(snapshot) => {
                let index = Index {
                    count: header(&snapshot)?.1,
                    snapshot,
                    tail: Vec::new(),
                };
                names.extend(index.read(0, index.count)?);
            }
            Err(err) if err.kind() == io::ErrorKind::NotFound => {
                for entry in fs::read_dir(dir)? {
                    let entry = entry?;
                    if let Some(name) = entry.file_name().to_str()
                        && !name.contains('.')
                        && entry.file_type()?.is_file()
                    {
                        names.push(name.to_owned());
                    }
                }
            }
            Err(err) => return Err(err),
        }
        names.sort_unstable();
        names.dedup();
        let count = names.len() as u64;
        let mut bytes =
            Vec::with_capacity(HEADER_LEN as usize + 8 * names.len() + 16 * names.len());
        bytes.extend_from_slice(MAGIC);
        bytes.extend_from_slice(&covered.to_le_bytes());
        bytes.extend_from_slice(&count.to_le_bytes());
        let mut offset = 0u64;
        bytes.extend_from_slice(&offset.to_le_bytes());
        for name in &names {
            offset += name.len() as u64;
            bytes.extend_from_slice(&offset.to_le_bytes());
        }
        for name in &names {
            bytes.extend_from_slice(name.as_bytes());
        }
        let temp = dir.join(format!(
            "{SNAPSHOT}.{}.{}",
            std::process::id(),
            TEMP_COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        ));
        let write = || -> io::Result<()> {
            let mut file = File::create(&temp)?;
            file.write_all(&bytes)?;
            fs::rename(&temp, dir.join(SNAPSHOT))
        };
        if let Err(err) = write() {
            let _ = fs::remove_file(&temp);
            return Err(err);
        }
        drop(journal);
        Ok((File::open(dir.join(SNAPSHOT))?, covered, count))
    }
}

#[async_trait]
impl PointerStore for LocalStore {
    fn describe(&self) -> String {
        format!("file://{}", self.root.display())
    }

    fn location(&self) -> Option<String> {
        let root = self
            .root
            .canonicalize()
            .unwrap_or_else(|_| self.root.clone());
        Some(format!("file://{}", root.display()))
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
        self.put_listed(key, value, mode, Listing::Check).await
    }

    async fn put_listed(
        &self,
        key: &StoreKey,
        value: Bytes,
        mode: PutMode,
        listing: Listing,
    ) -> Result<Version, StoreError> {
        let (root, path) = (self.root.clone(), self.path(key));
        let cancelled = Arc::new(AtomicBool::new(false));
        let _cancel_on_drop = CancelOnDrop(cancelled.clone());
        tokio::task::spawn_blocking(move || {
            put_blocking(&root, &path, &value, &mode, listing, &cancelled)
        })
        .await
        .map_err(StoreError::ambiguous)?
    }

    async fn list(
        &self,
        prefix: &StoreKey,
        start_after: Option<&StoreKey>,
        limit: usize,
    ) -> Result<ListPage, StoreError> {
        self.list_blocking(prefix, start_after, limit, false).await
    }

    async fn list_shown(
        &self,
        prefix: &StoreKey,
        start_after: Option<&StoreKey>,
        limit: usize,
    ) -> Result<ListPage, StoreError> {
        self.list_blocking(prefix, start_after, limit, true).await
    }
}

impl LocalStore {
    async fn list_blocking(
        &self,
        prefix: &StoreKey,
        start_after: Option<&StoreKey>,
        limit: usize,
        shown_only: bool,
    ) -> Result<ListPage, StoreError> {
        let root = self.root.clone();
        let prefix = prefix.as_str().to_owned();
        let start_after = start_after.map(|k| k.as_str().to_owned());
        tokio::task::spawn_blocking(move || {
            let dir = match prefix.rfind('/') {
                Some(at) => &prefix[..at],
                None => "",
            };
            let leaf = prefix.get(dir.len() + 1..).unwrap_or("");
            if !dir.is_empty() && leaf.starts_with('=') {
                return list_indexed(&root, dir, leaf, start_after.as_deref(), limit, shown_only);
            }
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
                    if shown_only && record.listing == Some(Listing::Hidden) {
                        continue;
                    }
                    page.entries.push(ListEntry {
                        key: StoreKey::new(key).map_err(StoreError::fatal)?,
                        listing: record.listing,
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

#[cfg(test)]
mod tests {
    use super::*;

    async fn keys_of(store: &LocalStore, prefix: &str, page: usize) -> Vec<String> {
        let prefix = StoreKey::new(prefix).expect("prefix");
        let mut keys = Vec::new();
        let mut after: Option<StoreKey> = None;
        loop {
            let listed = store
                .list(&prefix, after.as_ref(), page)
                .await
                .expect("list");
            keys.extend(listed.entries.iter().map(|e| e.key.to_string()));
            after = listed.entries.last().map(|e| e.key.clone()).or(after);
            if !listed.more {
                return keys;
            }
        }
    }

    #[tokio::test]
    async fn the_name_index_lists_legacy_directories_and_new_names() {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = LocalStore::new(dir.path());
        let put = |name: String| {
            let store = store.clone();
            async move {
                let key = StoreKey::new(name).expect("key");
                store
                    .put(&key, Bytes::from_static(b"v"), PutMode::Create)
                    .await
                    .expect("create");
            }
        };
        for i in (0..20).rev() {
            put(format!("i/ns/=k{i:02}")).await;
        }
        put("i/ns/=a/deeper".into()).await;
        let expected: Vec<String> = (0..20).map(|i| format!("i/ns/=k{i:02}")).collect();
        assert_eq!(keys_of(&store, "i/ns/=k", 3).await, expected);
        // A directory written before the index existed: no journal, no snapshot.
        let ns = dir.path().join("i/ns");
        fs::remove_file(ns.join(".names")).expect("journal");
        fs::remove_file(ns.join(".names.index")).expect("snapshot");
        assert_eq!(keys_of(&store, "i/ns/=k", 7).await, expected);
        // Names created after the snapshot come from the journal's tail, merged in order.
        put("i/ns/=k05x".into()).await;
        put("i/ns/=k99".into()).await;
        let mut more = expected.clone();
        more.extend(["i/ns/=k05x".to_owned(), "i/ns/=k99".to_owned()]);
        more.sort();
        assert_eq!(keys_of(&store, "i/ns/=k", 4).await, more);
        // A journaled name whose create never happened is skipped.
        names::journal(&ns, "=k07a").expect("journal");
        assert_eq!(keys_of(&store, "i/ns/=k", 100).await, more);
        // Start positions inside, before and after the directory.
        let page = store
            .list(
                &StoreKey::new("i/ns/=").expect("prefix"),
                Some(&StoreKey::new("i/ns/=k18").expect("after")),
                10,
            )
            .await
            .expect("list");
        let listed: Vec<String> = page.entries.iter().map(|e| e.key.to_string()).collect();
        assert_eq!(listed, ["i/ns/=k19", "i/ns/=k99"]);
        for (after, expect_all) in [("i/a", true), ("i/ns/=", true), ("i/nt", false)] {
            let page = store
                .list(
                    &StoreKey::new("i/ns/=k").expect("prefix"),
                    Some(&StoreKey::new(after).expect("after")),
                    100,
                )
                .await
                .expect("list");
            assert_eq!(page.entries.len() == more.len(), expect_all, "{after}");
        }
    }
}
