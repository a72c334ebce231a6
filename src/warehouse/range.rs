//! Ranged, resumable listings: one part of a directory's listing, from a position on.
//!
//! The garbage collector splits a managed prefix into partitions at its subdirectories
//! and lists each partition page by page, checkpointing the position of the last entry
//! of every page, so a run stopped anywhere resumes after that entry and lists nothing
//! more than once more.
//!
//! (`tests::a_range_resumes_after_a_position` shows one range listed and resumed.)
//!
//! # Order and positions
//! Each store lists in its own order, and a position means something only to the
//! warehouse that produced it:
//!
//! * object stores (S3, memory) list keys in byte order; a position is the store key
//!   of the entry, and a listing resumes with the store's own start-after offset. A
//!   subdirectory `d` of the prefix holds exactly the keys that start with `<prefix>/d/`,
//!   which are contiguous in that order, so a range `[from, to)` of subdirectories is the
//!   key range `[<prefix>/from/, <prefix>/to/)`; a file directly in the prefix falls into
//!   whichever range its key sorts in;
//! * local directories are walked depth first with each directory's entries in file-name
//!   order (links never followed); a position is the entry's path below the root, its
//!   bytes percent-encoded, and a listing resumes by skipping every subtree that sorts
//!   entirely before it. A range holds the entries whose first component below the prefix
//!   sorts in `[from, to)`.
//!
//! Either way every entry of a range is listed exactly once by the pages that cover it,
//! and the ranges of consecutive boundaries partition the prefix: no entry is in two of
//! them, none in none.

use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use object_store::path::Path;
use serde::{Deserialize, Serialize};

use super::{ListItem, Warehouse, local, unavailable};
use crate::error::Result;

/// A part of the listing of `prefix`: the entries below it whose first segment under it
/// sorts at or after `from` and before `to` (each unbounded when `None`). The segments are
/// as `Warehouse::segments` returns them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct ListRange {
    /// The directory (a name, e.g. `indexes`).
    pub prefix: String,
    /// The first subdirectory of the range.
    pub from: Option<String>,
    /// The first subdirectory after the range.
    pub to: Option<String>,
}

impl ListRange {
    /// The range `[from, to)` of `prefix`.
    pub fn new(prefix: &str, from: Option<String>, to: Option<String>) -> ListRange {
        ListRange {
            prefix: prefix.to_owned(),
            from,
            to,
        }
    }

    /// All of `prefix`.
    pub fn whole(prefix: &str) -> ListRange {
        ListRange::new(prefix, None, None)
    }

    /// The same bounds below another prefix (the ledger's mirror of a partition).
    pub fn under(&self, prefix: &str) -> ListRange {
        ListRange::new(prefix, self.from.clone(), self.to.clone())
    }

    /// The ranges between consecutive `boundaries` (in listing order): `count` parts of
    /// `prefix` that cover it exactly. Boundaries are taken evenly from `segments`.
    pub fn split(prefix: &str, segments: &[String], count: usize) -> Vec<ListRange> {
        let count = count.clamp(1, segments.len().max(1));
        let mut bounds: Vec<Option<String>> = vec![None];
        for part in 1..count {
            bounds.push(Some(segments[part * segments.len() / count].clone()));
        }
        bounds.dedup();
        bounds.push(None);
        bounds
            .windows(2)
            .map(|pair| ListRange::new(prefix, pair[0].clone(), pair[1].clone()))
            .collect()
    }
}

/// One entry of a ranged listing and its position (where a listing resumes after it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Positioned {
    /// Where this entry stands in the listing.
    pub position: String,
    /// The entry.
    pub item: ListItem,
}

impl ListItem {
    /// The name of a listed object (`None` for a skipped entry).
    pub fn name(&self) -> Option<&str> {
        match self {
            ListItem::Object(listed) => Some(&listed.name),
            ListItem::Skipped { .. } => None,
        }
    }
}

impl Warehouse {
    /// How this warehouse's listings order two names: object stores by their bytes, local
    /// directories component by component (the order of a depth-first walk with each
    /// directory's entries by file name).
    pub(crate) fn name_order(&self, a: &str, b: &str) -> std::cmp::Ordering {
        match self.local {
            Some(_) => a.split('/').cmp(b.split('/')),
            None => a.cmp(b),
        }
    }

    /// Whether listings order names by their bytes (object stores), not component by
    /// component (local directories).
    pub(crate) fn orders_bytewise(&self) -> bool {
        self.local.is_none()
    }

