//! load, register, commit, drop and list.

use bytes::Bytes;
use uuid::Uuid;

use super::changelog::{LoggedWrite, Prelogged};
use super::publication::{Publication, PublishWindow};
use super::record::{PointerRecord, PointerState};
use super::write::{Basis, WriteOutcome, conditional_write_listed, read_with_retry};
use super::{
    Catalog, CommitResult, IdentifierPage, IndexPointer, LoadIfChanged, SourceBinding, page_size,
};
use crate::error::{Error, ErrorKind, Result};
use crate::identifier::{IndexIdentifier, Namespace};
use crate::metadata::TableDefinition;
use crate::retry::Retry;
use crate::store::PointerStoreExt;
use crate::store::{Changed, PutMode, Version, Versioned};

/// How often a mutation re-reads and retries after losing a race to another writer of the
/// same record before reporting the conflict.
pub(crate) const MAX_REEVALUATIONS: usize = 16;

/// A pointer record as read from the store.
#[derive(Debug, Clone)]
pub(crate) struct Stored {
    pub record: PointerRecord,
    pub version: Version,
}

/// What an identifier looks like to a reader.
pub(crate) enum Visibility {
    Absent(Option<Stored>),
    Visible(Stored),
    /// A `moving` record whose rename has landed at its destination.
    RenamedAway(Stored),
}

pub(crate) fn not_found(identifier: &IndexIdentifier) -> Error {
    Error::new(
        ErrorKind::IndexNotFound,
        format!("index {identifier} does not exist"),
    )
}

fn pointer(identifier: &IndexIdentifier, stored: &Stored) -> IndexPointer {
    // A moving record's version token never matches, so `load_if_changed` re-reads it.
    let version = match stored.record.state {
        PointerState::Moving => format!("{}~moving", stored.version),
        _ => stored.version.to_string(),
    };
    IndexPointer {
        identifier: identifier.clone(),
        metadata_location: stored.record.metadata_location.clone(),
        source: stored.record.source.clone(),
        version,
    }
}

impl Catalog {
    pub(crate) async fn read_pointer(
        &self,
        identifier: &IndexIdentifier,
    ) -> Result<Option<Stored>> {
        let stored =
            read_with_retry(self.store().as_ref(), &identifier.store_key(), self.retry()).await?;
        stored
            .map(|stored| {
                Ok(Stored {
                    record: PointerRecord::from_bytes(&stored.value)?,
                    version: stored.version,
                })
            })
            .transpose()
    }

    pub(crate) async fn visibility(&self, stored: Option<Stored>) -> Result<Visibility> {
        let Some(stored) = stored else {
            return Ok(Visibility::Absent(None));
        };
        Ok(match stored.record.state {
            PointerState::Live => Visibility::Visible(stored),
            PointerState::Dropped => Visibility::Absent(Some(stored)),
            PointerState::Moving => {
                if self.rename_landed(&stored.record).await? {
                    Visibility::RenamedAway(stored)
                } else {
                    Visibility::Visible(stored)
                }
            }
        })
    }

    /// Write `record` to `identifier`'s key, replacing `previous` (or creating it): log it
    /// in the change log, then write it; a write that lost withdraws its entry.
    pub(crate) async fn write_pointer(
        &self,
        identifier: &IndexIdentifier,
        previous: Option<&Stored>,
        record: &PointerRecord,
    ) -> Result<WriteOutcome> {
        let (entry, link) = futures::join!(
            self.log_writes(vec![LoggedWrite::of(identifier, record)]),
            self.link(previous, record)
        );
        let entry = entry?;
        if let Err(err) = link {
            self.withdraw_entry(entry).await;
            return Err(err);
        }
        let outcome = self
            .write_pointer_with(identifier, previous, record, self.retry())
            .await;
        if matches!(outcome, Ok(WriteOutcome::Lost)) {
            self.withdraw_entry(entry).await;
        }
        outcome
    }

