//! Family references that named no file at the verification walk, read again right
//! before every delete batch.
//!
//! A live index's family reference may name a file nobody has written yet (register
//! accepts that: the spec's own example names a centroids file that may never be
//! written). A writer that writes it later publishes nothing, so no publication check
//! sees what the file names; written between a run's verification walk and its deletes,
//! naming objects the run doomed, it would have them deleted under the live pointer
//! (`docs/gc-attacks.md`, F1b). So the verification walk keeps the references it found
//! missing or not parsing (a file being written in place), and when it started (`verified-dangling/<id>.json` beside `verified.json`, see
//! the `job` module), and every delete batch first reads each of them again, and reads
//! the metadata of every publication the change log announced since the walk (an index
//! registered after it may name a file nobody has written either, F1b-late): whatever a
//! file found there names, followed through family references as the walk follows them,
//! is kept, and a reference that still names nothing is read again before the next batch.
//! A file that does not parse (written half, or of another format) is read again too.
//! What is left is the time between that read and the batch's delete request.
//!
//! The cost, per batch of up to
//! [`GcConfig::delete_batch_size`](super::GcConfig::delete_batch_size) deletes: a ranged
//! listing of the change log since the walk, a `GET` of each entry not read yet and of the
//! metadata it publishes (once per invocation), and a `GET` per reference that names
//! nothing; with no publication since the walk and every family reference naming a file,
//! one `LIST`.

use std::collections::{BTreeSet, HashSet};

use futures::{StreamExt, TryStreamExt};

use super::refs::RefMap;
use crate::catalog::changelog;
use crate::error::{Error, Result};
use crate::family::FamilyRegistry;
use crate::metadata::named::{Parsed, read_parsed, references_of};
use crate::warehouse::Warehouse;

/// The dangling references of a verification walk, and what the files that appeared at
/// them since name.
#[derive(Debug, Default)]
pub(crate) struct DanglingReferences {
    /// Files to read (again): references naming no file (or none that parses), and
    /// metadata published since the walk, not read yet.
    pending: BTreeSet<String>,
    /// Every name queued so far (the walk's references, published metadata, and what the
    /// files read name through family references).
    visited: HashSet<String>,
    /// Metadata queued because the change log announced it (not a dangling reference).
    published: HashSet<String>,
    /// Files found at a dangling reference and reported.
    reported: HashSet<String>,
    /// Change-log entries read.
    logged: HashSet<String>,
    /// Entries logged from this time on may announce publications the walk did not see.
    log_from_ms: i64,
    /// What the files read name (themselves included).
    named: RefMap,
}

impl DanglingReferences {
    /// The references `dangling` that named no file at a verification walk; publications
    /// logged from `log_from_ms` on may have landed after it.
    pub(crate) fn new(dangling: BTreeSet<String>, log_from_ms: i64) -> Self {
        DanglingReferences {
            visited: dangling.iter().cloned().collect(),
            pending: dangling,
            log_from_ms,
            ..DanglingReferences::default()
        }
    }

    /// Queue the metadata of every publication logged since the walk and not read yet.
    async fn follow_log(&mut self, warehouse: &Warehouse, concurrency: usize) -> Result<()> {
        let names: Vec<String> = changelog::names_since(warehouse, self.log_from_ms)
            .await?
            .into_iter()
            .filter(|name| self.logged.insert(name.clone()))
            .collect();
        let entries: Vec<Option<changelog::Change>> = futures::stream::iter(names)
            .map(|name| async move { changelog::read_entry(warehouse, &name).await })
            .buffer_unordered(concurrency.max(1))
            .try_collect()
            .await?;
        let published = entries
            .into_iter()
            .flatten()
            .flat_map(|change| change.writes)
            .filter_map(|write| write.publishes);
        for location in published {
            let Ok(name) = warehouse.relative(&location) else {
                continue;
            };
            if self.visited.insert(name.clone()) {
                self.published.insert(name.clone());
                self.pending.insert(name);
            }
        }
        Ok(())
    }

    /// Read the change log since the walk and every pending file (`concurrency` at a
    /// time), following what the files found reference; returns the files that appeared
    /// at a dangling reference, each once.
    pub(crate) async fn reread(
        &mut self,
        warehouse: &Warehouse,
        registry: &FamilyRegistry,
        concurrency: usize,
    ) -> Result<Vec<String>> {
        self.follow_log(warehouse, concurrency).await?;
        let mut appeared = Vec::new();
        let mut frontier: Vec<String> = self.pending.iter().cloned().collect();
        while !frontier.is_empty() {
            let layer = std::mem::take(&mut frontier);
            let read: Vec<(String, Parsed)> = futures::stream::iter(layer)
                .map(|name| async move {
                    let parsed = read_parsed(warehouse, registry, &name).await?;
                    Ok::<_, Error>((name, parsed))
                })
                .buffer_unordered(concurrency.max(1))
                .try_collect()
                .await?;
            let before = self.named.len();
            for (name, parsed) in read {
                let references = match parsed {
                    Parsed::Missing => {
                        self.pending.insert(name);
                        continue;
                    }
                    Parsed::Metadata(metadata) => {
                        self.pending.remove(&name);
                        let refs = references_of(&metadata, registry, warehouse);
                        for reference in refs.family {
                            if self.visited.insert(reference.clone()) {
                                frontier.push(reference);
                            }
                        }
                        refs.direct
                    }
                    // Possibly written half: read again before the next batch.
                    Parsed::Opaque { references, .. } => {
                        self.pending.insert(name.clone());
                        references
                    }
                };
                self.named.insert(name.clone(), 0);
                for reference in references {
                    self.named.insert(reference, 0);
                }
                if !self.published.contains(&name) && self.reported.insert(name.clone()) {
                    appeared.push(name);
                }
            }
            if self.named.len() > before {
                self.named.add_link_targets(warehouse).await?;
            }
        }
        Ok(appeared)
    }

    /// Whether a file that appeared at a dangling reference names `name` (in any
    /// spelling).
    pub(crate) fn names(&self, name: &str) -> bool {
        self.named.covers_any_spelling(name)
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;

    #[tokio::test]
    async fn a_file_written_at_a_dangling_reference_is_read_and_followed() {
        let warehouse = Warehouse::in_memory("memory://dangling/wh").expect("warehouse");
        let registry = FamilyRegistry::builtin();
        let mut dangling =
            DanglingReferences::new(BTreeSet::from(["metadata/later.json".to_owned()]), 0);
        let reread = async |dangling: &mut DanglingReferences| {
            dangling
                .reread(&warehouse, &registry, 4)
                .await
                .expect("read")
        };
        assert!(reread(&mut dangling).await.is_empty());
        assert!(!dangling.names("indexes/old/1/ivf_postings/part-0"));
        // Not metadata: every string in it that names an object counts.
        warehouse
            .put_if_absent(
                "metadata/later.json",
                Bytes::from_static(br#"{"tables": ["indexes/old/1/ivf_postings/"]}"#),
            )
            .await
            .expect("written");
        assert_eq!(reread(&mut dangling).await, ["metadata/later.json"]);
        assert!(dangling.names("indexes/old/1/ivf_postings/part-0"));
        assert!(dangling.names("metadata/later.json"));
        assert!(!dangling.names("indexes/old/1/ivf_centroids/part-0"));
        // Reported once (not metadata: read again, in case it was written half).
        assert!(reread(&mut dangling).await.is_empty());
        assert!(dangling.pending.contains("metadata/later.json"));
    }
}
