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
//!   re-homed with `init --adopt`). A location names the store *instance*, asked at every
//!   check, so a copy under the store's own name is another store (see `binding`): a
//!   DynamoDB table by its name, region, account and creation time (`DescribeTable`; a
//!   same-named table in another region or account, or one deleted and restored under its
//!   name); a local directory by its path, inode and birth time (a backup restored at the
//!   path, a copy on another host that shares the warehouse); an S3 bucket by its name,
//!   prefix and its server's endpoint, or its AWS partition (a same-named bucket on a
//!   replica site, or in another partition). Markers
//!   written before that (naming the store alone, or a table and its region) are still
//!   honoured, with a warning in every gc report, until `init --adopt` rebinds them — but
//!   not once the catalog has bound the warehouse exactly: such a marker is version 2 or 3,
//!   which earlier releases refuse to read (none of them rewrites it looser or collects
//!   under it), and every claim and adoption leaves `_gc/claims/<catalog-id>.bound` as
//!   exact as its marker before it writes the marker. A looser marker where that record
//!   or the claim record shows an exact binding (an earlier release's `init --adopt` after
//!   the marker was removed, perhaps from a copy) binds nobody until `init --adopt` runs
//!   again with this release.
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

mod binding;

use binding::{binds_less, copies, loose_binding_at, marker_version, normalized};

use super::Catalog;
use super::changelog::Forgiven;
use super::write::{Basis, WriteOutcome, conditional_write, read_with_retry, store_error};
use crate::error::{Error, ErrorKind, Result};
use crate::retry::{Retry, RetryPolicy};
use crate::store::{PutMode as StorePutMode, StoreKey};
use crate::warehouse::layout::{CLAIMS_DIR, nested_root};
use crate::warehouse::{Fetched, GC_DIR, INDEXES_DIR, ListItem, METADATA_DIR, Warehouse};

pub(crate) use crate::warehouse::OWNER_MARKER as MARKER;

/// How long a catalog trusts its last ownership check before checking again.
pub const OWNERSHIP_TTL: std::time::Duration = std::time::Duration::from_secs(60);

/// The pointer-store key of the catalog's id record.
pub const CATALOG_ID_KEY: &str = "_meta/=catalog-id";

/// The marker versions this release reads: 1, and 2 and 3 for a marker binding its store
/// as one instance (see `binding::marker_version`).
const MARKER_VERSIONS: std::ops::RangeInclusive<i32> = 1..=3;
const MAX_MARKER_BYTES: u64 = 64 * 1024;

/// The ownership marker of a warehouse.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct OwnershipMarker {
    /// 2 or 3 for a store bound as one instance (2: a DynamoDB table's region, account and
    /// creation time; 3: a directory's inode, a bucket's server or partition), which
    /// releases that bind less cannot read; else 1.
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
    if !MARKER_VERSIONS.contains(&marker.marker_version) {
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
                    // A young file is a first writer's preparation, unless it shows another
                    // warehouse or pointer store nested inside this one (GC round 107: a
                    // stranger claimed the directory enclosing a young warehouse, whose
                    // owner was then refused as nested).
                    let nested = nested_root(&listed.name).is_some();
                    if dir != GC_DIR && listed.last_modified_ms > young_after && !nested {
                        continue;
                    }
                    listed.name
                }
                ListItem::Skipped { name, .. } => name,
            };
            // A binding record is no evidence of use: it goes before its claim's marker, so
            // alone (without the claim record that follows the marker) it is a claim under
            // way or one that stopped before its marker, by this catalog or another (a
            // racing catalog that sees it must go on and lose the race for the marker, not
            // take the warehouse for a used one).
            // Nor is a claim's list of the log (`changelog::record_release`), written
            // before the binding record.
            if is_binding_record(&name) || crate::catalog::changelog::is_release(&name) {
                continue;
            }
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

/// The mark that catalog `id` has bound the warehouse to its store as exactly as this
/// release binds (a copy of the exact marker; see `binding`): left by every claim and
/// adoption of this release before its marker ([`record_binding`]), never removed. Once it
/// holds a marker of version 2 or more, a marker of the same catalog that binds less (written by an
/// earlier release's `init --adopt`, perhaps from a copy) is refused, not honoured:
/// honouring it would let every copy under the store's name pass (GC round 104, F1).
fn binding_record(id: Uuid) -> String {
    format!("{CLAIMS_DIR}/{id}.bound")
}

