//! The publication suite: concurrent publishers, idempotent replays, declined reapplies,
//! expiry and ambiguous commits, written once over `(Arc<dyn IndexCatalog>, Warehouse)`
//! and instantiated per backend with [`publish_suite!`]:
//!
//! ```ignore
//! mod publish_suite;
//! async fn fresh() -> (Arc<dyn IndexCatalog>, Warehouse) { ... }
//! publish_suite!(fresh());
//! ```
#![allow(dead_code, unused_macros)]
#![allow(clippy::disallowed_methods)] // tests may read the wall clock and draw random ids (unique names)

pub mod hooked;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use parqdb_catalog::IndexCatalog;
use parqdb_catalog::Warehouse;
use parqdb_catalog::family::FamilyRegistry;
use parqdb_catalog::publish::request::handle_publish_json;
use parqdb_catalog::publish::{
    IDEMPOTENCY_KEY, Jitter, PublishOutcome, PublishPolicy, Published, Publisher, Retention,
};
use parqdb_catalog::{ErrorKind, IndexIdentifier, Namespace};
use parqdb_catalog::{IndexMetadata, SnapshotContents};
use parqdb_catalog_testkit::fixture;
use serde_json::json;

use hooked::{Action, Hooked};

/// The summary key naming the writer of a test snapshot.
pub const WRITER: &str = "writer";

/// The sample snapshot contents, distinct per `writer`: its source version, its tables'
/// directory and its summary's [`WRITER`].
pub fn contents(writer: &str) -> SnapshotContents {
    let tag: String = writer
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    SnapshotContents {
        source_table: fixture::source(writer),
        summary: BTreeMap::from([(WRITER.to_owned(), writer.to_owned())]),
        ..fixture::contents(&tag)
    }
}

/// A fresh namespace and an identifier in it (not yet created as an index).
pub async fn fresh_identifier(catalog: &dyn IndexCatalog, name: &str) -> IndexIdentifier {
    let namespace =
        Namespace::new([format!("publish-{}", uuid::Uuid::new_v4().simple())]).expect("valid");
    catalog
        .create_namespace(&namespace, BTreeMap::new())
        .await
        .expect("namespace created");
    IndexIdentifier::new(namespace, name).expect("valid identifier")
}

/// A created index with one snapshot by writer `initial`.
pub async fn created(publisher: &Publisher, name: &str) -> (IndexIdentifier, Published) {
    let id = fresh_identifier(publisher.catalog().as_ref(), name).await;
    let published = publisher
        .create_index(&id, contents("initial"), BTreeMap::new())
        .await
        .expect("index created");
    (id, published)
}

/// The current metadata of `id`, read independently of any publisher.
pub async fn current(
    catalog: &dyn IndexCatalog,
    warehouse: &Warehouse,
    id: &IndexIdentifier,
) -> (String, IndexMetadata) {
    let pointer = catalog.load(id).await.expect("loadable");
    let metadata = read(warehouse, &pointer.metadata_location).await;
    (pointer.metadata_location, metadata)
}

/// Read and validate one metadata file.
pub async fn read(warehouse: &Warehouse, location: &str) -> IndexMetadata {
    let bytes = warehouse.read_metadata(location).await.expect("readable");
    IndexMetadata::from_json_slice(&bytes, &FamilyRegistry::builtin()).expect("valid")
}

fn writer_of(metadata: &IndexMetadata, snapshot_id: i64) -> String {
    metadata
        .snapshot(snapshot_id)
        .expect("retained")
        .contents()
        .summary[WRITER]
        .clone()
}

