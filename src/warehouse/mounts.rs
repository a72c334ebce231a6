//! The mount points below a local warehouse, as the collector's process sees them
//! (`/proc/self/mountinfo`). A bind mount of the same file system shows another directory
//! (or file) under a name inside the warehouse, and no device number tells it apart: a
//! deletion through it deletes the other directory's file (GC round 79). Nothing is
//! deleted at or below one.
//!
//! ```text
//! mount --bind wh/indexes wh/indexes/orphan/mnt     indexes/orphan/mnt/live/… is live data
//! ```
//!
//! An overlay mount (and a bind mount of part of one) shows files of its layers, which the
//! table names only by the strings given when it was mounted: escaped by the mounter's
//! rules, relative to its chroot, or stale once a link on the way is repointed or a layer
//! moved (round 86, helper-80: A1, B1, D1, C1). What an overlay shows is therefore unknown:
//! a path that one other than the warehouse's own mount serves may show anything, except
//! a container's root file system (an overlay at `/`, made by its runtime from image
//! layers that are the host's directories, which no path in the container shows). Other
//! file systems that show a directory under another path by rules of their own (FUSE's
//! `bindfs`, an NFS export of the same machine mounted back) are not seen: the collector's
//! assumption 5.

use std::collections::{HashMap, HashSet};
use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};

/// One mount: its id, its file system (`major:minor`), the directory of that file system
/// it shows (`/` for the whole), where, and whether it is an overlay.
#[derive(Debug, Clone)]
struct Mount {
    id: Vec<u8>,
    device: Vec<u8>,
    shows: PathBuf,
    at: PathBuf,
    overlay: bool,
}

/// What a path shows through mounts besides itself ([`MountTable::shown_through`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Shown {
    /// The other places a reader of the path reads.
    pub places: Vec<PathBuf>,
    /// An overlay other than the warehouse's own mount serves the path: it may show
    /// anything.
    pub unknown: bool,
}

/// The process's mount table, for what a bind mount shows: the mounts, and the ones at
/// each mount point.
#[derive(Debug, Clone, Default)]
pub(super) struct MountTable {
    mounts: Vec<Mount>,
    at: HashMap<PathBuf, Vec<usize>>,
    /// The most components of a mount point: no deeper directory is one.
    deepest: usize,
}

impl MountTable {
    /// The table as `/proc/self/mountinfo` gives it; empty where it cannot be read (what a
    /// bind mount shows is then read only by device and inode, `link_search`).
    pub(super) fn read() -> MountTable {
        match std::fs::read("/proc/self/mountinfo") {
            Ok(table) => MountTable::parse(&table),
            Err(_) => MountTable::default(),
        }
    }

    /// A table in `/proc/<pid>/mountinfo`'s format.
    fn parse(table: &[u8]) -> MountTable {
        let mounts: Vec<Mount> = table
            .split(|byte| *byte == b'\n')
            .filter_map(|line| {
                let fields: Vec<&[u8]> = line.split(|byte| *byte == b' ').collect();
                // After the optional fields and their `-`: the file system's type.
                let tail = fields.iter().position(|field| *field == b"-")?;
                Some(Mount {
                    id: fields.first()?.to_vec(),
                    device: fields.get(2)?.to_vec(),
                    shows: PathBuf::from(OsString::from_vec(unescaped(fields.get(3)?))),
                    at: PathBuf::from(OsString::from_vec(unescaped(fields.get(4)?))),
                    overlay: fields.get(tail + 1).is_some_and(|kind| *kind == b"overlay"),
                })
            })
            .collect();
        let mut at: HashMap<PathBuf, Vec<usize>> = HashMap::new();
        for (index, mount) in mounts.iter().enumerate() {
            at.entry(mount.at.clone()).or_default().push(index);
        }
        let deepest = at
            .keys()
            .map(|at| at.components().count())
            .max()
            .unwrap_or(0);
        MountTable {
            mounts,
            at,
            deepest,
        }
    }

    /// Every place a mount at `at` (a resolved path) may show, where it is a bind mount of
    /// a directory that other mounts of its file system show too (round 81):
    /// `mount --bind wh/indexes/old src/part=1` shows `wh/indexes/old` at `src/part=1`.
    /// Each mount of the same file system showing an ancestor gives a place (a warehouse
    /// that is itself a bind mount among them: round 82, M1), and every mount at `at`
    /// counts, not only the one on top: which one a reader sees depends on mounts above
    /// it (stacked, moved, or hidden under a mount of a parent directory: rounds 82–83),
    /// and one more name only keeps more.
    pub(super) fn shown_at(&self, at: &Path) -> Vec<PathBuf> {
        let Some(here) = self.at.get(at) else {
            return Vec::new();
        };
        here.iter()
            .map(|index| &self.mounts[*index])
            .flat_map(|mount| {
                self.mounts
                    .iter()
                    .filter(move |other| other.device == mount.device && other.at != mount.at)
                    .filter_map(move |other| {
                        Some(other.at.join(mount.shows.strip_prefix(&other.shows).ok()?))
                    })
            })
            .filter(|shown| shown != at)
            .collect()
    }

