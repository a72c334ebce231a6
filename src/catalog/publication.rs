//! What register and commit may publish, and how long they may take to publish it.
//!
//! A register or commit publishes one metadata file (and, through it, everything it
//! references). Before its compare-and-swap it checks, once:
//!
//! 1. **Place.** The file's name lies under `metadata/` of the warehouse: the garbage
//!    collector parses unreachable metadata only there, which is what keeps the tables a
//!    metadata file names until the file itself is gone. A file elsewhere, or at a name
//!    the collector takes for another catalog's structure (`…/_gc/…`, `…/i/…/=x`: see
//!    `warehouse::layout`), is [`ErrorKind::InvalidIndexMetadata`]. The location is stored in its canonical form
//!    ([`Warehouse::canonical_location`](crate::warehouse::Warehouse::canonical_location)).
//! 2. **Not condemned.** The collector's ledger holds no condemnation of the file, nor of
//!    anything at or below an index table or a family reference
//!    (`ivf_centroids_metadata_location`) the base did not already have, nor of anything a
//!    new family reference names (followed as the collector's walk follows it:
//!    `metadata::named::names_of_metadata`; a family reference's file that exists and is
//!    no metadata may name anything, and is refused: GC round 62): a condemned
//!    object is deleted once its condemnation is older than the condemnation delay, and
//!    publishing it would leave a pointer to a deleted file (a backup's metadata restored
//!    as a new file, or new metadata written over old tables). Such a file is
//!    [`ErrorKind::InvalidIndexMetadata`]; write new files. The check lists the ledger
//!    below each new table and reference, and the condemnation markers of its directory
//!    (two requests at once for one the collector never tracked; see
//!    `warehouse::layout`), after the new metadata file is read.
//! 3. **Within the window.** Everything from the start of the operation to the outcome
//!    of its compare-and-swap happens within [`PUBLISH_WINDOW`]. An operation that has
//!    not issued its write by then fails without writing (`STORE_UNAVAILABLE`); one whose
//!    write has not answered by then reports [`ErrorKind::CommitStateUnknown`] (reload
//!    to find out) rather than publishing later. The window is measured on two clocks and
//!    ends with the first: the monotonic clock, which no clock step moves but which stops
//!    while the machine is suspended (a laptop's sleep, a paused VM), and the wall clock,
//!    which goes on. A wall clock stepped ahead costs a retry. No attempt, first or
//!    retried, is issued after the window; a request already sent when the machine
//!    sleeps may still land late, which no client-side clock can prevent. (A rename
//!    settled on the way writes no new metadata location and keeps its source a root.)
//!
//! Why this closes the race between a register and a deletion: a deleting collector run
//! starts at least the condemnation delay `B` after the condemnation `c`, and walks every
//! pointer after it starts. A publication that saw no condemnation started before `c`
//! became visible, and is visible by `start + PUBLISH_WINDOW < c + B` (the collector
//! refuses `B < 2 × PUBLISH_WINDOW` unless forced), so the walk sees it and keeps the file.
//! A publication that started later sees the condemnation and refuses — also after the
//! deletion: the collector keeps a deleted object's condemnation until the grace period
//! plus twice the skew after its deletes (`gc::release`), and a publication of metadata
//! written while the object still existed completes within the grace period of writing
//! it (gc assumption 3).

use std::collections::HashSet;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use tokio::time::Instant;

use super::Catalog;
use crate::clock::{Clock, SystemClock};
use crate::error::{Error, ErrorKind, Result};
use crate::metadata::IndexMetadata;
use crate::metadata::named::{
    Below, References, directories_of, files_below, names_of_metadata, references_of,
};
use crate::warehouse::layout::{CATALOG_DIR, ledger_holds, nested_root};
use crate::warehouse::{
    GC_DIR, MANAGED_PREFIXES, METADATA_DIR, OWNER_MARKER, is_within, object_name,
};

/// The longest a register or commit may take, from its first read to the outcome of its
/// compare-and-swap.
#[doc(hidden)] // For the workspace's tests.
pub const PUBLISH_WINDOW: Duration = Duration::from_secs(60);

/// A metadata file checked for publication.
#[derive(Debug, Clone)]
pub(crate) struct Publication {
    /// Its canonical location.
    pub location: String,
    /// Its parsed content, read from the warehouse (never from the cache).
    pub metadata: Arc<IndexMetadata>,
    /// What it names, read once for every check of the publication.
    pub refs: References,
}

