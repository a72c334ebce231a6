//! The bench scenarios. Each measures a catalog operation and its raw primitive
//! interleaved.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use object_store::ObjectStoreExt;
use serde_json::json;

use super::{BenchRow, Samples};
use crate::catalog::{Catalog, IndexCatalog};
use crate::error::{ErrorKind, Result};
use crate::identifier::{IndexIdentifier, Namespace};
use crate::metadata::{
    IndexMetadata, IndexTableDefinition, ProviderDefinition, SnapshotContents, TableDefinition,
};
use crate::publish::{Jitter, PublishPolicy};
use crate::store::PointerStoreExt;
use crate::store::{PutMode, StoreKey};

/// Snapshots kept in the metadata of the commit scenarios (files stay small).
const KEEP_SNAPSHOTS: usize = 8;

/// The raw conditional write of the commit scenario: the record read, one byte changed.
async fn write_next(
    store: &dyn crate::store::PointerStore,
    key: &StoreKey,
    current: Option<crate::store::Versioned>,
    version: u64,
) -> std::result::Result<(), crate::store::StoreError> {
    if let Some(current) = current {
        let mut value = current.value.to_vec();
        value[0] = b'0' + (version % 10) as u8;
        store
            .put(key, Bytes::from(value), PutMode::Update(current.version))
            .await?;
    }
    Ok(())
}

pub(super) struct Bench {
    catalog: Catalog,
    duration: Duration,
    run: String,
}

fn source(version: u64) -> Result<TableDefinition> {
    TableDefinition::new(
        "parquet",
        BTreeMap::from([
            ("location".to_owned(), "s3://bench/source/".to_owned()),
            ("snapshot".to_owned(), version.to_string()),
        ]),
    )
}

fn contents(version: u64, tag: &str) -> Result<SnapshotContents> {
    let table = |role: &str| {
        IndexTableDefinition::new(
            1,
            BTreeMap::from([("location".to_owned(), format!("indexes/{tag}/{role}/"))]),
        )
    };
    Ok(SnapshotContents {
        source_table: source(version)?,
        vector_field: "embedding".into(),
        source_key_fields: vec!["id".into()],
        indexed_rows: 1_000_000,
        index_family: "ivf".into(),
        index_schema_version: 1,
        metric: "l2_squared".into(),
        parameters: BTreeMap::from([("nlist".to_owned(), "4096".to_owned())]),
        index_provider: ProviderDefinition::new("parquet", BTreeMap::new())?,
        index_tables: BTreeMap::from([
            ("ivf_centroids".to_owned(), table("ivf_centroids")?),
            ("ivf_postings".to_owned(), table("ivf_postings")?),
        ]),
        summary: BTreeMap::new(),
    })
}

impl Bench {
    pub(super) fn new(catalog: Catalog, duration: Duration) -> Bench {
        let run = catalog.ids().uuid().simple().to_string();
        Bench {
            catalog,
            duration,
            run,
        }
    }

    async fn namespace(&self, name: &str) -> Result<Namespace> {
        let namespace = Namespace::new([format!("parqdb-bench-{name}")])?;
        match self
            .catalog
            .create_namespace(&namespace, BTreeMap::new())
            .await
        {
            Err(err) if err.kind() != ErrorKind::AlreadyExists => Err(err),
            _ => Ok(namespace),
        }
    }

    async fn write(&self, metadata: &IndexMetadata) -> Result<String> {
        let relative = format!(
            "metadata/{}/{:05}-{}.metadata.json",
            metadata.index_uuid(),
            metadata.last_sequence_number(),
            self.catalog.ids().uuid()
        );
        self.catalog
            .warehouse()
            .write_new(&relative, Bytes::from(metadata.to_json_vec()))
            .await
    }