    /// Write the record of a register or commit, whose commit id its change-log entry
    /// (`ids`) announced already, within a publish window: no attempt is issued, the first
    /// or a retry, once the window has ended, nor before the entry is stored.
    async fn write_pointer_within(
        &self,
        window: &PublishWindow,
        ids: &mut Prelogged,
        identifier: &IndexIdentifier,
        previous: Option<&Stored>,
        record: &PointerRecord,
    ) -> Result<WriteOutcome> {
        ids.logged()?;
        self.link(previous, record).await?;
        let ended = || window.ended();
        ids.issuing();
        let outcome = window
            .write(self.write_pointer_with(
                identifier,
                previous,
                record,
                self.retry().until(&ended),
            ))
            .await;
        if matches!(outcome, Ok(WriteOutcome::Lost)) {
            ids.lost();
        }
        outcome
    }

    async fn write_pointer_with(
        &self,
        identifier: &IndexIdentifier,
        previous: Option<&Stored>,
        record: &PointerRecord,
        retry: Retry<'_>,
    ) -> Result<WriteOutcome> {
        let (mode, basis) = match previous {
            None => (PutMode::Create, Basis::Absent),
            Some(previous) => (
                PutMode::Update(previous.version.clone()),
                Basis::Commit(previous.record.commit_id),
            ),
        };
        conditional_write_listed(
            self.store().as_ref(),
            &identifier.store_key(),
            Bytes::from(record.to_bytes()),
            mode,
            record.listing(),
            basis,
            record.commit_id,
            retry,
        )
        .await
    }

    /// Store the link of `record`'s write, which replaces `previous` (or creates the key),
    /// before the write (see `Catalog::log_link`).
    async fn link(&self, previous: Option<&Stored>, record: &PointerRecord) -> Result<()> {
        let base = previous.map(|previous| previous.record.commit_id);
        self.log_link(record.commit_id, base).await
    }

    pub(crate) fn fresh_commit_id(&self) -> Uuid {
        self.ids().uuid()
    }

    pub(crate) async fn require_namespace(&self, namespace: &Namespace) -> Result<()> {
        if self
            .namespace_record(namespace)
            .await?
            .is_some_and(|(record, _)| record.exists)
        {
            Ok(())
        } else {
            Err(Error::new(
                ErrorKind::NamespaceNotFound,
                format!("namespace {namespace} does not exist"),
            ))
        }
    }

    pub(crate) async fn load_pointer(&self, identifier: &IndexIdentifier) -> Result<IndexPointer> {
        match self
            .visibility(self.read_pointer(identifier).await?)
            .await?
        {
            Visibility::Visible(stored) => Ok(pointer(identifier, &stored)),
            Visibility::Absent(_) | Visibility::RenamedAway(_) => Err(not_found(identifier)),
        }
    }

    pub(crate) async fn load_pointer_if_changed(
        &self,
        identifier: &IndexIdentifier,
        version: &str,
    ) -> Result<LoadIfChanged> {
        let store = self.store().as_ref();
        let answer = store
            .get_if_changed(&identifier.store_key(), &Version::new(version))
            .await
            .map_err(|err| super::write::store_error(store, err))?;
        match answer {
            Changed::Unchanged => Ok(LoadIfChanged::Unchanged),
            Changed::Missing => Err(not_found(identifier)),
            Changed::Changed(_) => Ok(LoadIfChanged::Changed(Box::new(
                self.load_pointer(identifier).await?,
            ))),
        }
    }

    pub(crate) async fn register_pointer(
        &self,
        identifier: &IndexIdentifier,
        source: &SourceBinding,
        metadata_location: &str,
    ) -> Result<IndexPointer> {
        self.publish_logged(metadata_location, async |window, ids| {
            self.register_within(window, ids, identifier, source, metadata_location)
                .await
        })
        .await
    }

    /// Publish `location` within its window (see `catalog::publication`) with the commit
    /// ids drawn and logged up front (see `catalog::changelog`); the ids are withdrawn
    /// from the log if the operation failed without writing — before its first write,
    /// when every write it issued lost to another writer, or when the window ended before
    /// it wrote (an entry left behind keeps what it publishes until the store shows the
    /// write or the warehouse is adopted: `gc::untaken`).
    async fn publish_logged<T>(
        &self,
        location: &str,
        publish: impl AsyncFnOnce(&PublishWindow, &mut Prelogged) -> Result<T>,
    ) -> Result<T> {
        let mut ids = Prelogged::draw(self, MAX_REEVALUATIONS);
        let mut finished = false;
        let result = self
            .publish_in_window(location, async |window| {
                let result = publish(window, &mut ids).await;
                finished = true;
                if result.is_err() && (!window.wrote() || ids.wrote_nothing()) {
                    ids.withdraw(self).await;
                }
                result
            })
            .await;
        // Cut off by the window: `STORE_UNAVAILABLE` says it had issued no pointer write
        // (one that had answers `COMMIT_STATE_UNKNOWN`).
        if !finished
            && result
                .as_ref()
                .is_err_and(|err| err.kind() == ErrorKind::StoreUnavailable)
        {
            ids.withdraw(self).await;
        }
        result
    }

