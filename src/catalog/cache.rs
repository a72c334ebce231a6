//! A bounded cache of parsed immutable metadata files, keyed by location.
//!
//! Metadata files never change once written, so a cached parse is valid forever; the bound
//! only limits memory (oldest entries are evicted first).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use crate::metadata::IndexMetadata;

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
