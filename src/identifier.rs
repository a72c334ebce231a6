//! Index identifiers and their storage-key codec (what [`IndexIdentifier`] documents).
//!
//! # Key encoding
//! Each segment is encoded byte-wise: `a-z`, `0-9`, `_` and `-` stand for themselves, every
//! other byte is `~` followed by two lowercase hex digits. The output alphabet has no upper
//! case letters, no `.`, no `/` and no `=`, so encodings are stable on case-insensitive file
//! systems, can never be `.` or `..`, and leave `/` and `=` free as structure:
//!
//! | record                   | key                                   |
//! |--------------------------|---------------------------------------|
//! | namespace `[a, b]`       | `n/a/=b` (parent segments, then `=leaf`) |
//! | index `[a, b].x`         | `i/a/b/=x`                            |
//! | children of `[a]`        | prefix `n/a/=`                        |
//! | indexes in `[a, b]`      | prefix `i/a/b/=`                      |
//!
//! Namespace and index keys live under different first segments and cannot collide. Every
//! segment is terminated by `/` before the `=`, so the listing prefix of `docs` (`i/docs/=`)
//! never matches an index of `docs2` (`i/docs2/=...`). Decoding is strict: only the
//! canonical encoding decodes, which makes the codec injective and reversible.
//!
//! ```
//! use parqdb_catalog::{IndexIdentifier, Namespace};
//!
//! let id = IndexIdentifier::new(Namespace::new(["Docs", "v2"])?, "embeddings")?;
//! let key = id.store_key();
//! assert_eq!(key.as_str(), "i/~44ocs/v2/=embeddings");
//! assert_eq!(IndexIdentifier::from_store_key(key.as_str())?, id);
//! # Ok::<(), parqdb_catalog::Error>(())
//! ```

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::error::{Error, ErrorKind, Result};
use crate::store::StoreKey;

/// Largest segment or name, in bytes of UTF-8.
pub(crate) const MAX_SEGMENT_BYTES: usize = 80;
/// Deepest namespace, in segments.
pub(crate) const MAX_NAMESPACE_DEPTH: usize = 16;
/// Largest namespace plus name, in bytes of UTF-8.
pub(crate) const MAX_IDENTIFIER_BYTES: usize = 255;

const INDEX_TREE: &str = "i/";
const NAMESPACE_TREE: &str = "n/";
const LEAF: char = '=';

/// An ordered, non-empty namespace.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct Namespace(Vec<String>);

impl Namespace {
    /// A validated namespace from its segments, outermost first.
    pub fn new<I, S>(segments: I) -> Result<Self>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let segments: Vec<String> = segments.into_iter().map(Into::into).collect();
        if segments.is_empty() {
            return Err(invalid("a namespace needs at least one segment"));
        }
        if segments.len() > MAX_NAMESPACE_DEPTH {
            return Err(invalid(format!(
                "a namespace has at most {MAX_NAMESPACE_DEPTH} segments, got {}",
                segments.len()
            )));
        }
        for segment in &segments {
            check_segment("a namespace segment", segment)?;
        }
        let total: usize = segments.iter().map(String::len).sum();
        if total > MAX_IDENTIFIER_BYTES {
            return Err(invalid(format!(
                "a namespace has at most {MAX_IDENTIFIER_BYTES} bytes in all, got {total}"
            )));
        }
        Ok(Namespace(segments))
    }

    /// The segments, outermost first.
    pub fn segments(&self) -> &[String] {
        &self.0
    }

    /// The enclosing namespace, or `None` for a top-level namespace.
    pub fn parent(&self) -> Option<Namespace> {
        (self.0.len() > 1).then(|| Namespace(self.0[..self.0.len() - 1].to_vec()))
    }

    /// A direct child namespace.
    pub fn child(&self, segment: impl Into<String>) -> Result<Namespace> {
        let mut segments = self.0.clone();
        segments.push(segment.into());
        Namespace::new(segments)
    }

    fn byte_len(&self) -> usize {
        self.0.iter().map(String::len).sum()
    }

    /// The key of this namespace's own record.
    #[doc(hidden)] // The storage-key codec, for the tests and fuzz targets.
    pub fn store_key(&self) -> StoreKey {
        let (leaf, parents) = self.0.split_last().unwrap_or((&self.0[0], &[]));
        let mut key = String::from(NAMESPACE_TREE);
        push_path(&mut key, parents);
        key.push(LEAF);
        encode_into(&mut key, leaf);
        StoreKey::from_codec(key)
    }

    /// The listing prefix of this namespace's direct child namespaces.
    #[doc(hidden)] // The storage-key codec, for the tests and fuzz targets.
    pub fn children_prefix(&self) -> StoreKey {
        let mut key = String::from(NAMESPACE_TREE);
        push_path(&mut key, &self.0);
        key.push(LEAF);
        StoreKey::from_codec(key)
    }

    /// The listing prefix of the top-level namespaces.
    pub(crate) fn top_level_prefix() -> StoreKey {
        StoreKey::from_codec(format!("{NAMESPACE_TREE}{LEAF}"))
    }

    /// The listing prefix of the indexes directly in this namespace.
    #[doc(hidden)] // The storage-key codec, for the tests and fuzz targets.
    pub fn indexes_prefix(&self) -> StoreKey {
        let mut key = String::from(INDEX_TREE);
        push_path(&mut key, &self.0);
        key.push(LEAF);
        StoreKey::from_codec(key)
    }

    /// The namespace whose record is stored under `key` (strict inverse of
    /// [`Namespace::store_key`]).
    #[doc(hidden)] // The storage-key codec, for the tests and fuzz targets.
    pub fn from_store_key(key: &str) -> Result<Namespace> {
        let rest = key
            .strip_prefix(NAMESPACE_TREE)
            .ok_or_else(|| invalid(format!("`{key}` is not a namespace key")))?;
        let (path, leaf) = split_leaf(key, rest)?;
        let mut segments = path;
        segments.push(leaf);
        Namespace::new(segments)
    }
}

