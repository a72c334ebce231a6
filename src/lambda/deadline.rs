//! Every invocation answers before its deadline, with a typed error if it must.
//!
//! Lambda ends an invocation that runs past its deadline with `Sandbox.Timedout`, an error
//! without a catalog code that tells the caller neither what failed nor whether a mutation
//! applied. [`Deadline::bound`] runs the work of an invocation for the time left before
//! the context's deadline minus a margin ([`DEFAULT_MARGIN`], which leaves room to log,
//! record the metric and post the answer), and when that runs out answers instead:
//!
//! | what was running                                                | answer                 |
//! |-----------------------------------------------------------------|------------------------|
//! | a read, or a mutation that had not sent a pointer write yet     | `STORE_UNAVAILABLE`    |
//! | a mutation after it sent a pointer write (it may have applied)  | `COMMIT_STATE_UNKNOWN` |
//!
//! Whether a pointer write was sent comes from the catalog itself
//! (`WriteWitness`): capability-probe writes and
//! metadata files do not count, since neither changes what the catalog points to. The
//! work in flight is dropped, as Lambda's own timeout would have dropped it; that is safe
//! because every pointer write is conditional and carries a fresh commit id, and nothing
//! is deleted when an outcome is unknown. A caller that gets `COMMIT_STATE_UNKNOWN`
//! reloads (the remote client, [`crate::remote`], does so by itself).
//!
//! The store clients are bounded as well (see [`StoreTimeouts`](crate::store::StoreTimeouts)), so that one
//! slow request cannot use up the whole invocation and retries still fit in it.
//!
//! ```
//! use std::time::Duration;
//! use parqdb_catalog::lambda::deadline::Deadline;
//!
//! let deadline = Deadline::new(Duration::from_millis(500));
//! // 3 s before the deadline: 2.5 s for the work.
//! assert_eq!(deadline.budget(10_000, 7_000), Some(Duration::from_millis(2_500)));
//! // Past it: no time at all.
//! assert_eq!(deadline.budget(10_000, 10_200), Some(Duration::ZERO));
//! // `Context::default()` carries no deadline (0): unbounded.
//! assert_eq!(deadline.budget(0, 7_000), None);
//! ```

use std::future::Future;
use std::time::Duration;

use crate::catalog::write::WriteWitness;
use crate::error::{Error, ErrorKind, Result};

/// Time kept back before the deadline to log, record the metric and post the answer.
pub const DEFAULT_MARGIN: Duration = Duration::from_millis(500);

/// Bounds an invocation's work by its deadline (see the [module docs](self)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deadline {
    margin: Duration,
}

impl Default for Deadline {
    fn default() -> Self {
        Deadline::new(DEFAULT_MARGIN)
    }
}

impl Deadline {
    /// Answer `margin` before the deadline.
    pub const fn new(margin: Duration) -> Self {
        Deadline { margin }
    }

    /// The margin kept before the deadline.
    pub const fn margin(&self) -> Duration {
        self.margin
    }

    /// The time the work may take when the deadline is `deadline_ms` and the time is
    /// `now_ms` (both Unix epoch milliseconds): `None` for a context without a deadline
    /// (`0`, as in `Context::default()`; the Runtime API always sends one).
    pub fn budget(&self, deadline_ms: u64, now_ms: i64) -> Option<Duration> {
        if deadline_ms == 0 {
            return None;
        }
        let now_ms = u64::try_from(now_ms).unwrap_or(0);
        let left = Duration::from_millis(deadline_ms.saturating_sub(now_ms));
        Some(left.saturating_sub(self.margin))
    }

    /// Run `work`, the invocation of `operation` whose deadline is `deadline_ms`, at
    /// `now_ms`; if it has not finished when its budget runs out, drop it and answer as
    /// the [module docs](self) describe.
    pub async fn bound<T>(
        &self,
        operation: &str,
        deadline_ms: u64,
        now_ms: i64,
        work: impl Future<Output = Result<T>>,
    ) -> Result<T> {
        let witness = WriteWitness::default();
        let work = witness.watch(work);
        let Some(budget) = self.budget(deadline_ms, now_ms) else {
            return work.await;
        };
        match tokio::time::timeout(budget, work).await {
            Ok(result) => result,
            Err(_) => Err(out_of_time(operation, budget, witness.sent())),
        }
    }
}

