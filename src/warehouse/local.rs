//! A warehouse in a local directory: listings that never follow symbolic links, and
//! deletions that never leave the directory.
//!
//! `object_store`'s `LocalFileSystem` follows symbolic links when it lists, so a link
//! inside `indexes/` to a directory elsewhere would make that directory's files look like
//! warehouse objects. Here a listing walks the directory itself (`walkdir`, links not
//! followed, never into another file system) and reports every link as skipped; right
//! before each deletion every component of the object's path below the root is checked
//! with `symlink_metadata` (no link, the root's file system — a mount point below the
//! warehouse is not the warehouse — and the object itself a regular file). What remains
//! is a race with someone who swaps a directory for a link between that check and the
//! deletion of that one file, or mounts something there in between: the collector
//! assumes nobody rearranges the warehouse *while* a run deletes. A mount point below the
//! warehouse, a bind mount of this file system too, is never deleted at or below
//! (`mounts`, from the process's mount table), and the verification walk reads a bind
//! mount like a link (`link_search`: the same directory at two places).

use std::path::{Component, Path, PathBuf};

use futures::StreamExt;
use futures::stream::BoxStream;

use super::names::check_segment;
use super::{ListItem, Listed};
use crate::error::{Error, ErrorKind, Result};

/// List the files under `root/<prefix>` (a name), recursively, in file-name order.
pub(crate) fn list(root: PathBuf, prefix: String) -> BoxStream<'static, Result<ListItem>> {
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<ListItem>>(256);
    tokio::task::spawn_blocking(move || walk(&root, &prefix, &tx));
    futures::stream::unfold(rx, |mut rx| async move {
        let item = rx.recv().await?;
        Some((item, rx))
    })
    .boxed()
}

/// Where a listing of `prefix` starts: `Ok(None)` if the directory does not exist,
/// `Err(item)` with what to report if it cannot be listed (a symbolic link on the way, an
/// I/O error).
fn start_of(root: &Path, prefix: &str) -> std::result::Result<Option<PathBuf>, Result<ListItem>> {
    // The prefix itself must be a real directory below the root.
    let mut start = root.to_path_buf();
    for segment in prefix.split('/').filter(|s| !s.is_empty()) {
        start.push(segment);
        match std::fs::symlink_metadata(&start) {
            Ok(meta) if meta.file_type().is_symlink() => {
                return Err(Ok(ListItem::Skipped {
                    name: prefix.to_owned(),
                    reason: format!(
                        "`{}` is a symbolic link; the collector never follows links",
                        start.display()
                    ),
                }));
            }
            Ok(_) => {}
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(err) => return Err(Err(io_error(&start, err))),
        }
    }
    Ok(Some(start))
}

/// The walker over the directory `start`, links not followed, one file system.
fn walker(start: &Path) -> walkdir::WalkDir {
    walkdir::WalkDir::new(start)
        .follow_links(false)
        .same_file_system(true)
        .min_depth(1)
        .sort_by_file_name()
}

/// An entry of a walk.
enum Walked {
    /// An entry that could be read.
    Entry(walkdir::DirEntry),
    /// A directory below the start that cannot be listed (its path too long for the
    /// operating system, no permission): reported as skipped, so nothing below it is ever
    /// collected, and the walk goes on.
    Unreadable(PathBuf, ListItem),
}

/// The entries of a walk over `start`, without those removed while listing.
fn present(
    root: &Path,
    start: &Path,
    entries: impl IntoIterator<Item = walkdir::Result<walkdir::DirEntry>>,
) -> impl Iterator<Item = Result<Walked>> {
    entries.into_iter().filter_map(move |entry| match entry {
        Ok(entry) => Some(Ok(Walked::Entry(entry))),
        Err(err) => walk_error(root, start, err),
    })
}