    /// A new registered index; returns its identifier and initial metadata.
    async fn index(&self, name: &str) -> Result<(IndexIdentifier, IndexMetadata, String)> {
        let namespace = self.namespace(&self.run).await?;
        let id = IndexIdentifier::new(namespace, name)?;
        let metadata = IndexMetadata::create(
            contents(1, &self.run)?,
            BTreeMap::new(),
            self.catalog.clock().as_ref(),
            self.catalog.ids().as_ref(),
            self.catalog.registry(),
        )?;
        let location = self.write(&metadata).await?;
        self.catalog
            .register(&id, Some(&source(1)?), &location)
            .await?;
        Ok((id, metadata, location))
    }

    /// The next metadata file of a chain, written (not timed by callers).
    async fn next(&self, base: &IndexMetadata, version: u64) -> Result<(IndexMetadata, String)> {
        let catalog = &self.catalog;
        let next = base
            .expire_snapshots(Some(KEEP_SNAPSHOTS), None, catalog.clock().as_ref())?
            .successor(
                contents(version, &self.run)?,
                catalog.clock().as_ref(),
                catalog.ids().as_ref(),
                catalog.registry(),
            )?;
        let location = self.write(&next).await?;
        Ok((next, location))
    }

    fn raw_key(&self, name: &str) -> Result<StoreKey> {
        StoreKey::new(format!("_bench/{}/={name}", self.run))
    }

    pub(super) async fn load(&self) -> Result<Vec<BenchRow>> {
        let (id, _, _) = self.index("load").await?;
        let store = self.catalog.store();
        let key = id.store_key();
        let version = self.catalog.load(&id).await?.version;
        let (mut load, mut unchanged, mut raw) =
            (Samples::default(), Samples::default(), Samples::default());
        let deadline = Instant::now() + self.duration;
        while Instant::now() < deadline {
            let start = Instant::now();
            self.catalog.load(&id).await?;
            load.push(start.elapsed());
            let start = Instant::now();
            self.catalog.load_if_changed(&id, &version).await?;
            unchanged.push(start.elapsed());
            let start = Instant::now();
            store
                .get(&key)
                .await
                .map_err(|err| crate::catalog::write::store_error(store.as_ref(), err))?;
            raw.push(start.elapsed());
        }
        Ok(vec![
            BenchRow::new("load", "load vs raw read", &load, Some(&raw)),
            BenchRow::new(
                "load-if-changed",
                "load_if_changed (unchanged) vs raw read",
                &unchanged,
                Some(&raw),
            ),
        ])
    }

