//! Object names: the one spelling of an object that validation, reachability, listing and
//! deletion share.
//!
//! A warehouse object's **name** is its key below the warehouse root, exactly as an object
//! store lists it and as any engine writing the file spells it: the raw UTF-8 segments
//! joined by `/`, with no percent-encoding applied or removed. `indexes/ü b/~x/part-0` is
//! the name of the object another engine wrote at `<root>/indexes/ü b/~x/part-0`. A
//! directory prefix (`indexes/a/1/ivf_postings/`) has the name of the directory without
//! the trailing `/` and covers everything below it on a segment boundary.
//!
//! A name has no empty segment, no `.` or `..` segment and no control character (so it
//! is always a valid [`object_store::path::Path`] when parsed, never re-encoded).
//!
//! A metadata **location** is the absolute URI of a name: the warehouse root URI followed
//! by the name's segments, each percent-encoded as the `url` crate encodes a path
//! segment. [`Warehouse::relative`](super::Warehouse::relative) accepts any spelling of a
//! URI inside the root (`caf%C3%A9.json`, `caf%c3%a9.json`, `café.json`) and returns the
//! name; [`Warehouse::absolute`](super::Warehouse::absolute) returns the one canonical URI.
//!
//! Objects written by earlier versions of this crate went through `object_store`'s
//! `PathPart` encoding (`~` became `%7E`). [`aliases`] gives those other spellings of a
//! listed name so the collector keeps an object when *any* spelling of it is reachable:
//! when unsure whether two names denote the same object, keep it.

use object_store::path::PathPart;
use percent_encoding::percent_decode_str;

/// Why a string is not a name.
pub(crate) type NameError = String;

/// The name of a warehouse-relative location (`indexes/a/1/ivf_postings/` →
/// `indexes/a/1/ivf_postings`), or why it is none.
pub fn object_name(location: &str) -> Result<String, String> {
    if location.is_empty() {
        return Err("an object name must not be empty".to_owned());
    }
    if location.starts_with('/') {
        return Err(format!(
            "`{location}` must be relative to the warehouse root (no leading `/`)"
        ));
    }
    let trimmed = location.strip_suffix('/').unwrap_or(location);
    for segment in trimmed.split('/') {
        check_segment(segment).map_err(|why| format!("`{location}`: {why}"))?;
    }
    Ok(trimmed.to_owned())
}

/// Check one decoded name segment.
pub(crate) fn check_segment(segment: &str) -> Result<(), NameError> {
    match segment {
        "" => Err("a name must not have an empty segment".to_owned()),
        "." | ".." => Err("a name must not have a `.` or `..` segment".to_owned()),
        _ if segment.chars().any(char::is_control) => {
            Err("a name must not contain control characters".to_owned())
        }
        // XML 1.0 cannot carry them, so an S3 batch delete (an XML body) naming one fails
        // whole, for every key of the batch (GC round 95, F1).
        _ if segment.contains(['\u{FFFE}', '\u{FFFF}']) => {
            Err("a name must not contain the noncharacters U+FFFE or U+FFFF".to_owned())
        }
        _ => Ok(()),
    }
}

/// Decode one percent-encoded URI path segment into a name segment: valid UTF-8, and no
/// escaped `/` (which would change the segment structure).
pub(crate) fn decode_segment(encoded: &str) -> Result<String, NameError> {
    let decoded = percent_decode_str(encoded)
        .decode_utf8()
        .map_err(|_| format!("the segment `{encoded}` does not decode to UTF-8"))?;
    if decoded.contains('/') {
        return Err(format!(
            "the segment `{encoded}` escapes a `/`; escaped separators are not allowed"
        ));
    }
    check_segment(&decoded).map_err(|why| format!("the segment `{encoded}`: {why}"))?;
    Ok(decoded.into_owned())
}

/// The other spellings under which an earlier writer may have stored the object `name`:
/// each segment percent-decoded, and each segment percent-encoded the way
/// `object_store`'s `PathPart` encodes it. Empty when there are none.
pub(crate) fn aliases(name: &str) -> Vec<String> {
    let mut out = Vec::new();
    if name.contains('%') {
        let decoded: Option<Vec<String>> = name
            .split('/')
            .map(|segment| decode_segment(segment).ok())
            .collect();
        if let Some(decoded) = decoded {
            out.push(decoded.join("/"));
        }
    }
    let encoded: Vec<String> = name
        .split('/')
        .map(|segment| PathPart::from(segment).as_ref().to_owned())
        .collect();
    let encoded = encoded.join("/");
    if encoded != name {
        out.push(encoded);
    }
    out.retain(|alias| alias != name && object_name(alias).is_ok());
    out.dedup();
    out
}

/// Whether `name` is `ancestor` or lies below it on a segment boundary.
pub(crate) fn is_within(name: &str, ancestor: &str) -> bool {
    name == ancestor
        || name
            .strip_prefix(ancestor)
            .is_some_and(|rest| rest.starts_with('/'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_raw_segments_without_a_trailing_slash() {
        assert_eq!(
            object_name("indexes/a/1/ivf_postings/").as_deref(),
            Ok("indexes/a/1/ivf_postings")
        );
        assert_eq!(
            object_name("indexes/ü b/~x/").as_deref(),
            Ok("indexes/ü b/~x")
        );
        for raw in ["indexes/ü/x", "a/~b/[c]/d e", "a/%7E/x", "a/b:c", "a/...x"] {
            assert_eq!(object_name(raw).as_deref(), Ok(raw), "{raw}");
        }
        for bad in [
            "",
            "/a",
            "a//b",
            "a/./b",
            "a/../b",
            "..",
            "a/\u{1}b",
            "a//",
            "a/x\u{FFFF}.parquet",
            "a/\u{FFFE}",
        ] {
            assert!(object_name(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn segments_decode_without_escaping_separators() {
        assert_eq!(decode_segment("caf%C3%A9.json").as_deref(), Ok("café.json"));
        assert_eq!(decode_segment("caf%c3%a9.json").as_deref(), Ok("café.json"));
        assert_eq!(decode_segment("a%20b").as_deref(), Ok("a b"));
        assert_eq!(decode_segment("100%25").as_deref(), Ok("100%"));
        for bad in ["a%2Fb", "a%2fb", "%2e%2e", "%2E", "", "%FF", "a%00b"] {
            assert!(decode_segment(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn aliases_are_the_other_spellings() {
        assert!(aliases("indexes/a/1/part-0.parquet").is_empty());
        assert_eq!(aliases("indexes/a~b/x"), vec!["indexes/a%7Eb/x".to_owned()]);
        assert_eq!(
            aliases("indexes/a%7Eb/x"),
            vec!["indexes/a~b/x".to_owned(), "indexes/a%257Eb/x".to_owned()]
        );
        assert_eq!(aliases("indexes/ü"), vec!["indexes/%C3%BC".to_owned()]);
        assert!(
            aliases("indexes/%2Fx")
                .iter()
                .all(|alias| !alias.contains("//"))
        );
    }

    #[test]
    fn within_is_on_segment_boundaries() {
        assert!(is_within("indexes/a/1", "indexes/a"));
        assert!(is_within("indexes/a", "indexes/a"));
        assert!(!is_within("indexes/ab", "indexes/a"));
    }
}
