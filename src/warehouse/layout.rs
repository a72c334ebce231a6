//! The warehouse's layout: every name and path the catalog and the collector reserve
//! under the root, and what each name means. Nothing else spells these paths.
//!
//! ```text
//! <root>/_catalog-owner.json         OWNER_MARKER: which catalog writes and collects here
//! <root>/_catalog/                   CATALOG_DIR: the embedded object-store catalog's pointers
//! <root>/_gc/                        GC_DIR: the collector's own files:
//! <root>/_gc/ledger/<object>/<fact>  LEDGER_DIR: one entry per tracked object (its facts)
//! <root>/_gc/journal/                JOURNAL_DIR: each run's journal and its finish mark
//! <root>/_gc/runs/                   RUNS_DIR: each run's plan and checkpoints
//! <root>/_gc/deleted/                DELETED_DIR: records of deletions whose ledger entries
//!                                    are not yet released
//! <root>/_gc/lease/                  LEASE_DIR: the lease's generations
//! <root>/_gc/changes/               CHANGES_DIR: the catalog's change log of pointer writes
//! <root>/_gc/links/                 LINKS_DIR: which commit each pointer write replaced
//! <root>/_gc/adoptions/<ms>.json     ADOPTIONS_DIR: the change-log entries each claim or
//!                                    adoption found (logged before its epoch)
//! <root>/_gc/claims/<catalog-id>.json  CLAIMS_DIR: the owning catalog's claim records,
//! <root>/_gc/claims/<catalog-id>.bound  and the mark that it bound its store exactly
//! <root>/metadata/                   METADATA_DIR: immutable metadata files (managed)
//! <root>/indexes/                    INDEXES_DIR: immutable index tables (managed)
//! ```
//!
//! # Ledger facts
//!
//! An object's ledger entry is the files under `_gc/ledger/<object>/`, one per fact,
//! named `o-<clock>-<walk>-<run-ms>-<run>.json` (a walk found the object unreachable),
//! `c-<ms>-<run-ms>-<run>.json` (condemned at `ms`) or `u-<ms>-<run-ms>-<run>.json` (a
//! clock of an earlier version, never trusted) ([`Fact`]). The collector writes them;
//! publication reads one entry's condemnation (`Warehouse::condemnation`), and the
//! condemnations below an index table or family reference
//! (`Warehouse::condemned_within`: `warehouse::condemned` reads them), to refuse
//! publishing an object that is about to be deleted.
//!
//! A directory's entry may also hold **condemnation markers**,
//! `n-<ms>-<run-ms>-<run>-<page>.json` ([`parse_marker`]): page `<page>` of run `<run>`
//! condemned at `<ms>` the objects directly in that directory whose base names the
//! marker's body lists (`{"names": [...]}`). They are how condemnations of
//! `indexes/` are recorded (one file per directory and page instead of one per object:
//! issue 29, step B2, `docs/design-ledger-pages.md`); publication reads them beside the
//! `c-` files (which `metadata/` keeps, and earlier releases wrote for `indexes/` too). A marker is no fact of the directory as
//! an object: the collector's entry readers skip it, and never delete it as a gone
//! object's file.
//!
//! # Nested roots
//!
//! Subtrees of the managed prefixes that belong to someone else ([`nested_root`]).
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

use uuid::Uuid;

/// The ownership marker's name under the warehouse root.
#[doc(hidden)] // For the workspace's tests.
pub const OWNER_MARKER: &str = "_catalog-owner.json";
/// Where metadata files live: register and commit publish only files below it.
pub const METADATA_DIR: &str = "metadata";
/// Where index tables live.
pub const INDEXES_DIR: &str = "indexes";
/// The managed prefixes: the only places the garbage collector lists and deletes data.
pub const MANAGED_PREFIXES: [&str; 2] = [METADATA_DIR, INDEXES_DIR];
/// The garbage collector's own directory (ledger, journals, runs, lease, claims).
pub const GC_DIR: &str = "_gc";
/// The directory the catalog's own pointer records use inside a warehouse.
pub(crate) const CATALOG_DIR: &str = "_catalog";
/// The collector's ledger: one entry (a directory of facts) per tracked object.
pub(crate) const LEDGER_DIR: &str = "_gc/ledger";
/// The collector's journals: one per run, and its finish mark.
pub(crate) const JOURNAL_DIR: &str = "_gc/journal";
/// The collector's runs: each run's plan and checkpoints.
pub(crate) const RUNS_DIR: &str = "_gc/runs";
/// The deletion records: `_gc/deleted/<run-ms>-<run>-<sequence>-<page>.json`, the ledger
/// files of the objects one page of deletes removed, released (deleted with the record)
/// once no publication can still check their condemnations (`gc::release`).
pub(crate) const DELETED_DIR: &str = "_gc/deleted";
/// The collector's lease generations.
pub(crate) const LEASE_DIR: &str = "_gc/lease";
/// The change log: one entry per pointer write, which the collector reads after its walks.
pub(crate) const CHANGES_DIR: &str = "_gc/changes";
/// The commit links: `_gc/links/<ms>-<commit>-<base>` (empty), one per register or
/// commit write, naming the commit it replaced (`none` for a key without a record).
pub(crate) const LINKS_DIR: &str = "_gc/links";
/// The entries each claim or adoption found: `_gc/adoptions/<created-ms>.json`, the names
/// of the change-log entries logged before the epoch it began, whatever writers' clocks say.
pub(crate) const ADOPTIONS_DIR: &str = "_gc/adoptions";
/// The claim records: `_gc/claims/<catalog-id>.json`, a copy of the marker the owning
/// catalog writes (create-if-absent) once the marker names it.
pub(crate) const CLAIMS_DIR: &str = "_gc/claims";