    pub(super) async fn commit(&self) -> Result<BenchRow> {
        let (id, mut metadata, mut location) = self.index("commit").await?;
        let store = self.catalog.store().clone();
        let warehouse = self.catalog.warehouse().clone();
        let raw_key = self.raw_key("commit")?;
        let unavailable = |err| crate::catalog::write::store_error(store.as_ref(), err);
        let object_error = |err| {
            crate::error::Error::with_source(
                ErrorKind::StoreUnavailable,
                "reading a metadata file",
                err,
            )
        };
        store
            .put(&raw_key, Bytes::from(vec![b'x'; 600]), PutMode::Create)
            .await
            .map_err(unavailable)?;
        // A raw read + conditional write of the raw key.
        let read_write = |version: u64| {
            let (store, raw_key) = (&store, &raw_key);
            async move {
                let current = store.get(raw_key).await.map_err(unavailable)?;
                write_next(store.as_ref(), raw_key, current, version)
                    .await
                    .map_err(unavailable)
            }
        };
        let (mut commits, mut raw, mut minimum, mut logged) = (
            Samples::default(),
            Samples::default(),
            Samples::default(),
            Samples::default(),
        );
        // A change-log entry's size: what a commit's entry holds (key, ids, locations).
        let entry = Bytes::from(vec![b'x'; 1024]);
        let mut entries = Vec::new();
        let deadline = Instant::now() + self.duration;
        let mut version = 1;
        // Warm the cache with the base, as a publisher that just wrote it would have.
        self.catalog.read_metadata(&location).await?;
        while Instant::now() < deadline {
            version += 1;
            let (next, next_location) = self.next(&metadata, version).await?;
            let start = Instant::now();
            self.catalog
                .commit(&id, Some(&source(version)?), &location, &next_location)
                .await?;
            commits.push(start.elapsed());
            (metadata, location) = (next, next_location);

            let start = Instant::now();
            read_write(version).await?;
            raw.push(start.elapsed());

            // The physical minimum: the pointer and the new metadata file (the one just
            // committed: same size) read concurrently, then the conditional write.
            let path = warehouse.path(&warehouse.relative(&location)?)?;
            let start = Instant::now();
            let (current, file) = futures::join!(store.get(&raw_key), async {
                warehouse.object_store().get(&path).await?.bytes().await
            });
            let current = current.map_err(unavailable)?;
            std::hint::black_box(file.map_err(object_error)?);
            write_next(store.as_ref(), &raw_key, current, version)
                .await
                .map_err(unavailable)?;
            minimum.push(start.elapsed());

            // The same with the one write the collector's safety argument adds before the
            // pointer write: a change-log entry, created (if absent) beside the reads.
            let name = format!("_bench/{}/change-{version}.json", self.run);
            let start = Instant::now();
            let (current, file, created) = futures::join!(
                store.get(&raw_key),
                async { warehouse.object_store().get(&path).await?.bytes().await },
                warehouse.put_if_absent(&name, entry.clone())
            );
            let current = current.map_err(unavailable)?;
            std::hint::black_box(file.map_err(object_error)?);
            created?;
            write_next(store.as_ref(), &raw_key, current, version)
                .await
                .map_err(unavailable)?;
            logged.push(start.elapsed());
            entries.push(name);
        }
        // The entries are the bench's own scratch, outside the managed prefixes (a file
        // left behind by a refused deletion is harmless).
        warehouse.delete(entries).await;
        Ok(BenchRow::new(
            "commit",
            "commit vs raw read + conditional write",
            &commits,
            Some(&raw),
        )
        .with_minimum(&minimum)
        .with_logged_minimum(&logged))
    }

    /// `writers` writers publish on one index with reload-and-retry.
    async fn race(&self, writers: usize) -> Result<(Samples, serde_json::Value)> {
        let (id, _, _) = self.index(&format!("contention-{writers}")).await?;
        let stop = Arc::new(AtomicBool::new(false));
        let mut tasks = Vec::new();
        for writer in 0..writers {
            let (bench, id, stop) = (
                Bench {
                    catalog: self.catalog.clone(),
                    duration: self.duration,
                    run: self.run.clone(),
                },
                id.clone(),
                stop.clone(),
            );
            tasks.push(tokio::spawn(async move {
                let (mut latencies, mut attempts) = (Samples::default(), Vec::new());
                // Reload-and-retry with the publisher's backoff: jittered, exponential, in
                // units of the failed attempt's duration on a slow store.
                let backoff = PublishPolicy {
                    max_attempts: u32::MAX,
                    base_delay: Duration::from_millis(1),
                    max_delay: Duration::from_millis(64),
                    jitter: Jitter::Full,
                };
                let mut version = (writer as u64 + 1) * 1_000_000_000;
                while !stop.load(Ordering::Relaxed) {
                    let start = Instant::now();
                    let mut tries = 0u32;
                    loop {
                        tries += 1;
                        let attempt = Instant::now();
                        let current = bench.catalog.load(&id).await?;
                        let base = bench
                            .catalog
                            .read_metadata(&current.metadata_location)
                            .await?;
                        version += 1;
                        let (_, location) = bench.next(&base, version).await?;
                        match bench
                            .catalog
                            .commit(
                                &id,
                                Some(&source(version)?),
                                &current.metadata_location,
                                &location,
                            )
                            .await
                        {
                            Ok(_) => break,
                            Err(err) if err.kind() == ErrorKind::CommitConflict => {
                                let ids = bench.catalog.ids().as_ref();
                                backoff.back_off(tries, attempt.elapsed(), ids).await
                            }
                            Err(err) => return Err(err),
                        }
                    }
                    latencies.push(start.elapsed());
                    attempts.push(tries);
                }
                Ok::<_, crate::error::Error>((latencies, attempts))
            }));
        }
        tokio::time::sleep(self.duration).await;
        stop.store(true, Ordering::Relaxed);
        let (mut all, mut per_writer, mut attempts) = (Samples::default(), Vec::new(), Vec::new());
        for task in tasks {
            let (latencies, tries) = task.await.map_err(|err| {
                crate::error::Error::new(ErrorKind::StoreUnavailable, err.to_string())
            })??;
            per_writer.push(tries.len() as f64);
            attempts.extend(tries);
            for ms in latencies.raw() {
                all.push(ms);
            }
        }
        let commits = attempts.len() as i64;
        let last = self
            .catalog
            .read_metadata(&self.catalog.load(&id).await?.metadata_location)
            .await?;
        let sum: f64 = per_writer.iter().sum();
        let squares: f64 = per_writer.iter().map(|c| c * c).sum();
        let details = json!({
            "writers": writers,
            "commits": commits,
            "commits-per-second": commits as f64 / self.duration.as_secs_f64(),
            "attempts-mean": attempts.iter().map(|&a| f64::from(a)).sum::<f64>() / attempts.len().max(1) as f64,
            "attempts-max": attempts.iter().max().copied().unwrap_or(0),
            "jain-fairness": if squares > 0.0 { sum * sum / (per_writer.len() as f64 * squares) } else { 0.0 },
            "lost-updates": last.last_sequence_number() - 1 - commits,
        });
        Ok((all, details))
    }

