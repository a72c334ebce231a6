//! One run: observe → scan and track → condemn → verify → delete → sweep.

use std::collections::HashSet;

use futures::{StreamExt, TryStreamExt};
use uuid::Uuid;

use super::GarbageCollector;
use super::config::{format_duration, millis};
use super::lease::{Acquired, Lease};
use super::ledger::{JournalRef, Kind, Ledger};
use super::nested::nested_root;
use super::reachability::{Observation, Parsed, observe, read_parsed, references_of};
use super::refs::RefMap;
use super::report::{ActionKind, GcPhase, GcProgress, GcReport, GcStatus, ScanRange};
use crate::catalog::ownership::verify_ownership;
use crate::error::{Error, ErrorKind, Result};
use crate::warehouse::{
    Deletion, INDEXES_DIR, ListItem, Listed, MANAGED_PREFIXES, METADATA_DIR, is_within,
};

/// How many skipped listing entries are named in the warnings.
const MAX_SKIP_WARNINGS: u64 = 20;

/// How often (in scanned objects) a progress event is emitted.
const PROGRESS_EVERY: u64 = 1000;

/// Where an unreachable object stands.
enum Verdict {
    Reachable,
    Grace,
    Retention,
    CondemnDelay,
    Referenced,
    Doomed(Doomed),
}

/// An object this run will delete unless verification says otherwise.
struct Doomed {
    relative: String,
    size: u64,
    clock_ms: i64,
    uuid: Option<Uuid>,
    ledger_files: Vec<String>,
    reason: String,
}

struct Assessed {
    relative: String,
    size: u64,
    verdict: Verdict,
    tracked: Option<String>,
    condemned: Option<String>,
}

/// A candidate under `metadata/`, held until every unreachable metadata file was read.
struct MetadataCandidate {
    listed: Listed,
    uuid: Option<Uuid>,
}

/// The run's lease (none for a dry run), shared by the scan's concurrent assessments.
type SharedLease<'l> = tokio::sync::Mutex<Option<&'l mut Lease>>;

/// The fixed inputs of one run's decisions.
struct Run<'a, 'l> {
    gc: &'a GarbageCollector,
    ledger: Ledger,
    /// Held while the run records ledger facts (see [`Run::hold_lease`]).
    lease: &'a SharedLease<'l>,
    /// The run's time: what it was called with. Grace, retention and condemnation delays
    /// are measured against it (a run that was paused judges by an earlier time, which
    /// only keeps more).
    now_ms: i64,
    /// The run's time when its first walk of the catalog had finished (the run's time plus
    /// what has elapsed since it was called). What that walk found unreachable was
    /// reachable at most until then, so a retention clock that starts on this walk's
    /// evidence never starts earlier. It equals `now_ms` unless the run was slow or paused
    /// (SIGSTOP, a long GC pause, a slow store) — and then what changed during the pause
    /// must not be dated back to `now_ms`.
    observed_ms: i64,
    /// The current time (the run's time plus what has elapsed since it started).
    clock: &'a (dyn Fn() -> i64 + Sync),
    journal: JournalRef,
    /// Incarnations of the previous finished run's journal.
    known: HashSet<Uuid>,
    /// Set when a run died since the previous finished run: every existing clock is raised
    /// to this run's observation (`observed_ms`).
    dead_run_reset: bool,
    dry_run: bool,
    retention_ms: i64,
    grace_ms: i64,
    delay_ms: i64,
    skew_ms: i64,
}

fn ms_text(ms: i64) -> String {
    ms.to_string()
}

impl Run<'_, '_> {
    /// Before recording a ledger fact: renew the lease once half of it has passed (in run
    /// time or on the monotonic clock). A run paused past its lease, whose lease another
    /// run took over (and which may have finished since, seeing objects reachable that this
    /// run's walk found unreachable), stops here instead of recording clocks from its stale
    /// walk.
    async fn hold_lease(&self) -> Result<()> {
        let mut lease = self.lease.lock().await;
        if let Some(lease) = lease.as_deref_mut() {
            let now = (self.clock)();
            if lease.needs_renewal(now) {
                GarbageCollector::fence(Some(lease), now).await?;
            }
        }
        Ok(())
    }