/// `publishers` concurrent tasks each publish `each` successors on one index: exactly
/// `publishers × each` new snapshots, sequence numbers `2..=1 + publishers × each`, each
/// publisher's own strictly increasing, no publication lost. Returns the statistics.
pub async fn concurrent_publishers(
    catalog: Arc<dyn IndexCatalog>,
    warehouse: Warehouse,
    publishers: usize,
    each: usize,
    policy: PublishPolicy,
) -> Stats {
    let publisher = Publisher::new(catalog.clone(), warehouse.clone());
    let (id, _) = created(&publisher, "concurrent").await;
    let started = Instant::now();
    let mut tasks = Vec::new();
    for p in 0..publishers {
        // Each task has its own publisher (as separate processes would).
        let publisher = Publisher::builder(catalog.clone(), warehouse.clone())
            .policy(policy.clone())
            .build();
        let id = id.clone();
        tasks.push(tokio::spawn(async move {
            let mut results = Vec::new();
            for i in 0..each {
                let writer = format!("p{p}-{i}");
                let calls = AtomicUsize::new(0);
                let outcome = publisher
                    .publish(&id, |_| {
                        calls.fetch_add(1, Ordering::Relaxed);
                        Ok(Some(contents(&writer)))
                    })
                    .await
                    .unwrap_or_else(|err| panic!("{writer}: {}", err.full_message()));
                let published = outcome.published().expect("never declined");
                assert_eq!(calls.load(Ordering::Relaxed), published.attempts as usize);
                results.push((writer, published));
            }
            results
        }));
    }
    let mut all = Vec::new();
    for task in tasks {
        let results = task.await.expect("publisher task");
        let sequences: Vec<i64> = results.iter().map(|(_, p)| p.sequence_number).collect();
        assert!(
            sequences.windows(2).all(|w| w[0] < w[1]),
            "one publisher's sequence numbers increase: {sequences:?}"
        );
        all.extend(results);
    }
    let elapsed = started.elapsed();

    let total = publishers * each;
    let (_, metadata) = current(catalog.as_ref(), &warehouse, &id).await;
    assert_eq!(metadata.last_sequence_number(), 1 + total as i64);
    assert_eq!(
        metadata.snapshots().len(),
        1 + total,
        "no snapshot lost or duplicated"
    );
    let sequences: BTreeSet<i64> = all.iter().map(|(_, p)| p.sequence_number).collect();
    assert_eq!(
        sequences,
        (2..=1 + total as i64).collect(),
        "sequence numbers are dense and unique"
    );
    for (writer, published) in &all {
        assert_eq!(&writer_of(&metadata, published.snapshot_id), writer);
        let file = read(&warehouse, &published.metadata_location).await;
        assert_eq!(file.current_snapshot_id(), published.snapshot_id);
        assert_eq!(file.last_sequence_number(), published.sequence_number);
    }
    // The snapshot log is the chain of publications, in sequence order.
    let log: Vec<i64> = metadata
        .snapshot_log()
        .iter()
        .map(|entry| {
            metadata
                .snapshot(entry.snapshot_id())
                .expect("retained")
                .sequence_number()
        })
        .collect();
    assert_eq!(log, (1..=1 + total as i64).collect::<Vec<_>>());

    let attempts: Vec<u32> = all.iter().map(|(_, p)| p.attempts).collect();
    Stats {
        publishers,
        publications: total,
        elapsed,
        mean_attempts: attempts.iter().map(|&a| f64::from(a)).sum::<f64>() / total as f64,
        max_attempts: attempts.iter().copied().max().unwrap_or(0),
    }
}

/// The default policy with room for 16 writers publishing in a tight loop: there a
/// straggler can lose 15+ races in a row (measured up to 18 in debug builds under load),
/// close to the default's 20. Real refresh jobs publish minutes apart; the bound itself
/// is tested by [`bounded_attempts`].
pub fn tight_loop_policy() -> PublishPolicy {
    PublishPolicy {
        max_attempts: 64,
        ..PublishPolicy::default()
    }
}

/// Throughput statistics of [`concurrent_publishers`].
#[derive(Debug, Clone)]
pub struct Stats {
    pub publishers: usize,
    pub publications: usize,
    pub elapsed: Duration,
    pub mean_attempts: f64,
    pub max_attempts: u32,
}

impl std::fmt::Display for Stats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:>2} publishers: {:>4} publications in {:>7.2?} = {:>7.1}/s, attempts per publication mean {:.2} max {}",
            self.publishers,
            self.publications,
            self.elapsed,
            self.publications as f64 / self.elapsed.as_secs_f64(),
            self.mean_attempts,
            self.max_attempts
        )
    }
}

