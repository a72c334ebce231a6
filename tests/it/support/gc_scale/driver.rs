//! Driving gc runs exactly as the `gc-cycle` state machine does, each step an invocation
//! of the `parqdb-catalog gc step` binary (a worker process), with up to K concurrent
//! workers for the per-partition steps, optionally killing workers at random points and
//! re-invoking the same step (the state machine's retry).
#![allow(dead_code)]

use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};

use super::server::{Census, Requests, Server, Shape, Violations};

/// How worker processes are started.
#[derive(Debug, Clone)]
pub struct Workers {
    /// The `parqdb-catalog` binary.
    pub bin: PathBuf,
    /// The warehouse URI.
    pub warehouse: String,
    /// The pointer store URI (`file:///...`).
    pub catalog: String,
    /// Environment of every worker (the `PARQDB_GC_*` configuration, `AWS_*`).
    pub env: Vec<(String, String)>,
    /// `--budget` of every step invocation.
    pub budget: Option<String>,
    /// Where the workers' output goes.
    pub scratch: PathBuf,
    /// Run the workers this far in the future (libfaketime), if set: `+2h`.
    pub faketime: Option<String>,
}

/// One finished invocation.
#[derive(Debug, Clone)]
pub struct Invoked {
    pub answer: Option<Value>,
    pub killed: bool,
    pub exit: String,
    pub wall: Duration,
    /// The process's peak resident set (kB): its `VmHWM`, sampled every few milliseconds
    /// while it runs. (`ru_maxrss` from `wait4` would not do: Linux carries the parent's
    /// high-water mark over `exec`, so every child would report at least the harness's
    /// own size, server included.)
    pub max_rss_kb: i64,
    pub stderr: String,
}

/// Kills at random points.
pub struct Killer {
    remaining: AtomicU64,
    done: AtomicU64,
    probability: f64,
    rng: Mutex<StdRng>,
    /// Typical (unkilled) duration per step kind, in ms.
    typical: Mutex<BTreeMap<String, f64>>,
}

impl Killer {
    /// Kill `kills` invocations, each invocation being a candidate with `probability`.
    pub fn new(kills: u64, probability: f64, seed: u64) -> Killer {
        Killer {
            remaining: AtomicU64::new(kills),
            done: AtomicU64::new(0),
            probability,
            rng: Mutex::new(StdRng::seed_from_u64(seed)),
            typical: Mutex::new(BTreeMap::new()),
        }
    }

    /// None: no kills.
    pub fn none() -> Killer {
        Killer::new(0, 0.0, 0)
    }

    /// Kills done so far.
    pub fn kills(&self) -> u64 {
        self.done.load(Ordering::SeqCst)
    }

    /// Kills still to do.
    pub fn remaining(&self) -> u64 {
        self.remaining.load(Ordering::SeqCst)
    }

    fn plan(&self, step: &str) -> Option<Duration> {
        if self.remaining.load(Ordering::SeqCst) == 0 {
            return None;
        }
        let mut rng = self.rng.lock().expect("lock");
        if !rng.random_bool(self.probability.clamp(0.0, 1.0)) {
            return None;
        }
        let typical = self
            .typical
            .lock()
            .expect("lock")
            .get(step)
            .copied()
            .unwrap_or(300.0);
        Some(Duration::from_micros(
            (rng.random_range(0.0..1.0) * typical * 1000.0) as u64,
        ))
    }

    fn killed(&self) -> bool {
        self.remaining
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .map(|_| {
                self.done.fetch_add(1, Ordering::SeqCst);
            })
            .is_ok()
    }

    fn observe(&self, step: &str, wall: Duration) {
        let mut typical = self.typical.lock().expect("lock");
        let ms = wall.as_secs_f64() * 1000.0;
        let entry = typical.entry(step.to_owned()).or_insert(ms);
        *entry = 0.7 * *entry + 0.3 * ms;
    }
}

/// What happened to one step kind in a run.
#[derive(Debug, Clone, Default)]
pub struct StepStats {
    pub invocations: u64,
    pub kills: u64,
    pub errors: u64,
    pub skipped: u64,
    pub max_rss_kb: i64,
    pub wall: Duration,
}

