//! The fuzz targets' properties on the stable toolchain: each body of
//! `fuzz/fuzz_targets/bodies.rs` runs over a seed corpus plus seeded random mutations of it
//! (byte flips, insertions, deletions, duplications, splices and JSON-aware token
//! swaps). Any panic is a finding; the failing input is printed as hex.
//!
//! `PARQDB_FUZZ_ITERATIONS` sets the inputs per target (default 100,000; 10,000 at
//! `PARQDB_TEST_SCALE=quick`) and
//! `PARQDB_FUZZ_SEED` the seed (default 1). With nightly and cargo-fuzz, run the real,
//! coverage-guided fuzzers from the repository root:
//!
//! ```text
//! cargo +nightly fuzz run key_decode      -- -max_total_time=600
//! cargo +nightly fuzz run pointer_record  -- -max_total_time=600
//! cargo +nightly fuzz run lambda_event    -- -max_total_time=600
//! cargo +nightly fuzz run metadata_parse fuzz/corpus/metadata_parse \
//!     tests/fixtures/metadata/valid tests/fixtures/metadata/invalid
//! ```
#![allow(clippy::disallowed_methods)] // tests may read the wall clock and draw random ids (unique names)

#[path = "../../fuzz/fuzz_targets/bodies.rs"]
mod bodies;

use std::collections::BTreeMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::Instant;

use parqdb_catalog::TableDefinition;
use parqdb_catalog::catalog::record::{NamespaceRecord, PointerRecord, PointerState, RenameIntent};
use parqdb_catalog::{IndexIdentifier, Namespace};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::json;

fn iterations() -> usize {
    crate::support::scale::knob("PARQDB_FUZZ_ITERATIONS", 100_000, 10_000) as usize
}

