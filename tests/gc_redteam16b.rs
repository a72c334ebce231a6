//! Red team 16b: attacks on commit a4be2e9 (superseded runs, the planner's fence, pruning
//! every older run's files, dry abandon). A failing test is a bug; it is kept as it is.
mod gc_support;

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use futures::stream::BoxStream;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult, RenameOptions,
};

use gc_support::{Backend, Env, HOUR, Layout, MINUTE, test_config};
use parqdb_catalog::SeededIds;
use parqdb_catalog::catalog::{Catalog, IndexCatalog};
use parqdb_catalog::gc::{GarbageCollector, GcConfig, GcStatus, GcStep};
use parqdb_catalog::warehouse::Warehouse;

const DAY: i64 = 24 * HOUR;

type Pred = Box<dyn Fn(&str) -> bool + Send + Sync>;

/// A store that pauses (once) or fails (always) the puts whose key matches.
struct Hooked {
    inner: Arc<dyn ObjectStore>,
    pause: Mutex<Option<Pred>>,
    fail: Mutex<Option<Pred>>,
    paused: tokio::sync::Notify,
    resume: tokio::sync::Notify,
}

impl fmt::Debug for Hooked {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Hooked")
    }
}

impl fmt::Display for Hooked {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Hooked({})", self.inner)
    }
}

impl Hooked {
    fn new(inner: Arc<dyn ObjectStore>) -> Hooked {
        Hooked {
            inner,
            pause: Mutex::new(None),
            fail: Mutex::new(None),
            paused: tokio::sync::Notify::new(),
            resume: tokio::sync::Notify::new(),
        }
    }
    fn pause_on(self, pred: impl Fn(&str) -> bool + Send + Sync + 'static) -> Hooked {
        *self.pause.lock().unwrap() = Some(Box::new(pred));
        self
    }
    fn fail_on(self, pred: impl Fn(&str) -> bool + Send + Sync + 'static) -> Hooked {
        *self.fail.lock().unwrap() = Some(Box::new(pred));
        self
    }
}

#[async_trait]
impl ObjectStore for Hooked {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        let key = location.as_ref().to_owned();
        if self.fail.lock().unwrap().as_ref().is_some_and(|p| p(&key)) {
            return Err(object_store::Error::Generic {
                store: "hooked",
                source: format!("injected failure writing {key}").into(),
            });
        }
        let hit = {
            let mut armed = self.pause.lock().unwrap();
            let hit = armed.as_ref().is_some_and(|p| p(&key));
            if hit {
                *armed = None;
            }
            hit
        };
        if hit {
            self.paused.notify_one();
            self.resume.notified().await;
        }
        self.inner.put_opts(location, payload, opts).await
    }
    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        self.inner.put_multipart_opts(location, opts).await
    }
    async fn get_opts(
        &self,
        location: &Path,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        self.inner.get_opts(location, options).await
    }
    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        self.inner.delete_stream(locations)
    }
    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.inner.list(prefix)
    }
    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.inner.list_with_offset(prefix, offset)
    }
    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }
    async fn copy_opts(
        &self,
        from: &Path,
        to: &Path,
        options: CopyOptions,
    ) -> object_store::Result<()> {
        self.inner.copy_opts(from, to, options).await
    }
    async fn rename_opts(
        &self,
        from: &Path,
        to: &Path,
        options: RenameOptions,
    ) -> object_store::Result<()> {
        self.inner.rename_opts(from, to, options).await
    }
}

fn process_over(
    env: &Env,
    store: Arc<dyn ObjectStore>,
    seed: u64,
    config: &GcConfig,
) -> GarbageCollector {
    let warehouse = Warehouse::new(env.warehouse.root(), store, env.warehouse.prefix().clone())
        .expect("warehouse");
    let catalog = Catalog::builder(env.pointer_store.clone(), warehouse)
        .clock(env.clock.clone())
        .ids(Arc::new(SeededIds::new(seed)))
        .build();
    GarbageCollector::new(catalog, config.clone()).expect("valid config")
}