    /// register in the order of checks (see [`Catalog`](crate::Catalog#the-order-of-checks)):
    /// namespace, absence, the metadata, the source binding, then the write.
    async fn register_within(
        &self,
        window: &PublishWindow,
        ids: &mut Prelogged,
        identifier: &IndexIdentifier,
        source: &SourceBinding,
        metadata_location: &str,
    ) -> Result<IndexPointer> {
        self.require_namespace(identifier.namespace()).await?;
        // The first pointer read, the metadata's read and checks, and the change-log
        // entry run concurrently; errors are reported in the order of checks (the
        // pointer's first), the entry's just before the write.
        let (first_read, publication, ()) = futures::join!(
            self.read_pointer(identifier),
            self.prepare_publication(metadata_location),
            ids.log(self, identifier, metadata_location, None)
        );
        let mut first_read = Some(first_read);
        let mut checked: Option<(Publication, TableDefinition)> = None;
        let mut publication = Some(publication);
        for _ in 0..MAX_REEVALUATIONS {
            let stored = match first_read.take() {
                Some(stored) => stored,
                None => self.read_pointer(identifier).await,
            };
            let previous = match self.visibility(stored?).await? {
                Visibility::Visible(_) => {
                    return Err(Error::new(
                        ErrorKind::AlreadyExists,
                        format!("index {identifier} already exists"),
                    ));
                }
                Visibility::RenamedAway(stored) => {
                    self.settle_rename(identifier, &stored).await?;
                    continue;
                }
                Visibility::Absent(previous) => previous,
            };
            if let Some(publication) = publication.take() {
                let publication = publication?;
                let source = bound_source(source, &publication)?;
                self.check_places(&publication, &source)?;
                self.check_new_references(&publication, None).await?;
                checked = Some((publication, source));
            }
            let Some((publication, source)) = &checked else {
                continue; // unreachable: the first absent round checks the publication
            };
            let Some(commit_id) = ids.next_id() else {
                break;
            };
            let record = PointerRecord::created(
                previous.as_ref().map(|p| &p.record),
                publication.location.clone(),
                source.clone(),
                commit_id,
                self.now_ms(),
            );
            match self
                .write_pointer_within(window, ids, identifier, previous.as_ref(), &record)
                .await?
            {
                WriteOutcome::Applied(version) => {
                    return Ok(IndexPointer {
                        identifier: identifier.clone(),
                        metadata_location: publication.location.clone(),
                        source: source.clone(),
                        version: version.map(|v| v.to_string()).unwrap_or_default(),
                    });
                }
                WriteOutcome::Lost => continue,
            }
        }
        Err(contended(identifier))
    }

    pub(crate) async fn commit_pointer(
        &self,
        identifier: &IndexIdentifier,
        source: &SourceBinding,
        base: &str,
        new: &str,
    ) -> Result<CommitResult> {
        self.publish_logged(new, async |window, ids| {
            self.commit_within(window, ids, identifier, source, base, new)
                .await
        })
        .await
    }

