//! Deciding one unreachable object: its retention clock, its condemnation, and whether
//! this run may delete it (the rules (G), (R), (C) and (P) of the [module docs](super)).

use std::sync::Arc;

use uuid::Uuid;

use super::GarbageCollector;
use super::config::format_duration;
use super::job::{Doomed, Object, Plan};
use super::lease::Lease;
use super::ledger::{Entry, JournalFacts, JournalRef, Kind, Ledger};
use super::reachability::Observation;
use super::refs::Protected;
use super::report::{ActionKind, Counts, GcReport};
use crate::error::Result;

/// The run's lease (none for a dry run), shared by a step's concurrent assessments.
pub(crate) type SharedLease = tokio::sync::Mutex<Option<Lease>>;

/// What cannot move a recorded retention clock: the incarnations (and the record states,
/// for re-incarnations) listed both by the previous finished run's journal and by the
/// journal of the run that recorded the clock.
///
/// The previous finished run looked at every ledger entry that existed during its sweep,
/// so an incarnation it listed cannot have published an object that entry tracked. But a
/// clock written by an earlier run may have landed after that sweep (its run's process
/// paused between its lease check and the write, and the write landed behind finished
/// runs; the store's time of such a write may be when it began) and was then never looked
/// at; the journal of the run that wrote it bounds what that run's walk knew, so an
/// incarnation newer than that walk still moves the clock. (Runs therefore re-record the
/// clocks of metadata files while re-incarnations are about: see [`Judge::assess`].)
/// Shared by a run's invocations; journals are read once.
pub(crate) struct Known {
    ledger: Ledger,
    previous: Option<JournalRef>,
    of_previous: Arc<JournalFacts>,
    by_clock: tokio::sync::Mutex<std::collections::HashMap<JournalRef, Arc<JournalFacts>>>,
}

impl Known {
    /// What the previous finished run `previous` listed (nothing for the first run).
    pub(crate) async fn read(ledger: Ledger, previous: Option<JournalRef>) -> Result<Known> {
        let of_previous = match previous {
            Some(previous) => ledger.read_journal(previous).await?,
            None => JournalFacts::default(),
        };
        Ok(Known {
            ledger,
            previous,
            of_previous: Arc::new(of_previous),
            by_clock: tokio::sync::Mutex::new(std::collections::HashMap::new()),
        })
    }

    /// What the previous finished run listed.
    pub(crate) fn of_previous(&self) -> &JournalFacts {
        &self.of_previous
    }

    /// What cannot move the clock of `entry` (a journal that is gone reads as listing
    /// nothing, which only delays deletion).
    pub(crate) async fn for_clock(&self, clock: Option<JournalRef>) -> Result<Arc<JournalFacts>> {
        let Some(clock) = clock.filter(|clock| Some(*clock) != self.previous) else {
            return Ok(self.of_previous.clone());
        };
        let mut cache = self.by_clock.lock().await;
        if let Some(known) = cache.get(&clock) {
            return Ok(known.clone());
        }
        let listed = self.ledger.read_journal(clock).await?;
        let known = Arc::new(listed.intersection(&self.of_previous));
        cache.insert(clock, known.clone());
        Ok(known)
    }
}

/// Where an unreachable object stands.
pub(crate) enum Verdict {
    Grace,
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
}

