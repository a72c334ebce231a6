//! Retries with jittered exponential backoff: the one schedule every retry loop of the
//! crate waits by, and the two policies that configure it.
//!
//! A [`Schedule`] is a first window, a cap and a [`Jitter`]: after `failed` failed
//! attempts the window is `min(cap, first × 2^(failed-1))`, and the delay is drawn from it
//! with a random number that the caller's [`IdGenerator`] supplies (never a thread-local
//! generator), so a seeded generator makes every wait reproducible.
//!
//! - [`RetryPolicy`] bounds the store calls of the catalog (and the invocations of the
//!   remote client): its first window is `2 × base_delay`, so after `n` failures the
//!   window is `base_delay × 2^n` capped at `max_delay`, with full jitter.
//! - [`PublishPolicy`] bounds the publication loop: its first window is `base_delay`
//!   (`base_delay × 2^(n-1)` after `n` failures), its jitter is configurable, and on a slow
//!   store the window's unit is the failed attempt's duration.
//!
//! Both keep the bounds they had before they shared this schedule. Two details of the
//! store-call policy changed without changing any bound in use: its delay is drawn at
//! nanosecond rather than millisecond resolution (uniform over the same window), and its
//! windows stop doubling after 31 doublings instead of 16, which only matters for a
//! `max_delay` above `65 536 × base_delay` (no policy in this crate comes near).

use std::fmt;
use std::time::Duration;

use crate::clock::IdGenerator;

/// How a backoff delay is randomised.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Jitter {
    /// Uniform in `[0, window]` ("full jitter"): spreads contenders the most.
    #[default]
    Full,
    /// `window / 2` plus uniform in `[0, window / 2]`: never retries immediately.
    Equal,
    /// Exactly `window`. Deterministic, for tests only: contenders that collided once
    /// collide again (a retry storm).
    None,
}

/// The most doublings of a window.
const MAX_DOUBLINGS: u32 = 30;

/// Windows that double from `first` up to `cap`, and delays drawn from them with `jitter`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Schedule {
    /// The window after the first failed attempt.
    pub first: Duration,
    /// The largest window.
    pub cap: Duration,
    /// How a delay is drawn from its window.
    pub jitter: Jitter,
}

impl Schedule {
    /// The window after `failed` failed attempts (`failed >= 1`; 0 counts as 1):
    /// `min(cap, first × 2^(failed-1))`.
    pub fn window(&self, failed: u32) -> Duration {
        let doublings = failed.saturating_sub(1).min(MAX_DOUBLINGS);
        self.first.saturating_mul(1u32 << doublings).min(self.cap)
    }

    /// The delay after `failed` failed attempts, drawn with the random number `random`.
    pub fn delay(&self, failed: u32, random: u64) -> Duration {
        let window = self.window(failed);
        let nanos = u64::try_from(window.as_nanos()).unwrap_or(u64::MAX);
        let pick = |span: u64| random % span.saturating_add(1);
        match self.jitter {
            Jitter::Full => Duration::from_nanos(pick(nanos)),
            Jitter::Equal => Duration::from_nanos(nanos / 2 + pick(nanos - nanos / 2)),
            Jitter::None => window,
        }
    }

    /// Sleep for the delay after `failed` failed attempts, drawn with a random number from
    /// `random`.
    pub async fn sleep(&self, failed: u32, random: &dyn IdGenerator) {
        tokio::time::sleep(self.delay(failed, random.positive_id() as u64)).await;
    }
}

/// Bounded attempts and jittered exponential backoff for store calls (and the remote
/// client's invocations).
///
/// After the `n`-th failed attempt the caller waits a delay drawn uniformly from
/// `[0, min(max_delay, base_delay × 2^n)]` (full jitter), with the randomness of the
/// catalog's [`IdGenerator`]. With the defaults (6 attempts, 20 ms doubling up to 2 s) the
/// windows of the 5 retries of one call add up to 1.24 s.
#[derive(Debug, Clone)]
pub struct RetryPolicy {
    /// Attempts of one store write (or read) before giving up.
    pub max_attempts: u32,
    /// The unit of the backoff: the window after the first failure is twice this.
    pub base_delay: Duration,
    /// Largest backoff.
    pub max_delay: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 6,
            base_delay: Duration::from_millis(20),
            max_delay: Duration::from_secs(2),
        }
    }
}

