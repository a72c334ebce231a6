//! Round 143: round 141's stale clock file on a metadata file, behind a run that records
//! no clock for it. A clock put of run M, stalled past its lease, lands after G (which
//! reached the file) swept M's clock file, dated no later than M's finish mark by a store
//! clock stepped back within the skew. The run after G ignores it (G reached the file),
//! but records no clock itself (a publication in flight keeps the clock pending, or a
//! nested structure keeps the file), so the run after that, whose previous did not reach
//! the file, counted M's file again: condemned 49 h and deleted 61 h after the loss
//! (retention 168 h, default settings). `metadata/` now carries its clocks on the plan's
//! assessed pages as `indexes/` does on the scan's, so a clock file of an earlier run
//! counts only where the previous run neither reached the file nor carried clocks.
#![allow(clippy::disallowed_methods)] // tests may read the wall clock

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use parqdb_catalog::SeededIds;
use parqdb_catalog::gc::GcConfig;
use parqdb_catalog::store::{PointerStore, StoreError};
use parqdb_catalog::{Catalog, ErrorKind, IndexCatalog};
use parqdb_catalog_testkit::store::{Call, Hook, Hooked};

use crate::support::gc::{Env, HOUR, Layout, MINUTE};

/// A pointer store whose reads of one key wait until released (a slow first read of a
/// register, or a writer paused there).
struct SlowRead {
    key: String,
    released: Arc<tokio::sync::Semaphore>,
}

#[async_trait]
impl Hook for SlowRead {
    async fn before(
        &self,
        _inner: &Arc<dyn PointerStore>,
        call: Call<'_>,
    ) -> Result<(), StoreError> {
        if let Call::Get { key } = call
            && key.as_str() == self.key
        {
            self.released.acquire().await.expect("not closed").forget();
        }
        Ok(())
    }
}

/// The change-log entries of the warehouse.
async fn log_entries(env: &Env) -> Vec<String> {
    env.objects()
        .await
        .into_iter()
        .filter(|name| name.starts_with("_gc/changes/"))
        .collect()
}

/// When the ledger condemned `watched` (a metadata file: its own `c-` files), in hours
/// after `lost_at`.
async fn condemned_at(env: &Env, watched: &str, lost_at: i64) -> String {
    let mut found = Vec::new();
    for file in env.ledger_files().await {
        let Some((entry, fact)) = file.rsplit_once('/') else {
            continue;
        };
        if entry.trim_start_matches("_gc/ledger/") != watched {
            continue;
        }
        let Some(rest) = fact.strip_prefix("c-") else {
            continue;
        };
        let ms: i64 = rest
            .split('-')
            .next()
            .and_then(|ms| ms.parse().ok())
            .expect("a stamp");
        found.push(format!(
            "condemned {} h after the loss",
            (ms - lost_at) / HOUR
        ));
    }
    found.join(", ")
}

/// Round 143, A (`metadata/`): round 141's stalled clock file, on a metadata file, and a
/// run in between that records no clock for it because a change-log entry logged within
/// `settle` before its walk names it, an entry withdrawn afterwards (a register of the
/// file under a name already taken: it logs, reads, fails with `ALREADY_EXISTS` and
/// withdraws its entry, as it must).
///
/// Default settings (retention 7 days, grace 1 h, skew 5 min), Local backend, the store's
/// clock (the machine's) stepped back 4 minutes (within the skew) after G, as in round
/// 141 A:
/// 1. `old` registered (its metadata file X), dropped an hour later; M (first run) finds
///    X unreachable and writes its clock file (metadata clocks are files);
/// 2. X registered again as `again` (a logged publication); G (previous M) reaches X and
///    its finish sweeps M's clock file; M's stalled put of that clock file lands after the
///    sweep, dated before M's finish mark (the clock stepped back);
/// 3. five days later `again` is dropped: X loses reachability (`lost_at`);
/// 4. an hour later a register of X as `live` (taken) logs its entry, is slow on its first
///    pointer read, while H plans: H (previous G, which reached X: M's file superseded)
///    finds X unreachable, but its walk is within `settle` of that entry, so its clock is
///    pending and H writes no clock file; H prunes the register and drop of `again`
///    (settled for its walk); the register fails and withdraws its entry;
/// 5. runs every 12 h: K (previous H, which did not reach X) counts M's stale file (round
///    141's rule for `metadata/` is only "the previous run reached it"), whose walk came
///    before G's: X is condemned 49 h and deleted 61 h after its loss.
#[tokio::test]
async fn r143_a_metadata_clock_file_behind_a_pending_run_and_a_withdrawn_entry() {
    metadata_clock_file_behind_a_pending_run(14301, true, AtH::EntryInFlight).await;
}

/// Round 143, A': as A, but H records no clock for X because a nested catalog structure
/// (another warehouse's ownership marker) sits in X's directory while H runs and is moved
/// away afterwards (hostile layouts, class 3): X is kept as nested by H, and K trusts M's
/// stale file as in A.
#[tokio::test]
async fn r143_a_metadata_clock_file_behind_a_run_that_found_it_nested() {
    metadata_clock_file_behind_a_pending_run(14307, true, AtH::NestedMarker).await;
}

