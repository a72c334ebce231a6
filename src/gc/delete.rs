//! The delete step, and the deleting both deleting steps share: delete what is still
//! doomed after the verification walk (metadata files first, in the verify step; then each
//! partition of `indexes/`), and sweep the ledger of what is reachable again or gone.
//!
//! Deletion pages mirror the pages that doomed their objects (`deleted/m/<k>` covers
//! `assessed/<k>`, `deleted/<p>/<k>` covers `scan/<p>/<k>`); the lease is proved before
//! every batch. Deleting an object that is already gone is a success, so a page redone
//! after a crash deletes nothing twice.

use std::collections::HashMap;
use std::sync::Arc;

use futures::{StreamExt, TryStreamExt};

use super::assess::Judge;
use super::dangling::DanglingReferences;
use super::job::{Doomed, Page, Rules, Seq, Walk};
use super::ledger::{Ledger, Trust};
use super::refs::RefMap;
use super::release::{Deleted, DeletionRecords};
use super::report::{ActionKind, GcCounts, GcPhase, GcProgress};
use super::run::Invocation;
use super::scan::Nested;
use super::step::{GcStep, StepOutcome};
use crate::error::{Error, ErrorKind, Result};
use crate::warehouse::{Deletion, ListItem, ListRange, METADATA_DIR, is_within};

/// How many objects of one batch (or page) the store refused to delete, or to describe,
/// a run names in its warnings (the rest are counted, and summed up in one more warning).
const NAMED_REFUSALS: usize = 5;

