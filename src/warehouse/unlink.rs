//! Deleting one object of a local warehouse: through open directories, each checked, the
//! file unlinked from the very directory that was checked.
//!
//! Nothing is deleted through a symbolic link, a mount point (another file system, or a
//! bind mount of this one: GC round 79) or at anything but a regular file, nor anywhere
//! but below the warehouse directory this process opened. Checking a path and then
//! deleting by path resolves it twice: a directory swapped in between (a rename, which
//! needs no mount rights, of a directory holding a bind mount of a live table) sent the
//! unlink through a mount the check never saw (round 90, A2), and a mount over the
//! warehouse directory between two batches sent every later deletion into another
//! warehouse (round 90, A1). So the directory is opened once from the root down
//! (`openat` with `O_NOFOLLOW`), each open directory is asked whether it is a mount root
//! or on another mount or device (`statx`), and the file is checked and unlinked with
//! `unlinkat` relative to its parent's open directory. Kernels before 5.8, whose `statx`
//! tells neither a mount root nor a mount id, read the mount table for each deletion.
//!
//! ```text
//! wh/indexes/orphan/d/m/part-0.parquet   m a bind mount of a live table: refused
//! wh/ (a bind mount of another warehouse since the process opened it): refused
//! ```

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use rustix::fs::{AtFlags, FileType, Mode, OFlags, Statx, StatxAttributes, StatxFlags};
use rustix::io::Errno;

/// The warehouse directory as this process opened it: its mount (`statx`'s mount id,
/// where the kernel gives one), device and inode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RootIdentity {
    mount: Option<u64>,
    device: u64,
    inode: u64,
}

impl RootIdentity {
    /// The identity of the directory at `root` now.
    pub(crate) fn of(root: &Path) -> Result<RootIdentity, String> {
        let dir = rustix::fs::open(root, directory(), Mode::empty())
            .map_err(|err| format!("cannot open `{}`: {err}", root.display()))?;
        let stat =
            stat_of(&dir).map_err(|err| format!("cannot inspect `{}`: {err}", root.display()))?;
        Ok(RootIdentity::from(&stat))
    }

    fn from(stat: &Statx) -> RootIdentity {
        RootIdentity {
            mount: (stat.stx_mask & StatxFlags::MNT_ID.bits() != 0).then_some(stat.stx_mnt_id),
            device: device(stat),
            inode: stat.stx_ino,
        }
    }
}

/// What deleting one local object came to.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Unlinked {
    Deleted,
    /// It (or a directory on its way) was not there.
    Missing,
    /// Not deleted, and never will be by this rule: why (kept, with a warning).
    Refused(String),
    /// The file system failed: why (the run stops; a rerun resumes).
    Failed(String),
}

/// Delete the object `name` below the local warehouse directory `root`, which this
/// process opened as `opened` (recorded on the first deletion if it was not at opening).
pub(crate) fn delete(root: &Path, name: &str, opened: &OnceLock<RootIdentity>) -> Unlinked {
    checked(root, name, opened, |dir, last| {
        rustix::fs::unlinkat(dir, last, AtFlags::empty())
    })
}

/// Check the object `name` as [`delete`] does, without deleting it: `Unlinked::Deleted`
/// means it may be deleted now. For a warehouse over a store of the caller's (a wrapper
/// of the local store), which deletes by path: a directory swapped in between this check
/// and that deletion is not seen (`Warehouse::local` deletes through the checked
/// directory instead).
pub(crate) fn check(root: &Path, name: &str, opened: &OnceLock<RootIdentity>) -> Unlinked {
    checked(root, name, opened, |_, _| Ok(()))
}

