//! The S3 pointer store (AWS S3, MinIO, any S3-compatible server with conditional writes).
//!
//! Each key is one object `<prefix>/<key>` in a bucket, written through object_store's
//! [`AmazonS3`] client:
//!
//! | primitive                | request                                               |
//! |--------------------------|-------------------------------------------------------|
//! | `get`                    | `GET`; the ETag is the [`Version`]                    |
//! | `put(Create)`            | `PUT` with `If-None-Match: *`                         |
//! | `put(Update(etag))`      | `PUT` with `If-Match: <etag>` (never `If-Match: *`)   |
//! | `list`                   | `ListObjectsV2` with `prefix`, `start-after`, `max-keys` |
//! | `get_if_changed`         | `GET` with `If-None-Match: <etag>` (304 = unchanged)  |
//!
//! Listings carry no bodies, so [`ListEntry::value`] is always `None`. There is no atomic
//! multi-key write ([`Capabilities`] default).
//!
//! # Listing classes in the object size
//! A namespace's listing holds its tombstones too (records are never deleted), and
//! `ListObjectsV2` returns no bodies, so a listing that had to tell live records from
//! tombstones would read every record: 8.7–15× a raw listing on the S3-compatible server.
//! The one thing a writer controls that every S3 listing returns is the object's **size**,
//! so the store keeps each value's [`Listing`] class there. An object is the value, then
//! `p` zero bytes, then a 5-byte trailer `FF 'p' 'q' <class code> <p>`, with `p` in `0..4`
//! chosen so that `size % 4` is the class code (1 hidden, 2 shown, 3 check; never 0).
//! Reads strip the frame; an object without the trailer (written before classes existed)
//! reads as it is (no UTF-8 text, hence no catalog record, contains the byte `FF`).
//! [`PointerStore::list_shown`] then leaves out hidden objects and classifies the others
//! from the same `ListObjectsV2` pages a raw listing makes: no extra request.
//!
//! Sizes are only meaningful if every object under the prefix was written framed. The
//! store therefore trusts them only when the marker object `<prefix>/.listing-classes`
//! exists, and creates that marker itself, before its first write, if the prefix holds no
//! store key yet (a new catalog). A prefix that already holds records written by an older
//! version has no marker: its listings report no class and the catalog reads every listed
//! record as before (a warning says so once per process). Do not let versions older than
//! this one write to a catalog that has the marker: their unframed records would list with
//! a meaningless class.
//!
//! Alternatives weighed, and why not:
//! - **Delete tombstones** with a conditional `DeleteObject` (`If-Match`; real S3 and moto
//!   support it, object_store does not expose it, MinIO's support would need a probe). A
//!   tombstone must outlive every operation that could still act on the key (a stalled
//!   create retried with the same commit id; a crashed rename's `moving` source, which may
//!   be settled at any later time and would resurrect a destination whose tombstone is
//!   gone) and the garbage collector's retention window, whose clock it starts. So deleted
//!   tombstones are old ones, and the bench's case — half a namespace dropped recently —
//!   would still read every tombstone.
//! - **A per-namespace live listing** (a marker object per live identifier) is a second
//!   object per record, written non-atomically with it: after a crash between the two, only
//!   reading the record tells which is right, which is the cost this removes.
//! - **The class in the key** cannot work: a record's compare-and-swap lives in one object,
//!   and its state changes under the same key.
//!
//! # Configuration
//! The object_store way: [`amazon_s3_builder`] starts from the `AWS_*` environment
//! (`AWS_ENDPOINT_URL`, `AWS_ENDPOINT_URL_S3`, `AWS_REGION`/`AWS_DEFAULT_REGION`,
//! `AWS_ALLOW_HTTP`, `AWS_ACCESS_KEY_ID`/`AWS_SECRET_ACCESS_KEY`/`AWS_SESSION_TOKEN`,
//! `AWS_VIRTUAL_HOSTED_STYLE_REQUEST`, ...; profiles are not read), then applies
//! [`S3Options`], whose explicit values win. Conditional put is always
//! `S3ConditionalPut::ETagMatch`: a store without it cannot hold pointers. The region
//! defaults to `us-east-1` and requests are path-style unless configured otherwise.
//!
//! # Conditional-write outcomes
//! - Create: object_store reports `412`, `304` and `409` as `AlreadyExists`; so does this
//!   store. Real S3 answers `409 ConditionalRequestConflict` when conditional writes on one
//!   key collide, which does not prove that the key exists: the catalog never concludes
//!   from `AlreadyExists` alone but reads the key back.
//! - Update: `412` is `Precondition`; `If-Match` on a missing key is `404` on S3, MinIO and
//!   moto but `412` elsewhere, and both become [`StoreError::Precondition`]. object_store
//!   retries a `409` on `If-Match` itself; if the conflict persists it is reported as
//!   `Precondition` too.
//! - object_store retries internally (5xx, throttling, dropped connections; see
//!   [`S3Options::max_retries`]). A retried conditional put whose first attempt applied
//!   comes back as `AlreadyExists` or `Precondition` although the write is ours. That is
//!   fine because the generic catalog reads back its unique commit id after either error;
//!   this store reports what the server said.
//! - Any other failure of a `PUT` is [`StoreError::Ambiguous`], unless no attempt can have
//!   reached the server: the store counts, per operation, the HTTP attempts that got past
//!   connection set-up (a private HTTP connector wraps object_store's reqwest one), and a
//!   failure with zero such attempts (connection refused, DNS failure, missing
//!   credentials) is [`StoreError::Unavailable`]. An authentication or permission refusal
//!   of the only attempt is fatal (`Unavailable { retryable: false }`).
//! - Read failures are `Unavailable { retryable: true }`, except authentication and
//!   permission refusals, which are fatal.
//!
//! A missing bucket reads as an empty store (`404` on `GET` is "no key"); the capability
//! probe's first create fails on it with a fatal error, so the catalog refuses the store.
//!
//! object_store and SDK types stay in this module, except the [`AmazonS3Builder`] returned by
//! [`amazon_s3_builder`], which the warehouse uses to read and write metadata objects with
//! the same configuration.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use object_store::aws::{
    AmazonS3, AmazonS3Builder, AmazonS3ConfigKey, AwsCredential, S3ConditionalPut,
};
use object_store::client::{
    HttpClient, HttpConnector, HttpError, HttpErrorKind, HttpRequest, HttpResponse, HttpService,
    ReqwestConnector,
};
use object_store::list::{PaginatedListOptions, PaginatedListStore};
use object_store::path::Path;
use object_store::{
    BackoffConfig, ClientOptions, GetOptions, ObjectStore, PutOptions, PutPayload, RetryConfig,
    StaticCredentialProvider, UpdateVersion,
};

