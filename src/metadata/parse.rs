//! The byte-level parsing pipeline: size cap, UTF-8, the `format-version` pre-scan, and
//! strict path-tracking deserialization.

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, DeserializeOwned, Deserializer, IgnoredAny, MapAccess, Visitor};

use super::FORMAT_VERSION;
use crate::error::{Error, ErrorKind, Result};
use crate::json;

/// The largest metadata document (or definition) accepted, in bytes: 64 MiB. Larger
/// inputs are rejected with `INVALID_INDEX_METADATA` before parsing.
#[doc(hidden)] // For the workspace's tests.
pub const MAX_METADATA_BYTES: usize = 64 * 1024 * 1024;

fn invalid(message: String) -> Error {
    Error::new(ErrorKind::InvalidIndexMetadata, message)
}

/// Check the size cap and UTF-8, and read every `-0` as the integer it is and integers
/// too large for a float as out of range (see [`normalised_numbers`]).
pub(super) fn check_text<'a>(bytes: &'a [u8], what: &str) -> Result<Cow<'a, str>> {
    if bytes.len() > MAX_METADATA_BYTES {
        return Err(invalid(format!(
            "{what}: {} bytes exceeds the {MAX_METADATA_BYTES}-byte limit",
            bytes.len()
        )));
    }
    let text = std::str::from_utf8(bytes)
        .map_err(|err| invalid(format!("{what}: not valid UTF-8: {err}")))?;
    Ok(normalised_numbers(text))
}

