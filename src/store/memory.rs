//! A process-local pointer store, for tests and embedding.
//!
//! Two handles cloned from one [`MemoryStore`] share state; two separately created stores
//! do not, and nothing is shared across processes.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use bytes::Bytes;

use super::{
    Capabilities, Changed, GetOptions, ListEntry, ListOptions, ListPage, Listing, PointerStore,
    PutMode, PutOptions, StoreError, StoreKey, TxWrite, Version, Versioned,
};

#[derive(Debug, Default)]
struct State {
    records: BTreeMap<StoreKey, (Bytes, u64, Listing)>,
    generation: u64,
}

impl State {
    fn check(&self, key: &StoreKey, mode: &PutMode) -> Result<(), StoreError> {
        let current = self
            .records
            .get(key)
            .map(|(_, v, _)| Version::new(v.to_string()));
        match (mode, current) {
            (PutMode::Create, None) => Ok(()),
            (PutMode::Create, Some(_)) => Err(StoreError::AlreadyExists),
            (PutMode::Update(expected), Some(current)) if *expected == current => Ok(()),
            (PutMode::Update(_), _) => Err(StoreError::Precondition),
        }
    }

    fn write(&mut self, key: StoreKey, value: Bytes, listing: Listing) -> Version {
        self.generation += 1;
        self.records.insert(key, (value, self.generation, listing));
        Version::new(self.generation.to_string())
    }

    fn list(
        &self,
        prefix: &StoreKey,
        start_after: Option<&StoreKey>,
        limit: usize,
        shown_only: bool,
    ) -> ListPage {
        let lower = match start_after {
            Some(after) if after >= prefix => Bound::Excluded(after.clone()),
            _ => Bound::Included(prefix.clone()),
        };
        let mut entries = Vec::new();
        let mut more = false;
        for (key, (value, version, listing)) in self.records.range((lower, Bound::Unbounded)) {
            if !key.as_str().starts_with(prefix.as_str()) {
                break;
            }
            if shown_only && *listing == Listing::Hidden {
                continue;
            }
            if entries.len() == limit {
                more = true;
                break;
            }
            entries.push(ListEntry {
                key: key.clone(),
                value: Some(Versioned {
                    value: value.clone(),
                    version: Version::new(version.to_string()),
                }),
                listing: Some(*listing),
            });
        }
        ListPage { entries, more }
    }
}

/// An in-memory pointer store with atomic multi-key writes, for tests and embedding.
///
/// Two handles cloned from one [`MemoryStore`] share state; two separately created stores
/// do not, and nothing is shared across processes.
#[derive(Debug, Clone, Default)]
pub struct MemoryStore {
    state: Arc<Mutex<State>>,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        MemoryStore::default()
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave a half-applied write: every write is
        // a single insert after all checks.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[async_trait]
impl PointerStore for MemoryStore {
    fn describe(&self) -> String {
        "memory".into()
    }

    async fn get_opts(
        &self,
        key: &StoreKey,
        options: GetOptions<'_>,
    ) -> Result<Changed, StoreError> {
        let current = self
            .state()
            .records
            .get(key)
            .map(|(value, version, _)| Versioned {
                value: value.clone(),
                version: Version::new(version.to_string()),
            });
        Ok(Changed::of(current, options))
    }

    async fn put_opts(
        &self,
        key: &StoreKey,
        value: Bytes,
        options: PutOptions,
    ) -> Result<Version, StoreError> {
        let mut state = self.state();
        state.check(key, &options.mode)?;
        Ok(state.write(key.clone(), value, options.listing))
    }

    async fn list_opts(
        &self,
        prefix: &StoreKey,
        options: ListOptions<'_>,
    ) -> Result<ListPage, StoreError> {
        Ok(self
            .state()
            .list(prefix, options.start_after, options.limit, options.shown))
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            atomic_multi_key_write: true,
        }
    }

    async fn transact(&self, writes: Vec<TxWrite>) -> Result<Vec<Version>, StoreError> {
        // Refused before any condition is checked, as DynamoDB refuses it.
        TxWrite::check_distinct(&writes)?;
        let mut state = self.state();
        for write in &writes {
            state
                .check(&write.key, &write.mode)
                .map_err(|_| StoreError::Precondition)?;
        }
        Ok(writes
            .into_iter()
            .map(|write| state.write(write.key, write.value, write.listing))
            .collect())
    }
}