/// What a walker error means: `None` for an entry removed while listing, a skipped item
/// for a directory below the start that cannot be listed, an error for the start itself.
fn walk_error(root: &Path, start: &Path, err: walkdir::Error) -> Option<Result<Walked>> {
    let missing = err
        .io_error()
        .is_some_and(|io| io.kind() == std::io::ErrorKind::NotFound);
    if missing {
        return None;
    }
    let depth = err.depth();
    let path = err.path().unwrap_or(start).to_path_buf();
    let io = err
        .into_io_error()
        .unwrap_or_else(|| std::io::Error::other("walk failed"));
    if depth == 0 {
        return Some(Err(io_error(&path, io)));
    }
    let item = ListItem::Skipped {
        name: name_of(root, &path).unwrap_or_else(|_| path.display().to_string()),
        reason: format!("cannot be listed ({io}); nothing below it is collected"),
    };
    Some(Ok(Walked::Unreadable(path, item)))
}

/// The listing item of a non-directory entry; `None` if it vanished while listing.
fn item_of(root: &Path, entry: &walkdir::DirEntry) -> Option<ListItem> {
    let file_type = entry.file_type();
    Some(match name_of(root, entry.path()) {
        Err(reason) => ListItem::Skipped {
            name: entry.path().display().to_string(),
            reason,
        },
        Ok(name) if file_type.is_symlink() => ListItem::Skipped {
            name,
            reason: "a symbolic link; the collector never follows or deletes links".to_owned(),
        },
        Ok(name) if !file_type.is_file() => ListItem::Skipped {
            name,
            reason: "not a regular file".to_owned(),
        },
        Ok(name) if is_staging_name(&name) => ListItem::Skipped {
            name,
            reason: "an object_store multipart staging file (`<name>#<digits>`), which object_store cannot read or delete and no metadata can name".to_owned(),
        },
        Ok(name) => ListItem::Object(listed(name, &entry.metadata().ok()?)),
    })
}

/// The listing entry of the file `name` with metadata `meta`.
pub(super) fn listed(name: String, meta: &std::fs::Metadata) -> Listed {
    Listed {
        name,
        size: meta.len(),
        last_modified_ms: modified_ms(meta),
        landed_ms: modified_ms(meta).max(created_ms(meta)),
    }
}

/// A file's modification time (Unix epoch milliseconds).
fn modified_ms(meta: &std::fs::Metadata) -> i64 {
    use std::os::unix::fs::MetadataExt;
    epoch_ms(meta.mtime(), meta.mtime_nsec())
}

/// When a file was created here: its birth time where the file system records one
/// (ext4, xfs, btrfs, tmpfs: a copy, a restore or `tar x` makes a new file, while
/// `chown`, `chmod`, hard links and `utime` leave it alone), else its status-change time
/// (which those also move: a delay, never a hastening). Nobody can set either.
fn created_ms(meta: &std::fs::Metadata) -> i64 {
    use std::os::unix::fs::MetadataExt;
    match meta.created() {
        Ok(created) => created
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX)),
        Err(_) => epoch_ms(meta.ctime(), meta.ctime_nsec()),
    }
}

fn epoch_ms(secs: i64, nanos: i64) -> i64 {
    secs.saturating_mul(1000).saturating_add(nanos / 1_000_000)
}

fn walk(root: &Path, prefix: &str, tx: &tokio::sync::mpsc::Sender<Result<ListItem>>) {
    let send = |item| tx.blocking_send(item).is_ok();
    let own = is_bookkeeping(prefix);
    let start = match start_of(root, prefix) {
        Ok(Some(start)) => start,
        Ok(None) => return,
        Err(Ok(item)) if own => {
            send(Err(hides_bookkeeping(&item)));
            return;
        }
        Err(item) => {
            send(item);
            return;
        }
    };
    for_each_item(root, &start, walker(&start), own, |found| {
        send(found.map(|(_, item)| item))
    });
}

/// Whether `prefix` is the catalog's own bookkeeping (`_gc/`, `_catalog/`, or below):
/// everything the catalog wrote there must be read (a change-log entry, a lease generation
/// or a condemnation a listing skipped would be evidence lost), so a listing there fails
/// where another would skip (a symbolic link, a directory that cannot be listed).
fn is_bookkeeping(prefix: &str) -> bool {
    let first = prefix.split('/').find(|s| !s.is_empty());
    matches!(
        first,
        Some(super::layout::GC_DIR | super::layout::CATALOG_DIR)
    )
}

