//! The search for symbolic links at and below names of a local warehouse
//! ([`search`]), in every spelling the names have on disk, and consistent while the tree
//! changes under it.
//!
//! Two things make a plain directory walk miss a link a reader follows:
//!
//! - **Spellings.** The collector keeps an object when any spelling of its name is
//!   reachable (`indexes/n%20b/` for `indexes/n b/`, `indexes/a%7Eb/` for `indexes/a~b/`):
//!   a reader of one spelling may open the files of another. The search lists the
//!   directory of each segment and starts below every entry that is a spelling of the
//!   segment (they share a form: [`spellings`]), not only below the spellings the name gives (GC round 68,
//!   F4).
//! - **Moves.** A directory renamed during the walk from a place not walked yet into one
//!   walked already is walked under neither name (round 69, F2). Every directory's
//!   modification and change times are taken before it is listed; after the walk they are
//!   taken again, a changed directory is listed again and what appeared in it (a directory
//!   or a link not read at that path) is walked, and a directory gone from where the walk
//!   found it (before it was listed) asks for another look. The search ends after a look
//!   that read no new link and found nothing missing (a writer adding or removing files
//!   and directories costs one more listing of each directory it changed); a tree that
//!   still shows something new after [`MAX_LOOKS`] looks is answered as unread. The same
//!   looks are taken by the view of links over the directories outside the warehouse it
//!   walks (`links::Links::walk`: a source table's directory).
//! - **Places beyond names.** A directory a link leads to outside the warehouse (or into
//!   the catalog's own directories) is searched by the same walk, with the same looks,
//!   so a directory moved there while the walk runs is read where it went (round 70, F1).
//!   What is there is no object; what the links there lead to is.
//!
//! What is left: a directory moved twice, each move timed between the looks that would
//! see it, or a change that lands in the same clock tick as the times taken before the
//! directory was listed (file-system times move in ticks of a few milliseconds). Both are
//! stated in the collector's assumptions (`gc` module docs, 5).

use std::collections::{HashMap, HashSet};
use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use object_store::path::PathPart;

use super::layout::{GC_DIR, MANAGED_PREFIXES, OWNER_MARKER};
use super::stamp::{MAX_LOOKS, Stamp};

/// What the symbolic links at or below `names` (each in every spelling on disk) lead to
/// inside the local warehouse `root`, to the end of every chain. See
/// [`Warehouse::links_below`](super::Warehouse::links_below).
pub(super) fn search(root: &Path, names: Vec<String>) -> LinksBelow {
    let mut search = Search::new(root);
    search.run(names);
    search.finish()
}

/// What the symbolic links at or below the place `place` (a path below `root` that is
/// not UTF-8, so no name) lead to: see [`unnameable_place`].
fn search_place(root: &Path, place: PathBuf) -> LinksBelow {
    let mut search = Search::new(root);
    search.unnameable.insert(place.clone());
    search.frontier.push(place);
    search.run(Vec::new());
    search.finish()
}

/// Where the link at `path` leads in the end, if that is a place inside the warehouse
/// (whose root the file system resolves to `real_root`) whose path below the root is no
/// name: not UTF-8 (`x=Z\xfcrich/part-0.parquet`) or holding a control character. Nothing
/// at or below it has a name the collector could delete, so the link names nothing there,
/// and what it reaches is what the links there lead to (round 68, U2; round 69, F1; round
/// 70, F3).
fn unnameable_place(real_root: Option<&Path>, path: &Path) -> Option<PathBuf> {
    let place = std::fs::canonicalize(path).ok()?;
    let below = place.strip_prefix(real_root?).ok()?;
    super::links::unnameable(below).then_some(place)
}

/// Where the link at `path` leads in the end, if that is a directory whose links the view
/// of links walks but whose contents no name covers: outside the warehouse (not the root's
/// ancestors, which hold everything, nor a file system of processes, which the view of
/// links answers as anything), or in the catalog's or the collector's own directories.
fn place_beyond_names(real_root: Option<&Path>, path: &Path) -> Option<PathBuf> {
    let real_root = real_root?;
    let place = std::fs::canonicalize(path).ok()?;
    if !place.is_dir() {
        return None;
    }
    match place.strip_prefix(real_root) {
        Ok(below) => {
            let top = below.components().next()?.as_os_str();
            (top == super::layout::GC_DIR || top == super::layout::CATALOG_DIR).then_some(place)
        }
        Err(_) => {
            (!real_root.starts_with(&place) && !super::links::pseudo(&place)).then_some(place)
        }
    }
}

/// A directory's entries by every form a reader may open each by.
type Spelled = HashMap<Vec<u8>, Vec<OsString>>;

/// What [`Warehouse::links_below`](super::Warehouse::links_below) found.
#[derive(Debug, Default)]
pub(crate) struct LinksBelow {
    /// The names inside the warehouse the links lead to.
    pub targets: Vec<String>,
    /// The first place the walk could not read, and why: a link there may lead anywhere.
    pub unread: Option<String>,
    /// The first link whose target could not be searched to the end (a directory outside
    /// with more entries than a walk for links reads): it names every managed prefix.
    pub boundless: Option<String>,
    /// The links that lead to a managed prefix as a whole, or the root or above it (they
    /// name none of them: one in garbage must not stop collection, one a reader of a kept
    /// table reaches keeps everything there).
    pub wide: Vec<WideLink>,
}

/// A symbolic link to a managed prefix as a whole, or to the root or above it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct WideLink {
    /// The link, as shown.
    pub link: String,
    /// The managed prefixes a reader through it reads all of (every one for the root).
    pub prefixes: Vec<String>,
}