    pub(super) async fn contention(&self, writers: usize) -> Result<Vec<BenchRow>> {
        let (single, single_details) = self.race(1).await?;
        let (many, many_details) = self.race(writers).await?;
        let single_rate = single_details["commits-per-second"].as_f64().unwrap_or(0.0);
        let many_rate = many_details["commits-per-second"].as_f64().unwrap_or(0.0);
        let mut one = BenchRow::new(
            "contention-1",
            "contention: 1 writer (commit incl. retries)",
            &single,
            None,
        );
        one.details = single_details;
        let mut row = BenchRow::new(
            "contention-n",
            &format!("contention: {writers} writers (incl. retries)"),
            &many,
            None,
        );
        let mut details = many_details;
        details["rate-vs-single-writer"] = json!(if single_rate > 0.0 {
            many_rate / single_rate
        } else {
            0.0
        });
        row.details = details;
        Ok(vec![one, row])
    }

    pub(super) async fn list(&self, size: usize) -> Result<BenchRow> {
        let namespace = self.namespace(&format!("list-{size}-half-dropped")).await?;
        let store = self.catalog.store();
        let prefix = namespace.indexes_prefix();
        let raw_listing = || async {
            let mut keys = Vec::new();
            let mut after: Option<StoreKey> = None;
            loop {
                let page = store
                    .list(&prefix, after.as_ref(), 1000)
                    .await
                    .map_err(|err| crate::catalog::write::store_error(store.as_ref(), err))?;
                after = page.entries.last().map(|e| e.key.clone());
                keys.extend(page.entries.into_iter().map(|e| e.key));
                if !page.more {
                    return Ok::<_, crate::error::Error>(keys);
                }
            }
        };
        let name = |i: usize| format!("index-{i:07}");
        if self.count(&namespace).await? != size / 2 {
            // Register what was never registered, then drop every odd identifier.
            let existing: std::collections::HashSet<String> = raw_listing()
                .await?
                .into_iter()
                .map(|k| k.to_string())
                .collect();
            let metadata = IndexMetadata::create(
                contents(1, "list")?,
                BTreeMap::new(),
                self.catalog.clock().as_ref(),
                self.catalog.ids().as_ref(),
                self.catalog.registry(),
            )?;
            let location = self.write(&metadata).await?;
            let source = source(1)?;
            let missing: Vec<IndexIdentifier> = (0..size)
                .map(|i| IndexIdentifier::new(namespace.clone(), name(i)))
                .collect::<Result<Vec<_>>>()?
                .into_iter()
                .filter(|id| !existing.contains(id.store_key().as_str()))
                .collect();
            futures::stream::iter(missing)
                .map(|id| {
                    let (location, source) = (&location, &source);
                    async move {
                        match self.catalog.register(&id, Some(source), location).await {
                            Err(err) if err.kind() != ErrorKind::AlreadyExists => Err(err),
                            _ => Ok(()),
                        }
                    }
                })
                .buffer_unordered(32)
                .try_collect::<Vec<()>>()
                .await?;
            futures::stream::iter((1..size).step_by(2))
                .map(|i| {
                    let namespace = &namespace;
                    async move {
                        let id = IndexIdentifier::new(namespace.clone(), name(i))?;
                        match self.catalog.drop_index(&id).await {
                            Err(err) if err.kind() != ErrorKind::IndexNotFound => Err(err),
                            _ => Ok(()),
                        }
                    }
                })
                .buffer_unordered(32)
                .try_collect::<Vec<()>>()
                .await?;
        }
        let (mut listed, mut raw) = (Samples::default(), Samples::default());
        let deadline = Instant::now() + self.duration;
        while Instant::now() < deadline || listed.is_empty() {
            let start = Instant::now();
            self.count(&namespace).await?;
            listed.push(start.elapsed());
            let start = Instant::now();
            std::hint::black_box(raw_listing().await?);
            raw.push(start.elapsed());
        }
        let mut row = BenchRow::new(
            "list",
            &format!("list {size} identifiers, half dropped, vs raw listing"),
            &listed,
            Some(&raw),
        );
        row.details = json!({"page-size": 1000, "visible": size / 2});
        Ok(row)
    }

