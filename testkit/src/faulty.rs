//! A fault-injecting pointer store for simulations and tests, after slatedb's failing
//! object-store wrapper.
//!
//! [`FaultyStore`] wraps any [`PointerStore`] and, per call, may inject one [`Fault`]:
//!
//! | fault | calls | what happens | what the caller sees |
//! |---|---|---|---|
//! | [`Fault::FailBefore`] | all | nothing | [`StoreError::Unavailable`] (retryable) |
//! | [`Fault::Throttle`] | all | a short wait, nothing | [`StoreError::Unavailable`] (retryable) |
//! | [`Fault::Delay`] | all | a wait, then the call | the call's answer |
//! | [`Fault::AmbiguousNotApplied`] | writes | nothing (the request never arrived) | [`StoreError::Ambiguous`] |
//! | [`Fault::ApplyThenAmbiguous`] | writes | the write (if its condition holds) | [`StoreError::Ambiguous`]: "put succeeds but returns an error" |
//! | [`Fault::ApplyThenConflict`] | writes | the write (if its condition holds) | [`StoreError::Precondition`] or [`StoreError::AlreadyExists`]: an SDK retry after a lost response |
//!
//! Decisions are deterministic per seed: the fault of the `n`-th call (counted from the
//! store's creation) is a pure function of the seed and `n`, and a script can pin the
//! fault of chosen calls. Given the same sequence of calls, the same faults are injected.
//! Every write the inner store really applied is logged ([`FaultyStore::applied_writes`]),
//! so a test can prove that nothing was applied twice, and every injected fault is counted
//! ([`FaultyStore::stats`]).
//!
//! ```
//! use std::sync::Arc;
//! use parqdb_catalog_testkit::faulty::{FaultConfig, FaultyStore};
//! use parqdb_catalog::store::MemoryStore;
//!
//! let store = FaultyStore::new(Arc::new(MemoryStore::new()), FaultConfig::uniform(7, 0.10));
//! store.set_enabled(false); // set up without faults, then turn them on
//! store.set_enabled(true);
//! assert_eq!(store.stats().injected(), 0);
//! ```

use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;

use parqdb_catalog::store::{
    Capabilities, Changed, GetOptions, ListOptions, ListPage, PointerStore, PutMode, PutOptions,
    StoreError, StoreKey, TxWrite, Version,
};

/// One injected fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Fail before applying: retryable [`StoreError::Unavailable`].
    FailBefore,
    /// Wait briefly, then fail before applying as a throttled request.
    Throttle,
    /// Wait this long, then perform the call normally.
    Delay(Duration),
    /// A write whose request never arrived, reported as [`StoreError::Ambiguous`].
    AmbiguousNotApplied,
    /// Perform the write, then report [`StoreError::Ambiguous`].
    ApplyThenAmbiguous,
    /// Perform the write, then report the lost condition a retried request would see:
    /// [`StoreError::AlreadyExists`] for a create, [`StoreError::Precondition`] otherwise.
    ApplyThenConflict,
}

impl Fault {
    fn is_write_only(self) -> bool {
        matches!(
            self,
            Fault::AmbiguousNotApplied | Fault::ApplyThenAmbiguous | Fault::ApplyThenConflict
        )
    }
}

/// The per-call probabilities of each fault (each in `0.0..=1.0`, summing to at most 1).
/// On writes, the probabilities of the faults every call can get (fail-before, throttle,
/// delay) are halved, leaving room for the write-only ones.
#[derive(Debug, Clone)]
pub struct FaultConfig {
    /// The seed of every decision.
    pub seed: u64,
    /// Probability of [`Fault::FailBefore`].
    pub fail_before: f64,
    /// Probability of [`Fault::Throttle`].
    pub throttle: f64,
    /// Probability of [`Fault::Delay`].
    pub delay: f64,
    /// Probability of [`Fault::AmbiguousNotApplied`] (writes only).
    pub ambiguous_not_applied: f64,
    /// Probability of [`Fault::ApplyThenAmbiguous`] (writes only).
    pub apply_then_ambiguous: f64,
    /// Probability of [`Fault::ApplyThenConflict`] (writes only).
    pub apply_then_conflict: f64,
    /// Longest injected delay (delays are uniform up to this; throttling waits a tenth).
    pub max_delay: Duration,
    /// Hide the inner store's atomic multi-key write (forces the step-wise rename).
    pub hide_transact: bool,
}

