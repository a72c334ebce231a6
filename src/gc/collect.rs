//! One run: observe → scan and track → condemn → verify → delete → sweep.

use std::collections::HashSet;
use std::sync::Arc;

use futures::{StreamExt, TryStreamExt};
use object_store::path::Path;
use object_store::{ObjectMeta, ObjectStore, ObjectStoreExt};
use uuid::Uuid;

use super::GarbageCollector;
use super::config::{format_duration, millis};
use super::lease::{Acquired, Lease};
use super::ledger::{JournalRef, Kind, Ledger};
use super::marker::verify_ownership;
use super::reachability::{Observation, Parsed, observe, read_parsed, references_of};
use super::refs::{RefMap, relative_of};
use super::report::{ActionKind, GcPhase, GcProgress, GcReport, GcStatus};
use crate::error::{Error, ErrorKind, Result};

/// The managed prefixes: the only places the collector lists and deletes.
pub const MANAGED_PREFIXES: [&str; 2] = ["metadata", "indexes"];

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
    path: Path,
    relative: String,
    size: u64,
    clock_ms: i64,
    uuid: Option<Uuid>,
    ledger_files: Vec<Path>,
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
    meta: ObjectMeta,
    relative: String,
    uuid: Option<Uuid>,
}

/// The fixed inputs of one run's decisions.
struct Run<'a> {
    gc: &'a GarbageCollector,
    ledger: Ledger,
    now_ms: i64,
    journal: JournalRef,
    /// Incarnations of the previous finished run's journal.
    known: HashSet<Uuid>,
    /// Set when a run died since the previous finished run: every existing clock is raised
    /// to this run's start.
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