    /// Identifiers in `namespace`, by listing all pages.
    async fn count(&self, namespace: &Namespace) -> Result<usize> {
        let (mut total, mut token) = (0, None::<String>);
        loop {
            let page = self
                .catalog
                .list(namespace, token.as_deref(), Some(1000))
                .await?;
            total += page.identifiers.len();
            token = page.next_page_token;
            if token.is_none() {
                return Ok(total);
            }
        }
    }

    pub(super) fn parse(&self, snapshots: usize) -> Result<BenchRow> {
        let catalog = &self.catalog;
        let mut metadata = IndexMetadata::create(
            contents(1, "parse")?,
            BTreeMap::new(),
            catalog.clock().as_ref(),
            catalog.ids().as_ref(),
            catalog.registry(),
        )?;
        for version in 2..=snapshots as u64 {
            let tag = format!("parse-{version}");
            metadata = metadata.successor(
                contents(version, &tag)?,
                catalog.clock().as_ref(),
                catalog.ids().as_ref(),
                catalog.registry(),
            )?;
        }
        let bytes = metadata.to_json_vec();
        let (mut strict, mut raw) = (Samples::default(), Samples::default());
        let deadline = Instant::now() + self.duration;
        while Instant::now() < deadline {
            let start = Instant::now();
            std::hint::black_box(IndexMetadata::from_json_slice(&bytes, catalog.registry())?);
            strict.push(start.elapsed());
            let start = Instant::now();
            let value: serde_json::Value = serde_json::from_slice(&bytes).map_err(|err| {
                crate::error::Error::new(ErrorKind::InvalidIndexMetadata, err.to_string())
            })?;
            std::hint::black_box(value);
            raw.push(start.elapsed());
        }
        let mut row = BenchRow::new(
            "parse",
            &format!("parse+validate {snapshots} snapshots vs serde_json::Value"),
            &strict,
            Some(&raw),
        );
        row.details = json!({"bytes": bytes.len()});
        Ok(row)
    }
}

