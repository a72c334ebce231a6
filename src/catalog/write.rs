//! One conditional write, with retries and ambiguous-outcome resolution.
//!
//! Every catalog mutation is a conditional put of a record that carries a fresh commit id.
//! `conditional_write` issues it and decides, from the store's answer and — whenever the
//! answer is not a plain success — from reading the key back, which of three things is true:
//!
//! - **applied**: the record read back was written by our commit id, or remembers it among
//!   its predecessors (so an SDK-level retry that reported `Precondition` after the first
//!   attempt landed is still a success);
//! - **lost**: the key now holds a record whose history covers the state we conditioned on
//!   and whose successor of that state is not ours, or a create found a record that never
//!   saw our id — our write can never land, the caller re-reads and decides (conflict);
//! - otherwise the write is re-issued with the same commit id and the same condition (it
//!   can land at most once), a bounded number of times, and if the outcome is still open
//!   the result is [`ErrorKind::CommitStateUnknown`]. Nothing the writer wrote is deleted.
//!
//! Throttling and other failures that certainly did not apply are retried with the jittered
//! exponential backoff of the catalog's [`RetryPolicy`](crate::catalog::RetryPolicy), its
//! jitter drawn from the catalog's id generator.
//!
//! A caller that may abandon a mutation half-way (the Lambda handler layer, when an
//! invocation reaches its deadline) learns from a [`WriteWitness`] whether a pointer write
//! had been sent: if so the mutation may have applied (`COMMIT_STATE_UNKNOWN`), if not it
//! certainly did not.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;
use uuid::Uuid;

use super::record::CommitChain;
use crate::error::{Error, ErrorKind, Result};
use crate::retry::Retry;
use crate::store::PointerStoreExt;
use crate::store::{Listing, PointerStore, PutMode, StoreError, StoreKey, Version};

tokio::task_local! {
    static WITNESS: Arc<AtomicBool>;
}

/// Tells whether a future sent a pointer write — a conditional put or an atomic multi-key
/// write of catalog records — even if the future was dropped before it finished.
///
/// Capability-probe writes do not count: they never change a catalog record. The Lambda
/// deadline guard uses it to tell a mutation that may have applied from one that cannot
/// have.
#[cfg(feature = "lambda")]
#[derive(Debug, Clone, Default)]
pub struct WriteWitness(Arc<AtomicBool>);

#[cfg(feature = "lambda")]
impl WriteWitness {
    /// Run `future`, recording any pointer write it sends (on this task).
    pub async fn watch<F: std::future::Future>(&self, future: F) -> F::Output {
        WITNESS.scope(self.0.clone(), future).await
    }

