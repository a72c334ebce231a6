//! One view of a local warehouse's symbolic links ([`Links`]): where a local path leads
//! through links, patterns and `..`, and which links a directory a location names holds
//! into the warehouse. `recognise` reads every spelling of a location; this module answers
//! for each local one what the file system makes of it.

use std::collections::{HashMap, HashSet};
use std::ffi::OsString;
use std::path::{Path, PathBuf};

use super::outside::{Outside, Reach};
use super::{MANAGED_PREFIXES, object_name};

/// The names a local path reaches through symbolic links (see [`Links::linked_names`]),
/// with a view of the links of its own, and whether the lookup gave up at a bound (the
/// names are then every managed prefix: it may reach anything).
pub(super) fn linked_names(dir: &Path, path: &Path) -> (Vec<String>, bool) {
    let mut links = Links::new(dir, None);
    let names = links.linked_names(path);
    (names, links.take_unbounded())
}

/// `path` with empty and `.` segments dropped and `..` resolved, where a `..` at the
/// start stays at the start (`/..` is `/`).
pub(super) fn clamp_dots(path: &str) -> String {
    let mut segments: Vec<&str> = Vec::new();
    for segment in path.split('/') {
        match segment {
            "" | "." => {}
            ".." => {
                segments.pop();
            }
            other => segments.push(other),
        }
    }
    segments.join("/")
}

/// The names a location at the root or above it denotes: a recursive listing of it reads
/// every object.
pub(super) fn every_managed_prefix() -> Vec<String> {
    MANAGED_PREFIXES.iter().map(|p| (*p).to_owned()).collect()
}

/// The names the absolute, resolved `path` denotes below `root`: every managed prefix if
/// it is the root or above it (a recursive listing reads every object).
fn names_below(root: &Path, path: &Path) -> Vec<String> {
    if root.starts_with(path) {
        return every_managed_prefix();
    }
    let Some(below) = path.strip_prefix(root).ok().and_then(Path::to_str) else {
        return Vec::new();
    };
    object_name(below).ok().into_iter().collect()
}

/// Whether the path `below` a warehouse root (not the root itself) is no name: not UTF-8,
/// or not a valid object name (a control character). Nothing at or below it can be listed
/// or deleted, but links there lead on.
pub(super) fn unnameable(below: &Path) -> bool {
    !below.as_os_str().is_empty()
        && below
            .to_str()
            .is_none_or(|below| object_name(below).is_err())
}

/// What makes a segment of a local path a pattern to some reader: `glob(3)`'s `*`, `?` and
/// `[`, braces, and the `(` of a shell's extended patterns (`@(s)`, `+(s)`; round 45, X1).
const PATTERN_CHARS: [char; 5] = ['*', '?', '[', '{', '('];

/// The most patterns one local path is read through ([`Links::through_patterns`]).
const MAX_PATTERNS: usize = 4;

/// The most directory entries tried in patterns' places for one local path
/// ([`Links::through_patterns`]).
const MAX_PATTERN_ENTRIES: usize = 10_000;

/// The most directory entries one view reads walking local directories for links into
/// the warehouse ([`Links::walk`]); past it, a walk may name anything.
pub(super) const MAX_WALK_ENTRIES: usize = 100_000;

/// The most memory (about) the answers one view remembers by path may take before it
/// forgets them ([`Links::remember`]).
const MAX_VIEW_BYTES: usize = 32 << 20;

/// The memory of one remembered answer besides its path's bytes (the key, and a resolved
/// path about as long): the map's entry and the allocations' overhead.
const VIEW_ENTRY_OVERHEAD: usize = 96;

/// The most dangling links one lookup follows as written (as the kernel's `ELOOP` bound).
const MAX_HOPS: usize = 40;

/// The most components of a path [`Links`] resolves from its parent's resolution; a deeper
/// one is resolved by `canonicalize` in one call.
const MAX_DEPTH: usize = 64;

/// A link as a walk read it: its device, inode and change time (none if it could not be
/// looked at).
type LinkSeen = Option<(u64, u64, i64, i64)>;

/// What a test runs after a walk lists a directory (it moves directories there).
#[cfg(test)]
pub(super) struct ListingHook(pub Box<dyn FnMut(&Path) + Send>);

#[cfg(test)]
impl std::fmt::Debug for ListingHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ListingHook")
    }
}

/// One view of a local warehouse's links, taken as a reader first needs each part: the
/// root's resolved path, the identities (device, inode) of its ancestors and managed
/// prefixes, and each path's resolution. A metadata file's strings are read with one view
/// (a commit reads hundreds of strings; each used to resolve the root and stat its
/// ancestors again). A view answers as lookups of their own would while the file system
/// stays as it is; links that show the process rather than the file system
/// (`/proc/self/fd/…`, `/dev/fd/…`) keep their first answer for the batch.
#[derive(Debug)]
pub(super) struct Links {
    dir: PathBuf,
    /// The root resolved, once it has resolved.
    root: Option<PathBuf>,
    /// The root's ancestors and managed prefixes, by identity.
    known: Option<Vec<((u64, u64), PathBuf)>>,
    /// The process's mount table, read when a walk first needs it (what a bind mount in
    /// a directory outside shows: round 81, S1).
    mounts: Option<super::mounts::MountTable>,
    /// Each path looked up, resolved (`None`: it does not resolve, and will not), by its
    /// exact bytes (see [`lasting`] for which answers are kept):
    /// `Path` compares `/a/l/` and `/a/l` as equal, but `canonicalize` fails on the first
    /// when `l` leads to a file.
    resolved: HashMap<OsString, Option<PathBuf>>,
    /// Each directory's identity (`None`: no such directory), by its exact bytes.
    ids: HashMap<OsString, Option<(u64, u64)>>,
    /// A lookup gave up at a bound ([`Links::anything`]) since the reader last asked.
    unbounded: bool,
    /// What each directory walked for links names ([`Links::walk`]), by its resolved path.
    walked: HashMap<PathBuf, Vec<String>>,
    /// How many more directory entries walks may read ([`MAX_WALK_ENTRIES`]).
    walk_budget: usize,
    /// Each directory a walk went through, with the directory that walk started from
    /// (whose names cover it).
    walked_from: HashMap<PathBuf, PathBuf>,
    /// Whether named directories are walked at all ([`Links::set_walking`]).
    walking: bool,
    /// The paths whose lookup was refused permission.
    denied_paths: HashSet<OsString>,
    /// About how much memory the answers remembered by path take ([`MAX_VIEW_BYTES`]).
    remembered: usize,
    /// A lookup was refused permission since the last answer: the collector's user may not
    /// see what an engine's user reads there (round 46, U1–U3), so it may be anything.
    denied: bool,
    /// The directories a reader of a relative path may stand in ([`Links::bases`]).
    bases: Vec<PathBuf>,
    /// This process's working directory, resolved.
    cwd: Option<PathBuf>,
    /// A path below the working directory is being read from the other bases.
    rebasing: bool,
    /// Whether each path looked up by [`Links::exists`] is there (a link counts, dangling
    /// or not), by its exact bytes.
    present: HashMap<OsString, bool>,
    /// Called after each directory a walk lists (tests move directories there).
    #[cfg(test)]
    after_listing: Option<ListingHook>,
    /// A single word read from above the warehouse is walked too (a source table's
    /// location, not a word of free text: round 48, N1).
    walk_words: bool,
    /// Where the paths looked up lead outside the warehouse, observed while a file's
    /// strings are read ([`Links::observe_outside`]).
    outside: Option<Outside>,
    /// The path looked up is a relative one read from a directory other than the
    /// warehouse's ([`Links::set_elsewhere`]).
    elsewhere: bool,
}