/// The error of a bookkeeping listing that met `item`, which may hide what the catalog
/// wrote (round 35 G2: `_gc/` moved to another disk behind a link).
fn hides_bookkeeping(item: &ListItem) -> Error {
    let (name, reason) = match item {
        ListItem::Skipped { name, reason } => (name.as_str(), reason.as_str()),
        ListItem::Object(listed) => (listed.name.as_str(), "unreadable"),
    };
    Error::new(
        ErrorKind::StoreRefused,
        format!(
            "`{name}` in the catalog's own bookkeeping (`_gc/`, `_catalog/`) cannot be read: {reason}. What the catalog records there must be regular files in real directories of the warehouse (move what was moved back in place of the link); the catalog stops rather than miss a record"
        ),
    )
}

/// Hand each non-directory entry of a walk over `start` (and each directory that cannot
/// be listed) to `emit` with its path and listing item, leaving out the entries removed
/// while listing; an error listing `start` itself is handed to `emit` and ends the walk,
/// as does `emit` answering `false` (the listing was dropped).
fn for_each_item(
    root: &Path,
    start: &Path,
    entries: impl IntoIterator<Item = walkdir::Result<walkdir::DirEntry>>,
    own: bool,
    mut emit: impl FnMut(Result<(PathBuf, ListItem)>) -> bool,
) {
    for entry in present(root, start, entries) {
        let found = match entry {
            Ok(Walked::Entry(entry)) => {
                if entry.file_type().is_dir() {
                    continue;
                }
                let Some(item) = item_of(root, &entry) else {
                    continue; // removed while listing
                };
                if own && entry.file_type().is_symlink() {
                    emit(Err(hides_bookkeeping(&item)));
                    return;
                }
                (entry.into_path(), item)
            }
            Ok(Walked::Unreadable(_, item)) if own => {
                emit(Err(hides_bookkeeping(&item)));
                return;
            }
            Ok(Walked::Unreadable(path, item)) => (path, item),
            Err(err) => {
                emit(Err(err));
                return;
            }
        };
        if !emit(Ok(found)) {
            return;
        }
    }
}

/// The subdirectories directly in `root/<prefix>`, in file-name order (the walk's order),
/// without those whose name is not UTF-8 (they are never boundaries, only members).
pub(crate) fn segments(root: &Path, prefix: &str) -> Result<Vec<String>> {
    let start = match start_of(root, prefix) {
        Ok(Some(start)) => start,
        Ok(None) | Err(Ok(_)) => return Ok(Vec::new()),
        Err(Err(err)) => return Err(err),
    };
    let mut segments = Vec::new();
    for entry in present(root, &start, walker(&start).max_depth(1)) {
        let Walked::Entry(entry) = entry? else {
            continue;
        };
        if entry.file_type().is_dir()
            && let Some(name) = entry.file_name().to_str()
        {
            segments.push(name.to_owned());
        }
    }
    Ok(segments)
}

/// The bytes of a path's components below `root`.
fn components(root: &Path, path: &Path) -> Vec<Vec<u8>> {
    path.strip_prefix(root)
        .unwrap_or(path)
        .components()
        .map(|component| component.as_os_str().as_encoded_bytes().to_vec())
        .collect()
}

/// Bytes that stand for themselves in a position; everything else is `%XX`.
const POSITION: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~')
    .remove(b'/');

/// A walk position: the entry's component bytes, percent-encoded and joined by `/`.
fn position_of(parts: &[Vec<u8>]) -> String {
    parts
        .iter()
        .map(|part| percent_encoding::percent_encode(part, POSITION).to_string())
        .collect::<Vec<_>>()
        .join("/")
}