/// One run's measurements.
#[derive(Debug, Clone, Default)]
pub struct RunStats {
    pub run_id: String,
    pub partitions: usize,
    pub wall: Duration,
    pub phases: Vec<(String, Duration)>,
    pub steps: BTreeMap<String, StepStats>,
    pub requests: Requests,
    /// The finish step's answer (the run's totals).
    pub report: Value,
    /// Listing counts of the objects that existed during the scan: listed 0, 1, 2, >2
    /// times.
    pub listed: [u64; 4],
    /// Listings beyond each object's first in the scan.
    pub relisted: u64,
    pub violations: Violations,
    pub census: Census,
    /// Error messages seen (first few).
    pub errors: Vec<String>,
}

impl RunStats {
    /// Invocations of all steps.
    pub fn invocations(&self) -> u64 {
        self.steps.values().map(|s| s.invocations).sum()
    }

    /// Kills of all steps.
    pub fn kills(&self) -> u64 {
        self.steps.values().map(|s| s.kills).sum()
    }

    /// The largest worker peak RSS (kB).
    pub fn max_rss_kb(&self) -> i64 {
        self.steps.values().map(|s| s.max_rss_kb).max().unwrap_or(0)
    }

    /// A count of the finish report (`tracked`, `deleted`, ... objects).
    pub fn count(&self, field: &str) -> u64 {
        self.report[field]["objects"].as_u64().unwrap_or(0)
    }

    pub fn to_json(&self) -> Value {
        let steps: serde_json::Map<String, Value> = self
            .steps
            .iter()
            .map(|(name, s)| {
                (
                    name.clone(),
                    json!({
                        "invocations": s.invocations, "kills": s.kills, "errors": s.errors,
                        "skipped": s.skipped, "max-rss-mb": s.max_rss_kb as f64 / 1024.0,
                        "worker-seconds": s.wall.as_secs_f64(),
                    }),
                )
            })
            .collect();
        let counts: serde_json::Map<String, Value> = [
            "scanned",
            "reachable",
            "tracked",
            "condemned",
            "kept-by-retention",
            "kept-by-condemn-delay",
            "deleted",
            "deferred",
        ]
        .iter()
        .map(|field| ((*field).to_owned(), self.count(field).into()))
        .collect();
        json!({
            "run-id": self.run_id,
            "partitions": self.partitions,
            "wall-seconds": self.wall.as_secs_f64(),
            "phases": self.phases.iter().map(|(name, d)| json!([name, d.as_secs_f64()])).collect::<Vec<_>>(),
            "invocations": self.invocations(),
            "kills": self.kills(),
            "max-rss-mb": self.max_rss_kb() as f64 / 1024.0,
            "steps": steps,
            "requests": self.requests.to_json(),
            "counts": counts,
            "ledger-files-cleared": self.report["ledger-files-cleared"],
            "listed-0-1-2-more": self.listed,
            "relisted": self.relisted,
            "violations": {
                "live-deleted": self.violations.live_deleted,
                "clock-restarts": self.violations.clock_restarts,
                "recondemned": self.violations.recondemned,
            },
            "census": self.census.to_json(),
            "errors": self.errors,
        })
    }
}

static SEQUENCE: AtomicU64 = AtomicU64::new(0);