impl Links {
    pub(super) fn new(dir: &Path, as_given: Option<&Path>) -> Links {
        let cwd = std::env::current_dir().ok();
        // The warehouse directory and every directory above it, resolved and as configured
        // (through links: `./warehouse -> /disk2/wh`), also from the shell's logical
        // working directory (`$PWD`, which keeps the links `getcwd` resolves: round 48,
        // S3), and this process's working directory.
        let mut bases: Vec<PathBuf> = dir.ancestors().map(Path::to_path_buf).collect();
        if let Some(given) = as_given {
            bases.extend(given.ancestors().map(Path::to_path_buf));
            if let (Some(pwd), Some(cwd)) = (std::env::var_os("PWD"), &cwd)
                && let Ok(below) = given.strip_prefix(cwd)
            {
                bases.extend(
                    Path::new(&pwd)
                        .join(below)
                        .ancestors()
                        .map(Path::to_path_buf),
                );
            }
        }
        bases.extend(cwd.clone());
        let mut unique = Vec::new();
        for base in bases {
            if !unique.contains(&base) {
                unique.push(base);
            }
        }
        Links {
            bases: unique,
            cwd: cwd.and_then(|cwd| std::fs::canonicalize(cwd).ok()),
            rebasing: false,
            present: HashMap::new(),
            walk_words: false,
            dir: dir.to_path_buf(),
            root: None,
            known: None,
            mounts: None,
            resolved: HashMap::new(),
            ids: HashMap::new(),
            unbounded: false,
            walked: HashMap::new(),
            walk_budget: MAX_WALK_ENTRIES,
            walked_from: HashMap::new(),
            walking: true,
            denied_paths: HashSet::new(),
            remembered: 0,
            denied: false,
            outside: None,
            elsewhere: false,
            #[cfg(test)]
            after_listing: None,
        }
    }

    /// Whether the paths looked up from now on are relative ones read from a directory
    /// other than the warehouse's (a working directory, a home, a directory above): where
    /// they lead outside counts only if a reader may find names there now (see
    /// [`Outside`]).
    pub(super) fn set_elsewhere(&mut self, elsewhere: bool) {
        self.elsewhere = elsewhere;
    }

    /// Observe where the paths looked up from now on lead outside the warehouse (see
    /// [`Outside`]): for the strings of a file, not for a source table's location.
    pub(super) fn observe_outside(&mut self) {
        self.outside = Some(Outside::default());
    }

    /// Where the paths looked up since the last call lead outside the warehouse.
    pub(super) fn take_outside(&mut self) -> Reach {
        self.outside.as_mut().map(Outside::take).unwrap_or_default()
    }

    /// The warehouse root resolved, looked up once it resolves.
    fn root(&mut self) -> Option<PathBuf> {
        if self.root.is_none() {
            let dir = self.dir.clone();
            self.root = self.canonical(&dir);
        }
        self.root.clone()
    }

    /// Whether the directory `dir` resolves to the warehouse root or below it.
    fn inside(&mut self, dir: &Path) -> bool {
        match (self.root(), self.canonical(dir)) {
            (Some(root), Some(real)) => real.starts_with(root),
            _ => false,
        }
    }

    /// What a lookup that gives up at a bound names: anything, every managed prefix. It is
    /// marked, so that a string in a file whose reading gave up keeps everything rather
    /// than being taken for a stray note naming `indexes` (round 44, J1).
    pub(super) fn anything(&mut self) -> Vec<String> {
        self.unbounded = true;
        every_managed_prefix()
    }

    /// The names of what the resolved `path` shows through mounts (at it, and with
    /// `ancestors` at every directory above it: [`MountTable::shown_through`]); anything
    /// where the table cannot tell (an overlay other than the warehouse's own mount).
    ///
    /// [`MountTable::shown_through`]: super::mounts::MountTable::shown_through
    fn names_through_mounts(&mut self, root: &Path, path: &Path, ancestors: bool) -> Vec<String> {
        let shown = self
            .mounts
            .get_or_insert_with(super::mounts::MountTable::read)
            .shown_through(path, ancestors, root);
        let mut names: Vec<String> = Vec::new();
        for place in &shown.places {
            for name in names_below(root, place) {
                if !names.contains(&name) {
                    names.push(name);
                }
            }
        }
        if shown.unknown {
            names.extend(self.anything());
        }
        names
    }

    /// Whether a lookup gave up at a bound since the last call, and forget it.
    pub(super) fn take_unbounded(&mut self) -> bool {
        std::mem::take(&mut self.unbounded)
    }

    /// Let walks read only `entries` more directory entries (a test of the bound).
    #[cfg(test)]
    pub(super) fn limit_walks(&mut self, entries: usize) {
        self.walk_budget = entries;
    }

    /// Whether the directories locations name are walked for links ([`Links::walk`]):
    /// not for a relative location read against an ancestor of the warehouse, whose every
    /// word of free text would otherwise walk a top-level directory.
    pub(super) fn set_walking(&mut self, walking: bool) {
        self.walking = walking;
    }

    /// The directories a reader of a relative path may stand in: the warehouse directory
    /// first, then every directory above it (resolved and as configured) and this
    /// process's working directory.
    pub(super) fn bases(&self) -> &[PathBuf] {
        &self.bases
    }

    /// Whether a single relative word read from above the warehouse is walked.
    pub(super) fn walks_words(&self) -> bool {
        self.walk_words
    }

    /// Walk single relative words from above the warehouse too (for a source table's
    /// location) or not (for the words of a file).
    pub(super) fn set_walk_words(&mut self, walk_words: bool) {
        self.walk_words = walk_words;
    }

    /// Whether `path` resolves (a refused lookup counts: what lies there is unknown).
    pub(super) fn exists(&mut self, path: &Path) -> bool {
        if let Some(known) = self.present.get(path.as_os_str()) {
            return *known;
        }
        let denied = self.denied;
        let found =
            self.canonical(path).is_some() || self.denied || path.symlink_metadata().is_ok();
        self.denied = denied;
        self.remember(path);
        self.present.insert(path.as_os_str().to_owned(), found);
        found
    }

    /// Count an answer about to be remembered for `path`; past [`MAX_VIEW_BYTES`], forget
    /// every answer remembered by path first. They only spare lookups: forgotten, each is
    /// looked up again, and the view's memory stays bounded however many paths a file
    /// names (GC round 126: a stray file of distinct names held gigabytes).
    fn remember(&mut self, path: &Path) {
        let bytes = 2 * path.as_os_str().len() + VIEW_ENTRY_OVERHEAD;
        if self.remembered + bytes > MAX_VIEW_BYTES {
            self.resolved.clear();
            self.ids.clear();
            self.present.clear();
            self.denied_paths.clear();
            self.remembered = 0;
        }
        self.remembered += bytes;
    }

    fn canonical(&mut self, path: &Path) -> Option<PathBuf> {
        if let Some(known) = self.resolved.get(path.as_os_str()) {
            if known.is_none() && self.denied_paths.contains(path.as_os_str()) {
                self.denied = true;
            }
            return known.clone();
        }
        let resolved = self.resolve(path);
        if let Err(err) = &resolved
            && (err.kind() == std::io::ErrorKind::PermissionDenied
                || (err.raw_os_error() == Some(libc::ENAMETOOLONG)
                    && super::deep::fits_as_given(path)))
        {
            self.denied = true;
            self.remember(path);
            self.denied_paths.insert(path.as_os_str().to_owned());
        }
        if let Some(answer) = lasting(&resolved) {
            self.remember(path);
            self.resolved.insert(path.as_os_str().to_owned(), answer);
        }
        resolved.ok()
    }