    /// Whether something is mounted at the resolved path `at`.
    pub(super) fn is_mount_point(&self, at: &Path) -> bool {
        self.at.contains_key(at)
    }

    /// The mounts at the deepest mount point at or above the resolved `path`: those that
    /// serve it (every mount at that point counts: rounds 82–83).
    fn serving(&self, path: &Path) -> &[usize] {
        self.ancestors_that_may_be_mount_points(path)
            .find_map(|above| self.at.get(above))
            .map_or(&[], Vec::as_slice)
    }

    /// `path` and the directories above it, from the bottom, without those deeper than
    /// any mount point: a long path's ancestors are not each looked up (GC round 126: each
    /// lookup hashes the ancestor, so a path of many segments cost time quadratic in its
    /// length).
    fn ancestors_that_may_be_mount_points<'p>(
        &self,
        path: &'p Path,
    ) -> impl Iterator<Item = &'p Path> {
        let depth = path.components().count();
        path.ancestors().skip(depth.saturating_sub(self.deepest))
    }

    /// The mount point of an overlay that serves the resolved `real_root` (a container's
    /// root file system at `/` aside): its layers show the warehouse's files at other
    /// paths, which the table cannot tell (round 87, O1).
    pub(super) fn overlay_serving(&self, real_root: &Path) -> Option<&Path> {
        self.serving(real_root)
            .iter()
            .map(|index| &self.mounts[*index])
            .find(|mount| mount.overlay && mount.at != Path::new("/"))
            .map(|mount| mount.at.as_path())
    }

    /// Every other place a reader of the resolved path `path` reads, through the bind
    /// mounts at it and, with `ancestors`, at every directory above it (a source table's
    /// location, or a link's target, below a bind mount of warehouse garbage: round 85,
    /// A1, B1, E1; a bind names its place by the kernel's own reading, which follows
    /// moves); and whether an overlay other than one serving the warehouse root
    /// `real_root` (or a container's root file system, at `/`) serves it (with
    /// `ancestors`) or is mounted at it: then it may show anything (round 86).
    pub(super) fn shown_through(&self, path: &Path, ancestors: bool, real_root: &Path) -> Shown {
        let mut shown = Shown::default();
        if !ancestors && !self.at.contains_key(path) {
            return shown;
        }
        let aboves: Vec<&Path> = match ancestors {
            true => self.ancestors_that_may_be_mount_points(path).collect(),
            false => vec![path],
        };
        for above in aboves {
            if !self.at.contains_key(above) {
                continue;
            }
            let Ok(rest) = path.strip_prefix(above) else {
                continue;
            };
            for other in self.shown_at(above) {
                let place = other.join(rest);
                if !shown.places.contains(&place) {
                    shown.places.push(place);
                }
            }
        }
        let here: &[usize] = match ancestors {
            true => self.serving(path),
            false => self.at.get(path).map_or(&[], Vec::as_slice),
        };
        let root_mounts: Vec<&[u8]> = self
            .serving(real_root)
            .iter()
            .map(|index| self.mounts[*index].id.as_slice())
            .collect();
        // A container's root file system (an overlay its runtime made from image layers,
        // at `/`) is read as its own files: its layers are the host's directories, which
        // no path in this namespace shows, and every path outside a volume is on it.
        shown.unknown = here.iter().map(|index| &self.mounts[*index]).any(|mount| {
            mount.overlay
                && mount.at != Path::new("/")
                && !root_mounts.contains(&mount.id.as_slice())
        });
        shown
    }
}

/// The mount points strictly below `real_root` (a resolved path), for kernels whose
/// `statx` does not tell a mount point (before 5.8). On Linux the mount table must be
/// readable: a process without its own `/proc/self` (a `/proc` not mounted, or another
/// process-ID namespace's, as after `nsenter -m`) gets an error, and nothing is deleted
/// (round 80, P1). Elsewhere (no such table) only another device is seen.
pub(super) fn mount_points_below(real_root: &Path) -> Result<HashSet<PathBuf>, String> {
    let table = match std::fs::read("/proc/self/mountinfo") {
        Ok(table) => table,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound && !cfg!(target_os = "linux") => {
            return Ok(HashSet::new());
        }
        Err(err) => {
            return Err(format!(
                "cannot read this process's mount table, `/proc/self/mountinfo` ({err}), which shows the bind mounts a deletion must not pass through; nothing is deleted in a local warehouse without it (mount this process's own /proc)"
            ));
        }
    };
    Ok(table
        .split(|byte| *byte == b'\n')
        .filter_map(|line| line.split(|byte| *byte == b' ').nth(4))
        .map(|field| PathBuf::from(OsString::from_vec(unescaped(field))))
        .filter(|point| point != real_root && point.starts_with(real_root))
        .collect())
}

