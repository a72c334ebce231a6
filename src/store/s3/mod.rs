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
//! Listings carry no bodies, so [`ListEntry::value`](crate::store::ListEntry::value) is always `None`. There is no atomic
//! multi-key write ([`Capabilities`](crate::store::Capabilities) default).
//!
//! # Listing classes in the object size
//! A namespace's listing holds its tombstones too (records are never deleted), and
//! `ListObjectsV2` returns no bodies, so a listing that had to tell live records from
//! tombstones would read every record: 8.7–15× a raw listing on the S3-compatible server.
//! The one thing a writer controls that every S3 listing returns is the object's **size**,
//! so the store keeps each value's [`Listing`](crate::store::Listing) class there. An object is the value, then
//! `p` zero bytes, then a 5-byte trailer `FF 'p' 'q' <class code> <p>`, with `p` in `0..4`
//! chosen so that `size % 4` is the class code (1 hidden, 2 shown, 3 check; never 0).
//! Reads strip the frame; an object without the trailer (written before classes existed)
//! reads as it is (no UTF-8 text, hence no catalog record, contains the byte `FF`).
//! [`PointerStoreExt::list_shown`](crate::store::PointerStoreExt::list_shown) then leaves out hidden objects and classifies the others
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
//!
//! The submodules: `options` (the builder and [`S3Options`]), `classes` (the listing-class
//! frame and its marker), `list` (paginated listings), `connector` (the attempt-counting
//! HTTP connector), `errors` (object_store errors as store errors) and, with the `admin`
//! feature, `bucket` ([`create_bucket`]).

#[cfg(feature = "admin")]
mod bucket;
mod classes;
mod connector;
mod errors;
mod list;
pub(crate) mod lister;
mod options;

use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use object_store::aws::{AmazonS3, AmazonS3Builder, AmazonS3ConfigKey};
use object_store::path::Path;
use object_store::{GetOptions, ObjectStore, PutOptions, PutPayload, UpdateVersion};

use self::classes::{Classes, frame, unframe};
use self::connector::{Attempts, CountingConnector};
use self::errors::{put_error, read_error};
use self::options::{normalise_prefix, parse_uri};
use super::{
    self as store, Changed, ListOptions, ListPage, PointerStore, PutMode, StoreError, StoreKey,
    Version, Versioned,
};
use crate::error::{Error, ErrorKind};

/// ListObjectsV2 returns at most this many keys per request.
const MAX_KEYS_PER_REQUEST: usize = 1000;

#[cfg(feature = "admin")]
pub use self::bucket::create_bucket;
pub use self::options::{S3Options, amazon_s3_builder};

/// A pointer store in an S3 bucket under a key prefix.
#[derive(Debug, Clone)]
pub struct S3Store {
    client: Arc<AmazonS3>,
    /// Listings: `ListObjectsV2` itself, where object_store would fail a page on a key it
    /// cannot parse (`lister`); `None` for a builder the caller configured (its client
    /// options are not all readable back) or a setting the lister does not carry.
    lister: Option<Arc<lister::S3Lister>>,
    bucket: String,
    prefix: String,
    /// What tells the bucket from a same-named one elsewhere ([`instance`]).
    instance: String,
    classes: Arc<Classes>,
}

impl S3Store {
    /// A store on the bucket of `builder` (see [`amazon_s3_builder`]), with keys under
    /// `prefix` (`""` for the bucket root; leading and trailing `/` are ignored).
    ///
    /// The store installs its own HTTP connector (object_store's reqwest connector, wrapped
    /// to tell requests that never left the machine from those that may have applied).
    pub fn new(builder: AmazonS3Builder, prefix: &str) -> Result<S3Store, Error> {
        S3Store::open(builder, prefix, false)
    }

