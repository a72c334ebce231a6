//! A catalog wrapper whose `commit` runs a hook first (e.g. a rival's publication) and
//! then forwards, fakes an ambiguous outcome, or fakes a conflict.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use futures::future::BoxFuture;
use parqdb_catalog::{
    CommitResult, IdentifierPage, IndexCatalog, IndexPointer, LoadIfChanged, NamespacePage,
    SourceBinding,
};
use parqdb_catalog::{Error, ErrorKind, IndexIdentifier, Namespace, Result};

/// What a hooked commit does after its hook ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Forward to the real catalog.
    Forward,
    /// Forward, then report `COMMIT_STATE_UNKNOWN` (the answer was lost).
    ForwardThenUnknown,
    /// Report `COMMIT_STATE_UNKNOWN` without forwarding (the write never landed).
    Unknown,
    /// Report `COMMIT_CONFLICT` without forwarding.
    Conflict,
}

type Hook = dyn Fn(u32) -> BoxFuture<'static, Action> + Send + Sync;

/// See the module docs. `hook` receives the 1-based number of the commit call.
pub struct Hooked {
    inner: Arc<dyn IndexCatalog>,
    hook: Box<Hook>,
    commits: AtomicU32,
    new_locations: Mutex<Vec<String>>,
}

impl Hooked {
    pub fn new<H>(inner: Arc<dyn IndexCatalog>, hook: H) -> Arc<Hooked>
    where
        H: Fn(u32) -> BoxFuture<'static, Action> + Send + Sync + 'static,
    {
        Arc::new(Hooked {
            inner,
            hook: Box::new(hook),
            commits: AtomicU32::new(0),
            new_locations: Mutex::new(Vec::new()),
        })
    }

    /// How many commits were called.
    pub fn commits(&self) -> u32 {
        self.commits.load(Ordering::SeqCst)
    }

    /// A catalog whose first commit does `first`; every later one is forwarded.
    pub fn first_commit(inner: Arc<dyn IndexCatalog>, first: Action) -> Arc<Hooked> {
        Hooked::new(inner, move |call| {
            Box::pin(async move { if call == 1 { first } else { Action::Forward } })
        })
    }

    /// The `new` locations of every commit call, in order.
    pub fn new_locations(&self) -> Vec<String> {
        self.new_locations.lock().expect("lock").clone()
    }
}

fn unknown() -> Error {
    Error::new(
        ErrorKind::CommitStateUnknown,
        "injected: the answer was lost",
    )
}

#[async_trait]
impl IndexCatalog for Hooked {
    async fn load(&self, identifier: &IndexIdentifier) -> Result<IndexPointer> {
        self.inner.load(identifier).await
    }

    async fn load_if_changed(
        &self,
        identifier: &IndexIdentifier,
        version: &str,
    ) -> Result<LoadIfChanged> {
        self.inner.load_if_changed(identifier, version).await
    }

    async fn register_with_binding(
        &self,
        identifier: &IndexIdentifier,
        source: &SourceBinding,
        metadata_location: &str,
    ) -> Result<IndexPointer> {
        self.inner
            .register_with_binding(identifier, source, metadata_location)
            .await
    }

    async fn commit_with_binding(
        &self,
        identifier: &IndexIdentifier,
        source: &SourceBinding,
        base: &str,
        new: &str,
    ) -> Result<CommitResult> {
        let call = self.commits.fetch_add(1, Ordering::SeqCst) + 1;
        self.new_locations
            .lock()
            .expect("lock")
            .push(new.to_owned());
        match (self.hook)(call).await {
            Action::Forward => {
                self.inner
                    .commit_with_binding(identifier, source, base, new)
                    .await
            }
            Action::ForwardThenUnknown => {
                self.inner
                    .commit_with_binding(identifier, source, base, new)
                    .await?;
                Err(unknown())
            }
            Action::Unknown => Err(unknown()),
            Action::Conflict => Err(Error::new(ErrorKind::CommitConflict, "injected conflict")),
        }
    }

    async fn drop_index(&self, identifier: &IndexIdentifier) -> Result<()> {
        self.inner.drop_index(identifier).await
    }

    async fn rename(&self, from: &IndexIdentifier, to: &IndexIdentifier) -> Result<IndexPointer> {
        self.inner.rename(from, to).await
    }

    async fn list(
        &self,
        namespace: &Namespace,
        page_token: Option<&str>,
        page_size: Option<usize>,
    ) -> Result<IdentifierPage> {
        self.inner.list(namespace, page_token, page_size).await
    }

    async fn create_namespace(
        &self,
        namespace: &Namespace,
        properties: BTreeMap<String, String>,
    ) -> Result<()> {
        self.inner.create_namespace(namespace, properties).await
    }

    async fn namespace_exists(&self, namespace: &Namespace) -> Result<bool> {
        self.inner.namespace_exists(namespace).await
    }

    async fn namespace_properties(
        &self,
        namespace: &Namespace,
    ) -> Result<BTreeMap<String, String>> {
        self.inner.namespace_properties(namespace).await
    }

    async fn list_namespaces(
        &self,
        parent: Option<&Namespace>,
        page_token: Option<&str>,
        page_size: Option<usize>,
    ) -> Result<NamespacePage> {
        self.inner
            .list_namespaces(parent, page_token, page_size)
            .await
    }

    async fn drop_namespace(&self, namespace: &Namespace) -> Result<()> {
        self.inner.drop_namespace(namespace).await
    }
}
