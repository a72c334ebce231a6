//! A synthetic S3-compatible HTTP server for the garbage collector at scale.
//!
//! It serves the path-style subset of the S3 API that object_store's AWS client, the
//! collector and `parqdb-catalog init` use: `ListObjectsV2` (prefix, delimiter,
//! start-after, continuation-token, max-keys ≤ 1000, common prefixes), `GET`/`HEAD`
//! (`404 NoSuchKey`), `PUT` (with `If-None-Match: *` → `412 PreconditionFailed` if the
//! key exists), `DELETE`, `POST ?delete` (DeleteObjects) and bucket creation.
//!
//! Most of the warehouse is **virtual**: object `i` of `0..objects` is
//! `<root>/indexes/v<dir:06x>/ivf_postings/part-<file:06x>.parquet` (`dir = i / per_dir`,
//! `file = i % per_dir`), so key order is generation order; it has a deterministic size
//! and an old last-modified time, and is listed lazily from any position (nothing per
//! object but a deletion bit and a listing counter is kept). Every `live_every`-th
//! directory is live (the harness registers indexes naming it); everything else is
//! garbage. The ledger files the collector writes for virtual objects
//! (`_gc/ledger/<object>/o-…` and `c-…`) are kept compactly per object (time, run, write
//! time) and served from there; everything else written (metadata, the ownership marker,
//! the collector's run state) lives in a map merged into listings in key order.
//!
//! The scan's pages carry the retention clocks of `indexes/` (`scan/<p>/<seq>.carried.json`,
//! stored as written): the server also reads each such file as it is written and keeps
//! the clock it carries for every virtual object compactly (start and walk).
//!
//! The server counts requests by kind and watches the invariants: live virtual objects
//! deleted (must stay 0) and retention clocks restarted (a second, different `o-` file
//! for one object, or a page carrying a different clock than an earlier page did).
//!
//! HTTP/1.1 (keep-alive, `Content-Length` and chunked bodies, `Expect: 100-continue`) is
//! spoken directly over tokio with `httparse`, not with hyper's server: that needs hyper's
//! `server` feature, which brings a crate the lock does not have (`httpdate`) and, by
//! changing hyper's features, rebuilds hyper's whole dependent graph (reqwest,
//! object_store, the AWS SDK) for every test and example build.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use bytes::Bytes;
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

/// The shape of the synthetic warehouse.
#[derive(Debug, Clone)]
pub struct Shape {
    /// The bucket.
    pub bucket: String,
    /// The warehouse root inside the bucket (no slashes at the ends), e.g. `wh`.
    pub root: String,
    /// Virtual objects under `indexes/`.
    pub objects: u64,
    /// Virtual objects per top-level directory of `indexes/`.
    pub per_dir: u64,
    /// Every `live_every`-th directory (0, n, 2n, ...) is live.
    pub live_every: u64,
    /// The virtual objects' last-modified time (ms since the epoch).
    pub mtime_ms: i64,
    /// A sleep before every answer.
    pub latency: Duration,
}

impl Shape {
    /// The number of top-level directories.
    pub fn dirs(&self) -> u64 {
        self.objects.div_ceil(self.per_dir)
    }

    /// Whether directory `dir` is live.
    pub fn live_dir(&self, dir: u64) -> bool {
        dir.is_multiple_of(self.live_every)
    }

    /// Whether virtual object `i` is live.
    pub fn live(&self, i: u64) -> bool {
        self.live_dir(i / self.per_dir)
    }

    /// How many virtual objects are live.
    pub fn live_objects(&self) -> u64 {
        (0..self.dirs())
            .filter(|dir| self.live_dir(*dir))
            .map(|dir| self.per_dir.min(self.objects - dir * self.per_dir))
            .sum()
    }

    /// A directory's name below `indexes/` (`v00002a`).
    pub fn dir_name(dir: u64) -> String {
        format!("v{dir:06x}")
    }

    /// The bucket key of virtual object `i`.
    pub fn key(&self, i: u64) -> String {
        let (dir, file) = (i / self.per_dir, i % self.per_dir);
        format!(
            "{}/indexes/v{dir:06x}/ivf_postings/part-{file:06x}.parquet",
            self.root
        )
    }

    /// The virtual object a bucket key names, if it is one.
    pub fn index_of(&self, key: &str) -> Option<u64> {
        let rest = key.strip_prefix(&self.root)?.strip_prefix("/indexes/v")?;
        let (dir, rest) = rest.split_at_checked(6)?;
        let rest = rest.strip_prefix("/ivf_postings/part-")?;
        let (file, rest) = rest.split_at_checked(6)?;
        if rest != ".parquet" {
            return None;
        }
        let hex = |s: &str| {
            s.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
                .then(|| u64::from_str_radix(s, 16).ok())
                .flatten()
        };
        let (dir, file) = (hex(dir)?, hex(file)?);
        if file >= self.per_dir {
            return None;
        }
        let i = dir * self.per_dir + file;
        (i < self.objects).then_some(i)
    }

    /// The size of virtual object `i`.
    pub fn size(&self, i: u64) -> u64 {
        4096 + (i.wrapping_mul(2_654_435_761) % 65_536)
    }

    fn ledger_prefix(&self) -> String {
        format!("{}/_gc/ledger/", self.root)
    }

    /// The ledger directory key of virtual object `i` (ends with `/`).
    pub fn ledger_dir(&self, i: u64) -> String {
        format!(
            "{}{}/",
            self.ledger_prefix(),
            &self.key(i)[self.root.len() + 1..]
        )
    }
}

/// Request kinds counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(usize)]
pub enum Kind {
    /// Listing of `indexes/` without a delimiter (the scan).
    ListIndexes,
    /// Listing of one object's ledger directory (with a delimiter).
    ListLedgerEntry,
    /// Ranged listing of the ledger (the sweep).
    ListLedgerRange,
    /// Other listings.
    ListOther,
    Get,
    Head,
    /// PUT of a ledger file.
    PutLedger,
    /// Other PUTs.
    PutOther,
    /// PUT refused with 412.
    PutConflict,
    Delete,
    /// DeleteObjects requests.
    DeleteObjects,
    /// Keys named in DeleteObjects requests.
    DeletedKeys,
    Other,
}

const KINDS: usize = 13;
const KIND_NAMES: [&str; KINDS] = [
    "list-indexes",
    "list-ledger-entry",
    "list-ledger-range",
    "list-other",
    "get",
    "head",
    "put-ledger",
    "put-other",
    "put-conflict",
    "delete",
    "delete-objects",
    "deleted-keys",
    "other",
];

/// A snapshot of the request counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Requests(pub [u64; KINDS]);

impl Requests {
    /// The count of `kind`.
    pub fn get(&self, kind: Kind) -> u64 {
        self.0[kind as usize]
    }

    /// All HTTP requests (DeletedKeys is not a request).
    pub fn total(&self) -> u64 {
        self.0
            .iter()
            .enumerate()
            .filter(|(at, _)| *at != Kind::DeletedKeys as usize)
            .map(|(_, n)| n)
            .sum()
    }

