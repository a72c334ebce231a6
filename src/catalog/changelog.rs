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
use super::record::{CommitChain, PointerRecord, PointerState};
use crate::error::{Error, ErrorKind, Result};
use crate::identifier::IndexIdentifier;
use crate::warehouse::layout::{ADOPTIONS_DIR, CHANGES_DIR, LINKS_DIR};
use crate::warehouse::{Fetched, ListItem, Warehouse};

const CHANGE_VERSION: i32 = 1;

/// Largest change-log entry read (an entry lists at most a few writes).
const MAX_CHANGE_BYTES: u64 = 1024 * 1024;

/// One change-log entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub(crate) struct Change {
    /// The entry's name, once read (not part of the entry).
    #[serde(skip)]
    pub name: String,
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
    /// The pointer writes issued that may have landed: every one not (yet) known to
    /// have lost.
    may_have_landed: usize,
}

impl Prelogged {
    /// `count` fresh commit ids.
    pub(crate) fn draw(catalog: &Catalog, count: usize) -> Prelogged {
        let all: Vec<Uuid> = (0..count).map(|_| catalog.ids().uuid()).collect();
        Prelogged {
            ids: all.clone().into_iter(),
            all,
            entry: None,
            may_have_landed: 0,
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

    /// A pointer write is about to be issued: until [`Prelogged::lost`], it may land.
    pub(crate) fn issuing(&mut self) {
        self.may_have_landed += 1;
    }

    /// The write issued last certainly did not land, and cannot (another writer changed
    /// the key first).
    pub(crate) fn lost(&mut self) {
        self.may_have_landed = self.may_have_landed.saturating_sub(1);
    }

    /// Whether every pointer write issued so far certainly did not land: the operation
    /// wrote nothing, and its entry may be withdrawn.
    pub(crate) fn wrote_nothing(&self) -> bool {
        self.may_have_landed == 0
    }

    /// The next commit id, if any is left.
    pub(crate) fn next_id(&mut self) -> Option<Uuid> {
        self.ids.next()
    }

    /// Withdraw the entry of an operation that certainly wrote nothing (it failed before
    /// its first write, or every write it issued lost to another writer): it announced
    /// nothing that happened, and a refused publication must not delay the collection of
    /// what it named. Best effort: an entry left behind keeps what it publishes until
    /// `init --adopt` (the collector cannot tell it from a write another copy of the
    /// store took: `gc::untaken`).
    pub(crate) async fn withdraw(&mut self, catalog: &Catalog) {
        if let Some(Ok(name)) = self.entry.take() {
            catalog.withdraw_entry(name).await;
        }
    }
}

impl Catalog {
    /// Store the link of `commit`, a pointer write replacing `base` (see `gc::untaken` and
    /// `gc::history`), before the write is issued: a commit a record holds has its link,
    /// always, so a record whose links do not lead back to the commit a run saw does not
    /// descend from it (a clone's commits, or an earlier release's writer: no evidence,
    /// and none is guessed from times — GC round 113, M1), and an entry behind a commit the
    /// store took is taken (round 113, L3). A write whose link cannot be stored is not
    /// issued.
    pub(crate) async fn log_link(&self, commit: Uuid, base: Option<Uuid>) -> Result<()> {
        let name = link_name(self.now_ms(), commit, base);
        self.warehouse().put_if_absent(&name, Bytes::new()).await?;
        Ok(())
    }

    /// Withdraw the change-log entry `name` of writes that certainly did not land (best
    /// effort: an entry left behind keeps what it publishes, `gc::untaken`).
    pub(crate) async fn withdraw_entry(&self, name: String) {
        for (_, outcome) in self.warehouse().delete(vec![name]).await {
            if let crate::warehouse::Deletion::Failed(err) = outcome {
                tracing::debug!(error = %err, "withdrawing a change-log entry failed");
            }
        }
    }

    /// Log `writes` (one entry, stored before this returns). Every index-record write must
    /// be logged before it is issued.
    pub(crate) async fn log_writes(&self, writes: Vec<LoggedWrite>) -> Result<String> {
        let at_ms = self.now_ms();
        let change = Change {
            name: String::new(),
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

/// The name of the link of `commit`, a write that replaced `base` (none: the key held no
/// record), written at `at_ms`: names sort by time.
pub(crate) fn link_name(at_ms: i64, commit: Uuid, base: Option<Uuid>) -> String {
    let base = base.map_or_else(|| "none".to_owned(), |base| base.simple().to_string());
    format!(
        "{LINKS_DIR}/{:020}-{}-{base}",
        at_ms.max(0),
        commit.simple()
    )
}

/// A commit link as its name states it: when it was written, the commit, and what it
/// replaced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Link {
    pub at_ms: i64,
    pub commit: Uuid,
    pub base: Option<Uuid>,
}

impl Link {
    /// The link `name` states, if it is one this catalog writes.
    pub(crate) fn parse(name: &str) -> Option<Link> {
        let file = name.strip_prefix(LINKS_DIR)?.strip_prefix('/')?;
        let mut parts = file.split('-');
        let (at, commit, base) = (parts.next()?, parts.next()?, parts.next()?);
        let link = Link {
            at_ms: at.parse().ok()?,
            commit: Uuid::try_parse(commit).ok()?,
            base: match base {
                "none" => None,
                base => Some(Uuid::try_parse(base).ok()?),
            },
        };
        (parts.next().is_none() && link_name(link.at_ms, link.commit, link.base) == name)
            .then_some(link)
    }
}

/// Every commit link (one listing; the links are empty objects named for what they say).
pub(crate) async fn read_links(warehouse: &Warehouse) -> Result<Vec<Link>> {
    let listed: Vec<ListItem> = warehouse.list(LINKS_DIR).try_collect().await?;
    Ok(listed
        .into_iter()
        .filter_map(|item| match item {
            ListItem::Object(listed) => Link::parse(&listed.name),
            ListItem::Skipped { .. } => None,
        })
        .collect())
}

/// The commit links, by commit: which commits each replaced.
#[derive(Debug, Default)]
pub(crate) struct Links {
    bases: std::collections::HashMap<Uuid, Vec<Uuid>>,
    replaced: std::collections::HashSet<Uuid>,
}

impl Links {
    /// Every link (one listing).
    pub(crate) async fn read(warehouse: &Warehouse) -> Result<Links> {
        let mut links = Links::default();
        for link in read_links(warehouse).await? {
            let bases = links.bases.entry(link.commit).or_default();
            if let Some(base) = link.base {
                bases.push(base);
                links.replaced.insert(base);
            }
        }
        Ok(links)
    }

    /// The commits `commit` replaced, as its links say (none for one without a link).
    pub(crate) fn bases(&self, commit: Uuid) -> Vec<Uuid> {
        self.bases.get(&commit).cloned().unwrap_or_default()
    }

    /// Whether a record holding the commits `held` (its chain) descends from `seen`: it
    /// holds it, or the links lead from one of them back to it ([`taken`]).
    pub(crate) fn descends(&self, held: impl IntoIterator<Item = Uuid>, seen: Uuid) -> bool {
        taken(&[std::slice::from_ref(&seen)], held, |commit| {
            self.bases(commit)
        })[0]
    }

    /// Whether some link names `commit` as the commit it replaced.
    pub(crate) fn replaced(&self, commit: Uuid) -> bool {
        self.replaced.contains(&commit)
    }
}

/// Delete the links written before `before_ms` (only files this catalog writes there).
pub(crate) async fn prune_links(warehouse: &Warehouse, before_ms: i64) -> Result<usize> {
    let old: Vec<String> = read_links(warehouse)
        .await?
        .into_iter()
        .filter(|link| link.at_ms < before_ms)
        .map(|link| link_name(link.at_ms, link.commit, link.base))
        .collect();
    let count = old.len();
    for (name, outcome) in warehouse.delete(old).await {
        if let crate::warehouse::Deletion::Failed(err) = outcome {
            tracing::debug!(file = %name, error = %err, "pruning a commit link failed");
        }
    }
    Ok(count)
}

/// The clock skew an adoption allows between its own clock and writers' (the collector's
/// default allowance): entries logged later than a publish window and twice this before it
/// are not released.
const ADOPTION_SKEW_MS: i64 = 5 * 60 * 1000;

/// Where the claim or adoption of `epoch_ms` lists the entries it found.
fn release_name(epoch_ms: i64) -> String {
    format!("{ADOPTIONS_DIR}/{:020}.json", epoch_ms.max(0))
}

/// Whether `name` is a list [`record_release`] writes (or one being written: a local
/// file store's temporary `<name>#<n>`).
pub(crate) fn is_release(name: &str) -> bool {
    let name = match name.rsplit_once('#') {
        Some((list, n)) if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) => list,
        _ => name,
    };
    name.strip_prefix(ADOPTIONS_DIR)
        .and_then(|rest| rest.strip_prefix('/'))
        .and_then(|rest| rest.strip_suffix(".json"))
        .and_then(|ms| ms.parse::<i64>().ok())
        .is_some_and(|ms| release_name(ms) == name)
}

/// Record which entries of the log the claim or adoption of the epoch `epoch_ms`
/// releases from rule N (`gc::untaken`), before it writes its marker: those logged before
/// it (settled: no write of theirs can land any more) whose publication the adopting store
/// did not take (a writer stopped before its
/// write, a write a restored backup lost) — the operator's word that this store is the
/// catalog. Not the others: a copy of the store that passes for it (a cloned disk) reads
/// the same list, and the owner's later writes it lacks must stay judged there (GC round
/// 112, A1: an owner's adoption released them, and the clone's collector deleted the
/// owner's live index). Which entries came before the epoch is what the log held then,
/// never a writer's clock (one behind the adopter's dates a later entry before it).
///
/// The list also names the records an adoption `forgives` (`gc::adoption`): the records
/// (a key and the commit seen there) the collector's previous journal lists that the
/// adopting store lacks or holds without descending from them.
pub(crate) async fn record_release(
    catalog: &Catalog,
    epoch_ms: i64,
    forgiven: &Forgiven,
) -> Result<()> {
    let warehouse = catalog.warehouse();
    let log = read(warehouse, 8).await?;
    let links = Links::read(warehouse).await?;
    // An entry logged within a publish window (and the clocks' skew) of the adoption may
    // belong to a write still in flight, which lands after the records are read: it stays
    // judged (GC round 113, A2: released, it let a clone delete the owner's commit).
    let settled_before = epoch_ms
        .saturating_sub(i64::try_from(catalog.inner.publish_window.as_millis()).unwrap_or(i64::MAX))
        .saturating_sub(2 * ADOPTION_SKEW_MS);
    let publishing: Vec<(&Change, &LoggedWrite)> = log
        .changes
        .iter()
        .filter(|change| change.at_ms < settled_before)
        .flat_map(|change| change.writes.iter().map(move |write| (change, write)))
        .filter(|(_, write)| write.publishes.is_some())
        .collect();
    let keys: std::collections::BTreeSet<&str> = publishing
        .iter()
        .map(|(_, write)| write.key.as_str())
        .collect();
    let mut held: Vec<Uuid> = Vec::new();
    for key in keys {
        if let Some(chain) = chain_at(catalog, key).await? {
            held.extend(chain.commits());
        }
    }
    let commits: Vec<&[Uuid]> = publishing
        .iter()
        .map(|(_, write)| write.commit_ids.as_slice())
        .collect();
    let released = publishing
        .iter()
        .zip(taken(&commits, held, |commit| links.bases(commit)))
        .filter(|(_, taken)| !*taken)
        .map(|((change, _), _)| change.name.clone())
        .collect();
    let release = Release {
        released,
        forgiven: forgiven.clone(),
    };
    let bytes = serde_json::to_vec(&release).map_err(|err| {
        Error::with_source(
            ErrorKind::InvalidRequest,
            "encoding the released entries failed",
            err,
        )
    })?;
    // Create-if-absent, as every write a writer's claim makes under `_gc/`: an epoch is
    // one millisecond, and a claim retried in it found the same log.
    warehouse
        .put_if_absent(&release_name(epoch_ms), Bytes::from(bytes))
        .await?;
    Ok(())
}

/// The commit chain of the record at the store key `key`, read now; `None` if there is no
/// record, or one that does not parse as a chain (it holds nothing the collector can tell).
pub(crate) async fn chain_at(catalog: &Catalog, key: &str) -> Result<Option<CommitChain>> {
    let retry = crate::retry::Retry {
        policy: &crate::retry::RetryPolicy::default(),
        random: catalog.ids().as_ref(),
        stop: None,
    };
    let key = crate::store::StoreKey::new(key)?;
    let stored = super::write::read_with_retry(catalog.store().as_ref(), &key, retry).await?;
    Ok(stored.and_then(|stored| CommitChain::from_bytes(&stored.value).ok()))
}

/// What the claim or adoption that began an epoch released (see [`record_release`]).
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Release {
    /// The change-log entries released from rule N.
    pub released: std::collections::BTreeSet<String>,
    /// The records the adoption forgave, by store key: rule X of `gc::history` does not
    /// hold the collector's previous journal against these commits at these keys (and
    /// holds it against every other commit the journal lists at the same key).
    pub forgiven: Forgiven,
}

/// Records forgiven by an adoption: the commits of each store key (see [`Release`]). A
/// record, not a key: a key where the journal saw both the adopting store's commit and a
/// copy's keeps the former judged (GC round 115, F1).
pub(crate) type Forgiven = std::collections::BTreeMap<String, std::collections::BTreeSet<Uuid>>;

/// What the claim or adoption of the epoch `epoch_ms` released, if it recorded it (one
/// this release wrote; `None` for an earlier release's or a lost record). A record that
/// does not parse releases and forgives nothing.
pub(crate) async fn released_at(warehouse: &Warehouse, epoch_ms: i64) -> Result<Option<Release>> {
    match warehouse
        .get(&release_name(epoch_ms), MAX_CHANGE_BYTES * 64)
        .await?
    {
        Fetched::Object(bytes, _) => Ok(Some(
            serde_json::from_slice::<Release>(&bytes).unwrap_or_default(),
        )),
        Fetched::TooLarge(_) => Ok(Some(Release::default())),
        Fetched::Missing => Ok(None),
    }
}

/// Which logged writes the pointer store took (rule N), given the commit ids each may
/// carry: those whose commit the store `held` (a record remembers it) or that a commit it
/// took replaced (`base`: the commits a write replaced, as its links say — that writer
/// read them there, in this store; a rename's one commit id replaces the source's record
/// and the destination's). A write neither shows was stopped
/// before it wrote, or another copy of the store took it.
pub fn taken<C: Copy + Eq + std::hash::Hash>(
    writes: &[&[C]],
    held: impl IntoIterator<Item = C>,
    base: impl Fn(C) -> Vec<C>,
) -> Vec<bool> {
    let mut store = std::collections::HashSet::new();
    let mut queue: Vec<C> = held.into_iter().collect();
    while let Some(commit) = queue.pop() {
        if store.insert(commit) {
            queue.extend(base(commit));
        }
    }
    writes
        .iter()
        .map(|commits| commits.iter().any(|commit| store.contains(commit)))
        .collect()
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
            Entry::Read(change) => log.changes.push(Change { name, ..change }),
            Entry::Gone => {}
            Entry::Unreadable => log.unreadable.push(name),
        }
    }
    log.changes.sort_by_key(|change| change.at_ms);
    Ok(log)
}

/// Delete the entries that `settled` accepts by name and time (and only files this
/// catalog writes there); how many are gone.
pub(crate) async fn prune(
    warehouse: &Warehouse,
    settled: impl Fn(&str, i64) -> bool,
) -> Result<usize> {
    let listed: Vec<ListItem> = warehouse.list(CHANGES_DIR).try_collect().await?;
    let old: Vec<String> = listed
        .into_iter()
        .filter_map(|item| match item {
            ListItem::Object(listed)
                if entry_time(&listed.name).is_some_and(|at| settled(&listed.name, at)) =>
            {
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
                name: String::new(),
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
        assert_eq!(prune(&warehouse, |_, at| at < 10).await.expect("pruned"), 2);
        let log = read(&warehouse, 4).await.expect("read");
        assert_eq!(log.changes.len(), 1);
        assert!(
            log.unreadable.is_empty(),
            "an unreadable entry is pruned once settled"
        );
    }

    /// A claim lists the entries the log holds settled before its marker whose
    /// publication its store did not take, and the records an adoption forgives; the
    /// collector reads the list back by the epoch, and the ownership check knows the list
    /// for what it is.
    #[tokio::test]
    async fn a_release_lists_the_untaken_entries_settled_before_its_epoch() {
        let warehouse = Warehouse::in_memory("memory://changes/release").expect("warehouse");
        let catalog = Catalog::builder(
            std::sync::Arc::new(crate::store::memory::MemoryStore::new()),
            warehouse.clone(),
        )
        .build();
        let entry = catalog
            .log_writes(vec![LoggedWrite {
                key: "i/ns/=a".to_owned(),
                commit_ids: vec![Uuid::from_u128(1)],
                publishes: Some(warehouse.absolute("metadata/a.json")),
                replaces: None,
            }])
            .await
            .expect("entry");
        let logged = entry_time(&entry).expect("its time");
        let forgiven: Forgiven = [("i/ns/=b".to_owned(), [Uuid::from_u128(2)].into())].into();
        // Within a publish window and twice the skew of the epoch: its write may still land.
        let soon = logged + 60_000;
        assert!(released_at(&warehouse, soon).await.expect("read").is_none());
        record_release(&catalog, soon, &forgiven)
            .await
            .expect("recorded");
        let release = released_at(&warehouse, soon)
            .await
            .expect("read")
            .expect("listed");
        assert!(release.released.is_empty(), "{release:?}");
        assert_eq!(release.forgiven, forgiven);
        let later = logged + 3_600_000;
        record_release(&catalog, later, &forgiven)
            .await
            .expect("recorded");
        let release = released_at(&warehouse, later)
            .await
            .expect("read")
            .expect("listed");
        assert_eq!(release.released, [entry].into());
        assert!(is_release(&release_name(later)));
        assert!(is_release(&format!("{}#12", release_name(7))));
        for name in [
            "_gc/adoptions/7.json",
            "_gc/adoptions/00000000000000000007.json.tmp",
            "_gc/changes/00000000000000000007.json",
        ] {
            assert!(!is_release(name), "{name}");
        }
    }
}
