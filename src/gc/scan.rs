//! The scan step: list one partition of `indexes/` page by page and decide what is
//! unreachable, checkpointing every page (`scan/<p>/<seq>.json`).
//!
//! A partition is scanned whole by the run before anything of the run is deleted, and so
//! is every other: the nested roots a page finds are kept with the partition's pages, and
//! the deletion steps keep whatever lies below any nested root any partition found (an
//! ownership marker directly in `indexes/` marks all of it).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use futures::{StreamExt, TryStreamExt};

use super::assess::{Judge, PageCondemnation, PageTally};
use super::carried::{Carried, CarriedReader};
use super::job::{CarriedCondemnation, CarriedPage, Object, Page, Seq, Walk};
use super::ledger::{Ledger, LedgerEntry, PageScope, Trust};
use super::refs::{Protected, RefMap};
use super::report::GcCounts;
use super::rules::Clock;
use super::run::{Invocation, NextPage, PageListing};
use super::step::{GcStep, StepOutcome};
use crate::error::{Error, Result};
use crate::warehouse::layout::{condemnation_visible, nested_root};
use crate::warehouse::{ListItem, ListRange};

/// The directory of the object `name` (what its condemnation marker is written under).
fn directory_of(name: &str) -> &str {
    name.rsplit_once('/').map_or("", |(dir, _)| dir)
}

/// How many skipped listing entries one page names in its warnings.
const MAX_SKIP_WARNINGS: usize = 5;

/// The nested catalog structures found so far in a sequence.
#[derive(Default)]
pub(crate) struct Nested {
    map: RefMap,
    roots: Vec<String>,
}

impl Nested {
    /// The nested roots a sequence's newest page recorded.
    pub(crate) fn from(page: Option<&Page>) -> Nested {
        Nested::of(page.map(|page| page.nested.clone()).unwrap_or_default())
    }

    /// These roots.
    pub(crate) fn of(roots: Vec<String>) -> Nested {
        let mut nested = Nested::default();
        for root in roots {
            nested.add(root);
        }
        nested
    }

    fn add(&mut self, root: String) {
        if !self.map.covers(&root) {
            self.roots.push(root.clone());
        }
        self.map.insert(root, 0);
    }

    /// Note a listed object; `true` if it shows a nested catalog structure.
    pub(crate) fn note(&mut self, name: &str) -> bool {
        match nested_root(name) {
            Some(root) => {
                self.add(root);
                true
            }
            None => false,
        }
    }

    /// Whether `name` lies in a nested subtree found so far.
    pub(crate) fn covers(&self, name: &str) -> bool {
        self.map.covers(name)
    }

    pub(crate) fn into_roots(self) -> Vec<String> {
        self.roots
    }
}

/// What the symbolic links found so far in a sequence lead to: those of its newest page
/// `last`, and the targets of the entries a page skipped that are links (`skipped`, a
/// local warehouse) and that `names` says name what they lead to: a link that is
/// reachable or referenced, or young (a writer may publish it within the grace period of
/// making it). The listing never follows a link; the verification walk looks again below
/// every reachable name. A link in garbage, old, keeps nothing: its target is collected.
pub(crate) async fn linked_so_far(
    warehouse: &crate::warehouse::Warehouse,
    last: Option<&Page>,
    skipped: Vec<String>,
    names: impl Fn(&str, i64) -> bool,
) -> Result<Vec<String>> {
    let mut linked: std::collections::BTreeSet<String> = last
        .map(|page| page.linked.iter().cloned().collect())
        .unwrap_or_default();
    if !skipped.is_empty() {
        for (link, target, landed_ms) in warehouse.link_targets_dated(skipped).await? {
            if names(&link, landed_ms) {
                linked.insert(target);
            }
        }
    }
    Ok(linked.into_iter().collect())
}

/// Count (and, for the first few of a page, name) a skipped listing entry.
pub(crate) fn skip(counts: &mut GcCounts, warnings: &mut Vec<String>, item: ListItem) {
    let ListItem::Skipped { name, reason } = item else {
        return;
    };
    counts.skipped += 1;
    if warnings.len() < MAX_SKIP_WARNINGS {
        // Control characters are shown escaped (a terminal must not act on them).
        let shown = |text: &str| -> String {
            text.chars()
                .map(|c| match c.is_control() {
                    true => c.escape_default().to_string(),
                    false => c.to_string(),
                })
                .collect()
        };
        warnings.push(format!(
            "skipped `{}`: {}; it is never deleted",
            shown(&name),
            shown(&reason)
        ));
    }
}

