//! Garbage collection: deleting warehouse objects no catalog pointer can reach, after the
//! reader-safety retention period, without ever deleting a live one.
//!
//! ```no_run
//! use std::sync::Arc;
//! use parqdb_catalog::Catalog;
//! use parqdb_catalog::gc::{self, GarbageCollector, GcConfig};
//! use parqdb_catalog::store::LocalStore;
//! use parqdb_catalog::Warehouse;
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
//! println!("{}", serde_json::to_value(&report).unwrap_or_default());
//! # Ok(()) }
//! ```
//!
//! # Glossary
//!
//! | noun | meaning | where |
//! |---|---|---|
//! | **run** | one collection, planned once and resumable anywhere; its files are under `_gc/runs/<run>/` | `job` |
//! | **plan** | what a run fixed when it started: decision time, rules, walk, partitions, dead runs | `job::Plan` |
//! | **step** | one unit of a run's work an invocation performs: plan, scan, verify, delete, finish | `GcStep`, `step` |
//! | **walk** | a read of every pointer record and of the metadata its roots name; yields the reachable set `R` | `reachability` |
//! | **partition** | a key range of `indexes/` that one worker scans and deletes in | `job`, [`GcConfig::partitions`] |
//! | **page** | one listing page of a partition (the unit of checkpointed work) and its checkpoint | `job`, `scan` |
//! | **ledger** | the collector's bookkeeping: one **entry** per unreachable object, a directory of **facts** under `_gc/ledger/<object>/` | `ledger`, `warehouse::layout` |
//! | **clock** | a fact: the end of a walk that found the object unreachable; retention runs from it | `rules::retention_clock` |
//! | **condemnation** | a fact: retention elapsed at this time; deletion waits the condemnation delay after it, and publication refuses the object | `rules::decide`, `catalog::publication` |
//! | **doomed** | an object a scan decided to delete; kept in the page's checkpoint until the delete step | `scan`, `delete` |
//! | **journal** | a run's record of every pointer record's commit id at its walk, and its finish mark | `journal` |
//! | **finish mark** | `<run>.<landed-ms>.done`: the run finished; only facts landed before it are trusted | `finish`, `rules::trusts` |
//! | **dead run** | a run that can no longer be resumed; none of its facts is trusted | `job`, `finish` |
//! | **change log** | the catalog's entry for every pointer write, written before it; the evidence that dates republication | `catalog::changelog`, `history` |
//! | **lease** | the generation file that makes one run the current one; proved (**fenced**) before every delete batch and ledger write | `lease` |
//! | **decision time** | the plan's `now`: grace, retention and delays are measured against it in every step | `job::Plan::now_ms` |
//! | **floor** | the earliest walk a clock may come from (ownership epoch, unexplained records, a run started since the previous finished one that never finished; never earlier than the previous finished run's) | `rules::floor` |
//! | **verify walk** | the second walk, after every scan and before any delete | `verify::verification_walk` |
//! | **sweep** | clearing ledger entries of objects that are reachable again | `delete`, `finish` |
//! | **deletion record** | the ledger files of what one page of deletes removed, `_gc/deleted/…`: a deleted object's condemnation stays until a later run **releases** the record, the grace period after it landed | `release` |
//! | **nested root** | a subtree that shows another catalog's structure; nothing below it is deleted | `warehouse::layout::nested_root` |
//!
//! # What a run does
//! A run is a durable job: its plan, its walks and a checkpoint of every page of work live
//! in the warehouse under `_gc/runs/<run>/` (see the `job` submodule), so a run may span
//! many invocations and many workers, stop anywhere — at its deadline, on a store error,
//! killed at any instruction — and go on where it stopped. It proceeds in five **steps**
//! (`GcStep`; each stops at a page boundary once its budget is spent, and the next call of
//! the same step goes on from the last checkpoint):
//!
//! 1. **Plan** — **ownership** ([`verify_ownership`]): the warehouse's `_catalog-owner.json`
//!    must name this catalog's id at its store's location (else `WAREHOUSE_NOT_OWNED`, or
//!    `INVALID_CONFIGURATION` without a marker; every later step checks it again), and the
//!    warehouse must not lie inside another warehouse's managed prefixes. The unfinished run, if there is one, is resumed; else a new run takes the
//!    **lease** (a busy lease makes the step answer [`GcStatus::Skipped`]), **walks** the
//!    catalog (`reachability`: every pointer record; the metadata of every `live` and
//!    `moving` record, and of tombstones younger than the clock-skew allowance, is a root;
//!    everything reachable from the roots, through symbolic links too, is the reachable set
//!    `R`), then reads the **change log** (`history`: what the catalog published around
//!    the walk, and whether it explains every record). It splits `indexes/` into
//!    partitions, writes its plan and its journal (every record's commit id). Then
//!    `metadata/`, page by page, in two passes: read every unreachable metadata file and
//!    record what it names (rule P); then decide each.
//! 2. **Scan** each partition of `indexes/` (workers in parallel), page by page, streaming,
//!    through the warehouse's listing (never following symbolic links): for each
//!    unreachable object the run decides its retention clock (`rules`), condemns it once
//!    retention has elapsed (in the `ledger`), and records the doomed ones in the page's
//!    checkpoint. The page's clocks (started by this walk or carried from the previous
//!    finished run) are written beside it (`carried`); the next run reads them as it
//!    lists the same names. (The clocks of `metadata/` are clock files of the `ledger`.)
//! 3. **Verify**: walk the catalog and read the change log again, once every partition is
//!    scanned and right before deleting; anything reachable again, published since, or in
//!    a catalog whose records the log cannot explain is kept. Then delete the doomed
//!    metadata files.
//! 4. **Delete** each partition's doomed objects in batches (workers in parallel), proving
//!    the lease before every batch, and write a **deletion record** of each page's deletes
//!    (their entries stay: publication must go on refusing what was condemned); then
//!    **sweep** the partition's ledger: clear the entries of objects reachable at either
//!    walk (the scan already cleared those of other objects gone: it reads each page's
//!    entries with one ranged listing of the ledger, which shows them); then **release**
//!    the deletion records older than the grace period (`release`).
//! 5. **Finish**: sweep the ledger of `metadata/`; mark the dead runs its plan listed
//!    dead; mark the run finished; prune the change-log entries settled for its walk;
//!    release the lease.
//!
//! [`GarbageCollector::collect`] runs the steps in one process with
//! [`GcConfig::workers`] partitions at a time (the CLI); the `gc` Lambda function runs one
//! step per invocation for the `gc-cycle` state machine (`GcStep`,
//! [`run_scheduled_within`]).
//!
//! Memory holds the reachable sets of the two walks, what the change log republished, and
//! what unreachable metadata names (proportional to live data, metadata and recent
//! commits, not to the warehouse), and one page of objects; everything else is streamed.
//!
//! # Names
//! Every object is compared by its **name**: its raw key below the warehouse root, exactly
//! as a listing returns it and as any engine writing it spells it
//! (`warehouse::object_name`). A location in metadata
//! (`indexes/ü b/1/ivf_postings/`) names the object another engine wrote there without any
//! percent-encoding applied or removed; a metadata location URI is decoded once into its
//! name (`Warehouse::relative`) and stored in one
//! canonical form. A listed name that could be another spelling of a reachable name (an
//! earlier version of this crate percent-encoded some characters) is kept. A source-table
//! location, written by another engine, counts in every spelling an engine may use
//! (`NameReader::names_of_location`), and
//! register refuses one inside the managed prefixes in any of them.
//!
//! # The safety argument
//! The spec starts retention "when a published object loses catalog reachability". The
//! collector therefore never estimates when a loss happened: **a retention clock is the
//! end of a walk that found the object unreachable**, and it stands only while no durable
//! evidence the catalog wrote says the object may have been reachable after that walk
//! began. The evidence, and nothing else: the walks themselves, the **change log** the
//! catalog writes before every pointer write (`catalog::changelog`), the journal of record
//! states of the previous finished run, the ownership marker's epoch, and the ledger's own
//! facts. Each rule is one function; the model check (`tests/it/gc/model.rs`) drives the same
//! functions through every interleaving of writers, operators, crashes and runs of a small
//! configuration.
//!
//! An object `o` under a managed prefix is deleted by a run at time `now` only if all
//! hold:
//!
//! | rule | statement | enforced by | model | tests |
//! |---|---|---|---|---|
//! | **O** ours | `o` is a regular file reached without a symbolic link, a mount point (another file system, or a bind mount of this one: round 79) or another file system, below the warehouse directory the process opened, through directories opened and checked one by one and unlinked from the one checked (`warehouse::unlink`, rounds 89–90), and no listed object shows it lies in a nested catalog structure (an ownership marker, `_catalog/`, `_gc/`, pointer records) | `warehouse::unlink`, `warehouse::mounts`, `warehouse::layout::nested_root`, `scan::Nested` | — (layout, not protocol) | `gc::hostile_layouts` classes 3–4, `gc::simulation` hostile layouts |
//! | **U** unreachable | no spelling of `o`, nor of any path a symbolic link leads it to, is covered by `R` of the run's first walk nor of its verification walk; a reference covers itself and its subtree on a segment boundary | `reachability::observe`, `RefMap::covers_any_spelling`, `Warehouse::link_targets`, `NameReader::names_of_location` | `Run::reachable`, `reachable_again` | `gc::durable_evidence::class1_*`, `class4_*`, `gc::scenarios::sibling_prefixes_are_not_confused` |
//! | **G** grace | `last_modified(o) + grace + skew <= now`: in-flight writers own young files | `rules::decide` | `TIMING.grace_ms` | `gc::scenarios::orphans_of_a_crashed_commit_wait_for_grace_plus_retention`, `gc::directory_references::tables_copied_in_with_old_times_*` |
//! | **W** walks date losses | a clock is the end of a walk that found `o` unreachable; nothing (a record's time, a quiet catalog, a first sighting) dates a loss earlier | `rules::retention_clock` | `Assess` | `gc::durable_evidence::class3_*`, `class5_*` |
//! | **L** republication restarts | a clock stands only if its walk started at least `settle` (the publish window plus twice the skew) after every change-log entry whose publication names `o`, or whose write replaces a location naming `o` (a commit's base, a dropped or moved record: current until the write, even where no walk saw it, as after a restored backup or a hand edit): a register or commit logs its entry before its write and lands within its window, so a later walk saw it | `rules::earliest_walk`, `history::read`, `catalog::changelog` | `Publish`, `Land`, `State::read_log` | `gc::durable_evidence::class2_*` |
//! | **X** unexplained records restart every clock | a record whose commit id neither the previous finished run's journal lists at that key nor the change log announces (a restored backup, a hand edit, a stale store re-homed, a writer of an earlier version), or a record that run saw and that is gone or replaced by one that does not descend from it (the record's chain does not remember the commit seen there: another copy under a mount point, a register while it was away, a backup put back; a full chain descends if the commit links lead from its oldest remembered commit back to the one seen: round 111, F3), voids every clock from walks before the current one; such a record is **away**, and stays so in every run (the journal carries it) until a record that remembers it is back or an adoption (E) forgives it — only a record the adopting store lacks or holds without descending from it, listed (a key and the commit seen there, never a whole key: round 115, F1) before its marker (`_gc/adoptions/`): a clone of the store reads the owner's adoption too (round 114, F1) | `rules::explained`, `rules::floor`, `history::read`, `reachability::read_records`, `adoption::forgiven` | `Restore`, `HandEdit`, `Start::Vanished` | `gc::durable_evidence::class3_*`, `gc::hostile_layouts::class4_a_record_away_*`, `class4_a_record_put_back_from_a_backup_is_away_until_adopted`, `gc::untaken_publications::redteam111_*`, `redteam114_*`, `redteam115_*` |
//! | **N** untaken publications keep | a settled change-log entry of the current epoch whose write this pointer store never took (no record at its key remembers one of its commit ids, and no write the store took replaced what it published there) keeps what it publishes, at every walk, and is never pruned: its writer stopped between entry and write, or a copy of the store that the ownership check cannot tell from it (a cloned disk, a backup restored into its directory, a replica) took it; a writer that certainly wrote nothing withdraws its entry; `init --adopt` (E) releases the settled entries it found in the log whose write the adopting store did not take (listed before its marker, `_gc/adoptions/`), never by comparing clocks; an entry counts as taken only by a record as the run's walk saw it (round 114, F2) | `untaken::untaken`, `history::read`, `finish::tidy_up`, `Prelogged::withdraw` | — | `gc::untaken_publications::*` |
//! | **E** ownership epoch | no clock from a walk before the ownership marker's `created-ms`: adopting a warehouse (or re-homing its store) restarts every clock, and forgets records away (the operator's word that the pointer store as it is now is the catalog); plans and journals record the epoch they were made in, so what an adoption covers is decided by epochs, never by comparing clocks, and a run planned in an earlier epoch is never resumed; `init` and a first write refuse a warehouse that holds another system's data | `rules::floor`, `adoption::adopt`, `ownership::earlier_use`, `Plan::superseded`, `plan::plan_run` | `Adopt` | `gc::durable_evidence::class3_adopting_*`, `class5_*` |
//! | **T** trusted facts | a clock fact counts only if it is the current run's, or its run finished and the fact landed no later than the run's finish mark (a dead run's facts, and a write that landed after its run finished, were never looked at by later runs); and none from a walk before the current run's if a run started since the previous finished one never finished, or where no run has finished, if any run came before (what its walk found reachable, through links no log records too, is lost with it: the floor, which every later floor keeps; round 139; such a run, if the plan did not count it, supersedes the current run, checked at every opening, before every delete batch and before the finish), nor before the previous finished run's floor (round 133); a run that is neither finished nor marked dead counts as started since the previous one whatever its time (every finished run marks the runs it counted: round 134); no fact of a run the plan counted as dead, even if its finish mark lands later (round 137; a run whose stamped finish mark landed stays finished, marked dead or not: round 138), nor, for any plan, of a run that finished late, its finish mark landing after a later run's journal (the store's times; a floor compares walks across machines' clocks: round 140); and no clock file of a run before the current one where the previous finished run reached the object at either walk or carries its clocks on its pages (its sweep cleared the entry, or its pages carry every clock that stood: a file found there landed after a sweep, however the store dated it, which may tie or step back within the skew: round 141; `metadata/` carries its clocks on the plan's assessed pages for this: round 143) | `rules::trusts`, `ledger::Trust`, `RunContext::trust`, `rules::floor`, `carried::started_between`, `Plan::superseded`, `Invocation::still_current`, `LedgerEntry::trusted_clock`, `CarriedReader::superseding`, `Previous::reached` | `LandInFlight`, `Crash`, `Link` | `gc::superseded_runs::a_late_clock_write_behind_finished_runs_does_not_backdate_retention`, `gc::carried_attack::j1_*`, `g1_*` to `g4_*`, `f1_*`, `k1_*`, `gc::late_finishes::r137_*` to `r141_*`, `gc::stale_metadata_clocks::r143_*`, `gc::journal::tests::a_finish_mark_landing_after_a_later_runs_journal_is_late` |
//! | **R** retention | `clock(o) + retention <= now` | `rules::decide` | `TIMING.retention_ms` | `gc::scenarios::a_dropped_index_is_collected_only_after_retention` |
//! | **C** condemned | a condemnation `c >= clock(o) + retention` is in the ledger and `c + B <= now` (`B` = [`GcConfig::condemn_delay`], at least twice the publish window); register and commit refuse a condemned metadata file, and a new index table or family reference (or what a new family reference names, as the walk reads it) with anything condemned at or below it (through links too, in every spelling on disk; one holding a link to a whole managed prefix or the root is refused), and an entry logged `settle` after the condemnation belongs to a refused publication; a deleted object's condemnation stays until the grace period plus twice the skew after its deletion record (a publication of metadata written before the deletes completes by then: assumption 3), and a condemnation is acted on only within `rules::CONDEMNATION_HORIZON_MS` | `rules::decide`, `rules::refused`, `rules::deletion_released`, `release`, `catalog::publication`, [`GcConfig::validate`] | `Publish` (refused), `Release` | `gc::scenarios::a_re_registration_racing_the_run_never_leaves_a_dangling_pointer`, `a_condemned_metadata_file_cannot_be_registered_again_and_is_collected`, `metadata_written_during_the_deleting_run_is_refused_after_it` |
//! | **V** verified | right before deleting, the verification walk and a fresh read of the change log: reachable again, published since the clock's walk, or records unexplained → kept; and before every delete batch, the walk's family references that named no file are read again, and the directories it read as family files listed again: what a file written there since names → kept | `verify::verification_walk`, `rules::still_deletable`, `dangling` | `Verify`, `Delete` | `gc::scenarios::concurrent_runs_never_delete_live_files`, `a_file_first_written_at_a_dangling_reference_during_the_deletes_keeps_what_it_names` |
//! | **P** named by existing metadata | no file under `metadata/` that exists names `o` (a valid file: its tables, centroids and sources; any other: every string in it that names an object, but never a whole managed prefix; one whose reading gave up, so that it may name anything, keeps all of `indexes/` but of `metadata/` only what it names as written, so such files never keep one another): metadata is deleted before what it names | `metadata::MetadataPage::keep`, `refs::Protected`, `metadata::named::read_parsed` | `State::referenced` | `gc::directory_references`, `gc::durable_evidence::class8_*` |
//! | **S** log settles | a finished run prunes only the change-log entries settled for its own walk (and taken, N), after its finish mark: every entry a later decision needs is still there, or its effect is in that run's journal | `rules::settled`, `finish` | `Finish` | `catalog::changelog` unit tests |
//! | **F** fenced | every delete batch and every ledger write comes after a fresh proof that the run holds the newest lease generation; a lease is bounded (6 hours), an implausibly distant expiry is taken over, and `gc abandon` breaks one (fenced: the holder stops at its next renewal) | `lease`, `lease::fence` | one current run; `Crash` | `gc::durable_evidence::class6_*`, `gc::hostile_layouts` paused runs |
//!
//! Objects the ledger cannot track (a name whose mirror would exceed the store's key
//! limit) are kept and reported ([`GcCounts::kept_unmirrorable`]), and collection goes on
//! around them. A step that fails because another invocation finished its run meanwhile
//! reports the finished run, with a warning, not a failure.
//!
//! **Assumptions** (what no collector-side rule can check):
//! 1. Clocks of writers, the store and the collector differ by at most
//!    [`GcConfig::max_clock_skew`].
//! 2. Every writer of the pointer store is this catalog (of this version): anything else
//!    is an unexplained record (X), which is seen if it persists until a walk or shows
//!    in a record's chain, and whose location the next logged write on that record names
//!    as replaced (L). A change undone by hand before the next walk (a backup restored
//!    and restored back) is invisible. A restored backup names only files a pointer
//!    reached within the retention: one older than that may name collected files, which
//!    no collector can prevent.
//! 3. A register or commit completes within the grace period of the first file it wrote,
//!    and writers never reuse an object path. (A writer may pick up files that have been
//!    unreachable for a long time, a backup's metadata or an old index's tables, and
//!    publish them under a new metadata file: until they are condemned a walk sees the
//!    publication (C), and once they are, publication refuses them.) A file first written
//!    at a family reference that named no file at the verification walk, or in metadata
//!    published since, is read right before every delete batch, and what it names is kept
//!    (`dangling`); one that lands between that read and the batch's delete request is
//!    read by no check, and what it names may be deleted under the live pointer
//!    (docs/gc-attacks.md, F1b). A family file that was valid metadata at the
//!    verification walk is not read again: it is written once, whole (round 63, F1, F2).
//! 4. A request already sent when a machine sleeps may land after its publish window; no
//!    client-side clock can prevent it (see `catalog::publication`).
//! 5. A local warehouse lives on a case- and normalisation-sensitive file system (on
//!    macOS HFS+, casefolded ext4 or SMB, metadata naming `indexes/ABC/` reads files the
//!    collector lists as `indexes/abc/`), and nobody swaps a symbolic link into a path
//!    while a run deletes there; a bind mount made before the verification walk is read
//!    like a link (the same directory at two places, or what the mount table says it
//!    shows, at any path a reader reads or above it: round 85), a path an overlay mount
//!    serves (other than the warehouse's own) may show anything (round 86), but a
//!    container's root file system (an overlay at `/`) shows its own files only (its
//!    runtime made it from image layers no path in the container shows; a warehouse any
//!    other overlay serves deletes nothing: round 87), and the mounts
//!    readers see are the collector's (one mount namespace: a mount only a reader's
//!    namespace holds is not seen; round 80, N1). A file system that shows another
//!    directory by rules of its own (FUSE's `bindfs`, an NFS export of the same machine
//!    mounted back) is not seen either. A link is read where it lies when the verification walk
//!    passes (one made in a live table after that walk keeps nothing for that run's
//!    deletes), and a directory moved while the walk runs is read where it went, unless
//!    it moved twice, each move between the walk's looks, or within the clock tick (a few
//!    milliseconds; seconds on file systems with coarse timestamps) in which the directory
//!    it went to was listed (`warehouse::link_search`).
//!    A link to a whole managed prefix or the root names nothing (one in garbage must not
//!    stop collection), but one a reader of a kept table reaches keeps everything it
//!    leads to, and one a reader of a table only existing metadata names (rule P) keeps
//!    all of `indexes/` there (`wide_links`; round 45's K10, rounds 75–76: a reader who
//!    reaches a whole prefix reads the links there too); publication refuses a new table
//!    holding one.
//!    The catalog's own bookkeeping (`_gc/`, `_catalog/`) is
//!    in real directories (a link there stops the collector with `STORE_REFUSED`); links
//!    in a local pointer store are followed, and one that leads nowhere is an error. A
//!    warehouse over a store of the caller's (`Warehouse::with_local_dir`) is checked
//!    through open directories and then deleted by that store, by path: a directory
//!    swapped in between is not seen there (`Warehouse::local` unlinks through the
//!    directory it checked: round 90).
//! 6. A reader of a live index reads metadata (a JSON document in every format version)
//!    and the locations it names. The collector may read every file under `metadata/`:
//!    one it may not read stops every run until it can (it may be metadata that names
//!    anything; round 92, F3; so does one archived or encrypted with a key it lacks), and
//!    delete every unreachable one that may name anything: a refusal stops the run, naming
//!    it (it keeps all of `indexes/` while it exists; round 100, F1). It may list every
//!    directory under the managed prefixes: one it may not list pauses every delete (a
//!    link there may lead anywhere; round 66, and round 93, N1). A family reference's
//!    file that is not valid metadata (another format or version, written half) may name
//!    anything, by rules no catalog knows (where its strings lead, on which file system,
//!    from which directory: rounds 35–62): publication refuses it, and one written after
//!    its reference was published
//!    keeps everything while it is live (the walk says so; the delete guard stops). The
//!    same holds for the files that open a JSON object (as metadata does) in a directory a
//!    family reference leads to, or in an index table placed under `metadata/` (a link
//!    there may name anything: `metadata::named::files_below`); other files there are
//!    data (round 64, F2). A stray file no pointer reaches is read
//!    for what it may name, every JSON string in every spelling (encodings, escapes, lists
//!    in one string, relative to the root and to the file, where it leads outside a local
//!    warehouse); text of other formats (lists of names, YAML, compressed or encoded
//!    data) names nothing (docs/gc-attacks.md, round 36).
//! 7. One pointer store per catalog id. A copy the ownership check cannot tell from it (a
//!    cloned disk sharing the warehouse) is caught only by what the copies write: the
//!    original's writes after the copy are kept while the copy lacks them (N), and a
//!    record the previous run saw that the walked store does not descend from is away
//!    (X). What the original still points at from before the copy is not: a copy that
//!    commits over it or drops it and collects is, to its collector, the one store moving
//!    on (the same records, log and links as if the original had written), and after the
//!    retention its collector deletes what the idle original still names (round 116,
//!    F1). `init --adopt` is the operator's word that no other copy writes.
//!
//! The history of the attacks that shaped these rules is in `docs/gc-attacks.md`.
//!
//! # Runs of many invocations
//! A run is decided at its plan: its decision time (grace, retention and condemnation
//! delays are measured against it in every later invocation, and an invocation whose clock
//! is behind judges by its own, earlier time), its rules (a resumer takes for each the more
//! conservative of the plan's and its own configuration), its walk and what the change log
//! said then. It is sound to go on with it much later: its clocks are its walk's end, which
//! stays true; deletion needs a condemnation made by an earlier run at least `B` before the
//! decision time, and the verification walk and log read come after every scan; and every
//! partition is scanned whole before anything of the run is deleted, so a nested catalog
//! structure found anywhere keeps everything below it. An unfinished run is always resumed,
//! never restarted. Only a run that cannot be resumed (its plan lost or damaged, of a run
//! format older than this release resumes, planned by another catalog, superseded by a run
//! that finished after it was planned, or given up with `gc abandon`) is dead: the next
//! finished run marks it so, and none of its facts is trusted (T). A run of a newer run format than this release resumes is neither
//! resumed nor given up: every step fails with `UNSUPPORTED_FORMAT_VERSION` until the
//! release that planned it is back (see `job::RESUMED_JOB_VERSIONS` for how a release
//! changes the format without giving up any run).
//!
//! Every file of a run is written once with create-if-absent; two workers that do the same
//! page (a retried invocation, a paused one that wakes) agree on the first one written, and
//! every step is idempotent, so a crash loses at most the page under way.
//!
//! # Liveness
//! With a run finishing at least every `P` (a run's duration counts into `P`: it decides
//! by its plan's time): garbage unreachable since `L` is deleted by
//! `max(L, last_modified + grace + skew) + retention + B + 3P`, plus one `P` per level of
//! existing metadata that references it (P); a publication logged at `t` naming it moves
//! `L` to `t + settle`; records the log cannot explain, and a run planned since the
//! previous finished run that never finished (given up: what its walk found reachable is
//! lost with it, round 133), move it to the next finished run. Killed invocations cost at
//! most the page under way. The simulation test checks this bound after every step.
//!
//! # The run lease
//! See the `lease` submodule docs: generations `_gc/lease/<gen>.json` written with
//! create-if-absent; expiry plus renewal (with proof of holding the newest generation)
//! before each delete batch and ledger write; at most 6 hours.
//!
//! # Nested roots
//! See the warehouse's `layout` submodule docs for the catalog structures that mark a
//! subtree of the managed prefixes as somebody else's.