fn seed() -> u64 {
    std::env::var("PARQDB_FUZZ_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1)
}

const TOKENS: &[&str] = &[
    "~",
    "~7e",
    "~2f",
    "~41",
    "~g0",
    "=",
    "/",
    "//",
    "i/",
    "n/",
    "\"",
    "{",
    "}",
    "[",
    "]",
    ",",
    ":",
    "null",
    "true",
    "0",
    "-1",
    "1e400",
    "18446744073709551616",
    "\"\"",
    "\\u0000",
    "\\ud800",
    "é",
    "\u{10ffff}",
    "\"live\"",
    "\"moving\"",
    "\"dropped\"",
    "\"record-version\"",
    "\"rename\"",
    "\"namespace\"",
    "\"name\"",
    "\"action\"",
    "\"page-size\"",
    "\"page-token\"",
    "\"source\"",
    "\"identifier\"",
    "\"extra\"",
];

/// One mutation of `input` (or a splice with `other`).
fn mutate(rng: &mut StdRng, input: &[u8], other: &[u8]) -> Vec<u8> {
    let mut out = input.to_vec();
    for _ in 0..rng.random_range(1..=4) {
        let len = out.len();
        match rng.random_range(0..7) {
            0 if len > 0 => {
                let at = rng.random_range(0..len);
                out[at] ^= 1 << rng.random_range(0..8);
            }
            1 => {
                let at = rng.random_range(0..=len);
                out.insert(at, rng.random());
            }
            2 if len > 0 => {
                let at = rng.random_range(0..len);
                let end = (at + rng.random_range(1..=8)).min(len);
                out.drain(at..end);
            }
            3 if len > 0 => {
                let at = rng.random_range(0..len);
                let end = (at + rng.random_range(1..=16)).min(len);
                let copy = out[at..end].to_vec();
                let to = rng.random_range(0..=out.len());
                out.splice(to..to, copy);
            }
            4 if !other.is_empty() => {
                let cut = rng.random_range(0..=len);
                let from = rng.random_range(0..other.len());
                out.truncate(cut);
                out.extend_from_slice(&other[from..]);
            }
            5 => {
                let token = TOKENS[rng.random_range(0..TOKENS.len())].as_bytes();
                let at = rng.random_range(0..=len);
                out.splice(at..at, token.iter().copied());
            }
            _ if len > 0 => {
                // Replace a run with a token.
                let at = rng.random_range(0..len);
                let end = (at + rng.random_range(1..=6)).min(len);
                let token = TOKENS[rng.random_range(0..TOKENS.len())].as_bytes();
                out.splice(at..end, token.iter().copied());
            }
            _ => out.push(rng.random()),
        }
    }
    out
}

/// Run `body` over the corpus and `total` mutated or random inputs.
fn fuzz(name: &str, corpus: Vec<Vec<u8>>, body: fn(&[u8]), total: usize) {
    assert!(!corpus.is_empty());
    let mut rng = StdRng::seed_from_u64(seed() ^ name.len() as u64);
    let started = Instant::now();
    let run = |input: &[u8]| {
        if let Err(panic) = catch_unwind(AssertUnwindSafe(|| body(input))) {
            let message = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                .unwrap_or_default();
            let hex: String = input.iter().map(|b| format!("{b:02x}")).collect();
            panic!(
                "{name}: the property broke ({message}) on input {:?} (hex {hex})",
                String::from_utf8_lossy(input)
            );
        }
    };
    for input in &corpus {
        run(input);
    }
    for n in 0..total {
        let input = if n % 10 == 0 {
            let len = rng.random_range(0..64);
            (0..len).map(|_| rng.random()).collect()
        } else {
            let base = &corpus[rng.random_range(0..corpus.len())];
            let other = &corpus[rng.random_range(0..corpus.len())];
            mutate(&mut rng, base, other)
        };
        run(&input);
    }
    println!(
        "{name}: {} corpus inputs + {total} generated inputs, no panic, in {:.1?}",
        corpus.len(),
        started.elapsed()
    );
}

fn identifiers() -> Vec<IndexIdentifier> {
    let ns = |segments: &[&str]| Namespace::new(segments.iter().copied()).expect("valid");
    vec![
        IndexIdentifier::new(ns(&["a"]), "x").expect("valid"),
        IndexIdentifier::new(ns(&["Docs", "v2"]), "embeddings").expect("valid"),
        IndexIdentifier::new(ns(&["a.b", "c d", "é"]), "~=/").expect("valid"),
        IndexIdentifier::new(ns(&["x"; 16]), "y".repeat(80)).expect("valid"),
    ]
}

#[test]
fn key_decode() {
    let mut corpus: Vec<Vec<u8>> = Vec::new();
    for id in identifiers() {
        corpus.push(id.store_key().as_str().as_bytes().to_vec());
        corpus.push(id.namespace().store_key().as_str().as_bytes().to_vec());
        corpus.push(id.namespace().indexes_prefix().as_str().as_bytes().to_vec());
        let mut segments: Vec<u8> = Vec::new();
        for segment in id.namespace().segments() {
            segments.extend_from_slice(segment.as_bytes());
            segments.push(0xff);
        }
        segments.extend_from_slice(id.name().as_bytes());
        corpus.push(segments);
    }
    for key in [
        "",
        "i/",
        "n/",
        "i/=",
        "i/a/=",
        "i/~41/=x",
        "i/a/=~2",
        "n/=a",
        "i//=x",
        "i/a/b/=x/",
    ] {
        corpus.push(key.as_bytes().to_vec());
    }
    fuzz("key_decode", corpus, bodies::key_decode, iterations());
}

fn source() -> TableDefinition {
    TableDefinition::new(
        "parquet",
        BTreeMap::from([("location".to_owned(), "s3://b/t/".to_owned())]),
    )
    .expect("valid")
}

#[test]
fn pointer_record() {
    let uuid = |n: u128| uuid::Uuid::from_u128(n);
    let live = PointerRecord::created(
        None,
        "s3://b/wh/metadata/1.json".into(),
        source(),
        uuid(1),
        1_700_000_000_000,
    );
    let mut moving = live.successor(PointerState::Moving, uuid(2), 1_700_000_000_001);
    moving.rename = Some(RenameIntent {
        to: identifiers()[1].clone(),
        destination_commit_id: uuid(3),
    });
    let mut dropped = moving.successor(PointerState::Dropped, uuid(4), 1_700_000_000_002);
    dropped.rename = moving.rename.clone();
    let again = PointerRecord::created(
        Some(&dropped),
        "s3://b/wh/metadata/2.json".into(),
        source(),
        uuid(5),
        2,
    );
    let namespace = NamespaceRecord::new(
        None,
        true,
        BTreeMap::from([("owner".into(), "me".into())]),
        uuid(6),
        3,
    );
    let gone = NamespaceRecord::new(Some(&namespace), false, BTreeMap::new(), uuid(7), 4);
    let mut committed = again.successor(PointerState::Live, uuid(8), 5);
    committed.metadata_location = "s3://b/wh/metadata/3.json".into();
    committed.previous_location = Some("s3://b/wh/metadata/2.json".into());
    let mut corpus: Vec<Vec<u8>> = [live, moving, dropped, again, committed]
        .iter()
        .map(PointerRecord::to_bytes)
        .collect();
    corpus.push(namespace.to_bytes());
    corpus.push(gone.to_bytes());
    corpus.push(br#"{"record-version":2}"#.to_vec());
    fuzz(
        "pointer_record",
        corpus,
        bodies::pointer_record,
        iterations(),
    );
}

#[test]
fn lambda_event() {
    let id = json!({"namespace": ["a", "b"], "name": "x"});
    let source = json!({"provider": "parquet", "properties": {"location": "s3://b/t/"}});
    let events = [
        json!({"identifier": id}),
        json!({"identifier": id, "source": source, "metadata-location": "s3://b/wh/metadata/m.json"}),
        json!({"identifier": id, "source": source, "base-metadata-location": "s3://b/wh/a.json", "new-metadata-location": "s3://b/wh/b.json"}),
        json!({"from": id, "to": {"namespace": ["c"], "name": "y"}}),
        json!({"namespace": ["a"], "page-token": "i/a/=x", "page-size": 5}),
        json!({"action": "create", "namespace": ["a"], "properties": {"owner": "me"}}),
        json!({"action": "list"}),
        json!({"action": "list", "namespace": ["a"], "page-size": 1000}),
        json!({"action": "drop", "namespace": ["a"]}),
        json!({"action": "exists", "namespace": ["a"]}),
        json!({"action": "properties", "namespace": ["a"]}),
        json!([1, 2, 3]),
        json!(null),
    ];
    let mut corpus: Vec<Vec<u8>> = events
        .iter()
        .map(|e| serde_json::to_vec(e).expect("json"))
        .collect();
    corpus.push(b"{\"identifier\": tru".to_vec());
    corpus.push(format!("{}{}", "[".repeat(200), "]".repeat(200)).into_bytes());
    fuzz("lambda_event", corpus, bodies::lambda_event, iterations());
}

#[test]
fn metadata_parse() {
    let mut corpus: Vec<Vec<u8>> = Vec::new();
    for dir in [
        "tests/fixtures/metadata/valid",
        "tests/fixtures/metadata/invalid",
    ] {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
        for entry in std::fs::read_dir(&path).expect("fixtures") {
            let entry = entry.expect("entry");
            if entry.path().extension().is_some_and(|e| e == "json") {
                corpus.push(std::fs::read(entry.path()).expect("fixture"));
            }
        }
    }
    // Metadata documents are large and slow to parse in debug builds: a tenth.
    fuzz(
        "metadata_parse",
        corpus,
        bodies::metadata_parse,
        iterations() / 10,
    );
}