    /// `std::fs::canonicalize(path)`, from its parent's resolution in this view where that
    /// gives the same answer: a plain last component (no `.`, `..`, empty or trailing
    /// segment) that is no link is its parent's resolution joined with it, and one that is
    /// missing there is missing (`NotFound`); anything else (a link, an error of another
    /// kind, a parent unresolved for another reason than a lasting miss) is resolved by
    /// `canonicalize` itself. One `lstat` per
    /// new name instead of a `readlink` per component of every path (the directories
    /// above the warehouse were read again for each of a file's strings).
    fn resolve(&mut self, path: &Path) -> std::io::Result<PathBuf> {
        use std::os::unix::ffi::OsStrExt;
        let text = path.as_os_str().as_bytes();
        let plain = path.is_absolute()
            && !text.ends_with(b"/")
            && !text.ends_with(b"/.")
            && !text.ends_with(b"/..")
            && !text.windows(2).any(|pair| pair == b"//")
            && !text.windows(3).any(|three| three == b"/./")
            && !text.windows(4).any(|four| four == b"/../");
        let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
            return std::fs::canonicalize(path);
        };
        // A deep path is resolved in one call: the walk up its parents would recurse once
        // per component.
        if !plain || parent.as_os_str().is_empty() || path.components().count() > MAX_DEPTH {
            return std::fs::canonicalize(path);
        }
        let denied = self.denied;
        let Some(real_parent) = self.canonical(parent) else {
            self.denied = denied;
            // A parent that lastingly does not resolve, for a reason other than permission
            // (missing, no directory, a loop, too long), leaves nothing below it to find.
            let missing = matches!(self.resolved.get(parent.as_os_str()), Some(None))
                && !self.denied_paths.contains(parent.as_os_str());
            if missing {
                return Err(std::io::ErrorKind::NotFound.into());
            }
            return std::fs::canonicalize(path);
        };
        let candidate = real_parent.join(name);
        match std::fs::symlink_metadata(&candidate) {
            Ok(meta) if !meta.file_type().is_symlink() => Ok(candidate),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => Err(err),
            _ => std::fs::canonicalize(path),
        }
    }

    fn id(&mut self, path: &Path) -> Option<(u64, u64)> {
        use std::os::unix::fs::MetadataExt;
        if let Some(known) = self.ids.get(path.as_os_str()) {
            return *known;
        }
        let id = std::fs::metadata(path).map(|m| (m.dev(), m.ino()));
        if let Some(answer) = lasting(&id) {
            self.remember(path);
            self.ids.insert(path.as_os_str().to_owned(), answer);
        }
        id.ok()
    }

    /// The names a local path reaches through symbolic links: the path with its longest
    /// existing prefix resolved (`canonicalize`), if that lies below the warehouse
    /// directory (itself resolved); anything if a lookup on the way was refused
    /// permission.
    pub(super) fn linked_names(&mut self, path: &Path) -> Vec<String> {
        // A path into a process's view (`/proc/<pid>/root/…` resolves through that
        // process's mounts, not the collector's) or the kernel's (round 56, P1).
        if ["/proc", "/sys"].iter().any(|top| path.starts_with(top)) {
            return self.anything();
        }
        let mut names = self.resolved_names(path);
        if std::mem::take(&mut self.denied) {
            names.extend(self.anything());
        }
        names
    }

    fn resolved_names(&mut self, path: &Path) -> Vec<String> {
        let Some(root) = self.root() else {
            return Vec::new();
        };
        let mut existing = path.to_path_buf();
        let mut rest: Vec<OsString> = Vec::new();
        let mut hops = 0;
        let resolved = loop {
            // The deepest directory on the way that resolves, found from the top: a path
            // resolves only if its parent does, so every one below the first that does not
            // does not either, and none of them is looked up (round 121, F3: looking up
            // each of a long path's ancestors from the bottom, and remembering each, cost
            // memory and time quadratic in its length).
            let ancestors: Vec<&Path> = existing.ancestors().collect();
            let mut first_missing = None;
            for (depth, ancestor) in ancestors.iter().enumerate().rev() {
                if self.canonical(ancestor).is_none() {
                    first_missing = Some(depth);
                    break;
                }
            }
            let Some(missing) = first_missing else {
                match self.canonical(&existing) {
                    Some(resolved) => break resolved,
                    None => return Vec::new(),
                }
            };
            // Those below it, from the bottom up: a last segment `..` below a directory
            // that is not there reaches nothing.
            for below in &ancestors[..missing] {
                match below.file_name() {
                    Some(last) => rest.push(last.to_owned()),
                    None => return Vec::new(),
                }
            }
            let missing = ancestors[missing];
            // A link that dangles here may lead somewhere for a reader elsewhere (through
            // `/proc/self/cwd`): followed as written, to its last existing directory
            // (round 48, N6, N7).
            if hops < MAX_HOPS
                && let Ok(target) = std::fs::read_link(missing)
                && let Some(parent) = missing.parent()
            {
                hops += 1;
                existing = parent.join(target);
                continue;
            }
            match (missing.file_name(), missing.parent()) {
                (Some(last), Some(parent)) => {
                    rest.push(last.to_owned());
                    match self.canonical(parent) {
                        Some(resolved) => break resolved,
                        None => return Vec::new(),
                    }
                }
                _ => return Vec::new(),
            }
        };
        let mut full = resolved.clone();
        for part in rest.iter().rev() {
            full.push(part);
        }
        // A path that resolves to bytes that are no UTF-8 names no object, but a directory
        // there may hold links into the warehouse, which this view cannot name: anything
        // (round 54, N1).
        let Some(full) = full.to_str() else {
            return self.anything();
        };
        let full = Path::new("/").join(clamp_dots(full));
        let strict = !self.walking || self.elsewhere;
        if let Some(outside) = self.outside.as_mut() {
            outside.observe(&root, &resolved, rest.is_empty(), &full, strict);
        }
        let mut names = names_below(&root, &full);
        // The path, or a directory above it, a mount point that shows another directory
        // (a bind mount of warehouse garbage, an overlay of it): a reader of the path
        // reads there, file or directory, existing or not (rounds 84–85, C1, A1, E1, F1).
        for name in self.names_through_mounts(&root, &full, true) {
            if !names.contains(&name) {
                names.push(name);
            }
        }
        // Below this process's working directory: maybe reached through
        // `/proc/self/cwd` in a spelling no text rule sees (a pattern, an escape, a link to
        // it), which for a reader elsewhere leads from its own working directory. The rest
        // is read from every directory a reader may stand in (round 48, N2–N7).
        if let Some(cwd) = self.cwd.clone()
            && !self.rebasing
            && let Ok(below) = full.strip_prefix(&cwd)
            && !below.as_os_str().is_empty()
        {
            self.rebasing = true;
            for base in self.bases.clone() {
                let first = below.components().next().map(|c| base.join(c));
                if base != cwd && first.is_some_and(|first| self.exists(&first)) {
                    for name in self.resolved_names(&base.join(below)) {
                        if !names.contains(&name) {
                            names.push(name);
                        }
                    }
                }
            }
            self.rebasing = false;
        }
        // A bind mount (or a second mount of the same export) shows a directory of the
        // warehouse under another path, which `canonicalize` does not see through: a
        // directory on the way that *is* the root, a managed prefix or one of the root's
        // ancestors (the same device and inode) is read as that directory.
        for (alias, real) in self.aliases(&root, &resolved) {
            if let Ok(rest) = full.strip_prefix(&alias) {
                for name in names_below(&root, &real.join(rest)) {
                    if !names.contains(&name) {
                        names.push(name);
                    }
                }
            }
        }
        // A directory that exists, outside the managed prefixes, may hold links into the
        // warehouse, which a listing that follows links reads (`object_store`'s local
        // listing, so DataFusion's; `find -L`): round 43, H2.
        if rest.is_empty() {
            for name in self.walk(&root, &resolved) {
                if !names.contains(&name) {
                    names.push(name);
                }
            }
        }
        names
    }

    /// The names a recursive listing of the resolved directory `dir` reaches when it
    /// follows links, if `dir` lies outside the warehouse's managed prefixes: the names of
    /// every link below it that leads into the warehouse (and of every directory below it
    /// that is a managed one under another mount), walking on through links to
    /// directories outside. Each directory is walked once per view; past
    /// [`MAX_WALK_ENTRIES`] entries in all it may name anything (every managed prefix).
    fn walk(&mut self, root: &Path, dir: &Path) -> Vec<String> {
        let managed = |path: &Path| {
            MANAGED_PREFIXES
                .iter()
                .any(|prefix| path.starts_with(root.join(prefix)))
        };
        if !self.walking || managed(dir) || root.starts_with(dir) || !dir.is_dir() {
            return Vec::new();
        }
        // A directory in `/proc`, `/sys` or `/dev` is not walked, but may hold links (a
        // writable `/dev` tmpfs, reached directly or through links: round 56, D1).
        if pseudo(dir) {
            return self.anything();
        }
        if let Some(known) = self
            .walked_from
            .get(dir)
            .and_then(|start| self.walked.get(start))
        {
            return known.clone();
        }
        let mut names: Vec<String> = Vec::new();
        let add = |found: Vec<String>, names: &mut Vec<String>| {
            for name in found {
                if !names.contains(&name) {
                    names.push(name);
                }
            }
        };
        let mut visited = std::collections::HashSet::from([dir.to_path_buf()]);
        let mut pending = vec![dir.to_path_buf()];
        // Each directory's stamp before it was listed, and the links read, by path and
        // stamp: after the walk, changed directories are listed again, as the search for
        // links in the warehouse does (`link_search`), so a directory moved behind the
        // walk is read where it went (round 72, F1: a source table outside).
        let mut stamps: HashMap<PathBuf, Option<super::stamp::Stamp>> = HashMap::new();
        let mut read_links: HashMap<PathBuf, LinkSeen> = HashMap::new();
        // Each link that led to a directory walked, and that directory.
        let mut via: Vec<(PathBuf, PathBuf)> = Vec::new();
        let mut looks = 0;
        // Each directory too deep to open by its path read so far (`deep`): read again at
        // every look (round 87, S1), as a changed directory is listed again.
        let mut deep: HashSet<PathBuf> = HashSet::new();
        'looks: loop {
            let mut new = false;
            'walk: while let Some(current) = pending.pop() {
                self.walked_from.insert(current.clone(), dir.to_path_buf());
                stamps.insert(current.clone(), super::stamp::Stamp::at(&current));
                let entries = match std::fs::read_dir(&current) {
                    Ok(entries) => entries,
                    Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
                        // Queued when its parent was listed, gone now: moved while the walk ran.
                        new |= current != dir;
                        continue;
                    }
                    // Too deep to open by its full path (a reader that opens each directory
                    // from its parent reaches it: round 55, L1): read through its parents
                    // (`deep`); one holding only files and directories names nothing (U1).
                    Err(err) if err.raw_os_error() == Some(libc::ENAMETOOLONG) => {
                        let budget = &mut self.walk_budget;
                        match read_deep(&mut self.mounts, &current, budget) {
                            Ok(true) => {
                                deep.insert(current);
                            }
                            Ok(false) => new |= current != dir,
                            Err(()) => {
                                let anything = self.anything();
                                add(anything, &mut names);
                            }
                        }
                        continue;
                    }
                    // Refused or failing: what it holds is unknown.
                    Err(err) => {
                        self.denied |= err.kind() == std::io::ErrorKind::PermissionDenied;
                        let anything = self.anything();
                        add(anything, &mut names);
                        continue;
                    }
                };
                let entries: Vec<_> = entries.flatten().collect();
                #[cfg(test)]
                if let Some(hook) = self.after_listing.as_mut() {
                    (hook.0)(&current);
                }
                for entry in entries {
                    // Listing a changed directory again costs no budget (looks are bounded).
                    if looks == 0 {
                        if self.walk_budget == 0 {
                            let anything = self.anything();
                            add(anything, &mut names);
                            break 'walk;
                        }
                        self.walk_budget -= 1;
                    }
                    let Ok(kind) = entry.file_type() else {
                        continue;
                    };
                    let path = entry.path();
                    if kind.is_symlink() {
                        let id = std::fs::symlink_metadata(&path).ok().map(|meta| {
                            use std::os::unix::fs::MetadataExt;
                            (meta.dev(), meta.ino(), meta.ctime(), meta.ctime_nsec())
                        });
                        // A link made again where one was read (a writer's `latest`
                        // repointed) is read again, but is no sign of a move (round 72,
                        // U1).
                        match read_links.insert(path.clone(), id) {
                            Some(read) if read == id => continue,
                            Some(_) => {}
                            None => new = true,
                        }
                    }
                    let next = if kind.is_symlink() && !super::deep::fits_as_given(&path) {
                        // A link whose path is too long to resolve by its full name leads
                        // wherever it points for a reader that resolves it from its directory
                        // (round 55, L1).
                        let anything = self.anything();
                        add(anything, &mut names);
                        continue;
                    } else if kind.is_symlink() {
                        // A link into a process's view (`/proc/self/cwd/…`) leads where the
                        // reading process stands, not where the collector does (round 46, A2).
                        if std::fs::read_link(&path).is_ok_and(|target| pseudo(&target)) {
                            let anything = self.anything();
                            add(anything, &mut names);
                            continue;
                        }
                        let Some(target) = self.canonical(&path) else {
                            // Dangling here; maybe not for a reader elsewhere (N5, N6).
                            let found = self.resolved_names(&path);
                            add(found, &mut names);
                            continue;
                        };
                        add(names_below(root, &target), &mut names);
                        // A place in the warehouse that is no name is not walked here (it lies
                        // below a managed prefix, or it is no name to give): a link there may
                        // lead anywhere (round 70, F2, F3).
                        if target.strip_prefix(root).is_ok_and(unnameable) {
                            let anything = self.anything();
                            add(anything, &mut names);
                        }
                        if let Some(cwd) = self.cwd.clone()
                            && target.starts_with(&cwd)
                        {
                            let found = self.resolved_names(&path);
                            add(found, &mut names);
                        }
                        // The target, or a directory above it, a mount point showing
                        // another directory (round 85, B1): wherever it lies.
                        let found = self.names_through_mounts(root, &target, true);
                        add(found, &mut names);
                        if !target.is_dir() {
                            continue;
                        }
                        via.push((path.clone(), target.clone()));
                        target
                    } else {
                        // A bind mount of a directory or a file of the warehouse, or an
                        // overlay of one: a reader reads it there (rounds 81, 85: S1, C1).
                        let found = self.names_through_mounts(root, &path, false);
                        add(found, &mut names);
                        if !kind.is_dir() {
                            continue;
                        }
                        path
                    };
                    // The same directory as the root, an ancestor of it or a managed prefix,
                    // under another mount.
                    for (alias, real) in self.aliases(root, &next) {
                        if let Ok(rest) = next.strip_prefix(&alias) {
                            add(names_below(root, &real.join(rest)), &mut names);
                        }
                    }
                    if pseudo(&next) {
                        let anything = self.anything();
                        add(anything, &mut names);
                    } else if !managed(&next)
                        && !root.starts_with(&next)
                        && visited.insert(next.clone())
                    {
                        pending.push(next);
                    }
                }
            }
            if looks > 0 && !new {
                break 'looks;
            }
            if looks == super::stamp::MAX_LOOKS {
                let anything = self.anything();
                add(anything, &mut names);
                break 'looks;
            }
            looks += 1;
            // Read each deep directory again, whole (reading it again costs no budget, as
            // listing a changed directory again costs none: round 88, B1).
            for path in deep.clone() {
                match read_deep(&mut self.mounts, &path, &mut usize::MAX.clone()) {
                    Ok(true) => {}
                    Ok(false) => {
                        deep.remove(&path);
                    }
                    Err(()) => {
                        let anything = self.anything();
                        add(anything, &mut names);
                    }
                }
            }
            // Look again: list each changed directory again (a new directory in it is walked,
            // a new link read); one gone was walked whole when it was listed.
            let mut replaced = Vec::new();
            for (path, stamp) in &stamps {
                let now = super::stamp::Stamp::at(path);
                if now.is_some() && now != *stamp {
                    pending.push(path.clone());
                    if !now
                        .zip(*stamp)
                        .is_some_and(|(now, was)| now.same_directory(&was))
                    {
                        replaced.push(path.clone());
                    }
                }
            }
            // Another directory at a listed path: what lies below it is read again.
            for path in replaced {
                visited.retain(|seen| seen == &path || !seen.starts_with(&path));
            }
            // A directory a link led to, gone or replaced by a link: the link leads
            // elsewhere now (round 72, F2).
            // The start itself replaced (by a link, by another directory): what leads
            // here leads there now, and nothing listed shows it (round 72, F2).
            let start_replaced = super::stamp::Stamp::at(dir) != stamps.get(dir).copied().flatten();
            let leading = via
                .iter()
                .filter(|(_, target)| super::stamp::Stamp::at(target).is_none())
                .map(|(link, _)| link.as_path())
                .chain(start_replaced.then_some(dir));
            for from in leading {
                if let Ok(now) = std::fs::canonicalize(from)
                    && now.is_dir()
                    && !managed(&now)
                    && !root.starts_with(&now)
                    && visited.insert(now.clone())
                {
                    pending.push(now);
                    new = true;
                }
            }
            if pending.is_empty() && !new {
                break 'looks;
            }
        }
        self.walked.insert(dir.to_path_buf(), names.clone());
        names
    }

    /// The names a local path with a pattern may reach through what the pattern matches,
    /// which the spelling read by text (the pattern's literal directory) does not see: a
    /// link the pattern matches leads wherever it points (round 43), a link below a
    /// directory it matches too (round 42, G4), and a `..` after it climbs out of the
    /// link's target, not out of the pattern's directory (round 41). Each link of the
    /// pattern's directory, and each directory when more of the path follows, is tried in
    /// the pattern's place. More than [`MAX_PATTERNS`] patterns in one path, or more than
    /// [`MAX_PATTERN_ENTRIES`] entries tried for it in all, may name anything: every
    /// managed prefix.
    pub(super) fn through_patterns(&mut self, path: &str) -> Vec<String> {
        let mut budget = MAX_PATTERN_ENTRIES;
        let mut names = self.through_patterns_within(path, 0, 0, &mut budget);
        if std::mem::take(&mut self.denied) {
            names.extend(self.anything());
        }
        names
    }

    /// [`Links::through_patterns`] of the patterns from the segment `from` of `path` on
    /// (the segments before it are a directory, and the entries tried in their place:
    /// an entry's own name is no pattern, whatever it holds).
    fn through_patterns_within(
        &mut self,
        path: &str,
        from: usize,
        depth: usize,
        budget: &mut usize,
    ) -> Vec<String> {
        let segments: Vec<&str> = path.split('/').collect();
        let Some(at) = segments
            .iter()
            .skip(from)
            .position(|segment| segment.contains(PATTERN_CHARS))
            .map(|at| at + from)
        else {
            return Vec::new();
        };
        // `**` matches any number of directories to a reader with globstar (round 48, N16).
        if depth >= MAX_PATTERNS || segments[at] == "**" {
            return self.anything();
        }
        let dir = match segments[..at].join("/") {
            dir if dir.is_empty() => "/".to_owned(),
            dir => dir,
        };
        // In a directory inside the warehouse only the entries the pattern may match are
        // tried (trying every one kept garbage for good: `indexes/t1*/…` kept
        // `indexes/t4/…`), but those are, as outside: the pattern's directory read by its
        // name may be a whole managed prefix, which a string does not keep, and a `..`
        // after a matched link climbs out of its target (round 45, K1–K9).
        let matcher = self
            .inside(Path::new(&dir))
            .then(|| SegmentMatcher::new(segments[at]));
        let rest = segments[at + 1..].join("/");
        let entries = match std::fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(err) => {
                self.denied |= err.kind() == std::io::ErrorKind::PermissionDenied;
                return Vec::new();
            }
        };
        let mut names = Vec::new();
        for entry in entries.flatten() {
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            // A directory the last pattern matches is read whole (round 46, D4).
            if !(kind.is_symlink() || kind.is_dir()) {
                continue;
            }
            if matcher
                .as_ref()
                .is_some_and(|matcher| !matcher.may_match(&entry.file_name()))
            {
                continue;
            }
            if *budget == 0 {
                names.extend(self.anything());
                break;
            }
            *budget -= 1;
            let tried = Path::new(&dir).join(entry.file_name());
            let candidate = tried.join(&rest);
            names.extend(self.linked_names(&candidate));
            // The patterns after the entry (`Path::join` drops doubled slashes, so the
            // entry's place is counted on the joined path).
            let from = tried.to_str().map_or(0, |tried| tried.split('/').count());
            match candidate.to_str() {
                Some(candidate) => {
                    names.extend(self.through_patterns_within(candidate, from, depth + 1, budget))
                }
                // A name that is no UTF-8 (another engine's Latin-1 name), with more
                // patterns after it: not read further, so everything.
                None if rest.contains(PATTERN_CHARS) => names.extend(self.anything()),
                None => {}
            }
        }
        names
    }

    /// The directories on the way to `resolved` (itself included) that are the same
    /// directory as the root, a managed prefix or an ancestor of the root, each with that
    /// real path.
    fn aliases(&mut self, root: &Path, resolved: &Path) -> Vec<(PathBuf, PathBuf)> {
        if self.known.is_none() {
            let mut known = Vec::new();
            for real in root
                .ancestors()
                .map(Path::to_path_buf)
                .chain(MANAGED_PREFIXES.iter().map(|prefix| root.join(prefix)))
            {
                if let Some(id) = self.id(&real) {
                    known.push((id, real));
                }
            }
            self.known = Some(known);
        }
        let mut aliases = Vec::new();
        for alias in resolved.ancestors() {
            let Some(id) = self.id(alias) else { continue };
            let known = self.known.as_deref().unwrap_or_default();
            if let Some((_, real)) = known.iter().find(|(known, _)| *known == id)
                && alias != real.as_path()
            {
                aliases.push((alias.to_path_buf(), real.clone()));
            }
        }
        aliases
    }
}