impl Invocation<'_> {
    /// The delete step for partition `partition`: its doomed objects, then its ledger.
    pub(crate) async fn delete(mut self, partition: usize) -> Result<StepOutcome> {
        let step = GcStep::Delete {
            run: self.plan.run_id,
            partition,
        };
        let range = self.partition(partition)?.clone();
        self.require_done(&Seq::DeletedMetadata, "the verify step (metadata files)")
            .await?;
        let verified = self
            .run
            .verified()
            .await?
            .ok_or_else(|| self.missing("verified.json"))?;
        if !self
            .delete_pages(&Seq::Scan(partition), &Seq::Deleted(partition), &verified)
            .await?
        {
            return Ok(self.outcome(step, false));
        }
        let observed = self.observed().await?;
        let done = self
            .sweep(&range, &Seq::Swept(partition), &observed, &verified)
            .await?;
        if done {
            let timing = self
                .run
                .plan
                .rules
                .strictest(Rules::of(&self.gc.config))
                .timing();
            let cleared = self.release_deletions(partition, &timing).await?;
            self.report.add_counts(&GcCounts {
                ledger_files_cleared: cleared,
                ..GcCounts::default()
            });
        }
        Ok(self.outcome(step, done))
    }

    /// Delete the doomed objects of every page of `input` not yet covered by a page of
    /// `output`; `true` once all are.
    pub(crate) async fn delete_pages(
        &mut self,
        input: &Seq,
        output: &Seq,
        verified: &Walk,
    ) -> Result<bool> {
        let numbers = self.job.page_numbers(input).await?;
        let covered = self.job.page_numbers(output).await?;
        let Some(&last_number) = numbers.last() else {
            return Err(self.missing("the pages to delete from"));
        };
        let mut previous = match covered.last() {
            Some(number) => self.job.page(output, *number).await?,
            None => None,
        };
        if previous.as_ref().is_some_and(|page| page.done) {
            return Ok(true);
        }
        let nested = Nested::of(verified.nested.clone());
        let trust = self.trust().await?;
        // Publications logged from a settle before the verification walk may have landed
        // after it (see `dangling`).
        let walked = self.job.dangling().await?;
        let walk_start_ms = walked
            .as_ref()
            .map_or(self.plan.walk_start_ms, |walked| walked.walk_start_ms);
        let settle_ms = self
            .run
            .plan
            .rules
            .strictest(Rules::of(&self.gc.config))
            .timing()
            .settle_ms;
        let walked = walked.unwrap_or_default();
        let mut dangling = DanglingReferences::new(
            walked.references,
            walked.directories,
            walk_start_ms.saturating_sub(settle_ms),
        );
        // What the run's other delete steps read already.
        for guard in self.job.guards().await? {
            dangling.absorb(guard);
        }
        for number in numbers {
            if covered.contains(&number) {
                continue;
            }
            if self.out_of_time() {
                return Ok(false);
            }
            let doomed = self
                .job
                .page(input, number)
                .await?
                .ok_or_else(|| self.missing("a page of doomed objects"))?
                .doomed;
            let (counts, deleted) = self
                .delete_doomed(doomed, verified, &nested, &trust, &mut dangling)
                .await?;
            // Their entries stay until a later run releases this record (`release`).
            DeletionRecords::new(self.gc.catalog.warehouse())
                .write(self.plan.journal(), &output.dir(), number, deleted)
                .await?;
            let mut totals = previous
                .as_ref()
                .map(|page| page.totals)
                .unwrap_or_default();
            totals.merge(&counts);
            let page = Page {
                seq: number,
                done: number == last_number,
                totals,
                ..Page::default()
            };
            let page = self.write_page(output, page).await?;
            self.report.add_counts(&counts);
            previous = Some(page);
        }
        Ok(true)
    }

    /// Delete the still-doomed objects of one page: anything in a nested subtree, reachable
    /// again at the verification walk, or whose clock no longer stands against the change
    /// log read after that walk, is kept; so is anything a file written since at one of
    /// the walk's `dangling` family references names (read again before every batch), and
    /// anything whose condemnation is too old to act on by then. Returns the counts and the
    /// ledger files of the deleted objects' entries (kept: see `release`).
    async fn delete_doomed(
        &mut self,
        doomed: Vec<Doomed>,
        verified: &Walk,
        nested: &Nested,
        trust: &Arc<Trust>,
        dangling: &mut DanglingReferences,
    ) -> Result<(GcCounts, Deleted)> {
        let mut counts = GcCounts::default();
        let ledger = Ledger::new(self.gc.catalog.warehouse());
        let mut deletable = Vec::new();
        let (mut unseen, mut named_unseen) = (0, Vec::new());
        let timing;
        {
            let clock = self.clock();
            let judge = Judge::new(
                self.gc,
                &self.plan,
                &self.lease,
                &clock,
                trust.clone(),
                self.now_ms,
            );
            timing = judge.timing;
            let again = &verified.observation;
            // Records the change log cannot explain at the verification walk: every clock
            // dated before it is void.
            let floor_ms = if again.history.unexplained.is_empty() {
                i64::MIN
            } else {
                i64::MAX
            };
            let mut linked = RefMap::default();
            for target in &verified.linked {
                linked.insert(target.clone(), 0);
            }
            for item in doomed {
                if nested.covers(&item.name) {
                    counts.kept_nested.add(item.size);
                    continue;
                }
                // A symbolic link in the warehouse leads here: named by it.
                if linked.covers_any_spelling(&item.name) {
                    counts.kept_by_reference.add(item.size);
                    continue;
                }
                let reachable_again = again.reachable.covers_any_spelling(&item.name);
                if reachable_again || !judge.still_doomed(&item, again, floor_ms) {
                    counts.kept_at_verification.add(item.size);
                    if reachable_again && !self.gc.config.dry_run {
                        counts.ledger_files_cleared +=
                            ledger.delete(item.ledger_files).await? as u64;
                    }
                    continue;
                }
                if item.size == 0 {
                    match self.written_since(&item, &judge.timing).await {
                        Ok(false) => {}
                        Ok(true) => {
                            counts.kept_by_grace.add(item.size);
                            continue;
                        }
                        // Whatever keeps the store from answering for it (a directory
                        // made unsearchable, round 93, G1; an object written with a
                        // customer-provided key, whose `HEAD` is refused without it,
                        // round 100, F2; a failure): it may have been written since, so
                        // it is kept, and collection goes on around it.
                        Err(err) => {
                            counts.kept_by_grace.add(item.size);
                            unseen += 1;
                            if unseen <= NAMED_REFUSALS {
                                named_unseen.push(format!(
                                    "`{}` was not deleted: looking at it again before the delete failed ({}); it is kept",
                                    item.name,
                                    err.full_message()
                                ));
                            }
                            continue;
                        }
                    }
                }
                deletable.push(item);
            }
        }
        self.report.warnings.extend(named_unseen);
        if unseen > NAMED_REFUSALS {
            self.report.warnings.push(format!(
                "{} more empty objects of the page could not be looked at again; they are kept",
                unseen - NAMED_REFUSALS
            ));
        }
        if self.gc.config.dry_run {
            for item in deletable {
                counts.deleted.add(item.size);
                self.report.act(
                    &item.name,
                    item.size,
                    ActionKind::Delete,
                    format!("would delete: {}", item.reason(&self.run.plan.rules)),
                );
            }
            return Ok((counts, Deleted::default()));
        }
        self.gc.emit(GcProgress::Phase {
            phase: GcPhase::Delete,
        });
        let mut deleted = Deleted::default();
        let mut items = deletable.into_iter().peekable();
        while items.peek().is_some() {
            let batch: Vec<Doomed> = items
                .by_ref()
                .take(self.gc.config.delete_batch_size)
                .collect();
            let batch = self
                .recheck_batch(batch, dangling, &timing, &mut counts)
                .await?;
            // The lease is proved last, right before the deletes.
            self.still_current().await?;
            self.fence().await?;
            deleted.merge(self.delete_batch(&mut counts, batch).await?);
        }
        Ok((counts, deleted))
    }

    /// Right before a batch's deletes: keep what a file that appeared at one of the
    /// dangling family references names (see `dangling`), and what is condemned too long
    /// ago to act on ([`rules::condemnation_current`](super::rules::condemnation_current):
    /// a later run condemns it again).
    async fn recheck_batch(
        &mut self,
        batch: Vec<Doomed>,
        dangling: &mut DanglingReferences,
        timing: &super::rules::Timing,
        counts: &mut GcCounts,
    ) -> Result<Vec<Doomed>> {
        let now = self.elapsed_now();
        let (batch, stale): (Vec<Doomed>, Vec<Doomed>) = batch
            .into_iter()
            .partition(|item| super::rules::condemnation_current(item.condemned_ms, now, timing));
        for item in stale {
            counts.kept_by_condemn_delay.add(item.size);
        }
        let catalog = &self.gc.catalog;
        let reread = dangling
            .reread(
                catalog.warehouse(),
                catalog.registry(),
                self.gc.config.io_concurrency,
            )
            .await?;
        if reread.learned {
            self.job
                .write_guard(self.elapsed_now(), catalog.ids().uuid(), dangling)
                .await?;
        }
        if let Some(why) = dangling.blind() {
            let warning = format!("{why}, so nothing more is deleted this run");
            if !self.report.warnings.contains(&warning) {
                self.report.warnings.push(warning);
            }
        }
        for file in reread.appeared {
            self.report.warnings.push(format!(
                "`{file}`, which a live family reference names, did not exist or did not parse as metadata at the verification walk; read before the deletes, what it names is kept"
            ));
        }
        let (kept, batch): (Vec<Doomed>, Vec<Doomed>) = batch
            .into_iter()
            .partition(|item| dangling.names(&item.name));
        for item in kept {
            counts.kept_at_verification.add(item.size);
        }
        Ok(batch)
    }

    /// Whether an empty doomed object has been replaced since it was listed: the name now
    /// holds bytes, or was written within the grace period. An object store's folder
    /// marker `k/` lists as an object `k` (`object_store` drops the `/`), and deleting it
    /// deletes the key `k`: a file written there later is not the object the run doomed.
    /// Empty objects are few, so this costs one `HEAD` per doomed empty object.
    async fn written_since(&self, item: &Doomed, timing: &super::rules::Timing) -> Result<bool> {
        let now = match self.gc.catalog.warehouse().head(&item.name).await? {
            Some(now) => now,
            None => return Ok(false),
        };
        let young = now
            .last_modified_ms
            .saturating_add(timing.grace_ms)
            .saturating_add(timing.skew_ms)
            > self.elapsed_now();
        Ok(now.size != 0 || young)
    }

    /// Delete one batch; returns what the deletion's record lists (see `release`). An
    /// object already gone counts as deleted (idempotent reruns); one the warehouse refuses
    /// to delete (a symbolic link on its path) is kept and reported.
    async fn delete_batch(&mut self, counts: &mut GcCounts, batch: Vec<Doomed>) -> Result<Deleted> {
        let warehouse = self.gc.catalog.warehouse();
        let names: Vec<String> = batch.iter().map(|item| item.name.clone()).collect();
        let mut outcomes: HashMap<String, Deletion> =
            warehouse.delete(names).await.into_iter().collect();
        let mut failure = None;
        let mut deleted = Deleted::default();
        let mut refused = 0;
        let mut stuck = None;
        let rules = self.run.plan.rules;
        for item in batch {
            match outcomes.remove(&item.name) {
                Some(Deletion::Deleted | Deletion::Missing) => {
                    counts.deleted.add(item.size);
                    self.report.act(
                        &item.name,
                        item.size,
                        ActionKind::Delete,
                        item.reason(&rules),
                    );
                    deleted.add(item);
                }
                // A file under `metadata/` that may name anything keeps all of `indexes/`
                // until it goes itself: kept with a warning, it held everything for good,
                // quietly (round 100, F1). The run stops on it instead, naming it. (Any
                // other file kept here keeps only what it names.)
                Some(Deletion::Refused(why))
                    if is_within(&item.name, METADATA_DIR)
                        && super::metadata::may_name_anything(
                            warehouse,
                            self.gc.catalog.registry(),
                            &item.name,
                        )
                        .await? =>
                {
                    counts.kept_nested.add(item.size);
                    stuck.get_or_insert(Error::new(
                        ErrorKind::StoreRefused,
                        format!(
                            "gc stopped: `{}` may name any file, so nothing under `indexes/` is collected while it exists, and it cannot be deleted ({why}): let the collector delete it, or delete it by hand",
                            item.name
                        ),
                    ));
                }
                Some(Deletion::Refused(why)) => {
                    counts.kept_nested.add(item.size);
                    refused += 1;
                    if refused <= NAMED_REFUSALS {
                        self.report
                            .warnings
                            .push(format!("`{}` was not deleted: {why}", item.name));
                    }
                }
                Some(Deletion::Failed(err)) => {
                    failure.get_or_insert(err);
                }
                None => {}
            }
        }
        if refused > NAMED_REFUSALS {
            self.report.warnings.push(format!(
                "{} more objects of the batch were not deleted for the same kind of reason; they are kept",
                refused - NAMED_REFUSALS
            ));
        }
        if let Some(stuck) = stuck {
            return Err(stuck);
        }
        match failure {
            None => Ok(deleted),
            Some(err) => Err(Error::new(
                ErrorKind::StoreUnavailable,
                format!(
                    "gc stopped: deleting from the warehouse failed; a rerun resumes safely: {}",
                    err.message()
                ),
            )),
        }
    }

    /// Sweep the ledger entries of `range`'s objects, page by page: clear those of
    /// objects reachable at either walk, and the condemnation markers whose condemnation
    /// expired; `true` once the sweep is complete.
    pub(crate) async fn sweep(
        &mut self,
        range: &ListRange,
        seq: &Seq,
        observed: &Walk,
        verified: &Walk,
    ) -> Result<bool> {
        if self.gc.config.dry_run {
            // A dry run clears nothing: its sweep is complete at once.
            if self.job.last_page(seq).await?.is_none() {
                let page = Page {
                    done: true,
                    ..Page::default()
                };
                self.write_page(seq, page).await?;
            }
            return Ok(true);
        }
        let ledger = Ledger::new(self.gc.catalog.warehouse());
        let mut last = self.job.last_page(seq).await?;
        let (first, second) = (
            &observed.observation.reachable,
            &verified.observation.reachable,
        );
        // Markers are cleared once their condemnation expired (by the run's decision
        // time: a planner whose clock ran ahead clears nothing earlier).
        let now_ms = self.plan.now_ms.min(self.now_ms);
        self.fence().await?;
        loop {
            if let Some(page) = &last {
                if page.done {
                    return Ok(true);
                }
                if self.out_of_time() {
                    return Ok(false);
                }
            }
            self.keep_lease().await?;
            let after = last.as_ref().and_then(|page| page.after.clone());
            let listed: Vec<_> = ledger
                .list_range(range, after.as_deref())
                .take(self.gc.config.page_size)
                .try_collect()
                .await?;
            let done = listed.len() < self.gc.config.page_size;
            let position = listed.last().map(|entry| entry.position.clone()).or(after);
            // The entries of objects gone are cleared by the scan that lists them
            // (`Ledger::read_page`): no request per entry here.
            let mut expired = Vec::new();
            let stale: Vec<String> = listed
                .into_iter()
                .filter_map(|entry| {
                    let ListItem::Object(file) = entry.item else {
                        return None;
                    };
                    if ledger.marker_expired(&file, now_ms) {
                        expired.push(file.name);
                        return None;
                    }
                    let object = ledger.object_of(&file.name)?;
                    covered(first, second, &object).then_some(file.name)
                })
                .collect();
            let cleared = ledger.delete(stale).await? + ledger.delete_markers(expired).await?;
            let counts = GcCounts {
                ledger_files_cleared: cleared as u64,
                ..GcCounts::default()
            };
            let mut totals = last.as_ref().map(|page| page.totals).unwrap_or_default();
            totals.merge(&counts);
            let page = Page {
                seq: last.as_ref().map_or(0, |page| page.seq + 1),
                after: position,
                done,
                totals,
                ..Page::default()
            };
            let page = self.write_page(seq, page).await?;
            self.report.add_counts(&counts);
            last = Some(page);
        }
    }

    /// The ledger's `metadata/` entries: what the finish step sweeps.
    pub(crate) fn metadata_range() -> ListRange {
        ListRange::whole(METADATA_DIR)
    }
}

fn covered(first: &RefMap, second: &RefMap, object: &str) -> bool {
    first.covers_any_spelling(object) || second.covers_any_spelling(object)
}
