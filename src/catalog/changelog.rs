//! The change log: the catalog's durable record of its pointer writes, written **before**
//! each write, for the garbage collector.
//!
//! Every write of an index record — register, commit, drop, each step of a rename, a
//! settled rename — is preceded by one immutable object under `_gc/changes/` (create-if-
//! absent, a fresh name), and the write is only issued once that object is stored:
//!
//! ```json
//! {"change-version": 1, "at-ms": 1750000000000,
//!  "writes": [{"key": "i/…", "commit-ids": ["…", "…"], "publishes": "s3://b/wh/metadata/v2.json"}]}
//! ```
//!
//! `commit-ids` lists the commit ids the operation may write at `key` (a register or
//! commit draws its ids for every re-evaluation up front, so the entry is written once,
//! concurrently with the operation's first reads, and costs no round trip); `publishes`
//! is the metadata location the write makes current there (none for a tombstone).
//!
//! The collector reads the log after each walk (see `gc::rules`):
//!
//! * **what may have been reachable since a walk**: a register or commit lands within
//!   its publish window of `at-ms`, so a walk that starts a window (plus the clock-skew
//!   allowance, twice) after `at-ms` sees it; what an entry publishes restarts the
//!   retention clock of everything it names until such a walk finds it unreachable;
//! * **catalog state it cannot explain**: a record whose commit id neither the previous
//!   finished run saw at that key nor the log lists was written by something other than
//!   this catalog (a restored backup, a hand edit, an older binary): every retention
//!   clock restarts at the current walk.
//!
//! A finished run prunes the entries every later walk sees settled.

use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::Catalog;
use super::record::{PointerRecord, PointerState};
use crate::error::{Error, ErrorKind, Result};
use crate::identifier::IndexIdentifier;
use crate::warehouse::layout::CHANGES_DIR;
use crate::warehouse::{Fetched, ListItem, Warehouse};

const CHANGE_VERSION: i32 = 1;

/// Largest change-log entry read (an entry lists at most a few writes).
const MAX_CHANGE_BYTES: u64 = 1024 * 1024;

/// One change-log entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub(crate) struct Change {
    pub change_version: i32,
    /// When the operation logged it (the catalog's clock, before any of its writes).
    pub at_ms: i64,
    pub writes: Vec<LoggedWrite>,
}

/// One pointer write an entry announces.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub(crate) struct LoggedWrite {
    /// The record's store key.
    pub key: String,
    /// The commit ids the write may carry.
    pub commit_ids: Vec<Uuid>,
    /// The metadata location it makes current at `key`; none for a tombstone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub publishes: Option<String>,
    /// The metadata location it replaces at `key`, as far as the writer knows it (a
    /// commit's base, a dropped or moved record's location): reachable until the write,
    /// even if no walk ever saw it there (a restored backup, a hand edit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replaces: Option<String>,
}

/// The name of an entry logged at `at_ms`: names sort by time.
pub(crate) fn entry_name(at_ms: i64, id: Uuid) -> String {
    format!("{CHANGES_DIR}/{:020}-{}.json", at_ms.max(0), id.simple())
}

/// The time of an entry's name, if it is one this catalog writes.
pub(crate) fn entry_time(name: &str) -> Option<i64> {
    let file = name.strip_prefix(CHANGES_DIR)?.strip_prefix('/')?;
    let (at, rest) = file.split_once('-')?;
    let id = rest.strip_suffix(".json")?;
    let at_ms: i64 = at.parse().ok()?;
    let id = Uuid::try_parse(id).ok()?;
    (entry_name(at_ms, id) == name).then_some(at_ms)
}

impl LoggedWrite {
    /// What writing `record` at `identifier`'s key announces.
    pub(crate) fn of(identifier: &IndexIdentifier, record: &PointerRecord) -> LoggedWrite {
        LoggedWrite {
            key: identifier.store_key().as_str().to_owned(),
            commit_ids: vec![record.commit_id],
            publishes: (record.state != PointerState::Dropped)
                .then(|| record.metadata_location.clone()),
            replaces: (record.state == PointerState::Dropped)
                .then(|| record.metadata_location.clone()),
        }
    }
}