impl<'de> Deserialize<'de> for Namespace {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let segments = Vec::<String>::deserialize(deserializer)?;
        Namespace::new(segments).map_err(serde::de::Error::custom)
    }
}

impl fmt::Display for Namespace {
    /// A debugging form (JSON array); the spec defines no dotted textual form.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match serde_json::to_string(&self.0) {
            Ok(text) => f.write_str(&text),
            Err(_) => Err(fmt::Error),
        }
    }
}

/// An index identifier: a namespace plus a name.
///
/// An identifier follows Iceberg's `TableIdentifier` model: an ordered [`Namespace`] of one
/// or more segments plus a name. Segments and names are non-empty UTF-8 strings compared as
/// exact code-point sequences (no normalisation, case-sensitive).
///
/// # Limits
/// Chosen so that every backend can store every valid identifier (S3 keys ≤ 1,024 bytes,
/// DynamoDB sort keys ≤ 1,024 bytes, file names ≤ 255 bytes):
/// - a segment or name is 1..=80 bytes of UTF-8;
/// - a namespace has 1..=16 segments;
/// - the namespace and name together are at most 255 bytes.
///
/// Anything else is rejected with [`ErrorKind::InvalidIdentifier`].
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct IndexIdentifier {
    namespace: Namespace,
    name: String,
}

impl IndexIdentifier {
    /// A validated identifier.
    pub fn new(namespace: Namespace, name: impl Into<String>) -> Result<Self> {
        let name = name.into();
        check_segment("an index name", &name)?;
        let total = namespace.byte_len() + name.len();
        if total > MAX_IDENTIFIER_BYTES {
            return Err(invalid(format!(
                "an identifier has at most {MAX_IDENTIFIER_BYTES} bytes in all, got {total}"
            )));
        }
        Ok(IndexIdentifier { namespace, name })
    }

    /// The namespace.
    pub fn namespace(&self) -> &Namespace {
        &self.namespace
    }

    /// The name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The key of this identifier's pointer record.
    #[doc(hidden)] // The storage-key codec, for the tests and fuzz targets.
    pub fn store_key(&self) -> StoreKey {
        let mut key = String::from(INDEX_TREE);
        push_path(&mut key, self.namespace.segments());
        key.push(LEAF);
        encode_into(&mut key, &self.name);
        StoreKey::from_codec(key)
    }

    /// The identifier whose pointer is stored under `key` (strict inverse of
    /// [`IndexIdentifier::store_key`]).
    #[doc(hidden)] // The storage-key codec, for the tests and fuzz targets.
    pub fn from_store_key(key: &str) -> Result<IndexIdentifier> {
        let rest = key
            .strip_prefix(INDEX_TREE)
            .ok_or_else(|| invalid(format!("`{key}` is not an index key")))?;
        let (path, name) = split_leaf(key, rest)?;
        IndexIdentifier::new(Namespace::new(path)?, name)
    }
}

impl<'de> Deserialize<'de> for IndexIdentifier {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Wire {
            namespace: Namespace,
            name: String,
        }
        let crate::json::Object(wire) = crate::json::Object::<Wire>::deserialize(deserializer)?;
        IndexIdentifier::new(wire.namespace, wire.name).map_err(serde::de::Error::custom)
    }
}

impl fmt::Display for IndexIdentifier {
    /// A debugging form: the namespace as a JSON array, then the name.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match serde_json::to_string(&self.name) {
            Ok(name) => write!(f, "{}.{}", self.namespace, name),
            Err(_) => Err(fmt::Error),
        }
    }
}

