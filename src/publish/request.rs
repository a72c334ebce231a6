//! The wire form of an idempotent publication, as the `publish` Lambda function (and
//! any other transport) receives it.
//!
//! Request (a JSON object; every field required, unknown fields rejected):
//!
//! ```json
//! {
//!   "identifier": {"namespace": ["docs"], "name": "embeddings"},
//!   "idempotency-key": "s3-event-5e3c...",
//!   "snapshot": { ...snapshot contents: the snapshot fields without snapshot-id,
//!                 sequence-number and timestamp-ms... }
//! }
//! ```
//!
//! Response: [`Published`] as JSON, `{"metadata-location", "snapshot-id",
//! "sequence-number", "attempts", "already-published"}`.
//!
//! A request that is not such an object — malformed JSON, an array, a missing,
//! duplicate, unknown or ill-typed field at any depth, an invalid identifier — is
//! `INVALID_REQUEST`, with the JSON path of the problem in the message. Contents that
//! parse but break a metadata rule (an unknown family, a changed identity field, ...)
//! are `INVALID_INDEX_METADATA` from the publication itself.

use serde::Deserialize;

use super::{Published, Publisher};
use crate::error::{Error, ErrorKind, Result};
use crate::identifier::IndexIdentifier;
use crate::metadata::{MAX_METADATA_BYTES, SnapshotContents};

/// One idempotent publication request.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct PublishRequest {
    /// The index to publish to.
    pub identifier: IndexIdentifier,
    /// The key that makes redelivery safe (e.g. the triggering event's id).
    pub idempotency_key: String,
    /// The new snapshot's contents.
    pub snapshot: SnapshotContents,
}

impl PublishRequest {
    /// Parse a request strictly (`INVALID_REQUEST` naming the JSON path).
    pub fn from_json_slice(bytes: &[u8]) -> Result<PublishRequest> {
        let invalid = |message: String| Error::new(ErrorKind::InvalidRequest, message);
        if bytes.len() > MAX_METADATA_BYTES {
            return Err(invalid(format!(
                "request: {} bytes exceeds the {MAX_METADATA_BYTES}-byte limit",
                bytes.len()
            )));
        }
        // Derived structs also accept positional arrays; a request must be an object.
        if bytes.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
            return Err(invalid("request: expected a JSON object".into()));
        }
        let mut deserializer = serde_json::Deserializer::from_slice(bytes);
        let request: PublishRequest =
            serde_path_to_error::deserialize(&mut deserializer).map_err(|err| {
                let path = err.path().to_string();
                let inner = err.into_inner();
                if path == "." || !inner.is_data() {
                    invalid(format!("request: {inner}"))
                } else {
                    invalid(format!("request.{path}: {inner}"))
                }
            })?;
        deserializer
            .end()
            .map_err(|err| invalid(format!("request: {err}")))?;
        Ok(request)
    }
}

/// Parse `payload` as a [`PublishRequest`], publish it with
/// [`Publisher::publish_idempotent`] and return the [`Published`] result.
pub async fn handle_publish(publisher: &Publisher, payload: &[u8]) -> Result<Published> {
    let request = PublishRequest::from_json_slice(payload)?;
    publisher
        .publish_idempotent(
            &request.identifier,
            &request.idempotency_key,
            request.snapshot,
        )
        .await
}

/// [`handle_publish`] with the result as JSON.
pub async fn handle_publish_json(
    publisher: &Publisher,
    payload: &[u8],
) -> Result<serde_json::Value> {
    let published = handle_publish(publisher, payload).await?;
    serde_json::to_value(&published).map_err(|err| {
        Error::with_source(
            ErrorKind::InvalidRequest,
            "the response cannot be serialized",
            err,
        )
    })
}