/// Whether a pattern segment may match a directory entry's name in some reader's dialect:
/// the segment read as `glob(3)` reads it (the `glob` crate: `*`, `?`, `[…]`), and as other
/// readers do (backslash escapes, `[^…]` for `[!…]`, a shell's extended groups `@(…)` as
/// `*`, POSIX classes `[[:alpha:]]` as `?`, a `[` that opens nothing as itself), each
/// without regard to case and with it (`[!O]ld` matches `old` only with it), a leading
/// dot matched by `*`. A name that is not ASCII is matched with every `?` and bracket read
/// as `*` (`?` matches a byte in the C locale, a character elsewhere; round 46, D1–D3); a
/// name that is no UTF-8 matches. Braces are read by `alternatives` before this.
struct SegmentMatcher {
    /// Each reading, and the same with `?` and brackets widened to `*`.
    readings: Vec<(glob::Pattern, glob::Pattern)>,
    /// A reading did not parse even with its brackets taken literally: anything.
    anything: bool,
}

impl SegmentMatcher {
    fn new(segment: &str) -> SegmentMatcher {
        let transforms: [fn(&str) -> String; 4] = [
            without_escapes,
            caret_negation,
            extended_groups,
            posix_classes,
        ];
        let mut texts = vec![segment.to_owned()];
        texts.extend(transforms.iter().map(|transform| transform(segment)));
        texts.push(
            transforms
                .iter()
                .fold(segment.to_owned(), |text, t| t(&text)),
        );
        texts.sort();
        texts.dedup();
        let mut matcher = SegmentMatcher {
            readings: Vec::new(),
            anything: false,
        };
        for text in texts {
            match (parse(&text), parse(&widened(&text))) {
                (Some(exact), Some(wide)) => matcher.readings.push((exact, wide)),
                _ => matcher.anything = true,
            }
        }
        matcher
    }

