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
//! A run is a durable job: its plan, its walks and a checkpoint of every page of work live
//! in the warehouse under `_gc/runs/<run>/` (see the `job` submodule), so a run may span
//! many invocations and many workers, stop anywhere — at its deadline, on a store error,
//! killed at any instruction — and go on where it stopped. It proceeds in five **steps**
//! ([`GcStep`]; each stops at a page boundary once its budget is spent, and the next call of
//! the same step goes on from the last checkpoint):
//!
//! 1. **Plan** — **ownership** ([`verify_ownership`]): the warehouse's `_catalog-owner.json`
//!    must name this catalog's id (else `WAREHOUSE_NOT_OWNED`, or `INVALID_CONFIGURATION`
//!    without a marker), and the warehouse must not lie inside another warehouse's managed
//!    prefixes. The unfinished run, if there is one, is resumed; else a new run takes the
//!    **lease** ([`lease`](self#the-run-lease); a busy lease makes the step answer
//!    [`GcStatus::Skipped`]), **observes** ([`reachability`]): reads every pointer record;
//!    the metadata of every `live` and `moving` record (and of tombstones younger than the
//!    clock-skew allowance) is a root; everything reachable from the roots is the reachable
//!    set `R` (metadata files, index-table directory prefixes, family references such as
//!    `ivf_centroids_metadata_location` and what they reference, source-table locations).
//!    A root metadata file that cannot be read or parsed aborts the step. It stores `R` and
//!    the evidence, splits `indexes/` into partitions at its subdirectories, writes its plan
//!    and then its journal (the identifier incarnations it saw; see [`ledger`]). Then
//!    `metadata/`, page by page, in two passes: read every unreachable metadata file and
//!    record what it names; then decide each (the rules below).
//! 2. **Scan** each partition of `indexes/` (workers in parallel), page by page, streaming,
//!    through the warehouse's listing (on the local file system: never following symbolic
//!    links): for each unreachable object the run starts or reads its retention clock in
//!    the [`ledger`], condemns it once retention has elapsed, and records the doomed ones in
//!    the page's checkpoint.
//! 3. **Verify**: walk the catalog again, once every partition is scanned and right before
//!    deleting; anything reachable again (or with newer evidence of reachability) is kept.
//!    Then delete the doomed metadata files.
//! 4. **Delete** each partition's doomed objects in batches (workers in parallel), proving
//!    the lease before every batch, and clear their ledger entries; then **sweep** the
//!    partition's ledger entries: clear those whose object is reachable again or gone.
//! 5. **Finish**: sweep the ledger of `metadata/`; acknowledge the dead runs the plan
//!    listed; mark the run finished; release the lease.
//!
//! [`GarbageCollector::collect`] runs the steps in one process with
//! [`GcConfig::workers`] partitions at a time (the CLI); the `gc` Lambda function runs one
//! step per invocation for the `gc-cycle` state machine ([`GcStep`],
//! [`run_scheduled_within`]).
//!
//! Memory holds the reachable sets of the two walks and what unreachable metadata names
//! (proportional to live data and to metadata, not to the warehouse), the evidence of
//! recently dropped indexes, and one page of objects; everything else is streamed.
//!
//! # Names
//! Every object is compared by its **name**: its raw key below the warehouse root, exactly
//! as a listing returns it and as any engine writing it spells it
//! ([`object_name`](crate::warehouse::object_name)). A location in metadata
//! (`indexes/ü b/1/ivf_postings/`) names the object another engine wrote there without any
//! percent-encoding applied or removed; a metadata location URI is decoded once into its
//! name ([`Warehouse::relative`](crate::warehouse::Warehouse::relative)) and stored in one
//! canonical form. A listed name that could be another spelling of a reachable name (an
//! earlier version of this crate percent-encoded some characters) is kept.
//!
//! # When an object is deleted
//! An object `o` under a managed prefix is deleted by a run at time `now` only if all hold:
//!
//! * **(O) ours**: `o` is a regular file reached without a symbolic link (local warehouses:
//!   listings do not follow links and a deletion re-checks every component of the path),
//!   and no listed object shows that `o` lies in a **nested** catalog structure — another
//!   warehouse's ownership marker, `_catalog/` or `_gc/`, a pointer store's records or
//!   catalog id ([`nested`](self#nested-roots)): such a subtree is never collected;
//! * **(U) unreachable**: no spelling of `o` is covered by `R` of this run's first walk nor
//!   of its verification walk. A reference covers itself and its subtree on a segment
//!   boundary: `indexes/a/1/ivf_postings` never covers `indexes/a/1/ivf_postings_old/…`;
//! * **(G) grace**: `last_modified(o) + grace + skew <= now`;
//! * **(R) retention**: `clock(o) + retention <= now`, where `clock(o)` is the retention
//!   clock (below);
//! * **(C) condemned**: a condemnation `c` of `o` with `c >= clock(o) + retention` is in the
//!   ledger and `c + B <= now` (`B` = [`GcConfig::condemn_delay`], by default the grace);
//!   `c` is the time the condemnation was written;
//! * **(P) not referenced by existing metadata**: no file under `metadata/` that exists
//!   (was listed in this run) references `o`. A valid metadata file references its tables,
//!   centroids and source locations; a file that does not parse references every string in
//!   it that names a warehouse object. So a metadata file is always deleted before the
//!   index tables and centroids it names, and an old metadata file that someone registers
//!   again is complete or absent, never half-deleted. Register and commit only publish
//!   metadata under `metadata/`, so every publishable metadata file is seen by this rule.
//!   Every publishable file there is read but the ones the walk read (whatever they name
//!   is in `R`): a file `R` covers only because a reference names a directory holding it
//!   is read too, unless it does not start like JSON (a table file), and what it names is
//!   kept. (Names of nested catalog structures and keys no metadata can name are never
//!   read, and never published.) A reference that covers the very file naming it (index
//!   tables in that file's own directory) keeps everything below it but the metadata
//!   files naming it, so they still go first.
//!
//! A file under `metadata/` that is index metadata of a format version this collector does
//! not understand is never deleted (a newer writer may own it), and everything it may name
//! is kept by (P); it is reported, and collection goes on around it.
//!
//! # The retention clock
//! The spec starts retention "when a published object loses catalog reachability", so
//! `clock(o)` must never be earlier than the real loss. When a run first finds `o`
//! unreachable (and past grace) it records the largest of:
//!
//! * `last_modified + grace`: before that `o` may belong to a writer in flight;
//! * `now + skew + grace - B - retention` when `B` is shorter than the grace: so `o` stays at
//!   least the grace period after a run first saw it even when its last-modified time is
//!   older than it is (a file copied in with its times kept);
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
//!   incarnation that replaced a tombstone (that key's earlier incarnations are hidden)
//!   other than the tombstone the previous finished run saw (journals keep every record's
//!   latest `commit-id`): an identifier dropped and registered again between every two
//!   runs moves no clock, since that run saw every incarnation before it.
//!   Incarnations the previous finished run listed cannot: they existed while `o` was
//!   unreachable, and within an incarnation commits only move forward (a commit needs
//!   `last-sequence-number` and `last-updated-ms` not to decrease and the same uuid). That
//!   holds for the entries the previous run swept; a clock written later (a process paused
//!   between its lease check and the write, landing behind finished runs) was never looked
//!   at, so an incarnation moves a clock unless the journal of the run that recorded the
//!   clock lists it too (`assess::Known`);
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
//! *One spelling.* A reference and a listed object are compared as names (above), so a
//! file another engine wrote at a location with `ü`, `~` or a space is covered by the
//! metadata naming it; the other spellings an earlier writer might have used are kept too.
//! **Not defended:** a local warehouse on a file system that ignores case or Unicode
//! normalisation (macOS HFS+, casefolded ext4 directories, SMB shares). There metadata
//! naming `indexes/ABC/` reads the files the file system lists as `indexes/abc/`, and the
//! collector, comparing names byte for byte, takes those for garbage: keep local
//! warehouses on case- and normalisation-sensitive file systems, and metadata locations
//! spelled as the files are.
//!
//! *Foreign writers.* A catalog only writes to a warehouse it owns: its first write claims
//! an unclaimed warehouse (create-if-absent, so of two catalogs racing for a fresh
//! warehouse exactly one wins) and refuses one whose marker names another catalog
//! (`WAREHOUSE_NOT_OWNED`). So every pointer naming a file of this warehouse is in this
//! catalog's store, which the walks read; a second pointer store (a forgotten `--catalog`)
//! cannot publish files this collector would take for garbage.
//!
//! *Nested roots.* Opening a catalog refuses a pointer store inside its warehouse's
//! `metadata/`, `indexes/` or `_gc/`, and ownership refuses a warehouse inside another
//! warehouse's (both where they can be seen: local directories, S3 prefixes of one bucket).
//! What is there anyway — made by hand, by an earlier version, or through a store this
//! crate cannot see — is caught by (O): every warehouse that was ever written to holds its
//! marker, every pointer store its records, and the scan never deletes below them.
//!
//! *Outside the warehouse.* Names never contain `.`/`..` or empty segments, every deletion
//! is of a name below the root, and on the local file system no symbolic link is followed
//! by a listing or traversed by a deletion. (A link swapped in *during* a run, between the
//! check and the deletion, is not defended against: the collector assumes nobody rewires
//! the warehouse while it deletes.)
//!
//! *In-flight writers.* A writer writes index tables and a metadata file, then registers or
//! commits. (G) keeps all of it until it is `grace` old, and (P) keeps the tables as long
//! as the metadata file exists. **Assumption: a register or commit completes within the
//! grace period of the first file it wrote**; writers never reuse an object path; and new
//! index tables a writer publishes were written by it or reachable when it started — an
//! index table unreachable for the whole retention period may be deleted under a writer
//! that picks it up again (metadata files and family references cannot: see below).
//!
//! *Publishing a condemned object.* Registering an old metadata file (allowed by the spec)
//! makes it and what it references reachable again, and the next walk sees it. Register
//! and commit refuse to publish a metadata file — or a family reference the base did not
//! have — whose ledger entry holds a condemnation, and they finish (or fail) within the
//! catalog's [`PUBLISH_WINDOW`](crate::catalog::PUBLISH_WINDOW), measured from before that
//! check to the outcome of their compare-and-swap (a write not answered in time is
//! `COMMIT_STATE_UNKNOWN`, never published later). A condemnation `c` is deleted only by a
//! run starting at `c + B` or later, whose verification walk starts after that, and
//! [`GcConfig::validate`] requires `B >= 2 × PUBLISH_WINDOW`: a publication that checked
//! before `c` is visible to that walk (and the object kept), one that checked after `c`
//! was refused. So no pointer ever names a deleted metadata file. (With `force`, windows
//! below these floors void this argument.)
//!
//! *Retention from loss.* The clock is the largest of sound bounds on the real loss
//! (above). Residual gap: clock skew beyond [`GcConfig::max_clock_skew`] between writers,
//! the store and the collector. (An incarnation whose commit-id chain no longer shows its
//! creation counts as a possible re-incarnation until a finished run has listed it.)
//!
//! *Concurrency, pauses and crashes.* All ledger writes are create-if-absent of immutable
//! files that combine by maximum, so two runs never lose each other's facts and a crashed
//! invocation leaves only facts that delay deletion (and its run goes on from its last
//! checkpoint). Deletion of an already-deleted object is a
//! success; a run killed mid-delete leaves ledger entries of gone objects, which the sweep
//! clears. Metadata files are deleted before tables, so a crash between the two leaves
//! garbage tables (collected later), never metadata naming deleted tables. The lease
//! serialises runs with a fencing token that never goes backwards: before every batch a
//! run proves it holds the newest lease generation (and that the proof is fresh), so a run
//! paused past its lease stops when it wakes. Renewals come before every delete batch and
//! the sweep, and before the scan records a ledger fact once half the lease has passed (in
//! run time or on the monotonic clock): a run paused past its lease records no clock from
//! its stale walk after another run took over. Even a run that deletes after a long pause
//! only deletes condemned objects, which nobody could publish since their condemnation.
//! A stray file under `metadata/` that does not parse never stops a run (see (P)); a root
//! whose metadata is missing or invalid does, because `R` would be incomplete.
//!
//! # Runs of many invocations
//! A run is decided at its plan: its decision time (grace, retention and condemnation
//! delays are measured against it in every later invocation, and an invocation whose clock
//! is behind judges by its own, earlier time), its rules (a resumer takes for each the more
//! conservative of the plan's and its own configuration), its walk `R`, its evidence. It is
//! sound to go on with it much later because:
//!
//! * what the run judges unreachable was so at its walk; the clock it starts is the end of
//!   that walk (or the quiet time), never later than the real loss; anything modified
//!   after the decision time less the grace is kept by (G), so objects written after the
//!   walk are never judged by it;
//! * deletion needs a condemnation made by an **earlier** run at least `B` before the
//!   decision time, and the verification walk starts after every scan, so after `c + B`;
//!   a publication that checked before `c` is visible to it, one after was refused — however
//!   long the run paused in between (a condemned object stays unpublishable);
//! * every partition is scanned whole before anything of the run is deleted, so a nested
//!   catalog structure found anywhere (an ownership marker in another page, at `indexes/`
//!   itself) keeps everything below it ([`nested`](self#nested-roots));
//! * an unfinished run is always resumed, never restarted: the retention clocks it
//!   recorded, its condemnations and its journal stay what they were, and the next run's
//!   lineage evidence trusts its journal only once it finished (swept every ledger entry).
//!   Only a run that cannot be resumed (its plan lost or damaged, or given up with `gc
//!   abandon`) counts as dead: the next new run restarts every tracked clock once for it.
//!   Nor is a run resumed whose walk is older than facts a finished run established: one
//!   planned by another catalog (its files copied here), or one a run that finished after
//!   its plan supersedes (a planner that paused past its lease wrote its plan behind that
//!   run): it counts as dead too (`Plan::superseded`).
//!
//! Every file of a run is written once with create-if-absent; two workers that do the same
//! page (a retried invocation, a paused one that wakes) agree on the first one written, and
//! every step is idempotent, so a crash loses at most the page under way.
//!
//! # Liveness
//! With a run finishing at least every `P` (a run's duration counts into `P`: it decides
//! by its plan's time): garbage unreachable since `L` is deleted by
//! `max(L, last_modified + grace + skew) + retention + B + 3P`, plus one `P` per level of
//! existing metadata that references it (P); evidence moves that start later (a new
//! incarnation of its index or, strict, any re-incarnation: to its latest change seen by the
//! next run; a run abandoned as dead: to the next finished run). The simulation test
//! checks this bound after every step.
//!
//! # The run lease
//! See the `lease` submodule docs: generations `_gc/lease/<gen>.json` written with
//! create-if-absent; expiry plus renewal (with proof of holding the newest generation)
//! before each delete batch.
//!
//! # Nested roots
//! See the `nested` submodule docs for the catalog structures that mark a subtree of the
//! managed prefixes as somebody else's.

