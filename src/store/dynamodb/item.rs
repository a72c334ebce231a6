//! Items: how store keys map to item keys, version tokens, and the conditional `Put` of
//! one write (see "Table schema" and "Conditions and versions" in the
//! [module docs](super)).

use std::collections::HashMap;

use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::AttributeValue;
use bytes::Bytes;

use super::{
    DynamoStore, LISTING, NO_LEAF, PARTITION_KEY, SHOWN_SORT_KEY, SORT_KEY, VALUE, VERSION,
};
use crate::store::{Listing, PutMode, StoreError, StoreKey, Version, Versioned};

/// DynamoDB's limit on a partition key, in bytes.
const MAX_PK_BYTES: usize = 2048;
/// DynamoDB's limit on a sort key, in bytes.
const MAX_SK_BYTES: usize = 1024;
/// DynamoDB's limit on an item (attribute names plus values), in bytes.
const MAX_ITEM_BYTES: usize = 400 * 1024;
/// The most a number attribute can take, in bytes (DynamoDB counts ~1 byte per two digits).
const MAX_NUMBER_BYTES: usize = 21;

impl DynamoStore {
    pub(super) fn corrupt(&self, key: &str, what: &str) -> StoreError {
        StoreError::Corrupt(format!(
            "DynamoDB table `{}`: the item of `{key}` is not a pointer record ({what})",
            self.table
        ))
    }

    pub(super) fn decode_version(
        &self,
        key: &str,
        item: &HashMap<String, AttributeValue>,
    ) -> Result<Version, StoreError> {
        match item.get(VERSION) {
            Some(AttributeValue::N(n)) => match parse_version(n) {
                Some(n) => Ok(Version::new(n.to_string())),
                None => Err(self.corrupt(key, "its version is not a whole number")),
            },
            _ => Err(self.corrupt(key, "it has no numeric `version`")),
        }
    }

    pub(super) fn decode(
        &self,
        key: &str,
        mut item: HashMap<String, AttributeValue>,
    ) -> Result<Versioned, StoreError> {
        let version = self.decode_version(key, &item)?;
        match item.remove(VALUE) {
            Some(AttributeValue::B(blob)) => Ok(Versioned {
                value: Bytes::from(blob.into_inner()),
                version,
            }),
            _ => Err(self.corrupt(key, "it has no binary `value`")),
        }
    }

    /// The conditional `Put` of one write, and the version it will create.
    pub(super) fn prepare(
        &self,
        key: &StoreKey,
        value: Bytes,
        mode: &PutMode,
        listing: Listing,
    ) -> Result<(PreparedPut, Version), StoreError> {
        let (pk, sk) = item_key(key.as_str())?;
        let names: usize = [
            PARTITION_KEY,
            SORT_KEY,
            VALUE,
            VERSION,
            SHOWN_SORT_KEY,
            LISTING,
        ]
        .iter()
        .map(|name| name.len())
        .sum();
        let size =
            names + pk.len() + 2 * sk.len() + value.len() + MAX_NUMBER_BYTES + MAX_NUMBER_BYTES;
        if size > MAX_ITEM_BYTES {
            return Err(StoreError::NotSupported(format!(
                "a DynamoDB item holds at most {MAX_ITEM_BYTES} bytes; `{key}` with a value of \
                 {} bytes needs up to {size}",
                value.len()
            )));
        }
        let (version, condition) = match mode {
            PutMode::Create => (1, None),
            PutMode::Update(expected) => {
                let Some(expected) = parse_version(expected.as_str()) else {
                    return Err(StoreError::Precondition);
                };
                let next = expected.checked_add(1).ok_or_else(|| {
                    StoreError::fatal(format!("the version of `{key}` overflows"))
                })?;
                (next, Some(expected))
            }
        };
        let shown_sk = (listing != Listing::Hidden).then(|| sk.clone());
        let mut item = key_attributes(pk, sk);
        item.insert(VALUE.to_owned(), AttributeValue::B(Blob::new(value)));
        item.insert(VERSION.to_owned(), AttributeValue::N(version.to_string()));
        item.insert(
            LISTING.to_owned(),
            AttributeValue::N(listing.code().to_string()),
        );
        if let Some(shown_sk) = shown_sk {
            item.insert(SHOWN_SORT_KEY.to_owned(), AttributeValue::S(shown_sk));
        }
        let put = match condition {
            None => PreparedPut {
                item,
                condition: "attribute_not_exists(pk)",
                names: None,
                values: None,
            },
            Some(expected) => PreparedPut {
                item,
                condition: "#v = :expected",
                names: Some(HashMap::from([("#v".to_owned(), VERSION.to_owned())])),
                values: Some(HashMap::from([(
                    ":expected".to_owned(),
                    AttributeValue::N(expected.to_string()),
                )])),
            },
        };
        Ok((put, Version::new(version.to_string())))
    }
}

/// The parts of one conditional `Put`, shared by `PutItem` and `TransactWriteItems`.
pub(super) struct PreparedPut {
    pub(super) item: HashMap<String, AttributeValue>,
    pub(super) condition: &'static str,
    pub(super) names: Option<HashMap<String, String>>,
    pub(super) values: Option<HashMap<String, AttributeValue>>,
}

/// The partition and sort key of a store key (see the module docs).
pub(super) fn item_key(key: &str) -> Result<(String, String), StoreError> {
    let (pk, leaf) = match key.find('=') {
        Some(at) => key.split_at(at + 1),
        None => (key, ""),
    };
    let sk = if leaf.is_empty() { NO_LEAF } else { leaf };
    check_key_sizes(key, pk, sk)?;
    Ok((pk.to_owned(), sk.to_owned()))
}

