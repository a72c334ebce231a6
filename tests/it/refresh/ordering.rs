//! Issue 28: whether a write is already in a snapshot is decided soundly across object
//! keys. S3's `sequencer` orders the events of one key only; a later write to another key
//! may carry a numerically lower sequencer (MinIO stamps unsynchronised clocks, and S3
//! documents no order across keys). After a burst has been built and published, such a
//! write must still be built and published, not skipped as "older than the published
//! position" — on local files and on the S3-compatible server. The events go through the
//! same parsing as the `refresh` function's (S3 event notifications with their
//! `eventTime`).
#![allow(clippy::disallowed_methods)] // tests read the wall clock: event times are S3's clock

use std::time::{Duration, SystemTime};

use super::refresh_burst::{catalog, docs};
use parqdb_catalog::Catalog;
use parqdb_catalog::Publisher;
use parqdb_catalog::refresh::{
    Delivery, PlaceholderBuilder, RefreshOutcome, RefreshReport, RefreshRunner, Routes,
};
use serde_json::{Value, json};

/// An S3 event notification of one `ObjectCreated:Put` (as S3 sends it, `eventTime` with
/// milliseconds).
fn put(key: &str, sequencer: &str, time: SystemTime) -> Value {
    json!({"Records": [{"eventVersion": "2.1", "eventSource": "aws:s3",
        "awsRegion": "us-east-1",
        "eventTime": humantime::format_rfc3339_millis(time).to_string(),
        "eventName": "ObjectCreated:Put",
        "userIdentity": {"principalId": "writer"}, "requestParameters": {},
        "responseElements": {},
        "s3": {"s3SchemaVersion": "1.0", "configurationId": "refresh",
               "bucket": {"name": "lake", "arn": "arn:aws:s3:::lake"},
               "object": {"key": key, "size": 4096, "sequencer": sequencer}}}]})
}

/// An SQS batch of `bodies` (the refresh queue's), parsed as the function parses it.
fn batch(bodies: &[Value]) -> Delivery {
    let records: Vec<Value> = bodies
        .iter()
        .enumerate()
        .map(|(n, body)| {
            json!({"messageId": format!("m{n}"), "receiptHandle": "r", "body": body.to_string(),
                   "attributes": {}, "messageAttributes": {}, "md5OfBody": "",
                   "eventSource": "aws:sqs",
                   "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:refresh",
                   "awsRegion": "us-east-1"})
        })
        .collect();
    Delivery::parse(json!({ "Records": records })).expect("an SQS batch of S3 events")
}

async fn run(runner: &RefreshRunner<PlaceholderBuilder>, bodies: &[Value]) -> RefreshReport {
    let delivery = batch(bodies);
    assert_eq!(delivery.rejected().count(), 0);
    runner.run(delivery.changes().to_vec()).await
}

async fn snapshots(catalog: &Catalog) -> usize {
    let (_, current) = Publisher::for_catalog(catalog)
        .load_current(&docs())
        .await
        .expect("the index exists");
    current.snapshots().len()
}

async fn a_later_write_with_a_lower_sequencer_is_built(catalog: Catalog) {
    let runner = RefreshRunner::new(
        Publisher::for_catalog(&catalog),
        Routes::new()
            .route("s3://lake/docs/", docs())
            .expect("route"),
        PlaceholderBuilder,
    );
    // A burst a minute ago: ten files with high sequencers, built and published once.
    let minute_ago = SystemTime::now() - Duration::from_secs(60);
    let burst: Vec<Value> = (0..10)
        .map(|n| {
            put(
                &format!("docs/part-{n:02}.parquet"),
                &format!("00FFFF00000000{n:04X}"),
                minute_ago + Duration::from_millis(n),
            )
        })
        .collect();
    let first = run(&runner, &burst).await;
    assert_eq!((first.builds, first.commits), (1, 1), "{first:?}");
    assert_eq!(snapshots(&catalog).await, 1);

    // Later (now, after that build read the table), a write to a new key whose sequencer
    // is numerically lower than every sequencer of the burst. It is not in the published
    // snapshot: it must be built and committed.
    let later = put("docs/part-new.parquet", "0000A1", SystemTime::now());
    let report = run(&runner, std::slice::from_ref(&later)).await;
    assert!(
        matches!(report.indexes[0].outcome, RefreshOutcome::Published { .. }),
        "the later write was skipped: {report:?}"
    );
    assert_eq!((report.builds, report.commits), (1, 1), "{report:?}");
    assert_eq!(snapshots(&catalog).await, 2);

    // Redelivered, it is contained; so is the whole burst, late.
    let again = run(&runner, &[later]).await;
    assert_eq!((again.builds, again.commits), (0, 0), "{again:?}");
    let late = run(&runner, &burst).await;
    assert_eq!((late.builds, late.commits), (0, 0), "{late:?}");
    assert_eq!(snapshots(&catalog).await, 2);
}

#[tokio::test]
async fn a_later_write_with_a_lower_sequencer_is_built_on_local_files() {
    a_later_write_with_a_lower_sequencer_is_built(catalog("local").await).await;
}

/// The tests on the S3-compatible server (`PARQDB_TEST_S3_ENDPOINT`): the whole suite
/// runs them, the fast tier does not (`tests/it/tiers.txt`).
mod s3 {
    use super::*;

    #[tokio::test]
    async fn a_later_write_with_a_lower_sequencer_is_built_on_the_s3_compatible_server() {
        a_later_write_with_a_lower_sequencer_is_built(catalog("s3").await).await;
    }
}
