//! Strict JSON: the one way the crate reads the JSON it is given — metadata files, table
//! definitions, Lambda events and publish requests.
//!
//! serde's derived `Deserialize` refuses unknown fields (where the type says
//! `deny_unknown_fields`) and duplicate fields, but it is lenient in three ways this
//! module closes:
//!
//! - it accepts a positional JSON array in place of a struct: [`ObjectVisitor`] reads
//!   JSON objects only, for the types that [`strict_object!`] marks and for any derived
//!   type wrapped in [`Object`];
//! - a `BTreeMap`, and a `serde_json::Value`, silently keep the last of duplicate keys:
//!   [`unique_map`] and [`StrictValue`] refuse the second (`duplicate key "k"`) before
//!   reading its value;
//! - a document followed by more data parses: [`from_str`] and [`from_slice`] refuse
//!   trailing data.
//!
//! Every refusal carries the JSON path of the violation ([`DocumentError::path`]); each
//! reader words its messages for its audience (metadata, events, requests).

use std::collections::BTreeMap;
use std::fmt;
use std::marker::PhantomData;

#[cfg(feature = "lambda")]
use serde::de::SeqAccess;
use serde::de::{self, Deserialize, DeserializeOwned, Deserializer, MapAccess, Visitor};
#[cfg(feature = "lambda")]
use serde_json::{Map, Number, Value};

/// A type read from the entries of one JSON object.
pub(crate) trait FromObject<'de>: Sized {
    /// What the type is, for "invalid type: ..., expected ..." messages.
    const EXPECTING: &'static str = "a JSON object";

    /// Read the fields from `map` (the object's entries).
    fn from_object<A: MapAccess<'de>>(map: A) -> Result<Self, A::Error>;
}

/// The visitor of every strict object: it accepts JSON objects only (no positional
/// arrays) and hands their entries to [`FromObject::from_object`].
pub(crate) struct ObjectVisitor<T>(PhantomData<T>);

impl<T> ObjectVisitor<T> {
    pub(crate) fn new() -> Self {
        ObjectVisitor(PhantomData)
    }
}

impl<'de, T: FromObject<'de>> Visitor<'de> for ObjectVisitor<T> {
    type Value = T;

    fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(T::EXPECTING)
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
        T::from_object(map)
    }
}

/// Implement `Deserialize` (objects only, through [`ObjectVisitor`]) and `Serialize` for a
/// struct that derives both with `#[serde(remote = "Self")]` (which turns the derived code
/// into inherent functions that the trait impls forward to); `strict_object!(deserialize
/// Type)` for one that derives only `Deserialize`.
macro_rules! strict_object {
    ($ty:ident) => {
        $crate::json::strict_object!(deserialize $ty);

        impl serde::Serialize for $ty {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                $ty::serialize(self, serializer)
            }
        }
    };
    (deserialize $ty:ident) => {
        impl<'de> $crate::json::FromObject<'de> for $ty {
            fn from_object<A: serde::de::MapAccess<'de>>(map: A) -> Result<Self, A::Error> {
                $ty::deserialize(serde::de::value::MapAccessDeserializer::new(map))
            }
        }

        impl<'de> serde::Deserialize<'de> for $ty {
            fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                deserializer.deserialize_map($crate::json::ObjectVisitor::<Self>::new())
            }
        }
    };
}
pub(crate) use strict_object;

/// A derived `T` read from a JSON object only (for wire types without
/// [`strict_object!`]).
#[derive(Debug)]
pub(crate) struct Object<T>(pub T);

impl<'de, T: Deserialize<'de>> FromObject<'de> for Object<T> {
    fn from_object<A: MapAccess<'de>>(map: A) -> Result<Self, A::Error> {
        T::deserialize(de::value::MapAccessDeserializer::new(map)).map(Object)
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Object<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(ObjectVisitor::new())
    }
}

/// Where the entries of an object with unique keys go.
trait Entries<V>: Default {
    fn contains(&self, key: &str) -> bool;
    fn insert(&mut self, key: String, value: V);
}

impl<V> Entries<V> for BTreeMap<String, V> {
    fn contains(&self, key: &str) -> bool {
        self.contains_key(key)
    }

    fn insert(&mut self, key: String, value: V) {
        BTreeMap::insert(self, key, value);
    }
}

#[cfg(feature = "lambda")]
impl Entries<StrictValue> for Map<String, Value> {
    fn contains(&self, key: &str) -> bool {
        self.contains_key(key)
    }