fn check_key_sizes(key: &str, pk: &str, sk: &str) -> Result<(), StoreError> {
    if pk.len() > MAX_PK_BYTES || sk.len() > MAX_SK_BYTES {
        return Err(StoreError::NotSupported(format!(
            "`{key}` does not fit a DynamoDB item key: partition key of {} bytes (at most \
             {MAX_PK_BYTES}), sort key of {} bytes (at most {MAX_SK_BYTES})",
            pk.len(),
            sk.len()
        )));
    }
    Ok(())
}

/// The key attributes of an item.
pub(super) fn key_attributes(pk: String, sk: String) -> HashMap<String, AttributeValue> {
    HashMap::from([
        (PARTITION_KEY.to_owned(), AttributeValue::S(pk)),
        (SORT_KEY.to_owned(), AttributeValue::S(sk)),
    ])
}

/// The store key of an item, if the item is one this store wrote.
pub(super) fn key_of_item(item: &HashMap<String, AttributeValue>) -> Option<StoreKey> {
    let (Some(AttributeValue::S(pk)), Some(AttributeValue::S(sk))) =
        (item.get(PARTITION_KEY), item.get(SORT_KEY))
    else {
        return None;
    };
    let text = if sk == NO_LEAF {
        pk.clone()
    } else {
        format!("{pk}{sk}")
    };
    let key = StoreKey::new(text).ok()?;
    // Only the canonical split decodes, so a foreign item never aliases a real key.
    match item_key(key.as_str()) {
        Ok((p, s)) if p == *pk && s == *sk => Some(key),
        _ => None,
    }
}

/// A version token as this store writes it: a canonical decimal number.
fn parse_version(token: &str) -> Option<u64> {
    let n: u64 = token.parse().ok()?;
    (n.to_string() == token).then_some(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(key: &str) -> (String, String) {
        item_key(key).expect("fits")
    }

    #[test]
    fn keys_map_to_the_documented_items() {
        assert_eq!(split("i/a/b/=x"), ("i/a/b/=".into(), "x".into()));
        assert_eq!(split("n/a/=b"), ("n/a/=".into(), "b".into()));
        assert_eq!(split("n/=a"), ("n/=".into(), "a".into()));
        assert_eq!(
            split("_probe/7f3e/=k"),
            ("_probe/7f3e/=".into(), "k".into())
        );
        assert_eq!(
            split("_catalog/owner"),
            ("_catalog/owner".into(), "!".into())
        );
        assert_eq!(split("a/="), ("a/=".into(), "!".into()));
        assert_eq!(split("a=/b=c"), ("a=".into(), "/b=c".into()));
    }

    #[test]
    fn items_decode_to_their_keys_and_only_canonical_items_decode() {
        for key in ["i/a/b/=x", "_catalog/owner", "a/=", "a=/b=c", "t/=+x"] {
            let (pk, sk) = split(key);
            let item = HashMap::from([
                (PARTITION_KEY.to_owned(), AttributeValue::S(pk)),
                (SORT_KEY.to_owned(), AttributeValue::S(sk)),
            ]);
            assert_eq!(
                key_of_item(&item).map(|k| k.as_str().to_owned()),
                Some(key.to_owned())
            );
        }
        for (pk, sk) in [
            ("i/a/", "=x"),
            ("a", "b"),
            ("a/=", ""),
            ("A/=", "x"),
            ("a/=", "."),
        ] {
            let item = HashMap::from([
                (PARTITION_KEY.to_owned(), AttributeValue::S(pk.into())),
                (SORT_KEY.to_owned(), AttributeValue::S(sk.into())),
            ]);
            assert!(key_of_item(&item).is_none(), "{pk} {sk} decoded");
        }
    }

    #[test]
    fn the_no_leaf_sort_key_sorts_before_every_leaf() {
        for c in ['+', '-', '/', '0', '=', '_', 'a', '~'] {
            assert!(NO_LEAF < c.to_string().as_str(), "{c}");
        }
    }

    #[test]
    fn oversized_item_keys_are_typed_errors() {
        let err = check_key_sizes("k", &"p".repeat(MAX_PK_BYTES + 1), "s").expect_err("too long");
        assert!(matches!(err, StoreError::NotSupported(_)), "{err:?}");
        let err = check_key_sizes("k", "p", &"s".repeat(MAX_SK_BYTES + 1)).expect_err("too long");
        assert!(matches!(err, StoreError::NotSupported(_)), "{err:?}");
        assert!(check_key_sizes("k", &"p".repeat(MAX_PK_BYTES), &"s".repeat(MAX_SK_BYTES)).is_ok());
        // Every valid store key fits.
        let longest = format!("a/={}", "x".repeat(1021));
        assert!(item_key(StoreKey::new(longest).expect("1024 bytes").as_str()).is_ok());
    }

    #[test]
    fn versions_are_canonical_numbers() {
        assert_eq!(parse_version("1"), Some(1));
        assert_eq!(parse_version("18446744073709551615"), Some(u64::MAX));
        for bad in [
            "",
            "01",
            "+1",
            "-1",
            "1.0",
            "\"1\"",
            "x",
            "18446744073709551616",
        ] {
            assert_eq!(parse_version(bad), None, "{bad}");
        }
    }
}
