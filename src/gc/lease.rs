//! The run lease: at most one collector run writes the ledger and deletes at a time.
//!
//! The lease is a sequence of immutable generation objects `<root>/_gc/lease/<gen>.json`
//! (zero-padded, so names sort numerically), each written with create-if-absent — the
//! only condition every object store offers (the local file system has no
//! replace-if-version). The highest generation is the lease's state:
//!
//! * **acquire**: read the highest generation `g`; if it is held by another run and not
//!   expired, the lease is busy; otherwise create `g + 1` naming this run. Of several runs
//!   racing for `g + 1`, exactly one create succeeds.
//! * **renew** (before every destructive batch): create the next generation again. If
//!   another run took the lease over after it expired, that create fails and this run
//!   stops before deleting anything more.
//! * **release**: create a final generation marked released.
//!
//! A crashed run's lease simply expires. The lease is an optimisation and a fence, not
//! the safety argument: every ledger write is create-if-absent and every deletion is
//! re-verified by the run that makes it (see the module docs).

use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use futures::{StreamExt, TryStreamExt};

use crate::error::{Error, ErrorKind, Result};
use crate::warehouse::Warehouse;

/// The lease directory under the warehouse root.
pub const LEASE_DIR: &str = "_gc/lease";

/// How many old generations are kept for inspection.
const KEEP_GENERATIONS: u64 = 8;

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
struct Generation {
    holder: Uuid,
    acquired_ms: i64,
    expires_ms: i64,
    released: bool,
}

/// A held lease.
#[derive(Debug)]
pub(crate) struct Lease {
    warehouse: Warehouse,
    generation: u64,
    holder: Uuid,
    acquired_ms: i64,
    duration_ms: i64,
}

/// The outcome of trying to acquire the lease.
#[derive(Debug)]
pub(crate) enum Acquired {
    /// This run holds the lease.
    Held(Lease),
    /// Another run holds it until `expires_ms`.
    Busy { holder: Uuid, expires_ms: i64 },
}

fn unavailable(err: object_store::Error) -> Error {
    Error::with_source(
        ErrorKind::StoreUnavailable,
        "reading or writing the gc lease failed",
        err,
    )
}

fn generation_path(warehouse: &Warehouse, generation: u64) -> Path {
    warehouse.path(&format!("{LEASE_DIR}/{generation:020}.json"))
}

/// The highest generation and its content, if any.
async fn latest(warehouse: &Warehouse) -> Result<Option<(u64, Generation)>> {
    let store: &dyn ObjectStore = warehouse.object_store().as_ref();
    let listed: Vec<_> = store
        .list(Some(&warehouse.path(LEASE_DIR)))
        .try_collect()
        .await
        .map_err(unavailable)?;
    let Some(generation) = listed
        .iter()
        .filter_map(|meta| {
            meta.location
                .filename()?
                .strip_suffix(".json")?
                .parse::<u64>()
                .ok()
        })
        .max()
    else {
        return Ok(None);
    };
    let bytes = store
        .get(&generation_path(warehouse, generation))
        .await
        .map_err(unavailable)?
        .bytes()
        .await
        .map_err(unavailable)?;
    let content = serde_json::from_slice(&bytes).map_err(|err| {
        Error::new(
            ErrorKind::CorruptRecord,
            format!("gc lease generation {generation} is invalid: {err}"),
        )
    })?;
    Ok(Some((generation, content)))
}

/// Create generation `generation`; `false` if it already exists.
async fn create(warehouse: &Warehouse, generation: u64, content: &Generation) -> Result<bool> {
    let options = PutOptions {
        mode: PutMode::Create,
        ..PutOptions::default()
    };
    let bytes = serde_json::to_vec(content).unwrap_or_default();
    match warehouse
        .object_store()
        .put_opts(
            &generation_path(warehouse, generation),
            PutPayload::from(bytes),
            options,
        )
        .await
    {
        Ok(_) => Ok(true),
        Err(object_store::Error::AlreadyExists { .. }) => Ok(false),
        Err(err) => Err(unavailable(err)),
    }
}

impl Lease {
    /// Acquire the lease for run `holder` at `now_ms` for `duration_ms`.
    pub(crate) async fn acquire(
        warehouse: &Warehouse,
        holder: Uuid,
        now_ms: i64,
        duration_ms: i64,
    ) -> Result<Acquired> {
        let next = match latest(warehouse).await? {
            Some((_, current))
                if !current.released && current.holder != holder && current.expires_ms > now_ms =>
            {
                return Ok(Acquired::Busy {
                    holder: current.holder,
                    expires_ms: current.expires_ms,
                });
            }
            Some((generation, _)) => generation + 1,
            None => 1,
        };
        let content = Generation {
            holder,
            acquired_ms: now_ms,
            expires_ms: now_ms.saturating_add(duration_ms),
            released: false,
        };
        if create(warehouse, next, &content).await? {
            Ok(Acquired::Held(Lease {
                warehouse: warehouse.clone(),
                generation: next,
                holder,
                acquired_ms: now_ms,
                duration_ms,
            }))
        } else {
            // Another run won generation `next`.
            match latest(warehouse).await? {
                Some((_, current)) => Ok(Acquired::Busy {
                    holder: current.holder,
                    expires_ms: current.expires_ms,
                }),
                None => Err(Error::new(
                    ErrorKind::StoreUnavailable,
                    "the gc lease vanished while acquiring it",
                )),
            }
        }
    }

    /// Extend the lease from `now_ms`, or fail if another run has taken it over.
    pub(crate) async fn renew(&mut self, now_ms: i64) -> Result<()> {
        let content = Generation {
            holder: self.holder,
            acquired_ms: self.acquired_ms,
            expires_ms: now_ms.saturating_add(self.duration_ms),
            released: false,
        };
        if create(&self.warehouse, self.generation + 1, &content).await? {
            self.generation += 1;
            Ok(())
        } else {
            Err(Error::new(
                ErrorKind::CommitConflict,
                "this gc run lost its lease to another run (it ran longer than the lease without renewing); stopping before deleting more",
            ))
        }
    }

    /// Release the lease and remove old generations.
    pub(crate) async fn release(self, now_ms: i64) -> Result<()> {
        let content = Generation {
            holder: self.holder,
            acquired_ms: self.acquired_ms,
            expires_ms: now_ms,
            released: true,
        };
        let released = create(&self.warehouse, self.generation + 1, &content).await?;
        if released {
            let keep_from = (self.generation + 1).saturating_sub(KEEP_GENERATIONS);
            let store = self.warehouse.object_store();
            let old: Vec<Path> = store
                .list(Some(&self.warehouse.path(LEASE_DIR)))
                .try_filter_map(|meta| async move {
                    let generation = meta
                        .location
                        .filename()
                        .and_then(|name| name.strip_suffix(".json"))
                        .and_then(|name| name.parse::<u64>().ok());
                    Ok(generation.filter(|g| *g < keep_from).map(|_| meta.location))
                })
                .try_collect()
                .await
                .map_err(unavailable)?;
            let mut results =
                store.delete_stream(futures::stream::iter(old.into_iter().map(Ok)).boxed());
            while let Some(result) = results.next().await {
                match result {
                    Ok(_) | Err(object_store::Error::NotFound { .. }) => {}
                    Err(err) => return Err(unavailable(err)),
                }
            }
        }
        Ok(())
    }
}