/// What the symbolic link at `path` names ([`LinkNames`]): the names inside the warehouse
/// `dir` it leads to, but never a managed prefix as a whole, the collector's or the
/// catalog's own directories, or the root (a link to all of `indexes/` names nothing, as a
/// string naming it does: it must not stop collection; publication refuses one, see
/// [`LinkNames::wide`]). A link to a place in the warehouse whose path is no name names
/// what the links there lead to ([`unnameable_place`]). Unless following it
/// gave up at a bound (a directory outside with more entries than a walk for links reads,
/// a place there it cannot read): then it may lead anywhere and names every managed
/// prefix.
pub(super) fn link_names(dir: &Path, path: &Path) -> LinkNames {
    // The link's own name may be any bytes (not UTF-8: another engine's Latin-1 name);
    // what counts is where it leads.
    let real_root = std::fs::canonicalize(dir).ok();
    let (names, gave_up) = match unnameable_place(real_root.as_deref(), path) {
        Some(place) => {
            let below = search_place(dir, place);
            let unsure = below.unread.is_some() || below.boundless.is_some();
            (below.targets, unsure)
        }
        None => super::links::linked_names(dir, path),
    };
    if gave_up {
        let every = MANAGED_PREFIXES.iter().map(|p| (*p).to_owned()).collect();
        return LinkNames {
            names: every,
            gave_up: true,
            wide: Vec::new(),
        };
    }
    // The root or a whole managed prefix: a reader reads everything there. The catalog's
    // and the collector's own directories hold nothing the collector deletes (the links
    // there are searched as places beyond names).
    let wide = names
        .iter()
        .filter(|name| MANAGED_PREFIXES.contains(&name.as_str()))
        .cloned()
        .collect();
    let names = names
        .into_iter()
        .filter(|name| {
            let top = name.split('/').next().unwrap_or_default();
            !name.is_empty()
                && !MANAGED_PREFIXES.contains(&name.as_str())
                && top != GC_DIR
                && top != super::layout::CATALOG_DIR
                && name != OWNER_MARKER
        })
        .collect();
    LinkNames {
        names,
        gave_up: false,
        wide,
    }
}

/// The root and each managed prefix below `root` (as given and as the file system
/// resolves it), by `(device, inode)`, with the prefixes a reader through another path to
/// it reads all of.
fn whole_directories(root: &Path) -> HashMap<(u64, u64), (Vec<PathBuf>, Vec<String>)> {
    let real = std::fs::canonicalize(root).ok();
    let mut whole = HashMap::new();
    let every: Vec<String> = MANAGED_PREFIXES.iter().map(|p| (*p).to_owned()).collect();
    let places = std::iter::once((String::new(), every)).chain(
        MANAGED_PREFIXES
            .iter()
            .map(|p| ((*p).to_owned(), vec![(*p).to_owned()])),
    );
    for (below, prefixes) in places {
        let at: Vec<PathBuf> = std::iter::once(root)
            .chain(real.as_deref())
            .map(|base| {
                if below.is_empty() {
                    base.to_path_buf()
                } else {
                    base.join(&below)
                }
            })
            .collect();
        if let Ok(meta) = std::fs::metadata(&at[0])
            && meta.is_dir()
        {
            whole.insert((meta.dev(), meta.ino()), (at, prefixes));
        }
    }
    whole
}

/// What a symbolic link names: see [`link_names`].
pub(super) struct LinkNames {
    /// The names inside the warehouse it leads to.
    pub names: Vec<String>,
    /// Whether following it gave up at a bound (`names` is every managed prefix).
    pub gave_up: bool,
    /// The managed prefixes it also leads to as a whole (every one for the root or
    /// above), which it does not name.
    pub wide: Vec<String>,
}

/// One search: what was listed and read, what the links lead to, and the first place
/// that could not be read.
pub(super) struct Search {
    root: PathBuf,
    /// Every directory listed, by path: its stamp and the device its start was on.
    listed: HashMap<PathBuf, (Stamp, Option<u64>)>,
    /// Every link read, by path, with its `(device, inode)` and change time (a link made
    /// again at the same path may reuse the inode).
    read: HashMap<PathBuf, (u64, u64, (i64, i64))>,
    /// The root as the file system resolves it (where a link's real target is compared).
    real_root: Option<PathBuf>,
    /// The names the walk started at (given, or what links lead to).
    started: HashSet<String>,
    /// The places not UTF-8 inside the warehouse links led to, walked or to walk.
    unnameable: HashSet<PathBuf>,
    /// Places links led to, not walked yet.
    frontier: Vec<PathBuf>,
    /// Where walks started, with the device each kept to.
    starts: HashMap<PathBuf, Option<u64>>,
    /// Directories links led to beyond the warehouse's names, not walked yet (walked
    /// across mounts, as the view of links walks them).
    beyond: Vec<PathBuf>,
    /// Listings of directories the spellings were looked up in.
    entries: HashMap<PathBuf, std::rc::Rc<Spelled>>,
    /// Whether something was gone from where the walk found it since the last look.
    moved: bool,
    /// Every directory walked, by `(device, inode)`: where it was first listed.
    directories: HashMap<(u64, u64), PathBuf>,
    /// The root and the managed prefixes, by `(device, inode)`: the paths they are at, and
    /// the prefixes a reader through another path to them reads all of.
    whole: HashMap<(u64, u64), (Vec<PathBuf>, Vec<String>)>,
    /// The process's mount table: what a bind mount shows.
    mounts: super::mounts::MountTable,
    /// Each directory too deep to open by its path read so far (`deep`), with the device
    /// its walk kept to: read again at every look.
    deep: HashMap<PathBuf, Option<u64>>,
    found: LinksBelow,
    /// Called after each directory is listed (tests move directories there).
    #[cfg(test)]
    after_listing: Option<super::links::ListingHook>,
}

impl Search {
    pub(super) fn new(root: &Path) -> Search {
        Search {
            root: root.to_path_buf(),
            listed: HashMap::new(),
            read: HashMap::new(),
            real_root: std::fs::canonicalize(root).ok(),
            started: HashSet::new(),
            unnameable: HashSet::new(),
            frontier: Vec::new(),
            starts: HashMap::new(),
            beyond: Vec::new(),
            entries: HashMap::new(),
            moved: false,
            directories: HashMap::new(),
            whole: whole_directories(root),
            mounts: super::mounts::MountTable::read(),
            deep: HashMap::new(),
            found: LinksBelow::default(),
            #[cfg(test)]
            after_listing: None,
        }
    }

    /// Walk below every spelling on disk of `names`, then look again until the tree
    /// shows nothing new.
    pub(super) fn run(&mut self, names: Vec<String>) {
        for name in names {
            if self.started.insert(name.clone()) {
                for start in self.spelled_on_disk(&name) {
                    self.start_at(start);
                }
            }
        }
        self.follow_frontier();
        for _ in 0..MAX_LOOKS {
            if !self.look_again() {
                return;
            }
        }
        let first = self.listed.keys().min().map_or_else(
            || self.root.display().to_string(),
            |p| p.display().to_string(),
        );
        self.unread(format!(
            "the directories at and below `{first}` kept changing while they were searched for links ({MAX_LOOKS} looks)"
        ));
    }