/// Walk to `name` through open directories, each checked, and `unlink` it from its
/// checked parent.
fn checked(
    root: &Path,
    name: &str,
    opened: &OnceLock<RootIdentity>,
    unlink: impl FnOnce(&OwnedFd, &str) -> Result<(), Errno>,
) -> Unlinked {
    let dir = match rustix::fs::open(root, directory(), Mode::empty()) {
        Ok(dir) => dir,
        Err(err) => return Unlinked::Failed(format!("cannot open `{}`: {err}", root.display())),
    };
    let stat = match stat_of(&dir) {
        Ok(stat) => stat,
        Err(err) => return Unlinked::Failed(format!("cannot inspect `{}`: {err}", root.display())),
    };
    let now = RootIdentity::from(&stat);
    if *opened.get_or_init(|| now) != now {
        return Unlinked::Refused(format!(
            "the warehouse directory `{}` is not the one this process opened (a mount over it or above it, or another directory in its place); nothing is deleted there",
            root.display()
        ));
    }
    let segments: Vec<&str> = name.split('/').collect();
    let Some((last, parents)) = segments.split_last() else {
        return Unlinked::Refused(format!("`{name}` names no file"));
    };
    let mut walker = Walker {
        root,
        device: now.device,
        mount: now.mount,
        table: None,
        path: root.to_path_buf(),
    };
    let mut dir = dir;
    for segment in parents {
        dir = match walker.enter(&dir, segment) {
            Ok(Some(next)) => next,
            Ok(None) => return Unlinked::Missing,
            Err(unlinked) => return unlinked,
        };
    }
    walker.path.push(last);
    let stat = match rustix::fs::statx(&dir, *last, no_follow(), stat_flags()) {
        Ok(stat) => stat,
        Err(Errno::NOENT) => return Unlinked::Missing,
        Err(err) => return walker.cannot("inspect", err),
    };
    if let Some(refused) = walker.refuses(&stat, true) {
        return refused;
    }
    match unlink(&dir, last) {
        Ok(()) => Unlinked::Deleted,
        Err(Errno::NOENT) => Unlinked::Missing,
        // A file the collector may not delete (a directory made read-only, a file system
        // mounted read-only, another user's file in a sticky directory): kept, and
        // collection goes on around it (round 90, B1: it stopped every run).
        Err(err @ (Errno::ACCESS | Errno::PERM | Errno::ROFS | Errno::BUSY)) => {
            Unlinked::Refused(format!(
                "`{}` cannot be deleted by the collector ({err}); it is kept: delete it by hand if it is garbage",
                walker.shown()
            ))
        }
        Err(err) => Unlinked::Failed(format!("deleting `{}` failed: {err}", walker.shown())),
    }
}

/// The way down from the warehouse directory: its device and mount, the mount table
/// where `statx` tells no mount root, and the path so far (for warnings).
struct Walker<'a> {
    root: &'a Path,
    device: u64,
    mount: Option<u64>,
    table: Option<std::collections::HashSet<PathBuf>>,
    path: PathBuf,
}