    /// The latest time evidence says `relative` may still have been reachable: a recent
    /// tombstone whose metadata references it; a run that died after possibly seeing it
    /// reachable; for a metadata file of index `uuid` whose recorded clock is `recorded`,
    /// an incarnation unknown to the previous finished run that may have published it
    /// since (same uuid, or — strict — any re-incarnation).
    fn evidence_floor(
        &self,
        observation: &Observation,
        relative: &str,
        uuid: Option<Uuid>,
        recorded: Option<i64>,
    ) -> Option<(i64, String)> {
        let evidence = &observation.evidence;
        let mut floor: Option<(i64, String)> = evidence
            .tombstone_refs
            .max_covering_any_spelling(relative)
            .map(|at| (at, format!("a tombstone dropped at {at} references it")));
        let Some(clock_ms) = recorded else {
            return floor;
        };
        if self.dead_run_reset && clock_ms < self.observed_ms {
            floor = Some((
                self.observed_ms,
                "an earlier gc run died after possibly seeing it reachable".to_owned(),
            ));
        }
        if let Some(uuid) = uuid {
            for incarnation in
                evidence.lineage_after(uuid, clock_ms, self.gc.config.strict_reincarnation)
            {
                if !self.known.contains(&incarnation.created_by)
                    && floor
                        .as_ref()
                        .is_none_or(|(at, _)| incarnation.updated_ms > *at)
                {
                    let why = if incarnation.index_uuid == Some(uuid) {
                        "a new incarnation of an identifier of the same index"
                    } else {
                        "a re-incarnated identifier"
                    };
                    floor = Some((
                        incarnation.updated_ms,
                        format!(
                            "{why} ({}) changed at {}",
                            incarnation.created_by, incarnation.updated_ms
                        ),
                    ));
                }
            }
        }
        floor
    }

    /// Decide one unreachable object, writing the ledger transitions (unless dry).
    async fn assess(
        &self,
        observation: &Observation,
        referenced: &RefMap,
        listed: &Listed,
        uuid: Option<Uuid>,
    ) -> Result<Assessed> {
        let size = listed.size;
        let mut assessed = Assessed {
            relative: listed.name.clone(),
            size,
            verdict: Verdict::Grace,
            tracked: None,
            condemned: None,
        };
        let relative = assessed.relative.as_str();
        let modified_ms = listed.last_modified_ms;
        // In-flight writers: never touch an object younger than the grace period.
        let past_grace_ms = modified_ms.saturating_add(self.grace_ms);
        if past_grace_ms.saturating_add(self.skew_ms) > self.now_ms {
            return Ok(assessed);
        }
        let entry = self.ledger.read(relative).await?;
        let mut ledger_files = entry.files.clone();
        let evidence = self.evidence_floor(observation, relative, uuid, entry.clock_start_ms);
        let (evidence, evidence_why) = match evidence {
            Some((at, why)) => (Some(at), why),
            None => (None, String::new()),
        };
        let clock_ms = match entry.clock_start_ms {
            Some(recorded) => recorded
                .max(past_grace_ms)
                .max(evidence.unwrap_or(i64::MIN)),
            None => {
                // First seen unreachable now; the catalog's quiet time (no record changed
                // since) proves it was unreachable since then already.
                let quiet = &observation.evidence;
                // Never before the walk that found it unreachable had finished.
                let observed = match quiet.quiet_since_ms {
                    Some(since) if quiet.quiet_usable => {
                        self.observed_ms.min(since.saturating_add(self.skew_ms))
                    }
                    Some(_) => self.observed_ms,
                    None if quiet.quiet_usable => i64::MIN,
                    None => self.observed_ms,
                };
                observed
                    .max(past_grace_ms)
                    .max(evidence.unwrap_or(i64::MIN))
            }
        };
        if entry.clock_start_ms != Some(clock_ms) {
            let reason = match entry.clock_start_ms {
                None => format!(
                    "first seen unreachable; retention clock starts at {}",
                    ms_text(clock_ms)
                ),
                Some(old) => format!(
                    "new evidence moves the retention clock from {} to {}: {evidence_why}",
                    ms_text(old),
                    ms_text(clock_ms)
                ),
            };
            if !self.dry_run {
                self.hold_lease().await?;
                ledger_files.push(
                    self.ledger
                        .record(relative, Kind::Clock, clock_ms, self.journal, &reason)
                        .await?,
                );
            }
            assessed.tracked = Some(reason);
        }
        let retention_ends = clock_ms.saturating_add(self.retention_ms);
        if self.now_ms < retention_ends {
            assessed.verdict = Verdict::Retention;
            return Ok(assessed);
        }
        // A condemnation counts only if made after this clock's retention window passed.
        // It is stamped with the time it is written (not the run's start), so register
        // and commit, which refuse condemned objects, are bounded against it.
        let condemned_ms = match entry.condemned_ms.filter(|at| *at >= retention_ends) {
            Some(at) => at,
            None => {
                let condemned_at = (self.clock)();
                let reason = format!(
                    "unreachable since {} and retention {} elapsed; deleted by a run at least {} from now if still unreachable",
                    ms_text(clock_ms),
                    format_duration(self.gc.config.retention),
                    format_duration(self.gc.config.effective_condemn_delay())
                );
                if !self.dry_run {
                    self.hold_lease().await?;
                    ledger_files.push(
                        self.ledger
                            .record(
                                relative,
                                Kind::Condemned,
                                condemned_at,
                                self.journal,
                                &reason,
                            )
                            .await?,
                    );
                }
                assessed.condemned = Some(reason);
                condemned_at
            }
        };
        // The same matching as reachability: an object another spelling of which an
        // existing metadata file names stays while that file exists.
        if referenced.covers_any_spelling(relative) {
            assessed.verdict = Verdict::Referenced;
            return Ok(assessed);
        }
        if self.now_ms < condemned_ms.saturating_add(self.delay_ms) {
            assessed.verdict = Verdict::CondemnDelay;
            return Ok(assessed);
        }
        let reason = format!(
            "unreachable since {}, retention {} elapsed; condemned at {}, condemnation delay {} elapsed",
            ms_text(clock_ms),
            format_duration(self.gc.config.retention),
            ms_text(condemned_ms),
            format_duration(self.gc.config.effective_condemn_delay())
        );
        assessed.verdict = Verdict::Doomed(Doomed {
            relative: relative.to_owned(),
            size,
            clock_ms,
            uuid,
            ledger_files,
            reason,
        });
        Ok(assessed)
    }
}