    pub(super) fn finish(mut self) -> LinksBelow {
        self.found.targets.sort_unstable();
        self.found.targets.dedup();
        self.found
    }

    /// Walk what the links found so far lead to, until no place is left.
    fn follow_frontier(&mut self) {
        loop {
            if let Some(start) = self.frontier.pop() {
                self.start_at(start);
            } else if let Some(place) = self.beyond.pop() {
                self.starts.insert(place.clone(), None);
                self.walk(vec![(place, 0)], None);
            } else {
                return;
            }
        }
    }

    /// Walk below `start`, on the device `start` leads to (where a link at the name itself
    /// leads, for a table placed on another disk).
    fn start_at(&mut self, start: PathBuf) {
        self.note_mounted(&start, true);
        let device = std::fs::metadata(&start).ok().map(|meta| meta.dev());
        self.starts.insert(start.clone(), device);
        self.walk(vec![(start, 0)], device);
    }

    /// Walk depth-first from `stack` without following links; return whether it read a
    /// link not read before. (A directory that is new and holds no link is no sign of a
    /// move worth another look: a busy writer makes those all the time.)
    fn walk(&mut self, mut stack: Vec<(PathBuf, usize)>, device: Option<u64>) -> bool {
        let mut new = false;
        while let Some((path, depth)) = stack.pop() {
            let meta = match std::fs::symlink_metadata(&path) {
                Ok(meta) => meta,
                Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
                    // Listed in its directory, gone now: moved (or removed) while the walk
                    // ran. A start that does not exist is no move.
                    self.moved |= depth > 0;
                    continue;
                }
                // Too deep to open by its path: read through its parents (U1).
                Err(err) if err.raw_os_error() == Some(libc::ENAMETOOLONG) => {
                    self.read_deep(&path, device, depth);
                    continue;
                }
                Err(err) => {
                    self.unread(format!("`{}` cannot be read ({err})", path.display()));
                    continue;
                }
            };
            if meta.file_type().is_symlink() {
                new |= self.read_link(path, &meta);
                continue;
            }
            if !meta.is_dir() {
                continue;
            }
            if depth > 0 && device.is_some_and(|device| meta.dev() != device) {
                self.unread(format!(
                    "`{}` is another file system mounted there",
                    path.display()
                ));
                continue;
            }
            let stamp = Stamp::of(&meta);
            if self.is_another_place_of_a_directory(&path, &meta) {
                continue;
            }
            if self
                .listed
                .get(&path)
                .is_some_and(|(seen, _)| seen.same_directory(&stamp))
                && depth > 0
            {
                // The same directory at the same place: its own stamp tells if it changed.
                continue;
            }
            self.list(&path, stamp, device, depth, &mut stack);
        }
        new
    }

    /// Whether the directory `meta` describes, at `path`, is one the walk knows at another
    /// place that still shows it: a bind mount, which a reader reads through like a link
    /// (round 78, B1). One of the root or a whole managed prefix is such a link to it; one
    /// of another directory names both places (each keeps what the other shows, as a
    /// link's target is kept). It is not walked again (a mount of an ancestor is a
    /// cycle). A directory gone from where it was first seen was moved: it is walked where
    /// it went.
    fn is_another_place_of_a_directory(&mut self, path: &Path, meta: &std::fs::Metadata) -> bool {
        let id = (meta.dev(), meta.ino());
        if let Some((places, prefixes)) = self.whole.get(&id) {
            if places.iter().any(|place| place == path) {
                return false;
            }
            self.found.wide.push(WideLink {
                link: path.display().to_string(),
                prefixes: prefixes.clone(),
            });
            return true;
        }
        // A bind mount of another directory of the warehouse, met where it is mounted
        // only (a late table the delete guard searches: round 81, G2): it names what it
        // shows, as a link to it would; it is walked here too.
        let real = match (path.strip_prefix(&self.root), self.real_root.as_deref()) {
            (Ok(rest), Some(real_root)) => real_root.join(rest),
            _ => path.to_path_buf(),
        };
        for shown in self.mounts.shown_at(&real) {
            if let Some(name) = self.name_of_place(&shown) {
                self.found.targets.push(name);
            }
        }
        let first = match self.directories.get(&id) {
            Some(first) if first != path => first.clone(),
            Some(_) => return false,
            None => {
                self.directories.insert(id, path.to_path_buf());
                return false;
            }
        };
        let still_there = std::fs::symlink_metadata(&first)
            .is_ok_and(|seen| seen.is_dir() && (seen.dev(), seen.ino()) == id);
        if !still_there {
            self.directories.insert(id, path.to_path_buf());
            return false;
        }
        for place in [&first, &path.to_path_buf()] {
            if let Some(name) = self.name_of_place(place) {
                self.found.targets.push(name);
            }
        }
        true
    }

    /// What a mount at `path` (a file or a directory in the warehouse), or with
    /// `ancestors` at a directory above it below the root, shows elsewhere, noted as a
    /// link there would be (round 85: a table below a bind mount of garbage, a file bind
    /// mount): a place of the root or a whole managed prefix as a wide link, another place
    /// by its name; an overlay there (which may show anything: round 86) leaves the
    /// search unread.
    fn note_mounted(&mut self, path: &Path, ancestors: bool) {
        let (Some(real_root), Ok(below)) =
            (self.real_root.as_deref(), path.strip_prefix(&self.root))
        else {
            return;
        };
        let real = real_root.join(below);
        if !ancestors && !self.mounts.is_mount_point(&real) {
            return;
        }
        let real_root = real_root.to_path_buf();
        let mut aboves = vec![real.as_path()];
        if ancestors {
            aboves.extend(
                real.ancestors()
                    .skip(1)
                    .take_while(|above| *above != real_root),
            );
        }
        let mut places = Vec::new();
        for above in aboves {
            let Ok(rest) = real.strip_prefix(above) else {
                continue;
            };
            let shown = self.mounts.shown_through(above, false, &real_root);
            if shown.unknown {
                self.unread(format!(
                    "`{}` is an overlay mount: which files it shows, the collector cannot tell",
                    above.display()
                ));
            }
            places.extend(
                shown
                    .places
                    .into_iter()
                    .map(|place| (above.to_path_buf(), place.join(rest))),
            );
        }
        for (at, place) in places {
            let prefixes: Vec<String> = match real_root.starts_with(&place) {
                true => MANAGED_PREFIXES.iter().map(|p| (*p).to_owned()).collect(),
                false => MANAGED_PREFIXES
                    .iter()
                    .filter(|prefix| place == real_root.join(prefix))
                    .map(|p| (*p).to_owned())
                    .collect(),
            };
            if !prefixes.is_empty() {
                self.found.wide.push(WideLink {
                    link: at.display().to_string(),
                    prefixes,
                });
            } else if let Some(name) = self.name_of_place(&place) {
                self.found.targets.push(name);
            }
        }
    }

    /// A directory too deep to open by its path (`deep`): read through its parents; one
    /// holding only files and directories names nothing, anything else leaves the search
    /// unread.
    fn read_deep(&mut self, path: &Path, device: Option<u64>, depth: usize) {
        match self.read_deep_whole(path, device) {
            Ok(true) => {
                self.deep.insert(path.to_path_buf(), device);
            }
            Ok(false) => self.moved |= depth > 0,
            Err(why) => self.unread(why),
        }
    }

    /// Read the deep directory `path` whole (`deep::read_below`; like the walk, the search
    /// reads any number of entries): whether it is there.
    fn read_deep_whole(&self, path: &Path, device: Option<u64>) -> Result<bool, String> {
        let (root, real_root, mounts) = (&self.root, self.real_root.as_deref(), &self.mounts);
        let mounted = |at: &Path| match (at.strip_prefix(root), real_root) {
            (Ok(rest), Some(real_root)) => mounts.is_mount_point(&real_root.join(rest)),
            _ => mounts.is_mount_point(at),
        };
        super::deep::read_below(path, device, &mounted, &mut usize::MAX.clone())
    }

    /// Read every deep directory again, whole, as a look lists a changed directory again:
    /// a link moved into one after it was read is found (round 87, S1). One that holds
    /// only files and directories asks for no other look, as a directory listed again
    /// without a new link does (round 88, W1: a busy writer there used up every look).
    fn look_again_deep(&mut self) {
        let deep: Vec<(PathBuf, Option<u64>)> = self
            .deep
            .iter()
            .map(|(path, device)| (path.clone(), *device))
            .collect();
        for (path, device) in deep {
            match self.read_deep_whole(&path, device) {
                Ok(true) => {}
                // Gone from where it was read: it was read whole then (as a listed
                // directory gone is).
                Ok(false) => {
                    self.deep.remove(&path);
                }
                Err(why) => self.unread(why),
            }
        }
    }

    /// The name inside the warehouse of the directory at `place`, if it has one.
    fn name_of_place(&self, place: &Path) -> Option<String> {
        let below = place.strip_prefix(&self.root).ok().or_else(|| {
            self.real_root
                .as_deref()
                .and_then(|real| place.strip_prefix(real).ok())
        })?;
        super::object_name(below.to_str()?).ok()
    }

    /// List the directory `path` (stamped `stamp` right before), queueing the directories
    /// and links in it.
    fn list(
        &mut self,
        path: &Path,
        stamp: Stamp,
        device: Option<u64>,
        depth: usize,
        stack: &mut Vec<(PathBuf, usize)>,
    ) {
        self.listed.insert(path.to_path_buf(), (stamp, device));
        let entries = match std::fs::read_dir(path) {
            Ok(entries) => entries,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
                self.moved = true;
                return;
            }
            Err(err) => {
                self.unread(format!("`{}` cannot be read ({err})", path.display()));
                return;
            }
        };
        for entry in entries {
            let entry = match entry {
                Ok(entry) => entry,
                Err(err) => {
                    self.unread(format!("`{}` cannot be read ({err})", path.display()));
                    return;
                }
            };
            // A regular file holds no link, but may be a bind mount of another file
            // (round 85, C1); a type the directory does not give is looked at.
            if entry
                .file_type()
                .map_or(true, |kind| kind.is_dir() || kind.is_symlink())
            {
                stack.push((entry.path(), depth + 1));
            } else {
                self.note_mounted(&entry.path(), false);
            }
        }
        #[cfg(test)]
        if let Some(hook) = self.after_listing.as_mut() {
            (hook.0)(path);
        }
    }

    /// Read the link at `path` unless read there already, as it is; return whether no
    /// link was read at that path before (a link made again where one was, a writer's
    /// `latest` repointed, is read, but is no sign of a move: round 72, U1).
    fn read_link(&mut self, path: PathBuf, meta: &std::fs::Metadata) -> bool {
        let id = (meta.dev(), meta.ino(), (meta.ctime(), meta.ctime_nsec()));
        let new = !self.read.contains_key(&path);
        if self.read.get(&path) == Some(&id) {
            return false;
        }
        if !super::deep::fits_as_given(&path) {
            self.unread(format!(
                "the link `{}` is too long to resolve by its name",
                path.display()
            ));
            return true;
        }
        // A link that leads, in the end, to a place inside the warehouse whose path is not
        // UTF-8 (`x=Z\xfcrich/part-0.parquet`) names nothing the collector could delete
        // (no name at or below it is UTF-8): the place is searched for links instead, so
        // that what those lead to is kept (round 68, U2; round 69, F1).
        if let Some(place) = unnameable_place(self.real_root.as_deref(), &path) {
            if self.unnameable.insert(place.clone()) {
                self.frontier.push(place);
            }
            self.read.insert(path, id);
            return new;
        }
        let named = link_names(&self.root, &path);
        if named.gave_up {
            self.found
                .boundless
                .get_or_insert_with(|| path.display().to_string());
        }
        if !named.wide.is_empty() {
            self.found.wide.push(WideLink {
                link: path.display().to_string(),
                prefixes: named.wide,
            });
        }
        if !named.gave_up
            && let Some(place) = place_beyond_names(self.real_root.as_deref(), &path)
            && self.unnameable.insert(place.clone())
        {
            self.beyond.push(place);
        }
        for target in named.names {
            if self.started.insert(target.clone()) {
                self.frontier.push(self.root.join(&target));
            }
            self.found.targets.push(target);
        }
        self.read.insert(path, id);
        new
    }

    /// Take every listed directory's times again; list a changed one again and walk what
    /// appeared in it. Return whether this look found anything new (or anything gone
    /// from where it was), so that another look is due.
    fn look_again(&mut self) -> bool {
        let mut new = std::mem::take(&mut self.moved);
        self.look_again_deep();
        let mut changed = Vec::new();
        let mut gone = Vec::new();
        for (path, (stamp, device)) in &self.listed {
            match std::fs::symlink_metadata(path) {
                Ok(meta) if meta.is_dir() && Stamp::of(&meta) == *stamp => {}
                Ok(meta) if meta.is_dir() && Stamp::of(&meta).same_directory(stamp) => {
                    changed.push((path.clone(), Stamp::of(&meta), *device));
                }
                _ => gone.push(path.clone()),
            }
        }
        // A directory gone from where it was listed was walked whole when it was listed
        // (what it held then was read, or missing, which asked for this look); what moved
        // into it since is a second move (round 71, U: a committer's temporary
        // directories must not pause the deletes).
        for path in gone {
            self.listed.remove(&path);
            // A start replaced (by a link, by another directory): nothing listed shows
            // what leads there now (round 72, F2).
            if let Some(device) = self.starts.get(&path).copied() {
                new |= self.walk(vec![(path, 0)], device);
            }
        }
        for (path, stamp, device) in changed {
            let mut stack = Vec::new();
            self.list(&path, stamp, device, 0, &mut stack);
            new |= self.walk(stack, device);
        }
        // A replaced directory (another inode at a listed path) was dropped above and is
        // found again through its parent, which changed with it.
        // What links read in this look lead to is walked in it; that they led somewhere
        // new is no sign of a move.
        self.follow_frontier();
        new
    }

    /// Every path below the root that spells `name` on disk: the name as given, and for
    /// each segment every entry of its directory that is a spelling of it.
    fn spelled_on_disk(&mut self, name: &str) -> Vec<PathBuf> {
        let mut at = vec![self.root.clone()];
        for segment in name.split('/') {
            let mut next = Vec::new();
            for parent in &at {
                next.push(parent.join(segment));
                let spelled = self.spellings_in(parent);
                for form in spellings(segment.as_bytes()) {
                    for entry in spelled.get(&form).into_iter().flatten() {
                        next.push(parent.join(entry));
                    }
                }
            }
            next.sort_unstable();
            next.dedup();
            at = next;
        }
        at
    }

    /// The entries of the directory `dir` by every form a reader may open them by
    /// ([`spellings`]), listed once per search; none if it is no directory. One that
    /// cannot be listed is unread: another spelling may hide there.
    fn spellings_in(&mut self, dir: &Path) -> std::rc::Rc<Spelled> {
        if let Some(spelled) = self.entries.get(dir) {
            return spelled.clone();
        }
        let listed = std::fs::read_dir(dir).and_then(|entries| {
            entries
                .map(|entry| entry.map(|entry| entry.file_name()))
                .collect::<std::io::Result<Vec<_>>>()
        });
        let entries = match listed {
            Ok(entries) => entries,
            Err(err)
                if matches!(
                    err.kind(),
                    std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
                ) =>
            {
                Vec::new()
            }
            Err(err) => {
                self.unread(format!("`{}` cannot be listed ({err})", dir.display()));
                Vec::new()
            }
        };
        let mut spelled = Spelled::new();
        for entry in entries {
            let mut forms = spellings(entry.as_bytes());
            forms.sort_unstable();
            forms.dedup();
            for form in forms {
                spelled.entry(form).or_default().push(entry.clone());
            }
        }
        let spelled = std::rc::Rc::new(spelled);
        self.entries.insert(dir.to_path_buf(), spelled.clone());
        spelled
    }

    fn unread(&mut self, why: String) {
        self.found.unread.get_or_insert(why);
    }
}