    /// The listing position of the entry named `name` (whether or not it exists): a
    /// listing resumed after it lists what sorts after `name` in [`Warehouse::name_order`].
    pub(crate) fn position_of_name(&self, name: &str) -> String {
        match self.local {
            Some(_) => local::position_of_name(name),
            // The store key as it is, never through a `Path` (whose fallback for a name it
            // cannot parse drops empty segments and escapes control characters): a skipped
            // key's position moved below the ledger is the mirror of that very key (GC
            // round 97, F1).
            None => match self.prefix.as_ref() {
                "" => name.to_owned(),
                prefix => format!("{prefix}/{name}"),
            },
        }
    }

    /// The position of the entry at `position` moved below the directory `dir` (the
    /// ledger's mirror of a listed object), or `None` if `position` is not this
    /// warehouse's.
    pub(crate) fn position_under(&self, dir: &str, position: &str) -> Option<String> {
        match self.local {
            Some(_) => Some(format!("{}/{position}", local::position_of_name(dir))),
            None => self
                .name_at(position)
                .map(|name| self.position_of_name(&format!("{dir}/{name}"))),
        }
    }

    /// The name of the entry at a listing position this warehouse produced (`None` for a
    /// position it did not).
    pub(crate) fn name_at(&self, position: &str) -> Option<String> {
        match self.local {
            Some(_) => local::name_at(position),
            None => {
                let prefix = self.prefix.as_ref();
                if prefix.is_empty() {
                    Some(position.to_owned())
                } else {
                    position
                        .strip_prefix(prefix)
                        .and_then(|rest| rest.strip_prefix('/'))
                        .map(str::to_owned)
                }
            }
        }
    }

    /// Whether the object `name` lies in `range` (as the range's listing would list it).
    pub(crate) fn range_holds(&self, range: &ListRange, name: &str) -> bool {
        let Some(rest) = name
            .strip_prefix(range.prefix.as_str())
            .and_then(|rest| rest.strip_prefix('/'))
        else {
            return false;
        };
        match self.local {
            Some(_) => {
                let first = rest.split('/').next().unwrap_or(rest);
                range.from.as_deref().is_none_or(|from| first >= from)
                    && range.to.as_deref().is_none_or(|to| first < to)
            }
            None => {
                range
                    .from
                    .as_deref()
                    .is_none_or(|from| rest >= &format!("{from}/")[..])
                    && range
                        .to
                        .as_deref()
                        .is_none_or(|to| rest < &format!("{to}/")[..])
            }
        }
    }

    /// A name past every entry of `range` below `mirror` (the same range under another
    /// directory) in [`Warehouse::name_order`]; `None` if the range is open-ended.
    pub(crate) fn range_end_under(&self, range: &ListRange, mirror: &str) -> Option<String> {
        let to = range.to.as_deref()?;
        Some(match self.local {
            Some(_) => format!("{mirror}/{to}"),
            None => format!("{mirror}/{to}/"),
        })
    }

    /// The subdirectories directly in `prefix`, by their segment, in listing order.
    pub(crate) async fn segments(&self, prefix: &str) -> Result<Vec<String>> {
        if let Some(root) = &self.local {
            let (root, prefix) = (root.as_ref().clone(), prefix.to_owned());
            return tokio::task::spawn_blocking(move || local::segments(&root, &prefix))
                .await
                .map_err(|err| {
                    crate::error::Error::with_source(
                        crate::error::ErrorKind::StoreUnavailable,
                        "listing the warehouse failed",
                        err,
                    )
                })?;
        }
        if let Some(lister) = self.key_lister() {
            return Box::pin(self.key_segments(lister.as_ref(), prefix)).await;
        }
        let base = self.key(prefix);
        let listed = self
            .store
            .list_with_delimiter(Some(&base))
            .await
            .map_err(|err| unavailable(prefix, err))?;
        let mut segments: Vec<String> = listed
            .common_prefixes
            .iter()
            .filter_map(|path| {
                path.parts()
                    .next_back()
                    .map(|part| part.as_ref().to_owned())
            })
            .collect();
        // `<prefix>/d/` is where `d`'s keys begin: order by that.
        segments.sort_by(|a, b| format!("{a}/").cmp(&format!("{b}/")));
        segments.dedup();
        Ok(segments)
    }