/// What keeps H from recording a clock for X.
#[derive(Clone, Copy, PartialEq, Eq)]
enum AtH {
    /// Nothing: H records X's clock (control).
    Nothing,
    /// A register of X, logged within `settle` before H's walk, withdrawn after.
    EntryInFlight,
    /// An ownership marker of another warehouse in X's directory during H.
    NestedMarker,
}

/// Control: without M's stalled put, X is kept through the retention.
#[tokio::test]
async fn r143_a_control_without_the_stalled_put() {
    metadata_clock_file_behind_a_pending_run(14303, false, AtH::EntryInFlight).await;
}

/// Control: without the register in flight at H (H records X's clock), X is kept.
#[tokio::test]
async fn r143_a_control_without_the_entry_in_flight_at_h() {
    metadata_clock_file_behind_a_pending_run(14305, true, AtH::Nothing).await;
}

async fn metadata_clock_file_behind_a_pending_run(seed: u64, stalled: bool, at_h: AtH) {
    let env = Env::open_ahead_of_real_time(seed).await;
    let config = GcConfig::default();
    let skew = config.max_clock_skew.as_millis() as i64;
    let retention = config.retention.as_millis() as i64;

    let old = Layout::under("old/1");
    let (old_id, _, x_location) = env.register("old", &old).await;
    let x = env.relative(&x_location);
    let live = Layout::under("live/1");
    let (live_id, _, _) = env.register("live", &live).await;
    env.advance(HOUR);
    env.catalog.drop_index(&old_id).await.expect("dropped");
    env.advance(HOUR);

    // 1. M starts X's clock (a clock file).
    let m = env
        .collect_completed(&config)
        .await
        .run_id
        .simple()
        .to_string();
    let m_clocks: Vec<String> = env
        .ledger_files()
        .await
        .into_iter()
        .filter(|f| f.contains(&m) && f.starts_with(&format!("_gc/ledger/{x}/o-")))
        .collect();
    assert!(!m_clocks.is_empty(), "M wrote a clock file for X");

    // 2. X published again; G reaches it and sweeps M's clock file.
    env.advance(MINUTE);
    let again = env.publish("again", &old, &x_location).await;
    env.advance(MINUTE);
    env.collect_completed(&config).await;
    let files = env.ledger_files().await;
    assert!(
        m_clocks.iter().all(|f| !files.contains(f)),
        "G's sweep cleared M's clock file"
    );
    // M's stalled put lands, the machine clock (4 min fast) stepped back meanwhile.
    env.clock.set(env.now() - 4 * MINUTE);
    if stalled {
        for file in &m_clocks {
            env.put_raw(file, b"{}").await;
        }
    }

    // 3. X loses reachability.
    env.advance(5 * 24 * HOUR);
    env.catalog.drop_index(&again).await.expect("dropped");
    let lost_at = env.now();

    // 4. A register of X under a taken name, slow on its first pointer read, while H runs.
    env.advance(HOUR);
    if at_h == AtH::Nothing {
        env.collect_completed(&config).await; // H
    } else if at_h == AtH::NestedMarker {
        let dir = x.rsplit_once('/').expect("a directory").0;
        let marker = format!("{dir}/_catalog-owner.json");
        env.put_raw(&marker, b"{}").await;
        env.collect_completed(&config).await; // H
        let root = env.local_dir.clone().expect("local");
        std::fs::remove_file(root.join(&marker)).expect("moved away");
    } else {
        let entries_before = log_entries(&env).await.len();
        let released = Arc::new(tokio::sync::Semaphore::new(0));
        let slow = Catalog::builder(
            Arc::new(Hooked::new(
                env.pointer_store.clone(),
                SlowRead {
                    key: live_id.store_key().as_str().to_owned(),
                    released: released.clone(),
                },
            )),
            env.warehouse.clone(),
        )
        .clock(env.clock.clone())
        .ids(Arc::new(SeededIds::new(14302)))
        .probe_on_first_write(false)
        .build();
        let register = {
            let (live_id, source, x_location) =
                (live_id.clone(), live.source.clone(), x_location.clone());
            tokio::spawn(async move { slow.register(&live_id, Some(&source), &x_location).await })
        };
        tokio::time::timeout(Duration::from_secs(30), async {
            while log_entries(&env).await.len() <= entries_before {
                tokio::task::yield_now().await;
            }
        })
        .await
        .expect("the register logs its entry");
        env.collect_completed(&config).await; // H
        released.add_permits(1000);
        let outcome = register.await.expect("joined");
        assert_eq!(
            outcome.expect_err("the name is taken").kind(),
            ErrorKind::AlreadyExists
        );
        assert!(
            log_entries(&env).await.len() <= entries_before,
            "the failed register withdrew its entry"
        );
    }

    // 5. Runs every 12 hours until the retention (less the skew) has passed.
    while env.now() < lost_at + retention - skew {
        env.advance(12 * HOUR);
        env.collect(&config).await;
        assert!(
            env.exists(&x).await,
            "{x} deleted {} h after losing reachability (retention 168 h; {})",
            (env.now() - lost_at) / HOUR,
            condemned_at(&env, &x, lost_at).await
        );
    }
}
