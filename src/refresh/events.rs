//! Source changes from the events that carry S3 writes to a refresh job, and the SQS
//! partial-batch response that redelivers exactly the changes that failed.
//!
//! An S3 write reaches a job in one of these shapes, parsed with the
//! [`aws_lambda_events`] types (unknown fields are ignored: AWS adds fields to its events):
//!
//! - an EventBridge `Object Created` event (`source` `aws.s3`), as a rule delivers it; its
//!   `time` is the write's time;
//! - an S3 event notification (`{"Records": [...]}`): `ObjectCreated:*` records are used,
//!   others ignored; keys arrive form-URL-encoded and are decoded (`+` is a space); a
//!   record's `eventTime` is the write's time;
//! - an SQS batch whose message bodies are any of the above, or an SNS notification
//!   wrapping one (an S3 → SNS → SQS fan-out without raw delivery). S3's `s3:TestEvent`
//!   carries no write and is ignored.
//!
//! The time (RFC 3339 in UTC, `Z`) is required: the runner decides by it whether a
//! snapshot already contains the write ([`SourceChange::time_ms`] is its latest instant:
//! `12:00:00Z` with whole seconds is read as `12:00:00.999`).
//!
//! A [`Delivery`] remembers which SQS message each [`SourceChange`] came in, so
//! [`Delivery::batch_item_failures`] names the messages to redeliver: those whose body is
//! not one of the shapes above, and those with a change the runner did not handle (its
//! index failed, or no route contains it). Lambda deletes the others from the queue, and
//! the queue's redrive policy moves a message that keeps failing to the dead-letter queue.
//!
//! ```
//! use parqdb_catalog::refresh::Delivery;
//! use serde_json::json;
//!
//! let event = json!({
//!     "id": "17793124-05d4-b198-2fde-7ededc63b103", "version": "0",
//!     "detail-type": "Object Created", "source": "aws.s3", "account": "111122223333",
//!     "time": "2025-06-15T12:00:00Z", "region": "us-east-1", "resources": [],
//!     "detail": {"bucket": {"name": "lake"},
//!                "object": {"key": "docs/part-00042.parquet", "size": 1048576,
//!                           "sequencer": "00617F08299329D189"}}
//! });
//! let delivery = Delivery::parse(event)?;
//! assert_eq!(delivery.changes()[0].uri(), "s3://lake/docs/part-00042.parquet");
//! assert!(!delivery.is_sqs());
//! # Ok::<(), parqdb_catalog::Error>(())
//! ```

use std::collections::BTreeSet;

use aws_lambda_events::event::eventbridge::EventBridgeEvent;
use aws_lambda_events::event::s3::S3Event;
use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent};
use serde::Deserialize;
use serde_json::Value;

use super::{RefreshReport, SourceChange};
use crate::error::{Error, ErrorKind, Result};

/// The source changes of one invocation's event, and the messages they came in.
#[derive(Debug)]
pub struct Delivery {
    changes: Vec<SourceChange>,
    /// For each change, the position of its message in `messages`.
    origins: Vec<usize>,
    messages: Vec<Message>,
    sqs: bool,
}

/// One delivered message: an SQS message, or the whole event outside SQS.
#[derive(Debug)]
struct Message {
    /// The SQS message id (empty outside SQS).
    id: String,
    /// Why its body carries no usable change, if it does not.
    rejected: Option<Error>,
}

impl Delivery {
    /// Parse an invocation's event. Outside SQS, `INVALID_REQUEST` for an event that is
    /// none of the shapes of the module docs; inside an SQS batch, such a message is
    /// kept as rejected (see [`Delivery::rejected`]) and the others are used.
    pub fn parse(event: Value) -> Result<Delivery> {
        if event["Records"][0]["eventSource"] == "aws:sqs" {
            return Delivery::from_sqs(event);
        }
        let changes = changes_of(event)?;
        Ok(Delivery {
            origins: vec![0; changes.len()],
            changes,
            messages: vec![Message {
                id: String::new(),
                rejected: None,
            }],
            sqs: false,
        })
    }

    fn from_sqs(event: Value) -> Result<Delivery> {
        let batch: SqsEvent = serde_json::from_value(event)
            .map_err(|err| invalid(format!("not an SQS event: {err}")))?;
        let mut delivery = Delivery {
            changes: Vec::new(),
            origins: Vec::new(),
            messages: Vec::with_capacity(batch.records.len()),
            sqs: true,
        };
        for message in batch.records {
            let id = message.message_id.unwrap_or_default();
            let parsed = serde_json::from_str::<Value>(message.body.as_deref().unwrap_or(""))
                .map_err(|err| invalid(format!("the message body is not JSON: {err}")))
                .and_then(changes_of);
            let rejected = match parsed {
                Ok(changes) => {
                    delivery
                        .origins
                        .extend(std::iter::repeat_n(delivery.messages.len(), changes.len()));
                    delivery.changes.extend(changes);
                    None
                }
                Err(err) => Some(err),
            };
            delivery.messages.push(Message { id, rejected });
        }
        Ok(delivery)
    }