impl Bench {
    /// A GC dry run over the warehouse, after adding `objects` small unreachable objects
    /// under `indexes/` (once per size: later runs reuse them).
    pub(super) async fn gc(&self, objects: usize) -> Result<BenchRow> {
        let warehouse = self.catalog.warehouse();
        let base = format!("indexes/parqdb-bench-gc-{objects}");
        let done = format!("{base}/complete");
        if warehouse.head(&done).await?.is_none() {
            futures::stream::iter(0..objects)
                .map(|i| {
                    let name = format!("{base}/{:03}/{i:08}.bin", i % 1000);
                    async move {
                        warehouse
                            .put_if_absent(&name, Bytes::from_static(b"x"))
                            .await
                    }
                })
                .buffer_unordered(64)
                .try_collect::<Vec<_>>()
                .await?;
            warehouse
                .put_if_absent(&done, Bytes::from_static(b"done"))
                .await?;
        }
        let now = self.catalog.clock().now_ms();
        crate::gc::claim(&self.catalog, now).await?;
        let config = crate::gc::GcConfig {
            dry_run: true,
            ..crate::gc::GcConfig::default()
        };
        let collector = crate::gc::GarbageCollector::new(self.catalog.clone(), config)?;
        let rss_before = peak_rss_kib();
        let (mut runs, mut raw) = (Samples::default(), Samples::default());
        let mut minimum = Samples::default();
        let mut scanned = 0;
        let mut listed = 0;
        let deadline = Instant::now() + self.duration;
        while Instant::now() < deadline || runs.is_empty() {
            let start = Instant::now();
            let report = collector.collect(self.catalog.clock().now_ms()).await?;
            runs.push(start.elapsed());
            scanned = report.counts.scanned.objects;
            // The raw primitive: one listing of every object of the warehouse.
            let start = Instant::now();
            listed = warehouse
                .object_store()
                .list(Some(warehouse.prefix()))
                .try_fold(0u64, |n, _| async move { Ok(n + 1) })
                .await
                .map_err(|err| {
                    crate::error::Error::with_source(
                        ErrorKind::StoreUnavailable,
                        "listing the warehouse",
                        err,
                    )
                })?;
            let listing = start.elapsed();
            raw.push(listing);
            // The physical minimum of any collector: that listing, plus reading every
            // metadata file and every pointer record (what the roots name), 16 at a time.
            let start = Instant::now();
            self.read_everything_a_collector_must().await?;
            minimum.push(listing + start.elapsed());
        }
        let mut row = BenchRow::new(
            "gc",
            "gc dry run vs raw listing of the warehouse",
            &runs,
            Some(&raw),
        )
        .with_minimum(&minimum);
        let seconds = runs.summary().p50_ms / 1000.0;
        row.details = json!({
            "objects-scanned": scanned,
            "objects-listed-raw": listed,
            "note": "the run also walks every pointer record of the catalog (roots)",
            "objects-per-second": if seconds > 0.0 { scanned as f64 / seconds } else { 0.0 },
            "peak-rss-kib-before": rss_before,
            "peak-rss-kib-after": peak_rss_kib(),
        });
        Ok(row)
    }
}

impl Bench {
    /// Read every object under `metadata/` and every pointer record, 16 at a time (raw
    /// primitives: no parsing).
    async fn read_everything_a_collector_must(&self) -> Result<()> {
        let object_error = |err| {
            crate::error::Error::with_source(
                ErrorKind::StoreUnavailable,
                "reading the warehouse",
                err,
            )
        };
        let records = self.catalog.store();
        let warehouse = self.catalog.warehouse();
        let store = warehouse.object_store();
        let metadata = warehouse.path("metadata")?;
        store
            .list(Some(&metadata))
            .map_err(object_error)
            .map_ok(|object| async move {
                let object = store.get(&object.location).await.map_err(object_error)?;
                object.bytes().await.map_err(object_error)
            })
            .try_buffer_unordered(16)
            .try_for_each(|bytes| {
                std::hint::black_box(bytes);
                futures::future::ready(Ok(()))
            })
            .await?;
        // The pointer records, walked as the collector walks them (one listing of `i/`,
        // or the namespace tree where the store cannot list across partitions).
        crate::gc::reachability::for_each_record(records.as_ref(), 16, &mut |_, value| {
            std::hint::black_box(value);
            Ok(())
        })
        .await
    }
}

/// The process's peak resident set (`VmHWM`), in KiB, where `/proc` has it.
fn peak_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
}