/// The deadline of one register or commit.
#[derive(Debug)]
pub(crate) struct PublishWindow {
    deadline: Instant,
    /// The real wall clock's reading at the start (never an injected clock: the window
    /// bounds real time, as the collector's condemnation delay does).
    opened_ms: i64,
    length: Duration,
    /// Whether a pointer write was issued (its outcome may be unknown).
    wrote: AtomicBool,
}

impl PublishWindow {
    pub(crate) fn open(length: Duration) -> Self {
        PublishWindow {
            deadline: Instant::now() + length,
            opened_ms: SystemClock.now_ms(),
            length,
            wrote: AtomicBool::new(false),
        }
    }

    fn overrun(&self) -> Error {
        Error::new(
            ErrorKind::StoreUnavailable,
            format!(
                "the operation took longer than the publish window of {:?}; nothing was written, retry",
                self.length
            ),
        )
    }

    /// Run a whole operation within the window: if it has not finished by the end, it
    /// fails — with [`ErrorKind::CommitStateUnknown`] once it has issued a pointer write
    /// (which may yet land, or have landed), else with `STORE_UNAVAILABLE`.
    pub(crate) async fn run<T>(&self, operation: impl Future<Output = Result<T>>) -> Result<T> {
        match tokio::time::timeout_at(self.deadline, operation).await {
            Ok(result) => result,
            Err(_) if self.wrote.load(Ordering::SeqCst) => Err(Error::new(
                ErrorKind::CommitStateUnknown,
                format!(
                    "the pointer write did not answer within the publish window of {:?}; it may or may not have applied: reload before retrying",
                    self.length
                ),
            )),
            Err(_) => Err(self.overrun()),
        }
    }

    /// Whether the window has ended on either clock: monotonic time at the deadline, or
    /// the wall clock a window's length past (or before) the start.
    pub(crate) fn ended(&self) -> bool {
        let length_ms = i64::try_from(self.length.as_millis()).unwrap_or(i64::MAX);
        let wall_elapsed_ms = SystemClock.now_ms().saturating_sub(self.opened_ms);
        Instant::now() >= self.deadline || wall_elapsed_ms.saturating_abs() >= length_ms
    }

    /// Whether a pointer write was issued (its outcome may be unknown).
    pub(crate) fn wrote(&self) -> bool {
        self.wrote.load(Ordering::SeqCst)
    }

    /// Issue a pointer write: only within the window.
    pub(crate) async fn write<T>(&self, write: impl Future<Output = Result<T>>) -> Result<T> {
        if self.ended() {
            return Err(self.overrun());
        }
        self.wrote.store(true, Ordering::SeqCst);
        write.await
    }
}

impl Catalog {
    /// Publish the metadata `location` (a register's, or a commit's new one): once the
    /// catalog may be written for it, run `publish` within one publish window.
    pub(crate) async fn publish_in_window<T>(
        &self,
        location: &str,
        publish: impl AsyncFnOnce(&PublishWindow) -> Result<T>,
    ) -> Result<T> {
        let publishing = self.warehouse().relative(location).ok();
        self.ensure_writable(publishing.as_deref()).await?;
        let window = PublishWindow::open(self.inner.publish_window);
        window.run(publish(&window)).await
    }

    /// Check a metadata location for publication (place, condemnation) and read it.
    pub(crate) async fn prepare_publication(&self, location: &str) -> Result<Publication> {
        let warehouse = self.warehouse();
        let name = warehouse.relative(location)?;
        if !is_within(&name, METADATA_DIR) || name == METADATA_DIR {
            return Err(Error::new(
                ErrorKind::InvalidIndexMetadata,
                format!(
                    "metadata file `{location}` is not under `{METADATA_DIR}/` of the warehouse; metadata files must live there (the garbage collector keeps what a metadata file names only while it can find that file)"
                ),
            ));
        }
        if let Some(root) = nested_root(&name) {
            return Err(Error::new(
                ErrorKind::InvalidIndexMetadata,
                format!(
                    "metadata file `{location}` lies in what looks like another catalog's structure under `{}` (an ownership marker, `_catalog/`, `_gc/` or pointer records); the garbage collector never reads there, so it could not keep what the file names",
                    warehouse.absolute(&root)
                ),
            ));
        }
        refuse_unmirrorable(warehouse, &name, "metadata file")?;
        let location = warehouse.absolute(&name);
        let (metadata, (), ()) = futures::try_join!(
            self.read_metadata_from_warehouse(&location),
            refuse_condemned(self, &name, "metadata file"),
            warehouse.refuse_links(&name),
        )?;
        let refs = references_of(&metadata, self.registry(), warehouse);
        Ok(Publication {
            location,
            metadata,
            refs,
        })
    }

