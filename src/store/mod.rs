//! The pointer-store interface and its backends.
//!
//! A [`PointerStore`] offers only storage primitives, in the spirit of object_store's
//! `put_opts`: read a key with its version token, create if absent, replace if the version
//! matches, list keys under a prefix with pagination, and (where the store has it) an atomic
//! multi-key write. All catalog semantics — validation, compare-and-swap, idempotency,
//! ambiguous-outcome resolution, error mapping — live once in [`Catalog`](crate::Catalog).
//!
//! A store reports a lost condition as [`StoreError::AlreadyExists`] or
//! [`StoreError::Precondition`], never as an SDK error; SDK types never leave a backend
//! module. A failure after a write may have been sent is [`StoreError::Ambiguous`]: the
//! catalog resolves it by reading back the commit id it wrote.
//!
//! Records are never deleted by the catalog protocol: a dropped mapping is a tombstone record
//! written with replace-if-version, so every mutation is a conditional put that carries a
//! unique commit id. Backends therefore need no conditional delete.
//!
//! # Listing classes
//! Tombstones stay under the listing prefix, so a listing of a namespace would return every
//! identifier ever dropped. To list without reading each record, every write may carry a
//! [`Listing`] class chosen by the writer ([`PointerStoreExt::put_listed`],
//! [`TxWrite::listing`]); a store keeps it where its listing sees it and
//! [`PointerStoreExt::list_shown`] leaves out what was written [`Listing::Hidden`]. The class
//! is a hint about bytes, not catalog semantics: the catalog decides it from the record it
//! writes, and still decides visibility itself from the value whenever the listing carries
//! one. [`PointerStoreExt::list`] is unchanged: it returns every key, hidden ones included (the
//! garbage collector reads tombstones through it).

#[cfg(feature = "dynamodb")]
pub mod dynamodb;
pub(crate) mod local;
pub(crate) mod memory;
pub(crate) mod probe;
#[cfg(feature = "s3")]
pub mod s3;
pub(crate) mod timeouts;

pub use local::LocalStore;
pub use memory::MemoryStore;
#[doc(hidden)] // `Catalog::probe` is the API; this is for the workspace's tests.
pub use probe::probe;
pub use probe::{ProbeCheck, ProbeReport};
pub use timeouts::StoreTimeouts;

use std::fmt;

use async_trait::async_trait;
use bytes::Bytes;

use crate::error::{Error, ErrorKind};

/// A validated storage key: `/`-separated segments over `[a-z0-9_~=+-]`.
///
/// Keys come from the identifier codec ([`IndexIdentifier`](crate::IndexIdentifier)) and from the catalog's own
/// fixed names; the restricted alphabet leaves `.` free for backend-private files (lock and
/// temporary files of the local store).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct StoreKey(String);

impl StoreKey {
    /// A key from text, validated against the key alphabet.
    pub fn new(key: impl Into<String>) -> Result<StoreKey, Error> {
        let key = key.into();
        let valid_char = |c: char| matches!(c, 'a'..='z' | '0'..='9' | '_' | '~' | '=' | '+' | '-');
        let valid = !key.is_empty()
            && key.len() <= 1024
            && key
                .split('/')
                .all(|segment| !segment.is_empty() && segment.chars().all(valid_char));
        if valid {
            Ok(StoreKey(key))
        } else {
            Err(Error::new(
                ErrorKind::InvalidRequest,
                format!("`{key}` is not a valid store key"),
            ))
        }
    }

    /// A key built by the identifier codec, whose output is valid by construction.
    pub(crate) fn from_codec(key: String) -> StoreKey {
        debug_assert!(StoreKey::new(key.clone()).is_ok(), "codec produced `{key}`");
        StoreKey(key)
    }

    /// The key as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for StoreKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// An opaque version token: an S3 ETag, a DynamoDB version attribute, a generation number.
///
/// Two reads of the same record have equal versions; every successful write produces a
/// version never seen before for that key (the catalog's unique commit ids guarantee this
/// even for content-hash versions such as S3 ETags).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Version(String);

impl Version {
    /// A version from the backend's token.
    pub fn new(token: impl Into<String>) -> Version {
        Version(token.into())
    }

    /// The token as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A value with the version it was read at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Versioned {
    /// The stored bytes.
    pub value: Bytes,
    /// The version of those bytes.
    pub version: Version,
}

/// The condition of a write, as data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PutMode {
    /// Create the key only if it is absent; else [`StoreError::AlreadyExists`].
    Create,
    /// Replace the key only if its version is this one; else [`StoreError::Precondition`]
    /// (also when the key is absent).
    Update(Version),
}

