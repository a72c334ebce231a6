//! Transactions: one `TransactWriteItems` of conditional `Put`s with an idempotent
//! request token (see "Transactions" in the [module docs](super)).

use aws_sdk_dynamodb::types::{Put, TransactWriteItem};

use super::DynamoStore;
use super::errors::{Failure, classify, transact_failure};
use crate::store::{PutMode, StoreError, TxWrite, Version};

/// DynamoDB's limit on the actions of one transaction.
const MAX_TRANSACTION_WRITES: usize = 100;

impl DynamoStore {
    /// [`PointerStore::transact`](crate::store::PointerStore::transact): all the writes,
    /// or none.
    pub(super) async fn transact_write_items(
        &self,
        writes: Vec<TxWrite>,
    ) -> Result<Vec<Version>, StoreError> {
        if writes.is_empty() {
            return Ok(Vec::new());
        }
        if writes.len() > MAX_TRANSACTION_WRITES {
            return Err(StoreError::NotSupported(format!(
                "a DynamoDB transaction holds at most {MAX_TRANSACTION_WRITES} writes, got {}",
                writes.len()
            )));
        }
        TxWrite::check_distinct(&writes)?;
        let token = request_token(&self.table, &writes);
        let mut items = Vec::with_capacity(writes.len());
        let mut versions = Vec::with_capacity(writes.len());
        for write in writes {
            let (put, version) =
                self.prepare(&write.key, write.value, &write.mode, write.listing)?;
            let put = Put::builder()
                .table_name(&self.table)
                .set_item(Some(put.item))
                .condition_expression(put.condition)
                .set_expression_attribute_names(put.names)
                .set_expression_attribute_values(put.values)
                .build()
                .map_err(StoreError::fatal)?;
            items.push(TransactWriteItem::builder().put(put).build());
            versions.push(version);
        }
        let sent = self
            .client
            .transact_write_items()
            .set_transact_items(Some(items))
            .client_request_token(token)
            .send()
            .await;
        let err = match sent {
            Ok(_) => return Ok(versions),
            Err(err) => err,
        };
        match classify(&err, transact_failure) {
            Failure::Cancelled(reasons) => {
                let has = |code: &str| reasons.iter().any(|r| r == code);
                if has("ConditionalCheckFailed") {
                    Err(StoreError::Precondition)
                } else if has("TransactionConflict")
                    || has("ThrottlingError")
                    || has("ProvisionedThroughputExceeded")
                {
                    Err(self.error("TransactWriteItems", &err, Failure::Busy, true))
                } else {
                    Err(self.error("TransactWriteItems", &err, Failure::Rejected, true))
                }
            }
            Failure::Condition => Err(StoreError::Precondition),
            failure => Err(self.error("TransactWriteItems", &err, failure, true)),
        }
    }
}

/// The `ClientRequestToken` of a transaction: a 128-bit FNV-1a hash of the table and the
/// writes, so that a retry of the same transaction reuses it. DynamoDB compares the
/// parameters of requests that share a token, so a (vanishingly unlikely) collision fails
/// with `IdempotentParameterMismatchException` instead of skipping a write.
fn request_token(table: &str, writes: &[TxWrite]) -> String {
    const OFFSET: u128 = 0x6c62_272e_07bb_0142_62b8_2175_6295_c58d;
    const PRIME: u128 = 0x0000_0000_0100_0000_0000_0000_0000_013b;
    let mut hash = OFFSET;
    let mut feed = |bytes: &[u8]| {
        // Length-prefixed, so that field boundaries are part of the hash.
        for &byte in (bytes.len() as u64).to_le_bytes().iter().chain(bytes) {
            hash ^= u128::from(byte);
            hash = hash.wrapping_mul(PRIME);
        }
    };
    feed(b"parqdb-transact-v1");
    feed(table.as_bytes());
    for write in writes {
        feed(write.key.as_str().as_bytes());
        match &write.mode {
            PutMode::Create => feed(b"create"),
            PutMode::Update(version) => {
                feed(b"update");
                feed(version.as_str().as_bytes());
            }
        }
        feed(&write.value);
        feed(&[write.listing.code()]);
    }
    format!("{hash:032x}")
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;
    use crate::store::{Listing, StoreKey};

    #[test]
    fn request_tokens_are_deterministic_and_fit_dynamodb() {
        let write = |key: &str, value: &'static [u8], mode: PutMode| TxWrite {
            key: StoreKey::new(key).expect("key"),
            value: Bytes::from_static(value),
            mode,
            listing: Listing::Check,
        };
        let a = vec![
            write("x/=a", b"1", PutMode::Create),
            write("x/=b", b"2", PutMode::Update(Version::new("3"))),
        ];
        let token = request_token("t", &a);
        assert_eq!(token.len(), 32);
        assert!(token.len() <= 36 && token.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_eq!(token, request_token("t", &a.clone()));
        assert_ne!(token, request_token("u", &a));
        let b = vec![
            write("x/=a", b"1", PutMode::Create),
            write("x/=b", b"2", PutMode::Update(Version::new("4"))),
        ];
        assert_ne!(token, request_token("t", &b));
        let c = vec![write("x/=a", b"12", PutMode::Create)];
        let d = vec![write("x/=a1", b"2", PutMode::Create)];
        assert_ne!(request_token("t", &c), request_token("t", &d));
    }
}