    fn may_match(&self, name: &std::ffi::OsStr) -> bool {
        let Some(name) = name.to_str() else {
            return true;
        };
        if self.anything {
            return true;
        }
        self.readings.iter().any(|(exact, wide)| {
            let pattern = if name.is_ascii() { exact } else { wide };
            [false, true].into_iter().any(|case_sensitive| {
                pattern.matches_with(
                    name,
                    glob::MatchOptions {
                        case_sensitive,
                        require_literal_separator: true,
                        require_literal_leading_dot: false,
                    },
                )
            })
        })
    }
}

/// A glob pattern, or, if it does not parse, the same with its brackets taken literally (a
/// `[` that opens nothing is itself to `glob(3)`).
fn parse(text: &str) -> Option<glob::Pattern> {
    glob::Pattern::new(text).ok().or_else(|| {
        let literal: String = text
            .chars()
            .map(|c| match c {
                '[' => "[[]".to_owned(),
                ']' => "[]]".to_owned(),
                c => c.to_string(),
            })
            .collect();
        glob::Pattern::new(&literal).ok()
    })
}

/// `text` with `\\x` read as the literal `x`, outside brackets and inside them (`[o\\]]`
/// holds `o` and `]`; round 48, N17b).
fn without_escapes(text: &str) -> String {
    let mut out = String::new();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some(next) => out.push_str(&glob::Pattern::escape(&next.to_string())),
                None => out.push_str("[\\]"),
            },
            '[' => {
                // A bracket: its members with their escapes removed, `]` first.
                let negated = chars.next_if(|c| *c == '!' || *c == '^').is_some();
                let mut members = String::new();
                let mut bracket_close = false;
                let mut first = true;
                while let Some(m) = chars.next() {
                    match m {
                        '\\' => members.extend(chars.next()),
                        ']' if !first => {
                            bracket_close = true;
                            break;
                        }
                        m => members.push(m),
                    }
                    first = false;
                }
                if !bracket_close {
                    out.push_str("[[]");
                    out.push_str(&glob::Pattern::escape(&members));
                    continue;
                }
                out.push('[');
                if negated {
                    out.push('!');
                }
                if members.contains(']') {
                    out.push(']');
                }
                out.extend(members.chars().filter(|m| *m != ']'));
                out.push(']');
            }
            c => out.push(c),
        }
    }
    out
}

