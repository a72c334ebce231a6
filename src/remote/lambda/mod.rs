//! [`LambdaCatalog`]: the catalog over the deployed Lambda functions.
//!
//! Every [`IndexCatalog`] call is one synchronous `Invoke` (`RequestResponse`) of the
//! function that serves the operation, with the request and the answer exactly as in the
//! event contract ([`crate::lambda::event`]): the request types are the contract's own
//! ([`LoadRequest`], [`CommitRequest`], ...), and answers are parsed strictly into the
//! catalog's result types. Function names come from a prefix, qualified with the alias
//! `live` the SAM template publishes every function through (`lambda://parqdb-prod-` →
//! `parqdb-prod-load:live`, `parqdb-prod-commit:live`, ..., so a client follows a
//! deployment's gradual shift; `lambda://parqdb-prod-?qualifier=ALIAS` invokes another
//! alias or version, `?qualifier=$LATEST` the unqualified functions), or from an explicit
//! map ([`FunctionNames`]).
//!
//! # Errors
//! A function error whose `errorType` is a catalog code is the same typed [`Error`] the
//! embedded catalog returns (`COMMIT_CONFLICT`, `INDEX_NOT_FOUND`, ...). Throttling and
//! failures that certainly did not run the function are retried with the jittered backoff
//! of [`RetryPolicy`]. Everything else may have run (see [`invoke`] for the table): reads
//! retry it; a mutation resolves it the way the embedded catalog resolves an ambiguous
//! store write — by reading back through `load`:
//!
//! | mutation           | applied iff, read back                                               |
//! |--------------------|----------------------------------------------------------------------|
//! | `commit`           | the pointer equals `new` (in any spelling) and the source, if one was given (reported `already-applied`) |
//! | `register`         | the pointer equals the registered location (in any spelling) and the source, if one was given |
//! | `drop`             | the identifier is absent                                             |
//! | `rename`           | `to` holds the location `from` had before the call, and `from` is absent |
//! | `namespace create` | the namespace exists with the requested properties                   |
//! | `namespace drop`   | the namespace is absent                                              |
//!
//! If the read-back does not show the mutation applied (it may still be running, or may
//! land later), the result is [`ErrorKind::CommitStateUnknown`]: reload before retrying.
//! The client never re-sends a mutation whose outcome is unknown.
//!
//! # Configuration
//! Region and credentials come from `aws-config`'s standard chain; the endpoint from
//! `AWS_ENDPOINT_URL_LAMBDA` / `AWS_ENDPOINT_URL` or [`LambdaCatalogBuilder::endpoint`]
//! (for a local Lambda emulator). Each attempt times out after
//! 35 s by default (a little above the functions' default 30 s timeout, so
//! the function's own timeout is normally what the client sees).
//!
//! ```no_run
//! use parqdb_catalog::IndexCatalog;
//! use parqdb_catalog::remote::LambdaCatalog;
//! use parqdb_catalog::{IndexIdentifier, Namespace};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> parqdb_catalog::Result<()> {
//! let catalog = LambdaCatalog::from_uri("lambda://parqdb-prod-", None).await?;
//! let id = IndexIdentifier::new(Namespace::new(["docs"])?, "embeddings")?;
//! let pointer = catalog.load(&id).await?;
//! println!("{}", pointer.metadata_location);
//! # Ok(()) }
//! ```

mod invoke;
mod names;
mod wire;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_lambda::Client;
use aws_sdk_lambda::config::BehaviorVersion;
use aws_sdk_lambda::config::retry::RetryConfig;
use aws_sdk_lambda::config::timeout::TimeoutConfig;

pub use names::{DEFAULT_QUALIFIER, FunctionNames};

use self::invoke::{Failure, Idempotence, Invoker};
use self::wire::{Answer, NamespaceDropped, NamespaceExists, NamespaceProperties};
use crate::catalog::{
    CommitResult, IdentifierPage, IndexCatalog, IndexPointer, LoadIfChanged, NamespacePage,
    RetryPolicy, SourceBinding,
};
use crate::clock::{IdGenerator, RandomIds};
use crate::error::{Error, ErrorKind, Result};
use crate::identifier::{IndexIdentifier, Namespace};
use crate::lambda::Operation;
use crate::lambda::event::{
    CommitRequest, DropRequest, DropResponse, ListRequest, LoadRequest, NamespaceRequest,
    RegisterRequest, RenameRequest, Request,
};
use crate::metadata::TableDefinition;

/// Default timeout of one invocation attempt.
pub(crate) const DEFAULT_ATTEMPT_TIMEOUT: Duration = Duration::from_secs(35);
/// Default timeout of connecting to the Lambda endpoint.
pub(crate) const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

