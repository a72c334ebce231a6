//! Red team 16d: attacks on commit 68d4417 (journals keep every record's latest write; a
//! strict re-incarnation that replaced a drop of a state the previous run saw moves no
//! clock; a clock file written before the previous run started counts as swept by it).
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

// 1. `Known::for_clock`'s "written before the previous run started" shortcut trusts the
//    store's last-modified as the time the clock file became visible.
//
// Process 1 plans run S while metadata file `o` (index X) is unreachable and stalls in
// the put of o's clock file. Its lease expires; `o` is registered (incarnation H);
// another process finishes S, and a new run P sees `o` reachable and clears its entry
// (P's journal lists H). Then process 1's put lands: a clock from S's walk, which never
// knew H, stamped (backdated) with the time the put began, before P started. H commits
// away from `o`; `o` must stay 2 h.
async fn stalled_clock_put(seed: u64, backdate: bool) {
    let env = Env::open(Backend::Memory, seed).await;
    let config = test_config();
    let md_key = Arc::new(Mutex::new(String::new()));
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
    *md_key.lock().unwrap() = format!("_gc/ledger/{md}/u-");
    {
        let key = md_key.clone();
        *store.pause.lock().unwrap() =
            Some(Box::new(move |k| k.contains(key.lock().unwrap().as_str())));
    }
    env.advance(HOUR);
    let slow = run(&env);
    let at = env.now();
    let process1 = tokio::spawn(async move { slow.collect(at).await });
    store.paused.notified().await;

    env.advance(20 * MINUTE);
    let again = env.id("again").await;
    env.catalog
        .register(&again, Some(&layout.source), &location)
        .await
        .expect("registered");
    env.advance(MINUTE);
    let s = run(&env).collect(env.now()).await.expect("S finished");
    assert_eq!(s.status, GcStatus::Completed, "{s:?}");
    env.advance(MINUTE);
    let p = run(&env).collect(env.now()).await.expect("P");
    assert_eq!(p.status, GcStatus::Completed, "{p:?}");
    assert!(
        entry_of(&env, &md).await.is_empty(),
        "P saw o reachable: no entry"
    );
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
async fn stalled_clock_put_stamped_with_its_start_counts_as_swept_by_the_previous_run() {
    stalled_clock_put(16301, true).await;
}

/// Control: the same late put stamped when it lands.
#[tokio::test]
async fn control_stalled_clock_put_stamped_when_it_lands() {
    stalled_clock_put(16302, false).await;
}

// 2. `lineage_after`'s exemption. Each case: run P sees `k` (and `k2`) in some state; the
//    tracked old metadata file `o` of index X is registered (incarnation H) between P and
//    the next runs, loses reachability, and then every record naming index X is replaced
//    by re-incarnations whose replaced writes include, where the history allows, writes
//    P saw. `o` must stay 2 h after it lost reachability.

#[derive(Debug, Clone, Copy)]
enum Churn {
    /// Drop `k`, register `o` there (H), drop, register another index there.
    DropRegisterTwice,
    /// Drop `k` and `k2`; register `o` at `k` (H); rename `k` → `k2` (over `k2`'s
    /// tombstone, whose replaced write P saw) and back; drop; register others over both.
    RenameAwayAndBack,
    /// H is registered at `k2` (a fresh key), renamed to `k` over `k`'s tombstone whose
    /// replaced write P saw, commits away from `o`, and `k2`'s tombstone is replaced.
    RenameOntoSeenDrop,
    /// Like `DropRegisterTwice`, then the final incarnation commits `n` times (its
    /// chain truncated down to the drop it replaced).
    Truncated(usize),
}

async fn exemption(seed: u64, churn: Churn) {
    let env = Env::open(Backend::Memory, seed).await;
    let config = test_config();
    assert!(config.strict_reincarnation);
    env.register("keep", &Layout::under("keep/1")).await;
    let (k, _, _) = env.register("k", &Layout::under("k/1")).await;
    let (k2, _, _) = env.register("k2", &Layout::under("k2/1")).await;
    let o_layout = Layout::under("x/1");
    let (o_meta, o_loc) = env.new_index(&o_layout).await;
    let o = env.relative(&o_loc);
    env.advance(HOUR);
    // P0 tracks o; P (the previous finished run of what follows) sees k, k2 live.
    for _ in 0..2 {
        let r = env.collect(&config).await;
        assert_eq!(r.status, GcStatus::Completed);
        env.advance(5 * MINUTE);
    }
    assert!(!entry_of(&env, &o).await.is_empty(), "o is tracked");
    let cat = &env.catalog;
    let src = Some(&o_layout.source);
    let commit_away = |at: String| {
        let o_meta = o_meta.clone();
        let o_loc = o_loc.clone();
        let layout = Layout::under("x/2");
        let env = &env;
        async move {
            let id = env.id(&at).await;
            let (_, next) = env.successor(&o_meta, &layout, None).await;
            env.catalog
                .commit(&id, Some(&layout.source), &o_loc, &next)
                .await
                .expect("committed away from o");
        }
    };
    let lost_at;
    match churn {
        Churn::DropRegisterTwice | Churn::Truncated(_) => {
            cat.drop_index(&k).await.expect("dropped");
            cat.register(&k, src, &o_loc).await.expect("H registered");
            env.advance(MINUTE);
            commit_away("k".into()).await;
            lost_at = env.now();
            cat.drop_index(&k).await.expect("dropped");
            let (c_meta, c_loc) = env.new_index(&Layout::under("c/1")).await;
            cat.register(&k, Some(&Layout::under("c/1").source), &c_loc)
                .await
                .expect("C registered");
            if let Churn::Truncated(n) = churn {
                let (mut base_meta, mut base_loc) = (c_meta, c_loc);
                for i in 0..n {
                    let layout = Layout::under(&format!("c/{}", i + 2));
                    let (next_meta, next_loc) = env.successor(&base_meta, &layout, None).await;
                    cat.commit(&k, Some(&layout.source), &base_loc, &next_loc)
                        .await
                        .expect("committed");
                    (base_meta, base_loc) = (next_meta, next_loc);
                }
            }
        }
        Churn::RenameAwayAndBack => {
            cat.drop_index(&k).await.expect("dropped");
            cat.drop_index(&k2).await.expect("dropped");
            cat.register(&k, src, &o_loc).await.expect("H registered");
            env.advance(MINUTE);
            cat.rename(&k, &k2).await.expect("renamed away");
            cat.rename(&k2, &k).await.expect("renamed back");
            commit_away("k".into()).await;
            lost_at = env.now();
            cat.drop_index(&k).await.expect("dropped");
            env.register("k", &Layout::under("c/1")).await;
            env.register("k2", &Layout::under("c2/1")).await;
        }
        Churn::RenameOntoSeenDrop => {
            cat.drop_index(&k).await.expect("dropped");
            let k3 = env.id("k3").await;
            cat.register(&k3, src, &o_loc).await.expect("H registered");
            env.advance(MINUTE);
            cat.rename(&k3, &k).await.expect("renamed onto k");
            commit_away("k".into()).await;
            lost_at = env.now();
            env.register("k3", &Layout::under("c3/1")).await;
        }
    }
    while env.now() < lost_at + 2 * HOUR - MINUTE {
        env.advance(5 * MINUTE);
        let r = env.collect(&config).await;
        assert_eq!(r.status, GcStatus::Completed, "{r:?}");
        assert!(
            env.exists(&o).await,
            "{o} deleted {} min after losing reachability (retention 2 h); {churn:?}",
            (env.now() - lost_at) / MINUTE
        );
    }
}

#[tokio::test]
async fn drop_register_drop_register_between_runs() {
    exemption(16311, Churn::DropRegisterTwice).await;
}

#[tokio::test]
async fn rename_away_and_back_between_runs() {
    exemption(16312, Churn::RenameAwayAndBack).await;
}

#[tokio::test]
async fn rename_onto_a_drop_the_previous_run_saw() {
    exemption(16313, Churn::RenameOntoSeenDrop).await;
}

#[tokio::test]
async fn reincarnation_chain_truncated_to_its_drop() {
    exemption(16314, Churn::Truncated(15)).await;
}

/// 16 commits push the creation out of the chain: the incarnation still counts as a
/// possible re-incarnation until a finished run has listed it.
#[tokio::test]
async fn reincarnation_chain_truncated_past_its_creation() {
    exemption(16315, Churn::Truncated(16)).await;
}
