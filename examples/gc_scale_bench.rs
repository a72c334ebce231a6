//! The issue-16 measurements: the garbage collector at any scale, on a synthetic
//! S3-compatible server (`tests/it/support/gc_scale`) whose warehouse is generated (no object
//! is written to disk; most are never stored at all).
//!
//! ```sh
//! cargo build --release --bin parqdb-catalog --example gc_scale_bench
//! X=target/release/examples/gc_scale_bench
//! # 10 M objects, 1 % reachable, 60 s budgets, 4 workers: the tracking run (BENCHMARKS.md)
//! $X --objects 10000000 --per-dir 1000 --workers 4 --partitions 16 --runs 1 --faketime --budget 60s
//! # scale-out: 20 ms per request, K = 1, 4, 16 (a fresh warehouse each)
//! $X --objects 32000 --per-dir 100 --latency-ms 20 --workers 1,4,16 --partitions 16 --runs 1 --faketime
//! # kill anywhere: 100 kills over three runs (track, condemn, delete)
//! $X --objects 200000 --workers 4 --partitions 8 --runs 3 --faketime --budget 2s \
//!    --kills 100 --kill-probability 0.5 --lease 20s --seed 16
//! # part of a run: plan, then the scan of the first 2 partitions only
//! $X --objects 10000000 --runs 1 --faketime --scan-partitions 2
//! ```
//!
//! Each run is driven exactly as the `gc-cycle` state machine does: the plan step until
//! done, the scan step of every partition with K concurrent worker processes
//! (`parqdb-catalog gc step '<event>' --budget B`), verify, delete per partition with K
//! workers, finish. It prints one JSON line per run (invocations, wall time, requests by
//! kind, peak RSS per worker, listing counts, the invariants) and a summary.
//!
//! Time: with `--faketime` the workers of run `r` (from 0) run `r × --advance-hours`
//! (default 2) ahead (libfaketime, `apt-get install faketime`), so a retention of 1h
//! passes between runs:
//! run 1 tracks, run 2 condemns, run 3 deletes. Without it, retention, grace and the
//! condemnation delay are 1s (forced) and the retention clock starts at the catalog's
//! quiet time: run 1 tracks and condemns, run 2 deletes.

#[path = "../tests/it/support/gc_scale/mod.rs"]
mod support;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::json;
use support::driver::{Driver, Killer, RunStats, Workers, aws_env, setup};
use support::server::Shape;

struct Args {
    objects: u64,
    per_dir: u64,
    reachable: f64,
    latency_ms: u64,
    budget: String,
    workers: Vec<usize>,
    kills: u64,
    kill_probability: f64,
    runs: usize,
    partitions: usize,
    page_size: usize,
    io_concurrency: usize,
    lease: String,
    faketime: bool,
    advance_hours: u64,
    seed: u64,
    bin: Option<PathBuf>,
    server_threads: usize,
    timeout: Duration,
    json: Option<PathBuf>,
    scan_partitions: Option<usize>,
}

