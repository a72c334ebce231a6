//! The byte-level parsing pipeline: size cap, UTF-8, the `format-version` pre-scan, and
//! strict path-tracking deserialization.

use std::fmt;

use serde::de::{self, DeserializeOwned, Deserializer, IgnoredAny, MapAccess, Visitor};

use super::FORMAT_VERSION;
use crate::{Error, ErrorKind, Result};

/// The largest metadata document (or definition) accepted, in bytes: 64 MiB. Larger
/// inputs are rejected with `INVALID_INDEX_METADATA` before parsing.
pub const MAX_METADATA_BYTES: usize = 64 * 1024 * 1024;

fn invalid(message: String) -> Error {
    Error::new(ErrorKind::InvalidIndexMetadata, message)
}

/// Check the size cap and UTF-8.
pub(super) fn check_text<'a>(bytes: &'a [u8], what: &str) -> Result<&'a str> {
    if bytes.len() > MAX_METADATA_BYTES {
        return Err(invalid(format!(
            "{what}: {} bytes exceeds the {MAX_METADATA_BYTES}-byte limit",
            bytes.len()
        )));
    }
    std::str::from_utf8(bytes).map_err(|err| invalid(format!("{what}: not valid UTF-8: {err}")))
}

/// Strictly deserialize one JSON document. Data errors are prefixed with their JSON path
/// (`snapshots[0].metric: ...`, or `<what>: ...` at the root); syntax errors are
/// `<what>: malformed JSON: ... at line L column C`.
pub(super) fn deserialize_text<T: DeserializeOwned>(text: &str, what: &str) -> Result<T> {
    let mut deserializer = serde_json::Deserializer::from_str(text);
    let value = serde_path_to_error::deserialize(&mut deserializer).map_err(|err| {
        let path = err.path().to_string();
        let inner = err.into_inner();
        if !inner.is_data() {
            // Syntax errors and EOF: the line and column locate the problem.
            invalid(format!("{what}: malformed JSON: {inner}"))
        } else if path == "." {
            invalid(format!("{what}: {inner}"))
        } else {
            invalid(format!("{path}: {inner}"))
        }
    })?;
    deserializer
        .end()
        .map_err(|err| invalid(format!("{what}: malformed JSON: {err}")))?;
    Ok(value)
}

/// Size cap, UTF-8 and strict deserialization of a whole document.
pub(crate) fn parse_strict<T: DeserializeOwned>(bytes: &[u8], what: &str) -> Result<T> {
    deserialize_text(check_text(bytes, what)?, what)
}

/// The pre-scan: if the document starts with a JSON object whose `format-version` can be
/// read, reject any integer other than 1 with `UNSUPPORTED_FORMAT_VERSION` and any
/// non-integer with `INVALID_INDEX_METADATA`, before any other rule is checked. A
/// document the scan cannot read (not an object, malformed) is left to the full parse.
pub(super) fn check_format_version(text: &str) -> Result<()> {
    let mut deserializer = serde_json::Deserializer::from_str(text);
    let Ok(FormatProbe(Some(value))) = deserializer.deserialize_map(FormatProbeVisitor) else {
        return Ok(());
    };
    match &value {
        serde_json::Value::Number(number) if number.as_i64() == Some(FORMAT_VERSION.into()) => {
            Ok(())
        }
        serde_json::Value::Number(number) if number.is_i64() || number.is_u64() => Err(Error::new(
            ErrorKind::UnsupportedFormatVersion,
            format!(
                "format-version: {number} is not supported (this reader supports {FORMAT_VERSION})"
            ),
        )),
        other => Err(invalid(format!(
            "format-version: expected the int {FORMAT_VERSION}, got {other}"
        ))),
    }
}

struct FormatProbe(Option<serde_json::Value>);

struct FormatProbeVisitor;

impl<'de> Visitor<'de> for FormatProbeVisitor {
    type Value = FormatProbe;

    fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<FormatProbe, A::Error> {
        let mut found = None;
        while let Some(key) = map.next_key::<String>()? {
            if key == "format-version" {
                if found.is_some() {
                    return Err(de::Error::duplicate_field("format-version"));
                }
                found = Some(map.next_value::<serde_json::Value>()?);
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(FormatProbe(found))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind(text: &str) -> Option<ErrorKind> {
        check_format_version(text).err().map(|err| err.kind())
    }

    #[test]
    fn prescan_decides_format_version_first() {
        assert_eq!(
            kind(r#"{"format-version": 1, "x": [1, {"y": null}]}"#),
            None
        );
        assert_eq!(kind(r#"{"x": 1}"#), None);
        assert_eq!(
            kind(r#"{"bogus": [], "format-version": 2}"#),
            Some(ErrorKind::UnsupportedFormatVersion)
        );
        assert_eq!(
            kind(r#"{"format-version": 0}"#),
            Some(ErrorKind::UnsupportedFormatVersion)
        );
        assert_eq!(
            kind(r#"{"format-version": -1}"#),
            Some(ErrorKind::UnsupportedFormatVersion)
        );
        assert_eq!(
            kind(r#"{"format-version": 18446744073709551615}"#),
            Some(ErrorKind::UnsupportedFormatVersion)
        );
        assert_eq!(
            kind(r#"{"format-version": 2} trailing"#),
            Some(ErrorKind::UnsupportedFormatVersion)
        );
        assert_eq!(
            kind(r#"{"format-version": "1"}"#),
            Some(ErrorKind::InvalidIndexMetadata)
        );
        assert_eq!(
            kind(r#"{"format-version": 1.0}"#),
            Some(ErrorKind::InvalidIndexMetadata)
        );
        assert_eq!(
            kind(r#"{"format-version": null}"#),
            Some(ErrorKind::InvalidIndexMetadata)
        );
        // Unreadable documents are left to the full parse.
        assert_eq!(kind(r#"[{"format-version": 2}]"#), None);
        assert_eq!(kind(r#"{"format-version": 2, "format-version": 2}"#), None);
        assert_eq!(kind(r#"{"format-version": 2"#), None);
    }

    #[test]
    fn size_cap_and_utf8() {
        let big = vec![b' '; MAX_METADATA_BYTES + 1];
        let err = check_text(&big, "doc").expect_err("too big");
        assert!(err.message().contains("limit"), "{}", err.message());
        assert!(check_text(b"{\"a\": \"\xff\"}", "doc").is_err());
        assert_eq!(check_text(b"{}", "doc").ok(), Some("{}"));
    }
}