    /// Whether a watched future sent a pointer write.
    pub fn sent(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

/// Record, for the [`WriteWitness`] watching this task (if any), that a pointer write is
/// about to be sent.
pub(crate) fn note_pointer_write() {
    let _ = WITNESS.try_with(|sent| sent.store(true, Ordering::SeqCst));
}

/// The outcome of a conditional write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteOutcome {
    /// Our record is stored; its version if it is still the current one.
    Applied(Option<Version>),
    /// Our write did not and cannot land: another writer changed the key first.
    Lost,
}

/// What the condition was, to recognise its successor when reading back.
#[derive(Debug, Clone, Copy)]
pub enum Basis {
    /// The key was absent.
    Absent,
    /// The key held the record written by this commit id.
    Commit(Uuid),
}

/// The public error of a store failure that did not apply. This is where transient and
/// permanent failures part: a backend marks what retrying cannot fix (access denied, a
/// missing bucket or table, an invalid request) as `Unavailable { retryable: false }`,
/// which becomes [`ErrorKind::StoreRefused`]; everything else that did not apply is
/// [`ErrorKind::StoreUnavailable`].
pub(crate) fn store_error(store: &dyn PointerStore, err: StoreError) -> Error {
    match err {
        StoreError::NotSupported(what) => Error::new(
            ErrorKind::StoreUnsupported,
            format!("{} does not support {what}", store.describe()),
        ),
        StoreError::Corrupt(what) => Error::new(
            ErrorKind::CorruptRecord,
            format!("{} holds a damaged record: {what}", store.describe()),
        ),
        StoreError::Unavailable {
            retryable: false, ..
        } => Error::with_source(
            ErrorKind::StoreRefused,
            format!(
                "{} refused the request; retrying cannot help until the store or its permissions are fixed",
                store.describe()
            ),
            err,
        ),
        other => Error::with_source(
            ErrorKind::StoreUnavailable,
            format!("{} failed", store.describe()),
            other,
        ),
    }
}

/// Read a key, retrying failures that may pass.
pub(crate) async fn read_with_retry(
    store: &dyn PointerStore,
    key: &StoreKey,
    retry: Retry<'_>,
) -> Result<Option<crate::store::Versioned>> {
    let mut attempt = 0;
    loop {
        attempt += 1;
        match store.get(key).await {
            Ok(value) => return Ok(value),
            Err(StoreError::Unavailable {
                retryable: true, ..
            })
            | Err(StoreError::Ambiguous(_))
                if attempt < retry.max_attempts() =>
            {
                retry.back_off(attempt).await;
            }
            Err(err) => return Err(store_error(store, err)),
        }
    }
}

/// Write `value` (a record carrying `commit_id`) to `key` under `mode`, resolving every
/// answer that is not a plain success by reading back. See the module docs.
pub(crate) async fn conditional_write(
    store: &dyn PointerStore,
    key: &StoreKey,
    value: Bytes,
    mode: PutMode,
    basis: Basis,
    commit_id: Uuid,
    retry: Retry<'_>,
) -> Result<WriteOutcome> {
    conditional_write_listed(
        store,
        key,
        value,
        mode,
        Listing::Check,
        basis,
        commit_id,
        retry,
    )
    .await
}

/// [`conditional_write`] of a value with its [`Listing`] class.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn conditional_write_listed(
    store: &dyn PointerStore,
    key: &StoreKey,
    value: Bytes,
    mode: PutMode,
    listing: Listing,
    basis: Basis,
    commit_id: Uuid,
    retry: Retry<'_>,
) -> Result<WriteOutcome> {
    let mut attempt = 0;
    let mut ambiguous = false;
    loop {
        if attempt > 0 && retry.stopped() {
            return Err(unresolved(
                store,
                ambiguous,
                "the publish window ended before the write could be tried again".into(),
            ));
        }
        attempt += 1;
        note_pointer_write();
        match store
            .put_listed(key, value.clone(), mode.clone(), listing)
            .await
        {
            Ok(version) => return Ok(WriteOutcome::Applied(Some(version))),
            Err(StoreError::Unavailable {
                retryable: true,
                source,
            }) => {
                if attempt >= retry.max_attempts() {
                    return Err(unresolved(store, ambiguous, source.to_string()));
                }
                retry.back_off(attempt).await;
                continue;
            }
            Err(StoreError::Ambiguous(_)) => ambiguous = true,
            Err(StoreError::AlreadyExists) | Err(StoreError::Precondition) => {}
            Err(err) => {
                return Err(if ambiguous {
                    unknown(store, err.to_string())
                } else {
                    store_error(store, err)
                });
            }
        }

        // Not a plain success: read back and decide.
        let current = match read_with_retry(store, key, retry).await {
            Ok(current) => current,
            Err(err) => return Err(unknown(store, err.to_string())),
        };
        match (&current, basis) {
            (Some(current), _) => {
                let chain = CommitChain::from_bytes(&current.value)?;
                if chain.remembers(commit_id) {
                    let still_current = current.value == value;
                    return Ok(WriteOutcome::Applied(
                        still_current.then(|| current.version.clone()),
                    ));
                }
                match basis {
                    // Someone created the key, and its history never saw us.
                    Basis::Absent => return Ok(WriteOutcome::Lost),
                    Basis::Commit(base) if chain.covers(base) && current_is(&mode, current) => {
                        // The base is still current: our write did not land (yet).
                    }
                    Basis::Commit(base) if chain.covers(base) => return Ok(WriteOutcome::Lost),
                    Basis::Commit(_) => {
                        return Err(unknown(
                            store,
                            "the record moved on further than its history remembers".into(),
                        ));
                    }
                }
            }
            (None, Basis::Absent) => {} // our create did not land (yet), or collided (S3 409)
            (None, Basis::Commit(_)) => {
                return Err(unknown(store, "the record disappeared".into()));
            }
        }
        if attempt >= retry.max_attempts() {
            return Err(unresolved(
                store,
                ambiguous,
                "the condition kept failing".into(),
            ));
        }
        retry.back_off(attempt).await;
    }
}