async fn journal_files(env: &Env) -> Vec<String> {
    env.objects()
        .await
        .into_iter()
        .filter(|n| n.starts_with("_gc/journal/"))
        .collect()
}

// ---------------------------------------------------------------------------------------
// 1. A clock write that lands after its run finished (a pause between `hold_lease` and
//    the put; a slow/retried PUT), behind a finished run that saw the object reachable.
// ---------------------------------------------------------------------------------------

/// Retention starts at the loss: a retention clock from a run's old walk that is written
/// late (the writing process paused between its lease check and its put, while another
/// process finished the run and a later run finished too) must not date the loss of a
/// metadata file published in between back to that walk.
#[tokio::test]
async fn a_late_clock_write_behind_finished_runs_does_not_backdate_retention() {
    let env = Env::open(Backend::Memory, 16101).await;
    let config = test_config();
    env.register("keep", &Layout::under("keep/1")).await;
    // An old metadata file nobody has published yet (registered later: allowed).
    let layout = Layout::under("again/1");
    let (metadata, location) = env.new_index(&layout).await;
    let watched = env.relative(&location);
    env.advance(HOUR);

    // Process 1 plans run S (the file is unreachable) and stops right at the put of the
    // file's retention clock, after its lease check.
    let entry = format!("_gc/ledger/{watched}/u-");
    let hooked =
        Arc::new(Hooked::new(Arc::new(env.sim.clone())).pause_on(move |key| key.contains(&entry)));
    let slow = process_over(&env, hooked.clone(), 7101, &config);
    let at = env.now();
    let process1 = tokio::spawn(async move { slow.collect(at).await });
    hooked.paused.notified().await;

    // Its lease expires; the file is published; another process goes on with S and
    // finishes it (S's verification walk sees the file reachable: its entry is cleared).
    env.advance(20 * MINUTE);
    let again = env.id("again").await;
    env.catalog
        .register(&again, Some(&layout.source), &location)
        .await
        .expect("registered");
    env.advance(MINUTE);
    let s = env.collect(&config).await;
    assert_eq!(s.status, GcStatus::Completed, "{s:?}");
    // A later run finishes, seeing the file reachable (its journal lists the
    // registration's incarnation).
    env.advance(MINUTE);
    let x = env.collect(&config).await;
    assert_eq!(x.status, GcStatus::Completed, "{x:?}");
    eprintln!("S {} X {}", s.run_id, x.run_id);

    // Process 1's put lands now.
    hooked.resume.notify_one();
    let woke = process1.await.expect("joined");
    eprintln!(
        "process 1: {:?}",
        woke.as_ref().map(|r| (r.run_id, r.status))
    );
    let ledger: Vec<String> = env
        .ledger_files()
        .await
        .into_iter()
        .filter(|f| f.contains(&watched))
        .collect();
    eprintln!("ledger entry of the file after the late write: {ledger:?}");

    // The file loses reachability now, by a commit.
    env.advance(MINUTE);
    let (_, successor) = env
        .successor(&metadata, &Layout::under("again/2"), None)
        .await;
    env.catalog
        .commit(&again, Some(&layout.source), &location, &successor)
        .await
        .expect("committed");
    let lost_at = env.now();
    while env.now() < lost_at + 2 * HOUR - MINUTE {
        env.advance(5 * MINUTE);
        env.collect(&config).await;
        assert!(
            env.exists(&watched).await,
            "deleted {} min after losing reachability (retention 2 h)",
            (env.now() - lost_at) / MINUTE
        );
    }
}

// ---------------------------------------------------------------------------------------
// 2. Finish marked a dead run done after pruning its journal, then failed; the run was
//    abandoned. A `.done` mark without its journal supersedes every later run.
// ---------------------------------------------------------------------------------------

