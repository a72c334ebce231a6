//! A warehouse object store for the red-team tests' second collector process: it stops
//! (once) at the put whose key matches — a process paused (SIGSTOP, a hung request, a long
//! GC pause) right before that write, woken up later — fails every put whose key matches,
//! and can report the paused object's last-modified as the time its put *began* (S3 and
//! others stamp an object with the start of its upload; a put stalled mid-request lands
//! later than its stamp says). Every other request is forwarded as it is; reads are
//! counted per key.

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
use parqdb_catalog::Catalog;
use parqdb_catalog::IndexMetadata;
use parqdb_catalog::Warehouse;
use parqdb_catalog::gc::{GarbageCollector, GcConfig, GcReport, GcStatus};
use parqdb_catalog::{Clock, IndexIdentifier, ManualClock, SeededIds};
use tokio::task::JoinHandle;

use super::{Backend, Env, Layout, MINUTE, test_config};

type Pred = Box<dyn Fn(&str) -> bool + Send + Sync>;
/// A put's key and body.
type PutPred = Box<dyn Fn(&str, &[u8]) -> bool + Send + Sync>;
type Stamps = Arc<Mutex<HashMap<Path, i64>>>;

/// See the module docs.
pub struct HookedStore {
    inner: Arc<dyn ObjectStore>,
    pause: Mutex<Option<PutPred>>,
    fail: Mutex<Option<Pred>>,
    refuse_heads: Mutex<Option<Pred>>,
    /// Stamps the paused put's object with this clock's time when the put began.
    backdate: Option<Arc<ManualClock>>,
    stamps: Stamps,
    paused: tokio::sync::Notify,
    resume: tokio::sync::Notify,
    gets: Mutex<HashMap<String, usize>>,
}

impl HookedStore {
    /// Forwards everything to `inner` until told otherwise.
    pub fn new(inner: Arc<dyn ObjectStore>) -> HookedStore {
        HookedStore {
            inner,
            pause: Mutex::new(None),
            fail: Mutex::new(None),
            refuse_heads: Mutex::new(None),
            backdate: None,
            stamps: Arc::new(Mutex::new(HashMap::new())),
            paused: tokio::sync::Notify::new(),
            resume: tokio::sync::Notify::new(),
            gets: Mutex::new(HashMap::new()),
        }
    }

    /// How many reads (`GET`s, not `HEAD`s) of the warehouse file `name` went through this
    /// store.
    pub fn reads_of(&self, name: &str) -> usize {
        let below = format!("/{name}");
        self.gets
            .lock()
            .expect("lock")
            .iter()
            .filter(|(key, _)| *key == name || key.ends_with(&below))
            .map(|(_, reads)| reads)
            .sum()
    }

    /// Stamp the paused put's object with `clock`'s time when its put began (`None`: when
    /// it lands, as every other object).
    pub fn backdating(self, clock: Option<Arc<ManualClock>>) -> HookedStore {
        HookedStore {
            backdate: clock,
            ..self
        }
    }

    /// Pause at the first put whose key matches `pred`.
    pub fn pause_on(self, pred: impl Fn(&str) -> bool + Send + Sync + 'static) -> HookedStore {
        self.arm(pred);
        self
    }

    /// Fail every put whose key matches `pred`.
    pub fn fail_on(self, pred: impl Fn(&str) -> bool + Send + Sync + 'static) -> HookedStore {
        *self.fail.lock().expect("lock") = Some(Box::new(pred));
        self
    }

    /// Answer every `HEAD` of a key that matches `pred` with a client error, as S3 answers
    /// one of an object written with a customer-provided encryption key (SSE-C) that the
    /// request does not carry (`400`).
    pub fn refuse_heads_on(
        self,
        pred: impl Fn(&str) -> bool + Send + Sync + 'static,
    ) -> HookedStore {
        *self.refuse_heads.lock().expect("lock") = Some(Box::new(pred));
        self
    }

    /// Pause at the first put whose key and body match `pred`.
    pub fn pause_on_put(
        self,
        pred: impl Fn(&str, &[u8]) -> bool + Send + Sync + 'static,
    ) -> HookedStore {
        *self.pause.lock().expect("lock") = Some(Box::new(pred));
        self
    }

