//! The collector's decisions as pure functions of durable evidence and time: when an
//! unreachable object's retention clock may start, and when it may be condemned and
//! deleted. The collector's steps (`assess`, the verify step) and the
//! model check of the protocol (`tests/it/gc/model.rs`) call these same functions.
//!
//! # The evidence
//! * A **walk** of the catalog (its start and its end): an object no pointer reached at
//!   the walk was unreachable when each record was read, so it lost reachability no later
//!   than the walk's end.
//! * The **change log** (`_gc/changes/`, written by the catalog before every pointer
//!   write): a publication logged at `at` lands, if ever, within the publish window of
//!   `at` (on the writer's clock), so a walk starting `settle = window + 2 × skew` after
//!   `at` sees it or its successor. What a logged publication names may have been
//!   reachable until any time after `at`; only a walk that starts `settle` after `at`
//!   and finds it unreachable dates its loss.
//! * **Clock facts** in the ledger: a walk that found the object unreachable, written by
//!   a run that then finished (facts of runs that never finished, or that landed after
//!   their run's finish, are not trusted).
//! * A **floor**: the earliest walk any clock may come from (the warehouse's ownership
//!   epoch: adopting a warehouse restarts every clock; and, when the catalog's records
//!   changed in a way the change log does not explain — a restored backup, a hand edit —
//!   the current walk).
//!
//! # The rule
//! A clock stands only if its walk started no earlier than every event that could have
//! made the object reachable since: the floor, the latest logged publication naming it
//! plus `settle`, and its last modification plus the grace (a rewritten object starts
//! over). Otherwise the current walk starts it — if it started late enough itself — or
//! the object waits for a later walk ([`ClockDecision::Pending`]). A clock is always a
//! walk's end, never an estimate: nothing dates a loss earlier than a walk that saw it.

/// The collector's time bounds, in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    /// How long an object stays unreachable before it may be condemned.
    pub retention_ms: i64,
    /// How young an object may be and still belong to a writer in flight.
    pub grace_ms: i64,
    /// `B`: how long a condemnation stands before the object is deleted.
    pub delay_ms: i64,
    /// The clock-skew allowance between writers, the store and the collector.
    pub skew_ms: i64,
    /// How long after its change-log entry a publication has certainly landed or failed,
    /// as any walk sees it: the publish window plus twice the skew.
    pub settle_ms: i64,
}

/// A walk of the catalog, by the collector's clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Walk {
    /// When it started reading records (no later than the first read).
    pub start_ms: i64,
    /// When it had read every record.
    pub end_ms: i64,
}

/// A retention clock recorded in the ledger.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Clock {
    /// When the clock started: the end of the walk that found the object unreachable.
    pub start_ms: i64,
    /// When that walk started.
    pub walk_ms: i64,
}

/// What a run knows of one unreachable object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Facts {
    /// Its last-modified time.
    pub last_modified_ms: i64,
    /// The latest change-log entry whose publication names it (or another spelling).
    pub republished_ms: Option<i64>,
    /// The latest trusted clock in its ledger entry.
    pub clock: Option<Clock>,
    /// Its latest condemnation (when it became visible).
    pub condemned_ms: Option<i64>,
}

/// Whether a clock fact counts: it is the current run's own, or its run finished and the
/// fact landed (the store's time) no later than the run's finish mark (`done_ms`). A fact
/// of a run that never finished, or one that landed after its run finished (an
/// invocation's write that was in flight when another invocation finished the run), was
/// never looked at by the runs that came after it.
pub fn trusts(own: bool, landed_ms: i64, done_ms: Option<i64>) -> bool {
    own || done_ms.is_some_and(|done| landed_ms <= done)
}

/// Whether a record state is explained: the previous finished run saw this commit at this
/// key (`seen`), or the change log announces it (`logged`). Anything else was written by
/// something other than this catalog (a restored backup, a hand edit).
pub fn explained(seen: bool, logged: bool) -> bool {
    seen || logged
}

/// The earliest walk a clock may come from: the ownership epoch, or this walk itself when
/// the evidence since the previous finished run is incomplete (`restart`): some record is
/// unexplained, or a run planned since then never finished (what its walk found reachable
/// is lost with it: round 133, J1).
pub fn floor(epoch_ms: i64, restart: bool, walk_start_ms: i64) -> i64 {
    if restart {
        epoch_ms.max(walk_start_ms)
    } else {
        epoch_ms
    }
}

/// Whether a change-log entry logged at `at_ms` has settled for a walk starting at
/// `walk_start_ms`: its publication landed (or failed) strictly before the walk began, so
/// the walk saw its outcome. A finished run prunes the entries settled for its own walk.
pub fn settled(at_ms: i64, walk_start_ms: i64, timing: &Timing) -> bool {
    at_ms.saturating_add(timing.settle_ms) < walk_start_ms
}

