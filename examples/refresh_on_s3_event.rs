//! An event-driven refresh job: when an object lands in the source table's S3 prefix,
//! rebuild the index and publish the successor through the [`Publisher`].
//!
//! The trigger is any of the three shapes an S3 write reaches a job in, parsed with the
//! [`aws_lambda_events`] types:
//!
//! - an EventBridge `Object Created` event ([`EventBridgeEvent`], as a rule delivers it;
//!   `examples/s3_object_created.json`):
//!
//!   ```json
//!   {"id": "17793124-05d4-b198-2fde-7ededc63b103", "detail-type": "Object Created",
//!    "source": "aws.s3", "time": "2025-06-15T12:00:00Z",
//!    "detail": {"bucket": {"name": "example"},
//!               "object": {"key": "documents/part-00042.parquet", "size": 1048576,
//!                          "version-id": "IYV3p45BT0ac8hjHg1houSdS1a.Mro8e",
//!                          "sequencer": "00617F08299329D189"}}}
//!   ```
//! - an S3 event notification ([`S3Event`], `{"Records": [...]}`; `ObjectCreated:*`
//!   records are used, others ignored; keys arrive URL-encoded and are decoded);
//! - an SQS batch ([`SqsEvent`], `examples/s3_object_created_sqs.json`) whose message
//!   bodies are either of the above.
//!
//! For each S3 write the job
//! 1. derives the source table state (`s3://<bucket>/<key's directory>/`, plus the object
//!    that changed it) and an idempotency key from the write itself —
//!    `s3://<bucket>/<key>#<sequencer>`, or `#v=<version id>` without a sequencer — never
//!    from the delivery (an EventBridge event id or an SQS message id differ between two
//!    deliveries of the same write, and between the three shapes), since S3, EventBridge,
//!    SQS and Lambda all deliver at least once;
//! 2. skips the work if a retained snapshot already carries that key (a redelivery);
//! 3. "builds" the index: writes placeholder index-table files
//!    `indexes/<index-uuid>/<build-id>/<role>/part-0.parquet` into the warehouse (a real
//!    job trains IVF centroids and writes posting lists here);
//! 4. publishes the successor with [`Publisher::publish_idempotent`] (bounded, jittered
//!    retries on conflicts), or creates the index on the first event.
//!
//! Run it against the embedded default (a `./warehouse` directory, pointers under
//! `./warehouse/_catalog`; `PARQDB_WAREHOUSE`/`PARQDB_CATALOG` select others):
//!
//! ```text
//! cargo run --example refresh_on_s3_event -- examples/s3_object_created.json
//! cargo run --example refresh_on_s3_event -- examples/s3_object_created.json      # replay: "already-published": true
//! cargo run --example refresh_on_s3_event -- examples/s3_object_created_sqs.json  # the same write through SQS: already published
//! cargo run --example refresh_on_s3_event -- --namespace docs --name embeddings event.json
//! ```
//!
//! It prints one publication per S3 write as a JSON array (`metadata-location`,
//! `snapshot-id`, `sequence-number`, `attempts`, `already-published`), or the first error
//! as `{"error": CODE, "message": ...}` on stderr with exit status 1.

use std::collections::BTreeMap;
use std::process::ExitCode;

use aws_lambda_events::event::eventbridge::EventBridgeEvent;
use aws_lambda_events::event::s3::S3Event;
use aws_lambda_events::event::sqs::SqsEvent;
use bytes::Bytes;
use clap::Parser;
use parqdb_catalog::config::CatalogConfig;
use parqdb_catalog::metadata::{
    IndexTableDefinition, ProviderDefinition, SnapshotContents, TableDefinition,
};
use parqdb_catalog::publish::{IDEMPOTENCY_KEY, Published, Publisher, find_published};
use parqdb_catalog::{Error, ErrorKind, IndexIdentifier, Namespace, Result};
use serde::Deserialize;
use serde_json::Value;
use uuid::Uuid;