/// Where one run keeps its running state.
struct Tallies<'a> {
    report: &'a mut GcReport,
    doomed: Vec<Doomed>,
    max_doomed: usize,
    progress_mark: u64,
}

impl Tallies<'_> {
    fn scanned(&mut self, gc: &GarbageCollector, bytes: u64) {
        self.report.scanned.add(bytes);
        if self.report.scanned.objects >= self.progress_mark {
            self.progress_mark += PROGRESS_EVERY;
            gc.emit(GcProgress::Scanned {
                objects: self.report.scanned.objects,
                bytes: self.report.scanned.bytes,
            });
        }
    }

    fn record(&mut self, assessed: Assessed) {
        let Assessed {
            relative,
            size,
            verdict,
            tracked,
            condemned,
        } = assessed;
        let report = &mut *self.report;
        if let Some(reason) = tracked {
            report.tracked.add(size);
            report.act(&relative, size, ActionKind::Track, reason);
        }
        if let Some(reason) = condemned {
            report.condemned.add(size);
            report.act(&relative, size, ActionKind::Condemn, reason);
        }
        match verdict {
            Verdict::Reachable => report.reachable.add(size),
            Verdict::Grace => report.kept_by_grace.add(size),
            Verdict::Retention => report.kept_by_retention.add(size),
            Verdict::CondemnDelay => report.kept_by_condemn_delay.add(size),
            Verdict::Referenced => report.kept_by_reference.add(size),
            Verdict::Doomed(doomed) => {
                if self.doomed.len() >= self.max_doomed {
                    report.deferred.add(size);
                } else {
                    self.doomed.push(doomed);
                }
            }
        }
    }
}

/// What the scan knows besides the tallies: the nested subtrees found so far and the
/// skipped entries.
#[derive(Default)]
struct Scan {
    nested: RefMap,
    nested_roots: Vec<String>,
}

impl Scan {
    /// Note a listed object; `true` if it shows a nested catalog structure.
    fn note(&mut self, name: &str) -> bool {
        match nested_root(name) {
            Some(root) => {
                if !self.nested.covers(&root) {
                    self.nested_roots.push(root.clone());
                }
                self.nested.insert(root, 0);
                true
            }
            None => false,
        }
    }

    fn is_nested(&self, name: &str) -> bool {
        self.nested.covers(name)
    }
}

