//! Round 137: a run the plan counted as dead whose own finish mark lands after the plan
//! (its finish paused after its checks, before its last put). On a warehouse where no run
//! had finished, the plan's floor is the epoch; had the late run's facts been trusted,
//! its clock from a walk before a run the plan gave up (whose walk found the object
//! reachable through a link no change-log entry records) would have stood, and the object
//! gone about an hour after its loss (retention 2 h). A plan trusts no fact of a run it
//! counted as dead (a run marked dead whose stamped finish mark lands is still finished:
//! round 138). Round 139: nor does any later run, behind the first run to finish on a
//! fresh warehouse, since that run's floor is its own walk.

use std::sync::Arc;
use std::time::Duration;

use crate::support::gc::hooked_store::{
    HookedStore, collect_in_background, process_over, resume_and_join,
};
use crate::support::gc::{
    Backend, Env, GivenUp, HOUR, Layout, MINUTE, put_untrusted_clock_files, run_until, test_config,
};
use parqdb_catalog::gc::{GcConfig, GcStatus, GcStep};
use parqdb_catalog::{IndexCatalog, IndexIdentifier, IndexMetadata};

/// The stem `<run-ms>-<run>` of run `run`'s journal, and when the journal landed.
async fn journal_of(env: &Env, run: uuid::Uuid) -> (String, i64) {
    let id = run.simple().to_string();
    let name = env
        .journal_files()
        .await
        .into_iter()
        .find(|f| f.contains(&id) && f.ends_with(".json"))
        .unwrap_or_else(|| panic!("the journal of {id}"));
    // As a local warehouse's listing dates it: the later of its modification and birth.
    let meta = std::fs::metadata(env.local_dir.clone().expect("local").join(&name))
        .expect("the journal's metadata");
    let ms = |t: std::time::SystemTime| {
        t.duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
    };
    let landed = ms(meta.modified().expect("mtime")).max(ms(meta.created().expect("birth")));
    let stem = name
        .trim_start_matches("_gc/journal/")
        .trim_end_matches(".json")
        .to_owned();
    (stem, landed)
}

/// What a finish writes for `run` marked dead.
async fn mark_dead(env: &Env, run: uuid::Uuid) {
    let (stem, _) = journal_of(env, run).await;
    env.put_raw(&format!("_gc/journal/{stem}.dead"), b"{}")
        .await;
}

/// What `run`'s own finish writes last: its finish mark, stamped with its journal's
/// landing time (the put of a process paused right before it, landing now).
async fn land_finish_mark(env: &Env, run: uuid::Uuid) {
    let (stem, landed) = journal_of(env, run).await;
    env.put_raw(&format!("_gc/journal/{stem}.{landed}.done"), b"{}")
        .await;
}

/// Whether the late run `m` is marked dead by a finish that failed or
/// only unfinished (counted dead by the plan through its unfinished journal).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Counted {
    MarkedDead,
    Unfinished,
}

