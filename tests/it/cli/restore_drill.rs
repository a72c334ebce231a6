//! The restore drill (README, "Restoring a backup"; infra/README.md, "Restoring a backup"),
//! through the real binary on a local warehouse with its pointer store in a directory of
//! its own, every command under libfaketime at a fake time that only moves forward:
//!
//! 1. register `docs.a` and commit a successor; register `docs.b` and drop it (its files
//!    are garbage at the backup); one gc run starts b's retention clock;
//! 2. back up both directories with `cp -a` (times preserved);
//! 3. register `docs.c`, drop `docs.a`, and let gc run past the retention: a's and b's
//!    files are collected;
//! 4. restore the pointer store's directory, and the warehouse's — replaced by the copy,
//!    or the copy laid over it as an S3 restore does (what was written after the backup
//!    stays: `docs.c`'s files, now named by no pointer) —, then `init --adopt`;
//! 5. gc runs before and after one retention from the adoption.
//!
//! Nothing the restored pointers reach is ever deleted, the restored catalog loads, and
//! no file of the restored warehouse is deleted before one full retention after the
//! adoption; after it, only what the restored pointers reach is left.
//!
//! Needs libfaketime (Debian: `apt-get install faketime`), preloaded by
//! `support::faketime`; without it the tests fail.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use parqdb_catalog::ErrorKind;
use serde_json::{Value, json};

use crate::support::faketime;

const BIN: &str = env!("CARGO_BIN_EXE_parqdb-catalog");
const HOUR: u64 = 3600;
const DAY: u64 = 24 * HOUR;
/// The gc retention of every run (`--retention`), in seconds.
const RETENTION: u64 = DAY;

/// How a restore puts the warehouse back.
#[derive(Debug, Clone, Copy)]
enum Restore {
    /// The warehouse directory is replaced by the backup's.
    Replace,
    /// The backup's files are copied over the warehouse; later files stay (an AWS Backup
    /// or S3 Batch Operations restore into the bucket).
    Overlay,
}

struct Drill {
    _dir: tempfile::TempDir,
    root: PathBuf,
}

impl Drill {
    fn new() -> Drill {
        faketime::check();
        let dir = tempfile::tempdir().expect("temp dir");
        let root = dir.path().canonicalize().expect("canonical");
        Drill { _dir: dir, root }
    }

    fn warehouse(&self) -> PathBuf {
        self.root.join("wh")
    }

    fn pointers(&self) -> PathBuf {
        self.root.join("ptr")
    }

    /// `parqdb-catalog ARGS` at `offset` seconds in the future: its exit code and the JSON
    /// it printed (stdout on success, stderr on failure).
    fn cli(&self, offset: u64, args: &[&str]) -> (i32, Value) {
        let output = faketime::at(&mut Command::new(BIN), &format!("+{offset}s"))
            .args(["--warehouse", &uri(&self.warehouse())])
            .args(["--catalog", &uri(&self.pointers())])
            .args(args)
            .env_remove("PARQDB_WAREHOUSE")
            .env_remove("PARQDB_CATALOG")
            .output()
            .expect("the binary runs");
        let code = output.status.code().unwrap_or(-1);
        let stream = if code == 0 {
            &output.stdout
        } else {
            &output.stderr
        };
        let json = serde_json::from_slice(stream).unwrap_or_else(|err| {
            panic!("{args:?}: not JSON ({err}): {output:?}");
        });
        (code, json)
    }

    /// Run `args`, which must succeed.
    fn ok(&self, offset: u64, args: &[&str]) -> Value {
        let (code, json) = self.cli(offset, args);
        assert_eq!(code, 0, "{args:?} at +{offset}s: {json}");
        json
    }

    /// One whole gc run at `offset`.
    fn gc(&self, offset: u64) -> Value {
        let run = self.ok(offset, &["gc", "--retention", &format!("{RETENTION}s")]);
        assert_eq!(run["status"], "completed", "gc at +{offset}s: {run}");
        run
    }