/// `text` with `[^…]` read as `[!…]`.
fn caret_negation(text: &str) -> String {
    text.replace("[^", "[!")
}

/// `text` with every closed extended group of a shell (`@(…)`, `?(…)`, `+(…)`, `*(…)`,
/// `!(…)`, nested ones included: round 48, N10) read as `*`.
fn extended_groups(text: &str) -> String {
    let mut out = String::new();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if matches!(c, '@' | '?' | '+' | '*' | '!') && chars.peek() == Some(&'(') {
            // To the `)` that closes this group.
            let mut depth = 0usize;
            let mut group = String::from(c);
            let mut closed = false;
            for g in chars.by_ref() {
                group.push(g);
                match g {
                    '(' => depth += 1,
                    ')' => {
                        depth -= 1;
                        if depth == 0 {
                            closed = true;
                            break;
                        }
                    }
                    _ => {}
                }
            }
            match closed {
                true => out.push('*'),
                false => out.push_str(&group),
            }
            continue;
        }
        out.push(c);
    }
    out
}

/// `text` with each bracket that holds a POSIX class anywhere in it (`[[:alpha:]]`,
/// `[o[:digit:]]`, `[[=o=]x]`, `[l[.o.]]`; round 48, N15) read as `?` (one character).
fn posix_classes(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(open) = rest.find('[') {
        let inner = &rest[open + 1..];
        // The bracket's end: the first `]` that closes no class, a `]` first a member.
        let mut at = 0;
        let bytes = inner.as_bytes();
        if bytes.first().is_some_and(|b| *b == b'!' || *b == b'^') {
            at += 1;
        }
        if bytes.get(at) == Some(&b']') {
            at += 1;
        }
        let mut class = false;
        let mut end = None;
        while at < bytes.len() {
            match (bytes[at], bytes.get(at + 1)) {
                (b'[', Some(kind @ (b':' | b'=' | b'.'))) => {
                    let closing = [*kind, b']'];
                    match inner[at + 2..].find(std::str::from_utf8(&closing).unwrap_or("]")) {
                        Some(close) => {
                            class = true;
                            at += 2 + close + 2;
                        }
                        None => at += 1,
                    }
                }
                (b']', _) => {
                    end = Some(at);
                    break;
                }
                _ => at += 1,
            }
        }
        match end {
            Some(end) if class => {
                out.push_str(&rest[..open]);
                out.push('?');
                rest = &inner[end + 1..];
            }
            _ => {
                out.push_str(&rest[..=open]);
                rest = inner;
            }
        }
    }
    out.push_str(rest);
    out
}

/// `text` with every `?` and bracket expression read as `*`: a superset of what it matches
/// byte by byte in a name that is not ASCII.
fn widened(text: &str) -> String {
    let mut out = String::new();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '?' => out.push('*'),
            '[' => {
                // To the bracket's end: a `]` right after `[` or `[!` is a member.
                let mut inner = String::new();
                if let Some(&first) = chars.peek()
                    && (first == '!' || first == ']')
                {
                    inner.push(first);
                    chars.next();
                    if first == '!' && chars.peek() == Some(&']') {
                        inner.push(']');
                        chars.next();
                    }
                }
                let mut closed = false;
                for next in chars.by_ref() {
                    if next == ']' {
                        closed = true;
                        break;
                    }
                    inner.push(next);
                }
                match closed {
                    true => out.push('*'),
                    false => {
                        out.push_str("[[]");
                        out.push_str(&glob::Pattern::escape(&inner));
                    }
                }
            }
            c => out.push(c),
        }
    }
    out
}