/// The commit ids of one register or commit, drawn up front (one per re-evaluation) so
/// that a single entry, logged concurrently with the operation's first reads, announces
/// whichever of them its write carries.
#[derive(Debug)]
pub(crate) struct Prelogged {
    ids: std::vec::IntoIter<Uuid>,
    all: Vec<Uuid>,
    /// The entry's name once logged, or why logging failed.
    entry: Option<Result<String>>,
}

impl Prelogged {
    /// `count` fresh commit ids.
    pub(crate) fn draw(catalog: &Catalog, count: usize) -> Prelogged {
        let all: Vec<Uuid> = (0..count).map(|_| catalog.ids().uuid()).collect();
        Prelogged {
            ids: all.clone().into_iter(),
            all,
            entry: None,
        }
    }

    /// Log the entry: a record at `identifier` publishing `location` (a location outside
    /// the warehouse publishes nothing: the publication's own checks refuse it), replacing
    /// `base` (a commit's).
    pub(crate) async fn log(
        &mut self,
        catalog: &Catalog,
        identifier: &IndexIdentifier,
        location: &str,
        base: Option<&str>,
    ) {
        let warehouse = catalog.warehouse();
        let entry = match warehouse.canonical_location(location) {
            Ok(location) => {
                let write = LoggedWrite {
                    key: identifier.store_key().as_str().to_owned(),
                    commit_ids: self.all.clone(),
                    publishes: Some(location),
                    replaces: base.map(|base| {
                        warehouse
                            .canonical_location(base)
                            .unwrap_or_else(|_| base.to_owned())
                    }),
                };
                catalog.log_writes(vec![write]).await
            }
            Err(err) => Err(err),
        };
        self.entry = Some(entry);
    }

    /// Before the first write: the entry is stored (or why it is not).
    pub(crate) fn logged(&mut self) -> Result<()> {
        match self.entry.take() {
            Some(Ok(name)) => {
                self.entry = Some(Ok(name));
                Ok(())
            }
            Some(Err(err)) => Err(err),
            None => Err(Error::new(
                ErrorKind::StoreUnavailable,
                "the change-log entry of this write was not stored",
            )),
        }
    }

    /// The next commit id, if any is left.
    pub(crate) fn next_id(&mut self) -> Option<Uuid> {
        self.ids.next()
    }

    /// Withdraw the entry of an operation that certainly wrote nothing (it failed before
    /// its first write): it announced nothing that happened, and a refused publication
    /// must not delay the collection of what it named. Best effort: an entry left behind
    /// only delays collection.
    pub(crate) async fn withdraw(&mut self, catalog: &Catalog) {
        if let Some(Ok(name)) = self.entry.take() {
            for (_, outcome) in catalog.warehouse().delete(vec![name]).await {
                if let crate::warehouse::Deletion::Failed(err) = outcome {
                    tracing::debug!(error = %err, "withdrawing a change-log entry failed");
                }
            }
        }
    }
}

impl Catalog {
    /// Log `writes` (one entry, stored before this returns). Every index-record write must
    /// be logged before it is issued.
    pub(crate) async fn log_writes(&self, writes: Vec<LoggedWrite>) -> Result<String> {
        let at_ms = self.now_ms();
        let change = Change {
            change_version: CHANGE_VERSION,
            at_ms,
            writes,
        };
        let bytes = Bytes::from(serde_json::to_vec(&change).unwrap_or_default());
        let name = entry_name(at_ms, self.ids().uuid());
        self.warehouse().put_if_absent(&name, bytes).await?;
        Ok(name)
    }
}

/// What the change log holds.
#[derive(Debug, Default)]
pub(crate) struct ChangeLog {
    /// Every entry.
    pub changes: Vec<Change>,
    /// Entries that do not parse: what they announced is unknown.
    pub unreadable: Vec<String>,
}

/// Read the whole change log, `concurrency` entries at a time.
pub(crate) async fn read(warehouse: &Warehouse, concurrency: usize) -> Result<ChangeLog> {
    let listed: Vec<ListItem> = warehouse.list(CHANGES_DIR).try_collect().await?;
    read_listed(warehouse, listed, concurrency).await
}

