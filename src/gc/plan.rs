//! The plan step: start a run (or resume the unfinished one), then read `metadata/`.
//!
//! A new run checks ownership, takes the lease, walks the catalog (the reachable set `R`
//! and the evidence, stored in `observed.json`), splits `indexes/` into partitions at its
//! subdirectories and writes its plan, then its journal. Only then does anything write
//! ledger facts, so a run killed before its plan leaves no trace but an unused directory,
//! and one killed after it is resumed by the next plan step: an unfinished run with a
//! readable plan is always resumed, never abandoned, so no retention clock restarts for
//! it. (A run whose plan cannot be read is abandoned: its journal counts as a dead run's.)
//!
//! `metadata/` is read in two passes, page by page: pass 1 reads every unreachable
//! metadata file and records what it names (rule (P)); pass 2 decides each candidate once
//! everything (P) needs is known (a metadata file may name another).

use std::collections::HashMap;

use futures::{StreamExt, TryStreamExt};

use super::GarbageCollector;
use super::assess::{Judge, PageTally};
use super::job::{JOB_VERSION, Job, Object, Page, Plan, Referenced, Seq, Walk, planned_runs};
use super::journal::JournalRef;
use super::ledger::{Ledger, LedgerEntry, PageScope};
use super::named::{Parsed, read_parsed, references_of};
use super::reachability::observe;
use super::refs::{Protected, SelfCovering};
use super::report::{Counts, GcReport};
use super::scan::{Nested, skip};
use super::step::{Found, GcStep, Invocation, NextPage, PageListing, RunContext, StepOutcome};
use crate::catalog::ownership::{OwnershipMarker, read_marker, verify_ownership};
use crate::error::{Error, Result};
use crate::family::FamilyRegistry;
use crate::warehouse::layout::nested_root;
use crate::warehouse::{
    INDEXES_DIR, ListItem, ListRange, METADATA_DIR, Warehouse, aliases, is_within,
};

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
        let run = invocation.run.clone();
        let done = invocation.plan_metadata().await?;
        Ok((invocation.outcome(GcStep::Plan, done), Some(run)))
    }

    /// The unfinished run with a readable plan that may go on, if any (the newest one):
    /// not abandoned, planned by this warehouse's owner, and not superseded by a run that
    /// finished after it was planned ([`Plan::superseded`]).
    pub(crate) async fn unfinished(&self) -> Result<Option<(Job, Plan)>> {
        let warehouse = self.catalog.warehouse();
        let Some(marker) = read_marker(warehouse).await? else {
            return Ok(None);
        };
        let journals = Ledger::new(warehouse).journals().state().await?;
        let mut planned: Vec<JournalRef> = planned_runs(self.job_store())
            .await?
            .into_iter()
            .filter(|journal| !journals.finished.contains(journal))
            .collect();
        planned.sort_by_key(|journal| (journal.run_ms, journal.run_id));
        for journal in planned.into_iter().rev() {
            let job = Job::new(self.job_store(), journal);
            if job.abandoned().await? {
                continue;
            }
            match job.plan().await {
                Ok(Some(plan)) if plan.journal() == journal => {
                    match plan.superseded(&journals, marker.catalog_id) {
                        None => return Ok(Some((job, plan))),
                        Some(reason) => tracing::debug!(%reason, "gc: not resuming a run"),
                    }
                }
                // Killed before its plan was written: nothing of it counts.
                Ok(_) => continue,
                Err(err) if err.kind() == crate::error::ErrorKind::CorruptRecord => {
                    tracing::warn!(run = %journal.run_id, error = %err, "gc: abandoning a run whose plan cannot be read; the next run restarts every retention clock once");
                    continue;
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
        // Journals are ordered by their time: a run's journal sorts after every earlier
        // run's (runs are serialised by the lease), even when the run times tie or the
        // clock went backwards.
        let run_ms = journals
            .latest_ms
            .map_or(now_ms, |latest| now_ms.max(latest.saturating_add(1)));
        let rules = super::job::Rules::of(&self.config);
        self.emit(super::report::GcProgress::Phase {
            phase: super::report::GcPhase::ComputeReachability,
        });
        // The walk starts no later than either clock says (the run's time may be ahead
        // of the catalog's), and ends no earlier.
        let walk_start_ms = now_ms.min(started);
        let previous = match journals.previous {
            Some(previous) => ledger.journals().read(previous).await?,
            None => super::journal::JournalFacts::default(),
        };
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
            &observation.records,
            &observation.changed,
            &previous,
            &rules.timing(),
            self.config.io_concurrency.max(1),
        )
        .await?;
        let epoch_ms = marker.created_ms.saturating_add(rules.skew_ms);
        let floor_ms = observation.history.floor(epoch_ms, walk_start_ms);
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
            dead: journals.dead.clone(),
            partitions,
            max_doomed: (self.config.max_deletes_per_run as u64).div_ceil(sequences),
            catalog_id: marker.catalog_id,
        };
        let journal = plan.journal();
        report.roots = observation.roots.clone();
        report.warnings.extend(observation.warnings.iter().cloned());
        if !observation.history.unexplained.is_empty() {
            report.warnings.push(format!(
                "the catalog's records changed in ways the change log does not explain (a restored backup, a hand edit, a writer of an earlier version): every retention clock starts again at this run. {}",
                observation.history.unexplained.join("; ")
            ));
        }
        let walk = Walk {
            observation,
            nested: Vec::new(),
        };
        let job = Job::new(self.job_store(), journal);
        job.write_observed(&walk).await?;
        if !job.write_plan(&plan).await? {
            return Err(Error::new(
                crate::error::ErrorKind::CommitConflict,
                format!("gc run {run_id} was planned twice"),
            ));
        }
        if !self.config.dry_run {
            ledger
                .journals()
                .write(journal, &walk.observation.records)
                .await?;
        }
        if !journals.stale.is_empty() {
            report.warnings.push(format!(
                "the finish marks of {} gc run(s) no longer match their journals (`_gc/` was restored from a backup or copied): their retention clocks are not trusted and start again",
                journals.stale.len()
            ));
        }
        if !plan.dead.is_empty() {
            report.warnings.push(format!(
                "{} earlier gc run(s) did not finish and will never be resumed (abandoned, or of an earlier version); the retention clocks they recorded start again",
                plan.dead.len()
            ));
        }
        Ok((job, plan, report))
    }
}

