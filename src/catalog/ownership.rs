//! Ownership: which catalog may write to and collect garbage in a warehouse.
//!
//! A catalog's identity is a UUID stored once in its pointer store under
//! [`CATALOG_ID_KEY`] (create-if-absent). A warehouse is owned by the catalog whose id its
//! marker object `<root>/_catalog-owner.json` names; the marker is written once with
//! create-if-absent and never changed:
//!
//! ```json
//! {"marker-version": 1, "catalog-id": "6f1c…", "catalog": "file:///wh/_catalog",
//!  "warehouse": "file:///wh", "created-ms": 1750000000000}
//! ```
//!
//! * **Every write** (register, commit, drop, rename, namespace create and drop, and so
//!   publish) first makes sure the catalog owns its warehouse ([`Catalog`]'s writes run
//!   [`Catalog::claim_warehouse`]): an unclaimed, **unused** warehouse is claimed on the
//!   spot (both creations are create-if-absent, so of two catalogs racing for a fresh
//!   warehouse exactly one wins), and a warehouse owned by another catalog is refused with
//!   [`ErrorKind::WarehouseNotOwned`], naming the owner. So a second pointer store pointed
//!   at the same warehouse (a forgotten `--catalog`) can never publish files the owner's
//!   collector would delete under it. The answer is cached per catalog instance for
//!   [`OWNERSHIP_TTL`], then checked again.
//! * **An unclaimed warehouse that holds data** (anything under `_gc/` — every claim also
//!   writes a record `_gc/claims/<catalog-id>.json`, so a warehouse whose marker was lost
//!   still shows it was claimed —, or an object under `metadata/` or `indexes/`
//!   older than [`UNCLAIMED_METADATA_AGE`] other than the one a first register publishes;
//!   younger files may be the first writer's own preparation) is never claimed, neither
//!   implicitly nor by `init`: its owner's marker was lost, or another system wrote it, and
//!   the collector would take it for garbage. The operator adopts it deliberately
//!   ([`adopt`], `parqdb-catalog init --adopt`); the marker's `created-ms` is the
//!   adoption, and no retention clock dates from before it (see `gc::rules`), so nothing
//!   that was there is deleted sooner than one full retention after the adoption.
//! * **A copy of a pointer store** (restored or cloned elsewhere) carries its catalog id;
//!   the marker also records the store's location ([`PointerStore::location`](crate::store::PointerStore::location)), and a
//!   store with the right id at another location is refused too (a deliberate move is
//!   re-homed with `init --adopt`). A DynamoDB table's location holds its region: a
//!   same-named table in another region is another store. Markers written before that
//!   name the table alone and are still honoured, with a warning, until `init --adopt`
//!   rebinds them.
//! * **Init** ([`claim`], `parqdb-catalog init`) claims explicitly.
//! * **The collector** ([`verify_ownership`]) refuses to run unless the marker names this
//!   catalog: a catalog only deletes from a warehouse it owns, never from one it merely
//!   shares a prefix with.
//!
//! Each of them also refuses a warehouse nested inside another warehouse's `metadata/`,
//! `indexes/` or `_gc/` ([`Warehouse::enclosing_owner`]): the outer collector would treat
//! its objects as its own garbage.

use bytes::Bytes;
use futures::StreamExt;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::Catalog;
use super::write::{Basis, WriteOutcome, conditional_write, read_with_retry, store_error};
use crate::error::{Error, ErrorKind, Result};
use crate::retry::{Retry, RetryPolicy};
use crate::store::{PutMode as StorePutMode, StoreKey};
use crate::warehouse::layout::CLAIMS_DIR;
use crate::warehouse::{Fetched, GC_DIR, INDEXES_DIR, ListItem, METADATA_DIR, Warehouse};

pub(crate) use crate::warehouse::OWNER_MARKER as MARKER;

/// How long a catalog trusts its last ownership check before checking again.
pub const OWNERSHIP_TTL: std::time::Duration = std::time::Duration::from_secs(60);

/// The pointer-store key of the catalog's id record.
pub const CATALOG_ID_KEY: &str = "_meta/=catalog-id";

const MARKER_VERSION: i32 = 1;
const MAX_MARKER_BYTES: u64 = 64 * 1024;

