//! Strict field rules of the metadata wire format.
//!
//! Objects only and unique keys come from [`crate::json`] (`strict_object!`,
//! `unique_map`); the field functions here reject empty strings, non-positive numbers and
//! non-canonical UUIDs at the field, so the error names the exact JSON path.

use std::collections::BTreeSet;

use serde::de::{self, Deserialize, Deserializer};
use uuid::Uuid;

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
}