    /// commit in the order of checks (see [`Catalog`](crate::Catalog#the-order-of-checks)):
    /// existence, the base (or a replay), the new metadata, the successor rules, the
    /// source binding, then the write.
    async fn commit_within(
        &self,
        window: &PublishWindow,
        ids: &mut Prelogged,
        identifier: &IndexIdentifier,
        source: &SourceBinding,
        base: &str,
        new: &str,
    ) -> Result<CommitResult> {
        let warehouse = self.warehouse();
        // Locations compare in canonical form; one that is not inside the warehouse can
        // equal no stored location.
        let base = warehouse
            .canonical_location(base)
            .unwrap_or_else(|_| base.to_owned());
        let new_location = warehouse.canonical_location(new).ok();
        // The first pointer read, the new metadata's read and checks, and the change-log
        // entry run concurrently; errors are reported in the order of checks (the
        // pointer's first), the entry's just before the write.
        let (first_read, publication, ()) = futures::join!(
            self.read_pointer(identifier),
            self.prepare_publication(new),
            ids.log(self, identifier, new, Some(&base))
        );
        let mut first_read = Some(first_read);
        for _ in 0..MAX_REEVALUATIONS {
            let stored = match first_read.take() {
                Some(stored) => stored,
                None => self.read_pointer(identifier).await,
            };
            let current = match self.visibility(stored?).await? {
                Visibility::Visible(stored) if stored.record.state == PointerState::Moving => {
                    self.settle_rename(identifier, &stored).await?;
                    continue;
                }
                Visibility::Visible(stored) => stored,
                Visibility::RenamedAway(stored) => {
                    self.settle_rename(identifier, &stored).await?;
                    return Err(not_found(identifier));
                }
                Visibility::Absent(_) => return Err(not_found(identifier)),
            };
            let location = &current.record.metadata_location;
            if *location != base {
                if new_location.as_deref() == Some(location.as_str()) {
                    // `new` is current already: success only for a replay of the commit
                    // that made it current.
                    check_replay(identifier, &current.record, &base, source, &publication)?;
                    return Ok(CommitResult {
                        pointer: pointer(identifier, &current),
                        already_applied: true,
                    });
                }
                return Err(conflict(identifier, &base, location));
            }
            let publication = match publication {
                Ok(ref publication) => publication,
                Err(err) => return Err(err),
            };
            let base_metadata = self.read_base_metadata(&base).await?;
            publication.metadata.check_successor_of(&base_metadata)?;
            let source = bound_source(source, publication)?;
            self.check_places(publication, &source)?;
            self.check_new_references(publication, Some(&base_metadata))
                .await?;

            let Some(commit_id) = ids.next_id() else {
                break;
            };
            let mut record = current
                .record
                .successor(PointerState::Live, commit_id, self.now_ms());
            record.metadata_location = publication.location.clone();
            record.source = source.clone();
            record.previous_location = Some(location.clone());
            let new = &publication.location;
            match self
                .write_pointer_within(window, ids, identifier, Some(&current), &record)
                .await?
            {
                WriteOutcome::Applied(version) => {
                    return Ok(CommitResult {
                        pointer: IndexPointer {
                            identifier: identifier.clone(),
                            metadata_location: new.clone(),
                            source,
                            version: version.map(|v| v.to_string()).unwrap_or_default(),
                        },
                        already_applied: false,
                    });
                }
                // Someone else changed the pointer first. Re-evaluate from the top, which
                // reports precisely: a drop or rename, a replay of the same commit by
                // another writer, a conflict, or — if the write kept the location (a
                // rename that rolled back) — another attempt.
                WriteOutcome::Lost => continue,
            }
        }
        Err(contended(identifier))
    }

    pub(crate) async fn drop_pointer(&self, identifier: &IndexIdentifier) -> Result<()> {
        self.ensure_writable(None).await?;
        for _ in 0..MAX_REEVALUATIONS {
            let current = match self
                .visibility(self.read_pointer(identifier).await?)
                .await?
            {
                Visibility::Visible(stored) if stored.record.state == PointerState::Moving => {
                    self.settle_rename(identifier, &stored).await?;
                    continue;
                }
                Visibility::Visible(stored) => stored,
                Visibility::RenamedAway(stored) => {
                    self.settle_rename(identifier, &stored).await?;
                    return Err(not_found(identifier));
                }
                Visibility::Absent(_) => return Err(not_found(identifier)),
            };
            let record = current.record.successor(
                PointerState::Dropped,
                self.fresh_commit_id(),
                self.now_ms(),
            );
            match self
                .write_pointer(identifier, Some(&current), &record)
                .await?
            {
                WriteOutcome::Applied(_) => return Ok(()),
                WriteOutcome::Lost => continue,
            }
        }
        Err(contended(identifier))
    }