fn out_of_time(operation: &str, budget: Duration, write_sent: bool) -> Error {
    let spent = format!(
        "the `{operation}` invocation did not finish within {budget:?}, its deadline minus the margin"
    );
    if write_sent {
        Error::new(
            ErrorKind::CommitStateUnknown,
            format!(
                "{spent}, after it sent a pointer write that may have applied; reload before retrying"
            ),
        )
    } else {
        Error::new(
            ErrorKind::StoreUnavailable,
            format!(
                "{spent}, before it sent any pointer write: no pointer changed; retry after backing off"
            ),
        )
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use bytes::Bytes;

    use super::*;
    use crate::catalog::write::{Basis, conditional_write};
    use crate::clock::SeededIds;
    use crate::retry::{Retry, RetryPolicy};
    use crate::store::memory::MemoryStore;
    use crate::store::{
        Changed, GetOptions, ListOptions, PointerStore, PointerStoreExt, PutMode, PutOptions,
        StoreError, StoreKey,
    };

    #[test]
    fn the_budget_is_the_time_left_minus_the_margin() {
        let deadline = Deadline::default();
        assert_eq!(
            deadline.budget(30_000, 0),
            Some(Duration::from_millis(29_500))
        );
        assert_eq!(deadline.budget(30_000, 29_600), Some(Duration::ZERO));
        assert_eq!(deadline.budget(30_000, 40_000), Some(Duration::ZERO));
        assert_eq!(
            deadline.budget(30_000, -5),
            Some(Duration::from_millis(29_500))
        );
        assert_eq!(deadline.budget(0, 1), None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_read_out_of_time_is_store_unavailable() {
        let err = Deadline::default()
            .bound("load", 10_000, 8_000, std::future::pending::<Result<()>>())
            .await
            .expect_err("out of time");
        assert_eq!(err.code(), "STORE_UNAVAILABLE", "{err}");
    }

    #[tokio::test(start_paused = true)]
    async fn work_that_finishes_in_time_keeps_its_answer() {
        let answer = Deadline::default()
            .bound("load", 10_000, 8_000, async { Ok(7) })
            .await
            .expect("in time");
        assert_eq!(answer, 7);
        let err = Deadline::default()
            .bound("load", 10_000, 8_000, async {
                Err::<(), _>(Error::new(ErrorKind::IndexNotFound, "absent"))
            })
            .await
            .expect_err("its own error");
        assert_eq!(err.code(), "INDEX_NOT_FOUND");
    }

    /// A store whose writes never answer.
    #[derive(Debug)]
    struct HangingWrites(MemoryStore);

    #[async_trait::async_trait]
    impl PointerStore for HangingWrites {
        fn describe(&self) -> String {
            "hanging writes".into()
        }
        async fn get_opts(
            &self,
            key: &StoreKey,
            options: GetOptions<'_>,
        ) -> std::result::Result<Changed, StoreError> {
            self.0.get_opts(key, options).await
        }
        async fn put_opts(
            &self,
            _key: &StoreKey,
            _value: Bytes,
            _options: PutOptions,
        ) -> std::result::Result<crate::store::Version, StoreError> {
            std::future::pending().await
        }
        async fn list_opts(
            &self,
            prefix: &StoreKey,
            options: ListOptions<'_>,
        ) -> std::result::Result<crate::store::ListPage, StoreError> {
            self.0.list_opts(prefix, options).await
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_mutation_out_of_time_after_its_write_is_commit_state_unknown() {
        let store: Arc<dyn PointerStore> = Arc::new(HangingWrites(MemoryStore::new()));
        let key = StoreKey::new("i/a/=b").expect("key");
        let write = async {
            conditional_write(
                store.as_ref(),
                &key,
                Bytes::from_static(b"{}"),
                PutMode::Create,
                Basis::Absent,
                uuid::Uuid::nil(),
                Retry {
                    policy: &RetryPolicy::default(),
                    random: &SeededIds::new(1),
                    stop: None,
                },
            )
            .await
            .map(|_| ())
        };
        let err = Deadline::default()
            .bound("commit", 10_000, 8_000, write)
            .await
            .expect_err("out of time");
        assert_eq!(err.code(), "COMMIT_STATE_UNKNOWN", "{err}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_mutation_out_of_time_before_any_write_is_store_unavailable() {
        let store: Arc<dyn PointerStore> = Arc::new(HangingWrites(MemoryStore::new()));
        let key = StoreKey::new("i/a/=b").expect("key");
        // A probe-like write outside the catalog's write path does not count.
        let work = async {
            let _ = store.put(&key, Bytes::new(), PutMode::Create).await;
            Ok(())
        };
        let err = Deadline::default()
            .bound("register", 10_000, 8_000, work)
            .await
            .expect_err("out of time");
        assert_eq!(err.code(), "STORE_UNAVAILABLE", "{err}");
    }
}
