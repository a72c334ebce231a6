//! Warehouse-relative object names and reference sets.
//!
//! Every name the collector compares is in one canonical form: the object_store path of
//! the object (or directory prefix) with the warehouse prefix removed, parts joined by
//! `/`, no leading or trailing `/` and no empty segment. A metadata reference such as
//! `indexes/a/1/ivf_postings/` and the listed object `indexes/a/1/ivf_postings/part-0`
//! both go through object_store's own path encoding, so they compare byte for byte.
//!
//! A reference covers itself and everything below it on a segment boundary:
//! `indexes/a/1/ivf_postings` covers `indexes/a/1/ivf_postings/part-0` but never
//! `indexes/a/1/ivf_postings_old/part-0` (Iceberg #17448).

use std::collections::HashMap;

use object_store::path::Path;

use crate::warehouse::Warehouse;

/// The canonical relative name of `path` under `prefix`, or `None` if it is not strictly
/// below the prefix.
pub(crate) fn relative_of(path: &Path, prefix: &Path) -> Option<String> {
    let parts = path.prefix_match(prefix)?;
    let joined = parts
        .map(|part| part.as_ref().to_owned())
        .collect::<Vec<_>>()
        .join("/");
    (!joined.is_empty()).then_some(joined)
}

/// The canonical relative name of a warehouse-relative location (as written in metadata).
pub(crate) fn normalize(warehouse: &Warehouse, location: &str) -> Option<String> {
    relative_of(&warehouse.path(location), warehouse.prefix())
}

/// The object-store path of a canonical relative name (already encoded: parsed, not
/// re-encoded).
pub(crate) fn path_of(warehouse: &Warehouse, relative: &str) -> Path {
    let prefix = warehouse.prefix().as_ref();
    let joined = if prefix.is_empty() {
        relative.to_owned()
    } else {
        format!("{prefix}/{relative}")
    };
    Path::parse(&joined).unwrap_or_else(|_| warehouse.path(relative))
}

/// Names and every ancestor directory of a relative name, longest last.
fn self_and_ancestors(relative: &str) -> impl Iterator<Item = &str> {
    relative
        .match_indices('/')
        .map(move |(at, _)| &relative[..at])
        .chain(std::iter::once(relative))
}

/// A set of references, each covering itself and its subtree, with a timestamp per
/// reference (the largest one recorded); plain sets use `0`.
#[derive(Debug, Default, Clone)]
pub(crate) struct RefMap {
    refs: HashMap<String, i64>,
}

impl RefMap {
    /// Add a canonical reference with timestamp `ms` (keeping the larger one).
    pub(crate) fn insert(&mut self, reference: String, ms: i64) {
        self.refs
            .entry(reference)
            .and_modify(|existing| *existing = (*existing).max(ms))
            .or_insert(ms);
    }

    /// Whether some reference covers `relative`.
    pub(crate) fn covers(&self, relative: &str) -> bool {
        self_and_ancestors(relative).any(|name| self.refs.contains_key(name))
    }

    /// The largest timestamp among the references covering `relative`.
    pub(crate) fn max_covering(&self, relative: &str) -> Option<i64> {
        self_and_ancestors(relative)
            .filter_map(|name| self.refs.get(name).copied())
            .max()
    }

    /// How many references.
    pub(crate) fn len(&self) -> usize {
        self.refs.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_cover_their_subtree_on_segment_boundaries() {
        let mut refs = RefMap::default();
        refs.insert("indexes/a/1/ivf_postings".into(), 5);
        refs.insert("metadata/a/v1.metadata.json".into(), 7);
        assert!(refs.covers("indexes/a/1/ivf_postings"));
        assert!(refs.covers("indexes/a/1/ivf_postings/part-0.parquet"));
        assert!(!refs.covers("indexes/a/1/ivf_postings_old/part-0.parquet"));
        assert!(!refs.covers("indexes/a/1"));
        assert!(refs.covers("metadata/a/v1.metadata.json"));
        assert!(!refs.covers("metadata/a/v1.metadata.json.bak"));
        assert_eq!(refs.max_covering("indexes/a/1/ivf_postings/x"), Some(5));
        assert_eq!(refs.max_covering("indexes/b"), None);
    }

    #[test]
    fn names_are_normalised_through_the_warehouse() {
        let warehouse = Warehouse::in_memory("memory://n/wh").expect("warehouse");
        assert_eq!(
            normalize(&warehouse, "indexes/a/1/ivf_postings/").as_deref(),
            Some("indexes/a/1/ivf_postings")
        );
        assert_eq!(
            normalize(&warehouse, "indexes/a b/x").as_deref(),
            normalize(&warehouse, "indexes/a b/x/").as_deref()
        );
        let name = normalize(&warehouse, "indexes/a b/%x").expect("name");
        assert_eq!(
            relative_of(&path_of(&warehouse, &name), warehouse.prefix()).as_deref(),
            Some(name.as_str())
        );
        assert_eq!(path_of(&warehouse, &name), warehouse.path("indexes/a b/%x"));
    }
}
