//! `init --adopt`: what an adoption forgives.
//!
//! An adoption is the operator's word that the pointer store as it is now is the catalog
//! (a backup put back, a store moved). Rule X (`history`) holds every record the previous
//! finished run saw against each walk: one that is gone, or holds a record that does not
//! descend from what the run saw, stops every retention clock (a disk not mounted, a
//! backup put back by mistake). Across an adoption, the records the adopting store lacks
//! or holds otherwise are gone for good: the adoption **forgives** them, and lists them
//! (`_gc/adoptions/<ms>.json`, written before its marker: each key with the commits seen
//! there) for every later run of its epoch.
//!
//! Only those, and record by record. A copy of the store that the ownership check cannot
//! tell from it (a cloned disk, sharing the warehouse) reads the owner's adoption as its
//! own epoch; had the adoption forgotten every record, the owner's records the copy lacks
//! would be gone there, and its collector deleted the owner's live index (GC round 114,
//! F1). Had it forgiven a whole key, a key where the journal saw the copy's commit beside
//! the owner's (both stores writing the same index) would have lost the owner's record
//! there too (round 115, F1). The same reason limits what an adoption releases from rule
//! N (`untaken`).

use uuid::Uuid;

use crate::catalog::Catalog;
use crate::catalog::changelog::{self, Forgiven, Links};
use crate::catalog::ownership::{self, OwnershipMarker};
use crate::error::Result;

use super::journal::Journals;

/// How many records an adoption reads at once.
const READS_AT_ONCE: usize = 16;

/// Adopt the catalog's warehouse (`parqdb-catalog init --adopt`; see
/// [`claim`](super::claim) for a first claim): take a warehouse that holds data without a
/// marker (written by an earlier version, or its marker was lost), re-home a marker of
/// this catalog bound to another store location (the store was moved), or start a new
/// ownership epoch over a warehouse this catalog owns (after restoring a backup of the
/// warehouse or of the pointer store): every retention clock starts again, and the
/// records the collector's previous run saw that this store lacks, or holds without
/// descending from them, are forgiven. A warehouse another catalog owns is refused.
///
/// ```no_run
/// # async fn run(catalog: parqdb_catalog::Catalog) -> parqdb_catalog::Result<()> {
/// let marker = parqdb_catalog::gc::adopt(&catalog, catalog.clock().now_ms()).await?;
/// println!("epoch {}", marker.created_ms);
/// # Ok(()) }
/// ```
pub async fn adopt(catalog: &Catalog, now_ms: i64) -> Result<OwnershipMarker> {
    let forgiven = forgiven(catalog).await?;
    ownership::adopt(catalog, now_ms, &forgiven).await
}

/// The records the previous finished run saw (and those it listed as vanished) that this
/// store lacks now, or holds without descending from the commit the run saw there
/// (neither its chain nor the commit links lead back to it): each key with those commits.
async fn forgiven(catalog: &Catalog) -> Result<Forgiven> {
    let warehouse = catalog.warehouse();
    let journals = Journals::new(warehouse);
    let Some(previous) = journals.state().await?.previous else {
        return Ok(Forgiven::new());
    };
    let facts = journals.read(previous).await?;
    let links = Links::read(warehouse).await?;
    let seen: Vec<(String, Uuid)> = facts.records.into_iter().chain(facts.vanished).collect();
    let mut forgiven = Forgiven::new();
    for chunk in seen.chunks(READS_AT_ONCE) {
        let held = futures::future::try_join_all(
            chunk
                .iter()
                .map(|(key, _)| changelog::chain_at(catalog, key.as_str())),
        )
        .await?;
        for ((key, commit), chain) in chunk.iter().zip(held) {
            let descends = chain.is_some_and(|chain| links.descends(chain.commits(), *commit));
            if !descends {
                forgiven.entry(key.clone()).or_default().insert(*commit);
            }
        }
    }
    Ok(forgiven)
}
