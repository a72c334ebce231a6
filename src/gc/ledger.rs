//! The durable GC ledger: when each unreachable object was first known unreachable, and
//! when it was condemned.
//!
//! The ledger mirrors the managed tree under `<root>/_gc/ledger/`: the entry of object
//! `indexes/a/1/ivf_postings/part-0` is the directory
//! `_gc/ledger/indexes/a/1/ivf_postings/part-0/`. The mirror can hold an entry for every
//! object the warehouse can hold (on a file system, an object is a file and therefore
//! never also a directory). An entry is a set of immutable files, each written with
//! create-if-absent, whose names carry the facts so one listing reads a whole entry:
//!
//! * `u-<ms>.json` — the retention clock of the object starts at `<ms>`;
//! * `c-<ms>.json` — the object was condemned at `<ms>`.
//!
//! Several files of a kind (two runs raced, or new evidence raised the clock) combine by
//! taking the **largest** value, which is always the conservative reading: a later clock
//! start and a later condemnation both delay deletion. A condemnation counts only if it was
//! made after the retention window of the current clock had passed, so raising the clock
//! voids older condemnations without rewriting them. An entry is cleared (its files
//! deleted) when its object is reachable again or gone. A lost entry (a crash between
//! deleting its files) is harmless: the next run starts a fresh, later clock.

use bytes::Bytes;
use futures::StreamExt;
use futures::stream::BoxStream;
use object_store::path::Path;
use object_store::{ObjectMeta, ObjectStore, PutMode, PutOptions, PutPayload};
use serde::Serialize;
use uuid::Uuid;

use super::refs::{path_of, relative_of};
use crate::error::{Error, ErrorKind, Result};
use crate::warehouse::Warehouse;

/// The ledger directory under the warehouse root.
pub const LEDGER_DIR: &str = "_gc/ledger";

const LEDGER_VERSION: i32 = 1;

/// One object's ledger entry as read.
#[derive(Debug, Default, Clone)]
pub(crate) struct Entry {
    /// When the object's retention clock started (largest recorded).
    pub clock_start_ms: Option<i64>,
    /// When the object was last condemned (largest recorded).
    pub condemned_ms: Option<i64>,
    /// The entry's files.
    pub files: Vec<Path>,
}

/// The kind of an entry file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// `u-<ms>`: the retention clock starts at `ms`.
    Clock,
    /// `c-<ms>`: condemned at `ms`.
    Condemned,
}

impl Kind {
    fn tag(self) -> &'static str {
        match self {
            Kind::Clock => "u",
            Kind::Condemned => "c",
        }
    }
}

#[derive(Serialize)]
#[serde(rename_all = "kebab-case")]
struct EntryFile<'a> {
    ledger_version: i32,
    object: &'a str,
    kind: &'static str,
    ms: i64,
    run_id: Uuid,
    reason: &'a str,
}

/// The ledger of one warehouse.
#[derive(Debug, Clone)]
pub(crate) struct Ledger {
    warehouse: Warehouse,
    root: Path,
}

fn unavailable(err: object_store::Error) -> Error {
    Error::with_source(ErrorKind::StoreUnavailable, "reading or writing the gc ledger failed", err)
}

/// Parse an entry file name: `u-<ms>.json` or `c-<ms>.json`.
fn parse_name(name: &str) -> Option<(Kind, i64)> {
    let stem = name.strip_suffix(".json")?;
    let (tag, ms) = stem.split_once('-')?;
    let kind = match tag {
        "u" => Kind::Clock,
        "c" => Kind::Condemned,
        _ => return None,
    };
    Some((kind, ms.parse().ok()?))
}

impl Ledger {
    pub(crate) fn new(warehouse: &Warehouse) -> Self {
        Ledger {
            warehouse: warehouse.clone(),
            root: warehouse.path(LEDGER_DIR),
        }
    }

    fn store(&self) -> &dyn ObjectStore {
        self.warehouse.object_store().as_ref()
    }

    fn dir(&self, relative: &str) -> Path {
        path_of(&self.warehouse, &format!("{LEDGER_DIR}/{relative}"))
    }