async fn late_finish_on_a_fresh_warehouse(seed: u64, counted: Counted) {
    let env = Env::open(Backend::Local, seed).await;
    let config = test_config();
    let root = env.local_dir.clone().expect("local");
    let (old, live, watched) = dropped_beside_live(&env).await;
    // M (the warehouse's first run): plan, scans (starting the postings' clocks, as clock
    // files), verification, deletes and sweep; its finish passes `still_current` and its
    // fence, and the process pauses right before the put of its finish mark.
    env.advance(10 * MINUTE);
    let m = run_until(&env, &config, GivenUp::AfterSweep).await;
    let m_id = m.simple().to_string();
    let m_clocks: Vec<String> = env
        .ledger_files()
        .await
        .into_iter()
        .filter(|f| f.contains(&m_id) && watched.iter().any(|w| f.contains(w.as_str())))
        .collect();
    assert!(!m_clocks.is_empty(), "M wrote clock files for the postings");
    // The operator gives M up (its process seems hung): its lease is broken.
    assert_eq!(
        env.gc(config.clone()).abandon().await.expect("abandon"),
        Some(m)
    );
    // The live table's postings become a link to the dropped ones; L walks through the
    // link (the postings are reachable), scans, verifies, and is given up before its
    // sweep.
    env.advance(10 * MINUTE);
    let unlink = link_postings(&root, &live, &old);
    env.advance(MINUTE);
    let l = run_until(&env, &config, GivenUp::BeforeSweep).await;
    assert_eq!(
        env.gc(config.clone()).abandon().await.expect("abandon"),
        Some(l)
    );
    // The link stays an hour and goes: the postings lose reachability now.
    env.advance(HOUR + 10 * MINUTE);
    unlink();
    let lost_at = env.now();
    if counted == Counted::MarkedDead {
        // F counts M and L dead; its finish marks them `.dead` and fails on its own
        // finish mark; the operator gives F up.
        env.advance(MINUTE);
        let f = run_until(&env, &config, GivenUp::AfterSweep).await;
        mark_dead(&env, m).await;
        mark_dead(&env, l).await;
        assert_eq!(
            env.gc(config.clone()).abandon().await.expect("abandon"),
            Some(f)
        );
    }
    // G plans: M is counted (marked dead, or unfinished), L too; no run has finished, so
    // its floor is the epoch.
    env.advance(MINUTE);
    let g = env.gc(config.clone());
    // Its plan step stops after the plan and journal are written (a budget spent), before
    // it reads `metadata/`.
    let plan = g
        .step(GcStep::Plan, env.now(), Some(Duration::ZERO))
        .await
        .expect("plan");
    assert!(!plan.done, "the plan step stops at its budget");
    // M's paused process wakes: its finish mark lands, after G's plan.
    land_finish_mark(&env, m).await;
    // Kept through the retention, and not even condemned before it has elapsed (a
    // dropped index's metadata file, still there, would keep the postings by reference
    // and hide a clock dated before the loss).
    let retention = config.retention.as_millis() as i64;
    env.assert_kept_through_retention(lost_at, 10 * MINUTE, &watched, " (round 137)", async || {
        env.collect(&config).await;
        assert_not_condemned_before(&env, &watched, lost_at, lost_at + retention).await;
    })
    .await;
}

/// That the ledger records no condemnation of any of `watched` stamped before `not_before`
/// (a `c-` file of the object, or a condemnation marker of its directory); `lost_at` is
/// when they lost reachability.
async fn assert_not_condemned_before(env: &Env, watched: &[String], lost_at: i64, not_before: i64) {
    for file in env.ledger_files().await {
        let Some((entry, fact)) = file.rsplit_once('/') else {
            continue;
        };
        let entry = entry.trim_start_matches("_gc/ledger/");
        let stamp = |fact: &str| -> i64 {
            fact.split('-')
                .next()
                .and_then(|ms| ms.parse().ok())
                .expect("a stamp")
        };
        let condemned: Vec<&String> = if let Some(fact) = fact.strip_prefix("c-") {
            let _ = stamp(fact);
            watched.iter().filter(|w| entry == w.as_str()).collect()
        } else if fact.starts_with("n-") {
            let dir = format!("{entry}/");
            watched.iter().filter(|w| w.starts_with(&dir)).collect()
        } else {
            continue;
        };
        let ms = stamp(&fact[2..]);
        if let Some(object) = condemned.first() {
            assert!(
                ms >= not_before,
                "`{object}` condemned {} min after losing reachability",
                (ms - lost_at) / MINUTE
            );
        }
    }
}

/// M marked dead by a finish that failed after marking it (round 137's first fix counts
/// such runs in the next plan), then M's own finish mark lands after that plan.
#[tokio::test]
async fn r137_a_run_marked_dead_before_the_plan_that_finishes_after_it_is_never_trusted() {
    late_finish_on_a_fresh_warehouse(13701, Counted::MarkedDead).await;
}

/// The same with M only unfinished when G plans (a gap older than round 137).
#[tokio::test]
async fn r137_an_unfinished_run_the_plan_counted_that_finishes_after_it_is_never_trusted() {
    late_finish_on_a_fresh_warehouse(13702, Counted::Unfinished).await;
}

/// Commit a successor of `head` (the index's metadata and its location) under `layout`,
/// keeping the last snapshot; `head` becomes the new one.
async fn commit_as(
    env: &Env,
    index: &IndexIdentifier,
    head: &mut (IndexMetadata, String),
    layout: &str,
) {
    let next = Layout::under(layout);
    let (successor, at) = env.successor(&head.0, &next, Some(1)).await;
    env.catalog
        .commit(index, Some(&next.source), &head.1, &at)
        .await
        .expect("committed");
    *head = (successor, at);
}