    /// Refuse a publication that names the warehouse's own bookkeeping: an index table or
    /// family reference under `_gc/` or `_catalog/` (or the ownership marker), or a source
    /// table (in any spelling the collector recognises as inside the warehouse) under the
    /// managed prefixes, `_gc/` or `_catalog/`. The collector deletes in those places by its
    /// own rules, so nothing published may live there.
    pub(crate) fn check_places(
        &self,
        publication: &Publication,
        source: &crate::metadata::TableDefinition,
    ) -> Result<()> {
        let warehouse = self.warehouse();
        let refuse = |what: &str, name: &str, why: &str| {
            Err(Error::new(
                ErrorKind::InvalidIndexMetadata,
                format!(
                    "metadata file `{}`: the {what} `{}` lies {why}; nothing a catalog publishes may live there",
                    publication.location,
                    warehouse.absolute(name)
                ),
            ))
        };
        let bookkeeping = |name: &str| {
            is_within(name, GC_DIR) || is_within(name, CATALOG_DIR) || name == OWNER_MARKER
        };
        let refs = &publication.refs;
        if let Some(name) = refs.tables.iter().find(|name| bookkeeping(name)) {
            return refuse("index table", name, "in the catalog's own bookkeeping");
        }
        for name in &refs.family {
            if bookkeeping(name) {
                return refuse("family reference", name, "in the catalog's own bookkeeping");
            }
            // A family reference names metadata: never at a name the collector takes for
            // another catalog's structure and never reads (see `prepare_publication`).
            if nested_root(name).is_some() {
                return refuse(
                    "family reference",
                    name,
                    "in what looks like another catalog's structure, which the garbage collector never reads",
                );
            }
        }
        let mut reader = warehouse.name_reader();
        let names = source.warehouse_names(&mut reader);
        if reader.gave_up() {
            return Err(Error::new(
                ErrorKind::InvalidIndexMetadata,
                format!(
                    "metadata file `{}`: the source table's location could not be read within the collector's bounds: on a local warehouse it holds a quote, a backslash, a `$` or a control character (which shells and engines unquote and expand in ways the collector does not interpret: write the location as the plain absolute path or `file:///` URI), or it has more than four patterns through links, or it names a local directory outside the warehouse with more than 100,000 entries to check for links into it; the garbage collector would keep everything, so it is refused",
                    publication.location
                ),
            ));
        }
        for name in names.iter().chain(&refs.sources) {
            if bookkeeping(name) || MANAGED_PREFIXES.iter().any(|p| is_within(name, p)) {
                return refuse(
                    "source table",
                    name,
                    "under the warehouse's `metadata/`, `indexes/`, `_gc/` or `_catalog/`, where the garbage collector could take it for its own garbage",
                );
            }
        }
        Ok(())
    }

