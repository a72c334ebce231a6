//! Source changes: one S3 write to a source table, when S3 says it happened, and the order
//! S3 gives the writes of one key.

use std::cmp::Ordering;
use std::fmt;

use serde::Serialize;

use crate::error::{Error, ErrorKind, Result};

/// One write to a source table, as an S3 event reports it (EventBridge `Object Created`,
/// an S3 notification record, or either inside an SQS message).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct SourceChange {
    /// The bucket.
    pub bucket: String,
    /// The object key, decoded (S3 notifications URL-encode it; EventBridge does not).
    pub key: String,
    /// S3's ordering token for the writes of this key: a hexadecimal string, greater for a
    /// later write of the same key. It orders nothing across keys.
    pub sequencer: String,
    /// When S3 finished the write, in Unix epoch milliseconds: the latest instant the
    /// event's timestamp allows (an S3 notification's `eventTime` has milliseconds, an
    /// EventBridge event's `time` whole seconds, read as the second's last millisecond).
    /// S3's clock, not the reader's: see "Ordering" in the [module docs](super).
    pub time_ms: i64,
    /// The object's version id, if the bucket is versioned.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version_id: Option<String>,
    /// The object's size in bytes, if the event gives it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
}

impl SourceChange {
    /// A write to `bucket`/`key` that S3 finished at `time_ms` (Unix epoch milliseconds,
    /// S3's clock); `INVALID_REQUEST` for an empty bucket or key, a sequencer that is not a
    /// non-empty hexadecimal string (it orders the writes of one key), or a negative time.
    pub fn new(
        bucket: impl Into<String>,
        key: impl Into<String>,
        sequencer: impl Into<String>,
        time_ms: i64,
    ) -> Result<SourceChange> {
        let change = SourceChange {
            bucket: bucket.into(),
            key: key.into(),
            sequencer: sequencer.into(),
            time_ms,
            version_id: None,
            size: None,
        };
        let invalid = |why: String| Error::new(ErrorKind::InvalidRequest, why);
        if change.bucket.is_empty() || change.key.is_empty() {
            return Err(invalid(
                "a source change needs a bucket name and an object key".into(),
            ));
        }
        if time_ms < 0 {
            return Err(invalid(format!(
                "the time of a source change is before 1970 ({time_ms} ms)"
            )));
        }
        SourcePosition::parse(&change.sequencer)?;
        Ok(change)
    }

    /// With the object's version id.
    pub(crate) fn with_version_id(mut self, version_id: Option<String>) -> Self {
        self.version_id = version_id.filter(|id| !id.is_empty() && id != "null");
        self
    }

    /// With the object's size.
    pub(crate) fn with_size(mut self, size: Option<u64>) -> Self {
        self.size = size;
        self
    }

    /// `s3://<bucket>/<key>`.
    pub fn uri(&self) -> String {
        format!("s3://{}/{}", self.bucket, self.key)
    }

    /// Where this change is in S3's order of the writes of its key (comparable only with
    /// the position of a change of the same bucket and key: [`SourceChange::same_object`]).
    pub(crate) fn position(&self) -> SourcePosition {
        // Checked in `new`; a hand-built change with a bad sequencer sorts first.
        SourcePosition::parse(&self.sequencer).unwrap_or(SourcePosition(String::new()))
    }

    /// Whether `other` is a write of the same object (bucket and key), so that their
    /// positions are ordered.
    pub(crate) fn same_object(&self, other: &SourceChange) -> bool {
        self.bucket == other.bucket && self.key == other.key
    }

    /// The idempotency key of the write: the write itself
    /// (`s3://<bucket>/<key>#<sequencer>`), never the delivery's id (an EventBridge event
    /// id or an SQS message id differ between two deliveries of one write).
    #[doc(hidden)] // For the refresh function's handler.
    pub fn state_key(&self) -> String {
        format!("{}#{}", self.uri(), self.position().hex())
    }
}