/// Number tokens serde_json would misread, rewritten in place (every byte offset kept, so
/// error positions are unchanged; text inside strings is left alone):
///
/// - `-0` is a valid JSON integer (RFC 8259: `int = zero / digit1-9 *DIGIT` after an
///   optional minus), equal to 0, but serde_json reads it as the float `-0.0`, which an
///   integer field would refuse: its sign is blanked out (`-0.0`, `-0e0` and exponents
///   such as `1e-0` are left alone);
/// - an integer of more than 300 digits is beyond a float's range, which serde_json reports
///   as malformed JSON without the field: it becomes `9e99` (or `-9e99`) and spaces, which
///   the integer fields report as out of range at their JSON path.
fn normalised_numbers(text: &str) -> Cow<'_, str> {
    const MAX_DIGITS: usize = 300;
    let bytes = text.as_bytes();
    let mut out: Option<Vec<u8>> = None;
    let mut in_string = false;
    let mut escaped = false;
    let mut at = 0;
    while at < bytes.len() {
        let byte = bytes[at];
        if in_string {
            match byte {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            at += 1;
            continue;
        }
        let boundary = at == 0
            || matches!(
                bytes[at - 1],
                b'[' | b',' | b':' | b' ' | b'\t' | b'\n' | b'\r'
            );
        match byte {
            b'"' => in_string = true,
            b'-' | b'0'..=b'9' if boundary => {
                let end = bytes[at..]
                    .iter()
                    .position(|b| !matches!(b, b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9'))
                    .map_or(bytes.len(), |len| at + len);
                let token = &bytes[at..end];
                let digits = token.strip_prefix(b"-").unwrap_or(token);
                let integer = !digits.is_empty() && digits.iter().all(u8::is_ascii_digit);
                if token == b"-0" {
                    out.get_or_insert_with(|| bytes.to_vec())[at] = b' ';
                } else if integer && digits.len() > MAX_DIGITS {
                    let written = out.get_or_insert_with(|| bytes.to_vec());
                    let far: &[u8] = if token[0] == b'-' { b"-9e99" } else { b"9e99" };
                    written[at..end].fill(b' ');
                    written[at..at + far.len()].copy_from_slice(far);
                }
                at = end;
                continue;
            }
            _ => {}
        }
        at += 1;
    }
    match out {
        // Only ASCII bytes replaced ASCII bytes: still UTF-8.
        Some(bytes) => Cow::Owned(String::from_utf8(bytes).unwrap_or_else(|_| text.to_owned())),
        None => Cow::Borrowed(text),
    }
}

/// Strictly deserialize one JSON document ([`crate::json::from_str`]). Data errors are
/// prefixed with their JSON path (`snapshots[0].metric: ...`, or `<what>: ...` at the
/// root); syntax errors (trailing data included) are `<what>: malformed JSON: ... at line
/// L column C`.
pub(super) fn deserialize_text<T: DeserializeOwned>(text: &str, what: &str) -> Result<T> {
    json::from_str(text).map_err(|err| {
        let inner = err.inner();
        match err.path() {
            // Syntax errors and EOF: the line and column locate the problem.
            _ if err.is_syntax() => invalid(format!("{what}: malformed JSON: {inner}")),
            None => invalid(format!("{what}: {inner}")),
            Some(path) => invalid(format!("{path}: {inner}")),
        }
    })
}

/// Size cap, UTF-8 and strict deserialization of a whole document.
pub(crate) fn parse_strict<T: DeserializeOwned>(bytes: &[u8], what: &str) -> Result<T> {
    deserialize_text(&check_text(bytes, what)?, what)
}

/// The pre-scan: if the document starts with a JSON object whose `format-version` can be
/// read, reject any `int` other than 1 with `UNSUPPORTED_FORMAT_VERSION`, before any
/// other rule is checked. A non-integer, and an integer outside the `int` range (which the
/// metadata spec calls an out-of-range integer, invalid like any other), is
/// `INVALID_INDEX_METADATA`. A document the scan cannot read (not an object, malformed)
/// is left to the full parse.
pub(super) fn check_format_version(text: &str) -> Result<()> {
    let mut deserializer = serde_json::Deserializer::from_str(text);
    let Ok(FormatProbe(Some(value))) = deserializer.deserialize_map(FormatProbeVisitor) else {
        return Ok(());
    };
    match &value {
        serde_json::Value::Number(number) if number.as_i64() == Some(FORMAT_VERSION.into()) => {
            Ok(())
        }
        serde_json::Value::Number(number)
            if number.as_i64().is_some_and(|n| i32::try_from(n).is_ok()) =>
        {
            Err(Error::new(
                ErrorKind::UnsupportedFormatVersion,
                format!(
                    "format-version: {number} is not supported (this reader supports {FORMAT_VERSION})"
                ),
            ))
        }
        serde_json::Value::Number(number) if number.is_i64() || number.is_u64() => {
            Err(invalid(format!(
                "format-version: {number} is out of range for an int (a signed 32-bit integer)"
            )))
        }
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
        use ErrorKind::{InvalidIndexMetadata as Invalid, UnsupportedFormatVersion as Unsupported};
        for (text, expected) in [
            (r#"{"format-version": 1, "x": [1, {"y": null}]}"#, None),
            (r#"{"x": 1}"#, None),
            (r#"{"bogus": [], "format-version": 2}"#, Some(Unsupported)),
            (r#"{"format-version": 0}"#, Some(Unsupported)),
            (r#"{"format-version": -1}"#, Some(Unsupported)),
            (r#"{"format-version": 18446744073709551615}"#, Some(Invalid)),
            (r#"{"format-version": 2147483648}"#, Some(Invalid)),
            (r#"{"format-version": -2147483649}"#, Some(Invalid)),
            (r#"{"format-version": 2147483647}"#, Some(Unsupported)),
            (r#"{"format-version": -2147483648}"#, Some(Unsupported)),
            (r#"{"format-version": 2} trailing"#, Some(Unsupported)),
            (r#"{"format-version": "1"}"#, Some(Invalid)),
            (r#"{"format-version": 1.0}"#, Some(Invalid)),
            (r#"{"format-version": null}"#, Some(Invalid)),
            // Unreadable documents are left to the full parse.
            (r#"[{"format-version": 2}]"#, None),
            (r#"{"format-version": 2, "format-version": 2}"#, None),
            (r#"{"format-version": 2"#, None),
        ] {
            assert_eq!(kind(text), expected, "{text}");
        }
    }

    #[test]
    fn negative_zero_is_an_integer() {
        let read = |text: &str| normalised_numbers(text).into_owned();
        assert_eq!(read(r#"{"a": -0}"#), r#"{"a":  0}"#);
        assert_eq!(read(r#"[-0,-0 ,-0]"#), r#"[ 0, 0 , 0]"#);
        assert_eq!(read("-0"), " 0");
        // Not the integer -0: left alone.
        for text in [
            r#"{"a": -0.0}"#,
            r#"{"a": -0e0}"#,
            r#"{"a": -0E1}"#,
            r#"{"a": 1e-0}"#,
            r#"{"a": -01}"#,
            r#"{"a": "-0"}"#,
            r#"{"a": "x\" -0"}"#,
            r#"{"a\\": -1}"#,
        ] {
            assert_eq!(read(text), text);
        }
        // An escaped backslash ends before the closing quote: the string ends there.
        assert_eq!(read(r#"{"a\\": -0}"#), r#"{"a\\":  0}"#);
        let text = check_text(br#"{"format-version": -0}"#, "doc").expect("text");
        assert_eq!(kind(&text), Some(ErrorKind::UnsupportedFormatVersion));
    }

    #[test]
    fn size_cap_and_utf8() {
        let big = vec![b' '; MAX_METADATA_BYTES + 1];
        let err = check_text(&big, "doc").expect_err("too big");
        assert!(err.message().contains("limit"), "{}", err.message());
        assert!(check_text(b"{\"a\": \"\xff\"}", "doc").is_err());
        assert_eq!(check_text(b"{}", "doc").ok().as_deref(), Some("{}"));
    }
}
