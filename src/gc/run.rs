//! The plumbing of one invocation of a step (the `step` submodule is the contract): the run
//! as a process sees it ([`RunContext`]: its files, plan and shared lease), one
//! invocation's budget, pages and checkpoints ([`Invocation`]), and how an invocation
//! finds, opens and holds its run.

use std::sync::Arc;
use std::time::Duration;

use uuid::Uuid;

use super::GarbageCollector;
use super::carried::{CarriedReader, Previous};
use super::config::millis;
use super::job::{Job, Plan, Seq, Walk, planned_runs};
use super::journal::JournalRef;
use super::lease::SharedLease;
use super::lease::{Acquired, Lease};
use super::ledger::{Ledger, Trust};
use super::refs::Protected;
use super::report::{GcPhase, GcReport, GcStatus, RunProgress};
use super::step::{GcStep, StepOutcome};
use crate::error::{Error, ErrorKind, Result};
use crate::warehouse::layout::RUNS_DIR;

/// One run as a process sees it: its files, its plan, its lease (shared by every
/// invocation and worker of the process), and what it has read of its state once.
pub(crate) struct RunContext {
    pub job: Job,
    pub plan: Plan,
    pub lease: SharedLease,
    observed: tokio::sync::OnceCell<Arc<Walk>>,
    verified: tokio::sync::OnceCell<Arc<Walk>>,
    referenced: tokio::sync::OnceCell<Arc<Protected>>,
    trust: tokio::sync::OnceCell<Arc<Trust>>,
    journals: tokio::sync::OnceCell<Arc<super::journal::JournalState>>,
    previous: tokio::sync::OnceCell<Option<Arc<Previous>>>,
}

impl RunContext {
    pub(crate) fn new(job: Job, plan: Plan, lease: Option<Lease>) -> RunContext {
        RunContext {
            job,
            plan,
            lease: tokio::sync::Mutex::new(lease),
            observed: tokio::sync::OnceCell::new(),
            verified: tokio::sync::OnceCell::new(),
            referenced: tokio::sync::OnceCell::new(),
            trust: tokio::sync::OnceCell::new(),
            journals: tokio::sync::OnceCell::new(),
            previous: tokio::sync::OnceCell::new(),
        }
    }

    /// The error of a run whose file `file` (under its directory) is gone.
    pub(crate) fn missing(&self, file: &str) -> Error {
        Error::new(
            ErrorKind::CorruptRecord,
            format!(
                "gc run {} lost `{}/{file}`; give it up (`parqdb-catalog gc abandon`) to start over",
                self.plan.run_id,
                self.job.dir()
            ),
        )
    }

    /// The first walk (`observed.json`).
    pub(crate) async fn observed(&self) -> Result<Arc<Walk>> {
        self.observed
            .get_or_try_init(|| async {
                let walk = self.job.observed().await?;
                walk.map(Arc::new)
                    .ok_or_else(|| self.missing("observed.json"))
            })
            .await
            .cloned()
    }

    /// The verification walk, once it has been written.
    pub(crate) async fn verified(&self) -> Result<Option<Arc<Walk>>> {
        if let Some(walk) = self.verified.get() {
            return Ok(Some(walk.clone()));
        }
        let Some(walk) = self.job.verified().await? else {
            return Ok(None);
        };
        Ok(Some(
            self.verified
                .get_or_init(|| async { Arc::new(walk) })
                .await
                .clone(),
        ))
    }

    /// What unreachable metadata names, once computed (see [`Invocation::referenced`]).
    pub(crate) async fn referenced_with<F>(&self, compute: F) -> Result<Arc<Protected>>
    where
        F: std::future::Future<Output = Result<Protected>>,
    {
        self.referenced
            .get_or_try_init(|| async { compute.await.map(Arc::new) })
            .await
            .cloned()
    }

    /// Whose ledger facts count ([`Trust`]): this run's, and those of runs that finished
    /// before they landed (read once), but never a run its plan counted as dead: one that
    /// finishes after the plan (a finish paused before its finish mark) walked before
    /// runs the plan gave up, whose walks may have found its objects reachable (round
    /// 137); nor, for any later plan, a run that finished late
    /// ([`JournalState::finished_late`](super::journal::JournalState::finished_late)):
    /// the floor of the run that gave it up voids its clocks only across two machines'
    /// clocks, which may differ by the skew (round 140).
    pub(crate) async fn trust(
        &self,
        warehouse: &crate::warehouse::Warehouse,
    ) -> Result<Arc<Trust>> {
        let journals = self.journals(warehouse).await?;
        self.trust
            .get_or_try_init(|| async {
                Ok::<_, Error>(Arc::new(Trust {
                    current: Some(self.plan.journal()),
                    done_at: journals
                        .done_at
                        .iter()
                        .filter(|(run, _)| {
                            !self.plan.dead.contains(run) && !journals.finished_late(run)
                        })
                        .map(|(run, at)| (*run, *at))
                        .collect(),
                }))
            })
            .await
            .cloned()
    }