    /// The entry of the object `relative` (empty if none).
    pub(crate) async fn read(&self, relative: &str) -> Result<Entry> {
        let listed = self
            .store()
            .list_with_delimiter(Some(&self.dir(relative)))
            .await
            .map_err(unavailable)?;
        let mut entry = Entry::default();
        for meta in listed.objects {
            if let Some((kind, ms)) = meta.location.filename().and_then(parse_name) {
                let slot = match kind {
                    Kind::Clock => &mut entry.clock_start_ms,
                    Kind::Condemned => &mut entry.condemned_ms,
                };
                *slot = Some(slot.map_or(ms, |current| current.max(ms)));
            }
            entry.files.push(meta.location);
        }
        Ok(entry)
    }

    /// Record a fact about `relative` (create-if-absent; an identical fact is a no-op) and
    /// return the file that holds it.
    pub(crate) async fn record(&self, relative: &str, kind: Kind, ms: i64, run_id: Uuid, reason: &str) -> Result<Path> {
        let ms = ms.max(0);
        let file = self.dir(relative).join(format!("{}-{ms}.json", kind.tag()));
        let body = EntryFile {
            ledger_version: LEDGER_VERSION,
            object: relative,
            kind: kind.tag(),
            ms,
            run_id,
            reason,
        };
        let bytes = Bytes::from(serde_json::to_vec(&body).unwrap_or_default());
        let options = PutOptions {
            mode: PutMode::Create,
            ..PutOptions::default()
        };
        match self.store().put_opts(&file, PutPayload::from_bytes(bytes), options).await {
            Ok(_) | Err(object_store::Error::AlreadyExists { .. }) => Ok(file),
            Err(err) => Err(unavailable(err)),
        }
    }

    /// Every ledger file, streamed.
    pub(crate) fn list(&self) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.store().list(Some(&self.root))
    }

    /// The object a ledger file belongs to.
    pub(crate) fn object_of(&self, file: &Path) -> Option<String> {
        let relative = relative_of(file, &self.root)?;
        let (object, _) = relative.rsplit_once('/')?;
        Some(object.to_owned())
    }

    /// Delete ledger files (missing ones are fine).
    pub(crate) async fn delete(&self, files: Vec<Path>) -> Result<usize> {
        if files.is_empty() {
            return Ok(0);
        }
        let mut results = self
            .store()
            .delete_stream(futures::stream::iter(files.into_iter().map(Ok)).boxed());
        let mut deleted = 0;
        while let Some(result) = results.next().await {
            match result {
                Ok(_) | Err(object_store::Error::NotFound { .. }) => deleted += 1,
                Err(err) => return Err(unavailable(err)),
            }
        }
        Ok(deleted)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_file_names_parse() {
        assert_eq!(parse_name("u-17.json"), Some((Kind::Clock, 17)));
        assert_eq!(parse_name("c-0.json"), Some((Kind::Condemned, 0)));
        assert_eq!(parse_name("x-1.json"), None);
        assert_eq!(parse_name("u-1"), None);
        assert_eq!(parse_name("u-a.json"), None);
    }

    #[tokio::test]
    async fn entries_combine_by_the_largest_value() {
        let warehouse = Warehouse::in_memory("memory://ledger/wh").expect("warehouse");
        let ledger = Ledger::new(&warehouse);
        let run = Uuid::nil();
        let object = "indexes/a/1/ivf_postings/part-0";
        assert!(ledger.read(object).await.expect("read").clock_start_ms.is_none());
        ledger.record(object, Kind::Clock, 10, run, "seen").await.expect("clock");
        ledger.record(object, Kind::Clock, 30, run, "raised").await.expect("clock");
        ledger.record(object, Kind::Clock, 30, run, "again").await.expect("idempotent");
        ledger.record(object, Kind::Condemned, 50, run, "condemned").await.expect("condemn");
        // A child object's entry is not part of its parent's.
        ledger.record(&format!("{object}/x"), Kind::Clock, 99, run, "child").await.expect("child");
        let entry = ledger.read(object).await.expect("read");
        assert_eq!(entry.clock_start_ms, Some(30));
        assert_eq!(entry.condemned_ms, Some(50));
        assert_eq!(entry.files.len(), 3);
        assert_eq!(ledger.object_of(&entry.files[0]).as_deref(), Some(object));
        assert_eq!(ledger.delete(entry.files).await.expect("deleted"), 3);
        assert!(ledger.read(object).await.expect("read").files.is_empty());
    }
}
