//! The plan step: start a run (or resume the unfinished one).
//!
//! A new run checks ownership, takes the lease, walks the catalog (the reachable set `R`
//! and the evidence, stored in `observed.json`), splits `indexes/` into partitions at its
//! subdirectories and writes its plan, then its journal. Only then does anything write
//! ledger facts, so a run killed before its plan leaves no trace but an unused directory,
//! and one killed after it is resumed by the next plan step: an unfinished run with a
//! readable plan is always resumed, never abandoned, so no retention clock restarts for
//! it. (A run whose plan cannot be read is abandoned: its journal counts as a dead run's.
//! A run planned by a newer release is left alone: see `job::RESUMED_JOB_VERSIONS`.)
//!
//! Then the step reads `metadata/` (the `metadata` submodule).

use super::GarbageCollector;
use super::job::{JOB_VERSION, Job, Plan, Walk, planned_runs};
use super::journal::JournalRef;
use super::ledger::Ledger;
use super::reachability::observe;
use super::report::GcReport;
use super::run::{Found, RunContext};
use super::step::{GcStep, StepOutcome};
use crate::catalog::ownership::{OwnershipMarker, read_marker, verify_ownership};
use crate::error::{Error, ErrorKind, Result};
use crate::warehouse::{INDEXES_DIR, ListRange};

impl GarbageCollector {
    /// The plan step at `now_ms`, and the run it opened (none if it was skipped).
    pub(crate) async fn plan_step(
        &self,
        now_ms: i64,
        budget: Option<std::time::Duration>,
    ) -> Result<(StepOutcome, Option<std::sync::Arc<RunContext>>)> {
        let marker = verify_ownership(&self.catalog).await?;
        let found = match self.unfinished().await? {
            Some((job, plan)) => {
                let report = self.report_of(&plan);
                self.hold(job, plan, report, now_ms, budget).await?
            }
            None => self.start(&marker, now_ms, budget).await?,
        };
        let mut invocation = match found {
            Found::Open(invocation) => *invocation,
            Found::Busy(report) | Found::Finished(report) => {
                let outcome = StepOutcome {
                    step: GcStep::Plan,
                    done: true,
                    partitions: 0,
                    report,
                };
                return Ok((outcome, None));
            }
        };
        invocation.report.catalog_id = Some(marker.catalog_id);
        if let Some(warning) =
            crate::catalog::ownership::loose_binding(&self.catalog, &marker).await?
        {
            invocation.report.warnings.push(warning);
        }
        let run = invocation.run.clone();
        let done = invocation.plan_metadata().await?;
        Ok((invocation.outcome(GcStep::Plan, done), Some(run)))
    }

    /// The unfinished run with a readable plan that may go on, if any (the newest one):
    /// not abandoned, planned by this warehouse's owner, and not superseded by a run that
    /// finished after it was planned ([`Plan::superseded`]). `UNSUPPORTED_FORMAT_VERSION`
    /// if that run was planned by a newer release (`job::parse_plan`): it is left alone.
    pub(crate) async fn unfinished(&self) -> Result<Option<(Job, Plan)>> {
        match self.newest_unfinished().await? {
            Some((_, job, plan)) => plan.map(|plan| Some((job, plan))),
            None => Ok(None),
        }
    }