    /// What happened between `earlier` and `self`.
    pub fn since(&self, earlier: &Requests) -> Requests {
        let mut out = [0; KINDS];
        for (at, slot) in out.iter_mut().enumerate() {
            *slot = self.0[at].saturating_sub(earlier.0[at]);
        }
        Requests(out)
    }

    /// As JSON: kind → count (zeros left out), plus `total`.
    pub fn to_json(self) -> serde_json::Value {
        let mut map = serde_json::Map::new();
        for (at, name) in KIND_NAMES.iter().enumerate() {
            if self.0[at] > 0 {
                map.insert((*name).into(), self.0[at].into());
            }
        }
        map.insert("total".into(), self.total().into());
        serde_json::Value::Object(map)
    }
}

/// An object the server stores for real.
#[derive(Debug, Clone)]
struct Stored {
    body: Bytes,
    last_modified_ms: i64,
    etag: u64,
}

/// The compact ledger slot of one virtual object and kind: its first file.
struct Slot {
    /// The file's `<ms>` (`-1`: none).
    ms: Vec<AtomicI64>,
    /// A clock file's `<walk>` (the walk that started the clock).
    walk: Vec<AtomicI64>,
    /// The writing run (index into `runs`, plus one; 0: none).
    run: Vec<AtomicU8>,
    /// When the file was written.
    written_ms: Vec<AtomicI64>,
}

impl Slot {
    fn new(n: usize) -> Slot {
        Slot {
            ms: (0..n).map(|_| AtomicI64::new(-1)).collect(),
            walk: (0..n).map(|_| AtomicI64::new(-1)).collect(),
            run: (0..n).map(|_| AtomicU8::new(0)).collect(),
            written_ms: (0..n).map(|_| AtomicI64::new(0)).collect(),
        }
    }
}

/// The invariants the server watches.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Violations {
    /// Live virtual objects deleted.
    pub live_deleted: u64,
    /// Second, different `o-` files written for one virtual object, or a page carrying a
    /// clock for it other than the one an earlier page carried (a retention clock raised
    /// or restarted).
    pub clock_restarts: u64,
    /// Second, different `c-` files written for one virtual object.
    pub recondemned: u64,
}

struct State {
    shape: Shape,
    stored: RwLock<BTreeMap<String, Stored>>,
    deleted: Vec<AtomicU64>,
    listed: Vec<AtomicU8>,
    clock: Slot,
    condemned: Slot,
    /// The clock the scan's pages last carried for each virtual object (start, walk; `-1`:
    /// none), and the condemnation carried with it (its stamp; `-1`: none).
    carried: (Vec<AtomicI64>, Vec<AtomicI64>, Vec<AtomicI64>),
    /// Journal suffixes (`<run-ms>-<run>`) of the runs that wrote compact ledger files.
    runs: RwLock<Vec<String>>,
    requests: [AtomicU64; KINDS],
    live_deleted: AtomicU64,
    clock_restarts: AtomicU64,
    recondemned: AtomicU64,
    virtual_deleted: AtomicU64,
    /// Listing counts stop at the first of these keys after a listing's first key (the
    /// partitions' boundaries: what a ranged listing lists past its range it drops).
    bounds: RwLock<Vec<String>>,
    /// Whether listings of `indexes/` count (off outside runs).
    counting: AtomicBool,
    etags: AtomicU64,
    stop: AtomicBool,
    /// Serialise the writes of one object's ledger slots (readers use the atomics).
    stripes: Vec<std::sync::Mutex<()>>,
}

const STRIPES: usize = 4096;