/// The names of the entries logged at or after `from_ms` (names sort by time: one ranged
/// listing).
pub(crate) async fn names_since(warehouse: &Warehouse, from_ms: i64) -> Result<Vec<String>> {
    // The range's lower bound is a directory's (`…/<from>/` on an object store), after the
    // entries `<from>-<uuid>.json` themselves (`-` sorts before `/`): start a millisecond
    // earlier, and keep what is at or after `from_ms` below (round 96, a note).
    let range = crate::warehouse::ListRange::new(
        CHANGES_DIR,
        Some(format!("{:020}", from_ms.saturating_sub(1).max(0))),
        None,
    );
    warehouse
        .list_range(&range, None)
        .try_filter_map(|positioned| {
            let name = match positioned.item {
                ListItem::Object(listed) => entry_time(&listed.name)
                    .is_some_and(|at_ms| at_ms >= from_ms)
                    .then_some(listed.name),
                ListItem::Skipped { .. } => None,
            };
            futures::future::ready(Ok(name))
        })
        .try_collect()
        .await
}

/// One change-log entry, as read.
#[derive(Debug)]
pub(crate) enum Entry {
    /// It announces `Change`.
    Read(Change),
    /// Gone (pruned since it was listed: a finished run saw it settled).
    Gone,
    /// It does not parse as an entry of this version named for its time.
    Unreadable,
}

/// Read the entry `name`.
pub(crate) async fn read_entry(warehouse: &Warehouse, name: &str) -> Result<Entry> {
    Ok(match warehouse.get(name, MAX_CHANGE_BYTES).await? {
        Fetched::Object(bytes, _) => serde_json::from_slice::<Change>(&bytes)
            .ok()
            .filter(|change| {
                change.change_version == CHANGE_VERSION
                    && entry_time(name) == Some(change.at_ms.max(0))
            })
            .map_or(Entry::Unreadable, Entry::Read),
        Fetched::Missing => Entry::Gone,
        Fetched::TooLarge(_) => Entry::Unreadable,
    })
}

/// Read the listed entries, `concurrency` at a time.
async fn read_listed(
    warehouse: &Warehouse,
    listed: Vec<ListItem>,
    concurrency: usize,
) -> Result<ChangeLog> {
    let mut log = ChangeLog::default();
    let mut names = Vec::new();
    for item in listed {
        match item {
            ListItem::Object(listed) if entry_time(&listed.name).is_some() => {
                names.push(listed.name)
            }
            // No catalog writer names an object so (a console's folder marker, a sync
            // tool's `.keep`): it announces nothing, and it must not stop collection.
            ListItem::Object(listed) => {
                tracing::warn!(file = %listed.name, "gc: a stray object under the change log is no entry; ignored");
            }
            ListItem::Skipped { name, .. } => {
                tracing::warn!(file = %name, "gc: a stray object under the change log is no entry; ignored");
            }
        }
    }
    let read: Vec<(String, Entry)> = futures::stream::iter(names)
        .map(|name| async move {
            let entry = read_entry(warehouse, &name).await?;
            Ok::<_, Error>((name, entry))
        })
        .buffer_unordered(concurrency.max(1))
        .try_collect()
        .await?;
    for (name, entry) in read {
        match entry {
            Entry::Read(change) => log.changes.push(change),
            Entry::Gone => {}
            Entry::Unreadable => log.unreadable.push(name),
        }
    }
    log.changes.sort_by_key(|change| change.at_ms);
    Ok(log)
}