    /// The newest unfinished run that may go on (see [`GarbageCollector::unfinished`]),
    /// with its plan, or with the error of a plan of a newer format.
    pub(crate) async fn newest_unfinished(
        &self,
    ) -> Result<Option<(JournalRef, Job, Result<Plan>)>> {
        let warehouse = self.catalog.warehouse();
        let Some(marker) = read_marker(warehouse).await? else {
            return Ok(None);
        };
        let journals = Ledger::new(warehouse).journals().state().await?;
        let started = planned_runs(self.job_store()).await?;
        let mut planned: Vec<JournalRef> = started
            .iter()
            .filter(|journal| !journals.finished.contains(journal))
            .copied()
            .collect();
        planned.sort_by_key(JournalRef::order);
        for journal in planned.into_iter().rev() {
            let job = Job::new(self.job_store(), journal);
            if job.abandoned().await? {
                continue;
            }
            match job.plan().await {
                Ok(Some(plan)) if plan.journal() == journal => {
                    match plan.superseded(
                        &journals,
                        &started,
                        marker.catalog_id,
                        Some(marker.created_ms),
                    ) {
                        None => return Ok(Some((journal, job, Ok(plan)))),
                        Some(reason) => tracing::debug!(%reason, "gc: not resuming a run"),
                    }
                }
                // Killed before its plan was written: nothing of it counts.
                Ok(_) => continue,
                Err(err) if err.kind() == ErrorKind::CorruptRecord => {
                    tracing::warn!(run = %journal.run_id, error = %err, "gc: abandoning a run whose plan cannot be read; the next run restarts every retention clock once");
                    continue;
                }
                // Planned by a newer release: neither resumed nor given up.
                Err(err) if err.kind() == ErrorKind::UnsupportedFormatVersion => {
                    return Ok(Some((journal, job, Err(err))));
                }
                Err(err) => return Err(err),
            }
        }
        Ok(None)
    }