impl GarbageCollector {
    pub(crate) fn emit(&self, event: GcProgress) {
        if let Some(progress) = &self.progress {
            progress(&event);
        }
    }

    /// One run; see [`GarbageCollector::collect`].
    pub(crate) async fn run(&self, now_ms: i64) -> Result<GcReport> {
        let catalog = &self.catalog;
        let config = &self.config;
        let run_id = catalog.ids().uuid();
        let mut report = GcReport::new(run_id, now_ms, config);
        // Time elapses from the call on: a run paused anywhere after it (even before it
        // holds its lease) stamps its lease, condemnations and retention clocks with the
        // time that has really passed since.
        let clock_origin = catalog.clock().now_ms();
        let elapsed_now =
            || now_ms.saturating_add(catalog.clock().now_ms().saturating_sub(clock_origin).max(0));
        self.emit(GcProgress::Phase {
            phase: GcPhase::CheckOwnership,
        });
        let marker = verify_ownership(catalog).await?;
        report.catalog_id = Some(marker.catalog_id);

        let mut lease = None;
        if !config.dry_run {
            self.emit(GcProgress::Phase {
                phase: GcPhase::AcquireLease,
            });
            match Lease::acquire(
                catalog.warehouse(),
                run_id,
                elapsed_now(),
                millis(config.lease_duration),
            )
            .await?
            {
                Acquired::Held(held) => lease = Some(held),
                Acquired::Busy { holder, expires_ms } => {
                    report.status = GcStatus::Skipped;
                    report.skipped_reason = Some(format!(
                        "another gc run ({holder}) holds the lease until {expires_ms}"
                    ));
                    self.emit(GcProgress::Phase {
                        phase: GcPhase::Done,
                    });
                    return Ok(report);
                }
            }
        }
        let outcome = self
            .run_held(&mut report, lease.as_mut(), now_ms, run_id, &elapsed_now)
            .await;
        if let Some(lease) = lease
            && let Err(err) = lease.release(elapsed_now()).await
        {
            tracing::warn!(error = %err, "releasing the gc lease failed; it will expire");
        }
        outcome?;
        self.emit(GcProgress::Phase {
            phase: GcPhase::Done,
        });
        tracing::info!(
            run_id = %report.run_id,
            scanned = report.scanned.objects,
            reachable = report.reachable.objects,
            condemned = report.condemned.objects,
            deleted = report.deleted.objects,
            dry_run = config.dry_run,
            "gc run finished"
        );
        Ok(report)
    }

    /// Renew the lease (proving this run holds the newest generation) and check that the
    /// proof is fresh, right before a destructive step.
    async fn fence(lease: Option<&mut Lease>, now_ms: i64) -> Result<()> {
        let Some(lease) = lease else {
            return Ok(());
        };
        lease.renew(now_ms).await?;
        if lease.fresh() {
            Ok(())
        } else {
            Err(Error::new(
                ErrorKind::CommitConflict,
                "this gc run was paused for longer than half its lease while renewing it; stopping before acting on it",
            ))
        }
    }