/// Delete the entries whose time `settled` accepts (and only files this catalog writes
/// there); how many are gone.
pub(crate) async fn prune(warehouse: &Warehouse, settled: impl Fn(i64) -> bool) -> Result<usize> {
    let listed: Vec<ListItem> = warehouse.list(CHANGES_DIR).try_collect().await?;
    let old: Vec<String> = listed
        .into_iter()
        .filter_map(|item| match item {
            ListItem::Object(listed) if entry_time(&listed.name).is_some_and(&settled) => {
                Some(listed.name)
            }
            _ => None,
        })
        .collect();
    let mut pruned = 0;
    for (name, outcome) in warehouse.delete(old).await {
        match outcome {
            crate::warehouse::Deletion::Deleted | crate::warehouse::Deletion::Missing => {
                pruned += 1
            }
            crate::warehouse::Deletion::Refused(why) => {
                tracing::warn!(file = %name, reason = %why, "change-log entry not deleted");
            }
            crate::warehouse::Deletion::Failed(err) => {
                return Err(Error::new(
                    ErrorKind::StoreUnavailable,
                    format!("pruning the change log failed: {}", err.message()),
                ));
            }
        }
    }
    Ok(pruned)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// On an object store a ranged listing's lower bound is a directory key, which sorts
    /// after the entries named for the same millisecond (`<ms>-<uuid>.json`): the names
    /// since a time include those logged at it, on every store.
    #[tokio::test]
    async fn the_names_since_a_time_include_those_logged_at_it() {
        let dir = tempfile::tempdir().expect("dir");
        for warehouse in [
            Warehouse::in_memory("memory://changes/wh").expect("memory"),
            Warehouse::local(dir.path()).expect("local"),
        ] {
            for (at, id) in [(999, 1), (1_000, 2), (1_000, 3), (1_001, 4)] {
                warehouse
                    .put_if_absent(
                        &entry_name(at, Uuid::from_u128(id)),
                        Bytes::from_static(b"{}"),
                    )
                    .await
                    .expect("entry");
            }
            let mut names = names_since(&warehouse, 1_000).await.expect("names");
            names.sort();
            let expected: Vec<String> = [(1_000, 2), (1_000, 3), (1_001, 4)]
                .into_iter()
                .map(|(at, id)| entry_name(at, Uuid::from_u128(id)))
                .collect();
            assert_eq!(names, expected);
        }
    }

    #[test]
    fn entry_names_sort_by_time_and_parse_back() {
        let id = Uuid::from_u128(7);
        let name = entry_name(1_750_000_000_000, id);
        assert_eq!(entry_time(&name), Some(1_750_000_000_000));
        assert!(entry_name(9, id) < entry_name(10, id));
        for foreign in [
            format!("{CHANGES_DIR}/x/{}", name.rsplit('/').next().unwrap_or("")),
            format!("{CHANGES_DIR}/1-{}.json", id.simple()),
            format!("{CHANGES_DIR}/notes.json"),
        ] {
            assert_eq!(entry_time(&foreign), None, "{foreign}");
        }
    }

    #[tokio::test]
    async fn entries_round_trip_and_are_pruned_by_time() {
        let warehouse = Warehouse::in_memory("memory://changes/wh").expect("warehouse");
        let write = LoggedWrite {
            key: "i/a".to_owned(),
            commit_ids: vec![Uuid::from_u128(1), Uuid::from_u128(2)],
            publishes: Some("memory://changes/wh/metadata/a.json".to_owned()),
            replaces: None,
        };
        for (at, id) in [(5, 1), (20, 2)] {
            let change = Change {
                change_version: CHANGE_VERSION,
                at_ms: at,
                writes: vec![write.clone()],
            };
            let bytes = Bytes::from(serde_json::to_vec(&change).expect("json"));
            assert!(
                warehouse
                    .put_if_absent(&entry_name(at, Uuid::from_u128(id)), bytes)
                    .await
                    .expect("put")
            );
        }
        warehouse
            .put_if_absent(
                &format!("{CHANGES_DIR}/stray.json"),
                Bytes::from_static(b"{}"),
            )
            .await
            .expect("stray");
        let log = read(&warehouse, 4).await.expect("read");
        assert_eq!(
            log.changes.iter().map(|c| c.at_ms).collect::<Vec<_>>(),
            vec![5, 20]
        );
        assert_eq!(log.changes[0].writes, vec![write]);
        assert!(log.unreadable.is_empty(), "a stray is no entry");
        let torn = entry_name(7, Uuid::from_u128(3));
        warehouse
            .put_if_absent(&torn, Bytes::from_static(b"{"))
            .await
            .expect("torn");
        let log = read(&warehouse, 4).await.expect("read");
        assert_eq!(log.unreadable, vec![torn]);
        assert_eq!(prune(&warehouse, |at| at < 10).await.expect("pruned"), 2);
        let log = read(&warehouse, 4).await.expect("read");
        assert_eq!(log.changes.len(), 1);
        assert!(
            log.unreadable.is_empty(),
            "an unreadable entry is pruned once settled"
        );
    }
}