/// The index-table roles of the `ivf` family.
const ROLES: [&str; 2] = ["ivf_centroids", "ivf_postings"];

/// Refresh an index from the S3 writes an event reports.
#[derive(Debug, Parser)]
struct Args {
    /// The event JSON file (`-` for stdin): EventBridge, S3 notification or SQS batch.
    event: String,
    /// Namespace segment of the index (repeatable).
    #[arg(long = "namespace", default_values_t = ["examples".to_owned()])]
    namespace: Vec<String>,
    /// Index name.
    #[arg(long, default_value = "documents_embedding")]
    name: String,
}

/// The `detail` of an EventBridge S3 `Object Created` event (aws_lambda_events has the
/// envelope, [`EventBridgeEvent`], but no type for this detail). Other fields are ignored.
#[derive(Debug, Deserialize)]
struct ObjectCreatedDetail {
    bucket: DetailBucket,
    object: DetailObject,
}

#[derive(Debug, Deserialize)]
struct DetailBucket {
    name: String,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "kebab-case")]
struct DetailObject {
    key: String,
    size: Option<u64>,
    version_id: Option<String>,
    sequencer: Option<String>,
}

/// One write to S3 that changed the source table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceWrite {
    /// The bucket.
    pub bucket: String,
    /// The object key (decoded).
    pub key: String,
    /// The object size in bytes, if given.
    pub size: Option<u64>,
    /// S3's per-key ordering token of the write, if given.
    pub sequencer: Option<String>,
    /// The version the write created (versioned buckets), if given.
    pub version_id: Option<String>,
}

fn invalid(message: impl Into<String>) -> Error {
    Error::new(ErrorKind::InvalidRequest, message)
}

impl SourceWrite {
    /// The S3 writes `bytes` reports; `INVALID_REQUEST` for anything but the three shapes
    /// of the module docs, an EventBridge event other than an S3 `Object Created`, or a
    /// write without bucket or key.
    pub fn from_event_json(bytes: &[u8]) -> Result<Vec<SourceWrite>> {
        let value: Value = serde_json::from_slice(bytes)
            .map_err(|err| invalid(format!("the event is not JSON: {err}")))?;
        SourceWrite::from_event(value, true)
    }

    fn from_event(value: Value, outermost: bool) -> Result<Vec<SourceWrite>> {
        let from_sqs = value["Records"][0]["eventSource"] == "aws:sqs";
        if from_sqs && outermost {
            let batch: SqsEvent = serde_json::from_value(value)
                .map_err(|err| invalid(format!("not an SQS event: {err}")))?;
            let mut writes = Vec::new();
            for message in batch.records {
                let body = message.body.unwrap_or_default();
                let body: Value = serde_json::from_str(&body)
                    .map_err(|err| invalid(format!("an SQS message body is not JSON: {err}")))?;
                writes.extend(SourceWrite::from_event(body, false)?);
            }
            return Ok(writes);
        }
        if value.get("Records").is_some() {
            let event: S3Event = serde_json::from_value(value)
                .map_err(|err| invalid(format!("not an S3 event notification: {err}")))?;
            return event
                .records
                .into_iter()
                .filter(|record| {
                    record
                        .event_name
                        .as_deref()
                        .is_some_and(|name| name.starts_with("ObjectCreated:"))
                })
                .map(|record| {
                    let object = record.s3.object;
                    SourceWrite::new(
                        record.s3.bucket.name.unwrap_or_default(),
                        url_decoded(&object.key.unwrap_or_default()),
                        object.size.and_then(|size| u64::try_from(size).ok()),
                        object.sequencer,
                        object.version_id,
                    )
                })
                .collect();
        }
        let event: EventBridgeEvent<Value> = serde_json::from_value(value)
            .map_err(|err| invalid(format!("not an EventBridge, S3 or SQS event: {err}")))?;
        if event.source != "aws.s3" || event.detail_type != "Object Created" {
            return Err(invalid(format!(
                "expected source `aws.s3` and detail-type `Object Created`, got `{}` and `{}`",
                event.source, event.detail_type
            )));
        }
        let detail: ObjectCreatedDetail = serde_json::from_value(event.detail)
            .map_err(|err| invalid(format!("not an S3 Object Created detail: {err}")))?;
        let object = detail.object;
        Ok(vec![SourceWrite::new(
            detail.bucket.name,
            object.key,
            object.size,
            object.sequencer,
            object.version_id,
        )?])
    }

