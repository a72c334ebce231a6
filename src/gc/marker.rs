//! Ownership: which catalog may collect garbage in a warehouse.
//!
//! A catalog's identity is a UUID stored once in its pointer store under
//! [`CATALOG_ID_KEY`] (create-if-absent). A warehouse is owned by the catalog whose id its
//! marker object `<root>/_catalog-owner.json` names; the marker is also written once with
//! create-if-absent by [`claim`] (`parqdb-catalog init`) and never changed:
//!
//! ```json
//! {"marker-version": 1, "catalog-id": "6f1c…", "catalog": "file:///wh/_catalog",
//!  "warehouse": "file:///wh", "created-ms": 1750000000000}
//! ```
//!
//! The collector refuses to run ([`ErrorKind::Configuration`]) when the marker is missing,
//! when the catalog has no id, or when the ids differ: a catalog only deletes from a
//! warehouse it owns, never from one it merely shares a prefix with.

use bytes::Bytes;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::catalog::Catalog;
use crate::catalog::write::{Basis, WriteOutcome, conditional_write, read_with_retry, store_error};
use crate::error::{Error, ErrorKind, Result};
use crate::store::{PutMode as StorePutMode, StoreKey};

/// The marker's name under the warehouse root.
pub const MARKER: &str = "_catalog-owner.json";
/// The pointer-store key of the catalog's id record.
pub const CATALOG_ID_KEY: &str = "_meta/=catalog-id";

const MARKER_VERSION: i32 = 1;

/// The ownership marker of a warehouse.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct OwnershipMarker {
    /// Always 1.
    pub marker_version: i32,
    /// The owning catalog's id.
    pub catalog_id: Uuid,
    /// The owning catalog's pointer store, as it described itself when claiming.
    pub catalog: String,
    /// The warehouse root.
    pub warehouse: String,
    /// When the warehouse was claimed.
    pub created_ms: i64,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
struct CatalogIdRecord {
    catalog_id: Uuid,
    // The commit-id fields let the catalog's ambiguous-write resolution read it back.
    commit_id: Uuid,
    previous_commit_ids: Vec<Uuid>,
    created_ms: i64,
}

fn refuse(message: String) -> Error {
    Error::new(ErrorKind::Configuration, message)
}

/// The catalog's id, if it has one.
pub async fn catalog_id(catalog: &Catalog) -> Result<Option<Uuid>> {
    let key = StoreKey::new(CATALOG_ID_KEY)?;
    let Some(stored) = read_with_retry(catalog.store().as_ref(), &key, &Default::default()).await?
    else {
        return Ok(None);
    };
    let record: CatalogIdRecord = serde_json::from_slice(&stored.value).map_err(|err| {
        Error::new(
            ErrorKind::CorruptRecord,
            format!("the catalog id record is invalid: {err}"),
        )
    })?;
    Ok(Some(record.catalog_id))
}

/// The catalog's id, created (once, create-if-absent) if it has none.
async fn ensure_catalog_id(catalog: &Catalog, now_ms: i64) -> Result<Uuid> {
    if let Some(id) = catalog_id(catalog).await? {
        return Ok(id);
    }
    let id = catalog.ids().uuid();
    let record = CatalogIdRecord {
        catalog_id: id,
        commit_id: id,
        previous_commit_ids: Vec::new(),
        created_ms: now_ms,
    };
    let bytes = Bytes::from(serde_json::to_vec(&record).unwrap_or_default());
    let key = StoreKey::new(CATALOG_ID_KEY)?;
    let store = catalog.store().as_ref();
    match conditional_write(
        store,
        &key,
        bytes,
        StorePutMode::Create,
        Basis::Absent,
        id,
        &Default::default(),
    )
    .await?
    {
        WriteOutcome::Applied(_) => Ok(id),
        // Someone else created it first: theirs is the id.
        WriteOutcome::Lost => catalog_id(catalog).await?.ok_or_else(|| {
            store_error(
                store,
                crate::store::StoreError::fatal("the catalog id vanished"),
            )
        }),
    }
}

