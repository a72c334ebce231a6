//! The plan step's pass over `metadata/`, after the run has started (the `plan`
//! submodule): two passes, page by page. Pass 1 reads every unreachable metadata file and
//! records what it names (rule (P)); pass 2 decides each candidate once everything (P)
//! needs is known (a metadata file may name another).

use std::collections::HashMap;

use futures::{StreamExt, TryStreamExt};

use super::assess::{Judge, PageTally};
use super::carried::CarriedReader;
use super::job::{CarriedPage, Object, Page, Referenced, Seq, Walk};
use super::ledger::{Ledger, LedgerEntry, PageScope};
use super::refs::{Protected, SelfCovering};
use super::report::GcCounts;
use super::run::{Invocation, NextPage, PageListing};
use super::scan::{Nested, skip};
use crate::error::{Error, Result};
use crate::family::FamilyRegistry;
use crate::metadata::named::{Parsed, read_parsed, references_of};
use crate::warehouse::layout::nested_root;
use crate::warehouse::{
    ListItem, ListRange, MANAGED_PREFIXES, METADATA_DIR, Warehouse, aliases, is_within,
};

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
                    .write(
                        journal,
                        &walk.observation.records,
                        &walk.observation.history.vanished,
                        (self.plan.epoch_ms, Some(self.plan.floor_ms)),
                    )
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
        let mut links = Vec::new();
        while let Some((item, parsed)) = read.try_next().await? {
            let covered = match &item {
                ListItem::Object(listed) => reachable.covers_any_spelling(&listed.name),
                ListItem::Skipped { name, .. } => {
                    links.push(name.clone());
                    false
                }
            };
            read_page.note(&mut nested, item, parsed, covered, (registry, warehouse));
        }
        drop(read);
        let timing = self.run.plan.rules.timing();
        let young_from = self.now_ms - timing.grace_ms - timing.skew_ms;
        let names = |link: &str, landed_ms: i64| {
            landed_ms > young_from || reachable.covers_any_spelling(link)
        };
        let linked = super::scan::linked_so_far(warehouse, last, links, names).await?;
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
            linked,
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
        let mut totals = GcCounts::default();
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
        // The clocks the previous finished run carried on its assessed pages; its clock
        // files of earlier runs count only where it neither reached the file nor carried
        // clocks (rounds 141 and 143).
        let mut carried = self
            .run
            .previous(self.gc.catalog.warehouse())
            .await?
            .map(|previous| CarriedReader::of_metadata(self.gc.catalog.warehouse(), previous));
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
            let names: Vec<String> = read.candidates.iter().map(|c| c.name.clone()).collect();
            let (carried_clocks, superseding) = match carried.as_mut() {
                Some(reader) => (
                    reader.clocks(&names).await?,
                    reader.superseding(&names).await?,
                ),
                None => Default::default(),
            };
            let candidates: Vec<(Object, LedgerEntry)> = read
                .candidates
                .into_iter()
                .map(|candidate| {
                    // A name listed twice is decided with the same entry both times.
                    let mut entry = entries.get(&candidate.name).cloned().unwrap_or_default();
                    entry.superseded = superseding.contains(&candidate.name);
                    entry.carried = carried_clocks.get(&candidate.name).map(|c| c.clock);
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
            let clocks: Vec<_> = decided
                .iter()
                .filter_map(|item| item.clock.map(|clock| (item.name.clone(), clock, None)))
                .collect();
            for item in decided {
                tally.record(item, &mut self.report);
            }
            tally.counts.ledger_files_cleared += self.clear_gone(gone).await?;
            // The page's clocks, carried as the scan's are (written under a live lease,
            // before the page): the next run reads them beside its own (round 143). A page
            // without candidates carries an empty file all the same, so that a run whose
            // pass found no candidate at all still says it carried every clock (round 144).
            self.keep_lease().await?;
            let page = CarriedPage::of(self.gc.catalog.warehouse(), &names, clocks);
            self.job
                .write_carried(&Seq::Assessed, number, &page)
                .await?;
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
                now_ms: self.plan.now_ms.min(self.now_ms),
            })
            .await?;
        Ok((read.entries, read.gone))
    }
}