    fn insert(&mut self, key: String, value: StrictValue) {
        Map::insert(self, key, value.0);
    }
}

/// Read the entries of `map`, refusing a key seen before (before its value is read).
fn unique_entries<'de, A, V, E>(mut map: A) -> Result<E, A::Error>
where
    A: MapAccess<'de>,
    V: Deserialize<'de>,
    E: Entries<V>,
{
    let mut entries = E::default();
    while let Some(key) = map.next_key::<String>()? {
        if entries.contains(&key) {
            return Err(de::Error::custom(format_args!("duplicate key {key:?}")));
        }
        let value = map.next_value()?;
        entries.insert(key, value);
    }
    Ok(entries)
}

/// A JSON object as a map with unique string keys.
struct UniqueMap<V>(BTreeMap<String, V>);

impl<'de, V: Deserialize<'de>> FromObject<'de> for UniqueMap<V> {
    const EXPECTING: &'static str = "a JSON object with unique keys";

    fn from_object<A: MapAccess<'de>>(map: A) -> Result<Self, A::Error> {
        unique_entries(map).map(UniqueMap)
    }
}

/// A JSON object as a map with unique string keys (for `deserialize_with`).
pub(crate) fn unique_map<'de, D, V>(deserializer: D) -> Result<BTreeMap<String, V>, D::Error>
where
    D: Deserializer<'de>,
    V: Deserialize<'de>,
{
    let UniqueMap(entries) = deserializer.deserialize_map(ObjectVisitor::new())?;
    Ok(entries)
}

/// Any JSON value, every object of which has unique keys (a Lambda event).
#[cfg(feature = "lambda")]
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct StrictValue(pub Value);

#[cfg(feature = "lambda")]
impl<'de> Deserialize<'de> for StrictValue {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(StrictValueVisitor)
    }
}

#[cfg(feature = "lambda")]
struct StrictValueVisitor;

#[cfg(feature = "lambda")]
impl<'de> Visitor<'de> for StrictValueVisitor {
    type Value = StrictValue;

    fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str("a JSON value")
    }

    fn visit_bool<E>(self, value: bool) -> Result<StrictValue, E> {
        Ok(StrictValue(Value::Bool(value)))
    }

    fn visit_i64<E>(self, value: i64) -> Result<StrictValue, E> {
        Ok(StrictValue(Value::Number(value.into())))
    }

    fn visit_u64<E>(self, value: u64) -> Result<StrictValue, E> {
        Ok(StrictValue(Value::Number(value.into())))
    }

    fn visit_f64<E>(self, value: f64) -> Result<StrictValue, E> {
        // As serde_json's own `Value`: a float JSON cannot hold is `null`.
        Ok(StrictValue(
            Number::from_f64(value).map_or(Value::Null, Value::Number),
        ))
    }

    fn visit_str<E>(self, value: &str) -> Result<StrictValue, E> {
        Ok(StrictValue(Value::String(value.to_owned())))
    }

    fn visit_string<E>(self, value: String) -> Result<StrictValue, E> {
        Ok(StrictValue(Value::String(value)))
    }

    fn visit_unit<E>(self) -> Result<StrictValue, E> {
        Ok(StrictValue(Value::Null))
    }

    fn visit_none<E>(self) -> Result<StrictValue, E> {
        Ok(StrictValue(Value::Null))
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<StrictValue, D::Error> {
        StrictValue::deserialize(deserializer)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<StrictValue, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(1024));
        while let Some(StrictValue(item)) = seq.next_element()? {
            items.push(item);
        }
        Ok(StrictValue(Value::Array(items)))
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<StrictValue, A::Error> {
        unique_entries(map).map(|entries| StrictValue(Value::Object(entries)))
    }
}

/// Why a document was refused: the JSON path of the violation and serde_json's error.
#[derive(Debug)]
pub(crate) struct DocumentError {
    path: String,
    inner: serde_json::Error,
}

impl DocumentError {
    /// The JSON path of the violation (`snapshots[0].metric`), `None` at the root and for
    /// syntax errors (malformed JSON, trailing data), which the line and column locate.
    pub fn path(&self) -> Option<&str> {
        (self.inner.is_data() && self.path != ".").then_some(self.path.as_str())
    }

    /// Whether the text is not (one) JSON document: malformed, truncated or followed by
    /// trailing data.
    pub fn is_syntax(&self) -> bool {
        !self.inner.is_data()
    }

    /// serde_json's description, with its line and column.
    pub fn inner(&self) -> &serde_json::Error {
        &self.inner
    }
}

