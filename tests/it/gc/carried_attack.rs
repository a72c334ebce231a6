//! GC round 129, a fresh attack on the carried clocks (issue 29, step A): cases where a
//! clock the previous finished run carried on its scan pages made a run delete an object
//! earlier than the per-object ledger alone would (A1, A2: a run given up in between), and
//! defects of the carried pages' reader (A3: a page it cannot read; A4: the first run after
//! the upgrade, whose previous run carried nothing); and round 132's J1, older than the
//! carried clocks: a run given up before its sweep, over trusted clock files. Each failed
//! before its fix (`docs/gc-attacks.md`, rounds 129 and 133).

use object_store::{ObjectStoreExt, PutPayload};

use crate::support::gc::{
    Backend, Env, GivenUp, HOUR, Layout, MINUTE, put_untrusted_clock_files, run_until, test_config,
};
use parqdb_catalog::IndexCatalog;
use parqdb_catalog::gc::{GcConfig, GcStatus, GcStep};

/// Delete one object of the warehouse (a warehouse-relative name).
async fn remove(env: &Env, name: &str) {
    let path = env.warehouse.path(name).expect("name");
    env.warehouse
        .object_store()
        .delete(&path)
        .await
        .expect("deleted");
}

/// Collect every ten minutes until the retention (2 h) has passed since `lost_at`: every
/// watched object must stay.
async fn kept_through_retention(
    env: &Env,
    config: &GcConfig,
    lost_at: i64,
    watched: &[String],
    context: &str,
) {
    env.assert_kept_through_retention(lost_at, 10 * MINUTE, watched, context, async || {
        env.collect(config).await;
    })
    .await;
}

/// Attack 1: a run that is given up after its ledger sweep (`gc abandon`) saw an object
/// reachable (through a link its live table's directory became, which no change-log entry
/// records) and cleared its entry; the next run trusts no fact of the given-up run, but
/// the clock the run before it (the previous *finished* run) carried comes back, from
/// before the object was reachable. The per-object ledger alone restarts the clock at the
/// next walk.
#[tokio::test]
async fn attack1_a_given_up_runs_sweep_is_undone_by_the_carried_clock() {
    given_up_while_linked(7301, Case::Swept).await;
}

/// Round 130, H2: the same, with the given-up run's directory removed (a partial restore
/// of `_gc/runs/`, a hand clean-up) and its journal left: the plan's dead runs still count
/// as between.
#[tokio::test]
async fn attack1_with_the_given_up_runs_directory_removed() {
    given_up_while_linked(7305, Case::SweptDirectoryRemoved).await;
}

/// Round 132, J1: the given-up run stops *before* its sweep, and the objects' entries hold
/// trusted clock files from before the link (an earlier release's, or one a run writes
/// where an entry already holds files: round 131, F1). The next run carries nothing across
/// the given-up run and reads the files: their clock dates the loss before the link was
/// even made. Nothing durable says the objects were reachable in between except the
/// given-up run's walk, which no later run trusts: its clocks must start again.
#[tokio::test]
async fn j1_a_run_given_up_before_its_sweep_leaves_an_old_clock_file_standing() {
    given_up_while_linked(13201, Case::UnsweptOverClockFiles).await;
}

/// The attack-1 family: what the given-up run did, and what the entries held.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Case {
    Swept,
    SweptDirectoryRemoved,
    UnsweptOverClockFiles,
}