impl FaultConfig {
    /// No random faults (scripted faults and the write log still work).
    pub fn none(seed: u64) -> Self {
        FaultConfig {
            seed,
            fail_before: 0.0,
            throttle: 0.0,
            delay: 0.0,
            ambiguous_not_applied: 0.0,
            apply_then_ambiguous: 0.0,
            apply_then_conflict: 0.0,
            max_delay: Duration::from_millis(5),
            hide_transact: false,
        }
    }

    /// Faults on about `rate` of all calls. Reads: half delays, the rest failures before
    /// applying (a third of them throttling). Writes: a quarter delays, a quarter failures
    /// before applying, and half ambiguous outcomes, four in five of which did apply.
    pub fn uniform(seed: u64, rate: f64) -> Self {
        let rate = rate.clamp(0.0, 1.0);
        FaultConfig {
            fail_before: rate * 0.35,
            throttle: rate * 0.15,
            delay: rate * 0.5,
            ambiguous_not_applied: rate * 0.1,
            apply_then_ambiguous: rate * 0.2,
            apply_then_conflict: rate * 0.2,
            ..FaultConfig::none(seed)
        }
    }

    /// The same configuration without the inner store's atomic multi-key write.
    pub fn hiding_transact(mut self) -> Self {
        self.hide_transact = true;
        self
    }
}

/// How many calls were made and how many faults of each kind were injected.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FaultStats {
    /// Store calls made through the wrapper.
    pub calls: u64,
    /// [`Fault::FailBefore`] injected.
    pub fail_before: u64,
    /// [`Fault::Throttle`] injected.
    pub throttle: u64,
    /// [`Fault::Delay`] injected.
    pub delay: u64,
    /// [`Fault::AmbiguousNotApplied`] injected.
    pub ambiguous_not_applied: u64,
    /// [`Fault::ApplyThenAmbiguous`] injected.
    pub apply_then_ambiguous: u64,
    /// [`Fault::ApplyThenConflict`] injected.
    pub apply_then_conflict: u64,
}

impl FaultStats {
    /// Faults injected, of every kind.
    pub fn injected(&self) -> u64 {
        self.fail_before
            + self.throttle
            + self.delay
            + self.ambiguous_not_applied
            + self.apply_then_ambiguous
            + self.apply_then_conflict
    }

    /// Faults after which the write did land but the caller was told otherwise.
    pub fn lied_about_writes(&self) -> u64 {
        self.apply_then_ambiguous + self.apply_then_conflict
    }
}

impl fmt::Display for FaultStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} calls, {} faults injected (fail-before {}, throttle {}, delay {}, \
             ambiguous-not-applied {}, apply-then-ambiguous {}, apply-then-conflict {})",
            self.calls,
            self.injected(),
            self.fail_before,
            self.throttle,
            self.delay,
            self.ambiguous_not_applied,
            self.apply_then_ambiguous,
            self.apply_then_conflict
        )
    }
}

/// A write the inner store applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppliedWrite {
    /// The number of the call that applied it.
    pub call: u64,
    /// The key written.
    pub key: StoreKey,
    /// The bytes written.
    pub value: Bytes,
}

#[derive(Debug, Default)]
struct Counters {
    calls: AtomicU64,
    fail_before: AtomicU64,
    throttle: AtomicU64,
    delay: AtomicU64,
    ambiguous_not_applied: AtomicU64,
    apply_then_ambiguous: AtomicU64,
    apply_then_conflict: AtomicU64,
}

