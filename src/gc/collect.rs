//! Running a run: one step at a time ([`GarbageCollector::step`], what a Lambda invocation
//! does), or all of them in one process with a pool of workers
//! ([`GarbageCollector::collect`], what the CLI does).

use std::time::Duration;

use futures::StreamExt;

use super::GarbageCollector;
use super::ledger::Ledger;
use super::report::{GcCounts, GcPhase, GcProgress, GcReport, GcStatus};
use std::sync::Arc;

use super::run::{Found, Invocation, RunContext};
use super::step::{GcStep, StepOutcome};
use crate::error::{Error, Result};

impl GarbageCollector {
    /// Do one step of a run at `now_ms`, stopping at the first page boundary after
    /// `budget` (none: until the step's work is complete). See [`GcStep`].
    ///
    /// A step of a run that has finished is a no-op (`done`); a step whose run another run's
    /// lease blocks is `skipped`. A dry run keeps no state between invocations, so every
    /// step of a dry run runs the whole run in this process.
    #[doc(hidden)] // The step API of the gc function (Step Functions), not for library users.
    pub async fn step(
        &self,
        step: GcStep,
        now_ms: i64,
        budget: Option<Duration>,
    ) -> Result<StepOutcome> {
        if self.config.dry_run {
            let report = Box::pin(self.collect(now_ms)).await?;
            return Ok(StepOutcome {
                step,
                done: true,
                partitions: 0,
                report,
            });
        }
        self.step_within(step, now_ms, budget).await
    }

    async fn step_within(
        &self,
        step: GcStep,
        now_ms: i64,
        budget: Option<Duration>,
    ) -> Result<StepOutcome> {
        let run = match step {
            GcStep::Plan => return Ok(Box::pin(self.plan_step(now_ms, budget)).await?.0),
            GcStep::Scan { run, .. }
            | GcStep::Verify { run }
            | GcStep::Delete { run, .. }
            | GcStep::Finish { run } => run,
        };
        match self.open(run, now_ms, budget).await? {
            Found::Open(invocation) => {
                let plan = invocation.run.plan.clone();
                let job = invocation.run.job.clone();
                match Box::pin(dispatch(*invocation, step)).await {
                    Ok(outcome) => Ok(outcome),
                    Err(err) => self.unless_finished(&job, &plan, step, err).await,
                }
            }
            Found::Busy(report) => Ok(StepOutcome {
                step,
                done: false,
                partitions: 0,
                report,
            }),
            Found::Finished(report) => Ok(StepOutcome {
                step,
                done: true,
                partitions: 0,
                report,
            }),
        }
    }

    /// `step` of a run this process holds open (its lease held, its state read once).
    async fn step_in(
        &self,
        run: &Arc<RunContext>,
        step: GcStep,
        now_ms: i64,
        budget: Option<Duration>,
    ) -> Result<StepOutcome> {
        let invocation = self.invoke(run.clone(), self.report_of(&run.plan), now_ms, budget);
        match Box::pin(dispatch(invocation, step)).await {
            Ok(outcome) => Ok(outcome),
            Err(err) => self.unless_finished(&run.job, &run.plan, step, err).await,
        }
    }

    /// The outcome of a step of `plan`'s run that failed with `err`: if the run has
    /// finished meanwhile (another invocation of it — a retried one, or one that was
    /// paused and woke up — went on and finished it, and this one then stopped at its
    /// fence), the step's work is done: its outcome is the finished run's, with a warning,
    /// not a failure. Otherwise `err`.
    async fn unless_finished(
        &self,
        job: &super::job::Job,
        plan: &super::job::Plan,
        step: GcStep,
        err: Error,
    ) -> Result<StepOutcome> {
        // A run that is gone was finished and tidied away (or given up by an operator), and
        // one a newer finished run superseded can never go on: either way nothing of it is
        // left to do.
        let finished = match self.find_run(plan.run_id).await {
            Ok(Some((_, true)) | None) => true,
            Ok(Some((_, false))) => Ledger::new(self.catalog.warehouse())
                .journals()
                .state()
                .await
                .is_ok_and(|journals| {
                    plan.superseded(&journals, &[], plan.catalog_id, None)
                        .is_some()
                }),
            Err(_) => false,
        };
        match finished {
            true => {
                let mut report = self.report_of(plan);
                if let Ok(totals) =
                    super::job::run_totals(job, plan, self.config.io_concurrency).await
                {
                    report.counts = totals;
                }
                report.warnings.push(format!(
                    "gc run {} was finished (or given up) by another invocation while this one was under way; this one stopped ({})",
                    plan.run_id,
                    err.message()
                ));
                Ok(StepOutcome {
                    step,
                    done: true,
                    partitions: plan.partitions.len(),
                    report,
                })
            }
            false => Err(err),
        }
    }