    pub(crate) async fn list_pointers(
        &self,
        namespace: &Namespace,
        page_token: Option<&str>,
        requested: Option<usize>,
    ) -> Result<IdentifierPage> {
        // The catalog's state before the request's content (see the module docs).
        self.require_namespace(namespace).await?;
        let size = page_size(requested)?;
        let prefix = namespace.indexes_prefix();
        let visible = |value: Option<Versioned>| async move {
            Ok(match value {
                // The store's class says live.
                None => true,
                Some(value) => {
                    let stored = Stored {
                        record: PointerRecord::from_bytes(&value.value)?,
                        version: value.version,
                    };
                    matches!(self.visibility(Some(stored)).await?, Visibility::Visible(_))
                }
            })
        };
        let (identifiers, next_page_token) = self
            .list_visible(
                &prefix,
                page_token,
                size,
                visible,
                IndexIdentifier::from_store_key,
            )
            .await?;
        Ok(IdentifierPage {
            identifiers,
            next_page_token,
        })
    }
}

/// The source binding a register or commit publishes: the requested one, which must
/// equal the metadata's current snapshot's `source-table`, or by default that
/// `source-table`.
fn bound_source(requested: &SourceBinding, publication: &Publication) -> Result<TableDefinition> {
    let snapshot_source = publication.metadata.current_snapshot().source_table();
    match requested.checked()? {
        None => Ok(snapshot_source.clone()),
        Some(source) if source == snapshot_source => Ok(source.clone()),
        Some(_) => Err(Error::new(
            ErrorKind::InvalidIndexMetadata,
            format!(
                "the source binding does not equal the current snapshot's `source-table` in `{}`",
                publication.location
            ),
        )),
    }
}

/// Whether a commit whose `new` is already current is a replay of the commit that made it
/// current: the record must name `base` as the location it replaced, and the requested
/// source binding (by default the new metadata's `source-table`) must be the stored one.
/// Anything else is `COMMIT_CONFLICT`: the base is not current, and this request did not
/// produce the current state.
fn check_replay(
    identifier: &IndexIdentifier,
    record: &PointerRecord,
    base: &str,
    source: &SourceBinding,
    publication: &Result<Publication>,
) -> Result<()> {
    let current = &record.metadata_location;
    match &record.previous_location {
        Some(previous) if previous == base => {}
        Some(previous) => {
            return Err(Error::new(
                ErrorKind::CommitConflict,
                format!(
                    "commit to {identifier} is based on `{base}`, but the current metadata `{current}` replaced `{previous}`: this request is not a retry of the commit that made it current; reload and reapply"
                ),
            ));
        }
        None => {
            return Err(Error::new(
                ErrorKind::CommitConflict,
                format!(
                    "commit to {identifier} is based on `{base}`, but the current metadata is already `{current}` and the pointer does not record which location it replaced, so the request cannot be recognised as a retry; reload and reapply"
                ),
            ));
        }
    }
    let requested = match source {
        SourceBinding::Table(source) => Some(source),
        SourceBinding::Snapshot => match publication {
            Ok(publication) => Some(publication.metadata.current_snapshot().source_table()),
            Err(err) => return Err(Error::new(err.kind(), err.message())),
        },
        // No stored binding is malformed: not the request that produced the current state.
        SourceBinding::Malformed(_) => None,
    };
    if requested != Some(&record.source) {
        return Err(Error::new(
            ErrorKind::CommitConflict,
            format!(
                "commit to {identifier}: `{current}` is already current, but bound to another source than this request's; this request is not a retry of the commit that made it current; reload and reapply"
            ),
        ));
    }
    Ok(())
}

/// The error of a base that is not the current location: a conflict, unless the base is
/// no metadata location at all (no absolute URI: empty, a plain path), which no reload
/// can fix.
fn conflict(identifier: &IndexIdentifier, base: &str, current: &str) -> Error {
    if url::Url::parse(base).is_err() {
        return Error::new(
            ErrorKind::InvalidRequest,
            format!(
                "commit to {identifier}: the base `{base}` is not a metadata location (an absolute URI such as `{current}`)"
            ),
        );
    }
    Error::new(
        ErrorKind::CommitConflict,
        format!(
            "commit to {identifier} is based on `{base}`, but the current metadata is `{current}`; reload and reapply"
        ),
    )
}

fn contended(identifier: &IndexIdentifier) -> Error {
    Error::new(
        ErrorKind::ConcurrentModification,
        format!("{identifier} kept changing under concurrent writers; reload and retry"),
    )
}