/// The catalog over a deployment's Lambda functions. See the [module docs](crate::remote).
#[derive(Debug, Clone)]
pub struct LambdaCatalog {
    invoker: Invoker,
}

/// Configures a [`LambdaCatalog`].
#[derive(Debug)]
pub struct LambdaCatalogBuilder {
    names: FunctionNames,
    client: Option<Client>,
    endpoint: Option<String>,
    retry: RetryPolicy,
    ids: Arc<dyn IdGenerator>,
    attempt_timeout: Duration,
    connect_timeout: Duration,
}

impl LambdaCatalogBuilder {
    /// Use this client's configuration (region, credentials, endpoint, HTTP client)
    /// instead of loading one from the environment. Its retry and timeout settings are
    /// replaced: retries are the catalog's own.
    pub fn client(mut self, client: Client) -> Self {
        self.client = Some(client);
        self
    }

    /// Send invocations to this endpoint (e.g. `http://127.0.0.1:9001` for a local
    /// emulator) instead of the one from the environment or the region.
    pub fn endpoint(mut self, endpoint: impl Into<String>) -> Self {
        self.endpoint = Some(endpoint.into());
        self
    }

    /// Attempts and backoff for throttled and failed invocations (default:
    /// [`RetryPolicy::default`]).
    pub fn retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    /// Draw the backoff's jitter from this id generator (default: random).
    #[doc(hidden)] // Injection for the workspace's tests (seeded ids).
    pub fn ids(mut self, ids: Arc<dyn IdGenerator>) -> Self {
        self.ids = ids;
        self
    }

    /// Timeout of one invocation attempt (default 35 s). A
    /// mutation that times out is resolved by reading back.
    pub fn attempt_timeout(mut self, timeout: Duration) -> Self {
        self.attempt_timeout = timeout;
        self
    }

    /// Timeout of connecting (default 3 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// The catalog. Loads the AWS configuration from the environment unless a client was
    /// given; fails with [`ErrorKind::Configuration`] if no region is configured.
    pub async fn build(self) -> Result<LambdaCatalog> {
        let client = match self.client {
            Some(client) => client,
            None => Client::new(&aws_config::defaults(BehaviorVersion::latest()).load().await),
        };
        let mut config = client.config().to_builder();
        config = config.retry_config(RetryConfig::disabled()).timeout_config(
            TimeoutConfig::builder()
                .connect_timeout(self.connect_timeout)
                .operation_attempt_timeout(self.attempt_timeout)
                .build(),
        );
        if let Some(endpoint) = self.endpoint {
            config = config.endpoint_url(endpoint);
        }
        let config = config.build();
        if config.region().is_none() {
            return Err(Error::new(
                ErrorKind::Configuration,
                "no AWS region is configured for Lambda: set AWS_REGION or a profile region",
            ));
        }
        Ok(LambdaCatalog {
            invoker: Invoker {
                client: Client::from_conf(config),
                names: self.names,
                retry: self.retry,
                ids: self.ids,
            },
        })
    }
}

impl LambdaCatalog {
    /// Configure a catalog over the functions `names`.
    pub fn builder(names: FunctionNames) -> LambdaCatalogBuilder {
        LambdaCatalogBuilder {
            names,
            client: None,
            endpoint: None,
            retry: RetryPolicy::default(),
            ids: Arc::new(RandomIds),
            attempt_timeout: DEFAULT_ATTEMPT_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
        }
    }

    /// The catalog for `lambda://PREFIX[?qualifier=ALIAS][&OPERATION=NAME...]` (see
    /// [`FunctionNames::from_uri`]), configured from the environment, with an optional
    /// endpoint override.
    pub async fn from_uri(uri: &str, endpoint: Option<&str>) -> Result<LambdaCatalog> {
        let mut builder = LambdaCatalog::builder(FunctionNames::from_uri(uri)?);
        if let Some(endpoint) = endpoint {
            builder = builder.endpoint(endpoint);
        }
        builder.build().await
    }

    /// Invoke a read: every transient failure is retried.
    async fn read<R: Request, T: Answer>(&self, request: &R) -> Result<T> {
        match self.invoker.invoke(request, Idempotence::Read).await {
            Ok(answer) => wire::parse(R::OPERATION, answer),
            Err(Failure::Final(err)) => Err(err),
            // Reads never hand back an ambiguous failure; keep the detail if one does.
            Err(Failure::Ambiguous(detail)) => Err(Error::new(ErrorKind::StoreUnavailable, detail)),
        }
    }

