//! Where a file's strings lead outside a local warehouse, as the file system resolves
//! them: what a reader of the file may read there, now or later, the collector does not
//! read, so such a file may name anything.
//!
//! Every local path the name reading tries for a string (each spelling, each directory a
//! reader may stand in, the file's own folder; see `recognise`) is observed where
//! [`Links`](super::links::Links) resolves it, so that the question "does it lead outside?"
//! is asked of exactly the paths the question "what inside does it name?" reads (rounds
//! 59–61). What counts:
//!
//! * something outside exists there (a file or a directory); for a relative path read
//!   from a directory other than the warehouse's (a working directory, a home, a
//!   directory above), only a file that may be JSON or a directory holding one directly
//!   (a word of free text, or `../x`, matches directories everywhere);
//! * the root or one of its ancestors, holding a file that may be JSON directly (a reader
//!   listing the directory reads it; the catalog's own ownership marker apart);
//! * nothing there yet, but the nearest existing directory on its way is outside (a
//!   reader may find a file there later);
//! * for an absolute path or a URI, nothing there yet and the path, resolved through
//!   what exists and by its letters past it, outside (round 60).
//!
//! The last two do not count for a relative path read from a directory other than the
//! warehouse's or the file's own: from a working directory elsewhere, `../x` leads outside
//! by construction. What appears there later is not read (an open class, documented in
//! `docs/gc-attacks.md`).

use std::collections::HashMap;
use std::io::Read;
use std::path::{Path, PathBuf};

use super::layout::OWNER_MARKER;
use super::objects::opens_json;

/// The most entries of one directory read for files that may be JSON; past it, the
/// directory may hold one.
const MAX_ENTRIES: usize = 10_000;

/// What the paths observed since the last [`Outside::take`] reach outside the warehouse.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Reach {
    /// Something a reader may read names from is there (see the module docs).
    pub existing: bool,
    /// Nothing is there yet, but the nearest existing directory on the way is outside.
    pub on_the_way: bool,
    /// Nothing is there yet, and the path resolved by its letters past what exists is
    /// outside.
    pub lexically: bool,
}

impl Reach {
    /// Whether a string reaching this may name anything: `absolute` if it was written as
    /// an absolute path or a URI (a relative one reaches outside by its letters alone in
    /// a common spelling: `../../../indexes/…`, relative to the file, read from the root).
    pub(crate) fn may_name_anything(&self, absolute: bool) -> bool {
        self.existing || self.on_the_way || (absolute && self.lexically)
    }
}

/// The observer a [`Links`](super::links::Links) view carries while it reads a file's
/// strings.
#[derive(Debug, Default)]
pub(super) struct Outside {
    reach: Reach,
    /// Whether each directory holds a file that may be JSON directly.
    holding: HashMap<PathBuf, bool>,
}

impl Outside {
    /// Observe one path a reader may open: `resolved` is its nearest existing ancestor (or
    /// itself, if `exists`) resolved, `full` the whole path resolved through `resolved`
    /// and by its letters past it, `root` the warehouse root resolved, `strict` whether it
    /// is a relative path read from a directory other than the warehouse's (or a single
    /// word read from above it).
    pub(super) fn observe(
        &mut self,
        root: &Path,
        resolved: &Path,
        exists: bool,
        full: &Path,
        strict: bool,
    ) {
        let outside = |path: &Path| !(path.starts_with(root) || root.starts_with(path));
        if exists {
            if outside(resolved) {
                if !strict || self.may_hold_names(resolved, root) {
                    self.reach.existing = true;
                }
            } else if root.starts_with(resolved) && self.holds_json(resolved, root) {
                self.reach.existing = true;
            }
        } else if !strict {
            self.reach.on_the_way |= outside(resolved);
            self.reach.lexically |= outside(full);
        }
    }

    /// What was observed since the last call, forgotten.
    pub(super) fn take(&mut self) -> Reach {
        std::mem::take(&mut self.reach)
    }

    /// Whether `path` is a file that may be JSON or a directory holding one directly.
    fn may_hold_names(&mut self, path: &Path, root: &Path) -> bool {
        match path.is_dir() {
            true => self.holds_json(path, root),
            false => file_may_be_json(path),
        }
    }

    /// Whether the directory `dir` holds a file that may be JSON directly (the warehouse's
    /// ownership marker apart); past [`MAX_ENTRIES`] entries, or unreadable, it may.
    fn holds_json(&mut self, dir: &Path, root: &Path) -> bool {
        if let Some(known) = self.holding.get(dir) {
            return *known;
        }
        let marker = root.join(OWNER_MARKER);
        let holds = match std::fs::read_dir(dir) {
            Err(_) => true,
            Ok(entries) => {
                let mut holds = false;
                for (n, entry) in entries.enumerate() {
                    let Ok(entry) = entry else {
                        holds = true;
                        break;
                    };
                    let path = entry.path();
                    if n >= MAX_ENTRIES || (path != marker && file_may_be_json(&path)) {
                        holds = true;
                        break;
                    }
                }
                holds
            }
        };
        self.holding.insert(dir.to_path_buf(), holds);
        holds
    }
}

