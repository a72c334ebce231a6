//! Strict serde building blocks for the metadata wire format.
//!
//! serde's derived `Deserialize` rejects duplicate fields but is lenient elsewhere: it
//! accepts a JSON array in place of an object (positional fields), and `BTreeMap`
//! silently keeps the last of duplicate keys. The helpers here close those gaps:
//! [`strict_object!`] makes a `#[serde(remote = "Self")]` struct deserialize from JSON
//! objects only, [`map`] rejects duplicate keys, and the field functions reject empty
//! strings, non-positive numbers and non-canonical UUIDs at the field, so
//! `serde_path_to_error` reports the exact JSON path.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::marker::PhantomData;

use serde::de::{self, Deserialize, Deserializer, MapAccess, Visitor};
use uuid::Uuid;

/// A type deserialized from the entries of one JSON object.
pub(crate) trait FromObject<'de>: Sized {
    /// Read the fields from `map` (the object's entries).
    fn from_object<A: MapAccess<'de>>(map: A) -> Result<Self, A::Error>;
}

/// A visitor that accepts JSON objects only (no positional arrays).
pub(crate) struct ObjectVisitor<T>(PhantomData<T>);

impl<T> ObjectVisitor<T> {
    pub(crate) fn new() -> Self {
        ObjectVisitor(PhantomData)
    }
}

impl<'de, T: FromObject<'de>> Visitor<'de> for ObjectVisitor<T> {
    type Value = T;

    fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
        T::from_object(map)
    }
}

/// Implement `Deserialize` (objects only) and `Serialize` for a struct that derives both
/// with `#[serde(remote = "Self")]` (which turns the derived code into inherent
/// functions that the trait impls forward to).
macro_rules! strict_object {
    ($ty:ident) => {
        impl<'de> $crate::metadata::strict::FromObject<'de> for $ty {
            fn from_object<A: serde::de::MapAccess<'de>>(map: A) -> Result<Self, A::Error> {
                $ty::deserialize(serde::de::value::MapAccessDeserializer::new(map))
            }
        }

        impl<'de> serde::Deserialize<'de> for $ty {
            fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                deserializer.deserialize_map($crate::metadata::strict::ObjectVisitor::<Self>::new())
            }
        }

        impl serde::Serialize for $ty {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                $ty::serialize(self, serializer)
            }
        }
    };
}
pub(crate) use strict_object;

/// A JSON object as a map with unique string keys.
pub(crate) fn map<'de, D, V>(deserializer: D) -> Result<BTreeMap<String, V>, D::Error>
where
    D: Deserializer<'de>,
    V: Deserialize<'de>,
{
    struct UniqueKeys<V>(PhantomData<V>);

    impl<'de, V: Deserialize<'de>> Visitor<'de> for UniqueKeys<V> {
        type Value = BTreeMap<String, V>;

        fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
            formatter.write_str("a JSON object with unique keys")
        }

        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut entries = BTreeMap::new();
            while let Some(key) = map.next_key::<String>()? {
                if entries.contains_key(&key) {
                    return Err(de::Error::custom(format_args!("duplicate key {key:?}")));
                }
                let value = map.next_value()?;
                entries.insert(key, value);
            }
            Ok(entries)
        }
    }

    deserializer.deserialize_map(UniqueKeys(PhantomData))
}

/// A non-empty string.
pub(crate) fn non_empty<'de, D: Deserializer<'de>>(deserializer: D) -> Result<String, D::Error> {
    let value = String::deserialize(deserializer)?;
    if value.is_empty() {
        return Err(de::Error::custom("must not be an empty string"));
    }
    Ok(value)
}

/// An optional field that, when present, is a non-empty string (`null` is rejected).
pub(crate) fn present_non_empty<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<String>, D::Error> {
    non_empty(deserializer).map(Some)
}

/// An optional field that, when present, is not `null`.
pub(crate) fn present<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    T::deserialize(deserializer).map(Some)
}

/// A list element that is a non-empty string (so the error path names the index).
struct NonEmptyString(String);

impl<'de> Deserialize<'de> for NonEmptyString {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        non_empty(deserializer).map(NonEmptyString)
    }
}

/// A list of non-empty strings (may be empty).
pub(crate) fn non_empty_items<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Vec<String>, D::Error> {
    let items = Vec::<NonEmptyString>::deserialize(deserializer)?;
    Ok(items.into_iter().map(|item| item.0).collect())
}

