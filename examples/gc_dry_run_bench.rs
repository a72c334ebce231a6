//! Measure a GC dry run over a large local warehouse (reports, asserts nothing).
//!
//! Generates a throwaway warehouse in a temporary directory — `--indexes` registered
//! indexes with two index tables of `--files` small files each, a tenth of them dropped
//! and a few crashed-commit orphans — runs one dry run as if 30 days later (so every
//! unreachable object is past grace and looked up in the ledger), prints the timings and
//! the report's counts as JSON, and deletes the directory.
//!
//! ```text
//! cargo build --release --example gc_dry_run_bench
//! /usr/bin/time -v target/release/examples/gc_dry_run_bench --indexes 2000 --files 250
//! ```
//! (2000 × 2 × 250 = 1,000,000 table files plus metadata.) Peak RSS covers generation
//! too; run with `--skip-generate DIR` against a warehouse generated before (`--keep`)
//! to measure the dry run alone.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use parqdb_catalog::Warehouse;
use parqdb_catalog::family::FamilyRegistry;
use parqdb_catalog::gc::{self, GarbageCollector, GcConfig};
use parqdb_catalog::store::LocalStore;
use parqdb_catalog::{Catalog, IndexCatalog};
use parqdb_catalog::{IndexIdentifier, Namespace, RandomIds, SystemClock};
use parqdb_catalog::{
    IndexMetadata, IndexTableDefinition, ProviderDefinition, SnapshotContents, TableDefinition,
};

struct Args {
    indexes: usize,
    files: usize,
    keep: bool,
    existing: Option<PathBuf>,
}

fn args() -> Args {
    let mut args = Args {
        indexes: 2000,
        files: 250,
        keep: false,
        existing: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--indexes" => {
                args.indexes = it.next().and_then(|v| v.parse().ok()).expect("--indexes N")
            }
            "--files" => args.files = it.next().and_then(|v| v.parse().ok()).expect("--files N"),
            "--keep" => args.keep = true,
            "--skip-generate" => args.existing = it.next().map(PathBuf::from),
            other => panic!("unknown argument {other}"),
        }
    }
    args
}

fn contents(tag: &str) -> SnapshotContents {
    let table = |role: &str| {
        IndexTableDefinition::new(
            1,
            BTreeMap::from([("location".to_owned(), format!("indexes/{tag}/{role}/"))]),
        )
        .expect("table")
    };
    SnapshotContents {
        source_table: TableDefinition::new(
            "parquet",
            BTreeMap::from([
                ("definition-version".to_owned(), "1".to_owned()),
                ("location".to_owned(), "s3://example/documents/".to_owned()),
            ]),
        )
        .expect("source"),
        vector_field: "embedding".into(),
        source_key_fields: vec!["id".into()],
        indexed_rows: 1000,
        index_family: "ivf".into(),
        index_schema_version: 1,
        metric: "l2_squared".into(),
        parameters: BTreeMap::new(),
        index_provider: ProviderDefinition::new("parquet", BTreeMap::new()).expect("provider"),
        index_tables: BTreeMap::from([
            ("ivf_centroids".to_owned(), table("ivf_centroids")),
            ("ivf_postings".to_owned(), table("ivf_postings")),
        ]),
        summary: BTreeMap::new(),
    }
}

fn write_files(root: &Path, tag: &str, files: usize) {
    for role in ["ivf_centroids", "ivf_postings"] {
        let dir = root.join("indexes").join(tag).join(role);
        std::fs::create_dir_all(&dir).expect("dir");
        for n in 0..files {
            let mut file =
                std::fs::File::create(dir.join(format!("part-{n:05}.parquet"))).expect("file");
            file.write_all(b"0123456789abcdef").expect("write");
        }
    }
}

fn catalog(root: &Path) -> Catalog {
    let warehouse = Warehouse::local(root).expect("warehouse");
    Catalog::builder(Arc::new(LocalStore::new(root.join("_catalog"))), warehouse)
        .probe_on_first_write(false)
        .build()
}

async fn generate(root: &Path, indexes: usize, files: usize) {
    let catalog = catalog(root);
    gc::claim(&catalog, catalog.clock().now_ms())
        .await
        .expect("claim");
    let namespace = Namespace::new(["bench"]).expect("namespace");
    catalog
        .create_namespace(&namespace, BTreeMap::new())
        .await
        .expect("namespace");
    let registry = FamilyRegistry::builtin();
    for n in 0..indexes {
        let tag = format!("i{n:05}");
        write_files(root, &tag, files);
        let metadata = IndexMetadata::create(
            contents(&tag),
            BTreeMap::new(),
            &SystemClock,
            &RandomIds,
            &registry,
        )
        .expect("metadata");
        let location = catalog
            .warehouse()
            .write_new(
                &format!("metadata/{}/00001.metadata.json", metadata.index_uuid()),
                Bytes::from(metadata.to_json_vec()),
            )
            .await
            .expect("metadata written");
        if n % 50 == 49 {
            continue; // a crashed commit: files and metadata, never registered
        }
        let id = IndexIdentifier::new(namespace.clone(), tag).expect("id");
        catalog
            .register(
                &id,
                Some(&metadata.current_snapshot().contents().source_table),
                &location,
            )
            .await
            .expect("registered");
        if n % 10 == 9 {
            catalog.drop_index(&id).await.expect("dropped");
        }
    }
}

fn rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

#[tokio::main]
async fn main() {
    let args = args();
    let temp = tempfile::tempdir().expect("temp dir");
    let root = match &args.existing {
        Some(dir) => dir.clone(),
        None => temp.path().join("warehouse"),
    };
    let mut timings = serde_json::Map::new();
    if args.existing.is_none() {
        let started = Instant::now();
        generate(&root, args.indexes, args.files).await;
        timings.insert("generate-s".into(), started.elapsed().as_secs_f64().into());
        timings.insert("peak-rss-after-generate-kib".into(), rss_kib().into());
    }
    let catalog = catalog(&root);
    let collector = GarbageCollector::new(
        catalog.clone(),
        GcConfig {
            dry_run: true,
            max_reported_actions: 10,
            ..GcConfig::default()
        },
    )
    .expect("gc");
    let started = Instant::now();
    let now = catalog.clock().now_ms() + 30 * 24 * 3_600_000;
    let report = collector.collect(now).await.expect("dry run");
    timings.insert("dry-run-s".into(), started.elapsed().as_secs_f64().into());
    timings.insert("peak-rss-kib".into(), rss_kib().into());
    let mut out = serde_json::json!({
        "scanned": report.counts.scanned,
        "reachable": report.counts.reachable,
        "would-track": report.counts.tracked,
        "would-delete": report.counts.deleted,
        "kept-by-retention": report.counts.kept_by_retention,
        "roots": report.roots,
    });
    out["timings"] = serde_json::Value::Object(timings);
    println!("{out}");
    if args.keep && args.existing.is_none() {
        let kept = temp.keep();
        eprintln!("kept the warehouse at {}", kept.join("warehouse").display());
    }
}
