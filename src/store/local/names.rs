//! The per-directory name index (see the [module docs](super)).

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
    let mut bytes = Vec::with_capacity(HEADER_LEN as usize + 8 * names.len() + 16 * names.len());
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
