//! Shared harness of the garbage-collector tests: a warehouse object store wrapper that
//! stamps objects with simulated time and can fail deletes, plus index fixtures; and, in
//! [`hooked_store`], the store of a second collector process that pauses or fails writes.
#![allow(dead_code)]
#![allow(clippy::disallowed_methods)] // tests may read the wall clock and draw random ids (unique names)

pub mod hooked_store;

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, UNIX_EPOCH};

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    ObjectStoreExt, PutMultipartOptions, PutOptions, PutPayload, PutResult, RenameOptions,
};
use parqdb_catalog::family::FamilyRegistry;
use parqdb_catalog::gc::{GarbageCollector, GcConfig, GcReport, GcStatus};
use parqdb_catalog::store::LocalStore;
use parqdb_catalog::store::MemoryStore;
use parqdb_catalog::store::{PointerStore, PointerStoreExt, PutMode, StoreKey};
use parqdb_catalog::warehouse::{KeyLister, RawEntry, Warehouse};
use parqdb_catalog::{Catalog, IndexCatalog};
use parqdb_catalog::{Clock, IndexIdentifier, ManualClock, Namespace, SeededIds};
use parqdb_catalog::{IndexMetadata, SnapshotContents, TableDefinition};
use parqdb_catalog_testkit::fixture;

pub const MINUTE: i64 = 60_000;
pub const HOUR: i64 = 60 * MINUTE;
pub const START_MS: i64 = 1_750_000_000_000;

/// What the wrapper saw happen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Deletion {
    pub path: String,
    pub at_ms: i64,
}

#[derive(Debug)]
struct SimState {
    inner: Arc<dyn ObjectStore>,
    clock: Arc<ManualClock>,
    /// The directory of a local store: written files get the simulated time as their
    /// real modification time, so listings that walk the directory see it too.
    local_dir: Option<std::path::PathBuf>,
    mtimes: Mutex<HashMap<Path, i64>>,
    /// Deletes still allowed before every delete fails (`-1`: unlimited).
    delete_budget: AtomicI64,
    deletions: Mutex<Vec<Deletion>>,
    /// Requests still answered before the process "dies" (`-1`: never): the request that
    /// finds it at zero never completes (a write is applied first, its answer lost).
    kill_budget: AtomicI64,
    /// Notified when a request found the kill point.
    killed: tokio::sync::Notify,
    /// How many times each object was returned by a listing.
    listed: Mutex<HashMap<String, u32>>,
}

/// An object store that stamps every written object with the simulated clock's time
/// (listings and heads report it as last-modified), records deletions, and can be told
/// to fail every delete after a number of them (a crash mid-run).
#[derive(Debug, Clone)]
pub struct SimStore {
    state: Arc<SimState>,
}

impl SimStore {
    pub fn new(
        inner: Arc<dyn ObjectStore>,
        clock: Arc<ManualClock>,
        local_dir: Option<std::path::PathBuf>,
    ) -> Self {
        SimStore {
            state: Arc::new(SimState {
                inner,
                clock,
                local_dir,
                mtimes: Mutex::new(HashMap::new()),
                delete_budget: AtomicI64::new(-1),
                deletions: Mutex::new(Vec::new()),
                kill_budget: AtomicI64::new(-1),
                killed: tokio::sync::Notify::new(),
                listed: Mutex::new(HashMap::new()),
            }),
        }
    }

    /// Give the object at `location` the last-modified time `ms`, as a copy that kept
    /// its times (`cp -p`, `rsync -a`, `aws s3 sync`) would.
    pub fn set_last_modified(&self, location: &Path, ms: i64) {
        self.state
            .mtimes
            .lock()
            .expect("lock")
            .insert(location.clone(), ms);
        self.touch(location, ms);
    }

    /// Answer `n` more requests, then let every request hang forever (the process died
    /// there; a write that finds the kill point is applied first). `None`: never.
    pub fn kill_after(&self, n: Option<usize>) {
        let budget = n.map_or(-1, |n| n as i64);
        self.state.kill_budget.store(budget, Ordering::SeqCst);
    }

    /// Wait until a request finds the kill point.
    pub async fn killed(&self) {
        self.state.killed.notified().await;
    }

    /// How many times each object was returned by a listing so far.
    pub fn listed(&self) -> HashMap<String, u32> {
        self.state.listed.lock().expect("lock").clone()
    }

    /// Forget the listing counts.
    pub fn reset_listed(&self) {
        self.state.listed.lock().expect("lock").clear();
    }

    /// Count one request against the kill budget: `false` if this request dies.
    fn answer(&self) -> bool {
        let budget = &self.state.kill_budget;
        let outcome = budget.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |b| match b {
            -1 => Some(-1),
            0 => Some(-2),
            -2 => None,
            b => Some(b - 1),
        });
        match outcome {
            Ok(-1) => true,
            Ok(0) | Err(_) => {
                self.state.killed.notify_waiters();
                self.state.killed.notify_one();
                false
            }
            Ok(_) => true,
        }
    }

    /// Die here if the kill point is reached.
    async fn gate(&self) {
        if !self.answer() {
            std::future::pending::<()>().await;
        }
    }

    fn count_listed(&self, meta: &ObjectMeta) {
        *self
            .state
            .listed
            .lock()
            .expect("lock")
            .entry(meta.location.to_string())
            .or_default() += 1;
    }

    /// Let `n` more deletes succeed, then fail every one (`None`: unlimited).
    pub fn fail_deletes_after(&self, n: Option<usize>) {
        let budget = n.map_or(-1, |n| n as i64);
        self.state.delete_budget.store(budget, Ordering::SeqCst);
    }

    /// Every deletion so far.
    pub fn deletions(&self) -> Vec<Deletion> {
        self.state.deletions.lock().expect("lock").clone()
    }

    /// Give the file of `location` (local stores) the simulated time `ms`.
    fn touch(&self, location: &Path, ms: i64) {
        if let Some(dir) = &self.state.local_dir {
            let path = location
                .parts()
                .fold(dir.clone(), |path, part| path.join(part.as_ref()));
            set_mtime(&path, ms);
        }
    }

    fn stamp(&self, meta: &mut ObjectMeta) {
        if let Some(ms) = self.state.mtimes.lock().expect("lock").get(&meta.location) {
            meta.last_modified = (UNIX_EPOCH + Duration::from_millis(*ms as u64)).into();
        }
    }
}