    /// Invoke a mutation: `Ok(Err(detail))` if its outcome is unknown.
    async fn mutate<R: Request, T: Answer>(&self, request: &R) -> Result<Result<T, String>> {
        match self.invoker.invoke(request, Idempotence::Mutation).await {
            Ok(answer) => match wire::parse(R::OPERATION, answer) {
                Ok(result) => Ok(Ok(result)),
                // It answered success, but not in the contract: applied, result unknown.
                Err(err) => Ok(Err(err.message().to_owned())),
            },
            Err(Failure::Final(err)) => Err(err),
            Err(Failure::Ambiguous(detail)) => Ok(Err(detail)),
        }
    }

    /// Settle an ambiguous mutation with the read-back `check`: `Some` if it shows the
    /// mutation applied, else `COMMIT_STATE_UNKNOWN`.
    async fn resolve<T>(
        &self,
        operation: Operation,
        detail: String,
        check: impl Future<Output = Result<Option<T>>>,
    ) -> Result<T> {
        let verdict = check.await;
        let why = match verdict {
            Ok(Some(result)) => {
                tracing::info!(%operation, %detail, "ambiguous invocation resolved: applied");
                return Ok(result);
            }
            Ok(None) => "the read-back does not show it applied (it may still land)".to_owned(),
            Err(err) => format!("the read-back failed: {}", err.full_message()),
        };
        tracing::warn!(%operation, %detail, %why, "ambiguous invocation unresolved");
        Err(Error::new(
            ErrorKind::CommitStateUnknown,
            format!(
                "the outcome of the `{operation}` invocation is unknown ({detail}); {why}; \
                 reload before retrying"
            ),
        ))
    }

    /// `load`, with `INDEX_NOT_FOUND` as `None`.
    async fn load_optional(&self, identifier: &IndexIdentifier) -> Result<Option<IndexPointer>> {
        match self.load(identifier).await {
            Ok(pointer) => Ok(Some(pointer)),
            Err(err) if err.kind() == ErrorKind::IndexNotFound => Ok(None),
            Err(err) => Err(err),
        }
    }
}

/// Whether a stored (canonical) location is the one a request named, in any spelling:
/// the functions store the canonical form of a location inside the warehouse, which
/// percent-encodes each path segment once, so the two compare equal once every path
/// segment is decoded.
fn same_location(stored: &str, requested: &str) -> bool {
    stored == requested || decoded(stored).is_some_and(|a| Some(a) == decoded(requested))
}

fn decoded(location: &str) -> Option<String> {
    let url = url::Url::parse(location).ok()?;
    let mut text = format!("{}://{}", url.scheme(), url.authority());
    for segment in url.path().split('/') {
        text.push('/');
        text.push_str(
            &percent_encoding::percent_decode_str(segment)
                .decode_utf8()
                .ok()?,
        );
    }
    Some(text)
}

#[async_trait]
impl IndexCatalog for LambdaCatalog {
    async fn load(&self, identifier: &IndexIdentifier) -> Result<IndexPointer> {
        self.read(&LoadRequest {
            identifier: identifier.clone(),
        })
        .await
    }

    /// One `load` invocation, compared with `version` (the contract has no conditional
    /// load).
    async fn load_if_changed(
        &self,
        identifier: &IndexIdentifier,
        version: &str,
    ) -> Result<LoadIfChanged> {
        let pointer = self.load(identifier).await?;
        Ok(if pointer.version == version {
            LoadIfChanged::Unchanged
        } else {
            LoadIfChanged::Changed(Box::new(pointer))
        })
    }

    /// The source binding is sent as given (a malformed one too); none lets the
    /// function's catalog default it, in the same order of checks as the embedded catalog.
    async fn register_with_binding(
        &self,
        identifier: &IndexIdentifier,
        source: &SourceBinding,
        metadata_location: &str,
    ) -> Result<IndexPointer> {
        let request = RegisterRequest {
            identifier: identifier.clone(),
            source: source.clone(),
            metadata_location: metadata_location.to_owned(),
        };
        match self.mutate(&request).await? {
            Ok(pointer) => Ok(pointer),
            Err(detail) => {
                self.resolve(Operation::Register, detail, async {
                    Ok(self.load_optional(identifier).await?.filter(|pointer| {
                        same_location(&pointer.metadata_location, metadata_location)
                            && bound(source, &pointer.source)
                    }))
                })
                .await
            }
        }
    }

    async fn commit_with_binding(
        &self,
        identifier: &IndexIdentifier,
        source: &SourceBinding,
        base: &str,
        new: &str,
    ) -> Result<CommitResult> {
        let request = CommitRequest {
            identifier: identifier.clone(),
            source: source.clone(),
            base_metadata_location: base.to_owned(),
            new_metadata_location: new.to_owned(),
        };
        match self.mutate(&request).await? {
            Ok(result) => Ok(result),
            Err(detail) => {
                self.resolve(Operation::Commit, detail, async {
                    let pointer = self.load_optional(identifier).await?;
                    Ok(pointer
                        .filter(|pointer| {
                            same_location(&pointer.metadata_location, new)
                                && bound(source, &pointer.source)
                        })
                        .map(|pointer| CommitResult {
                            pointer,
                            already_applied: true,
                        }))
                })
                .await
            }
        }
    }

