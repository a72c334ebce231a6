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

/// A JSON integer within `min..=max` (a `long` or an `int` of the metadata spec): an
/// integer outside it is out of range, a number with a fraction or an exponent is no
/// integer (`1e0`, `1.0`); the error says which, at the field.
struct Integer {
    name: &'static str,
    min: i64,
    max: i64,
}

/// The metadata spec's `long`.
const LONG: Integer = Integer {
    name: "a long (a signed 64-bit integer)",
    min: i64::MIN,
    max: i64::MAX,
};

/// The metadata spec's `int`.
const INT: Integer = Integer {
    name: "an int (a signed 32-bit integer)",
    min: i32::MIN as i64,
    max: i32::MAX as i64,
};

impl Integer {
    fn out_of_range<E: de::Error>(&self, value: impl std::fmt::Display) -> E {
        E::custom(format_args!("{value} is out of range for {}", self.name))
    }
}

impl de::Visitor<'_> for Integer {
    type Value = i64;

    fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(formatter, "{}", self.name)
    }

    fn visit_i64<E: de::Error>(self, value: i64) -> Result<i64, E> {
        if value < self.min || value > self.max {
            return Err(self.out_of_range(value));
        }
        Ok(value)
    }

    fn visit_u64<E: de::Error>(self, value: u64) -> Result<i64, E> {
        match i64::try_from(value) {
            Ok(value) => self.visit_i64(value),
            Err(_) => Err(self.out_of_range(value)),
        }
    }

    // serde_json reads an integer beyond the 64-bit range as a float (see
    // `parse::normalised_numbers` for one beyond a float's): its written digits are gone,
    // so the message does not repeat them.
    #[allow(clippy::cast_precision_loss)] // Comparing magnitudes only.
    fn visit_f64<E: de::Error>(self, value: f64) -> Result<i64, E> {
        if value.is_finite()
            && value.fract() == 0.0
            && (value < self.min as f64 || value > self.max as f64)
        {
            return Err(E::custom(format_args!(
                "an integer out of range for {}",
                self.name
            )));
        }
        Err(E::custom(format_args!(
            "expected {}: a number with a fraction or an exponent is no integer",
            self.name
        )))
    }
}

/// A `long`.
pub(crate) fn long<'de, D: Deserializer<'de>>(deserializer: D) -> Result<i64, D::Error> {
    deserializer.deserialize_i64(LONG)
}

/// An `int`.
pub(crate) fn int<'de, D: Deserializer<'de>>(deserializer: D) -> Result<i32, D::Error> {
    let value = deserializer.deserialize_i64(INT)?;
    i32::try_from(value).map_err(|_| INT.out_of_range(value))
}

/// A positive `long`.
pub(crate) fn positive_i64<'de, D: Deserializer<'de>>(deserializer: D) -> Result<i64, D::Error> {
    let value = long(deserializer)?;
    if value <= 0 {
        return Err(de::Error::custom(format_args!(
            "must be positive, got {value}"
        )));
    }
    Ok(value)
}

/// A positive `int`.
pub(crate) fn positive_i32<'de, D: Deserializer<'de>>(deserializer: D) -> Result<i32, D::Error> {
    let value = int(deserializer)?;
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