impl SimStore {
    /// A listing, stamped and counted, one request per page of 1000 against the kill
    /// budget.
    fn counted(
        &self,
        listing: BoxStream<'static, object_store::Result<ObjectMeta>>,
    ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        let this = self.clone();
        let mut seen = 0u64;
        listing
            .then(move |meta| {
                let this = this.clone();
                let first_of_page = seen.is_multiple_of(1000);
                seen += 1;
                async move {
                    if first_of_page {
                        this.gate().await;
                    }
                    let mut meta = meta?;
                    this.stamp(&mut meta);
                    this.count_listed(&meta);
                    if std::env::var_os("PARQDB_SIM_TRACE_LIST").is_some() {
                        eprintln!("  listed {}", meta.location);
                    }
                    Ok(meta)
                }
            })
            .boxed()
    }
}

impl SimStore {
    /// The simulated time of the object at `key`, where the store gave it one.
    fn stamp_key(&self, entry: &mut RawEntry) {
        let Ok(location) = Path::parse(&entry.key) else {
            return;
        };
        if let Some(ms) = self.state.mtimes.lock().expect("lock").get(&location) {
            entry.last_modified_ms = *ms;
        }
    }
}

/// A warehouse's key lister over this simulated store: the store's own listing (an S3
/// warehouse's `ListObjectsV2`), stamped with the simulated times, counted, and one request
/// per page of 1000 against the kill budget, as the store's own listings are.
pub struct SimLister {
    inner: Arc<dyn KeyLister>,
    sim: SimStore,
}

impl fmt::Debug for SimLister {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SimLister({:?})", self.inner)
    }
}

#[async_trait]
impl KeyLister for SimLister {
    fn keys(
        self: Arc<Self>,
        prefix: String,
        start_after: Option<String>,
    ) -> BoxStream<'static, parqdb_catalog::Result<RawEntry>> {
        let sim = self.sim.clone();
        let mut seen = 0u64;
        self.inner
            .clone()
            .keys(prefix, start_after)
            .then(move |entry| {
                let sim = sim.clone();
                let first_of_page = seen.is_multiple_of(1000);
                seen += 1;
                async move {
                    if first_of_page {
                        sim.gate().await;
                    }
                    let mut entry = entry?;
                    sim.stamp_key(&mut entry);
                    *sim.state
                        .listed
                        .lock()
                        .expect("lock")
                        .entry(entry.key.clone())
                        .or_default() += 1;
                    Ok(entry)
                }
            })
            .boxed()
    }

    async fn directory(
        &self,
        prefix: &str,
    ) -> parqdb_catalog::Result<(Vec<RawEntry>, Vec<String>)> {
        self.sim.gate().await;
        let (mut objects, prefixes) = self.inner.directory(prefix).await?;
        for object in &mut objects {
            self.sim.stamp_key(object);
        }
        Ok((objects, prefixes))
    }
}

impl fmt::Display for SimStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SimStore({})", self.state.inner)
    }
}

#[async_trait]
impl ObjectStore for SimStore {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        let result = self.state.inner.put_opts(location, payload, opts).await;
        if result.is_ok() {
            let now = self.state.clock.now_ms();
            self.state
                .mtimes
                .lock()
                .expect("lock")
                .insert(location.clone(), now);
            self.touch(location, now);
        }
        self.gate().await;
        result
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        self.state
            .mtimes
            .lock()
            .expect("lock")
            .insert(location.clone(), self.state.clock.now_ms());
        self.state.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(
        &self,
        location: &Path,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        self.gate().await;
        let mut result = self.state.inner.get_opts(location, options).await?;
        self.stamp(&mut result.meta);
        Ok(result)
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        let this = self.clone();
        locations
            .then(move |location| {
                let this = this.clone();
                async move {
                    let location = location?;
                    this.gate().await;
                    let budget = &this.state.delete_budget;
                    let allowed = budget
                        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |b| match b {
                            -1 => Some(-1),
                            0 => None,
                            b => Some(b - 1),
                        })
                        .is_ok();
                    if !allowed {
                        return Err(object_store::Error::Generic {
                            store: "SimStore",
                            source: "injected failure: the process died mid-delete".into(),
                        });
                    }
                    // Only an object that existed counts as deleted (a redone page deletes
                    // again what it deleted before it was interrupted: a no-op).
                    let existed = this.state.inner.head(&location).await.is_ok();
                    this.state.inner.delete(&location).await?;
                    this.state.mtimes.lock().expect("lock").remove(&location);
                    if existed {
                        this.state.deletions.lock().expect("lock").push(Deletion {
                            path: location.to_string(),
                            at_ms: this.state.clock.now_ms(),
                        });
                    }
                    Ok(location)
                }
            })
            .boxed()
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        if std::env::var_os("PARQDB_SIM_TRACE_LIST").is_some() {
            eprintln!("list {prefix:?}");
        }
        self.counted(self.state.inner.list(prefix))
    }

    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        if std::env::var_os("PARQDB_SIM_TRACE_LIST").is_some() {
            eprintln!("list {prefix:?} after {offset}");
        }
        self.counted(self.state.inner.list_with_offset(prefix, offset))
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
        self.gate().await;
        let mut result = self.state.inner.list_with_delimiter(prefix).await?;
        for meta in &mut result.objects {
            self.stamp(meta);
        }
        Ok(result)
    }

    async fn copy_opts(
        &self,
        from: &Path,
        to: &Path,
        options: CopyOptions,
    ) -> object_store::Result<()> {
        self.state.inner.copy_opts(from, to, options).await
    }

    async fn rename_opts(
        &self,
        from: &Path,
        to: &Path,
        options: RenameOptions,
    ) -> object_store::Result<()> {
        self.state.inner.rename_opts(from, to, options).await
    }
}

