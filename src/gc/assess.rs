//! Deciding one unreachable object: its retention clock, its condemnation, and whether
//! this run may delete it (the rules (G), (R), (C) and (P) of the [module docs](super)),
//! by the pure decisions of [`rules`](super::rules).

use std::sync::Arc;

use super::GarbageCollector;
use super::config::format_duration;
use super::job::{CarriedCondemnation, Doomed, Object, Plan};
use super::journal::JournalRef;
use super::ledger::{Ledger, LedgerEntry, Trust};
use super::reachability::Observation;
use super::refs::Protected;
use super::report::{ActionKind, GcCounts, GcReport};
use super::rules::{self, Clock, ClockDecision, Facts, Timing, Walk};
use crate::error::Result;
use crate::warehouse::layout::ledger_entry;

pub(crate) use super::lease::SharedLease;

/// Where an unreachable object stands.
pub(crate) enum Verdict {
    Grace,
    /// Its name is too long for the ledger: never tracked, never deleted.
    Unmirrorable,
    Pending,
    Retention,
    CondemnDelay,
    Referenced,
    Doomed(Doomed),
}

/// One object, decided.
pub(crate) struct Assessed {
    pub name: String,
    pub size: u64,
    pub verdict: Verdict,
    pub tracked: Option<String>,
    pub condemned: Option<String>,
    /// Its retention clock after the decision, if one stands (what the run's page
    /// carries).
    pub clock: Option<Clock>,
    /// Its condemnation on that clock, where the page carries it (a judge that marks
    /// condemnations, see [`Judge::carrying_clocks_on_pages`]).
    pub condemnation: Option<PageCondemnation>,
}

/// A condemnation a scan page carries.
pub(crate) enum PageCondemnation {
    /// Made by this page: its marker is still to be written.
    New,
    /// Made by an earlier run, whose marker is there.
    Carried(CarriedCondemnation),
}

/// The fixed inputs of one run's decisions, as one invocation sees them.
pub(crate) struct Judge<'a> {
    pub ledger: Ledger,
    /// Held while the run records ledger facts (see [`Judge::hold_lease`]).
    pub lease: &'a SharedLease,
    /// The run's decision time (see [`Plan::now_ms`]).
    pub now_ms: i64,
    /// The run's first walk.
    pub walk: Walk,
    /// The earliest walk a clock may come from ([`Plan::floor_ms`]).
    pub floor_ms: i64,
    /// The current time (the invocation's time plus what has elapsed since it started).
    pub clock: &'a (dyn Fn() -> i64 + Send + Sync),
    pub journal: JournalRef,
    /// Whose clock facts count.
    pub trust: Arc<Trust>,
    pub dry_run: bool,
    pub timing: Timing,
    /// Whether a clock this judge starts is written as a clock file of the object's
    /// ledger entry; the scan of `indexes/` carries its clocks on its pages instead
    /// ([`carried`](super::carried)), and writes one only for an entry that already
    /// holds clock files.
    pub clock_files: bool,
    /// Whether a condemnation this judge makes is left to the caller's page (which writes
    /// a marker for it and carries it) instead of written as a `c-` file of the object's
    /// entry.
    pub markers: bool,
}

fn ms_text(ms: i64) -> String {
    ms.to_string()
}

