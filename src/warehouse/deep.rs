//! Directories too deep to open by their path (past `PATH_MAX`), read from their parents'
//! open directories, as a writer that works relative to its directory made them.
//!
//! The searches for symbolic links (`link_search` in the warehouse, `links` outside it)
//! open directories by path. A chain of long directory names can grow past what a path
//! can open, and what lies there used to be unknown: a link there may lead anywhere, so
//! every delete of the run paused. One such directory in garbage (or in a live source
//! table outside) stopped collection of the whole warehouse for as long as it was there
//! (U1, recorded since round 55). Read through open directories instead, a deep tree that
//! holds only files and directories is known to name nothing; one that holds a symbolic
//! link, another file system or a mount point is still answered as unknown (what a link
//! that deep leads to is resolved relative to a directory no path can name).
//!
//! A read returns a fingerprint of every directory it read (inode, modification and
//! change times): the searches read a deep tree again at each of their looks, and a
//! changed fingerprint asks for another look, as a changed directory does (round 87, S1:
//! a link moved once from one deep tree into another already read). At most
//! [`MAX_OPEN`] directories are held open at a time, however wide or deep the tree
//! (round 87, L1: one open directory per pending subdirectory ran out of descriptors).
//!
//! ```text
//! indexes/orphan/dddd…/dddd…/…/part-0.parquet    read through open directories: names nothing
//! indexes/orphan/dddd…/dddd…/…/shared -> /x       a link: may lead anywhere
//! ```

use std::ffi::OsString;
use std::hash::{Hash, Hasher};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, Dir, FileType, Mode, OFlags};

/// The most directories one read holds open at a time; a directory whose descriptor was
/// let go is opened again from its path's deepest ancestor that a path opens.
const MAX_OPEN: usize = 32;

/// A directory being read: its descriptor (let go past [`MAX_OPEN`]), its path, and its
/// subdirectories not read yet.
struct Frame {
    dir: Option<OwnedFd>,
    at: PathBuf,
    children: Vec<OsString>,
}

/// Read the directory `path` (absolute, too long to open by its path) and everything
/// below it through open directories. `device`: the file system the walk keeps to (one
/// of another is a mount); `mounted`: whether a path is a mount point in the process's
/// table; `budget`: how many more entries may be read. `Ok(None)` if it is gone (moved
/// while the walk ran), `Ok(Some(fingerprint))` if it names nothing a reader could follow,
/// `Err(why)` if it holds something a reader may follow anywhere, or could not be read.
pub(super) fn read_below(
    path: &Path,
    device: Option<u64>,
    mounted: &dyn Fn(&Path) -> bool,
    budget: &mut usize,
) -> Result<Option<u64>, String> {
    let Some(start) = open_deep(path).map_err(|err| unread(path, err))? else {
        return Ok(None);
    };
    let mut print = std::collections::hash_map::DefaultHasher::new();
    let mut read = Reader {
        device,
        mounted,
        budget,
        print: &mut print,
    };
    let mut stack = vec![read.frame(start, path.to_path_buf())?];
    while let Some(frame) = stack.last_mut() {
        let Some(name) = frame.children.pop() else {
            stack.pop();
            continue;
        };
        if frame.dir.is_none() {
            match open_deep(&frame.at).map_err(|err| unread(&frame.at, err))? {
                Some(dir) => frame.dir = Some(dir),
                // Moved away while it was read: its parent changed, which the next look sees.
                None => {
                    stack.pop();
                    continue;
                }
            }
        }
        let (Some(parent), at) = (frame.dir.as_ref(), frame.at.join(&name)) else {
            continue;
        };
        let child = match rustix::fs::openat(parent, name.as_os_str(), below_flags(), Mode::empty())
        {
            Ok(child) => child,
            // Removed or moved since it was listed: the next look sees its parent changed.
            Err(rustix::io::Errno::NOENT) => continue,
            Err(err) => return Err(unread(&at, err)),
        };
        let child = read.frame(child, at)?;
        let open = stack.iter().filter(|frame| frame.dir.is_some()).count();
        if open >= MAX_OPEN
            && let Some(oldest) = stack.iter_mut().find(|frame| frame.dir.is_some())
        {
            oldest.dir = None;
        }
        stack.push(child);
    }
    Ok(Some(print.finish()))
}

/// What one read checks each directory against, and what it adds up.
struct Reader<'a> {
    device: Option<u64>,
    mounted: &'a dyn Fn(&Path) -> bool,
    budget: &'a mut usize,
    print: &'a mut std::collections::hash_map::DefaultHasher,
}