/// Set a file's modification time to `ms` (Unix epoch milliseconds).
pub fn set_mtime(path: &std::path::Path, ms: i64) {
    let time = UNIX_EPOCH + Duration::from_millis(ms.max(0) as u64);
    std::fs::File::options()
        .write(true)
        .open(path)
        .and_then(|file| file.set_modified(time))
        .unwrap_or_else(|err| panic!("set mtime of {}: {err}", path.display()));
}

/// Make the symbolic link `link` to `target`, dated `ms` (the link's own modification
/// time, as the test's clock has it: a link made at the real time would stay young).
pub fn symlink_at(target: impl AsRef<std::path::Path>, link: &std::path::Path, ms: i64) {
    use std::os::unix::ffi::OsStrExt;
    std::os::unix::fs::symlink(target, link).expect("link");
    let time = libc::timespec {
        tv_sec: ms.max(0) / 1000,
        tv_nsec: (ms.max(0) % 1000) * 1_000_000,
    };
    let path = std::ffi::CString::new(link.as_os_str().as_bytes()).expect("path");
    // SAFETY: `path` is a valid NUL-terminated string and the two timespecs are valid.
    let done = unsafe {
        libc::utimensat(
            libc::AT_FDCWD,
            path.as_ptr(),
            [time, time].as_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    assert_eq!(done, 0, "date the link {}", link.display());
}

/// Copy the directory `from` and everything under it to `to` (a backup of a local pointer
/// store, or a copy of it restored elsewhere).
pub fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).expect("dir");
    for entry in std::fs::read_dir(from).expect("read dir") {
        let entry = entry.expect("entry");
        let target = to.join(entry.file_name());
        if entry.file_type().expect("type").is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).expect("copy");
        }
    }
}

/// Restore `backup` into `dir` as `rsync -a --delete backup/ dir/` does: the directories
/// present in both stay (the same directories, so a pointer store restored this way is
/// still the same store instance), everything else of `dir` is removed, and the backup's
/// files are copied in with their times (`cp -a`).
pub fn restore_into(backup: &std::path::Path, dir: &std::path::Path) {
    fn clear(backup: &std::path::Path, dir: &std::path::Path) {
        for entry in std::fs::read_dir(dir).expect("read dir") {
            let entry = entry.expect("entry");
            let kept = backup.join(entry.file_name());
            let is_dir = entry.file_type().expect("type").is_dir();
            if is_dir && kept.is_dir() {
                clear(&kept, &entry.path());
            } else if is_dir {
                std::fs::remove_dir_all(entry.path()).expect("removed");
            } else {
                std::fs::remove_file(entry.path()).expect("removed");
            }
        }
    }
    clear(backup, dir);
    let status = std::process::Command::new("cp")
        .arg("-a")
        .arg(backup.join("."))
        .arg(dir)
        .status()
        .expect("cp");
    assert!(
        status.success(),
        "cp -a {}/. {}",
        backup.display(),
        dir.display()
    );
}

/// A catalog over a simulated-time warehouse.
pub struct Env {
    pub catalog: Catalog,
    pub warehouse: Warehouse,
    pub sim: SimStore,
    pub clock: Arc<ManualClock>,
    pub pointer_store: Arc<dyn PointerStore>,
    /// The warehouse directory of a local backend.
    pub local_dir: Option<std::path::PathBuf>,
    _dir: Option<tempfile::TempDir>,
}

/// Which backend a test runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// Local files for the warehouse and the pointer store.
    Local,
    /// `MemoryStore` and `Warehouse::in_memory`'s object store.
    Memory,
    /// The warehouse in a fresh bucket of the local S3-compatible server
    /// (`PARQDB_TEST_S3_ENDPOINT`), pointers in a `MemoryStore`; see [`Env::open`].
    S3,
}

impl Env {
    /// A local warehouse whose simulated clock runs ahead of the real one, so that the
    /// store's times of its files (their modification) are the simulated clock's: the
    /// machine clock a scenario may step back (rounds 141 and 143).
    pub async fn open_ahead_of_real_time(seed: u64) -> Env {
        let env = Env::open(Backend::Local, seed).await;
        let real_now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("after the epoch")
            .as_millis() as i64;
        env.clock.set(env.now().max(real_now) + 30 * 24 * HOUR);
        env
    }

    /// An environment on any backend whose catalog has claimed the warehouse (as `init`
    /// does), so tests may write objects before the catalog's first write.
    pub async fn open(backend: Backend, seed: u64) -> Env {
        let env = Env::open_unclaimed(backend, seed).await;
        parqdb_catalog::gc::claim(&env.catalog, env.now())
            .await
            .expect("the fresh warehouse is claimed");
        env
    }

