//! The finish step: sweep the ledger of `metadata/`, then mark the run finished.
//!
//! A finished run has looked at every ledger entry (each partition's delete step swept
//! its part of `indexes/`), so its journal may serve the next run as "the previous
//! finished run" (see the ledger docs). It marks the dead runs its plan listed dead
//! (it restarted their clocks), prunes old journals and old runs' files, and releases the
//! lease; its report holds the whole run's counts.

use std::collections::BTreeSet;

use super::job::{Job, Seq, planned_runs};
use super::journal::JournalRef;
use super::ledger::Ledger;
use super::report::{GcCounts, GcPhase, GcProgress};
use super::run::Invocation;
use super::step::{GcStep, StepOutcome};
use crate::error::Result;

/// How many runs older than the finishing one keep their files.
const KEEP_RUNS: usize = 2;

/// The runs that are over once the finishing run has finished.
struct Over {
    /// The finishing run.
    current: JournalRef,
    /// Every run finished or marked dead, the finishing one included.
    runs: std::collections::HashSet<JournalRef>,
    /// Journals (and their marks) of runs before this time were pruned.
    pruned_before_ms: i64,
}

impl Invocation<'_> {
    /// The finish step.
    pub(crate) async fn finish(mut self) -> Result<StepOutcome> {
        let step = GcStep::Finish {
            run: self.plan.run_id,
        };
        let swept: Vec<Seq> = (0..self.plan.partitions.len()).map(Seq::Swept).collect();
        self.require_all_done(&swept, |seq| match seq {
            Seq::Swept(partition) => format!("the delete step of partition {partition}"),
            _ => String::new(),
        })
        .await?;
        let observed = self.observed().await?;
        let verified = self
            .run
            .verified()
            .await?
            .ok_or_else(|| self.missing("verified.json"))?;
        self.gc.emit(GcProgress::Phase {
            phase: GcPhase::SweepLedger,
        });
        if !self
            .sweep(
                &Self::metadata_range(),
                &Seq::SweptMetadata,
                &observed,
                &verified,
            )
            .await?
        {
            return Ok(self.outcome(step, false));
        }
        let totals = self.totals().await?;
        if !self.gc.config.dry_run {
            // The runs that are over once this one has finished: those over before it (as
            // read to check that it may finish; a run over since is left for the next
            // finish), the dead runs its plan counted, and itself. Read before journals
            // are pruned (a pruned run's marks go with its journal, its directory with
            // them).
            let mut over = self.still_current().await?.finished;
            self.fence().await?;
            let ledger = Ledger::new(self.gc.catalog.warehouse());
            over.extend(self.plan.dead.iter().copied());
            // The dead runs' marks first: pruning then takes a mark with its journal, and
            // never leaves one behind without it.
            let journal = self.plan.journal();
            over.insert(journal);
            for dead in &self.plan.dead {
                if *dead != journal {
                    ledger.journals().mark_dead(*dead).await?;
                }
            }
            // Journals outlive every clock that refers to them by far; a clock whose run's
            // marks are gone is not trusted, which only delays deletion.
            let rules = self.plan.rules;
            let keep_ms = rules.retention_ms.saturating_mul(4).max(7 * 24 * 3_600_000);
            let pruned_before_ms = self.plan.now_ms.saturating_sub(keep_ms);
            // No run loses its marks while its directory is there (a file the collector
            // does not delete may keep one for ever): the marks of a run whose directory
            // goes below are pruned by the next finish.
            let listed = planned_runs(self.job.store()).await?.into_iter().collect();
            ledger.journals().prune(pruned_before_ms, &listed).await?;
            ledger.journals().mark_done(journal).await?;
            // The run is finished: what follows is housekeeping, and its failure leaves
            // only files the next run prunes (it never fails a finished run). Entries
            // whose publication this store never took stay (see `untaken`).
            let (observed_history, verified_history) =
                (&observed.observation.history, &verified.observation.history);
            let untaken: BTreeSet<String> = observed_history
                .untaken
                .union(&verified_history.untaken)
                .cloned()
                .collect();
            let pinning: BTreeSet<String> = observed_history
                .pinning
                .union(&verified_history.pinning)
                .cloned()
                .collect();
            self.tidy_up(
                Over {
                    current: journal,
                    runs: over,
                    pruned_before_ms,
                },
                &untaken,
                &pinning,
            )
            .await;
        }
        self.report.counts = totals;
        self.report.roots = observed.observation.roots.clone();
        self.report
            .warnings
            .extend(observed.observation.warnings.iter().cloned());
        self.gc.emit(GcProgress::Phase {
            phase: GcPhase::Done,
        });
        Ok(self.outcome(step, true))
    }

    /// After the run's finish mark: prune the change-log entries every later walk sees
    /// settled (logged `settle` before this run's walk started: this run's journal holds
    /// what they wrote, or what replaced it), the files of older runs, and release the
    /// lease. A failure is a warning: the next run does it again.
    async fn tidy_up(
        &mut self,
        over: Over,
        untaken: &BTreeSet<String>,
        pinning: &BTreeSet<String>,
    ) {
        let warehouse = self.gc.catalog.warehouse();
        let (walk_start_ms, timing) = (self.plan.walk_start_ms, self.plan.rules.timing());
        let settled = |name: &str, at_ms| {
            super::rules::settled(at_ms, walk_start_ms, &timing) && !untaken.contains(name)
        };
        if let Err(err) = crate::catalog::changelog::prune(warehouse, settled).await {
            tracing::warn!(error = %err, "gc: pruning the change log failed; the next run prunes it");
        }
        // A commit link resolves only entries logged before it (less the skew of two
        // writers' clocks): the links older than every entry left that a link may still
        // show taken are done with. Pruning a link only ever keeps more (it is evidence
        // that a write was taken, or a record descends).
        let oldest_left = pinning
            .iter()
            .filter_map(|name| crate::catalog::changelog::entry_time(name))
            .chain([walk_start_ms.saturating_sub(timing.settle_ms)])
            .min()
            .unwrap_or(walk_start_ms);
        let before = oldest_left
            .saturating_sub(timing.settle_ms)
            .saturating_sub(timing.skew_ms.saturating_mul(2));
        if let Err(err) = crate::catalog::changelog::prune_links(warehouse, before).await {
            tracing::warn!(error = %err, "gc: pruning the commit links failed; the next run prunes them");
        }
        if let Err(err) = self.prune_runs(&over).await {
            tracing::warn!(error = %err, "gc: pruning older runs' files failed; the next run prunes them");
        }
        if let Some(lease) = self.lease.lock().await.take()
            && let Err(err) = lease.release(self.elapsed_now()).await
        {
            tracing::warn!(error = %err, "releasing the gc lease failed; it will expire");
        }
    }

    /// The whole run's counts: the sum of every sequence's newest page.
    pub(crate) async fn totals(&self) -> Result<GcCounts> {
        super::job::run_totals(&self.job, &self.plan, self.gc.config.io_concurrency).await
    }

    /// Delete the files of the runs older than this one that are over, but the newest few
    /// with a plan (kept for `gc status` and post-mortems) while their journals are kept.
    /// Every older run has finished or can never go on (this run finished after it was
    /// planned: [`super::job::Plan::superseded`]), and what the ledger needs of it is its
    /// journal, not its files. The directory of a run that is not over (it landed after
    /// this run's plan counted the runs: a planner paused before its writes) stays: it is
    /// the next run's evidence that every clock must start again (round 134, F1). A kept
    /// directory goes with its journal's marks: a directory without them would look like
    /// such a run to every later one. Only files under `_gc/runs/` are touched.
    async fn prune_runs(&self, over: &Over) -> Result<()> {
        let store = self.job.store();
        let mut older: Vec<JournalRef> = planned_runs(store)
            .await?
            .into_iter()
            .filter(|run| run.order() < over.current.order() && over.runs.contains(run))
            .collect();
        older.sort_by_key(|run| std::cmp::Reverse(run.order()));
        let mut kept = 0;
        for run in older {
            let job = Job::new(store, run);
            if kept < KEEP_RUNS
                && run.run_ms >= over.pruned_before_ms
                && job.plan().await.ok().flatten().is_some()
            {
                kept += 1;
                continue;
            }
            let files = job.own_files().await?;
            store.delete_own(files).await?;
            store.remove_empty_directories(job.dir()).await;
        }
        Ok(())
    }
}