use super::{
    Changed, ListEntry, ListPage, Listing, PointerStore, PutMode, StoreError, StoreKey, Version,
    Versioned,
};
use crate::error::{Error, ErrorKind};

/// ListObjectsV2 returns at most this many keys per request.
const MAX_KEYS_PER_REQUEST: usize = 1000;

/// The marker object (under the prefix) whose presence says that object sizes encode
/// listing classes. Its name contains `.`, which no store key can.
const CLASSES_MARKER: &str = ".listing-classes";
const CLASSES_MARKER_BODY: &[u8] =
    b"parqdb-catalog: every pointer object here ends with a listing-class trailer (size % 4 = class)\n";
/// The trailer's fixed bytes, before the class code and the padding length.
const TRAILER_MAGIC: [u8; 3] = [0xFF, b'p', b'q'];
const TRAILER_LEN: usize = 5;

/// `value` framed so that its size modulo 4 is the class code (see the module docs).
fn frame(value: &[u8], listing: Listing) -> Bytes {
    let code = listing.code();
    let unpadded = value.len() + TRAILER_LEN;
    let padding = (usize::from(code) + 4 - unpadded % 4) % 4;
    let mut framed = Vec::with_capacity(unpadded + padding);
    framed.extend_from_slice(value);
    framed.resize(value.len() + padding, 0);
    framed.extend_from_slice(&TRAILER_MAGIC);
    framed.push(code);
    framed.push(padding as u8);
    Bytes::from(framed)
}

/// The value of a stored object: the frame removed, or the object as it is if it has none.
fn unframe(mut object: Bytes) -> Bytes {
    let len = object.len();
    if len < TRAILER_LEN {
        return object;
    }
    let trailer = &object[len - TRAILER_LEN..];
    let padding = usize::from(trailer[4]);
    let framed = trailer[..3] == TRAILER_MAGIC
        && Listing::from_code(trailer[3]).is_some()
        && padding < 4
        && len % 4 == usize::from(trailer[3])
        && len >= TRAILER_LEN + padding
        && object[len - TRAILER_LEN - padding..len - TRAILER_LEN]
            .iter()
            .all(|&b| b == 0);
    if framed {
        object.truncate(len - TRAILER_LEN - padding);
    }
    object
}

/// The class an object's size encodes, when sizes are trusted.
fn class_of_size(size: u64) -> Option<Listing> {
    Listing::from_code((size % 4) as u8)
}

/// Explicit S3 settings; each one that is set overrides the `AWS_*` environment.
///
/// ```
/// use parqdb_catalog::store::s3::S3Options;
///
/// let local = S3Options {
///     endpoint: Some("http://127.0.0.1:9000".into()),
///     region: Some("us-east-1".into()),
///     allow_http: Some(true),
///     access_key_id: Some("minioadmin".into()),
///     secret_access_key: Some("minioadmin".into()),
///     ..S3Options::default()
/// };
/// assert!(format!("{local:?}").contains("<redacted>"));
/// ```
#[derive(Clone, Default)]
pub struct S3Options {
    /// The endpoint URL (`AWS_ENDPOINT_URL`), e.g. `http://127.0.0.1:9000` for MinIO.
    /// `None`: AWS's regional endpoint.
    pub endpoint: Option<String>,
    /// The region (`AWS_REGION`); `us-east-1` if set nowhere.
    pub region: Option<String>,
    /// Permit plain-HTTP endpoints (`AWS_ALLOW_HTTP`).
    pub allow_http: Option<bool>,
    /// Static credentials: the access key id. Set together with
    /// [`S3Options::secret_access_key`]; both replace any credentials from the environment.
    pub access_key_id: Option<String>,
    /// Static credentials: the secret access key.
    pub secret_access_key: Option<String>,
    /// Static credentials: the session token, if the credentials are temporary.
    pub session_token: Option<String>,
    /// Virtual-hosted-style requests (`https://<bucket>.<endpoint>`) instead of path-style.
    pub virtual_hosted_style: Option<bool>,
    /// How often object_store retries a failed request (default 10).
    pub max_retries: Option<usize>,
    /// How long object_store keeps retrying one request (default 3 minutes).
    pub retry_timeout: Option<Duration>,
    /// Further object_store configuration keys (`aws_*` or client keys such as `timeout`),
    /// applied after the environment and before the fields above.
    pub config: Vec<(String, String)>,
}

impl fmt::Debug for S3Options {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let redacted = |secret: &Option<String>| secret.as_ref().map(|_| "<redacted>");
        f.debug_struct("S3Options")
            .field("endpoint", &self.endpoint)
            .field("region", &self.region)
            .field("allow_http", &self.allow_http)
            .field("access_key_id", &self.access_key_id)
            .field("secret_access_key", &redacted(&self.secret_access_key))
            .field("session_token", &redacted(&self.session_token))
            .field("virtual_hosted_style", &self.virtual_hosted_style)
            .field("max_retries", &self.max_retries)
            .field("retry_timeout", &self.retry_timeout)
            .field(
                "config",
                &self
                    .config
                    .iter()
                    .map(|(k, _)| k.as_str())
                    .collect::<Vec<_>>(),
            )
            .finish()
    }
}

fn configuration(message: impl Into<String>) -> Error {
    Error::new(ErrorKind::Configuration, message)
}

