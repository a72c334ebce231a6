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
//! A file that does not parse (written half, or of another format, or too large to be
//! metadata) is read again too: on an object store once it has changed (its entity tag,
//! by a `HEAD`: every write replaces it), on a local warehouse every time (no `HEAD`
//! shows a write through a shared memory mapping, round 65 F1). What is left is the time
//! between that read and the batch's delete request.
//!
//! The cost, per batch of up to
//! [`GcConfig::delete_batch_size`](super::GcConfig::delete_batch_size) deletes: a ranged
//! listing of the change log since the walk, a `GET` of each entry not read yet and of the
//! metadata it publishes, and a `HEAD` per pending reference (and a `GET` when its entity
//! tag changed; on a local warehouse a `GET` each time); with no publication since the
//! walk and every family reference naming metadata, one `LIST`.
//! What a guard has read is kept for the run's other delete steps (`guard/` in the run's
//! directory, see the `job` module): a step starts from the newest few of those files, so
//! each logged publication's metadata is read about once per run, not once per step of
//! every partition. The files are a cache: one lost or not parsing costs reading the
//! sources again, never a delete.

use std::collections::{BTreeMap, BTreeSet};

use futures::{StreamExt, TryStreamExt};
use serde::{Deserialize, Serialize};

use super::refs::RefMap;
use crate::catalog::changelog;
use crate::error::{Error, Result};
use crate::family::FamilyRegistry;
use crate::metadata::named::{
    Below, Parsed, directories_of, files_below, read_parsed, references_of,
};
use crate::warehouse::Warehouse;

/// The dangling references of a verification walk, and what the files that appeared at
/// them since name.
///
/// Stored (a guard file of the run) as it stands after a read, every queued name either
/// read or still pending.
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub(crate) struct DanglingReferences {
    /// Files to read again before every batch (a `HEAD` while they are unchanged):
    /// references that named no file at the walk, metadata published since, and the
    /// family references' files those lead to.
    pending: BTreeSet<String>,
    /// Every name queued so far (the walk's references, published metadata, and what the
    /// files read name through family references).
    visited: BTreeSet<String>,
    /// Metadata queued because the change log announced it (not a dangling reference).
    published: BTreeSet<String>,
    /// Files found at a dangling reference and reported.
    reported: BTreeSet<String>,
    /// Change-log entries read.
    logged: BTreeSet<String>,
    /// Change-log entries that do not parse (an entry of another version, damaged): what
    /// they announce is unknown, so the guard names everything.
    #[serde(default)]
    unreadable: BTreeSet<String>,
    /// Files read that may name anything (too large to read to the end, naming too many
    /// files): the guard names everything.
    #[serde(default)]
    unbounded: BTreeSet<String>,
    /// Places below what the guard names that it could not read for links (why): a link
    /// there may lead anywhere, so the guard names everything (round 66).
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    unread: BTreeSet<String>,
    /// Directories a live reference names whose files are read as family references'
    /// (`metadata::named::files_below`): listed again before every batch, as a file may
    /// appear there at any time (round 58, F3).
    #[serde(default)]
    directories: BTreeSet<String>,
    /// Entries logged from this time on may announce publications the walk did not see.
    #[serde(skip)]
    log_from_ms: i64,
    /// What the files read name (themselves included).
    named: RefMap,
    /// The files read again before every batch that did not parse, as they were when read
    /// (a file that has not changed since is not read again).
    #[serde(default)]
    read_as: BTreeMap<String, Stamp>,
}

/// A file as a `HEAD` shows it: with the store's tag of the contents (an object store's,
/// which every write replaces), it proves the file unchanged; without one it proves
/// nothing (see [`Warehouse::head_tagged`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
struct Stamp {
    size: u64,
    last_modified_ms: i64,
    landed_ms: i64,
    tag: Option<String>,
}

impl Stamp {
    fn of(listed: &crate::warehouse::Listed, tag: Option<String>) -> Stamp {
        Stamp {
            size: listed.size,
            last_modified_ms: listed.last_modified_ms,
            landed_ms: listed.landed_ms,
            tag,
        }
    }
}