    fn new(
        bucket: String,
        key: String,
        size: Option<u64>,
        sequencer: Option<String>,
        version_id: Option<String>,
    ) -> Result<SourceWrite> {
        if bucket.is_empty() || key.is_empty() {
            return Err(invalid("the bucket name and object key must not be empty"));
        }
        Ok(SourceWrite {
            bucket,
            key,
            size,
            sequencer: sequencer.filter(|s| !s.is_empty()),
            version_id: version_id.filter(|v| !v.is_empty()),
        })
    }

    /// The key that identifies this write across deliveries: the bucket, the key, and
    /// the write's sequencer (or, without one, the version it created). `INVALID_REQUEST`
    /// if the event carries neither: two writes of one key could not be told apart.
    pub fn idempotency_key(&self) -> Result<String> {
        let write = match (&self.sequencer, &self.version_id) {
            (Some(sequencer), _) => sequencer.clone(),
            (None, Some(version)) => format!("v={version}"),
            (None, None) => {
                return Err(invalid(format!(
                    "the event for s3://{}/{} has neither a sequencer nor a version id",
                    self.bucket, self.key
                )));
            }
        };
        Ok(format!("s3://{}/{}#{write}", self.bucket, self.key))
    }

    /// The source table state after this write: the key's directory as a parquet table,
    /// versioned by the object that changed it.
    pub fn source_table(&self) -> Result<TableDefinition> {
        let directory = self.key.rsplit_once('/').map_or("", |(dir, _)| dir);
        let location = if directory.is_empty() {
            format!("s3://{}/", self.bucket)
        } else {
            format!("s3://{}/{directory}/", self.bucket)
        };
        let mut properties = BTreeMap::from([
            ("definition-version".to_owned(), "1".to_owned()),
            ("location".to_owned(), location),
            ("changed-object".to_owned(), self.key.clone()),
        ]);
        if let Some(sequencer) = &self.sequencer {
            properties.insert("changed-object-sequencer".to_owned(), sequencer.clone());
        }
        TableDefinition::new("parquet", properties)
    }
}

/// An S3 event notification's key, decoded (it is form-URL-encoded: `+` for a space,
/// `%XX` for other bytes). The encoded key holds no raw `&` or `=`, so form parsing
/// yields exactly one name: the decoded key.
fn url_decoded(key: &str) -> String {
    url::form_urlencoded::parse(key.as_bytes())
        .next()
        .map(|(name, _)| name.into_owned())
        .unwrap_or_default()
}

/// Build the placeholder index for `event` under `indexes/<index_uuid>/<build-id>/` and
/// return the snapshot contents that name it.
pub async fn build_index(
    publisher: &Publisher,
    index_uuid: Uuid,
    event: &SourceWrite,
) -> Result<SnapshotContents> {
    let build_id = publisher.ids().uuid().simple().to_string();
    let mut index_tables = BTreeMap::new();
    for role in ROLES {
        let location = format!("indexes/{}/{build_id}/{role}/", index_uuid.simple());
        publisher
            .warehouse()
            .write_new(
                &format!("{location}part-0.parquet"),
                Bytes::from(format!(
                    "placeholder {role} for s3://{}/{}",
                    event.bucket, event.key
                )),
            )
            .await?;
        index_tables.insert(
            role.to_owned(),
            IndexTableDefinition::new(1, BTreeMap::from([("location".to_owned(), location)]))?,
        );
    }
    // Placeholder statistics: one row per KiB of the object that changed.
    let indexed_rows = i64::try_from(event.size.unwrap_or(0) / 1024)
        .unwrap_or(i64::MAX)
        .max(1);
    Ok(SnapshotContents {
        source_table: event.source_table()?,
        vector_field: "embedding".into(),
        source_key_fields: vec!["document_id".into()],
        indexed_rows,
        index_family: "ivf".into(),
        index_schema_version: 1,
        metric: "l2_squared".into(),
        parameters: BTreeMap::from([
            ("dimension".to_owned(), "768".to_owned()),
            ("nlist".to_owned(), "64".to_owned()),
        ]),
        index_provider: ProviderDefinition::new("parquet", BTreeMap::new())?,
        index_tables,
        summary: BTreeMap::from([
            ("operation".to_owned(), "refresh".to_owned()),
            (
                "trigger".to_owned(),
                format!("s3://{}/{}", event.bucket, event.key),
            ),
        ]),
    })
}