    async fn run_held(
        &self,
        report: &mut GcReport,
        lease: Option<&mut Lease>,
        now_ms: i64,
        run_id: Uuid,
        elapsed_now: &(dyn Fn() -> i64 + Sync),
    ) -> Result<()> {
        let catalog = &self.catalog;
        let config = &self.config;
        let warehouse = catalog.warehouse();
        let registry = catalog.registry();
        let concurrency = config.io_concurrency.max(1);
        let ledger = Ledger::new(warehouse);
        let journals = ledger.journal_state().await?;
        let known = match journals.previous {
            Some(previous) => ledger.read_journal(previous).await?,
            None => HashSet::new(),
        };
        if !journals.dead.is_empty() {
            report.warnings.push(format!(
                "{} earlier gc run(s) did not finish; every tracked object's retention clock restarts now",
                journals.dead.len()
            ));
        }
        let lease: SharedLease<'_> = tokio::sync::Mutex::new(lease);
        let mut run = Run {
            gc: self,
            ledger,
            lease: &lease,
            now_ms,
            observed_ms: now_ms,
            clock: elapsed_now,
            // Journals are ordered by their time: a run's journal sorts after every
            // earlier run's (runs are serialised by the lease), even when the run times
            // tie or the clock went backwards, so `previous` is the run that finished
            // last and a budgeted run resumes where that one stopped.
            journal: JournalRef {
                run_ms: journals
                    .latest_ms
                    .map_or(now_ms, |latest| now_ms.max(latest.saturating_add(1))),
                run_id,
            },
            known,
            dead_run_reset: !journals.dead.is_empty(),
            dry_run: config.dry_run,
            retention_ms: millis(config.retention),
            grace_ms: millis(config.grace),
            delay_ms: millis(config.effective_condemn_delay()),
            skew_ms: millis(config.max_clock_skew),
        };

        // 1. Reachability from every pointer record.
        self.emit(GcProgress::Phase {
            phase: GcPhase::ComputeReachability,
        });
        let observation =
            observe(catalog, now_ms, run.retention_ms, run.skew_ms, concurrency).await?;
        run.observed_ms = elapsed_now().max(now_ms);
        let run = run;
        report.roots = observation.roots.clone();
        report.warnings.extend(observation.warnings.iter().cloned());
        if !config.dry_run {
            // The journal every ledger clock written by this run refers to.
            run.ledger
                .write_journal(run.journal, &observation.evidence.all_incarnations)
                .await?;
        }
        let reachable = &observation.reachable;

        let mut tallies = Tallies {
            report,
            doomed: Vec::new(),
            max_doomed: config.max_deletes_per_run,
            progress_mark: PROGRESS_EVERY,
        };
        let mut scan = Scan::default();

        // 2. `metadata/`: read every unreachable file; whatever an existing unreachable
        //    metadata file references stays until that file is gone (it could be
        //    registered again and must then be complete).
        self.emit(GcProgress::Phase {
            phase: GcPhase::ScanMetadata,
        });
        let mut referenced = RefMap::default();
        let mut candidates: Vec<MetadataCandidate> = Vec::new();
        {
            let mut listed = warehouse
                .list(METADATA_DIR)
                .map(|item| async move {
                    let listed = match item? {
                        ListItem::Object(listed) => listed,
                        skipped @ ListItem::Skipped { .. } => {
                            return Ok::<_, Error>((Err(skipped), None));
                        }
                    };
                    if reachable.covers_any_spelling(&listed.name)
                        || nested_root(&listed.name).is_some()
                    {
                        return Ok((Ok(listed), None));
                    }
                    let parsed = read_parsed(warehouse, registry, &listed.name).await?;
                    Ok((Ok(listed), Some(parsed)))
                })
                .buffer_unordered(concurrency);
            while let Some(item) = listed.try_next().await? {
                let listed = match item {
                    (Err(skipped), _) => {
                        skip(tallies.report, skipped);
                        continue;
                    }
                    (Ok(listed), parsed) => (listed, parsed),
                };
                let (listed, parsed) = listed;
                tallies.scanned(self, listed.size);
                if scan.note(&listed.name) {
                    continue; // counted as nested below
                }
                match parsed {
                    None => tallies.report.reachable.add(listed.size),
                    Some(Parsed::Missing) => {} // deleted since it was listed
                    Some(Parsed::Metadata(metadata)) => {
                        let refs = references_of(&metadata, registry, warehouse);
                        for reference in refs.direct.into_iter().chain(refs.family) {
                            // (P) keeps what a file names, never the file itself.
                            if !is_within(&listed.name, &reference) {
                                referenced.insert(reference, 0);
                            }
                        }
                        candidates.push(MetadataCandidate {
                            listed,
                            uuid: Some(metadata.index_uuid()),
                        });
                    }
                    Some(Parsed::Opaque {
                        why,
                        foreign_format,
                        references,
                    }) => {
                        for reference in references {
                            // Never the file itself; and a file of no known format that
                            // merely contains the string `indexes` or `metadata` does not
                            // hold a whole managed prefix (one of a newer format does).
                            let whole_prefix = MANAGED_PREFIXES.contains(&reference.as_str());
                            if !is_within(&listed.name, &reference)
                                && (foreign_format || !whole_prefix)
                            {
                                referenced.insert(reference, 0);
                            }
                        }
                        if foreign_format {
                            tallies.report.kept_unknown_format.add(listed.size);
                            tallies.report.warnings.push(format!(
                                "`{}` is index metadata of a format this collector does not understand ({why}); it is never deleted, nor is anything it names: remove it by hand if it is a stray",
                                listed.name
                            ));
                        } else {
                            candidates.push(MetadataCandidate { listed, uuid: None });
                        }
                    }
                }
            }
        }
        // Nested subtrees are known for `metadata/` now: nothing in them is assessed.
        let candidates: Vec<MetadataCandidate> = candidates
            .into_iter()
            .filter(|candidate| {
                let nested = scan.is_nested(&candidate.listed.name);
                if nested {
                    tallies.report.kept_nested.add(candidate.listed.size);
                }
                !nested
            })
            .collect();
        {
            let observation = &observation;
            let referenced = &referenced;
            let run = &run;
            let mut assessed = futures::stream::iter(candidates)
                .map(|candidate| async move {
                    run.assess(observation, referenced, &candidate.listed, candidate.uuid)
                        .await
                })
                .buffer_unordered(concurrency);
            while let Some(item) = assessed.try_next().await? {
                tallies.record(item);
            }
        }

        // 3. `indexes/`, streamed one top-level directory at a time, in name order: its
        //    own files and the directories named like catalog structures (a nested root
        //    at `indexes/` itself) in every run, then the other directories — all of
        //    them, or with a scan budget from where the previous finished run stopped,
        //    until the budget is spent (see "Budgeted runs" in the module docs).
        self.emit(GcProgress::Phase {
            phase: GcPhase::ScanIndexes,
        });
        let resume_after = match config.scan_budget {
            Some(_) => run.ledger.read_cursor().await?,
            None => None,
        };
        let (top_files, dirs) = warehouse.list_children(INDEXES_DIR).await?;
        let (always, regular): (Vec<String>, Vec<String>) = dirs
            .into_iter()
            .partition(|dir| is_catalog_structure_dir(dir));
        let mut stopped_after: Option<String> = None;
        {
            let observation = &observation;
            let referenced = &referenced;
            let run = &run;
            let mut units: Vec<futures::stream::BoxStream<'_, Result<ListItem>>> =
                vec![futures::stream::iter(top_files.into_iter().map(Ok)).boxed()];
            units.extend(always.iter().map(|dir| warehouse.list(dir)));
            for unit in units {
                self.scan_indexes_unit(run, observation, referenced, unit, &mut tallies, &mut scan)
                    .await?;
            }
            let mut scanned_any = false;
            for dir in regular
                .iter()
                .filter(|dir| resume_after.as_ref().is_none_or(|after| *dir > after))
            {
                if let Some(budget) = config.scan_budget
                    && scanned_any
                    && elapsed_now().saturating_sub(now_ms) >= millis(budget)
                {
                    break;
                }
                self.scan_indexes_unit(
                    run,
                    observation,
                    referenced,
                    warehouse.list(dir),
                    &mut tallies,
                    &mut scan,
                )
                .await?;
                scanned_any = true;
                stopped_after = Some(dir.clone());
            }
            if stopped_after.as_ref() == regular.last() {
                stopped_after = None; // reached the end: the next run starts over
            }
            if resume_after.is_some() || stopped_after.is_some() {
                tallies.report.scan = Some(ScanRange {
                    resumed_after: resume_after.clone(),
                    stopped_after: stopped_after.clone(),
                });
            }
        }
        for root in &scan.nested_roots {
            tallies.report.warnings.push(format!(
                "`{root}` holds another warehouse's ownership marker or a pointer store's records; nothing below it is ever collected. Move that warehouse or pointer store out of this warehouse's managed prefixes"
            ));
        }
        // Objects assessed before their subtree showed itself as nested are kept too.
        let (doomed, kept): (Vec<Doomed>, Vec<Doomed>) = std::mem::take(&mut tallies.doomed)
            .into_iter()
            .partition(|item| !scan.is_nested(&item.relative));
        let report = tallies.report;
        for item in kept {
            report.kept_nested.add(item.size);
        }
        self.emit(GcProgress::Scanned {
            objects: report.scanned.objects,
            bytes: report.scanned.bytes,
        });

        if config.dry_run {
            for item in doomed {
                report.deleted.add(item.size);
                report.act(
                    &item.relative,
                    item.size,
                    ActionKind::Delete,
                    format!("would delete: {}", item.reason),
                );
            }
            return Ok(());
        }

        // 4. Verify: walk the catalog again right before deleting; keep anything reachable
        //    again or with newer evidence of reachability.
        let mut verified_reachable = RefMap::default();
        if !doomed.is_empty() {
            self.emit(GcProgress::Phase {
                phase: GcPhase::Verify,
            });
            Self::fence(lease.lock().await.as_deref_mut(), elapsed_now()).await?;
            let again =
                observe(catalog, now_ms, run.retention_ms, run.skew_ms, concurrency).await?;
            let mut metadata_first = Vec::new();
            let mut tables = Vec::new();
            for item in doomed {
                let newer = run
                    .evidence_floor(&again, &item.relative, item.uuid, Some(item.clock_ms))
                    .is_some_and(|(floor, _)| floor > item.clock_ms);
                let reachable_again = again.reachable.covers_any_spelling(&item.relative);
                if reachable_again || newer {
                    report.kept_at_verification.add(item.size);
                    if reachable_again {
                        report.ledger_files_cleared +=
                            run.ledger.delete(item.ledger_files).await? as u64;
                    }
                    continue;
                }
                if item.relative.starts_with("metadata/") {
                    metadata_first.push(item);
                } else {
                    tables.push(item);
                }
            }
            verified_reachable = again.reachable;

            // 5. Delete: metadata files first, so an index table never disappears while a
            //    metadata file that names it still exists.
            self.emit(GcProgress::Phase {
                phase: GcPhase::Delete,
            });
            let total = (metadata_first.len() + tables.len()) as u64;
            for group in [metadata_first, tables] {
                let mut group = group.into_iter().peekable();
                while group.peek().is_some() {
                    let batch: Vec<Doomed> =
                        group.by_ref().take(config.delete_batch_size).collect();
                    Self::fence(lease.lock().await.as_deref_mut(), elapsed_now()).await?;
                    self.delete_batch(&run, report, batch).await?;
                    self.emit(GcProgress::Deleted {
                        objects: report.deleted.objects,
                        of: total,
                    });
                }
            }
        }

        // 6. Sweep the ledger: clear entries of objects reachable again or gone.
        self.emit(GcProgress::Phase {
            phase: GcPhase::SweepLedger,
        });
        Self::fence(lease.lock().await.as_deref_mut(), elapsed_now()).await?;
        let observation = &observation;
        let verified_reachable = &verified_reachable;
        let ledger = &run.ledger;
        let mut stale = ledger
            .list()
            .map(|item| async move {
                let ListItem::Object(file) = item? else {
                    return Ok::<_, Error>(None);
                };
                let Some(object) = ledger.object_of(&file.name) else {
                    return Ok(None);
                };
                if observation.reachable.covers_any_spelling(&object)
                    || verified_reachable.covers_any_spelling(&object)
                {
                    return Ok(Some(file.name));
                }
                match warehouse.head(&object).await {
                    Ok(None) => Ok(Some(file.name)),
                    Ok(Some(_)) => Ok(None),
                    // Not a valid object name: keep the ledger file.
                    Err(err) if err.kind() == ErrorKind::InvalidIndexMetadata => Ok(None),
                    Err(err) => Err(err),
                }
            })
            .buffer_unordered(concurrency);
        let mut batch = Vec::new();
        while let Some(item) = stale.try_next().await? {
            if let Some(file) = item {
                batch.push(file);
            }
            if batch.len() >= config.delete_batch_size {
                report.ledger_files_cleared +=
                    ledger.delete(std::mem::take(&mut batch)).await? as u64;
            }
        }
        report.ledger_files_cleared += ledger.delete(batch).await? as u64;
        // Journals outlive every clock that refers to them by far; a clock whose journal
        // is gone reads it as empty, which only delays deletion.
        let keep_ms = run.retention_ms.saturating_mul(4).max(7 * 24 * 3_600_000);
        ledger
            .prune_journals(now_ms.saturating_sub(keep_ms))
            .await?;
        // Finished: acknowledge the dead runs this run has compensated for, then itself.
        for dead in &journals.dead {
            if *dead != run.journal {
                ledger.mark_done(*dead).await?;
            }
        }
        if config.scan_budget.is_some() {
            ledger
                .write_cursor(run.journal, stopped_after.as_deref())
                .await?;
        }
        ledger.mark_done(run.journal).await?;
        Ok(())
    }