async fn given_up_while_linked(seed: u64, case: Case) {
    let env = Env::open(Backend::Local, seed).await;
    let config = test_config();
    let root = env.local_dir.clone().expect("local");
    let old = Layout::under("old/1");
    let (old_id, _, _) = env.register("old", &old).await;
    let live = Layout::under("live/1");
    env.register("live", &live).await;
    env.advance(HOUR);
    env.catalog.drop_index(&old_id).await.expect("dropped");
    if case == Case::UnsweptOverClockFiles {
        put_untrusted_clock_files(&env, &old).await;
    }
    // F: finished; tracks the dropped index and carries its clocks.
    env.advance(10 * MINUTE);
    env.collect_completed(&config).await;
    let watched: Vec<String> = old
        .files()
        .into_iter()
        .filter(|file| file.starts_with(&old.postings))
        .collect();
    for object in &watched {
        assert!(
            env.newest_carried_clock(object).await.is_some(),
            "F tracks {object}"
        );
    }
    // The live table's postings directory becomes a link to the dropped index's: a
    // reader of the live index reads the dropped files now.
    env.advance(10 * MINUTE);
    let postings = root.join(live.postings.trim_end_matches('/'));
    let stash = root.join("stash-postings");
    std::fs::rename(&postings, &stash).expect("moved away");
    std::os::unix::fs::symlink("../../old/1/ivf_postings", &postings).expect("linked");
    // G: walks (the dropped postings are reachable through the link), scans, verifies,
    // (but for J1) deletes and sweeps — clearing their ledger entries — and is then given
    // up.
    env.advance(10 * MINUTE);
    let stop = match case {
        Case::UnsweptOverClockFiles => GivenUp::BeforeSweep,
        Case::Swept | Case::SweptDirectoryRemoved => GivenUp::AfterSweep,
    };
    let given_up = run_until(&env, &config, stop).await;
    for object in &watched {
        assert_eq!(
            env.newest_carried_clock(object).await,
            None,
            "G found {object} reachable at its walk: its pages carry no clock for it"
        );
    }
    env.gc(config.clone()).abandon().await.expect("abandoned");
    if case == Case::SweptDirectoryRemoved {
        let runs = root.join("_gc/runs");
        let id = given_up.simple().to_string();
        let directory = std::fs::read_dir(&runs)
            .expect("runs")
            .map(|entry| entry.expect("entry").path())
            .find(|path| path.to_string_lossy().ends_with(&id))
            .expect("the given-up run's directory");
        std::fs::remove_dir_all(directory).expect("removed");
    }
    // An hour later the link goes: the dropped postings lose reachability now.
    env.advance(HOUR);
    std::fs::remove_file(&postings).expect("unlinked");
    std::fs::rename(&stash, &postings).expect("moved back");
    let lost_at = env.now();
    // Retention runs from now, for the per-object ledger: its clocks are gone and the next
    // walk starts them again. The carried clock of F (from before the link) says
    // otherwise.
    let label = match case {
        Case::UnsweptOverClockFiles => " (round 132, J1)",
        Case::Swept | Case::SweptDirectoryRemoved => " (attack 1)",
    };
    env.assert_kept_through_retention(lost_at, 10 * MINUTE, &watched, label, async || {
        let report = env.collect(&config).await;
        assert_eq!(report.status, GcStatus::Completed, "{report:?}");
    })
    .await;
}

/// Attack 2: an object the previous finished run tracked is gone for a while (a given-up
/// run's scan clears its entry as gone), then comes back with its old last-modified time
/// (a copy that kept its times). The per-object ledger restarts its clock; the carried
/// clock does not.
#[tokio::test]
async fn attack2_a_given_up_runs_clearing_of_a_gone_object_is_undone_by_the_carried_clock() {
    let env = Env::open(Backend::Memory, 7302).await;
    let config = test_config();
    let old = Layout::under("old/1");
    env.write_tables(&old).await;
    let written_at = env.now();
    let object = old.files()[0].clone();
    env.advance(HOUR);
    // F: finished; tracks the unreachable tables.
    env.collect_completed(&config).await;
    assert!(
        env.newest_carried_clock(&object).await.is_some(),
        "F tracks it"
    );
    // The object is gone (moved away by hand).
    env.advance(10 * MINUTE);
    remove(&env, &object).await;
    // G: its scan finds the entry of a gone object and clears it; it is given up.
    env.advance(10 * MINUTE);
    run_until(&env, &config, GivenUp::AfterSweep).await;
    assert_eq!(
        env.newest_carried_clock(&object).await,
        None,
        "G found it gone: its pages carry no clock for it"
    );
    env.gc(config.clone()).abandon().await.expect("abandoned");
    // It comes back, its times kept.
    env.advance(HOUR);
    env.put_dated(&object, b"back", written_at).await;
    let back_at = env.now();
    kept_through_retention(
        &env,
        &config,
        back_at,
        std::slice::from_ref(&object),
        " (attack 2)",
    )
    .await;
}