/// The ownership marker of a warehouse.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct OwnershipMarker {
    /// Always 1.
    pub marker_version: i32,
    /// The owning catalog's id.
    pub catalog_id: Uuid,
    /// The owning catalog's pointer store: its location ([`PointerStore::location`](crate::store::PointerStore::location)) when
    /// claiming, or its description for a process-local store.
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
    let retry = Retry {
        policy: &RetryPolicy::default(),
        random: catalog.ids().as_ref(),
        stop: None,
    };
    let Some(stored) = read_with_retry(catalog.store().as_ref(), &key, retry).await? else {
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
        Retry {
            policy: &RetryPolicy::default(),
            random: catalog.ids().as_ref(),
            stop: None,
        },
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

/// Read a warehouse's marker, if any.
pub async fn read_marker(warehouse: &Warehouse) -> Result<Option<OwnershipMarker>> {
    let bytes = match warehouse.get(MARKER, MAX_MARKER_BYTES).await? {
        Fetched::Object(bytes, _) => bytes,
        Fetched::Missing => return Ok(None),
        Fetched::TooLarge(size) => {
            return Err(refuse(format!(
                "the warehouse ownership marker `{}` has {size} bytes; it is not a marker",
                warehouse.absolute(MARKER)
            )));
        }
    };
    let marker: OwnershipMarker = serde_json::from_slice(&bytes).map_err(|err| {
        refuse(format!(
            "the warehouse ownership marker `{}` is invalid ({err}); refusing to write or collect garbage",
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

/// Refuse a warehouse nested inside another warehouse's managed or `_gc/` prefixes.
async fn refuse_nested(warehouse: &Warehouse) -> Result<()> {
    match warehouse.enclosing_owner().await? {
        None => Ok(()),
        Some(outer) => Err(refuse(format!(
            "the warehouse `{}` lies inside the `metadata/`, `indexes/` or `_gc/` directory of the warehouse at {outer}, whose garbage collector would delete its objects; choose a root outside it",
            warehouse.root()
        ))),
    }
}

/// How old a metadata file in an unclaimed warehouse must be to show that somebody used
/// the warehouse before (younger files may be a writer's preparation for its first
/// register, which claims the warehouse).
pub const UNCLAIMED_METADATA_AGE: std::time::Duration = std::time::Duration::from_secs(24 * 3600);

/// Evidence that a warehouse without a marker has been used: an object under `_gc/` (a
/// catalog claimed it — every claim leaves a record in `_gc/claims/` — or a collector ran
/// there), or an object under `metadata/` or `indexes/` other than `publishing` (the file
/// a first register is about to publish) written more than [`UNCLAIMED_METADATA_AGE`]
/// before `now_ms` (another system's data, or an owner's whose marker was lost: the
/// collector would take it for garbage). `None` if it looks unused.
async fn earlier_use(
    warehouse: &Warehouse,
    publishing: Option<&str>,
    own: Option<(Uuid, &str)>,
    now_ms: i64,
) -> Result<Option<String>> {
    // This catalog's own claim record (its marker was lost since), if it names this
    // catalog's pointer store: a copy of the store (restored, cloned) carries the same id
    // but is not the owner, so the record is evidence against it.
    let own_record = match own {
        Some((id, location)) => {
            let record = claim_record(id);
            let names_this_store = match warehouse.get(&record, MAX_MARKER_BYTES).await? {
                Fetched::Object(bytes, _) => serde_json::from_slice::<OwnershipMarker>(&bytes)
                    .is_ok_and(|marker| normalized(&marker.catalog) == normalized(location)),
                Fetched::Missing | Fetched::TooLarge(_) => false,
            };
            names_this_store.then_some(record)
        }
        None => None,
    };
    let young_after = now_ms.saturating_sub(UNCLAIMED_METADATA_AGE.as_millis() as i64);
    for dir in [GC_DIR, METADATA_DIR, INDEXES_DIR] {
        let mut listed = warehouse.list(dir);
        while let Some(item) = listed.next().await {
            let name = match item? {
                ListItem::Object(listed) => {
                    if dir != GC_DIR && listed.last_modified_ms > young_after {
                        continue;
                    }
                    listed.name
                }
                ListItem::Skipped { name, .. } => name,
            };
            if Some(name.as_str()) != publishing && Some(&name) != own_record.as_ref() {
                return Ok(Some(name));
            }
        }
    }
    Ok(None)
}

fn claim_record(id: Uuid) -> String {
    format!("{CLAIMS_DIR}/{id}.json")
}

/// The store location a marker is bound to: the store's own location, or its
/// description for a process-local store.
fn bound_location(catalog: &Catalog) -> String {
    let store = catalog.store();
    store.location().unwrap_or_else(|| store.describe())
}

/// A location in comparable form: `file://` paths resolved.
fn normalized(location: &str) -> String {
    match location.strip_prefix("file://") {
        Some(path) => format!(
            "file://{}",
            crate::warehouse::resolve_existing(std::path::Path::new(path)).display()
        ),
        None => location.to_owned(),
    }
}

/// The warning for a marker of this catalog written before DynamoDB stores were bound to
/// their region, which names the store now at its location by the table alone: a
/// same-named table in another region would pass for it. The collector reports it in
/// every run's plan (GC round 103: in a log line alone, the command never showed it).
pub(crate) fn unbound_region(catalog: &Catalog, marker: &OwnershipMarker) -> Option<String> {
    let here = normalized(&catalog.store().location()?);
    binds_name_only(&marker.catalog, &here).then(|| {
        format!(
            "the ownership marker binds the warehouse to `{}` without its region, so a same-named table in another region (a restored backup, a replica) would pass for this catalog's store `{here}`; run `parqdb-catalog init --adopt` from this region to bind it (adopting restarts every retention clock)",
            marker.catalog
        )
    })
}

/// Whether a marker written before stores were bound to their region (`dynamodb://t`)
/// names the store now at `here` (`dynamodb://t?region=…`). Such a marker is honoured (a
/// release must not refuse its own warehouses), with a warning: `init --adopt` rebinds it.
fn binds_name_only(marker: &str, here: &str) -> bool {
    marker.starts_with("dynamodb://")
        && !marker.contains('?')
        && here.split_once('?').is_some_and(|(name, _)| name == marker)
}

/// Which catalogs may claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Claim<'a> {
    /// Only an unused warehouse (a first write; `init`), tolerating the named file.
    Unused(Option<&'a str>),
    /// Any unclaimed warehouse, and re-home a marker of this catalog's id bound to
    /// another store location (`init --adopt`).
    Adopt,
}

async fn claim_as(catalog: &Catalog, now_ms: i64, how: Claim<'_>) -> Result<OwnershipMarker> {
    let warehouse = catalog.warehouse();
    refuse_nested(warehouse).await?;
    let existing = read_marker(warehouse).await?;
    let here = bound_location(catalog);
    if existing.is_none()
        && let Claim::Unused(publishing) = how
        && let Some(evidence) = earlier_use(
            warehouse,
            publishing,
            catalog_id(catalog).await?.map(|id| (id, here.as_str())),
            now_ms,
        )
        .await?
    {
        // A catalog that won the race for the marker since it was read above has left
        // its claim record too: answer as its marker says (`WAREHOUSE_NOT_OWNED`).
        if read_marker(warehouse).await?.is_some() {
            return verify_marker(catalog).await;
        }
        return Err(refuse(format!(
            "the warehouse `{}` holds data (`{evidence}`) but no ownership marker: its owner's marker was lost, or an earlier version wrote it. A catalog takes over such a warehouse only deliberately: if this catalog ({}) owns its data, run `parqdb-catalog init --adopt` with it; otherwise use the owner's catalog",
            warehouse.root(),
            catalog.store().describe()
        )));
    }
    let id = ensure_catalog_id(catalog, now_ms).await?;
    let marker = OwnershipMarker {
        marker_version: MARKER_VERSION,
        catalog_id: id,
        catalog: here,
        warehouse: warehouse.root().to_owned(),
        created_ms: now_ms,
    };
    let bytes = Bytes::from(serde_json::to_vec_pretty(&marker).unwrap_or_default());
    let owned = match existing {
        None if warehouse.put_if_absent(MARKER, bytes.clone()).await? => marker,
        Some(current) if how == Claim::Adopt && current.catalog_id == id => {
            // Re-home (this catalog's store moved) or re-adopt (the warehouse or the
            // store was restored from a backup): a new epoch, so every retention clock
            // starts again and no loss is dated before the operator's step.
            warehouse.overwrite(MARKER, bytes.clone()).await?;
            marker
        }
        _ => verify_marker(catalog).await?,
    };
    // A second trace of the claim, under `_gc/`, written once the marker is this
    // catalog's (so a catalog racing for the marker sees the marker, never a claim record
    // alone): a warehouse whose marker is lost later (deleted by hand, or by a tool that
    // cleans up "stray" files) still shows it was used, and no stranger's first write
    // takes it over (see `earlier_use`).
    warehouse.put_if_absent(&claim_record(id), bytes).await?;
    Ok(owned)
}

/// Claim the catalog's warehouse (`parqdb-catalog init`): give the catalog an id if it has
/// none and write the warehouse's ownership marker if it has none. Idempotent for the
/// owner. Refused: a warehouse owned by another catalog ([`ErrorKind::WarehouseNotOwned`]),
/// a nested one, and an unclaimed one that already holds data ([`ErrorKind::Configuration`]:
/// see [`adopt`]).
pub async fn claim(catalog: &Catalog, now_ms: i64) -> Result<OwnershipMarker> {
    claim_as(catalog, now_ms, Claim::Unused(None)).await
}

/// Claim the catalog's warehouse even if it already holds data without a marker (written
/// by an earlier version, or its marker was lost), and re-home a marker of this catalog
/// bound to another store location (the store was moved): `parqdb-catalog init --adopt`.
/// Adopting a warehouse this catalog already owns starts a new ownership epoch: every
/// retention clock starts again (the step after restoring a backup of the warehouse or
/// of the pointer store).
/// The operator asserts that this catalog's pointers are the only ones naming the
/// warehouse's data. A warehouse another catalog owns is still refused.
pub async fn adopt(catalog: &Catalog, now_ms: i64) -> Result<OwnershipMarker> {
    claim_as(catalog, now_ms, Claim::Adopt).await
}

/// Check that the catalog owns its warehouse; return the marker. A missing marker is
/// [`ErrorKind::Configuration`] (run `init`), another owner
/// [`ErrorKind::WarehouseNotOwned`].
pub async fn verify_ownership(catalog: &Catalog) -> Result<OwnershipMarker> {
    let warehouse = catalog.warehouse();
    let marker = verify_marker(catalog).await?;
    refuse_nested(warehouse).await?;
    Ok(marker)
}

async fn verify_marker(catalog: &Catalog) -> Result<OwnershipMarker> {
    let warehouse = catalog.warehouse();
    let Some(marker) = read_marker(warehouse).await? else {
        return Err(refuse(format!(
            "the warehouse `{}` has no ownership marker `{MARKER}`; refusing to collect garbage. Run `parqdb-catalog init` (gc::claim) with the catalog that owns it",
            warehouse.root()
        )));
    };
    let id = catalog_id(catalog).await?;
    check_owner(catalog, &marker, id)?;
    Ok(marker)
}

fn check_owner(catalog: &Catalog, marker: &OwnershipMarker, id: Option<Uuid>) -> Result<()> {
    let store = catalog.store();
    if id == Some(marker.catalog_id) {
        let here = store.location().map(|location| normalized(&location));
        if here
            .as_deref()
            .is_none_or(|here| here == normalized(&marker.catalog))
        {
            return Ok(());
        }
        if let Some(warning) = unbound_region(catalog, marker) {
            tracing::warn!(marker = %marker.catalog, "{warning}");
            return Ok(());
        }
        return Err(Error::new(
            ErrorKind::WarehouseNotOwned,
            format!(
                "the warehouse `{}` is owned by catalog {} at {}; this pointer store ({}) carries the same catalog id, so it is a copy of that store (restored or cloned) or the store moved. A copy may not write to or collect in the original's warehouse; if the store was moved deliberately, run `parqdb-catalog init --adopt` with it",
                catalog.warehouse().root(),
                marker.catalog_id,
                marker.catalog,
                bound_location(catalog)
            ),
        ));
    }
    let this = match id {
        Some(id) => format!("{id} at {}", store.describe()),
        None => format!("{}, which has no catalog id", store.describe()),
    };
    Err(Error::new(
        ErrorKind::WarehouseNotOwned,
        format!(
            "the warehouse `{}` is owned by catalog {} at {}, not by this catalog ({this}); it may neither write to it nor collect garbage in it. Use the owner's catalog (--catalog {})",
            catalog.warehouse().root(),
            marker.catalog_id,
            marker.catalog,
            marker.catalog
        ),
    ))
}

/// Make sure the catalog owns its warehouse before a write: claim it if it is unclaimed
/// and unused (tolerating `publishing`, the metadata file a first register publishes),
/// refuse it if another catalog owns it, if it is nested in another warehouse, or if it
/// holds data without a marker (see [`adopt`]).
pub(crate) async fn ensure_owned(catalog: &Catalog, publishing: Option<&str>) -> Result<()> {
    let warehouse = catalog.warehouse();
    match read_marker(warehouse).await? {
        Some(marker) => {
            let id = catalog_id(catalog).await?;
            check_owner(catalog, &marker, id)?;
            refuse_nested(warehouse).await?;
            // The claim record a claim by an earlier version (or one that stopped between
            // the marker and the record) did not leave: without it a warehouse whose
            // marker is lost and whose metadata is young looks unused to a stranger.
            let bytes = Bytes::from(serde_json::to_vec_pretty(&marker).unwrap_or_default());
            warehouse
                .put_if_absent(&claim_record(marker.catalog_id), bytes)
                .await
                .map(|_| ())
        }
        None => claim_as(catalog, catalog.clock().now_ms(), Claim::Unused(publishing))
            .await
            .map(|_| ()),
    }
}

#[cfg(test)]
mod tests {
    use super::binds_name_only;

    #[test]
    fn a_marker_naming_a_table_alone_names_it_in_any_region_and_nothing_else() {
        assert!(binds_name_only(
            "dynamodb://t",
            "dynamodb://t?region=us-east-1"
        ));
        assert!(!binds_name_only(
            "dynamodb://t",
            "dynamodb://t2?region=us-east-1"
        ));
        assert!(!binds_name_only(
            "dynamodb://t?region=us-east-1",
            "dynamodb://t?region=us-west-2"
        ));
        assert!(!binds_name_only("s3://b/p", "s3://b/p?region=x"));
    }
}
