//! Garbage collection: deleting warehouse objects no catalog pointer can reach, after the
//! reader-safety retention period, without ever deleting a live one.
//!
//! ```no_run
//! use std::sync::Arc;
//! use parqdb_catalog::catalog::Catalog;
//! use parqdb_catalog::gc::{self, GarbageCollector, GcConfig};
//! use parqdb_catalog::store::local::LocalStore;
//! use parqdb_catalog::warehouse::Warehouse;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> parqdb_catalog::Result<()> {
//! let warehouse = Warehouse::local(std::path::Path::new("/data/wh"))?;
//! let store = Arc::new(LocalStore::new("/data/wh/_catalog"));
//! let catalog = Catalog::builder(store, warehouse).build();
//! let now = catalog.clock().now_ms();
//! gc::claim(&catalog, now).await?; // once: `parqdb-catalog init`
//! let collector = GarbageCollector::new(catalog, GcConfig { dry_run: true, ..GcConfig::default() })?;
//! let report = collector.collect(now).await?;
//! println!("{}", report.to_json());
//! # Ok(()) }
//! ```
//!
//! # What a run does
//! [`GarbageCollector::collect`]`(now)` (the SlateDB shape: time is an argument, never read
//! from the system clock) runs these steps; each is idempotent and a run may stop anywhere:
//!
//! 1. **Ownership** ([`marker`]): the warehouse's `_catalog-owner.json` must name this
//!    catalog's id, else the run is refused (`INVALID_CONFIGURATION`).
//! 2. **Lease** ([`lease`](self#the-run-lease)): one run at a time; a busy lease makes the
//!    run return [`GcStatus::Skipped`].
//! 3. **Observe** ([`reachability`]): read every pointer record; the metadata of every
//!    `live` and `moving` record (and of tombstones younger than the clock-skew
//!    allowance) is a root; everything reachable from the roots is the reachable set `R`
//!    (metadata files, index-table directory prefixes, family references such as
//!    `ivf_centroids_metadata_location` and what they reference, source-table locations).
//!    A root metadata file that cannot be read or parsed aborts the run. The run then
//!    writes its journal (the identifier incarnations it saw; see [`ledger`]).
//! 4. **Scan** only `metadata/` and `indexes/` (the managed prefixes), streaming. For each
//!    unreachable object (see the rules below) the run starts or reads its retention
//!    clock in the [`ledger`], and condemns it once retention has elapsed.
//! 5. **Verify**: walk the catalog again right before deleting; anything reachable again
//!    (or with newer evidence of reachability) is kept.
//! 6. **Delete** in batches with the store's bulk delete, metadata files before index
//!    tables, renewing the lease before every batch; then clear the ledger entries of the
//!    deleted objects.
//! 7. **Sweep** the ledger: clear entries whose object is reachable again or gone; then
//!    mark the run finished.
//!
//! Memory holds the reachable set (proportional to live data), the evidence of recently
//! dropped indexes, the unreachable metadata files' references, and at most
//! [`GcConfig::max_deletes_per_run`] doomed objects; everything else is streamed.
//!
//! # When an object is deleted
//! An object `o` under a managed prefix is deleted by a run at time `now` only if all hold:
//!
//! * **(U) unreachable**: `o` is not covered by `R` of this run's first walk nor of its
//!   verification walk. A reference covers itself and its subtree on a segment boundary:
//!   `indexes/a/1/ivf_postings` never covers `indexes/a/1/ivf_postings_old/…`;
//! * **(G) grace**: `last_modified(o) + grace + skew <= now`;
//! * **(R) retention**: `clock(o) + retention <= now`, where `clock(o)` is the retention
//!   clock (below);
//! * **(C) condemned**: a condemnation `c` of `o` with `c >= clock(o) + retention` is in the
//!   ledger and `c + B <= now` (`B` = [`GcConfig::condemn_delay`], by default the grace);
//! * **(P) not referenced by unreachable metadata**: no metadata file that exists (was
//!   listed under `metadata/` in this run) and parses references `o`. So a metadata file
//!   is always deleted before the index tables and centroids it names, and an old
//!   metadata file that someone registers again is complete or absent, never half-deleted.
//!
//! # The retention clock
//! The spec starts retention "when a published object loses catalog reachability", so
//! `clock(o)` must never be earlier than the real loss. When a run first finds `o`
//! unreachable (and past grace) it records the largest of:
//!
//! * `last_modified + grace`: before that `o` may belong to a writer in flight;
//! * the time the run's walk finished (the run's time plus what elapsed since it was
//!   called: a run paused before or during its walk never dates what changed meanwhile
//!   back to its start) — or, earlier, the catalog's *quiet time* `Q + skew`, where `Q` is the
//!   latest `updated-ms` of any pointer record: every record has been in its current state
//!   since `Q`, so whatever no record reaches now was unreachable since `Q` already. A
//!   tombstone's `updated-ms` therefore starts the clock early exactly when nothing changed
//!   after the drop (the common "drop, then GC much later" case); it never starts it
//!   before the real loss, because a later change anywhere moves `Q`;
//! * evidence (below).
//!
//! Every later run re-checks a recorded clock against **evidence of later reachability**,
//! which only moves it later:
//!
//! * a tombstone dropped within the retention horizon whose metadata references `o` (`o`
//!   was reachable until that drop);
//! * for a metadata file of index uuid `X`: an identifier incarnation (a register or rename
//!   creates one; commits keep it) that the previous *finished* run's journal does not list
//!   and whose record changed after the clock — with uuid `X` (it may have re-registered
//!   `o` and committed away since), or, with [`GcConfig::strict_reincarnation`], any
//!   incarnation that replaced a tombstone (that key's earlier incarnations are hidden).
//!   Incarnations the previous finished run listed cannot: they existed while `o` was
//!   unreachable, and within an incarnation commits only move forward (a commit needs
//!   `last-sequence-number` and `last-updated-ms` not to decrease and the same uuid);
//! * a run that wrote its journal but never finished may have seen `o` reachable without
//!   clearing its entry: the next run restarts every recorded clock at the end of its walk.
//!
//! The ledger keeps the largest clock ever computed, so evidence that later disappears (a
//! tombstone overwritten by a new register) is not forgotten, and raising the clock voids
//! older condemnations. An object seen reachable has its entry cleared by the run's sweep.
//! Index tables need no lineage check: they can only be published through a metadata file,
//! and (P) keeps them while any such file exists.
//!
//! # Why no live object is deleted
//! *Reachable objects.* (U) is checked against two walks of this run, the second one
//! immediately before deleting. Walks are not atomic snapshots, but a pointer value only
//! moves between keys by rename, which leaves the source as a tombstone written after the
//! walk began: such tombstones are roots. A value seen nowhere was reachable from no record
//! at the moment each record was read; for a live object to be missed, a mutation must race
//! every walk of every run between its clock start and its deletion (at least two walks,
//! at least `retention` apart, each clearing the entry if it sees the object).
//!
//! *In-flight writers.* A writer writes index tables and a metadata file, then registers or
//! commits. (G) keeps all of it until it is `grace` old, and (P) keeps the tables as long
//! as the metadata file exists. **Assumption: a register or commit completes within the
//! grace period of the first file it wrote**; writers never reuse an object path; and new
//! metadata references only objects that were reachable when the writer started (its base
//! metadata's tables, centroids a live index uses) — an object unreachable for the whole
//! retention period may be deleted under a writer that picks it up again.
//!
//! *Re-registering an old metadata file* (allowed by the spec) makes it and what it
//! references reachable again: the next walk sees it (and clears the ledger), so anything
//! registered before a run's verification walk is kept; condemnation plus `B` makes every
//! deletion follow two unreachable observations at least `B` apart. **The remaining race**:
//! a register that reads the metadata file before the run deletes it but writes its pointer
//! after the run's verification walk read that key. The window is the run's delete phase
//! (seconds), and only for metadata unreachable for the whole retention period. Its damage
//! is bounded by (P): the index tables survive (they go a run later), and the next run
//! finds a pointer to a missing metadata file and aborts instead of deleting anything.
//! Closing it needs a catalog hook: the catalog's register and commit read the new
//! metadata file through a cache, so today they do not even notice a file deleted long
//! ago; they should re-check its existence right before the compare-and-swap, and write a
//! pin the verification walk honours (see the issue notes).
//!
//! *Retention from loss.* The clock is the largest of sound bounds on the real loss
//! (above). Residual gaps: a re-incarnation followed by more than 16 commits before the
//! next run (its commit-id chain no longer shows it replaced a tombstone), and clock skew
//! beyond [`GcConfig::max_clock_skew`] between writers, the store and the collector.
//!
//! *Concurrency and crashes.* All ledger writes are create-if-absent of immutable files
//! that combine by maximum, so two runs never lose each other's facts and a crashed run
//! leaves only facts that delay deletion. Deletion of an already-deleted object is a
//! success; a run killed mid-delete leaves ledger entries of gone objects, which the sweep
//! clears. Metadata files are deleted before tables, so a crash between the two leaves
//! garbage tables (collected later), never metadata naming deleted tables. The lease
//! serialises runs; a run that outlives its lease notices at the next renewal and stops.
//! Renewals come before every delete batch and the sweep, and before the scan records a
//! ledger fact once half the lease has passed (in run time or on the monotonic clock): a
//! run paused past its lease records no clock from its stale walk after another run took
//! over.
//!
//! # Liveness
//! With a successful run at least every `P`: garbage unreachable since `L` is deleted by
//! `max(L, last_modified + grace + skew) + retention + B + 3P`, plus one `P` per level of
//! existing metadata that references it (P); evidence moves that start later (a new
//! incarnation of its index or, strict, any re-incarnation: to its latest change seen by the
//! next run; a run that died: to the next finished run). The simulation test checks this
//! bound after every step.
//!
//! # The run lease
//! See the `lease` submodule docs: generations `_gc/lease/<gen>.json` written with
//! create-if-absent; expiry plus renewal before each delete batch.