    /// The changes, in delivery order (the runner's batch positions).
    pub fn changes(&self) -> &[SourceChange] {
        &self.changes
    }

    /// Whether the event was an SQS batch (answer with [`Delivery::batch_item_failures`]).
    pub fn is_sqs(&self) -> bool {
        self.sqs
    }

    /// The SQS messages that carry no usable change: (message id, why).
    pub fn rejected(&self) -> impl Iterator<Item = (&str, &Error)> {
        self.messages
            .iter()
            .filter_map(|message| Some((message.id.as_str(), message.rejected.as_ref()?)))
    }

    /// The messages to redeliver after `report` (the runner's report on
    /// [`Delivery::changes`]): rejected messages, and messages with a change whose index
    /// failed or that no route contains. In message order, each once.
    pub fn batch_item_failures(&self, report: &RefreshReport) -> SqsBatchResponse {
        let mut failed: BTreeSet<usize> = report
            .failed_changes()
            .into_iter()
            .chain(report.unrouted.iter().copied())
            .filter_map(|change| self.origins.get(change).copied())
            .collect();
        failed.extend(
            self.messages
                .iter()
                .enumerate()
                .filter(|(_, message)| message.rejected.is_some())
                .map(|(n, _)| n),
        );
        let mut response = SqsBatchResponse::default();
        for n in failed {
            response.add_failure(self.messages[n].id.clone());
        }
        response
    }
}

/// The changes one event (not an SQS batch) carries.
fn changes_of(event: Value) -> Result<Vec<SourceChange>> {
    if event.get("Records").is_some() {
        return notification_changes(event);
    }
    if event["Type"] == "Notification"
        && let Some(message) = event["Message"].as_str()
    {
        // An SNS envelope (an SQS queue subscribed to a topic without raw delivery).
        let inner: Value = serde_json::from_str(message)
            .map_err(|err| invalid(format!("the SNS message is not JSON: {err}")))?;
        return changes_of(inner);
    }
    if event["Event"] == "s3:TestEvent" {
        return Ok(Vec::new());
    }
    // Read as written (its precision matters), before the typed parse reads it as a date.
    let time = event["time"].as_str().map(str::to_owned);
    let event: EventBridgeEvent<Value> = serde_json::from_value(event)
        .map_err(|err| invalid(format!("not an EventBridge or S3 event: {err}")))?;
    if event.source != "aws.s3" || event.detail_type != "Object Created" {
        return Err(invalid(format!(
            "expected source `aws.s3` and detail-type `Object Created`, got `{}` and `{}`",
            event.source, event.detail_type
        )));
    }
    let detail: ObjectCreatedDetail = serde_json::from_value(event.detail)
        .map_err(|err| invalid(format!("not an S3 Object Created detail: {err}")))?;
    let object = detail.object;
    let change = SourceChange::new(
        detail.bucket.name,
        object.key,
        object.sequencer.unwrap_or_default(),
        time_ms(time.as_deref(), "time")?,
    )?
    .with_version_id(object.version_id)
    .with_size(object.size);
    Ok(vec![change])
}

