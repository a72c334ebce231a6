//! Red team 16e: attacks on commit 0d44d9b (no clock trusted on the store's time; standing
//! metadata clocks re-recorded under the current run's journal while re-incarnations are
//! about, newest journal winning ties; truncated chains count as re-incarnations).
//! A failing test is a bug; it is kept as it is.
mod gc_support;

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, UNIX_EPOCH};

use async_trait::async_trait;
use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult, RenameOptions,
};

use gc_support::{Backend, Env, HOUR, Layout, MINUTE, test_config};
use parqdb_catalog::catalog::{Catalog, IndexCatalog};
use parqdb_catalog::gc::{GarbageCollector, GcConfig, GcStatus};
use parqdb_catalog::warehouse::Warehouse;
use parqdb_catalog::{Clock, ManualClock, SeededIds};

type Pred = Box<dyn Fn(&str) -> bool + Send + Sync>;
type Stamps = Arc<Mutex<HashMap<Path, i64>>>;

/// A store that pauses (once) the put whose key matches and, when `backdate`, reports
/// that object's last-modified as the time the put *began* (S3 and others stamp an
/// object with the start of its upload; a put stalled mid-request lands later than its
/// stamp says).
struct Backdating {
    inner: Arc<dyn ObjectStore>,
    clock: Arc<ManualClock>,
    backdate: bool,
    pause: Mutex<Option<Pred>>,
    stamps: Stamps,
    paused: tokio::sync::Notify,
    resume: tokio::sync::Notify,
}

impl fmt::Debug for Backdating {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Backdating")
    }
}

impl fmt::Display for Backdating {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Backdating({})", self.inner)
    }
}

fn restamp(stamps: &Stamps, mut meta: ObjectMeta) -> ObjectMeta {
    if let Some(ms) = stamps.lock().unwrap().get(&meta.location) {
        meta.last_modified = (UNIX_EPOCH + Duration::from_millis(*ms as u64)).into();
    }
    meta
}

#[async_trait]
impl ObjectStore for Backdating {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        let key = location.as_ref().to_owned();
        let hit = {
            let mut armed = self.pause.lock().unwrap();
            let hit = armed.as_ref().is_some_and(|p| p(&key));
            if hit {
                *armed = None;
            }
            hit
        };
        if !hit {
            return self.inner.put_opts(location, payload, opts).await;
        }
        let began = self.clock.now_ms();
        self.paused.notify_one();
        self.resume.notified().await;
        let result = self.inner.put_opts(location, payload, opts).await;
        if result.is_ok() && self.backdate {
            self.stamps.lock().unwrap().insert(location.clone(), began);
        }
        result
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
        let mut result = self.inner.get_opts(location, options).await?;
        result.meta = restamp(&self.stamps, result.meta);
        Ok(result)
    }
    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        self.inner.delete_stream(locations)
    }
    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        let stamps = self.stamps.clone();
        self.inner
            .list(prefix)
            .map_ok(move |meta| restamp(&stamps, meta))
            .boxed()
    }
    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        let stamps = self.stamps.clone();
        self.inner
            .list_with_offset(prefix, offset)
            .map_ok(move |meta| restamp(&stamps, meta))
            .boxed()
    }
    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
        let mut listed = self.inner.list_with_delimiter(prefix).await?;
        listed.objects = listed
            .objects
            .into_iter()
            .map(|meta| restamp(&self.stamps, meta))
            .collect();
        Ok(listed)
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

async fn entry_of(env: &Env, object: &str) -> Vec<String> {
    env.ledger_files()
        .await
        .into_iter()
        .filter(|f| f.contains(&format!("_gc/ledger/{object}/")))
        .collect()
}