fn parse_args() -> Args {
    let mut args = Args {
        objects: 1_000_000,
        per_dir: 1000,
        reachable: 0.01,
        latency_ms: 0,
        budget: "60s".into(),
        workers: vec![4],
        kills: 0,
        kill_probability: 0.3,
        runs: 1,
        partitions: 16,
        page_size: 1000,
        io_concurrency: 16,
        lease: "15m".into(),
        faketime: false,
        advance_hours: 2,
        seed: 16,
        bin: None,
        server_threads: 2,
        timeout: Duration::from_secs(6 * 3600),
        json: None,
        scan_partitions: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().unwrap_or_else(|| panic!("{flag} needs a value"));
        match flag.as_str() {
            "--objects" => args.objects = value().parse().expect("--objects"),
            "--per-dir" => args.per_dir = value().parse().expect("--per-dir"),
            "--reachable" => args.reachable = value().parse().expect("--reachable"),
            "--latency-ms" => args.latency_ms = value().parse().expect("--latency-ms"),
            "--budget" => args.budget = value(),
            "--workers" => {
                args.workers = value()
                    .split(',')
                    .map(|k| k.trim().parse().expect("--workers"))
                    .collect()
            }
            "--kills" => args.kills = value().parse().expect("--kills"),
            "--kill-probability" => {
                args.kill_probability = value().parse().expect("--kill-probability")
            }
            "--runs" => args.runs = value().parse().expect("--runs"),
            "--partitions" => args.partitions = value().parse().expect("--partitions"),
            "--page-size" => args.page_size = value().parse().expect("--page-size"),
            "--io-concurrency" => args.io_concurrency = value().parse().expect("--io-concurrency"),
            "--lease" => args.lease = value(),
            "--faketime" => args.faketime = true,
            "--advance-hours" => args.advance_hours = value().parse().expect("--advance-hours"),
            "--seed" => args.seed = value().parse().expect("--seed"),
            "--bin" => args.bin = Some(PathBuf::from(value())),
            "--server-threads" => args.server_threads = value().parse().expect("--server-threads"),
            "--timeout-s" => {
                args.timeout = Duration::from_secs(value().parse().expect("--timeout-s"))
            }
            "--json" => args.json = Some(PathBuf::from(value())),
            "--scan-partitions" => {
                args.scan_partitions = Some(value().parse().expect("--scan-partitions"))
            }
            "--help" | "-h" => {
                eprintln!(
                    "gc_scale_bench [--objects N] [--per-dir N] [--reachable F] [--latency-ms N] [--budget D] [--workers K[,K..]] [--kills N] [--kill-probability P] [--runs N] [--partitions N] [--page-size N] [--io-concurrency N] [--lease D] [--faketime] [--advance-hours H] [--seed N] [--bin PATH] [--server-threads N] [--timeout-s N] [--json FILE] [--scan-partitions N]"
                );
                std::process::exit(0);
            }
            other => panic!("unknown argument {other}"),
        }
    }
    args
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

fn main() {
    let args = parse_args();
    let bin = args.bin.clone().unwrap_or_else(|| {
        // target/<profile>/examples/gc_scale_bench → target/<profile>/parqdb-catalog
        let exe = std::env::current_exe().expect("current exe");
        exe.parent()
            .and_then(|dir| dir.parent())
            .map(|dir| dir.join("parqdb-catalog"))
            .expect("the parqdb-catalog binary next to the example")
    });
    assert!(bin.exists(), "{} is missing: build it first", bin.display());
    let live_every = (1.0 / args.reachable).round().max(1.0) as u64;
    let mut summary = Vec::new();
    for &k in &args.workers {
        let dir = tempfile::tempdir().expect("scratch dir");
        let shape = Shape {
            bucket: "scale".into(),
            root: "wh".into(),
            objects: args.objects,
            per_dir: args.per_dir,
            live_every,
            mtime_ms: 1_600_000_000_000,
            latency: Duration::from_millis(args.latency_ms),
        };
        let started = Instant::now();
        let setup = setup(shape, &bin, dir.path(), args.server_threads);
        let live = setup.server.shape().live_objects();
        eprintln!(
            "K={k}: {} objects ({} live, {} indexes), setup {:.1}s, load {}",
            args.objects,
            live,
            setup.indexes,
            started.elapsed().as_secs_f64(),
            load_average()
        );
        let (retention, grace, delay, skew) = if args.faketime {
            ("1h", "5m", "2m", "5m")
        } else {
            ("1s", "1s", "1s", "0s")
        };
        let mut env = aws_env(&setup.server);
        for (name, value) in [
            ("PARQDB_GC_RETENTION", retention.to_owned()),
            ("PARQDB_GC_GRACE", grace.to_owned()),
            ("PARQDB_GC_CONDEMN_DELAY", delay.to_owned()),
            ("PARQDB_GC_MAX_CLOCK_SKEW", skew.to_owned()),
            ("PARQDB_GC_FORCE", "true".to_owned()),
            ("PARQDB_GC_PAGE_SIZE", args.page_size.to_string()),
            ("PARQDB_GC_PARTITIONS", args.partitions.to_string()),
            ("PARQDB_GC_IO_CONCURRENCY", args.io_concurrency.to_string()),
            ("PARQDB_GC_LEASE", args.lease.clone()),
            ("PARQDB_GC_MAX_DELETES", "100000000".to_owned()),
        ] {
            env.push((name.to_owned(), value));
        }
        let lease = humantime::parse_duration(args.lease.trim()).expect("--lease");
        let mut driver = Driver {
            server: &setup.server,
            workers: Workers {
                bin: bin.clone(),
                warehouse: setup.server.warehouse(),
                catalog: setup.catalog.clone(),
                env,
                budget: Some(args.budget.clone()),
                scratch: dir.path().to_owned(),
                faketime: None,
            },
            k,
            killer: Killer::new(args.kills, args.kill_probability, args.seed),
            lease,
            verbose: true,
            scan_limit: args.scan_partitions,
        };
        if !args.faketime {
            std::thread::sleep(Duration::from_millis(1200));
        }
        let mut runs: Vec<RunStats> = Vec::new();
        for run in 0..args.runs {
            if args.faketime {
                driver.workers.faketime = Some(format!("+{}h", run as u64 * args.advance_hours));
            }
            let load = load_average();
            let stats = driver.run(args.timeout);
            let mut line = stats.to_json();
            line["k"] = k.into();
            line["run"] = (run + 1).into();
            line["objects"] = args.objects.into();
            line["latency-ms"] = args.latency_ms.into();
            line["budget"] = args.budget.clone().into();
            line["load-before"] = load.into();
            line["load-after"] = load_average().into();
            line["server-stored"] = json!(setup.server.stored_size());
            println!("{line}");
            summary.push(line);
            runs.push(stats);
            if !args.faketime {
                std::thread::sleep(Duration::from_millis(1200));
            }
        }
        let census = setup.server.census();
        let violations = setup.server.violations();
        let line = json!({
            "k": k, "summary": true, "kills": driver.killer.kills(),
            "census": census.to_json(),
            "violations": {"live-deleted": violations.live_deleted, "clock-restarts": violations.clock_restarts, "recondemned": violations.recondemned},
            "runs-wall-seconds": runs.iter().map(|r| r.wall.as_secs_f64()).collect::<Vec<_>>(),
        });
        println!("{line}");
        summary.push(line);
    }
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_string_pretty(&summary).expect("json"))
            .expect("write --json");
    }
    // Scale-out ratios against the first K.
    let walls: Vec<(u64, f64)> = summary
        .iter()
        .filter(|l| l["run"] == 1)
        .map(|l| {
            (
                l["k"].as_u64().unwrap_or(0),
                l["wall-seconds"].as_f64().unwrap_or(0.0),
            )
        })
        .collect();
    if walls.len() > 1 {
        let (k0, base) = walls[0];
        for (k, wall) in &walls {
            eprintln!(
                "K={k}: run 1 {wall:.1}s, speedup {:.2} vs K={k0}",
                base / wall
            );
        }
    }
}