/// The forms of one segment a reader may open it by: itself, percent-decoded once or
/// twice, and encoded the way `object_store` encodes a path part. An entry is a spelling
/// of a segment when they share a form. When unsure, it is: searching more costs a walk,
/// searching less may miss a link.
fn spellings(bytes: &[u8]) -> Vec<Vec<u8>> {
    let decode = |bytes: &[u8]| percent_encoding::percent_decode(bytes).collect::<Vec<u8>>();
    let once = decode(bytes);
    let twice = decode(&once);
    let mut forms = vec![bytes.to_vec(), once, twice];
    if let Ok(text) = std::str::from_utf8(bytes) {
        let encoded = PathPart::from(text).as_ref().as_bytes().to_vec();
        forms.push(decode(&encoded));
        forms.push(encoded);
    }
    forms
}

#[cfg(test)]
mod tests {
    use std::ffi::OsStr;

    use super::*;

    /// A search of `indexes/` while a writer acts in `indexes/t` each time the search
    /// lists it (`write(t, how many times so far)`).
    fn with_a_writer_in_t(mut write: impl FnMut(&Path, usize) + Send + 'static) -> LinksBelow {
        let dir = tempfile::tempdir().expect("dir");
        let root = dir.path().to_path_buf();
        let t = root.join("indexes/t");
        std::fs::create_dir_all(&t).expect("made");
        let mut search = Search::new(&root);
        let mut made = 0;
        search.after_listing = Some(super::super::links::ListingHook(Box::new(
            move |listed: &Path| {
                if listed == t {
                    made += 1;
                    write(&t, made);
                }
            },
        )));
        search.run(vec!["indexes".to_owned()]);
        search.finish()
    }