/// A pointer store that injects seeded faults into another one. See the module docs.
pub struct FaultyStore {
    inner: Arc<dyn PointerStore>,
    config: FaultConfig,
    enabled: AtomicBool,
    script: Mutex<BTreeMap<u64, Fault>>,
    counters: Counters,
    applied: Mutex<Vec<AppliedWrite>>,
}

impl fmt::Debug for FaultyStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FaultyStore")
            .field("inner", &self.inner)
            .field("config", &self.config)
            .field("stats", &self.stats())
            .finish()
    }
}

/// splitmix64: a well-mixed 64-bit function of its input.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn unit(bits: u64) -> f64 {
    (bits >> 11) as f64 / (1u64 << 53) as f64
}

impl FaultyStore {
    /// Wrap `inner`; faults are enabled.
    pub fn new(inner: Arc<dyn PointerStore>, config: FaultConfig) -> Self {
        FaultyStore {
            inner,
            config,
            enabled: AtomicBool::new(true),
            script: Mutex::new(BTreeMap::new()),
            counters: Counters::default(),
            applied: Mutex::new(Vec::new()),
        }
    }

    /// Pin the fault of the call numbered `call` (0-based, counted over all calls).
    /// Scripted faults apply even while random faults are disabled; a write-only fault
    /// scripted on a read is ignored.
    pub fn script(&self, call: u64, fault: Fault) {
        self.script
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(call, fault);
    }

    /// Turn random faults on or off (set-up and final checks usually run without).
    pub fn set_enabled(&self, enabled: bool) {
        self.enabled.store(enabled, Ordering::SeqCst);
    }

    /// The wrapped store.
    pub fn inner(&self) -> &Arc<dyn PointerStore> {
        &self.inner
    }

    /// The number of calls made so far (the number the next call gets).
    pub fn calls(&self) -> u64 {
        self.counters.calls.load(Ordering::SeqCst)
    }

    /// Calls made and faults injected so far.
    pub fn stats(&self) -> FaultStats {
        let c = &self.counters;
        let load = |a: &AtomicU64| a.load(Ordering::SeqCst);
        FaultStats {
            calls: load(&c.calls),
            fail_before: load(&c.fail_before),
            throttle: load(&c.throttle),
            delay: load(&c.delay),
            ambiguous_not_applied: load(&c.ambiguous_not_applied),
            apply_then_ambiguous: load(&c.apply_then_ambiguous),
            apply_then_conflict: load(&c.apply_then_conflict),
        }
    }

    /// Every write the inner store applied through this wrapper, in order.
    pub fn applied_writes(&self) -> Vec<AppliedWrite> {
        self.applied
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The fault of the next call (and its number), counted.
    fn decide(&self, write: bool) -> (u64, Option<Fault>) {
        let call = self.counters.calls.fetch_add(1, Ordering::SeqCst);
        let scripted = self
            .script
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&call);
        let fault = match scripted {
            Some(fault) => Some(fault),
            None if self.enabled.load(Ordering::SeqCst) => self.random_fault(call, write),
            None => None,
        };
        let fault = fault.filter(|fault| write || !fault.is_write_only());
        if let Some(fault) = fault {
            let c = &self.counters;
            let counter = match fault {
                Fault::FailBefore => &c.fail_before,
                Fault::Throttle => &c.throttle,
                Fault::Delay(_) => &c.delay,
                Fault::AmbiguousNotApplied => &c.ambiguous_not_applied,
                Fault::ApplyThenAmbiguous => &c.apply_then_ambiguous,
                Fault::ApplyThenConflict => &c.apply_then_conflict,
            };
            counter.fetch_add(1, Ordering::SeqCst);
        }
        (call, fault)
    }

