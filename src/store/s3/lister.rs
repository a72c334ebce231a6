//! `ListObjectsV2` with aws-sdk-s3, signed with object_store's credentials: the listing of
//! keys object_store cannot list. object_store turns every key of a page into a `Path` and
//! fails the whole page on a key it cannot parse (an empty, `.` or `..` segment, a control
//! character), so one such key would stop every listing of its prefix (GC round 94, F1).
//! The pointer store lists its keys with it, and so does an S3 warehouse
//! (`warehouse::keys`).

use std::time::Duration;

use aws_credential_types::provider::error::CredentialsError;
use aws_credential_types::provider::{ProvideCredentials, future};
use object_store::ClientConfigKey;
use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey, AwsCredentialProvider};

/// `ListObjectsV2` over one bucket, signed with object_store's credentials (so the listing
/// authenticates wherever the store's own client does: static keys, the environment, web
/// identity, containers, instance metadata), with object_store's timeouts.
pub(crate) struct S3Lister {
    bucket: String,
    client: aws_sdk_s3::Client,
}

impl std::fmt::Debug for S3Lister {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S3Lister")
            .field("bucket", &self.bucket)
            .finish_non_exhaustive()
    }
}

/// One key of a listing, as the store returned it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ListedKey {
    /// The key, exactly.
    pub key: String,
    pub size: u64,
    /// Its last-modified time (Unix epoch milliseconds).
    pub last_modified_ms: i64,
}

/// A page of a listing: its objects, its common prefixes (with a delimiter) and the token
/// of the next page.
pub(crate) struct KeysPage {
    pub objects: Vec<ListedKey>,
    pub prefixes: Vec<String>,
    pub next: Option<String>,
}

/// What one page asks for.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct PageRequest<'a> {
    /// Keys after this one (the first page of a listing only).
    pub start_after: Option<&'a str>,
    /// Group the keys below the next `/` into common prefixes.
    pub delimiter: bool,
    /// At most this many keys (the store's limit, 1,000, when `None`).
    pub max_keys: Option<usize>,
}

/// A listing that failed: `refused` when retrying cannot help (access denied, no such
/// bucket, bad credentials).
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub(crate) struct ListFailure {
    pub refused: bool,
    pub message: String,
}

/// object_store's credential provider as the SDK's.
#[derive(Debug)]
struct Credentials(AwsCredentialProvider);

impl ProvideCredentials for Credentials {
    fn provide_credentials<'a>(&'a self) -> future::ProvideCredentials<'a>
    where
        Self: 'a,
    {
        future::ProvideCredentials::new(async move {
            let credential = self
                .0
                .get_credential()
                .await
                .map_err(CredentialsError::provider_error)?;
            Ok(aws_credential_types::Credentials::new(
                credential.key_id.clone(),
                credential.secret_key.clone(),
                credential.token.clone(),
                None,
                "object_store",
            ))
        })
    }
}

impl S3Lister {
    /// A lister of the bucket `builder` was configured for (its endpoint, region and
    /// addressing style), signing with `credentials` (the built store's); `None` when the
    /// configuration holds a setting the lister would not carry over to its own client
    /// (see [`carried`]), so that it never reads another place than the store does.
    pub(crate) fn new(
        builder: &AmazonS3Builder,
        credentials: AwsCredentialProvider,
    ) -> Option<S3Lister> {
        let value = |key| builder.get_config_value(&key);
        let endpoint =
            value(AmazonS3ConfigKey::S3Endpoint).or_else(|| value(AmazonS3ConfigKey::Endpoint));
        let virtual_hosted = value(AmazonS3ConfigKey::VirtualHostedStyleRequest)
            .is_some_and(|value| value.eq_ignore_ascii_case("true"));
        if !carried(builder) {
            return None;
        }
        let region = value(AmazonS3ConfigKey::Region)
            .or_else(|| value(AmazonS3ConfigKey::DefaultRegion))
            .unwrap_or_else(|| "us-east-1".to_owned());
        // object_store's timeouts, as configured, else its defaults (30 s a request, 5 s to
        // connect): a listing never hangs where the store's own requests would not.
        let duration = |key, default| {
            value(AmazonS3ConfigKey::Client(key))
                .and_then(|text| humantime::parse_duration(&text).ok())
                .unwrap_or(default)
        };
        let timeouts = aws_sdk_s3::config::timeout::TimeoutConfig::builder()
            .connect_timeout(duration(
                ClientConfigKey::ConnectTimeout,
                Duration::from_secs(5),
            ))
            .operation_attempt_timeout(duration(ClientConfigKey::Timeout, Duration::from_secs(30)))
            .build();
        let mut config = aws_sdk_s3::config::Builder::new()
            .behavior_version(aws_sdk_s3::config::BehaviorVersion::latest())
            .timeout_config(timeouts)
            .region(aws_sdk_s3::config::Region::new(region))
            .credentials_provider(Credentials(credentials))
            .force_path_style(!virtual_hosted);
        if let Some(endpoint) = endpoint {
            config = config.endpoint_url(endpoint);
        }
        Some(S3Lister {
            bucket: value(AmazonS3ConfigKey::Bucket).unwrap_or_default(),
            client: aws_sdk_s3::Client::from_conf(config.build()),
        })
    }