impl<'a> Judge<'a> {
    /// The judge of `plan`'s run for an invocation at `now_ms` (never later than the
    /// plan's decision time: a planner whose clock ran ahead decides nothing earlier).
    pub(crate) fn new(
        gc: &'a GarbageCollector,
        plan: &Plan,
        lease: &'a SharedLease,
        clock: &'a (dyn Fn() -> i64 + Send + Sync),
        trust: Arc<Trust>,
        now_ms: i64,
    ) -> Judge<'a> {
        let rules = plan.rules.strictest(super::job::Rules::of(&gc.config));
        Judge {
            ledger: Ledger::new(gc.catalog.warehouse()),
            lease,
            now_ms: plan.now_ms.min(now_ms),
            walk: Walk {
                start_ms: plan.walk_start_ms,
                end_ms: plan.observed_ms,
            },
            floor_ms: plan.floor_ms,
            clock,
            journal: plan.journal(),
            trust,
            dry_run: gc.config.dry_run,
            timing: rules.timing(),
            clock_files: true,
            markers: false,
        }
    }

    /// This judge, for objects whose clocks and condemnations the caller carries on its
    /// page (the scan of `indexes/`): it starts clocks without writing a clock file, and
    /// condemns without writing a `c-` file (the page writes the markers).
    pub(crate) fn carrying_clocks_on_pages(self) -> Judge<'a> {
        Judge {
            clock_files: false,
            markers: true,
            ..self
        }
    }

    /// Before recording a ledger fact: renew the lease once half of it has passed (in run
    /// time or on the monotonic clock). A run paused past its lease, whose lease another
    /// run took over, stops here instead of recording facts from its stale walk.
    async fn hold_lease(&self) -> Result<()> {
        let mut lease = self.lease.lock().await;
        if let Some(lease) = lease.as_mut() {
            let now = (self.clock)();
            if lease.needs_renewal(now) {
                super::lease::fence(Some(lease), now).await?;
            }
        }
        Ok(())
    }

    /// Decide one unreachable object whose ledger entry is `entry` (as
    /// [`Ledger::read_page`] read it with its page), writing the ledger transitions
    /// (unless dry).
    pub(crate) async fn assess(
        &self,
        observation: &Observation,
        referenced: &Protected,
        object: &Object,
        entry: LedgerEntry,
    ) -> Result<Assessed> {
        let mut assessed = Assessed {
            name: object.name.clone(),
            size: object.size,
            verdict: Verdict::Grace,
            tracked: None,
            condemned: None,
            clock: None,
            condemnation: None,
        };
        let name = object.name.as_str();
        // In-flight writers: never touch an object younger than the grace period (nor
        // read its ledger entry).
        let timing = &self.timing;
        if object
            .last_modified_ms
            .saturating_add(timing.grace_ms)
            .saturating_add(timing.skew_ms)
            > self.now_ms
        {
            return Ok(assessed);
        }
        // A name whose ledger entry would not fit the store's key limit cannot be
        // tracked: it is kept (and reported), and collection goes on around it.
        if !self.ledger.mirrors(name) {
            assessed.verdict = Verdict::Unmirrorable;
            return Ok(assessed);
        }
        let mut ledger_files = entry.files.clone();
        // An entry that holds clock files (an earlier release's, or written beside the
        // pages) records a new clock as a file too, even where the pages carry it: a run
        // that cannot read the pages falls back to the files, and must find the newest
        // clock there, never a clock this one replaced (round 131, F1).
        let clock_files = self.clock_files || !entry.clocks.is_empty();
        let facts = Facts {
            last_modified_ms: object.last_modified_ms,
            republished_ms: observation
                .history
                .republished
                .max_covering_any_spelling(name),
            clock: entry.trusted_clock(&self.trust),
            condemned_ms: entry.condemned_ms,
        };
        // The same matching as reachability: an object another spelling of which an
        // existing metadata file names stays while that file exists.
        let is_referenced = referenced.covers_any_spelling(name);
        let (decision, verdict) = rules::decide(
            &facts,
            self.walk,
            self.floor_ms,
            self.now_ms,
            is_referenced,
            timing,
        );
        assessed.clock = decision.clock();
        let restarted = matches!(decision, ClockDecision::Starts(_));
        if let ClockDecision::Starts(clock) = decision {
            let reason = match facts.clock {
                None => format!(
                    "found unreachable by the walk of {}; retention clock starts at {}",
                    ms_text(clock.walk_ms),
                    ms_text(clock.start_ms)
                ),
                Some(old) => format!(
                    "the retention clock from {} does not stand (published again, rewritten, or the catalog's records changed without a log); it starts again at {}",
                    ms_text(old.start_ms),
                    ms_text(clock.start_ms)
                ),
            };
            if clock_files && !self.dry_run {
                self.hold_lease().await?;
                ledger_files.push(
                    self.ledger
                        .record_clock(name, clock, self.journal, &reason)
                        .await?,
                );
            }
            assessed.tracked = Some(reason);
        }
        assessed.verdict = match verdict {
            rules::Verdict::Grace => Verdict::Grace,
            rules::Verdict::Pending => Verdict::Pending,
            rules::Verdict::Retention => Verdict::Retention,
            rules::Verdict::Condemn => {
                let clock_ms = decision.clock().map_or(i64::MIN, |clock| clock.start_ms);
                assessed.condemned = Some(self.condemn(name, clock_ms, &mut ledger_files).await?);
                if self.markers {
                    assessed.condemnation = Some(PageCondemnation::New);
                }
                if is_referenced {
                    Verdict::Referenced
                } else {
                    Verdict::CondemnDelay
                }
            }
            rules::Verdict::Referenced => Verdict::Referenced,
            rules::Verdict::CondemnDelay => Verdict::CondemnDelay,
            rules::Verdict::Delete => match (decision.clock(), facts.condemned_ms) {
                (Some(clock), Some(condemned_ms)) => Verdict::Doomed(Doomed {
                    name: name.to_owned(),
                    size: object.size,
                    clock_ms: clock.start_ms,
                    clock_walk_ms: clock.walk_ms,
                    ledger_files,
                    condemned_ms,
                    marker: entry.marker.as_ref().map(|marker| {
                        let dir = name.rsplit_once('/').map_or("", |(dir, _)| dir);
                        format!("{}/{}", ledger_entry(dir), marker.marker)
                    }),
                }),
                _ => Verdict::CondemnDelay,
            },
        };
        // A condemnation a marker holds goes on with its clock (a new clock voids it).
        if assessed.condemnation.is_none() && !restarted && self.markers {
            assessed.condemnation = entry.marker.map(PageCondemnation::Carried);
        }
        Ok(assessed)
    }

    /// Condemn `name`, unreachable since `clock_ms` (rule (C)): now, on the current
    /// clock, written to the ledger (unless dry) with the new file going to
    /// `ledger_files`. The condemnation's reason, for the report.
    async fn condemn(
        &self,
        name: &str,
        clock_ms: i64,
        ledger_files: &mut Vec<String>,
    ) -> Result<String> {
        let condemned_at = (self.clock)();
        let duration =
            |ms: i64| format_duration(std::time::Duration::from_millis(ms.max(0) as u64));
        let reason = format!(
            "unreachable since {} and retention {} elapsed; deleted by a run at least {} from now if still unreachable",
            ms_text(clock_ms),
            duration(self.timing.retention_ms),
            duration(self.timing.delay_ms)
        );
        if !self.dry_run && !self.markers {
            self.hold_lease().await?;
            ledger_files.push(
                self.ledger
                    .record_condemnation(name, condemned_at, self.journal, &reason)
                    .await?,
            );
        }
        Ok(reason)
    }
}