impl Invocation<'_> {
    /// Ensure the journal exists (a run killed between its plan and its journal), then
    /// both passes over `metadata/`; `true` once they are complete.
    pub(crate) async fn plan_metadata(&mut self) -> Result<bool> {
        let walk = self.observed().await?;
        if !self.gc.config.dry_run {
            let ledger = Ledger::new(self.gc.catalog.warehouse());
            let journal = self.plan.journal();
            if !ledger.journals().exists(journal).await? {
                ledger
                    .journals()
                    .write(journal, &walk.observation.records)
                    .await?;
            }
        }
        self.gc.emit(super::report::GcProgress::Phase {
            phase: super::report::GcPhase::ScanMetadata,
        });
        if !self.read_metadata(&walk).await? {
            return Ok(false);
        }
        let referenced = self.referenced().await?;
        self.assess_metadata(&walk, &referenced).await
    }

    /// Pass 1: page by page, read every unreachable metadata file and record what it
    /// names; `true` once the listing is complete.
    async fn read_metadata(&mut self, walk: &Walk) -> Result<bool> {
        let range = ListRange::whole(METADATA_DIR);
        let mut last = self.job.last_page(&Seq::Metadata).await?;
        loop {
            let listing = match self
                .next_page(&Seq::Metadata, &range, last.as_ref())
                .await?
            {
                NextPage::Done => return Ok(true),
                NextPage::OutOfTime => return Ok(false),
                NextPage::Listed(listing) => listing,
            };
            last = Some(
                self.read_metadata_page(walk, listing, last.as_ref())
                    .await?,
            );
        }
    }

    /// One page of pass 1 after `last`: read what of `listing` is unreachable, and write
    /// the page (its candidates, what they name, the nested roots found so far).
    async fn read_metadata_page(
        &mut self,
        walk: &Walk,
        listing: PageListing,
        last: Option<&Page>,
    ) -> Result<Page> {
        let gc = self.gc;
        let warehouse = gc.catalog.warehouse();
        let registry = gc.catalog.registry();
        let walked = &walk.observation.walked;
        let reachable = &walk.observation.reachable;
        let mut nested = Nested::from(last);
        let mut read_page = MetadataPage::default();
        let mut read = futures::stream::iter(listing.entries)
            .map(|entry| async move {
                let ListItem::Object(listed) = entry.item() else {
                    return Ok::<_, Error>((entry.item(), None));
                };
                // What the walk read is reachable with everything it names. A file
                // reachable only as part of a referenced directory is read all the same:
                // what it names is kept by (P), like any existing metadata's.
                if walked.contains(&listed.name) || nested_root(&listed.name).is_some() {
                    return Ok((ListItem::Object(listed), None));
                }
                // A covered file that is no JSON document (a table file) names nothing.
                // (One the store refuses to give stops the run, as any unreadable file
                // under `metadata/` does: it may be metadata someone registers again.)
                if reachable.covers_any_spelling(&listed.name)
                    && !warehouse.may_be_json(&listed.name, listed.size).await
                {
                    let opaque = Parsed::Opaque {
                        why: "not a JSON document".to_owned(),
                        foreign_format: false,
                        references: Vec::new(),
                    };
                    return Ok((ListItem::Object(listed), Some(opaque)));
                }
                let parsed = read_parsed(warehouse, registry, &listed.name).await?;
                Ok((ListItem::Object(listed), Some(parsed)))
            })
            .buffered(gc.config.io_concurrency.max(1));
        while let Some((item, parsed)) = read.try_next().await? {
            let covered = match &item {
                ListItem::Object(listed) => reachable.covers_any_spelling(&listed.name),
                ListItem::Skipped { .. } => false,
            };
            read_page.note(&mut nested, item, parsed, covered, (registry, warehouse));
        }
        drop(read);
        let MetadataPage {
            counts,
            candidates,
            referenced,
            self_covering,
            warnings,
        } = read_page;
        let mut totals = last.map(|page| page.totals).unwrap_or_default();
        totals.merge(&counts);
        let page = Page {
            seq: listing.number,
            after: listing.after,
            done: listing.done,
            totals,
            candidates,
            referenced,
            self_covering,
            nested: nested.into_roots(),
            warnings,
            ..Page::default()
        };
        let page = self.write_page(&Seq::Metadata, page).await?;
        self.report.add_counts(&counts);
        gc.scanned(counts.scanned);
        self.report.warnings.extend(page.warnings.iter().cloned());
        Ok(page)
    }

    /// What unreachable metadata names (rule (P)): `referenced.json`, written once pass 1
    /// is complete from all its pages.
    pub(crate) async fn referenced(&self) -> Result<std::sync::Arc<Protected>> {
        self.run.referenced_with(self.read_referenced()).await
    }

    async fn read_referenced(&self) -> Result<Protected> {
        let referenced = match self.job.referenced().await? {
            Some(referenced) => referenced,
            None => self.collect_referenced().await?,
        };
        let mut kept = Protected::default();
        for name in referenced.names {
            kept.insert(name);
        }
        for named in referenced.self_covering {
            kept.insert_self_covering(named);
        }
        Ok(kept)
    }

    /// `referenced.json` from the pages of pass 1, written once.
    async fn collect_referenced(&self) -> Result<Referenced> {
        let mut names = std::collections::BTreeSet::new();
        let mut self_covering = Vec::new();
        let mut totals = Counts::default();
        for number in self.job.page_numbers(&Seq::Metadata).await? {
            let page = self
                .job
                .page(&Seq::Metadata, number)
                .await?
                .ok_or_else(|| self.missing("metadata"))?;
            names.extend(page.referenced);
            self_covering.extend(page.self_covering);
            totals = page.totals;
        }
        // What the names reach through symbolic links (a local warehouse) is named too.
        let linked = self
            .gc
            .catalog
            .warehouse()
            .link_targets(names.iter().cloned().collect())
            .await?;
        names.extend(linked.into_iter().map(|(_, target)| target));
        let referenced = Referenced {
            names: names.into_iter().collect(),
            self_covering,
            totals,
        };
        self.job.write_referenced(&referenced).await?;
        Ok(referenced)
    }

    /// Pass 2: decide the candidates of every pass-1 page; `true` once all are decided.
    async fn assess_metadata(&mut self, walk: &Walk, referenced: &Protected) -> Result<bool> {
        let numbers = self.job.page_numbers(&Seq::Metadata).await?;
        let done_pages = self.job.page_numbers(&Seq::Assessed).await?;
        let Some(&last_number) = numbers.last() else {
            return Err(self.missing("metadata"));
        };
        let final_nested = self
            .job
            .page(&Seq::Metadata, last_number)
            .await?
            .ok_or_else(|| self.missing("metadata"))?
            .nested;
        let nested = Nested::of(final_nested);
        let trust = self.trust().await?;
        let clock = self.clock();
        let mut previous = match done_pages.last() {
            Some(number) => self.job.page(&Seq::Assessed, *number).await?,
            None => None,
        };
        for number in numbers {
            if done_pages.contains(&number) {
                continue;
            }
            if self.out_of_time() {
                return Ok(false);
            }
            let read = self
                .job
                .page(&Seq::Metadata, number)
                .await?
                .ok_or_else(|| self.missing("metadata"))?;
            let (entries, gone) = self.metadata_entries(number, &read).await?;
            let candidates: Vec<(Object, LedgerEntry)> = read
                .candidates
                .into_iter()
                .map(|candidate| {
                    // A name listed twice is decided with the same entry both times.
                    let entry = entries.get(&candidate.name).cloned().unwrap_or_default();
                    (candidate, entry)
                })
                .collect();
            let doomed_so_far = previous.as_ref().map_or(0, |page| page.doomed_total);
            let mut tally =
                PageTally::with_room(self.plan.max_doomed.saturating_sub(doomed_so_far));
            let judge = Judge::new(
                self.gc,
                &self.run.plan,
                &self.run.lease,
                &clock,
                trust.clone(),
                self.now_ms,
            );
            let mut assessed =
                futures::stream::iter(candidates.into_iter().filter(|(candidate, _)| {
                    if nested.covers(&candidate.name) {
                        tally.counts.kept_nested.add(candidate.size);
                        false
                    } else {
                        true
                    }
                }))
                .map(|(candidate, entry)| {
                    let (judge, observation) = (&judge, &walk.observation);
                    async move {
                        judge
                            .assess(observation, referenced, &candidate, entry)
                            .await
                    }
                })
                .buffer_unordered(self.gc.config.io_concurrency.max(1));
            let mut decided = Vec::new();
            while let Some(item) = assessed.try_next().await? {
                decided.push(item);
            }
            drop(assessed);
            for item in decided {
                tally.record(item, &mut self.report);
            }
            tally.counts.ledger_files_cleared += self.clear_gone(gone).await?;
            let mut totals = previous
                .as_ref()
                .map(|page| page.totals)
                .unwrap_or_default();
            totals.merge(&tally.counts);
            let page = Page {
                seq: number,
                done: number == last_number,
                totals,
                doomed: tally.doomed,
                ..Page::default()
            }
            .counting_doomed(doomed_so_far);
            let page = self.write_page(&Seq::Assessed, page).await?;
            self.report.add_counts(&tally.counts);
            previous = Some(page);
        }
        Ok(true)
    }
}