impl Run<'_> {
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
            .max_covering(relative)
            .map(|at| (at, format!("a tombstone dropped at {at} references it")));
        let Some(clock_ms) = recorded else {
            return floor;
        };
        if self.dead_run_reset && clock_ms < self.now_ms {
            floor = Some((
                self.now_ms,
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
        meta: &ObjectMeta,
        relative: String,
        uuid: Option<Uuid>,
    ) -> Result<Assessed> {
        let size = meta.size;
        let mut assessed = Assessed {
            relative,
            size,
            verdict: Verdict::Grace,
            tracked: None,
            condemned: None,
        };
        let relative = assessed.relative.as_str();
        let modified_ms = meta.last_modified.timestamp_millis();
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
                let observed = match quiet.quiet_since_ms {
                    Some(since) if quiet.quiet_usable => {
                        self.now_ms.min(since.saturating_add(self.skew_ms))
                    }
                    Some(_) => self.now_ms,
                    None if quiet.quiet_usable => i64::MIN,
                    None => self.now_ms,
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
        let condemned_ms = match entry.condemned_ms.filter(|at| *at >= retention_ends) {
            Some(at) => at,
            None => {
                let reason = format!(
                    "unreachable since {} and retention {} elapsed; deleted by a run at least {} from now if still unreachable",
                    ms_text(clock_ms),
                    format_duration(self.gc.config.retention),
                    format_duration(self.gc.config.effective_condemn_delay())
                );
                if !self.dry_run {
                    ledger_files.push(
                        self.ledger
                            .record(
                                relative,
                                Kind::Condemned,
                                self.now_ms,
                                self.journal,
                                &reason,
                            )
                            .await?,
                    );
                }
                assessed.condemned = Some(reason);
                self.now_ms
            }
        };
        if referenced.covers(relative) {
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
            path: meta.location.clone(),
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

fn listing_error(err: object_store::Error) -> Error {
    Error::with_source(
        ErrorKind::StoreUnavailable,
        "gc aborted: listing the warehouse failed",
        err,
    )
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
                now_ms,
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
        let clock_origin = catalog.clock().now_ms();
        let elapsed_now =
            || now_ms.saturating_add(catalog.clock().now_ms().saturating_sub(clock_origin).max(0));
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

    async fn run_held(
        &self,
        report: &mut GcReport,
        mut lease: Option<&mut Lease>,
        now_ms: i64,
        run_id: Uuid,
        elapsed_now: &(dyn Fn() -> i64 + Sync),
    ) -> Result<()> {
        let catalog = &self.catalog;
        let config = &self.config;
        let warehouse = catalog.warehouse();
        let registry = catalog.registry();
        let store: Arc<dyn ObjectStore> = warehouse.object_store().clone();
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
        let run = Run {
            gc: self,
            ledger,
            now_ms,
            journal: JournalRef {
                run_ms: now_ms,
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

        // 2. `metadata/`: read every unreachable file; whatever an existing unreachable
        //    metadata file references stays until that file is gone (it could be
        //    registered again and must then be complete).
        self.emit(GcProgress::Phase {
            phase: GcPhase::ScanMetadata,
        });
        let mut referenced = RefMap::default();
        let mut candidates: Vec<MetadataCandidate> = Vec::new();
        {
            let mut listed = store
                .list(Some(&warehouse.path(MANAGED_PREFIXES[0])))
                .map(|meta| async move {
                    let meta = meta.map_err(listing_error)?;
                    let Some(relative) = relative_of(&meta.location, warehouse.prefix()) else {
                        return Ok::<_, Error>((meta, None, None));
                    };
                    if reachable.covers(&relative) {
                        return Ok((meta, Some(relative), None));
                    }
                    let parsed = read_parsed(warehouse, registry, &relative).await?;
                    Ok((meta, Some(relative), Some(parsed)))
                })
                .buffer_unordered(concurrency);
            while let Some(item) = listed.try_next().await? {
                let (meta, relative, parsed) = item;
                tallies.scanned(self, meta.size);
                let Some(relative) = relative else { continue };
                match parsed {
                    None => tallies.report.reachable.add(meta.size),
                    Some(Parsed::Missing) => {} // deleted since it was listed
                    Some(Parsed::Metadata(metadata)) => {
                        let refs = references_of(&metadata, registry, warehouse);
                        for reference in refs.direct.into_iter().chain(refs.family) {
                            referenced.insert(reference, 0);
                        }
                        candidates.push(MetadataCandidate {
                            meta,
                            relative,
                            uuid: Some(metadata.index_uuid()),
                        });
                    }
                    Some(Parsed::Opaque(_)) => candidates.push(MetadataCandidate {
                        meta,
                        relative,
                        uuid: None,
                    }),
                }
            }
        }
        {
            let observation = &observation;
            let referenced = &referenced;
            let run = &run;
            let mut assessed = futures::stream::iter(candidates)
                .map(|candidate| async move {
                    run.assess(
                        observation,
                        referenced,
                        &candidate.meta,
                        candidate.relative,
                        candidate.uuid,
                    )
                    .await
                })
                .buffer_unordered(concurrency);
            while let Some(item) = assessed.try_next().await? {
                tallies.record(item);
            }
        }

        // 3. `indexes/`, streamed.
        self.emit(GcProgress::Phase {
            phase: GcPhase::ScanIndexes,
        });
        {
            let observation = &observation;
            let referenced = &referenced;
            let run = &run;
            let mut listed = store
                .list(Some(&warehouse.path(MANAGED_PREFIXES[1])))
                .map(|meta| async move {
                    let meta = meta.map_err(listing_error)?;
                    let Some(relative) = relative_of(&meta.location, warehouse.prefix()) else {
                        return Ok::<_, Error>((meta.size, None));
                    };
                    if observation.reachable.covers(&relative) {
                        return Ok((
                            meta.size,
                            Some(Assessed {
                                relative,
                                size: meta.size,
                                verdict: Verdict::Reachable,
                                tracked: None,
                                condemned: None,
                            }),
                        ));
                    }
                    let assessed = run
                        .assess(observation, referenced, &meta, relative, None)
                        .await?;
                    Ok((meta.size, Some(assessed)))
                })
                .buffer_unordered(concurrency);
            while let Some((size, assessed)) = listed.try_next().await? {
                tallies.scanned(self, size);
                if let Some(assessed) = assessed {
                    tallies.record(assessed);
                }
            }
        }
        let doomed = std::mem::take(&mut tallies.doomed);
        let report = tallies.report;
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
            if let Some(lease) = lease.as_deref_mut() {
                lease.renew(elapsed_now()).await?;
            }
            let again =
                observe(catalog, now_ms, run.retention_ms, run.skew_ms, concurrency).await?;
            let mut metadata_first = Vec::new();
            let mut tables = Vec::new();
            for item in doomed {
                let newer = run
                    .evidence_floor(&again, &item.relative, item.uuid, Some(item.clock_ms))
                    .is_some_and(|(floor, _)| floor > item.clock_ms);
                if again.reachable.covers(&item.relative) || newer {
                    report.kept_at_verification.add(item.size);
                    if again.reachable.covers(&item.relative) {
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
                    if let Some(lease) = lease.as_deref_mut() {
                        lease.renew(elapsed_now()).await?;
                    }
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
        if let Some(lease) = lease {
            lease.renew(elapsed_now()).await?;
        }
        let observation = &observation;
        let verified_reachable = &verified_reachable;
        let ledger = &run.ledger;
        let store = &store;
        let mut stale = ledger
            .list()
            .map(|meta| async move {
                let meta = meta.map_err(listing_error)?;
                let Some(object) = ledger.object_of(&meta.location) else {
                    return Ok::<_, Error>(None);
                };
                if observation.reachable.covers(&object) || verified_reachable.covers(&object) {
                    return Ok(Some(meta.location));
                }
                match store.head(&super::refs::path_of(warehouse, &object)).await {
                    Err(object_store::Error::NotFound { .. }) => Ok(Some(meta.location)),
                    Err(err) => Err(listing_error(err)),
                    Ok(_) => Ok(None),
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
        ledger.mark_done(run.journal).await?;
        Ok(())
    }

    /// Delete one batch with the store's bulk delete; then clear the deleted objects'
    /// ledger entries. An object already gone counts as deleted (idempotent reruns).
    async fn delete_batch(
        &self,
        run: &Run<'_>,
        report: &mut GcReport,
        batch: Vec<Doomed>,
    ) -> Result<()> {
        let store = self.catalog.warehouse().object_store();
        let paths: Vec<object_store::Result<Path>> =
            batch.iter().map(|item| Ok(item.path.clone())).collect();
        let results: Vec<object_store::Result<Path>> = store
            .delete_stream(futures::stream::iter(paths).boxed())
            .collect()
            .await;
        let mut failure = None;
        let mut done: std::collections::HashSet<Path> = std::collections::HashSet::new();
        for result in results {
            match result {
                Ok(path) => {
                    done.insert(path);
                }
                Err(object_store::Error::NotFound { .. }) => {}
                Err(err) => {
                    failure.get_or_insert(err);
                }
            }
        }
        // Whatever was not confirmed: gone means deleted (by us or an earlier attempt).
        for item in &batch {
            if !done.contains(&item.path)
                && matches!(
                    store.head(&item.path).await,
                    Err(object_store::Error::NotFound { .. })
                )
            {
                done.insert(item.path.clone());
            }
        }
        let mut ledger_files = Vec::new();
        for item in batch {
            if done.contains(&item.path) {
                report.deleted.add(item.size);
                report.act(&item.relative, item.size, ActionKind::Delete, item.reason);
                ledger_files.extend(item.ledger_files);
            }
        }
        report.ledger_files_cleared += run.ledger.delete(ledger_files).await? as u64;
        match failure {
            None => Ok(()),
            Some(err) => Err(Error::with_source(
                ErrorKind::StoreUnavailable,
                "gc stopped: deleting from the warehouse failed; a rerun resumes safely",
                err,
            )),
        }
    }
}
