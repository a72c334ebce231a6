//! The AWS settings a Lambda function's environment gives, for the SDK clients the library
//! builds without aws-config's credential chain (the DynamoDB pointer store in the
//! functions, the builder function): the region (`AWS_REGION` or `AWS_DEFAULT_REGION`),
//! static credentials (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`)
//! and the endpoint override of one service (`AWS_ENDPOINT_URL_<SERVICE>`, else
//! `AWS_ENDPOINT_URL`). An empty variable counts as unset.

use aws_credential_types::Credentials;

use crate::error::{Error, ErrorKind, Result};

fn var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|value| !value.is_empty())
}

/// The environment's region and credentials. Without them, `INVALID_CONFIGURATION` with
/// the message `no <what> is configured <purpose>`.
pub(crate) fn region_and_credentials(purpose: &str) -> Result<(String, Credentials)> {
    let missing = |what: &str| {
        Error::new(
            ErrorKind::Configuration,
            format!("no {what} is configured {purpose}"),
        )
    };
    let region = var("AWS_REGION")
        .or_else(|| var("AWS_DEFAULT_REGION"))
        .ok_or_else(|| missing("region (AWS_REGION)"))?;
    let (Some(key_id), Some(secret)) = (var("AWS_ACCESS_KEY_ID"), var("AWS_SECRET_ACCESS_KEY"))
    else {
        return Err(missing(
            "credentials (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)",
        ));
    };
    let credentials = Credentials::new(
        key_id,
        secret,
        var("AWS_SESSION_TOKEN"),
        None,
        "environment",
    );
    Ok((region, credentials))
}

/// The endpoint override of one service: `AWS_ENDPOINT_URL_<SERVICE>` (e.g. `DYNAMODB`),
/// else `AWS_ENDPOINT_URL`.
pub(crate) fn endpoint(service: &str) -> Option<String> {
    var(&format!("AWS_ENDPOINT_URL_{service}")).or_else(|| var("AWS_ENDPOINT_URL"))
}