    fn link(root: &Path, at: &str, target: &str) {
        std::fs::create_dir_all(root.join(at).parent().expect("parent")).expect("made");
        std::os::unix::fs::symlink(target, root.join(at)).expect("linked");
    }

    fn old_z(root: &Path) {
        std::fs::create_dir_all(root.join("indexes/old/z")).expect("made");
        std::fs::write(root.join("indexes/old/z/part-0.parquet"), b"PAR1").expect("written");
    }

    /// Round 78 (helper-72, B1): a bind mount is read like a link: one of all of
    /// `indexes/` inside a table leads to the whole prefix (wide), and one of another
    /// directory names both places (the one not walked again: a mount of an ancestor is a
    /// cycle). In a mount namespace of its own (`mounts::in_a_mount_namespace`).
    #[test]
    fn a_bind_mount_is_read_like_a_link() {
        use super::super::mounts::{bind, in_a_mount_namespace};
        in_a_mount_namespace(
            "warehouse::link_search::tests::a_bind_mount_is_read_like_a_link",
            |root| {
                old_z(root);
                std::fs::create_dir_all(root.join("metadata")).expect("made");
                bind(root, "indexes", "indexes/new/all");
                let below = search(root, vec!["indexes/new".to_owned()]);
                assert_eq!(below.wide.len(), 1, "{below:?}");
                assert!(below.wide[0].link.ends_with("indexes/new/all"));
                assert_eq!(below.wide[0].prefixes, ["indexes"]);
                // Both prefixes searched whole: the mount is found, and no cycle.
                let below = search(root, vec!["indexes".to_owned(), "metadata".to_owned()]);
                assert_eq!(below.wide.len(), 1, "{below:?}");
                assert_eq!(below.unread, None);
                bind(root, "indexes/old", "indexes/other/m");
                let below = search(
                    root,
                    vec!["indexes/other".to_owned(), "indexes/old".to_owned()],
                );
                assert!(
                    below.targets.contains(&"indexes/old".to_owned())
                        && below.targets.contains(&"indexes/other/m".to_owned()),
                    "{below:?}"
                );
                // Round 81 (helper-75, G2): met where it is mounted only (the delete
                // guard's search of a late table), it names what it shows.
                let below = search(root, vec!["indexes/other".to_owned()]);
                assert!(
                    below.targets.contains(&"indexes/old".to_owned()),
                    "{below:?}"
                );
                // Round 85: a table below such a mount (met inside it only), a file of
                // the warehouse mounted over a table's file, and a link in a table to a
                // file below a mount of the warehouse outside it (E1).
                bind(root, "indexes/old", "indexes/up");
                let below = search(root, vec!["indexes/up/z".to_owned()]);
                assert!(
                    below.targets.contains(&"indexes/old/z".to_owned()),
                    "{below:?}"
                );
                std::fs::create_dir_all(root.join("indexes/keep")).expect("made");
                bind(
                    root,
                    "indexes/old/z/part-0.parquet",
                    "indexes/keep/part-0.parquet",
                );
                for start in ["indexes/keep", "indexes/keep/part-0.parquet"] {
                    // (and the places the earlier mounts show it at)
                    let below = search(root, vec![start.to_owned()]);
                    assert!(
                        below
                            .targets
                            .contains(&"indexes/old/z/part-0.parquet".to_owned()),
                        "{start}: {below:?}"
                    );
                }
                let out = tempfile::tempdir().expect("outside");
                let status = std::process::Command::new("mount")
                    .arg("--bind")
                    .args([root.join("indexes/old/z"), out.path().to_path_buf()])
                    .status()
                    .expect("mount runs");
                assert!(status.success(), "mount --bind indexes/old/z outside");
                link(
                    root,
                    "indexes/live/l.parquet",
                    &out.path().join("part-0.parquet").display().to_string(),
                );
                let below = search(root, vec!["indexes/live".to_owned()]);
                assert!(
                    below
                        .targets
                        .contains(&"indexes/old/z/part-0.parquet".to_owned()),
                    "{below:?}"
                );
                let status = std::process::Command::new("umount")
                    .arg(out.path())
                    .status();
                assert!(status.expect("umount runs").success());
            },
        );
    }