/// Set up round 138's scenario (see its test).
async fn a_legitimate_finish_marked_dead_after_it(env: &Env, config: &GcConfig) {
    // A busy index, and a dropped one whose files must go after the retention.
    let (busy, metadata, location) = env.register("busy", &Layout::under("busy/0")).await;
    let mut head = (metadata, location);
    // One commit first: P sees a commit that did not create the record.
    env.advance(MINUTE);
    commit_as(env, &busy, &mut head, "busy/first").await;
    env.advance(10 * MINUTE);
    // P: finished; its journal sees busy's record at its first commit.
    env.collect_completed(config).await;
    // Busy commits more often than a record remembers (HISTORY = 16).
    for n in 1..=20 {
        env.advance(1_000);
        commit_as(env, &busy, &mut head, &format!("busy/{n}")).await;
    }
    env.advance(HOUR);
    // Z: a process whose finish passes its checks and fence and pauses at the put of its
    // own finish mark.
    let hooked_z = Arc::new(
        HookedStore::new(Arc::new(env.sim.clone()))
            .pause_on(|key| key.contains("_gc/journal/") && key.ends_with(".done")),
    );
    let z = collect_in_background(env, process_over(env, hooked_z.clone(), 13801, config));
    hooked_z.paused().await;
    // The operator gives Z up (hung); Y plans and stops after its plan (budget spent).
    env.gc(config.clone()).abandon().await.expect("abandon");
    env.advance(MINUTE);
    let hooked_y = Arc::new(
        HookedStore::new(Arc::new(env.sim.clone()))
            .fail_on(|key| key.contains("_gc/journal/") && key.ends_with(".done")),
    );
    let y_plan = process_over(
        env,
        hooked_y.clone(),
        13802,
        &GcConfig {
            budget: Some(Duration::ZERO),
            ..config.clone()
        },
    )
    .collect(env.now())
    .await
    .expect("Y plans");
    assert_eq!(y_plan.status, GcStatus::InProgress);
    // Busy is busy: it commits on, past a record's memory again (these links are kept).
    for n in 21..=40 {
        env.advance(1_000);
        commit_as(env, &busy, &mut head, &format!("busy/{n}")).await;
    }
    // Z wakes: its finish mark lands, and it prunes the change log and the links.
    resume_and_join(&hooked_z, z).await;
    // Y goes on; its finish marks Z dead and fails on its own finish mark.
    env.advance(MINUTE);
    process_over(env, hooked_y.clone(), 13803, config)
        .collect(env.now())
        .await
        .expect_err("Y's finish fails on its own mark");
    assert_eq!(
        env.gc(config.clone()).abandon().await.expect("abandon"),
        Some(y_plan.run_id)
    );
}

/// The first fix of round 137 made a run marked dead never finish; a fresh attack (round
/// 138) broke collection with it. A run's finish, fenced and then paused before its finish
/// mark, is given up and counted dead by the next plan (Y); it then lands its mark and
/// prunes the change log and the commit links since the previous run, as a finished run
/// does; Y's finish marks it dead and fails; Y is given up. Had the mark made the late
/// run unfinished, the previous finished run would have gone back to the one before, a
/// busy index's record (more commits than a record remembers) would no longer descend from
/// what that run saw, and every later run would have restarted every clock: nothing
/// collected, for ever. The late run stays finished (no plan that counted it dead trusts
/// its facts: `RunContext::trust`), and collection goes on.
#[tokio::test]
async fn r138_a_legitimate_finish_marked_dead_after_it_does_not_stop_collection() {
    let env = Env::open(Backend::Memory, 13800).await;
    let config = test_config();
    let old = Layout::under("old/1");
    let (old_id, _, _) = env.register("old", &old).await;
    a_legitimate_finish_marked_dead_after_it(&env, &config).await;
    env.advance(MINUTE);
    env.catalog.drop_index(&old_id).await.expect("dropped");
    let dropped_at = env.now();
    let watched = old.files();
    while !env.none_exist(&watched).await && env.now() < dropped_at + 12 * HOUR {
        env.advance(10 * MINUTE);
        env.collect(&config).await;
    }
    assert!(
        env.none_exist(&watched).await,
        "{} of {} dropped files still there {} h after the drop (retention 2 h)",
        watched.len() - env.missing(&watched).await.len(),
        watched.len(),
        (env.now() - dropped_at) / HOUR
    );
}

