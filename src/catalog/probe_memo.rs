//! The capability probe once per store and day, rather than once per process.
//!
//! A catalog probes its store before its first write ([`crate::store::probe()`]), and every
//! probe writes two keys under `_probe/<uuid>/`. With one process per Lambda container,
//! that was two keys per cold start, never cleaned up. So a process that passes the probe
//! records it in the store under [`MEMO_KEY`], and a process that finds a memo for the
//! same store younger than [`MEMO_MAX_AGE`] trusts it instead of probing again: the probe
//! runs about once a day per store (a few times when many containers start at once),
//! whoever probed first — `parqdb-catalog init`, the CLI or a function.
//!
//! The memo is a hint, never a risk to the catalog: it is read and written like any key
//! (a create, or a compare-and-swap on the version read), a memo that cannot be parsed or
//! names another store or lies in the future is ignored, and a failure to write it only
//! means the next process probes again. What it trusts is bounded by its age: a store that
//! started to ignore conditional writes (a downgraded MinIO, say) is caught by the next
//! probe, at most a day later. On S3 the deployment template also expires
//! `_catalog/_probe/` objects (memo included) after a day; on DynamoDB the probe items
//! stay, about two a day per store.

use std::time::Duration;

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use super::Catalog;
use super::write::store_error;
use crate::error::Result;
use crate::store::PointerStoreExt;
use crate::store::{PutMode, StoreKey};

/// The key of the memo (next to the probe's own `_probe/<uuid>/` keys).
pub const MEMO_KEY: &str = "_probe/=passed";

/// How long a passed probe is trusted.
pub const MEMO_MAX_AGE: Duration = Duration::from_secs(24 * 60 * 60);

/// How far in the future a memo's time may lie (clock skew between processes) before the
/// memo is ignored.
const MAX_SKEW: Duration = Duration::from_secs(5 * 60);

/// What the memo says: this store passed the probe at this time.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
struct Memo {
    store: String,
    probed_at_ms: i64,
}

/// Probe the catalog's store unless a recent memo says it passed; record a pass.
pub(super) async fn probe_unless_recent(catalog: &Catalog) -> Result<()> {
    let store = catalog.store().as_ref();
    let key = StoreKey::new(MEMO_KEY)?;
    let now_ms = catalog.now_ms();
    let current = store
        .get(&key)
        .await
        .map_err(|err| store_error(store, err))?;
    if let Some(current) = &current
        && let Ok(memo) = serde_json::from_slice::<Memo>(&current.value)
        && memo.store == store.describe()
        && recent(memo.probed_at_ms, now_ms)
    {
        return Ok(());
    }
    catalog.probe().await?.into_result()?;
    let memo = Memo {
        store: store.describe(),
        probed_at_ms: now_ms,
    };
    let mode = match current {
        None => PutMode::Create,
        Some(current) => PutMode::Update(current.version),
    };
    match serde_json::to_vec(&memo) {
        Ok(bytes) => {
            if let Err(err) = store.put(&key, Bytes::from(bytes), mode).await {
                // Another process recorded its own pass first, or the store hiccuped:
                // either way the next process probes again, nothing else.
                tracing::debug!(error = %err, "the probe passed but its memo was not written");
            }
        }
        Err(err) => tracing::debug!(error = %err, "the probe memo cannot be encoded"),
    }
    Ok(())
}