    /// Write placeholder tables under `indexes/<dir>/` and a metadata file for `uuid`
    /// whose snapshots are `tables` (sequence numbers from 1; the last one current);
    /// return its location.
    fn metadata(&self, uuid: &str, tables: &[&str]) -> String {
        let warehouse = self.warehouse();
        let mut snapshots = Vec::new();
        let mut log = Vec::new();
        for (n, dir) in (1u64..).zip(tables) {
            let mut index_tables = serde_json::Map::new();
            for role in ["ivf_centroids", "ivf_postings"] {
                let location = format!("indexes/{dir}/{role}/");
                let part = warehouse.join(&location).join("part-0.parquet");
                std::fs::create_dir_all(part.parent().expect("parent")).expect("table dir");
                std::fs::write(&part, b"placeholder index table").expect("table file");
                index_tables.insert(
                    role.to_owned(),
                    json!({"definition-version": 1, "properties": {"location": location}}),
                );
            }
            let timestamp = 1_700_000_000_000 + n;
            snapshots.push(json!({
                "snapshot-id": 100 + n, "sequence-number": n, "timestamp-ms": timestamp,
                "summary": {},
                "source-table": {"provider": "parquet", "properties": {"location": "s3://data/docs/"}},
                "vector-field": "embedding", "source-key-fields": ["id"], "indexed-rows": 20,
                "index-family": "ivf", "index-schema-version": 1, "metric": "cosine",
                "parameters": {}, "index-provider": {"provider": "parquet", "properties": {}},
                "index-tables": index_tables,
            }));
            log.push(json!({"timestamp-ms": timestamp, "snapshot-id": 100 + n}));
        }
        let last = tables.len() as u64;
        let metadata = json!({
            "format-version": 1, "index-uuid": uuid,
            "last-updated-ms": 1_700_000_000_000 + last, "last-sequence-number": last,
            "current-snapshot-id": 100 + last, "snapshots": snapshots, "snapshot-log": log,
            "properties": {},
        });
        let path = warehouse.join(format!("metadata/{uuid}/{last:05}-v.metadata.json"));
        std::fs::create_dir_all(path.parent().expect("parent")).expect("metadata dir");
        std::fs::write(&path, serde_json::to_vec(&metadata).expect("JSON")).expect("metadata");
        uri(&path)
    }

    /// The files under the warehouse's managed prefixes (`metadata/`, `indexes/`), relative.
    fn managed_files(&self) -> BTreeSet<String> {
        let warehouse = self.warehouse();
        let mut found = BTreeSet::new();
        for prefix in ["metadata", "indexes"] {
            walk(&warehouse.join(prefix), &mut |path| {
                let relative = path.strip_prefix(&warehouse).expect("inside");
                found.insert(relative.to_string_lossy().into_owned());
            });
        }
        found
    }
}

fn uri(path: &Path) -> String {
    format!("file://{}", path.display())
}

fn walk(dir: &Path, visit: &mut impl FnMut(&Path)) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            walk(&path, visit);
        } else {
            visit(&path);
        }
    }
}

/// `cp -a FROM TO` (times, modes and links preserved).
fn cp_a(from: &Path, to: &Path) {
    let status = Command::new("cp")
        .arg("-a")
        .arg(from)
        .arg(to)
        .status()
        .expect("cp runs");
    assert!(
        status.success(),
        "cp -a {} {}",
        from.display(),
        to.display()
    );
}

/// `docs.NAME` as arguments.
fn id(name: &str) -> [&str; 4] {
    ["--namespace", "docs", "--name", name]
}