    /// An environment on any backend (the S3 one needs its bucket created first), its
    /// warehouse not claimed yet.
    pub async fn open_unclaimed(backend: Backend, seed: u64) -> Env {
        if backend != Backend::S3 {
            return Env::new(backend, seed);
        }
        let options = crate::support::services::s3_options();
        let bucket = crate::support::services::new_bucket_named("parqdb-gc-").await;
        let builder =
            parqdb_catalog::store::s3::amazon_s3_builder(&bucket, &options).expect("builder");
        let store = builder.clone().build().expect("S3 client");
        let lister =
            parqdb_catalog::warehouse::s3_key_lister(&builder, store.credentials().clone());
        Env::assemble(
            Arc::new(store),
            format!("s3://{bucket}/wh"),
            Path::from("wh"),
            Arc::new(MemoryStore::new()),
            None,
            Some(lister.expect("the test server's configuration is listed by the store's lister")),
            seed,
        )
    }

    pub fn new(backend: Backend, seed: u64) -> Env {
        let (inner, root, prefix, pointer_store, dir): (
            Arc<dyn ObjectStore>,
            String,
            Path,
            Arc<dyn PointerStore>,
            _,
        ) = match backend {
            Backend::Local => {
                let dir = tempfile::tempdir().expect("temp dir");
                let wh = dir.path().join("warehouse");
                std::fs::create_dir_all(&wh).expect("warehouse dir");
                let wh = wh.canonicalize().expect("canonical");
                let store =
                    object_store::local::LocalFileSystem::new_with_prefix(&wh).expect("local fs");
                let root = url::Url::from_directory_path(&wh).expect("url").to_string();
                let pointers: Arc<dyn PointerStore> =
                    Arc::new(LocalStore::new(wh.join("_catalog")));
                (Arc::new(store), root, Path::default(), pointers, Some(dir))
            }
            Backend::S3 => panic!("the S3 environment is async: use Env::open"),
            Backend::Memory => (
                Arc::new(object_store::memory::InMemory::new()),
                format!("memory://sim{seed}/wh"),
                Path::from("wh"),
                Arc::new(MemoryStore::new()) as Arc<dyn PointerStore>,
                None,
            ),
        };
        Env::assemble(inner, root, prefix, pointer_store, dir, None, seed)
    }

    /// The environment over the object store `inner` (the warehouse at `root`, under
    /// `prefix`; in `dir`'s `warehouse/` for local files; listed by `lister` where the
    /// store has one, as an S3 warehouse is) and `pointer_store`.
    fn assemble(
        inner: Arc<dyn ObjectStore>,
        root: String,
        prefix: Path,
        pointer_store: Arc<dyn PointerStore>,
        dir: Option<tempfile::TempDir>,
        lister: Option<Arc<dyn KeyLister>>,
        seed: u64,
    ) -> Env {
        let clock = Arc::new(ManualClock::new(START_MS));
        let local_dir = dir.as_ref().map(|d: &tempfile::TempDir| {
            d.path()
                .join("warehouse")
                .canonicalize()
                .expect("canonical")
        });
        let sim = SimStore::new(inner, clock.clone(), local_dir.clone());
        let mut warehouse =
            Warehouse::new(&root, Arc::new(sim.clone()), prefix).expect("warehouse");
        if let Some(local) = &local_dir {
            warehouse = warehouse.with_local_dir(local).expect("local dir");
        }
        if let Some(inner) = lister {
            let sim = sim.clone();
            warehouse = warehouse.with_key_lister(Arc::new(SimLister { inner, sim }));
        }
        let catalog = Catalog::builder(pointer_store.clone(), warehouse.clone())
            .clock(clock.clone())
            .ids(Arc::new(SeededIds::new(seed)))
            .build();
        Env {
            catalog,
            warehouse,
            sim,
            clock,
            pointer_store,
            local_dir,
            _dir: dir,
        }
    }

    /// An environment on `backend` whose pointer records live in `pointer_store` (a
    /// DynamoDB Local table, say), its warehouse claimed.
    pub async fn open_with_pointers(
        backend: Backend,
        seed: u64,
        pointer_store: Arc<dyn PointerStore>,
    ) -> Env {
        let mut env = Env::open_unclaimed(backend, seed).await;
        env.catalog = Catalog::builder(pointer_store.clone(), env.warehouse.clone())
            .clock(env.clock.clone())
            .ids(Arc::new(SeededIds::new(seed)))
            .build();
        env.pointer_store = pointer_store;
        parqdb_catalog::gc::claim(&env.catalog, env.now())
            .await
            .expect("the fresh warehouse is claimed");
        env
    }

    /// Assert that `copy` (a faithful copy of the owner's store, holding index `id` at
    /// `v1`) may neither write into the owner's warehouse nor collect in it; the refusal of
    /// its write.
    pub async fn refused_copy(
        &self,
        copy: Catalog,
        config: &GcConfig,
        id: &IndexIdentifier,
        v1: &str,
    ) -> parqdb_catalog::Error {
        assert_eq!(
            copy.load(id)
                .await
                .expect("the copy holds the index")
                .metadata_location,
            v1,
            "a faithful copy"
        );
        let ns = Namespace::new(["copy"]).expect("ns");
        let err = copy
            .create_namespace(&ns, BTreeMap::new())
            .await
            .expect_err("a copy may not write into the owner's warehouse");
        assert_eq!(
            err.kind(),
            parqdb_catalog::ErrorKind::WarehouseNotOwned,
            "{err}"
        );
        let refused = GarbageCollector::new(copy, config.clone())
            .expect("collector")
            .collect(self.now())
            .await
            .expect_err("a copy may not collect in the owner's warehouse");
        assert_eq!(
            refused.kind(),
            parqdb_catalog::ErrorKind::WarehouseNotOwned,
            "{refused}"
        );
        err
    }