/// A mount table field with its octal escapes (`\040` for a space) undone.
fn unescaped(field: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(field.len());
    let mut at = 0;
    while at < field.len() {
        let octal = field
            .get(at + 1..at + 4)
            .filter(|digits| field[at] == b'\\' && digits.iter().all(|d| (b'0'..=b'7').contains(d)))
            .map(|digits| digits.iter().fold(0u32, |n, d| n * 8 + u32::from(d - b'0')));
        match octal.and_then(|value| u8::try_from(value).ok()) {
            Some(byte) => {
                out.push(byte);
                at += 4;
            }
            None => {
                out.push(field[at]);
                at += 1;
            }
        }
    }
    out
}

/// Run `test` (named `name`, its full test path) in a mount namespace of its own (`unshare
/// -m`, util-linux; with a user namespace, `-Ur`, unless the process is root), where it may
/// mount below the directory it is given and the mounts end with its process: the test
/// binary runs itself again there.
#[cfg(test)]
pub(super) fn in_a_mount_namespace(name: &str, test: impl FnOnce(&Path)) {
    const INSIDE: &str = "PARQDB_TEST_MOUNT_NAMESPACE_ROOT";
    if let Some(root) = std::env::var_os(INSIDE) {
        test(Path::new(&root));
        return;
    }
    let dir = tempfile::tempdir().expect("dir");
    // Root needs no user namespace (a machine may have them off); anyone else does.
    let root = std::fs::read_to_string("/proc/self/status").is_ok_and(|status| {
        status
            .lines()
            .find_map(|line| line.strip_prefix("Uid:"))
            .and_then(|ids| ids.split_whitespace().nth(1))
            == Some("0")
    });
    let status = std::process::Command::new("unshare")
        .args(if root { &["-m"][..] } else { &["-Urm"][..] })
        .args(["--propagation", "private"])
        .arg(std::env::current_exe().expect("the test binary"))
        .args(["--exact", name, "--test-threads=1"])
        .env(INSIDE, dir.path())
        .status()
        .expect("unshare (util-linux) runs");
    assert!(status.success(), "{name} failed in its own mount namespace");
}

