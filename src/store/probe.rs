//! The capability probe: does a store really honour conditional writes?
//!
//! Some servers accept conditional writes and then ignore them (MinIO once accepted
//! `If-Match` on a missing key; plain moto checks and writes without a lock; s3s-fs and
//! garage ignore write preconditions). A catalog on such a store would silently overwrite
//! pointers or resurrect dropped ones, so the catalog runs this probe on first use and
//! refuses a store that fails it with [`ErrorKind::StoreUnsupported`].
//!
//! The probe writes only under `_probe/<uuid>` keys and never touches catalog records.

use bytes::Bytes;
use serde::Serialize;

use super::{PointerStore, PutMode, StoreError, StoreKey, Version};
use crate::clock::IdGenerator;
use crate::error::{Error, ErrorKind};
use crate::store::PointerStoreExt;

/// One check of the probe.
#[derive(Debug, Clone, Serialize)]
pub struct ProbeCheck {
    /// What was checked.
    pub name: &'static str,
    /// Whether the store behaved as required.
    pub passed: bool,
    /// What the store answered.
    pub observed: String,
}

/// The findings of the capability probe: does a store really honour conditional writes?
///
/// Some servers accept conditional writes and then ignore them (MinIO once accepted
/// `If-Match` on a missing key; plain moto checks and writes without a lock; s3s-fs and
/// garage ignore write preconditions). A catalog on such a store would silently overwrite
/// pointers or resurrect dropped ones, so the catalog runs the probe on first use and
/// refuses a store that fails it with [`ErrorKind::StoreUnsupported`]
/// ([`Catalog::probe`](crate::Catalog::probe) runs it on demand). The probe writes only
/// under `_probe/<uuid>` keys and never touches catalog records.
#[derive(Debug, Clone, Serialize)]
pub struct ProbeReport {
    /// The store probed.
    pub store: String,
    /// Every check, in order.
    pub checks: Vec<ProbeCheck>,
}

impl ProbeReport {
    /// Whether every check passed.
    pub fn passed(&self) -> bool {
        self.checks.iter().all(|c| c.passed)
    }

    /// `Ok` if every check passed, else a [`ErrorKind::StoreUnsupported`] error naming the
    /// failed checks.
    pub fn into_result(self) -> Result<ProbeReport, Error> {
        if self.passed() {
            return Ok(self);
        }
        let failed: Vec<String> = self
            .checks
            .iter()
            .filter(|c| !c.passed)
            .map(|c| format!("{} (observed: {})", c.name, c.observed))
            .collect();
        Err(Error::new(
            ErrorKind::StoreUnsupported,
            format!(
                "{} does not honour conditional writes and cannot hold a mutable catalog: {}",
                self.store,
                failed.join("; ")
            ),
        ))
    }
}

fn outcome<T: std::fmt::Debug>(result: &Result<T, StoreError>) -> String {
    match result {
        Ok(value) => format!("ok {value:?}"),
        Err(err) => format!("error: {err}"),
    }
}

/// Probe `store`: create-if-absent twice, stale and wrong-version replace, replace on a
/// missing key, and read-your-write. An unavailable store is an error, not a failed check.
pub async fn probe(store: &dyn PointerStore, ids: &dyn IdGenerator) -> Result<ProbeReport, Error> {
    let base = format!("_probe/{}", ids.uuid().simple());
    let key = StoreKey::new(format!("{base}/=k"))?;
    let missing = StoreKey::new(format!("{base}/=missing"))?;
    let unavailable = |err: StoreError| {
        let kind = match err {
            StoreError::Unavailable {
                retryable: false, ..
            } => ErrorKind::StoreRefused,
            _ => ErrorKind::StoreUnavailable,
        };
        Error::with_source(kind, format!("probing {} failed", store.describe()), err)
    };
    let mut checks = Vec::new();
    let mut check = |name: &'static str, passed: bool, observed: String| {
        checks.push(ProbeCheck {
            name,
            passed,
            observed,
        });
    };

    let first = store
        .put(&key, Bytes::from_static(b"probe-1"), PutMode::Create)
        .await;
    let v1 = match first {
        Ok(version) => version,
        Err(err) => return Err(unavailable(err)),
    };
    let again = store
        .put(&key, Bytes::from_static(b"probe-2"), PutMode::Create)
        .await;
    check(
        "create-if-absent on an existing key fails",
        matches!(again, Err(StoreError::AlreadyExists)),
        outcome(&again),
    );

    let wrong = store
        .put(
            &key,
            Bytes::from_static(b"probe-3"),
            PutMode::Update(Version::new("\"not-a-version\"")),
        )
        .await;
    check(
        "replace with a wrong version fails",
        matches!(wrong, Err(StoreError::Precondition)),
        outcome(&wrong),
    );

    let replaced = store
        .put(
            &key,
            Bytes::from_static(b"probe-4"),
            PutMode::Update(v1.clone()),
        )
        .await;
    let replaced_ok = matches!(&replaced, Ok(v2) if *v2 != v1);
    check(
        "replace with the current version succeeds",
        replaced_ok,
        outcome(&replaced),
    );

    let stale = store
        .put(
            &key,
            Bytes::from_static(b"probe-5"),
            PutMode::Update(v1.clone()),
        )
        .await;
    check(
        "replace with a stale version fails",
        matches!(stale, Err(StoreError::Precondition)),
        outcome(&stale),
    );

    let on_missing = store
        .put(
            &missing,
            Bytes::from_static(b"probe-6"),
            PutMode::Update(v1),
        )
        .await;
    check(
        "replace on a missing key fails",
        matches!(on_missing, Err(StoreError::Precondition)),
        outcome(&on_missing),
    );
    let resurrected = store.get(&missing).await.map_err(unavailable)?;
    check(
        "replace on a missing key creates nothing",
        resurrected.is_none(),
        format!("{resurrected:?}"),
    );

    let read = store.get(&key).await.map_err(unavailable)?;
    let expected = replaced.ok();
    check(
        "a read sees the last successful write",
        matches!(&read, Some(r) if r.value.as_ref() == b"probe-4" && Some(&r.version) == expected.as_ref()),
        format!("{read:?}"),
    );

    Ok(ProbeReport {
        store: store.describe(),
        checks,
    })
}
