//! The retry loop shared by publish, idempotent publish and expire: load, plan, write,
//! read back, commit, and resolve ambiguous outcomes.

use std::sync::Arc;

use bytes::Bytes;
use uuid::Uuid;

use super::{Published, Publisher, metadata_path};
use crate::catalog::IndexPointer;
use crate::error::{Error, ErrorKind, Result};
use crate::identifier::IndexIdentifier;
use crate::metadata::{IndexMetadata, Snapshot, read_index_metadata};

/// How many reload rounds resolve one ambiguous commit before giving up.
const RESOLVE_ROUNDS: u32 = 5;

/// What an attempt sees: the loaded pointer and its metadata.
pub(super) struct Base<'a> {
    /// The loaded metadata location (the commit's base).
    pub location: &'a str,
    /// Its parsed, validated metadata.
    pub metadata: &'a IndexMetadata,
    /// The fresh id of the file this attempt would write (see [`metadata_path`]).
    pub file_id: Uuid,
    /// The attempt number, from 1.
    pub attempt: u32,
}

/// What the planner decided for one attempt.
pub(super) enum Step<T> {
    /// Write and commit this successor of the base.
    Commit(IndexMetadata),
    /// Stop without committing.
    Finish(T),
}

/// A committed metadata file.
pub(super) struct Committed {
    pub location: String,
    pub metadata: Arc<IndexMetadata>,
    pub base: Arc<IndexMetadata>,
    pub attempts: u32,
}

impl Committed {
    pub fn published(&self) -> Published {
        let current = self.metadata.current_snapshot();
        Published {
            metadata_location: self.location.clone(),
            snapshot_id: current.snapshot_id(),
            sequence_number: current.sequence_number(),
            attempts: self.attempts,
            already_published: false,
        }
    }
}

/// How a run ended.
pub(super) enum Run<T> {
    Committed(Committed),
    /// The planner finished.
    Finished(T),
    /// The planner failed: its error ends the run, whatever its kind.
    Failed(Error),
}

/// What reloading after `COMMIT_STATE_UNKNOWN` showed.
enum Resolution {
    Applied,
    Lost,
    Unknown(String),
}

/// Why an attempt is retried (the error is returned if no attempt is left).
fn retryable(err: &Error) -> bool {
    matches!(
        err.kind(),
        ErrorKind::CommitConflict | ErrorKind::StoreUnavailable | ErrorKind::ConcurrentModification
    )
}

impl Publisher {
    /// Sleep before the attempt after `failed` failed ones, the last of which took
    /// `attempt` (see [`super::PublishPolicy`]), with the jitter of the id
    /// generator.
    pub(super) async fn back_off(&self, failed: u32, attempt: std::time::Duration) {
        let ids = self.inner.injected.ids.as_ref();
        self.inner.policy.back_off(failed, attempt, ids).await;
    }