/// One entry of a scanned page, decided.
enum Scanned {
    Skipped(ListItem),
    Reachable(u64),
    Nested(String, u64),
    Assessed(super::assess::Assessed),
}

/// What a scan decides its pages by, read once per invocation.
struct ScanBasis<'a> {
    /// The run's first walk.
    walk: &'a Walk,
    /// What unreachable metadata names (rule (P)).
    referenced: &'a Protected,
    /// Whose ledger facts count.
    trust: &'a Arc<Trust>,
    /// The invocation's clock.
    clock: &'a (dyn Fn() -> i64 + Send + Sync),
    /// The partition.
    range: &'a ListRange,
    /// The previous finished run's carried clocks, if any.
    carried: Option<&'a mut CarriedReader>,
}

impl Invocation<'_> {
    /// The scan step for partition `partition`.
    pub(crate) async fn scan(mut self, partition: usize) -> Result<StepOutcome> {
        let step = GcStep::Scan {
            run: self.plan.run_id,
            partition,
        };
        let range = self.partition(partition)?.clone();
        self.require_done(&Seq::Assessed, "the plan step (metadata/)")
            .await?;
        let seq = Seq::Scan(partition);
        let mut last = self.job.last_page(&seq).await?;
        if last.as_ref().is_some_and(|page| page.done) {
            return Ok(self.outcome(step, true));
        }
        let walk = self.observed().await?;
        let referenced = self.referenced().await?;
        let trust = self.trust().await?;
        let mut carried = self.carried().await?;
        let clock = self.clock();
        loop {
            let listing = match self.next_page(&seq, &range, last.as_ref()).await? {
                NextPage::Done => return Ok(self.outcome(step, true)),
                NextPage::OutOfTime => return Ok(self.outcome(step, false)),
                NextPage::Listed(listing) => listing,
            };
            let basis = ScanBasis {
                walk: &walk,
                referenced: &referenced,
                trust: &trust,
                clock: &clock,
                range: &range,
                carried: carried.as_mut(),
            };
            last = Some(self.scan_page(&seq, listing, last.as_ref(), basis).await?);
        }
    }

    /// One page of a partition's scan after `last`: decide every object of `listing`, and
    /// write the page (its doomed objects, the nested roots found so far).
    async fn scan_page(
        &mut self,
        seq: &Seq,
        listing: PageListing,
        last: Option<&Page>,
        basis: ScanBasis<'_>,
    ) -> Result<Page> {
        let gc = self.gc;
        let ScanBasis {
            walk,
            referenced,
            trust,
            clock,
            range,
            carried,
        } = basis;
        // Only objects have ledger entries and clocks: a skipped entry's name is not an
        // object's (on a local disk it is the path as shown, which sorts nowhere near the
        // page).
        let objects: Vec<String> = listing
            .entries
            .iter()
            .filter(|entry| entry.skipped.is_none())
            .map(|entry| entry.name.clone())
            .collect();
        let (entries, gone) = self
            .page_entries(
                range,
                last,
                &listing.entries,
                &objects,
                listing.done,
                carried,
            )
            .await?;
        let mut clocks = Vec::new();
        let doomed_so_far = last.map_or(0, |page| page.doomed_total);
        let mut tally = PageTally::with_room(self.plan.max_doomed.saturating_sub(doomed_so_far));
        let mut nested = Nested::from(last);
        let mut links = Vec::new();
        let mut warnings = Vec::new();
        {
            let judge = Judge::new(
                gc,
                &self.run.plan,
                &self.run.lease,
                clock,
                trust.clone(),
                self.now_ms,
            )
            .carrying_clocks_on_pages();
            let (judge, observation) = (&judge, &walk.observation);
            let mut decided = futures::stream::iter(listing.entries.into_iter().zip(entries))
                .map(|(entry, ledger_entry)| async move {
                    let ListItem::Object(listed) = entry.item() else {
                        return Ok::<_, Error>(Scanned::Skipped(entry.item()));
                    };
                    if observation.reachable.covers_any_spelling(&listed.name) {
                        return Ok(Scanned::Reachable(listed.size));
                    }
                    if nested_root(&listed.name).is_some() {
                        return Ok(Scanned::Nested(listed.name, listed.size));
                    }
                    let object = Object {
                        name: listed.name,
                        size: listed.size,
                        last_modified_ms: listed.last_modified_ms,
                    };
                    Ok(Scanned::Assessed(
                        judge
                            .assess(observation, referenced, &object, ledger_entry)
                            .await?,
                    ))
                })
                .buffer_unordered(gc.config.io_concurrency.max(1));
            while let Some(item) = decided.try_next().await? {
                match item {
                    Scanned::Skipped(skipped) => {
                        if let ListItem::Skipped { name, .. } = &skipped {
                            links.push(name.clone());
                        }
                        skip(&mut tally.counts, &mut warnings, skipped)
                    }
                    Scanned::Reachable(size) => {
                        tally.counts.scanned.add(size);
                        tally.counts.reachable.add(size);
                    }
                    Scanned::Nested(name, size) => {
                        tally.counts.scanned.add(size);
                        tally.counts.kept_nested.add(size);
                        nested.note(&name);
                    }
                    Scanned::Assessed(mut assessed) => {
                        if let Some(clock) = assessed.clock {
                            let condemnation = assessed.condemnation.take();
                            clocks.push((assessed.name.clone(), clock, condemnation));
                        }
                        tally.counts.scanned.add(assessed.size);
                        tally.record(assessed, &mut self.report);
                    }
                }
            }
        }
        tally.counts.ledger_files_cleared += self.clear_gone(gone).await?;
        let timing = self.run.plan.rules.timing();
        let young_from = self.now_ms - timing.grace_ms - timing.skew_ms;
        let names = |link: &str, landed_ms: i64| {
            landed_ms > young_from
                || walk.observation.reachable.covers_any_spelling(link)
                || referenced.covers_any_spelling(link)
        };
        let linked = linked_so_far(gc.catalog.warehouse(), last, links, names).await?;
        let mut totals = last.map(|page| page.totals).unwrap_or_default();
        totals.merge(&tally.counts);
        if !objects.is_empty() {
            // The page's clocks are the run's ledger facts for its objects: like a clock
            // file, they are written under a live lease (a run paused past its lease,
            // which another run took over, stops here).
            self.keep_lease().await?;
            let clocks = self.mark(clocks, listing.number).await?;
            let carried = CarriedPage::of(gc.catalog.warehouse(), &objects, clocks);
            self.job
                .write_carried(seq, listing.number, &carried)
                .await?;
        }
        let page = Page {
            seq: listing.number,
            after: listing.after,
            done: listing.done,
            totals,
            doomed: tally.doomed,
            nested: nested.into_roots(),
            linked,
            warnings,
            ..Page::default()
        }
        .counting_doomed(doomed_so_far);
        let page = self.write_page(seq, page).await?;
        self.report.add_counts(&tally.counts);
        self.report.warnings.extend(page.warnings.iter().cloned());
        gc.scanned(tally.counts.scanned);
        Ok(page)
    }

    /// The ledger entries of a page's listed entries (in the order of `listed`, empty for
    /// an entry without one) and the files of entries whose object the page shows gone,
    /// read with the page ([`Ledger::read_page`]), with the clocks the previous finished
    /// run carried for them (`carried`). `names` are the objects of `listed`, in order;
    /// `last` is the sequence's previous page.
    async fn page_entries(
        &self,
        range: &ListRange,
        last: Option<&Page>,
        listed: &[super::job::StoredItem],
        names: &[String],
        done: bool,
        carried: Option<&mut CarriedReader>,
    ) -> Result<(Vec<LedgerEntry>, Vec<String>)> {
        let ledger = Ledger::new(self.gc.catalog.warehouse());
        let read = ledger
            .read_page(PageScope {
                range,
                after: last.and_then(|page| page.after.as_deref()),
                listed: names,
                done,
                now_ms: self.plan.now_ms.min(self.now_ms),
            })
            .await?;
        let (carried, superseding) = match carried {
            Some(reader) => (
                reader.clocks(names).await?,
                reader.superseding(names).await?,
            ),
            None => Default::default(),
        };
        let markers = self.markers_of(&ledger, &carried).await?;
        // A name listed twice (an object store's folder marker `k/` lists as `k` too) is
        // decided with the same entry both times.
        let entries = listed
            .iter()
            .map(|entry| {
                let mut ledger = read.entries.get(&entry.name).cloned().unwrap_or_default();
                ledger.superseded = superseding.contains(&entry.name);
                let Some(carried) = carried.get(&entry.name) else {
                    return ledger;
                };
                ledger.carried = Some(carried.clock);
                // A carried condemnation counts while its marker is there, from when the
                // marker became visible.
                let marked = carried.condemned.as_ref().and_then(|condemned| {
                    let dir = directory_of(&entry.name);
                    let landed = markers.get(dir)?.get(&condemned.marker)?;
                    Some((condemned, condemnation_visible(condemned.ms, *landed)))
                });
                if let Some((condemned, visible)) = marked {
                    ledger.condemned_ms =
                        Some(ledger.condemned_ms.map_or(visible, |c| c.max(visible)));
                    ledger.marker = Some(condemned.clone());
                }
                ledger
            })
            .collect();
        Ok((entries, read.gone))
    }

    /// The markers of the directories of the objects `carried` holds a condemnation of:
    /// one listing per directory (see [`Ledger::markers`]).
    async fn markers_of(
        &self,
        ledger: &Ledger,
        carried: &HashMap<String, Carried>,
    ) -> Result<HashMap<String, HashMap<String, i64>>> {
        let dirs: BTreeSet<String> = carried
            .iter()
            .filter(|(_, carried)| carried.condemned.is_some())
            .map(|(name, _)| directory_of(name).to_owned())
            .collect();
        futures::stream::iter(dirs)
            .map(|dir| {
                let ledger = ledger.clone();
                async move {
                    let markers = ledger.markers(&dir).await?;
                    Ok::<_, Error>((dir, markers))
                }
            })
            .buffer_unordered(self.gc.config.io_concurrency.max(1))
            .try_collect()
            .await
    }

    /// Write the markers of the condemnations `clocks` (a page's carried clocks) makes
    /// new, one per directory, under a live lease (not in a dry run, whose page carries
    /// none); the clocks, each with the condemnation the page carries. A marker is
    /// stamped with the run's decision time, so that the page redone after a kill finds
    /// the markers it wrote (a condemnation counts from when its marker landed anyway).
    async fn mark(
        &self,
        clocks: Vec<(String, Clock, Option<PageCondemnation>)>,
        page: u64,
    ) -> Result<Vec<(String, Clock, Option<CarriedCondemnation>)>> {
        let mut fresh: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (name, _, condemnation) in &clocks {
            if matches!(condemnation, Some(PageCondemnation::New)) {
                let base = name.rsplit('/').next().unwrap_or(name);
                let dir = directory_of(name).to_owned();
                fresh.entry(dir).or_default().push(base.to_owned());
            }
        }
        let mut made = HashMap::new();
        if !fresh.is_empty() && !self.gc.config.dry_run {
            let ledger = Ledger::new(self.gc.catalog.warehouse());
            let journal = self.plan.journal();
            let stamp = self.plan.now_ms;
            made = futures::stream::iter(fresh)
                .map(|(dir, names)| {
                    let ledger = ledger.clone();
                    async move {
                        let marker = ledger
                            .record_marker(&dir, names, stamp, journal, page)
                            .await?;
                        Ok::<_, Error>((dir, marker))
                    }
                })
                .buffer_unordered(self.gc.config.io_concurrency.max(1))
                .try_collect()
                .await?;
        }
        Ok(clocks
            .into_iter()
            .map(|(name, clock, condemnation)| {
                let condemned = match condemnation {
                    Some(PageCondemnation::Carried(carried)) => Some(carried),
                    Some(PageCondemnation::New) => made.get(directory_of(&name)).cloned(),
                    None => None,
                };
                (name, clock, condemned)
            })
            .collect())
    }

    /// Clear the ledger files of objects that are gone (not in a dry run), keeping the
    /// lease; how many were cleared.
    pub(crate) async fn clear_gone(&self, gone: Vec<String>) -> Result<u64> {
        if gone.is_empty() || self.gc.config.dry_run {
            return Ok(0);
        }
        self.keep_lease().await?;
        let ledger = Ledger::new(self.gc.catalog.warehouse());
        Ok(ledger.delete(gone).await? as u64)
    }

    /// The range of partition `partition`.
    pub(crate) fn partition(&self, partition: usize) -> Result<&crate::warehouse::ListRange> {
        self.plan.partitions.get(partition).ok_or_else(|| {
            Error::new(
                crate::error::ErrorKind::InvalidRequest,
                format!(
                    "gc run {} has partitions 0..{}; there is no partition {partition}",
                    self.plan.run_id,
                    self.plan.partitions.len()
                ),
            )
        })
    }
}