    /// Assert that `owner`, under a marker of an earlier release, collects, and that its
    /// run says what the marker does not bind (`missing`).
    pub async fn collects_with_warning(&self, owner: Catalog, config: &GcConfig, missing: &str) {
        let report = GarbageCollector::new(owner, config.clone())
            .expect("collector")
            .collect(self.now())
            .await
            .expect("the owner of an earlier release's marker collects");
        assert!(
            report
                .warnings
                .iter()
                .any(|warning| warning.contains(missing)),
            "every run says what the marker does not bind ({missing}): {:?}",
            report.warnings
        );
    }

    /// Another catalog (its own pointer store) over the same warehouse.
    pub fn foreign_catalog(&self, seed: u64) -> Catalog {
        Catalog::builder(Arc::new(MemoryStore::new()), self.warehouse.clone())
            .clock(self.clock.clone())
            .ids(Arc::new(SeededIds::new(seed)))
            .build()
    }

    pub fn now(&self) -> i64 {
        self.clock.now_ms()
    }

    pub fn advance(&self, ms: i64) {
        self.clock.advance(ms);
    }

    pub fn gc(&self, config: GcConfig) -> GarbageCollector {
        GarbageCollector::new(self.catalog.clone(), config).expect("valid gc config")
    }

    pub async fn collect(&self, config: &GcConfig) -> GcReport {
        self.gc(config.clone())
            .collect(self.now())
            .await
            .expect("gc run")
    }

    /// Collect every 10 minutes (at most 40 times) until a dry run would delete `name`;
    /// whether it came to that.
    pub async fn collect_until_doomed(&self, config: &GcConfig, name: &str) -> bool {
        let dry_run = GcConfig {
            dry_run: true,
            ..config.clone()
        };
        for _ in 0..40 {
            self.advance(10 * MINUTE);
            let report = self.collect(&dry_run).await;
            let doomed = |a: &parqdb_catalog::gc::GcAction| {
                a.path == name && a.action == parqdb_catalog::gc::ActionKind::Delete
            };
            if report.actions.iter().any(doomed) {
                return true;
            }
            self.collect(config).await;
        }
        false
    }

    /// [`Env::collect`] with no time budget: the run stops after its first step (its plan,
    /// for a new run), unfinished.
    pub async fn collect_without_budget(&self, config: &GcConfig) -> GcReport {
        self.collect(&GcConfig {
            budget: Some(Duration::ZERO),
            ..config.clone()
        })
        .await
    }

    /// [`Env::collect`], and the run must have completed.
    pub async fn collect_completed(&self, config: &GcConfig) -> GcReport {
        let report = self.collect(config).await;
        assert_eq!(report.status, GcStatus::Completed, "{report:?}");
        report
    }

    /// A collection by a process that dies after answering `point` requests
    /// ([`SimStore::kill_after`]): `None` if it died before the run ended, else the run's
    /// result. The requests after it are answered again.
    pub async fn collect_killed_after(
        &self,
        config: &GcConfig,
        point: usize,
    ) -> Option<parqdb_catalog::Result<GcReport>> {
        self.sim.kill_after(Some(point));
        let collector = self.gc(config.clone());
        let outcome = tokio::select! {
            biased;
            () = self.sim.killed() => None,
            report = collector.collect(self.now()) => Some(report),
        };
        drop(collector);
        self.sim.kill_after(None);
        outcome
    }

    /// Write one small object at a warehouse-relative path.
    pub async fn put(&self, relative: &str, bytes: &'static [u8]) {
        self.warehouse
            .object_store()
            .put(
                &self.warehouse.path(relative).expect("valid name"),
                PutPayload::from_static(bytes),
            )
            .await
            .expect("object written");
    }

    /// Write one small object whose last-modified time says `ms` (a copy that kept its
    /// times).
    pub async fn put_dated(&self, relative: &str, bytes: &'static [u8], ms: i64) {
        self.put(relative, bytes).await;
        self.sim
            .set_last_modified(&self.warehouse.path(relative).expect("valid name"), ms);
    }

    /// Write an object the way another engine would: at the raw key `name` (no
    /// percent-encoding), stamped with the simulated time.
    pub async fn put_raw(&self, name: &str, bytes: &'static [u8]) {
        let key = match self.warehouse.prefix().as_ref() {
            "" => name.to_owned(),
            prefix => format!("{prefix}/{name}"),
        };
        let path = Path::parse(&key).expect("a raw key");
        self.warehouse
            .object_store()
            .put(&path, PutPayload::from_static(bytes))
            .await
            .expect("object written");
    }

    /// Whether the object at the raw key `name` exists.
    pub async fn exists_raw(&self, name: &str) -> bool {
        let key = match self.warehouse.prefix().as_ref() {
            "" => name.to_owned(),
            prefix => format!("{prefix}/{name}"),
        };
        match self
            .warehouse
            .object_store()
            .head(&Path::parse(&key).expect("a raw key"))
            .await
        {
            Ok(_) => true,
            Err(object_store::Error::NotFound { .. }) => false,
            Err(err) => panic!("head {name}: {err}"),
        }
    }

    /// Whether an object exists.
    pub async fn exists(&self, relative: &str) -> bool {
        match self
            .warehouse
            .object_store()
            .head(&self.warehouse.path(relative).expect("valid name"))
            .await
        {
            Ok(_) => true,
            Err(object_store::Error::NotFound { .. }) => false,
            Err(err) => panic!("head {relative}: {err}"),
        }
    }

    /// Which of the objects `names` no longer exist.
    pub async fn missing(&self, names: &[String]) -> Vec<String> {
        let mut gone = Vec::new();
        for name in names {
            if !self.exists(name).await {
                gone.push(name.clone());
            }
        }
        gone
    }

