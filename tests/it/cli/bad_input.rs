//! Bad input at the edges, through the real binary: every failure is the typed error JSON
//! on stderr with the exit code of its kind (never a panic, exit code 101), usage errors
//! are clap's exit code 2, and nothing is written: the warehouse's `_catalog` holds no
//! index record afterwards. Metadata locations outside the warehouse and path traversal
//! in index-table locations are `INVALID_INDEX_METADATA`.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use crate::support::fixture::TestEnv;
use parqdb_catalog::Catalog;
use parqdb_catalog::ErrorKind;
use parqdb_catalog::MAX_METADATA_BYTES;
use parqdb_catalog::Warehouse;
use parqdb_catalog::store::LocalStore;

const BIN: &str = env!("CARGO_BIN_EXE_parqdb-catalog");

struct Cli {
    dir: PathBuf,
    warehouse: PathBuf,
}

struct Output {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Cli {
    fn new() -> Cli {
        let dir = tempfile::tempdir().expect("temp dir").keep();
        let warehouse = dir.join("wh");
        std::fs::create_dir_all(&warehouse).expect("warehouse dir");
        let warehouse = warehouse.canonicalize().expect("canonical");
        Cli { dir, warehouse }
    }

    fn uri(&self) -> String {
        format!("file://{}", self.warehouse.display())
    }

    fn run<I, S>(&self, args: I) -> Output
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        let output = Command::new(BIN)
            .args(args.into_iter().map(Into::into))
            .env("PARQDB_WAREHOUSE", self.uri())
            .env_remove("PARQDB_CATALOG")
            .env("RUST_BACKTRACE", "0")
            .current_dir(&self.dir)
            .output()
            .expect("the binary runs");
        Output {
            code: output.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        }
    }

    /// The command fails with `code`: typed JSON on stderr, the kind's exit code.
    fn fails<I, S>(&self, args: I, code: &str) -> String
    where
        I: IntoIterator<Item = S> + Clone,
        S: Into<OsString> + std::fmt::Debug,
    {
        let shown: Vec<OsString> = args.clone().into_iter().map(Into::into).collect();
        let out = self.run(args);
        assert_ne!(out.code, 101, "{shown:?} panicked: {}", out.stderr);
        let json: serde_json::Value = serde_json::from_str(out.stderr.trim())
            .unwrap_or_else(|_| panic!("{shown:?}: stderr is not one JSON object: {}", out.stderr));
        let error = json["error"].as_str().unwrap_or_default();
        assert_eq!(error, code, "{shown:?}: {}", out.stderr);
        assert!(
            json["message"].as_str().is_some_and(|m| !m.is_empty()),
            "{shown:?}: no message"
        );
        let kind = ErrorKind::from_code(error).expect("a known code");
        assert_eq!(out.code, kind.exit_code(), "{shown:?}: exit code of {code}");
        assert!(
            out.stdout.is_empty(),
            "{shown:?}: printed on stdout: {}",
            out.stdout
        );
        json["message"].as_str().unwrap_or_default().to_owned()
    }

    /// The command is a usage error (clap): exit code 2, no panic.
    fn usage_error<I, S>(&self, args: I)
    where
        I: IntoIterator<Item = S> + Clone,
        S: Into<OsString> + std::fmt::Debug,
    {
        let shown: Vec<OsString> = args.clone().into_iter().map(Into::into).collect();
        let out = self.run(args);
        assert_eq!(out.code, 2, "{shown:?}: {}", out.stderr);
    }

    fn succeeds<I, S>(&self, args: I) -> serde_json::Value
    where
        I: IntoIterator<Item = S> + Clone,
        S: Into<OsString> + std::fmt::Debug,
    {
        let shown: Vec<OsString> = args.clone().into_iter().map(Into::into).collect();
        let out = self.run(args);
        assert_eq!(out.code, 0, "{shown:?}: {}", out.stderr);
        serde_json::from_str(out.stdout.trim()).expect("one JSON object on stdout")
    }