    async fn drop_index(&self, identifier: &IndexIdentifier) -> Result<()> {
        let request = DropRequest {
            identifier: identifier.clone(),
        };
        match self.mutate::<_, DropResponse>(&request).await? {
            Ok(_) => Ok(()),
            Err(detail) => {
                self.resolve(Operation::Drop, detail, async {
                    Ok(self
                        .load_optional(identifier)
                        .await?
                        .is_none()
                        .then_some(()))
                })
                .await
            }
        }
    }

    /// Loads `from` first (one extra invocation), so that an ambiguous outcome can be
    /// resolved: applied iff `to` then holds the location `from` had.
    async fn rename(&self, from: &IndexIdentifier, to: &IndexIdentifier) -> Result<IndexPointer> {
        // Errors of this load are the rename's to report, with the contract's precedence.
        let before = self.load(from).await.ok();
        let request = RenameRequest {
            from: from.clone(),
            to: to.clone(),
        };
        match self.mutate(&request).await? {
            Ok(pointer) => Ok(pointer),
            Err(detail) => {
                self.resolve(Operation::Rename, detail, async {
                    let Some(before) = before else {
                        return Ok(None);
                    };
                    let moved = self.load_optional(to).await?.filter(|pointer| {
                        pointer.metadata_location == before.metadata_location
                            && pointer.source == before.source
                    });
                    match moved {
                        Some(pointer) if self.load_optional(from).await?.is_none() => {
                            Ok(Some(pointer))
                        }
                        _ => Ok(None),
                    }
                })
                .await
            }
        }
    }

    async fn list(
        &self,
        namespace: &Namespace,
        page_token: Option<&str>,
        page_size: Option<usize>,
    ) -> Result<IdentifierPage> {
        self.read(&ListRequest {
            namespace: namespace.clone(),
            page_token: page_token.map(str::to_owned),
            page_size,
        })
        .await
    }

    async fn create_namespace(
        &self,
        namespace: &Namespace,
        properties: BTreeMap<String, String>,
    ) -> Result<()> {
        let request = NamespaceRequest::Create {
            namespace: namespace.clone(),
            properties: properties.clone(),
        };
        match self.mutate::<_, NamespaceProperties>(&request).await? {
            Ok(_) => Ok(()),
            Err(detail) => {
                self.resolve(Operation::Namespace, detail, async {
                    match self.namespace_properties(namespace).await {
                        Ok(current) => Ok((current == properties).then_some(())),
                        Err(err) if err.kind() == ErrorKind::NamespaceNotFound => Ok(None),
                        Err(err) => Err(err),
                    }
                })
                .await
            }
        }
    }

    async fn namespace_exists(&self, namespace: &Namespace) -> Result<bool> {
        let answer: NamespaceExists = self
            .read(&NamespaceRequest::Exists {
                namespace: namespace.clone(),
            })
            .await?;
        Ok(answer.exists)
    }

    async fn namespace_properties(
        &self,
        namespace: &Namespace,
    ) -> Result<BTreeMap<String, String>> {
        let answer: NamespaceProperties = self
            .read(&NamespaceRequest::Properties {
                namespace: namespace.clone(),
            })
            .await?;
        Ok(answer.properties)
    }

    async fn list_namespaces(
        &self,
        parent: Option<&Namespace>,
        page_token: Option<&str>,
        page_size: Option<usize>,
    ) -> Result<NamespacePage> {
        self.read(&NamespaceRequest::List {
            parent: parent.cloned(),
            page_token: page_token.map(str::to_owned),
            page_size,
        })
        .await
    }

    async fn drop_namespace(&self, namespace: &Namespace) -> Result<()> {
        let request = NamespaceRequest::Drop {
            namespace: namespace.clone(),
        };
        match self.mutate::<_, NamespaceDropped>(&request).await? {
            Ok(_) => Ok(()),
            Err(detail) => {
                self.resolve(Operation::Namespace, detail, async {
                    Ok((!self.namespace_exists(namespace).await?).then_some(()))
                })
                .await
            }
        }
    }
}

/// Whether a pointer's stored source is the one a request asked for: any, without a
/// binding; the given one; never, for a malformed binding (which nothing can store).
fn bound(requested: &SourceBinding, stored: &TableDefinition) -> bool {
    match requested {
        SourceBinding::Snapshot => true,
        SourceBinding::Table(table) => table == stored,
        SourceBinding::Malformed(_) => false,
    }
}
