//! Client configuration (see "Configuration" in the [module docs](super)).

use aws_sdk_dynamodb::config::BehaviorVersion;
use aws_sdk_dynamodb::config::retry::RetryConfig;
use aws_sdk_dynamodb::config::timeout::TimeoutConfig;

use crate::error::{Error, ErrorKind, Result};

/// The client configuration of [`DynamoStore::from_env_with`]: aws-config's standard chain
/// (environment, profiles, SSO, web identity, container and instance credentials).
#[cfg(feature = "credential-chain")]
pub(super) async fn client_config(
    endpoint: Option<&str>,
    timeouts: TimeoutConfig,
    retries: RetryConfig,
) -> Result<aws_sdk_dynamodb::Config> {
    let mut loader = aws_config::defaults(BehaviorVersion::latest())
        .timeout_config(timeouts)
        .retry_config(retries);
    if let Some(endpoint) = endpoint {
        loader = loader.endpoint_url(endpoint);
    }
    let config = loader.load().await;
    if config.region().is_none() {
        return Err(Error::new(
            ErrorKind::Configuration,
            "no AWS region is configured for DynamoDB: set AWS_REGION or a profile region",
        ));
    }
    Ok(aws_sdk_dynamodb::Config::from(&config))
}

/// The client configuration of [`DynamoStore::from_env_with`] without the
/// `credential-chain` feature (the Lambda functions): region, credentials and endpoint
/// from the environment only, which is where Lambda puts them (`AWS_REGION` or
/// `AWS_DEFAULT_REGION`; `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`;
/// `AWS_ENDPOINT_URL_DYNAMODB` or `AWS_ENDPOINT_URL`). This leaves aws-config and the STS
/// client out of the binary.
#[cfg(not(feature = "credential-chain"))]
pub(super) async fn client_config(
    endpoint: Option<&str>,
    timeouts: TimeoutConfig,
    retries: RetryConfig,
) -> Result<aws_sdk_dynamodb::Config> {
    use aws_sdk_dynamodb::config::Region;

    let (region, credentials) = crate::aws_environment::region_and_credentials(
        "for DynamoDB: this build reads the environment only \
         (the `credential-chain` feature adds profiles and instance credentials)",
    )?;
    let mut builder = aws_sdk_dynamodb::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new(region))
        .credentials_provider(credentials)
        .timeout_config(timeouts)
        .retry_config(retries);
    let endpoint = endpoint
        .map(str::to_owned)
        .or_else(|| crate::aws_environment::endpoint("DYNAMODB"));
    if let Some(endpoint) = endpoint {
        builder = builder.endpoint_url(endpoint);
    }
    Ok(builder.build())
}

/// A DynamoDB table name: 3 to 255 of `[A-Za-z0-9_.-]`.
pub(super) fn check_table_name(table: &str) -> Result<()> {
    let valid = (3..=255).contains(&table.len())
        && table
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'));
    if valid {
        Ok(())
    } else {
        Err(Error::new(
            ErrorKind::Configuration,
            format!("`{table}` is not a DynamoDB table name (3 to 255 of A-Z a-z 0-9 _ . -)"),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_names_are_checked() {
        assert!(check_table_name("parqdb-catalog").is_ok());
        assert!(check_table_name("a.b_C-9").is_ok());
        for bad in ["", "ab", "a b", "a/b", &"x".repeat(256)] {
            let err = check_table_name(bad).expect_err("invalid");
            assert_eq!(err.kind(), ErrorKind::Configuration);
        }
    }
}
