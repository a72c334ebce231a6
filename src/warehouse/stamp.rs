//! What a directory was when a walk listed it ([`Stamp`]), and how often a walk looks
//! again at the directories that changed since ([`MAX_LOOKS`]): a walk is no snapshot, so
//! both walks for links (`link_search`, `links`) take a directory's stamp before they
//! list it and list it again if the stamp moved.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// How many looks after a walk a tree may keep changing before the walk gives up (a link
/// there may lead anywhere).
pub(super) const MAX_LOOKS: usize = 8;

/// A directory as it was when it was listed: which file it is, and when its entries and
/// it last changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Stamp {
    dev: u64,
    ino: u64,
    modified: (i64, i64),
    changed: (i64, i64),
}

impl Stamp {
    /// Whether `other` is a stamp of the same directory (perhaps changed since).
    pub(super) fn same_directory(&self, other: &Stamp) -> bool {
        (self.dev, self.ino) == (other.dev, other.ino)
    }

    /// The stamp of the directory at `path` (not following a link), if it is one.
    pub(super) fn at(path: &Path) -> Option<Stamp> {
        std::fs::symlink_metadata(path)
            .ok()
            .filter(std::fs::Metadata::is_dir)
            .map(|meta| Stamp::of(&meta))
    }

    /// The stamp of the directory `meta` describes.
    pub(super) fn of(meta: &std::fs::Metadata) -> Stamp {
        Stamp {
            dev: meta.dev(),
            ino: meta.ino(),
            modified: (meta.mtime(), meta.mtime_nsec()),
            changed: (meta.ctime(), meta.ctime_nsec()),
        }
    }
}