/// `mount --bind root/from root/to` (`to` made first, a file where `from` is one).
#[cfg(test)]
pub(super) fn bind(root: &Path, from: &str, to: &str) {
    let target = root.join(to);
    std::fs::create_dir_all(target.parent().expect("parent")).expect("made");
    if root.join(from).is_dir() {
        std::fs::create_dir_all(&target).expect("made");
    } else {
        std::fs::write(&target, b"").expect("made");
    }
    let status = std::process::Command::new("mount")
        .arg("--bind")
        .args([root.join(from), target])
        .status()
        .expect("mount runs");
    assert!(status.success(), "mount --bind {from} {to}");
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Round 86: which overlays may show anything, from a table as a container shows it:
    /// its root file system an overlay at `/`, the warehouse on a volume, and an overlay
    /// mounted at `/mnt/o` (a bind mount of part of it at `/srv/part`).
    #[test]
    fn a_path_an_overlay_serves_may_show_anything_but_a_containers_root() {
        let table = MountTable::parse(
            b"1 0 0:40 / / rw - overlay overlay rw,lowerdir=/var/lib/docker/l/A:/var/lib/docker/l/B\n\
2 1 8:1 /srv/data /data rw - ext4 /dev/sda1 rw\n\
3 1 0:50 / /mnt/o rw - overlay overlay rw,lowerdir=/x:/y\n\
4 1 0:50 /sub /srv/part rw - overlay overlay rw,lowerdir=/x:/y\n",
        );
        let root = Path::new("/data/wh");
        let unknown = |path: &str| table.shown_through(Path::new(path), true, root).unknown;
        assert!(!unknown("/usr/lib/x"), "the container's root");
        assert!(!unknown("/data/wh/indexes/a"), "the warehouse's own volume");
        assert!(!unknown("/data/elsewhere"), "another path on the volume");
        assert!(unknown("/mnt/o"), "an overlay's mount point");
        assert!(unknown("/mnt/o/a/b.parquet"), "below it");
        assert!(unknown("/srv/part/c"), "a bind mount of part of it");
        let at = |path: &str| table.shown_through(Path::new(path), false, root).unknown;
        assert!(at("/mnt/o") && !at("/mnt/o/a") && !at("/usr"));
        // The warehouse itself on an overlay other than `/`: a path that overlay serves is
        // the warehouse's own files, but its layers show them at other paths (round 87,
        // O1): the collector deletes nothing there.
        let root = Path::new("/mnt/o/wh");
        assert!(
            !table
                .shown_through(Path::new("/mnt/o/src"), true, root)
                .unknown
        );
        assert_eq!(table.overlay_serving(root), Some(Path::new("/mnt/o")));
        assert_eq!(table.overlay_serving(Path::new("/data/wh")), None);
        assert_eq!(
            table.overlay_serving(Path::new("/srv/wh")),
            None,
            "a container's root"
        );
    }

    #[test]
    fn escapes_in_the_mount_table_are_undone() {
        assert_eq!(unescaped(br"/a\040b\134c\11"), b"/a b\\c\\11");
    }

    /// Round 80 (helper-74, P1): without its own mount table (no `/proc/self`, as in a
    /// `/proc` of another process-ID namespace or none), a Linux process sees no mounts it
    /// could rule out: an error, never "no mounts".
    #[test]
    fn no_mount_table_is_an_error() {
        in_a_mount_namespace(
            "warehouse::mounts::tests::no_mount_table_is_an_error",
            |root| {
                let status = std::process::Command::new("mount")
                    .args(["-t", "tmpfs", "none", "/proc"])
                    .status()
                    .expect("mount runs");
                assert!(status.success(), "a tmpfs over /proc");
                let refused = mount_points_below(root).expect_err("no mount table");
                assert!(refused.contains("/proc/self/mountinfo"), "{refused}");
            },
        );
    }

    /// A bind mount below the root is a mount point below it; the root itself is not.
    #[test]
    fn bind_mounts_below_the_root_are_seen() {
        in_a_mount_namespace(
            "warehouse::mounts::tests::bind_mounts_below_the_root_are_seen",
            |root| {
                std::fs::create_dir_all(root.join("wh/indexes/a")).expect("made");
                bind(root, "wh/indexes/a", "wh/indexes/b/m");
                let real = std::fs::canonicalize(root.join("wh")).expect("real");
                let points = mount_points_below(&real).expect("table");
                assert_eq!(points, HashSet::from([real.join("indexes/b/m")]));
                // What it shows, and that a directory no mount shows shows nothing else.
                let table = MountTable::read();
                assert!(
                    table
                        .shown_at(&real.join("indexes/b/m"))
                        .contains(&real.join("indexes/a")),
                    "{table:?}"
                );
                assert_eq!(
                    table.shown_at(&real.join("indexes/a")),
                    Vec::<PathBuf>::new()
                );
                // The warehouse itself a bind mount of another directory: what a mount
                // shows is named at the warehouse's own path too (round 82, M1).
                std::fs::create_dir_all(root.join("data/indexes/c")).expect("made");
                bind(root, "data", "wh2");
                bind(root, "wh2/indexes/c", "src/part=1");
                let wh2 = std::fs::canonicalize(root.join("wh2")).expect("real");
                let shown = MountTable::read()
                    .shown_at(&std::fs::canonicalize(root.join("src/part=1")).expect("real"));
                assert!(shown.contains(&wh2.join("indexes/c")), "{shown:?}");
                // A mount moved onto another keeps its earlier place in the table; every
                // mount at a point counts (round 82, M2).
                bind(root, "wh/indexes/a", "park");
                std::fs::create_dir_all(root.join("src/moved")).expect("made");
                let run = |args: &[&std::ffi::OsStr]| {
                    let status = std::process::Command::new("mount").args(args).status();
                    assert!(status.expect("mount runs").success(), "mount {args:?}");
                };
                let moved = root.join("src/moved");
                run(&[
                    "-t".as_ref(),
                    "tmpfs".as_ref(),
                    "none".as_ref(),
                    moved.as_os_str(),
                ]);
                run(&[
                    "--move".as_ref(),
                    root.join("park").as_os_str(),
                    moved.as_os_str(),
                ]);
                let shown =
                    MountTable::read().shown_at(&std::fs::canonicalize(&moved).expect("real"));
                assert!(shown.contains(&real.join("indexes/a")), "{shown:?}");
                // A mount hidden under a mount of a parent directory, at the same point as
                // the bind mount a reader sees (round 83, O1).
                let (hidden, cover) = (root.join("out/src/hid"), root.join("out/src"));
                std::fs::create_dir_all(&hidden).expect("made");
                run(&[
                    "-t".as_ref(),
                    "tmpfs".as_ref(),
                    "none".as_ref(),
                    hidden.as_os_str(),
                ]);
                run(&[
                    "-t".as_ref(),
                    "tmpfs".as_ref(),
                    "none".as_ref(),
                    cover.as_os_str(),
                ]);
                bind(root, "wh/indexes/a", "out/src/hid");
                let shown =
                    MountTable::read().shown_at(&std::fs::canonicalize(&hidden).expect("real"));
                assert!(shown.contains(&real.join("indexes/a")), "{shown:?}");
            },
        );
    }
}