    /// Round 87 (helper-81, S1): a directory too deep to open by its path is read again at
    /// every look, so a link that appears there after it was read (moved in from a place
    /// not read yet) is found.
    #[test]
    fn a_deep_directory_is_read_again_at_each_look() {
        let dir = tempfile::tempdir().expect("dir");
        let root = dir.path();
        old_z(root);
        crate::warehouse::deep_file(root, "indexes/live/deep", 22);
        let mut search = Search::new(root);
        search.run(vec!["indexes/live".to_owned()]);
        assert_eq!(search.found.unread, None, "files and directories only");
        let flags = rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::DIRECTORY;
        let start = root.join("indexes/live/deep");
        let mut at = rustix::fs::open(&start, flags, rustix::fs::Mode::empty()).expect("opened");
        for _ in 0..22 {
            at = rustix::fs::openat(
                &at,
                "d".repeat(200).as_str(),
                flags,
                rustix::fs::Mode::empty(),
            )
            .expect("opened");
        }
        let target = root.join("indexes/old/z/part-0.parquet");
        rustix::fs::symlinkat(target.as_path(), &at, "x.parquet").expect("linked");
        search.look_again();
        assert!(
            search
                .found
                .unread
                .as_deref()
                .is_some_and(|why| why.contains("symbolic link")),
            "{:?}",
            search.found
        );
    }

    /// Round 86: an overlay mounted in a table (or above one) may show anything, garbage
    /// of the warehouse among it: the search is unread.
    #[test]
    fn an_overlay_in_a_table_leaves_the_search_unread() {
        use super::super::mounts::in_a_mount_namespace;
        in_a_mount_namespace(
            "warehouse::link_search::tests::an_overlay_in_a_table_leaves_the_search_unread",
            |root| {
                old_z(root);
                std::fs::create_dir_all(root.join("indexes/live/ov")).expect("made");
                std::fs::create_dir_all(root.join("lo2")).expect("made");
                let options = format!(
                    "lowerdir={}:{}",
                    root.join("indexes/old").display(),
                    root.join("lo2").display()
                );
                let status = std::process::Command::new("mount")
                    .args(["-t", "overlay", "overlay", "-o", &options])
                    .arg(root.join("indexes/live/ov"))
                    .status()
                    .expect("mount runs");
                assert!(status.success(), "mount -t overlay -o {options}");
                for start in ["indexes/live", "indexes/live/ov", "indexes/live/ov/z"] {
                    let below = search(root, vec![start.to_owned()]);
                    // (met as another file system below a start, or as an overlay at or
                    // above one)
                    assert!(below.unread.is_some(), "{start}: {below:?}");
                }
                let below = search(root, vec!["indexes/old".to_owned()]);
                assert_eq!(below.unread, None);
            },
        );
    }