/// A fact of a ledger entry, as its file name states it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fact {
    /// `o-<clock>-<walk>`: the walk at `walk_ms` found the object unreachable, its
    /// retention clock running from `start_ms`.
    Clock { start_ms: i64, walk_ms: i64 },
    /// `c-<ms>`: condemned at `ms`.
    Condemned(i64),
    /// `u-<ms>`: a clock of an earlier version (never trusted).
    Legacy,
}

/// The run a fact's file names: `<run-ms>-<run>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FactRun {
    pub run_ms: i64,
    pub run_id: Uuid,
}

/// The longest name of a fact's file: `o-<clock>-<walk>-<run-ms>-<run>.json`.
const LONGEST_FACT: usize = "o-".len() + 3 * 20 + 3 + 32 + ".json".len();

/// The directory of the ledger entry of `object`.
pub(crate) fn ledger_entry(object: &str) -> String {
    format!("{LEDGER_DIR}/{object}")
}

/// Whether a ledger can hold an entry for `object` in a warehouse whose names are at most
/// `max_name_len` bytes: its directory plus the longest fact's name fit.
pub(crate) fn ledger_holds(max_name_len: usize, object: &str) -> bool {
    LEDGER_DIR.len() + 1 + object.len() + 1 + LONGEST_FACT <= max_name_len
}

/// Parse a fact's file name (the last segment): `o-<clock>-<walk>-<run-ms>-<run>.json`,
/// `c-<ms>-<run-ms>-<run>.json` or `u-<ms>-<run-ms>-<run>.json`; `None` for any file the
/// collector does not write.
pub(crate) fn parse_fact(file: &str) -> Option<(Fact, FactRun)> {
    let stem = file.strip_suffix(".json")?;
    let mut parts = stem.split('-');
    let tag = parts.next()?;
    let ms: i64 = parts.next()?.parse().ok()?;
    let fact = match tag {
        "o" => Fact::Clock {
            start_ms: ms,
            walk_ms: parts.next()?.parse().ok()?,
        },
        "c" => Fact::Condemned(ms),
        "u" => Fact::Legacy,
        _ => return None,
    };
    let run_ms = parts.next()?.parse().ok()?;
    let run_id = Uuid::try_parse(parts.next()?).ok()?;
    if parts.next().is_some() {
        return None;
    }
    Some((fact, FactRun { run_ms, run_id }))
}

/// Parse a condemnation marker's file name (the last segment):
/// `n-<ms>-<run-ms>-<run>-<page>.json`, condemned at `<ms>` by page `<page>` of the run;
/// `None` for any other file.
pub(crate) fn parse_marker(file: &str) -> Option<(i64, FactRun)> {
    let stem = file.strip_suffix(".json")?.strip_prefix("n-")?;
    let mut parts = stem.split('-');
    let ms: i64 = parts.next()?.parse().ok()?;
    let run_ms = parts.next()?.parse().ok()?;
    let run_id = Uuid::try_parse(parts.next()?).ok()?;
    let _page: u64 = parts.next()?.parse().ok()?;
    if parts.next().is_some() {
        return None;
    }
    Some((ms, FactRun { run_ms, run_id }))
}

/// The body of a condemnation marker: the base names of the objects it condemns, all
/// directly in its directory. Fields it does not know are allowed (a later version may
/// add some); a body that is no such object condemns every name of its directory.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub(crate) struct MarkerBody {
    pub names: Vec<String>,
}

/// When a condemnation stamped `stamp_ms`, whose file the store dates `last_modified_ms`,
/// became visible: the later of the two (a slow or retried write must not let the
/// condemnation delay start before anyone could see it).
pub(crate) fn condemnation_visible(stamp_ms: i64, last_modified_ms: i64) -> i64 {
    stamp_ms.max(last_modified_ms)
}

/// The root of the nested catalog structure `name` belongs to, if it shows one: an
/// ownership marker, the catalog's or the collector's directory, or a pointer record of an
/// object-store pointer store (`i/`, `n/`, `_meta/` and the capability probe's `_probe/`
/// keys, whose last segment starts with `=`).
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
        && let Some(at) = segments[..last]
            .iter()
            .position(|s| matches!(*s, "i" | "n" | "_probe"))
    {
        return root_before(at);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    const RUN: &str = "1700000000000-0123456789abcdef0123456789abcdef";

    #[test]
    fn markers_are_no_facts_and_facts_no_markers() {
        let marker = format!("n-5-{RUN}-7.json");
        let (ms, run) = parse_marker(&marker).expect("a marker");
        assert_eq!((ms, run.run_ms), (5, 1_700_000_000_000));
        assert_eq!(parse_fact(&marker), None);
        for other in [
            format!("c-5-{RUN}.json"),
            format!("n-5-{RUN}.json"),
            format!("n-5-{RUN}-7-8.json"),
            format!("n-x-{RUN}-7.json"),
            format!("n-5-{RUN}-7.json.tmp"),
        ] {
            assert_eq!(parse_marker(&other), None, "{other}");
        }
    }

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
            (
                "metadata/team/cat/_probe/=passed",
                Some("metadata/team/cat"),
            ),
            ("metadata/cat/_probe/7f3e/=k", Some("metadata/cat")),
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