    /// What the journals said when this invocation first asked (read once).
    async fn journals(
        &self,
        warehouse: &crate::warehouse::Warehouse,
    ) -> Result<Arc<super::journal::JournalState>> {
        self.journals
            .get_or_try_init(|| async {
                Ok::<_, Error>(Arc::new(Ledger::new(warehouse).journals().state().await?))
            })
            .await
            .cloned()
    }
}

impl RunContext {
    /// The previous finished run whose carried clocks this run reads (see
    /// [`carried`](super::carried)), read once: the plan's `previous`, if it finished.
    pub(crate) async fn previous(
        &self,
        warehouse: &crate::warehouse::Warehouse,
    ) -> Result<Option<Arc<Previous>>> {
        let journals = self.journals(warehouse).await?;
        self.previous
            .get_or_try_init(|| async {
                let Some(journal) = self.plan.previous else {
                    return Ok(None);
                };
                if !journals.done_at.contains_key(&journal) {
                    return Ok(None);
                }
                // A run started since, that never finished (given up, superseded), may
                // have found some of those objects reachable and cleared their entries;
                // what it found is lost with it, so nothing carries across it (every
                // clock starts again: the plan's floor).
                let listed = self.plan.dead.iter().chain(&self.plan.untrusted).copied();
                if super::carried::started_between(
                    warehouse,
                    Some(journal),
                    Some(self.plan.journal()),
                    listed,
                    &journals.finished,
                )
                .await?
                {
                    return Ok(None);
                }
                Ok::<_, Error>(Previous::read(warehouse, journal).await?.map(Arc::new))
            })
            .await
            .cloned()
    }
}

/// What a step works in: one invocation's view of one run.
pub(crate) struct Invocation<'g> {
    pub gc: &'g GarbageCollector,
    pub run: Arc<RunContext>,
    /// The invocation's time (what it was called with).
    pub now_ms: i64,
    clock_origin: i64,
    /// How long the invocation may work before it stops at the next page boundary.
    budget: Option<Duration>,
    /// Pages this invocation has written.
    pages: u64,
    pub report: GcReport,
}

impl std::ops::Deref for Invocation<'_> {
    type Target = RunContext;

    fn deref(&self) -> &RunContext {
        &self.run
    }
}

impl<'g> Invocation<'g> {
    /// The current time: the invocation's time plus what has elapsed since it started.
    pub(crate) fn elapsed_now(&self) -> i64 {
        elapsed(self.gc, self.now_ms, self.clock_origin)
    }