/// Whether a memo written at `probed_at_ms` is still trusted at `now_ms`.
fn recent(probed_at_ms: i64, now_ms: i64) -> bool {
    let age_ms = i128::from(now_ms) - i128::from(probed_at_ms);
    age_ms < MEMO_MAX_AGE.as_millis() as i128 && -age_ms <= MAX_SKEW.as_millis() as i128
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use async_trait::async_trait;

    use super::*;
    use crate::catalog::IndexCatalog;
    use crate::clock::ManualClock;
    use crate::identifier::Namespace;
    use crate::store::memory::MemoryStore;
    use crate::store::{
        Changed, GetOptions, ListOptions, ListPage, PointerStore, PutOptions, StoreError, Version,
    };
    use crate::warehouse::Warehouse;

    /// A memory store that counts probes (each probe tries one replace of its
    /// `_probe/<uuid>/=missing` key).
    #[derive(Debug, Default)]
    struct Counting {
        inner: MemoryStore,
        probes: AtomicUsize,
    }

    #[async_trait]
    impl PointerStore for Counting {
        fn describe(&self) -> String {
            "counting".into()
        }
        async fn get_opts(
            &self,
            key: &StoreKey,
            options: GetOptions<'_>,
        ) -> Result<Changed, StoreError> {
            self.inner.get_opts(key, options).await
        }
        async fn put_opts(
            &self,
            key: &StoreKey,
            value: Bytes,
            options: PutOptions,
        ) -> Result<Version, StoreError> {
            if key.as_str().ends_with("/=missing") {
                self.probes.fetch_add(1, Ordering::SeqCst);
            }
            self.inner.put_opts(key, value, options).await
        }
        async fn list_opts(
            &self,
            prefix: &StoreKey,
            options: ListOptions<'_>,
        ) -> Result<ListPage, StoreError> {
            self.inner.list_opts(prefix, options).await
        }
    }

    fn catalog(store: Arc<Counting>, clock: Arc<ManualClock>) -> Catalog {
        let warehouse = Warehouse::in_memory("memory://memo/wh").expect("warehouse");
        Catalog::builder(store, warehouse).clock(clock).build()
    }

    async fn first_write(catalog: &Catalog, name: &str) {
        let namespace = Namespace::new([name]).expect("valid");
        catalog
            .create_namespace(&namespace, Default::default())
            .await
            .expect("created");
    }

    #[tokio::test]
    async fn one_probe_per_store_and_day_not_per_process() {
        let store = Arc::new(Counting::default());
        let clock = Arc::new(ManualClock::new(1_000_000));
        // Three "processes" (catalogs) on one store: one probe.
        for name in ["a", "b", "c"] {
            first_write(&catalog(store.clone(), clock.clone()), name).await;
        }
        assert_eq!(store.probes.load(Ordering::SeqCst), 1);
        // A day later the memo has expired: probed again, and recorded again.
        clock.advance(MEMO_MAX_AGE.as_millis() as i64);
        first_write(&catalog(store.clone(), clock.clone()), "d").await;
        first_write(&catalog(store.clone(), clock.clone()), "e").await;
        assert_eq!(store.probes.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn a_memo_that_is_garbage_foreign_or_from_the_future_is_ignored() {
        let store = Arc::new(Counting::default());
        let clock = Arc::new(ManualClock::new(1_000_000));
        let key = StoreKey::new(MEMO_KEY).expect("key");
        let bad = [
            b"not json".to_vec(),
            br#"{"store": "elsewhere", "probed-at-ms": 1000000}"#.to_vec(),
            br#"{"store": "counting", "probed-at-ms": 999999999999}"#.to_vec(),
            br#"{"store": "counting", "probed-at-ms": 1000000, "trust": "me"}"#.to_vec(),
        ];
        for (n, value) in bad.into_iter().enumerate() {
            let mode = match store.get(&key).await.expect("read") {
                None => PutMode::Create,
                Some(current) => PutMode::Update(current.version),
            };
            store
                .put(&key, Bytes::from(value), mode)
                .await
                .expect("planted");
            first_write(&catalog(store.clone(), clock.clone()), &format!("n{n}")).await;
            assert_eq!(store.probes.load(Ordering::SeqCst), n + 1, "memo {n}");
        }
        // The last probe replaced the memo with a good one.
        first_write(&catalog(store.clone(), clock.clone()), "after").await;
        assert_eq!(store.probes.load(Ordering::SeqCst), 4);
    }

    #[test]
    fn recent_means_younger_than_a_day_and_not_far_in_the_future() {
        let day = MEMO_MAX_AGE.as_millis() as i64;
        assert!(recent(0, 0));
        assert!(recent(0, day - 1));
        assert!(!recent(0, day));
        assert!(recent(60_000, 0));
        assert!(!recent(day, 0));
        assert!(!recent(i64::MAX, i64::MIN));
    }
}