pub use crate::catalog::changelog::taken;

/// Whether a change-log entry logged at `at_ms` that publishes a file condemned at
/// `condemned_ms` was necessarily refused: its publication checked for condemnations
/// strictly after this one was visible (an entry is logged within the publish window of
/// the check).
pub fn refused(at_ms: i64, condemned_ms: Option<i64>, timing: &Timing) -> bool {
    condemned_ms.is_some_and(|c| at_ms > c.saturating_add(timing.settle_ms))
}

/// How long after it became visible a condemnation may still be acted on, and how long a
/// condemnation of an object that is gone stays in the ledger when no record of the
/// object's deletion releases it sooner (see [`deletion_released`]).
pub const CONDEMNATION_HORIZON_MS: i64 = 30 * 24 * 60 * 60 * 1000;

/// Whether a condemnation visible since `condemned_ms` may still be acted on at `now_ms`
/// (the deciding or deleting invocation's clock): an object is deleted no later than
/// [`CONDEMNATION_HORIZON_MS`] after its condemnation, less the grace and twice the skew,
/// so the condemnation, kept that long after it when nothing records the deletion,
/// outlasts every publication of metadata written before the deletion (gc assumption 3:
/// one completes within the grace period of the first file it wrote). A stale
/// condemnation counts for nothing: the object is condemned again.
pub fn condemnation_current(condemned_ms: i64, now_ms: i64, timing: &Timing) -> bool {
    now_ms
        .saturating_add(timing.grace_ms)
        .saturating_add(timing.skew_ms.saturating_mul(2))
        < condemned_ms.saturating_add(CONDEMNATION_HORIZON_MS)
}

/// Whether the ledger entry of an object that is gone, condemned at `condemned_ms`, may
/// be cleared at `now_ms` without a record of the deletion (see
/// [`condemnation_current`]).
pub fn condemnation_expired(condemned_ms: i64, now_ms: i64) -> bool {
    condemned_ms.saturating_add(CONDEMNATION_HORIZON_MS) <= now_ms
}

/// Whether the ledger entries of the objects a deletion record lists, written once their
/// deletes had answered and landed at `recorded_ms` (the store's time), may be cleared at
/// `now_ms`: a publication of metadata written before the deletes, naming them, has
/// completed (gc assumption 3: within the grace period of writing it), so none can check
/// for their condemnations any more. Until then the condemnations stay, and publication
/// refuses them (rule C).
pub fn deletion_released(recorded_ms: i64, now_ms: i64, timing: &Timing) -> bool {
    recorded_ms
        .saturating_add(timing.grace_ms)
        .saturating_add(timing.skew_ms.saturating_mul(2))
        < now_ms
}

/// The earliest walk start from which a clock of an object with `facts` may date its
/// loss (see [the rule](self#the-rule)).
pub fn earliest_walk(facts: &Facts, floor_ms: i64, timing: &Timing) -> i64 {
    let modified = facts
        .last_modified_ms
        .saturating_add(timing.grace_ms)
        .saturating_add(timing.skew_ms);
    // Strictly after: a publication may land at the very end of its window, and a walk
    // starting at that instant may have read the record just before.
    let republished = facts.republished_ms.map_or(i64::MIN, |at| {
        at.saturating_add(timing.settle_ms).saturating_add(1)
    });
    floor_ms.max(modified).max(republished)
}

/// Whether a recorded clock still stands.
pub fn clock_stands(clock: Clock, facts: &Facts, floor_ms: i64, timing: &Timing) -> bool {
    clock.walk_ms >= earliest_walk(facts, floor_ms, timing)
}

/// What becomes of an unreachable object's retention clock at a walk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClockDecision {
    /// The recorded clock stands.
    Stands(Clock),
    /// This walk starts the clock (record it).
    Starts(Clock),
    /// No clock yet: something may have made the object reachable after this walk
    /// started; a later walk decides.
    Pending,
}

impl ClockDecision {
    /// The clock, if there is one.
    pub fn clock(self) -> Option<Clock> {
        match self {
            ClockDecision::Stands(clock) | ClockDecision::Starts(clock) => Some(clock),
            ClockDecision::Pending => None,
        }
    }
}

/// The retention clock of an unreachable object with `facts`, found unreachable by `walk`.
pub fn retention_clock(facts: &Facts, walk: Walk, floor_ms: i64, timing: &Timing) -> ClockDecision {
    let earliest = earliest_walk(facts, floor_ms, timing);
    match facts.clock {
        Some(clock) if clock.walk_ms >= earliest => ClockDecision::Stands(clock),
        _ if walk.start_ms >= earliest => ClockDecision::Starts(Clock {
            start_ms: walk.end_ms,
            walk_ms: walk.start_ms,
        }),
        _ => ClockDecision::Pending,
    }
}

