//! An event-driven refresh job: when an object lands in the source table's S3 prefix,
//! rebuild the index and publish the successor through the [`Publisher`].
//!
//! The trigger is an S3 `Object Created` event as EventBridge delivers it:
//!
//! ```json
//! {"id": "17793124-05d4-b198-2fde-7ededc63b103", "detail-type": "Object Created",
//!  "source": "aws.s3", "time": "2025-06-15T12:00:00Z",
//!  "detail": {"bucket": {"name": "example"},
//!             "object": {"key": "documents/part-00042.parquet", "size": 1048576,
//!                        "sequencer": "00617F08299329D189"}}}
//! ```
//!
//! The job
//! 1. derives the source table state from the event (`s3://<bucket>/<key's directory>/`,
//!    plus the object that changed it) and an idempotency key (the event `id`, else the
//!    object key and sequencer), since EventBridge and Lambda deliver at least once;
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
//! cargo run --example refresh_on_s3_event -- examples/s3_object_created.json   # replay: "already-published": true
//! cargo run --example refresh_on_s3_event -- --namespace docs --name embeddings event.json
//! ```
//!
//! It prints the publication as JSON (`metadata-location`, `snapshot-id`,
//! `sequence-number`, `attempts`, `already-published`), or the error as
//! `{"error": CODE, "message": ...}` on stderr with exit status 1.

use std::collections::BTreeMap;
use std::process::ExitCode;

use bytes::Bytes;
use clap::Parser;
use parqdb_catalog::config::CatalogConfig;
use parqdb_catalog::metadata::{
    IndexTableDefinition, ProviderDefinition, SnapshotContents, TableDefinition,
};
use parqdb_catalog::publish::{IDEMPOTENCY_KEY, Published, Publisher, find_published};
use parqdb_catalog::{Error, ErrorKind, IndexIdentifier, Namespace, Result};
use serde::Deserialize;
use uuid::Uuid;

/// The index-table roles of the `ivf` family.
const ROLES: [&str; 2] = ["ivf_centroids", "ivf_postings"];

/// Refresh an index from an S3 `Object Created` event.
#[derive(Debug, Parser)]
struct Args {
    /// The event JSON file (`-` for stdin).
    event: String,
    /// Namespace segment of the index (repeatable).
    #[arg(long = "namespace", default_values_t = ["examples".to_owned()])]
    namespace: Vec<String>,
    /// Index name.
    #[arg(long, default_value = "documents_embedding")]
    name: String,
}

/// The fields of an EventBridge S3 `Object Created` event the job uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectCreated {
    /// The EventBridge event id (unique per event, repeated on redelivery).
    pub id: Option<String>,
    /// The bucket.
    pub bucket: String,
    /// The object key.
    pub key: String,
    /// The object size in bytes, if given.
    pub size: Option<u64>,
    /// S3's per-key ordering token, if given.
    pub sequencer: Option<String>,
}

impl ObjectCreated {
    /// Parse an EventBridge event; `INVALID_REQUEST` unless it is an S3 `Object Created`
    /// event with a bucket name and an object key. Other EventBridge fields are ignored.
    pub fn from_json_slice(bytes: &[u8]) -> Result<ObjectCreated> {
        #[derive(Deserialize)]
        struct Event {
            id: Option<String>,
            #[serde(rename = "detail-type")]
            detail_type: String,
            source: String,
            detail: Detail,
        }
        #[derive(Deserialize)]
        struct Detail {
            bucket: Bucket,
            object: Object,
        }
        #[derive(Deserialize)]
        struct Bucket {
            name: String,
        }
        #[derive(Deserialize)]
        struct Object {
            key: String,
            size: Option<u64>,
            sequencer: Option<String>,
        }
        let invalid = |message: String| Error::new(ErrorKind::InvalidRequest, message);
        let event: Event = serde_json::from_slice(bytes)
            .map_err(|err| invalid(format!("not an S3 Object Created event: {err}")))?;
        if event.source != "aws.s3" || event.detail_type != "Object Created" {
            return Err(invalid(format!(
                "expected source `aws.s3` and detail-type `Object Created`, got `{}` and `{}`",
                event.source, event.detail_type
            )));
        }
        if event.detail.bucket.name.is_empty() || event.detail.object.key.is_empty() {
            return Err(invalid(
                "the bucket name and object key must not be empty".into(),
            ));
        }
        Ok(ObjectCreated {
            id: event.id.filter(|id| !id.is_empty()),
            bucket: event.detail.bucket.name,
            key: event.detail.object.key,
            size: event.detail.object.size,
            sequencer: event.detail.object.sequencer,
        })
    }

    /// The key that identifies this event across redeliveries.
    pub fn idempotency_key(&self) -> String {
        match &self.id {
            Some(id) => format!("eventbridge:{id}"),
            None => format!(
                "s3://{}/{}#{}",
                self.bucket,
                self.key,
                self.sequencer.as_deref().unwrap_or("-")
            ),
        }
    }

    /// The source table state after this event: the key's directory as a parquet table,
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

/// Build the placeholder index for `event` under `indexes/<index_uuid>/<build-id>/` and
/// return the snapshot contents that name it.
pub async fn build_index(
    publisher: &Publisher,
    index_uuid: Uuid,
    event: &ObjectCreated,
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

/// The refresh job for one event: publish a successor built for it, at most once per
/// event (see the module docs). Creates the namespace and the index on first use.
pub async fn refresh(
    publisher: &Publisher,
    identifier: &IndexIdentifier,
    event: &ObjectCreated,
) -> Result<Published> {
    let key = event.idempotency_key();
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

async fn run(args: Args) -> Result<Published> {
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
    let event = ObjectCreated::from_json_slice(&bytes)?;
    let identifier = IndexIdentifier::new(Namespace::new(args.namespace)?, args.name)?;
    let catalog = CatalogConfig::from_env().build().await?;
    let publisher = Publisher::for_catalog(&catalog);
    refresh(&publisher, &identifier, &event).await
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