    /// Round 68, F4: a table published as `indexes/n b/` whose files sit under another
    /// spelling on disk (`n%20b`, `%6E%20b`, `n%2520b`) holds a link a reader of the table
    /// follows: found below every spelling.
    #[test]
    fn a_link_under_any_spelling_of_a_name_on_disk_is_found() {
        for on_disk in ["n%20b", "%6E%20b", "%6e b", "n%2520b", "n b"] {
            let dir = tempfile::tempdir().expect("dir");
            old_z(dir.path());
            link(dir.path(), &format!("indexes/{on_disk}/l"), "../old/z");
            let below = search(dir.path(), vec!["indexes/n b".to_owned()]);
            assert_eq!(below.targets, ["indexes/old/z"], "{on_disk}");
            assert_eq!(below.unread, None);
        }
        // and the other way round: `indexes/a%7Eb` names what sits at `a~b`
        let dir = tempfile::tempdir().expect("dir");
        old_z(dir.path());
        link(dir.path(), "indexes/a~b/l", "../old/z");
        let below = search(dir.path(), vec!["indexes/a%7Eb".to_owned()]);
        assert_eq!(below.targets, ["indexes/old/z"]);
    }

    /// A different name is not searched.
    #[test]
    fn a_link_under_another_name_is_not_found() {
        let dir = tempfile::tempdir().expect("dir");
        old_z(dir.path());
        link(dir.path(), "indexes/n%20c/l", "../old/z");
        link(dir.path(), "indexes/nb/l", "../old/z");
        let below = search(dir.path(), vec!["indexes/n b".to_owned()]);
        assert_eq!(below.targets, Vec::<String>::new());
    }

    /// Round 69, F2: a directory holding a link, moved from a table the walk has listed
    /// but not entered into one it walked already, is found where it went.
    #[test]
    fn a_directory_moved_behind_the_walk_is_walked_where_it_went() {
        for moved_when in ["after its table was listed", "before its table was listed"] {
            let dir = tempfile::tempdir().expect("dir");
            let root = dir.path().to_path_buf();
            old_z(&root);
            std::fs::create_dir_all(root.join("indexes/ta")).expect("made");
            link(&root, "indexes/tb/stage/l", "../../old/z");
            let mut search = Search::new(&root);
            let (from, to) = (root.join("indexes/tb/stage"), root.join("indexes/ta/v7"));
            let (ta, tb) = (root.join("indexes/ta"), root.join("indexes/tb"));
            let mut done = false;
            let before = moved_when.starts_with("before");
            search.after_listing = Some(super::super::links::ListingHook(Box::new(
                move |listed: &Path| {
                    // `ta` is listed first (the names are walked in the order given); the
                    // move lands once `ta` is behind the walk, before `tb` is listed or
                    // after it was listed and before `stage` is entered.
                    let trigger = if before { &ta } else { &tb };
                    if listed == trigger && !done && (before || from.exists()) {
                        std::fs::rename(&from, &to).expect("moved");
                        done = true;
                    }
                },
            )));
            search.run(vec!["indexes/ta".to_owned(), "indexes/tb".to_owned()]);
            let below = search.finish();
            assert!(root.join("indexes/ta/v7/l").exists(), "{moved_when}");
            assert_eq!(below.targets, ["indexes/old/z"], "{moved_when}");
            assert_eq!(below.unread, None, "{moved_when}");
        }
    }

    /// Round 69, U1: a link to a directory outside with more entries than a search for
    /// links reads may lead anywhere: it names every managed prefix, and the search says
    /// which link it is.
    #[test]
    fn a_link_too_large_to_search_is_named() {
        let dir = tempfile::tempdir().expect("dir");
        let (root, outside) = (dir.path().join("wh"), dir.path().join("outside"));
        std::fs::create_dir_all(&outside).expect("made");
        for at in 0..=super::super::links::MAX_WALK_ENTRIES {
            std::fs::File::create(outside.join(format!("f{at}"))).expect("made");
        }
        link(&root, "indexes/old/l", outside.to_str().expect("utf-8"));
        let below = search(&root, vec!["indexes".to_owned()]);
        assert_eq!(below.targets, ["indexes", "metadata"]);
        assert!(
            below
                .boundless
                .as_deref()
                .is_some_and(|link| link.ends_with("indexes/old/l")),
            "{below:?}"
        );
    }

    /// Round 68, U2: a link in a Latin-1 partition directory to a file beside it names
    /// nothing (no name there is UTF-8, so nothing there can be deleted); round 69, F1: a
    /// link to a Latin-1 directory outside the managed prefixes is searched for the links
    /// in it, which keep what they lead to.
    #[test]
    fn a_link_to_a_place_that_is_not_utf8_names_what_the_links_there_lead_to() {
        use std::os::unix::ffi::OsStrExt;
        let latin1 = |text: &[u8]| OsStr::from_bytes(text).to_owned();
        let dir = tempfile::tempdir().expect("dir");
        let root = dir.path().to_path_buf();
        old_z(&root);
        let partition = root.join("indexes/t2").join(latin1(b"x=Z\xfcrich"));
        std::fs::create_dir_all(&partition).expect("made");
        std::fs::write(partition.join("part-0.parquet"), b"PAR1").expect("written");
        std::os::unix::fs::symlink("part-0.parquet", partition.join("latest")).expect("linked");
        let below = search(&root, vec!["indexes".to_owned(), "metadata".to_owned()]);
        assert_eq!(below.targets, Vec::<String>::new());
        assert_eq!((below.unread, below.boundless), (None, None));

        let side = root.join(latin1(b"side\xfc"));
        std::fs::create_dir_all(&side).expect("made");
        std::os::unix::fs::symlink("../indexes/old/z", side.join("z")).expect("linked");
        std::os::unix::fs::symlink(&side, root.join("indexes/t2/l")).expect("linked");
        let below = search(&root, vec!["indexes".to_owned()]);
        assert_eq!(below.targets, ["indexes/old/z"]);
        assert_eq!((below.unread, below.boundless), (None, None));
    }