// 1. A re-stamp put that stalls and lands behind finished runs.
//
// P0 tracks metadata file `o` (index X); a re-incarnation of key `r` is about, so the
// next run J re-records o's standing clock under its own journal. Process 1 runs J and
// stalls in that put. Its lease expires; `o` is registered (incarnation H, unknown to J's
// journal); another process finishes J; run P sees `o` reachable and clears its entry.
// Then process 1's re-stamp lands (P0's clock, J's journal). H commits away from `o`;
// `o` must stay 2 h.
async fn stalled_restamp(seed: u64, backdate: bool, strict_reincarnation_about: bool) {
    let env = Env::open(Backend::Memory, seed).await;
    let config = test_config();
    assert!(config.strict_reincarnation);
    let store = Arc::new(Backdating {
        inner: Arc::new(env.sim.clone()),
        clock: env.clock.clone(),
        backdate,
        pause: Mutex::new(None),
        stamps: Arc::new(Mutex::new(HashMap::new())),
        paused: tokio::sync::Notify::new(),
        resume: tokio::sync::Notify::new(),
    });
    let mut runs = 0u64;
    let mut run = |env: &Env| {
        runs += 1;
        process_over(env, store.clone(), seed * 100 + runs, &config)
    };
    env.register("keep", &Layout::under("keep/1")).await;
    let layout = Layout::under("again/1");
    let (metadata, location) = env.new_index(&layout).await;
    let md = env.relative(&location);
    env.advance(HOUR);
    let p0 = run(&env).collect(env.now()).await.expect("P0");
    assert_eq!(p0.status, GcStatus::Completed, "{p0:?}");
    let tracked = entry_of(&env, &md).await;
    assert!(
        tracked.iter().any(|f| f.contains("/u-")),
        "o tracked: {tracked:?}"
    );
    // A re-incarnation within the horizon: drop `r`, register another index there.
    let (r, _, _) = env.register("r", &Layout::under("r/1")).await;
    if strict_reincarnation_about {
        env.catalog.drop_index(&r).await.expect("dropped");
        env.register("r", &Layout::under("r/2")).await;
    }
    env.advance(5 * MINUTE);
    let key = format!("_gc/ledger/{md}/u-");
    *store.pause.lock().unwrap() = Some(Box::new(move |k| k.contains(key.as_str())));
    let slow = run(&env);
    let at = env.now();
    let process1 = tokio::spawn(async move { slow.collect(at).await });
    let stalled = tokio::time::timeout(Duration::from_secs(5), store.paused.notified())
        .await
        .is_ok();
    if !stalled {
        // No re-stamp was attempted (nothing to attack).
        *store.pause.lock().unwrap() = None;
        let r = process1.await.expect("joined").expect("J");
        assert!(
            !strict_reincarnation_about,
            "no re-stamp was written: {r:?}"
        );
        return;
    }
    env.advance(20 * MINUTE);
    let again = env.id("again").await;
    env.catalog
        .register(&again, Some(&layout.source), &location)
        .await
        .expect("registered");
    env.advance(MINUTE);
    let j = run(&env).collect(env.now()).await.expect("J finished");
    assert_eq!(j.status, GcStatus::Completed, "{j:?}");
    env.advance(MINUTE);
    let p = run(&env).collect(env.now()).await.expect("P");
    assert_eq!(p.status, GcStatus::Completed, "{p:?}");
    eprintln!("entry after P: {:?}", entry_of(&env, &md).await);
    env.advance(MINUTE);
    store.resume.notify_one();
    let woke = process1.await.expect("joined");
    eprintln!("process 1: {:?}", woke.map(|r| (r.run_id, r.status)));
    eprintln!("entry after the late put: {:?}", entry_of(&env, &md).await);

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
        let r = run(&env).collect(env.now()).await.expect("gc run");
        assert_eq!(r.status, GcStatus::Completed, "{r:?}");
        assert!(
            env.exists(&md).await,
            "{md} deleted {} min after losing reachability (retention 2 h)",
            (env.now() - lost_at) / MINUTE
        );
    }
}

#[tokio::test]
async fn stalled_restamp_lands_behind_finished_runs_backdated() {
    stalled_restamp(16401, true, true).await;
}

#[tokio::test]
async fn stalled_restamp_lands_behind_finished_runs() {
    stalled_restamp(16402, false, true).await;
}

// 2. Re-stamps carry trust forward run after run. P0 tracks `o`; re-incarnations are about
//    (so every run re-stamps). Between every two runs an identifier of index X is dropped
//    and registered again with `o` and away (a new incarnation each time, never seen by a
//    walk while it names `o`); also a dry run in between. `o` must stay 2 h after its
//    last loss.
async fn churn_between_restamps(seed: u64, dry_between: bool) {
    let env = Env::open(Backend::Memory, seed).await;
    let config = test_config();
    let dry = GcConfig {
        dry_run: true,
        ..config.clone()
    };
    env.register("keep", &Layout::under("keep/1")).await;
    let o_layout = Layout::under("x/1");
    let (o_meta, o_loc) = env.new_index(&o_layout).await;
    let o = env.relative(&o_loc);
    let (r, _, _) = env.register("r", &Layout::under("r/1")).await;
    env.catalog.drop_index(&r).await.expect("dropped");
    env.register("r", &Layout::under("r/2")).await;
    env.advance(HOUR);
    let r0 = env.collect(&config).await;
    assert_eq!(r0.status, GcStatus::Completed);
    let x = env.id("x").await;
    let mut last_loss = env.now();
    for round in 0..6 {
        env.advance(5 * MINUTE);
        // o published and unpublished between runs by a fresh incarnation.
        env.catalog
            .register(&x, Some(&o_layout.source), &o_loc)
            .await
            .expect("registered o");
        env.advance(MINUTE);
        let layout = Layout::under(&format!("x/{}", round + 2));
        let (_, next) = env.successor(&o_meta, &layout, None).await;
        env.catalog
            .commit(&x, Some(&layout.source), &o_loc, &next)
            .await
            .expect("committed away from o");
        last_loss = env.now();
        env.catalog.drop_index(&x).await.expect("dropped x");
        if dry_between {
            env.advance(MINUTE);
            let d = env.collect(&dry).await;
            assert_eq!(d.status, GcStatus::DryRun, "{d:?}");
        }
        env.advance(5 * MINUTE);
        let r = env.collect(&config).await;
        assert_eq!(r.status, GcStatus::Completed, "{r:?}");
        assert!(env.exists(&o).await, "round {round}");
        eprintln!("round {round}: {:?}", entry_of(&env, &o).await);
    }
    while env.now() < last_loss + 2 * HOUR - MINUTE {
        env.advance(10 * MINUTE);
        let r = env.collect(&config).await;
        assert_eq!(r.status, GcStatus::Completed, "{r:?}");
        assert!(
            env.exists(&o).await,
            "{o} deleted {} min after losing reachability (retention 2 h)",
            (env.now() - last_loss) / MINUTE
        );
    }
}

#[tokio::test]
async fn churn_between_restamping_runs() {
    churn_between_restamps(16411, false).await;
}

#[tokio::test]
async fn churn_between_restamping_runs_with_dry_runs() {
    churn_between_restamps(16412, true).await;
}