    /// Scan one unit of `indexes/` (a listing), assessing what is unreachable.
    async fn scan_indexes_unit(
        &self,
        run: &Run<'_, '_>,
        observation: &Observation,
        referenced: &RefMap,
        unit: futures::stream::BoxStream<'_, Result<ListItem>>,
        tallies: &mut Tallies<'_>,
        scan: &mut Scan,
    ) -> Result<()> {
        let mut listed = unit
            .map(|item| async move {
                let listed = match item? {
                    ListItem::Object(listed) => listed,
                    skipped @ ListItem::Skipped { .. } => {
                        return Ok::<_, Error>(Scanned::Skipped(skipped));
                    }
                };
                if observation.reachable.covers_any_spelling(&listed.name) {
                    let assessed = Assessed {
                        relative: listed.name.clone(),
                        size: listed.size,
                        verdict: Verdict::Reachable,
                        tracked: None,
                        condemned: None,
                    };
                    return Ok(Scanned::Assessed(listed, assessed));
                }
                if nested_root(&listed.name).is_some() {
                    return Ok(Scanned::Nested(listed));
                }
                let assessed = run.assess(observation, referenced, &listed, None).await?;
                Ok(Scanned::Assessed(listed, assessed))
            })
            .buffer_unordered(self.config.io_concurrency.max(1));
        while let Some(item) = listed.try_next().await? {
            match item {
                Scanned::Skipped(skipped) => skip(tallies.report, skipped),
                Scanned::Nested(listed) => {
                    tallies.scanned(self, listed.size);
                    scan.note(&listed.name);
                    tallies.report.kept_nested.add(listed.size);
                }
                Scanned::Assessed(listed, assessed) => {
                    tallies.scanned(self, listed.size);
                    tallies.record(assessed);
                }
            }
        }
        Ok(())
    }