    /// Refuse a publication whose index tables or family references (objects that may be
    /// metadata, such as centroids) have anything condemned at or below them, unless the
    /// base already referenced them (rule C of `gc`: a condemned object is deleted once
    /// its condemnation delay has passed, and a publication the deleting run's
    /// verification walk did not see would be left pointing at deleted files); and, on a
    /// local warehouse, one whose index tables or family references lie behind a
    /// symbolic link (the collector lists files under their real names: it resolves links
    /// in references too, but a layout that depends on that is refused up front).
    pub(crate) async fn check_new_references(
        &self,
        publication: &Publication,
        base: Option<&IndexMetadata>,
    ) -> Result<()> {
        let registry = self.registry();
        let warehouse = self.warehouse();
        let refs = &publication.refs;
        let known = base
            .map(|base| references_of(base, registry, warehouse))
            .unwrap_or_default();
        let tables = &refs.tables;
        let new_references: Vec<String> = refs
            .family
            .iter()
            .filter(|name| !known.family.contains(name))
            .cloned()
            .collect();
        refuse_slashed_references(self, &publication.metadata, &new_references)?;
        // What a new family reference makes reachable, as the collector's walk reads it:
        // the object itself and, if it is metadata, what it names, following its own
        // references (a fresh centroids file may name an old index's tables).
        // So are the files that may be metadata in a new table placed under `metadata/`
        // (the walk reads them as family references' files: `metadata_below`).
        let new_tables = tables.iter().filter(|name| !known.tables.contains(name));
        let in_tables = match files_below(warehouse, &directories_of([], new_tables)).await? {
            Below::Files(files) => files,
            Below::Anything(why) => {
                return Err(Error::new(
                    ErrorKind::InvalidIndexMetadata,
                    format!(
                        "metadata file `{}`: an index table under `metadata/` may hold files that name anything ({why}); place index tables under `indexes/`",
                        publication.location
                    ),
                ));
            }
        };
        let followed = new_references.iter().chain(&in_tables);
        let reached = futures::future::try_join_all(followed.map(|name| async move {
            refuse_too_large(self, name).await?;
            names_of_metadata(self.warehouse(), registry, name).await
        }))
        .await?;
        let reached: Vec<String> = reached.into_iter().flatten().collect();
        // Each name once (a referenced file may name millions of objects).
        let mut seen: HashSet<String> = known.tables.iter().chain(&known.family).cloned().collect();
        let mut new: Vec<(String, Named)> = Vec::new();
        let references = new_references
            .iter()
            .map(|name| (name.clone(), Named::Reference));
        let tables_named = tables.iter().map(|name| (name.clone(), Named::Table));
        // What a symbolic link leads to (a local warehouse: a file a writer linked into
        // its new table while the collector was deleting it), below everything the
        // publication newly makes reachable: its new tables, its new source tables inside
        // the warehouse and what its new family references name.
        let mut searched: Vec<String> = tables
            .iter()
            .filter(|name| !known.tables.contains(name))
            .chain(
                refs.sources
                    .iter()
                    .filter(|name| !known.sources.contains(name)),
            )
            .cloned()
            .collect();
        searched.extend(reached.iter().cloned());
        searched.sort_unstable();
        searched.dedup();
        let below = self.warehouse().links_below(searched).await?;
        if let Some(why) = below.unread {
            return Err(Error::new(
                ErrorKind::InvalidIndexMetadata,
                format!(
                    "metadata file `{}`: below what it newly names, {why}: a symbolic link there may lead to a file the garbage collector condemned, and no check can see it. Make it readable (or move the mount out of the warehouse)",
                    publication.location
                ),
            ));
        }
        // A link to all of a managed prefix, the root or above, or the catalog's own
        // directories names nothing the collector keeps for it (so that one in garbage
        // does not stop collection), while a reader of the new table reads through it
        // whatever lies there, condemned files too (round 70, F4).
        if let Some(link) = below.wide.first().map(|wide| &wide.link) {
            return Err(Error::new(
                ErrorKind::InvalidIndexMetadata,
                format!(
                    "metadata file `{}`: below what it newly names, the symbolic link `{link}` leads to the whole of a managed prefix, the warehouse root or above it, or the catalog's own directories, where the garbage collector cannot tell what a reader reads. Link to the tables themselves, or place the files in the table",
                    publication.location
                ),
            ));
        }
        let linked = below.targets.into_iter().map(|name| (name, Named::Linked));
        let named_by_references = reached.into_iter().map(|name| (name, Named::ByReference));
        for (name, what) in references
            .chain(tables_named)
            .chain(named_by_references)
            .chain(linked)
        {
            if seen.insert(name.clone()) {
                new.push((name, what));
            }
        }
        let links = tables
            .iter()
            .chain(new_references.iter().filter(|name| !tables.contains(name)))
            .map(|name| self.warehouse().refuse_links(name));
        let condemned = futures::stream::iter(new)
            .map(|(name, what)| async move {
                // A family reference is one object the ledger must be able to track;
                // nothing below a table too long to mirror can have a ledger entry.
                if what == Named::Reference {
                    refuse_unmirrorable(self.warehouse(), &name, what.noun())?;
                }
                refuse_condemned_within(self, &name, what.noun()).await
            })
            .buffer_unordered(CHECKS_AT_ONCE)
            .try_collect::<Vec<()>>();
        let (_, _) = futures::try_join!(futures::future::try_join_all(links), condemned)?;
        Ok(())
    }
}

/// How many ledger listings one publication's check issues at once.
const CHECKS_AT_ONCE: usize = 16;

/// What a publication names that must not be condemned, as errors call it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Named {
    /// A family reference (`ivf_centroids_metadata_location`).
    Reference,
    /// An index table's location.
    Table,
    /// Something a family reference names, if it is metadata (followed as the walk does).
    ByReference,
    /// What a symbolic link below a new table leads to.
    Linked,
}