/// Parse exactly one JSON document from `text` into `T`: trailing data is refused, and a
/// refusal names its JSON path.
pub(crate) fn from_str<T: DeserializeOwned>(text: &str) -> Result<T, DocumentError> {
    read(serde_json::Deserializer::from_str(text))
}

/// [`from_str`] over bytes (which must be UTF-8).
pub(crate) fn from_slice<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, DocumentError> {
    read(serde_json::Deserializer::from_slice(bytes))
}

/// Read `T` from an already parsed `value` (a Lambda event), naming the JSON path of a
/// refusal.
#[cfg(feature = "lambda")]
pub(crate) fn from_value<T: DeserializeOwned>(value: Value) -> Result<T, DocumentError> {
    serde_path_to_error::deserialize(value).map_err(|err| DocumentError {
        path: err.path().to_string(),
        inner: err.into_inner(),
    })
}

fn read<'de, R, T>(mut deserializer: serde_json::Deserializer<R>) -> Result<T, DocumentError>
where
    R: serde_json::de::Read<'de>,
    T: DeserializeOwned,
{
    let value =
        serde_path_to_error::deserialize(&mut deserializer).map_err(|err| DocumentError {
            path: err.path().to_string(),
            inner: err.into_inner(),
        })?;
    deserializer.end().map_err(|inner| DocumentError {
        path: ".".to_owned(),
        inner,
    })?;
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Pair {
        a: u32,
        #[serde(default, deserialize_with = "unique_map")]
        b: BTreeMap<String, u32>,
    }

    #[test]
    fn objects_only() {
        let Object(pair) = from_str::<Object<Pair>>(r#"{"a": 1}"#).expect("object");
        assert_eq!(pair.a, 1);
        let err = from_str::<Object<Pair>>("[1, {}]").expect_err("positional");
        assert!(
            err.inner().to_string().contains("expected a JSON object"),
            "{err:?}"
        );
        let err = from_str::<Object<Pair>>(r#"{"a": 1, "c": 2}"#).expect_err("unknown");
        assert!(
            err.inner().to_string().contains("unknown field `c`"),
            "{err:?}"
        );
        let err = from_str::<Object<Pair>>(r#"{"a": 1, "a": 2}"#).expect_err("duplicate");
        assert!(
            err.inner().to_string().contains("duplicate field `a`"),
            "{err:?}"
        );
    }

    #[test]
    fn maps_refuse_duplicate_keys_with_their_path() {
        let err = from_str::<Object<Pair>>(r#"{"a": 1, "b": {"x": 1, "x": 2}}"#)
            .expect_err("duplicate key");
        assert!(
            err.inner().to_string().starts_with("duplicate key \"x\""),
            "{err:?}"
        );
        assert_eq!(err.path(), Some("b"));
        let err = from_str::<Object<Pair>>(r#"{"a": 1, "b": [["x", 1]]}"#).expect_err("array");
        assert!(
            err.inner()
                .to_string()
                .contains("a JSON object with unique keys"),
            "{err:?}"
        );
    }

    #[cfg(feature = "lambda")]
    #[test]
    fn values_refuse_duplicate_keys_with_their_path() {
        let StrictValue(value) =
            from_str(r#"{"a": [1, -2, 2.5, "s", null, true, {"b": {}}]}"#).expect("unique");
        assert_eq!(
            value,
            serde_json::json!({"a": [1, -2, 2.5, "s", null, true, {"b": {}}]})
        );
        let err = from_str::<StrictValue>(r#"{"a": [{"b": 1, "b": 1}]}"#).expect_err("nested");
        assert_eq!(err.path(), Some("a[0]"));
        assert!(!err.is_syntax());
        let err = from_str::<StrictValue>(r#"{"a": 1, "a": 1}"#).expect_err("root");
        assert_eq!(err.path(), None);
    }

    #[test]
    fn one_document_only() {
        for text in [r#"{"a": 1} {"a": 1}"#, r#"{"a": 1} x"#, r#"{"a": 1"#, ""] {
            let err = from_str::<Object<Pair>>(text).expect_err(text);
            assert!(err.is_syntax(), "{text}: {err:?}");
            assert_eq!(err.path(), None, "{text}");
        }
        assert!(from_slice::<Object<Pair>>(b" {\"a\": 1}\n ").is_ok());
        let deep = format!("{}{}", "[".repeat(1000), "]".repeat(1000));
        assert!(
            from_str::<Vec<serde_json::Value>>(&deep).is_err(),
            "nesting limit"
        );
    }
}