/// Where an unreachable object stands at a run's decision time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Younger than the grace period: not tracked at all.
    Grace,
    /// No clock yet ([`ClockDecision::Pending`]).
    Pending,
    /// Its retention has not elapsed.
    Retention,
    /// Condemn it now (record the condemnation); it is kept this run.
    Condemn,
    /// Named by metadata that exists (rule (P)); kept.
    Referenced,
    /// Condemned, but the condemnation delay has not passed.
    CondemnDelay,
    /// It may be deleted.
    Delete,
}

/// Decide an unreachable object at the run's decision time `now_ms`: its clock, and its
/// verdict. `referenced`: whether existing metadata names it (rule (P)).
pub fn decide(
    facts: &Facts,
    walk: Walk,
    floor_ms: i64,
    now_ms: i64,
    referenced: bool,
    timing: &Timing,
) -> (ClockDecision, Verdict) {
    if facts
        .last_modified_ms
        .saturating_add(timing.grace_ms)
        .saturating_add(timing.skew_ms)
        > now_ms
    {
        return (ClockDecision::Pending, Verdict::Grace);
    }
    let decision = retention_clock(facts, walk, floor_ms, timing);
    let Some(clock) = decision.clock() else {
        return (decision, Verdict::Pending);
    };
    let retention_ends = clock.start_ms.saturating_add(timing.retention_ms);
    if now_ms < retention_ends {
        return (decision, Verdict::Retention);
    }
    // A condemnation counts only if made once this clock's retention had passed, and
    // while it may still be acted on.
    let Some(condemned_ms) = facts
        .condemned_ms
        .filter(|at| *at >= retention_ends && condemnation_current(*at, now_ms, timing))
    else {
        return (decision, Verdict::Condemn);
    };
    if referenced {
        return (decision, Verdict::Referenced);
    }
    if now_ms < condemned_ms.saturating_add(timing.delay_ms) {
        return (decision, Verdict::CondemnDelay);
    }
    (decision, Verdict::Delete)
}