impl Invocation<'_> {
    /// The ledger entries of pass-1 page `number`'s candidates, by name, and the files of
    /// entries whose object the page shows gone: read with the page's kept listing
    /// ([`Ledger::read_page`]); without one (a run of an earlier version), each
    /// candidate's entry on its own.
    async fn metadata_entries(
        &self,
        number: u64,
        page: &Page,
    ) -> Result<(HashMap<String, LedgerEntry>, Vec<String>)> {
        let ledger = Ledger::new(self.gc.catalog.warehouse());
        let Some(listing) = self.job.listing(&Seq::Metadata, number).await? else {
            let mut entries = HashMap::new();
            for candidate in &page.candidates {
                entries.insert(candidate.name.clone(), ledger.read(&candidate.name).await?);
            }
            return Ok((entries, Vec::new()));
        };
        let previous = match number.checked_sub(1) {
            Some(previous) => {
                self.job
                    .page(&Seq::Metadata, previous)
                    .await?
                    .ok_or_else(|| self.missing("metadata"))?
                    .after
            }
            None => None,
        };
        let names: Vec<String> = listing
            .entries
            .into_iter()
            .filter(|entry| entry.skipped.is_none())
            .map(|entry| entry.name)
            .collect();
        let read = ledger
            .read_page(PageScope {
                range: &ListRange::whole(METADATA_DIR),
                after: previous.as_deref(),
                listed: &names,
                done: page.done,
            })
            .await?;
        Ok((read.entries, read.gone))
    }
}