/// A position in S3's order of the writes of one object key: a sequencer compared as a
/// hexadecimal number (`"00A"` equals `"a"`, and `"100"` is after `"FF"`). Its text form
/// ([`SourcePosition::as_str`]) is `<digits:03>:<HEX>`, which sorts as the numbers do.
///
/// S3 documents the sequencer as ordering the events of **one key** only: across keys it
/// says nothing (other S3-compatible servers use unsynchronised timestamps). The runner
/// compares positions only between changes of the same object; whether a write is in a
/// snapshot is decided by time (see "Ordering" in the [module docs](super)).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
#[serde(transparent)]
pub(crate) struct SourcePosition(String);

/// Longest sequencer accepted (S3's are 18 hexadecimal digits).
const MAX_SEQUENCER_DIGITS: usize = 256;

impl SourcePosition {
    /// Parse a sequencer; `INVALID_REQUEST` unless it is 1 to 256 hexadecimal digits.
    pub fn parse(sequencer: &str) -> Result<SourcePosition> {
        if sequencer.is_empty()
            || sequencer.len() > MAX_SEQUENCER_DIGITS
            || !sequencer.bytes().all(|b| b.is_ascii_hexdigit())
        {
            return Err(Error::new(
                ErrorKind::InvalidRequest,
                format!(
                    "sequencer `{}` is not a hexadecimal string of 1 to {MAX_SEQUENCER_DIGITS} digits; the runner orders source changes by it",
                    sequencer.chars().take(64).collect::<String>()
                ),
            ));
        }
        let digits = sequencer.trim_start_matches('0').to_ascii_uppercase();
        Ok(SourcePosition(format!("{:03}:{digits}", digits.len())))
    }

    /// Read a position back from its text form; `None` if it is not one (the tests' check
    /// that the text form is canonical).
    #[cfg(test)]
    fn from_text(text: &str) -> Option<SourcePosition> {
        let (digits, hex) = text.split_once(':')?;
        let parsed = SourcePosition::parse(if hex.is_empty() { "0" } else { hex }).ok()?;
        (digits.len() == 3 && parsed.0 == text).then_some(parsed)
    }

    /// The text form, which sorts as the positions do.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The sequencer without leading zeros, upper case (`0` for zero).
    pub fn hex(&self) -> &str {
        match self.0.split_once(':') {
            Some((_, "")) | None => "0",
            Some((_, hex)) => hex,
        }
    }
}

impl Ord for SourcePosition {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0.cmp(&other.0)
    }
}

impl PartialOrd for SourcePosition {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl fmt::Display for SourcePosition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn sequencers_compare_as_hexadecimal_numbers() {
        let p = |s: &str| SourcePosition::parse(s).expect("sequencer");
        assert_eq!(p("00A"), p("a"));
        assert!(p("100") > p("FF"));
        assert!(p("0061F08299329D189") < p("0061F08299329D18A"));
        assert_eq!(p("0").hex(), "0");
        assert_eq!(SourcePosition::from_text(p("00ab").as_str()), Some(p("AB")));
        for bad in ["", "xyz", "12 3", "-1"] {
            assert!(SourcePosition::parse(bad).is_err(), "{bad}");
        }
        assert_eq!(SourcePosition::from_text("2:AB"), None);
        assert_eq!(SourcePosition::from_text("002:0AB"), None);
    }

    #[test]
    fn the_state_key_names_the_write_not_the_delivery() {
        let change = SourceChange::new("b", "t/part-1.parquet", "00061F0A", 0).expect("change");
        assert_eq!(change.state_key(), "s3://b/t/part-1.parquet#61F0A");
        assert!(SourceChange::new("", "k", "1", 0).is_err());
        assert!(SourceChange::new("b", "k", "not-hex", 0).is_err());
        assert!(SourceChange::new("b", "k", "1", -1).is_err());
    }

    proptest! {
        #[test]
        fn text_order_is_numeric_order(a in 0u128.., b in 0u128.., pad_a in 0usize..4, pad_b in 0usize..4) {
            let pa = SourcePosition::parse(&format!("{}{a:x}", "0".repeat(pad_a))).expect("a");
            let pb = SourcePosition::parse(&format!("{}{b:X}", "0".repeat(pad_b))).expect("b");
            prop_assert_eq!(pa.cmp(&pb), a.cmp(&b));
            prop_assert_eq!(SourcePosition::from_text(pa.as_str()), Some(pa.clone()));
        }
    }
}