    /// [`S3Store::new`], listing with `ListObjectsV2` itself where `own_builder` (a builder
    /// of [`amazon_s3_builder`], whose every setting is readable) allows it.
    fn open(builder: AmazonS3Builder, prefix: &str, own_builder: bool) -> Result<S3Store, Error> {
        let prefix = normalise_prefix(prefix)?;
        let bucket = builder
            .get_config_value(&AmazonS3ConfigKey::Bucket)
            .unwrap_or_default();
        let endpoint = builder
            .get_config_value(&AmazonS3ConfigKey::S3Endpoint)
            .or_else(|| builder.get_config_value(&AmazonS3ConfigKey::Endpoint));
        let region = builder.get_config_value(&AmazonS3ConfigKey::Region);
        let virtual_hosted = builder
            .get_config_value(&AmazonS3ConfigKey::VirtualHostedStyleRequest)
            .is_some_and(|on| on.eq_ignore_ascii_case("true"));
        let instance = instance(endpoint.as_deref(), region.as_deref(), virtual_hosted);
        let configured = builder.clone();
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
        let lister = own_builder
            .then(|| lister::S3Lister::new(&configured, client.credentials().clone()))
            .flatten()
            .map(Arc::new);
        Ok(S3Store {
            client: Arc::new(client),
            lister,
            bucket,
            prefix,
            instance,
            classes: Arc::new(Classes::default()),
        })
    }