/// Round 139, A1. M, the warehouse's first run, is given up with two of its processes
/// paused: a scan invocation at the put of a clock file (after its lease check), and its
/// finish at the put of its finish mark. G, the next run, counts M dead and is the first
/// run to finish. G's walk finds the dropped postings reachable (a link no change-log
/// entry records) and its sweep clears their entries. Then M's paused puts land: the
/// clock file (before M's finish mark, so trusted), then the finish mark (round 138: M is
/// finished). The link goes. H and later runs (previous G) do not count M dead, so only
/// the floor keeps M's clock, from a walk before G's, from standing: G's floor was the
/// epoch (no run had finished), and the postings were condemned 70 minutes and deleted
/// 100 minutes after they lost reachability (retention 2 h). G's floor is now its walk.
#[tokio::test]
async fn r139_a_late_finisher_behind_the_first_finished_run_dates_no_loss_before_its_walk() {
    let env = Env::open(Backend::Local, 13901).await;
    let config = test_config();
    let root = env.local_dir.clone().expect("local");
    let (old, live, watched) = dropped_beside_live(&env).await;
    // M: everything but its finish mark.
    env.advance(10 * MINUTE);
    let m = run_until(&env, &config, GivenUp::AfterSweep).await;
    let m_id = m.simple().to_string();
    let m_clocks: Vec<String> = env
        .ledger_files()
        .await
        .into_iter()
        .filter(|f| f.contains(&m_id) && watched.iter().any(|w| f.contains(w.as_str())))
        .collect();
    assert!(!m_clocks.is_empty(), "M wrote clock files for the postings");
    let gc = env.gc(config.clone());
    assert_eq!(gc.abandon().await.expect("abandon"), Some(m));
    // The live table's postings become a link to the dropped ones.
    env.advance(10 * MINUTE);
    let unlink = link_postings(&root, &live, &old);
    // G: the first run to finish; it walks through the link and clears the entries.
    env.advance(MINUTE);
    env.collect_completed(&config).await;
    late_writes_land(&env, m, &m_clocks).await;
    // The link stays a while and goes: the postings lose reachability now.
    env.advance(40 * MINUTE);
    unlink();
    let lost_at = env.now();
    let retention = config.retention.as_millis() as i64;
    env.assert_kept_through_retention(
        lost_at,
        10 * MINUTE,
        &watched,
        " (round 139 A1)",
        async || {
            env.collect(&config).await;
            assert_not_condemned_before(&env, &watched, lost_at, lost_at + retention).await;
        },
    )
    .await;
}

/// Round 139, A2, with no paused clock write: M's finish paused at its mark; L walks
/// through a link, finds the postings reachable, and is given up before its sweep; G, the
/// first run to finish, sees the postings young (another tool touched them in place), so
/// it records no clock and leaves M's clock file alone; their old modification times are
/// put back (`cp -p`, `rsync -t`, `touch -d`) and M's mark lands. H (previous G) trusted
/// M's clock, from a walk before L's: condemned 81 minutes after the loss (retention 2 h).
#[tokio::test]
async fn r139_a_young_object_at_the_first_finished_run_keeps_no_clock_of_a_late_finisher() {
    let env = Env::open(Backend::Local, 13903).await;
    let config = test_config();
    let root = env.local_dir.clone().expect("local");
    let (old, live, watched) = dropped_beside_live(&env).await;
    env.advance(10 * MINUTE);
    let m = run_until(&env, &config, GivenUp::AfterSweep).await;
    let gc = env.gc(config.clone());
    assert_eq!(gc.abandon().await.expect("abandon"), Some(m));
    env.advance(10 * MINUTE);
    let unlink = link_postings(&root, &live, &old);
    env.advance(MINUTE);
    let l = run_until(&env, &config, GivenUp::BeforeSweep).await;
    assert_eq!(gc.abandon().await.expect("abandon"), Some(l));
    env.advance(30 * MINUTE);
    unlink();
    let lost_at = env.now();
    // A tool touches the dropped postings in place; G runs and finishes.
    let times: Vec<(std::path::PathBuf, std::time::SystemTime)> = watched
        .iter()
        .map(|w| {
            let path = root.join(w);
            let meta = std::fs::metadata(&path).expect("the file's metadata");
            (path, meta.modified().expect("mtime"))
        })
        .collect();
    for (path, _) in &times {
        crate::support::gc::set_mtime(path, env.now());
    }
    env.advance(MINUTE);
    env.collect_completed(&config).await;
    // Their old times are put back; M's paused finish lands its mark.
    for (path, mtime) in &times {
        std::fs::File::options()
            .write(true)
            .open(path)
            .and_then(|file| file.set_modified(*mtime))
            .expect("old time back");
    }
    land_finish_mark(&env, m).await;
    let retention = config.retention.as_millis() as i64;
    env.assert_kept_through_retention(
        lost_at,
        10 * MINUTE,
        &watched,
        " (round 139 A2)",
        async || {
            env.collect(&config).await;
            assert_not_condemned_before(&env, &watched, lost_at, lost_at + retention).await;
        },
    )
    .await;
}