/// The same key twice → one snapshot and the same result; concurrent duplicates too.
pub async fn idempotent_replay(catalog: Arc<dyn IndexCatalog>, warehouse: Warehouse) {
    let publisher = Publisher::new(catalog.clone(), warehouse.clone());
    let (id, _) = created(&publisher, "idempotent").await;

    let first = publisher
        .publish_idempotent(&id, "event-1", contents("e1"))
        .await
        .expect("published");
    assert!(!first.already_published);
    assert_eq!(first.sequence_number, 2);
    let replay = publisher
        .publish_idempotent(&id, "event-1", contents("e1"))
        .await
        .expect("replayed");
    assert!(replay.already_published);
    assert_eq!(
        (
            &replay.metadata_location,
            replay.snapshot_id,
            replay.sequence_number
        ),
        (
            &first.metadata_location,
            first.snapshot_id,
            first.sequence_number
        )
    );
    let (location, metadata) = current(catalog.as_ref(), &warehouse, &id).await;
    assert_eq!(location, first.metadata_location);
    assert_eq!(metadata.snapshots().len(), 2);
    assert_eq!(
        metadata.current_snapshot().contents().summary[IDEMPOTENCY_KEY],
        "event-1"
    );

    // Still recognised after newer publications, with the original location.
    let second = publisher
        .publish_idempotent(&id, "event-2", contents("e2"))
        .await
        .expect("published");
    assert_eq!(second.sequence_number, 3);
    let late = publisher
        .publish_idempotent(&id, "event-1", contents("e1"))
        .await
        .expect("replayed");
    assert!(late.already_published);
    assert_eq!(
        (late.metadata_location, late.snapshot_id),
        (first.metadata_location.clone(), first.snapshot_id)
    );

    // Eight concurrent deliveries of one event publish once.
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let publisher = Publisher::new(catalog.clone(), warehouse.clone());
        let id = id.clone();
        tasks.push(tokio::spawn(async move {
            publisher
                .publish_idempotent(&id, "event-3", contents("e3"))
                .await
                .expect("published")
        }));
    }
    let mut results = Vec::new();
    for task in tasks {
        results.push(task.await.expect("task"));
    }
    assert_eq!(
        results.iter().filter(|r| !r.already_published).count(),
        1,
        "{results:?}"
    );
    let winner = results
        .iter()
        .find(|r| !r.already_published)
        .expect("one winner");
    for result in &results {
        assert_eq!(
            (&result.metadata_location, result.snapshot_id),
            (&winner.metadata_location, winner.snapshot_id)
        );
    }
    let (_, metadata) = current(catalog.as_ref(), &warehouse, &id).await;
    assert_eq!(metadata.snapshots().len(), 4);
    assert_eq!(metadata.last_sequence_number(), 4);

    // Bad keys are rejected before anything is written.
    for bad in ["", "a\nb"] {
        let err = publisher
            .publish_idempotent(&id, bad, contents("bad"))
            .await
            .expect_err("bad key");
        assert_eq!(err.kind(), ErrorKind::InvalidRequest);
    }
}

/// A lost race whose closure declines to reapply after seeing the winner's snapshot.
pub async fn declined_after_conflict(catalog: Arc<dyn IndexCatalog>, warehouse: Warehouse) {
    let plain = Publisher::new(catalog.clone(), warehouse.clone());
    let (id, _) = created(&plain, "declined").await;
    // Before our first commit lands, another writer publishes "theirs".
    let rival = plain.clone();
    let rival_id = id.clone();
    let hooked = Hooked::new(catalog.clone(), move |call| {
        let rival = rival.clone();
        let id = rival_id.clone();
        Box::pin(async move {
            if call == 1 {
                rival
                    .publish(&id, |_| Ok(Some(contents("theirs"))))
                    .await
                    .expect("rival published");
            }
            Action::Forward
        })
    });
    let publisher = Publisher::new(hooked.clone(), warehouse.clone());
    let mut seen = Vec::new();
    let outcome = publisher
        .publish(&id, |current| {
            let writer = current.current_snapshot().contents().summary[WRITER].clone();
            seen.push(writer.clone());
            // Our change is only valid on top of the initial snapshot.
            Ok((writer == "initial").then(|| contents("ours")))
        })
        .await
        .expect("no error");
    assert_eq!(seen, ["initial", "theirs"]);
    let PublishOutcome::Declined(declined) = outcome else {
        panic!("expected a decline: {outcome:?}")
    };
    assert_eq!(declined.attempts, 2);
    assert_eq!(declined.last_sequence_number, 2);
    assert_eq!(
        hooked.commits(),
        1,
        "the declined attempt committed nothing"
    );
    let (location, metadata) = current(catalog.as_ref(), &warehouse, &id).await;
    assert_eq!(location, declined.metadata_location);
    assert_eq!(
        writer_of(&metadata, metadata.current_snapshot_id()),
        "theirs"
    );
    assert!(
        metadata
            .snapshots()
            .iter()
            .all(|s| s.contents().summary[WRITER] != "ours")
    );
}

