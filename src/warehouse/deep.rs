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
//! The searches read every deep tree again at each of their looks, as they list a changed
//! directory again: a link moved once from a deep tree not read yet into one already read
//! is found there (round 87, S1). A read holds at most [`MAX_OPEN`] directories open and
//! keeps, per level, only the names still to read, never the whole path (round 87, L1:
//! one open directory per pending subdirectory ran out of descriptors; round 88, M1: a
//! path per level of a chain thousands deep took memory in the square of its depth). A
//! mount point is told by `statx`'s mount-root attribute, from its parent's open
//! directory; kernels without it (before 5.8) are asked the mount table by path.
//!
//! ```text
//! indexes/orphan/dddd…/dddd…/…/part-0.parquet    read through open directories: names nothing
//! indexes/orphan/dddd…/dddd…/…/shared -> /x       a link: may lead anywhere
//! ```

use std::ffi::{OsStr, OsString};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, Dir, FileType, Mode, OFlags, StatxAttributes, StatxFlags};

/// The most directories one read holds open at a time; a directory whose descriptor was
/// let go is opened again from its path's deepest ancestor that a path opens.
const MAX_OPEN: usize = 32;

/// A directory being read: its descriptor (let go past [`MAX_OPEN`]), its name in its
/// parent (empty for the start), and its subdirectories not read yet.
struct Frame {
    dir: Option<OwnedFd>,
    name: OsString,
    children: Vec<OsString>,
}

/// Read the directory `path` (absolute, too long to open by its path) and everything
/// below it through open directories. `device`: the file system the walk keeps to (one
/// of another is a mount); `mounted`: whether a path is a mount point in the process's
/// table (asked only where `statx` cannot tell); `budget`: how many more entries may be
/// read. `Ok(false)` if it is gone (moved while the walk ran), `Ok(true)` if it names
/// nothing a reader could follow, `Err(why)` if it holds something a reader may follow
/// anywhere, or could not be read.
pub(super) fn read_below(
    path: &Path,
    device: Option<u64>,
    mounted: &dyn Fn(&Path) -> bool,
    budget: &mut usize,
) -> Result<bool, String> {
    let Some(start) = open_deep(path).map_err(|err| unread(path, err))? else {
        return Ok(false);
    };
    let reader = Reader {
        start: path,
        device,
        mounted,
    };
    if reader.mount_root(&start, OsStr::new(""), || path.to_path_buf())? {
        return Err(format!("`{}` cannot be read: a mount point", shown(path)));
    }
    let mut stack = vec![reader.frame(start, OsString::new(), &[], budget)?];
    while let Some(frame) = stack.last_mut() {
        let Some(name) = frame.children.pop() else {
            stack.pop();
            continue;
        };
        if frame.dir.is_none() {
            let at = reader.path_of(&stack, None);
            match open_deep(&at).map_err(|err| unread(&at, err))? {
                Some(dir) => {
                    if let Some(frame) = stack.last_mut() {
                        frame.dir = Some(dir);
                    }
                }
                // Moved away while it was read: its parent changed, which the next look sees.
                None => {
                    stack.pop();
                    continue;
                }
            }
        }
        let Some(parent) = stack.last().and_then(|frame| frame.dir.as_ref()) else {
            continue;
        };
        let child = match rustix::fs::openat(parent, name.as_os_str(), below_flags(), Mode::empty())
        {
            Ok(child) => child,
            // Removed or moved since it was listed: the next look sees its parent changed.
            Err(rustix::io::Errno::NOENT) => continue,
            Err(err) => return Err(unread(&reader.path_of(&stack, Some(&name)), err)),
        };
        let child = reader.frame(child, name, &stack, budget)?;
        let open = stack.iter().filter(|frame| frame.dir.is_some()).count();
        if open >= MAX_OPEN
            && let Some(oldest) = stack.iter_mut().find(|frame| frame.dir.is_some())
        {
            oldest.dir = None;
        }
        stack.push(child);
    }
    Ok(true)
}

/// What one read checks each directory against.
struct Reader<'a> {
    start: &'a Path,
    device: Option<u64>,
    mounted: &'a dyn Fn(&Path) -> bool,
}