    /// Round 70, F3: a place whose name holds a control character is no name either: the
    /// links there are searched.
    #[test]
    fn a_link_to_a_place_with_a_control_character_names_what_the_links_there_lead_to() {
        let dir = tempfile::tempdir().expect("dir");
        let root = dir.path().to_path_buf();
        old_z(&root);
        link(&root, "indexes/t2/x=Z\u{1}rich/z", "../../old/z");
        link(&root, "indexes/new/l", "../t2/x=Z\u{1}rich");
        let below = search(&root, vec!["indexes/new".to_owned()]);
        assert_eq!(below.targets, ["indexes/old/z"]);
    }

    /// Round 70, F1: a directory outside the warehouse a link leads to is walked by the
    /// search itself, so its directories are looked at again like the warehouse's (a
    /// directory moved there while the walk runs is read where it went).
    #[test]
    fn a_directory_outside_a_link_leads_to_is_looked_at_again() {
        let dir = tempfile::tempdir().expect("dir");
        let (root, outside) = (dir.path().join("wh"), dir.path().join("outside"));
        old_z(&root);
        std::fs::create_dir_all(outside.join("data/ta")).expect("made");
        link(
            &outside,
            "data/tb/stage/z",
            root.join("indexes/old/z").to_str().expect("utf-8"),
        );
        link(
            &root,
            "indexes/post1/ext",
            outside.join("data").to_str().expect("utf-8"),
        );
        let mut search = Search::new(&root);
        let (from, to) = (outside.join("data/tb/stage"), outside.join("data/ta/v7"));
        let ta = outside.join("data/ta");
        let mut done = false;
        search.after_listing = Some(super::super::links::ListingHook(Box::new(
            move |listed: &Path| {
                if listed == ta && !done && from.exists() {
                    std::fs::rename(&from, &to).expect("moved");
                    done = true;
                }
            },
        )));
        search.run(vec!["indexes/post1".to_owned()]);
        assert!(search.listed.contains_key(&outside.join("data/ta")));
        let below = search.finish();
        assert_eq!(below.targets, ["indexes/old/z"]);
        assert_eq!(below.unread, None);
    }

    /// Round 70, F4: a link to all of a managed prefix or to the root names nothing (one in
    /// garbage must not stop collection), and says so, for publication to refuse it.
    #[test]
    fn a_link_to_a_whole_prefix_is_wide() {
        for to in ["..", "../..", "../../metadata"] {
            let dir = tempfile::tempdir().expect("dir");
            old_z(dir.path());
            link(dir.path(), "indexes/new/all", to);
            let below = search(dir.path(), vec!["indexes/new".to_owned()]);
            assert_eq!(below.targets, Vec::<String>::new(), "{to}");
            assert_eq!(below.wide.len(), 1, "{to}: {below:?}");
            assert!(below.wide[0].link.ends_with("indexes/new/all"), "{to}");
            let prefixes: &[&str] = match to {
                ".." => &["indexes"],
                "../.." => &["metadata", "indexes"],
                _ => &["metadata"],
            };
            assert_eq!(below.wide[0].prefixes, prefixes, "{to}");
        }
    }

    /// Round 72 (helper-67, U): a directory removed after it was listed (a committer's
    /// attempt directory) asks for no other look: what it held was read when it was
    /// listed. A link that appeared asks for one.
    #[test]
    fn a_directory_removed_after_it_was_listed_asks_for_no_other_look() {
        let dir = tempfile::tempdir().expect("dir");
        let root = dir.path().to_path_buf();
        std::fs::create_dir_all(root.join("indexes/t/_temporary/attempt_0")).expect("made");
        let mut search = Search::new(&root);
        search.run(vec!["indexes".to_owned()]);
        std::fs::remove_dir(root.join("indexes/t/_temporary/attempt_0")).expect("removed");
        assert!(
            !search.look_again(),
            "a removed directory asked for another look"
        );
        std::os::unix::fs::symlink("x", root.join("indexes/t/l")).expect("linked");
        assert!(search.look_again(), "a new link asks for another look");
        assert!(!search.look_again());
    }

    /// Round 72 (helper-68, U1): a link made again at the same path (a writer's `latest`
    /// repointed) is read again, what it leads to kept, but asks for no other look.
    #[test]
    fn a_link_repointed_is_read_again_but_asks_for_no_other_look() {
        let dir = tempfile::tempdir().expect("dir");
        let root = dir.path().to_path_buf();
        old_z(&root);
        std::fs::create_dir_all(root.join("indexes/old/y")).expect("made");
        link(&root, "indexes/t/latest", "../old/z");
        let mut search = Search::new(&root);
        search.run(vec!["indexes".to_owned()]);
        std::fs::remove_file(root.join("indexes/t/latest")).expect("removed");
        link(&root, "indexes/t/latest", "../old/y");
        assert!(
            !search.look_again(),
            "a repointed link asked for another look"
        );
        let below = search.finish();
        assert_eq!(below.targets, ["indexes/old/y", "indexes/old/z"]);
    }

    /// A tree that shows something new at every look is answered as unread, naming it.
    #[test]
    fn a_tree_that_keeps_changing_is_unread() {
        let below = with_a_writer_in_t(|t, made| {
            std::os::unix::fs::symlink("part-0.parquet", t.join(format!("l{made}")))
                .expect("linked");
        });
        assert!(
            below
                .unread
                .as_deref()
                .is_some_and(|why| why.contains("kept changing")),
            "{below:?}"
        );
    }

    /// Files and directories written into a walked directory, or removed from it, while
    /// the walk runs (a busy writer) cost one more listing of it, and the search ends
    /// (rounds 71 and 72, U).
    #[test]
    fn files_written_during_the_walk_end_the_search() {
        let below = with_a_writer_in_t(|t, made| {
            std::fs::write(t.join(format!("part-{made}.parquet")), b"PAR1").expect("written");
            let partition = t.join(format!("dt={made}"));
            std::fs::create_dir(&partition).expect("made");
            std::fs::write(partition.join("part-0.parquet"), b"PAR1").expect("written");
            // a committer's attempt directory, made and removed by the next task
            // (round 72, U)
            let attempt = |n: usize| t.join(format!("_temporary/attempt_{n}"));
            std::fs::create_dir_all(attempt(made)).expect("made");
            if made > 1 {
                std::fs::remove_dir(attempt(made - 1)).expect("removed");
            }
        });
        assert_eq!(below.unread, None);
    }
}
