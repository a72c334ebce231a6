//! Releasing the ledger entries of deleted objects, once no publication can still check
//! their condemnations.
//!
//! A deleted object's condemnation stays in the ledger after the object is gone. A writer
//! may have picked up the object while it existed (an old index's tables, named by new
//! metadata written during the run that deletes them, after its metadata pass) and
//! publish that metadata up to the grace period later (gc assumption 3); publication
//! refuses it only while the condemnation is there (rule C), and would otherwise leave a
//! pointer to deleted files. So the delete steps never clear the entries of what they
//! delete: after each page of deletes they write a **deletion record**
//! (`_gc/deleted/<run-ms>-<run>-<sequence>-<page>.json`, see the warehouse layout) listing
//! those entries' files, and later delete steps **release** each record once it is older
//! than the grace period plus twice the skew ([`rules::deletion_released`]): they delete
//! the files it lists, then the record. A deletion no record lists (a crash between the
//! deletes and the record) keeps its condemnations until they expire
//! ([`rules::condemnation_expired`]); a scan clears the entries of gone objects then.
//!
//! Every delete step of a run releases the records whose name falls to its partition,
//! until its budget is spent; what is left goes to a later run. Releasing costs a `GET`
//! of the record, the 1,000-key deletes of its files and the record's delete: about four
//! requests per 1,000 deleted objects, the same deletes that clearing the entries with
//! the objects cost before.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use futures::TryStreamExt;
use serde::{Deserialize, Serialize};

use super::job::Doomed;
use super::journal::JournalRef;
use super::ledger::Ledger;
use super::rules::{self, Timing};
use super::run::Invocation;
use crate::error::{Error, ErrorKind, Result};
use crate::warehouse::layout::DELETED_DIR;
use crate::warehouse::{Fetched, ListItem, Warehouse};

/// What one page of deletes removed: the ledger files of the deleted objects' entries,
/// and for each condemnation marker that held a deleted object's condemnation, the base
/// names of the deleted objects it lists.
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub(crate) struct Deleted {
    ledger_files: Vec<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    markers: BTreeMap<String, BTreeSet<String>>,
}

impl Deleted {
    /// Count `item` deleted.
    pub(crate) fn add(&mut self, item: Doomed) {
        if let Some(marker) = item.marker {
            let base = item.name.rsplit('/').next().unwrap_or(&item.name);
            self.markers
                .entry(marker)
                .or_default()
                .insert(base.to_owned());
        }
        self.ledger_files.extend(item.ledger_files);
    }

    /// Add what `other` deleted.
    pub(crate) fn merge(&mut self, other: Deleted) {
        self.ledger_files.extend(other.ledger_files);
        for (marker, names) in other.markers {
            self.markers.entry(marker).or_default().extend(names);
        }
    }

    fn is_empty(&self) -> bool {
        self.ledger_files.is_empty() && self.markers.is_empty()
    }
}

/// The deletion records of one warehouse.
#[derive(Debug, Clone)]
pub(crate) struct DeletionRecords {
    warehouse: Warehouse,
}

impl DeletionRecords {
    pub(crate) fn new(warehouse: &Warehouse) -> Self {
        DeletionRecords {
            warehouse: warehouse.clone(),
        }
    }

    /// The record of page `page` of the deletion sequence `sequence` (`deleted/m`,
    /// `deleted/<p>`) of `run`.
    fn name(run: JournalRef, sequence: &str, page: u64) -> String {
        format!(
            "{DELETED_DIR}/{}-{}-{page:010}.json",
            run.suffix(),
            sequence.replace('/', "-")
        )
    }

    /// Whether `name` is a record this collector writes (nothing else there is read or
    /// deleted).
    fn is_record(name: &str) -> bool {
        let Some(stem) = name
            .strip_prefix(DELETED_DIR)
            .and_then(|rest| rest.strip_prefix('/'))
            .and_then(|file| file.strip_suffix(".json"))
        else {
            return false;
        };
        let mut parts = stem.splitn(3, '-');
        let (Some(run_ms), Some(run), Some(rest)) = (parts.next(), parts.next(), parts.next())
        else {
            return false;
        };
        let sequence_and_page = rest
            .strip_prefix("deleted-")
            .and_then(|rest| rest.rsplit_once('-'));
        JournalRef::parse_suffix(&format!("{run_ms}-{run}")).is_some()
            && sequence_and_page.is_some_and(|(sequence, page)| {
                (sequence == "m"
                    || sequence
                        .parse::<usize>()
                        .is_ok_and(|p| p.to_string() == sequence))
                    && page.len() == 10
                    && page.bytes().all(|b| b.is_ascii_digit())
            })
    }

    /// Record what one page of deletes removed (written once their deletes have answered;
    /// nothing if nothing was).
    pub(crate) async fn write(
        &self,
        run: JournalRef,
        sequence: &str,
        page: u64,
        deleted: Deleted,
    ) -> Result<()> {
        if deleted.is_empty() {
            return Ok(());
        }
        let name = Self::name(run, sequence, page);
        let bytes = serde_json::to_vec(&deleted)
            .map_err(|err| Error::new(ErrorKind::CorruptRecord, format!("`{name}`: {err}")))?;
        self.warehouse
            .put_if_absent(&name, Bytes::from(bytes))
            .await
            .map(|_| ())
    }