    fn random_fault(&self, call: u64, write: bool) -> Option<Fault> {
        let bits = mix(self.config.seed ^ mix(call));
        let roll = unit(bits);
        let config = &self.config;
        let mut edge = 0.0;
        let common = if write { 0.5 } else { 1.0 };
        let mut choices = vec![
            (config.fail_before * common, Fault::FailBefore),
            (config.throttle * common, Fault::Throttle),
            (config.delay * common, Fault::Delay(self.delay_of(bits))),
        ];
        if write {
            choices.extend([
                (config.ambiguous_not_applied, Fault::AmbiguousNotApplied),
                (config.apply_then_ambiguous, Fault::ApplyThenAmbiguous),
                (config.apply_then_conflict, Fault::ApplyThenConflict),
            ]);
        }
        for (probability, fault) in choices {
            edge += probability;
            if roll < edge {
                return Some(fault);
            }
        }
        None
    }

    fn delay_of(&self, bits: u64) -> Duration {
        let max = self.config.max_delay.as_micros().max(1) as u64;
        Duration::from_micros(mix(bits) % max)
    }

    /// Apply the faults that happen before (or instead of) the call.
    async fn before(&self, fault: Option<Fault>) -> Result<(), StoreError> {
        match fault {
            Some(Fault::FailBefore) => Err(StoreError::unavailable("injected: connection reset")),
            Some(Fault::Throttle) => {
                tokio::time::sleep(self.config.max_delay / 10).await;
                Err(StoreError::unavailable("injected: throttled (slow down)"))
            }
            Some(Fault::Delay(delay)) => {
                tokio::time::sleep(delay).await;
                Ok(())
            }
            Some(Fault::AmbiguousNotApplied) => Err(StoreError::ambiguous(
                "injected: timed out before the request was sent",
            )),
            _ => Ok(()),
        }
    }

    fn log(&self, call: u64, writes: impl IntoIterator<Item = (StoreKey, Bytes)>) {
        let mut log = self.applied.lock().unwrap_or_else(|p| p.into_inner());
        log.extend(
            writes
                .into_iter()
                .map(|(key, value)| AppliedWrite { call, key, value }),
        );
    }
}

#[async_trait]
impl PointerStore for FaultyStore {
    fn describe(&self) -> String {
        format!("{} (fault-injecting)", self.inner.describe())
    }

    async fn location(&self) -> Result<Option<String>, StoreError> {
        self.inner.location().await
    }

    fn capabilities(&self) -> Capabilities {
        if self.config.hide_transact {
            Capabilities::default()
        } else {
            self.inner.capabilities()
        }
    }

    async fn get_opts(
        &self,
        key: &StoreKey,
        options: GetOptions<'_>,
    ) -> Result<Changed, StoreError> {
        let (_, fault) = self.decide(false);
        self.before(fault).await?;
        self.inner.get_opts(key, options).await
    }

    async fn put_opts(
        &self,
        key: &StoreKey,
        value: Bytes,
        options: PutOptions,
    ) -> Result<Version, StoreError> {
        let (call, fault) = self.decide(true);
        self.before(fault).await?;
        let create = matches!(options.mode, PutMode::Create);
        let result = self.inner.put_opts(key, value.clone(), options).await;
        if result.is_ok() {
            self.log(call, [(key.clone(), value)]);
        }
        match (fault, result) {
            (Some(Fault::ApplyThenAmbiguous), _) => Err(StoreError::ambiguous(
                "injected: the response was lost after the write was sent",
            )),
            (Some(Fault::ApplyThenConflict), Ok(_)) if create => Err(StoreError::AlreadyExists),
            (Some(Fault::ApplyThenConflict), Ok(_)) => Err(StoreError::Precondition),
            (_, result) => result,
        }
    }

    async fn list_opts(
        &self,
        prefix: &StoreKey,
        options: ListOptions<'_>,
    ) -> Result<ListPage, StoreError> {
        let (_, fault) = self.decide(false);
        self.before(fault).await?;
        self.inner.list_opts(prefix, options).await
    }