    /// Every entry of `range` after the position `after` (from the start of the range
    /// when `None`), in listing order; see the module docs.
    #[doc(hidden)] // For tests/it/gc/hostile_layouts.rs.
    pub fn list_range(
        &self,
        range: &ListRange,
        after: Option<&str>,
    ) -> BoxStream<'static, Result<Positioned>> {
        if let Some(root) = &self.local {
            return local::list_range(
                root.as_ref().clone(),
                range.clone(),
                after.map(str::to_owned),
            );
        }
        let base = self.key(&range.prefix);
        let bound = |segment: &Option<String>| {
            segment
                .as_ref()
                .map(|segment| format!("{}/{segment}/", base.as_ref()))
        };
        let (lower, upper) = (bound(&range.from), bound(&range.to));
        // The store lists the keys after an offset: after the position, or after the
        // lower bound's directory key (`<prefix>/from`, which sorts before its keys).
        let mut offset = lower
            .as_ref()
            .map(|lower| lower.trim_end_matches('/').to_owned());
        if let Some(after) = after
            && offset.as_deref().is_none_or(|offset| after > offset)
        {
            offset = Some(after.to_owned());
        }
        if let Some(lister) = self.key_lister() {
            // The store's own listing: every key in byte order (folder markers and keys
            // object_store cannot parse included, as skipped entries), positioned at the
            // key itself.
            let this = self.clone();
            let after = after.map(str::to_owned);
            return lister
                .keys(format!("{}/", base.as_ref()), offset)
                .try_filter(move |entry| {
                    let key = entry.key.as_str();
                    let keep = lower.as_deref().is_none_or(|lower| key >= lower)
                        && after.as_deref().is_none_or(|after| key > after);
                    futures::future::ready(keep)
                })
                .try_take_while(move |entry| {
                    let inside = upper
                        .as_deref()
                        .is_none_or(|upper| entry.key.as_str() < upper);
                    futures::future::ready(Ok(inside))
                })
                .map_ok(move |entry| Positioned {
                    item: this.item_of_key(&entry),
                    position: entry.key,
                })
                .boxed();
        }
        let listing = match offset.as_deref().map(Path::parse) {
            Some(Ok(offset)) => self.store.list_with_offset(Some(&base), &offset),
            _ => self.store.list(Some(&base)),
        };
        let this = self.clone();
        let what = range.prefix.clone();
        let after = after.map(str::to_owned);
        let mut previous = after.clone();
        listing
            .map_err(move |err| unavailable(&what, err))
            .try_filter(move |meta| {
                let key = meta.location.as_ref();
                let keep = lower.as_deref().is_none_or(|lower| key >= lower)
                    && offset.as_deref().is_none_or(|offset| key > offset)
                    && after.as_deref().is_none_or(|after| key > after);
                futures::future::ready(keep)
            })
            .try_take_while(move |meta| {
                let inside = upper
                    .as_deref()
                    .is_none_or(|upper| meta.location.as_ref() < upper);
                futures::future::ready(Ok(inside))
            })
            .map_ok(move |meta| {
                let key = meta.location.as_ref().to_owned();
                // Keys come in byte order: one at or before the previous key is a folder
                // marker `k/`, whose trailing `/` object_store drops (it lists as `k`,
                // after the keys `k-…` and `k.…`). It is no object: deleting "it" would
                // delete the key `k`. Its position is its real key, past those keys.
                if previous
                    .as_deref()
                    .is_some_and(|previous| key.as_str() <= previous)
                {
                    let position = format!("{key}/");
                    let name = this.name_at(&key).unwrap_or_else(|| key.clone());
                    previous = Some(position.clone());
                    return Positioned {
                        position,
                        item: ListItem::Skipped {
                            name: format!("{name}/"),
                            reason: "a folder marker (a key ending in `/`), not an object"
                                .to_owned(),
                        },
                    };
                }
                previous = Some(key.clone());
                Positioned {
                    position: key,
                    item: this.item_of(&meta),
                }
            })
            .boxed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    const NAMES: [&str; 10] = [
        "indexes/a",
        "indexes/a-b/1",
        "indexes/a/1",
        "indexes/a/2/x",
        "indexes/a.c/1",
        "indexes/b/1",
        "indexes/b/2",
        "indexes/ü b/1",
        "indexes/z/1",
        "indexes/zz",
    ];

    async fn names(
        warehouse: &Warehouse,
        range: &ListRange,
        after: Option<&str>,
    ) -> Vec<Positioned> {
        warehouse
            .list_range(range, after)
            .try_collect()
            .await
            .expect("listed")
    }