impl Walker<'_> {
    /// Open the directory `segment` of the open directory `dir`, checked; `None` if it is
    /// gone or no directory.
    fn enter(&mut self, dir: &OwnedFd, segment: &str) -> Result<Option<OwnedFd>, Unlinked> {
        self.path.push(segment);
        let next = match rustix::fs::openat(dir, segment, below(), Mode::empty()) {
            Ok(next) => next,
            Err(Errno::NOENT) => return Ok(None),
            // No directory there: a file (nothing below it), or a link (refused).
            Err(Errno::NOTDIR) => {
                let link = rustix::fs::statx(dir, segment, no_follow(), StatxFlags::TYPE)
                    .is_ok_and(|stat| {
                        FileType::from_raw_mode(stat.stx_mode.into()) == FileType::Symlink
                    });
                if !link {
                    return Ok(None);
                }
                return Err(Unlinked::Refused(format!(
                    "`{}` is a symbolic link; nothing is deleted through or at a link",
                    self.shown()
                )));
            }
            Err(Errno::LOOP) => {
                return Err(Unlinked::Refused(format!(
                    "`{}` is a symbolic link; nothing is deleted through or at a link",
                    self.shown()
                )));
            }
            Err(err) => return Err(self.cannot("open", err)),
        };
        let stat = stat_of(&next).map_err(|err| self.cannot("inspect", err))?;
        match self.refuses(&stat, false) {
            Some(refused) => Err(refused),
            None => Ok(Some(next)),
        }
    }

    /// Why what `stat` describes at the current path may not be passed (`last`: deleted).
    fn refuses(&mut self, stat: &Statx, last: bool) -> Option<Unlinked> {
        let kind = FileType::from_raw_mode(stat.stx_mode.into());
        let refused = |why: String| Some(Unlinked::Refused(why));
        if kind == FileType::Symlink {
            return refused(format!(
                "`{}` is a symbolic link; nothing is deleted through or at a link",
                self.shown()
            ));
        }
        if self.mounted(stat) {
            return refused(format!(
                "`{}` is a mount point below the warehouse (a bind mount shows another directory or file there); nothing is deleted at or below it",
                self.shown()
            ));
        }
        if device(stat) != self.device {
            return refused(format!(
                "`{}` is on another file system (a mount point below the warehouse); nothing is deleted there",
                self.shown()
            ));
        }
        if last && kind != FileType::RegularFile {
            return refused(format!("`{}` is not a regular file", self.shown()));
        }
        None
    }

    /// Whether the object `stat` describes is a mount point, or on another mount than
    /// the warehouse directory; the mount table by path where `statx` tells neither.
    fn mounted(&mut self, stat: &Statx) -> bool {
        let root_attribute = StatxAttributes::MOUNT_ROOT;
        if stat.stx_attributes_mask.contains(root_attribute)
            && stat.stx_attributes.contains(root_attribute)
        {
            return true;
        }
        let mount = (stat.stx_mask & StatxFlags::MNT_ID.bits() != 0).then_some(stat.stx_mnt_id);
        if let (Some(mount), Some(root)) = (mount, self.mount) {
            return mount != root;
        }
        if stat.stx_attributes_mask.contains(root_attribute) {
            return false;
        }
        let (root, path) = (self.root, &self.path);
        let table = self.table.get_or_insert_with(|| {
            std::fs::canonicalize(root)
                .ok()
                .and_then(|real| super::mounts::mount_points_below(&real).ok())
                .unwrap_or_default()
        });
        let real = std::fs::canonicalize(path).unwrap_or_else(|_| path.clone());
        table.contains(&real)
    }

    fn shown(&self) -> String {
        self.path.display().to_string()
    }

    /// The outcome of an `action` on the current path that failed with `err`: a refusal
    /// of permission keeps the object with a warning, and collection goes on around it
    /// (round 91, E1: a directory made unreadable between the listing and the deletes
    /// stopped every run, each resuming on the same file); anything else is the file
    /// system failing.
    fn cannot(&self, action: &str, err: Errno) -> Unlinked {
        match err {
            Errno::ACCESS | Errno::PERM => Unlinked::Refused(format!(
                "`{}` cannot be deleted by the collector (it may not {action} it: {err}); it is kept: delete it by hand if it is garbage",
                self.shown()
            )),
            err => Unlinked::Failed(format!("cannot {action} `{}`: {err}", self.shown())),
        }
    }
}

fn stat_of(dir: &OwnedFd) -> Result<Statx, Errno> {
    rustix::fs::statx(
        dir,
        "",
        AtFlags::EMPTY_PATH | AtFlags::NO_AUTOMOUNT,
        stat_flags(),
    )
}

fn stat_flags() -> StatxFlags {
    StatxFlags::BASIC_STATS | StatxFlags::MNT_ID
}

fn no_follow() -> AtFlags {
    AtFlags::SYMLINK_NOFOLLOW | AtFlags::NO_AUTOMOUNT
}

fn device(stat: &Statx) -> u64 {
    rustix::fs::makedev(stat.stx_dev_major, stat.stx_dev_minor)
}

/// Opening the warehouse directory (through links above it, as configured).
fn directory() -> OFlags {
    OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC
}