/// The refresh job for one S3 write: publish a successor built for it, at most once per
/// write (see the module docs). Creates the namespace and the index on first use.
pub async fn refresh(
    publisher: &Publisher,
    identifier: &IndexIdentifier,
    event: &SourceWrite,
) -> Result<Published> {
    let key = event.idempotency_key()?;
    // Two rounds: if a concurrent job creates the index first, publish on top of it.
    for _ in 0..2 {
        match publisher.load_current(identifier).await {
            Ok((pointer, current)) => {
                let warehouse = publisher.warehouse();
                if let Some(found) =
                    find_published(&current, &key, &pointer.metadata_location, warehouse)
                {
                    return Ok(found); // a redelivery: no work, no publication (attempts 0)
                }
                let contents = build_index(publisher, current.index_uuid(), event).await?;
                return publisher
                    .publish_idempotent(identifier, &key, contents)
                    .await;
            }
            Err(err) if err.kind() == ErrorKind::IndexNotFound => {
                let catalog = publisher.catalog();
                match catalog
                    .create_namespace(identifier.namespace(), BTreeMap::new())
                    .await
                {
                    Ok(()) => {}
                    Err(err) if err.kind() == ErrorKind::AlreadyExists => {}
                    Err(err) => return Err(err),
                }
                let index_uuid = publisher.ids().uuid();
                let mut contents = build_index(publisher, index_uuid, event).await?;
                contents
                    .summary
                    .insert(IDEMPOTENCY_KEY.to_owned(), key.clone());
                contents
                    .summary
                    .insert("operation".to_owned(), "create".to_owned());
                match publisher
                    .create_index_with_uuid(identifier, index_uuid, contents, BTreeMap::new())
                    .await
                {
                    Err(err) if err.kind() == ErrorKind::AlreadyExists => continue,
                    result => return result,
                }
            }
            Err(err) => return Err(err),
        }
    }
    Err(Error::new(
        ErrorKind::CommitConflict,
        format!("{identifier} was created and dropped concurrently; retry the event"),
    ))
}

async fn run(args: Args) -> Result<Vec<Published>> {
    let bytes = if args.event == "-" {
        let mut buffer = Vec::new();
        std::io::Read::read_to_end(&mut std::io::stdin(), &mut buffer).map_err(|err| {
            Error::with_source(ErrorKind::InvalidRequest, "cannot read stdin", err)
        })?;
        buffer
    } else {
        std::fs::read(&args.event).map_err(|err| {
            Error::with_source(
                ErrorKind::InvalidRequest,
                format!("cannot read the event file `{}`", args.event),
                err,
            )
        })?
    };
    let writes = SourceWrite::from_event_json(&bytes)?;
    let identifier = IndexIdentifier::new(Namespace::new(args.namespace)?, args.name)?;
    let catalog = CatalogConfig::from_env().build().await?;
    let publisher = Publisher::for_catalog(&catalog);
    let mut published = Vec::new();
    for write in &writes {
        published.push(refresh(&publisher, &identifier, write).await?);
    }
    Ok(published)
}