    /// Whether one of `names` (raw keys if `raw`) exists (`present`) or is missing
    /// (`!present`), asking up to the first that does.
    async fn any(&self, names: &[String], raw: bool, present: bool) -> bool {
        for name in names {
            let exists = if raw {
                self.exists_raw(name).await
            } else {
                self.exists(name).await
            };
            if exists == present {
                return true;
            }
        }
        false
    }

    /// Whether every object of `names` exists (asking up to the first that does not).
    pub async fn all_exist(&self, names: &[String]) -> bool {
        !self.any(names, false, false).await
    }

    /// Whether no object of `names` exists (asking up to the first that does).
    pub async fn none_exist(&self, names: &[String]) -> bool {
        !self.any(names, false, true).await
    }

    /// [`Env::all_exist`] of raw keys.
    pub async fn all_exist_raw(&self, names: &[String]) -> bool {
        !self.any(names, true, false).await
    }

    /// [`Env::none_exist`] of raw keys.
    pub async fn none_exist_raw(&self, names: &[String]) -> bool {
        !self.any(names, true, true).await
    }

    /// Every object path under the warehouse (relative), sorted.
    pub async fn objects(&self) -> Vec<String> {
        let prefix = self.warehouse.prefix().clone();
        let mut all: Vec<String> = self
            .warehouse
            .object_store()
            .list(Some(&prefix))
            .map_ok(|meta| {
                meta.location
                    .prefix_match(&prefix)
                    .map(|parts| {
                        parts
                            .map(|p| p.as_ref().to_owned())
                            .collect::<Vec<_>>()
                            .join("/")
                    })
                    .unwrap_or_default()
            })
            .try_collect()
            .await
            .expect("listing");
        all.sort();
        all
    }

    /// Objects under the managed prefixes.
    pub async fn managed_objects(&self) -> Vec<String> {
        self.objects()
            .await
            .into_iter()
            .filter(|p| p.starts_with("metadata/") || p.starts_with("indexes/"))
            .collect()
    }

    /// Ledger files.
    pub async fn ledger_files(&self) -> Vec<String> {
        self.objects()
            .await
            .into_iter()
            .filter(|p| p.starts_with("_gc/ledger/"))
            .collect()
    }

    /// Ledger files no deletion record (`_gc/deleted/`) lists: those a later run does not
    /// release.
    pub async fn unrecorded_ledger_files(&self) -> Vec<String> {
        let mut recorded = std::collections::HashSet::new();
        for record in self.objects().await {
            if !record.starts_with("_gc/deleted/") {
                continue;
            }
            let bytes = self
                .warehouse
                .object_store()
                .get(&self.warehouse.path(&record).expect("record name"))
                .await
                .expect("record")
                .bytes()
                .await
                .expect("record bytes");
            let body: serde_json::Value = serde_json::from_slice(&bytes).expect("record json");
            for file in body["ledger-files"].as_array().expect("ledger files") {
                recorded.insert(file.as_str().expect("a name").to_owned());
            }
            // The condemnation markers it releases once their names are all deleted.
            for marker in body["markers"]
                .as_object()
                .into_iter()
                .flat_map(|m| m.keys())
            {
                recorded.insert(marker.clone());
            }
        }
        self.ledger_files()
            .await
            .into_iter()
            .filter(|file| !recorded.contains(file))
            .collect()
    }

    /// The ledger files of `object`'s entry.
    pub async fn entry_of(&self, object: &str) -> Vec<String> {
        self.ledger_files()
            .await
            .into_iter()
            .filter(|f| f.contains(&format!("_gc/ledger/{object}/")))
            .collect()
    }

    /// The clocks files (`scan/<p>/<seq>.carried.json`) of every run, with their run's
    /// directory name (which sorts runs by their start).
    async fn carried_pages(&self) -> Vec<(String, String)> {
        self.objects()
            .await
            .into_iter()
            .filter(|name| name.starts_with("_gc/runs/") && name.ends_with(".carried.json"))
            .filter_map(|name| Some((name.split('/').nth(2)?.to_owned(), name)))
            .collect()
    }

    /// The clocks files of the newest run that wrote any: the retention clocks of
    /// `indexes/` live there, not in the ledger.
    pub async fn newest_carried_pages(&self) -> Vec<String> {
        let all = self.carried_pages().await;
        let newest = all.iter().map(|(run, _)| run.clone()).max();
        all.into_iter()
            .filter(|(run, _)| Some(run) == newest.as_ref())
            .map(|(_, page)| page)
            .collect()
    }

    /// The clocks one clocks file carries: (object, start, walk).
    async fn clocks_of_page(&self, page: &str) -> Vec<(String, i64, i64)> {
        let path = self.warehouse.path(page).expect("page name");
        let bytes = self
            .warehouse
            .object_store()
            .get(&path)
            .await
            .expect("clocks file")
            .bytes()
            .await
            .expect("clocks bytes");
        let body: serde_json::Value = serde_json::from_slice(&bytes).expect("clocks json");
        body["clocks"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|clock| {
                (
                    clock["name"].as_str().expect("name").to_owned(),
                    clock["start-ms"].as_i64().expect("start"),
                    clock["walk-ms"].as_i64().expect("walk"),
                )
            })
            .collect()
    }

    /// Every clock every run's scan pages carry: (run directory, object, start, walk).
    pub async fn carried_clocks(&self) -> Vec<(String, String, i64, i64)> {
        let mut clocks = Vec::new();
        for (run, page) in self.carried_pages().await {
            for (object, start, walk) in self.clocks_of_page(&page).await {
                clocks.push((run.clone(), object, start, walk));
            }
        }
        clocks
    }

