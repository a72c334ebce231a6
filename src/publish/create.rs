//! Creating an index: initial metadata plus `register`.

use std::collections::BTreeMap;
use std::sync::Mutex;

use uuid::Uuid;

use super::{Published, Publisher, metadata_path, record_location};
use crate::clock::IdGenerator;
use crate::error::{Error, ErrorKind, Result};
use crate::identifier::IndexIdentifier;
use crate::metadata::{IndexMetadata, SnapshotContents};

impl Publisher {
    /// Create an index: write initial metadata (a new `index-uuid`, sequence 1, one
    /// snapshot holding `contents`) and register it under the absent `identifier` with
    /// `contents.source_table` as the source binding.
    ///
    /// Errors: `NAMESPACE_NOT_FOUND`; `ALREADY_EXISTS` if the identifier exists (the
    /// written file is left for the garbage collector); `INVALID_INDEX_METADATA` if
    /// `contents` break a rule; `STORE_UNAVAILABLE` or `CONCURRENT_MODIFICATION` after the
    /// policy's attempts (`STORE_REFUSED` at once);
    /// `COMMIT_STATE_UNKNOWN` if the registration's outcome cannot be resolved.
    pub async fn create_index(
        &self,
        identifier: &IndexIdentifier,
        contents: SnapshotContents,
        properties: BTreeMap<String, String>,
    ) -> Result<Published> {
        let index_uuid = self.inner.injected.ids.uuid();
        self.create_index_with_uuid(identifier, index_uuid, contents, properties)
            .await
    }

    /// Like [`Publisher::create_index`], with a caller-chosen `index_uuid` — for jobs
    /// that lay out index tables under `indexes/<index-uuid>/` before the index exists.
    /// `INVALID_INDEX_METADATA` if `index_uuid` is nil.
    pub async fn create_index_with_uuid(
        &self,
        identifier: &IndexIdentifier,
        index_uuid: Uuid,
        mut contents: SnapshotContents,
        properties: BTreeMap<String, String>,
    ) -> Result<Published> {
        let file_id = self.inner.injected.ids.uuid();
        record_location(&mut contents, &metadata_path(index_uuid, 1, file_id));
        let ids = PresetUuid {
            first: Mutex::new(Some(index_uuid)),
            inner: self.inner.injected.ids.as_ref(),
        };
        let metadata = IndexMetadata::create(
            contents,
            properties,
            self.inner.injected.clock.as_ref(),
            &ids,
            &self.inner.injected.registry,
        )?;
        if metadata.index_uuid() != index_uuid {
            return Err(Error::new(
                ErrorKind::InvalidIndexMetadata,
                format!(
                    "index-uuid: expected {index_uuid}, got {}",
                    metadata.index_uuid()
                ),
            ));
        }
        let location = self.write(&metadata, file_id).await?;
        let source = metadata.current_snapshot().source_table();
        let snapshot = metadata.current_snapshot();
        let published = |attempts| Published {
            metadata_location: location.clone(),
            snapshot_id: snapshot.snapshot_id(),
            sequence_number: snapshot.sequence_number(),
            attempts,
            already_published: false,
        };

        let max = self.inner.policy.attempts();
        let mut attempt = 0;
        loop {
            attempt += 1;
            let err = match self
                .inner
                .catalog
                .register(identifier, Some(source), &location)
                .await
            {
                Ok(_) => return Ok(published(attempt)),
                Err(err) => err,
            };
            match err.kind() {
                ErrorKind::StoreUnavailable | ErrorKind::ConcurrentModification
                    if attempt < max => {}
                ErrorKind::CommitStateUnknown if attempt < max => {
                    // Did our registration land? Only our file or a successor of it
                    // (retaining our snapshot) proves it; an absent identifier means it
                    // did not (yet), and registering again is safe (create-if-absent).
                    match self.inner.catalog.load(identifier).await {
                        Ok(pointer) if pointer.metadata_location == location => {
                            return Ok(published(attempt));
                        }
                        Ok(pointer) => {
                            let current = self.read_metadata(&pointer.metadata_location).await;
                            if current.is_ok_and(|current| {
                                current.snapshot(snapshot.snapshot_id()) == Some(snapshot)
                            }) {
                                return Ok(published(attempt));
                            }
                            return Err(Error::with_source(
                                ErrorKind::CommitStateUnknown,
                                format!(
                                    "registering `{location}` as {identifier} may or may not have applied; the identifier now names `{}`; the file was left in place",
                                    pointer.metadata_location
                                ),
                                err,
                            ));
                        }
                        Err(load) if load.kind() == ErrorKind::IndexNotFound => {}
                        Err(_) => return Err(err),
                    }
                }
                _ => return Err(err),
            }
            self.back_off(attempt, std::time::Duration::ZERO).await;
        }
    }
}

/// An id generator whose first UUID is preset (the index UUID drawn first by
/// [`IndexMetadata::create`]); everything else comes from `inner`.
#[derive(Debug)]
struct PresetUuid<'a> {
    first: Mutex<Option<Uuid>>,
    inner: &'a dyn IdGenerator,
}

impl IdGenerator for PresetUuid<'_> {
    fn uuid(&self) -> Uuid {
        let preset = self
            .first
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .take();
        preset.unwrap_or_else(|| self.inner.uuid())
    }

    fn positive_id(&self) -> i64 {
        self.inner.positive_id()
    }
}