/// An object_store S3 builder for `bucket`: the `AWS_*` environment, then `options`, with
/// conditional put (`ETagMatch`) always on.
///
/// The pointer store builds its client from this; the warehouse reuses it to read and
/// write metadata objects with the same endpoint, region and credentials.
pub fn amazon_s3_builder(bucket: &str, options: &S3Options) -> Result<AmazonS3Builder, Error> {
    let env = std::env::vars_os()
        .filter_map(|(key, value)| Some((key.into_string().ok()?, value.into_string().ok()?)));
    builder_from_env(env, bucket, options)
}

/// [`amazon_s3_builder`] with the environment as data (what `AmazonS3Builder::from_env`
/// does), so tests need not touch the process environment.
fn builder_from_env(
    env: impl IntoIterator<Item = (String, String)>,
    bucket: &str,
    options: &S3Options,
) -> Result<AmazonS3Builder, Error> {
    if bucket.is_empty() {
        return Err(configuration("the S3 bucket name is empty"));
    }
    let mut builder = AmazonS3Builder::new();
    for (key, value) in env {
        if !key.starts_with("AWS_") {
            continue;
        }
        if let Ok(config_key) = key.to_ascii_lowercase().parse::<AmazonS3ConfigKey>() {
            builder = builder.with_config(config_key, value);
        }
    }
    for (key, value) in &options.config {
        let config_key = key.parse::<AmazonS3ConfigKey>().map_err(|err| {
            Error::with_source(
                ErrorKind::Configuration,
                format!("unknown S3 option `{key}`"),
                err,
            )
        })?;
        builder = builder.with_config(config_key, value);
    }
    if let Some(endpoint) = &options.endpoint {
        // `AWS_ENDPOINT_URL_S3` takes precedence over the generic endpoint in object_store:
        // set both so that the explicit option wins over either variable.
        builder = builder
            .with_config(AmazonS3ConfigKey::S3Endpoint, endpoint)
            .with_endpoint(endpoint);
    }
    if let Some(region) = &options.region {
        builder = builder.with_region(region);
    }
    if let Some(allow_http) = options.allow_http {
        builder = builder.with_allow_http(allow_http);
    }
    if let Some(virtual_hosted) = options.virtual_hosted_style {
        builder = builder.with_virtual_hosted_style_request(virtual_hosted);
    }
    match (&options.access_key_id, &options.secret_access_key) {
        (Some(key_id), Some(secret_key)) => {
            let credential = AwsCredential {
                key_id: key_id.clone(),
                secret_key: secret_key.clone(),
                token: options.session_token.clone(),
            };
            builder = builder.with_credentials(Arc::new(StaticCredentialProvider::new(credential)));
        }
        (None, None) if options.session_token.is_none() => {}
        _ => {
            return Err(configuration(
                "S3 static credentials need both an access key id and a secret access key",
            ));
        }
    }
    if options.max_retries.is_some() || options.retry_timeout.is_some() {
        let defaults = RetryConfig::default();
        builder = builder.with_retry(RetryConfig {
            backoff: BackoffConfig::default(),
            max_retries: options.max_retries.unwrap_or(defaults.max_retries),
            retry_timeout: options.retry_timeout.unwrap_or(defaults.retry_timeout),
        });
    }
    Ok(builder
        .with_bucket_name(bucket)
        .with_conditional_put(S3ConditionalPut::ETagMatch))
}

/// Split `s3://bucket/prefix` into the bucket and the normalised prefix.
fn parse_uri(uri: &str) -> Result<(String, String), Error> {
    let rest = uri
        .strip_prefix("s3://")
        .ok_or_else(|| configuration(format!("`{uri}` is not an s3://bucket/prefix URI")))?;
    let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
    let bucket_char =
        |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.';
    if bucket.is_empty() || !bucket.chars().all(bucket_char) {
        return Err(configuration(format!(
            "`{uri}` does not name a valid S3 bucket"
        )));
    }
    Ok((bucket.to_owned(), normalise_prefix(prefix)?))
}

/// A prefix without leading or trailing `/`, validated as an object_store path (no empty,
/// `.` or `..` segments, no control characters).
fn normalise_prefix(prefix: &str) -> Result<String, Error> {
    let trimmed = prefix.trim_matches('/');
    let invalid_char = |c: char| c.is_control() || matches!(c, '?' | '#');
    if trimmed.chars().any(invalid_char) {
        return Err(configuration(format!(
            "`{prefix}` is not a valid S3 prefix"
        )));
    }
    let path = Path::parse(trimmed).map_err(|err| {
        Error::with_source(
            ErrorKind::Configuration,
            format!("`{prefix}` is not a valid S3 prefix"),
            err,
        )
    })?;
    Ok(path.as_ref().to_owned())
}

/// How many HTTP attempts of one operation may have reached the server: every attempt
/// except those that failed while connecting. Carried to the connector in the request's
/// extensions.
#[derive(Debug, Clone, Default)]
struct Attempts(Arc<AtomicUsize>);