/// Expiry keeps the last N (and the current), preserves last-sequence-number, is a
/// no-op when nothing expires, and ends replay detection for expired keys.
pub async fn expire_keeps_last(catalog: Arc<dyn IndexCatalog>, warehouse: Warehouse) {
    let publisher = Publisher::new(catalog.clone(), warehouse.clone());
    let (id, _) = created(&publisher, "expire").await;
    let keyed = publisher
        .publish_idempotent(&id, "old-event", contents("keyed"))
        .await
        .expect("published");
    for i in 0..5 {
        publisher
            .publish(&id, |_| Ok(Some(contents(&format!("s{i}")))))
            .await
            .expect("published");
    }
    let (before_location, before) = current(catalog.as_ref(), &warehouse, &id).await;
    assert_eq!(before.snapshots().len(), 7);
    assert_eq!(before.last_sequence_number(), 7);

    let expired = publisher.expire(&id, Some(3), None).await.expect("expired");
    assert_ne!(expired.metadata_location, before_location);
    assert_eq!(expired.retained_snapshots, 3);
    assert_eq!(expired.expired_snapshot_ids.len(), 4);
    assert_eq!(expired.last_sequence_number, 7);
    assert_eq!(expired.current_snapshot_id, before.current_snapshot_id());
    let (location, after) = current(catalog.as_ref(), &warehouse, &id).await;
    assert_eq!(location, expired.metadata_location);
    assert_eq!(
        after.last_sequence_number(),
        7,
        "expiry preserves last-sequence-number"
    );
    let kept: BTreeSet<i64> = after
        .snapshots()
        .iter()
        .map(|s| s.sequence_number())
        .collect();
    assert_eq!(kept, BTreeSet::from([5, 6, 7]));
    assert_eq!(after.snapshot_log().len(), 3);

    // Nothing more to expire: no new file, no commit.
    let again = publisher.expire(&id, Some(3), None).await.expect("no-op");
    assert_eq!(again.metadata_location, location);
    assert!(again.expired_snapshot_ids.is_empty());

    // Time-based: everything older than the current snapshot goes.
    let newest = after.current_snapshot().timestamp_ms() + 1;
    let by_time = publisher
        .expire(&id, None, Some(newest))
        .await
        .expect("expired");
    assert_eq!(by_time.retained_snapshots, 1);
    assert_eq!(by_time.last_sequence_number, 7);

    // Sequence numbers continue; an expired idempotency key publishes again (the limit).
    let next = publisher
        .publish(&id, |_| Ok(Some(contents("next"))))
        .await
        .expect("published");
    assert_eq!(next.published().expect("published").sequence_number, 8);
    let again = publisher
        .publish_idempotent(&id, "old-event", contents("keyed"))
        .await
        .expect("published");
    assert!(!again.already_published);
    assert_ne!(again.snapshot_id, keyed.snapshot_id);
    assert_eq!(again.sequence_number, 9);
}

