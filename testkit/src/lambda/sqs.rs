//! The SQS side of a function driven by an event source mapping (the `refresh` binary):
//! the batch event the mapping delivers, and the messages a partial-batch response hands
//! back to the queue.

use serde_json::{Value, json};

/// An SQS batch as the event source mapping delivers it: one record per (message id, body)
/// pair, received once, from the queue `refresh`.
pub fn sqs_batch(messages: &[(&str, String)]) -> Value {
    let records: Vec<Value> = messages
        .iter()
        .map(|(id, body)| {
            json!({"messageId": id, "receiptHandle": format!("rh-{id}"), "body": body,
                   "attributes": {"ApproximateReceiveCount": "1"}, "messageAttributes": {},
                   "md5OfBody": "", "eventSource": "aws:sqs",
                   "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:refresh",
                   "awsRegion": "us-east-1"})
        })
        .collect();
    json!({ "Records": records })
}

/// The message ids of a partial-batch response's `batchItemFailures` (the messages SQS
/// delivers again); panics on any other response.
pub fn failed_ids(response: &Value) -> Vec<String> {
    response["batchItemFailures"]
        .as_array()
        .unwrap_or_else(|| panic!("not a partial-batch response: {response}"))
        .iter()
        .map(|failure| {
            failure["itemIdentifier"]
                .as_str()
                .expect("an id")
                .to_owned()
        })
        .collect()
}