/// The server: its address and a handle on its state. It runs on a runtime of its own
/// (two threads) and stops when dropped.
pub struct Server {
    state: Arc<State>,
    addr: SocketAddr,
    runtime: Option<tokio::runtime::Runtime>,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.state.stop.store(true, Ordering::SeqCst);
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

impl Server {
    /// Start a server for `shape` on 127.0.0.1 (a free port).
    pub fn start(shape: Shape, threads: usize) -> Server {
        let n = shape.objects as usize;
        let state = Arc::new(State {
            deleted: (0..n.div_ceil(64)).map(|_| AtomicU64::new(0)).collect(),
            listed: (0..n).map(|_| AtomicU8::new(0)).collect(),
            clock: Slot::new(n),
            condemned: Slot::new(n),
            carried: (
                (0..n).map(|_| AtomicI64::new(-1)).collect(),
                (0..n).map(|_| AtomicI64::new(-1)).collect(),
                (0..n).map(|_| AtomicI64::new(-1)).collect(),
            ),
            shape,
            stored: RwLock::new(BTreeMap::new()),
            runs: RwLock::new(Vec::new()),
            requests: std::array::from_fn(|_| AtomicU64::new(0)),
            live_deleted: AtomicU64::new(0),
            clock_restarts: AtomicU64::new(0),
            recondemned: AtomicU64::new(0),
            virtual_deleted: AtomicU64::new(0),
            bounds: RwLock::new(Vec::new()),
            counting: AtomicBool::new(false),
            etags: AtomicU64::new(1),
            stop: AtomicBool::new(false),
            stripes: (0..STRIPES).map(|_| std::sync::Mutex::new(())).collect(),
        });
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads.max(1))
            .thread_name("s3-synthetic")
            .enable_all()
            .build()
            .expect("server runtime");
        let listener = runtime
            .block_on(TcpListener::bind("127.0.0.1:0"))
            .expect("bind 127.0.0.1");
        let addr = listener.local_addr().expect("address");
        let serving = state.clone();
        runtime.spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                if serving.stop.load(Ordering::SeqCst) {
                    return;
                }
                let _ = stream.set_nodelay(true);
                let state = serving.clone();
                tokio::spawn(async move {
                    let _ = serve_connection(state, stream).await;
                });
            }
        });
        Server {
            state,
            addr,
            runtime: Some(runtime),
        }
    }

    /// `http://127.0.0.1:<port>`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The shape.
    pub fn shape(&self) -> &Shape {
        &self.state.shape
    }

    /// The warehouse URI (`s3://bucket/root`).
    pub fn warehouse(&self) -> String {
        format!("s3://{}/{}", self.state.shape.bucket, self.state.shape.root)
    }

    /// The request counters so far.
    pub fn requests(&self) -> Requests {
        Requests(std::array::from_fn(|at| {
            self.state.requests[at].load(Ordering::Relaxed)
        }))
    }

    /// The invariant counters so far.
    pub fn violations(&self) -> Violations {
        Violations {
            live_deleted: self.state.live_deleted.load(Ordering::SeqCst),
            clock_restarts: self.state.clock_restarts.load(Ordering::SeqCst),
            recondemned: self.state.recondemned.load(Ordering::SeqCst),
        }
    }

    /// Store an object directly (a warehouse-relative name), as if PUT.
    pub fn insert(&self, name: &str, body: Bytes) {
        let key = format!("{}/{name}", self.state.shape.root);
        let etag = self.state.etags.fetch_add(1, Ordering::Relaxed);
        self.state.stored.write().expect("lock").insert(
            key,
            Stored {
                body,
                last_modified_ms: now_ms(),
                etag,
            },
        );
    }

    /// A stored object's body, by warehouse-relative name.
    pub fn stored(&self, name: &str) -> Option<Bytes> {
        let key = format!("{}/{name}", self.state.shape.root);
        let stored = self.state.stored.read().expect("lock");
        stored.get(&key).map(|object| object.body.clone())
    }

    /// The warehouse-relative names of the stored objects below `prefix`.
    pub fn stored_names(&self, prefix: &str) -> Vec<String> {
        let key = format!("{}/{prefix}", self.state.shape.root);
        let stored = self.state.stored.read().expect("lock");
        stored
            .range(key.clone()..)
            .take_while(|(k, _)| k.starts_with(&key))
            .map(|(k, _)| k[self.state.shape.root.len() + 1..].to_owned())
            .collect()
    }

    /// How many bytes the stored objects hold, and how many there are.
    pub fn stored_size(&self) -> (u64, u64) {
        let stored = self.state.stored.read().expect("lock");
        let bytes = stored.values().map(|o| o.body.len() as u64).sum();
        (bytes, stored.len() as u64)
    }

    /// Start counting listings afresh (a new run), counting each ranged listing only up
    /// to the first of `bounds` (warehouse-relative directory names such as
    /// `indexes/v000100/`) after its first key.
    pub fn start_counting(&self, bounds: &[String]) {
        for counter in &self.state.listed {
            counter.store(0, Ordering::Relaxed);
        }
        let mut keys: Vec<String> = bounds
            .iter()
            .map(|bound| format!("{}/{bound}", self.state.shape.root))
            .collect();
        keys.sort();
        *self.state.bounds.write().expect("lock") = keys;
        self.state.counting.store(true, Ordering::SeqCst);
    }

    /// Stop counting listings.
    pub fn stop_counting(&self) {
        self.state.counting.store(false, Ordering::SeqCst);
    }

    /// Whether virtual object `i` has been deleted.
    pub fn is_deleted(&self, i: u64) -> bool {
        self.state.is_deleted(i)
    }

    /// What the listing counters say about the virtual objects that exist: how many
    /// were listed 0, 1, 2 and more than 2 times since [`Server::start_counting`].
    pub fn listing_histogram(&self) -> [u64; 4] {
        let mut histogram = [0; 4];
        for i in 0..self.state.shape.objects {
            if self.state.is_deleted(i) {
                continue;
            }
            let n = self.state.listed[i as usize].load(Ordering::Relaxed) as usize;
            histogram[n.min(3)] += 1;
        }
        histogram
    }

    /// Listings beyond the first of each object since [`Server::start_counting`] (what
    /// killed invocations cost: at most one page each).
    pub fn relisted(&self) -> u64 {
        (0..self.state.shape.objects)
            .map(|i| u64::from(self.state.listed[i as usize].load(Ordering::Relaxed)))
            .map(|n| n.saturating_sub(1))
            .sum()
    }

    /// The final state of the virtual objects.
    pub fn census(&self) -> Census {
        let state = &self.state;
        let mut census = Census::default();
        for i in 0..state.shape.objects {
            let at = i as usize;
            let deleted = state.is_deleted(i);
            let clock_file = state.clock.ms[at].load(Ordering::SeqCst) >= 0;
            // A deleted object's pages stay with their run (they are not its ledger).
            let carried = !deleted && state.carried.0[at].load(Ordering::SeqCst) >= 0;
            let condemned = state.condemned.ms[at].load(Ordering::SeqCst) >= 0
                || (!deleted && state.carried.2[at].load(Ordering::SeqCst) >= 0);
            if state.shape.live(i) {
                census.live += 1;
                if deleted {
                    census.live_deleted += 1;
                }
                if clock_file || carried || condemned {
                    census.live_tracked += 1;
                }
                continue;
            }
            census.garbage += 1;
            let tracked = clock_file || carried;
            let condemned_file = state.condemned.ms[at].load(Ordering::SeqCst) >= 0;
            match (deleted, clock_file, condemned_file) {
                (true, false, false) => census.deleted += 1,
                (true, _, _) => census.deleted_with_ledger += 1,
                _ => {}
            }
            match (deleted, tracked, condemned) {
                (true, _, _) => {}
                (false, true, true) => census.condemned += 1,
                (false, true, false) => census.tracked += 1,
                (false, false, true) => census.condemned_untracked += 1,
                (false, false, false) => census.untracked += 1,
            }
        }
        census.overflow_ledger_files = state
            .stored
            .read()
            .expect("lock")
            .keys()
            .filter(|key| key.starts_with(&state.shape.ledger_prefix()))
            .count() as u64;
        census
    }
}

/// Where the virtual objects stand.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Census {
    pub live: u64,
    pub live_deleted: u64,
    pub live_tracked: u64,
    pub garbage: u64,
    /// Garbage deleted, its ledger entry cleared.
    pub deleted: u64,
    /// Garbage deleted, with ledger files left behind.
    pub deleted_with_ledger: u64,
    /// Garbage with a clock and a condemnation.
    pub condemned: u64,
    /// Garbage with a clock only.
    pub tracked: u64,
    /// Garbage condemned without a clock (must not happen).
    pub condemned_untracked: u64,
    /// Garbage not tracked at all.
    pub untracked: u64,
    /// Ledger files not kept compactly (second files of one object, ledger entries of
    /// metadata files).
    pub overflow_ledger_files: u64,
}

impl Census {
    /// As JSON.
    pub fn to_json(self) -> serde_json::Value {
        serde_json::json!({
            "live": self.live, "live-deleted": self.live_deleted, "live-tracked": self.live_tracked,
            "garbage": self.garbage, "deleted": self.deleted,
            "deleted-with-ledger": self.deleted_with_ledger, "condemned": self.condemned,
            "tracked": self.tracked, "condemned-untracked": self.condemned_untracked,
            "untracked": self.untracked, "overflow-ledger-files": self.overflow_ledger_files,
        })
    }
}

impl State {
    fn count(&self, kind: Kind) {
        self.requests[kind as usize].fetch_add(1, Ordering::Relaxed);
    }

    fn is_deleted(&self, i: u64) -> bool {
        self.deleted[(i / 64) as usize].load(Ordering::Relaxed) & (1 << (i % 64)) != 0
    }

    /// Mark `i` deleted; `true` if it existed.
    fn delete_virtual(&self, i: u64) -> bool {
        let bit = 1u64 << (i % 64);
        let before = self.deleted[(i / 64) as usize].fetch_or(bit, Ordering::SeqCst);
        let existed = before & bit == 0;
        if existed {
            self.virtual_deleted.fetch_add(1, Ordering::Relaxed);
            if self.shape.live(i) {
                self.live_deleted.fetch_add(1, Ordering::SeqCst);
            }
        }
        existed
    }