/// An index `old` registered and dropped an hour later beside a live index `live`, the
/// postings of `old` holding clock files of an earlier release's run (so scans write
/// clock files for them too): the layouts, and the postings of `old`.
async fn dropped_beside_live(env: &Env) -> (Layout, Layout, Vec<String>) {
    let old = Layout::under("old/1");
    let (old_id, _, _) = env.register("old", &old).await;
    let live = Layout::under("live/1");
    env.register("live", &live).await;
    env.advance(HOUR);
    env.catalog.drop_index(&old_id).await.expect("dropped");
    put_untrusted_clock_files(env, &old).await;
    let watched = old
        .files()
        .into_iter()
        .filter(|file| file.starts_with(&old.postings))
        .collect();
    (old, live, watched)
}

/// Make `live`'s postings directory (under the local warehouse `root`) a symbolic link to
/// `old`'s, which no change-log entry records; the returned closure puts it back.
fn link_postings(root: &std::path::Path, live: &Layout, old: &Layout) -> impl FnOnce() {
    let postings = root.join(live.postings.trim_end_matches('/'));
    let stash = root.join("stash-postings");
    std::fs::rename(&postings, &stash).expect("moved away");
    let target = format!("../../{}", old.postings.trim_start_matches("indexes/"));
    std::os::unix::fs::symlink(target.trim_end_matches('/'), &postings).expect("linked");
    move || {
        std::fs::remove_file(&postings).expect("unlinked");
        std::fs::rename(&stash, &postings).expect("moved back");
    }
}

/// Round 140: round 139 A1 with the runs close together and G's clock behind M's by less
/// than the skew allowance (1 min here). Thirty seconds after M's walk, G plans with a
/// clock 50 s behind, so its floor (its own walk) is, by its clock, 20 s before M's walk
/// by M's: the floor did not void M's clock, whose walk came before G's (which found the
/// postings reachable through the link). Condemned 80 minutes and deleted 100 minutes
/// after the loss (retention 2 h), on a fresh warehouse and behind a finished run alike.
/// M finished late (its mark landed after G's journal): no later run trusts its facts.
#[tokio::test]
async fn r140_a_late_finisher_whose_walk_is_within_the_skew_of_the_floor_is_not_trusted() {
    late_finisher_within_the_skew(14001, false).await;
    late_finisher_within_the_skew(14002, true).await;
}

