//! The [`KeyLister`] of an S3 warehouse: `ListObjectsV2` itself (aws-sdk-s3), which
//! returns every key as it is, where object_store fails a whole page on one key it cannot
//! parse (see the `keys` module).

use std::sync::Arc;
use std::time::Duration;

use aws_credential_types::provider::error::CredentialsError;
use aws_credential_types::provider::{ProvideCredentials, future};
use futures::StreamExt;
use futures::stream::BoxStream;
use object_store::ClientConfigKey;
use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey, AwsCredentialProvider};

use super::keys::{KeyLister, RawEntry};
use crate::error::{Error, ErrorKind, Result};

/// `ListObjectsV2` over one bucket, signed with object_store's credentials (so the listing
/// authenticates wherever the warehouse's own client does: static keys, the environment,
/// web identity, containers, instance metadata).
pub(super) struct S3Lister {
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

/// A page of a listing: its objects, its common prefixes (with a delimiter) and the token
/// of the next page.
struct Page {
    objects: Vec<RawEntry>,
    prefixes: Vec<String>,
    next: Option<String>,
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
    /// addressing style), signing with `credentials` (the built store's).
    pub(super) fn new(builder: &AmazonS3Builder, credentials: AwsCredentialProvider) -> S3Lister {
        let value = |key| builder.get_config_value(&key);
        let endpoint =
            value(AmazonS3ConfigKey::S3Endpoint).or_else(|| value(AmazonS3ConfigKey::Endpoint));
        let region = value(AmazonS3ConfigKey::Region).unwrap_or_else(|| "us-east-1".to_owned());
        let virtual_hosted = value(AmazonS3ConfigKey::VirtualHostedStyleRequest)
            .is_some_and(|value| value.eq_ignore_ascii_case("true"));
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
        S3Lister {
            bucket: value(AmazonS3ConfigKey::Bucket).unwrap_or_default(),
            client: aws_sdk_s3::Client::from_conf(config.build()),
        }
    }

    async fn page(
        &self,
        prefix: &str,
        start_after: Option<&str>,
        delimiter: bool,
        token: Option<String>,
    ) -> Result<Page> {
        let mut request = self
            .client
            .list_objects_v2()
            .bucket(&self.bucket)
            .prefix(prefix)
            .set_continuation_token(token)
            // Keys come back URL-encoded: a key may hold characters XML 1.0 cannot carry
            // (a control character), which would fail the whole response.
            .encoding_type(aws_sdk_s3::types::EncodingType::Url);
        if let Some(after) = start_after {
            request = request.start_after(after);
        }
        if delimiter {
            request = request.delimiter("/");
        }
        let response = request
            .send()
            .await
            .map_err(|err| list_error(prefix, err))?;
        let objects = response
            .contents()
            .iter()
            .filter_map(|object| {
                Some(RawEntry {
                    key: decoded(object.key()?),
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
            .filter_map(|prefix| prefix.prefix().map(decoded))
            .collect();
        let next = response
            .is_truncated()
            .unwrap_or(false)
            .then(|| response.next_continuation_token().map(str::to_owned))
            .flatten();
        Ok(Page {
            objects,
            prefixes,
            next,
        })
    }
}

#[async_trait::async_trait]
impl KeyLister for S3Lister {
    fn keys(
        self: Arc<Self>,
        prefix: String,
        start_after: Option<String>,
    ) -> BoxStream<'static, Result<RawEntry>> {
        // (the token of the next page, whether the listing has ended)
        let pages = futures::stream::try_unfold((None::<String>, false), move |(token, ended)| {
            let (this, prefix, start_after) = (self.clone(), prefix.clone(), start_after.clone());
            async move {
                if ended {
                    return Ok(None);
                }
                let after = token.is_none().then_some(start_after.as_deref()).flatten();
                let page = this.page(&prefix, after, false, token).await?;
                let ended = page.next.is_none();
                Ok(Some((page.objects, (page.next, ended))))
            }
        });
        pages
            .map(|page: Result<Vec<RawEntry>>| match page {
                Ok(objects) => futures::stream::iter(objects.into_iter().map(Ok)).boxed(),
                Err(err) => futures::stream::iter([Err(err)]).boxed(),
            })
            .flatten()
            .boxed()
    }

    async fn directory(&self, prefix: &str) -> Result<(Vec<RawEntry>, Vec<String>)> {
        let (mut objects, mut prefixes, mut token) = (Vec::new(), Vec::new(), None);
        loop {
            let page = self.page(prefix, None, true, token).await?;
            objects.extend(page.objects);
            prefixes.extend(page.prefixes);
            match page.next {
                Some(next) => token = Some(next),
                None => return Ok((objects, prefixes)),
            }
        }
    }
}

/// A key (or common prefix) of a listing with `encoding-type=url`, as it is: S3 encodes a
/// space as `+` (and a `+` as `%2B`), as HTML forms do.
fn decoded(encoded: &str) -> String {
    let spaced = encoded.replace('+', " ");
    percent_encoding::percent_decode_str(&spaced)
        .decode_utf8_lossy()
        .into_owned()
}

/// A failed listing: refused for good (access denied, no such bucket) or unavailable.
fn list_error<E, R>(prefix: &str, err: aws_sdk_s3::error::SdkError<E, R>) -> Error
where
    E: aws_sdk_s3::error::ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    R: std::fmt::Debug + Send + Sync + 'static,
{
    let code = err.as_service_error().and_then(|e| e.code()).unwrap_or("");
    let refused = matches!(
        code,
        "AccessDenied" | "NoSuchBucket" | "InvalidAccessKeyId" | "SignatureDoesNotMatch"
    );
    let text = aws_sdk_s3::error::DisplayErrorContext(err).to_string();
    if refused {
        return Error::with_source(
            ErrorKind::StoreRefused,
            format!(
                "the warehouse refused to list `{prefix}`; retrying cannot help until the store or its permissions are fixed"
            ),
            text,
        );
    }
    Error::with_source(
        ErrorKind::StoreUnavailable,
        format!("listing `{prefix}` failed"),
        text,
    )
}

#[cfg(test)]
mod tests {
    use super::decoded;

    #[test]
    fn url_encoded_keys_decode_as_s3_encodes_them() {
        assert_eq!(decoded("wh/indexes/a%20b+c%2Bd"), "wh/indexes/a b c+d");
        assert_eq!(decoded("wh/indexes/zz/a%01b"), "wh/indexes/zz/a\u{1}b");
        assert_eq!(decoded("wh/indexes/zz//x"), "wh/indexes/zz//x");
        assert_eq!(decoded("wh/%C3%BC/k/"), "wh/ü/k/");
    }
}