    /// A store at `s3://bucket/prefix`, configured from the environment and `options`.
    pub fn from_uri(uri: &str, options: &S3Options) -> Result<S3Store, Error> {
        let (bucket, prefix) = parse_uri(uri)?;
        S3Store::open(amazon_s3_builder(&bucket, options)?, &prefix, true)
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
}

/// What tells a bucket from a same-named one elsewhere, as the attribute of its location:
/// `endpoint=URL` for a server other than AWS's, in one spelling (scheme and host in lower
/// case, no default port, no trailing `/`), or `partition=P` on AWS (`aws`, `aws-cn`,
/// `aws-us-gov`, …), where a bucket name is unique in its partition — so a same-named
/// bucket on an S3-compatible replica is another store (GC round 109: named by the bucket
/// alone, an owner on AWS and a replica elsewhere passed for one another). Only AWS's own
/// S3 service endpoints (`s3.amazonaws.com`, `s3.<region>.amazonaws.com`, dual-stack and
/// FIPS ones) over HTTPS, without a port or a path and with path-style requests, are
/// AWS's: an explicit endpoint that names a bucket (`https://other.s3.<region>.amazonaws.com`,
/// any endpoint with virtual-hosted requests, `https://s3.amazonaws.com/other`) addresses
/// that bucket, not the configured one, and binds by its spelling (GC round 110: it passed
/// for the owner). A server reached under two spellings is two locations to ownership:
/// configure one everywhere (a refusal, never a deletion, when they differ).
fn instance(endpoint: Option<&str>, region: Option<&str>, virtual_hosted: bool) -> String {
    let url = match endpoint {
        None => None,
        Some(endpoint) => match url::Url::parse(endpoint) {
            Ok(url) => Some(url),
            Err(_) => {
                return format!(
                    "endpoint={}",
                    endpoint.trim_end_matches('/').to_ascii_lowercase()
                );
            }
        },
    };
    let host = url
        .as_ref()
        .map(|url| {
            url.host_str()
                .unwrap_or_default()
                .trim_end_matches('.')
                .to_owned()
        })
        .unwrap_or_default();
    let service = url.as_ref().is_none_or(|url| {
        aws_service_host(&host)
            && !virtual_hosted
            && url.path().trim_end_matches('/').is_empty()
            && url.port().is_none()
            && url.scheme() == "https"
    });
    if let (Some(url), false) = (&url, service) {
        let port = url
            .port()
            .map(|port| format!(":{port}"))
            .unwrap_or_default();
        let path = url.path().trim_end_matches('/');
        return format!("endpoint={}://{host}{port}{path}", url.scheme());
    }
    let region = region.unwrap_or("us-east-1");
    let partition = if host.ends_with(".amazonaws.com.cn") || region.starts_with("cn-") {
        "aws-cn"
    } else if region.starts_with("us-gov-") {
        "aws-us-gov"
    } else if region.starts_with("us-isob-") {
        "aws-iso-b"
    } else if region.starts_with("us-iso-") {
        "aws-iso"
    } else {
        "aws"
    };
    format!("partition={partition}")
}

/// Whether `host` is one of AWS's S3 service endpoints, naming no bucket:
/// `s3[-fips|-external-1][.dualstack][.<region>].amazonaws.com[.cn]`, or the legacy
/// `s3-<region>.amazonaws.com`.
fn aws_service_host(host: &str) -> bool {
    let Some(labels) = host
        .strip_suffix(".amazonaws.com")
        .or_else(|| host.strip_suffix(".amazonaws.com.cn"))
    else {
        return false;
    };
    let region = |label: &str| {
        let parts: Vec<&str> = label.split('-').collect();
        parts.len() >= 3
            && parts.iter().all(|part| !part.is_empty())
            && parts[..parts.len() - 1]
                .iter()
                .all(|part| part.bytes().all(|b| b.is_ascii_lowercase()))
            && parts[parts.len() - 1].bytes().all(|b| b.is_ascii_digit())
    };
    let labels: Vec<&str> = labels.split('.').collect();
    let Some((first, rest)) = labels.split_first() else {
        return false;
    };
    let service = matches!(*first, "s3" | "s3-fips" | "s3-external-1")
        || first.strip_prefix("s3-").is_some_and(region);
    let rest_ok = match rest {
        [] => true,
        [one] => region(one) || *one == "dualstack",
        ["dualstack", one] => region(one),
        _ => false,
    };
    service && rest_ok
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

    async fn location(&self) -> Result<Option<String>, store::StoreError> {
        Ok(Some(format!("{}?{}", self.describe(), self.instance)))
    }

    async fn get_opts(
        &self,
        key: &StoreKey,
        options: store::GetOptions<'_>,
    ) -> Result<Changed, StoreError> {
        let path = self.path(key)?;
        let Some(version) = options.if_changed_from else {
            return match self.get_with(&path, GetOptions::default()).await {
                Ok(current) => Ok(Changed::Changed(current)),
                Err(object_store::Error::NotFound { .. }) => Ok(Changed::Missing),
                Err(err) => Err(read_error(err)),
            };
        };
        let conditional = GetOptions {
            if_none_match: Some(version.as_str().to_owned()),
            ..GetOptions::default()
        };
        match self.get_with(&path, conditional).await {
            Ok(current) if current.version == *version => Ok(Changed::Unchanged),
            Ok(current) => Ok(Changed::Changed(current)),
            Err(object_store::Error::NotModified { .. }) => Ok(Changed::Unchanged),
            Err(object_store::Error::NotFound { .. }) => Ok(Changed::Missing),
            Err(err) => Err(read_error(err)),
        }
    }

    async fn put_opts(
        &self,
        key: &StoreKey,
        value: Bytes,
        options: store::PutOptions,
    ) -> Result<Version, StoreError> {
        let store::PutOptions { mode, listing } = options;
        let path = self.path(key)?;
        // Never fails the write, which reports the store's state itself (a missing bucket,
        // a refused credential).
        self.check_classes().await?;
        let value = frame(&value, listing);
        let attempts = Attempts::default();
        let mut put = PutOptions {
            mode: match &mode {
                PutMode::Create => object_store::PutMode::Create,
                PutMode::Update(version) => object_store::PutMode::Update(UpdateVersion {
                    e_tag: Some(version.as_str().to_owned()),
                    version: None,
                }),
            },
            ..PutOptions::default()
        };
        put.extensions.insert(attempts.clone());
        match self
            .client
            .put_opts(&path, PutPayload::from_bytes(value), put)
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

    async fn list_opts(
        &self,
        prefix: &StoreKey,
        options: ListOptions<'_>,
    ) -> Result<ListPage, StoreError> {
        self.list_classified(prefix, options.start_after, options.limit, options.shown)
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

    /// A builder configured without the environment (which may name a test server).
    fn builder(endpoint: Option<&str>) -> AmazonS3Builder {
        let builder = AmazonS3Builder::new()
            .with_bucket_name("bucket")
            .with_region("us-east-1")
            .with_access_key_id("id")
            .with_secret_access_key("secret")
            .with_allow_http(true);
        match endpoint {
            Some(endpoint) => builder.with_endpoint(endpoint),
            None => builder,
        }
    }

    fn store_at(endpoint: Option<&str>) -> S3Store {
        S3Store::new(builder(endpoint), "cat").expect("store")
    }

    #[tokio::test]
    async fn a_bucket_on_another_server_is_located_by_its_endpoint_in_one_spelling() {
        for (endpoint, location) in [
            (
                "http://127.0.0.1:9000",
                "s3://bucket/cat?endpoint=http://127.0.0.1:9000",
            ),
            (
                "HTTP://MinIO.Internal:9000/",
                "s3://bucket/cat?endpoint=http://minio.internal:9000",
            ),
            (
                "https://minio.internal:443",
                "s3://bucket/cat?endpoint=https://minio.internal",
            ),
            (
                "https://gw.example/s3/",
                "s3://bucket/cat?endpoint=https://gw.example/s3",
            ),
        ] {
            let store = store_at(Some(endpoint));
            assert_eq!(
                store.location().await.expect("location").as_deref(),
                Some(location),
                "{endpoint}"
            );
        }
    }

    /// GC round 110: an explicit AWS endpoint that names another bucket addresses that
    /// bucket (a copy of the store), so it is no AWS service endpoint to the binding.
    #[tokio::test]
    async fn an_aws_endpoint_naming_a_bucket_binds_by_its_spelling() {
        for (endpoint, virtual_hosted) in [
            ("https://other.s3.us-east-1.amazonaws.com", true),
            ("https://other.s3.us-east-1.amazonaws.com", false),
            ("https://s3.us-east-1.amazonaws.com", true),
            ("https://s3.us-east-1.amazonaws.com/other", false),
            ("https://s3-other.s3.amazonaws.com", false),
            ("https://s3.s3.us-east-1.amazonaws.com", false),
            (
                "https://bucket.vpce-0123-abcd.s3.us-east-1.vpce.amazonaws.com",
                false,
            ),
            ("http://s3.us-east-1.amazonaws.com", false),
            ("https://s3.us-east-1.amazonaws.com:8443", false),
        ] {
            let store = S3Store::new(
                builder(Some(endpoint)).with_virtual_hosted_style_request(virtual_hosted),
                "cat",
            )
            .expect("store");
            let location = store.location().await.expect("location").expect("some");
            assert!(
                location.starts_with("s3://bucket/cat?endpoint="),
                "{endpoint} (virtual-hosted {virtual_hosted}): {location}"
            );
        }
    }

    #[tokio::test]
    async fn a_bucket_on_aws_is_located_by_its_name_and_partition() {
        for (endpoint, region, partition) in [
            (None, "us-east-1", "aws"),
            (
                Some("https://s3.us-east-1.amazonaws.com"),
                "us-east-1",
                "aws",
            ),
            (Some("https://s3.amazonaws.com/"), "us-east-1", "aws"),
            (
                Some("https://s3.dualstack.eu-west-1.amazonaws.com"),
                "eu-west-1",
                "aws",
            ),
            (
                Some("https://s3-fips.us-east-2.amazonaws.com"),
                "us-east-2",
                "aws",
            ),
            (
                Some("https://s3.cn-north-1.amazonaws.com.cn"),
                "cn-north-1",
                "aws-cn",
            ),
            (None, "cn-northwest-1", "aws-cn"),
            (None, "us-gov-west-1", "aws-us-gov"),
        ] {
            let store = S3Store::new(builder(endpoint).with_region(region), "cat").expect("store");
            assert_eq!(
                store.location().await.expect("location"),
                Some(format!("s3://bucket/cat?partition={partition}")),
                "{endpoint:?} in {region}"
            );
        }
    }
}