    /// One page of the keys that start with `prefix`, from `token` (a page's `next`).
    pub(crate) async fn page(
        &self,
        prefix: &str,
        request: PageRequest<'_>,
        token: Option<String>,
    ) -> Result<KeysPage, ListFailure> {
        // The exact position first: S3 encodes `StartAfter` in its response as it encodes
        // keys. A server that echoes it unencoded fails every response whose position holds
        // a character XML cannot carry (GC round 96, F1): asked again from the longest
        // prefix XML can carry, a lower bound the callers filter past (round 97: cutting
        // always would list a directory of such keys again for every page).
        let exact = request.start_after.filter(|after| !after.is_empty());
        let response = match self.send(prefix, request, exact, token.clone()).await {
            Ok(response) => response,
            Err(failure) => match exact.map(xml_safe).filter(|cut| Some(*cut) != exact) {
                Some(cut) => {
                    let cut = Some(cut).filter(|cut| !cut.is_empty());
                    self.send(prefix, request, cut, token)
                        .await
                        .map_err(|_| failure)?
                }
                None => return Err(failure),
            },
        };
        // Only a response that says it encoded its keys is decoded: a server that ignores
        // the request's encoding returns them as they are (`a+b` is then `a+b`).
        let encoded = response.encoding_type() == Some(&aws_sdk_s3::types::EncodingType::Url);
        let key_of = |key: &str| match encoded {
            true => decoded(key),
            false => key.to_owned(),
        };
        let objects = response
            .contents()
            .iter()
            .filter_map(|object| {
                Some(ListedKey {
                    key: key_of(object.key()?),
                    size: object.size().unwrap_or(0).max(0) as u64,
                    last_modified_ms: object.last_modified().map_or(0, |at| {
                        at.secs()
                            .saturating_mul(1000)
                            .saturating_add(i64::from(at.subsec_nanos() / 1_000_000))
                    }),
                })
            })
            .collect();
        let prefixes = response
            .common_prefixes()
            .iter()
            .filter_map(|prefix| prefix.prefix().map(key_of))
            .collect();
        let next = response
            .is_truncated()
            .unwrap_or(false)
            .then(|| response.next_continuation_token().map(str::to_owned))
            .flatten();
        Ok(KeysPage {
            objects,
            prefixes,
            next,
        })
    }

    /// One `ListObjectsV2` request after `start_after`.
    async fn send(
        &self,
        prefix: &str,
        request: PageRequest<'_>,
        start_after: Option<&str>,
        token: Option<String>,
    ) -> Result<aws_sdk_s3::operation::list_objects_v2::ListObjectsV2Output, ListFailure> {
        let mut list = self
            .client
            .list_objects_v2()
            .bucket(&self.bucket)
            .prefix(prefix)
            .set_continuation_token(token)
            // Keys come back URL-encoded: a key may hold characters XML 1.0 cannot carry
            // (a control character), which would fail the whole response.
            .encoding_type(aws_sdk_s3::types::EncodingType::Url);
        if let Some(after) = start_after {
            list = list.start_after(after);
        }
        if request.delimiter {
            list = list.delimiter("/");
        }
        if let Some(max) = request.max_keys {
            list = list.max_keys(i32::try_from(max.clamp(1, 1000)).unwrap_or(1000));
        }
        list.send().await.map_err(list_failure)
    }
}

/// Whether every setting of `builder` that decides where and how a listing request goes
/// is one the lister carries over (endpoint, region, addressing, bucket, timeouts,
/// credentials): not a proxy, custom certificate handling, requester pays, unsigned
/// requests, S3 Express, or virtual-hosted addressing through an explicit endpoint (which
/// then holds the bucket already: GC round 95, F2 and F3). A store configured with one of
/// them lists through object_store, as before round 94.
fn carried(builder: &AmazonS3Builder) -> bool {
    let value = |key| builder.get_config_value(&key);
    let on = |key| value(key).is_some_and(|value: String| value.eq_ignore_ascii_case("true"));
    let endpoint = value(AmazonS3ConfigKey::S3Endpoint)
        .or_else(|| value(AmazonS3ConfigKey::Endpoint))
        .is_some();
    let client = |key| AmazonS3ConfigKey::Client(key);
    let unset = [
        client(ClientConfigKey::ProxyUrl),
        client(ClientConfigKey::ProxyCaCertificate),
        client(ClientConfigKey::ProxyExcludes),
    ]
    .into_iter()
    .all(|key| value(key).is_none_or(|value| value.is_empty()));
    let off = [
        client(ClientConfigKey::AllowInvalidCertificates),
        client(ClientConfigKey::NoSystemCertificates),
        AmazonS3ConfigKey::SkipSignature,
        AmazonS3ConfigKey::S3Express,
        AmazonS3ConfigKey::RequestPayer,
    ]
    .into_iter()
    .all(|key| !on(key));
    unset && off && !(endpoint && on(AmazonS3ConfigKey::VirtualHostedStyleRequest))
}