impl Attempts {
    fn count(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
}

/// object_store's reqwest connector, wrapped to count [`Attempts`].
#[derive(Debug, Default)]
struct CountingConnector;

impl HttpConnector for CountingConnector {
    fn connect(&self, options: &ClientOptions) -> object_store::Result<HttpClient> {
        let inner = ReqwestConnector::default().connect(options)?;
        Ok(HttpClient::new(CountingService(inner)))
    }
}

#[derive(Debug)]
struct CountingService(HttpClient);

#[async_trait]
impl HttpService for CountingService {
    async fn call(&self, request: HttpRequest) -> Result<HttpResponse, HttpError> {
        let attempts = request.extensions().get::<Attempts>().cloned();
        let result = self.0.execute(request).await;
        let never_sent = matches!(&result, Err(err) if err.kind() == HttpErrorKind::Connect);
        if let Some(attempts) = attempts
            && !never_sent
        {
            attempts.0.fetch_add(1, Ordering::SeqCst);
        }
        result
    }
}

/// Is this object_store error certain to have happened before any request was sent?
fn never_sent(err: &object_store::Error) -> bool {
    matches!(
        err,
        object_store::Error::NotImplemented { .. }
            | object_store::Error::NotSupported { .. }
            | object_store::Error::InvalidPath { .. }
            | object_store::Error::UnknownConfigurationKey { .. }
    )
}

fn is_auth(err: &object_store::Error) -> bool {
    matches!(
        err,
        object_store::Error::PermissionDenied { .. } | object_store::Error::Unauthenticated { .. }
    )
}

/// Map a failed read (GET, list) to a store error.
fn read_error(err: object_store::Error) -> StoreError {
    if is_auth(&err) || never_sent(&err) {
        StoreError::fatal(err)
    } else {
        StoreError::unavailable(err)
    }
}

/// Map a failed conditional PUT to a store error; `sent` is the number of attempts that
/// may have reached the server.
fn put_error(err: object_store::Error, mode: &PutMode, sent: usize) -> StoreError {
    use object_store::Error as E;
    match (mode, &err) {
        (
            PutMode::Create,
            E::AlreadyExists { .. } | E::Precondition { .. } | E::NotModified { .. },
        ) => StoreError::AlreadyExists,
        (
            PutMode::Update(_),
            E::AlreadyExists { .. }
            | E::Precondition { .. }
            | E::NotModified { .. }
            | E::NotFound { .. },
        ) => StoreError::Precondition,
        // A create cannot miss its key: the bucket is missing.
        (PutMode::Create, E::NotFound { .. }) => StoreError::fatal(err),
        _ if never_sent(&err) => StoreError::fatal(err),
        _ if is_auth(&err) && sent <= 1 => StoreError::fatal(err),
        _ if sent == 0 => StoreError::unavailable(err),
        _ => StoreError::ambiguous(err),
    }
}

/// A pointer store in an S3 bucket under a key prefix.
#[derive(Debug, Clone)]
pub struct S3Store {
    client: Arc<AmazonS3>,
    bucket: String,
    prefix: String,
    classes: Arc<Classes>,
}

/// Whether object sizes under the prefix encode listing classes (see the module docs).
#[derive(Debug, Default)]
struct Classes {
    /// The marker was seen or created: sizes are trusted.
    trusted: AtomicBool,
    /// The check before this store's first write ran.
    checked: tokio::sync::OnceCell<()>,
    /// The "no marker" warning was logged.
    warned: AtomicBool,
}

impl S3Store {
    /// A store on the bucket of `builder` (see [`amazon_s3_builder`]), with keys under
    /// `prefix` (`""` for the bucket root; leading and trailing `/` are ignored).
    ///
    /// The store installs its own HTTP connector (object_store's reqwest connector, wrapped
    /// to tell requests that never left the machine from those that may have applied).
    pub fn new(builder: AmazonS3Builder, prefix: &str) -> Result<S3Store, Error> {
        let prefix = normalise_prefix(prefix)?;
        let bucket = builder
            .get_config_value(&AmazonS3ConfigKey::Bucket)
            .unwrap_or_default();
        let client = builder
            .with_http_connector(CountingConnector)
            .build()
            .map_err(|err| {
                Error::with_source(
                    ErrorKind::Configuration,
                    format!("invalid S3 configuration for bucket `{bucket}`"),
                    err,
                )
            })?;
        Ok(S3Store {
            client: Arc::new(client),
            bucket,
            prefix,
            classes: Arc::new(Classes::default()),
        })
    }

    /// A store at `s3://bucket/prefix`, configured from the environment and `options`.
    pub fn from_uri(uri: &str, options: &S3Options) -> Result<S3Store, Error> {
        let (bucket, prefix) = parse_uri(uri)?;
        S3Store::new(amazon_s3_builder(&bucket, options)?, &prefix)
    }

    /// The bucket.
    pub fn bucket(&self) -> &str {
        &self.bucket
    }

    /// The key prefix, without leading or trailing `/` (empty for the bucket root).
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The object name of a key or key prefix.
    fn object_name(&self, key: &str) -> String {
        if self.prefix.is_empty() {
            key.to_owned()
        } else {
            format!("{}/{key}", self.prefix)
        }
    }

    fn path(&self, key: &StoreKey) -> Result<Path, StoreError> {
        // Keys and the prefix are valid object_store paths by construction; `parse` keeps
        // them verbatim where `Path::from` would percent-encode `~`.
        Path::parse(self.object_name(key.as_str())).map_err(StoreError::fatal)
    }

    /// The store key of a listed object, `None` for foreign objects.
    fn store_key(&self, object: &str) -> Option<StoreKey> {
        let key = if self.prefix.is_empty() {
            object
        } else {
            object.strip_prefix(&self.prefix)?.strip_prefix('/')?
        };
        StoreKey::new(key).ok()
    }

    async fn get_with(
        &self,
        path: &Path,
        options: GetOptions,
    ) -> Result<Versioned, object_store::Error> {
        let result = self.client.get_opts(path, options).await?;
        let e_tag = result.meta.e_tag.clone();
        let value = unframe(result.bytes().await?);
        let e_tag = e_tag.ok_or_else(|| object_store::Error::NotSupported {
            source: format!("{} returned no ETag for {path}", self.describe()).into(),
        })?;
        Ok(Versioned {
            value,
            version: Version::new(e_tag),
        })
    }

    fn marker_path(&self) -> Result<Path, StoreError> {
        Path::parse(self.object_name(CLASSES_MARKER)).map_err(StoreError::fatal)
    }

    /// Whether the classes marker exists (and remember it if it does).
    async fn marker_exists(&self) -> Result<bool, StoreError> {
        if self.classes.trusted.load(Ordering::Acquire) {
            return Ok(true);
        }
        let options = GetOptions {
            head: true,
            ..GetOptions::default()
        };
        match self.client.get_opts(&self.marker_path()?, options).await {
            Ok(_) => {
                self.classes.trusted.store(true, Ordering::Release);
                Ok(true)
            }
            Err(object_store::Error::NotFound { .. }) => Ok(false),
            Err(err) => Err(read_error(err)),
        }
    }