    /// A boxed clock for the judge.
    pub(crate) fn clock(&self) -> impl Fn() -> i64 + Send + Sync + 'g {
        let (gc, now_ms, origin) = (self.gc, self.now_ms, self.clock_origin);
        move || elapsed(gc, now_ms, origin)
    }

    /// Whether the invocation should stop at this page boundary: its budget is spent and
    /// it has done at least one page (so every invocation makes progress).
    pub(crate) fn out_of_time(&self) -> bool {
        self.pages > 0
            && self.budget.is_some_and(|budget| {
                self.elapsed_now().saturating_sub(self.now_ms) >= millis(budget)
            })
    }

    /// The entries of page `number` of `seq` over `range`, after `after`: the listing kept
    /// for it (a page redone after a crash), else a new listing of at most a page, kept
    /// before it is worked on.
    ///
    /// Only an invocation's first page can be a redone one, so only it looks for a kept
    /// listing first (one `GET`); a later page lists at once. Keeping a listing is
    /// conditional, so a listing another worker kept for the same page wins either way.
    pub(crate) async fn list_page(
        &self,
        seq: &super::job::Seq,
        number: u64,
        range: &crate::warehouse::ListRange,
        after: Option<&str>,
    ) -> Result<super::job::Listing> {
        use futures::{StreamExt, TryStreamExt};
        if self.pages == 0
            && let Some(listing) = self.job.listing(seq, number).await?
        {
            return Ok(listing);
        }
        let page_size = self.gc.config.page_size;
        let entries: Vec<super::job::StoredItem> = self
            .gc
            .catalog
            .warehouse()
            .list_range(range, after)
            .take(page_size)
            .map_ok(super::job::StoredItem::of)
            .try_collect()
            .await?;
        let done = entries.len() < page_size;
        let listing = super::job::Listing { entries, done };
        self.job.write_listing(seq, number, listing).await
    }

    /// What follows `last`, the newest page of `seq` over `range`: nothing once the
    /// sequence is complete, a stop at this page boundary once the budget is spent (never
    /// before the first page), else the next page's listing ([`Invocation::list_page`]).
    pub(crate) async fn next_page(
        &self,
        seq: &Seq,
        range: &crate::warehouse::ListRange,
        last: Option<&super::job::Page>,
    ) -> Result<NextPage> {
        if let Some(page) = last {
            if page.done {
                return Ok(NextPage::Done);
            }
            if self.out_of_time() {
                return Ok(NextPage::OutOfTime);
            }
        }
        let after = last.and_then(|page| page.after.clone());
        let number = last.map_or(0, |page| page.seq + 1);
        let listing = self.list_page(seq, number, range, after.as_deref()).await?;
        let after = listing
            .entries
            .last()
            .map(|entry| entry.position.clone())
            .or(after);
        Ok(NextPage::Listed(PageListing {
            number,
            entries: listing.entries,
            done: listing.done,
            after,
        }))
    }

    /// Write `page` of `seq` (see [`Job::write_page`]), counting it as this invocation's
    /// work.
    pub(crate) async fn write_page(
        &mut self,
        seq: &super::job::Seq,
        page: super::job::Page,
    ) -> Result<super::job::Page> {
        let page = self.job.write_page(seq, page).await?;
        self.pages += 1;
        Ok(page)
    }

    /// The incarnations the previous finished run listed.
    pub(crate) async fn trust(&self) -> Result<Arc<Trust>> {
        self.run.trust(self.gc.catalog.warehouse()).await
    }

    /// A reader of the previous finished run's carried clocks, if there are any to read.
    pub(crate) async fn carried(&self) -> Result<Option<CarriedReader>> {
        let warehouse = self.gc.catalog.warehouse();
        Ok(self
            .run
            .previous(warehouse)
            .await?
            .map(|previous| CarriedReader::new(warehouse, previous)))
    }

    /// Stop if the run has been superseded since it was opened (a run its plan did not
    /// count, started since its previous run, whose walk landed behind its plan: round
    /// 133, G2): checked right before every delete batch and before the finish, as at
    /// every opening.
    /// Returns the journals' state it read.
    pub(crate) async fn still_current(&self) -> Result<super::journal::JournalState> {
        self.gc.standing(&self.run.plan).await?.map_err(|reason| {
            Error::new(
                ErrorKind::CommitConflict,
                format!("{reason}; it stops here (the next plan step starts a new run)"),
            )
        })
    }

    /// Renew and prove the lease right before a destructive step.
    pub(crate) async fn fence(&self) -> Result<()> {
        let mut lease = self.lease.lock().await;
        super::lease::fence(lease.as_mut(), self.elapsed_now()).await
    }

    /// Renew the lease if half of it has passed (a long sweep keeps it alive).
    pub(crate) async fn keep_lease(&self) -> Result<()> {
        let mut lease = self.lease.lock().await;
        let now = self.elapsed_now();
        if let Some(lease) = lease.as_mut()
            && lease.needs_renewal(now)
        {
            return super::lease::fence(Some(lease), now).await;
        }
        Ok(())
    }

    /// The outcome of this step.
    pub(crate) fn outcome(mut self, step: GcStep, done: bool) -> StepOutcome {
        let finished = done && matches!(step, GcStep::Finish { .. });
        if !finished && self.report.status == GcStatus::Completed {
            self.report.status = GcStatus::InProgress;
        }
        let phase = match (step, done) {
            (GcStep::Plan, false) => GcPhase::ScanMetadata,
            (GcStep::Plan, true) | (GcStep::Scan { .. }, _) => GcPhase::ScanIndexes,
            (GcStep::Verify { .. }, _) => GcPhase::Verify,
            (GcStep::Delete { .. }, _) => GcPhase::Delete,
            (GcStep::Finish { .. }, false) => GcPhase::SweepLedger,
            (GcStep::Finish { .. }, true) => GcPhase::Done,
        };
        self.report.progress = Some(RunProgress {
            phase,
            partitions: self.plan.partitions.len(),
            steps: 1,
        });
        StepOutcome {
            step,
            done,
            partitions: self.plan.partitions.len(),
            report: self.report,
        }
    }

    /// The newest page of each of `seqs` (concurrently), or an error naming `what` of the
    /// first sequence that is not complete.
    pub(crate) async fn require_all_done(
        &self,
        seqs: &[Seq],
        what: impl Fn(&Seq) -> String,
    ) -> Result<Vec<super::job::Page>> {
        let pages = self
            .job
            .last_pages(seqs, self.gc.config.io_concurrency)
            .await?;
        seqs.iter()
            .zip(pages)
            .map(|(seq, page)| match page {
                Some(page) if page.done => Ok(page),
                _ => Err(self.not_ready(&what(seq))),
            })
            .collect()
    }

    fn not_ready(&self, what: &str) -> Error {
        Error::new(
            ErrorKind::InvalidRequest,
            format!(
                "gc run {} is not ready for this step: {what} is not complete; run the steps in order (plan, scan, verify, delete, finish)",
                self.plan.run_id
            ),
        )
    }

    /// An error unless the newest page of `seq` says it is complete.
    pub(crate) async fn require_done(&self, seq: &Seq, what: &str) -> Result<()> {
        match self.job.last_page(seq).await? {
            Some(page) if page.done => Ok(()),
            _ => Err(self.not_ready(what)),
        }
    }
}