/// Read the warehouse's marker, if any.
pub async fn read_marker(catalog: &Catalog) -> Result<Option<OwnershipMarker>> {
    let warehouse = catalog.warehouse();
    let path = warehouse.path(MARKER);
    let bytes = match warehouse.object_store().get(&path).await {
        Ok(result) => result
            .bytes()
            .await
            .map_err(|err| unavailable(MARKER, err))?,
        Err(object_store::Error::NotFound { .. }) => return Ok(None),
        Err(err) => return Err(unavailable(MARKER, err)),
    };
    let marker: OwnershipMarker = serde_json::from_slice(&bytes).map_err(|err| {
        refuse(format!(
            "the warehouse ownership marker `{}` is invalid ({err}); refusing to collect garbage",
            warehouse.absolute(MARKER)
        ))
    })?;
    if marker.marker_version != MARKER_VERSION {
        return Err(refuse(format!(
            "the warehouse ownership marker has marker-version {}, which this version does not understand",
            marker.marker_version
        )));
    }
    Ok(Some(marker))
}

/// Claim the catalog's warehouse: give the catalog an id if it has none and write the
/// warehouse's ownership marker if it has none. Idempotent for the owner; a warehouse
/// owned by another catalog is refused with [`ErrorKind::Configuration`].
pub async fn claim(catalog: &Catalog, now_ms: i64) -> Result<OwnershipMarker> {
    let id = ensure_catalog_id(catalog, now_ms).await?;
    let warehouse = catalog.warehouse();
    let marker = OwnershipMarker {
        marker_version: MARKER_VERSION,
        catalog_id: id,
        catalog: catalog.store().describe(),
        warehouse: warehouse.root().to_owned(),
        created_ms: now_ms,
    };
    let bytes = serde_json::to_vec_pretty(&marker).unwrap_or_default();
    let options = PutOptions {
        mode: PutMode::Create,
        ..PutOptions::default()
    };
    let store: &dyn ObjectStore = warehouse.object_store().as_ref();
    match store
        .put_opts(&warehouse.path(MARKER), PutPayload::from(bytes), options)
        .await
    {
        Ok(_) => Ok(marker),
        Err(object_store::Error::AlreadyExists { .. }) => verify_ownership(catalog).await,
        Err(err) => Err(unavailable(MARKER, err)),
    }
}

/// Check that the catalog owns its warehouse; return the marker.
pub async fn verify_ownership(catalog: &Catalog) -> Result<OwnershipMarker> {
    let warehouse = catalog.warehouse();
    let Some(marker) = read_marker(catalog).await? else {
        return Err(refuse(format!(
            "the warehouse `{}` has no ownership marker `{MARKER}`; refusing to collect garbage. Run `parqdb-catalog init` (gc::claim) with the catalog that owns it",
            warehouse.root()
        )));
    };
    let Some(id) = catalog_id(catalog).await? else {
        return Err(refuse(format!(
            "the warehouse `{}` is owned by another catalog ({} at {}); this catalog ({}) has no catalog id; refusing to collect garbage",
            warehouse.root(),
            marker.catalog_id,
            marker.catalog,
            catalog.store().describe()
        )));
    };
    if id != marker.catalog_id {
        return Err(refuse(format!(
            "the warehouse `{}` is owned by another catalog ({} at {}), not by this one ({} at {}); refusing to collect garbage",
            warehouse.root(),
            marker.catalog_id,
            marker.catalog,
            id,
            catalog.store().describe()
        )));
    }
    Ok(marker)
}

fn unavailable(what: &str, err: object_store::Error) -> Error {
    Error::with_source(
        ErrorKind::StoreUnavailable,
        format!("reading or writing `{what}` failed"),
        err,
    )
}