/// What one [`DanglingReferences::reread`] found.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Reread {
    /// Files that appeared at a dangling reference, each reported once.
    pub appeared: Vec<String>,
    /// Whether it learned anything (a log entry or file read, a name found): worth
    /// keeping for the run's other delete steps.
    pub learned: bool,
}

impl DanglingReferences {
    /// The references `dangling` that named no file at a verification walk; publications
    /// logged from `log_from_ms` on may have landed after it.
    /// `directories` are those whose files the walk read as family references'.
    pub(crate) fn new(
        dangling: BTreeSet<String>,
        directories: BTreeSet<String>,
        log_from_ms: i64,
    ) -> Self {
        DanglingReferences {
            visited: dangling.iter().cloned().collect(),
            pending: dangling,
            directories,
            log_from_ms,
            ..DanglingReferences::default()
        }
    }

    /// Take in what another delete step of the run had read (a guard file): its log
    /// entries and files are not read again, what they name is kept, and what it still had
    /// to read is read again. A union: nothing this guard knew is lost.
    pub(crate) fn absorb(&mut self, other: DanglingReferences) {
        self.pending.extend(other.pending);
        self.visited.extend(other.visited);
        self.published.extend(other.published);
        self.reported.extend(other.reported);
        self.logged.extend(other.logged);
        self.unreadable.extend(other.unreadable);
        self.unbounded.extend(other.unbounded);
        self.unread.extend(other.unread);
        self.directories.extend(other.directories);
        self.named.merge(other.named);
        // What both read of a file counts only if they read it as the same file.
        for (name, stamp) in other.read_as {
            match self.read_as.get(&name) {
                Some(own) if *own != stamp => {
                    self.read_as.remove(&name);
                }
                Some(_) => {}
                None => {
                    self.read_as.insert(name, stamp);
                }
            }
        }
    }

    /// How much it has read (grows whenever a read learns something).
    fn extent(&self) -> [usize; 8] {
        [
            self.visited.len(),
            self.logged.len(),
            self.reported.len(),
            self.named.len(),
            self.visited.len().saturating_sub(self.pending.len()),
            self.unreadable.len(),
            self.unbounded.len(),
            self.unread.len(),
        ]
    }