/// What follows the newest page of a listed sequence ([`Invocation::next_page`]).
pub(crate) enum NextPage {
    /// The sequence is complete.
    Done,
    /// The invocation's budget is spent: stop at this page boundary.
    OutOfTime,
    /// The next page to work on.
    Listed(PageListing),
}

/// The listing of a sequence's next page.
pub(crate) struct PageListing {
    /// The page's number in its sequence.
    pub number: u64,
    /// Its entries.
    pub entries: Vec<super::job::StoredItem>,
    /// Whether the listing ends with this page.
    pub done: bool,
    /// Where the listing stands after this page: its last entry's position, else the
    /// previous page's.
    pub after: Option<String>,
}

fn elapsed(gc: &GarbageCollector, now_ms: i64, origin: i64) -> i64 {
    now_ms.saturating_add(gc.catalog.clock().now_ms().saturating_sub(origin).max(0))
}

/// Where a step's run is found.
pub(crate) enum Found<'g> {
    /// The run, its lease held (none for a dry run).
    Open(Box<Invocation<'g>>),
    /// Another run holds the lease: nothing to do now.
    Busy(GcReport),
    /// The run has finished.
    Finished(GcReport),
}

impl GarbageCollector {
    /// Where the files of runs live: the warehouse, or for a dry run the collector's
    /// scratch store (a dry run writes nothing).
    pub(crate) fn job_store(&self) -> &crate::warehouse::Warehouse {
        self.scratch.as_ref().unwrap_or(self.catalog.warehouse())
    }

    /// The run `run` (by id), if it has a plan, and whether it has finished.
    pub(crate) async fn find_run(&self, run: Uuid) -> Result<Option<(JournalRef, bool)>> {
        let planned = planned_runs(self.job_store()).await?;
        let Some(journal) = planned.into_iter().find(|journal| journal.run_id == run) else {
            return Ok(None);
        };
        let finished = Ledger::new(self.catalog.warehouse())
            .journals()
            .state()
            .await?
            .finished
            .contains(&journal);
        Ok(Some((journal, finished)))
    }