mod adoption;
mod assess;
mod carried;
mod collect;
pub(crate) mod config;
mod dangling;
mod delete;
mod finish;
mod history;
mod job;
mod journal;
mod lease;
pub(crate) mod ledger;
mod metadata;
mod plan;
pub(crate) mod reachability;
mod refs;
mod release;
mod report;
#[cfg(feature = "test-util")]
#[doc(hidden)] // The pure rules, for the model check (tests/it/gc/model.rs).
pub mod rules;
#[cfg(not(feature = "test-util"))]
pub(crate) mod rules;
mod run;
mod scan;
mod scheduled;
mod status;
mod step;
mod untaken;
mod verify;
mod wide_links;

use std::sync::Arc;

pub use crate::catalog::ownership::{OwnershipMarker, claim, verify_ownership};
pub use adoption::adopt;
pub use config::GcConfig;
pub use reachability::RootStats;
#[doc(hidden)] // Reported by the step API of the gc function.
pub use report::RunProgress;
pub use report::{ActionKind, GcAction, GcCounts, GcPhase, GcProgress, GcReport, GcStatus, Tally};
#[doc(hidden)] // The `gc` Lambda function's scheduled event, for the handler layer.
pub use scheduled::{run_scheduled, run_scheduled_within};
pub use status::{GcState, status};
#[doc(hidden)] // The step API of the gc function (Step Functions), not for library users.
pub use step::{GcStep, StepOutcome};