async fn late_finisher_within_the_skew(seed: u64, with_previous: bool) {
    let env = Env::open(Backend::Local, seed).await;
    let config = test_config();
    let root = env.local_dir.clone().expect("local");
    if with_previous {
        // P: a finished run before anything is dropped.
        env.register("other", &Layout::under("other/1")).await;
        env.advance(10 * MINUTE);
        env.collect_completed(&config).await;
    }
    let (old, live, watched) = dropped_beside_live(&env).await;
    // M: everything but its finish mark.
    env.advance(10 * MINUTE);
    let m = run_until(&env, &config, GivenUp::AfterSweep).await;
    let m_id = m.simple().to_string();
    let m_clocks: Vec<String> = env
        .ledger_files()
        .await
        .into_iter()
        .filter(|f| f.contains(&m_id) && watched.iter().any(|w| f.contains(w.as_str())))
        .collect();
    assert!(!m_clocks.is_empty(), "M wrote clock files for the postings");
    let gc = env.gc(config.clone());
    assert_eq!(gc.abandon().await.expect("abandon"), Some(m));
    let unlink = link_postings(&root, &live, &old);
    // G, 30 s later, on a machine whose clock is 50 s behind M's.
    env.advance(30_000);
    let honest = env.now();
    env.clock.set(honest - 50_000);
    let report = env.gc(config.clone()).collect(env.now()).await.expect("G");
    assert_eq!(report.status, GcStatus::Completed, "{report:?}");
    env.clock.set(honest);
    late_writes_land(&env, m, &m_clocks).await;
    env.advance(40 * MINUTE);
    unlink();
    let lost_at = env.now();
    let retention = config.retention.as_millis() as i64;
    // (The skew allowed: nothing condemned before the retention less a minute.)
    env.assert_kept_through_retention(lost_at, 10 * MINUTE, &watched, " (round 140)", async || {
        env.collect(&config).await;
        assert_not_condemned_before(&env, &watched, lost_at, lost_at + retention - MINUTE).await;
    })
    .await;
}

/// After G's sweep cleared M's clock files (asserted), M's paused processes wake: its
/// scan's clock files land again, then its finish mark.
async fn late_writes_land(env: &Env, m: uuid::Uuid, m_clocks: &[String]) {
    let left: Vec<&String> = {
        let files = env.ledger_files().await;
        m_clocks.iter().filter(|f| files.contains(f)).collect()
    };
    assert!(
        left.is_empty(),
        "G's sweep cleared M's clock files: {left:?}"
    );
    for file in m_clocks {
        env.put_raw(file, b"{}").await;
    }
    land_finish_mark(env, m).await;
}

/// How round 141's stalled put comes to be dated no later than its run's finish mark.
#[derive(Debug, Clone, Copy)]
enum StoreTime {
    /// The machine's clock (a local warehouse's store clock) was 4 minutes fast and is
    /// stepped back to the true time after G has run (the skew allowed: 5 minutes).
    SteppedBack,
    /// The store dates to the second (S3, HFS+, ext3): M's finish mark, G's run and the
    /// stalled put within one second (a clock that does not move meanwhile).
    OneTick,
    /// The store's clock moves on honestly: the put lands after M's finish mark.
    Honest,
}

/// Round 141 (default settings: retention 7 days, skew 5 min). M starts the postings'
/// clocks as clock files (their entries hold an earlier release's), one put stalled past
/// its lease while another process redoes the page and finishes M. The live postings
/// become a link to them (no change-log entry records it); G (previous M) reaches them and
/// sweeps M's clock files. The stalled put lands, and the store dates it no later than M's
/// finish mark (`store_time`). The link stays three days and goes; runs every 12 h.
/// Before the fix every later run trusted M's file, from a walk before G's: condemned 96
/// to 108 h and deleted 120 to 132 h after the loss. A clock file of an earlier run counts
/// no more where the previous run reached the object or carries its clocks on its pages.
async fn stalled_clock_put_dated_before_the_finish(seed: u64, store_time: StoreTime) {
    let env = Env::open_ahead_of_real_time(seed).await;
    let config = GcConfig::default();
    let skew = config.max_clock_skew.as_millis() as i64;
    let root = env.local_dir.clone().expect("local");
    let (old, live, watched) = dropped_beside_live(&env).await;
    let m_clocks = m_starts_clock_files(&env, &config, &watched).await;
    let unlink = link_postings(&root, &live, &old);
    if let StoreTime::SteppedBack | StoreTime::Honest = store_time {
        env.advance(MINUTE);
    }
    env.collect_completed(&config).await;
    let files = env.ledger_files().await;
    let left: Vec<&String> = m_clocks.iter().filter(|f| files.contains(f)).collect();
    assert!(
        left.is_empty(),
        "G's sweep cleared M's clock files: {left:?}"
    );
    match store_time {
        StoreTime::SteppedBack => {
            assert!(4 * MINUTE < skew, "within the allowed skew");
            env.clock.set(env.now() - 4 * MINUTE);
        }
        StoreTime::Honest => env.advance(MINUTE),
        StoreTime::OneTick => {}
    }
    for file in &m_clocks {
        env.put_raw(file, b"{}").await;
    }
    env.advance(3 * 24 * HOUR);
    unlink();
    let lost_at = env.now();
    kept_through_the_default_retention(&env, &config, &watched, lost_at).await;
}

