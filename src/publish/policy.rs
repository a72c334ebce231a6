//! [`PublishPolicy`]: how often a publication is re-attempted and how long it waits.

use std::time::Duration;

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

/// Bounded attempts and jittered exponential backoff for the publication loop.
///
/// An *attempt* is one round of load → build → write → commit. After a lost
/// compare-and-swap (`COMMIT_CONFLICT`) or a store failure that did not apply
/// (`STORE_UNAVAILABLE`) the publisher waits before attempt `n + 1` for a delay drawn
/// from the window `min(max_delay, base_delay × 2^(n-1))` according to `jitter`, then
/// reloads and re-applies. On a store where an attempt takes longer than `base_delay`,
/// the window's unit is the failed attempt's duration instead, and the cap at least
/// [`SLOW_STORE_SLOTS`] attempt-lengths ([`PublishPolicy::window_after`]): contenders
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
    /// The backoff window after `failed` failed attempts (`failed >= 1`) that were quick
    /// (no longer than `base_delay` each).
    pub fn window(&self, failed: u32) -> Duration {
        self.window_after(failed, Duration::ZERO)
    }

    /// The backoff window after `failed` failed attempts, the last of which took
    /// `attempt`: `min(cap, unit × 2^(failed-1))` with `unit = max(base_delay, attempt)`
    /// and `cap = max(max_delay, SLOW_STORE_SLOTS × unit)`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use parqdb_catalog::publish::PublishPolicy;
    ///
    /// let policy = PublishPolicy::default(); // 10 ms doubling up to 1 s
    /// assert_eq!(policy.window_after(3, Duration::from_millis(2)), Duration::from_millis(40));
    /// // A 25 ms attempt (an S3 round trip or three): the unit is the attempt.
    /// assert_eq!(policy.window_after(3, Duration::from_millis(25)), Duration::from_millis(100));
    /// // A 100 ms attempt: the cap grows to 32 attempt-lengths.
    /// assert_eq!(policy.window_after(9, Duration::from_millis(100)), Duration::from_millis(3200));
    /// ```
    pub fn window_after(&self, failed: u32, attempt: Duration) -> Duration {
        let unit = self.base_delay.max(attempt);
        let cap = self.max_delay.max(unit.saturating_mul(SLOW_STORE_SLOTS));
        let doublings = failed.saturating_sub(1).min(30);
        unit.saturating_mul(1u32 << doublings).min(cap)
    }

    /// The delay after `failed` quick failed attempts, drawn with the random number
    /// `random`.
    pub fn delay(&self, failed: u32, random: u64) -> Duration {
        self.delay_after(failed, Duration::ZERO, random)
    }

    /// The delay after `failed` failed attempts, the last of which took `attempt`, drawn
    /// from [`PublishPolicy::window_after`] with the random number `random`.
    pub fn delay_after(&self, failed: u32, attempt: Duration, random: u64) -> Duration {
        let window = self.window_after(failed, attempt);
        let nanos = u64::try_from(window.as_nanos()).unwrap_or(u64::MAX);
        let pick = |span: u64| random % span.saturating_add(1);
        match self.jitter {
            Jitter::Full => Duration::from_nanos(pick(nanos)),
            Jitter::Equal => Duration::from_nanos(nanos / 2 + pick(nanos - nanos / 2)),
            Jitter::None => window,
        }
    }

    /// `max_attempts`, at least 1.
    pub(super) fn attempts(&self) -> u32 {
        self.max_attempts.max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_double_up_to_the_cap() {
        let policy = PublishPolicy::default();
        assert_eq!(policy.window(1), Duration::from_millis(10));
        assert_eq!(policy.window(2), Duration::from_millis(20));
        assert_eq!(policy.window(7), Duration::from_millis(640));
        assert_eq!(policy.window(8), Duration::from_secs(1));
        assert_eq!(policy.window(u32::MAX), Duration::from_secs(1));
    }

    #[test]
    fn delays_stay_in_their_window() {
        for jitter in [Jitter::Full, Jitter::Equal, Jitter::None] {
            let policy = PublishPolicy {
                jitter,
                ..PublishPolicy::default()
            };
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
        let full = PublishPolicy::default();
        assert_eq!(full.delay(1, 0), Duration::ZERO);
    }
}
