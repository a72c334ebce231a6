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
//! A request that is not such an object — malformed JSON, an array, trailing data, a
//! missing, duplicate, unknown or ill-typed field at any depth, a duplicate key in a map,
//! an invalid identifier — is `INVALID_REQUEST`, with the JSON path of the problem in the
//! message. Contents that parse but break a metadata rule (an unknown family, a changed
//! identity field, ...) are `INVALID_INDEX_METADATA` from the publication itself.
//!
//! Two transports read it. [`PublishRequest::from_json_slice`] parses bytes (messages
//! `request: ...`, `request.<path>: ...`; at most [`MAX_METADATA_BYTES`]). The `publish`
//! Lambda function parses its event under the contract of every catalog function
//! (`parqdb_catalog::lambda::event`, with the `lambda` feature): at most 256 KiB of
//! compact JSON, duplicate keys and trailing data refused, messages
//! ``invalid `publish` event at `<path>`: ...``.

use serde::Deserialize;

use super::{Published, Publisher};
use crate::error::{Error, ErrorKind, Result};
use crate::identifier::IndexIdentifier;
use crate::json::{self, strict_object};
use crate::metadata::{MAX_METADATA_BYTES, SnapshotContents};

/// One idempotent publication request.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(remote = "Self", deny_unknown_fields, rename_all = "kebab-case")]
pub struct PublishRequest {
    /// The index to publish to.
    pub identifier: IndexIdentifier,
    /// The key that makes redelivery safe (e.g. the triggering event's id).
    pub idempotency_key: String,
    /// The new snapshot's contents.
    pub snapshot: SnapshotContents,
}

strict_object!(deserialize PublishRequest);

impl PublishRequest {
    /// Parse a request from bytes strictly: one JSON object, nothing after it
    /// (`INVALID_REQUEST` naming the JSON path).
    pub fn from_json_slice(bytes: &[u8]) -> Result<PublishRequest> {
        let invalid = |message: String| Error::new(ErrorKind::InvalidRequest, message);
        if bytes.len() > MAX_METADATA_BYTES {
            return Err(invalid(format!(
                "request: {} bytes exceeds the {MAX_METADATA_BYTES}-byte limit",
                bytes.len()
            )));
        }
        json::from_slice(bytes).map_err(|err| match err.path() {
            None => invalid(format!("request: {}", err.inner())),
            Some(path) => invalid(format!("request.{path}: {}", err.inner())),
        })
    }

    /// Publish the request's snapshot with [`Publisher::publish_idempotent`].
    pub async fn publish(self, publisher: &Publisher) -> Result<Published> {
        publisher
            .publish_idempotent(&self.identifier, &self.idempotency_key, self.snapshot)
            .await
    }
}

/// Parse `payload` as a [`PublishRequest`], publish it with
/// [`Publisher::publish_idempotent`] and return the [`Published`] result.
pub async fn handle_publish(publisher: &Publisher, payload: &[u8]) -> Result<Published> {
    PublishRequest::from_json_slice(payload)?
        .publish(publisher)
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