/// Whether the directory `path`, too deep to open by its path, is there, read whole
/// through its parents (`deep::read_below`) within `budget`; `Err` if it may hold
/// anything.
fn read_deep(
    mounts: &mut Option<super::mounts::MountTable>,
    path: &Path,
    budget: &mut usize,
) -> Result<bool, ()> {
    let table = mounts.get_or_insert_with(super::mounts::MountTable::read);
    let mounted = |at: &Path| table.is_mount_point(at);
    super::deep::read_below(path, None, &mounted, budget).map_err(|_| ())
}

/// Whether `path` lies in a file system that shows processes rather than files (`/proc`,
/// `/sys`, `/dev`): never walked, and a link into it may lead anywhere. `/dev/shm` is a
/// file system of ordinary files (tmpfs, used for scratch data): walked like any other
/// directory (round 53, A2).
pub(super) fn pseudo(path: &Path) -> bool {
    ["/proc", "/sys", "/dev"]
        .iter()
        .any(|top| path.starts_with(top))
        && !path.starts_with("/dev/shm")
}

/// The answer of a file-system lookup to remember for the rest of a batch: a success, or a
/// failure that repeats while the file system stays as it is (no such file, a file where a
/// directory was expected, a loop of links, a name too long, no permission). Any other
/// failure (an I/O error, a stale handle, no memory) is not remembered: the next lookup of
/// the same path tries again, as a reader of its own would.
fn lasting<T: Clone>(answer: &std::io::Result<T>) -> Option<Option<T>> {
    use std::io::ErrorKind;
    match answer {
        Ok(value) => Some(Some(value.clone())),
        Err(err)
            if matches!(
                err.kind(),
                ErrorKind::NotFound
                    | ErrorKind::NotADirectory
                    | ErrorKind::PermissionDenied
                    | ErrorKind::InvalidFilename
            ) || err.raw_os_error() == Some(libc::ELOOP) =>
        {
            Some(None)
        }
        Err(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Round 72 (helper-67, F1): a directory moved, while the walk runs, from a directory
    /// outside the warehouse the walk has not listed yet into one it has (a source table's
    /// staging directory moved into place) is read where it went.
    #[test]
    fn a_directory_moved_behind_an_outside_walk_is_read_where_it_went() {
        let dir = tempfile::tempdir().expect("dir");
        let (root, src) = (dir.path().join("wh"), dir.path().join("src"));
        std::fs::create_dir_all(root.join("indexes/old/z")).expect("made");
        std::fs::create_dir_all(src.join("ta")).expect("made");
        std::fs::create_dir_all(src.join("tb")).expect("made");
        // The walk lists the entry read last first: the staging directory sits in the
        // one it lists second.
        let order: Vec<PathBuf> = std::fs::read_dir(&src)
            .expect("listed")
            .map(|entry| entry.expect("entry").path())
            .collect();
        let (later, first) = (order[0].clone(), order[1].clone());
        std::fs::create_dir_all(later.join("stage")).expect("made");
        std::os::unix::fs::symlink(root.join("indexes/old/z"), later.join("stage/z"))
            .expect("linked");
        let mut links = Links::new(&root, None);
        let (from, to) = (later.join("stage"), first.join("v7"));
        links.after_listing = Some(ListingHook(Box::new(move |listed: &Path| {
            if listed == first && from.exists() {
                std::fs::rename(&from, &to).expect("moved");
            }
        })));
        let real_root = std::fs::canonicalize(&root).expect("root");
        let names = links.walk(&real_root, &std::fs::canonicalize(&src).expect("src"));
        assert_eq!(names, ["indexes/old/z"]);
    }

    /// Round 81 (helper-75, S1): a directory of the warehouse bind-mounted into a source
    /// table outside (`src/part=1` showing `indexes/old/z`) is read there by a reader of
    /// the source: the walk names it, as it names a link there.
    #[test]
    fn a_bind_mount_of_the_warehouse_in_a_directory_outside_names_what_it_shows() {
        use super::super::mounts::{bind, in_a_mount_namespace};
        in_a_mount_namespace(
            "warehouse::links::tests::a_bind_mount_of_the_warehouse_in_a_directory_outside_names_what_it_shows",
            |dir| {
                std::fs::create_dir_all(dir.join("wh/indexes/old/z")).expect("made");
                std::fs::create_dir_all(dir.join("src")).expect("made");
                bind(dir, "wh/indexes/old/z", "src/part=1");
                let root = std::fs::canonicalize(dir.join("wh")).expect("root");
                let mut links = Links::new(&root, None);
                let src = std::fs::canonicalize(dir.join("src")).expect("src");
                assert_eq!(links.walk(&root, &src), ["indexes/old/z"]);
                // The source directory itself, or one above it, the mount (round 84, C1),
                // and a file below it, there or not (round 85, A1).
                std::fs::create_dir_all(dir.join("wh/indexes/old/y/sub")).expect("made");
                std::fs::write(dir.join("wh/indexes/old/y/part-0.parquet"), b"PAR1").expect("file");
                bind(dir, "wh/indexes/old/y", "y");
                for (source, shown) in [
                    ("y", "indexes/old/y"),
                    ("y/sub", "indexes/old/y/sub"),
                    ("y/part-0.parquet", "indexes/old/y/part-0.parquet"),
                    ("y/sub/none.parquet", "indexes/old/y/sub/none.parquet"),
                ] {
                    let mut links = Links::new(&root, None);
                    assert_eq!(links.linked_names(&dir.join(source)), [shown], "{source}");
                }
                // A link in a source outside to a file or a directory below such a mount
                // (round 85, B1), and a file of the warehouse mounted over a file there
                // (C1).
                std::fs::create_dir_all(dir.join("src2")).expect("made");
                std::os::unix::fs::symlink(dir.join("y/sub"), dir.join("src2/l")).expect("linked");
                std::os::unix::fs::symlink(
                    dir.join("y/part-0.parquet"),
                    dir.join("src2/l.parquet"),
                )
                .expect("linked");
                std::fs::write(dir.join("wh/indexes/old/f.parquet"), b"PAR1").expect("file");
                bind(dir, "wh/indexes/old/f.parquet", "src2/x.parquet");
                let mut links = Links::new(&root, None);
                let mut names = links.linked_names(&dir.join("src2"));
                names.sort();
                assert_eq!(
                    names,
                    [
                        "indexes/old/f.parquet",
                        "indexes/old/y/part-0.parquet",
                        "indexes/old/y/sub"
                    ]
                );
                // The mounted file as the location itself (C1).
                let mut links = Links::new(&root, None);
                assert_eq!(
                    links.linked_names(&dir.join("src2/x.parquet")),
                    ["indexes/old/f.parquet"]
                );
            },
        );
    }

    /// Rounds 85–86 (helper-79 F1, helper-80 A1, B1, D1, C1): an overlay whose lower layer
    /// is warehouse garbage shows it to a reader of the overlay, and the mount table names
    /// its layers only by strings that may be escaped, relative or stale: a path an overlay
    /// serves (or a bind mount of part of one) may show anything. A path no overlay serves
    /// is read as before.
    #[test]
    fn a_path_an_overlay_serves_may_show_anything() {
        use super::super::mounts::{bind, in_a_mount_namespace};
        in_a_mount_namespace(
            "warehouse::links::tests::a_path_an_overlay_serves_may_show_anything",
            |dir| {
                for made in ["wh/indexes/old/y/sub", "lo2", "out/ov", "plain"] {
                    std::fs::create_dir_all(dir.join(made)).expect("made");
                }
                std::fs::write(dir.join("wh/indexes/old/y/part-0.parquet"), b"PAR1").expect("file");
                let (lower, other) = (dir.join("wh/indexes/old/y"), dir.join("lo2"));
                let options = format!("lowerdir={}:{}", lower.display(), other.display());
                let status = std::process::Command::new("mount")
                    .args(["-t", "overlay", "overlay", "-o", &options])
                    .arg(dir.join("out/ov"))
                    .status()
                    .expect("mount runs");
                assert!(status.success(), "mount -t overlay -o {options}");
                bind(dir, "out/ov/sub", "part");
                let root = std::fs::canonicalize(dir.join("wh")).expect("root");
                let mut every = every_managed_prefix();
                every.sort();
                for source in [
                    "out/ov",
                    "out/ov/part-0.parquet",
                    "out/ov/none",
                    "part",
                    "part/x.parquet",
                ] {
                    let mut links = Links::new(&root, None);
                    let mut names = links.linked_names(&dir.join(source));
                    names.sort();
                    names.dedup();
                    assert_eq!(names, every, "{source}");
                    assert!(links.take_unbounded(), "{source}");
                }
                // A directory outside holding the overlay (walked), and one no overlay
                // serves.
                let mut links = Links::new(&root, None);
                assert!(links.linked_names(&dir.join("out")).len() >= 2);
                assert!(links.take_unbounded(), "a walk meets the overlay");
                let mut links = Links::new(&root, None);
                assert_eq!(links.linked_names(&dir.join("plain")), Vec::<String>::new());
                assert!(!links.take_unbounded());
            },
        );
    }

    /// Round 72 (helper-68, F2): a directory a link in the walk leads to, replaced by a
    /// link to where its staging directory went while the walk ran, is read where the
    /// link leads now.
    #[test]
    fn a_directory_replaced_by_a_link_behind_an_outside_walk_is_read_where_it_leads() {
        let dir = tempfile::tempdir().expect("dir");
        let (root, out) = (dir.path().join("wh"), dir.path().join("out"));
        std::fs::create_dir_all(root.join("indexes/old/z")).expect("made");
        std::fs::create_dir_all(out.join("src")).expect("made");
        std::fs::create_dir_all(out.join("v1/big")).expect("made");
        std::fs::create_dir_all(out.join("v1/stage")).expect("made");
        std::os::unix::fs::symlink(root.join("indexes/old/z"), out.join("v1/stage/z"))
            .expect("linked");
        std::os::unix::fs::symlink(out.join("v1"), out.join("src/cur")).expect("linked");
        let mut links = Links::new(&root, None);
        let out_at = out.clone();
        let mut done = false;
        links.after_listing = Some(ListingHook(Box::new(move |listed: &Path| {
            // once the walk is in `v1`: move `v1` away, its staging directory to `v2`, and
            // make `v1` a link to `v2`
            if listed.ends_with("v1") && !done {
                done = true;
                std::fs::rename(out_at.join("v1"), out_at.join("v1.old")).expect("moved");
                std::fs::rename(out_at.join("v1.old/stage"), out_at.join("v2")).expect("moved");
                std::os::unix::fs::symlink(out_at.join("v2"), out_at.join("v1")).expect("linked");
            }
        })));
        let real_root = std::fs::canonicalize(&root).expect("root");
        let names = links.walk(
            &real_root,
            &std::fs::canonicalize(out.join("src")).expect("src"),
        );
        assert_eq!(names, ["indexes/old/z"]);
    }

    /// A pattern segment matches what any reader's dialect may match, and no more than
    /// that: an odd name with a `(`, a `[` that opens nothing or a brace is no wildcard
    /// (the hostile simulation's garbage must still go).
    #[test]
    fn a_segment_matches_what_any_dialect_matches_and_no_more() {
        let matches = |segment: &str, name: &str| {
            SegmentMatcher::new(segment).may_match(std::ffi::OsStr::new(name))
        };
        for (segment, name) in [
            ("t1*", "t1a"),
            ("[!O]ld", "old"),
            ("[^o]ld", "Old"),
            ("[[:alpha:]]ld", "old"),
            ("[[=o=]]ld", "old"),
            ("\\o*", "old"),
            ("@(i)", "i"),
            ("?(x|i)", "i"),
            ("??", "\u{e9}"),
            ("x[3", "x[3"),
            ("a(5", "a(5"),
            ("{x}", "{x}"),
            ("*", ".hidden"),
            ("@(x|@(o))", "o"),
            ("[o[:digit:]]ld", "old"),
            ("[l[.o.]]", "o"),
            ("[o\\]]ld", "]ld"),
        ] {
            assert!(matches(segment, name), "{segment} {name}");
        }
        for (segment, name) in [
            ("t1*", "t4"),
            ("x[3", "t4"),
            ("a(5", "t4"),
            ("!a(5", "t4"),
            ("{x}", "t4"),
            ("x*y", "t\u{fc}4"),
            ("[!t]*", "t4"),
        ] {
            assert!(!matches(segment, name), "{segment} {name}");
        }
    }

    /// A view keeps what stays true while the file system stays as it is, never a passing
    /// failure: a stale handle or an I/O error is looked up again (review of the view: one
    /// failed resolution of the root hid every link of the rest of the batch).
    #[test]
    fn a_view_remembers_lasting_answers_only() {
        use std::io::{Error, ErrorKind};
        assert_eq!(lasting(&Ok::<_, Error>(7)), Some(Some(7)));
        for lasting_failure in [
            Error::from(ErrorKind::NotFound),
            Error::from(ErrorKind::NotADirectory),
            Error::from(ErrorKind::PermissionDenied),
            Error::from_raw_os_error(libc::ELOOP),
            Error::from_raw_os_error(libc::ENAMETOOLONG),
        ] {
            assert_eq!(lasting(&Err::<u8, _>(lasting_failure)), Some(None));
        }
        for passing in [
            Error::from_raw_os_error(libc::EIO),
            Error::from_raw_os_error(libc::ESTALE),
            Error::from_raw_os_error(libc::ENOMEM),
            Error::from(ErrorKind::Interrupted),
        ] {
            assert_eq!(lasting(&Err::<u8, _>(passing)), None);
        }
    }

    /// GC round 121, F3: a path of thousands of segments that are not there (a stray
    /// file's comma list, read as one path) is looked up from the top, to the first
    /// missing directory: the view remembers a few answers, not one per segment (which
    /// held memory quadratic in the path's length, and stopped every run).
    #[test]
    fn a_long_missing_path_is_looked_up_to_its_first_missing_directory() {
        let dir = tempfile::tempdir().expect("dir");
        let root = dir.path().join("wh");
        std::fs::create_dir_all(root.join("indexes/t")).expect("made");
        let mut links = Links::new(&root, None);
        let long = (0..2000)
            .map(|n| format!("indexes/x{n}"))
            .collect::<Vec<_>>()
            .join(",");
        let path = dir.path().join("elsewhere").join(&long);
        assert!(links.linked_names(&path).is_empty());
        let below = root.join("indexes/t").join(&long);
        assert_eq!(links.linked_names(&below), [format!("indexes/t/{long}")]);
        let depth = path.components().count();
        assert!(
            links.resolved.len() < 2 * dir.path().components().count() + 8,
            "{} answers for paths of {depth} segments",
            links.resolved.len()
        );
        // What lies below a missing directory is still read as it is written.
        let through = root.join("indexes/t/x/../../t/y");
        assert_eq!(links.linked_names(&through), Vec::<String>::new());
    }
}