    /// Run (or go on with) a run in this process: the plan step, then the scan of every
    /// partition by [`GcConfig::workers`] concurrent workers, the verify step, the delete
    /// steps (concurrently again) and the finish step. With a
    /// [`budget`](GcConfig::budget) it stops once that is spent (status `in-progress`);
    /// the next call goes on where it stopped. An unfinished run (one that stopped at its
    /// budget, failed or was killed) is always continued before a new one starts.
    pub(crate) async fn run(&self, now_ms: i64) -> Result<GcReport> {
        if self.config.dry_run {
            // A dry run writes nothing: its state lives in a scratch store of its own.
            let mut scratch = self.clone();
            scratch.scratch = Some(crate::warehouse::Warehouse::in_memory(
                "memory://parqdb-gc-dry-run/state",
            )?);
            return scratch.drive(now_ms).await;
        }
        self.drive(now_ms).await
    }

    async fn drive(&self, now_ms: i64) -> Result<GcReport> {
        let budget = Budget::new(self, now_ms);
        let mut merged = Merged::default();
        self.emit(GcProgress::Phase {
            phase: GcPhase::CheckOwnership,
        });
        let (plan, run) = Box::pin(self.plan_step(budget.now(), budget.left())).await?;
        merged.add(&plan);
        let Some(run) = run else {
            return Ok(merged.report(plan.report));
        };
        let id = run.plan.run_id;
        let partitions = run.plan.partitions.len();
        let plan = if plan.done || budget.spent() {
            plan
        } else {
            self.until_done(&run, GcStep::Plan, &budget, &mut merged)
                .await?
        };
        if !plan.done {
            return Ok(merged.report(plan.report));
        }
        self.emit(GcProgress::Phase {
            phase: GcPhase::ScanIndexes,
        });
        let scan = |partition| GcStep::Scan { run: id, partition };
        if let Some(stopped) = self
            .fan_out(&run, partitions, scan, &budget, &mut merged)
            .await?
        {
            return Ok(merged.report(stopped));
        }
        let verify = self
            .until_done(&run, GcStep::Verify { run: id }, &budget, &mut merged)
            .await?;
        if !verify.done {
            return Ok(merged.report(verify.report));
        }
        let delete = |partition| GcStep::Delete { run: id, partition };
        if let Some(stopped) = self
            .fan_out(&run, partitions, delete, &budget, &mut merged)
            .await?
        {
            return Ok(merged.report(stopped));
        }
        let finish = self
            .until_done(&run, GcStep::Finish { run: id }, &budget, &mut merged)
            .await?;
        Ok(merged.report(finish.report))
    }

    /// Call `step` until it is done or out of budget (at least once); its last outcome.
    async fn until_done(
        &self,
        run: &Arc<RunContext>,
        step: GcStep,
        budget: &Budget<'_>,
        merged: &mut Merged,
    ) -> Result<StepOutcome> {
        loop {
            let outcome = self.step_in(run, step, budget.now(), budget.left()).await?;
            merged.add(&outcome);
            if outcome.done || budget.spent() {
                return Ok(outcome);
            }
        }
    }