/// The `ObjectCreated:*` records of an S3 event notification.
fn notification_changes(event: Value) -> Result<Vec<SourceChange>> {
    // Read as written (their precision matters), before the typed parse reads them as dates.
    let times: Vec<Option<String>> = event["Records"]
        .as_array()
        .map(|records| {
            records
                .iter()
                .map(|record| record["eventTime"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    let event: S3Event = serde_json::from_value(event)
        .map_err(|err| invalid(format!("not an S3 event notification: {err}")))?;
    event
        .records
        .into_iter()
        .zip(times)
        .filter(|(record, _)| {
            record
                .event_name
                .as_deref()
                .is_some_and(|name| name.starts_with("ObjectCreated:"))
        })
        .map(|(record, time)| {
            let object = record.s3.object;
            Ok(SourceChange::new(
                record.s3.bucket.name.unwrap_or_default(),
                url_decoded(object.key.as_deref().unwrap_or_default()),
                object.sequencer.unwrap_or_default(),
                time_ms(time.as_deref(), "eventTime")?,
            )?
            .with_version_id(object.version_id)
            .with_size(object.size.and_then(|size| u64::try_from(size).ok())))
        })
        .collect()
}

/// The `detail` of an EventBridge S3 `Object Created` event (aws_lambda_events has the
/// envelope, but no type for this detail). Other fields are ignored.
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

/// An S3 event notification's key, decoded (form-URL-encoded: `+` for a space, `%XX` for
/// other bytes). The encoded key holds no raw `&` or `=`, so form parsing yields exactly
/// one name: the decoded key.
fn url_decoded(key: &str) -> String {
    url::form_urlencoded::parse(key.as_bytes())
        .next()
        .map(|(name, _)| name.into_owned())
        .unwrap_or_default()
}

/// The latest instant (Unix epoch milliseconds) an event's RFC 3339 UTC timestamp allows:
/// the stated time plus one unit of its last digit, less a millisecond (whole seconds:
/// `.999`; milliseconds or finer: the millisecond itself). `INVALID_REQUEST` naming
/// `field` if it is missing or not such a timestamp.
fn time_ms(text: Option<&str>, field: &str) -> Result<i64> {
    let text = text.ok_or_else(|| {
        invalid(format!(
            "the event has no `{field}`: the refresh orders writes by it"
        ))
    })?;
    let refused = || invalid(format!("`{field}` `{text}` is not an RFC 3339 time in UTC"));
    let stated = humantime::parse_rfc3339(text).map_err(|_| refused())?;
    let since_epoch = stated
        .duration_since(std::time::UNIX_EPOCH)
        .map_err(|_| refused())?;
    let digits = text.split_once('.').map_or(0, |(_, fraction)| {
        fraction.trim_end_matches(['Z', 'z']).len()
    });
    let resolution_ms = 10_i64.pow(3 - digits.min(3) as u32);
    i64::try_from(since_epoch.as_millis())
        .ok()
        .and_then(|ms| ms.checked_add(resolution_ms - 1))
        .ok_or_else(refused)
}

fn invalid(message: impl Into<String>) -> Error {
    Error::new(ErrorKind::InvalidRequest, message)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::refresh::{IndexRefresh, RefreshOutcome};
    use serde_json::json;

    const EVENTBRIDGE: &str = include_str!("../../examples/s3_object_created.json");
    const SQS: &str = include_str!("../../examples/s3_object_created_sqs.json");

    fn parse(text: &str) -> Result<Delivery> {
        Delivery::parse(serde_json::from_str(text).expect("json"))
    }

    #[test]
    fn times_are_read_to_their_last_instant() {
        assert_eq!(
            time_ms(Some("1970-01-01T00:00:01Z"), "time").expect("time"),
            1999
        );
        assert_eq!(
            time_ms(Some("1970-01-01T00:00:01.5Z"), "time").expect("time"),
            1599
        );
        assert_eq!(
            time_ms(Some("1970-01-01T00:00:01.250Z"), "time").expect("time"),
            1250
        );
        assert_eq!(
            time_ms(Some("1970-01-01T00:00:01.2507Z"), "time").expect("time"),
            1250
        );
        for bad in [
            None,
            Some(""),
            Some("yesterday"),
            Some("2025-06-15T12:00:00+02:00"),
        ] {
            let err = time_ms(bad, "eventTime").expect_err("refused");
            assert_eq!(err.code(), "INVALID_REQUEST", "{bad:?}");
        }
        // An event without its time carries no usable change.
        let mut event = notification("ObjectCreated:Put", "k", "0A");
        event["Records"][0]
            .as_object_mut()
            .expect("record")
            .remove("eventTime");
        assert!(Delivery::parse(event).is_err());
    }

    fn notification(name: &str, key: &str, sequencer: &str) -> Value {
        json!({"Records": [{"eventVersion": "2.1", "eventSource": "aws:s3",
            "eventTime": "2025-06-15T12:00:00.000Z", "eventName": name,
            "userIdentity": {}, "requestParameters": {}, "responseElements": {},
            "s3": {"bucket": {"name": "example"},
                   "object": {"key": key, "size": 10, "sequencer": sequencer}}}]})
    }

    fn sqs(bodies: &[String]) -> Value {
        let records: Vec<Value> = bodies
            .iter()
            .enumerate()
            .map(|(n, body)| {
                json!({"messageId": format!("m{n}"), "body": body,
                                     "eventSource": "aws:sqs", "attributes": {},
                                     "messageAttributes": {}})
            })
            .collect();
        json!({ "Records": records })
    }

    #[test]
    fn one_write_is_one_state_whatever_the_delivery() {
        let direct = parse(EVENTBRIDGE).expect("eventbridge");
        let through_sqs = parse(SQS).expect("sqs");
        assert!(through_sqs.is_sqs());
        // The SQS batch carries the same write as an EventBridge event (another event id)
        // and as an S3 notification (URL-encoded key, camelCase fields).
        assert_eq!(through_sqs.changes().len(), 2);
        let state = direct.changes()[0].state_key();
        assert_eq!(
            state,
            "s3://example/documents/part-00042.parquet#617F08299329D189"
        );
        for change in through_sqs.changes() {
            assert_eq!(change.state_key(), state, "{change:?}");
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
        let event = notification("ObjectCreated:Put", "a+b%2Fc.parquet", "0A");
        let delivery = Delivery::parse(event).expect("notification");
        assert_eq!(delivery.changes()[0].key, "a b/c.parquet");
    }

    #[test]
    fn only_object_created_notifications_are_changes() {
        let removed = notification("ObjectRemoved:Delete", "k", "01");
        assert!(
            Delivery::parse(removed)
                .expect("parsed")
                .changes()
                .is_empty()
        );
        let test_event = json!({"Service": "Amazon S3", "Event": "s3:TestEvent",
                                "Bucket": "example", "RequestId": "r", "HostId": "h"});
        assert!(
            Delivery::parse(test_event)
                .expect("parsed")
                .changes()
                .is_empty()
        );
    }

    #[test]
    fn sns_envelopes_are_opened() {
        let inner = notification("ObjectCreated:Put", "t/k.parquet", "0B").to_string();
        let envelope = json!({"Type": "Notification", "MessageId": "x", "Message": inner});
        let delivery = Delivery::parse(sqs(&[envelope.to_string()])).expect("sqs");
        assert_eq!(delivery.changes()[0].uri(), "s3://example/t/k.parquet");
    }

    #[test]
    fn other_events_are_invalid_requests_outside_sqs() {
        for event in [
            json!({"detail-type": "Object Deleted", "source": "aws.s3", "detail": {}}),
            json!({"detail-type": "Scheduled Event", "source": "aws.events", "detail": {}}),
            json!({"id": "1", "version": "0", "detail-type": "Object Created",
                   "source": "aws.s3", "account": "1", "time": "2025-06-15T12:00:00Z",
                   "region": "r", "resources": [],
                   "detail": {"bucket": {"name": ""}, "object": {"key": "k", "sequencer": "1"}}}),
            json!({"id": "1", "version": "0", "detail-type": "Object Created",
                   "source": "aws.s3", "account": "1", "time": "2025-06-15T12:00:00Z",
                   "region": "r", "resources": [],
                   "detail": {"bucket": {"name": "b"}, "object": {"key": "k"}}}),
            json!({"hello": "world"}),
            json!([]),
            json!("not an event"),
        ] {
            let err = Delivery::parse(event.clone()).expect_err("invalid");
            assert_eq!(err.code(), "INVALID_REQUEST", "{event}");
        }
    }

    #[test]
    fn a_bad_message_is_rejected_alone() {
        let good = notification("ObjectCreated:Put", "t/a.parquet", "0A").to_string();
        let delivery = Delivery::parse(sqs(&[
            good.clone(),
            "not json".into(),
            json!({"hello": 1}).to_string(),
            good,
        ]))
        .expect("sqs");
        assert_eq!(delivery.changes().len(), 2);
        let rejected: Vec<&str> = delivery.rejected().map(|(id, _)| id).collect();
        assert_eq!(rejected, ["m1", "m2"]);
        let response = delivery.batch_item_failures(&RefreshReport::default());
        let ids: Vec<&str> = response
            .batch_item_failures
            .iter()
            .map(|failure| failure.item_identifier.as_str())
            .collect();
        assert_eq!(ids, ["m1", "m2"]);
    }

    #[test]
    fn failed_and_unrouted_changes_redeliver_their_messages() {
        let body = |key: &str, seq: &str| notification("ObjectCreated:Put", key, seq).to_string();
        let delivery = Delivery::parse(sqs(&[
            body("a/1.parquet", "01"),
            body("b/1.parquet", "02"),
            body("c/1.parquet", "03"),
            body("a/2.parquet", "04"),
        ]))
        .expect("sqs");
        let index = |name: &str| {
            crate::identifier::IndexIdentifier::new(
                crate::identifier::Namespace::new(["n"]).expect("namespace"),
                name,
            )
            .expect("identifier")
        };
        let report = RefreshReport {
            indexes: vec![
                IndexRefresh {
                    index: index("a"),
                    changes: vec![0, 3],
                    newest: delivery.changes()[3].clone(),
                    outcome: RefreshOutcome::Failed {
                        code: "STORE_UNAVAILABLE".into(),
                        message: "slow".into(),
                        retryable: true,
                    },
                },
                IndexRefresh {
                    index: index("b"),
                    changes: vec![1],
                    newest: delivery.changes()[1].clone(),
                    outcome: RefreshOutcome::AlreadyPublished {
                        metadata_location: "m".into(),
                        read_start_ms: 1,
                    },
                },
            ],
            unrouted: vec![2],
            builds: 0,
            commits: 0,
        };
        let response = delivery.batch_item_failures(&report);
        let ids: Vec<&str> = response
            .batch_item_failures
            .iter()
            .map(|failure| failure.item_identifier.as_str())
            .collect();
        assert_eq!(ids, ["m0", "m2", "m3"]);
    }
}
