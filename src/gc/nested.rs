//! Nested roots: subtrees of the managed prefixes that belong to someone else.
//!
//! A warehouse placed inside another warehouse's `metadata/` or `indexes/`, or a pointer
//! store placed there, would look like garbage to the outer collector. Opening, `init`
//! and the first write refuse such layouts where they can see them; the scan is the last
//! line: a listed object that shows a catalog structure marks the subtree it roots as
//! **nested**, and nothing in a nested subtree is ever deleted.
//!
//! | listed object                                   | nested subtree               |
//! |-------------------------------------------------|------------------------------|
//! | `…/X/_catalog-owner.json` (an ownership marker) | `…/X` (a warehouse root)     |
//! | `…/X/_catalog/…`, `…/X/_gc/…`                   | `…/X` (a warehouse's own dirs) |
//! | `…/X/_meta/=catalog-id` (a catalog id record)   | `…/X` (a pointer store root) |
//! | `…/X/i/…/=name`, `…/X/n/…/=name` (pointer records) | `…/X` (a pointer store root) |
//!
//! The rules are deliberately broad: an index table that happens to hold such a name is
//! kept (and reported) rather than risk deleting a catalog.

use crate::warehouse::{GC_DIR, OWNER_MARKER};

/// The directory the catalog keeps its embedded pointer store in.
const CATALOG_DIR: &str = "_catalog";

/// The root of the nested catalog structure `name` belongs to, if it shows one.
pub(crate) fn nested_root(name: &str) -> Option<String> {
    let segments: Vec<&str> = name.split('/').collect();
    let root_before = |at: usize| -> Option<String> { (at > 0).then(|| segments[..at].join("/")) };
    let last = segments.len().checked_sub(1)?;
    if segments[last] == OWNER_MARKER {
        return root_before(last);
    }
    if let Some(at) = segments[..last]
        .iter()
        .position(|s| *s == CATALOG_DIR || *s == GC_DIR)
    {
        return root_before(at);
    }
    if last >= 1 && segments[last - 1] == "_meta" && segments[last].starts_with('=') {
        return root_before(last - 1);
    }
    if segments[last].starts_with('=')
        && let Some(at) = segments[..last].iter().position(|s| *s == "i" || *s == "n")
    {
        return root_before(at);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::nested_root;

    #[test]
    fn catalog_structures_mark_their_root() {
        let cases = [
            ("indexes/x/wh2/_catalog-owner.json", Some("indexes/x/wh2")),
            ("indexes/x/wh2/_catalog/i/ns/=a", Some("indexes/x/wh2")),
            (
                "indexes/x/wh2/_gc/ledger/indexes/a/u-1-2-3.json",
                Some("indexes/x/wh2"),
            ),
            ("metadata/cat/_meta/=catalog-id", Some("metadata/cat")),
            ("metadata/cat/i/ns/=name", Some("metadata/cat")),
            ("metadata/cat/n/=ns", Some("metadata/cat")),
            ("indexes/_gc/lease/1.json", Some("indexes")),
            ("indexes/a/1/ivf_postings/part-0.parquet", None),
            ("indexes/a/1/ivf_postings/bucket=3/part-0", None),
            ("metadata/a/00001-x.metadata.json", None),
        ];
        for (name, root) in cases {
            assert_eq!(nested_root(name).as_deref(), root, "{name}");
        }
    }
}