    fn run_suffix(&self, run: u8) -> String {
        self.runs.read().expect("lock")[run as usize - 1].clone()
    }

    fn run_index(&self, suffix: &str) -> Option<u8> {
        if let Some(at) = self
            .runs
            .read()
            .expect("lock")
            .iter()
            .position(|s| s == suffix)
        {
            return Some(at as u8 + 1);
        }
        let mut runs = self.runs.write().expect("lock");
        if let Some(at) = runs.iter().position(|s| s == suffix) {
            return Some(at as u8 + 1);
        }
        if runs.len() >= 255 {
            return None;
        }
        runs.push(suffix.to_owned());
        Some(runs.len() as u8)
    }

    /// The compact ledger files of virtual object `i`, sorted by key: (key, written).
    fn ledger_files(&self, i: u64) -> Vec<(String, i64)> {
        let at = i as usize;
        let mut files = Vec::new();
        for (condemned, slot) in [(true, &self.condemned), (false, &self.clock)] {
            let ms = slot.ms[at].load(Ordering::SeqCst);
            if ms < 0 {
                continue;
            }
            let run = slot.run[at].load(Ordering::SeqCst);
            if run == 0 {
                continue;
            }
            let name = if condemned {
                format!("c-{ms}")
            } else {
                format!("o-{ms}-{}", slot.walk[at].load(Ordering::SeqCst))
            };
            let key = format!(
                "{}{name}-{}.json",
                self.shape.ledger_dir(i),
                self.run_suffix(run)
            );
            files.push((key, slot.written_ms[at].load(Ordering::SeqCst)));
        }
        files.sort();
        files
    }

