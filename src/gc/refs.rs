//! Reference sets over object names.
//!
//! Every name the collector compares is a warehouse object name (see
//! [`crate::warehouse::object_name`]): the raw key below the root, as listings return it
//! and as any engine writes it, never percent-encoded or decoded. A metadata reference
//! such as `indexes/ü/1/ivf_postings/` and the object another engine wrote at
//! `indexes/ü/1/ivf_postings/part-0` therefore compare byte for byte.
//!
//! A reference covers itself and everything below it on a segment boundary:
//! `indexes/a/1/ivf_postings` covers `indexes/a/1/ivf_postings/part-0` but never
//! `indexes/a/1/ivf_postings_old/part-0` (Iceberg #17448).

use std::collections::{BTreeSet, HashMap};

use serde::{Deserialize, Serialize};

use crate::warehouse::{Warehouse, aliases};

/// Names and every ancestor directory of a relative name, longest last.
fn self_and_ancestors(relative: &str) -> impl Iterator<Item = &str> {
    relative
        .match_indices('/')
        .map(move |(at, _)| &relative[..at])
        .chain(std::iter::once(relative))
}

/// A set of references, each covering itself and its subtree, with a timestamp per
/// reference (the largest one recorded); plain sets use `0`. Stored (in a run's state) as
/// a list of `[name, ms]` pairs sorted by name.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct RefMap {
    refs: HashMap<String, i64>,
}

impl Serialize for RefMap {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut sorted: Vec<(&String, &i64)> = self.refs.iter().collect();
        sorted.sort_unstable();
        serializer.collect_seq(sorted)
    }
}

impl<'de> Deserialize<'de> for RefMap {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let pairs: Vec<(String, i64)> = Vec::deserialize(deserializer)?;
        let mut map = RefMap::default();
        for (name, ms) in pairs {
            map.insert(name, ms);
        }
        Ok(map)
    }
}

impl RefMap {
    /// Add a canonical reference with timestamp `ms` (keeping the larger one).
    pub(crate) fn insert(&mut self, reference: String, ms: i64) {
        self.refs
            .entry(reference)
            .and_modify(|existing| *existing = (*existing).max(ms))
            .or_insert(ms);
    }

    /// Add every reference of `other` (keeping the larger timestamp).
    pub(crate) fn merge(&mut self, other: RefMap) {
        for (reference, ms) in other.refs {
            self.insert(reference, ms);
        }
    }

    /// Whether some reference covers `relative`.
    pub(crate) fn covers(&self, relative: &str) -> bool {
        self_and_ancestors(relative).any(|name| self.refs.contains_key(name))
    }

    /// Whether some reference covers `name` or another spelling of it (an earlier
    /// writer's percent-encoding): when unsure whether two names denote one object, the
    /// collector keeps it.
    pub(crate) fn covers_any_spelling(&self, name: &str) -> bool {
        self.covers(name) || aliases(name).iter().any(|alias| self.covers(alias))
    }

    /// The largest timestamp among the references covering `relative`.
    pub(crate) fn max_covering(&self, relative: &str) -> Option<i64> {
        self_and_ancestors(relative)
            .filter_map(|name| self.refs.get(name).copied())
            .max()
    }

    /// The largest timestamp among the references covering `name` or another spelling of
    /// it (see [`RefMap::covers_any_spelling`]).
    pub(crate) fn max_covering_any_spelling(&self, name: &str) -> Option<i64> {
        std::iter::once(name.to_owned())
            .chain(aliases(name))
            .filter_map(|spelling| self.max_covering(&spelling))
            .max()
    }

    /// The references.
    pub(crate) fn names(&self) -> impl Iterator<Item = &String> {
        self.refs.keys()
    }

    /// How many references.
    pub(crate) fn len(&self) -> usize {
        self.refs.len()
    }

    /// Add what the references reach through symbolic links of `warehouse` (see
    /// [`Warehouse::link_targets`]), each with its reference's timestamp.
    pub(crate) async fn add_link_targets(
        &mut self,
        warehouse: &Warehouse,
    ) -> crate::error::Result<()> {
        let names: Vec<String> = self.refs.keys().cloned().collect();
        for (name, target) in warehouse.link_targets(names).await? {
            let ms = self.refs.get(&name).copied().unwrap_or(0);
            self.insert(target, ms);
        }
        Ok(())
    }
}

/// A reference that covers the very file naming it (index tables under a metadata file's
/// own directory, a directory-valued family parameter, a stray JSON file naming its own
/// directory).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub(crate) struct SelfCovering {
    /// The reference.
    pub reference: String,
    /// The file that names it.
    pub file: String,
    /// Whether that file goes before what the reference covers: index metadata (never
    /// one of the reference's tables), or an unreachable file that may name anything
    /// (such files do not keep one another).
    #[serde(default)]
    pub metadata: bool,
}