    /// Delete one batch; then clear the deleted objects' ledger entries. An object already
    /// gone counts as deleted (idempotent reruns); one the warehouse refuses to delete (a
    /// symbolic link on its path) is kept and reported.
    async fn delete_batch(
        &self,
        run: &Run<'_, '_>,
        report: &mut GcReport,
        batch: Vec<Doomed>,
    ) -> Result<()> {
        let warehouse = self.catalog.warehouse();
        let names: Vec<String> = batch.iter().map(|item| item.relative.clone()).collect();
        let mut outcomes: std::collections::HashMap<String, Deletion> =
            warehouse.delete(names).await.into_iter().collect();
        let mut failure = None;
        let mut ledger_files = Vec::new();
        for item in batch {
            match outcomes.remove(&item.relative) {
                Some(Deletion::Deleted | Deletion::Missing) => {
                    report.deleted.add(item.size);
                    report.act(&item.relative, item.size, ActionKind::Delete, item.reason);
                    ledger_files.extend(item.ledger_files);
                }
                Some(Deletion::Refused(why)) => {
                    report.kept_nested.add(item.size);
                    report
                        .warnings
                        .push(format!("`{}` was not deleted: {why}", item.relative));
                }
                Some(Deletion::Failed(err)) => {
                    failure.get_or_insert(err);
                }
                None => {}
            }
        }
        report.ledger_files_cleared += run.ledger.delete(ledger_files).await? as u64;
        match failure {
            None => Ok(()),
            Some(err) => Err(Error::new(
                ErrorKind::StoreUnavailable,
                format!(
                    "gc stopped: deleting from the warehouse failed; a rerun resumes safely: {}",
                    err.message()
                ),
            )),
        }
    }
}

/// One listing entry of `indexes/`, decided.
enum Scanned {
    /// Not an object the collector may touch.
    Skipped(ListItem),
    /// Part of a nested catalog structure.
    Nested(Listed),
    /// Assessed.
    Assessed(Listed, Assessed),
}

/// Count and warn about a skipped listing entry.
fn skip(report: &mut GcReport, item: ListItem) {
    let ListItem::Skipped { name, reason } = item else {
        return;
    };
    report.skipped += 1;
    if report.skipped <= MAX_SKIP_WARNINGS {
        report
            .warnings
            .push(format!("skipped `{name}`: {reason}; it is never deleted"));
    }
}

/// Whether the top-level directory `dir` of `indexes/` is named like a catalog structure
/// (`_catalog`, `_gc`, `_meta`, `i`, `n`): what it holds may mark all of `indexes/` as
/// nested (see the `nested` module), so every run scans it, whatever its budget.
fn is_catalog_structure_dir(dir: &str) -> bool {
    let name = dir.rsplit('/').next().unwrap_or(dir);
    matches!(name, "_catalog" | "_gc" | "_meta" | "i" | "n")
}