    /// Before this store's first write: create the classes marker if the prefix holds no
    /// store key yet. Every object written after that is framed, so the marker's promise
    /// holds (see the module docs).
    async fn check_classes(&self) -> Result<(), StoreError> {
        self.classes
            .checked
            .get_or_try_init(|| self.create_marker_if_empty())
            .await
            .map(|_| ())
    }

    async fn create_marker_if_empty(&self) -> Result<(), StoreError> {
        let checked = async {
            if self.marker_exists().await? {
                return Ok(());
            }
            let options = PaginatedListOptions {
                max_keys: Some(MAX_KEYS_PER_REQUEST),
                ..PaginatedListOptions::default()
            };
            let listed = self
                .client
                .list_paginated(Some(&self.object_name("")), options)
                .await
                .map_err(read_error)?;
            let holds_keys = listed.page_token.is_some()
                || listed
                    .result
                    .objects
                    .iter()
                    .any(|meta| self.store_key(meta.location.as_ref()).is_some());
            if holds_keys {
                return Ok(());
            }
            let options = PutOptions {
                mode: object_store::PutMode::Create,
                ..PutOptions::default()
            };
            match self
                .client
                .put_opts(
                    &self.marker_path()?,
                    PutPayload::from_static(CLASSES_MARKER_BODY),
                    options,
                )
                .await
            {
                Ok(_)
                | Err(object_store::Error::AlreadyExists { .. })
                | Err(object_store::Error::Precondition { .. }) => {
                    self.classes.trusted.store(true, Ordering::Release);
                    Ok(())
                }
                Err(err) => Err(read_error(err)),
            }
        };
        if let Err(err) = checked.await {
            // Once per store: a store that may not list (a writer without s3:ListBucket)
            // must not pay for a failing check on every write. Without the marker,
            // listings read records (and warn).
            tracing::warn!(
                store = %self.describe(),
                "could not check for the listing-classes marker: {err}"
            );
        }
        Ok(())
    }

    /// Whether listed sizes may be read as classes; warns once when they may not.
    async fn sizes_trusted(&self) -> Result<bool, StoreError> {
        if self.marker_exists().await? {
            return Ok(true);
        }
        if !self.classes.warned.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                store = %self.describe(),
                "no listing-classes marker: records may predate listing classes, so every listed \
                 record is read (see the S3 store docs)"
            );
        }
        Ok(false)
    }

    async fn list_classified(
        &self,
        prefix: &StoreKey,
        start_after: Option<&StoreKey>,
        limit: usize,
        shown_only: bool,
    ) -> Result<ListPage, StoreError> {
        let classes = shown_only && self.sizes_trusted().await?;
        let object_prefix = self.object_name(prefix.as_str());
        let offset = start_after.map(|after| self.object_name(after.as_str()));
        let mut page = ListPage::default();
        let mut page_token = None;
        loop {
            // Always a whole page (`limit + 1`: one more tells whether more follow), never
            // only the entries still missing: skipped tombstones would shrink every request
            // and turn one page into a geometric series of requests.
            let wanted = limit.saturating_add(1);
            let options = PaginatedListOptions {
                offset: offset.clone(),
                max_keys: Some(wanted.clamp(1, MAX_KEYS_PER_REQUEST)),
                page_token: page_token.take(),
                ..PaginatedListOptions::default()
            };
            let response = self
                .client
                .list_paginated(Some(&object_prefix), options)
                .await
                .map_err(read_error)?;
            let mut objects: Vec<(String, u64)> = response
                .result
                .objects
                .into_iter()
                .map(|meta| (meta.location.as_ref().to_owned(), meta.size))
                .collect();
            objects.sort_unstable();
            for (object, size) in objects {
                // S3 filters by the raw prefix; foreign objects (keys outside the store's
                // alphabet) are skipped.
                let Some(key) = self.store_key(&object) else {
                    continue;
                };
                if !key.as_str().starts_with(prefix.as_str())
                    || start_after.is_some_and(|after| key <= *after)
                {
                    continue;
                }
                let listing = if classes { class_of_size(size) } else { None };
                if listing == Some(Listing::Hidden) {
                    continue;
                }
                if page.entries.len() == limit {
                    page.more = true;
                    return Ok(page);
                }
                page.entries.push(ListEntry {
                    key,
                    value: None,
                    listing,
                });
            }
            match response.page_token {
                Some(token) => page_token = Some(token),
                None => return Ok(page),
            }
        }
    }
}

#[async_trait]
impl PointerStore for S3Store {
    fn describe(&self) -> String {
        if self.prefix.is_empty() {
            format!("s3://{}", self.bucket)
        } else {
            format!("s3://{}/{}", self.bucket, self.prefix)
        }
    }

    fn location(&self) -> Option<String> {
        Some(self.describe())
    }

    async fn get(&self, key: &StoreKey) -> Result<Option<Versioned>, StoreError> {
        let path = self.path(key)?;
        match self.get_with(&path, GetOptions::default()).await {
            Ok(versioned) => Ok(Some(versioned)),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(err) => Err(read_error(err)),
        }
    }

    async fn put(
        &self,
        key: &StoreKey,
        value: Bytes,
        mode: PutMode,
    ) -> Result<Version, StoreError> {
        self.put_listed(key, value, mode, Listing::Check).await
    }

    async fn put_listed(
        &self,
        key: &StoreKey,
        value: Bytes,
        mode: PutMode,
        listing: Listing,
    ) -> Result<Version, StoreError> {
        let path = self.path(key)?;
        // Never fails the write, which reports the store's state itself (a missing bucket,
        // a refused credential).
        self.check_classes().await?;
        let value = frame(&value, listing);
        let attempts = Attempts::default();
        let mut options = PutOptions {
            mode: match &mode {
                PutMode::Create => object_store::PutMode::Create,
                PutMode::Update(version) => object_store::PutMode::Update(UpdateVersion {
                    e_tag: Some(version.as_str().to_owned()),
                    version: None,
                }),
            },
            ..PutOptions::default()
        };
        options.extensions.insert(attempts.clone());
        match self
            .client
            .put_opts(&path, PutPayload::from_bytes(value), options)
            .await
        {
            Ok(result) => result.e_tag.map(Version::new).ok_or_else(|| {
                // The write applied but we cannot name its version: let the catalog read
                // back its commit id.
                StoreError::ambiguous(format!("{} returned no ETag for {path}", self.describe()))
            }),
            Err(err) => Err(put_error(err, &mode, attempts.count())),
        }
    }

