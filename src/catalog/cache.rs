//! A bounded cache of parsed immutable metadata files, keyed by location.
//!
//! Metadata files never change once written, so a cached parse is valid forever; the bound
//! only limits memory (oldest entries are evicted first).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use crate::error::Result;
use crate::family::FamilyRegistry;
use crate::metadata::{IndexMetadata, read_index_metadata};
use crate::warehouse::Warehouse;

/// How many parsed metadata files a catalog keeps by default.
pub const DEFAULT_CAPACITY: usize = 128;

#[derive(Debug, Default)]
struct Entries {
    by_location: HashMap<String, Arc<IndexMetadata>>,
    order: VecDeque<String>,
}

/// A bounded, thread-safe cache of parsed metadata.
#[derive(Debug)]
pub struct MetadataCache {
    capacity: usize,
    entries: Mutex<Entries>,
}

impl MetadataCache {
    /// A cache holding at most `capacity` files (`0` disables caching).
    pub fn new(capacity: usize) -> Self {
        MetadataCache {
            capacity,
            entries: Mutex::new(Entries::default()),
        }
    }

    /// The cached parse of `location`, if any.
    pub fn get(&self, location: &str) -> Option<Arc<IndexMetadata>> {
        let entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        entries.by_location.get(location).cloned()
    }

    /// The parse of the metadata file `location`: the cached one, or read from `warehouse`
    /// and validated against `registry` ([`MetadataCache::read`]).
    pub(crate) async fn get_or_read(
        &self,
        warehouse: &Warehouse,
        registry: &FamilyRegistry,
        location: &str,
    ) -> Result<Arc<IndexMetadata>> {
        match self.get(location) {
            Some(cached) => Ok(cached),
            None => self.read(warehouse, registry, location).await,
        }
    }

    /// Read, parse and validate the metadata file `location` from `warehouse`, bypassing
    /// the cache, and remember the parse.
    pub(crate) async fn read(
        &self,
        warehouse: &Warehouse,
        registry: &FamilyRegistry,
        location: &str,
    ) -> Result<Arc<IndexMetadata>> {
        let metadata = Arc::new(read_index_metadata(warehouse, location, registry).await?);
        self.insert(location, metadata.clone());
        Ok(metadata)
    }

    /// Remember the parse of `location`.
    pub fn insert(&self, location: &str, metadata: Arc<IndexMetadata>) {
        if self.capacity == 0 {
            return;
        }
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        if entries
            .by_location
            .insert(location.to_owned(), metadata)
            .is_none()
        {
            entries.order.push_back(location.to_owned());
        }
        while entries.order.len() > self.capacity {
            if let Some(oldest) = entries.order.pop_front() {
                entries.by_location.remove(&oldest);
            }
        }
    }
}