impl Workers {
    /// Run one step invocation, killing it after `kill_after` if it is still running.
    pub fn invoke(&self, event: &Value, kill_after: Option<Duration>) -> Invoked {
        let n = SEQUENCE.fetch_add(1, Ordering::SeqCst);
        let out_path = self.scratch.join(format!("inv-{n}.out"));
        let err_path = self.scratch.join(format!("inv-{n}.err"));
        let mut command = std::process::Command::new(&self.bin);
        command
            .arg("--warehouse")
            .arg(&self.warehouse)
            .arg("--catalog")
            .arg(&self.catalog)
            .args(["gc", "step"])
            .arg(event.to_string());
        if let Some(budget) = &self.budget {
            command.args(["--budget", budget]);
        }
        command.envs(self.env.iter().map(|(k, v)| (k, v)));
        if let Some(offset) = &self.faketime {
            command
                .env(
                    "LD_PRELOAD",
                    "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
                )
                .env("FAKETIME", offset)
                .env("FAKETIME_DONT_FAKE_MONOTONIC", "1")
                .env("FAKETIME_NO_CACHE", "1");
        }
        command
            .stdin(std::process::Stdio::null())
            .stdout(std::fs::File::create(&out_path).expect("stdout file"))
            .stderr(std::fs::File::create(&err_path).expect("stderr file"));
        let started = Instant::now();
        let child = command.spawn().expect("spawn parqdb-catalog");
        let pid = child.id() as libc::pid_t;
        // Reaped here with waitpid (polling, so it can be killed and sampled), never by
        // `Child::wait`.
        std::mem::forget(child);
        let mut killed = false;
        let mut max_rss_kb = 0;
        let status_file = format!("/proc/{pid}/status");
        let mut status: libc::c_int = 0;
        loop {
            // SAFETY: waitpid and kill act on our own child, not yet reaped.
            let reaped = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
            if reaped == pid {
                break;
            }
            assert!(
                reaped == 0,
                "waitpid failed: {}",
                std::io::Error::last_os_error()
            );
            if let Some(hwm) = std::fs::read_to_string(&status_file)
                .ok()
                .and_then(|status| vm_hwm_kb(&status))
            {
                max_rss_kb = max_rss_kb.max(hwm);
            }
            if !killed && kill_after.is_some_and(|after| started.elapsed() >= after) {
                unsafe { libc::kill(pid, libc::SIGKILL) };
                killed = true;
            }
            std::thread::sleep(Duration::from_millis(3));
        }
        let wall = started.elapsed();
        let signalled = libc::WIFSIGNALED(status);
        let exit = if signalled {
            format!("signal {}", libc::WTERMSIG(status))
        } else {
            format!("exit {}", libc::WEXITSTATUS(status))
        };
        let stdout = std::fs::read_to_string(&out_path).unwrap_or_default();
        let stderr = std::fs::read_to_string(&err_path).unwrap_or_default();
        let _ = std::fs::remove_file(&out_path);
        let _ = std::fs::remove_file(&err_path);
        let answer = (!signalled && libc::WEXITSTATUS(status) == 0)
            .then(|| serde_json::from_str(&stdout).ok())
            .flatten();
        Invoked {
            answer,
            killed: killed && signalled,
            exit,
            wall,
            max_rss_kb,
            stderr,
        }
    }
}