/// Whether the file at `path` may be a JSON document (its first bytes; unreadable: may).
fn file_may_be_json(path: &Path) -> bool {
    // Only a regular file is opened (a FIFO would block).
    if !std::fs::metadata(path).is_ok_and(|meta| meta.is_file()) {
        return false;
    }
    let mut start = [0u8; 64];
    let Ok(mut file) = std::fs::File::open(path) else {
        return true;
    };
    let mut read = 0;
    while read < start.len() {
        match file.read(&mut start[read..]) {
            Ok(0) => break,
            Ok(n) => read += n,
            Err(_) => return true,
        }
    }
    read > 0 && opens_json(&start[..read])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `<tmp>/parent/warehouse` (the root), `<tmp>/parent/outside/` holding `names.json`
    /// and `notes.txt`, `<tmp>/parent/empty/`.
    fn tree() -> (tempfile::TempDir, PathBuf, PathBuf) {
        let tmp = tempfile::tempdir().expect("tmp");
        let parent = tmp.path().canonicalize().expect("canonical").join("parent");
        let root = parent.join("warehouse");
        std::fs::create_dir_all(root.join("indexes")).expect("root");
        std::fs::create_dir_all(parent.join("outside")).expect("outside");
        std::fs::create_dir_all(parent.join("empty")).expect("empty");
        std::fs::write(parent.join("outside/names.json"), "{\"t\": 1}").expect("json");
        std::fs::write(parent.join("outside/notes.txt"), "plain").expect("text");
        (tmp, parent, root)
    }

    fn reach(root: &Path, resolved: &Path, exists: bool, full: &Path, strict: bool) -> Reach {
        let mut outside = Outside::default();
        outside.observe(root, resolved, exists, full, strict);
        outside.take()
    }

    #[test]
    fn something_outside_counts_and_from_elsewhere_only_what_may_hold_names() {
        let (_tmp, parent, root) = tree();
        let json = parent.join("outside/names.json");
        let text = parent.join("outside/notes.txt");
        let empty = parent.join("empty");
        for (path, strict, counts) in [
            (&json, false, true),
            (&text, false, true),
            (&empty, false, true),
            (&json, true, true),
            (&text, true, false),
            (&empty, true, false),
            (&parent.join("outside"), true, true),
        ] {
            let found = reach(&root, path, true, path, strict);
            assert_eq!(found.existing, counts, "{} strict {strict}", path.display());
        }
        // Inside the warehouse: the name reading's business, never outside.
        let inside = root.join("indexes");
        assert_eq!(
            reach(&root, &inside, true, &inside, false),
            Reach::default()
        );
    }

    #[test]
    fn the_root_and_its_ancestors_count_when_they_hold_json_directly() {
        let (_tmp, parent, root) = tree();
        // The parent holds no file; the root holds only the catalog's ownership marker.
        std::fs::write(root.join(OWNER_MARKER), "{\"catalog\": \"x\"}").expect("marker");
        assert!(!reach(&root, &root, true, &root, false).existing);
        assert!(!reach(&root, &parent, true, &parent, false).existing);
        std::fs::write(parent.join("g.json"), "{}").expect("json");
        std::fs::write(root.join("g.json"), "  {}").expect("json");
        assert!(reach(&root, &parent, true, &parent, true).existing);
        assert!(reach(&root, &root, true, &root, true).existing);
    }

    #[test]
    fn nothing_there_yet_counts_on_the_way_or_by_its_letters_but_not_from_elsewhere() {
        let (_tmp, parent, root) = tree();
        let later = parent.join("outside/later.json");
        // The nearest existing directory is outside.
        let found = reach(&root, &parent.join("outside"), false, &later, false);
        assert!(found.on_the_way && found.lexically);
        assert!(found.may_name_anything(false));
        // Only the letters lead outside (`../../../indexes/x` read from the root): an
        // absolute path counts, a relative one does not.
        let found = reach(&root, &parent, false, &parent.join("indexes/x"), false);
        assert!(!found.on_the_way && found.lexically);
        assert!(found.may_name_anything(true));
        assert!(!found.may_name_anything(false));
        // From elsewhere, nothing there counts for nothing.
        let found = reach(&root, &parent.join("outside"), false, &later, true);
        assert_eq!(found, Reach::default());
    }
}