/// Whether the warehouse file `name` is a binding record ([`binding_record`]), or a
/// local store's staging file of one (`<record>#<n>`, left by a write that stopped before
/// its rename: GC round 107).
fn is_binding_record(name: &str) -> bool {
    let name = match name.rsplit_once('#') {
        Some((record, n)) if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) => record,
        _ => name,
    };
    name.strip_prefix(CLAIMS_DIR)
        .and_then(|rest| rest.strip_prefix('/'))
        .and_then(|rest| rest.strip_suffix(".bound"))
        .is_some_and(|id| Uuid::parse_str(id).is_ok())
}

/// The record showing that the catalog of `marker` bound the warehouse more exactly
/// before, if one does: its binding record or its claim record, if either holds a marker
/// of version 2 or more, or one binding the store more exactly than `marker` (whichever store it
/// names: the binding record may be lost with the marker, GC rounds 107–108). A binding
/// record that holds no marker counts too (only a claim writes one). The binding records
/// of rounds 104–108 for a directory or a bucket hold the marker they preceded, naming
/// the store alone: no evidence of an exact binding.
async fn bound_exactly(warehouse: &Warehouse, marker: &OwnershipMarker) -> Result<Option<String>> {
    let loose = normalized(&marker.catalog);
    let binds_more = |recorded: &OwnershipMarker| {
        recorded.marker_version >= 2 || binds_less(&loose, &normalized(&recorded.catalog)).is_some()
    };
    let records = [
        (binding_record(marker.catalog_id), true),
        (claim_record(marker.catalog_id), false),
    ];
    for (record, unreadable_binds) in records {
        let exact = match warehouse.get(&record, MAX_MARKER_BYTES).await? {
            Fetched::Object(bytes, _) => match serde_json::from_slice::<OwnershipMarker>(&bytes) {
                Ok(recorded) => binds_more(&recorded),
                Err(_) => unreadable_binds,
            },
            Fetched::TooLarge(_) => unreadable_binds,
            Fetched::Missing => false,
        };
        if exact {
            return Ok(Some(record));
        }
    }
    Ok(None)
}

/// Leave `record` (the binding or the claim record of `marker`, serialized as `bytes`)
/// at least as exact as the marker: create it if it is missing, and make it the marker
/// where it holds a looser one (the records of rounds 104–108 name a directory or a
/// bucket alone, and an adoption that binds it exactly must leave the evidence of that).
/// One read where the record is already as exact as the marker.
async fn record_binding(
    warehouse: &Warehouse,
    record: &str,
    marker: &OwnershipMarker,
    bytes: &Bytes,
) -> Result<()> {
    // How exactly the marker's location binds (a hand-edited marker may give a version
    // below its location's: GC round 108).
    let exactness = marker_version(&marker.catalog);
    let as_exact = match warehouse.get(record, MAX_MARKER_BYTES).await? {
        // A claim racing for it is this catalog's, and binds as this one does.
        Fetched::Missing => {
            return warehouse
                .put_if_absent(record, bytes.clone())
                .await
                .map(drop);
        }
        Fetched::Object(recorded, _) => serde_json::from_slice::<OwnershipMarker>(&recorded)
            .is_ok_and(|recorded| {
                recorded
                    .marker_version
                    .max(marker_version(&recorded.catalog))
                    >= exactness
            }),
        Fetched::TooLarge(_) => false,
    };
    if !as_exact && exactness >= 2 {
        warehouse.overwrite(record, bytes.clone()).await?;
    }
    Ok(())
}

/// The store location a marker is bound to: the store's own location, or its
/// description for a process-local store.
async fn bound_location(catalog: &Catalog) -> Result<String> {
    let store = catalog.store();
    Ok(location_of(catalog)
        .await?
        .unwrap_or_else(|| store.describe()))
}

/// The catalog's store location in comparable form (`None`: a process-local store).
async fn location_of(catalog: &Catalog) -> Result<Option<String>> {
    let store = catalog.store();
    let location = store
        .location()
        .await
        .map_err(|err| store_error(store.as_ref(), err))?;
    Ok(location.map(|location| normalized(&location)))
}

/// The warning for a marker of this catalog written before its kind of store was bound
/// as exactly as now (see `binding`), which names the store with fewer of its attributes:
/// a copy of the store would pass for it. The collector reports it in every run's plan (GC round 103: in a log line
/// alone, the command never showed it).
pub(crate) async fn loose_binding(
    catalog: &Catalog,
    marker: &OwnershipMarker,
) -> Result<Option<String>> {
    Ok(location_of(catalog)
        .await?
        .and_then(|here| loose_binding_at(&normalized(&marker.catalog), &here)))
}