/// How a written value shows in [`PointerStoreExt::list_shown`], chosen by the writer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Listing {
    /// Not listed by [`PointerStoreExt::list_shown`] (a tombstone).
    Hidden,
    /// Listed, and the class alone tells the reader it is visible (a live record).
    Shown,
    /// Listed, and the reader must look at the value to decide (a record whose visibility
    /// depends on another key, or a write that gave no class).
    Check,
}

impl Listing {
    /// The code a store keeps for the class (`1`, `2`, `3`).
    #[cfg(any(feature = "s3", feature = "dynamodb"))]
    pub(crate) fn code(self) -> u8 {
        match self {
            Listing::Hidden => 1,
            Listing::Shown => 2,
            Listing::Check => 3,
        }
    }

    /// The class of a code kept by a store; `None` for anything else.
    #[cfg(any(feature = "s3", feature = "dynamodb"))]
    pub(crate) fn from_code(code: u8) -> Option<Listing> {
        match code {
            1 => Some(Listing::Hidden),
            2 => Some(Listing::Shown),
            3 => Some(Listing::Check),
            _ => None,
        }
    }
}

/// One write of an atomic multi-key write.
#[derive(Debug, Clone)]
pub struct TxWrite {
    /// The key to write.
    pub key: StoreKey,
    /// The new value.
    pub value: Bytes,
    /// The condition the key must satisfy.
    pub mode: PutMode,
    /// How the value shows in [`PointerStoreExt::list_shown`].
    pub listing: Listing,
}

impl TxWrite {
    /// Refuse a transaction that writes a key more than once (a caller's bug, so fatal).
    pub(crate) fn check_distinct(writes: &[TxWrite]) -> Result<(), StoreError> {
        let mut keys: Vec<&StoreKey> = writes.iter().map(|w| &w.key).collect();
        keys.sort();
        keys.dedup();
        if keys.len() != writes.len() {
            return Err(StoreError::fatal(
                "a transaction writes each key at most once",
            ));
        }
        Ok(())
    }
}

/// One entry of a listing.
#[derive(Debug, Clone)]
pub struct ListEntry {
    /// The key.
    pub key: StoreKey,
    /// The value and version, when the store returns them with the listing for free
    /// (memory, local files, DynamoDB); `None` when the caller must read the key itself.
    pub value: Option<Versioned>,
    /// The [`Listing`] class the value was written with, when the store knows it for
    /// certain; `None` when unknown (the caller must look at the value).
    pub listing: Option<Listing>,
}

/// One page of a listing, in ascending key order.
#[derive(Debug, Clone, Default)]
pub struct ListPage {
    /// Entries of this page.
    pub entries: Vec<ListEntry>,
    /// Whether more entries may follow the last one of this page.
    pub more: bool,
}

/// The answer of [`PointerStoreExt::get_if_changed`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Changed {
    /// The key still has the given version.
    Unchanged,
    /// The key has another version now.
    Changed(Versioned),
    /// The key is absent.
    Missing,
}

/// What a store can do beyond the required primitives.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Capabilities {
    /// [`PointerStore::transact`] applies several conditional writes atomically.
    pub atomic_multi_key_write: bool,
}

/// A store failure, as the catalog needs to see it.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A [`PutMode::Create`] found the key present.
    #[error("the key already exists")]
    AlreadyExists,
    /// A [`PutMode::Update`] found another version or no key; for [`PointerStore::transact`],
    /// at least one write's condition failed and nothing was applied.
    #[error("the version precondition failed")]
    Precondition,
    /// The write may or may not have been applied (timeout or transport failure after the
    /// request was sent, a 5xx on a write). The catalog resolves it by reading back.
    #[error("the write outcome is unknown: {0}")]
    Ambiguous(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The operation failed and did not apply (throttling, connection refused, a failed
    /// read). `retryable` says whether backing off and retrying can help.
    #[error("the store is unavailable: {source}")]
    Unavailable {
        /// Whether retrying can help.
        retryable: bool,
        /// The cause.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The store does not offer this primitive.
    #[error("not supported by this store: {0}")]
    NotSupported(String),
    /// A stored record is not in the store's own form (a damaged record file or item):
    /// nothing applied, and retrying cannot help. The catalog reports
    /// [`ErrorKind::CorruptRecord`].
    #[error("a stored record is damaged: {0}")]
    Corrupt(String),
}

impl StoreError {
    /// A non-applied, retryable failure with a message.
    pub fn unavailable(source: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        StoreError::Unavailable {
            retryable: true,
            source: source.into(),
        }
    }

    /// A non-applied failure that retrying cannot fix (permissions, misconfiguration).
    pub fn fatal(source: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        StoreError::Unavailable {
            retryable: false,
            source: source.into(),
        }
    }

    /// An ambiguous write outcome.
    pub fn ambiguous(source: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        StoreError::Ambiguous(source.into())
    }
}

/// The options of a read ([`PointerStore::get_opts`]).
#[derive(Debug, Clone, Copy, Default)]
pub struct GetOptions<'a> {
    /// Read the value only if its version differs from this one
    /// ([`PointerStoreExt::get_if_changed`]); the answer is [`Changed::Unchanged`] if not.
    pub if_changed_from: Option<&'a Version>,
}

/// The options of a write ([`PointerStore::put_opts`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PutOptions {
    /// The write's condition.
    pub mode: PutMode,
    /// How the value shows in [`PointerStoreExt::list_shown`].
    pub listing: Listing,
}