/// `VmHWM` of a `/proc/<pid>/status` text, in kB.
fn vm_hwm_kb(status: &str) -> Option<i64> {
    let line = status.lines().find(|line| line.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Drives runs.
pub struct Driver<'a> {
    pub server: &'a Server,
    pub workers: Workers,
    /// Concurrent workers for scan and delete.
    pub k: usize,
    pub killer: Killer,
    /// The lease (how long a skipped plan waits at most).
    pub lease: Duration,
    /// Print progress to stderr.
    pub verbose: bool,
    /// Scan only this many partitions, then stop the run there (a partial measurement of
    /// a warehouse too large to collect whole here).
    pub scan_limit: Option<usize>,
}

struct Shared {
    stats: Mutex<RunStats>,
}

impl Shared {
    fn record(&self, step: &str, invoked: &Invoked, skipped: bool) {
        let mut stats = self.stats.lock().expect("lock");
        let entry = stats.steps.entry(step.to_owned()).or_default();
        entry.invocations += 1;
        entry.kills += u64::from(invoked.killed);
        entry.errors += u64::from(invoked.answer.is_none() && !invoked.killed);
        entry.skipped += u64::from(skipped);
        entry.max_rss_kb = entry.max_rss_kb.max(invoked.max_rss_kb);
        entry.wall += invoked.wall;
        if invoked.answer.is_none() && !invoked.killed && stats.errors.len() < 8 {
            let message = invoked.stderr.lines().last().unwrap_or("").to_owned();
            stats
                .errors
                .push(format!("{step}: {}: {message}", invoked.exit));
        }
    }
}

impl Driver<'_> {
    /// Call `event` until its step is done; the last answer.
    fn until_done(&self, shared: &Shared, step: &str, event: &Value, deadline: Instant) -> Value {
        let mut failures = 0;
        loop {
            assert!(
                Instant::now() < deadline,
                "step {event} did not finish in time"
            );
            let kill_after = self.killer.plan(step);
            let invoked = self.workers.invoke(event, kill_after);
            if invoked.killed {
                self.killer.killed();
            } else if invoked.answer.is_some() {
                self.killer.observe(step, invoked.wall);
            }
            let skipped = invoked
                .answer
                .as_ref()
                .is_some_and(|a| a["status"] == "skipped");
            shared.record(step, &invoked, skipped);
            match &invoked.answer {
                Some(answer) if skipped => {
                    if self.verbose {
                        eprintln!("  {step}: skipped ({})", answer["skipped-reason"]);
                    }
                    std::thread::sleep(Duration::from_millis(500).min(self.lease / 4));
                }
                Some(answer) if answer["done"] == true => return answer.clone(),
                Some(_) => failures = 0,
                None if invoked.killed => {}
                None => {
                    failures += 1;
                    if self.verbose {
                        eprintln!("  {step}: {}: {}", invoked.exit, invoked.stderr.trim());
                    }
                    assert!(
                        failures < 30,
                        "step {event} keeps failing: {}",
                        invoked.stderr
                    );
                    std::thread::sleep(Duration::from_millis(200));
                }
            }
        }
    }

    /// Run `make(p)` for every partition with `self.k` concurrent workers.
    fn fan_out(
        &self,
        shared: &Shared,
        step: &str,
        partitions: usize,
        make: impl Fn(usize) -> Value + Sync,
        deadline: Instant,
    ) {
        let queue = Mutex::new((0..partitions).collect::<VecDeque<_>>());
        std::thread::scope(|scope| {
            for _ in 0..self.k.max(1) {
                scope.spawn(|| {
                    loop {
                        let Some(partition) = queue.lock().expect("lock").pop_front() else {
                            return;
                        };
                        self.until_done(shared, step, &make(partition), deadline);
                    }
                });
            }
        });
    }

    /// One whole run: plan, scan ×K, verify, delete ×K, finish.
    pub fn run(&self, timeout: Duration) -> RunStats {
        let deadline = Instant::now() + timeout;
        let shared = Shared {
            stats: Mutex::new(RunStats::default()),
        };
        let before = self.server.requests();
        let started = Instant::now();
        let mut phases = Vec::new();
        let mut phase_start = Instant::now();
        let mut phase = |name: &str, phases: &mut Vec<(String, Duration)>| {
            phases.push((name.to_owned(), phase_start.elapsed()));
            if self.verbose {
                eprintln!(
                    "  {name}: {:.1}s ({} requests so far)",
                    phase_start.elapsed().as_secs_f64(),
                    self.server.requests().since(&before).total()
                );
            }
            phase_start = Instant::now();
        };
        let planned = self.until_done(&shared, "plan", &json!({"step": "plan"}), deadline);
        let run = planned["run-id"].as_str().expect("run id").to_owned();
        let partitions = planned["partitions"].as_array().map_or(0, Vec::len);
        assert!(partitions > 0, "the plan has no partitions: {planned}");
        phase("plan", &mut phases);
        self.server.start_counting(&self.bounds(&run));
        self.fan_out(
            &shared,
            "scan",
            self.scan_limit
                .map_or(partitions, |limit| limit.min(partitions)),
            |partition| json!({"step": "scan", "run": run, "partition": partition}),
            deadline,
        );
        self.server.stop_counting();
        let listed = self.server.listing_histogram();
        let relisted = self.server.relisted();
        phase("scan", &mut phases);
        // A scan-only run stops here: no verify, delete or finish, and no report.
        let report = if self.scan_limit.is_some() {
            Value::Null
        } else {
            self.until_done(
                &shared,
                "verify",
                &json!({"step": "verify", "run": run}),
                deadline,
            );
            phase("verify", &mut phases);
            self.fan_out(
                &shared,
                "delete",
                partitions,
                |partition| json!({"step": "delete", "run": run, "partition": partition}),
                deadline,
            );
            phase("delete", &mut phases);
            let report = self.until_done(
                &shared,
                "finish",
                &json!({"step": "finish", "run": run}),
                deadline,
            );
            phase("finish", &mut phases);
            report
        };
        let mut stats = shared.stats.into_inner().expect("lock");
        stats.run_id = run;
        stats.partitions = partitions;
        stats.wall = started.elapsed();
        stats.phases = phases;
        stats.requests = self.server.requests().since(&before);
        stats.report = report;
        stats.listed = listed;
        stats.relisted = relisted;
        stats.violations = self.server.violations();
        stats.census = self.server.census();
        stats
    }

    /// The partition boundaries of run `run` (from its plan), as directory names.
    fn bounds(&self, run: &str) -> Vec<String> {
        let simple = run.replace('-', "");
        let plan = self
            .server
            .stored_names("_gc/runs/")
            .into_iter()
            .find(|name| name.ends_with(&format!("{simple}/plan.json")))
            .and_then(|name| self.server.stored(&name))
            .expect("the run's plan");
        let plan: Value = serde_json::from_slice(&plan).expect("plan json");
        plan["partitions"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|range| range["to"].as_str())
            .map(|to| format!("indexes/{to}/"))
            .collect()
    }
}