    async fn check_partitions(warehouse: &Warehouse) {
        let segments = warehouse.segments("indexes").await.expect("segments");
        assert_eq!(segments.len(), 6, "{segments:?}");
        for parts in 1..=7 {
            let ranges = ListRange::split("indexes", &segments, parts);
            let mut seen = Vec::new();
            for range in &ranges {
                // Page by page, one entry at a time: every entry once, in order.
                let mut after: Option<String> = None;
                loop {
                    let page = names(warehouse, range, after.as_deref()).await;
                    let Some(first) = page.into_iter().next() else {
                        break;
                    };
                    seen.push(first.item.name().expect("object").to_owned());
                    after = Some(first.position);
                }
            }
            seen.sort();
            let mut expected: Vec<String> = NAMES.iter().map(|n| (*n).to_owned()).collect();
            expected.sort();
            assert_eq!(seen, expected, "{parts} partitions: {ranges:?}");
        }
    }

    /// A position is the store key as it is, also for a name object_store cannot parse (a
    /// skipped key), and so is its mirror below the ledger (round 97, F1).
    #[test]
    fn an_object_store_position_is_the_key_as_it_is() {
        let warehouse = Warehouse::in_memory("memory://range/wh").expect("warehouse");
        for name in [
            "indexes/zz//k",
            "indexes/d\u{1}/k",
            "indexes/a/./b",
            "indexes/a b+c",
        ] {
            assert_eq!(warehouse.position_of_name(name), format!("wh/{name}"));
            assert_eq!(
                warehouse.position_under("_gc/ledger", &format!("wh/{name}")),
                Some(format!("wh/_gc/ledger/{name}"))
            );
        }
    }

    #[tokio::test]
    async fn a_range_resumes_after_a_position() -> crate::Result<()> {
        let warehouse = Warehouse::in_memory("memory://range/wh")?;
        for name in ["indexes/a/1", "indexes/a/2", "indexes/b/1", "indexes/c/1"] {
            warehouse
                .put_if_absent(name, Bytes::from_static(b"x"))
                .await?;
        }
        // The subdirectories, in listing order: the possible partition boundaries.
        assert_eq!(warehouse.segments("indexes").await?, ["a", "b", "c"]);
        // `a` and `b`, resumed after the first entry.
        let range = ListRange::new("indexes", None, Some("c".into()));
        let first: Vec<_> = warehouse.list_range(&range, None).try_collect().await?;
        let rest: Vec<_> = warehouse
            .list_range(&range, Some(&first[0].position))
            .try_collect()
            .await?;
        let names: Vec<String> = rest
            .into_iter()
            .filter_map(|entry| entry.item.name().map(str::to_owned))
            .collect();
        assert_eq!(names, ["indexes/a/2", "indexes/b/1"]);
        Ok(())
    }

    #[tokio::test]
    async fn partitions_of_an_object_store_cover_every_key_once() {
        let warehouse = Warehouse::in_memory("memory://range/wh").expect("warehouse");
        for name in NAMES {
            warehouse
                .put_if_absent(name, Bytes::from_static(b"x"))
                .await
                .expect("put");
        }
        warehouse
            .put_if_absent("indexesX/1", Bytes::from_static(b"x"))
            .await
            .expect("put");
        check_partitions(&warehouse).await;
    }

    #[tokio::test]
    async fn partitions_of_a_local_directory_cover_every_file_once() {
        let dir = tempfile::tempdir().expect("dir");
        let warehouse = Warehouse::local(dir.path()).expect("warehouse");
        for name in NAMES {
            // A file and a directory cannot share a name on a file system.
            let name = if name == "indexes/a" {
                "indexes/a~"
            } else {
                name
            };
            warehouse
                .put_if_absent(name, Bytes::from_static(b"x"))
                .await
                .expect("put");
        }
        let segments = warehouse.segments("indexes").await.expect("segments");
        assert_eq!(segments, ["a", "a-b", "a.c", "b", "z", "ü b"]);
        let range = ListRange::whole("indexes");
        let all = names(&warehouse, &range, None).await;
        assert_eq!(all.len(), NAMES.len());
        for (at, entry) in all.iter().enumerate() {
            let rest = names(&warehouse, &range, Some(&entry.position)).await;
            assert_eq!(rest, all[at + 1..].to_vec(), "after {}", entry.position);
        }
    }
}
