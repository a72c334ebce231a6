//! Creating the bucket (`parqdb-catalog init` and tests), with aws-sdk-s3.

use super::S3Options;
use super::options::configuration;
use crate::error::{Error, ErrorKind};

/// Create `bucket` (for `parqdb-catalog init` and tests), with aws-sdk-s3's
/// `CreateBucket`: path-style unless [`S3Options::virtual_hosted_style`] is set, the
/// endpoint, region and static credentials of `options`, else those of the AWS
/// environment and profile (aws-config). A bucket that already exists and is ours is fine.
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