/// The options of a listing page ([`PointerStore::list_opts`]).
#[derive(Debug, Clone, Copy)]
pub struct ListOptions<'a> {
    /// List only keys that sort after this one.
    pub start_after: Option<&'a StoreKey>,
    /// At most this many entries.
    pub limit: usize,
    /// May leave out keys whose current value was written [`Listing::Hidden`], and tells
    /// each entry's class where the store knows it ([`PointerStoreExt::list_shown`]).
    pub shown: bool,
}

impl<'a> ListOptions<'a> {
    /// A page of every key after `start_after` (if given), at most `limit` entries.
    pub fn page(start_after: Option<&'a StoreKey>, limit: usize) -> ListOptions<'a> {
        ListOptions {
            start_after,
            limit,
            shown: false,
        }
    }
}

impl Changed {
    /// The answer for a store that reads the whole value: `current` compared with the
    /// version the caller has, if any.
    pub(crate) fn of(current: Option<Versioned>, options: GetOptions<'_>) -> Changed {
        match current {
            None => Changed::Missing,
            Some(current) if options.if_changed_from == Some(&current.version) => {
                Changed::Unchanged
            }
            Some(current) => Changed::Changed(current),
        }
    }
}

/// The pointer-store primitives: a read, a conditional write and a listing page, each
/// with its options, and (where the store offers it) an atomic multi-key write. The
/// conveniences callers use (`get`, `put`, `list`, …) are [`PointerStoreExt`]'s, for
/// every store: a wrapper implements the primitives and nothing else.
///
/// Implementations must be linearizable per key: a successful conditional write is
/// visible to every later read, and of several writes conditioned on the same state at
/// most one succeeds. [`probe::probe`] checks the conditional behaviour before a store is
/// trusted.
#[async_trait]
pub trait PointerStore: Send + Sync + fmt::Debug + 'static {
    /// A short human-readable description (`memory`, `file:///...`, `s3://bucket/prefix`).
    fn describe(&self) -> String;

    /// Where the records live, as a URI that names this store *instance* and no other,
    /// or `None` for a process-local store: its name, then what tells it from a copy under
    /// the same name (`file:///srv/catalog?inode=…&born=…`,
    /// `s3://bucket/prefix?endpoint=…` off AWS,
    /// `dynamodb://table?region=…&account=…&created=…`). A catalog's ownership of a
    /// warehouse is bound to it: a copy of a pointer store (restored, replicated, cloned)
    /// carries the catalog id but not the location, and must not write where the original
    /// does (see `catalog::ownership`). Wrappers forward it.
    ///
    /// Asked at every ownership check (once a minute per catalog), never cached by the
    /// store: a store whose identity can change under its name (a directory restored at
    /// its path, a table deleted and restored) asks again, so such a copy is another store
    /// even to a process that ran before it.
    async fn location(&self) -> Result<Option<String>, StoreError> {
        Ok(None)
    }

    /// What this store offers beyond the required primitives. Wrappers forward it.
    fn capabilities(&self) -> Capabilities {
        Capabilities::default()
    }

    /// Read a key with its version ([`Changed::Missing`] if absent; with
    /// [`GetOptions::if_changed_from`], [`Changed::Unchanged`] if it still has that
    /// version). Strongly consistent. A store that cannot ask the server for the
    /// condition reads the value and compares its version itself.
    async fn get_opts(
        &self,
        key: &StoreKey,
        options: GetOptions<'_>,
    ) -> Result<Changed, StoreError>;