    /// From now on, pause at the first put whose key matches `pred`.
    pub fn arm(&self, pred: impl Fn(&str) -> bool + Send + Sync + 'static) {
        *self.pause.lock().expect("lock") = Some(Box::new(move |key, _| pred(key)));
    }

    /// Pause at no put.
    pub fn disarm(&self) {
        *self.pause.lock().expect("lock") = None;
    }

    /// Wait until a put paused.
    pub async fn paused(&self) {
        self.paused.notified().await;
    }

    /// Let the paused put go on.
    pub fn resume(&self) {
        self.resume.notify_one();
    }

    fn restamp(stamps: &Stamps, mut meta: ObjectMeta) -> ObjectMeta {
        if let Some(ms) = stamps.lock().expect("lock").get(&meta.location) {
            meta.last_modified = (UNIX_EPOCH + Duration::from_millis(*ms as u64)).into();
        }
        meta
    }
}

/// Whether `pred`, if set, holds for `key`.
fn matches(pred: &Mutex<Option<Pred>>, key: &str) -> bool {
    pred.lock()
        .expect("lock")
        .as_ref()
        .is_some_and(|pred| pred(key))
}

impl fmt::Debug for HookedStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "HookedStore")
    }
}

impl fmt::Display for HookedStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "HookedStore({})", self.inner)
    }
}