impl Reader<'_> {
    /// List the open directory `dir` at `at`: every entry checked, its subdirectories kept
    /// to be read.
    fn frame(&mut self, dir: OwnedFd, at: PathBuf) -> Result<Frame, String> {
        let stat = rustix::fs::fstat(&dir).map_err(|err| unread(&at, err))?;
        if self.device.is_some_and(|device| stat.st_dev != device) || (self.mounted)(&at) {
            return Err(format!(
                "`{}` cannot be read: another file system is mounted there",
                shown(&at)
            ));
        }
        (
            stat.st_ino,
            stat.st_mtime,
            stat.st_mtime_nsec,
            stat.st_ctime,
            stat.st_ctime_nsec,
        )
            .hash(self.print);
        let mut children = Vec::new();
        let entries = Dir::read_from(&dir).map_err(|err| unread(&at, err))?;
        for entry in entries {
            let entry = entry.map_err(|err| unread(&at, err))?;
            let name = entry.file_name().to_bytes();
            if name == b"." || name == b".." {
                continue;
            }
            let Some(left) = self.budget.checked_sub(1) else {
                return Err(format!(
                    "`{}` cannot be read: more entries than a search for links reads",
                    shown(&at)
                ));
            };
            *self.budget = left;
            let child = at.join(std::ffi::OsStr::from_bytes(name));
            let kind = match entry.file_type() {
                FileType::Unknown => {
                    match rustix::fs::statat(&dir, entry.file_name(), AtFlags::SYMLINK_NOFOLLOW) {
                        Ok(stat) => FileType::from_raw_mode(stat.st_mode),
                        Err(rustix::io::Errno::NOENT) => continue,
                        Err(err) => return Err(unread(&child, err)),
                    }
                }
                kind => kind,
            };
            match kind {
                FileType::Symlink => {
                    return Err(format!(
                        "`{}` cannot be read: a symbolic link too deep to resolve by its name",
                        shown(&child)
                    ));
                }
                FileType::Directory => children.push(OsString::from_vec(name.to_vec())),
                _ if (self.mounted)(&child) => {
                    return Err(format!("`{}` cannot be read: a mount point", shown(&child)));
                }
                _ => {}
            }
        }
        Ok(Frame {
            dir: Some(dir),
            at,
            children,
        })
    }
}

/// Why `at` could not be read.
fn unread(at: &Path, err: rustix::io::Errno) -> String {
    format!(
        "`{}` cannot be read through its parent directories ({err})",
        shown(at)
    )
}

/// Open the directory `path` from its deepest ancestor that a path opens, one component
/// at a time, never through a symbolic link below that ancestor; `None` if it is gone.
fn open_deep(path: &Path) -> Result<Option<OwnedFd>, rustix::io::Errno> {
    let mut base = path;
    let mut rest: Vec<&std::ffi::OsStr> = Vec::new();
    while !super::links::fits_as_given(base) {
        let (Some(parent), Some(name)) = (base.parent(), base.file_name()) else {
            return Err(rustix::io::Errno::NAMETOOLONG);
        };
        rest.push(name);
        base = parent;
    }
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
    let mut dir = match rustix::fs::open(base, flags, Mode::empty()) {
        Ok(opened) => opened,
        Err(rustix::io::Errno::NOENT) => return Ok(None),
        Err(err) => return Err(err),
    };
    for name in rest.into_iter().rev() {
        dir = match rustix::fs::openat(&dir, name, below_flags(), Mode::empty()) {
            Ok(opened) => opened,
            Err(rustix::io::Errno::NOENT) => return Ok(None),
            Err(err) => return Err(err),
        };
    }
    Ok(Some(dir))
}

/// Opening a directory below one already open: never through a link.
fn below_flags() -> OFlags {
    OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC
}

/// A deep path as a warning shows it: its start and its end.
fn shown(path: &Path) -> String {
    let chars: Vec<char> = path.display().to_string().chars().collect();
    if chars.len() <= 400 {
        return chars.into_iter().collect();
    }
    let head: String = chars[..160].iter().collect();
    let tail: String = chars[chars.len() - 160..].iter().collect();
    format!("{head}…{tail}")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Round 87 (helper-81, L1): a deep directory holding more subdirectories than the
    /// process may open files is read whole (it used to hold one open directory per
    /// subdirectory waiting to be read, and stopped with "too many open files"). Run again
    /// under `prlimit --nofile=64`.
    #[test]
    fn a_wide_deep_tree_is_read_within_a_few_descriptors() {
        const INSIDE: &str = "PARQDB_TEST_DEEP_NOFILE";
        if std::env::var_os(INSIDE).is_none() {
            let status = std::process::Command::new("prlimit")
                .arg("--nofile=64:64")
                .arg(std::env::current_exe().expect("the test binary"))
                .args([
                    "--exact",
                    "warehouse::deep::tests::a_wide_deep_tree_is_read_within_a_few_descriptors",
                    "--test-threads=1",
                ])
                .env(INSIDE, "1")
                .status()
                .expect("prlimit (util-linux) runs");
            assert!(status.success(), "failed with 64 descriptors");
            return;
        }
        let dir = tempfile::tempdir().expect("dir");
        crate::warehouse::deep_file(dir.path(), "wide", 22);
        let deep = (0..22).fold(dir.path().join("wide"), |path, _| {
            path.join("d".repeat(200))
        });
        let bottom = open_deep(&deep).expect("opened").expect("there");
        for n in 0..200 {
            rustix::fs::mkdirat(
                &bottom,
                format!("s{n:03}").as_str(),
                Mode::from_raw_mode(0o755),
            )
            .expect("made");
        }
        let read = || read_below(&deep, None, &|_| false, &mut usize::MAX.clone());
        let print = read().expect("read").expect("there");
        // The same tree, the same fingerprint; a change, another.
        assert_eq!(read(), Ok(Some(print)));
        rustix::fs::mkdirat(&bottom, "s999", Mode::from_raw_mode(0o755)).expect("made");
        let changed = read();
        assert!(
            changed.as_ref().is_ok_and(|now| *now != Some(print)),
            "{changed:?}"
        );
        rustix::fs::symlinkat("/anywhere", &bottom, "l").expect("linked");
        assert!(read().is_err_and(|why| why.contains("symbolic link")));
    }
}