/// `COMMAND ARGS...`.
fn command<'a>(name: &'a str, args: &[&[&'a str]]) -> Vec<&'a str> {
    std::iter::once(name)
        .chain(args.iter().flat_map(|part| part.iter().copied()))
        .collect()
}

fn drill(restore: Restore) {
    let drill = Drill::new();
    let a_uuid = "11111111-1111-4111-8111-111111111111";
    // 1. The state to back up.
    drill.ok(0, &["init"]);
    drill.ok(0, &["namespace", "create", "--namespace", "docs"]);
    let a1 = drill.metadata(a_uuid, &["a/1"]);
    drill.ok(0, &command("register", &[&id("a"), &["--metadata", &a1]]));
    let a2 = drill.metadata(a_uuid, &["a/1", "a/2"]);
    drill.ok(
        0,
        &command("commit", &[&id("a"), &["--base", &a1, "--new", &a2]]),
    );
    let b1 = drill.metadata("22222222-2222-4222-8222-222222222222", &["b/1"]);
    drill.ok(0, &command("register", &[&id("b"), &["--metadata", &b1]]));
    drill.ok(0, &command("drop", &[&id("b")]));
    drill.gc(2 * HOUR);
    let reachable: BTreeSet<String> = [
        "metadata/11111111-1111-4111-8111-111111111111/00002-v.metadata.json",
        "indexes/a/1/ivf_centroids/part-0.parquet",
        "indexes/a/1/ivf_postings/part-0.parquet",
        "indexes/a/2/ivf_centroids/part-0.parquet",
        "indexes/a/2/ivf_postings/part-0.parquet",
    ]
    .map(str::to_owned)
    .into();
    let backed_up = drill.managed_files();
    assert!(reachable.is_subset(&backed_up), "{backed_up:?}");

    // 2. The backup.
    let backup = drill.root.join("backup");
    std::fs::create_dir(&backup).expect("backup dir");
    cp_a(&drill.warehouse(), &backup);
    cp_a(&drill.pointers(), &backup);

    // 3. Changes after the backup, collected past the retention.
    let c1 = drill.metadata("33333333-3333-4333-8333-333333333333", &["c/1"]);
    drill.ok(
        3 * HOUR,
        &command("register", &[&id("c"), &["--metadata", &c1]]),
    );
    drill.ok(3 * HOUR, &command("drop", &[&id("a")]));
    for offset in [4 * HOUR, DAY + 5 * HOUR, DAY + 7 * HOUR, DAY + 9 * HOUR] {
        drill.gc(offset);
    }
    let before_restore = drill.managed_files();
    assert!(
        before_restore.is_disjoint(&backed_up),
        "gc collected a's and b's files: {before_restore:?}"
    );
    let c_files = before_restore;
    assert!(!c_files.is_empty(), "c is live");

    // 4. The restore and the adoption.
    std::fs::remove_dir_all(drill.pointers()).expect("remove the pointer store");
    cp_a(&backup.join("ptr"), &drill.pointers());
    match restore {
        Restore::Replace => {
            std::fs::remove_dir_all(drill.warehouse()).expect("remove the warehouse");
            cp_a(&backup.join("wh"), &drill.warehouse());
        }
        Restore::Overlay => cp_a(&backup.join("wh/."), &drill.warehouse()),
    }
    let restored = drill.managed_files();
    let expected = match restore {
        Restore::Replace => backed_up.clone(),
        Restore::Overlay => backed_up.union(&c_files).cloned().collect(),
    };
    assert_eq!(restored, expected);
    let adopted = DAY + 10 * HOUR;
    drill.ok(adopted, &["init", "--adopt"]);

    // 5. Collection after the adoption.
    let loads = |offset: u64| {
        let loaded = drill.ok(offset, &command("load", &[&id("a")]));
        assert_eq!(loaded["metadata-location"], a2.as_str(), "{loaded}");
        assert_eq!(loaded["version"], "2", "{loaded}");
        for gone in ["b", "c"] {
            let (code, err) = drill.cli(offset, &command("load", &[&id(gone)]));
            assert_eq!(
                code,
                ErrorKind::IndexNotFound.exit_code(),
                "{gone} is not in the restored catalog: {err}"
            );
        }
        let listed = drill.ok(offset, &["list", "--namespace", "docs"]);
        assert_eq!(
            listed["identifiers"],
            json!([{"namespace": ["docs"], "name": "a"}])
        );
    };
    loads(adopted);
    for offset in [
        adopted + 600,
        adopted + RETENTION / 2,
        adopted + RETENTION - HOUR,
    ] {
        drill.gc(offset);
        assert_eq!(
            drill.managed_files(),
            restored,
            "gc at {}s after the adoption deleted a file of the restored warehouse within one retention",
            offset - adopted
        );
        loads(offset);
    }
    for hours in [1, 3, 5] {
        let offset = adopted + RETENTION + hours * HOUR;
        drill.gc(offset);
        let left = drill.managed_files();
        assert!(
            reachable.is_subset(&left),
            "gc at retention + {hours}h deleted what the restored pointers reach: {left:?}"
        );
        loads(offset);
    }
    assert_eq!(
        drill.managed_files(),
        reachable,
        "one retention after the adoption, the restored state's garbage is collected"
    );
}

#[test]
fn a_restore_replacing_both_directories_keeps_everything_a_full_retention_after_the_adoption() {
    drill(Restore::Replace);
}

#[test]
fn a_restore_laid_over_the_warehouse_keeps_later_files_a_full_retention_after_the_adoption() {
    drill(Restore::Overlay);
}
