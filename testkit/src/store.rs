//! [`Hooked`]: a pointer store that forwards every call to an inner store and runs a
//! test's [`Hook`] before each — to count calls, crash or hang at one of them, let a
//! rival write first, or change what the call asks for.
//!
//! The wrapper forwards every primitive of [`PointerStore`] (`location` and `transact`
//! included), so the inner store serves each call as it would serve the catalog directly;
//! a hook sees `put`/`put_listed` as one [`Call::Put`] and `list`/`list_shown` as one
//! [`Call::List`].
//!
//! ```
//! use std::sync::Arc;
//! use std::sync::atomic::{AtomicUsize, Ordering};
//!
//! use parqdb_catalog::store::MemoryStore;
//! use parqdb_catalog::store::{PointerStore, PointerStoreExt, StoreError, StoreKey};
//! use parqdb_catalog_testkit::store::{Call, Hook, Hooked};
//!
//! /// Counts the calls.
//! #[derive(Default)]
//! struct Count(AtomicUsize);
//!
//! #[async_trait::async_trait]
//! impl Hook for Count {
//!     async fn before(
//!         &self,
//!         _inner: &Arc<dyn PointerStore>,
//!         _call: Call<'_>,
//!     ) -> Result<(), StoreError> {
//!         self.0.fetch_add(1, Ordering::SeqCst);
//!         Ok(())
//!     }
//! }
//!
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! let store = Hooked::new(Arc::new(MemoryStore::new()), Count::default());
//! let key = StoreKey::new("n/=docs").unwrap();
//! assert!(store.get(&key).await.unwrap().is_none());
//! assert_eq!(store.hook().0.load(Ordering::SeqCst), 1);
//! # });
//! ```

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use parqdb_catalog::store::{
    Capabilities, Changed, GetOptions, ListOptions, ListPage, PointerStore, PutMode, PutOptions,
    StoreError, StoreKey, TxWrite, Version,
};

/// One store call, as a hook sees it before it is forwarded.
#[derive(Debug)]
pub enum Call<'a> {
    /// `get`.
    Get {
        /// The key read.
        key: &'a StoreKey,
    },
    /// `get_if_changed`.
    GetIfChanged {
        /// The key read.
        key: &'a StoreKey,
        /// The version the caller has.
        version: &'a Version,
    },
    /// `put` or `put_listed`. The hook may change the mode the inner store is asked for.
    Put {
        /// The key written.
        key: &'a StoreKey,
        /// The write's condition.
        mode: &'a mut PutMode,
    },
    /// `list` or `list_shown`.
    List {
        /// The listed prefix.
        prefix: &'a StoreKey,
    },
    /// `transact`.
    Transact {
        /// The writes, in order.
        writes: &'a [TxWrite],
    },
}

/// What a test does around the calls of a [`Hooked`] store.
#[async_trait]
pub trait Hook: Send + Sync + 'static {
    /// Runs before `call` is forwarded to `inner`; an error is the call's answer, and the
    /// call is not forwarded. A hook that never returns hangs the call.
    async fn before(&self, inner: &Arc<dyn PointerStore>, call: Call<'_>)
    -> Result<(), StoreError>;

    /// The capabilities the store reports, given the inner store's (default: those). A
    /// store that reports no `atomic_multi_key_write` refuses `transact` with
    /// `NotSupported`, without running the hook, as the trait asks.
    fn capabilities(&self, inner: Capabilities) -> Capabilities {
        inner
    }

    /// The location the store reports, given the inner store's (default: that one). A
    /// hook may pose as another store: a copy that the ownership check cannot tell from
    /// the original, as a clone of its disk is.
    fn location(&self, inner: Option<String>) -> Option<String> {
        inner
    }
}

/// See the module docs.
pub struct Hooked<H> {
    inner: Arc<dyn PointerStore>,
    hook: H,
}

impl<H: Hook> Hooked<H> {
    /// `inner`, with `hook` run before every call.
    pub fn new(inner: Arc<dyn PointerStore>, hook: H) -> Hooked<H> {
        Hooked { inner, hook }
    }

    /// The hook (and whatever it counted).
    pub fn hook(&self) -> &H {
        &self.hook
    }
}

impl<H> fmt::Debug for Hooked<H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Hooked({:?})", self.inner)
    }
}

#[async_trait]
impl<H: Hook> PointerStore for Hooked<H> {
    fn describe(&self) -> String {
        format!("{} (hooked)", self.inner.describe())
    }

    async fn location(&self) -> Result<Option<String>, StoreError> {
        Ok(self.hook.location(self.inner.location().await?))
    }

    fn capabilities(&self) -> Capabilities {
        self.hook.capabilities(self.inner.capabilities())
    }

    async fn get_opts(
        &self,
        key: &StoreKey,
        options: GetOptions<'_>,
    ) -> Result<Changed, StoreError> {
        let call = match options.if_changed_from {
            None => Call::Get { key },
            Some(version) => Call::GetIfChanged { key, version },
        };
        self.hook.before(&self.inner, call).await?;
        self.inner.get_opts(key, options).await
    }

    async fn put_opts(
        &self,
        key: &StoreKey,
        value: Bytes,
        mut options: PutOptions,
    ) -> Result<Version, StoreError> {
        let call = Call::Put {
            key,
            mode: &mut options.mode,
        };
        self.hook.before(&self.inner, call).await?;
        self.inner.put_opts(key, value, options).await
    }

    async fn list_opts(
        &self,
        prefix: &StoreKey,
        options: ListOptions<'_>,
    ) -> Result<ListPage, StoreError> {
        self.hook.before(&self.inner, Call::List { prefix }).await?;
        self.inner.list_opts(prefix, options).await
    }

    async fn transact(&self, writes: Vec<TxWrite>) -> Result<Vec<Version>, StoreError> {
        if !self.capabilities().atomic_multi_key_write {
            return Err(StoreError::NotSupported("atomic multi-key write".into()));
        }
        let call = Call::Transact { writes: &writes };
        self.hook.before(&self.inner, call).await?;
        self.inner.transact(writes).await
    }
}