/// The position of the entry named `name` (see `position_of`).
pub(crate) fn position_of_name(name: &str) -> String {
    let parts: Vec<Vec<u8>> = name
        .split('/')
        .map(|part| part.as_bytes().to_vec())
        .collect();
    position_of(&parts)
}

/// The name of the entry at `position` (`None` unless every component is UTF-8).
pub(crate) fn name_at(position: &str) -> Option<String> {
    let parts = parse_position(position)
        .into_iter()
        .map(String::from_utf8)
        .collect::<std::result::Result<Vec<String>, _>>()
        .ok()?;
    Some(parts.join("/"))
}

/// The component bytes of a position (`None` for one this module did not write).
fn parse_position(position: &str) -> Vec<Vec<u8>> {
    position
        .split('/')
        .map(|part| percent_encoding::percent_decode_str(part).collect())
        .collect()
}

/// The entries of `range` below `root` after the position `after`, in walk order (see
/// the `range` module): subtrees sorting entirely before `after`, and first-level entries
/// outside the range, are not descended into.
pub(crate) fn list_range(
    root: PathBuf,
    range: super::ListRange,
    after: Option<String>,
) -> BoxStream<'static, Result<super::Positioned>> {
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<super::Positioned>>(256);
    tokio::task::spawn_blocking(move || walk_range(&root, &range, after.as_deref(), &tx));
    futures::stream::unfold(rx, |mut rx| async move {
        let item = rx.recv().await?;
        Some((item, rx))
    })
    .boxed()
}

fn walk_range(
    root: &Path,
    range: &super::ListRange,
    after: Option<&str>,
    tx: &tokio::sync::mpsc::Sender<Result<super::Positioned>>,
) {
    let send = |item| tx.blocking_send(item).is_ok();
    let own = is_bookkeeping(&range.prefix);
    let start = match start_of(root, &range.prefix) {
        Ok(Some(start)) => start,
        Ok(None) => return,
        Err(Ok(item)) if own => {
            send(Err(hides_bookkeeping(&item)));
            return;
        }
        Err(Ok(item)) => {
            let position = position_of(&components(root, &root.join(&range.prefix)));
            if after.is_none_or(|after| position.as_str() > after) {
                send(Ok(super::Positioned { position, item }));
            }
            return;
        }
        Err(Err(err)) => {
            send(Err(err));
            return;
        }
    };
    let depth = components(root, &start).len();
    let after = after.map(parse_position);
    let (from, to) = (
        range.from.as_ref().map(|s| s.as_bytes().to_vec()),
        range.to.as_ref().map(|s| s.as_bytes().to_vec()),
    );
    let keep = |parts: &[Vec<u8>]| {
        if parts.len() <= depth {
            return true; // the prefix itself
        }
        let first = &parts[depth];
        if from.as_ref().is_some_and(|from| first < from)
            || to.as_ref().is_some_and(|to| first >= to)
        {
            return false;
        }
        match &after {
            // An ancestor of the position, or an entry after it.
            Some(after) => {
                after.starts_with(parts) && after.len() > parts.len() || parts > after.as_slice()
            }
            None => true,
        }
    };
    let entries = walker(&start)
        .into_iter()
        .filter_entry(|entry| keep(&components(root, entry.path())));
    for_each_item(root, &start, entries, own, |found| {
        send(found.map(|(path, item)| {
            let position = position_of(&components(root, &path));
            super::Positioned { position, item }
        }))
    });
}

/// Whether the last segment of `name` ends in `#<digits>`: object_store's
/// `LocalFileSystem` stages multipart uploads under such names and refuses to address
/// them (every get, head or delete fails), so they are not objects.
pub(crate) fn is_staging_name(name: &str) -> bool {
    let last = name.rsplit('/').next().unwrap_or(name);
    last.split_once('#')
        .is_some_and(|(_, suffix)| !suffix.is_empty() && suffix.bytes().all(|b| b.is_ascii_digit()))
}