/// Opening a directory below one already open: never through a link.
fn below() -> OFlags {
    OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// Run the test `name` (its full path) again as `nobody` (util-linux's `setpriv`) if
    /// this process is root and not that run already; whether it did (and passed).
    pub(in crate::warehouse) fn ran_as_nobody(name: &str) -> bool {
        const INSIDE: &str = "PARQDB_TEST_UNPRIVILEGED";
        let probe = tempfile::tempdir().expect("dir");
        let meta = std::fs::metadata(probe.path()).expect("meta");
        if std::os::unix::fs::MetadataExt::uid(&meta) != 0 || std::env::var_os(INSIDE).is_some() {
            return false;
        }
        let status = std::process::Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(std::env::current_exe().expect("the test binary"))
            .args(["--exact", name, "--test-threads=1"])
            .env(INSIDE, "1")
            .env("TMPDIR", "/tmp")
            .status()
            .expect("setpriv (util-linux) runs");
        assert!(status.success(), "{name} failed as nobody");
        true
    }

    /// Delete `name` below `root` for a process that opened `root` as `opened`.
    fn unlinked(root: &Path, name: &str, opened: &OnceLock<RootIdentity>) -> Unlinked {
        delete(root, name, opened)
    }

    fn refused(outcome: Unlinked, what: &str) {
        assert!(
            matches!(&outcome, Unlinked::Refused(why) if why.contains(what)),
            "{outcome:?}"
        );
    }

    /// Links are never followed nor deleted; a missing object is missing; a plain file is
    /// deleted.
    #[test]
    fn links_are_never_followed_nor_deleted() {
        let dir = tempfile::tempdir().expect("dir");
        let (root, outside) = (dir.path().join("wh"), dir.path().join("outside"));
        std::fs::create_dir_all(root.join("indexes/a")).expect("dirs");
        std::fs::create_dir_all(&outside).expect("outside");
        std::fs::write(root.join("indexes/a/part-0"), b"x").expect("file");
        std::fs::write(outside.join("precious"), b"x").expect("outside file");
        std::os::unix::fs::symlink(&outside, root.join("indexes/link")).expect("dir link");
        std::os::unix::fs::symlink(outside.join("precious"), root.join("indexes/a/file-link"))
            .expect("file link");
        let opened = OnceLock::new();
        refused(
            unlinked(&root, "indexes/link/precious", &opened),
            "symbolic link",
        );
        refused(
            unlinked(&root, "indexes/a/file-link", &opened),
            "symbolic link",
        );
        refused(unlinked(&root, "indexes/a", &opened), "not a regular file");
        assert_eq!(unlinked(&root, "indexes/none", &opened), Unlinked::Missing);
        assert_eq!(
            unlinked(&root, "indexes/none/x", &opened),
            Unlinked::Missing
        );
        assert_eq!(
            unlinked(&root, "indexes/a/part-0", &opened),
            Unlinked::Deleted
        );
        assert!(outside.join("precious").exists() && root.join("indexes/a/file-link").exists());
        assert!(!root.join("indexes/a/part-0").exists());
    }

    /// Round 90 (helper-84, B1): a file the collector may not delete (its directory made
    /// read-only) is refused, not a failure that stops every run. (As root, which may
    /// delete anyway, the file is deleted.)
    #[test]
    fn a_file_the_collector_may_not_delete_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        // Root may delete anyway: run again as `nobody`.
        if ran_as_nobody("warehouse::unlink::tests::a_file_the_collector_may_not_delete_is_refused")
        {
            return;
        }
        let dir = tempfile::tempdir().expect("dir");
        let root = dir.path().join("wh");
        std::fs::create_dir_all(root.join("indexes/junk")).expect("dirs");
        std::fs::write(root.join("indexes/junk/f.parquet"), b"x").expect("file");
        let junk = root.join("indexes/junk");
        std::fs::set_permissions(&junk, std::fs::Permissions::from_mode(0o555)).expect("chmod");
        let outcome = unlinked(&root, "indexes/junk/f.parquet", &OnceLock::new());
        std::fs::set_permissions(&junk, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let root_user =
            std::os::unix::fs::MetadataExt::uid(&std::fs::metadata(&root).expect("meta")) == 0;
        match root_user {
            true => assert_eq!(outcome, Unlinked::Deleted),
            false => refused(outcome, "cannot be deleted by the collector"),
        }
        // Round 91 (helper-85, E1): a directory on the way the collector may not read or
        // search (0o444, 0o000).
        std::fs::create_dir_all(root.join("indexes/zzz/sub")).expect("dirs");
        for mode in [0o444, 0o000] {
            std::fs::write(root.join("indexes/zzz/sub/f.parquet"), b"x").expect("file");
            let sub = root.join("indexes/zzz/sub");
            std::fs::set_permissions(&sub, std::fs::Permissions::from_mode(mode)).expect("chmod");
            let outcome = unlinked(&root, "indexes/zzz/sub/f.parquet", &OnceLock::new());
            std::fs::set_permissions(&sub, std::fs::Permissions::from_mode(0o755)).expect("chmod");
            match root_user {
                true => assert_eq!(outcome, Unlinked::Deleted),
                false => refused(outcome, "cannot be deleted by the collector"),
            }
        }
    }

    /// GC round 79 (helper-73): nothing is deleted at or below a bind mount below the
    /// root, which shows another directory (a whole prefix, a directory outside) or file
    /// there under a garbage name; what it shows is deletable by its own name. Round 89
    /// (helper-83, R1) and round 90 (helper-84, A2): a directory holding such a mount
    /// renamed into garbage (into the path, even between the check of a component and
    /// the unlink) is seen where it is opened. Round 90 (A1): a mount over the warehouse
    /// directory after the process opened it stops every deletion there.
    #[test]
    fn nothing_is_deleted_through_a_bind_mount() {
        use super::super::mounts::{bind, in_a_mount_namespace};
        in_a_mount_namespace(
            "warehouse::unlink::tests::nothing_is_deleted_through_a_bind_mount",
            |dir| {
                let root = dir.join("wh");
                std::fs::create_dir_all(root.join("indexes/live")).expect("made");
                std::fs::write(root.join("indexes/live/part-0.parquet"), b"PAR1").expect("file");
                std::fs::create_dir_all(dir.join("outside/src")).expect("made");
                std::fs::write(dir.join("outside/src/docs-0.parquet"), b"PAR1").expect("file");
                let opened = OnceLock::new();
                opened
                    .set(RootIdentity::of(&root).expect("identity"))
                    .expect("first");
                bind(dir, "wh/indexes", "wh/indexes/orphan/mnt");
                bind(dir, "outside/src", "wh/indexes/orphan/src");
                bind(
                    dir,
                    "wh/indexes/live/part-0.parquet",
                    "wh/indexes/orphan/p.parquet",
                );
                for through in [
                    "indexes/orphan/mnt/live/part-0.parquet",
                    "indexes/orphan/src/docs-0.parquet",
                    "indexes/orphan/p.parquet",
                ] {
                    refused(unlinked(&root, through, &opened), "mount point");
                }
                // R1, A2: a directory holding a mount moved into garbage.
                std::fs::create_dir_all(dir.join("park/d/m")).expect("made");
                bind(dir, "wh/indexes/live", "park/d/m");
                std::fs::rename(dir.join("park/d"), root.join("indexes/orphan/d")).expect("moved");
                refused(
                    unlinked(&root, "indexes/orphan/d/m/part-0.parquet", &opened),
                    "mount point",
                );
                assert!(root.join("indexes/live/part-0.parquet").exists());
                // A1: another warehouse mounted over this one since it was opened.
                std::fs::create_dir_all(dir.join("other/indexes/live")).expect("made");
                std::fs::write(dir.join("other/indexes/live/part-0.parquet"), b"PAR1")
                    .expect("file");
                bind(dir, "other", "wh");
                refused(
                    unlinked(&root, "indexes/live/part-0.parquet", &opened),
                    "not the one this process opened",
                );
                assert!(dir.join("other/indexes/live/part-0.parquet").exists());
            },
        );
    }
}