/// Whether the file `name` under `metadata/` may name anything, as pass 1 reads it (its
/// reading gives up, or it is too large to read): while it exists it keeps all of
/// `indexes/` ([`MetadataPage::keep_all`]). `false` if it is gone.
pub(super) async fn may_name_anything(
    warehouse: &Warehouse,
    registry: &FamilyRegistry,
    name: &str,
) -> Result<bool> {
    let references: Vec<String> = match read_parsed(warehouse, registry, name).await? {
        Parsed::Metadata(metadata) => {
            let refs = references_of(&metadata, registry, warehouse);
            refs.direct().chain(&refs.family).cloned().collect()
        }
        Parsed::Opaque { references, .. } => references,
        Parsed::Unbounded(_) => return Ok(true),
        Parsed::Missing => return Ok(false),
    };
    Ok(references.iter().any(|reference| reference == METADATA_DIR))
}

/// What kind of file names what it names, for rule (P).
#[derive(Debug, Clone, Copy)]
struct FileKind {
    /// Index metadata (of any format): never one of the tables of what it names.
    metadata: bool,
    /// Never deleted (a format this collector does not understand).
    never: bool,
    /// The walk's `R` covers it: it is live, and never collected while it is.
    covered: bool,
}

/// What pass 1 learns from one page of `metadata/`.
#[derive(Default)]
struct MetadataPage {
    counts: GcCounts,
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
                let references = refs.direct().chain(&refs.family).cloned().collect();
                let kind = FileKind {
                    metadata: true,
                    never: false,
                    covered,
                };
                self.keep_all(&listed.name, kind, references);
                None
            }
            Some(Parsed::Opaque {
                why,
                foreign_format,
                references,
                ..
            }) => {
                // What it may name (a whole managed prefix only where reading it gave up:
                // see `read_parsed`).
                let kind = FileKind {
                    metadata: foreign_format,
                    never: foreign_format,
                    covered,
                };
                self.keep_all(&listed.name, kind, references);
                foreign_format.then_some(why)
            }
            // Too large to read to the end: it may name anything, as a file whose reading
            // gave up (a live directory may hold it, or come to).
            Some(Parsed::Unbounded(why)) => {
                self.warnings.push(format!(
                    "`{}` under `metadata/` is no metadata and is not read ({why})",
                    listed.name
                ));
                let kind = FileKind {
                    metadata: false,
                    never: false,
                    covered,
                };
                let everything = MANAGED_PREFIXES.iter().map(|p| (*p).to_owned()).collect();
                self.keep_all(&listed.name, kind, everything);
                None
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

    /// Keep what the existing file `file` names (rule (P)).
    ///
    /// A file that may name anything (reading it gave up, or it is too large to read: it
    /// names every managed prefix) keeps all of `indexes/`; an unreachable one, which
    /// will be collected, goes first: of `metadata/` it keeps only the files it names as
    /// written. Two such files would otherwise each keep the other (and a file naming
    /// one of them), and nothing would ever be collected again. One the walk reaches (a
    /// file in a live directory), or one never deleted (a format this collector does not
    /// understand), keeps all of `metadata/` too. Each is reported: nothing under
    /// `indexes/` goes while it exists.
    fn keep_all(&mut self, file: &str, kind: FileKind, references: Vec<String>) {
        let gave_up = references.iter().any(|r| r == METADATA_DIR);
        let goes_first = gave_up && !kind.covered && !kind.never;
        if gave_up {
            let (kept, why) = match (kind.covered, kind.never) {
                (true, _) => (
                    "nothing",
                    "a live index reaches it: replace it, or what names its directory",
                ),
                (false, true) => (
                    "nothing",
                    "it is never deleted: remove it by hand if it is a stray",
                ),
                (false, false) => ("nothing under `indexes/`", "it is collected itself in time"),
            };
            self.warnings.push(format!(
                "`{file}` may name any file of the warehouse (reading it gave up at a bound, or it holds a location no reader reads as it is written): {kept} is collected while it exists ({why})"
            ));
        }
        for reference in references {
            match (reference == METADATA_DIR, goes_first) {
                // It goes first: of `metadata/` it keeps what it names as written.
                (true, true) => {}
                // All of it, itself included (it stays anyway).
                (true, false) => self.referenced.push(reference),
                (false, _) => self.keep(file, kind.metadata, reference),
            }
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