    /// Run the step `make(p)` of every partition `p` to completion, [`GcConfig::workers`]
    /// partitions at a time; the report of a partition that did not complete, if one did
    /// not (its budget was spent).
    async fn fan_out(
        &self,
        run: &Arc<RunContext>,
        partitions: usize,
        make: impl Fn(usize) -> GcStep,
        budget: &Budget<'_>,
        merged: &mut Merged,
    ) -> Result<Option<GcReport>> {
        let make = &make;
        let results: Vec<Result<Vec<StepOutcome>>> = futures::stream::iter(0..partitions)
            .map(|partition| {
                let step = make(partition);
                // Boxed as `Send`: a spawned `collect` must be `Send` for every lifetime.
                let worker: futures::future::BoxFuture<'_, Result<Vec<StepOutcome>>> =
                    Box::pin(async move {
                        let mut outcomes = Vec::new();
                        loop {
                            let outcome =
                                self.step_in(run, step, budget.now(), budget.left()).await?;
                            let stop = outcome.done || budget.spent();
                            outcomes.push(outcome);
                            if stop {
                                return Ok(outcomes);
                            }
                        }
                    });
                worker
            })
            .buffer_unordered(self.config.workers.max(1))
            .collect()
            .await;
        let mut stopped = None;
        for result in results {
            let outcomes = result?;
            for outcome in &outcomes {
                merged.add(outcome);
            }
            if let Some(last) = outcomes.into_iter().last()
                && !last.done
            {
                stopped.get_or_insert(last.report);
            }
        }
        Ok(stopped)
    }
}

/// Do `step` in `invocation`.
async fn dispatch(mut invocation: Invocation<'_>, step: GcStep) -> Result<StepOutcome> {
    match step {
        GcStep::Plan => {
            let done = invocation.plan_metadata().await?;
            Ok(invocation.outcome(step, done))
        }
        GcStep::Scan { partition, .. } => invocation.scan(partition).await,
        GcStep::Verify { .. } => invocation.verify().await,
        GcStep::Delete { partition, .. } => invocation.delete(partition).await,
        GcStep::Finish { .. } => invocation.finish().await,
    }
}

/// The time a `collect` call may take ([`GcConfig::budget`]).
struct Budget<'a> {
    gc: &'a GarbageCollector,
    now_ms: i64,
    started: i64,
}

impl<'a> Budget<'a> {
    fn new(gc: &'a GarbageCollector, now_ms: i64) -> Budget<'a> {
        Budget {
            gc,
            now_ms,
            started: gc.catalog.clock().now_ms(),
        }
    }

    fn elapsed(&self) -> i64 {
        self.gc
            .catalog
            .clock()
            .now_ms()
            .saturating_sub(self.started)
            .max(0)
    }

    /// The call's time plus what has elapsed since.
    fn now(&self) -> i64 {
        self.now_ms.saturating_add(self.elapsed())
    }

    /// What is left of the budget (none: no budget).
    fn left(&self) -> Option<Duration> {
        self.gc
            .config
            .budget
            .map(|budget| budget.saturating_sub(Duration::from_millis(self.elapsed() as u64)))
    }

    fn spent(&self) -> bool {
        self.left().is_some_and(|left| left.is_zero())
    }
}

/// What the steps of one `collect` call did, merged.
#[derive(Default)]
struct Merged {
    counts: GcCounts,
    actions: Vec<super::report::GcAction>,
    actions_truncated: bool,
    warnings: Vec<String>,
    steps: u64,
}

impl Merged {
    fn add(&mut self, outcome: &StepOutcome) {
        self.steps += 1;
        let report = &outcome.report;
        if !matches!(outcome.step, GcStep::Finish { .. }) || !outcome.done {
            self.counts.merge(&report.counts);
        }
        for action in &report.actions {
            if self.actions.len() < report.config.max_reported_actions {
                self.actions.push(action.clone());
            } else {
                self.actions_truncated = true;
            }
        }
        self.actions_truncated |= report.actions_truncated;
        for warning in &report.warnings {
            if !self.warnings.contains(warning) {
                self.warnings.push(warning.clone());
            }
        }
    }

    /// The call's report: `last` (the finish step's, with the run's totals; else the last
    /// step's, with this call's counts) with every step's actions and warnings.
    fn report(self, mut last: GcReport) -> GcReport {
        if last.status == GcStatus::InProgress {
            last.counts = self.counts;
        }
        last.actions = self.actions;
        last.actions_truncated = self.actions_truncated;
        last.warnings = self.warnings;
        if let Some(progress) = last.progress.as_mut() {
            progress.steps = self.steps;
        }
        last
    }
}