/// Issue 27, item 1: a publisher with a [`Retention`] publishes and expires in one commit;
/// `keep_last: Some(1)` keeps only the newest snapshot, the old current one included.
pub async fn publish_keeping_only_the_newest(catalog: Arc<dyn IndexCatalog>, warehouse: Warehouse) {
    let publisher = Publisher::builder(catalog.clone(), warehouse.clone())
        .retention(Retention {
            keep_last: Some(1),
            max_age: None,
        })
        .build();
    let (id, _) = created(&publisher, "newest-only").await;
    for i in 0..3 {
        let published = publisher
            .publish(&id, |_| Ok(Some(contents(&format!("n{i}")))))
            .await
            .expect("published")
            .published()
            .expect("not declined");
        assert_eq!(published.attempts, 1, "one commit");
        let (location, metadata) = current(catalog.as_ref(), &warehouse, &id).await;
        assert_eq!(location, published.metadata_location);
        assert_eq!(metadata.snapshots().len(), 1, "only the new snapshot");
        assert_eq!(metadata.current_snapshot_id(), published.snapshot_id);
        assert_eq!(metadata.last_sequence_number(), i + 2);
        assert_eq!(metadata.snapshot_log().len(), 1);
    }
    // An idempotent publication keeps its replay detection for the newest snapshot.
    let keyed = publisher
        .publish_idempotent(&id, "event-1", contents("keyed"))
        .await
        .expect("published");
    let replay = publisher
        .publish_idempotent(&id, "event-1", contents("keyed"))
        .await
        .expect("replayed");
    assert!(replay.already_published);
    assert_eq!(replay.snapshot_id, keyed.snapshot_id);
    // By age: with a zero maximum age only the new snapshot stays, as with keep_last 1.
    let aged = Publisher::builder(catalog.clone(), warehouse.clone())
        .retention(Retention {
            keep_last: None,
            max_age: Some(Duration::ZERO),
        })
        .build();
    let plain = Publisher::new(catalog.clone(), warehouse.clone());
    plain
        .publish(&id, |_| Ok(Some(contents("plain"))))
        .await
        .expect("published");
    assert_eq!(
        current(catalog.as_ref(), &warehouse, &id)
            .await
            .1
            .snapshots()
            .len(),
        2
    );
    tokio::time::sleep(Duration::from_millis(5)).await;
    aged.publish(&id, |_| Ok(Some(contents("aged"))))
        .await
        .expect("published");
    let (_, metadata) = current(catalog.as_ref(), &warehouse, &id).await;
    assert_eq!(metadata.snapshots().len(), 1);
    assert_eq!(metadata.last_sequence_number(), 7);
}

/// Ambiguous commits: landed → success; not landed and base unchanged → re-issued;
/// lost to a rival → reapplied; unresolvable → `COMMIT_STATE_UNKNOWN` with the file kept.
pub async fn ambiguous_commits(catalog: Arc<dyn IndexCatalog>, warehouse: Warehouse) {
    let plain = Publisher::new(catalog.clone(), warehouse.clone());

    // 1. The commit applied but the answer was lost.
    let (id, _) = created(&plain, "landed").await;
    let hooked = Hooked::first_commit(catalog.clone(), Action::ForwardThenUnknown);
    let publisher = Publisher::new(hooked.clone(), warehouse.clone());
    let published = publisher
        .publish(&id, |_| Ok(Some(contents("landed"))))
        .await
        .expect("resolved")
        .published()
        .expect("published");
    assert_eq!(published.attempts, 1);
    let (location, metadata) = current(catalog.as_ref(), &warehouse, &id).await;
    assert_eq!(location, published.metadata_location);
    assert_eq!(metadata.snapshots().len(), 2, "published once");

    // 2. The commit did not apply and nobody moved the pointer: the same commit is
    //    re-issued (same file), no second attempt.
    let (id, _) = created(&plain, "reissued").await;
    let hooked = Hooked::first_commit(catalog.clone(), Action::Unknown);
    let publisher = Publisher::new(hooked.clone(), warehouse.clone());
    let published = publisher
        .publish(&id, |_| Ok(Some(contents("reissued"))))
        .await
        .expect("resolved")
        .published()
        .expect("published");
    assert_eq!(published.attempts, 1);
    assert_eq!(hooked.commits(), 2);
    let news = hooked.new_locations();
    assert_eq!(news[0], news[1], "the same file was committed again");
    assert_eq!(
        current(catalog.as_ref(), &warehouse, &id).await.0,
        published.metadata_location
    );

    // 3. The commit did not apply and a rival took our sequence number: reapply.
    let (id, _) = created(&plain, "lost").await;
    let rival = plain.clone();
    let rival_id = id.clone();
    let hooked = Hooked::new(catalog.clone(), move |call| {
        let rival = rival.clone();
        let id = rival_id.clone();
        Box::pin(async move {
            if call == 1 {
                rival
                    .publish(&id, |_| Ok(Some(contents("rival"))))
                    .await
                    .expect("rival");
                Action::Unknown
            } else {
                Action::Forward
            }
        })
    });
    let publisher = Publisher::new(hooked.clone(), warehouse.clone());
    let published = publisher
        .publish(&id, |_| Ok(Some(contents("reapplied"))))
        .await
        .expect("reapplied")
        .published()
        .expect("published");
    assert_eq!(published.attempts, 2);
    assert_eq!(published.sequence_number, 3);
    let (_, metadata) = current(catalog.as_ref(), &warehouse, &id).await;
    assert_eq!(metadata.snapshots().len(), 3);

    // 4. Unresolvable: a rival publishes twice and expires everything but its last
    //    snapshot, so the current metadata cannot tell whether ours ever landed.
    let (id, _) = created(&plain, "unknown").await;
    let rival = plain.clone();
    let rival_id = id.clone();
    let hooked = Hooked::new(catalog.clone(), move |call| {
        let rival = rival.clone();
        let id = rival_id.clone();
        Box::pin(async move {
            if call == 1 {
                for writer in ["r1", "r2"] {
                    rival
                        .publish(&id, |_| Ok(Some(contents(writer))))
                        .await
                        .expect("rival");
                }
                rival
                    .expire(&id, Some(1), None)
                    .await
                    .expect("rival expiry");
                Action::Unknown
            } else {
                Action::Forward
            }
        })
    });
    let publisher = Publisher::new(hooked.clone(), warehouse.clone());
    let err = publisher
        .publish(&id, |_| Ok(Some(contents("ambiguous"))))
        .await
        .expect_err("unresolvable");
    assert_eq!(
        err.kind(),
        ErrorKind::CommitStateUnknown,
        "{}",
        err.full_message()
    );
    assert_eq!(
        hooked.commits(),
        1,
        "no blind retry after an unknown outcome"
    );
    let ours = &hooked.new_locations()[0];
    let kept = read(&warehouse, ours).await;
    assert_eq!(
        kept.current_snapshot().contents().summary[WRITER],
        "ambiguous",
        "the written file was left in place"
    );
}