/// Who names one self-covering reference.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
struct Naming {
    metadata: BTreeSet<String>,
    other: BTreeSet<String>,
}

impl Naming {
    /// Whether the reference keeps `name`: every name below it but the metadata files
    /// naming it, and but a file of another kind when it alone names it. So metadata files
    /// in one directory they each name do not keep one another (they can go, and what
    /// they name after them), while a file that merely names its own directory stays
    /// while a metadata file names that directory too (it may be one of its tables).
    fn keeps(&self, name: &str) -> bool {
        let alone = self.metadata.is_empty() && self.other.len() == 1;
        !(self.metadata.contains(name) || (alone && self.other.contains(name)))
    }
}

/// What rule (P) keeps: everything existing metadata files name. A reference covers its
/// subtree like a [`RefMap`]'s; one that covers a file naming it covers its subtree but
/// some of the files naming it ([`SelfCovering`]).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Protected {
    refs: RefMap,
    /// Self-covering references, with the files naming them.
    beside: HashMap<String, Naming>,
}

impl Protected {
    /// Keep `reference` and its subtree.
    pub(crate) fn insert(&mut self, reference: String) {
        self.refs.insert(reference, 0);
    }

    /// Keep the subtree of a reference that covers a file naming it (see [`Naming`]).
    pub(crate) fn insert_self_covering(&mut self, named: SelfCovering) {
        let naming = self.beside.entry(named.reference).or_default();
        match named.metadata {
            true => naming.metadata.insert(named.file),
            false => naming.other.insert(named.file),
        };
    }

    /// Every reference, self-covering ones too.
    pub(crate) fn names(&self) -> impl Iterator<Item = &String> {
        self.refs.names().chain(self.beside.keys())
    }

    /// Whether `name`, or another spelling of it, is kept (see
    /// [`RefMap::covers_any_spelling`] and [`Naming`]).
    pub(crate) fn covers_any_spelling(&self, name: &str) -> bool {
        self.refs.covers_any_spelling(name)
            || std::iter::once(name.to_owned())
                .chain(aliases(name))
                .any(|spelling| {
                    self_and_ancestors(&spelling).any(|reference| {
                        self.beside
                            .get(reference)
                            .is_some_and(|naming| naming.keeps(name))
                    })
                })
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
    fn other_spellings_are_covered_with_their_timestamp() {
        let mut refs = RefMap::default();
        refs.insert("indexes/t~1/ivf_postings".into(), 9);
        assert!(!refs.covers("indexes/t%7E1/ivf_postings/part-0"));
        assert!(refs.covers_any_spelling("indexes/t%7E1/ivf_postings/part-0"));
        assert_eq!(
            refs.max_covering_any_spelling("indexes/t%7E1/ivf_postings/part-0"),
            Some(9)
        );
        assert_eq!(refs.max_covering_any_spelling("indexes/other"), None);
    }

    #[test]
    fn a_self_covering_reference_keeps_its_subtree_but_the_metadata_naming_it() {
        let named = |file: &str, metadata: bool| SelfCovering {
            reference: "metadata/i".into(),
            file: file.into(),
            metadata,
        };
        let mut kept = Protected::default();
        kept.insert_self_covering(named("metadata/i/1.metadata.json", true));
        assert!(!kept.covers_any_spelling("metadata/i/1.metadata.json"));
        assert!(kept.covers_any_spelling("metadata/i/part-0.parquet"));
        assert!(kept.covers_any_spelling("metadata/i/2.metadata.json"));
        assert!(!kept.covers_any_spelling("metadata/other/part-0.parquet"));
        // Metadata files naming the same directory do not keep one another.
        kept.insert_self_covering(named("metadata/i/2.metadata.json", true));
        assert!(!kept.covers_any_spelling("metadata/i/1.metadata.json"));
        assert!(!kept.covers_any_spelling("metadata/i/2.metadata.json"));
        assert!(kept.covers_any_spelling("metadata/i/part-0.parquet"));
        // A JSON table naming its own directory stays with the metadata naming it.
        kept.insert_self_covering(named("metadata/i/manifest.json", false));
        assert!(kept.covers_any_spelling("metadata/i/manifest.json"));
        // Alone, a stray naming its own directory keeps all of it but itself.
        let mut stray = Protected::default();
        stray.insert_self_covering(named("metadata/i/notes.json", false));
        assert!(!stray.covers_any_spelling("metadata/i/notes.json"));
        assert!(stray.covers_any_spelling("metadata/i/part-0.parquet"));
        // Plain references keep everything below them, the files naming them included.
        let mut plain = Protected::default();
        plain.insert("metadata/j".into());
        assert!(plain.covers_any_spelling("metadata/j/1.metadata.json"));
    }
}