#[async_trait]
impl ObjectStore for HookedStore {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        let key = location.as_ref();
        if matches(&self.fail, key) {
            return Err(object_store::Error::Generic {
                store: "hooked",
                source: format!("injected failure writing {key}").into(),
            });
        }
        let hit = {
            let mut armed = self.pause.lock().expect("lock");
            let hit = armed.as_ref().is_some_and(|pred| {
                let body: Vec<u8> = payload
                    .iter()
                    .flat_map(|chunk| chunk.iter().copied())
                    .collect();
                pred(key, &body)
            });
            if hit {
                *armed = None;
            }
            hit
        };
        if !hit {
            return self.inner.put_opts(location, payload, opts).await;
        }
        let began = self.backdate.as_ref().map(|clock| clock.now_ms());
        self.paused.notify_one();
        self.resume.notified().await;
        let result = self.inner.put_opts(location, payload, opts).await;
        if let (Ok(_), Some(began)) = (&result, began) {
            self.stamps
                .lock()
                .expect("lock")
                .insert(location.clone(), began);
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
        let key = location.as_ref();
        if options.head && matches(&self.refuse_heads, key) {
            return Err(object_store::Error::Generic {
                store: "hooked",
                source: format!(
                    "HEAD of {key}: 400 Bad Request (the object was stored with a customer-provided key)"
                )
                .into(),
            });
        }
        if !options.head {
            *self
                .gets
                .lock()
                .expect("lock")
                .entry(location.to_string())
                .or_default() += 1;
        }
        let mut result = self.inner.get_opts(location, options).await?;
        result.meta = Self::restamp(&self.stamps, result.meta);
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
            .map_ok(move |meta| Self::restamp(&stamps, meta))
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
            .map_ok(move |meta| Self::restamp(&stamps, meta))
            .boxed()
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
        let mut listed = self.inner.list_with_delimiter(prefix).await?;
        listed.objects = listed
            .objects
            .into_iter()
            .map(|meta| Self::restamp(&self.stamps, meta))
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

/// A second collector process over `env`'s warehouse and pointer store whose warehouse
/// requests go through `store`.
pub fn process_over(
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

/// Collector processes over an [`Env`] whose warehouse requests all go through one
/// [`HookedStore`]: each [`Processes::next`] is a new process with ids of its own.
pub struct Processes {
    store: Arc<HookedStore>,
    config: GcConfig,
    seed: u64,
    started: u64,
}

impl Processes {
    /// Processes with `config` over `env`'s simulated store (its paused put stamped with
    /// the time it began if `backdate`); their ids are seeded from `seed`.
    pub fn new(env: &Env, backdate: bool, seed: u64, config: &GcConfig) -> Processes {
        let store = HookedStore::new(Arc::new(env.sim.clone()))
            .backdating(backdate.then(|| env.clock.clone()));
        Processes {
            store: Arc::new(store),
            config: config.clone(),
            seed,
            started: 0,
        }
    }

    /// The store every process writes through.
    pub fn store(&self) -> &Arc<HookedStore> {
        &self.store
    }

    /// A new process.
    pub fn next(&mut self, env: &Env) -> GarbageCollector {
        self.started += 1;
        process_over(
            env,
            self.store.clone(),
            self.seed * 100 + self.started,
            &self.config,
        )
    }

    /// A collection by a new process at `env`'s current time, which must complete
    /// (`what`: the run, for the failure message).
    pub async fn completed_run(&mut self, env: &Env, what: &str) -> GcReport {
        let report = self
            .next(env)
            .collect(env.now())
            .await
            .unwrap_or_else(|err| panic!("{what}: {err}"));
        assert_eq!(report.status, GcStatus::Completed, "{what}: {report:?}");
        report
    }
}

/// A collection by `gc` at `env`'s current time, in a task of its own: a process.
pub fn collect_in_background(
    env: &Env,
    gc: GarbageCollector,
) -> JoinHandle<parqdb_catalog::Result<GcReport>> {
    let at = env.now();
    tokio::spawn(async move { gc.collect(at).await })
}

/// Let `store`'s paused put go on and wait for the end of `process` (the collection the
/// put belongs to; it may fail, its lease gone); prints how it ended.
pub async fn resume_and_join(
    store: &HookedStore,
    process: JoinHandle<parqdb_catalog::Result<GcReport>>,
) {
    store.resume();
    let woke = process.await.expect("joined");
    eprintln!(
        "process 1: {:?}",
        woke.as_ref().map(|r| (r.run_id, r.status))
    );
}

/// The red teams' stage for a clock put of a second process that stalls and lands late:
/// on the memory backend, an index `keep` registered, and the metadata `o` of an index
/// at `again/1` written but not registered; collector processes over one hooked store.
pub struct LatePut {
    pub env: Env,
    pub config: GcConfig,
    pub processes: Processes,
    pub store: Arc<HookedStore>,
    /// The tables of `o`'s index.
    pub layout: Layout,
    /// `o` and its location.
    pub metadata: IndexMetadata,
    pub location: String,
    /// `o`, warehouse-relative.
    pub md: String,
}

impl LatePut {
    /// The stage at the time `o` was written (see [`Processes::new`] for `backdate`).
    pub async fn stage(seed: u64, backdate: bool) -> LatePut {
        let env = Env::open(Backend::Memory, seed).await;
        let config = test_config();
        let processes = Processes::new(&env, backdate, seed, &config);
        let store = processes.store().clone();
        env.register("keep", &Layout::under("keep/1")).await;
        let layout = Layout::under("again/1");
        let (metadata, location) = env.new_index(&layout).await;
        let md = env.relative(&location);
        LatePut {
            env,
            config,
            processes,
            store,
            layout,
            metadata,
            location,
            md,
        }
    }

    /// Pause the next process at its put of `o`'s ledger clock file.
    pub fn pause_at_the_clock_of_o(&self) {
        let key = format!("_gc/ledger/{}/o-", self.md);
        self.store.arm(move |k| k.contains(key.as_str()));
    }

    /// While a process is paused: 20 minutes on `o` is registered as `again` (incarnation
    /// H); a minute later a run (`first`, the paused process's own, which its lease lost)
    /// completes, and a minute after that run P. H's identifier.
    pub async fn publish_o_then_two_runs(&mut self, first: &str) -> IndexIdentifier {
        let env = &self.env;
        env.advance(20 * MINUTE);
        let again = env.publish("again", &self.layout, &self.location).await;
        env.advance(MINUTE);
        self.processes.completed_run(env, first).await;
        env.advance(MINUTE);
        self.processes.completed_run(env, "P").await;
        again
    }

    /// A minute on, the paused put of `process` lands; then H (`again`) commits away from
    /// `o`, which must outlive the retention window
    /// ([`Env::lose_and_keep_through_retention`]).
    pub async fn land_then_keep_o(
        &mut self,
        again: &IndexIdentifier,
        process: JoinHandle<parqdb_catalog::Result<GcReport>>,
    ) {
        let env = &self.env;
        env.advance(MINUTE);
        resume_and_join(&self.store, process).await;
        eprintln!(
            "entry after the late put: {:?}",
            env.entry_of(&self.md).await
        );
        let o = [self.md.clone()];
        env.lose_and_keep_through_retention(
            again,
            &self.metadata,
            &self.location,
            &o,
            async || {
                self.processes.completed_run(env, "gc run").await;
            },
        )
        .await;
    }
}