/// Attempts are bounded: a catalog that always conflicts sees exactly `max_attempts`
/// commits, and the error is the last `COMMIT_CONFLICT`.
pub async fn bounded_attempts(catalog: Arc<dyn IndexCatalog>, warehouse: Warehouse) {
    let plain = Publisher::new(catalog.clone(), warehouse.clone());
    let (id, _) = created(&plain, "bounded").await;
    let hooked = Hooked::new(catalog.clone(), |_| Box::pin(async { Action::Conflict }));
    let policy = PublishPolicy {
        max_attempts: 4,
        base_delay: Duration::from_millis(1),
        max_delay: Duration::from_millis(4),
        jitter: Jitter::Equal,
    };
    let publisher = Publisher::builder(hooked.clone(), warehouse.clone())
        .policy(policy)
        .build();
    let mut calls = 0;
    let err = publisher
        .publish(&id, |_| {
            calls += 1;
            Ok(Some(contents("never")))
        })
        .await
        .expect_err("gave up");
    assert_eq!(err.kind(), ErrorKind::CommitConflict);
    assert!(
        err.message().contains("gave up after 4 attempts"),
        "{}",
        err.message()
    );
    assert_eq!((calls, hooked.commits()), (4, 4));

    // A closure error ends the run at once, whatever its kind.
    let err = plain
        .publish(&id, |_| {
            Err(parqdb_catalog::Error::new(
                ErrorKind::CommitConflict,
                "mine",
            ))
        })
        .await
        .expect_err("closure error");
    assert_eq!(err.message(), "mine");
    // Identity changes are refused before anything is committed.
    let mut changed = contents("changed");
    changed.metric = "cosine".into();
    let err = plain
        .publish(&id, |_| Ok(Some(changed.clone())))
        .await
        .expect_err("identity");
    assert_eq!(err.kind(), ErrorKind::InvalidIndexMetadata);
    let missing = IndexIdentifier::new(id.namespace().clone(), "missing").expect("valid");
    let err = plain
        .publish(&missing, |_| Ok(Some(contents("x"))))
        .await
        .expect_err("missing");
    assert_eq!(err.kind(), ErrorKind::IndexNotFound);
    let err = plain
        .create_index(&id, contents("again"), BTreeMap::new())
        .await
        .expect_err("exists");
    assert_eq!(err.kind(), ErrorKind::AlreadyExists);
}