    /// A compact ledger file named by `key`: (object, slot is condemned, ms, walk (`-1` for
    /// a condemnation), run suffix). Clock files are `o-<clock>-<walk>-…`, condemnations
    /// `c-<ms>-…`.
    fn parse_ledger_key<'k>(&self, key: &'k str) -> Option<(u64, bool, i64, i64, &'k str)> {
        let rest = key.strip_prefix(&self.shape.ledger_prefix())?;
        let (object, file) = rest.rsplit_once('/')?;
        let i = self
            .shape
            .index_of(&format!("{}/{object}", self.shape.root))?;
        let stem = file.strip_suffix(".json")?;
        let (tag, rest) = stem.split_once('-')?;
        let condemned = match tag {
            "o" => false,
            "c" => true,
            _ => return None,
        };
        let number = |rest: &'k str| -> Option<(i64, &'k str)> {
            let (ms, rest) = rest.split_once('-')?;
            let value: i64 = ms.parse().ok()?;
            (value >= 0 && value.to_string() == ms).then_some((value, rest))
        };
        let (value, rest) = number(rest)?;
        let (walk, suffix) = if condemned { (-1, rest) } else { number(rest)? };
        let (run_ms, run) = suffix.split_once('-')?;
        let run_ok = run.len() == 32
            && run
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
            && run_ms.parse::<i64>().is_ok_and(|v| v.to_string() == run_ms);
        run_ok.then_some((i, condemned, value, walk, suffix))
    }

    fn ledger_body(&self, key: &str) -> Option<Bytes> {
        let (i, condemned, ms, _, suffix) = self.parse_ledger_key(key)?;
        let run = suffix.split_once('-')?.1;
        let run = format!(
            "{}-{}-{}-{}-{}",
            &run[..8],
            &run[8..12],
            &run[12..16],
            &run[16..20],
            &run[20..]
        );
        let object = &self.shape.key(i)[self.shape.root.len() + 1..];
        let body = serde_json::json!({
            "ledger-version": 2, "object": object,
            "kind": if condemned { "condemned" } else { "clock" },
            "ms": ms, "run-id": run, "reason": "(not kept by the synthetic server)",
        });
        Some(Bytes::from(body.to_string()))
    }

    /// The compact ledger file `key` if it exists: (written, size).
    fn ledger_file(&self, key: &str) -> Option<(i64, u64)> {
        let (i, condemned, ms, walk, suffix) = self.parse_ledger_key(key)?;
        let slot = if condemned {
            &self.condemned
        } else {
            &self.clock
        };
        let at = i as usize;
        if slot.ms[at].load(Ordering::SeqCst) != ms
            || (!condemned && slot.walk[at].load(Ordering::SeqCst) != walk)
        {
            return None;
        }
        let run = slot.run[at].load(Ordering::SeqCst);
        if run == 0 || self.run_suffix(run) != suffix {
            return None;
        }
        let size = self.ledger_body(key).map_or(0, |b| b.len() as u64);
        Some((slot.written_ms[at].load(Ordering::SeqCst), size))
    }

    /// Metadata of any object: (size, last modified, etag).
    fn head(&self, key: &str) -> Option<(u64, i64, String)> {
        if let Some(i) = self.shape.index_of(key) {
            return (!self.is_deleted(i)).then(|| {
                (
                    self.shape.size(i),
                    self.shape.mtime_ms,
                    format!("\"v{i:x}\""),
                )
            });
        }
        if let Some((written, size)) = self.ledger_file(key) {
            return Some((size, written, format!("\"l{written:x}\"")));
        }
        let stored = self.stored.read().expect("lock");
        stored.get(key).map(|object| {
            (
                object.body.len() as u64,
                object.last_modified_ms,
                format!("\"s{:x}\"", object.etag),
            )
        })
    }

    fn get(&self, key: &str) -> Option<(Bytes, i64, String)> {
        if let Some(i) = self.shape.index_of(key) {
            return (!self.is_deleted(i)).then(|| {
                (
                    Bytes::from(vec![0u8; self.shape.size(i) as usize]),
                    self.shape.mtime_ms,
                    format!("\"v{i:x}\""),
                )
            });
        }
        if let Some((written, _)) = self.ledger_file(key) {
            let body = self.ledger_body(key)?;
            return Some((body, written, format!("\"l{written:x}\"")));
        }
        let stored = self.stored.read().expect("lock");
        stored.get(key).map(|object| {
            (
                object.body.clone(),
                object.last_modified_ms,
                format!("\"s{:x}\"", object.etag),
            )
        })
    }

    /// PUT; `false` if `create` and the key exists.
    fn put(&self, key: &str, body: Bytes, create: bool) -> Result<bool, &'static str> {
        if self.shape.index_of(key).is_some() {
            return Err("virtual objects cannot be written");
        }
        let now = now_ms();
        if let Some((i, condemned, ms, walk, suffix)) = self.parse_ledger_key(key) {
            let slot = if condemned {
                &self.condemned
            } else {
                &self.clock
            };
            let at = i as usize;
            let run = self.run_index(suffix).ok_or("too many runs")?;
            let _stripe = self.stripes[at % STRIPES].lock().expect("lock");
            if slot.ms[at].load(Ordering::SeqCst) < 0 {
                slot.written_ms[at].store(now, Ordering::SeqCst);
                slot.run[at].store(run, Ordering::SeqCst);
                slot.walk[at].store(walk, Ordering::SeqCst);
                slot.ms[at].store(ms, Ordering::SeqCst);
                return Ok(true);
            }
            let same = slot.ms[at].load(Ordering::SeqCst) == ms
                && slot.walk[at].load(Ordering::SeqCst) == walk
                && slot.run[at].load(Ordering::SeqCst) == run;
            if same {
                if create {
                    return Ok(false);
                }
                slot.written_ms[at].store(now, Ordering::SeqCst);
                return Ok(true);
            }
            // Another file for this object: kept in the map, and noted.
            let mut stored = self.stored.write().expect("lock");
            if stored.contains_key(key) {
                if create {
                    return Ok(false);
                }
            } else if condemned {
                self.recondemned.fetch_add(1, Ordering::SeqCst);
            } else {
                self.clock_restarts.fetch_add(1, Ordering::SeqCst);
            }
            self.keep(&mut stored, key, body, now);
            return Ok(true);
        }
        let mut stored = self.stored.write().expect("lock");
        if create && stored.contains_key(key) {
            return Ok(false);
        }
        if key.ends_with(".carried.json") {
            self.note_carried(&body);
        }
        self.keep(&mut stored, key, body, now);
        Ok(true)
    }

    /// Note the clocks a scan page's clocks file carries, counting a clock that differs
    /// from the one an earlier page carried for its object as a restart, and a
    /// condemnation that differs from the one an earlier page carried as a second one.
    fn note_carried(&self, body: &[u8]) {
        let Ok(page) = serde_json::from_slice::<serde_json::Value>(body) else {
            return;
        };
        for clock in page["clocks"].as_array().into_iter().flatten() {
            let (Some(name), Some(start), Some(walk)) = (
                clock["name"].as_str(),
                clock["start-ms"].as_i64(),
                clock["walk-ms"].as_i64(),
            ) else {
                continue;
            };
            let Some(i) = self.shape.index_of(&format!("{}/{name}", self.shape.root)) else {
                continue;
            };
            let at = i as usize;
            let _stripe = self.stripes[at % STRIPES].lock().expect("lock");
            let before = (
                self.carried.0[at].swap(start, Ordering::SeqCst),
                self.carried.1[at].swap(walk, Ordering::SeqCst),
            );
            if before.0 >= 0 && before != (start, walk) {
                self.clock_restarts.fetch_add(1, Ordering::SeqCst);
            }
            let condemned = clock["condemned"]["ms"].as_i64().unwrap_or(-1);
            let before = self.carried.2[at].swap(condemned, Ordering::SeqCst);
            if before >= 0 && condemned >= 0 && before != condemned {
                self.recondemned.fetch_add(1, Ordering::SeqCst);
            }
        }
    }

    /// Keep `body` at `key` among the written objects, last modified at `now`, under a
    /// new ETag.
    fn keep(&self, stored: &mut BTreeMap<String, Stored>, key: &str, body: Bytes, now: i64) {
        let etag = self.etags.fetch_add(1, Ordering::Relaxed);
        stored.insert(
            key.to_owned(),
            Stored {
                body,
                last_modified_ms: now,
                etag,
            },
        );
    }

    fn delete(&self, key: &str) {
        if let Some(i) = self.shape.index_of(key) {
            self.delete_virtual(i);
            return;
        }
        if let Some((i, condemned, _, _, _)) = self.parse_ledger_key(key)
            && self.ledger_file(key).is_some()
        {
            let slot = if condemned {
                &self.condemned
            } else {
                &self.clock
            };
            let at = i as usize;
            let _stripe = self.stripes[at % STRIPES].lock().expect("lock");
            slot.ms[at].store(-1, Ordering::SeqCst);
            slot.run[at].store(0, Ordering::SeqCst);
            return;
        }
        self.stored.write().expect("lock").remove(key);
    }

    /// A cursor over the virtual objects with keys `>= from` and `< upper`.
    fn virtual_cursor(&self, from: &str, upper: Option<&str>) -> VirtualCursor {
        let n = self.shape.objects;
        VirtualCursor {
            next: partition_point(n, |i| self.shape.key(i).as_str() < from),
            end: upper.map_or(n, |upper| {
                partition_point(n, |i| self.shape.key(i).as_str() < upper)
            }),
        }
    }

    /// A cursor over the compact ledger files with keys `>= from` and `< upper`.
    fn ledger_cursor(&self, from: &str, upper: Option<&str>) -> LedgerCursor {
        let n = self.shape.objects;
        // The first object whose ledger directory may hold a key >= from.
        let start = partition_point(n, |i| {
            let mut end = self.shape.ledger_dir(i);
            end.push('\u{7f}');
            end.as_str() <= from
        });
        let end = upper.map_or(n, |upper| {
            partition_point(n, |i| self.shape.ledger_dir(i).as_str() < upper)
        });
        let mut cursor = LedgerCursor {
            next: start,
            end,
            upper: upper.map(str::to_owned),
            files: std::collections::VecDeque::new(),
        };
        if start < end {
            cursor.load(self, start);
            cursor.next = start + 1;
            cursor.files.retain(|(key, _)| key.as_str() >= from);
        }
        cursor
    }

    /// ListObjectsV2.
    fn list(&self, query: &Query) -> String {
        let prefix = query.prefix.as_str();
        let delimiter = query.delimiter.as_deref().filter(|d| !d.is_empty());
        let max_keys = query.max_keys.clamp(1, 1000);
        // The keys at or after this are listed.
        let mut from: String = match (&query.token, &query.start_after) {
            (Some(token), _) => decode_token(token),
            (None, Some(after)) => successor_key(after),
            (None, None) => prefix.to_owned(),
        };
        if from.as_str() < prefix {
            from = prefix.to_owned();
        }
        let upper = prefix_end(prefix);
        let ledger_prefix = self.shape.ledger_prefix();
        let indexes_prefix = format!("{}/indexes/", self.shape.root);
        let under = |sub: &str| sub.starts_with(prefix) || prefix.starts_with(sub);
        let (virtual_possible, ledger_possible) = (under(&indexes_prefix), under(&ledger_prefix));
        let seek = |from: &str| {
            (
                virtual_possible.then(|| self.virtual_cursor(from, upper.as_deref())),
                ledger_possible.then(|| self.ledger_cursor(from, upper.as_deref())),
            )
        };
        let (mut virt, mut ledger) = seek(&from);
        let mut contents: Vec<(String, u64, i64, String)> = Vec::new();
        let mut prefixes: Vec<String> = Vec::new();
        let mut listed_virtual: Vec<u64> = Vec::new();
        let mut truncated = false;
        let mut last = String::new();
        let stored = self.stored.read().expect("lock");
        loop {
            // The next key from each source: 0 stored, 1 virtual, 2 ledger.
            let real = stored
                .range(from.clone()..)
                .next()
                .filter(|(key, _)| upper.as_deref().is_none_or(|u| key.as_str() < u))
                .map(|(key, object)| {
                    (
                        key.clone(),
                        object.body.len() as u64,
                        object.last_modified_ms,
                        format!("\"s{:x}\"", object.etag),
                        0,
                    )
                });
            let virtual_next = virt.as_mut().and_then(|cursor| cursor.peek(self));
            let virtual_entry = virtual_next.map(|i| {
                (
                    self.shape.key(i),
                    self.shape.size(i),
                    self.shape.mtime_ms,
                    format!("\"v{i:x}\""),
                    1,
                )
            });
            let ledger_entry =
                ledger
                    .as_mut()
                    .and_then(|cursor| cursor.peek(self))
                    .map(|(key, written)| {
                        let size = self.ledger_body(&key).map_or(0, |b| b.len() as u64);
                        (key, size, written, format!("\"l{written:x}\""), 2)
                    });
            let next = [real, virtual_entry, ledger_entry]
                .into_iter()
                .flatten()
                .min_by(|a, b| a.0.cmp(&b.0));
            let Some((key, size, modified, etag, source)) = next else {
                break;
            };
            if contents.len() + prefixes.len() >= max_keys {
                truncated = true;
                break;
            }
            if let Some(delimiter) = delimiter
                && let Some(at) = key[prefix.len()..].find(delimiter)
            {
                let common = key[..prefix.len() + at + delimiter.len()].to_owned();
                from = prefix_end(&common).unwrap_or_else(|| common.clone());
                last = format!("p{common}");
                prefixes.push(common);
                (virt, ledger) = seek(&from);
                continue;
            }
            match source {
                1 => {
                    if let (Some(cursor), Some(i)) = (virt.as_mut(), virtual_next) {
                        cursor.next = i + 1;
                        listed_virtual.push(i);
                    }
                }
                2 => {
                    if let Some(cursor) = ledger.as_mut() {
                        cursor.files.pop_front();
                    }
                }
                _ => {}
            }
            from = successor_key(&key);
            last = format!("k{key}");
            contents.push((key, size, modified, etag));
        }
        drop(stored);
        if delimiter.is_none() && prefix.starts_with(&indexes_prefix[..indexes_prefix.len() - 1]) {
            let start = query
                .start_after
                .clone()
                .unwrap_or_else(|| prefix.to_owned());
            self.count_listed(&start, &listed_virtual);
        }
        let mut xml = String::with_capacity(256 + contents.len() * 200);
        xml.push_str(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<ListBucketResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">",
        );
        let _ = write!(
            xml,
            "<Name>{}</Name><Prefix>{}</Prefix><KeyCount>{}</KeyCount><MaxKeys>{max_keys}</MaxKeys><IsTruncated>{truncated}</IsTruncated>",
            escape(&self.shape.bucket),
            escape(prefix),
            contents.len() + prefixes.len()
        );
        for (key, size, modified, etag) in &contents {
            let _ = write!(
                xml,
                "<Contents><Key>{}</Key><LastModified>{}</LastModified><ETag>{}</ETag><Size>{size}</Size><StorageClass>STANDARD</StorageClass></Contents>",
                escape(key),
                iso8601(*modified),
                escape(etag)
            );
        }
        for common in &prefixes {
            let _ = write!(
                xml,
                "<CommonPrefixes><Prefix>{}</Prefix></CommonPrefixes>",
                escape(common)
            );
        }
        if truncated {
            let _ = write!(
                xml,
                "<NextContinuationToken>{}</NextContinuationToken>",
                encode_token(&last)
            );
        }
        xml.push_str("</ListBucketResult>");
        xml
    }

    /// Count the virtual objects a listing that started after `start` returned, up to
    /// the end of the partition it started in: the first boundary after `start` (a
    /// partition's first listing starts after `indexes/<from>`, just before its own lower
    /// boundary `indexes/<from>/`, which does not end it).
    fn count_listed(&self, start: &str, listed: &[u64]) {
        if !self.counting.load(Ordering::SeqCst) || listed.is_empty() {
            return;
        }
        let own = format!("{start}/");
        let bounds = self.bounds.read().expect("lock");
        let bound = bounds.iter().find(|bound| bound.as_str() > own.as_str());
        for i in listed {
            if let Some(bound) = bound
                && self.shape.key(*i).as_str() >= bound.as_str()
            {
                break;
            }
            let counter = &self.listed[*i as usize];
            let _ =
                counter.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_add(1));
        }
    }
}