    async fn list(
        &self,
        prefix: &StoreKey,
        start_after: Option<&StoreKey>,
        limit: usize,
    ) -> Result<ListPage, StoreError> {
        self.list_classified(prefix, start_after, limit, false)
            .await
    }

    async fn list_shown(
        &self,
        prefix: &StoreKey,
        start_after: Option<&StoreKey>,
        limit: usize,
    ) -> Result<ListPage, StoreError> {
        self.list_classified(prefix, start_after, limit, true).await
    }

    async fn get_if_changed(
        &self,
        key: &StoreKey,
        version: &Version,
    ) -> Result<Changed, StoreError> {
        let options = GetOptions {
            if_none_match: Some(version.as_str().to_owned()),
            ..GetOptions::default()
        };
        let path = self.path(key)?;
        match self.get_with(&path, options).await {
            Ok(current) if current.version == *version => Ok(Changed::Unchanged),
            Ok(current) => Ok(Changed::Changed(current)),
            Err(object_store::Error::NotModified { .. }) => Ok(Changed::Unchanged),
            Err(object_store::Error::NotFound { .. }) => Ok(Changed::Missing),
            Err(err) => Err(read_error(err)),
        }
    }
}

/// Create `bucket` (for `parqdb-catalog init` and tests), with aws-sdk-s3's
/// `CreateBucket`: path-style unless [`S3Options::virtual_hosted_style`] is set, the
/// endpoint, region and static credentials of `options`, else those of the AWS
/// environment and profile (aws-config). A bucket that already exists and is ours is fine.
#[cfg(feature = "admin")]
pub async fn create_bucket(bucket: &str, options: &S3Options) -> Result<(), Error> {
    use aws_sdk_s3::config::{Credentials, Region};
    use aws_sdk_s3::types::{BucketLocationConstraint, CreateBucketConfiguration};

    let mut loader = aws_config::defaults(aws_config::BehaviorVersion::latest());
    if let Some(region) = &options.region {
        loader = loader.region(Region::new(region.clone()));
    }
    if let Some(endpoint) = &options.endpoint {
        loader = loader.endpoint_url(endpoint);
    }
    match (&options.access_key_id, &options.secret_access_key) {
        (Some(key_id), Some(secret_key)) => {
            loader = loader.credentials_provider(Credentials::new(
                key_id,
                secret_key,
                options.session_token.clone(),
                None,
                "parqdb-catalog",
            ));
        }
        (None, None) => {}
        _ => {
            return Err(configuration(
                "S3 static credentials need both an access key id and a secret access key",
            ));
        }
    }
    let sdk_config = loader.load().await;
    let region = sdk_config
        .region()
        .map_or_else(|| "us-east-1".to_owned(), |r| r.as_ref().to_owned());
    let config = aws_sdk_s3::config::Builder::from(&sdk_config)
        .region(Region::new(region.clone()))
        .force_path_style(!options.virtual_hosted_style.unwrap_or(false))
        .build();
    let client = aws_sdk_s3::Client::from_conf(config);
    let mut request = client.create_bucket().bucket(bucket);
    if region != "us-east-1" {
        request = request.create_bucket_configuration(
            CreateBucketConfiguration::builder()
                .location_constraint(BucketLocationConstraint::from(region.as_str()))
                .build(),
        );
    }
    match request.send().await {
        Ok(_) => Ok(()),
        Err(err)
            if err
                .as_service_error()
                .is_some_and(|e| e.is_bucket_already_owned_by_you()) =>
        {
            Ok(())
        }
        Err(err) => {
            let kind = if err
                .as_service_error()
                .is_some_and(|e| e.is_bucket_already_exists())
            {
                ErrorKind::AlreadyExists
            } else {
                ErrorKind::StoreUnavailable
            };
            Err(Error::with_source(
                kind,
                format!("creating S3 bucket `{bucket}` failed"),
                aws_sdk_s3::error::DisplayErrorContext(err).to_string(),
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::ClientConfigKey;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn value(builder: &AmazonS3Builder, key: AmazonS3ConfigKey) -> Option<String> {
        builder.get_config_value(&key)
    }

    #[test]
    fn the_builder_reads_the_environment() {
        let builder = builder_from_env(
            env(&[
                ("AWS_ENDPOINT_URL", "http://127.0.0.1:9000"),
                ("AWS_REGION", "eu-west-3"),
                ("AWS_ALLOW_HTTP", "true"),
                ("AWS_CONDITIONAL_PUT", "disabled"),
                ("HOME", "/root"),
            ]),
            "pointers",
            &S3Options::default(),
        )
        .expect("builder");
        assert_eq!(
            value(&builder, AmazonS3ConfigKey::Endpoint).as_deref(),
            Some("http://127.0.0.1:9000")
        );
        assert_eq!(
            value(&builder, AmazonS3ConfigKey::Region).as_deref(),
            Some("eu-west-3")
        );
        assert_eq!(
            value(
                &builder,
                AmazonS3ConfigKey::Client(ClientConfigKey::AllowHttp)
            )
            .as_deref(),
            Some("true")
        );
        assert_eq!(
            value(&builder, AmazonS3ConfigKey::Bucket).as_deref(),
            Some("pointers")
        );
        // Conditional put cannot be switched off: a pointer store needs it.
        assert_eq!(
            value(&builder, AmazonS3ConfigKey::ConditionalPut).as_deref(),
            Some("etag")
        );
    }

    #[test]
    fn explicit_options_override_the_environment() {
        let options = S3Options {
            endpoint: Some("http://127.0.0.1:4566".into()),
            region: Some("us-east-1".into()),
            allow_http: Some(false),
            virtual_hosted_style: Some(false),
            config: vec![("timeout".into(), "5s".into())],
            ..S3Options::default()
        };
        let builder = builder_from_env(
            env(&[
                ("AWS_ENDPOINT_URL", "http://elsewhere:1"),
                ("AWS_ENDPOINT_URL_S3", "http://elsewhere:2"),
                ("AWS_REGION", "eu-west-3"),
                ("AWS_ALLOW_HTTP", "true"),
                ("AWS_VIRTUAL_HOSTED_STYLE_REQUEST", "true"),
            ]),
            "pointers",
            &options,
        )
        .expect("builder");
        for key in [AmazonS3ConfigKey::Endpoint, AmazonS3ConfigKey::S3Endpoint] {
            assert_eq!(
                value(&builder, key).as_deref(),
                Some("http://127.0.0.1:4566")
            );
        }
        assert_eq!(
            value(&builder, AmazonS3ConfigKey::Region).as_deref(),
            Some("us-east-1")
        );
        assert_eq!(
            value(
                &builder,
                AmazonS3ConfigKey::Client(ClientConfigKey::AllowHttp)
            )
            .as_deref(),
            Some("false")
        );
        assert_eq!(
            value(&builder, AmazonS3ConfigKey::VirtualHostedStyleRequest).as_deref(),
            Some("false")
        );
        assert_eq!(
            value(
                &builder,
                AmazonS3ConfigKey::Client(ClientConfigKey::Timeout)
            )
            .as_deref(),
            Some("5s")
        );
    }

    #[test]
    fn bad_options_are_configuration_errors() {
        let unknown = S3Options {
            config: vec![("no_such_option".into(), "1".into())],
            ..S3Options::default()
        };
        let half_credentials = S3Options {
            access_key_id: Some("id".into()),
            ..S3Options::default()
        };
        for options in [unknown, half_credentials] {
            let err = builder_from_env(Vec::new(), "b", &options).expect_err("rejected");
            assert_eq!(err.kind(), ErrorKind::Configuration);
        }
        let err = builder_from_env(Vec::new(), "", &S3Options::default()).expect_err("no bucket");
        assert_eq!(err.kind(), ErrorKind::Configuration);
    }

    #[test]
    fn secrets_are_not_printed() {
        let options = S3Options {
            access_key_id: Some("AKIDEXAMPLE".into()),
            secret_access_key: Some("very-secret".into()),
            session_token: Some("token-secret".into()),
            config: vec![("aws_secret_access_key".into(), "config-secret".into())],
            ..S3Options::default()
        };
        let printed = format!("{options:?}");
        assert!(printed.contains("AKIDEXAMPLE"));
        assert!(!printed.contains("very-secret") && !printed.contains("token-secret"));
        assert!(!printed.contains("config-secret"));
    }

    #[test]
    fn uris_name_a_bucket_and_a_normalised_prefix() {
        let cases = [
            ("s3://bucket", ("bucket", "")),
            ("s3://bucket/", ("bucket", "")),
            ("s3://bucket/cat", ("bucket", "cat")),
            ("s3://bucket/a/b/", ("bucket", "a/b")),
            ("s3://my.bucket-1/a/b", ("my.bucket-1", "a/b")),
        ];
        for (uri, (bucket, prefix)) in cases {
            let parsed = parse_uri(uri).expect(uri);
            assert_eq!(
                (parsed.0.as_str(), parsed.1.as_str()),
                (bucket, prefix),
                "{uri}"
            );
        }
        for bad in [
            "file:///tmp/x",
            "s3://",
            "s3:///prefix",
            "s3://Bucket/x",
            "s3://b/a//c",
            "s3://b/a/../c",
            "s3://b/a?x=1",
            "s3://user@b/x",
        ] {
            let err = parse_uri(bad).expect_err(bad);
            assert_eq!(err.kind(), ErrorKind::Configuration, "{bad}");
        }
    }

    #[test]
    fn keys_map_to_objects_under_the_prefix() {
        let options = S3Options {
            endpoint: Some("http://127.0.0.1:1".into()),
            access_key_id: Some("id".into()),
            secret_access_key: Some("secret".into()),
            allow_http: Some(true),
            ..S3Options::default()
        };
        let store = S3Store::from_uri("s3://bucket/cat/", &options).expect("store");
        assert_eq!(store.describe(), "s3://bucket/cat");
        let key = StoreKey::new("i/a~2e/=x+y").expect("key");
        assert_eq!(store.path(&key).expect("path").as_ref(), "cat/i/a~2e/=x+y");
        assert_eq!(store.store_key("cat/i/a~2e/=x+y"), Some(key));
        assert_eq!(store.store_key("cat2/i/=x"), None);
        assert_eq!(store.store_key("cat/i/x.json"), None);
        let root = S3Store::from_uri("s3://bucket", &options).expect("store");
        assert_eq!(root.describe(), "s3://bucket");
        assert_eq!(root.object_name("n/=a"), "n/=a");
    }

    fn os_error(kind: &str) -> object_store::Error {
        let source: Box<dyn std::error::Error + Send + Sync> = kind.to_owned().into();
        match kind {
            "exists" => object_store::Error::AlreadyExists {
                path: "p".into(),
                source,
            },
            "precondition" => object_store::Error::Precondition {
                path: "p".into(),
                source,
            },
            "not-modified" => object_store::Error::NotModified {
                path: "p".into(),
                source,
            },
            "not-found" => object_store::Error::NotFound {
                path: "p".into(),
                source,
            },
            "denied" => object_store::Error::PermissionDenied {
                path: "p".into(),
                source,
            },
            "not-implemented" => object_store::Error::NotImplemented {
                operation: "put".into(),
                implementer: "s3".into(),
            },
            _ => object_store::Error::Generic {
                store: "S3",
                source,
            },
        }
    }

    #[test]
    fn put_errors_map_to_store_outcomes() {
        let create = PutMode::Create;
        let update = PutMode::Update(Version::new("\"e\""));
        let kind = |err: StoreError| match err {
            StoreError::AlreadyExists => "already-exists",
            StoreError::Precondition => "precondition",
            StoreError::Ambiguous(_) => "ambiguous",
            StoreError::Unavailable {
                retryable: true, ..
            } => "unavailable",
            StoreError::Unavailable {
                retryable: false, ..
            } => "fatal",
            StoreError::NotSupported(_) => "not-supported",
        };
        let cases = [
            ("exists", &create, 1, "already-exists"),
            ("precondition", &create, 1, "already-exists"),
            ("not-modified", &create, 1, "already-exists"),
            ("not-found", &create, 1, "fatal"),
            ("exists", &update, 3, "precondition"),
            ("precondition", &update, 1, "precondition"),
            ("not-found", &update, 1, "precondition"),
            ("not-modified", &update, 1, "precondition"),
            ("denied", &update, 1, "fatal"),
            ("denied", &update, 2, "ambiguous"),
            ("not-implemented", &create, 0, "fatal"),
            ("generic", &create, 0, "unavailable"),
            ("generic", &update, 0, "unavailable"),
            ("generic", &create, 1, "ambiguous"),
            ("generic", &update, 4, "ambiguous"),
        ];
        for (error, mode, sent, expected) in cases {
            assert_eq!(
                kind(put_error(os_error(error), mode, sent)),
                expected,
                "{error} on {mode:?} after {sent} sent attempts"
            );
        }
        assert!(matches!(
            read_error(os_error("generic")),
            StoreError::Unavailable {
                retryable: true,
                ..
            }
        ));
        assert!(matches!(
            read_error(os_error("denied")),
            StoreError::Unavailable {
                retryable: false,
                ..
            }
        ));
    }

    fn store_at(endpoint: &str, max_retries: usize) -> S3Store {
        let options = S3Options {
            endpoint: Some(endpoint.to_owned()),
            region: Some("us-east-1".into()),
            allow_http: Some(true),
            access_key_id: Some("test".into()),
            secret_access_key: Some("test".into()),
            max_retries: Some(max_retries),
            retry_timeout: Some(Duration::from_secs(10)),
            ..S3Options::default()
        };
        S3Store::from_uri("s3://bucket/p", &options).expect("store")
    }

    /// A one-shot HTTP server on 127.0.0.1 that reads each request's head, then answers
    /// with `response` (or closes the connection when it is empty). Returns its endpoint.
    async fn canned_server(response: &'static str, connections: usize) -> String {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let endpoint = format!("http://{}", listener.local_addr().expect("address"));
        tokio::spawn(async move {
            for _ in 0..connections {
                let Ok((mut socket, _)) = listener.accept().await else {
                    return;
                };
                let mut request = Vec::new();
                let mut buffer = [0u8; 4096];
                while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                    match socket.read(&mut buffer).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => request.extend_from_slice(&buffer[..n]),
                    }
                }
                if !response.is_empty() {
                    let _ = socket.write_all(response.as_bytes()).await;
                }
                let _ = socket.shutdown().await;
            }
        });
        endpoint
    }

    fn key() -> StoreKey {
        StoreKey::new("i/=k").expect("key")
    }

    #[tokio::test]
    async fn a_refused_connection_is_unavailable_not_ambiguous() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let endpoint = format!("http://{}", listener.local_addr().expect("address"));
        drop(listener);
        let store = store_at(&endpoint, 2);
        for mode in [PutMode::Create, PutMode::Update(Version::new("\"e\""))] {
            let result = store.put(&key(), Bytes::from_static(b"v"), mode).await;
            assert!(
                matches!(
                    result,
                    Err(StoreError::Unavailable {
                        retryable: true,
                        ..
                    })
                ),
                "{result:?}"
            );
        }
        let read = store.get(&key()).await;
        assert!(
            matches!(
                read,
                Err(StoreError::Unavailable {
                    retryable: true,
                    ..
                })
            ),
            "{read:?}"
        );
    }

    #[tokio::test]
    async fn a_dropped_connection_after_sending_is_ambiguous() {
        // The first connection is the listing-classes marker check before the first write.
        let endpoint = canned_server("", 2).await;
        let store = store_at(&endpoint, 0);
        let result = store
            .put(&key(), Bytes::from_static(b"v"), PutMode::Create)
            .await;
        assert!(
            matches!(result, Err(StoreError::Ambiguous(_))),
            "{result:?}"
        );
    }

    #[tokio::test]
    async fn a_server_error_on_a_write_is_ambiguous() {
        const ERROR: &str =
            "HTTP/1.1 500 Internal Server Error\r\ncontent-length: 0\r\nconnection: close\r\n\r\n";
        let endpoint = canned_server(ERROR, 3).await;
        let store = store_at(&endpoint, 1);
        let result = store
            .put(
                &key(),
                Bytes::from_static(b"v"),
                PutMode::Update(Version::new("\"e\"")),
            )
            .await;
        assert!(
            matches!(result, Err(StoreError::Ambiguous(_))),
            "{result:?}"
        );
    }

    #[tokio::test]
    async fn a_refused_signature_is_fatal() {
        const DENIED: &str =
            "HTTP/1.1 403 Forbidden\r\ncontent-length: 0\r\nconnection: close\r\n\r\n";
        // The listing-classes marker check before the first write, the write, the read.
        let endpoint = canned_server(DENIED, 3).await;
        let store = store_at(&endpoint, 0);
        let write = store
            .put(&key(), Bytes::from_static(b"v"), PutMode::Create)
            .await;
        assert!(
            matches!(
                write,
                Err(StoreError::Unavailable {
                    retryable: false,
                    ..
                })
            ),
            "{write:?}"
        );
        let read = store.get(&key()).await;
        assert!(
            matches!(
                read,
                Err(StoreError::Unavailable {
                    retryable: false,
                    ..
                })
            ),
            "{read:?}"
        );
    }
}
