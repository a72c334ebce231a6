//! The verify step: walk the catalog and read the change log again, once every partition
//! is scanned and right before anything is deleted (rule V), then delete the doomed
//! metadata files (the `delete` submodule's deleting).

use std::sync::Arc;

use super::job::{Seq, Walk};
use super::ledger::Ledger;
use super::report::{GcPhase, GcProgress};
use super::run::Invocation;
use super::scan::Nested;
use super::step::{GcStep, StepOutcome};
use crate::error::Result;
use crate::warehouse::MANAGED_PREFIXES;

/// How many link targets one verification names in its warnings.
const MAX_LINK_WARNINGS: usize = 5;

impl Invocation<'_> {
    /// The verify step: the verification walk (once per run), then the doomed metadata
    /// files.
    pub(crate) async fn verify(mut self) -> Result<StepOutcome> {
        let step = GcStep::Verify {
            run: self.plan.run_id,
        };
        let verified = self.verification_walk().await?;
        let done = self
            .delete_pages(&Seq::Assessed, &Seq::DeletedMetadata, &verified)
            .await?;
        Ok(self.outcome(step, done))
    }

    /// The verification walk: written once (`verified.json`, with every nested root the
    /// scans found), after proving the lease.
    async fn verification_walk(&mut self) -> Result<Arc<Walk>> {
        let scans: Vec<Seq> = (0..self.plan.partitions.len()).map(Seq::Scan).collect();
        let scanned = self
            .require_all_done(&scans, |seq| match seq {
                Seq::Scan(partition) => format!("the scan of partition {partition}"),
                _ => String::new(),
            })
            .await?;
        if let Some(walk) = self.run.verified().await? {
            return Ok(walk);
        }
        self.gc.emit(GcProgress::Phase {
            phase: GcPhase::Verify,
        });
        let assessed = self.job.last_page(&Seq::Assessed).await?;
        let metadata = self.job.last_page(&Seq::Metadata).await?;
        let mut nested = Nested::from(metadata.as_ref()).into_roots();
        let mut linked: std::collections::BTreeSet<String> = metadata
            .map(|page| page.linked.into_iter().collect())
            .unwrap_or_default();
        let mut doomed = assessed.map_or(0, |page| page.doomed_total);
        for page in scanned {
            nested.extend(page.nested);
            linked.extend(page.linked);
            doomed += page.doomed_total;
        }
        for root in &nested {
            self.report.warnings.push(format!(
                "`{root}` holds another warehouse's ownership marker or a pointer store's records; nothing below it is ever collected. Move that warehouse or pointer store out of this warehouse's managed prefixes"
            ));
        }
        for target in linked.iter().take(MAX_LINK_WARNINGS) {
            self.report.warnings.push(format!(
                "`{target}` is where a symbolic link in the warehouse leads; it is kept while the link is there"
            ));
        }
        let linked: Vec<String> = linked.into_iter().collect();
        let rules = self.plan.rules;
        let walk = if self.gc.config.dry_run || doomed == 0 {
            // Nothing to delete (or a dry run, which deletes nothing): the first walk
            // stands in for the verification walk, as the sweep's second reachable set.
            let observed = self
                .job
                .observed()
                .await?
                .ok_or_else(|| self.missing("observed.json"))?;
            Walk {
                observation: observed.observation,
                nested,
                linked,
            }
        } else {
            self.fence().await?;
            let catalog = &self.gc.catalog;
            let concurrency = self.gc.config.io_concurrency.max(1);
            let walk_start_ms = self.elapsed_now();
            // What the plan started from (its previous run, untrusted journal, adoption).
            let mut previous = Ledger::new(catalog.warehouse())
                .journals()
                .previous_facts(self.plan.previous, self.plan.untrusted)
                .await?;
            previous.adopted_since = self.plan.adopted_since;
            let mut observation = super::reachability::observe(
                catalog,
                self.plan.now_ms,
                rules.skew_ms,
                &previous,
                concurrency,
            )
            .await?;
            // The change log after the walk: anything published since the run's plan keeps
            // what it names, and records the log cannot explain keep everything.
            observation.history = super::history::read(
                catalog,
                observation.walked(),
                &previous,
                &rules.timing(),
                walk_start_ms,
                self.plan.epoch_ms.unwrap_or(i64::MIN),
                concurrency,
            )
            .await?;
            // What every symbolic link in the managed prefixes leads to (a local
            // warehouse), read by its real bytes, wherever it lies: the collector never
            // deletes a link, and which tables a reader reads it follows (live, replaced,
            // retained, named in another spelling) is more than any set of names says
            // (rounds 65-68). So one made after the scans passed it names its target too;
            // and below the live names outside them (source tables in the warehouse).
            let outside: Vec<String> = observation
                .reachable
                .names()
                .chain(observation.history.republished.names())
                .filter(|name| {
                    !MANAGED_PREFIXES
                        .iter()
                        .any(|prefix| crate::warehouse::is_within(name, prefix))
                })
                .cloned()
                .collect();
            let searched = MANAGED_PREFIXES
                .iter()
                .map(|prefix| (*prefix).to_owned())
                .chain(outside)
                .collect();
            let mut linked = linked;
            let below = catalog.warehouse().links_below(searched).await?;
            linked.extend(below.targets);
            // A place the walk cannot read may hold a link to anything (round 66):
            // nothing is deleted this run. So may an overlay's layers, where an overlay
            // serves the warehouse (round 87, O1).
            if let Some(at) = catalog.warehouse().overlay_serving().await? {
                linked.extend(MANAGED_PREFIXES.iter().map(|prefix| (*prefix).to_owned()));
                self.report.warnings.push(format!(
                    "the warehouse lies on an overlay mount at `{at}`, whose layers show its files at other paths the collector cannot tell: nothing is deleted. Keep a local warehouse on a plain file system (a volume), not on an overlay"
                ));
            }
            if let Some(why) = below.unread {
                linked.extend(MANAGED_PREFIXES.iter().map(|prefix| (*prefix).to_owned()));
                self.report.warnings.push(format!(
                    "in the warehouse, {why}: a symbolic link there may lead anywhere, so nothing is deleted this run. Make it readable to the collector, or remove it (or move the mount out of the warehouse)"
                ));
            }
            // A link to a whole managed prefix or the root that a reader of a kept table
            // reaches keeps everything there (`wide_links`), searched for only when the
            // whole search found such a link at all.
            if !below.wide.is_empty() {
                let referenced = self.referenced().await?;
                let live = observation
                    .reachable
                    .names()
                    .chain(observation.history.republished.names());
                let reached =
                    super::wide_links::reached(catalog.warehouse(), live, referenced.names())
                        .await?;
                for (n, wide) in reached.into_iter().enumerate() {
                    if n < MAX_LINK_WARNINGS {
                        self.report.warnings.push(wide.warning());
                    }
                    linked.extend(wide.prefixes);
                }
            }
            // A link that may lead anywhere keeps everything while it is there (round 69,
            // U1): say which, so that collection can resume once it is removed.
            if let Some(link) = below.boundless {
                self.report.warnings.push(format!(
                    "the symbolic link `{link}` may lead anywhere (to a directory with more entries than a search for links reads, a place it cannot read, or a path that is no name, outside the warehouse or not there): everything is kept while it is there. Remove it, or point it at a smaller directory inside the warehouse"
                ));
            }
            linked.sort_unstable();
            linked.dedup();
            // A walk slower than half the lease (or a pause in it) must not be written
            // behind a run that took the lease over meanwhile, which counted this run as
            // dead and started its clocks before this walk ended (round 135, K2).
            self.fence().await?;
            // When it started and its dangling family references go first (see
            // `dangling`).
            let dangling = super::job::Dangling {
                walk_start_ms,
                references: std::mem::take(&mut observation.dangling),
                directories: std::mem::take(&mut observation.directories),
            };
            self.job
                .write_dangling(catalog.ids().uuid(), &dangling)
                .await?;
            Walk {
                observation,
                nested,
                linked,
            }
        };
        self.job.write_verified(&walk).await?;
        // Another worker may have written its walk first: use the stored one.
        self.run
            .verified()
            .await?
            .ok_or_else(|| self.missing("verified.json"))
    }
}