    /// Release the record `name`: delete the ledger files it lists, and each marker it
    /// lists whose names were all deleted with it (a marker that also lists names the
    /// record does not, deleted by another page or not deleted at all, stays until its
    /// condemnation expires: the sweep clears it then), then the record; how many ledger
    /// files are gone. A damaged record is left alone (its entries expire).
    async fn release(&self, name: &str) -> Result<usize> {
        let bytes = match self.warehouse.get(name, u64::MAX).await? {
            Fetched::Object(bytes, _) => bytes,
            Fetched::Missing | Fetched::TooLarge(_) => return Ok(0),
        };
        let Ok(record) = serde_json::from_slice::<Deleted>(&bytes) else {
            tracing::warn!(record = %name, "gc: a damaged deletion record is left alone");
            return Ok(0);
        };
        let ledger = Ledger::new(&self.warehouse);
        let mut released = Vec::new();
        for (marker, deleted) in record.markers {
            // A marker whose body cannot be read (or that is gone) is left to the sweep.
            let listed = self.warehouse.marker_names(&marker).await?;
            if listed.is_some_and(|listed| {
                !listed.is_empty() && listed.iter().all(|name| deleted.contains(name))
            }) {
                released.push(marker);
            }
        }
        let cleared =
            ledger.delete(record.ledger_files).await? + ledger.delete_markers(released).await?;
        self.warehouse.delete_own(vec![name.to_owned()]).await?;
        Ok(cleared)
    }
}

/// Which of `parts` workers releases the record `name`.
fn share_of(name: &str, parts: usize) -> usize {
    let hash = name.bytes().fold(0u64, |hash, byte| {
        hash.wrapping_mul(31).wrapping_add(byte.into())
    });
    (hash % parts.max(1) as u64) as usize
}

impl Invocation<'_> {
    /// Release the deletion records that fall to partition `partition` and are old
    /// enough, until the budget is spent; how many ledger files are gone.
    pub(crate) async fn release_deletions(
        &mut self,
        partition: usize,
        timing: &Timing,
    ) -> Result<u64> {
        if self.gc.config.dry_run {
            return Ok(0);
        }
        let warehouse = self.gc.catalog.warehouse().clone();
        let records = DeletionRecords::new(&warehouse);
        let parts = self.plan.partitions.len();
        let mut cleared = 0;
        let mut listing = warehouse.list(DELETED_DIR);
        while let Some(item) = listing.try_next().await? {
            if self.out_of_time() {
                break;
            }
            let ListItem::Object(record) = item else {
                continue;
            };
            let recorded_ms = record.landed_ms.max(record.last_modified_ms);
            if !DeletionRecords::is_record(&record.name)
                || share_of(&record.name, parts) != partition
                || !rules::deletion_released(recorded_ms, self.elapsed_now(), timing)
            {
                continue;
            }
            self.keep_lease().await?;
            cleared += records.release(&record.name).await? as u64;
        }
        Ok(cleared)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gc::journal::tests::journal;

    #[test]
    fn record_names_are_recognised() {
        let run = journal(5, 7);
        for (sequence, page) in [("deleted/m", 0), ("deleted/12", 42)] {
            let name = DeletionRecords::name(run, sequence, page);
            assert!(DeletionRecords::is_record(&name), "{name}");
        }
        for foreign in [
            format!("{DELETED_DIR}/notes.json"),
            format!("{DELETED_DIR}/{}-deleted-x-0000000000.json", run.suffix()),
            format!("{DELETED_DIR}/{}-deleted-m-12.json", run.suffix()),
            format!("{DELETED_DIR}/{}-deleted-01-0000000000.json", run.suffix()),
            format!("_gc/runs/{}-deleted-m-0000000000.json", run.suffix()),
        ] {
            assert!(!DeletionRecords::is_record(&foreign), "{foreign}");
        }
    }

    #[tokio::test]
    async fn a_release_clears_what_the_record_lists_and_the_record() {
        let warehouse = Warehouse::in_memory("memory://release/wh").expect("warehouse");
        let ledger = Ledger::new(&warehouse);
        let run = journal(5, 7);
        let object = "indexes/old/1/ivf_postings/part-0";
        let clock = rules::Clock {
            start_ms: 1,
            walk_ms: 1,
        };
        let files = vec![
            ledger
                .record_clock(object, clock, run, "t")
                .await
                .expect("clock"),
            ledger
                .record_condemnation(object, 2, run, "t")
                .await
                .expect("condemned"),
        ];
        let records = DeletionRecords::new(&warehouse);
        records
            .write(
                run,
                "deleted/3",
                0,
                Deleted {
                    ledger_files: files,
                    markers: BTreeMap::new(),
                },
            )
            .await
            .expect("recorded");
        let name = DeletionRecords::name(run, "deleted/3", 0);
        assert_eq!(records.release(&name).await.expect("released"), 2);
        assert!(ledger.read(object).await.expect("entry").files.is_empty());
        assert!(warehouse.head(&name).await.expect("head").is_none());
        assert_eq!(records.release(&name).await.expect("again"), 0);
    }
}