/// Attack 3: one carried page of the previous finished run that this release cannot
/// parse (a field a later release adds: a downgrade; or a damaged file) stops every
/// later run at its scan, for good. (The previous run's plan or verification walk that
/// cannot be read only means nothing is carried.)
#[tokio::test]
async fn attack3_an_unreadable_carried_page_stops_collection_for_good() {
    let env = Env::open(Backend::Memory, 7303).await;
    let config = test_config();
    let old = Layout::under("old/1");
    env.write_tables(&old).await;
    env.advance(HOUR);
    env.collect_completed(&config).await;
    let pages = env.newest_carried_pages().await;
    assert!(!pages.is_empty());
    for page in &pages {
        let path = env.warehouse.path(page).expect("name");
        let bytes = env
            .warehouse
            .object_store()
            .get(&path)
            .await
            .expect("page")
            .bytes()
            .await
            .expect("bytes");
        let mut value: serde_json::Value = serde_json::from_slice(&bytes).expect("json");
        value["condemned"] = serde_json::json!([]);
        env.warehouse
            .object_store()
            .put(
                &path,
                PutPayload::from(serde_json::to_vec(&value).expect("json")),
            )
            .await
            .expect("rewritten");
    }
    for attempt in 0..3 {
        env.advance(10 * MINUTE);
        if attempt > 0 {
            // What the error message advises: give the run up.
            env.gc(config.clone()).abandon().await.expect("abandoned");
        }
        let outcome = env.gc(config.clone()).collect(env.now()).await;
        match outcome {
            Ok(report) => assert_eq!(
                report.status,
                GcStatus::Completed,
                "attempt {attempt}: {report:?}"
            ),
            Err(err) if attempt == 0 => eprintln!("attempt 0: collection stopped: {err}"),
            Err(err) => panic!("attempt {attempt} (after `gc abandon`): collection stopped: {err}"),
        }
    }
}

/// Attack 4: the previous finished run wrote no carried pages (a run of the release
/// before this one: the first run after an upgrade). Every listed name bisects over all
/// of its pages, none of which has bounds, and then reads every page once more: about two
/// reads per page of the previous run for every object listed.
#[tokio::test]
async fn attack4_a_previous_run_without_carried_pages_costs_reads_per_object_and_page() {
    let mut requests = Vec::new();
    for lose in [false, true] {
        let env = Env::open(Backend::Memory, 7304).await;
        let config = GcConfig {
            page_size: 4,
            partitions: 1,
            ..test_config()
        };
        for n in 0..400 {
            let name = format!("indexes/junk/{n:04}.parquet");
            env.put(&name, b"x").await;
        }
        env.advance(HOUR);
        env.collect_completed(&config).await;
        if lose {
            for page in env.newest_carried_pages().await {
                remove(&env, &page).await;
            }
        }
        env.advance(10 * MINUTE);
        // Whether the next run completes within 20,000 requests (the store answers no
        // more: the process dies there).
        let completed = match env.collect_killed_after(&config, 20_000).await {
            Some(Ok(report)) => report.status == GcStatus::Completed,
            Some(Err(err)) => panic!("{err}"),
            None => false,
        };
        requests.push(completed);
    }
    assert_eq!(
        requests,
        [true, true],
        "the next run completed within 20,000 requests: [with the previous run's carried pages, without]"
    );
}

/// Round 133 (a fresh attack on J1's fix), G3: a run P planned and then not resumable for
/// a while (its planner paused before writing its plan, past its lease: here its plan is
/// moved away and back), a newer run G planned meanwhile that found an object reachable
/// through a link and was given up before its sweep, and then P resumed: its walk is older
/// than G's, it carries the clocks of the run before both, and its verification walk no
/// longer sees the link. A run planned since a run's plan and given up supersedes it: the
/// next run starts every clock again.
#[tokio::test]
async fn g3_an_older_run_never_goes_on_after_a_newer_one_was_given_up() {
    older_run_after_a_newer_one(13303, false).await;
}

/// The same with the newer run a plan step that stopped after its walk (no plan, no
/// journal: only its directory shows it).
#[tokio::test]
async fn g3_an_older_run_never_goes_on_after_a_newer_walk_that_stopped() {
    older_run_after_a_newer_one(13305, true).await;
}