    /// Run attempts until one commits, the planner finishes, or attempts run out.
    pub(super) async fn run<T, P>(
        &self,
        identifier: &IndexIdentifier,
        mut plan: P,
    ) -> Result<Run<T>>
    where
        P: FnMut(&Base<'_>) -> Result<Step<T>> + Send,
    {
        let max = self.inner.policy.attempts();
        let mut attempt = 0;
        loop {
            attempt += 1;
            let started = std::time::Instant::now();
            let err = match self.attempt(identifier, attempt, &mut plan).await {
                Ok(Run::Failed(err)) => return Err(err),
                Ok(run) => return Ok(run),
                Err(err) => err,
            };
            if !retryable(&err) {
                return Err(err);
            }
            if attempt >= max {
                return Err(Error::with_source(
                    err.kind(),
                    format!("publishing to {identifier} gave up after {attempt} attempts"),
                    err,
                ));
            }
            tracing::debug!(%identifier, attempt, code = err.code(), "publication attempt failed; backing off");
            // A lost race spreads contenders over attempt-lengths; a store failure's attempt
            // may have lasted a whole timeout, which says nothing about contention.
            let contended = err.kind() != ErrorKind::StoreUnavailable;
            let took = if contended {
                started.elapsed()
            } else {
                std::time::Duration::ZERO
            };
            self.back_off(attempt, took).await;
        }
    }

    /// One attempt.
    async fn attempt<T, P>(
        &self,
        identifier: &IndexIdentifier,
        attempt: u32,
        plan: &mut P,
    ) -> Result<Run<T>>
    where
        P: FnMut(&Base<'_>) -> Result<Step<T>> + Send,
    {
        let pointer = self.inner.catalog.load(identifier).await?;
        let base = self.read_metadata(&pointer.metadata_location).await?;
        let file_id = self.inner.injected.ids.uuid();
        let step = match plan(&Base {
            location: &pointer.metadata_location,
            metadata: &base,
            file_id,
            attempt,
        }) {
            Ok(step) => step,
            Err(err) => return Ok(Run::Failed(err)),
        };
        let new = match step {
            Step::Finish(value) => return Ok(Run::Finished(value)),
            Step::Commit(new) => new,
        };
        new.check_successor_of(&base)?;
        let location = self.write(&new, file_id).await?;
        let new = Arc::new(new);
        let committed = Committed {
            location,
            metadata: new.clone(),
            base,
            attempts: attempt,
        };
        let source = new.current_snapshot().source_table();
        let base_location = &pointer.metadata_location;
        match self
            .inner
            .catalog
            .commit(identifier, Some(source), base_location, &committed.location)
            .await
        {
            Ok(_) => {}
            Err(err) if err.kind() == ErrorKind::CommitStateUnknown => {
                match self
                    .resolve(identifier, &pointer, &committed.location, &new)
                    .await?
                {
                    Resolution::Applied => {}
                    Resolution::Lost => {
                        return Err(Error::with_source(
                            ErrorKind::CommitConflict,
                            format!(
                                "the ambiguous commit of `{}` to {identifier} did not land; reapplying",
                                committed.location
                            ),
                            err,
                        ));
                    }
                    Resolution::Unknown(why) => {
                        return Err(Error::with_source(
                            ErrorKind::CommitStateUnknown,
                            format!(
                                "the commit of `{}` to {identifier} may or may not have applied ({why}); the file was left in place, reload before retrying",
                                committed.location
                            ),
                            err,
                        ));
                    }
                }
            }
            Err(err) => return Err(err),
        }
        self.inner.cache.insert(&committed.location, new);
        Ok(Run::Committed(committed))
    }

    /// Write `metadata` to a fresh location with create-if-absent, read it back and check
    /// it; returns the absolute location.
    pub(super) async fn write(&self, metadata: &IndexMetadata, file_id: Uuid) -> Result<String> {
        let relative = metadata_path(
            metadata.index_uuid(),
            metadata.last_sequence_number(),
            file_id,
        );
        let bytes = metadata.to_json_vec();
        let location = self
            .inner
            .warehouse
            .write_new(&relative, Bytes::from(bytes))
            .await
            .map_err(|err| match err.kind() {
                // A name collision: another attempt chose the same name (e.g. seeded ids).
                ErrorKind::AlreadyExists => Error::with_source(
                    ErrorKind::StoreUnavailable,
                    format!("metadata file `{relative}` already exists; choosing another name"),
                    err,
                ),
                _ => err,
            })?;
        let inner = &self.inner;
        let parsed =
            read_index_metadata(&inner.warehouse, &location, &inner.injected.registry).await?;
        if parsed != *metadata {
            return Err(Error::new(
                ErrorKind::InvalidIndexMetadata,
                format!("metadata file `{location}` reads back different from what was written"),
            ));
        }
        Ok(location)
    }

    /// Decide an ambiguous commit of `new_location` (based on `pointer`) by reloading.
    async fn resolve(
        &self,
        identifier: &IndexIdentifier,
        pointer: &IndexPointer,
        new_location: &str,
        new: &IndexMetadata,
    ) -> Result<Resolution> {
        let ours = new.current_snapshot();
        let mut last = String::from("the catalog could not be reloaded");
        for round in 1..=RESOLVE_ROUNDS {
            if round > 1 {
                self.back_off(round - 1, std::time::Duration::ZERO).await;
            }
            let current = match self.inner.catalog.load(identifier).await {
                Ok(current) => current,
                Err(err) if err.is_retryable() => {
                    last = format!("reloading failed: {}", err.code());
                    continue;
                }
                Err(err) => return Ok(Resolution::Unknown(format!("reloading failed: {err}"))),
            };
            if current.metadata_location == new_location {
                return Ok(Resolution::Applied);
            }
            if current.metadata_location == pointer.metadata_location {
                // Not landed (yet). The location is unique, so the same commit is safe
                // to re-issue: it lands at most once.
                let source = new.current_snapshot().source_table();
                match self
                    .inner
                    .catalog
                    .commit(
                        identifier,
                        Some(source),
                        &pointer.metadata_location,
                        new_location,
                    )
                    .await
                {
                    Ok(_) => return Ok(Resolution::Applied),
                    Err(err) if err.is_retryable() => {
                        last = format!("re-issuing the commit failed: {}", err.code());
                        continue;
                    }
                    Err(err) => return Err(err),
                }
            }
            let metadata = match self.read_metadata(&current.metadata_location).await {
                Ok(metadata) => metadata,
                Err(err) => {
                    last = format!("reading the current metadata failed: {}", err.code());
                    continue;
                }
            };
            return Ok(judge(&metadata, new, ours));
        }
        Ok(Resolution::Unknown(last))
    }
}

/// Whether `ours` (the current snapshot of `new`) is in, or can no longer reach, `current`.
fn judge(current: &IndexMetadata, new: &IndexMetadata, ours: &Snapshot) -> Resolution {
    if current.index_uuid() != new.index_uuid() {
        return Resolution::Unknown("the identifier now names another index".into());
    }
    if current.snapshot(ours.snapshot_id()) == Some(ours) {
        // A later writer built on our metadata: it was published.
        return Resolution::Applied;
    }
    let taken = current
        .snapshots()
        .iter()
        .any(|s| s.sequence_number() == ours.sequence_number());
    if taken || current.last_sequence_number() < ours.sequence_number() {
        // Our sequence number went to another snapshot, or the index never reached it:
        // our commit (conditioned on a base that is no longer current) cannot land.
        return Resolution::Lost;
    }
    Resolution::Unknown(format!(
        "the current metadata neither retains snapshot {} nor rules it out",
        ours.snapshot_id()
    ))
}
