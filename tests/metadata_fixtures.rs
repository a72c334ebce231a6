//! Every metadata fixture, checked against `tests/fixtures/metadata/expected.json`.
//!
//! * `valid/*.json` must parse with the built-in registry, produce the expected
//!   `summary_json`, and round-trip byte-stably through the canonical form.
//! * `invalid/*.json` must fail with exactly the expected error code, and the message must
//!   start with the expected JSON path (`<path>: ...`) and contain the expected fragment.
//! * Every fixture file is listed in `expected.json` and every entry has a file.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use parqdb_catalog::family::FamilyRegistry;
use parqdb_catalog::metadata::IndexMetadata;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/metadata")
}

fn expected() -> serde_json::Map<String, serde_json::Value> {
    let text = std::fs::read(fixtures().join("expected.json")).expect("read expected.json");
    match serde_json::from_slice(&text).expect("expected.json is JSON") {
        serde_json::Value::Object(map) => map,
        other => panic!("expected.json must be an object, got {other}"),
    }
}

/// `valid/x.json` and `invalid/y.json` names of the files on disk.
fn files_in(kind: &str) -> BTreeSet<String> {
    std::fs::read_dir(fixtures().join(kind))
        .expect("read fixture directory")
        .map(|entry| {
            let name = entry.expect("directory entry").file_name();
            format!("{kind}/{}", name.to_str().expect("UTF-8 file name"))
        })
        .collect()
}

fn read(name: &str) -> Vec<u8> {
    std::fs::read(fixtures().join(name)).unwrap_or_else(|err| panic!("read {name}: {err}"))
}

#[test]
fn every_fixture_is_listed_and_every_entry_exists() {
    let listed: BTreeSet<String> = expected().keys().cloned().collect();
    let on_disk: BTreeSet<String> = files_in("valid").union(&files_in("invalid")).cloned().collect();
    let orphans: Vec<_> = on_disk.difference(&listed).collect();
    let missing: Vec<_> = listed.difference(&on_disk).collect();
    assert!(orphans.is_empty(), "fixtures without an expected.json entry: {orphans:?}");
    assert!(missing.is_empty(), "expected.json entries without a file: {missing:?}");
    assert!(files_in("invalid").len() >= 60, "at least 60 invalid fixtures");
    assert!(on_disk.contains("valid/spec-example.json"));
}

#[test]
fn valid_fixtures_parse_summarize_and_round_trip() {
    let registry = FamilyRegistry::builtin();
    let expected = expected();
    for name in files_in("valid") {
        let metadata = IndexMetadata::from_json_slice(&read(&name), &registry)
            .unwrap_or_else(|err| panic!("{name}: {} {}", err.code(), err.message()));
        assert_eq!(metadata.summary_json(), expected[&name]["summary"], "{name}: summary");

        let canonical = metadata.to_json_vec();
        let again = IndexMetadata::from_json_slice(&canonical, &registry)
            .unwrap_or_else(|err| panic!("{name}: canonical form: {}", err.message()));
        assert_eq!(again, metadata, "{name}: canonical form parses to the same metadata");
        assert_eq!(again.to_json_vec(), canonical, "{name}: canonical form is byte-stable");
    }
}

#[test]
fn invalid_fixtures_fail_with_the_expected_code_and_path() {
    let registry = FamilyRegistry::builtin();
    let mut failures = Vec::new();
    for (name, expectation) in expected().iter().filter(|(name, _)| name.starts_with("invalid/")) {
        let code = expectation["error"].as_str().expect("error code");
        let path = expectation["path"].as_str().expect("path");
        let fragment = expectation.get("message").and_then(serde_json::Value::as_str);
        match IndexMetadata::from_json_slice(&read(name), &registry) {
            Ok(_) => failures.push(format!("{name}: parsed, expected {code}")),
            Err(err) => {
                let message = err.message();
                if err.code() != code
                    || !message.starts_with(&format!("{path}: "))
                    || fragment.is_some_and(|fragment| !message.contains(fragment))
                {
                    failures.push(format!(
                        "{name}: got {} {message:?}, expected {code} at {path:?} containing {fragment:?}",
                        err.code()
                    ));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{} fixture(s) failed:\n{}", failures.len(), failures.join("\n"));
}