/// Virtual objects from a position on, skipping deleted ones.
struct VirtualCursor {
    next: u64,
    end: u64,
}

impl VirtualCursor {
    fn peek(&mut self, state: &State) -> Option<u64> {
        while self.next < self.end {
            let word = state.deleted[(self.next / 64) as usize].load(Ordering::Relaxed);
            if self.next.is_multiple_of(64) && word == u64::MAX {
                self.next += 64;
                continue;
            }
            if word & (1 << (self.next % 64)) == 0 {
                return Some(self.next);
            }
            self.next += 1;
        }
        None
    }
}

/// Compact ledger files from a position on.
struct LedgerCursor {
    next: u64,
    end: u64,
    upper: Option<String>,
    files: std::collections::VecDeque<(String, i64)>,
}

impl LedgerCursor {
    fn load(&mut self, state: &State, i: u64) {
        let at = i as usize;
        if state.clock.ms[at].load(Ordering::Relaxed) < 0
            && state.condemned.ms[at].load(Ordering::Relaxed) < 0
        {
            return;
        }
        let upper = self.upper.as_deref();
        self.files.extend(
            state
                .ledger_files(i)
                .into_iter()
                .filter(|(key, _)| upper.is_none_or(|upper| key.as_str() < upper)),
        );
    }

    fn peek(&mut self, state: &State) -> Option<(String, i64)> {
        while self.files.is_empty() && self.next < self.end {
            let i = self.next;
            self.next += 1;
            self.load(state, i);
        }
        self.files.front().cloned()
    }
}

/// The smallest `i` in `0..n` for which `below(i)` is false (`below` is monotone).
fn partition_point(n: u64, below: impl Fn(u64) -> bool) -> u64 {
    let (mut lo, mut hi) = (0, n);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if below(mid) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    lo
}

/// The smallest key after `key`.
fn successor_key(key: &str) -> String {
    let mut next = key.to_owned();
    next.push('\0');
    next
}

/// The smallest key after every key starting with `prefix` (`None`: no bound).
fn prefix_end(prefix: &str) -> Option<String> {
    let mut bytes = prefix.as_bytes().to_vec();
    while let Some(last) = bytes.pop() {
        if last < 0x7f {
            bytes.push(last + 1);
            return String::from_utf8(bytes).ok();
        }
    }
    None
}

fn encode_token(last: &str) -> String {
    last.bytes().fold(String::new(), |mut out, b| {
        let _ = write!(out, "{b:02x}");
        out
    })
}