async fn older_run_after_a_newer_one(seed: u64, only_its_walk: bool) {
    let env = Env::open(Backend::Local, seed).await;
    let config = test_config();
    let root = env.local_dir.clone().expect("local");
    let (old, live, watched) = condemned_postings_beside_a_live_index(&env, &config).await;
    // P plans, and its plan is away for a while.
    env.advance(10 * MINUTE);
    let p = plan_step(&env, &config).await;
    let plan = run_directory(&root, p).join("plan.json");
    let away = plan.with_extension("away");
    std::fs::rename(&plan, &away).expect("plan away");
    // The live table's postings become a link to the dropped ones.
    let (postings, stash) = link_postings(&root, &live, &old);
    // P's lease expires; G plans, scans (finding them reachable), verifies, is given up;
    // or G's plan step stops after its walk.
    env.advance(30 * MINUTE);
    let g = match only_its_walk {
        true => walk_only(&env, &config, &root).await,
        false => {
            let g = run_until(&env, &config, GivenUp::BeforeSweep).await;
            env.gc(config.clone()).abandon().await.expect("abandoned");
            g
        }
    };
    assert_ne!(g, p);
    // P's plan is back; the link goes: the postings lose reachability now.
    std::fs::rename(&away, &plan).expect("plan back");
    env.advance(MINUTE);
    unlink_postings(&postings, &stash);
    let lost_at = env.now();
    kept_through_retention(&env, &config, lost_at, &watched, " (round 133, G3)").await;
}

/// Round 133, G1: a plan step whose walk found the dropped postings reachable through a
/// link (the walk follows the links of what it reaches) and that stopped after writing
/// its walk, before its plan (a kill, a failed write: here its plan, journal and lease are
/// removed as a kill leaves them), counted as no run in between (round 131, F2): the next
/// run carried the clocks of the run before it, and deleted them minutes after the link
/// went. A run directory holding a walk counts.
#[tokio::test]
async fn g1_a_plan_step_stopped_after_its_walk_is_a_run_in_between() {
    let env = Env::open(Backend::Local, 13301).await;
    let config = test_config();
    let root = env.local_dir.clone().expect("local");
    let (old, live, watched) = condemned_postings_beside_a_live_index(&env, &config).await;
    // The live table's postings become a link to the dropped ones.
    env.advance(10 * MINUTE);
    let (postings, stash) = link_postings(&root, &live, &old);
    // G's plan step walks and stops before its plan: only its walk is left.
    walk_only(&env, &config, &root).await;
    // The link goes: the postings lose reachability now.
    env.advance(MINUTE);
    unlink_postings(&postings, &stash);
    let lost_at = env.now();
    kept_through_retention(&env, &config, lost_at, &watched, " (round 133, G1)").await;
}

/// An index `old` dropped, its postings tracked, condemned and its metadata deleted (the
/// next run may delete the postings), beside a live index `live`: the layouts and the
/// postings.
async fn condemned_postings_beside_a_live_index(
    env: &Env,
    config: &GcConfig,
) -> (Layout, Layout, Vec<String>) {
    condemned_postings(env, config, false).await
}

/// The same, each posting's clock also held by a trusted clock file (an earlier
/// release's, or one a run writes where the entry holds one already: round 131, F1) if
/// `clock_files`.
async fn condemned_postings(
    env: &Env,
    config: &GcConfig,
    clock_files: bool,
) -> (Layout, Layout, Vec<String>) {
    let old = Layout::under("old/1");
    let (old_id, _, _) = env.register("old", &old).await;
    let live = Layout::under("live/1");
    env.register("live", &live).await;
    env.advance(HOUR);
    env.catalog.drop_index(&old_id).await.expect("dropped");
    if clock_files {
        put_untrusted_clock_files(env, &old).await;
    }
    env.advance(10 * MINUTE);
    env.collect_completed(config).await;
    env.advance(2 * HOUR + 10 * MINUTE);
    env.collect_completed(config).await;
    env.advance(15 * MINUTE);
    env.collect_completed(config).await;
    let watched: Vec<String> = old
        .files()
        .into_iter()
        .filter(|file| file.starts_with(&old.postings))
        .collect();
    assert!(env.all_exist(&watched).await, "condemned, not deleted yet");
    (old, live, watched)
}

/// Replace `live`'s postings directory with a link to `old`'s: the link and where the
/// directory went.
fn link_postings(
    root: &std::path::Path,
    live: &Layout,
    old: &Layout,
) -> (std::path::PathBuf, std::path::PathBuf) {
    let postings = root.join(live.postings.trim_end_matches('/'));
    let stash = root.join("stash-postings");
    std::fs::rename(&postings, &stash).expect("moved away");
    let target = format!("../../{}", old.postings.trim_start_matches("indexes/"));
    std::os::unix::fs::symlink(target.trim_end_matches('/'), &postings).expect("linked");
    (postings, stash)
}