impl Judge<'_> {
    /// Whether an object a page doomed may still be deleted: under this invocation's
    /// rules (a resumer's may be more conservative than the plan's), its clock stands
    /// against what the change log says after the verification walk (`again`), whose
    /// floor is `floor_ms`, and the condemnation delay has passed.
    pub(crate) fn still_doomed(&self, doomed: &Doomed, again: &Observation, floor_ms: i64) -> bool {
        let facts = Facts {
            // The object was past grace when it was doomed, and a deletion never follows
            // a rewrite (a rewritten object is young again).
            last_modified_ms: i64::MIN,
            republished_ms: again
                .history
                .republished
                .max_covering_any_spelling(&doomed.name),
            clock: Some(doomed.clock()),
            condemned_ms: Some(doomed.condemned_ms),
        };
        rules::still_deletable(
            doomed.clock(),
            doomed.condemned_ms,
            &facts,
            self.floor_ms.max(floor_ms),
            self.now_ms,
            &self.timing,
        )
    }
}

/// What one page of assessments adds up to.
#[derive(Default)]
pub(crate) struct PageTally {
    pub counts: GcCounts,
    pub doomed: Vec<Doomed>,
    /// How many more objects this sequence may doom.
    pub room: u64,
}

impl PageTally {
    /// A tally that may doom `room` more objects.
    pub(crate) fn with_room(room: u64) -> PageTally {
        PageTally {
            room,
            ..PageTally::default()
        }
    }

    /// Count one decided object, and note its ledger transitions in `report`.
    pub(crate) fn record(&mut self, assessed: Assessed, report: &mut GcReport) {
        let Assessed {
            name,
            size,
            verdict,
            tracked,
            condemned,
            clock: _,
            condemnation: _,
        } = assessed;
        let counts = &mut self.counts;
        if let Some(reason) = tracked {
            counts.tracked.add(size);
            report.act(&name, size, ActionKind::Track, reason);
        }
        if let Some(reason) = condemned {
            counts.condemned.add(size);
            report.act(&name, size, ActionKind::Condemn, reason);
        }
        match verdict {
            Verdict::Grace => counts.kept_by_grace.add(size),
            Verdict::Unmirrorable => {
                counts.kept_unmirrorable.add(size);
                report.warnings.push(format!(
                    "`{name}` is unreachable but its name is too long for the collector's ledger (the store's key limit); it is kept: delete it by hand if it is garbage"
                ));
            }
            Verdict::Pending => counts.kept_recently_published.add(size),
            Verdict::Retention => counts.kept_by_retention.add(size),
            Verdict::CondemnDelay => counts.kept_by_condemn_delay.add(size),
            Verdict::Referenced => counts.kept_by_reference.add(size),
            Verdict::Doomed(doomed) => {
                if self.room == 0 {
                    counts.deferred.add(size);
                } else {
                    self.room -= 1;
                    self.doomed.push(doomed);
                }
            }
        }
    }
}