/// The warehouse and catalog a scenario works on.
pub struct Setup {
    pub server: Server,
    pub dir: PathBuf,
    pub catalog: String,
    /// Live indexes registered.
    pub indexes: usize,
}

/// The `AWS_*` environment of the workers and `init`.
pub fn aws_env(server: &Server) -> Vec<(String, String)> {
    [
        ("AWS_ENDPOINT_URL", server.endpoint()),
        ("AWS_ALLOW_HTTP", "true".to_owned()),
        ("AWS_ACCESS_KEY_ID", "synthetic".to_owned()),
        ("AWS_SECRET_ACCESS_KEY", "synthetic".to_owned()),
        ("AWS_REGION", "us-east-1".to_owned()),
        ("AWS_EC2_METADATA_DISABLED", "true".to_owned()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect()
}

/// Start the server for `shape`, claim the warehouse with `parqdb-catalog init --adopt`
/// (the generated objects are old: the warehouse holds data before any catalog), and
/// register one index per live directory (its metadata written into the server through
/// the library), so that the collector's reachability covers exactly the live objects.
pub fn setup(shape: Shape, bin: &Path, dir: &Path, server_threads: usize) -> Setup {
    let server = Server::start(shape, server_threads);
    let catalog_dir = dir.join("catalog");
    std::fs::create_dir_all(&catalog_dir).expect("catalog dir");
    let catalog = format!("file://{}", catalog_dir.display());
    let output = std::process::Command::new(bin)
        .arg("--warehouse")
        .arg(server.warehouse())
        .arg("--catalog")
        .arg(&catalog)
        .arg("init")
        .arg("--adopt")
        .envs(aws_env(&server))
        .output()
        .expect("run init");
    assert!(
        output.status.success(),
        "init failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let indexes = register_live(&server, &catalog);
    Setup {
        server,
        dir: dir.to_owned(),
        catalog,
        indexes,
    }
}

fn register_live(server: &Server, catalog_uri: &str) -> usize {
    use parqdb_catalog::CatalogConfig;
    use parqdb_catalog::IndexCatalog;
    use parqdb_catalog::IndexMetadata;
    use parqdb_catalog::family::FamilyRegistry;
    use parqdb_catalog::{IndexIdentifier, Namespace, RandomIds, SystemClock};
    use parqdb_catalog_testkit::fixture;

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let mut config = CatalogConfig::new(Some(server.warehouse()), Some(catalog_uri.to_owned()));
    config.s3.endpoint = Some(server.endpoint());
    config.s3.allow_http = Some(true);
    config.s3.region = Some("us-east-1".into());
    config.s3.access_key_id = Some("synthetic".into());
    config.s3.secret_access_key = Some("synthetic".into());
    let shape = server.shape().clone();
    runtime.block_on(async move {
        let catalog = config.build().await.expect("catalog");
        let namespace = Namespace::new(["scale".to_owned()]).expect("namespace");
        catalog
            .create_namespace(&namespace, BTreeMap::new())
            .await
            .expect("namespace created");
        let source = fixture::source(1);
        let mut registered = 0;
        for dir in (0..shape.dirs()).filter(|dir| shape.live_dir(*dir)) {
            let name = Shape::dir_name(dir);
            let contents = fixture::contents(&name);
            let metadata = IndexMetadata::create(
                contents,
                BTreeMap::new(),
                &SystemClock,
                &RandomIds,
                &FamilyRegistry::builtin(),
            )
            .expect("metadata");
            let relative = format!(
                "metadata/{}/00001-{}.metadata.json",
                metadata.index_uuid(),
                uuid::Uuid::new_v4()
            );
            let location = catalog
                .warehouse()
                .write_new(&relative, bytes::Bytes::from(metadata.to_json_vec()))
                .await
                .expect("metadata written");
            let id = IndexIdentifier::new(namespace.clone(), &name).expect("identifier");
            catalog
                .register(&id, Some(&source), &location)
                .await
                .expect("registered");
            registered += 1;
        }
        registered
    })
}

/// The worker environment for a scenario.
pub fn gc_env(settings: &[(&str, String)]) -> Vec<(String, String)> {
    settings
        .iter()
        .map(|(k, v)| ((*k).to_owned(), v.clone()))
        .collect()
}

/// A shared handle for reporting.
pub type SharedStats = Arc<Mutex<Vec<RunStats>>>;