#[tokio::main]
async fn main() -> ExitCode {
    match run(Args::parse()).await {
        Ok(published) => {
            println!(
                "{}",
                serde_json::to_string_pretty(&published).unwrap_or_default()
            );
            ExitCode::SUCCESS
        }
        Err(err) => {
            eprintln!("{}", err.to_json());
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EVENTBRIDGE: &[u8] = include_bytes!("s3_object_created.json");
    const SQS: &[u8] = include_bytes!("s3_object_created_sqs.json");

    fn write(key: &str, sequencer: Option<&str>, version: Option<&str>) -> SourceWrite {
        SourceWrite {
            bucket: "example".into(),
            key: key.into(),
            size: Some(1_048_576),
            sequencer: sequencer.map(str::to_owned),
            version_id: version.map(str::to_owned),
        }
    }

    #[test]
    fn the_same_write_has_the_same_key_whatever_the_delivery() {
        let direct = SourceWrite::from_event_json(EVENTBRIDGE).expect("eventbridge");
        let through_sqs = SourceWrite::from_event_json(SQS).expect("sqs");
        assert_eq!(direct.len(), 1);
        // The SQS batch carries the same write twice: as an EventBridge event (another
        // event id) and as an S3 notification (URL-encoded key, camelCase fields).
        assert_eq!(through_sqs.len(), 2);
        let key = direct[0].idempotency_key().expect("key");
        assert_eq!(
            key,
            "s3://example/documents/part-00042.parquet#00617F08299329D189"
        );
        for other in &through_sqs {
            assert_eq!(other.idempotency_key().expect("key"), key, "{other:?}");
        }
    }

    #[test]
    fn notification_keys_are_decoded() {
        assert_eq!(url_decoded("red+flower.jpg"), "red flower.jpg");
        assert_eq!(
            url_decoded("dt%3D2025-06-15%2Fpart%2B1"),
            "dt=2025-06-15/part+1"
        );
        assert_eq!(url_decoded("plain/key.parquet"), "plain/key.parquet");
    }

    #[test]
    fn the_key_names_the_write_not_the_event() {
        let a = write("k", Some("01"), None);
        let b = write("k", Some("02"), None);
        assert_ne!(
            a.idempotency_key().expect("a"),
            b.idempotency_key().expect("b")
        );
        assert_eq!(
            write("k", None, Some("v1"))
                .idempotency_key()
                .expect("version"),
            "s3://example/k#v=v1"
        );
        let err = write("k", None, None)
            .idempotency_key()
            .expect_err("neither");
        assert_eq!(err.code(), "INVALID_REQUEST");
    }

    #[test]
    fn other_events_are_invalid_requests() {
        for event in [
            r#"{"detail-type": "Object Deleted", "source": "aws.s3", "detail": {}}"#,
            r#"{"detail-type": "Scheduled Event", "source": "aws.events", "detail": {}}"#,
            r#"{"detail-type": "Object Created", "source": "aws.s3", "detail": {"bucket": {"name": ""}, "object": {"key": "k"}}}"#,
            r#"{"hello": "world"}"#,
            "[]",
            "not json",
        ] {
            let err = SourceWrite::from_event_json(event.as_bytes()).expect_err(event);
            assert_eq!(err.code(), "INVALID_REQUEST", "{event}");
        }
    }

    #[test]
    fn notifications_other_than_object_created_are_ignored() {
        let removed = r#"{"Records": [{"eventVersion": "2.1", "eventSource": "aws:s3",
            "eventTime": "2025-06-15T12:00:00.000Z", "eventName": "ObjectRemoved:Delete",
            "userIdentity": {}, "requestParameters": {}, "responseElements": {},
            "s3": {"bucket": {"name": "example"}, "object": {"key": "k", "sequencer": "01"}}}]}"#;
        assert_eq!(
            SourceWrite::from_event_json(removed.as_bytes()).expect("parsed"),
            Vec::new()
        );
    }
}