/// Put the postings directory back where the link was.
fn unlink_postings(postings: &std::path::Path, stash: &std::path::Path) {
    std::fs::remove_file(postings).expect("unlinked");
    std::fs::rename(stash, postings).expect("moved back");
}

/// The directory of run `run` under `_gc/runs/`.
fn run_directory(root: &std::path::Path, run: uuid::Uuid) -> std::path::PathBuf {
    std::fs::read_dir(root.join("_gc/runs"))
        .expect("runs")
        .map(|entry| entry.expect("entry").path())
        .find(|path| path.to_string_lossy().ends_with(&run.simple().to_string()))
        .expect("the run's directory")
}

/// Round 133, G2: a plan step whose walk found the postings reachable through a link
/// paused past its lease before writing anything; the next run N planned without it (its
/// floor the epoch), and then the paused step's walk landed, behind N's plan (here its
/// directory is moved away and back), once the link was gone. N's scan carried nothing
/// across it, but the
/// trusted clock files from before the link stood: J1 again. A run found in between when
/// a step reads the run's trust starts every clock again, as at the plan.
#[tokio::test]
async fn g2_a_walk_written_behind_the_next_runs_plan_restarts_every_clock() {
    let env = Env::open(Backend::Local, 13302).await;
    let config = test_config();
    let root = env.local_dir.clone().expect("local");
    let (old, live, watched) = condemned_postings(&env, &config, true).await;
    env.advance(10 * MINUTE);
    let (postings, stash) = link_postings(&root, &live, &old);
    // G's plan step walks (through the link); its directory is away, its journal never
    // written, its lease gone.
    let g = plan_step(&env, &config).await;
    let directory = run_directory(&root, g);
    let away = root.join("g-away");
    std::fs::rename(&directory, &away).expect("G away");
    for entry in std::fs::read_dir(root.join("_gc/journal")).expect("journals") {
        let path = entry.expect("entry").path();
        if path.to_string_lossy().contains(&g.simple().to_string()) {
            std::fs::remove_file(&path).expect("journal removed");
        }
    }
    env.gc(config.clone())
        .break_lease()
        .await
        .expect("lease broken");
    // The link goes: the postings lose reachability now. N plans without G; then G's
    // walk lands.
    env.advance(MINUTE);
    unlink_postings(&postings, &stash);
    let lost_at = env.now();
    env.advance(MINUTE);
    let gc = env.gc(config.clone());
    while !gc
        .step(GcStep::Plan, env.now(), None)
        .await
        .expect("plan")
        .done
    {}
    std::fs::rename(&away, &directory).expect("G back");
    kept_through_retention(&env, &config, lost_at, &watched, " (round 133, G2)").await;
}

/// Round 133, G4: the run after a given-up one starts every clock again, but only of what
/// it lists. A posting away while that run scanned (moved out and back with its times, or
/// below a directory it could not list) kept its condemned entry and its trusted clock
/// file from before the link; the run after it trusted them again and deleted the posting
/// minutes after the link went. What a run voided stays void: the next run's floor is
/// never earlier than the previous one's.
#[tokio::test]
async fn g4_what_a_restart_voided_stays_void_for_an_object_it_did_not_list() {
    let env = Env::open(Backend::Local, 13304).await;
    let config = test_config();
    let root = env.local_dir.clone().expect("local");
    let (old, live, watched) = condemned_postings(&env, &config, true).await;
    env.advance(10 * MINUTE);
    let (postings, stash) = link_postings(&root, &live, &old);
    // G finds the postings reachable through the link and is given up before its sweep.
    env.advance(10 * MINUTE);
    run_until(&env, &config, GivenUp::BeforeSweep).await;
    env.gc(config.clone()).abandon().await.expect("abandoned");
    // The link goes, and one posting is away while the next run scans.
    env.advance(MINUTE);
    unlink_postings(&postings, &stash);
    let lost_at = env.now();
    let posting = root.join(&watched[0]);
    let away = root.join("posting-away");
    std::fs::rename(&posting, &away).expect("moved away");
    env.advance(10 * MINUTE);
    let restarted = env.collect(&config).await;
    assert!(
        restarted
            .warnings
            .iter()
            .any(|w| w.contains("did not finish")),
        "{:?}",
        restarted.warnings
    );
    std::fs::rename(&away, &posting).expect("moved back");
    kept_through_retention(&env, &config, lost_at, &watched, " (round 133, G4)").await;
}