/// The publish request contract (the Lambda function's body).
pub async fn publish_requests(catalog: Arc<dyn IndexCatalog>, warehouse: Warehouse) {
    let publisher = Publisher::new(catalog.clone(), warehouse.clone());
    let (id, _) = created(&publisher, "requests").await;
    let snapshot = serde_json::to_value(contents("lambda")).expect("json");
    let identifier = json!({"namespace": id.namespace().segments(), "name": id.name()});
    let request =
        json!({"identifier": identifier, "idempotency-key": "req-1", "snapshot": snapshot});
    let bytes = serde_json::to_vec(&request).expect("json");

    let first = handle_publish_json(&publisher, &bytes)
        .await
        .expect("published");
    assert_eq!(first["sequence-number"], 2);
    assert_eq!(first["already-published"], false);
    assert_eq!(first["attempts"], 1);
    let fields: BTreeSet<&str> = first
        .as_object()
        .expect("object")
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        fields,
        BTreeSet::from([
            "metadata-location",
            "snapshot-id",
            "sequence-number",
            "attempts",
            "already-published"
        ])
    );
    let replay = handle_publish_json(&publisher, &bytes)
        .await
        .expect("replayed");
    assert_eq!(replay["already-published"], true);
    assert_eq!(replay["metadata-location"], first["metadata-location"]);
    assert_eq!(replay["snapshot-id"], first["snapshot-id"]);

    let mut unknown = request.clone();
    unknown["extra"] = json!(1);
    let mut unknown_inner = request.clone();
    unknown_inner["snapshot"]["surprise"] = json!(true);
    let mut missing = request.clone();
    missing
        .as_object_mut()
        .expect("object")
        .remove("idempotency-key");
    let mut bad_identifier = request.clone();
    bad_identifier["identifier"]["name"] = json!("");
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (serde_json::to_vec(&unknown).expect("json"), "extra"),
        (
            serde_json::to_vec(&unknown_inner).expect("json"),
            "snapshot",
        ),
        (
            serde_json::to_vec(&missing).expect("json"),
            "idempotency-key",
        ),
        (
            serde_json::to_vec(&bad_identifier).expect("json"),
            "identifier",
        ),
        (b"[1, 2, 3]".to_vec(), "object"),
        (b"{\"identifier\": ".to_vec(), "request"),
        (b"null".to_vec(), "object"),
        (b"{} trailing".to_vec(), "request"),
    ];
    for (body, mentions) in cases {
        let err = handle_publish_json(&publisher, &body)
            .await
            .expect_err("invalid request");
        assert_eq!(
            err.kind(),
            ErrorKind::InvalidRequest,
            "{}",
            String::from_utf8_lossy(&body)
        );
        assert!(
            err.message().contains(mentions),
            "{} should mention {mentions}",
            err.message()
        );
    }
    // Parseable contents that break a metadata rule are INVALID_INDEX_METADATA.
    let mut other_family = request.clone();
    other_family["idempotency-key"] = json!("req-2");
    other_family["snapshot"]["index-family"] = json!("hnsw");
    let err = handle_publish_json(
        &publisher,
        &serde_json::to_vec(&other_family).expect("json"),
    )
    .await
    .expect_err("invalid metadata");
    assert_eq!(err.kind(), ErrorKind::InvalidIndexMetadata);
}

/// Instantiate the suite for one backend: `$fresh` is an expression evaluating to a
/// future of `(Arc<dyn IndexCatalog>, Warehouse)`, a fresh catalog per test.
#[macro_export]
macro_rules! publish_suite {
    ($fresh:expr) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn four_publishers_ten_each() {
            let (catalog, warehouse) = $fresh.await;
            let policy = parqdb_catalog::PublishPolicy::default();
            let stats =
                $crate::support::publish::concurrent_publishers(catalog, warehouse, 4, 10, policy).await;
            eprintln!("{stats}");
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn sixteen_publishers() {
            let (catalog, warehouse) = $fresh.await;
            let stats = $crate::support::publish::concurrent_publishers(
                catalog,
                warehouse,
                16,
                4,
                $crate::support::publish::tight_loop_policy(),
            )
            .await;
            eprintln!("{stats}");
        }

        publish_suite!(@cases $fresh;
            4 => idempotent_replay,
            2 => declined_after_conflict,
            2 => expire_keeps_last,
            2 => publish_keeping_only_the_newest,
            2 => ambiguous_commits,
            2 => bounded_attempts,
            2 => publish_requests
        );
    };
    // One test per case: `$crate::support::publish::$case(catalog, warehouse)` on a fresh backend,
    // with `$threads` worker threads.
    (@cases $fresh:expr; $($threads:literal => $case:ident),+) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = $threads)]
            async fn $case() {
                let (catalog, warehouse) = $fresh.await;
                $crate::support::publish::$case(catalog, warehouse).await;
            }
        )+
    };
}