fn invalid(message: impl Into<String>) -> Error {
    Error::new(ErrorKind::InvalidIdentifier, message)
}

fn check_segment(what: &str, segment: &str) -> Result<()> {
    if segment.is_empty() {
        return Err(invalid(format!("{what} must not be empty")));
    }
    if segment.len() > MAX_SEGMENT_BYTES {
        return Err(invalid(format!(
            "{what} has at most {MAX_SEGMENT_BYTES} bytes, got {}",
            segment.len()
        )));
    }
    Ok(())
}

fn is_literal(byte: u8) -> bool {
    matches!(byte, b'a'..=b'z' | b'0'..=b'9' | b'_' | b'-')
}

fn push_path(key: &mut String, segments: &[String]) {
    for segment in segments {
        encode_into(key, segment);
        key.push('/');
    }
}

fn encode_into(out: &mut String, segment: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    for &byte in segment.as_bytes() {
        if is_literal(byte) {
            out.push(byte as char);
        } else {
            out.push('~');
            out.push(HEX[usize::from(byte >> 4)] as char);
            out.push(HEX[usize::from(byte & 0x0f)] as char);
        }
    }
}

/// Encode one segment (for the tests of the codec).
#[cfg(test)]
fn encode_segment(segment: &str) -> String {
    let mut out = String::with_capacity(segment.len());
    encode_into(&mut out, segment);
    out
}

/// Decode one canonically encoded segment.
pub(crate) fn decode_segment(encoded: &str) -> Result<String> {
    let bad = || invalid(format!("`{encoded}` is not a canonical key segment"));
    let bytes = encoded.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let byte = bytes[i];
        if is_literal(byte) {
            out.push(byte);
            i += 1;
        } else if byte == b'~' {
            let hex = bytes.get(i + 1..i + 3).ok_or_else(bad)?;
            let digit = |d: u8| match d {
                b'0'..=b'9' => Some(d - b'0'),
                b'a'..=b'f' => Some(d - b'a' + 10),
                _ => None,
            };
            let value = digit(hex[0]).zip(digit(hex[1])).ok_or_else(bad)?;
            let decoded = (value.0 << 4) | value.1;
            if is_literal(decoded) {
                return Err(bad());
            }
            out.push(decoded);
            i += 3;
        } else {
            return Err(bad());
        }
    }
    if out.is_empty() {
        return Err(bad());
    }
    String::from_utf8(out).map_err(|_| bad())
}