/// A plan step, to its end. Its run's id.
async fn plan_step(env: &Env, config: &GcConfig) -> uuid::Uuid {
    let gc = env.gc(config.clone());
    loop {
        let outcome = gc.step(GcStep::Plan, env.now(), None).await.expect("plan");
        if outcome.done {
            return outcome.report.run_id;
        }
    }
}

/// Remove everything from a run directory but its walk (a plan step killed after it).
fn keep_only_the_walk(directory: &std::path::Path) {
    for entry in std::fs::read_dir(directory).expect("its files") {
        let path = entry.expect("entry").path();
        if path.file_name().is_some_and(|name| name != "observed.json") {
            match path.is_dir() {
                true => std::fs::remove_dir_all(&path).expect("removed"),
                false => std::fs::remove_file(&path).expect("removed"),
            }
        }
    }
}

/// A plan step that walks and stops right after writing its walk (a kill, a failed write:
/// its plan, journal and lease removed as a kill leaves them). Its run's id.
async fn walk_only(env: &Env, config: &GcConfig, root: &std::path::Path) -> uuid::Uuid {
    let run = plan_step(env, config).await;
    let directory = run_directory(root, run);
    keep_only_the_walk(&directory);
    for entry in std::fs::read_dir(root.join("_gc/journal")).expect("journals") {
        let path = entry.expect("entry").path();
        if path.to_string_lossy().contains(&run.simple().to_string()) {
            std::fs::remove_file(&path).expect("journal removed");
        }
    }
    env.gc(config.clone())
        .break_lease()
        .await
        .expect("lease broken");
    run
}

/// Round 134, F1: a plan step walks through a link no log records, then pauses before it
/// writes anything; the link goes; the next run N plans without it, carries the old clock
/// and finishes; then the paused run's walk (and journal) land, ordered before N. The run
/// after N took "started since the previous run" by the runs' times, so it counted
/// nothing, carried N's clock and deleted the postings 81 minutes after the link went
/// (retention 2 h). A run that is not over (neither finished nor marked dead) landed after
/// every finished run had counted and marked the runs it knew: whatever its time, the
/// next run starts every clock again.
#[tokio::test]
async fn f1_a_walk_landing_after_the_next_run_finished_restarts_every_clock() {
    landing_after_the_next_run_finished(13401, false).await;
}

/// F1 with only the paused run's walk landing (its plan step stopped after it).
#[tokio::test]
async fn f1_only_a_walk_landing_after_the_next_run_finished_restarts_every_clock() {
    landing_after_the_next_run_finished(13402, true).await;
}

async fn landing_after_the_next_run_finished(seed: u64, only_its_walk: bool) {
    let env = Env::open(Backend::Local, seed).await;
    let config = test_config();
    let root = env.local_dir.clone().expect("local");
    let old = Layout::under("old/1");
    let (old_id, _, _) = env.register("old", &old).await;
    let live = Layout::under("live/1");
    env.register("live", &live).await;
    env.advance(HOUR);
    env.catalog.drop_index(&old_id).await.expect("dropped");
    env.advance(10 * MINUTE);
    // A starts the postings' clocks.
    env.collect_completed(&config).await;
    let watched: Vec<String> = old
        .files()
        .into_iter()
        .filter(|file| file.starts_with(&old.postings))
        .collect();
    env.advance(HOUR);
    let (postings, stash) = link_postings(&root, &live, &old);
    env.advance(MINUTE);
    // G's plan step walks through the link; what it writes is held back (a pause).
    let g = plan_step(&env, &config).await;
    let directory = run_directory(&root, g);
    let away = root.join("g-away");
    std::fs::rename(&directory, &away).expect("G away");
    if only_its_walk {
        keep_only_the_walk(&away);
    }
    let held = root.join("g-journal-away");
    std::fs::create_dir_all(&held).expect("dir");
    let mut moved = Vec::new();
    for entry in std::fs::read_dir(root.join("_gc/journal")).expect("journals") {
        let path = entry.expect("entry").path();
        if path.to_string_lossy().contains(&g.simple().to_string()) {
            let to = held.join(path.file_name().expect("a name"));
            std::fs::rename(&path, &to).expect("journal away");
            if !only_its_walk {
                moved.push((to, path));
            }
        }
    }
    env.gc(config.clone())
        .break_lease()
        .await
        .expect("lease broken");
    env.advance(MINUTE);
    unlink_postings(&postings, &stash);
    let lost_at = env.now();
    env.advance(MINUTE);
    // N knows nothing of G: it carries A's clocks (within retention), and finishes.
    env.collect_completed(&config).await;
    assert!(env.all_exist(&watched).await, "N deleted nothing");
    // G's writes land now, behind N.
    std::fs::rename(&away, &directory).expect("G back");
    for (from, to) in moved {
        std::fs::rename(&from, &to).expect("journal back");
    }
    kept_through_retention(&env, &config, lost_at, &watched, " (round 134, F1)").await;
}