    /// Write a key under a condition and return the new version. A store that cannot keep
    /// the [`Listing`] class drops it, which costs listings their filtering but never
    /// their correctness.
    async fn put_opts(
        &self,
        key: &StoreKey,
        value: Bytes,
        options: PutOptions,
    ) -> Result<Version, StoreError>;

    /// One page of the keys that start with `prefix`, in ascending order (see
    /// [`ListOptions`]); `more` says whether entries may follow. A store that keeps no
    /// class lists everything with no class when asked for the shown keys.
    async fn list_opts(
        &self,
        prefix: &StoreKey,
        options: ListOptions<'_>,
    ) -> Result<ListPage, StoreError>;

    /// Apply several conditional writes atomically: all or none. Only stores whose
    /// [`Capabilities::atomic_multi_key_write`] is set implement it.
    async fn transact(&self, writes: Vec<TxWrite>) -> Result<Vec<Version>, StoreError> {
        let _ = writes;
        Err(StoreError::NotSupported("atomic multi-key write".into()))
    }
}

/// The conveniences over [`PointerStore`]'s primitives, for every store.
///
/// ```
/// use parqdb_catalog::store::MemoryStore;
/// use parqdb_catalog::store::{PointerStore, PointerStoreExt, PutMode, StoreKey};
///
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let store = MemoryStore::new();
/// let key = StoreKey::new("n/=docs").unwrap();
/// let version = store.put(&key, "v1".into(), PutMode::Create).await.unwrap();
/// let read = store.get(&key).await.unwrap().unwrap();
/// assert_eq!((read.value.as_ref(), &read.version), (b"v1".as_slice(), &version));
/// # });
/// ```
#[async_trait]
pub trait PointerStoreExt: PointerStore {
    /// Read a key with its version; `None` if absent.
    async fn get(&self, key: &StoreKey) -> Result<Option<Versioned>, StoreError> {
        match self.get_opts(key, GetOptions::default()).await? {
            Changed::Missing => Ok(None),
            Changed::Changed(current) => Ok(Some(current)),
            Changed::Unchanged => Err(StoreError::fatal(format!(
                "{} answered `unchanged` to an unconditional read of `{key}`",
                self.describe()
            ))),
        }
    }

    /// Read a key only if its version differs from `version`.
    async fn get_if_changed(
        &self,
        key: &StoreKey,
        version: &Version,
    ) -> Result<Changed, StoreError> {
        let options = GetOptions {
            if_changed_from: Some(version),
        };
        self.get_opts(key, options).await
    }

    /// Write a key under a condition (listed as [`Listing::Check`]).
    async fn put(
        &self,
        key: &StoreKey,
        value: Bytes,
        mode: PutMode,
    ) -> Result<Version, StoreError> {
        self.put_listed(key, value, mode, Listing::Check).await
    }

    /// Write a key under a condition, with its [`Listing`] class.
    async fn put_listed(
        &self,
        key: &StoreKey,
        value: Bytes,
        mode: PutMode,
        listing: Listing,
    ) -> Result<Version, StoreError> {
        self.put_opts(key, value, PutOptions { mode, listing })
            .await
    }

    /// List keys that start with `prefix` and sort after `start_after` (if given), in
    /// ascending order, at most `limit` entries.
    async fn list(
        &self,
        prefix: &StoreKey,
        start_after: Option<&StoreKey>,
        limit: usize,
    ) -> Result<ListPage, StoreError> {
        let page = ListOptions::page(start_after, limit);
        self.list_opts(prefix, page).await
    }

    /// Like [`PointerStoreExt::list`], but may leave out keys whose current value was
    /// written [`Listing::Hidden`], and tells each entry's class where the store knows it.
    async fn list_shown(
        &self,
        prefix: &StoreKey,
        start_after: Option<&StoreKey>,
        limit: usize,
    ) -> Result<ListPage, StoreError> {
        let page = ListOptions::page(start_after, limit);
        self.list_opts(
            prefix,
            ListOptions {
                shown: true,
                ..page
            },
        )
        .await
    }
}

impl<S: PointerStore + ?Sized> PointerStoreExt for S {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_use_the_restricted_alphabet() {
        assert!(StoreKey::new("i/a/b/=x").is_ok());
        assert!(StoreKey::new("_catalog/owner").is_ok());
        for bad in ["", "a//b", "/a", "a/", "A", "a.lock", "a b", "a\\b"] {
            assert!(StoreKey::new(bad).is_err(), "{bad:?} accepted");
        }
    }
}