use crate::catalog::Catalog;
use crate::error::Result;

/// A progress callback.
pub(crate) type ProgressFn = Arc<dyn Fn(&GcProgress) + Send + Sync>;

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

    /// Give up the unfinished run, if there is one: it is never resumed, the clocks it
    /// recorded count for nothing (its journal counts as a dead run's), and the next run
    /// starts every retention clock again (what its walk found reachable is lost with
    /// it: round 133); and break the run lease, whoever holds it
    /// ([`GarbageCollector::break_lease`]). Returns the run's id.
    ///
    /// A dry run writes nothing: it only names the run it would give up.
    pub async fn abandon(&self) -> Result<Option<uuid::Uuid>> {
        verify_ownership(&self.catalog).await?;
        // A run planned by a newer release too: the operator decides to give it up.
        let unfinished = self.newest_unfinished().await?;
        let run = unfinished.as_ref().map(|(journal, _, _)| journal.run_id);
        if self.config.dry_run {
            return Ok(run);
        }
        if let Some((_, job, _)) = &unfinished {
            job.abandon().await?;
        }
        self.break_owned_lease().await?;
        Ok(run)
    }

    /// Break the run lease, whoever holds it (a run killed before its plan, or one whose
    /// clock ran far ahead, leaves a lease nothing else releases): the holder's workers
    /// stop at their next renewal, before their next delete batch, and the next run may
    /// start at once. Safe while a run is under way: deletion is fenced by the lease's
    /// generation, and a broken run is resumed by the next one. Returns the holder.
    ///
    /// A dry run writes nothing: it only names the holder. Only the warehouse's owner may
    /// break it, as only the owner may abandon a run (GC round 106: a stranger's catalog
    /// gave up the owner's runs, again and again).
    pub async fn break_lease(&self) -> Result<Option<uuid::Uuid>> {
        verify_ownership(&self.catalog).await?;
        self.break_owned_lease().await
    }

    async fn break_owned_lease(&self) -> Result<Option<uuid::Uuid>> {
        let warehouse = self.catalog.warehouse();
        if self.config.dry_run {
            return Ok(lease::state(warehouse)
                .await?
                .filter(|state| !state.released)
                .map(|state| state.holder));
        }
        lease::break_lease(warehouse, self.catalog.clock().now_ms()).await
    }

    /// This collector with a budget of at most `budget` (the smaller of it and the
    /// configured one): what an invocation with a deadline runs.
    #[doc(hidden)] // The step API of the gc function (Step Functions), not for library users.
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
