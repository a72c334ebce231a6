//! Unit tests and property tests for the metadata model, builders and rules.

use std::collections::BTreeMap;

use proptest::prelude::*;

use super::*;
use crate::clock::{Clock, IdGenerator, ManualClock, SeededIds};
use crate::error::ErrorKind;
use crate::family::FamilyRegistry;

const SPEC_EXAMPLE: &[u8] = include_bytes!("../../tests/fixtures/metadata/valid/spec-example.json");

fn registry() -> FamilyRegistry {
    FamilyRegistry::builtin()
}

fn strings<const N: usize>(pairs: [(&str, &str); N]) -> BTreeMap<String, String> {
    pairs
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

fn table(location: &str) -> IndexTableDefinition {
    IndexTableDefinition::new(1, strings([("location", location)])).expect("valid table")
}

/// Valid `ivf`/`parquet` contents; `build` distinguishes the table locations.
fn contents(rows: i64, build: u64) -> SnapshotContents {
    let source = TableDefinition::new("parquet", strings([("location", "s3://example/docs/")]))
        .expect("valid source")
        .with_identifier(
            TableIdentifierRef::new(Some("datafusion".into()), vec!["public".into()], "docs")
                .expect("valid identifier"),
        );
    SnapshotContents {
        source_table: source,
        vector_field: "embedding".into(),
        source_key_fields: vec!["document_id".into()],
        indexed_rows: rows,
        index_family: "ivf".into(),
        index_schema_version: 1,
        metric: "cosine".into(),
        parameters: strings([
            ("nlist", "16"),
            (
                "ivf_centroids_metadata_location",
                "metadata/centroids/v1.metadata.json",
            ),
        ]),
        index_provider: ProviderDefinition::new("parquet", BTreeMap::new()).expect("valid"),
        index_tables: BTreeMap::from([
            (
                "ivf_centroids".to_owned(),
                table(&format!("indexes/c/{build}/ivf_centroids/")),
            ),
            (
                "ivf_postings".to_owned(),
                table(&format!("indexes/p/{build}/ivf_postings/")),
            ),
        ]),
        summary: strings([("operation", "refresh")]),
    }
}

fn create(seed: u64, now: i64, contents: SnapshotContents) -> IndexMetadata {
    IndexMetadata::create(
        contents,
        BTreeMap::new(),
        &ManualClock::new(now),
        &SeededIds::new(seed),
        &registry(),
    )
    .expect("create")
}

fn assert_byte_stable(metadata: &IndexMetadata) {
    let bytes = metadata.to_json_vec();
    let again = IndexMetadata::from_json_slice(&bytes, &registry()).expect("canonical form parses");
    assert_eq!(&again, metadata);
    assert_eq!(again.to_json_vec(), bytes);
}

fn expect_kind(
    result: crate::error::Result<impl std::fmt::Debug>,
    kind: ErrorKind,
    fragment: &str,
) {
    let err = result.expect_err("must fail");
    assert_eq!(err.kind(), kind, "{}", err.message());
    assert!(
        err.message().contains(fragment),
        "{:?} lacks {fragment:?}",
        err.message()
    );
}

#[test]
fn spec_example_parses_with_every_accessor() {
    let metadata = IndexMetadata::from_json_slice(SPEC_EXAMPLE, &registry()).expect("spec example");
    assert_eq!(
        metadata.index_uuid().to_string(),
        "2f1c7f5e-3c43-4a44-8f2a-cf560c4db8d1"
    );
    assert_eq!(metadata.last_updated_ms(), 1_750_000_000_000);
    assert_eq!(metadata.last_sequence_number(), 1);
    assert_eq!(metadata.current_snapshot_id(), 701);
    assert_eq!(metadata.snapshots().len(), 1);
    assert_eq!(metadata.snapshot(701), Some(metadata.current_snapshot()));
    assert_eq!(metadata.snapshot(702), None);
    assert_eq!(metadata.snapshot_log().len(), 1);
    assert_eq!(metadata.snapshot_log()[0].snapshot_id(), 701);
    assert_eq!(metadata.snapshot_log()[0].timestamp_ms(), 1_750_000_000_000);
    assert!(metadata.properties().is_empty());

    let snapshot = metadata.current_snapshot();
    assert_eq!(snapshot.snapshot_id(), 701);
    assert_eq!(snapshot.sequence_number(), 1);
    assert_eq!(snapshot.timestamp_ms(), 1_750_000_000_000);
    assert_eq!(snapshot.summary(), &strings([("operation", "create")]));
    assert_eq!(snapshot.source_table().provider(), "parquet");
    let identifier = snapshot.source_table().identifier().expect("identifier");
    assert_eq!(
        (identifier.catalog(), identifier.name()),
        (Some("datafusion"), "documents")
    );
    assert_eq!(snapshot.contents().vector_field, "embedding");
    assert_eq!(snapshot.contents().source_key_fields, ["document_id"]);
    assert_eq!(snapshot.contents().indexed_rows, 1_000_000);
    assert_eq!(snapshot.index_family(), "ivf");
    assert_eq!(snapshot.contents().index_schema_version, 1);
    assert_eq!(snapshot.metric(), "l2_squared");
    assert_eq!(snapshot.parameters()["nlist"], "4096");
    assert_eq!(snapshot.index_provider().provider(), "parquet");
    assert!(snapshot.index_provider().properties().is_empty());
    assert_eq!(
        snapshot.index_tables()["ivf_postings"].definition_version(),
        1
    );

    assert_byte_stable(&metadata);
    assert_eq!(
        metadata.summary_json(),
        serde_json::json!({
            "index-uuid": "2f1c7f5e-3c43-4a44-8f2a-cf560c4db8d1",
            "current-snapshot-id": 701,
            "snapshot-count": 1,
            "last-sequence-number": 1,
            "last-updated-ms": 1_750_000_000_000_i64,
            "index-family": "ivf",
            "metric": "l2_squared",
        })
    );
    assert_eq!(
        metadata.warehouse_references(&registry()),
        [
            "indexes/2f1c7f5e3c434a448f2acf560c4db8d1/701/ivf_postings/",
            "indexes/fe985f6d35924385a1ca71347057a210/1/ivf_centroids/",
            "metadata/fe985f6d-3592-4385-a1ca-71347057a210/v1.metadata.json",
        ]
    );
    // Without the family and provider, nothing is known to be referenced.
    assert!(
        metadata
            .warehouse_references(&FamilyRegistry::empty())
            .is_empty()
    );
}

#[test]
fn unknown_family_or_provider_is_invalid_unless_registered() {
    expect_kind(
        IndexMetadata::from_json_slice(SPEC_EXAMPLE, &FamilyRegistry::empty()),
        ErrorKind::InvalidIndexMetadata,
        "snapshots[0].index-family: unknown index family \"ivf\"",
    );
    let ivf_only =
        FamilyRegistry::empty().with_family(std::sync::Arc::new(crate::family::IvfFamily));
    expect_kind(
        IndexMetadata::from_json_slice(SPEC_EXAMPLE, &ivf_only),
        ErrorKind::InvalidIndexMetadata,
        "snapshots[0].index-provider.provider: unknown index provider \"parquet\"",
    );
}

#[test]
fn oversized_input_is_rejected_before_parsing() {
    let mut huge = SPEC_EXAMPLE.to_vec();
    huge.resize(MAX_METADATA_BYTES + 1, b' ');
    expect_kind(
        IndexMetadata::from_json_slice(&huge, &registry()),
        ErrorKind::InvalidIndexMetadata,
        "limit",
    );
    // Just under the cap, trailing whitespace is fine.
    huge.truncate(MAX_METADATA_BYTES);
    assert!(IndexMetadata::from_json_slice(&huge, &registry()).is_ok());
}

#[test]
fn deep_nesting_fails_cleanly() {
    for depth in [200, 100_000] {
        let mut doc = String::from(r#"{"format-version": 1, "properties": "#);
        doc.push_str(&"[".repeat(depth));
        doc.push_str(&"]".repeat(depth));
        doc.push('}');
        expect_kind(
            IndexMetadata::from_json_slice(doc.as_bytes(), &registry()),
            ErrorKind::InvalidIndexMetadata,
            "",
        );
    }
}

#[test]
fn create_builds_valid_initial_metadata() {
    let ids = SeededIds::new(3);
    let expected_uuid = SeededIds::new(3).uuid();
    let metadata = IndexMetadata::create(
        contents(10, 1),
        strings([("owner", "team")]),
        &ManualClock::new(1_000),
        &ids,
        &registry(),
    )
    .expect("create");
    assert_eq!(metadata.index_uuid(), expected_uuid);
    assert_eq!(metadata.last_sequence_number(), 1);
    assert_eq!(metadata.last_updated_ms(), 1_000);
    assert_eq!(metadata.snapshots().len(), 1);
    let snapshot = metadata.current_snapshot();
    assert!(snapshot.snapshot_id() > 0);
    assert_eq!(
        (snapshot.sequence_number(), snapshot.timestamp_ms()),
        (1, 1_000)
    );
    assert_eq!(snapshot.contents(), &contents(10, 1));
    assert_eq!(metadata.snapshot_log().len(), 1);
    assert_eq!(
        metadata.snapshot_log()[0].snapshot_id(),
        snapshot.snapshot_id()
    );
    assert_eq!(metadata.properties()["owner"], "team");
    assert_byte_stable(&metadata);
}

#[test]
fn create_rejects_invalid_contents() {
    let attempt = |edit: &dyn Fn(&mut SnapshotContents)| {
        let mut input = contents(10, 1);
        edit(&mut input);
        IndexMetadata::create(
            input,
            BTreeMap::new(),
            &ManualClock::new(1),
            &SeededIds::new(1),
            &registry(),
        )
    };
    let invalid = ErrorKind::InvalidIndexMetadata;
    expect_kind(
        attempt(&|c| c.indexed_rows = 0),
        invalid,
        "snapshots[0].indexed-rows",
    );
    expect_kind(
        attempt(&|c| c.vector_field.clear()),
        invalid,
        "snapshots[0].vector-field",
    );
    expect_kind(
        attempt(&|c| c.source_key_fields.clear()),
        invalid,
        "snapshots[0].source-key-fields",
    );
    expect_kind(
        attempt(&|c| c.source_key_fields.push("document_id".into())),
        invalid,
        "duplicate key field",
    );
    expect_kind(
        attempt(&|c| c.index_family = "hnsw".into()),
        invalid,
        "snapshots[0].index-family",
    );
    expect_kind(
        attempt(&|c| c.index_schema_version = 2),
        invalid,
        "snapshots[0].index-schema-version",
    );
    expect_kind(
        attempt(&|c| c.metric = "hamming".into()),
        invalid,
        "snapshots[0].metric",
    );
    expect_kind(
        attempt(&|c| {
            c.index_tables.remove("ivf_postings");
        }),
        invalid,
        "missing role \"ivf_postings\"",
    );
    expect_kind(
        attempt(&|c| {
            c.index_tables.insert("extra".into(), table("x/"));
        }),
        invalid,
        "snapshots[0].index-tables.extra",
    );
    expect_kind(
        attempt(&|c| {
            c.index_tables.insert("ivf_postings".into(), table("/abs/"));
        }),
        invalid,
        "snapshots[0].index-tables.ivf_postings.properties",
    );
    expect_kind(
        attempt(&|c| {
            c.parameters
                .insert("ivf_centroids_metadata_location".into(), "../up".into());
        }),
        invalid,
        "snapshots[0].parameters",
    );

    #[derive(Debug)]
    struct NilIds;
    impl IdGenerator for NilIds {
        fn uuid(&self) -> uuid::Uuid {
            uuid::Uuid::nil()
        }
    }
    let result = IndexMetadata::create(
        contents(1, 1),
        BTreeMap::new(),
        &ManualClock::new(1),
        &NilIds,
        &registry(),
    );
    expect_kind(result, invalid, "index-uuid");
}

#[test]
fn successor_follows_the_six_steps() {
    let ids = SeededIds::new(11);
    let clock = ManualClock::new(5_000);
    let base = create(10, 4_000, contents(10, 1));
    let next = base
        .successor(contents(20, 2), &clock, &ids, &registry())
        .expect("successor");
    assert_eq!(next.index_uuid(), base.index_uuid());
    assert_eq!(next.last_sequence_number(), 2);
    assert_eq!(next.snapshots().len(), 2);
    assert_eq!(
        next.snapshot(base.current_snapshot_id()),
        Some(base.current_snapshot())
    );
    let current = next.current_snapshot();
    assert_ne!(current.snapshot_id(), base.current_snapshot_id());
    assert_eq!(
        (
            current.sequence_number(),
            current.timestamp_ms(),
            current.contents().indexed_rows
        ),
        (2, 5_000, 20)
    );
    assert_eq!(next.snapshot_log().len(), 2);
    assert_eq!(next.snapshot_log()[1].snapshot_id(), current.snapshot_id());
    assert_eq!(next.last_updated_ms(), 5_000);
    next.check_successor_of(&base).expect("successor rules");
    assert_byte_stable(&next);

    // A clock that went backwards does not move last-updated-ms backwards.
    clock.set(10);
    let later = next
        .successor(contents(30, 3), &clock, &ids, &registry())
        .expect("successor");
    assert_eq!(later.last_updated_ms(), 5_000);
    assert_eq!(later.current_snapshot().timestamp_ms(), 5_000);
    later.check_successor_of(&next).expect("successor rules");
}

#[test]
fn successor_rejects_identity_changes_and_invalid_contents() {
    let base = create(1, 1_000, contents(10, 1));
    let clock = ManualClock::new(2_000);
    let ids = SeededIds::new(2);
    for (field, edit) in [
        (
            "vector-field",
            Box::new(|c: &mut SnapshotContents| c.vector_field = "other".into())
                as Box<dyn Fn(&mut SnapshotContents)>,
        ),
        (
            "source-key-fields",
            Box::new(|c: &mut SnapshotContents| c.source_key_fields.push("b".into())),
        ),
        (
            "source-key-fields",
            Box::new(|c: &mut SnapshotContents| c.source_key_fields = vec!["other".into()]),
        ),
        (
            "index-family",
            Box::new(|c: &mut SnapshotContents| c.index_family = "hnsw".into()),
        ),
        (
            "metric",
            Box::new(|c: &mut SnapshotContents| c.metric = "l2_squared".into()),
        ),
    ] {
        let mut input = contents(10, 2);
        edit(&mut input);
        expect_kind(
            base.successor(input, &clock, &ids, &registry()),
            ErrorKind::InvalidIndexMetadata,
            field,
        );
    }
    let mut bad_rows = contents(10, 2);
    bad_rows.indexed_rows = -5;
    expect_kind(
        base.successor(bad_rows, &clock, &ids, &registry()),
        ErrorKind::InvalidIndexMetadata,
        "snapshots[1].indexed-rows",
    );
}

#[test]
fn successor_avoids_retained_snapshot_ids() {
    #[derive(Debug)]
    struct Repeating(std::sync::atomic::AtomicI64);
    impl IdGenerator for Repeating {
        fn uuid(&self) -> uuid::Uuid {
            uuid::Uuid::from_u128(0x2f1c7f5e_3c43_4a44_8f2a_cf560c4db8d1)
        }
        fn positive_id(&self) -> i64 {
            // 7, 7, 8, ...: the second call repeats the first id.
            let n = self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            7 + (n - 1).max(0)
        }
    }
    let ids = Repeating(std::sync::atomic::AtomicI64::new(0));
    let clock = ManualClock::new(1);
    let base = IndexMetadata::create(contents(1, 1), BTreeMap::new(), &clock, &ids, &registry())
        .expect("create");
    assert_eq!(base.current_snapshot_id(), 7);
    let next = base
        .successor(contents(2, 2), &clock, &ids, &registry())
        .expect("successor");
    assert_eq!(next.current_snapshot_id(), 8);

    #[derive(Debug)]
    struct Stuck;
    impl IdGenerator for Stuck {
        fn uuid(&self) -> uuid::Uuid {
            uuid::Uuid::from_u128(1)
        }
        fn positive_id(&self) -> i64 {
            8
        }
    }
    expect_kind(
        next.successor(contents(3, 3), &clock, &Stuck, &registry()),
        ErrorKind::InvalidIndexMetadata,
        "snapshot-id",
    );
}

#[test]
fn successor_rules_each_rejected() {
    let invalid = ErrorKind::InvalidIndexMetadata;
    let registry = registry();
    let clock = ManualClock::new(2_000);

    // A different index.
    let a = create(1, 1_000, contents(10, 1));
    let b = create(2, 1_000, contents(10, 1));
    expect_kind(
        b.check_successor_of(&a),
        ErrorKind::IndexUuidMismatch,
        "index-uuid",
    );

    // Same uuid (same seed), different identity.
    let mut other_metric = contents(10, 1);
    other_metric.metric = "inner_product".into();
    let c = create(1, 1_000, other_metric);
    expect_kind(
        c.check_successor_of(&a),
        invalid,
        "metric: identity field differs from the base",
    );

    // last-sequence-number decreases.
    let ids = SeededIds::new(50);
    let a2 = a
        .successor(contents(20, 2), &clock, &ids, &registry)
        .expect("successor");
    let a3 = a2
        .successor(contents(30, 3), &clock, &ids, &registry)
        .expect("successor");
    a3.check_successor_of(&a2).expect("forward");
    // Two snapshots at once: a commit publishes at most one.
    expect_kind(a3.check_successor_of(&a), invalid, "second new snapshot");
    // Backwards: the base's current snapshot is gone, and nothing replaced it.
    expect_kind(
        a2.check_successor_of(&a3),
        invalid,
        "was removed without publishing a new one",
    );
    // Publishing makes the base's current snapshot non-current, so the same update may
    // remove it, alone or with every older snapshot (issue 27).
    let newest_only = a3.expire_snapshots(None, None, &clock).expect("expire");
    assert_eq!(newest_only.snapshots().len(), 1);
    newest_only
        .check_successor_of(&a2)
        .expect("publish and expire the old current snapshot in one update");

    // last-updated-ms decreases.
    let mut early = a2.clone();
    early.last_updated_ms = a.last_updated_ms - 1;
    expect_kind(early.check_successor_of(&a), invalid, "last-updated-ms");

    // A retained snapshot changed content (same id, sequence and timestamp).
    let changed = create(1, 1_000, contents(11, 1));
    expect_kind(changed.check_successor_of(&a), invalid, "changed content");

    // A snapshot id of the base reused for a different snapshot.
    let reused = create(1, 1_001, contents(10, 1));
    expect_kind(reused.check_successor_of(&a), invalid, "snapshot-id");

    // A new snapshot whose sequence number the base already allocated.
    let late = a
        .successor(
            contents(20, 2),
            &ManualClock::new(9_000),
            &SeededIds::new(70),
            &registry,
        )
        .expect("successor");
    // A sibling successor of the same base replaces the base's current snapshot, with a
    // sequence number the base already allocated.
    expect_kind(late.check_successor_of(&a2), invalid, "already allocated");

    // A sequence number that jumps, or one the base already allocated.
    let mut jump = a2.clone();
    jump.snapshots[1].sequence_number = 7;
    jump.last_sequence_number = 7;
    expect_kind(
        jump.check_successor_of(&a),
        invalid,
        "expected base last-sequence-number + 1 = 2",
    );

    // A snapshot appended without advancing current-snapshot-id (and its log entry).
    let mut stuck = a2.clone();
    stuck.current_snapshot_id = a.current_snapshot_id;
    stuck.snapshot_log.pop();
    expect_kind(stuck.check_successor_of(&a), invalid, "current-snapshot-id");

    // A retained snapshot's log entry removed.
    let mut forgetful = a3.clone();
    forgetful.snapshot_log.remove(0);
    expect_kind(
        forgetful.check_successor_of(&a2),
        invalid,
        "snapshot-log[0]",
    );

    // last-sequence-number raised with no snapshot allocated.
    let mut raised = a2.clone();
    raised.last_sequence_number += 1;
    expect_kind(
        raised.check_successor_of(&a2),
        invalid,
        "last-sequence-number",
    );

    // A rollback: current moved back to a retained snapshot.
    let mut rollback = a2.clone();
    rollback.current_snapshot_id = a.current_snapshot_id;
    rollback.snapshot_log.push(SnapshotLogEntry::new(
        rollback.last_updated_ms,
        a.current_snapshot_id,
    ));
    expect_kind(rollback.check_successor_of(&a2), invalid, "rollback");

    // Expiry then publication in one commit.
    let a4 = a3
        .expire_snapshots(Some(2), None, &clock)
        .expect("expire")
        .successor(contents(40, 4), &clock, &ids, &registry)
        .expect("successor");
    a4.check_successor_of(&a3).expect("expire then publish");

    // No change at all (or only properties and last-updated-ms) is a no-op commit.
    expect_kind(a.check_successor_of(&a), invalid, "no-op");
    let mut renamed = a.clone();
    renamed.properties.insert("owner".into(), "me".into());
    expect_kind(renamed.check_successor_of(&a), invalid, "no-op");
}

/// Issue 27, item 2: a base is read for what the successor rules compare, not judged by
/// today's rules; the new metadata is.
#[test]
fn a_base_is_not_judged_by_todays_rules() {
    let clock = ManualClock::new(5_000);
    let ids = SeededIds::new(81);
    let a = create(1, 1_000, contents(10, 1));
    let b = a
        .successor(contents(20, 2), &clock, &ids, &registry())
        .expect("successor");
    // `a`'s snapshot as an earlier rule allowed it: centroids outside `metadata/`.
    let mut earlier: serde_json::Value = serde_json::from_slice(&b.to_json_vec()).expect("JSON");
    earlier["snapshots"][0]["parameters"]["ivf_centroids_metadata_location"] =
        serde_json::json!("centroids/v1.json");
    let earlier = serde_json::to_vec(&earlier).expect("JSON");
    expect_kind(
        IndexMetadata::from_json_slice(&earlier, &registry()),
        ErrorKind::InvalidIndexMetadata,
        "snapshots[0].parameters: ivf_centroids_metadata_location",
    );
    let base = IndexMetadata::from_json_slice_as_base(&earlier).expect("a base");
    // Expiring the old snapshot, or publishing and expiring it, fixes the index.
    let expired = b.expire_snapshots(None, None, &clock).expect("expire");
    expired
        .check_successor_of(&base)
        .expect("expiry over the base");
    let c = b
        .successor(contents(30, 3), &clock, &ids, &registry())
        .expect("successor");
    let newest = c.expire_snapshots(Some(1), None, &clock).expect("expire");
    newest
        .check_successor_of(&base)
        .expect("publication and expiry over the base");
    // What the successor rules read must still hold of a base.
    let mut no_current: serde_json::Value = serde_json::from_slice(&earlier).expect("JSON");
    no_current["current-snapshot-id"] = serde_json::json!(999);
    expect_kind(
        IndexMetadata::from_json_slice_as_base(&serde_json::to_vec(&no_current).expect("JSON")),
        ErrorKind::InvalidIndexMetadata,
        "current-snapshot-id: 999 does not name a retained snapshot",
    );
    let mut twice: serde_json::Value = serde_json::from_slice(&earlier).expect("JSON");
    twice["snapshots"][1]["snapshot-id"] = twice["snapshots"][0]["snapshot-id"].clone();
    expect_kind(
        IndexMetadata::from_json_slice_as_base(&serde_json::to_vec(&twice).expect("JSON")),
        ErrorKind::InvalidIndexMetadata,
        "snapshots[1].snapshot-id",
    );
    expect_kind(
        IndexMetadata::from_json_slice_as_base(br#"{"format-version": 2}"#),
        ErrorKind::UnsupportedFormatVersion,
        "format-version",
    );
}

#[test]
fn expire_keeps_current_newest_and_recent() {
    let registry = registry();
    let clock = ManualClock::new(1_000);
    let ids = SeededIds::new(5);
    let mut metadata =
        IndexMetadata::create(contents(1, 0), BTreeMap::new(), &clock, &ids, &registry)
            .expect("create");
    for build in 1..5 {
        clock.advance(100);
        metadata = metadata
            .successor(contents(build as i64 + 1, build), &clock, &ids, &registry)
            .expect("successor");
    }
    assert_eq!(metadata.snapshots().len(), 5);
    let sequence_of = |m: &IndexMetadata| {
        m.snapshots()
            .iter()
            .map(Snapshot::sequence_number)
            .collect::<Vec<_>>()
    };

    clock.advance(100);
    let kept_two = metadata
        .expire_snapshots(Some(2), None, &clock)
        .expect("expire");
    assert_eq!(sequence_of(&kept_two), [4, 5]);
    assert_eq!(kept_two.snapshot_log().len(), 2);
    assert_eq!(kept_two.last_sequence_number(), 5);
    assert_eq!(
        kept_two.current_snapshot_id(),
        metadata.current_snapshot_id()
    );
    assert_eq!(kept_two.last_updated_ms(), 1_500);
    kept_two
        .check_successor_of(&metadata)
        .expect("expiry is a valid successor");
    assert_byte_stable(&kept_two);

    let recent = metadata
        .expire_snapshots(None, Some(1_200), &clock)
        .expect("expire");
    assert_eq!(sequence_of(&recent), [3, 4, 5]);
    let only_current = metadata
        .expire_snapshots(None, None, &clock)
        .expect("expire");
    assert_eq!(sequence_of(&only_current), [5]);
    assert_eq!(only_current.snapshot_log().len(), 1);
    let zero = metadata
        .expire_snapshots(Some(0), None, &clock)
        .expect("expire");
    assert_eq!(zero, only_current);
    let everything = metadata
        .expire_snapshots(Some(100), Some(i64::MIN), &clock)
        .expect("expire");
    assert_eq!(everything.snapshots(), metadata.snapshots());

    // The next successor continues the sequence after the expired ones.
    let next = only_current
        .successor(contents(9, 9), &clock, &ids, &registry)
        .expect("successor");
    assert_eq!(next.current_snapshot().sequence_number(), 6);
    next.check_successor_of(&only_current).expect("rules");
}

#[test]
fn warehouse_references_cover_every_retained_snapshot() {
    let registry = registry();
    let clock = ManualClock::new(1);
    let ids = SeededIds::new(9);
    let first = IndexMetadata::create(contents(1, 1), BTreeMap::new(), &clock, &ids, &registry)
        .expect("create");
    let second = first
        .successor(contents(2, 2), &clock, &ids, &registry)
        .expect("successor");
    assert_eq!(
        second.warehouse_references(&registry),
        [
            "indexes/c/1/ivf_centroids/",
            "indexes/c/2/ivf_centroids/",
            "indexes/p/1/ivf_postings/",
            "indexes/p/2/ivf_postings/",
            "metadata/centroids/v1.metadata.json",
        ]
    );
    let expired = second.expire_snapshots(None, None, &clock).expect("expire");
    assert_eq!(expired.warehouse_references(&registry).len(), 3);
}

#[test]
fn snapshot_contents_json_is_strict() {
    let json = serde_json::to_vec(&contents(5, 1)).expect("serialize");
    assert_eq!(
        SnapshotContents::from_json_slice(&json).expect("parse"),
        contents(5, 1)
    );

    let mut value: serde_json::Value = serde_json::from_slice(&json).expect("json");
    value.as_object_mut().expect("object").remove("summary");
    let without_summary =
        SnapshotContents::from_json_slice(value.to_string().as_bytes()).expect("summary optional");
    assert!(without_summary.summary.is_empty());

    let bad = |edit: &dyn Fn(&mut serde_json::Value), fragment: &str| {
        let mut value: serde_json::Value = serde_json::from_slice(&json).expect("json");
        edit(&mut value);
        expect_kind(
            SnapshotContents::from_json_slice(value.to_string().as_bytes()),
            ErrorKind::InvalidIndexMetadata,
            fragment,
        );
    };
    bad(&|v| v["summary"] = serde_json::Value::Null, "summary");
    bad(&|v| v["snapshot-id"] = 1.into(), "snapshot-id");
    bad(&|v| v["indexed-rows"] = 0.into(), "indexed-rows");
    bad(
        &|v| v["index-tables"]["ivf_postings"]["definition-version"] = 0.into(),
        "index-tables.ivf_postings.definition-version",
    );
    bad(
        &|v| v["source-key-fields"] = serde_json::json!(["a", "a"]),
        "source-key-fields",
    );
    bad(
        &|v| v["index-schema-version"] = serde_json::json!(4_294_967_296_i64),
        "index-schema-version",
    );
}

#[test]
fn canonical_form_differs_from_input_only_in_layout() {
    // A compact input with keys out of order parses to the same metadata as the spec
    // example and has the same canonical bytes.
    let value: serde_json::Value = serde_json::from_slice(SPEC_EXAMPLE).expect("json");
    let compact = serde_json::to_vec(&value).expect("serialize");
    let a = IndexMetadata::from_json_slice(SPEC_EXAMPLE, &registry()).expect("spec");
    let b = IndexMetadata::from_json_slice(&compact, &registry()).expect("compact");
    assert_eq!(a, b);
    assert_eq!(a.to_json_vec(), b.to_json_vec());
}

/// One step of a random metadata history.
#[derive(Debug, Clone)]
enum Step {
    Successor {
        rows: i64,
        clock_delta: i64,
    },
    Expire {
        keep_last: Option<usize>,
        newer_than_back: Option<i64>,
        clock_delta: i64,
    },
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => (1..1_000_000_i64, -50..500_i64).prop_map(|(rows, clock_delta)| Step::Successor { rows, clock_delta }),
        1 => (proptest::option::of(0..4_usize), proptest::option::of(0..1_000_i64), -50..500_i64)
            .prop_map(|(keep_last, newer_than_back, clock_delta)| Step::Expire { keep_last, newer_than_back, clock_delta }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn histories_keep_every_invariant(seed in any::<u64>(), start in 0..2_000_000_000_000_i64, steps in proptest::collection::vec(step(), 0..12)) {
        let registry = registry();
        let clock = ManualClock::new(start);
        let ids = SeededIds::new(seed);
        let mut metadata = IndexMetadata::create(contents(1, 0), BTreeMap::new(), &clock, &ids, &registry).expect("create");
        let mut successors = 0;
        for (build, step) in steps.into_iter().enumerate() {
            let (next, changed) = match step {
                Step::Successor { rows, clock_delta } => {
                    clock.advance(clock_delta);
                    successors += 1;
                    let next = metadata.successor(contents(rows, build as u64 + 1), &clock, &ids, &registry).expect("successor");
                    prop_assert_eq!(next.current_snapshot().contents().indexed_rows, rows);
                    prop_assert_eq!(next.current_snapshot().sequence_number(), next.last_sequence_number());
                    (next, true)
                }
                Step::Expire { keep_last, newer_than_back, clock_delta } => {
                    clock.advance(clock_delta);
                    let cutoff = newer_than_back.map(|back| clock.now_ms() - back);
                    let next = metadata.expire_snapshots(keep_last, cutoff, &clock).expect("expire");
                    prop_assert_eq!(next.last_sequence_number(), metadata.last_sequence_number());
                    prop_assert_eq!(next.current_snapshot(), metadata.current_snapshot());
                    prop_assert!(next.snapshots().len() <= metadata.snapshots().len());
                    let changed = next.snapshots().len() < metadata.snapshots().len();
                    (next, changed)
                }
            };
            // Expiry that removes nothing is a no-op, which a commit refuses.
            prop_assert_eq!(next.check_successor_of(&metadata).is_ok(), changed);
            prop_assert!(next.last_updated_ms() >= metadata.last_updated_ms());
            prop_assert_eq!(next.snapshot_log().last().map(SnapshotLogEntry::snapshot_id), Some(next.current_snapshot_id()));
            prop_assert_eq!(next.index_uuid(), metadata.index_uuid());
            let bytes = next.to_json_vec();
            let again = IndexMetadata::from_json_slice(&bytes, &registry).expect("canonical form parses");
            prop_assert_eq!(&again, &next);
            prop_assert_eq!(again.to_json_vec(), bytes);
            metadata = next;
        }
        prop_assert_eq!(metadata.last_sequence_number(), successors + 1);
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        if let Err(err) = IndexMetadata::from_json_slice(&bytes, &registry()) {
            prop_assert!(matches!(err.kind(), ErrorKind::InvalidIndexMetadata | ErrorKind::UnsupportedFormatVersion));
        }
    }

    #[test]
    fn mutated_spec_example_fails_cleanly_or_round_trips(position in 0..SPEC_EXAMPLE.len(), byte in any::<u8>()) {
        let mut bytes = SPEC_EXAMPLE.to_vec();
        bytes[position] = byte;
        match IndexMetadata::from_json_slice(&bytes, &registry()) {
            Ok(metadata) => {
                let canonical = metadata.to_json_vec();
                let again = IndexMetadata::from_json_slice(&canonical, &registry()).expect("canonical form parses");
                prop_assert_eq!(again.to_json_vec(), canonical);
            }
            Err(err) => prop_assert!(matches!(err.kind(), ErrorKind::InvalidIndexMetadata | ErrorKind::UnsupportedFormatVersion)),
        }
    }
}

#[test]
fn index_family_is_an_identity_field() {
    /// A second family with the same rules as `ivf` under another name.
    #[derive(Debug)]
    struct IvfCopy;
    impl crate::family::IndexFamily for IvfCopy {
        fn name(&self) -> &str {
            "ivf_copy"
        }
        fn schema_versions(&self) -> &[i32] {
            &[1]
        }
        fn roles(&self) -> &[&str] {
            &["ivf_centroids", "ivf_postings"]
        }
        fn metrics(&self) -> &[&str] {
            &["l2_squared"]
        }
        fn warehouse_references<'a>(&self, _: &'a BTreeMap<String, String>) -> Vec<&'a str> {
            Vec::new()
        }
    }
    let registry = registry().with_family(std::sync::Arc::new(IvfCopy));
    let two = include_bytes!("../../tests/fixtures/metadata/valid/two-snapshots.json");
    let mut value: serde_json::Value = serde_json::from_slice(two).expect("json");
    assert!(IndexMetadata::from_json_slice(two, &registry).is_ok());
    value["snapshots"][0]["index-family"] = "ivf_copy".into();
    expect_kind(
        IndexMetadata::from_json_slice(value.to_string().as_bytes(), &registry),
        ErrorKind::InvalidIndexMetadata,
        "snapshots[0].index-family: identity field differs",
    );
    // Both snapshots in the other family are fine.
    value["snapshots"][1]["index-family"] = "ivf_copy".into();
    let metadata =
        IndexMetadata::from_json_slice(value.to_string().as_bytes(), &registry).expect("valid");
    assert_eq!(metadata.summary_json()["index-family"], "ivf_copy");
    // The other family contributes no parameter references.
    assert_eq!(metadata.warehouse_references(&registry).len(), 3);
}

/// An integer beyond its field's range is out of range at its JSON path, however far
/// beyond (past the 64-bit range serde_json reads it as a float; past a float's range, as
/// malformed JSON, before the pre-pass); a number with a fraction or an exponent is no
/// integer.
#[test]
fn out_of_range_integers_name_their_field() {
    let text = std::str::from_utf8(SPEC_EXAMPLE).expect("utf-8");
    let huge = "9".repeat(400);
    for (field, value, fragment) in [
        (
            "\"indexed-rows\": 1000000",
            "99999999999999999999",
            "out of range for a long",
        ),
        (
            "\"indexed-rows\": 1000000",
            huge.as_str(),
            "out of range for a long",
        ),
        (
            "\"indexed-rows\": 1000000",
            "9223372036854775808",
            "out of range for a long",
        ),
        ("\"indexed-rows\": 1000000", "1e3", "no integer"),
        (
            "\"index-schema-version\": 1",
            "4294967297",
            "out of range for an int",
        ),
        (
            "\"index-schema-version\": 1",
            "-99999999999999999999",
            "out of range for an int",
        ),
        (
            "\"last-updated-ms\": 1750000000000",
            "-99999999999999999999",
            "out of range for a long",
        ),
        (
            "\"last-updated-ms\": 1750000000000",
            &format!("-{huge}"),
            "out of range for a long",
        ),
    ] {
        assert!(text.contains(field), "{field}");
        let name = field.split('"').nth(1).expect("name");
        let changed = text.replacen(field, &format!("\"{name}\": {value}"), 1);
        let err = IndexMetadata::from_json_slice(changed.as_bytes(), &registry()).expect_err(value);
        assert_eq!(
            err.kind(),
            ErrorKind::InvalidIndexMetadata,
            "{value}: {err}"
        );
        assert!(
            err.message().contains(fragment),
            "{value}: {}",
            err.message()
        );
        assert!(
            err.message().contains(name),
            "{value}: no path: {}",
            err.message()
        );
    }
}