fn current_is(mode: &PutMode, current: &crate::store::Versioned) -> bool {
    matches!(mode, PutMode::Update(expected) if *expected == current.version)
}

fn unresolved(store: &dyn PointerStore, ambiguous: bool, detail: String) -> Error {
    if ambiguous {
        unknown(store, detail)
    } else {
        Error::new(
            ErrorKind::StoreUnavailable,
            format!("{} kept failing: {detail}", store.describe()),
        )
    }
}

fn unknown(store: &dyn PointerStore, detail: String) -> Error {
    Error::new(
        ErrorKind::CommitStateUnknown,
        format!(
            "the outcome of a write to {} is unknown ({detail}); reload before retrying",
            store.describe()
        ),
    )
}

#[cfg(all(test, feature = "lambda"))]
mod witness_tests {
    use super::{WriteWitness, note_pointer_write};

    #[tokio::test]
    async fn a_witness_sees_the_writes_of_the_future_it_watches_only() {
        let witness = WriteWitness::default();
        witness.watch(async { /* a read-only operation */ }).await;
        assert!(!witness.sent());
        note_pointer_write(); // outside any watched future: nobody is told
        assert!(!witness.sent());
        witness.watch(async { note_pointer_write() }).await;
        assert!(witness.sent());
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicU32;

    use async_trait::async_trait;

    use super::*;
    use crate::clock::SeededIds;
    use crate::retry::RetryPolicy;
    use crate::store::{Changed, GetOptions, ListOptions, ListPage, PutOptions};

    /// A store whose writes always fail before applying (retryable), counting them.
    #[derive(Debug, Default)]
    struct Down {
        puts: AtomicU32,
    }

    #[async_trait]
    impl PointerStore for Down {
        fn describe(&self) -> String {
            "down".to_owned()
        }

        async fn get_opts(&self, _: &StoreKey, _: GetOptions<'_>) -> Result<Changed, StoreError> {
            Ok(Changed::Missing)
        }

        async fn put_opts(
            &self,
            _: &StoreKey,
            _: Bytes,
            _: PutOptions,
        ) -> Result<Version, StoreError> {
            self.puts.fetch_add(1, Ordering::SeqCst);
            Err(StoreError::unavailable("down"))
        }

        async fn list_opts(
            &self,
            _: &StoreKey,
            _: ListOptions<'_>,
        ) -> Result<ListPage, StoreError> {
            Ok(ListPage::default())
        }
    }

    async fn attempts_until(stop: bool) -> (u32, ErrorKind) {
        let store = Down::default();
        let policy = RetryPolicy {
            max_attempts: 4,
            base_delay: std::time::Duration::from_millis(1),
            max_delay: std::time::Duration::from_millis(1),
        };
        let ids = SeededIds::new(1);
        let stopped = move || stop;
        let retry = Retry {
            policy: &policy,
            random: &ids,
            stop: None,
        }
        .until(&stopped);
        let err = conditional_write_listed(
            &store,
            &StoreKey::new("k").expect("key"),
            Bytes::from_static(b"x"),
            PutMode::Create,
            Listing::Check,
            Basis::Absent,
            Uuid::nil(),
            retry,
        )
        .await
        .expect_err("the store is down");
        (store.puts.load(Ordering::SeqCst), err.kind())
    }

    #[tokio::test]
    async fn no_retry_is_issued_once_the_publish_window_has_ended() {
        assert_eq!(
            attempts_until(true).await,
            (1, ErrorKind::StoreUnavailable),
            "one attempt, then the window's end stops the retries"
        );
        assert_eq!(
            attempts_until(false).await,
            (4, ErrorKind::StoreUnavailable),
            "every attempt of the policy within the window"
        );
    }
}
