//! Listing classes in the object size: the frame every written object carries, and the
//! marker object that says sizes may be trusted (see "Listing classes in the object size"
//! in the [module docs](super)).

use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;
use object_store::list::{PaginatedListOptions, PaginatedListStore};
use object_store::path::Path;
use object_store::{GetOptions, ObjectStore, PutOptions, PutPayload};

use super::errors::read_error;
use super::{MAX_KEYS_PER_REQUEST, S3Store};
use crate::store::{Listing, PointerStore, StoreError};

/// The marker object (under the prefix) whose presence says that object sizes encode
/// listing classes. Its name contains `.`, which no store key can.
const CLASSES_MARKER: &str = ".listing-classes";
const CLASSES_MARKER_BODY: &[u8] =
    b"parqdb-catalog: every pointer object here ends with a listing-class trailer (size % 4 = class)\n";
/// The trailer's fixed bytes, before the class code and the padding length.
const TRAILER_MAGIC: [u8; 3] = [0xFF, b'p', b'q'];
const TRAILER_LEN: usize = 5;

/// `value` framed so that its size modulo 4 is the class code (see the module docs).
pub(super) fn frame(value: &[u8], listing: Listing) -> Bytes {
    let code = listing.code();
    let unpadded = value.len() + TRAILER_LEN;
    let padding = (usize::from(code) + 4 - unpadded % 4) % 4;
    let mut framed = Vec::with_capacity(unpadded + padding);
    framed.extend_from_slice(value);
    framed.resize(value.len() + padding, 0);
    framed.extend_from_slice(&TRAILER_MAGIC);
    framed.push(code);
    framed.push(padding as u8);
    Bytes::from(framed)
}

/// The value of a stored object: the frame removed, or the object as it is if it has none.
pub(super) fn unframe(mut object: Bytes) -> Bytes {
    let len = object.len();
    if len < TRAILER_LEN {
        return object;
    }
    let trailer = &object[len - TRAILER_LEN..];
    let padding = usize::from(trailer[4]);
    let framed = trailer[..3] == TRAILER_MAGIC
        && Listing::from_code(trailer[3]).is_some()
        && padding < 4
        && len % 4 == usize::from(trailer[3])
        && len >= TRAILER_LEN + padding
        && object[len - TRAILER_LEN - padding..len - TRAILER_LEN]
            .iter()
            .all(|&b| b == 0);
    if framed {
        object.truncate(len - TRAILER_LEN - padding);
    }
    object
}

/// The class an object's size encodes, when sizes are trusted.
pub(super) fn class_of_size(size: u64) -> Option<Listing> {
    Listing::from_code((size % 4) as u8)
}

/// Whether object sizes under the prefix encode listing classes (see the module docs).
#[derive(Debug, Default)]
pub(super) struct Classes {
    /// The marker was seen or created: sizes are trusted.
    trusted: AtomicBool,
    /// The check before this store's first write ran.
    checked: tokio::sync::OnceCell<()>,
    /// The "no marker" warning was logged.
    warned: AtomicBool,
}

impl S3Store {
    fn marker_path(&self) -> Result<Path, StoreError> {
        Path::parse(self.object_name(CLASSES_MARKER)).map_err(StoreError::fatal)
    }

    /// Whether the classes marker exists (and remember it if it does).
    async fn marker_exists(&self) -> Result<bool, StoreError> {
        if self.classes.trusted.load(Ordering::Acquire) {
            return Ok(true);
        }
        let options = GetOptions {
            head: true,
            ..GetOptions::default()
        };
        match self.client.get_opts(&self.marker_path()?, options).await {
            Ok(_) => {
                self.classes.trusted.store(true, Ordering::Release);
                Ok(true)
            }
            Err(object_store::Error::NotFound { .. }) => Ok(false),
            Err(err) => Err(read_error(err)),
        }
    }

    /// Before this store's first write: create the classes marker if the prefix holds no
    /// store key yet. Every object written after that is framed, so the marker's promise
    /// holds (see the module docs).
    pub(super) async fn check_classes(&self) -> Result<(), StoreError> {
        self.classes
            .checked
            .get_or_try_init(|| self.create_marker_if_empty())
            .await
            .map(|_| ())
    }

    async fn create_marker_if_empty(&self) -> Result<(), StoreError> {
        let checked = async {
            if self.marker_exists().await? {
                return Ok(());
            }
            let options = PaginatedListOptions {
                max_keys: Some(MAX_KEYS_PER_REQUEST),
                ..PaginatedListOptions::default()
            };
            let listed = self
                .client
                .list_paginated(Some(&self.object_name("")), options)
                .await
                .map_err(read_error)?;
            let holds_keys = listed.page_token.is_some()
                || listed
                    .result
                    .objects
                    .iter()
                    .any(|meta| self.store_key(meta.location.as_ref()).is_some());
            if holds_keys {
                return Ok(());
            }
            let options = PutOptions {
                mode: object_store::PutMode::Create,
                ..PutOptions::default()
            };
            match self
                .client
                .put_opts(
                    &self.marker_path()?,
                    PutPayload::from_static(CLASSES_MARKER_BODY),
                    options,
                )
                .await
            {
                Ok(_)
                | Err(object_store::Error::AlreadyExists { .. })
                | Err(object_store::Error::Precondition { .. }) => {
                    self.classes.trusted.store(true, Ordering::Release);
                    Ok(())
                }
                Err(err) => Err(read_error(err)),
            }
        };
        if let Err(err) = checked.await {
            // Once per store: a store that may not list (a writer without s3:ListBucket)
            // must not pay for a failing check on every write. Without the marker,
            // listings read records (and warn).
            tracing::warn!(
                store = %self.describe(),
                "could not check for the listing-classes marker: {err}"
            );
        }
        Ok(())
    }

    /// Whether listed sizes may be read as classes; warns once when they may not.
    pub(super) async fn sizes_trusted(&self) -> Result<bool, StoreError> {
        if self.marker_exists().await? {
            return Ok(true);
        }
        if !self.classes.warned.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                store = %self.describe(),
                "no listing-classes marker: records may predate listing classes, so every listed \
                 record is read (see the S3 store docs)"
            );
        }
        Ok(false)
    }
}