    /// The retention clock's start that the newest run's scan pages carry for `object`
    /// (a warehouse-relative name of `indexes/`), if they carry one.
    pub async fn newest_carried_clock(&self, object: &str) -> Option<i64> {
        for page in self.newest_carried_pages().await {
            if let Some((_, start, _)) = self
                .clocks_of_page(&page)
                .await
                .into_iter()
                .find(|(name, _, _)| name == object)
            {
                return Some(start);
            }
        }
        None
    }

    /// Journal files.
    pub async fn journal_files(&self) -> Vec<String> {
        self.objects()
            .await
            .into_iter()
            .filter(|n| n.starts_with("_gc/journal/"))
            .collect()
    }

    pub async fn namespace(&self, name: &str) -> Namespace {
        let namespace = Namespace::new([name]).expect("namespace");
        if !self
            .catalog
            .namespace_exists(&namespace)
            .await
            .expect("exists")
        {
            self.catalog
                .create_namespace(&namespace, BTreeMap::new())
                .await
                .expect("namespace created");
        }
        namespace
    }

    pub async fn id(&self, name: &str) -> IndexIdentifier {
        IndexIdentifier::new(self.namespace("ns").await, name).expect("identifier")
    }

    /// Write metadata to a fresh location; returns the absolute location.
    pub async fn write_metadata(&self, metadata: &IndexMetadata) -> String {
        let relative = format!(
            "metadata/{}/{:05}-{}.metadata.json",
            metadata.index_uuid(),
            metadata.last_sequence_number(),
            self.catalog.ids().uuid()
        );
        self.warehouse
            .write_new(&relative, Bytes::from(metadata.to_json_vec()))
            .await
            .expect("metadata written")
    }

    /// The warehouse-relative form of an absolute location.
    pub fn relative(&self, location: &str) -> String {
        self.warehouse
            .relative(location)
            .expect("inside the warehouse")
    }
}

/// The source binding used by the fixtures.
pub fn source() -> TableDefinition {
    source_at("s3://example/documents/")
}

/// A source binding whose location is `location`.
pub fn source_at(location: &str) -> TableDefinition {
    TableDefinition::new(
        "parquet",
        BTreeMap::from([
            ("definition-version".to_owned(), "1".to_owned()),
            ("location".to_owned(), location.to_owned()),
        ]),
    )
    .expect("valid source")
}

/// Where one snapshot's tables live and what it references.
#[derive(Debug, Clone)]
pub struct Layout {
    pub centroids: String,
    pub postings: String,
    pub centroids_metadata: Option<String>,
    pub source: TableDefinition,
}

impl Layout {
    /// Tables under `indexes/<tag>/…/`.
    pub fn under(tag: &str) -> Layout {
        Layout {
            centroids: format!("indexes/{tag}/ivf_centroids/"),
            postings: format!("indexes/{tag}/ivf_postings/"),
            centroids_metadata: None,
            source: source(),
        }
    }

    /// The data files [`Env::write_tables`] writes (two per table).
    pub fn files(&self) -> Vec<String> {
        [&self.centroids, &self.postings]
            .into_iter()
            .flat_map(|dir| {
                [
                    format!("{dir}part-0.parquet"),
                    format!("{dir}part-1.parquet"),
                ]
            })
            .collect()
    }
}

/// The sample snapshot contents with the layout's source, tables and centroids metadata.
pub fn contents(layout: &Layout) -> SnapshotContents {
    let mut contents = SnapshotContents {
        source_table: layout.source.clone(),
        ..fixture::contents_at(&layout.centroids, &layout.postings)
    };
    if let Some(location) = &layout.centroids_metadata {
        contents.parameters.insert(
            "ivf_centroids_metadata_location".to_owned(),
            location.clone(),
        );
    }
    contents
}

impl Env {
    /// Write the data files of a layout (two per table).
    pub async fn write_tables(&self, layout: &Layout) {
        for name in layout.files() {
            self.put(&name, b"0123456789").await;
        }
    }

    /// A new index's metadata for `layout` (nothing written).
    pub fn metadata_for(&self, layout: &Layout) -> IndexMetadata {
        IndexMetadata::create(
            contents(layout),
            BTreeMap::new(),
            self.clock.as_ref(),
            self.catalog.ids().as_ref(),
            &FamilyRegistry::builtin(),
        )
        .expect("valid metadata")
    }

    /// A new index's files and metadata (not registered).
    pub async fn new_index(&self, layout: &Layout) -> (IndexMetadata, String) {
        self.write_tables(layout).await;
        let metadata = self.metadata_for(layout);
        let location = self.write_metadata(&metadata).await;
        (metadata, location)
    }

    /// A successor's files and metadata (not committed).
    pub async fn successor(
        &self,
        base: &IndexMetadata,
        layout: &Layout,
        keep_last: Option<usize>,
    ) -> (IndexMetadata, String) {
        self.write_tables(layout).await;
        let next = base
            .successor(
                contents(layout),
                self.clock.as_ref(),
                self.catalog.ids().as_ref(),
                &FamilyRegistry::builtin(),
            )
            .expect("valid successor");
        let next = match keep_last {
            Some(keep) => next
                .expire_snapshots(Some(keep), None, self.clock.as_ref())
                .expect("expired"),
            None => next,
        };
        let location = self.write_metadata(&next).await;
        (next, location)
    }

    /// The bytes of the pointer record at `key`.
    pub async fn record_bytes(&self, key: &StoreKey) -> Bytes {
        self.pointer_store
            .get(key)
            .await
            .expect("read")
            .expect("the record")
            .value
    }

    /// Write `bytes` over the pointer record at `key`, whatever it holds now, as a hand
    /// edit or a restore in place does.
    pub async fn put_record_back(&self, key: &StoreKey, bytes: Bytes) {
        let current = self
            .pointer_store
            .get(key)
            .await
            .expect("read")
            .expect("record");
        self.pointer_store
            .put(key, bytes, PutMode::Update(current.version))
            .await
            .expect("put back");
    }