impl Reader<'_> {
    /// The path of the directory on top of `stack` (and of its entry `name`), for a
    /// warning or to open it again.
    fn path_of(&self, stack: &[Frame], name: Option<&OsStr>) -> PathBuf {
        let mut path = self.start.to_path_buf();
        for frame in stack.iter().skip(1) {
            path.push(&frame.name);
        }
        if let Some(name) = name {
            path.push(name);
        }
        path
    }

    /// Whether the entry `name` of the open directory `dir` (itself, for an empty name) is
    /// a mount point: `statx`'s mount-root attribute, else the table by its path.
    fn mount_root(
        &self,
        dir: &impl AsFd,
        name: &OsStr,
        path: impl FnOnce() -> PathBuf,
    ) -> Result<bool, String> {
        let flags = AtFlags::SYMLINK_NOFOLLOW
            | AtFlags::NO_AUTOMOUNT
            | if name.is_empty() {
                AtFlags::EMPTY_PATH
            } else {
                AtFlags::empty()
            };
        match rustix::fs::statx(dir, name, flags, StatxFlags::empty()) {
            Ok(stat)
                if stat
                    .stx_attributes_mask
                    .contains(StatxAttributes::MOUNT_ROOT) =>
            {
                Ok(stat.stx_attributes.contains(StatxAttributes::MOUNT_ROOT))
            }
            Ok(_) | Err(rustix::io::Errno::NOSYS) => Ok((self.mounted)(&path())),
            Err(rustix::io::Errno::NOENT) => Ok(false),
            Err(err) => Err(unread(&path(), err)),
        }
    }

    /// List the open directory `dir` (named `name`, below the directories of `stack`):
    /// every entry checked, its subdirectories kept to be read.
    fn frame(
        &self,
        dir: OwnedFd,
        name: OsString,
        stack: &[Frame],
        budget: &mut usize,
    ) -> Result<Frame, String> {
        let here = || {
            let mut path = self.path_of(stack, None);
            if !name.is_empty() {
                path.push(&name);
            }
            path
        };
        let stat = rustix::fs::fstat(&dir).map_err(|err| unread(&here(), err))?;
        if self.device.is_some_and(|device| stat.st_dev != device) {
            return Err(format!(
                "`{}` cannot be read: another file system is mounted there",
                shown(&here())
            ));
        }
        let mut children = Vec::new();
        let entries = Dir::read_from(&dir).map_err(|err| unread(&here(), err))?;
        for entry in entries {
            let entry = entry.map_err(|err| unread(&here(), err))?;
            let entry_name = entry.file_name().to_bytes();
            if entry_name == b"." || entry_name == b".." {
                continue;
            }
            let Some(left) = budget.checked_sub(1) else {
                return Err(format!(
                    "`{}` cannot be read: more entries than a search for links reads",
                    shown(&here())
                ));
            };
            *budget = left;
            let child = OsStr::from_bytes(entry_name);
            let kind = match entry.file_type() {
                FileType::Unknown => {
                    match rustix::fs::statat(&dir, entry.file_name(), AtFlags::SYMLINK_NOFOLLOW) {
                        Ok(stat) => FileType::from_raw_mode(stat.st_mode),
                        Err(rustix::io::Errno::NOENT) => continue,
                        Err(err) => return Err(unread(&here().join(child), err)),
                    }
                }
                kind => kind,
            };
            if kind == FileType::Symlink {
                return Err(format!(
                    "`{}` cannot be read: a symbolic link too deep to resolve by its name",
                    shown(&here().join(child))
                ));
            }
            if self.mount_root(&dir, child, || here().join(child))? {
                return Err(format!(
                    "`{}` cannot be read: a mount point",
                    shown(&here().join(child))
                ));
            }
            if kind == FileType::Directory {
                children.push(OsString::from_vec(entry_name.to_vec()));
            }
        }
        Ok(Frame {
            dir: Some(dir),
            name,
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
    let mut rest: Vec<&OsStr> = Vec::new();
    while !fits_as_given(base) {
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

/// Whether `path`, as given, fits what the kernel accepts (`PATH_MAX` in all, `NAME_MAX`
/// per component): if it does, a lookup that fails with `ENAMETOOLONG` failed on what it
/// resolved to (links to long paths), which a reader opening the short path reaches all
/// the same (round 54, N2): what lies there is unknown, as behind a refused permission.
pub(super) fn fits_as_given(path: &Path) -> bool {
    path.as_os_str().len() < libc::PATH_MAX as usize
        && path.components().all(|part| part.as_os_str().len() <= 255)
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
    /// under `prlimit --nofile=64`. Round 88 (helper-82, M1): a chain thousands deep is
    /// read in memory that grows with its depth, not its square (under `--as` of 2 GiB, a
    /// chain of 5,000 levels of 200-byte names, whose paths kept per level took 3.2 GB).
    #[test]
    fn a_wide_deep_tree_is_read_within_a_few_descriptors() {
        const INSIDE: &str = "PARQDB_TEST_DEEP_NOFILE";
        if std::env::var_os(INSIDE).is_none() {
            let status = std::process::Command::new("prlimit")
                .args(["--nofile=64:64", "--as=2147483648:2147483648"])
                .arg(std::env::current_exe().expect("the test binary"))
                .args([
                    "--exact",
                    "warehouse::deep::tests::a_wide_deep_tree_is_read_within_a_few_descriptors",
                    "--test-threads=1",
                ])
                .env(INSIDE, "1")
                .status()
                .expect("prlimit (util-linux) runs");
            assert!(status.success(), "failed with 64 descriptors and 2 GiB");
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
        assert_eq!(read(), Ok(true));
        rustix::fs::symlinkat("/anywhere", &bottom, "l").expect("linked");
        assert!(read().is_err_and(|why| why.contains("symbolic link")));
        // A chain 5,000 deep (3.2 GB of paths kept per level before).
        crate::warehouse::deep_file(dir.path(), "chain", 5_000);
        let chain = dir.path().join("chain").join("d".repeat(200));
        let read = read_below(&chain, None, &|_| false, &mut usize::MAX.clone());
        assert_eq!(read, Ok(true));
    }
}
