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
//! ```text
//! indexes/orphan/dddd…/dddd…/…/part-0.parquet    read through open directories: names nothing
//! indexes/orphan/dddd…/dddd…/…/shared -> /x       a link: may lead anywhere
//! ```

use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, Dir, FileType, Mode, OFlags};

/// Read the directory `path` (absolute, too long to open by its path) and everything
/// below it through open directories. `device`: the file system the walk keeps to (one
/// of another is a mount); `mounted`: whether a path is a mount point in the process's
/// table; `budget`: how many more entries may be read. `Ok(false)` if it names nothing a
/// reader could follow, `Ok(true)` if it was gone (moved while the walk ran), `Err(why)`
/// if it holds something a reader may follow anywhere, or could not be read.
pub(super) fn read_below(
    path: &Path,
    device: Option<u64>,
    mounted: &dyn Fn(&Path) -> bool,
    budget: &mut usize,
) -> Result<bool, String> {
    let unread = |at: &Path, err: rustix::io::Errno| {
        format!(
            "`{}` cannot be read through its parent directories ({err})",
            shown(at)
        )
    };
    let Some(start) = open_deep(path).map_err(|err| unread(path, err))? else {
        return Ok(true);
    };
    let mut pending: Vec<(OwnedFd, PathBuf)> = vec![(start, path.to_path_buf())];
    while let Some((dir, at)) = pending.pop() {
        let stat = rustix::fs::fstat(&dir).map_err(|err| unread(&at, err))?;
        if device.is_some_and(|device| stat.st_dev != device) || mounted(&at) {
            return Err(format!(
                "`{}` cannot be read: another file system is mounted there",
                shown(&at)
            ));
        }
        let entries = Dir::read_from(&dir).map_err(|err| unread(&at, err))?;
        for entry in entries {
            let entry = entry.map_err(|err| unread(&at, err))?;
            let name = entry.file_name().to_bytes();
            if name == b"." || name == b".." {
                continue;
            }
            let Some(left) = budget.checked_sub(1) else {
                return Err(format!(
                    "`{}` cannot be read: more entries than a search for links reads",
                    shown(&at)
                ));
            };
            *budget = left;
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
                FileType::Directory => {
                    match rustix::fs::openat(&dir, entry.file_name(), below_flags(), Mode::empty())
                    {
                        Ok(opened) => pending.push((opened, child)),
                        // Removed (or moved) since it was listed: what moved is read where
                        // it went only by a path walk's looks, so this is unknown.
                        Err(err) => return Err(unread(&child, err)),
                    }
                }
                _ if mounted(&child) => {
                    return Err(format!("`{}` cannot be read: a mount point", shown(&child)));
                }
                _ => {}
            }
        }
    }
    Ok(false)
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
    let opened = match rustix::fs::open(
        base,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    ) {
        Ok(opened) => opened,
        Err(rustix::io::Errno::NOENT) => return Ok(None),
        Err(err) => return Err(err),
    };
    let mut dir = opened;
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
