//! Every metadata fixture, checked against `tests/fixtures/metadata/expected.json`.
//!
//! * `valid/*.json` must parse with the built-in registry, produce the expected
//!   `summary_json`, and round-trip byte-stably through the canonical form.
//! * `invalid/*.json` must fail with exactly the expected error code, and the message must
//!   start with the expected JSON path (`<path>: ...`) and contain the expected fragment.
//! * `successor/<case>.base.json` and `successor/<case>.new.json` are both valid, and
//!   `new.check_successor_of(base)` succeeds (`"ok": true`) or fails like an invalid
//!   fixture (expected code, path and fragment).
//! * Every fixture file is listed in `expected.json` and every entry has its file(s).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use parqdb_catalog::Error;
use parqdb_catalog::IndexMetadata;
use parqdb_catalog::family::FamilyRegistry;

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

/// `<kind>/<file>` names of the files on disk.
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

/// Why `err` does not meet an expectation with `error`, `path` and optional `message`.
fn mismatch(name: &str, expectation: &serde_json::Value, err: &Error) -> Option<String> {
    let code = expectation["error"].as_str().expect("error code");
    let path = expectation["path"].as_str().expect("path");
    let fragment = expectation
        .get("message")
        .and_then(serde_json::Value::as_str);
    let message = err.message();
    let matches = err.code() == code
        && message.starts_with(&format!("{path}: "))
        && fragment.is_none_or(|fragment| message.contains(fragment));
    (!matches).then(|| {
        format!(
            "{name}: got {} {message:?}, expected {code} at {path:?} containing {fragment:?}",
            err.code()
        )
    })
}

#[test]
fn every_fixture_is_listed_and_every_entry_exists() {
    let listed: BTreeSet<String> = expected().keys().cloned().collect();
    let mut on_disk: BTreeSet<String> = files_in("valid")
        .union(&files_in("invalid"))
        .cloned()
        .collect();
    for name in files_in("successor") {
        let case = name
            .strip_suffix(".base.json")
            .or_else(|| name.strip_suffix(".new.json"))
            .unwrap_or_else(|| panic!("{name}: successor fixtures end in .base.json or .new.json"));
        on_disk.insert(case.to_owned());
    }
    let orphans: Vec<_> = on_disk.difference(&listed).collect();
    let missing: Vec<_> = listed.difference(&on_disk).collect();
    assert!(
        orphans.is_empty(),
        "fixtures without an expected.json entry: {orphans:?}"
    );
    assert!(
        missing.is_empty(),
        "expected.json entries without a file: {missing:?}"
    );
    for case in listed.iter().filter(|name| name.starts_with("successor/")) {
        for side in ["base", "new"] {
            let file = format!("{case}.{side}.json");
            assert!(fixtures().join(&file).is_file(), "missing {file}");
        }
    }
    assert!(
        files_in("invalid").len() >= 60,
        "at least 60 invalid fixtures"
    );
    assert!(on_disk.contains("valid/spec-example.json"));
}

#[test]
fn valid_fixtures_parse_summarize_and_round_trip() {
    let registry = FamilyRegistry::builtin();
    let expected = expected();
    for name in files_in("valid") {
        let metadata = IndexMetadata::from_json_slice(&read(&name), &registry)
            .unwrap_or_else(|err| panic!("{name}: {} {}", err.code(), err.message()));
        assert_eq!(
            metadata.summary_json(),
            expected[&name]["summary"],
            "{name}: summary"
        );

        let canonical = metadata.to_json_vec();
        let again = IndexMetadata::from_json_slice(&canonical, &registry)
            .unwrap_or_else(|err| panic!("{name}: canonical form: {}", err.message()));
        assert_eq!(
            again, metadata,
            "{name}: canonical form parses to the same metadata"
        );
        assert_eq!(
            again.to_json_vec(),
            canonical,
            "{name}: canonical form is byte-stable"
        );
    }
}

#[test]
fn invalid_fixtures_fail_with_the_expected_code_and_path() {
    let registry = FamilyRegistry::builtin();
    let mut failures = Vec::new();
    for (name, expectation) in expected()
        .iter()
        .filter(|(name, _)| name.starts_with("invalid/"))
    {
        match IndexMetadata::from_json_slice(&read(name), &registry) {
            Ok(_) => failures.push(format!("{name}: parsed, expected {expectation}")),
            Err(err) => failures.extend(mismatch(name, expectation, &err)),
        }
    }
    assert!(
        failures.is_empty(),
        "{} fixture(s) failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn successor_pairs_follow_the_successor_rules() {
    let registry = FamilyRegistry::builtin();
    let mut failures = Vec::new();
    for (case, expectation) in expected()
        .iter()
        .filter(|(name, _)| name.starts_with("successor/"))
    {
        let load = |side: &str| {
            IndexMetadata::from_json_slice(&read(&format!("{case}.{side}.json")), &registry)
                .unwrap_or_else(|err| panic!("{case}.{side}.json must be valid: {}", err.message()))
        };
        let (base, new) = (load("base"), load("new"));
        match (new.check_successor_of(&base), expectation.get("ok")) {
            (Ok(()), Some(_)) => {}
            (Ok(()), None) => failures.push(format!("{case}: accepted, expected {expectation}")),
            (Err(err), Some(_)) => failures.push(format!("{case}: rejected: {}", err.message())),
            (Err(err), None) => failures.extend(mismatch(case, expectation, &err)),
        }
    }
    assert!(
        failures.is_empty(),
        "{} successor case(s) failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