    /// Queue the metadata of every publication logged since the walk and not read yet.
    async fn follow_log(&mut self, warehouse: &Warehouse, concurrency: usize) -> Result<()> {
        let names: Vec<String> = changelog::names_since(warehouse, self.log_from_ms)
            .await?
            .into_iter()
            .filter(|name| self.logged.insert(name.clone()))
            .collect();
        let entries: Vec<(String, changelog::Entry)> = futures::stream::iter(names)
            .map(|name| async move {
                let entry = changelog::read_entry(warehouse, &name).await?;
                Ok::<_, Error>((name, entry))
            })
            .buffer_unordered(concurrency.max(1))
            .try_collect()
            .await?;
        let mut changes = Vec::new();
        for (name, entry) in entries {
            match entry {
                changelog::Entry::Read(change) => changes.push(change),
                changelog::Entry::Gone => {}
                // What it announced is unknown (the walk's reading of the log would have
                // voided every clock): nothing more is deleted.
                changelog::Entry::Unreadable => {
                    self.unreadable.insert(name);
                }
            }
        }
        let published = changes
            .into_iter()
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
    /// time), following what the files found reference.
    pub(crate) async fn reread(
        &mut self,
        warehouse: &Warehouse,
        registry: &FamilyRegistry,
        concurrency: usize,
    ) -> Result<Reread> {
        let extent = self.extent();
        self.follow_log(warehouse, concurrency).await?;
        let mut appeared = Vec::new();
        let mut frontier: Vec<String> = self.pending.iter().cloned().collect();
        // Every directory known so far, listed again: a file that appeared there since is
        // read now.
        let known: Vec<String> = self.directories.iter().cloned().collect();
        self.read_below(warehouse, &known, &mut frontier).await?;
        while !frontier.is_empty() {
            let layer = std::mem::take(&mut frontier);
            let read_as = &self.read_as;
            let read: Vec<(String, Option<Stamp>, Option<Parsed>)> = futures::stream::iter(layer)
                .map(|name| async move {
                    // A file read before and unchanged since names what it named: only a
                    // `HEAD` (a file too large to be metadata is read whole each time
                    // otherwise). Only an object store's entity tag, which every write
                    // replaces, proves it unchanged; a local file is read every time (a
                    // write through a shared memory mapping moves neither its size nor its
                    // times: round 65, F1).
                    let stamp = match warehouse.head_tagged(&name).await {
                        Ok(Some((listed, tag))) => Some(Stamp::of(&listed, tag)),
                        Ok(None) => return Ok::<_, Error>((name, None, Some(Parsed::Missing))),
                        // Not a name a `HEAD` can ask for (a local staging name): read.
                        Err(_) => None,
                    };
                    if stamp.as_ref().is_some_and(|stamp| stamp.tag.is_some())
                        && read_as.get(&name) == stamp.as_ref()
                    {
                        return Ok((name, stamp, None));
                    }
                    let parsed = read_parsed(warehouse, registry, &name).await?;
                    Ok((name, stamp, Some(parsed)))
                })
                .buffer_unordered(concurrency.max(1))
                .try_collect()
                .await?;
            let before = self.named.len();
            // Directories the files name: their files that may be metadata are read as
            // family references' are (`files_below`).
            let mut directories: Vec<String> = Vec::new();
            for (name, stamp, parsed) in read {
                let Some(parsed) = parsed else {
                    continue;
                };
                match (&parsed, stamp) {
                    (Parsed::Opaque { .. } | Parsed::Metadata(_), Some(stamp)) => {
                        self.read_as.insert(name.clone(), stamp);
                    }
                    _ => {
                        self.read_as.remove(&name);
                    }
                }
                let references = match parsed {
                    // A reference that names no file may name a directory, which a
                    // reader reads: it is named, everything below it with it, as the walk
                    // names it (round 64, F1).
                    Parsed::Missing => {
                        directories.extend(directories_of([&name], []));
                        self.named.insert(name.clone(), 0);
                        self.pending.insert(name);
                        continue;
                    }
                    // Read again before every batch too, at the cost of a `HEAD` while
                    // it is unchanged: a file still being written may parse as metadata
                    // before its end lands (round 63, F3).
                    Parsed::Metadata(metadata) => {
                        self.pending.insert(name.clone());
                        let refs = references_of(&metadata, registry, warehouse);
                        directories.extend(directories_of([], &refs.tables));
                        let direct = refs.direct().cloned().collect();
                        for reference in refs.family {
                            if self.visited.insert(reference.clone()) {
                                frontier.push(reference);
                            }
                        }
                        direct
                    }
                    // It may name anything: nothing more is deleted (a file that is no
                    // metadata may name anything; see the walk, `gc::reachability`).
                    // Read again before the next batch.
                    Parsed::Opaque { .. } | Parsed::Unbounded(_) => {
                        self.pending.insert(name.clone());
                        self.unbounded.insert(name.clone());
                        Vec::new()
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
            let new: Vec<String> = directories
                .into_iter()
                .filter(|directory| self.directories.insert(directory.clone()))
                .collect();
            self.read_below(warehouse, &new, &mut frontier).await?;
            if self.named.len() > before {
                self.named.add_link_targets(warehouse).await?;
            }
        }
        // What the links at or below everything named lead to (a local warehouse), as
        // the verification walk keeps what links below reachable names lead to: a table
        // the guard names may hold a link into an old table (round 65, F2).
        let named: Vec<String> = self.named.names().cloned().collect();
        let below = warehouse.links_below(named).await?;
        for target in below.targets {
            self.named.insert(target, 0);
        }
        // A place below them it cannot read may hold a link to anything (round 66).
        self.unread.extend(below.unread);
        // A link there to a whole managed prefix or the root: a reader of the table reads
        // everything there, and the links there too (round 45's K10, round 76), as the
        // verification walk keeps it.
        let reached: Vec<String> = below
            .wide
            .into_iter()
            .flat_map(|wide| wide.prefixes)
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect();
        if !reached.is_empty() {
            let further = super::wide_links::reach(warehouse, reached.clone()).await?;
            for prefix in reached
                .into_iter()
                .chain(further.into_iter().flat_map(|wide| wide.prefixes))
            {
                self.named.insert(prefix, 0);
            }
        }
        Ok(Reread {
            appeared,
            learned: self.extent() != extent,
        })
    }

    /// Queue the files below `directories` not read yet (`files_below`); what is below
    /// may also name anything (a link there): then the guard names everything.
    async fn read_below(
        &mut self,
        warehouse: &Warehouse,
        directories: &[String],
        frontier: &mut Vec<String>,
    ) -> Result<()> {
        if directories.is_empty() {
            return Ok(());
        }
        match files_below(warehouse, directories).await? {
            Below::Files(files) => {
                for file in files {
                    if self.visited.insert(file.clone()) {
                        frontier.push(file);
                    }
                }
            }
            // Kept by the directory's name (`blind` says why it names everything).
            Below::Anything(_) => {
                self.unbounded.extend(directories.first().cloned());
            }
        }
        Ok(())
    }

    /// Whether a file that appeared at a dangling reference names `name` (in any
    /// spelling), or a change-log entry since the walk does not parse (everything).
    pub(crate) fn names(&self, name: &str) -> bool {
        !self.unreadable.is_empty()
            || !self.unbounded.is_empty()
            || !self.unread.is_empty()
            || self.named.covers_any_spelling(name)
    }

    /// Why [`Self::names`] names everything, if it does: a change-log entry since the walk
    /// that does not parse, or a file read that may name anything.
    pub(crate) fn blind(&self) -> Option<String> {
        if let Some(entry) = self.unreadable.iter().next() {
            return Some(format!(
                "the change-log entry `{entry}`, logged since the verification walk, does not parse: what it announced is unknown"
            ));
        }
        if let Some(why) = self.unread.iter().next() {
            return Some(format!(
                "below what a file found at a live family reference names, {why}: a symbolic link there may lead anywhere"
            ));
        }
        self.unbounded.iter().next().map(|file| {
            format!(
                "`{file}`, which a live family reference leads to, is no metadata that can be read to the end (or a directory holding a link or too many files): what it names is unknown"
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;

    /// Write `metadata/later.json`: no metadata, naming an old index's postings.
    async fn write_later(warehouse: &Warehouse) {
        warehouse
            .put_if_absent(
                "metadata/later.json",
                Bytes::from_static(br#"{"tables": ["indexes/old/1/ivf_postings/"]}"#),
            )
            .await
            .expect("written");
    }

    #[tokio::test]
    async fn a_file_that_is_no_metadata_written_at_a_dangling_reference_names_anything() {
        let warehouse = Warehouse::in_memory("memory://dangling/wh").expect("warehouse");
        let registry = FamilyRegistry::builtin();
        let mut dangling = DanglingReferences::new(
            BTreeSet::from(["metadata/later.json".to_owned()]),
            BTreeSet::new(),
            0,
        );
        let reread = async |dangling: &mut DanglingReferences| {
            dangling
                .reread(&warehouse, &registry, 4)
                .await
                .expect("read")
                .appeared
        };
        assert!(reread(&mut dangling).await.is_empty());
        assert!(!dangling.names("indexes/old/1/ivf_postings/part-0"));
        // Not metadata: it may name anything (a reader of its format may take names
        // from it by rules no catalog knows), so nothing more is deleted.
        write_later(&warehouse).await;
        assert_eq!(reread(&mut dangling).await, ["metadata/later.json"]);
        assert!(dangling.names("indexes/old/1/ivf_postings/part-0"));
        assert!(dangling.names("indexes/any/other/file"));
        assert!(
            dangling
                .blind()
                .is_some_and(|why| why.contains("metadata/later.json"))
        );
        // Reported once, and read again before every batch (it may be written further).
        assert!(reread(&mut dangling).await.is_empty());
        assert!(dangling.pending.contains("metadata/later.json"));
    }

    /// A metadata file's name that no file has yet.
    const LATER: &str = "metadata/later/v1.metadata.json";

    /// An empty warehouse in memory and a guard whose one dangling reference is `name`.
    fn guard_of(name: &str) -> (Warehouse, DanglingReferences) {
        let warehouse = Warehouse::in_memory("memory://dangling/wh").expect("warehouse");
        let dangling =
            DanglingReferences::new(BTreeSet::from([name.to_owned()]), BTreeSet::new(), 0);
        (warehouse, dangling)
    }

    /// One read of the guard before a batch (built-in families); the files that appeared.
    async fn read(dangling: &mut DanglingReferences, warehouse: &Warehouse) -> Vec<String> {
        dangling
            .reread(warehouse, &FamilyRegistry::builtin(), 4)
            .await
            .expect("read")
            .appeared
    }

    /// Round 63 (helper-59, F3): a file at a dangling reference that parses as metadata
    /// while it is being written (its first document landed) is read again before every
    /// batch: once the rest lands, and it is no metadata, it may name anything.
    #[tokio::test]
    async fn a_file_that_parsed_as_metadata_at_a_dangling_reference_is_read_again() {
        let (warehouse, mut dangling) = guard_of(LATER);
        let name = LATER;
        let metadata: &[u8] =
            include_bytes!("../../tests/fixtures/metadata/valid/minimal-compact.json");
        warehouse
            .put_if_absent(name, Bytes::from_static(metadata))
            .await
            .expect("written");
        assert_eq!(read(&mut dangling, &warehouse).await, [name]);
        assert!(!dangling.names("indexes/old/1/ivf_postings/part-0"));
        // Unchanged: not read again (a `HEAD`), and still nothing more named.
        read(&mut dangling, &warehouse).await;
        assert!(dangling.blind().is_none());
        // The rest of the file lands: no metadata any more.
        let mut whole = metadata.to_vec();
        whole.extend_from_slice(b"\n{\"tables\": [\"indexes/old/1/ivf_postings/\"]}");
        warehouse
            .overwrite(name, Bytes::from(whole))
            .await
            .expect("written");
        read(&mut dangling, &warehouse).await;
        assert!(dangling.names("indexes/old/1/ivf_postings/part-0"));
        assert!(dangling.blind().is_some_and(|why| why.contains(name)));
    }

    /// Round 64 (helper-60, F1): metadata appearing at a dangling reference leads, through
    /// its own family reference, to a name that is a directory (no file): what lies below
    /// it is named, as the walk names it.
    #[tokio::test]
    async fn a_family_reference_the_guard_finds_naming_a_directory_names_what_is_below() {
        let (warehouse, mut dangling) = guard_of(LATER);
        let name = LATER;
        warehouse
            .put_if_absent("metadata/old/z/part-0.bin", Bytes::from_static(b"\x00data"))
            .await
            .expect("written");
        let text = String::from_utf8(
            include_bytes!("../../tests/fixtures/metadata/valid/spec-example.json").to_vec(),
        )
        .expect("utf-8");
        // The spec's example, its centroids metadata location naming the directory.
        let named = text.replace(
            "metadata/fe985f6d-3592-4385-a1ca-71347057a210/v1.metadata.json",
            "metadata/old/z",
        );
        warehouse
            .put_if_absent(name, Bytes::from(named))
            .await
            .expect("written");
        read(&mut dangling, &warehouse).await;
        assert!(dangling.names("metadata/old/z/part-0.bin"));
    }

    /// A shared memory mapping of a whole local file: a page written through it once
    /// takes more writes without the file's size or times moving.
    struct Mapping {
        map: *mut libc::c_void,
        len: usize,
        _file: std::fs::File,
    }

    impl Mapping {
        fn of(path: &std::path::Path) -> Mapping {
            use std::os::fd::AsRawFd;
            let file = std::fs::File::options()
                .read(true)
                .write(true)
                .open(path)
                .expect("opened");
            let len = file.metadata().expect("metadata").len() as usize;
            // SAFETY: a fresh shared mapping of the open file's `len` bytes; `write` stays
            // within them and `drop` unmaps it.
            let map = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_SHARED,
                    file.as_raw_fd(),
                    0,
                )
            };
            assert_ne!(map, libc::MAP_FAILED, "mapped");
            Mapping {
                map,
                len,
                _file: file,
            }
        }

        fn write(&self, bytes: &[u8]) {
            assert!(bytes.len() <= self.len, "within the mapping");
            // SAFETY: within the mapping (checked above), which lives as long as `self`.
            unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.map.cast(), bytes.len()) }
        }
    }

    impl Drop for Mapping {
        fn drop(&mut self) {
            // SAFETY: the mapping `of` made, unmapped once.
            unsafe { libc::munmap(self.map, self.len) };
        }
    }

    /// Round 65 (helper-61, F1): a local file at a dangling reference that parsed as
    /// metadata, then written further through a shared memory mapping (its size and times
    /// stay as a `HEAD` saw them), is read again before the next batch all the same:
    /// once it is no metadata, it may name anything.
    #[tokio::test]
    async fn a_local_file_written_further_without_its_times_moving_is_read_again() {
        let dir = tempfile::tempdir().expect("dir");
        let warehouse = Warehouse::local(dir.path()).expect("warehouse");
        let mut dangling =
            DanglingReferences::new(BTreeSet::from([LATER.to_owned()]), BTreeSet::new(), 0);
        let metadata: &[u8] =
            include_bytes!("../../tests/fixtures/metadata/valid/minimal-compact.json");
        let mut later = metadata.to_vec();
        later.extend_from_slice(b"\n{\"tables\": [\"indexes/old/1/ivf_postings/\"]}");
        // The file as it will be, blank after the first document for now.
        let mut first = metadata.to_vec();
        first.resize(later.len(), b' ');
        warehouse
            .put_if_absent(LATER, Bytes::from(first.clone()))
            .await
            .expect("written");
        let mapping = Mapping::of(&dir.path().join(LATER));
        mapping.write(&first);
        assert_eq!(read(&mut dangling, &warehouse).await, [LATER]);
        assert!(dangling.blind().is_none());
        let stamp = warehouse.head(LATER).await.expect("head");
        // The rest lands through a mapping: the second document, no metadata any more.
        mapping.write(&later);
        assert_eq!(warehouse.head(LATER).await.expect("head"), stamp);
        read(&mut dangling, &warehouse).await;
        assert!(dangling.names("indexes/old/1/ivf_postings/part-0"));
        assert!(dangling.blind().is_some_and(|why| why.contains(LATER)));
    }

    /// A local warehouse holding `indexes/t2/` and the old table `indexes/old/z/`, and a
    /// guard whose one dangling reference is [`LATER`].
    async fn tables_t2_and_old_z() -> (tempfile::TempDir, Warehouse, DanglingReferences) {
        let dir = tempfile::tempdir().expect("dir");
        let warehouse = Warehouse::local(dir.path()).expect("warehouse");
        for name in ["indexes/t2/part-0.parquet", "indexes/old/z/part-0.parquet"] {
            warehouse
                .put_if_absent(name, Bytes::from_static(b"PAR1"))
                .await
                .expect("written");
        }
        let dangling =
            DanglingReferences::new(BTreeSet::from([LATER.to_owned()]), BTreeSet::new(), 0);
        (dir, warehouse, dangling)
    }

    /// Write metadata at [`LATER`] whose postings table is `indexes/t2/`.
    async fn write_later_naming_t2(warehouse: &Warehouse) {
        let metadata = include_str!("../../tests/fixtures/metadata/valid/minimal-compact.json")
            .replace("\"location\":\"p\"", "\"location\":\"indexes/t2/\"");
        warehouse
            .put_if_absent(LATER, Bytes::from(metadata))
            .await
            .expect("written");
    }

    /// Round 65 (helper-61, F2): metadata appearing at a dangling reference names a table
    /// holding a symbolic link into an old table: what the link leads to is named, as the
    /// verification walk names what links below reachable names lead to.
    #[tokio::test]
    async fn a_link_below_a_table_the_guard_finds_names_its_target() {
        let (dir, warehouse, mut dangling) = tables_t2_and_old_z().await;
        std::os::unix::fs::symlink("../old/z", dir.path().join("indexes/t2/part-1"))
            .expect("linked");
        write_later_naming_t2(&warehouse).await;
        assert_eq!(read(&mut dangling, &warehouse).await, [LATER]);
        assert!(dangling.names("indexes/t2/part-0.parquet"));
        assert!(dangling.names("indexes/old/z/part-0.parquet"));
    }

    /// Round 66 (helper-62, F3): the same, with the link too deep below the table to
    /// open by its path: a link there may lead anywhere, so the guard names everything.
    #[tokio::test]
    async fn a_place_below_a_table_the_guard_cannot_read_names_everything() {
        let (dir, warehouse, mut dangling) = tables_t2_and_old_z().await;
        let target = dir.path().join("indexes/old/z");
        crate::warehouse::deep_link(
            dir.path(),
            "indexes/t2",
            22,
            target.to_str().expect("utf-8"),
        );
        write_later_naming_t2(&warehouse).await;
        read(&mut dangling, &warehouse).await;
        assert!(dangling.names("indexes/old/z/part-0.parquet"));
        assert!(
            dangling
                .blind()
                .is_some_and(|why| why.contains("indexes/t2")),
            "{:?}",
            dangling.blind()
        );
    }

    #[tokio::test]
    async fn a_step_starts_from_what_the_runs_other_steps_read() {
        use crate::gc::job::Job;
        use crate::gc::journal::tests::journal;
        use uuid::Uuid;

        let warehouse = Warehouse::in_memory("memory://guard/wh").expect("warehouse");
        let registry = FamilyRegistry::builtin();
        let job = Job::new(&warehouse, journal(3, 9));
        let later = BTreeSet::from(["metadata/later.json".to_owned()]);
        let table = "indexes/old/1/ivf_postings/part-0";
        write_later(&warehouse).await;
        let mut first = DanglingReferences::new(later.clone(), BTreeSet::new(), 0);
        let read = first.reread(&warehouse, &registry, 4).await.expect("read");
        assert_eq!(read.appeared, ["metadata/later.json"]);
        assert!(read.learned);
        job.write_guard(5, Uuid::from_u128(1), &first)
            .await
            .expect("kept");
        // A newer guard file that does not parse is left out (its sources are read again).
        let garbled = format!(
            "{}/guard/{:020}-{}.json",
            job.dir(),
            6,
            Uuid::from_u128(2).simple()
        );
        warehouse
            .put_if_absent(&garbled, Bytes::from_static(b"{"))
            .await
            .expect("garbled");
        let mut second = DanglingReferences::new(later, BTreeSet::new(), 0);
        for guard in job.guards().await.expect("guards") {
            second.absorb(guard);
        }
        assert!(second.names(table), "known before any read");
        // The file is gone now: what it named stays kept, and nothing new is learned.
        warehouse
            .delete_own(vec!["metadata/later.json".to_owned()])
            .await
            .expect("deleted");
        let read = second.reread(&warehouse, &registry, 4).await.expect("read");
        assert_eq!(read, Reread::default());
        assert!(second.names(table));
        // Both files are the run's own: pruned with it.
        let own = job.own_files().await.expect("own");
        assert_eq!(
            own.iter().filter(|file| file.contains("/guard/")).count(),
            2,
            "{own:?}"
        );
    }

    #[tokio::test]
    async fn a_change_log_entry_that_does_not_parse_keeps_everything() {
        let warehouse = Warehouse::in_memory("memory://unreadable/wh").expect("warehouse");
        let registry = FamilyRegistry::builtin();
        let mut dangling = DanglingReferences::new(BTreeSet::new(), BTreeSet::new(), 0);
        read(&mut dangling, &warehouse).await;
        assert!(!dangling.names("indexes/old/1/ivf_postings/part-0"));
        let entry = changelog::entry_name(5, uuid::Uuid::from_u128(7));
        warehouse
            .put_if_absent(&entry, Bytes::from_static(b"{\"change-version\": 99}"))
            .await
            .expect("written");
        let read = dangling
            .reread(&warehouse, &registry, 4)
            .await
            .expect("read");
        assert!(read.learned);
        assert!(dangling.names("indexes/old/1/ivf_postings/part-0"));
        assert!(dangling.blind().is_some_and(|why| why.contains(&entry)));
    }
}