/// The other side of F1's rule: a run directory kept for post-mortems outlives no
/// journal. Runs a week apart pruned the oldest kept directory's journal and marks with
/// it; left behind, the directory would look like a run no finished run counted, and
/// every later run would start every clock again.
#[tokio::test]
async fn runs_weeks_apart_leave_no_directory_without_its_journal() {
    let env = Env::open(Backend::Local, 13403).await;
    let config = test_config();
    let root = env.local_dir.clone().expect("local");
    env.register("live", &Layout::under("live/1")).await;
    env.advance(HOUR);
    for _ in 0..3 {
        env.collect_completed(&config).await;
        env.advance(8 * 24 * HOUR);
    }
    let journals: Vec<String> = std::fs::read_dir(root.join("_gc/journal"))
        .expect("journals")
        .map(|entry| {
            entry
                .expect("entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    // No pruned run leaves its directories behind either (a file a browser drops into
    // one would make it a run again: round 136, B).
    for entry in std::fs::read_dir(root.join("_gc/runs")).expect("runs") {
        let entry = entry.expect("entry");
        let run = entry.file_name().to_string_lossy().into_owned();
        let files = files_below(&entry.path());
        assert!(
            !files.is_empty() && journals.iter().any(|journal| journal.starts_with(&run)),
            "the directory of run {run} outlived its journal: {journals:?}; it holds {files:?}"
        );
    }
    let report = env.collect_completed(&config).await;
    assert!(
        !report.warnings.iter().any(|w| w.contains("did not finish")),
        "{:?}",
        report.warnings
    );
}

/// Round 135, K1: a run directory holding a file the collector never deletes (the staging
/// copy a kill left mid-write, a `.DS_Store` a file browser put there) stays for ever;
/// once its journal and marks were pruned (after 4 × retention, at least a week) it was a
/// run that is not over, and every later run started every clock again: nothing was ever
/// collected. A run keeps its journal and marks while its directory is there, and a
/// staging copy is no run's evidence.
#[tokio::test]
async fn k1_a_file_the_collector_never_deletes_never_makes_every_run_restart() {
    for (seed, leftover) in [(13501, "observed.json#1"), (13502, ".DS_Store")] {
        let env = Env::open(Backend::Local, seed).await;
        let config = test_config();
        let root = env.local_dir.clone().expect("local");
        let old = Layout::under("old/1");
        let (old_id, _, _) = env.register("old", &old).await;
        env.register("live", &Layout::under("live/1")).await;
        env.advance(HOUR);
        env.collect_completed(&config).await;
        let first = std::fs::read_dir(root.join("_gc/runs"))
            .expect("runs")
            .map(|entry| entry.expect("entry").path())
            .next()
            .expect("a run directory");
        std::fs::write(first.join(leftover), b"{").expect("left over");
        for _ in 0..3 {
            env.advance(8 * 24 * HOUR);
            env.collect_completed(&config).await;
        }
        env.catalog.drop_index(&old_id).await.expect("dropped");
        let mut warned = Vec::new();
        for _ in 0..6 {
            env.advance(HOUR);
            let report = env.collect_completed(&config).await;
            warned.push(report.warnings.iter().any(|w| w.contains("did not finish")));
        }
        let left: Vec<String> = old
            .files()
            .into_iter()
            .filter(|file| file.starts_with(&old.postings) && root.join(file).exists())
            .collect();
        assert!(
            !warned.iter().any(|w| *w) && left.is_empty(),
            "{leftover}: runs warned that every clock starts again: {warned:?}; dropped postings left 6 h after the drop (retention 2 h): {left:?}"
        );
    }
}

/// The files below `dir`, at any depth.
fn files_below(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten() {
        let path = entry.expect("entry").path();
        match path.is_dir() {
            true => files.extend(files_below(&path)),
            false => files.push(path),
        }
    }
    files
}