/// The fixed inputs of one run's decisions, as one invocation sees them.
pub(crate) struct Judge<'a> {
    pub ledger: Ledger,
    /// Held while the run records ledger facts (see [`Judge::hold_lease`]).
    pub lease: &'a SharedLease,
    /// The run's decision time (see [`Plan::now_ms`]).
    pub now_ms: i64,
    /// When the run's first walk had finished: what that walk found unreachable was
    /// reachable at most until then, so a retention clock that starts on this walk's
    /// evidence never starts earlier.
    pub observed_ms: i64,
    /// The current time (the invocation's time plus what has elapsed since it started).
    pub clock: &'a (dyn Fn() -> i64 + Send + Sync),
    pub journal: JournalRef,
    /// The incarnations that cannot move a recorded clock.
    pub known: Arc<Known>,
    /// Set when a run died since the previous finished run: every existing clock is raised
    /// to this run's observation (`observed_ms`).
    pub dead_run_reset: bool,
    pub dry_run: bool,
    pub retention_ms: i64,
    pub grace_ms: i64,
    pub delay_ms: i64,
    pub skew_ms: i64,
    pub strict_reincarnation: bool,
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
        known: Arc<Known>,
        now_ms: i64,
    ) -> Judge<'a> {
        let rules = plan.rules.strictest(super::collect::rules_of(&gc.config));
        Judge {
            ledger: Ledger::new(gc.catalog.warehouse()),
            lease,
            now_ms: plan.now_ms.min(now_ms),
            observed_ms: plan.observed_ms,
            clock,
            journal: plan.journal(),
            known,
            dead_run_reset: !plan.dead.is_empty(),
            dry_run: gc.config.dry_run,
            retention_ms: rules.retention_ms,
            grace_ms: rules.grace_ms,
            delay_ms: rules.delay_ms,
            skew_ms: rules.skew_ms,
            strict_reincarnation: rules.strict_reincarnation,
        }
    }

    /// Before recording a ledger fact: renew the lease once half of it has passed (in run
    /// time or on the monotonic clock). A run paused past its lease, whose lease another
    /// run took over (and which may have finished since, seeing objects reachable that this
    /// run's walk found unreachable), stops here instead of recording clocks from its stale
    /// walk.
    async fn hold_lease(&self) -> Result<()> {
        let mut lease = self.lease.lock().await;
        if let Some(lease) = lease.as_mut() {
            let now = (self.clock)();
            if lease.needs_renewal(now) {
                super::collect::fence(Some(lease), now).await?;
            }
        }
        Ok(())
    }

    /// The latest time evidence says `relative` may still have been reachable: a recent
    /// tombstone whose metadata references it; a run that died after possibly seeing it
    /// reachable; for a metadata file of index `uuid` whose recorded clock is `recorded`,
    /// an incarnation unknown to the previous finished run that may have published it
    /// since (same uuid, or — strict — any re-incarnation).
    pub(crate) fn evidence_floor(
        &self,
        observation: &Observation,
        relative: &str,
        uuid: Option<Uuid>,
        recorded: Option<i64>,
        known: &JournalFacts,
    ) -> Option<(i64, String)> {
        let evidence = &observation.evidence;
        let mut floor: Option<(i64, String)> = evidence
            .tombstone_refs
            .max_covering_any_spelling(relative)
            .map(|at| (at, format!("a tombstone dropped at {at} references it")));
        let Some(clock_ms) = recorded else {
            return floor;
        };
        if self.dead_run_reset && clock_ms < self.observed_ms {
            floor = Some((
                self.observed_ms,
                "an earlier gc run died after possibly seeing it reachable".to_owned(),
            ));
        }
        if let Some(uuid) = uuid {
            let lineage =
                evidence.lineage_after(uuid, clock_ms, self.strict_reincarnation, &known.writes);
            for incarnation in lineage {
                if !known.incarnations.contains(&incarnation.created_by)
                    && floor
                        .as_ref()
                        .is_none_or(|(at, _)| incarnation.updated_ms > *at)
                {
                    let why = if incarnation.index_uuid == Some(uuid) {
                        "a new incarnation of an identifier of the same index"
                    } else {
                        "a re-incarnated identifier"
                    };
                    floor = Some((
                        incarnation.updated_ms,
                        format!(
                            "{why} ({}) changed at {}",
                            incarnation.created_by, incarnation.updated_ms
                        ),
                    ));
                }
            }
        }
        floor
    }

    /// Whether to record the standing clock of `object` again under this run's journal: a
    /// metadata file (the only objects the lineage evidence concerns) whose clock another
    /// run recorded, while strict re-incarnation evidence is about.
    fn restamps(
        &self,
        observation: &Observation,
        object: &Object,
        clock: Option<JournalRef>,
    ) -> bool {
        !self.dry_run
            && self.strict_reincarnation
            && object.uuid.is_some()
            && !observation.evidence.reincarnations.is_empty()
            && clock.is_some_and(|clock| clock != self.journal)
    }

    /// Decide one unreachable object, writing the ledger transitions (unless dry).
    pub(crate) async fn assess(
        &self,
        observation: &Observation,
        referenced: &Protected,
        object: &Object,
    ) -> Result<Assessed> {
        let mut assessed = Assessed {
            name: object.name.clone(),
            size: object.size,
            verdict: Verdict::Grace,
            tracked: None,
            condemned: None,
        };
        let relative = object.name.as_str();
        // In-flight writers: never touch an object younger than the grace period.
        let past_grace_ms = object.last_modified_ms.saturating_add(self.grace_ms);
        if past_grace_ms.saturating_add(self.skew_ms) > self.now_ms {
            return Ok(assessed);
        }
        let entry = self.ledger.read(relative).await?;
        let mut ledger_files = entry.files.clone();
        let known = self.known.for_clock(entry.clock_journal).await?;
        let (clock_ms, evidence_why) =
            self.clock_of(observation, object, &entry, past_grace_ms, &known);
        assessed.tracked = self
            .record_clock(
                observation,
                object,
                &entry,
                (clock_ms, &evidence_why),
                &mut ledger_files,
            )
            .await?;
        let retention_ends = clock_ms.saturating_add(self.retention_ms);
        if self.now_ms < retention_ends {
            assessed.verdict = Verdict::Retention;
            return Ok(assessed);
        }
        // A condemnation counts only if made after this clock's retention window passed.
        // It is stamped with the time it is written (not the run's start), so register
        // and commit, which refuse condemned objects, are bounded against it.
        let condemned_ms = match entry.condemned_ms.filter(|at| *at >= retention_ends) {
            Some(at) => at,
            None => {
                let (condemned_at, reason) =
                    self.condemn(relative, clock_ms, &mut ledger_files).await?;
                assessed.condemned = Some(reason);
                condemned_at
            }
        };
        // The same matching as reachability: an object another spelling of which an
        // existing metadata file names stays while that file exists.
        if referenced.covers_any_spelling(relative) {
            assessed.verdict = Verdict::Referenced;
            return Ok(assessed);
        }
        if self.now_ms < condemned_ms.saturating_add(self.delay_ms) {
            assessed.verdict = Verdict::CondemnDelay;
            return Ok(assessed);
        }
        assessed.verdict = Verdict::Doomed(Doomed {
            name: relative.to_owned(),
            size: object.size,
            clock_ms,
            uuid: object.uuid,
            ledger_files,
            condemned_ms,
        });
        Ok(assessed)
    }

    /// The retention clock of `object` (rule (R)) whose ledger `entry` this is, past grace
    /// at `past_grace_ms`, and why evidence moved it (empty if none did): the recorded
    /// clock raised by evidence, or for an object first seen unreachable the walk's time
    /// (or the catalog's quiet time) raised by evidence. `known` is what cannot move it.
    fn clock_of(
        &self,
        observation: &Observation,
        object: &Object,
        entry: &Entry,
        past_grace_ms: i64,
        known: &JournalFacts,
    ) -> (i64, String) {
        let relative = object.name.as_str();
        let evidence = self.evidence_floor(
            observation,
            relative,
            object.uuid,
            entry.clock_start_ms,
            known,
        );
        let (evidence, evidence_why) = match evidence {
            Some((at, why)) => (Some(at), why),
            None => (None, String::new()),
        };
        let clock_ms = match entry.clock_start_ms {
            Some(recorded) => recorded
                .max(past_grace_ms)
                .max(evidence.unwrap_or(i64::MIN)),
            None => {
                // First seen unreachable now; the catalog's quiet time (no record changed
                // since) proves it was unreachable since then already.
                let quiet = &observation.evidence;
                // Never before the walk that found it unreachable had finished.
                let observed = match quiet.quiet_since_ms {
                    Some(since) if quiet.quiet_usable => {
                        self.observed_ms.min(since.saturating_add(self.skew_ms))
                    }
                    Some(_) => self.observed_ms,
                    None if quiet.quiet_usable => i64::MIN,
                    None => self.observed_ms,
                };
                observed
                    .max(past_grace_ms)
                    .max(self.first_sight_floor_ms())
                    .max(evidence.unwrap_or(i64::MIN))
            }
        };
        (clock_ms, evidence_why)
    }

    /// The earliest retention clock of an object first seen now: one that keeps it at
    /// least the grace period from now, whatever its last-modified time says. Its
    /// deletion needs the retention from the clock, then the condemnation delay `B`; when
    /// `B` is shorter than the grace, a file copied in with an old modification time
    /// (`cp -p`, `rsync -a`, `aws s3 sync`) would otherwise go `B` after it was first
    /// seen, under a writer that has not published it yet.
    fn first_sight_floor_ms(&self) -> i64 {
        let short_delay_ms = self.grace_ms.saturating_sub(self.delay_ms).max(0);
        if short_delay_ms == 0 {
            return i64::MIN;
        }
        // Now, not the run's decision time: a run's later invocations list files copied
        // in after it was planned.
        (self.clock)()
            .max(self.now_ms)
            .saturating_add(self.skew_ms)
            .saturating_add(short_delay_ms)
            .saturating_sub(self.retention_ms)
    }

    /// Record the retention clock `clock_ms` of `object` (moved by `evidence_why`) in the
    /// ledger when it differs from the one `entry` holds (unless dry), or record it again
    /// under this run's journal when [`Judge::restamps`] says so; the new ledger file goes
    /// to `ledger_files`. The reason of a new or moved clock, for the report.
    async fn record_clock(
        &self,
        observation: &Observation,
        object: &Object,
        entry: &Entry,
        (clock_ms, evidence_why): (i64, &str),
        ledger_files: &mut Vec<String>,
    ) -> Result<Option<String>> {
        let relative = object.name.as_str();
        if entry.clock_start_ms != Some(clock_ms) {
            let reason = match entry.clock_start_ms {
                None => format!(
                    "first seen unreachable; retention clock starts at {}",
                    ms_text(clock_ms)
                ),
                Some(old) => format!(
                    "new evidence moves the retention clock from {} to {}: {evidence_why}",
                    ms_text(old),
                    ms_text(clock_ms)
                ),
            };
            if !self.dry_run {
                self.hold_lease().await?;
                ledger_files.push(
                    self.ledger
                        .record(relative, Kind::Clock, clock_ms, self.journal, &reason)
                        .await?,
                );
            }
            return Ok(Some(reason));
        }
        if self.restamps(observation, object, entry.clock_journal) {
            // The same clock, recorded again under this run's journal: a name dropped and
            // registered again between every two runs then moves it only when this run's
            // successor cannot vouch for what replaced it (see [`Known`]). A clock this
            // run writes is as sound as any it raises: its walk and its evidence decided it.
            self.hold_lease().await?;
            ledger_files.push(
                self.ledger
                    .record(
                        relative,
                        Kind::Clock,
                        clock_ms,
                        self.journal,
                        "the retention clock stands (recorded again by this run)",
                    )
                    .await?,
            );
        }
        Ok(None)
    }

    /// Condemn `relative`, unreachable since `clock_ms` (rule (C)): now, on the current
    /// clock, written to the ledger (unless dry) with the new file going to
    /// `ledger_files`. The condemnation's time and its reason, for the report.
    async fn condemn(
        &self,
        relative: &str,
        clock_ms: i64,
        ledger_files: &mut Vec<String>,
    ) -> Result<(i64, String)> {
        let condemned_at = (self.clock)();
        let reason = format!(
            "unreachable since {} and retention {} elapsed; deleted by a run at least {} from now if still unreachable",
            ms_text(clock_ms),
            format_duration(std::time::Duration::from_millis(
                self.retention_ms.max(0) as u64
            )),
            format_duration(std::time::Duration::from_millis(self.delay_ms.max(0) as u64))
        );
        if !self.dry_run {
            self.hold_lease().await?;
            ledger_files.push(
                self.ledger
                    .record(
                        relative,
                        Kind::Condemned,
                        condemned_at,
                        self.journal,
                        &reason,
                    )
                    .await?,
            );
        }
        Ok((condemned_at, reason))
    }
}

impl Judge<'_> {
    /// Whether an object a page doomed is still deletable under this invocation's rules
    /// (a resumer's may be more conservative than the plan's): its condemnation came
    /// after its retention ended, and the condemnation delay has passed since.
    pub(crate) fn still_doomed(&self, doomed: &Doomed) -> std::result::Result<(), Verdict> {
        if doomed.condemned_ms < doomed.clock_ms.saturating_add(self.retention_ms) {
            return Err(Verdict::Retention);
        }
        if self.now_ms < doomed.condemned_ms.saturating_add(self.delay_ms) {
            return Err(Verdict::CondemnDelay);
        }
        Ok(())
    }
}

/// What one page of assessments adds up to.
#[derive(Default)]
pub(crate) struct PageTally {
    pub counts: Counts,
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
