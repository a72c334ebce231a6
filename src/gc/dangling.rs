//! Family references that named no file at the verification walk, read again right
//! before every delete batch.
//!
//! A live index's family reference may name a file nobody has written yet (register
//! accepts that: the spec's own example names a centroids file that may never be
//! written). A writer that writes it later publishes nothing, so no publication check
//! sees what the file names; written between a run's verification walk and its deletes,
//! naming objects the run doomed, it would have them deleted under the live pointer
//! (`docs/gc-attacks.md`, F1b). So the verification walk keeps the references it found
//! missing (`verified-dangling/<id>.json` beside `verified.json`, see the `job` module),
//! and every delete batch first reads each of them again: whatever a file found there
//! names, followed through family references as the walk follows them, is kept. What is
//! left is the time between that read and the batch's delete request.
//!
//! The cost is one `GET` per dangling reference per batch of up to
//! [`GcConfig::delete_batch_size`](super::GcConfig::delete_batch_size) deletes, nothing
//! when every family reference names a file.

use std::collections::{BTreeSet, HashSet};

use futures::{StreamExt, TryStreamExt};

use super::refs::RefMap;
use crate::error::{Error, Result};
use crate::family::FamilyRegistry;
use crate::metadata::named::{Parsed, read_parsed, references_of};
use crate::warehouse::Warehouse;

/// The dangling references of a verification walk, and what the files that appeared at
/// them since name.
#[derive(Debug, Default)]
pub(crate) struct DanglingReferences {
    /// References still naming no file.
    pending: BTreeSet<String>,
    /// Every reference read so far (the walk's and those an appeared file names).
    visited: HashSet<String>,
    /// What the appeared files name (themselves included).
    named: RefMap,
}

impl DanglingReferences {
    /// The references `dangling` named no file at the verification walk.
    pub(crate) fn new(dangling: BTreeSet<String>) -> Self {
        DanglingReferences {
            visited: dangling.iter().cloned().collect(),
            pending: dangling,
            named: RefMap::default(),
        }
    }

    /// Read every pending reference again (`concurrency` at a time), following what the
    /// files found there reference; returns the files that appeared.
    pub(crate) async fn reread(
        &mut self,
        warehouse: &Warehouse,
        registry: &FamilyRegistry,
        concurrency: usize,
    ) -> Result<Vec<String>> {
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
                        let refs = references_of(&metadata, registry, warehouse);
                        for reference in refs.family {
                            if self.visited.insert(reference.clone()) {
                                frontier.push(reference);
                            }
                        }
                        refs.direct
                    }
                    Parsed::Opaque { references, .. } => references,
                };
                self.pending.remove(&name);
                self.named.insert(name.clone(), 0);
                for reference in references {
                    self.named.insert(reference, 0);
                }
                appeared.push(name);
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
            DanglingReferences::new(BTreeSet::from(["metadata/later.json".to_owned()]));
        assert!(
            dangling
                .reread(&warehouse, &registry, 4)
                .await
                .expect("read")
                .is_empty()
        );
        assert!(!dangling.names("indexes/old/1/ivf_postings/part-0"));
        // Not metadata: every string in it that names an object counts.
        warehouse
            .put_if_absent(
                "metadata/later.json",
                Bytes::from_static(br#"{"tables": ["indexes/old/1/ivf_postings/"]}"#),
            )
            .await
            .expect("written");
        let appeared = dangling
            .reread(&warehouse, &registry, 4)
            .await
            .expect("read");
        assert_eq!(appeared, ["metadata/later.json"]);
        assert!(dangling.names("indexes/old/1/ivf_postings/part-0"));
        assert!(dangling.names("metadata/later.json"));
        assert!(!dangling.names("indexes/old/1/ivf_centroids/part-0"));
        // Read once: nothing is pending any more.
        assert!(
            dangling
                .reread(&warehouse, &registry, 4)
                .await
                .expect("read")
                .is_empty()
        );
    }
}
