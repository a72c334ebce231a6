//! GC round 129, a fresh attack on the carried clocks (issue 29, step A): cases where a
//! clock the previous finished run carried on its scan pages made a run delete an object
//! earlier than the per-object ledger alone would (A1, A2: a run given up in between), and
//! defects of the carried pages' reader (A3: a page it cannot read; A4: the first run after
//! the upgrade, whose previous run carried nothing). Each failed before its fix
//! (`docs/gc-attacks.md`, round 129).

use object_store::{ObjectStoreExt, PutPayload};

use crate::support::gc::{Backend, Env, HOUR, Layout, MINUTE, test_config};
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

/// Run a new run's steps up to (not including) its finish step: plan, every scan, the
/// verification, every delete step (with its ledger sweep). Its id.
async fn run_all_but_finish(env: &Env, config: &GcConfig) -> uuid::Uuid {
    let gc = env.gc(config.clone());
    let now = env.now();
    let plan = loop {
        let outcome = gc.step(GcStep::Plan, now, None).await.expect("plan");
        if outcome.done {
            break outcome;
        }
    };
    let run = plan.report.run_id;
    for partition in 0..plan.partitions {
        while !gc
            .step(GcStep::Scan { run, partition }, now, None)
            .await
            .expect("scan")
            .done
        {}
    }
    while !gc
        .step(GcStep::Verify { run }, now, None)
        .await
        .expect("verify")
        .done
    {}
    for partition in 0..plan.partitions {
        while !gc
            .step(GcStep::Delete { run, partition }, now, None)
            .await
            .expect("delete")
            .done
        {}
    }
    run
}

/// Attack 1: a run that is given up after its ledger sweep (`gc abandon`) saw an object
/// reachable (through a link its live table's directory became, which no change-log entry
/// records) and cleared its entry; the next run trusts no fact of the given-up run, but
/// the clock the run before it (the previous *finished* run) carried comes back, from
/// before the object was reachable. The per-object ledger alone restarts the clock at the
/// next walk.
#[tokio::test]
async fn attack1_a_given_up_runs_sweep_is_undone_by_the_carried_clock() {
    given_up_sweep(7301, false).await;
}

/// Round 130, H2: the same, with the given-up run's directory removed (a partial restore
/// of `_gc/runs/`, a hand clean-up) and its journal left: the plan's dead runs still count
/// as between.
#[tokio::test]
async fn attack1_with_the_given_up_runs_directory_removed() {
    given_up_sweep(7305, true).await;
}

async fn given_up_sweep(seed: u64, remove_directory: bool) {
    let env = Env::open(Backend::Local, seed).await;
    let config = test_config();
    let root = env.local_dir.clone().expect("local");
    let old = Layout::under("old/1");
    let (old_id, _, _) = env.register("old", &old).await;
    let live = Layout::under("live/1");
    env.register("live", &live).await;
    env.advance(HOUR);
    env.catalog.drop_index(&old_id).await.expect("dropped");
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
    // deletes and sweeps — clearing their ledger entries — and is then given up.
    env.advance(10 * MINUTE);
    let given_up = run_all_but_finish(&env, &config).await;
    for object in &watched {
        assert_eq!(
            env.newest_carried_clock(object).await,
            None,
            "G found {object} reachable at its walk: its pages carry no clock for it"
        );
    }
    env.gc(config.clone()).abandon().await.expect("abandoned");
    if remove_directory {
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
    env.assert_kept_through_retention(lost_at, 10 * MINUTE, &watched, " (attack 1)", async || {
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
    run_all_but_finish(&env, &config).await;
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
    env.assert_kept_through_retention(
        back_at,
        10 * MINUTE,
        std::slice::from_ref(&object),
        " (attack 2)",
        async || {
            env.collect(&config).await;
        },
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