mod assess;
mod collect;
pub mod config;
mod delete;
mod finish;
mod job;
mod lease;
pub mod ledger;
pub(crate) mod nested;
mod plan;
pub mod reachability;
mod refs;
pub mod report;
mod scan;
mod scheduled;
pub mod status;
mod step;

use std::sync::Arc;

pub use crate::catalog::ownership::{MARKER, OwnershipMarker, adopt, claim, verify_ownership};
pub use crate::warehouse::MANAGED_PREFIXES;
pub use config::{GcConfig, format_duration, parse_duration};
pub use job::PartitionProgress;
pub use lease::LeaseState;
pub use reachability::RootStats;
pub use report::{
    ActionKind, Counts, GcAction, GcPhase, GcProgress, GcReport, GcStatus, RunProgress, Tally,
};
pub use scheduled::{run_scheduled, run_scheduled_within};
pub use status::{GcState, status};
pub use step::{GcStep, StepOutcome};

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
    /// Where a dry run keeps its run's state (it writes nothing to the warehouse).
    scratch: Option<crate::warehouse::Warehouse>,
    /// What this collector's steps have scanned, for [`GcProgress::Scanned`].
    scanned: Arc<std::sync::Mutex<Tally>>,
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
            scratch: None,
            scanned: Arc::default(),
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

    pub(crate) fn emit(&self, event: GcProgress) {
        if let Some(progress) = &self.progress {
            progress(&event);
        }
    }

    /// Note `page` more objects scanned and report the total so far.
    pub(crate) fn scanned(&self, page: Tally) {
        let total = {
            let mut total = self.scanned.lock().unwrap_or_else(|err| err.into_inner());
            total.merge(page);
            *total
        };
        self.emit(GcProgress::Scanned {
            objects: total.objects,
            bytes: total.bytes,
        });
    }

    /// Run once at logical time `now_ms` (Unix epoch milliseconds): go on with the
    /// unfinished run if there is one, else start one, and take it to its end in this
    /// process (see [runs](self#runs)). With a [`budget`](GcConfig::budget) the call may
    /// stop with the run unfinished (status `in-progress`); the next call goes on.
    ///
    /// Errors: `WAREHOUSE_NOT_OWNED` if the warehouse is owned by another catalog,
    /// `INVALID_CONFIGURATION` if it has no owner or is nested in another warehouse; the
    /// error of the failing read if a root metadata file cannot be read or parsed (nothing
    /// is deleted); `STORE_UNAVAILABLE` if the store fails mid-run (the next call goes on
    /// from the last checkpoint).
    pub async fn collect(&self, now_ms: i64) -> Result<GcReport> {
        self.run(now_ms).await
    }

    /// Go on with the unfinished run, if there is one (`skipped` with a reason if not).
    pub async fn resume(&self, now_ms: i64) -> Result<GcReport> {
        if self.config.dry_run || self.unfinished().await?.is_some() {
            return self.run(now_ms).await;
        }
        let mut report = GcReport::new(self.catalog.ids().uuid(), now_ms, &self.config);
        report.status = GcStatus::Skipped;
        report.skipped_reason = Some("no gc run is unfinished".to_owned());
        Ok(report)
    }

    /// Give up the unfinished run, if there is one: it is never resumed, and the next run
    /// restarts every tracked retention clock once (its journal counts as a dead run's).
    /// Returns the run's id.
    ///
    /// A dry run writes nothing: it only names the run it would give up.
    pub async fn abandon(&self) -> Result<Option<uuid::Uuid>> {
        let Some((job, plan)) = self.unfinished().await? else {
            return Ok(None);
        };
        if !self.config.dry_run {
            job.abandon().await?;
            let now = self.catalog.clock().now_ms();
            lease::release_for(self.catalog.warehouse(), plan.run_id, now).await?;
        }
        Ok(Some(plan.run_id))
    }

    /// This collector with a budget of at most `budget` (the smaller of it and the
    /// configured one): what an invocation with a deadline runs.
    pub fn within(&self, budget: std::time::Duration) -> GarbageCollector {
        let mut within = self.clone();
        within.config.budget = Some(
            self.config
                .budget
                .map_or(budget, |configured| configured.min(budget)),
        );
        within
    }
}