    /// A test environment over the same warehouse and `_catalog` store the CLI uses.
    fn env(&self) -> TestEnv {
        let warehouse = Warehouse::local(&self.warehouse).expect("warehouse");
        let store = LocalStore::new(self.warehouse.join("_catalog"));
        TestEnv {
            catalog: Arc::new(Catalog::builder(Arc::new(store), warehouse.clone()).build()),
            warehouse,
            with_registry: None,
        }
    }

    fn file(&self, name: &str, bytes: &[u8]) -> PathBuf {
        let path = self.dir.join(name);
        std::fs::write(&path, bytes).expect("written");
        path
    }

    /// A sparse file one byte over the metadata size limit.
    fn huge(&self, path: &Path) {
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).expect("dir");
        }
        let file = std::fs::File::create(path).expect("created");
        file.set_len(MAX_METADATA_BYTES as u64 + 1).expect("sized");
    }

    /// Files under `_catalog/i` (index pointer records).
    fn index_records(&self) -> Vec<PathBuf> {
        fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
            let Ok(entries) = std::fs::read_dir(dir) else {
                return;
            };
            for entry in entries.flatten() {
                let path = entry.path();
                if path.is_dir() {
                    walk(&path, out);
                } else if !path
                    .file_name()
                    .is_some_and(|name| name.to_string_lossy().contains('.'))
                {
                    out.push(path);
                }
            }
        }
        let mut out = Vec::new();
        walk(&self.warehouse.join("_catalog").join("i"), &mut out);
        out
    }
}

fn s(text: &str) -> String {
    text.to_owned()
}

fn id_args(namespace: &[&str], name: &str) -> Vec<String> {
    let mut args = Vec::new();
    for segment in namespace {
        args.push(s("--namespace"));
        args.push((*segment).to_owned());
    }
    args.push(s("--name"));
    args.push(name.to_owned());
    args
}

fn with(command: &[&str], rest: &[String]) -> Vec<String> {
    command
        .iter()
        .map(|c| (*c).to_owned())
        .chain(rest.iter().cloned())
        .collect()
}