/// Whether an object a run doomed (with `clock`, condemned at `condemned_ms`) may still be
/// deleted at `now_ms` given what the run knows right before deleting (`facts`: the change
/// log read after the verification walk; `floor_ms`: that walk's floor).
pub fn still_deletable(
    clock: Clock,
    condemned_ms: i64,
    facts: &Facts,
    floor_ms: i64,
    now_ms: i64,
    timing: &Timing,
) -> bool {
    clock_stands(clock, facts, floor_ms, timing)
        && condemned_ms >= clock.start_ms.saturating_add(timing.retention_ms)
        && now_ms >= condemned_ms.saturating_add(timing.delay_ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Timing = Timing {
        retention_ms: 100,
        grace_ms: 10,
        delay_ms: 20,
        skew_ms: 1,
        settle_ms: 5,
    };

    fn facts() -> Facts {
        Facts {
            last_modified_ms: 0,
            republished_ms: None,
            clock: None,
            condemned_ms: None,
        }
    }

    fn walk(start_ms: i64) -> Walk {
        Walk {
            start_ms,
            end_ms: start_ms + 3,
        }
    }

    #[test]
    fn a_deleted_objects_condemnation_outlasts_every_publication_of_earlier_metadata() {
        // Released only once the grace period and twice the skew have passed since the
        // deletion record landed.
        assert!(!deletion_released(1_000, 1_000 + 10 + 2, &T));
        assert!(deletion_released(1_000, 1_000 + 10 + 3, &T));
        // A condemnation is acted on until the horizon, less the grace and twice the skew;
        // without a record, a gone object's entry stays until the horizon.
        let horizon = CONDEMNATION_HORIZON_MS;
        assert!(condemnation_current(0, horizon - 13, &T));
        assert!(!condemnation_current(0, horizon - 12, &T));
        assert!(!condemnation_expired(0, horizon - 1));
        assert!(condemnation_expired(0, horizon));
        // A stale condemnation counts for nothing: the object is condemned again.
        let facts = Facts {
            last_modified_ms: 0,
            republished_ms: None,
            clock: Some(Clock {
                start_ms: 50,
                walk_ms: 40,
            }),
            condemned_ms: Some(200),
        };
        let walk = Walk {
            start_ms: 40,
            end_ms: 50,
        };
        let now = 200 + horizon;
        assert_eq!(decide(&facts, walk, 0, now, false, &T).1, Verdict::Condemn);
        assert_eq!(decide(&facts, walk, 0, 300, false, &T).1, Verdict::Delete);
    }

    #[test]
    fn a_first_sighting_starts_the_clock_at_the_walks_end() {
        let (decision, verdict) = decide(&facts(), walk(50), i64::MIN, 50, false, &T);
        assert_eq!(
            decision,
            ClockDecision::Starts(Clock {
                start_ms: 53,
                walk_ms: 50
            })
        );
        assert_eq!(verdict, Verdict::Retention);
    }

    #[test]
    fn young_objects_are_not_tracked() {
        let young = Facts {
            last_modified_ms: 45,
            ..facts()
        };
        assert_eq!(
            decide(&young, walk(50), i64::MIN, 50, false, &T).1,
            Verdict::Grace
        );
    }

    #[test]
    fn a_publication_logged_after_the_clocks_walk_restarts_it() {
        let clock = Clock {
            start_ms: 53,
            walk_ms: 50,
        };
        let republished = Facts {
            clock: Some(clock),
            republished_ms: Some(46),
            condemned_ms: Some(160),
            ..facts()
        };
        // Logged 4 ms before the walk began: it may have landed after the walk read it.
        let (decision, verdict) = decide(&republished, walk(200), i64::MIN, 200, false, &T);
        assert_eq!(
            decision,
            ClockDecision::Starts(Clock {
                start_ms: 203,
                walk_ms: 200
            })
        );
        assert_eq!(verdict, Verdict::Retention, "the old condemnation is void");
        // Logged long before the walk: the walk saw its outcome.
        let settled = Facts {
            republished_ms: Some(44),
            ..republished
        };
        assert_eq!(
            decide(&settled, walk(200), i64::MIN, 200, false, &T),
            (ClockDecision::Stands(clock), Verdict::Delete)
        );
    }

    #[test]
    fn a_walk_too_close_to_a_publication_dates_nothing() {
        let recent = Facts {
            republished_ms: Some(198),
            ..facts()
        };
        assert_eq!(
            decide(&recent, walk(200), i64::MIN, 200, false, &T),
            (ClockDecision::Pending, Verdict::Pending)
        );
    }

    #[test]
    fn the_floor_voids_older_clocks() {
        let tracked = Facts {
            clock: Some(Clock {
                start_ms: 53,
                walk_ms: 50,
            }),
            ..facts()
        };
        let (decision, _) = decide(&tracked, walk(300), 300, 300, false, &T);
        assert_eq!(
            decision,
            ClockDecision::Starts(Clock {
                start_ms: 303,
                walk_ms: 300
            })
        );
    }

    #[test]
    fn deletion_needs_retention_then_a_condemnation_then_the_delay() {
        let clock = Clock {
            start_ms: 53,
            walk_ms: 50,
        };
        let tracked = Facts {
            clock: Some(clock),
            ..facts()
        };
        assert_eq!(
            decide(&tracked, walk(150), i64::MIN, 150, false, &T).1,
            Verdict::Retention
        );
        assert_eq!(
            decide(&tracked, walk(160), i64::MIN, 160, false, &T).1,
            Verdict::Condemn
        );
        let early = Facts {
            condemned_ms: Some(150),
            ..tracked
        };
        assert_eq!(
            decide(&early, walk(200), i64::MIN, 200, false, &T).1,
            Verdict::Condemn,
            "a condemnation before the retention ended does not count"
        );
        let condemned = Facts {
            condemned_ms: Some(160),
            ..tracked
        };
        assert_eq!(
            decide(&condemned, walk(170), i64::MIN, 170, false, &T).1,
            Verdict::CondemnDelay
        );
        assert_eq!(
            decide(&condemned, walk(180), i64::MIN, 180, true, &T).1,
            Verdict::Referenced
        );
        assert_eq!(
            decide(&condemned, walk(180), i64::MIN, 180, false, &T).1,
            Verdict::Delete
        );
        assert!(still_deletable(clock, 160, &condemned, i64::MIN, 180, &T));
        let republished = Facts {
            republished_ms: Some(170),
            ..condemned
        };
        assert!(!still_deletable(
            clock,
            160,
            &republished,
            i64::MIN,
            180,
            &T
        ));
        assert!(!still_deletable(clock, 160, &condemned, 175, 180, &T));
    }

    #[test]
    fn a_rewritten_object_starts_over() {
        let rewritten = Facts {
            last_modified_ms: 120,
            clock: Some(Clock {
                start_ms: 53,
                walk_ms: 50,
            }),
            ..facts()
        };
        assert_eq!(
            retention_clock(&rewritten, walk(200), i64::MIN, &T),
            ClockDecision::Starts(Clock {
                start_ms: 203,
                walk_ms: 200
            })
        );
    }
}