/// A non-empty list of unique, non-empty strings (`source-key-fields`).
pub(crate) fn key_fields<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Vec<String>, D::Error> {
    let fields = non_empty_items(deserializer)?;
    check_key_fields(&fields).map_err(de::Error::custom)?;
    Ok(fields)
}

/// The `source-key-fields` rule: non-empty, unique, no empty names.
pub(crate) fn check_key_fields(fields: &[String]) -> Result<(), String> {
    if fields.is_empty() {
        return Err("must list at least one key field".to_owned());
    }
    let mut seen = BTreeSet::new();
    for field in fields {
        if field.is_empty() {
            return Err("key field names must not be empty".to_owned());
        }
        if !seen.insert(field.as_str()) {
            return Err(format!("duplicate key field {field:?}"));
        }
    }
    Ok(())
}

/// A positive `long`.
pub(crate) fn positive_i64<'de, D: Deserializer<'de>>(deserializer: D) -> Result<i64, D::Error> {
    let value = i64::deserialize(deserializer)?;
    if value <= 0 {
        return Err(de::Error::custom(format_args!(
            "must be positive, got {value}"
        )));
    }
    Ok(value)
}

/// A positive `int`.
pub(crate) fn positive_i32<'de, D: Deserializer<'de>>(deserializer: D) -> Result<i32, D::Error> {
    let value = i32::deserialize(deserializer)?;
    if value <= 0 {
        return Err(de::Error::custom(format_args!(
            "must be positive, got {value}"
        )));
    }
    Ok(value)
}

/// A non-nil UUID in lowercase 8-4-4-4-12 form.
pub(crate) fn uuid<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Uuid, D::Error> {
    let text = String::deserialize(deserializer)?;
    parse_uuid(&text).map_err(de::Error::custom)
}

/// Parse the only accepted UUID form: lowercase hyphenated 8-4-4-4-12, not nil.
pub(crate) fn parse_uuid(text: &str) -> Result<Uuid, String> {
    let canonical = text.len() == 36
        && text.char_indices().all(|(at, c)| match at {
            8 | 13 | 18 | 23 => c == '-',
            _ => matches!(c, '0'..='9' | 'a'..='f'),
        });
    if !canonical {
        return Err(format!(
            "{text:?} is not a lowercase 8-4-4-4-12 hexadecimal UUID"
        ));
    }
    let uuid = Uuid::parse_str(text).map_err(|err| format!("{text:?} is not a UUID: {err}"))?;
    if uuid.is_nil() {
        return Err("must not be the nil UUID".to_owned());
    }
    Ok(uuid)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuid_form_is_exact() {
        let ok = "2f1c7f5e-3c43-4a44-8f2a-cf560c4db8d1";
        assert_eq!(parse_uuid(ok).map(|u| u.to_string()), Ok(ok.to_owned()));
        for bad in [
            "2F1C7F5E-3C43-4A44-8F2A-CF560C4DB8D1",
            "2f1c7f5e3c434a448f2acf560c4db8d1",
            "{2f1c7f5e-3c43-4a44-8f2a-cf560c4db8d1}",
            "urn:uuid:2f1c7f5e-3c43-4a44-8f2a-cf560c4db8d1",
            "2f1c7f5e-3c43-4a44-8f2a-cf560c4db8d",
            "2f1c7f5e-3c43-4a44-8f2a-cf560c4db8d1 ",
            "2f1c7f5e-3c434-a44-8f2a-cf560c4db8d1",
            "00000000-0000-0000-0000-000000000000",
            "",
        ] {
            assert!(parse_uuid(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn key_fields_rule() {
        let list = |items: &[&str]| items.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        assert!(check_key_fields(&list(&["a", "b"])).is_ok());
        assert!(check_key_fields(&list(&[])).is_err());
        assert!(check_key_fields(&list(&["a", "a"])).is_err());
        assert!(check_key_fields(&list(&[""])).is_err());
    }

    #[test]
    fn strict_map_rejects_duplicates() {
        let mut de = serde_json::Deserializer::from_str(r#"{"a": "1", "a": "2"}"#);
        let err = map::<_, String>(&mut de).expect_err("duplicate");
        assert!(err.to_string().contains("duplicate key \"a\""), "{err}");

        let mut de = serde_json::Deserializer::from_str(r#"{"a": "1", "b": "2"}"#);
        let ok = map::<_, String>(&mut de).expect("unique");
        assert_eq!(ok.len(), 2);

        let mut de = serde_json::Deserializer::from_str(r#"[["a", "1"]]"#);
        assert!(map::<_, String>(&mut de).is_err());
    }
}