    /// Start a new run at `now_ms`: lease, walk, plan, journal.
    async fn start(
        &self,
        marker: &OwnershipMarker,
        now_ms: i64,
        budget: Option<std::time::Duration>,
    ) -> Result<Found<'_>> {
        let catalog_id = marker.catalog_id;
        let catalog = &self.catalog;
        let run_id = catalog.ids().uuid();
        let mut report = GcReport::new(run_id, now_ms, &self.config);
        report.catalog_id = Some(catalog_id);
        let started = catalog.clock().now_ms();
        let mut lease = match self.acquire(run_id, now_ms).await? {
            Ok(lease) => lease,
            Err(busy) => {
                report.status = super::report::GcStatus::Skipped;
                report.skipped_reason = Some(busy);
                return Ok(Found::Busy(report));
            }
        };
        match self
            .plan_run(run_id, marker, (now_ms, started), lease.as_mut(), report)
            .await
        {
            Ok((job, plan, report)) => {
                let run = std::sync::Arc::new(RunContext::new(job, plan, lease));
                let invocation = self.invoke(run, report, now_ms, budget);
                Ok(Found::Open(Box::new(Self::counted_from(
                    invocation, started,
                ))))
            }
            Err(err) => {
                // A run that failed before its plan was written is never resumed: its
                // lease need not stand until it expires.
                if let Some(lease) = lease
                    && let Err(release) = lease.release(catalog.clock().now_ms()).await
                {
                    tracing::warn!(error = %release, "releasing the gc lease failed; it will expire");
                }
                Err(err)
            }
        }
    }

    /// Walk the catalog, read the change log, and write the new run's plan, then its
    /// journal. `times` is the run's time and the clock's reading when it started.
    async fn plan_run(
        &self,
        run_id: uuid::Uuid,
        marker: &OwnershipMarker,
        (now_ms, started): (i64, i64),
        lease: Option<&mut super::lease::Lease>,
        mut report: GcReport,
    ) -> Result<(Job, Plan, GcReport)> {
        let catalog = &self.catalog;
        let warehouse = catalog.warehouse();
        let ledger = Ledger::new(warehouse);
        let journals = ledger.journals().state().await?;
        // The runs started so far, and those of them that left only a directory (a plan
        // step that stopped after its walk, or before its journal).
        let runs = planned_runs(warehouse).await?;
        let unjournaled = runs
            .iter()
            .filter(|run| !journals.journaled.contains(run) && !journals.finished.contains(run));
        let marked_dead = journals.marked_dead();
        // Journals and run directories are ordered by their time: a run sorts after every
        // earlier run (runs are serialised by the lease), even when the run times tie or
        // the clock went backwards, or a run directory of a clock far ahead was left.
        let latest_ms = unjournaled
            .clone()
            .map(|run| run.run_ms)
            .max()
            .max(journals.latest_ms);
        let run_ms = latest_ms.map_or(now_ms, |latest| now_ms.max(latest.saturating_add(1)));
        let rules = super::job::Rules::of(&self.config);
        self.emit(super::report::GcProgress::Phase {
            phase: super::report::GcPhase::ComputeReachability,
        });
        // The walk starts no later than either clock says (the run's time may be ahead
        // of the catalog's), and ends no earlier.
        let walk_start_ms = now_ms.min(started);
        // An adoption since the previous run (`init --adopt`: a new ownership epoch) is the
        // operator's word that the pointer store as it is now is the catalog: a record
        // missing from it is gone for good, not away (a restored backup that predates it).
        // Its files get a full retention from the adoption, as everything does. A journal
        // says which epoch its run was planned in; one of an earlier version, whether it
        // is older than the marker (round 39 L4: clocks of two machines, compared only
        // where nothing better is written).
        let epoch = marker.created_ms;
        let of_epoch = |facts: &super::journal::JournalFacts,
                        journal: &super::journal::JournalRef| {
            match facts.epoch_ms {
                Some(planned) => planned == epoch,
                None => journal.run_ms >= epoch.saturating_sub(rules.skew_ms),
            }
        };
        let mut previous = ledger
            .journals()
            .previous_facts(journals.previous, None)
            .await?;
        previous.adopted_since = journals.previous.is_some()
            && match previous.epoch_ms {
                Some(planned) => planned != epoch,
                None => previous.run_ms < epoch,
            };
        // The newest journal that no longer counts, if newer (`_gc/` copied or restored:
        // every finish mark is stale; a run that never finished) and of this epoch: the
        // records it lists, and those it lists as vanished, must still be there (round 37
        // J1, round 38 K1).
        let newer = journals
            .stale
            .iter()
            .chain(&journals.dead)
            .filter(|journal| {
                journals
                    .previous
                    .is_none_or(|p| journal.order() > p.order())
            })
            .max_by_key(|journal| journal.order())
            .copied();
        let mut untrusted = None;
        if let Some(newer) = newer {
            let facts = ledger.journals().read(newer).await?;
            if of_epoch(&facts, &newer) {
                untrusted = Some(newer);
                previous.distrust(facts);
            }
        }
        let mut observation = observe(
            catalog,
            now_ms,
            rules.skew_ms,
            &previous,
            self.config.io_concurrency.max(1),
        )
        .await?;
        // What the walk found unreachable was reachable at most until it had finished.
        let ended = catalog.clock().now_ms();
        let observed_ms = now_ms
            .saturating_add(ended.saturating_sub(started).max(0))
            .max(ended);
        // Then the change log: what the catalog published around the walk, and whether
        // it explains every record the walk found.
        observation.history = super::history::read(
            catalog,
            observation.walked(),
            &previous,
            &rules.timing(),
            walk_start_ms,
            epoch,
            self.config.io_concurrency.max(1),
        )
        .await?;
        observation
            .warnings
            .extend(observation.history.untaken_warning());
        let epoch_ms = marker.created_ms.saturating_add(rules.skew_ms);
        // A run planned since the previous finished run that never finished (given up,
        // superseded, its journal gone stale), or an older one that no finished run
        // counted (its walk landed after the previous run had looked: round 134, F1),
        // may have found objects reachable that no later walk does (through a link no
        // change-log entry records), and may not have swept their entries: what it found
        // is lost with it. Every clock starts again at this walk, the clock files' as the
        // carried ones (round 133, J1). Where no run has finished, any run before this one
        // never finished (or its finish is stale): its walk counts as given up too, and
        // so the floor of the first run to finish is its own walk, which every later
        // floor keeps. Without it, a run the first finished run counted dead, whose own
        // finish mark landed later, stood trusted behind it with clocks from before that
        // run's walk (round 139, A).
        // (The runs since the previous marked dead are listed too, as in the plan's `dead`
        // that `RunContext::previous` reads: the two agree even where such a run's
        // directory is gone.)
        let listed = journals
            .dead
            .iter()
            .chain(&journals.stale)
            .chain(journals.marked_dead())
            .copied();
        let given_up = super::carried::started_between(
            warehouse,
            journals.previous,
            None,
            listed,
            &journals.finished,
        )
        .await?;
        // What the previous finished run voided stays void: a clock it did not see (of an
        // object it did not list: away, or below a directory it could not list) must not
        // stand again (round 133, G4).
        let floor_ms = observation
            .history
            .floor(epoch_ms, walk_start_ms, given_up)
            // (Never later than this walk: a floor a clock far ahead wrote must not keep
            // every clock pending.)
            .max(previous.floor_ms.unwrap_or(i64::MIN).min(walk_start_ms));
        // A walk slower than half the lease (or a pause in it) must not be planned behind
        // a run that took the lease over meanwhile.
        super::lease::fence(lease, observed_ms).await?;
        let segments = warehouse.segments(INDEXES_DIR).await?;
        let partitions = ListRange::split(INDEXES_DIR, &segments, self.config.partitions);
        let sequences = partitions.len() as u64 + 1;
        let plan = Plan {
            plan_version: JOB_VERSION,
            run_id,
            run_ms,
            now_ms,
            walk_start_ms,
            observed_ms,
            floor_ms,
            rules,
            previous: journals.previous,
            untrusted,
            adopted_since: previous.adopted_since,
            epoch_ms: Some(epoch),
            // Every run it counts as dead: the unfinished journals, the directories of
            // runs that left no journal (the floor covered those since the previous), and
            // the runs since the previous already marked dead (by a finish that failed
            // after marking them): they were over before this plan, so none of them
            // "finished after it was planned" ([`Plan::superseded`]; else, with no run
            // finished since, every later run was superseded at its first step).
            dead: {
                let mut dead: Vec<JournalRef> = journals
                    .dead
                    .iter()
                    .chain(unjournaled)
                    .chain(marked_dead)
                    .copied()
                    .collect();
                dead.sort_by_key(JournalRef::order);
                dead
            },
            partitions,
            max_doomed: (self.config.max_deletes_per_run as u64).div_ceil(sequences),
            catalog_id: marker.catalog_id,
        };
        let journal = plan.journal();
        report.roots = observation.roots.clone();
        report.warnings.extend(observation.warnings.iter().cloned());
        if !observation.history.unexplained.is_empty() {
            report.warnings.push(format!(
                "what the catalog's records may have made reachable is unknown (records the change log does not explain: a restored backup, a hand edit, a writer of an earlier version; or a logged publication of a file that may name anything): every retention clock starts again at this run. {}",
                observation.history.unexplained.join("; ")
            ));
        }
        let walk = Walk {
            observation,
            nested: Vec::new(),
            linked: Vec::new(),
        };
        let job = Job::new(self.job_store(), journal);
        job.write_observed(&walk).await?;
        if !job.write_plan(&plan).await? {
            return Err(Error::new(
                ErrorKind::CommitConflict,
                format!("gc run {run_id} was planned twice"),
            ));
        }
        if !self.config.dry_run {
            ledger
                .journals()
                .write(
                    journal,
                    &walk.observation.records,
                    &walk.observation.history.vanished,
                    (plan.epoch_ms, Some(plan.floor_ms)),
                )
                .await?;
        }
        if !journals.stale.is_empty() {
            report.warnings.push(format!(
                "the finish marks of {} gc run(s) no longer match their journals (`_gc/` was restored from a backup or copied): their retention clocks are not trusted and start again",
                journals.stale.len()
            ));
        }
        if given_up {
            report.warnings.push(
                "a gc run planned since the last finished one did not finish and will never be resumed (abandoned, superseded, of an earlier version, or its journal restored): what its walk found reachable is lost with it, so every retention clock starts again at this run".to_owned(),
            );
        } else if !plan.dead.is_empty() {
            report.warnings.push(format!(
                "{} earlier gc run(s) did not finish and will never be resumed (abandoned, or of an earlier version); the retention clocks they recorded start again",
                plan.dead.len()
            ));
        }
        Ok((job, plan, report))
    }
}