    /// Open the run `run` for a step at `now_ms`: read its plan and hold its lease.
    pub(crate) async fn open(
        &self,
        run: Uuid,
        now_ms: i64,
        budget: Option<Duration>,
    ) -> Result<Found<'_>> {
        let unknown = || {
            Error::new(
                ErrorKind::InvalidRequest,
                format!("there is no planned gc run {run} in this warehouse (under {RUNS_DIR}/)"),
            )
        };
        // Every step checks ownership, not only the plan step: a copy of the pointer store
        // (refused at the plan) must not go on with the owner's run by its id, walking
        // its own records at the verification (GC round 104).
        crate::catalog::ownership::verify_ownership(&self.catalog).await?;
        let (journal, finished) = self.find_run(run).await?.ok_or_else(unknown)?;
        let job = Job::new(self.job_store(), journal);
        if !finished && job.abandoned().await? {
            return Err(Error::new(
                ErrorKind::InvalidRequest,
                format!(
                    "gc run {run} was abandoned (`gc abandon`); the next plan step starts a new run"
                ),
            ));
        }
        let plan = match job.plan().await {
            // Torn, or of a run format older than this release resumes: the next plan
            // step gives it up. (A newer format's error passes through: left alone.)
            Err(err) if err.kind() == ErrorKind::CorruptRecord => {
                return Err(Error::new(
                    ErrorKind::InvalidRequest,
                    format!(
                        "gc run {run} cannot go on ({}); the next plan step starts a new run",
                        err.message()
                    ),
                ));
            }
            plan => plan?.ok_or_else(unknown)?,
        };
        let mut report = self.report_of(&plan);
        if finished {
            // A step retried after the finish step wrote its mark (killed before it
            // answered) reports the whole run, as the finish step did.
            let totals = super::job::run_totals(&job, &plan, self.config.io_concurrency).await?;
            report.counts = totals;
            return Ok(Found::Finished(report));
        }
        self.hold(job, plan, report, now_ms, budget).await
    }

    /// A fresh report of `plan`'s run.
    pub(crate) fn report_of(&self, plan: &Plan) -> GcReport {
        let mut report = GcReport::new(plan.run_id, plan.now_ms, &self.config);
        report.catalog_id = Some(plan.catalog_id);
        report
    }

    /// Hold `plan`'s lease for an invocation at `now_ms`.
    pub(crate) async fn hold(
        &self,
        job: Job,
        plan: Plan,
        report: GcReport,
        now_ms: i64,
        budget: Option<Duration>,
    ) -> Result<Found<'_>> {
        let lease = match self.acquire(plan.run_id, now_ms).await? {
            Ok(lease) => lease,
            Err(busy) => {
                let mut report = report;
                report.status = GcStatus::Skipped;
                report.skipped_reason = Some(busy);
                return Ok(Found::Busy(report));
            }
        };
        if let Err(reason) = self.standing(&plan).await? {
            if let Some(lease) = lease
                && let Err(err) = lease.release(self.catalog.clock().now_ms()).await
            {
                tracing::warn!(error = %err, "releasing the gc lease failed; it will expire");
            }
            return Err(Error::new(
                ErrorKind::CommitConflict,
                format!("{reason}; it never goes on (the next plan step starts a new run)"),
            ));
        }
        let run = Arc::new(RunContext::new(job, plan, lease));
        Ok(Found::Open(Box::new(
            self.invoke(run, report, now_ms, budget),
        )))
    }

    /// Whether `plan`'s run may go on (checked under its lease): the journals' state it
    /// read if it may, else why not.
    async fn standing(
        &self,
        plan: &Plan,
    ) -> Result<std::result::Result<super::journal::JournalState, String>> {
        let warehouse = self.catalog.warehouse();
        let Some(marker) = crate::catalog::ownership::read_marker(warehouse).await? else {
            return Ok(Err(format!(
                "the warehouse `{}` lost its ownership marker while gc run {} was under way",
                warehouse.root(),
                plan.run_id
            )));
        };
        let journals = Ledger::new(warehouse).journals().state().await?;
        let started = planned_runs(self.job_store()).await?;
        Ok(
            match plan.superseded(
                &journals,
                &started,
                marker.catalog_id,
                Some(marker.created_ms),
            ) {
                Some(reason) => Err(reason),
                None => Ok(journals),
            },
        )
    }

    /// The lease for run `holder` at `now_ms` (none for a dry run), or why another run's
    /// lease keeps it.
    pub(crate) async fn acquire(
        &self,
        holder: Uuid,
        now_ms: i64,
    ) -> Result<std::result::Result<Option<Lease>, String>> {
        if self.config.dry_run {
            return Ok(Ok(None));
        }
        self.emit(super::report::GcProgress::Phase {
            phase: super::report::GcPhase::AcquireLease,
        });
        Ok(
            match Lease::acquire(
                self.catalog.warehouse(),
                holder,
                now_ms,
                millis(self.config.lease_duration),
            )
            .await?
            {
                Acquired::Held(held) => Ok(Some(*held)),
                Acquired::Busy { holder, expires_ms } => Err(format!(
                    "another gc run ({holder}) holds the lease until {expires_ms}"
                )),
            },
        )
    }

    /// An invocation at `now_ms` on a run this process holds open.
    pub(crate) fn invoke(
        &self,
        run: Arc<RunContext>,
        report: GcReport,
        now_ms: i64,
        budget: Option<Duration>,
    ) -> Invocation<'_> {
        Invocation {
            gc: self,
            run,
            now_ms,
            clock_origin: self.catalog.clock().now_ms(),
            budget,
            pages: 0,
            report,
        }
    }

    /// `invocation` with its run time counted from the clock reading `origin` instead of
    /// from its creation (a new run's first invocation began with its walk).
    pub(crate) fn counted_from<'g>(mut invocation: Invocation<'g>, origin: i64) -> Invocation<'g> {
        invocation.clock_origin = origin;
        invocation
    }
}