/// Which catalogs may claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Claim<'a> {
    /// Only an unused warehouse (a first write; `init`), tolerating the named file.
    Unused(Option<&'a str>),
    /// Any unclaimed warehouse, and re-home a marker of this catalog's id bound to
    /// another store location (`init --adopt`), forgiving the records named (see
    /// `gc::adoption`).
    Adopt(&'a Forgiven),
}

async fn claim_as(catalog: &Catalog, now_ms: i64, how: Claim<'_>) -> Result<OwnershipMarker> {
    let warehouse = catalog.warehouse();
    refuse_nested(warehouse).await?;
    let existing = read_marker(warehouse).await?;
    if existing.is_none()
        && let Claim::Unused(publishing) = how
        && let Some(evidence) = {
            let own = match catalog_id(catalog).await? {
                Some(id) => Some((id, bound_location(catalog).await?)),
                None => None,
            };
            let own = own.as_ref().map(|(id, here)| (*id, here.as_str()));
            earlier_use(warehouse, publishing, own, now_ms).await?
        }
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
    // Asked once the store holds its id record: a local store's directory exists then,
    // and its location names the directory's inode and birth time.
    let here = bound_location(catalog).await?;
    let marker = OwnershipMarker {
        marker_version: marker_version(&here),
        catalog_id: id,
        catalog: here.clone(),
        warehouse: warehouse.root().to_owned(),
        created_ms: now_ms,
    };
    let bytes = Bytes::from(serde_json::to_vec_pretty(&marker).unwrap_or_default());
    // The binding record goes first, before any marker this claim writes: a claim that
    // stops between the two leaves the record, never an exact marker without it (GC round
    // 105, F1: a lost record let a looser marker pass again).
    let binding = binding_record(id);
    let bind = async || {
        // What the log holds before the epoch begins (rule N of `gc` releases it), and the
        // records an adoption forgives.
        let forgiven = match how {
            Claim::Adopt(forgiven) => forgiven,
            Claim::Unused(_) => &Forgiven::new(),
        };
        crate::catalog::changelog::record_release(catalog, now_ms, forgiven).await?;
        record_binding(warehouse, &binding, &marker, &bytes).await
    };
    let owned = match existing {
        None => {
            bind().await?;
            match warehouse.put_if_absent(MARKER, bytes.clone()).await? {
                true => marker.clone(),
                false => verify_marker(catalog).await?,
            }
        }
        Some(current) if matches!(how, Claim::Adopt(_)) && current.catalog_id == id => {
            // Re-home (this catalog's store moved) or re-adopt (the warehouse or the
            // store was restored from a backup): a new epoch, so every retention clock
            // starts again and no loss is dated before the operator's step.
            bind().await?;
            warehouse.overwrite(MARKER, bytes.clone()).await?;
            marker.clone()
        }
        _ => verify_marker(catalog).await?,
    };
    // A second trace of the claim, under `_gc/`, written once the marker is this
    // catalog's (so a catalog racing for the marker sees the marker, never a claim record
    // alone): a warehouse whose marker is lost later (deleted by hand, or by a tool that
    // cleans up "stray" files) still shows it was used, and no stranger's first write
    // takes it over (see `earlier_use`).
    let owned_bytes = match owned == marker {
        true => bytes,
        false => Bytes::from(serde_json::to_vec_pretty(&owned).unwrap_or_default()),
    };
    record_binding(warehouse, &claim_record(id), &owned, &owned_bytes).await?;
    Ok(owned)
}

/// Claim the catalog's warehouse (`parqdb-catalog init`): give the catalog an id if it has
/// none and write the warehouse's ownership marker if it has none. Idempotent for the
/// owner. Refused: a warehouse owned by another catalog ([`ErrorKind::WarehouseNotOwned`]),
/// a nested one, and an unclaimed one that already holds data ([`ErrorKind::Configuration`]:
/// see [`adopt`](crate::gc::adopt)).
pub async fn claim(catalog: &Catalog, now_ms: i64) -> Result<OwnershipMarker> {
    claim_as(catalog, now_ms, Claim::Unused(None)).await
}

/// Claim the catalog's warehouse even if it already holds data without a marker (written
/// by an earlier version, or its marker was lost), and re-home a marker of this catalog
/// bound to another store location (the store was moved): `parqdb-catalog init --adopt`,
/// through `gc::adopt`, which says which records of the collector's journal the adoption
/// `forgives` (those this store lacks or holds otherwise).
/// Adopting a warehouse this catalog already owns starts a new ownership epoch: every
/// retention clock starts again (the step after restoring a backup of the warehouse or
/// of the pointer store).
/// The operator asserts that this catalog's pointers are the only ones naming the
/// warehouse's data. A warehouse another catalog owns is still refused.
pub(crate) async fn adopt(
    catalog: &Catalog,
    now_ms: i64,
    forgiven: &Forgiven,
) -> Result<OwnershipMarker> {
    claim_as(catalog, now_ms, Claim::Adopt(forgiven)).await
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
    check_marker(catalog, &marker).await?;
    Ok(marker)
}

/// Check that `marker` names this catalog at its store's location (see [`check_owner`]);
/// whether it names the location exactly.
pub(crate) async fn check_marker(catalog: &Catalog, marker: &OwnershipMarker) -> Result<bool> {
    let (id, here) = futures::try_join!(catalog_id(catalog), location_of(catalog))?;
    check_owner(catalog, marker, id, here.as_deref()).await
}

/// Whether `marker` names this catalog (id `id`) at its store's location `here` (`None`:
/// a process-local store, bound by the id alone), and whether exactly. A marker of an
/// earlier release that binds this store less exactly is honoured, with a warning, unless
/// this catalog has bound the warehouse exactly before ([`bound_exactly`]).
async fn check_owner(
    catalog: &Catalog,
    marker: &OwnershipMarker,
    id: Option<Uuid>,
    here: Option<&str>,
) -> Result<bool> {
    let store = catalog.store();
    if id == Some(marker.catalog_id) {
        let Some(here) = here else {
            return Ok(true);
        };
        if here == normalized(&marker.catalog) {
            return Ok(true);
        }
        if let Some(warning) = loose_binding_at(&normalized(&marker.catalog), here) {
            let warehouse = catalog.warehouse();
            // A marker of version 2 or 3 was written exactly: one that binds less was changed.
            let exact = match marker.marker_version >= 2 {
                true => Some(MARKER.to_owned()),
                false => bound_exactly(warehouse, marker).await?,
            };
            if let Some(record) = exact {
                return Err(Error::new(
                    ErrorKind::WarehouseNotOwned,
                    format!(
                        "the ownership marker of `{}` binds it to `{}`, less exactly than catalog {} bound it before (`{record}`): an earlier release's `init --adopt` rewrote it, perhaps from a copy of the store ({} would pass for it). Neither this store ({here}) nor any copy may write or collect until `parqdb-catalog init --adopt` runs with this release from the owner's store (adopting restarts every retention clock)",
                        warehouse.root(),
                        marker.catalog,
                        marker.catalog_id,
                        copies(here)
                    ),
                ));
            }
            tracing::warn!(marker = %marker.catalog, "{warning}");
            return Ok(false);
        }
        return Err(Error::new(
            ErrorKind::WarehouseNotOwned,
            format!(
                "the warehouse `{}` is owned by catalog {} at {}; this pointer store ({}) carries the same catalog id, so it is a copy of that store (restored or cloned) or the store moved. A copy may not write to or collect in the original's warehouse; if the store was moved deliberately, run `parqdb-catalog init --adopt` with it",
                catalog.warehouse().root(),
                marker.catalog_id,
                marker.catalog,
                here
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
            let exact = check_marker(catalog, &marker).await?;
            refuse_nested(warehouse).await?;
            // The claim record a claim by an earlier version (or one that stopped between
            // the marker and the record) did not leave: without it a warehouse whose
            // marker is lost and whose metadata is young looks unused to a stranger. And
            // the binding record of an exact marker, if it was lost (GC round 107: removed
            // with the marker, it let a looser marker pass again).
            let bytes = Bytes::from(serde_json::to_vec_pretty(&marker).unwrap_or_default());
            let claim = claim_record(marker.catalog_id);
            let binding = binding_record(marker.catalog_id);
            // Where the marker's location binds the store as one instance (whatever its
            // version says: GC round 108), and the store is there.
            let repair = exact && marker_version(&marker.catalog) >= 2;
            let bind = async {
                match repair {
                    true => record_binding(warehouse, &binding, &marker, &bytes).await,
                    false => Ok(()),
                }
            };
            futures::try_join!(record_binding(warehouse, &claim, &marker, &bytes), bind).map(|_| ())
        }
        None => claim_as(catalog, catalog.clock().now_ms(), Claim::Unused(publishing))
            .await
            .map(|_| ()),
    }
}