/// The longest prefix of `key` that XML 1.0 can carry: where a listing starts again when
/// a server echoing `StartAfter` unencoded could not answer the exact position (a control
/// character, U+FFFE, U+FFFF; a skipped key may be a listing position: GC round 96, F1).
/// The prefix sorts at or before the key, so the listing starts no later: the callers
/// drop what it lists at or before the position.
fn xml_safe(key: &str) -> &str {
    let xml = |c: char| {
        matches!(c, '\t' | '\n' | '\r' | '\u{20}'..='\u{D7FF}' | '\u{E000}'..='\u{FFFD}')
            || c >= '\u{10000}'
    };
    let end = key
        .char_indices()
        .find(|(_, c)| !xml(*c))
        .map_or(key.len(), |(at, _)| at);
    &key[..end]
}

/// A key (or common prefix) of a listing with `encoding-type=url`, as it is: S3 encodes a
/// space as `+` (and a `+` as `%2B`), as HTML forms do.
fn decoded(encoded: &str) -> String {
    let spaced = encoded.replace('+', " ");
    percent_encoding::percent_decode_str(&spaced)
        .decode_utf8_lossy()
        .into_owned()
}

/// A failed listing: refused for good (access denied, no such bucket, bad credentials) or
/// unavailable.
fn list_failure<E, R>(err: aws_sdk_s3::error::SdkError<E, R>) -> ListFailure
where
    E: aws_sdk_s3::error::ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    R: std::fmt::Debug + Send + Sync + 'static,
{
    let code = err.as_service_error().and_then(|e| e.code()).unwrap_or("");
    let refused = matches!(
        code,
        "AccessDenied" | "NoSuchBucket" | "InvalidAccessKeyId" | "SignatureDoesNotMatch"
    );
    ListFailure {
        refused,
        message: aws_sdk_s3::error::DisplayErrorContext(err).to_string(),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey, AwsCredential};
    use object_store::{ClientConfigKey, StaticCredentialProvider};

    use super::{S3Lister, decoded, xml_safe};

    fn lister(settings: &[(AmazonS3ConfigKey, &str)]) -> Option<S3Lister> {
        let mut builder = AmazonS3Builder::new()
            .with_bucket_name("b")
            .with_region("eu-west-1");
        for (key, value) in settings {
            builder = builder.with_config(*key, *value);
        }
        let credentials = Arc::new(StaticCredentialProvider::new(AwsCredential {
            key_id: "k".into(),
            secret_key: "s".into(),
            token: None,
        }));
        S3Lister::new(&builder, credentials)
    }

    #[test]
    fn a_configuration_the_lister_cannot_carry_lists_through_object_store() {
        use AmazonS3ConfigKey as K;
        assert!(lister(&[]).is_some());
        assert!(lister(&[(K::Endpoint, "http://127.0.0.1:9000")]).is_some());
        assert!(lister(&[(K::VirtualHostedStyleRequest, "true")]).is_some());
        assert!(
            lister(&[
                (K::VirtualHostedStyleRequest, "false"),
                (K::Endpoint, "http://h")
            ])
            .is_some()
        );
        for refused in [
            vec![
                (K::VirtualHostedStyleRequest, "true"),
                (K::Endpoint, "http://b.s3.test"),
            ],
            vec![(K::Client(ClientConfigKey::ProxyUrl), "http://proxy:3128")],
            vec![(K::Client(ClientConfigKey::ProxyExcludes), "s3.test")],
            vec![(K::Client(ClientConfigKey::AllowInvalidCertificates), "true")],
            vec![(K::SkipSignature, "true")],
            vec![(K::RequestPayer, "true")],
            vec![(K::S3Express, "true")],
        ] {
            assert!(lister(&refused).is_none(), "{refused:?}");
        }
    }

    #[test]
    fn a_start_after_is_cut_before_what_xml_cannot_carry() {
        assert_eq!(xml_safe("wh/indexes/zz/b\u{1}.parquet"), "wh/indexes/zz/b");
        assert_eq!(xml_safe("wh/indexes/zz\u{FFFF}"), "wh/indexes/zz");
        assert_eq!(xml_safe("wh/indexes/\u{FFFE}x"), "wh/indexes/");
        assert_eq!(xml_safe("wh/indexes/ü b\t~/x"), "wh/indexes/ü b\t~/x");
        assert_eq!(xml_safe("wh/😀"), "wh/😀");
    }

    #[test]
    fn url_encoded_keys_decode_as_s3_encodes_them() {
        assert_eq!(decoded("wh/indexes/a%20b+c%2Bd"), "wh/indexes/a b c+d");
        assert_eq!(decoded("wh/indexes/zz/a%01b"), "wh/indexes/zz/a\u{1}b");
        assert_eq!(decoded("wh/indexes/zz//x"), "wh/indexes/zz//x");
        assert_eq!(decoded("wh/%C3%BC/k/"), "wh/ü/k/");
    }
}