    /// Register a new index under `name`.
    pub async fn register(
        &self,
        name: &str,
        layout: &Layout,
    ) -> (IndexIdentifier, IndexMetadata, String) {
        let id = self.id(name).await;
        let (metadata, location) = self.new_index(layout).await;
        self.catalog
            .register(&id, Some(&layout.source), &location)
            .await
            .expect("registered");
        (id, metadata, location)
    }

    /// Register the metadata file at `location` (written for `layout`) as `name`: it is
    /// published now.
    pub async fn publish(&self, name: &str, layout: &Layout, location: &str) -> IndexIdentifier {
        let id = self.id(name).await;
        self.catalog
            .register(&id, Some(&layout.source), location)
            .await
            .expect("registered");
        id
    }

    /// Commit `id` from `location` (holding `metadata`) to a successor whose tables are at
    /// `next`: `location` loses catalog reachability now, the time returned.
    pub async fn commit_away(
        &self,
        id: &IndexIdentifier,
        metadata: &IndexMetadata,
        location: &str,
        next: &Layout,
    ) -> i64 {
        let (_, successor) = self.successor(metadata, next, None).await;
        self.catalog
            .commit(id, Some(&next.source), location, &successor)
            .await
            .expect("committed");
        self.now()
    }

    /// A minute from now `id` commits away from `metadata` at `location` (to a successor
    /// under `again/2`); then each of `watched` must outlive the retention window while
    /// `pass` collects every five minutes ([`Env::assert_kept_through_retention`]).
    pub async fn lose_and_keep_through_retention(
        &self,
        id: &IndexIdentifier,
        metadata: &IndexMetadata,
        location: &str,
        watched: &[String],
        pass: impl AsyncFnMut(),
    ) {
        self.advance(MINUTE);
        let lost_at = self
            .commit_away(id, metadata, location, &Layout::under("again/2"))
            .await;
        self.assert_kept_through_retention(lost_at, 5 * MINUTE, watched, "", pass)
            .await;
    }

    /// The promise the red teams attack: objects that lost catalog reachability at
    /// `lost_at` outlive the retention of [`test_config`] (2 h). Every `every` ms until a
    /// minute before it has passed, `pass` runs (a collection), then each of `watched` must
    /// still exist (`context` goes into the failure message).
    pub async fn assert_kept_through_retention(
        &self,
        lost_at: i64,
        every: i64,
        watched: &[String],
        context: &str,
        mut pass: impl AsyncFnMut(),
    ) {
        while self.now() < lost_at + 2 * HOUR - MINUTE {
            self.advance(every);
            pass().await;
            for object in watched {
                assert!(
                    self.exists(object).await,
                    "{object} deleted {} min after losing reachability (retention 2 h){context}",
                    (self.now() - lost_at) / MINUTE
                );
            }
        }
    }
}

/// A configuration with short, forced windows for tests: retention 2h, grace 10m,
/// condemnation delay 10m, skew 1m.
pub fn test_config() -> GcConfig {
    GcConfig {
        retention: Duration::from_secs(2 * 3600),
        grace: Duration::from_secs(600),
        condemn_delay: Some(Duration::from_secs(600)),
        max_clock_skew: Duration::from_secs(60),
        // Two partitions: runs fan out, at little cost per run on the serialised S3
        // server (a partition costs a dozen requests of bookkeeping per run).
        partitions: 2,
        ..GcConfig::default()
    }
}

/// How far a new run goes before it is given up.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum GivenUp {
    /// After its verification walk: it never swept the ledger.
    BeforeSweep,
    /// After every delete step, with its ledger sweep (everything but the finish step).
    AfterSweep,
}

/// Run a new run's steps up to `stop`: plan, every scan, the verification, and (after the
/// sweep) every delete step with its ledger sweep. Its id.
pub async fn run_until(env: &Env, config: &GcConfig, stop: GivenUp) -> uuid::Uuid {
    let gc = env.gc(config.clone());
    let now = env.now();
    let plan = loop {
        let outcome = gc
            .step(parqdb_catalog::gc::GcStep::Plan, now, None)
            .await
            .expect("plan");
        if outcome.done {
            break outcome;
        }
    };
    let run = plan.report.run_id;
    for partition in 0..plan.partitions {
        while !gc
            .step(
                parqdb_catalog::gc::GcStep::Scan { run, partition },
                now,
                None,
            )
            .await
            .expect("scan")
            .done
        {}
    }
    while !gc
        .step(parqdb_catalog::gc::GcStep::Verify { run }, now, None)
        .await
        .expect("verify")
        .done
    {}
    if stop == GivenUp::AfterSweep {
        for partition in 0..plan.partitions {
            while !gc
                .step(
                    parqdb_catalog::gc::GcStep::Delete { run, partition },
                    now,
                    None,
                )
                .await
                .expect("delete")
                .done
            {}
        }
    }
    run
}

/// Give each of `old`'s postings' ledger entries a clock file of a run that never
/// finished (never trusted), so the next run records its clock as a trusted clock file too
/// (round 131, F1), as an earlier release did for every object.
pub async fn put_untrusted_clock_files(env: &Env, old: &Layout) {
    let never_finished = format!("{}-{}", env.now(), uuid::Uuid::nil().simple());
    for object in old.files() {
        if object.starts_with(&old.postings) {
            let (at, ms) = (env.now(), env.now());
            env.put_raw(
                &format!("_gc/ledger/{object}/o-{at}-{ms}-{never_finished}.json"),
                b"{}",
            )
            .await;
        }
    }
}