/// The listing position after a continuation token (exclusive of what it names).
fn decode_token(token: &str) -> String {
    let bytes: Vec<u8> = (0..token.len() / 2)
        .filter_map(|at| u8::from_str_radix(token.get(at * 2..at * 2 + 2)?, 16).ok())
        .collect();
    let text = String::from_utf8(bytes).unwrap_or_default();
    match text.split_at_checked(1) {
        Some(("p", common)) => prefix_end(common).unwrap_or_else(|| common.to_owned()),
        Some(("k", key)) => successor_key(key),
        _ => String::new(),
    }
}

fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c => out.push(c),
        }
    }
    out
}

fn unescape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find('&') {
        out.push_str(&rest[..at]);
        rest = &rest[at..];
        let Some(end) = rest.find(';') else {
            break;
        };
        let entity = &rest[1..end];
        let decoded = match entity {
            "amp" => Some('&'),
            "lt" => Some('<'),
            "gt" => Some('>'),
            "quot" => Some('"'),
            "apos" => Some('\''),
            _ => entity
                .strip_prefix("#x")
                .and_then(|hex| u32::from_str_radix(hex, 16).ok())
                .or_else(|| entity.strip_prefix('#').and_then(|d| d.parse().ok()))
                .and_then(char::from_u32),
        };
        match decoded {
            Some(c) => {
                out.push(c);
                rest = &rest[end + 1..];
            }
            None => {
                out.push('&');
                rest = &rest[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// Days since the epoch → (year, month, day).
fn civil(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

fn iso8601(ms: i64) -> String {
    let (days, rest) = (ms.div_euclid(86_400_000), ms.rem_euclid(86_400_000));
    let (y, m, d) = civil(days);
    let (h, min, s, milli) = (
        rest / 3_600_000,
        rest / 60_000 % 60,
        rest / 1000 % 60,
        rest % 1000,
    );
    format!("{y:04}-{m:02}-{d:02}T{h:02}:{min:02}:{s:02}.{milli:03}Z")
}

fn http_date(ms: i64) -> String {
    const DAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let (days, rest) = (ms.div_euclid(86_400_000), ms.rem_euclid(86_400_000));
    let (y, m, d) = civil(days);
    format!(
        "{}, {d:02} {} {y:04} {:02}:{:02}:{:02} GMT",
        DAYS[days.rem_euclid(7) as usize],
        MONTHS[m as usize - 1],
        rest / 3_600_000,
        rest / 60_000 % 60,
        rest / 1000 % 60
    )
}

/// The parameters of a request's query string that matter here.
#[derive(Debug, Default)]
struct Query {
    list: bool,
    delete: bool,
    prefix: String,
    delimiter: Option<String>,
    start_after: Option<String>,
    token: Option<String>,
    max_keys: usize,
}

fn parse_query(query: &str) -> Query {
    let mut parsed = Query {
        max_keys: 1000,
        ..Query::default()
    };
    for (name, value) in url::form_urlencoded::parse(query.as_bytes()) {
        match name.as_ref() {
            "list-type" => parsed.list = value == "2",
            "delete" => parsed.delete = true,
            "prefix" => parsed.prefix = value.into_owned(),
            "delimiter" => parsed.delimiter = Some(value.into_owned()),
            "start-after" => parsed.start_after = Some(value.into_owned()),
            "continuation-token" => parsed.token = Some(value.into_owned()),
            "max-keys" => parsed.max_keys = value.parse().unwrap_or(1000),
            _ => {}
        }
    }
    parsed
}

/// One parsed request.
struct Request {
    method: String,
    path: String,
    query: String,
    headers: Vec<(String, String)>,
    body: Bytes,
}

impl Request {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// One answer.
struct Response {
    status: u16,
    headers: Vec<(&'static str, String)>,
    body: Bytes,
    /// For HEAD: the length to announce without a body.
    head_length: Option<u64>,
}

impl Response {
    fn new(status: u16) -> Response {
        Response {
            status,
            headers: Vec::new(),
            body: Bytes::new(),
            head_length: None,
        }
    }

    /// A `200` for an object (GET or HEAD), with its last-modified time and ETag.
    fn object(modified: i64, etag: String) -> Response {
        let mut response = Response::new(200);
        response
            .headers
            .push(("Last-Modified", http_date(modified)));
        response.headers.push(("ETag", etag));
        response
    }

    fn xml(status: u16, xml: String) -> Response {
        let mut response = Response::new(status);
        response
            .headers
            .push(("Content-Type", "application/xml".into()));
        response.body = Bytes::from(xml);
        response
    }

    fn error(status: u16, code: &str, message: &str, key: &str) -> Response {
        Response::xml(
            status,
            format!(
                "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>{code}</Code><Message>{}</Message><Key>{}</Key><RequestId>synthetic</RequestId></Error>",
                escape(message),
                escape(key)
            ),
        )
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        100 => "Continue",
        200 => "OK",
        204 => "No Content",
        400 => "Bad Request",
        404 => "Not Found",
        412 => "Precondition Failed",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        _ => "Status",
    }
}

async fn serve_connection(state: Arc<State>, stream: TcpStream) -> std::io::Result<()> {
    let (read, mut write) = stream.into_split();
    let mut reader = BufReader::with_capacity(64 * 1024, read);
    let mut buffer: Vec<u8> = Vec::with_capacity(8 * 1024);
    loop {
        // Read the head.
        let (request, consumed, close) = loop {
            if !buffer.is_empty() {
                let mut headers = [httparse::EMPTY_HEADER; 64];
                let mut parsed = httparse::Request::new(&mut headers);
                match parsed.parse(&buffer) {
                    Ok(httparse::Status::Complete(consumed)) => {
                        let target = parsed.path.unwrap_or("/");
                        let (path, query) = target.split_once('?').unwrap_or((target, ""));
                        let headers: Vec<(String, String)> = parsed
                            .headers
                            .iter()
                            .map(|h| {
                                (
                                    h.name.to_owned(),
                                    String::from_utf8_lossy(h.value).into_owned(),
                                )
                            })
                            .collect();
                        let close = headers.iter().any(|(n, v)| {
                            n.eq_ignore_ascii_case("connection") && v.eq_ignore_ascii_case("close")
                        }) || parsed.version == Some(0);
                        let request = Request {
                            method: parsed.method.unwrap_or("GET").to_owned(),
                            path: path.to_owned(),
                            query: query.to_owned(),
                            headers,
                            body: Bytes::new(),
                        };
                        break (request, consumed, close);
                    }
                    Ok(httparse::Status::Partial) => {}
                    Err(_) => return Ok(()),
                }
            }
            let mut chunk = [0u8; 16 * 1024];
            let n = reader.read(&mut chunk).await?;
            if n == 0 {
                return Ok(());
            }
            buffer.extend_from_slice(&chunk[..n]);
        };
        buffer.drain(..consumed);
        let mut request = request;
        if request
            .header("expect")
            .is_some_and(|v| v.eq_ignore_ascii_case("100-continue"))
        {
            write.write_all(b"HTTP/1.1 100 Continue\r\n\r\n").await?;
        }
        // Read the body.
        if request
            .header("transfer-encoding")
            .is_some_and(|v| v.to_ascii_lowercase().contains("chunked"))
        {
            let mut body = Vec::new();
            loop {
                let line_end = loop {
                    if let Some(at) = buffer.windows(2).position(|w| w == b"\r\n") {
                        break at;
                    }
                    let mut chunk = [0u8; 16 * 1024];
                    let n = reader.read(&mut chunk).await?;
                    if n == 0 {
                        return Ok(());
                    }
                    buffer.extend_from_slice(&chunk[..n]);
                };
                let line = String::from_utf8_lossy(&buffer[..line_end]).into_owned();
                let size = usize::from_str_radix(line.split(';').next().unwrap_or("0").trim(), 16)
                    .unwrap_or(0);
                buffer.drain(..line_end + 2);
                while buffer.len() < size + 2 {
                    let mut chunk = [0u8; 16 * 1024];
                    let n = reader.read(&mut chunk).await?;
                    if n == 0 {
                        return Ok(());
                    }
                    buffer.extend_from_slice(&chunk[..n]);
                }
                body.extend_from_slice(&buffer[..size]);
                buffer.drain(..size + 2);
                if size == 0 {
                    break;
                }
            }
            request.body = Bytes::from(body);
        } else {
            let length: usize = request
                .header("content-length")
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0);
            while buffer.len() < length {
                let mut chunk = vec![0u8; (length - buffer.len()).min(1 << 20)];
                let n = reader.read(&mut chunk).await?;
                if n == 0 {
                    return Ok(());
                }
                buffer.extend_from_slice(&chunk[..n]);
            }
            request.body = Bytes::copy_from_slice(&buffer[..length]);
            buffer.drain(..length);
        }
        if !state.shape.latency.is_zero() {
            tokio::time::sleep(state.shape.latency).await;
        }
        let is_head = request.method == "HEAD";
        let response = handle(&state, &request);
        let mut head = format!(
            "HTTP/1.1 {} {}\r\n",
            response.status,
            reason(response.status)
        );
        for (name, value) in &response.headers {
            let _ = write!(head, "{name}: {value}\r\n");
        }
        let length = response.head_length.unwrap_or(response.body.len() as u64);
        let _ = write!(
            head,
            "Content-Length: {length}\r\nx-amz-request-id: synthetic\r\nDate: {}\r\n",
            http_date(now_ms())
        );
        head.push_str(if close {
            "Connection: close\r\n\r\n"
        } else {
            "Connection: keep-alive\r\n\r\n"
        });
        if is_head || response.body.is_empty() {
            write.write_all(head.as_bytes()).await?;
        } else {
            let mut out = head.into_bytes();
            out.extend_from_slice(&response.body);
            write.write_all(&out).await?;
        }
        if close {
            return Ok(());
        }
    }
}

fn handle(state: &State, request: &Request) -> Response {
    let decoded = percent_encoding::percent_decode_str(&request.path)
        .decode_utf8_lossy()
        .into_owned();
    let path = decoded.trim_start_matches('/');
    let (bucket, key) = path.split_once('/').unwrap_or((path, ""));
    if bucket != state.shape.bucket {
        state.count(Kind::Other);
        return Response::error(404, "NoSuchBucket", "no such bucket", "");
    }
    let query = parse_query(&request.query);
    match (request.method.as_str(), key.is_empty()) {
        ("GET", true) if query.list => {
            let kind = if query.prefix.starts_with(&state.shape.ledger_prefix()) {
                if query.delimiter.is_some() {
                    Kind::ListLedgerEntry
                } else {
                    Kind::ListLedgerRange
                }
            } else if query.delimiter.is_none()
                && query
                    .prefix
                    .starts_with(&format!("{}/indexes/", state.shape.root))
            {
                Kind::ListIndexes
            } else {
                Kind::ListOther
            };
            state.count(kind);
            Response::xml(200, state.list(&query))
        }
        ("PUT" | "HEAD", true) => {
            state.count(Kind::Other);
            Response::new(200)
        }
        ("POST", true) if query.delete => {
            state.count(Kind::DeleteObjects);
            let body = String::from_utf8_lossy(&request.body);
            let mut xml = String::from(
                "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<DeleteResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">",
            );
            let mut rest = body.as_ref();
            while let Some(start) = rest.find("<Key>") {
                rest = &rest[start + 5..];
                let Some(end) = rest.find("</Key>") else {
                    break;
                };
                let key = unescape(&rest[..end]);
                rest = &rest[end + 6..];
                state.count(Kind::DeletedKeys);
                state.delete(&key);
                let _ = write!(xml, "<Deleted><Key>{}</Key></Deleted>", escape(&key));
            }
            xml.push_str("</DeleteResult>");
            Response::xml(200, xml)
        }
        ("GET", false) => {
            state.count(Kind::Get);
            match state.get(key) {
                Some((body, modified, etag)) => {
                    let mut response = Response::object(modified, etag);
                    response
                        .headers
                        .push(("Content-Type", "application/octet-stream".into()));
                    response.body = body;
                    response
                }
                None => Response::error(404, "NoSuchKey", "The specified key does not exist.", key),
            }
        }
        ("HEAD", false) => {
            state.count(Kind::Head);
            match state.head(key) {
                Some((size, modified, etag)) => {
                    let mut response = Response::object(modified, etag);
                    response.head_length = Some(size);
                    response
                }
                None => {
                    let mut response = Response::new(404);
                    response.head_length = Some(0);
                    response
                }
            }
        }
        ("PUT", false) => {
            if request.header("x-amz-copy-source").is_some() || request.header("if-match").is_some()
            {
                state.count(Kind::Other);
                return Response::error(501, "NotImplemented", "not supported here", key);
            }
            let create = request
                .header("if-none-match")
                .is_some_and(|v| v.trim() == "*");
            let ledger = key.starts_with(&state.shape.ledger_prefix());
            match state.put(key, request.body.clone(), create) {
                Ok(true) => {
                    state.count(if ledger {
                        Kind::PutLedger
                    } else {
                        Kind::PutOther
                    });
                    let mut response = Response::new(200);
                    response.headers.push(("ETag", "\"put\"".into()));
                    response
                }
                Ok(false) => {
                    state.count(Kind::PutConflict);
                    Response::error(
                        412,
                        "PreconditionFailed",
                        "At least one of the pre-conditions you specified did not hold",
                        key,
                    )
                }
                Err(why) => {
                    state.count(Kind::Other);
                    Response::error(400, "InvalidRequest", why, key)
                }
            }
        }
        ("DELETE", false) => {
            state.count(Kind::Delete);
            state.delete(key);
            Response::new(204)
        }
        _ => {
            state.count(Kind::Other);
            Response::error(501, "NotImplemented", "not supported here", key)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_format() {
        assert_eq!(iso8601(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(http_date(0), "Thu, 01 Jan 1970 00:00:00 GMT");
        assert_eq!(iso8601(1_700_000_000_123), "2023-11-14T22:13:20.123Z");
    }
}
