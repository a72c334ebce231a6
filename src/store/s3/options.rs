//! Configuration: [`S3Options`], the object_store builder made from them and the `AWS_*`
//! environment, and `s3://bucket/prefix` URIs (see "Configuration" in the
//! [module docs](super)).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey, AwsCredential, S3ConditionalPut};
use object_store::path::Path;
use object_store::{BackoffConfig, RetryConfig, StaticCredentialProvider};

use crate::error::{Error, ErrorKind};

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

pub(super) fn configuration(message: impl Into<String>) -> Error {
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
pub(super) fn parse_uri(uri: &str) -> Result<(String, String), Error> {
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
pub(super) fn normalise_prefix(prefix: &str) -> Result<String, Error> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::ClientConfigKey;

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
}