impl Named {
    fn noun(self) -> &'static str {
        match self {
            Named::Reference => "referenced object",
            Named::Table => "index table",
            Named::ByReference => "object a referenced file names",
            Named::Linked => "object a symbolic link in a new table leads to",
        }
    }
}

/// Refuse a new family reference to a file larger than any metadata file: the collector
/// reads no name in it (nothing it names would be kept).
async fn refuse_too_large(catalog: &Catalog, name: &str) -> Result<()> {
    let max = crate::metadata::MAX_METADATA_BYTES as u64;
    match catalog.warehouse().head(name).await? {
        Some(listed) if listed.size > max => Err(Error::new(
            ErrorKind::InvalidIndexMetadata,
            format!(
                "the family reference `{}` names a file of {} bytes, more than the {max} bytes the garbage collector reads: what it names would not be kept",
                catalog.warehouse().absolute(name),
                listed.size
            ),
        )),
        _ => Ok(()),
    }
}

/// Refuse a new family reference whose location ends with `/`: it names a file, which
/// the collector reads at the name without the slash, while on an object store a key that
/// keeps the slash is another object, which the collector never reads (what it names
/// would not be kept).
fn refuse_slashed_references(
    catalog: &Catalog,
    metadata: &IndexMetadata,
    new_references: &[String],
) -> Result<()> {
    let registry = catalog.registry();
    for snapshot in metadata.snapshots() {
        let Some(family) = registry.family(snapshot.index_family()) else {
            continue;
        };
        for location in family.warehouse_references(snapshot.parameters()) {
            let slashed = location.ends_with('/')
                && object_name(location).is_ok_and(|name| new_references.contains(&name));
            if slashed {
                return Err(Error::new(
                    ErrorKind::InvalidIndexMetadata,
                    format!(
                        "the family reference `{location}` ends with `/`: it must name a file (write it without the slash)"
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// Refuse to publish a file whose name is too long for the collector's ledger: it could
/// never be tracked, nor checked for a condemnation.
fn refuse_unmirrorable(
    warehouse: &crate::warehouse::Warehouse,
    name: &str,
    what: &str,
) -> Result<()> {
    if ledger_holds(warehouse.max_name_len(), name) {
        return Ok(());
    }
    Err(Error::new(
        ErrorKind::InvalidIndexMetadata,
        format!(
            "the {what} `{}` has a name too long for the garbage collector's bookkeeping (the store's key limit); use a shorter name",
            warehouse.absolute(name)
        ),
    ))
}

/// Refuse to publish `name` if the collector condemned anything at or below it.
async fn refuse_condemned_within(catalog: &Catalog, name: &str, what: &str) -> Result<()> {
    match catalog.warehouse().condemned_within(name).await? {
        None => Ok(()),
        Some((object, condemned_ms)) => Err(Error::new(
            ErrorKind::InvalidIndexMetadata,
            format!(
                "the {what} `{}` holds `{}`, which the garbage collector condemned at {condemned_ms} (unreachable for the whole retention period) and will delete; it cannot be published again. Write new files",
                catalog.warehouse().absolute(name),
                catalog.warehouse().absolute(&object)
            ),
        )),
    }
}

async fn refuse_condemned(catalog: &Catalog, name: &str, what: &str) -> Result<()> {
    match catalog.warehouse().condemnation(name).await? {
        None => Ok(()),
        Some(condemned_ms) => Err(Error::new(
            ErrorKind::InvalidIndexMetadata,
            format!(
                "the {what} `{}` was condemned by the garbage collector at {condemned_ms} (unreachable for the whole retention period) and will be deleted; it cannot be published again. Write a new metadata file",
                catalog.warehouse().absolute(name)
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_window_ends_when_the_wall_clock_says_so_though_the_monotonic_one_stood_still() {
        let within = PublishWindow::open(Duration::from_secs(60));
        within
            .write(async { Ok(()) })
            .await
            .expect("a write within the window is issued");
        // The machine slept for two minutes during the operation: the monotonic clock
        // stood still, the wall clock did not.
        let mut slept = PublishWindow::open(Duration::from_secs(60));
        slept.opened_ms -= 120_000;
        let issued = AtomicBool::new(false);
        let err = slept
            .write(async {
                issued.store(true, Ordering::SeqCst);
                Ok(())
            })
            .await
            .expect_err("no write after the window");
        assert_eq!(err.kind(), ErrorKind::StoreUnavailable);
        assert!(!issued.load(Ordering::SeqCst), "the write was never issued");
        assert!(!slept.wrote.load(Ordering::SeqCst));
    }
}