#[test]
fn validate_rejects_bad_files_with_typed_errors() {
    let cli = Cli::new();
    let missing = cli.dir.join("missing.json");
    cli.fails(
        [s("validate"), missing.display().to_string()],
        "INVALID_REQUEST",
    );
    cli.fails(
        [s("validate"), cli.dir.display().to_string()],
        "INVALID_REQUEST",
    );
    let garbage: Vec<u8> = (0..4096u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    let garbage = cli.file("garbage.bin", &garbage);
    cli.fails(
        [s("validate"), garbage.display().to_string()],
        "INVALID_INDEX_METADATA",
    );
    let empty = cli.file("empty.json", b"");
    cli.fails(
        [s("validate"), empty.display().to_string()],
        "INVALID_INDEX_METADATA",
    );
    let huge = cli.dir.join("huge.json");
    cli.huge(&huge);
    let message = cli.fails(
        [s("validate"), huge.display().to_string()],
        "INVALID_INDEX_METADATA",
    );
    assert!(message.contains("limit"), "{message}");
    let not_utf8 = cli.file("latin1.json", b"{\"format-version\": 1, \"x\": \"\xe9\"}");
    cli.fails(
        [s("validate"), not_utf8.display().to_string()],
        "INVALID_INDEX_METADATA",
    );
    cli.usage_error([s("validate")]);
}

#[tokio::test]
async fn register_and_commit_reject_bad_input_and_write_nothing() {
    let cli = Cli::new();
    let env = cli.env();
    cli.succeeds(["namespace", "create", "--namespace", "docs"]);
    let (metadata, valid) = env.new_index().await;
    let id = id_args(&["docs"], "x");
    let register = |metadata: &str| with(&["register", "--metadata", metadata], &id);

    // Metadata locations that are missing, not files, not metadata, or too large.
    let root = cli.uri();
    cli.fails(
        register(&format!("{root}/metadata/missing.json")),
        "INVALID_INDEX_METADATA",
    );
    cli.fails(
        register(&format!("{root}/metadata")),
        "INVALID_INDEX_METADATA",
    );
    let garbage = env.write_raw(&[0xde, 0xad, 0xbe, 0xef, 0x00, 0xff]).await;
    cli.fails(register(&garbage), "INVALID_INDEX_METADATA");
    let huge_path = cli.warehouse.join("metadata").join("huge.metadata.json");
    cli.huge(&huge_path);
    cli.fails(
        register(&format!("{root}/metadata/huge.metadata.json")),
        "INVALID_INDEX_METADATA",
    );

    // Locations outside the warehouse, and traversal out of it.
    let outside = cli.file(
        "outside.metadata.json",
        &std::fs::read(valid.trim_start_matches("file://")).expect("valid file"),
    );
    for location in [
        format!("file://{}", outside.display()),
        s("file:///etc/passwd"),
        format!("{root}/../outside.metadata.json"),
        format!("{root}/metadata/%2e%2e/%2e%2e/outside.metadata.json"),
        format!("{root}/metadata//x.json"),
        format!("{root}2/metadata/x.json"),
        s("s3://bucket/wh/metadata/x.json"),
        s("metadata/x.json"),
        s("/etc/passwd"),
        format!("{valid}?version=2"),
        format!("{valid}#fragment"),
        s(""),
    ] {
        cli.fails(register(&location), "INVALID_INDEX_METADATA");
    }

    // Bad source bindings: inline JSON that is malformed or wrong, files that are not.
    let bad_sources: Vec<(String, &str)> = vec![
        (s("{not json"), "INVALID_INDEX_METADATA"),
        (s("{}"), "INVALID_INDEX_METADATA"),
        (
            s(r#"{"provider": "parquet", "properties": {}, "extra": 1}"#),
            "INVALID_INDEX_METADATA",
        ),
        (
            s(r#"{"provider": "parquet", "properties": {"location": "s3://elsewhere/"}}"#),
            "INVALID_INDEX_METADATA",
        ),
        (
            cli.dir.join("no-such-source.json").display().to_string(),
            "INVALID_REQUEST",
        ),
        (cli.dir.display().to_string(), "INVALID_REQUEST"),
        (
            cli.file("source.bin", &[0u8, 159, 146, 150, 0xff])
                .display()
                .to_string(),
            "INVALID_INDEX_METADATA",
        ),
    ];
    for (source, code) in &bad_sources {
        let mut args = register(&valid);
        args.extend([s("--source"), source.clone()]);
        cli.fails(args, code);
    }
    let huge_source = cli.dir.join("huge-source.json");
    cli.huge(&huge_source);
    let mut args = register(&valid);
    args.extend([s("--source"), huge_source.display().to_string()]);
    cli.fails(args, "INVALID_INDEX_METADATA");

    // Identifiers at and beyond the limits (80 bytes a segment, 16 segments, 255 in all).
    let at_limit = "y".repeat(80);
    let too_long = "y".repeat(81);
    let accented_at_limit = "é".repeat(40);
    let accented_too_long = "é".repeat(41);
    let deep: Vec<&str> = vec!["d"; 16];
    let deeper: Vec<&str> = vec!["d"; 17];
    let wide = ["a".repeat(80), "b".repeat(80), "c".repeat(80)];
    let wide: Vec<&str> = wide.iter().map(String::as_str).collect();
    for (namespace, name, code) in [
        (vec!["docs"], at_limit.as_str(), "INDEX_NOT_FOUND"),
        (vec!["docs"], too_long.as_str(), "INVALID_IDENTIFIER"),
        (vec!["docs"], accented_at_limit.as_str(), "INDEX_NOT_FOUND"),
        (
            vec!["docs"],
            accented_too_long.as_str(),
            "INVALID_IDENTIFIER",
        ),
        (vec!["docs"], "", "INVALID_IDENTIFIER"),
        (vec![""], "x", "INVALID_IDENTIFIER"),
        (deep.clone(), "x", "INDEX_NOT_FOUND"),
        (deeper.clone(), "x", "INVALID_IDENTIFIER"),
        (wide.clone(), &"n".repeat(15), "INDEX_NOT_FOUND"),
        (wide.clone(), &"n".repeat(16), "INVALID_IDENTIFIER"),
    ] {
        cli.fails(with(&["load"], &id_args(&namespace, name)), code);
        let expected = if code == "INDEX_NOT_FOUND" {
            "NAMESPACE_NOT_FOUND"
        } else {
            code
        };
        if namespace != ["docs"] || code != "INDEX_NOT_FOUND" {
            cli.fails(
                with(
                    &["register", "--metadata", &valid],
                    &id_args(&namespace, name),
                ),
                expected,
            );
        }
        cli.fails(
            with(
                &["rename", "--to-namespace", "docs", "--to-name", "z"],
                &id_args(&namespace, name),
            ),
            if code == "INDEX_NOT_FOUND" {
                "INDEX_NOT_FOUND"
            } else {
                code
            },
        );
    }
    #[cfg(unix)]
    {
        use std::os::unix::ffi::OsStringExt;
        let not_utf8 = OsString::from_vec(vec![b'x', 0xff, 0xfe]);
        cli.usage_error([
            OsString::from("load"),
            "--namespace".into(),
            "docs".into(),
            "--name".into(),
            not_utf8,
        ]);
    }
    cli.usage_error(["load", "--name", "x"]);
    cli.usage_error(["register", "--namespace", "docs", "--name", "x"]);

    // Pages: sizes and tokens.
    cli.succeeds(["list", "--namespace", "docs", "--page-size", "1000"]);
    cli.succeeds(["list", "--namespace", "docs", "--page-size", "1"]);
    for size in ["0", "1001", "18446744073709551615"] {
        cli.fails(
            ["list", "--namespace", "docs", "--page-size", size],
            "INVALID_REQUEST",
        );
    }
    // The catalog's state before the request's content (issue 27, item 4).
    for size in ["0", "1001"] {
        cli.fails(
            ["list", "--namespace", "nope", "--page-size", size],
            "NAMESPACE_NOT_FOUND",
        );
    }
    for size in ["-1", "ten", "1e3", "99999999999999999999999999"] {
        cli.usage_error(["list", "--namespace", "docs", "--page-size", size]);
    }
    let long_token = "i/docs/=".to_owned() + &"a".repeat(5000);
    for token in [
        "",
        "../../etc",
        "i/other/=x",
        "n/=docs",
        "i/docs/=X",
        "i/docs/=a b",
        long_token.as_str(),
    ] {
        cli.fails(
            ["list", "--namespace", "docs", "--page-token", token],
            "INVALID_REQUEST",
        );
    }
    cli.fails(["list", "--namespace", "missing"], "NAMESPACE_NOT_FOUND");

    assert!(
        cli.index_records().is_empty(),
        "index records written: {:?}",
        cli.index_records()
    );

    // Commit: register a real index, then bad successors leave it unchanged.
    cli.succeeds(register(&valid));
    let (_, successor) = env.successor(&metadata, 2).await;
    let commit = |base: &str, new: &str| with(&["commit", "--base", base, "--new", new], &id);
    cli.fails(
        commit(&valid, &format!("{root}/metadata/missing.json")),
        "INVALID_INDEX_METADATA",
    );
    cli.fails(commit(&valid, &garbage), "INVALID_INDEX_METADATA");
    cli.fails(
        commit(&valid, &format!("file://{}", outside.display())),
        "INVALID_INDEX_METADATA",
    );
    cli.fails(
        commit(&valid, &format!("{root}/../x.json")),
        "INVALID_INDEX_METADATA",
    );
    cli.fails(commit(&successor, &successor), "COMMIT_CONFLICT");
    let loaded = cli.succeeds(with(&["load"], &id));
    assert_eq!(loaded["metadata-location"], valid.as_str());
}

/// Index-table locations that leave the warehouse are invalid metadata, whatever the
/// spelling; registering or committing such metadata writes nothing.
#[tokio::test]
async fn index_table_locations_cannot_escape_the_warehouse() {
    let cli = Cli::new();
    let env = cli.env();
    cli.succeeds(["namespace", "create", "--namespace", "docs"]);
    let (metadata, valid) = env.new_index().await;
    let document: serde_json::Value = serde_json::from_slice(
        &std::fs::read(valid.trim_start_matches("file://")).expect("valid file"),
    )
    .expect("json");
    let mut escaping = Vec::new();
    for location in [
        "../../../etc/",
        "indexes/../../outside/",
        "indexes/a/../../../outside/",
        "/etc/",
        "file:///etc/",
        "s3://other-bucket/indexes/",
        "indexes/%2e%2e/%2e%2e/outside/",
        "indexes/..%2f..%2foutside/",
        "indexes\\..\\..\\outside\\",
        "indexes/./x/",
        "",
    ] {
        let mut bad = document.clone();
        bad["snapshots"][0]["index-tables"]["ivf_centroids"]["properties"]["location"] =
            location.into();
        let bytes = serde_json::to_vec(&bad).expect("json");
        let file = cli.file("escaping.metadata.json", &bytes);
        cli.fails(
            [s("validate"), file.display().to_string()],
            "INVALID_INDEX_METADATA",
        );
        let written = env.write_raw(&bytes).await;
        cli.fails(
            with(
                &["register", "--metadata", &written],
                &id_args(&["docs"], "x"),
            ),
            "INVALID_INDEX_METADATA",
        );
        escaping.push(written);
    }
    assert!(
        cli.index_records().is_empty(),
        "index records written: {:?}",
        cli.index_records()
    );
    // Committing such a file onto a registered index is refused too.
    cli.succeeds(with(
        &["register", "--metadata", &valid],
        &id_args(&["docs"], "x"),
    ));
    let _ = metadata;
    for written in &escaping {
        cli.fails(
            with(
                &["commit", "--base", &valid, "--new", written],
                &id_args(&["docs"], "x"),
            ),
            "INVALID_INDEX_METADATA",
        );
    }
    let loaded = cli.succeeds(with(&["load"], &id_args(&["docs"], "x")));
    assert_eq!(loaded["metadata-location"], valid.as_str());
}

/// Issue 17, item 3, through the binary: the CLI has the library's order of checks, with
/// `--source` and without it (the catalog defaults the source), so a writer that lost a
/// race learns it lost the race; and a replay must be the same request (item 2).
#[tokio::test]
async fn cli_order_of_checks_is_the_catalogs() {
    let cli = Cli::new();
    let env = cli.env();
    cli.succeeds(["namespace", "create", "--namespace", "docs"]);
    let (base, base_location) = env.new_index().await;
    let (_, next_location) = env.successor(&base, 2).await;
    let bad = env.write_raw(br#"{"format-version": 1}"#).await;
    let source_one = serde_json::to_value(crate::support::fixture::source(1))
        .expect("json")
        .to_string();
    let source_two = serde_json::to_value(crate::support::fixture::source(2))
        .expect("json")
        .to_string();
    for (round, register_source, commit_source) in [
        (0, Some(source_one.as_str()), Some(source_two.as_str())),
        (1, None, None),
    ] {
        let name = format!("x{round}");
        let register = |namespace: &str, metadata: &str| {
            let mut args = with(
                &["register", "--metadata", metadata],
                &id_args(&[namespace], &name),
            );
            if let Some(source) = register_source {
                args.extend([s("--source"), s(source)]);
            }
            args
        };
        let commit = |name: &str, base: &str, new: &str| {
            let mut args = with(
                &["commit", "--base", base, "--new", new],
                &id_args(&["docs"], name),
            );
            if let Some(source) = commit_source {
                args.extend([s("--source"), s(source)]);
            }
            args
        };
        cli.fails(register("missing", &bad), "NAMESPACE_NOT_FOUND");
        cli.fails(register("docs", &bad), "INVALID_INDEX_METADATA");
        let registered = cli.succeeds(register("docs", &base_location));
        assert_eq!(
            registered["source"],
            serde_json::to_value(crate::support::fixture::source(1)).expect("json")
        );
        cli.fails(register("docs", &bad), "ALREADY_EXISTS");
        cli.fails(commit("absent", &base_location, &bad), "INDEX_NOT_FOUND");
        cli.fails(commit(&name, &next_location, &bad), "COMMIT_CONFLICT");
        cli.fails(
            commit(&name, &base_location, &bad),
            "INVALID_INDEX_METADATA",
        );
        let committed = cli.succeeds(commit(&name, &base_location, &next_location));
        assert_eq!(committed["already-applied"], false);
        assert_eq!(
            committed["source"],
            serde_json::to_value(crate::support::fixture::source(2)).expect("json")
        );
        let replay = cli.succeeds(commit(&name, &base_location, &next_location));
        assert_eq!(replay["already-applied"], true);
        cli.fails(commit(&name, &bad, &next_location), "COMMIT_CONFLICT");
    }
    // A replay with another source binding is no replay.
    let other = serde_json::to_value(crate::support::fixture::source(9))
        .expect("json")
        .to_string();
    let mut args = with(
        &["commit", "--base", &base_location, "--new", &next_location],
        &id_args(&["docs"], "x0"),
    );
    args.extend([s("--source"), other]);
    cli.fails(args, "COMMIT_CONFLICT");
}

/// `validate FILE --base BASE` checks the successor rules (issue 17, item 1).
#[tokio::test]
async fn validate_checks_the_successor_rules_against_a_base() {
    let cli = Cli::new();
    let env = cli.env();
    let (base, base_location) = env.new_index().await;
    let (next, next_location) = env.successor(&base, 2).await;
    let (_, two_ahead) = env.successor(&next, 3).await;
    let path = |location: &str| location.trim_start_matches("file://").to_owned();
    let ok = cli.succeeds([
        "validate",
        &path(&next_location),
        "--base",
        &path(&base_location),
    ]);
    assert_eq!(ok["successor-of-base"], true);
    let message = cli.fails(
        [
            "validate",
            &path(&two_ahead),
            "--base",
            &path(&base_location),
        ],
        "INVALID_INDEX_METADATA",
    );
    assert!(message.contains("second new snapshot"), "{message}");
    cli.fails(
        [
            "validate",
            &path(&base_location),
            "--base",
            &path(&base_location),
        ],
        "INVALID_INDEX_METADATA",
    );
}

/// Issue 27, item 1, through the binary: `publish --keep-last 1` publishes the new
/// snapshot and expires every other one, the old current snapshot included, in one
/// commit.
#[tokio::test]
async fn cli_publish_with_keep_last_is_one_commit() {
    let cli = Cli::new();
    let env = cli.env();
    cli.succeeds(["namespace", "create", "--namespace", "docs"]);
    let (initial, _) = env.new_index().await;
    let contents: serde_json::Value = serde_json::from_slice(&initial.to_json_vec()).expect("JSON");
    let snapshot = |rows: i64| {
        let mut snapshot = contents["snapshots"][0].clone();
        let fields = snapshot.as_object_mut().expect("object");
        for field in ["snapshot-id", "sequence-number", "timestamp-ms"] {
            fields.remove(field);
        }
        snapshot["indexed-rows"] = rows.into();
        snapshot.to_string()
    };
    let publish = |extra: &[&str], rows: i64| {
        let mut args = with(&["publish"], &id_args(&["docs"], "x"));
        args.extend(extra.iter().map(|arg| s(arg)));
        args.extend([s("--snapshot"), snapshot(rows)]);
        args
    };
    cli.succeeds(publish(&["--create"], 1000));
    cli.succeeds(publish(&[], 1001));
    let two = cli.succeeds(with(&["load"], &id_args(&["docs"], "x")));
    let two = env
        .read(two["metadata-location"].as_str().expect("location"))
        .await;
    assert_eq!(two.snapshots().len(), 2);

    let published = cli.succeeds(publish(&["--keep-last", "1"], 1002));
    assert_eq!(published["attempts"], 1, "one commit: {published}");
    assert_eq!(published["sequence-number"], 3);
    let loaded = cli.succeeds(with(&["load"], &id_args(&["docs"], "x")));
    assert_eq!(loaded["metadata-location"], published["metadata-location"]);
    let metadata = env
        .read(published["metadata-location"].as_str().expect("location"))
        .await;
    assert_eq!(metadata.snapshots().len(), 1, "only the new snapshot");
    assert_eq!(
        metadata.current_snapshot_id(),
        published["snapshot-id"].as_i64().expect("id")
    );
    assert_eq!(metadata.last_sequence_number(), 3);
    // The old current snapshot went in the same commit as the new one came.
    metadata
        .check_successor_of(&two)
        .expect("a successor of the two-snapshot metadata");
}

/// Issue 27, item 3, through the binary: a malformed `--source` is judged where the
/// catalog checks the binding, after the catalog's state, with the code of every other
/// path (`INVALID_INDEX_METADATA`).
#[tokio::test]
async fn cli_malformed_source_binding_comes_after_the_catalogs_state() {
    let cli = Cli::new();
    let env = cli.env();
    cli.succeeds(["namespace", "create", "--namespace", "docs"]);
    let (base, base_location) = env.new_index().await;
    let (_, next_location) = env.successor(&base, 2).await;
    let (_, stale_location) = env.successor(&base, 3).await;
    let register = |name: &str, source: &str| {
        let mut args = with(&["register"], &id_args(&["docs"], name));
        args.extend([
            s("--metadata"),
            base_location.clone(),
            s("--source"),
            s(source),
        ]);
        args
    };
    cli.succeeds(with(
        &["register", "--metadata", &base_location],
        &id_args(&["docs"], "x"),
    ));
    for malformed in [r#"{"provider": ""}"#, "{not json"] {
        cli.fails(register("x", malformed), "ALREADY_EXISTS");
        cli.fails(register("absent", malformed), "INVALID_INDEX_METADATA");
        cli.fails(
            with(&["load"], &id_args(&["docs"], "absent")),
            "INDEX_NOT_FOUND",
        );
        let commit = |base: &str| {
            let mut args = with(&["commit"], &id_args(&["docs"], "x"));
            args.extend([
                s("--base"),
                base.to_owned(),
                s("--new"),
                next_location.clone(),
                s("--source"),
                s(malformed),
            ]);
            args
        };
        cli.fails(commit(&stale_location), "COMMIT_CONFLICT");
        cli.fails(commit(&base_location), "INVALID_INDEX_METADATA");
    }
}

/// A warehouse given as a plain path is the directory it names, relative to the working
/// directory; a relative `file:` URI (which URL parsers read from the file-system root) is
/// refused and creates nothing.
#[test]
fn a_warehouse_is_a_plain_path_or_an_absolute_file_uri() {
    let cli = Cli::new();
    for given in ["plain", "./dotted"] {
        let out = cli.succeeds(["--warehouse", given, "init"]);
        let name = given.trim_start_matches("./");
        assert!(
            cli.dir
                .join(name)
                .join(parqdb_catalog::warehouse::OWNER_MARKER)
                .is_file(),
            "{given}: {out}"
        );
        cli.succeeds([
            "--warehouse",
            given,
            "namespace",
            "create",
            "--namespace",
            "ns",
        ]);
    }
    let absolute = cli.dir.join("absolute");
    cli.succeeds([
        OsString::from("--warehouse"),
        absolute.clone().into_os_string(),
        OsString::from("init"),
    ]);
    assert!(
        absolute
            .join(parqdb_catalog::warehouse::OWNER_MARKER)
            .is_file()
    );
    let name = format!("relative-uri-{}", uuid::Uuid::new_v4().simple());
    let message = cli.fails(
        [
            "--warehouse".to_owned(),
            format!("file:{name}"),
            "init".to_owned(),
        ],
        "INVALID_CONFIGURATION",
    );
    assert!(message.contains("relative `file:` URI"), "{message}");
    assert!(!Path::new("/").join(&name).exists(), "created at the root");
}

/// A command that only acts on what exists (`load`, `list`, `commit`, `drop`, `rename`,
/// `expire`, `gc`, `namespace list|exists|drop`) refuses a local warehouse or pointer-store
/// directory that does not exist, naming it, and creates nothing: a mistyped path is not a
/// new, empty catalog. Writes that create (`init`, `register`, `namespace create`) still
/// create it.
#[test]
fn read_commands_refuse_a_missing_warehouse_and_create_nothing() {
    let cli = Cli::new();
    let missing = cli.dir.join("typo");
    let pointers = cli.dir.join("typo-pointers");
    let id = || vec![s("--namespace"), s("ns"), s("--name"), s("x")];
    let commands: Vec<Vec<String>> = vec![
        with(&["load"], &id()),
        with(&["list", "--namespace", "ns"], &[]),
        with(&["drop"], &id()),
        with(&["namespace", "list"], &[]),
        with(&["namespace", "exists", "--namespace", "ns"], &[]),
        with(&["namespace", "drop", "--namespace", "ns"], &[]),
        with(&["gc", "--dry-run"], &[]),
        with(&["expire", "--keep-last", "1"], &id()),
    ];
    for command in &commands {
        for (option, dir) in [("--warehouse", &missing), ("--catalog", &pointers)] {
            let mut args = vec![s(option), format!("file://{}", dir.display())];
            args.extend(command.iter().cloned());
            let message = cli.fails(args, "INVALID_CONFIGURATION");
            assert!(
                message.contains(&dir.display().to_string()) && message.contains("does not exist"),
                "{command:?} {option}: {message}"
            );
            assert!(
                !dir.exists(),
                "{command:?} {option}: created {}",
                dir.display()
            );
        }
    }
    cli.succeeds([
        "--warehouse".to_owned(),
        format!("file://{}", missing.display()),
        s("namespace"),
        s("create"),
        s("--namespace"),
        s("ns"),
    ]);
    assert!(missing.is_dir(), "a write creates the warehouse");
}

/// A damaged pointer file (no header, an empty file) is `CORRUPT_RECORD`, for `load` and
/// for the listing that meets it, not a refusal of the store; a base that is no metadata
/// location (empty, a plain path) is `INVALID_REQUEST`, not a conflict a reload could fix;
/// `validate` reads the `file://` location `load` prints; `--keep-last 0` is a usage
/// error (the current snapshot is always kept).
#[tokio::test]
async fn damaged_records_malformed_bases_and_printed_locations() {
    let cli = Cli::new();
    let env = cli.env();
    cli.succeeds(["namespace", "create", "--namespace", "docs"]);
    let (metadata, valid) = env.new_index().await;
    let id = id_args(&["docs"], "x");
    cli.succeeds(with(&["register", "--metadata", &valid], &id));
    let (_, successor) = env.successor(&metadata, 2).await;

    let plain = valid.trim_start_matches("file://").to_owned();
    for base in [plain.as_str(), "", "notauri"] {
        let message = cli.fails(
            with(&["commit", "--base", base, "--new", &successor], &id),
            "INVALID_REQUEST",
        );
        assert!(message.contains("not a metadata location"), "{message}");
    }
    cli.fails(
        with(
            &[
                "commit",
                "--base",
                "s3://elsewhere/m.json",
                "--new",
                &successor,
            ],
            &id,
        ),
        "COMMIT_CONFLICT",
    );

    let loaded = cli.succeeds(with(&["load"], &id));
    let printed = loaded["metadata-location"].as_str().expect("location");
    let summary = cli.succeeds(["validate", printed]);
    assert!(summary.is_object(), "{summary}");
    cli.usage_error(with(&["expire", "--keep-last", "0"], &id));

    let records = cli.index_records();
    assert_eq!(records.len(), 1, "{records:?}");
    for damaged in [&b"garbage"[..], b"", b"parqdb-pointer x\n{}"] {
        std::fs::write(&records[0], damaged).expect("damaged");
        let message = cli.fails(with(&["load"], &id), "CORRUPT_RECORD");
        assert!(message.contains("damaged"), "{message}");
        cli.fails(["list", "--namespace", "docs"], "CORRUPT_RECORD");
    }
}