impl RetryPolicy {
    /// The schedule: a first window of `2 × base_delay`, capped at `max_delay`, full
    /// jitter.
    fn schedule(&self) -> Schedule {
        Schedule {
            first: self.base_delay.saturating_mul(2),
            cap: self.max_delay,
            jitter: Jitter::Full,
        }
    }

    /// Sleep after `failed` failed attempts, drawing the delay with a random number from
    /// `random`.
    pub(crate) async fn back_off(&self, failed: u32, random: &dyn IdGenerator) {
        self.schedule().sleep(failed, random).await;
    }
}

/// Bounded attempts and jittered exponential backoff for the publication loop.
///
/// An *attempt* is one round of load → build → write → commit. After a lost
/// compare-and-swap (`COMMIT_CONFLICT`) or a store failure that did not apply
/// (`STORE_UNAVAILABLE`) the publisher waits before attempt `n + 1` for a delay drawn
/// from the window `min(max_delay, base_delay × 2^(n-1))` according to `jitter`, then
/// reloads and re-applies. On a store where an attempt takes longer than `base_delay`,
/// the window's unit is the failed attempt's duration instead, and the cap at least
/// `SLOW_STORE_SLOTS` (32) attempt-lengths (after a 25 ms attempt the third window is
/// 100 ms rather than 40 ms; after a 100 ms one the cap is 3.2 s): contenders
/// spread over as many attempt-lengths on an S3 round trip of tens of milliseconds as on a
/// local file of one, which is what keeps 16 writers on one index near the single-writer
/// rate. After `max_attempts` attempts it gives up with the last
/// error. The defaults (20 attempts, 10 ms doubling up to 1 s, full jitter) follow
/// Lance's 20 attempts with randomised, widening slots; with them a publisher sleeps at
/// most about 13.3 s in total (6.6 s on average) over 19 retries before giving up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublishPolicy {
    /// Attempts before giving up (at least 1).
    pub max_attempts: u32,
    /// The backoff window before the second attempt.
    pub base_delay: Duration,
    /// The largest backoff window.
    pub max_delay: Duration,
    /// How a delay is drawn from its window.
    pub jitter: Jitter,
}

impl Default for PublishPolicy {
    fn default() -> Self {
        PublishPolicy {
            max_attempts: 20,
            base_delay: Duration::from_millis(10),
            max_delay: Duration::from_secs(1),
            jitter: Jitter::Full,
        }
    }
}

/// The fewest attempt-lengths the largest window spans on a slow store.
pub const SLOW_STORE_SLOTS: u32 = 32;

impl PublishPolicy {
    /// The schedule after an attempt that took `attempt`: a first window of
    /// `unit = max(base_delay, attempt)`, capped at `max(max_delay, SLOW_STORE_SLOTS ×
    /// unit)`.
    fn schedule_after(&self, attempt: Duration) -> Schedule {
        let unit = self.base_delay.max(attempt);
        Schedule {
            first: unit,
            cap: self.max_delay.max(unit.saturating_mul(SLOW_STORE_SLOTS)),
            jitter: self.jitter,
        }
    }

    /// Sleep after `failed` failed attempts, the last of which took `attempt`, drawing the
    /// delay from the window `min(cap, unit × 2^(failed-1))` with `unit = max(base_delay,
    /// attempt)` and `cap = max(max_delay, SLOW_STORE_SLOTS × unit)`, with a random number
    /// from `random`.
    pub(crate) async fn back_off(&self, failed: u32, attempt: Duration, random: &dyn IdGenerator) {
        self.schedule_after(attempt).sleep(failed, random).await;
    }

    /// `max_attempts`, at least 1.
    pub(crate) fn attempts(&self) -> u32 {
        self.max_attempts.max(1)
    }
}

/// A [`RetryPolicy`] with the source of its randomness: what a retry loop over store calls
/// needs.
#[derive(Clone, Copy)]
pub(crate) struct Retry<'a> {
    /// Attempts and windows.
    pub policy: &'a RetryPolicy,
    /// Where the jitter comes from (the catalog's id generator).
    pub random: &'a dyn IdGenerator,
    /// When set and it says so, no further attempt is issued (a publish window ended).
    pub stop: Option<&'a (dyn Fn() -> bool + Send + Sync)>,
}

impl fmt::Debug for Retry<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Retry")
            .field("policy", self.policy)
            .field("stops", &self.stop.is_some())
            .finish_non_exhaustive()
    }
}