/// Split `a/b/=leaf` into decoded `[a, b]` and `leaf`.
fn split_leaf(key: &str, rest: &str) -> Result<(Vec<String>, String)> {
    let (path, leaf) = match rest.rfind(LEAF) {
        Some(at) => (&rest[..at], &rest[at + 1..]),
        None => return Err(invalid(format!("`{key}` has no leaf marker"))),
    };
    let mut segments = Vec::new();
    if !path.is_empty() {
        let path = path
            .strip_suffix('/')
            .ok_or_else(|| invalid(format!("`{key}` has a malformed path")))?;
        for part in path.split('/') {
            segments.push(decode_segment(part)?);
        }
    }
    Ok((segments, decode_segment(leaf)?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ns(segments: &[&str]) -> Namespace {
        Namespace::new(segments.iter().copied()).expect("valid namespace")
    }

    #[test]
    fn keys_have_the_documented_layout() {
        let id = IndexIdentifier::new(ns(&["a", "b"]), "x").expect("valid");
        assert_eq!(id.store_key().as_str(), "i/a/b/=x");
        assert_eq!(ns(&["a", "b"]).store_key().as_str(), "n/a/=b");
        assert_eq!(ns(&["a"]).store_key().as_str(), "n/=a");
        assert_eq!(ns(&["a"]).children_prefix().as_str(), "n/a/=");
        assert_eq!(ns(&["a", "b"]).indexes_prefix().as_str(), "i/a/b/=");
        assert_eq!(Namespace::top_level_prefix().as_str(), "n/=");
    }

    #[test]
    fn sibling_namespace_prefixes_do_not_overlap() {
        let docs = ns(&["docs"]).indexes_prefix();
        let in_docs2 = IndexIdentifier::new(ns(&["docs2"]), "x").expect("valid");
        assert!(!in_docs2.store_key().as_str().starts_with(docs.as_str()));
        let nested = IndexIdentifier::new(ns(&["docs", "deeper"]), "x").expect("valid");
        assert!(!nested.store_key().as_str().starts_with(docs.as_str()));
        let child = ns(&["docs2", "c"]).store_key();
        assert!(
            !child
                .as_str()
                .starts_with(ns(&["docs"]).children_prefix().as_str())
        );
    }

    #[test]
    fn case_dots_and_slashes_are_escaped() {
        assert_eq!(encode_segment("A"), "~41");
        assert_eq!(encode_segment("."), "~2e");
        assert_eq!(encode_segment(".."), "~2e~2e");
        assert_eq!(encode_segment("a/b"), "a~2fb");
        assert_eq!(encode_segment("é"), "~c3~a9");
        assert_ne!(
            encode_segment("a").to_lowercase(),
            encode_segment("A").to_lowercase()
        );
    }

    #[test]
    fn non_canonical_keys_are_rejected() {
        for bad in ["~61", "~4A", "~4", "A", "", "a.b", "~c3"] {
            assert!(decode_segment(bad).is_err(), "{bad} decoded");
        }
        for bad in ["x/=a", "i/a", "i/a=b", "i//=x", "n/a/b"] {
            assert!(
                IndexIdentifier::from_store_key(bad).is_err()
                    && Namespace::from_store_key(bad).is_err(),
                "{bad} decoded"
            );
        }
    }

    #[test]
    fn limits_are_enforced_with_a_typed_error() {
        let long = "x".repeat(MAX_SEGMENT_BYTES + 1);
        let at_limit = "x".repeat(MAX_SEGMENT_BYTES);
        assert!(Namespace::new([at_limit.as_str()]).is_ok());
        for result in [
            Namespace::new([long.as_str()]).map(|_| ()),
            Namespace::new(Vec::<String>::new()).map(|_| ()),
            Namespace::new([""]).map(|_| ()),
            Namespace::new(vec!["a"; MAX_NAMESPACE_DEPTH + 1]).map(|_| ()),
            IndexIdentifier::new(ns(&["a"]), "").map(|_| ()),
            IndexIdentifier::new(ns(&["a"]), long.clone()).map(|_| ()),
            IndexIdentifier::new(
                Namespace::new(vec![at_limit.as_str(); 3]).expect("240 bytes"),
                "x".repeat(16),
            )
            .map(|_| ()),
        ] {
            let err = result.expect_err("over the limit");
            assert_eq!(err.kind(), ErrorKind::InvalidIdentifier);
        }
    }

    #[test]
    fn identifiers_parse_strictly_from_json() {
        let id: IndexIdentifier =
            serde_json::from_str(r#"{"namespace": ["a", "b"], "name": "x"}"#).expect("valid");
        assert_eq!(id.name(), "x");
        assert!(
            serde_json::from_str::<IndexIdentifier>(r#"{"namespace": [], "name": "x"}"#).is_err()
        );
        assert!(
            serde_json::from_str::<IndexIdentifier>(
                r#"{"namespace": ["a"], "name": "x", "extra": 1}"#
            )
            .is_err()
        );
    }

    fn segment() -> impl Strategy<Value = String> {
        prop_oneof![
            "[a-zA-Z0-9_.~=/ -]{1,12}",
            any::<String>().prop_filter("non-empty and short", |s| {
                !s.is_empty() && s.len() <= MAX_SEGMENT_BYTES
            }),
        ]
    }

    fn identifier() -> impl Strategy<Value = IndexIdentifier> {
        (prop::collection::vec(segment(), 1..4), segment())
            .prop_filter_map("within limits", |(segments, name)| {
                IndexIdentifier::new(Namespace::new(segments).ok()?, name).ok()
            })
    }

    proptest! {
        #[test]
        fn index_keys_round_trip(id in identifier()) {
            let key = id.store_key();
            prop_assert_eq!(IndexIdentifier::from_store_key(key.as_str())?, id.clone());
            prop_assert!(key.as_str().starts_with(id.namespace().indexes_prefix().as_str()));
            prop_assert!(key.as_str().len() <= 1024 - 200);
        }

        #[test]
        fn namespace_keys_round_trip(id in identifier()) {
            let namespace = id.namespace().clone();
            let key = namespace.store_key();
            prop_assert_eq!(Namespace::from_store_key(key.as_str())?, namespace.clone());
            if let Some(parent) = namespace.parent() {
                prop_assert!(key.as_str().starts_with(parent.children_prefix().as_str()));
            }
        }

        #[test]
        fn distinct_identifiers_have_distinct_keys(a in identifier(), b in identifier()) {
            if a != b {
                prop_assert_ne!(a.store_key(), b.store_key());
                prop_assert_ne!(
                    a.store_key().as_str().to_lowercase(),
                    b.store_key().as_str().to_lowercase()
                );
            }
            let (index_key, namespace_key) = (a.store_key(), a.namespace().store_key());
            prop_assert_ne!(index_key.as_str(), namespace_key.as_str());
        }

        #[test]
        fn decoding_arbitrary_keys_never_panics(key in ".{0,64}") {
            let _ = IndexIdentifier::from_store_key(&key);
            let _ = Namespace::from_store_key(&key);
        }
    }
}