/// Sets up: run D abandoned; 8 days later run F acknowledges D (pruning D's journal first)
/// and fails writing its own `.done`. Returns F's id.
async fn finish_fails_after_acknowledging(
    env: &Env,
    config: &GcConfig,
) -> (uuid::Uuid, uuid::Uuid) {
    env.register("keep", &Layout::under("keep/1")).await;
    env.advance(10 * MINUTE);
    let d = env
        .collect(&GcConfig {
            budget: Some(Duration::ZERO),
            ..config.clone()
        })
        .await;
    assert_eq!(d.status, GcStatus::InProgress);
    assert_eq!(
        env.gc(config.clone()).abandon().await.expect("abandon"),
        Some(d.run_id)
    );
    env.advance(8 * DAY);
    let d_id = d.run_id.simple().to_string();
    let hooked = Arc::new(Hooked::new(Arc::new(env.sim.clone())).fail_on(move |key| {
        key.contains("_gc/journal/") && key.ends_with(".done") && !key.contains(&d_id)
    }));
    let failing = process_over(env, hooked, 7201, config);
    let err = failing
        .collect(env.now())
        .await
        .expect_err("finish fails on its own .done");
    eprintln!("F failed: {err}");
    eprintln!("journals: {:?}", journal_files(env).await);
    let state = parqdb_catalog::gc::status(&env.catalog, env.now(), false)
        .await
        .expect("status");
    let f = state.current_run.expect("an unfinished run").run.run_id;
    (d.run_id, f)
}

/// A retried finish after acknowledging the dead runs goes on and completes.
#[tokio::test]
async fn a_finish_retried_after_acknowledging_dead_runs_completes() {
    let env = Env::open(Backend::Memory, 16102).await;
    let config = test_config();
    let (_, f) = finish_fails_after_acknowledging(&env, &config).await;
    env.advance(MINUTE);
    let retried = env.collect(&config).await;
    assert_eq!((retried.run_id, retried.status), (f, GcStatus::Completed));
    env.advance(MINUTE);
    let next = env
        .collect(&GcConfig {
            budget: Some(Duration::ZERO),
            ..config.clone()
        })
        .await;
    env.advance(MINUTE);
    let resumed = env.collect(&config).await;
    assert_eq!(
        (resumed.run_id, resumed.status),
        (next.run_id, GcStatus::Completed)
    );
}

/// GC in step mode (the `gc-cycle` state machine) keeps completing runs after an operator
/// abandoned a run whose finish had failed: a run that goes on legitimately is never
/// superseded.
#[tokio::test]
async fn step_mode_completes_after_abandoning_a_run_whose_finish_failed() {
    let env = Env::open(Backend::Memory, 16103).await;
    let config = test_config();
    let (_, f) = finish_fails_after_acknowledging(&env, &config).await;
    assert_eq!(
        env.gc(config.clone()).abandon().await.expect("abandon"),
        Some(f)
    );
    eprintln!("journals after abandon: {:?}", journal_files(&env).await);
    for cycle in 0..3 {
        env.advance(HOUR);
        let gc = env.gc(config.clone());
        let now = env.now();
        let plan = gc.step(GcStep::Plan, now, None).await.expect("plan");
        assert!(plan.done, "cycle {cycle}");
        let run = plan.report.run_id;
        for partition in 0..plan.partitions {
            let scan = gc.step(GcStep::Scan { run, partition }, now, None).await;
            assert!(
                scan.is_ok(),
                "cycle {cycle}: the scan step of the run the plan step just started was refused: {:?}",
                scan.err().map(|e| e.to_string())
            );
        }
        gc.step(GcStep::Verify { run }, now, None)
            .await
            .expect("verify");
        for partition in 0..plan.partitions {
            gc.step(GcStep::Delete { run, partition }, now, None)
                .await
                .expect("delete");
        }
        let finish = gc
            .step(GcStep::Finish { run }, now, None)
            .await
            .expect("finish");
        assert!(
            finish.done && finish.report.status == GcStatus::Completed,
            "cycle {cycle}"
        );
    }
}