    async fn transact(&self, writes: Vec<TxWrite>) -> Result<Vec<Version>, StoreError> {
        if self.config.hide_transact {
            return Err(StoreError::NotSupported("atomic multi-key write".into()));
        }
        let (call, fault) = self.decide(true);
        self.before(fault).await?;
        let logged: Vec<(StoreKey, Bytes)> = writes
            .iter()
            .map(|w| (w.key.clone(), w.value.clone()))
            .collect();
        let result = self.inner.transact(writes).await;
        if result.is_ok() {
            self.log(call, logged);
        }
        match (fault, result) {
            (Some(Fault::ApplyThenAmbiguous), _) => Err(StoreError::ambiguous(
                "injected: the response was lost after the transaction was sent",
            )),
            (Some(Fault::ApplyThenConflict), Ok(_)) => Err(StoreError::Precondition),
            (_, result) => result,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use parqdb_catalog::store::MemoryStore;
    use parqdb_catalog::store::PointerStoreExt;

    fn key(name: &str) -> StoreKey {
        StoreKey::new(name).expect("valid key")
    }

    #[tokio::test]
    async fn the_same_seed_injects_the_same_faults() {
        let run = |seed| async move {
            let store = FaultyStore::new(
                Arc::new(MemoryStore::new()),
                FaultConfig {
                    max_delay: Duration::from_micros(10),
                    ..FaultConfig::uniform(seed, 0.5)
                },
            );
            let mut answers = Vec::new();
            for n in 0..200 {
                let answer = store
                    .put(
                        &key(&format!("k/=k{n}")),
                        Bytes::from_static(b"v"),
                        PutMode::Create,
                    )
                    .await;
                answers.push(format!("{answer:?}"));
            }
            (answers, store.stats())
        };
        let (a, stats_a) = run(3).await;
        let (b, stats_b) = run(3).await;
        let (c, _) = run(4).await;
        assert_eq!(a, b);
        assert_eq!(stats_a, stats_b);
        assert_ne!(a, c);
        assert!(stats_a.injected() > 50, "{stats_a}");
    }

    #[tokio::test]
    async fn apply_then_conflict_lands_and_lies() {
        let store = FaultyStore::new(Arc::new(MemoryStore::new()), FaultConfig::none(1));
        store.script(0, Fault::ApplyThenConflict);
        // Calls alternate put, get: the puts are calls 0, 2 and 4.
        store.script(2, Fault::ApplyThenAmbiguous);
        store.script(4, Fault::AmbiguousNotApplied);
        let k = key("k/=a");
        let first = store
            .put(&k, Bytes::from_static(b"1"), PutMode::Create)
            .await;
        assert!(matches!(first, Err(StoreError::AlreadyExists)), "{first:?}");
        let current = store.get(&k).await.expect("read").expect("landed");
        let second = store
            .put(
                &k,
                Bytes::from_static(b"2"),
                PutMode::Update(current.version.clone()),
            )
            .await;
        assert!(
            matches!(second, Err(StoreError::Ambiguous(_))),
            "{second:?}"
        );
        let current = store.get(&k).await.expect("read").expect("present");
        assert_eq!(current.value.as_ref(), b"2");
        let third = store
            .put(
                &k,
                Bytes::from_static(b"3"),
                PutMode::Update(current.version),
            )
            .await;
        assert!(matches!(third, Err(StoreError::Ambiguous(_))), "{third:?}");
        assert_eq!(
            store
                .get(&k)
                .await
                .expect("read")
                .expect("present")
                .value
                .as_ref(),
            b"2"
        );
        assert_eq!(store.applied_writes().len(), 2);
        assert_eq!(store.stats().lied_about_writes(), 2);
    }

    #[tokio::test]
    async fn hiding_transact_hides_the_capability() {
        let store = FaultyStore::new(
            Arc::new(MemoryStore::new()),
            FaultConfig::none(1).hiding_transact(),
        );
        assert!(!store.capabilities().atomic_multi_key_write);
        assert!(matches!(
            store.transact(Vec::new()).await,
            Err(StoreError::NotSupported(_))
        ));
    }
}