#[tokio::test]
async fn r141_a_stalled_clock_file_dated_before_its_runs_finish_by_a_clock_stepped_back() {
    stalled_clock_put_dated_before_the_finish(14101, StoreTime::SteppedBack).await;
}

#[tokio::test]
async fn r141_b_stalled_clock_file_in_the_same_second_as_its_runs_finish() {
    stalled_clock_put_dated_before_the_finish(14102, StoreTime::OneTick).await;
}

#[tokio::test]
async fn r141_a_stalled_clock_file_dated_after_its_runs_finish_is_not_trusted() {
    stalled_clock_put_dated_before_the_finish(14103, StoreTime::Honest).await;
}

/// Round 141's chain: G reaches the postings and sweeps M's clock files, M's stalled put
/// lands in the same second, the link goes three days later; the postings are rewritten
/// right after, so the next run F (previous G: M's file does not count there) finds them
/// young and records no clock; their old modification times are then put back. F did not
/// reach them, so only its pages say M's file is stale: F carries the clocks of its
/// partition, and an earlier run's clock file not on them counts no more. Without that
/// rule the run after F dated the loss from M's walk, days before it.
#[tokio::test]
async fn r141_a_stalled_clock_file_behind_a_run_that_recorded_no_clock_dates_no_loss() {
    let env = Env::open_ahead_of_real_time(14105).await;
    let config = GcConfig::default();
    let root = env.local_dir.clone().expect("local");
    let (old, live, watched) = dropped_beside_live(&env).await;
    let m_clocks = m_starts_clock_files(&env, &config, &watched).await;
    let unlink = link_postings(&root, &live, &old);
    env.collect_completed(&config).await;
    for file in &m_clocks {
        env.put_raw(file, b"{}").await;
    }
    env.advance(3 * 24 * HOUR);
    unlink();
    let lost_at = env.now();
    // Rewritten: young at F.
    let at = |ms: i64| std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms as u64);
    let mut kept_times = Vec::new();
    for object in &watched {
        let file = std::fs::File::options()
            .write(true)
            .open(root.join(object))
            .expect("a posting");
        kept_times.push(
            file.metadata()
                .expect("metadata")
                .modified()
                .expect("mtime"),
        );
        file.set_modified(at(env.now())).expect("touched");
    }
    env.advance(HOUR);
    env.collect_completed(&config).await;
    // Their old times put back.
    for (object, time) in watched.iter().zip(kept_times) {
        let file = std::fs::File::options()
            .write(true)
            .open(root.join(object))
            .expect("a posting");
        file.set_modified(time).expect("put back");
    }
    kept_through_the_default_retention(&env, &config, &watched, lost_at).await;
}

/// An hour after `dropped_beside_live`, M runs and starts the postings' clocks as clock
/// files: their names.
async fn m_starts_clock_files(env: &Env, config: &GcConfig, watched: &[String]) -> Vec<String> {
    env.advance(HOUR);
    let m = env
        .collect_completed(config)
        .await
        .run_id
        .simple()
        .to_string();
    let m_clocks: Vec<String> = env
        .ledger_files()
        .await
        .into_iter()
        .filter(|f| f.contains(&m) && watched.iter().any(|w| f.contains(w.as_str())))
        .collect();
    assert!(!m_clocks.is_empty(), "M wrote clock files for the postings");
    m_clocks
}

/// Runs every 12 hours until the retention of `config` (less the skew) has passed since
/// `lost_at`: none of `watched` condemned or deleted before.
async fn kept_through_the_default_retention(
    env: &Env,
    config: &GcConfig,
    watched: &[String],
    lost_at: i64,
) {
    let skew = config.max_clock_skew.as_millis() as i64;
    let retention = config.retention.as_millis() as i64;
    while env.now() < lost_at + retention - skew {
        env.advance(12 * HOUR);
        env.collect(config).await;
        assert_not_condemned_before(env, watched, lost_at, lost_at + retention - skew).await;
        for object in watched {
            assert!(
                env.exists(object).await,
                "{object} deleted {} h after losing reachability (retention {} h)",
                (env.now() - lost_at) / HOUR,
                retention / HOUR
            );
        }
    }
}
