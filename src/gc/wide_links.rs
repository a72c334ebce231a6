//! Links to a whole managed prefix (or the root) that a reader of a kept table reaches.
//!
//! Such a link names nothing: one in garbage must not stop collection. But a reader of a
//! table that holds one (in the table, or through links from it, wherever it lies) reads
//! everything there, so all of it is kept while the link is there (round 45's K10,
//! rounds 73 to 76). Which readers count:
//!
//! - a reader of what the walk reached, or what was published or replaced since: the
//!   link keeps everything it leads to;
//! - a reader of a table only existing unreachable metadata names (rule P): the link
//!   keeps all of `indexes/` it leads to, but nothing of `metadata/`, as a file that may
//!   name anything does (so old metadata files never keep one another, nor themselves,
//!   through their tables' links: metadata goes before what it names).
//!
//! A reader reaches everything below a whole prefix a link leads to, or a kept name that
//! is one (a table at `indexes/`, a source table's link to it, a file that may name
//! anything): the search goes on from there, so links there count too (round 76).
//!
//! ```text
//! indexes/live/1/postings/all -> ../../..     a reader of `live` reads all of indexes/
//! ```

use std::collections::BTreeSet;

use crate::error::Result;
use crate::warehouse::{METADATA_DIR, Warehouse, WideLink};

/// Who reads through a link to a whole prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reader {
    /// A reader of a table the walk reached, or published since.
    Live,
    /// A reader of a table only existing (unreachable) metadata names.
    OfExistingMetadata,
}

/// A link to a whole prefix a reader reaches, and what it keeps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct WideKept {
    /// The link, as shown.
    pub link: String,
    /// The managed prefixes kept as a whole for it.
    pub prefixes: Vec<String>,
    /// Who reaches it.
    pub reader: Reader,
}

impl WideKept {
    /// The warning that names it and says what it keeps.
    pub(crate) fn warning(&self) -> String {
        let reader = match self.reader {
            Reader::Live => "a reader of a table the collector keeps",
            Reader::OfExistingMetadata => "a reader of a table existing metadata names",
        };
        format!(
            "the symbolic link or bind mount `{}`, which {reader} reaches, leads to the whole of `{}`: that reader reads everything there, so nothing there is deleted while it is there. Link to the tables themselves instead",
            self.link,
            self.prefixes.join("` and `")
        )
    }
}

/// The links to a whole prefix readers of the tables `live` and `existing` (rule P) name
/// reach, and what each keeps (a link both reach is the live reader's).
pub(crate) async fn reached<'a>(
    warehouse: &Warehouse,
    live: impl IntoIterator<Item = &'a String>,
    existing: impl IntoIterator<Item = &'a String>,
) -> Result<Vec<WideKept>> {
    let mut kept: Vec<WideKept> = reach(warehouse, tables(live))
        .await?
        .into_iter()
        .map(|wide| WideKept {
            link: wide.link,
            prefixes: wide.prefixes,
            reader: Reader::Live,
        })
        .collect();
    let existing = tables(existing);
    if existing.is_empty() {
        return Ok(kept);
    }
    for wide in reach(warehouse, existing).await? {
        let prefixes: Vec<String> = wide
            .prefixes
            .into_iter()
            .filter(|prefix| prefix != METADATA_DIR)
            .collect();
        if prefixes.is_empty() || kept.iter().any(|seen| seen.link == wide.link) {
            continue;
        }
        kept.push(WideKept {
            link: wide.link,
            prefixes,
            reader: Reader::OfExistingMetadata,
        });
    }
    Ok(kept)
}

/// Every link to a whole prefix a reader of `tables` reaches: below them, through links
/// onward, and below every prefix such a link leads to (the reader reads all of it, so
/// the links there too: round 76, F2), until no new prefix is reached.
pub(crate) async fn reach(warehouse: &Warehouse, tables: Vec<String>) -> Result<Vec<WideLink>> {
    let mut searched: BTreeSet<String> = tables.iter().cloned().collect();
    let mut found: Vec<WideLink> = Vec::new();
    let mut next = tables;
    while !next.is_empty() {
        let below = warehouse.links_below(next).await?;
        next = Vec::new();
        for wide in below.wide {
            if found.iter().any(|seen| seen.link == wide.link) {
                continue;
            }
            next.extend(
                wide.prefixes
                    .iter()
                    .filter(|prefix| searched.insert((*prefix).clone()))
                    .cloned(),
            );
            found.push(wide);
        }
    }
    Ok(found)
}

/// The names a reader may read as tables: all but the root (a table at a whole prefix
/// is read whole: round 76, F1).
fn tables<'a>(names: impl IntoIterator<Item = &'a String>) -> Vec<String> {
    names
        .into_iter()
        .filter(|name| !name.is_empty())
        .cloned()
        .collect()
}