impl<'a> Retry<'a> {
    /// The same retries, issuing no further attempt once `stop` says so.
    pub fn until(self, stop: &'a (dyn Fn() -> bool + Send + Sync)) -> Retry<'a> {
        Retry {
            stop: Some(stop),
            ..self
        }
    }

    /// Whether no further attempt may be issued.
    pub fn stopped(&self) -> bool {
        self.stop.is_some_and(|stop| stop())
    }

    /// Attempts of one call before giving up.
    pub fn max_attempts(&self) -> u32 {
        self.policy.max_attempts
    }

    /// Sleep after `failed` failed attempts.
    pub async fn back_off(&self, failed: u32) {
        self.policy.back_off(failed, self.random).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::SeededIds;

    #[test]
    fn publish_windows_double_up_to_the_cap() {
        let policy = PublishPolicy::default().schedule_after(Duration::ZERO);
        assert_eq!(policy.window(1), Duration::from_millis(10));
        assert_eq!(policy.window(2), Duration::from_millis(20));
        assert_eq!(policy.window(7), Duration::from_millis(640));
        assert_eq!(policy.window(8), Duration::from_secs(1));
        assert_eq!(policy.window(u32::MAX), Duration::from_secs(1));
    }

    #[test]
    fn slow_store_windows_use_the_attempt_as_their_unit() {
        let policy = PublishPolicy::default(); // 10 ms doubling up to 1 s
        let window = |failed, attempt_ms| {
            policy
                .schedule_after(Duration::from_millis(attempt_ms))
                .window(failed)
        };
        assert_eq!(window(3, 2), Duration::from_millis(40));
        // A 25 ms attempt (an S3 round trip or three): the unit is the attempt.
        assert_eq!(window(3, 25), Duration::from_millis(100));
        // A 100 ms attempt: the cap grows to 32 attempt-lengths.
        assert_eq!(window(9, 100), Duration::from_millis(3200));
    }

    #[test]
    fn store_call_windows_start_at_twice_the_base() {
        let policy = RetryPolicy::default();
        assert_eq!(policy.schedule().window(1), Duration::from_millis(40));
        assert_eq!(policy.schedule().window(2), Duration::from_millis(80));
        assert_eq!(policy.schedule().window(6), Duration::from_millis(1280));
        assert_eq!(policy.schedule().window(7), Duration::from_secs(2));
        assert_eq!(policy.schedule().window(u32::MAX), Duration::from_secs(2));
        // The windows the policy had before it shared the schedule: base × 2^min(n, 16).
        for policy in [
            RetryPolicy::default(),
            RetryPolicy {
                max_attempts: 4,
                base_delay: Duration::from_millis(1),
                max_delay: Duration::from_millis(10),
            },
        ] {
            for failed in 1..40 {
                let before = policy
                    .base_delay
                    .saturating_mul(1u32 << failed.min(16))
                    .min(policy.max_delay);
                assert_eq!(
                    policy.schedule().window(failed),
                    before,
                    "{policy:?} {failed}"
                );
            }
        }
    }

    #[test]
    fn delays_stay_in_their_window() {
        for jitter in [Jitter::Full, Jitter::Equal, Jitter::None] {
            let policy = PublishPolicy {
                jitter,
                ..PublishPolicy::default()
            }
            .schedule_after(Duration::ZERO);
            for failed in 1..25 {
                let window = policy.window(failed);
                for random in [0, 1, 7, 1 << 40, u64::MAX] {
                    let delay = policy.delay(failed, random);
                    assert!(delay <= window, "{jitter:?} {failed} {random}");
                    if jitter != Jitter::Full {
                        assert!(delay >= window / 2, "{jitter:?} {failed} {random}");
                    }
                }
            }
        }
        let full = PublishPolicy::default().schedule_after(Duration::ZERO);
        assert_eq!(full.delay(1, 0), Duration::ZERO);
    }

    #[tokio::test(start_paused = true)]
    async fn sleeps_draw_from_the_injected_generator() {
        let schedule = RetryPolicy::default().schedule();
        let expected = schedule.delay(3, SeededIds::new(5).positive_id() as u64);
        assert!(expected <= schedule.window(3));
        let started = tokio::time::Instant::now();
        RetryPolicy::default().back_off(3, &SeededIds::new(5)).await;
        // The paused clock jumps to the timer, which has millisecond resolution.
        let slept = started.elapsed();
        assert!(
            slept >= expected && slept <= expected + Duration::from_millis(1),
            "{slept:?} {expected:?}"
        );
    }
}