/// What pass 1 learns from one page of `metadata/`.
#[derive(Default)]
struct MetadataPage {
    counts: Counts,
    /// The unreachable metadata files that may be deleted.
    candidates: Vec<Object>,
    /// What the listed files that exist name (rule (P)).
    referenced: Vec<String>,
    /// What they name that covers the very file naming it (rule (P)).
    self_covering: Vec<SelfCovering>,
    warnings: Vec<String>,
}

impl MetadataPage {
    /// Note one listed entry, what reading it found (`None`: read by the walk, or nested:
    /// not read), and whether the walk's `R` covers it.
    fn note(
        &mut self,
        nested: &mut Nested,
        item: ListItem,
        parsed: Option<Parsed>,
        covered: bool,
        (registry, warehouse): (&FamilyRegistry, &Warehouse),
    ) {
        let listed = match item {
            ListItem::Object(listed) => listed,
            skipped => {
                skip(&mut self.counts, &mut self.warnings, skipped);
                return;
            }
        };
        self.counts.scanned.add(listed.size);
        // A name that shows a nested catalog structure is never read (nor published).
        if nested.note(&listed.name) {
            self.counts.kept_nested.add(listed.size);
            return;
        }
        let foreign = match parsed {
            None => {
                self.counts.reachable.add(listed.size);
                return;
            }
            Some(Parsed::Missing) => return, // deleted since it was listed
            Some(Parsed::Metadata(metadata)) => {
                let refs = references_of(&metadata, registry, warehouse);
                for reference in refs.direct.into_iter().chain(refs.family) {
                    self.keep(&listed.name, true, reference);
                }
                None
            }
            Some(Parsed::Opaque {
                why,
                foreign_format,
                references,
            }) => {
                // What it may name (never a whole managed prefix: see `read_parsed`).
                for reference in references {
                    self.keep(&listed.name, foreign_format, reference);
                }
                foreign_format.then_some(why)
            }
        };
        if let Some(why) = foreign {
            self.counts.kept_unknown_format.add(listed.size);
            self.warnings.push(format!(
                "`{}` is index metadata of a format this collector does not understand ({why}); it is never deleted, nor is anything it names: remove it by hand if it is a stray",
                listed.name
            ));
        } else if covered {
            self.counts.reachable.add(listed.size);
        } else {
            self.candidates.push(Object {
                name: listed.name,
                size: listed.size,
                last_modified_ms: listed.last_modified_ms,
            });
        }
    }

    /// Keep what the existing file `file` (index metadata or not) names (rule (P)): all
    /// of `reference`, or, if it covers `file` itself in any spelling, all of it but
    /// `file` ([`SelfCovering`]).
    fn keep(&mut self, file: &str, metadata: bool, reference: String) {
        let covers_file = std::iter::once(file.to_owned())
            .chain(aliases(file))
            .any(|spelling| is_within(&spelling, &reference));
        if covers_file {
            self.self_covering.push(SelfCovering {
                reference,
                file: file.to_owned(),
                metadata,
            });
        } else {
            self.referenced.push(reference);
        }
    }
}