/// The name of `path` below `root`, or why it has none.
fn name_of(root: &Path, path: &Path) -> std::result::Result<String, String> {
    let relative = path
        .strip_prefix(root)
        .map_err(|_| "outside the warehouse directory".to_owned())?;
    let mut segments = Vec::new();
    for component in relative.components() {
        let Component::Normal(part) = component else {
            return Err("not a plain path below the warehouse directory".to_owned());
        };
        let part = part
            .to_str()
            .ok_or_else(|| "its file name is not UTF-8, so no metadata can name it".to_owned())?;
        check_segment(part)?;
        segments.push(part);
    }
    Ok(segments.join("/"))
}

/// Why the path of the object `name` below `root` passes through a symbolic link, if it
/// does (a missing component ends the check: reading the object reports that).
pub(crate) fn linked(root: &Path, name: &str) -> Option<String> {
    let mut path = root.to_path_buf();
    for segment in name.split('/') {
        path.push(segment);
        match std::fs::symlink_metadata(&path) {
            Ok(meta) if meta.file_type().is_symlink() => {
                return Some(format!("`{}` is a symbolic link", path.display()));
            }
            Ok(_) => {}
            Err(_) => return None,
        }
    }
    None
}

fn io_error(path: &Path, err: std::io::Error) -> Error {
    Error::with_source(
        ErrorKind::StoreUnavailable,
        format!("listing `{}` failed", path.display()),
        err,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::TryStreamExt;

    async fn names(root: &Path, prefix: &str) -> (Vec<String>, Vec<String>) {
        let items: Vec<ListItem> = list(root.to_path_buf(), prefix.to_owned())
            .try_collect()
            .await
            .expect("listed");
        let mut objects = Vec::new();
        let mut skipped = Vec::new();
        for item in items {
            match item {
                ListItem::Object(listed) => objects.push(listed.name),
                ListItem::Skipped { name, .. } => skipped.push(name),
            }
        }
        (objects, skipped)
    }

    /// Found by the second issue-26 attack: a directory whose path is longer than the
    /// operating system allows stopped every listing (and so every gc run) for good.
    #[tokio::test]
    async fn a_directory_that_cannot_be_listed_is_skipped_and_the_walk_goes_on() {
        let dir = tempfile::tempdir().expect("dir");
        let root = dir.path().join("wh");
        std::fs::create_dir_all(root.join("indexes/b")).expect("dirs");
        std::fs::write(root.join("indexes/b/after"), b"x").expect("file");
        // 20 segments of 250 bytes: past PATH_MAX (4096), made one relative step at a time.
        let deep = root.join("indexes/a");
        std::fs::create_dir_all(&deep).expect("dir");
        let segment = "d".repeat(250);
        let status = std::process::Command::new("bash")
            .arg("-c")
            .arg(format!(
                "cd \"$1\" && for i in $(seq 20); do mkdir {segment} && cd {segment} || exit 1; done && echo x > f"
            ))
            .arg("sh")
            .arg(&deep)
            .status()
            .expect("sh");
        assert!(status.success(), "the deep tree was made");
        let (objects, skipped) = names(&root, "indexes").await;
        assert_eq!(objects, vec!["indexes/b/after".to_owned()], "{skipped:?}");
        assert_eq!(skipped.len(), 1, "{skipped:?}");
        let ranged: Vec<super::super::Positioned> = list_range(
            root.clone(),
            super::super::ListRange::whole("indexes"),
            None,
        )
        .try_collect()
        .await
        .expect("listed");
        assert_eq!(ranged.len(), 2, "{ranged:?}");
    }

    /// Round 35 G2: `_gc/` moved to another disk behind a link. The catalog's writes go
    /// through the link, so a listing of its bookkeeping that skipped the link would miss
    /// every lease generation (each run then "lost its lease"), change-log entry and
    /// condemnation: such a listing fails, naming the link, wherever the link is.
    #[tokio::test]
    async fn a_link_in_the_catalogs_own_bookkeeping_is_an_error_not_a_skip() {
        let dir = tempfile::tempdir().expect("dir");
        let root = dir.path().join("wh");
        let outside = dir.path().join("outside");
        std::fs::create_dir_all(outside.join("lease")).expect("outside");
        std::fs::write(outside.join("lease/00000000000000000001.json"), b"{}").expect("file");
        std::fs::create_dir_all(root.join("indexes")).expect("dirs");
        std::os::unix::fs::symlink(&outside, root.join("_gc")).expect("link");
        let listed =
            |prefix: &str| list(root.clone(), prefix.to_owned()).try_collect::<Vec<ListItem>>();
        let ranged = |prefix: &str| {
            list_range(root.clone(), super::super::ListRange::whole(prefix), None)
                .try_collect::<Vec<super::super::Positioned>>()
        };
        for prefix in ["_gc", "_gc/lease"] {
            let err = listed(prefix).await.expect_err("the link at `_gc`");
            assert_eq!(err.kind(), ErrorKind::StoreRefused, "{err}");
            assert!(err.message().contains("bookkeeping"), "{err}");
            ranged(prefix).await.expect_err("the link at `_gc`");
        }
        // Below it: a link to a directory, and a link to a file.
        std::fs::remove_file(root.join("_gc")).expect("unlinked");
        std::fs::create_dir_all(root.join("_catalog/changes")).expect("dirs");
        std::fs::create_dir_all(root.join("_gc")).expect("dirs");
        std::os::unix::fs::symlink(outside.join("lease"), root.join("_gc/lease")).expect("link");
        listed("_gc").await.expect_err("a linked directory");
        ranged("_gc").await.expect_err("a linked directory");
        std::os::unix::fs::symlink(
            outside.join("lease/00000000000000000001.json"),
            root.join("_catalog/changes/1.json"),
        )
        .expect("link");
        listed("_catalog").await.expect_err("a linked file");
        // Elsewhere a link is skipped, as ever.
        std::os::unix::fs::symlink(&outside, root.join("indexes/link")).expect("link");
        let (objects, skipped) = names(&root, "indexes").await;
        assert!(objects.is_empty());
        assert_eq!(skipped, vec!["indexes/link"]);
    }

    #[tokio::test]
    async fn links_are_never_followed_nor_deletable() {
        let dir = tempfile::tempdir().expect("dir");
        let root = dir.path().join("wh");
        let outside = dir.path().join("outside");
        std::fs::create_dir_all(root.join("indexes/a")).expect("dirs");
        std::fs::create_dir_all(&outside).expect("outside");
        std::fs::write(root.join("indexes/a/part-0"), b"x").expect("file");
        std::fs::write(root.join("indexes/ü b~"), b"x").expect("file");
        std::fs::write(root.join("indexes/a/part-1#3"), b"x").expect("staging file");
        std::fs::write(root.join("indexes/a/part-2#x"), b"x").expect("plain file");
        std::fs::write(outside.join("precious"), b"x").expect("outside file");
        std::os::unix::fs::symlink(&outside, root.join("indexes/link")).expect("dir link");
        std::os::unix::fs::symlink(outside.join("precious"), root.join("indexes/a/file-link"))
            .expect("file link");
        let (objects, skipped) = names(&root, "indexes").await;
        assert_eq!(
            objects,
            vec!["indexes/a/part-0", "indexes/a/part-2#x", "indexes/ü b~"]
        );
        assert_eq!(
            skipped,
            vec!["indexes/a/file-link", "indexes/a/part-1#3", "indexes/link"]
        );
        assert_eq!(linked(&root, "indexes/a/part-0"), None);
        assert!(linked(&root, "indexes/link/precious").is_some());
        assert!(linked(&root, "indexes/a/file-link").is_some());
        // A managed prefix that is itself a link is not listed at all.
        std::fs::create_dir_all(root.join("x")).expect("x");
        std::os::unix::fs::symlink(&outside, root.join("x/metadata")).expect("link");
        let (objects, skipped) = names(&root, "x/metadata").await;
        assert!(objects.is_empty());
        assert_eq!(skipped, vec!["x/metadata"]);
    }
}