mod collect;
pub mod config;
mod lease;
pub mod ledger;
mod nested;
pub mod reachability;
mod refs;
pub mod report;
mod scheduled;

use std::sync::Arc;

pub use crate::catalog::ownership::{MARKER, OwnershipMarker, claim, verify_ownership};
pub use crate::warehouse::MANAGED_PREFIXES;
pub use config::{GcConfig, format_duration, parse_duration};
pub use reachability::RootStats;
pub use report::{ActionKind, GcAction, GcPhase, GcProgress, GcReport, GcStatus, Tally};
pub use scheduled::run_scheduled;

use crate::catalog::Catalog;
use crate::error::Result;

/// A progress callback.
pub type ProgressFn = Arc<dyn Fn(&GcProgress) + Send + Sync>;

/// The garbage collector of one catalog's warehouse.
#[derive(Clone)]
pub struct GarbageCollector {
    catalog: Catalog,
    config: GcConfig,
    progress: Option<ProgressFn>,
}

impl std::fmt::Debug for GarbageCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GarbageCollector")
            .field("catalog", &self.catalog)
            .field("config", &self.config)
            .field("progress", &self.progress.is_some())
            .finish()
    }
}

impl GarbageCollector {
    /// A collector over `catalog`'s pointer store, warehouse and family registry.
    /// Refuses an unsafe `config` ([`GcConfig::validate`]).
    pub fn new(catalog: Catalog, config: GcConfig) -> Result<Self> {
        config.validate()?;
        Ok(GarbageCollector {
            catalog,
            config,
            progress: None,
        })
    }

    /// Call `progress` with every [`GcProgress`] event.
    pub fn with_progress(mut self, progress: impl Fn(&GcProgress) + Send + Sync + 'static) -> Self {
        self.progress = Some(Arc::new(progress));
        self
    }

    /// The configuration.
    pub fn config(&self) -> &GcConfig {
        &self.config
    }

    /// The catalog.
    pub fn catalog(&self) -> &Catalog {
        &self.catalog
    }

    /// Run once at logical time `now_ms` (Unix epoch milliseconds). See the module docs.
    ///
    /// Errors: `INVALID_CONFIGURATION` if the warehouse is not owned by this catalog; the
    /// error of the failing read if a root metadata file cannot be read or parsed (nothing
    /// is deleted); `STORE_UNAVAILABLE` if the store fails mid-run (a rerun resumes safely).
    pub async fn collect(&self, now_ms: i64) -> Result<GcReport> {
        self.run(now_ms).await
    }
}
