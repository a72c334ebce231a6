//! Bounds on store requests (what [`StoreTimeouts`] documents).

use std::time::Duration;

/// The longest one request attempt may take, whatever the budget.
const MAX_ATTEMPT: Duration = Duration::from_secs(10);
/// The shortest one request attempt may take, whatever the budget (a request to S3 or
/// DynamoDB in the same region takes milliseconds; less than this is not a timeout but a
/// guaranteed failure on a cold connection).
const MIN_ATTEMPT: Duration = Duration::from_secs(1);
/// The longest connection set-up.
const MAX_CONNECT: Duration = Duration::from_secs(3);

/// Timeouts and retries of the store clients.
///
/// The clients' own defaults are made for batch jobs: object_store waits 30 s per request
/// and retries for up to 3 minutes (10 retries); the DynamoDB client allows 10 s per
/// attempt and 3 attempts. A Lambda function with the default 30 s timeout would be killed
/// (`Sandbox.Timedout`) long before such a call gave up. [`StoreTimeouts::within`] derives
/// bounds from the time a caller has for one whole operation, so that a single store call
/// — with the client's retries — takes at most half of it, leaving room for the catalog
/// to resolve an ambiguous write by reading back. Both the pointer store and the warehouse
/// (metadata files) are configured with them; see [`CatalogConfig::with_store_timeouts`]
/// and the Lambda deadline (in the functions), which
/// bounds the invocation as a whole.
///
/// ```
/// use std::time::Duration;
/// use parqdb_catalog::store::StoreTimeouts;
///
/// // A function with the default 30 s timeout, minus the 0.5 s deadline margin.
/// let t = StoreTimeouts::within(Duration::from_millis(29_500));
/// assert_eq!(t.call, Duration::from_millis(14_750));
/// assert_eq!(t.attempt, Duration::from_millis(7_375));
/// assert_eq!(t.connect, Duration::from_secs(3));
/// assert!(t.attempt * (t.max_retries as u32 + 1) >= t.call);
/// ```
///
/// [`CatalogConfig::with_store_timeouts`]: crate::CatalogConfig::with_store_timeouts
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoreTimeouts {
    /// Connecting (TCP and TLS).
    pub connect: Duration,
    /// One HTTP request attempt, from sending to the end of the response.
    pub attempt: Duration,
    /// One store call, with all of the client's retries.
    pub call: Duration,
    /// How often the client retries a failed request within `call`.
    pub max_retries: usize,
}

impl StoreTimeouts {
    /// Bounds for a caller that has `budget` for one whole operation: a call takes at most
    /// half of it, an attempt a quarter (between 1 s and 10 s, and never more than the
    /// call), connecting at most 3 s, with up to 3 retries.
    pub fn within(budget: Duration) -> StoreTimeouts {
        let call = budget / 2;
        let attempt = (budget / 4).clamp(MIN_ATTEMPT, MAX_ATTEMPT).min(call);
        StoreTimeouts {
            connect: attempt.min(MAX_CONNECT),
            attempt,
            call,
            max_retries: 3,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_bound_stays_within_the_budget() {
        for seconds in [1, 3, 10, 30, 60, 300, 900] {
            let budget = Duration::from_secs(seconds);
            let t = StoreTimeouts::within(budget);
            assert!(t.call <= budget / 2, "{seconds}: {t:?}");
            assert!(t.attempt <= t.call, "{seconds}: {t:?}");
            assert!(t.connect <= t.attempt, "{seconds}: {t:?}");
            assert!(t.attempt <= MAX_ATTEMPT, "{seconds}: {t:?}");
        }
        let gc = StoreTimeouts::within(Duration::from_secs(900));
        assert_eq!(gc.attempt, MAX_ATTEMPT);
        let tiny = StoreTimeouts::within(Duration::from_millis(1_500));
        assert_eq!(tiny.attempt, Duration::from_millis(750));
    }
}
