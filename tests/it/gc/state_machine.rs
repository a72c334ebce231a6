//! The gc cycle state machine (`infra/statemachines/gc-cycle.asl.json`), driven in-process
//! by the interpreter of `tests/it/support/asl.rs` exactly as written, with its Lambda task calling the
//! gc function's handler (`run_scheduled_within`) on a real warehouse: whole cycles, cut
//! off and resumed; retries and their backoff; waits for another run's lease; no
//! overlapping executions; the history events of each execution at 16 and 1,000
//! partitions.
//!
//! The definition's syntax is checked offline by `scripts/check-infra.sh` (asl-validator);
//! this test checks its logic.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use crate::support::asl::{Ending, Execution, GC_ARN, Machine, STACK, TaskResult, Tasks};
use crate::support::gc::{Backend, Env, Layout, MINUTE, test_config};
use parqdb_catalog::gc::{self, GarbageCollector, GcConfig, GcStep, run_scheduled_within};
use serde_json::{Value, json};

// ---------------------------------------------------------------------------------------
// The gc function, as the Lambda task invokes it
// ---------------------------------------------------------------------------------------

/// A substitute answer for one invocation (`None`: the real handler answers).
type Fake<'a> = Box<dyn FnMut(&Value) -> Option<TaskResult> + 'a>;

/// The gc function's handler on a real warehouse; waits advance the warehouse's clock.
struct Lambda<'a> {
    collector: &'a GarbageCollector,
    env: &'a Env,
    /// Every invocation: its payload and its answer.
    calls: Vec<(Value, TaskResult)>,
    fake: Fake<'a>,
}

impl<'a> Lambda<'a> {
    fn new(collector: &'a GarbageCollector, env: &'a Env) -> Lambda<'a> {
        Lambda {
            collector,
            env,
            calls: Vec::new(),
            fake: Box::new(|_| None),
        }
    }

    fn faking(mut self, fake: impl FnMut(&Value) -> Option<TaskResult> + 'a) -> Lambda<'a> {
        self.fake = Box::new(fake);
        self
    }

    /// The calls of `step` (`plan`, `scan`, ...) from the `from`th call on.
    fn of(&self, step: &str, from: usize) -> Vec<&(Value, TaskResult)> {
        self.calls[from..]
            .iter()
            .filter(|(payload, _)| payload["step"] == step)
            .collect()
    }

    /// The run ids the plan step answered from the `from`th call on.
    fn planned(&self, from: usize) -> BTreeSet<String> {
        self.of("plan", from)
            .into_iter()
            .filter_map(|(_, answer)| answer.as_ref().ok())
            .map(|answer| answer["run-id"].as_str().expect("run-id").to_owned())
            .collect()
    }

    /// The partitions `step` was invoked for from the `from`th call on, in call order.
    fn partitions(&self, step: &str, from: usize) -> Vec<u64> {
        self.of(step, from)
            .into_iter()
            .map(|(payload, _)| payload["partition"].as_u64().expect("partition"))
            .collect()
    }
}

impl Tasks for Lambda<'_> {
    async fn invoke(&mut self, parameters: Value) -> TaskResult {
        assert_eq!(parameters["FunctionName"], GC_ARN);
        let payload = parameters["Payload"].clone();
        let answer = match (self.fake)(&payload) {
            Some(answer) => answer,
            None => run_scheduled_within(self.collector, payload.clone(), Some(Duration::ZERO))
                .await
                .map_err(|err| err.code().to_owned()),
        };
        self.calls.push((payload, answer.clone()));
        answer
    }

    fn wait(&mut self, seconds: u64) {
        self.env.advance(seconds as i64 * 1000);
    }
}

/// Task answers from a script alone (for the retry and skip mechanics).
struct Scripted<F> {
    answer: F,
    calls: Vec<Value>,
}

impl<F: FnMut(usize, &Value) -> TaskResult> Scripted<F> {
    fn new(answer: F) -> Scripted<F> {
        Scripted {
            answer,
            calls: Vec::new(),
        }
    }
}

impl<F: FnMut(usize, &Value) -> TaskResult> Tasks for Scripted<F> {
    async fn invoke(&mut self, parameters: Value) -> TaskResult {
        let payload = parameters["Payload"].clone();
        let answer = (self.answer)(self.calls.len(), &payload);
        self.calls.push(payload);
        answer
    }
}

/// An answer of the gc function's shape.
fn answer(step: &str, status: &str, done: bool, partitions: usize) -> Value {
    json!({
        "step": step,
        "run-id": "7d0c3b0e-0000-4000-8000-000000000001",
        "status": status,
        "done": done,
        "partitions": (0..partitions).collect::<Vec<_>>(),
        "deleted": {"objects": 0, "bytes": 0},
    })
}

// ---------------------------------------------------------------------------------------
// The warehouse
// ---------------------------------------------------------------------------------------

/// A run of many small steps: every invocation stops after one page of two objects, and
/// `indexes/` is split in three partitions.
fn config() -> GcConfig {
    GcConfig {
        budget: Some(Duration::ZERO),
        page_size: 2,
        partitions: 3,
        ..test_config()
    }
}

/// A claimed warehouse with three live indexes (under `indexes/live/`), an index whose
/// metadata was written but never registered (`indexes/orphan/`, its metadata file under
/// `metadata/`), and unreferenced objects in three more directories of `indexes/`.
struct Fixture {
    env: Env,
    live: Vec<String>,
    garbage: Vec<String>,
}

async fn fixture(backend: Backend, seed: u64) -> Fixture {
    let env = Env::new(backend, seed);
    gc::claim(&env.catalog, env.now()).await.expect("claimed");
    let mut live = Vec::new();
    for name in ["a", "b", "c"] {
        let layout = Layout::under(&format!("live/{name}"));
        let (_, _, location) = env.register(name, &layout).await;
        live.extend(files(&layout));
        live.push(env.relative(&location));
    }
    let orphan = Layout::under("orphan/1");
    let (_, location) = env.new_index(&orphan).await;
    let mut garbage = files(&orphan);
    garbage.push(env.relative(&location));
    for dir in ["g1", "g2", "g3"] {
        for part in 0..3 {
            let name = format!("indexes/{dir}/part-{part}");
            env.put(&name, b"garbage").await;
            garbage.push(name);
        }
    }
    Fixture { env, live, garbage }
}

fn files(layout: &Layout) -> Vec<String> {
    [&layout.centroids, &layout.postings]
        .into_iter()
        .flat_map(|dir| [0, 1].map(|part| format!("{dir}part-{part}.parquet")))
        .collect()
}

impl Fixture {
    async fn existing(&self, names: &[String]) -> Vec<String> {
        let mut existing = Vec::new();
        for name in names {
            if self.env.exists(name).await {
                existing.push(name.clone());
            }
        }
        existing
    }
}

/// Whether some partition's calls are interleaved with another's (`a … b … a`).
fn interleaved(calls: &[u64]) -> bool {
    (0..calls.len()).any(|i| {
        (i + 1..calls.len()).any(|j| calls[j] != calls[i] && calls[j + 1..].contains(&calls[i]))
    })
}

// ---------------------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------------------

/// The retriers and catchers of every gc task (the serial steps in the execution, the
/// partition steps in the Distributed Maps' child executions).
fn gc_tasks(definition: &Value) -> Vec<(String, &Value)> {
    let mut tasks = Vec::new();
    for (name, state) in definition["States"].as_object().expect("States") {
        if state["Type"] == "Map" {
            for (inner, task) in state["ItemProcessor"]["States"]
                .as_object()
                .expect("States")
            {
                if task["Type"] == "Task" {
                    tasks.push((format!("{name}/{inner}"), task));
                }
            }
        }
        if state["Resource"] == "arn:aws:states:::lambda:invoke" {
            tasks.push((name.clone(), state));
        }
    }
    tasks
}

fn errors(list: &Value) -> BTreeSet<&str> {
    list.as_array()
        .into_iter()
        .flatten()
        .flat_map(|entry| entry["ErrorEquals"].as_array().expect("ErrorEquals"))
        .map(|name| name.as_str().expect("a name"))
        .collect()
}

#[test]
fn the_definition_is_what_the_template_deploys() {
    let machine = Machine::new(7);
    let definition = &machine.definition;
    assert_eq!(definition["TimeoutSeconds"], 604_800, "a week");
    assert_eq!(definition["StartAt"], "Start");
    let states = definition["States"].as_object().expect("States");
    assert_eq!(
        states["Start"]["Next"], "CheckOverlap",
        "no work before the check"
    );
    for (name, state) in states {
        if state["Type"] == "Map" {
            assert_eq!(state["ItemsPath"], "$.plan.partitions", "{name}");
            assert_eq!(state["MaxConcurrencyPath"], "$.cycle.workers", "{name}");
            assert_eq!(
                state["ItemProcessor"]["ProcessorConfig"]["Mode"], "DISTRIBUTED",
                "{name}: one child execution per partition"
            );
            assert_eq!(state["ResultPath"], Value::Null, "{name}: results dropped");
            let catchers = state["Catch"].as_array().expect("Catch");
            assert_eq!(
                catchers[0]["ErrorEquals"],
                json!(["States.ExceedToleratedFailureThreshold"])
            );
            assert_eq!(catchers[0]["Next"], "PartitionFailed", "{name}");
            assert_eq!(catchers[1]["ErrorEquals"], json!(["States.ALL"]), "{name}");
        }
        if state["Type"] == "Wait" {
            assert_eq!(state["Seconds"], 60, "{name}");
        }
    }
    let tasks = gc_tasks(definition);
    assert_eq!(tasks.len(), 5, "plan, scan, verify, delete, finish");
    let crashes = [
        "Lambda.Unknown",
        "Sandbox.Timedout",
        "Runtime.OutOfMemory",
        "Runtime.ExitError",
    ];
    for (name, task) in tasks {
        assert_eq!(
            task["Parameters"]["FunctionName"], GC_ARN,
            "{name}: the alias"
        );
        let retried = errors(&task["Retry"]);
        for error in [
            "STORE_UNAVAILABLE",
            "Lambda.ServiceException",
            "Lambda.AWSLambdaException",
            "Lambda.SdkClientException",
            "Lambda.TooManyRequestsException",
        ]
        .iter()
        .chain(&crashes)
        {
            assert!(retried.contains(error), "{name} retries {error}");
        }
        for error in ["States.ALL", "INVALID_CONFIGURATION", "WAREHOUSE_NOT_OWNED"] {
            assert!(!retried.contains(error), "{name} must not retry {error}");
        }
        // A crash is retried once; the steps are idempotent.
        let crash_retrier = task["Retry"]
            .as_array()
            .expect("Retry")
            .iter()
            .find(|r| r["ErrorEquals"][0] == crashes[0])
            .expect("a crash retrier");
        assert_eq!(crash_retrier["MaxAttempts"], 1, "{name}");
        if name.contains('/') {
            assert!(task.get("Catch").is_none(), "{name}: the child fails");
        } else {
            let catchers = task["Catch"].as_array().expect("Catch");
            assert_eq!(catchers[0]["ErrorEquals"], json!(crashes), "{name}");
            assert_eq!(catchers[0]["Next"], "StepCrashed", "{name}");
            assert_eq!(catchers[1]["ErrorEquals"], json!(["States.ALL"]), "{name}");
            assert_eq!(catchers[1]["Next"], "Failed", "{name}");
        }
    }
    for (state, error) in [
        ("Failed", "GcRunFailed"),
        ("StepCrashed", "GcStepCrashed"),
        ("PartitionFailed", "GcPartitionFailed"),
        ("OverlapCheckFailed", "GcOverlapCheckFailed"),
    ] {
        assert_eq!(states[state]["Type"], "Fail", "{state}");
        assert_eq!(states[state]["Error"], error, "{state}");
        assert!(
            states[state]["Cause"]
                .as_str()
                .is_some_and(|c| c.len() > 80),
            "{state}: a clear cause"
        );
    }
}

/// Cycles of many small steps collect the garbage and nothing else; every cycle is one
/// whole run, and every partition's scan and delete steps are invoked.
async fn cycles_collect_the_garbage(
    machine: Machine,
    backend: Backend,
    seed: u64,
) -> Vec<Execution> {
    let fixture = fixture(backend, seed).await;
    let env = &fixture.env;
    let collector = env.gc(config());
    let mut lambda = Lambda::new(&collector, env);
    let mut executions = Vec::new();
    let mut runs = BTreeSet::new();
    while !fixture.existing(&fixture.garbage).await.is_empty() {
        assert!(
            executions.len() < 16,
            "garbage outlived {} cycles: {:?}",
            executions.len(),
            fixture.existing(&fixture.garbage).await
        );
        env.advance(30 * MINUTE);
        let from = lambda.calls.len();
        let execution = machine.execute(json!({}), &mut lambda).await;
        let Ending::Succeeded(output) = &execution.ending else {
            panic!(
                "cycle {}: {:?} {:?}",
                executions.len() + 1,
                execution.ending,
                execution.trace
            );
        };
        // One run per cycle, a new one each time, finished.
        let planned = lambda.planned(from);
        assert_eq!(planned.len(), 1, "{planned:?}");
        let run = planned.into_iter().next().expect("a run");
        assert!(runs.insert(run.clone()), "run {run} ran twice");
        assert_eq!(output["plan"]["run"], run.as_str());
        // Three partitions, fewer once the garbage directories are gone (a run splits
        // `indexes/` at its subdirectories).
        let partitions: BTreeSet<u64> = output["plan"]["partitions"]
            .as_array()
            .expect("partitions")
            .iter()
            .map(|p| p.as_u64().expect("a number"))
            .collect();
        let expected = if executions.is_empty() {
            3
        } else {
            partitions.len()
        };
        assert!(expected <= 3);
        assert_eq!(partitions, (0..expected as u64).collect());
        assert_eq!(output["last"]["status"], "completed", "{output}");
        assert_eq!(output["last"]["done"], true);
        // Every call answered; the steps in order; every partition scanned and deleted.
        let steps: Vec<&str> = lambda.calls[from..]
            .iter()
            .map(|(payload, answer)| {
                assert!(answer.is_ok(), "{payload}: {answer:?}");
                payload["step"].as_str().expect("a step")
            })
            .collect();
        let mut order = steps.clone();
        order.dedup();
        assert_eq!(
            order,
            ["plan", "scan", "verify", "delete", "finish"],
            "{steps:?}"
        );
        for step in ["scan", "delete"] {
            let invoked: BTreeSet<u64> = lambda.partitions(step, from).into_iter().collect();
            assert_eq!(invoked, partitions, "{step}");
            // Each partition's step was invoked until it answered done, and not after.
            for &partition in &partitions {
                let answers: Vec<bool> = lambda
                    .of(step, from)
                    .into_iter()
                    .filter(|(payload, _)| payload["partition"] == partition)
                    .map(|(_, answer)| answer.as_ref().expect("answered")["done"] == true)
                    .collect();
                assert_eq!(answers.last(), Some(&true), "{step} {partition}");
                assert!(
                    !answers[..answers.len() - 1].contains(&true),
                    "{step} {partition}"
                );
            }
        }
        let existing = fixture.existing(&fixture.live).await;
        assert_eq!(existing, fixture.live, "live files deleted");
        executions.push(execution);
    }
    // Small pages: the first run needed several invocations of the plan step (metadata/
    // has four files) and of some partition's scan.
    let first = &executions[0];
    let plans = first.trace.iter().filter(|s| s.as_str() == "Plan").count();
    assert!(plans >= 2, "{:?}", first.trace);
    let scans = first
        .trace
        .iter()
        .filter(|s| s.ends_with("/ScanPartition"))
        .count();
    assert!(scans >= 6, "{:?}", first.trace);
    assert!(
        executions.len() >= 3,
        "retention 2h, condemnation delay 10m"
    );
    let state = gc::status(&env.catalog, env.now(), false)
        .await
        .expect("status");
    assert!(state.current_run().is_none(), "every run finished");
    assert!(!state.running(), "the lease is released");
    assert!(state.last_finished_run().is_some());
    executions
}

#[tokio::test]
async fn cycles_of_small_steps_collect_garbage_and_keep_live_files() {
    let executions = cycles_collect_the_garbage(Machine::new(4), Backend::Local, 41).await;
    for execution in &executions {
        assert_eq!(execution.max_in_flight, 1, "sequential iterations");
        assert!(execution.waits.is_empty(), "nothing was skipped or retried");
    }
}

#[tokio::test]
async fn interleaved_iterations_mimic_concurrent_workers() {
    let executions =
        cycles_collect_the_garbage(Machine::new(2).round_robin(), Backend::Memory, 42).await;
    let first = &executions[0];
    assert_eq!(
        first.max_in_flight, 2,
        "MaxConcurrencyPath: $.cycle.workers"
    );
    let scans: Vec<u64> = first
        .trace
        .iter()
        .filter(|state| state.ends_with("/ScanPartition"))
        .map(|state| {
            state
                .strip_prefix("Scan[")
                .and_then(|rest| rest.split(']').next())
                .and_then(|n| n.parse().ok())
                .expect("Scan[n]/ScanPartition")
        })
        .collect();
    assert!(interleaved(&scans), "{scans:?}");
    // All of them at once: every partition of a map is in flight together.
    let executions =
        cycles_collect_the_garbage(Machine::new(40).round_robin(), Backend::Memory, 43).await;
    assert_eq!(executions[0].max_in_flight, 3);
}

/// An execution cut off part-way (stopped, or a step failing with an error that is not
/// retried) leaves its run unfinished; the next execution's plan step resumes that same
/// run and finishes it, without redoing what was checkpointed.
#[tokio::test]
async fn the_next_execution_resumes_a_cut_off_run() {
    // The whole run, uninterrupted, for reference.
    let reference = fixture(Backend::Memory, 44).await;
    reference.env.advance(30 * MINUTE);
    let collector = reference.env.gc(config());
    let mut whole = Lambda::new(&collector, &reference.env);
    let execution = Machine::new(4).execute(json!({}), &mut whole).await;
    assert!(
        matches!(execution.ending, Ending::Succeeded(_)),
        "{execution:?}"
    );
    let plans = whole.of("plan", 0).len();
    let total = whole.calls.len();
    let first = |step: &str| {
        whole
            .calls
            .iter()
            .position(|(payload, _)| payload["step"] == step)
            .expect("invoked")
    };
    let (first_scan, first_delete) = (first("scan"), first("delete"));

    // Stopped in the middle of the scans, and in the middle of the deletions.
    for cut in [first_scan + 4, first_delete + 2] {
        let fixture = fixture(Backend::Memory, 44).await;
        let env = &fixture.env;
        env.advance(30 * MINUTE);
        let collector = env.gc(config());
        let mut lambda = Lambda::new(&collector, env);
        let stopped = Machine::new(4)
            .abort_after(cut)
            .execute(json!({}), &mut lambda)
            .await;
        assert_eq!(stopped.ending, Ending::Aborted);
        let planned = lambda.planned(0);
        assert_eq!(planned.len(), 1);
        let run = planned.into_iter().next().expect("a run");
        let state = gc::status(&env.catalog, env.now(), false)
            .await
            .expect("status");
        let current = state.current_run().expect("the run is unfinished");
        assert_eq!(current.to_string(), run);
        let partitions =
            serde_json::to_value(&state).expect("JSON")["current-run"]["partitions"].clone();
        let partitions = partitions.as_array().expect("the partitions' progress");
        let scanned_before = partitions.iter().filter(|p| p["scanned"] == true).count();

        env.advance(MINUTE);
        let from = lambda.calls.len();
        let resumed = Machine::new(4).execute(json!({}), &mut lambda).await;
        let Ending::Succeeded(output) = &resumed.ending else {
            panic!("{resumed:?}");
        };
        assert_eq!(
            lambda.planned(from),
            BTreeSet::from([run.clone()]),
            "the same run"
        );
        assert_eq!(output["last"]["status"], "completed");
        // Checkpointed work is not redone: a step already done answers at once.
        let again = lambda.calls.len() - from;
        assert!(
            from + again <= total + plans + 2 * 3 + 3,
            "{from} + {again} calls against {total} uninterrupted"
        );
        if scanned_before > 0 {
            let rescans = lambda.partitions("scan", from).len();
            assert!(rescans < whole.partitions("scan", 0).len(), "{rescans}");
        }
        let state = gc::status(&env.catalog, env.now(), false)
            .await
            .expect("status");
        assert!(state.current_run().is_none());
        assert_eq!(
            state.last_finished_run().map(|run| run.to_string()),
            Some(run)
        );
        assert_eq!(fixture.existing(&fixture.live).await, fixture.live);
    }

    // A step that crashes twice in a row (the process died: out of memory) fails the
    // execution with a clear cause after one retry; the next one resumes the run.
    let fixture = fixture(Backend::Memory, 46).await;
    let env = &fixture.env;
    env.advance(30 * MINUTE);
    let collector = env.gc(config());
    let mut verifies = 0;
    let mut lambda = Lambda::new(&collector, env).faking(|payload| {
        if payload["step"] == "verify" {
            verifies += 1;
            if verifies <= 2 {
                return Some(Err("Runtime.OutOfMemory".into()));
            }
        }
        None
    });
    let failed = Machine::new(4).execute(json!({}), &mut lambda).await;
    let Ending::Failed { error, data } = &failed.ending else {
        panic!("{failed:?}");
    };
    assert_eq!(error, "GcStepCrashed");
    assert_eq!(data["error"]["Error"], "Runtime.OutOfMemory");
    assert_eq!(failed.waits, [60], "retried once, a minute later");
    let run = lambda.planned(0);
    let from = lambda.calls.len();
    let resumed = Machine::new(4).execute(json!({}), &mut lambda).await;
    assert!(
        matches!(resumed.ending, Ending::Succeeded(_)),
        "{resumed:?}"
    );
    assert_eq!(lambda.planned(from), run);
    assert!(
        lambda
            .of("scan", from)
            .iter()
            .all(|(_, answer)| answer.as_ref().expect("answered")["done"] == true),
        "the scans were complete: each answers done at once"
    );
}

/// Interrupting every cycle restarts no retention clock: the garbage goes in the same
/// cycle as without interruptions.
#[tokio::test]
async fn interrupted_cycles_collect_as_soon_as_uninterrupted_ones() {
    async fn cycles(interrupt: bool) -> usize {
        let fixture = fixture(Backend::Memory, 47).await;
        let env = &fixture.env;
        let collector = env.gc(config());
        let mut lambda = Lambda::new(&collector, env);
        for cycle in 1..=16 {
            env.advance(30 * MINUTE);
            if interrupt {
                let stopped = Machine::new(4)
                    .abort_after(7 + cycle % 5)
                    .execute(json!({}), &mut lambda)
                    .await;
                assert_eq!(stopped.ending, Ending::Aborted);
            }
            let execution = Machine::new(4).execute(json!({}), &mut lambda).await;
            assert!(
                matches!(execution.ending, Ending::Succeeded(_)),
                "{execution:?}"
            );
            assert_eq!(fixture.existing(&fixture.live).await, fixture.live);
            if fixture.existing(&fixture.garbage).await.is_empty() {
                return cycle;
            }
        }
        panic!("the garbage outlived 16 cycles");
    }
    let uninterrupted = cycles(false).await;
    assert_eq!(cycles(true).await, uninterrupted);
}

#[tokio::test]
async fn store_outages_are_retried_with_backoff() {
    let fixture = fixture(Backend::Memory, 48).await;
    let env = &fixture.env;
    env.advance(30 * MINUTE);
    let collector = env.gc(config());
    // The verify step and partition 1's first scan meet an outage, twice and three times;
    // the real handler answers the rest.
    let (mut verifies, mut scans) = (0, 0);
    let mut lambda = Lambda::new(&collector, env).faking(|payload| {
        let outage = match payload["step"].as_str() {
            Some("verify") => {
                verifies += 1;
                verifies <= 2
            }
            Some("scan") if payload["partition"] == 1 => {
                scans += 1;
                scans <= 3
            }
            _ => false,
        };
        outage.then(|| Err("STORE_UNAVAILABLE".to_owned()))
    });
    let started = env.now();
    let execution = Machine::new(4).execute(json!({}), &mut lambda).await;
    let Ending::Succeeded(output) = &execution.ending else {
        panic!("{execution:?}");
    };
    assert_eq!(output["last"]["status"], "completed");
    let retries: Vec<&String> = execution
        .trace
        .iter()
        .filter(|s| s.contains(" retry "))
        .collect();
    assert_eq!(
        retries,
        [
            "Scan[1]/ScanPartition retry STORE_UNAVAILABLE after 30s",
            "Scan[1]/ScanPartition retry STORE_UNAVAILABLE after 60s",
            "Scan[1]/ScanPartition retry STORE_UNAVAILABLE after 120s",
            "Verify retry STORE_UNAVAILABLE after 30s",
            "Verify retry STORE_UNAVAILABLE after 60s",
        ]
    );
    assert_eq!(execution.waits, [30, 60, 120, 30, 60]);
    assert!(
        env.now() >= started + 300_000,
        "the backoff advanced the clock"
    );

    // An outage that outlasts the retries fails the execution after five of them.
    let mut outage = Scripted::new(|_, _| Err("STORE_UNAVAILABLE".to_owned()));
    let execution = Machine::new(4).execute(json!({}), &mut outage).await;
    let Ending::Failed { error, data } = &execution.ending else {
        panic!("{execution:?}");
    };
    assert_eq!(
        (error.as_str(), &data["error"]["Error"]),
        ("GcRunFailed", &json!("STORE_UNAVAILABLE"))
    );
    assert_eq!(outage.calls.len(), 6);
    assert_eq!(execution.waits, [30, 60, 120, 240, 480]);

    // Throttling (overlapping executions share the reserved concurrency) is retried
    // longer: ten times, up to 15 minutes apart.
    let mut throttled = Scripted::new(|call, _| match call {
        0..10 => Err("Lambda.TooManyRequestsException".to_owned()),
        _ => Ok(answer("plan", "skipped", true, 0)),
    });
    let execution = Machine::new(4).execute(json!({}), &mut throttled).await;
    assert!(
        matches!(execution.ending, Ending::Succeeded(_)),
        "{execution:?}"
    );
    assert_eq!(
        execution.waits,
        [60, 120, 240, 480, 900, 900, 900, 900, 900, 900]
    );
}

#[tokio::test]
async fn configuration_errors_fail_the_execution_at_once() {
    // A warehouse nobody claimed that holds data: the plan step refuses it.
    let env = Env::new(Backend::Memory, 49);
    env.put("indexes/legacy/part-0", b"written before ownership")
        .await;
    let collector = env.gc(config());
    let mut lambda = Lambda::new(&collector, &env);
    let execution = Machine::new(4).execute(json!({}), &mut lambda).await;
    let Ending::Failed { error, data } = &execution.ending else {
        panic!("{execution:?}");
    };
    assert_eq!(error, "GcRunFailed");
    assert_eq!(data["error"]["Error"], "INVALID_CONFIGURATION");
    assert_eq!(lambda.calls.len(), 1, "not retried");
    assert!(execution.waits.is_empty());
    assert_eq!(
        execution.trace,
        ["Start", "CheckOverlap", "Overlapping", "Plan", "Failed"]
    );

    // A warehouse another catalog owns.
    let fixture = fixture(Backend::Memory, 50).await;
    let foreign = GarbageCollector::new(fixture.env.foreign_catalog(51), config()).expect("config");
    let mut lambda = Lambda::new(&foreign, &fixture.env);
    let execution = Machine::new(4).execute(json!({}), &mut lambda).await;
    let Ending::Failed { data, .. } = &execution.ending else {
        panic!("{execution:?}");
    };
    assert_eq!(data["error"]["Error"], "WAREHOUSE_NOT_OWNED");
    assert_eq!(lambda.calls.len(), 1, "not retried");
}

/// A plan step that finds another run's lease ends the execution quietly: here a run of
/// another collector (an earlier version, say) holds it. Once it has expired, the next
/// execution goes on with the unfinished run of the stopped execution and finishes it.
#[tokio::test]
async fn a_skipped_plan_ends_the_execution_quietly() {
    let fixture = fixture(Backend::Memory, 52).await;
    let env = &fixture.env;
    env.advance(30 * MINUTE);
    let collector = env.gc(config());
    let mut lambda = Lambda::new(&collector, env);
    let stopped = Machine::new(4)
        .abort_after(6)
        .execute(json!({}), &mut lambda)
        .await;
    assert_eq!(stopped.ending, Ending::Aborted);
    let unfinished = lambda.planned(0);
    assert_eq!(unfinished.len(), 1);
    // Another holder takes the lease (the stopped execution's has expired).
    env.advance(16 * MINUTE);
    let newest = env
        .objects()
        .await
        .into_iter()
        .filter_map(|name| {
            name.strip_prefix("_gc/lease/")?
                .strip_suffix(".json")?
                .parse::<u64>()
                .ok()
        })
        .max()
        .expect("a lease generation");
    let foreign = json!({
        "holder": uuid::Uuid::from_u128(77), "acquired-ms": env.now(),
        "expires-ms": env.now() + 15 * MINUTE, "released": false,
    });
    env.warehouse
        .put_if_absent(
            &format!("_gc/lease/{:020}.json", newest + 1),
            bytes::Bytes::from(foreign.to_string()),
        )
        .await
        .expect("written");

    let from = lambda.calls.len();
    let execution = Machine::new(4).execute(json!({}), &mut lambda).await;
    let Ending::Succeeded(output) = &execution.ending else {
        panic!("{execution:?}");
    };
    assert_eq!(output["plan"]["status"], "skipped", "{output}");
    assert_eq!(
        execution.trace,
        [
            "Start",
            "CheckOverlap",
            "Overlapping",
            "Plan",
            "Planned",
            "Done"
        ]
    );
    assert_eq!(lambda.calls.len(), from + 1);

    // Once that lease has expired, the next execution resumes the unfinished run.
    env.advance(16 * MINUTE);
    let from = lambda.calls.len();
    let execution = Machine::new(4).execute(json!({}), &mut lambda).await;
    let Ending::Succeeded(output) = &execution.ending else {
        panic!("{execution:?}");
    };
    assert_eq!(output["last"]["status"], "completed");
    assert_eq!(lambda.planned(from), unfinished, "the same run, resumed");
}

/// An abandoned run (`gc abandon`) is never resumed: its lease is released, and the next
/// execution plans a new run at once.
#[tokio::test]
async fn an_abandoned_run_gives_way_to_a_new_one() {
    let fixture = fixture(Backend::Memory, 54).await;
    let env = &fixture.env;
    env.advance(30 * MINUTE);
    let collector = env.gc(config());
    let mut lambda = Lambda::new(&collector, env);
    let stopped = Machine::new(4)
        .abort_after(6)
        .execute(json!({}), &mut lambda)
        .await;
    assert_eq!(stopped.ending, Ending::Aborted);
    let abandoned = collector
        .abandon()
        .await
        .expect("abandoned")
        .expect("a run");
    // A step of the abandoned run is refused.
    let err = run_scheduled_within(
        &collector,
        json!({"step": "finish", "run": abandoned.to_string()}),
        None,
    )
    .await
    .expect_err("abandoned");
    assert_eq!(err.code(), "INVALID_REQUEST");
    let from = lambda.calls.len();
    let execution = Machine::new(4).execute(json!({}), &mut lambda).await;
    let Ending::Succeeded(output) = &execution.ending else {
        panic!("{execution:?}");
    };
    assert_eq!(output["last"]["status"], "completed");
    let planned = lambda.planned(from);
    assert_eq!(planned.len(), 1);
    assert!(!planned.contains(&abandoned.to_string()), "a new run");
}

/// A step that finds another run's lease (`skipped`) waits a minute and is invoked again,
/// in every loop of the definition; one that keeps finding it times the execution out.
#[tokio::test]
async fn a_skipped_step_waits_and_retries() {
    let fixture = fixture(Backend::Memory, 53).await;
    let env = &fixture.env;
    env.advance(30 * MINUTE);
    let collector = env.gc(config());
    let mut skipped: BTreeMap<String, bool> = BTreeMap::new();
    let mut lambda = Lambda::new(&collector, env).faking(|payload| {
        let step = payload["step"].as_str().expect("step");
        let key = format!("{step}{}", payload["partition"]);
        let skips = match step {
            "scan" | "delete" => payload["partition"] == 1,
            "verify" | "finish" => true,
            _ => false,
        };
        (skips && skipped.insert(key, true).is_none())
            .then(|| Ok(answer(step, "skipped", false, 0)))
    });
    let execution = Machine::new(4).execute(json!({}), &mut lambda).await;
    let Ending::Succeeded(output) = &execution.ending else {
        panic!("{execution:?}");
    };
    assert_eq!(output["last"]["status"], "completed");
    assert_eq!(execution.waits, [60, 60, 60, 60]);
    for (wait, step) in [
        ("Scan[1]/ScanWaitsForLease", "Scan[1]/ScanPartition"),
        ("VerifyWaitsForLease", "Verify"),
        ("Delete[1]/DeleteWaitsForLease", "Delete[1]/DeletePartition"),
        ("FinishWaitsForLease", "Finish"),
    ] {
        let at = execution
            .trace
            .iter()
            .position(|state| state == wait)
            .unwrap_or_else(|| panic!("{wait}: {:?}", execution.trace));
        assert_eq!(
            execution.trace[at + 1],
            step,
            "{wait} goes back to its step"
        );
    }

    // Skipped for ever: the execution times out after a week (TimeoutSeconds).
    let mut busy = Scripted::new(|_, payload: &Value| {
        Ok(match payload["step"].as_str() {
            Some("plan") => answer("plan", "in-progress", true, 2),
            Some("scan") => answer("scan", "in-progress", true, 0),
            step => answer(step.expect("step"), "skipped", false, 0),
        })
    });
    let execution = Machine::new(4).execute(json!({}), &mut busy).await;
    assert_eq!(execution.ending, Ending::TimedOut);
    assert_eq!(execution.waits.len(), 604_800 / 60 + 1);
}

#[tokio::test]
async fn one_step_at_a_time_by_hand_is_what_the_machine_does() {
    // `gc step` and the state machine speak the same events: a run driven step by step
    // through `GarbageCollector::step` is resumed by an execution.
    let fixture = fixture(Backend::Memory, 54).await;
    let env = &fixture.env;
    env.advance(30 * MINUTE);
    let collector = env.gc(config());
    let plan = collector
        .step(GcStep::Plan, env.now(), Some(Duration::ZERO))
        .await
        .expect("plan");
    let run = plan.report.run_id;
    let mut lambda = Lambda::new(&collector, env);
    let execution = Machine::new(4).execute(json!({}), &mut lambda).await;
    assert!(
        matches!(execution.ending, Ending::Succeeded(_)),
        "{execution:?}"
    );
    assert_eq!(lambda.planned(0), BTreeSet::from([run.to_string()]));
}

/// A fresh stack (no marker, nothing in the warehouse) has nothing to collect: its cycles
/// succeed at once without writing anything, and the first cycle after the first write
/// is an ordinary run.
#[tokio::test]
async fn a_fresh_stack_s_cycles_succeed_with_nothing_to_do() {
    let env = Env::new(Backend::Memory, 55);
    let collector = env.gc(config());
    let mut lambda = Lambda::new(&collector, &env);
    for _ in 0..3 {
        let execution = Machine::new(4).execute(json!({}), &mut lambda).await;
        let Ending::Succeeded(output) = &execution.ending else {
            panic!("{execution:?}");
        };
        assert_eq!(output["plan"]["status"], "unclaimed");
        assert_eq!(
            execution.trace,
            [
                "Start",
                "CheckOverlap",
                "Overlapping",
                "Plan",
                "Planned",
                "Done"
            ]
        );
        env.advance(60 * MINUTE);
    }
    assert!(env.objects().await.is_empty(), "nothing written");
    // The answer counts as a completed run on the metric line (no overdue alarm on an
    // unused stack).
    let (_, answer) = &lambda.calls[0];
    let answer = answer.as_ref().expect("answered");
    let line: Value = serde_json::from_str(&parqdb_catalog::lambda::metrics::gc_emf_line(
        STACK, 1, answer,
    ))
    .expect("an EMF line");
    assert_eq!(line["RunsCompleted"], 1);

    gc::claim(&env.catalog, env.now()).await.expect("claimed");
    let from = lambda.calls.len();
    let execution = Machine::new(4).execute(json!({}), &mut lambda).await;
    let Ending::Succeeded(output) = &execution.ending else {
        panic!("{execution:?}");
    };
    assert_eq!(output["last"]["status"], "completed");
    assert_eq!(lambda.planned(from).len(), 1, "a run");
}

/// An execution that finds another execution of the state machine running records the
/// metric and ends at once, as a success, invoking nothing; one that cannot tell fails
/// before doing anything.
#[tokio::test]
async fn an_execution_never_overlaps_another() {
    let fixture = fixture(Backend::Memory, 56).await;
    let env = &fixture.env;
    env.advance(30 * MINUTE);
    let collector = env.gc(config());
    let mut lambda = Lambda::new(&collector, env);
    let execution = Machine::new(4)
        .with_running(1)
        .execute(json!({}), &mut lambda)
        .await;
    let Ending::Succeeded(output) = &execution.ending else {
        panic!("{execution:?}");
    };
    assert_eq!(output["overlap"]["running"], 2);
    assert_eq!(
        execution.trace,
        [
            "Start",
            "CheckOverlap",
            "Overlapping",
            "RecordOverlap",
            "Overlapped"
        ]
    );
    assert!(lambda.calls.is_empty(), "the gc function was not invoked");
    let [metric] = execution.metrics.as_slice() else {
        panic!("{:?}", execution.metrics);
    };
    assert_eq!(metric["Namespace"], "ParqDBCatalog");
    let datum = &metric["MetricData"][0];
    assert_eq!(datum["MetricName"], "CyclesSkippedOverlapping");
    assert_eq!(datum["Value"], 1);
    assert_eq!(
        datum["Dimensions"],
        json!([{"Name": "Stack", "Value": STACK}, {"Name": "Operation", "Value": "gc"}])
    );
    assert!(
        fixture.existing(&fixture.garbage).await.len() == fixture.garbage.len(),
        "nothing collected"
    );

    // Alone, it runs the cycle and records nothing.
    let execution = Machine::new(4).execute(json!({}), &mut lambda).await;
    assert!(
        matches!(execution.ending, Ending::Succeeded(_)),
        "{execution:?}"
    );
    assert!(execution.metrics.is_empty());
    assert!(!lambda.calls.is_empty());

    // The listing fails (three retries): the execution fails without invoking anything.
    let from = lambda.calls.len();
    let execution = Machine::new(4)
        .listing_fails("Sfn.SfnException")
        .execute(json!({}), &mut lambda)
        .await;
    let Ending::Failed { error, data } = &execution.ending else {
        panic!("{execution:?}");
    };
    assert_eq!(error, "GcOverlapCheckFailed");
    assert_eq!(data["error"]["Error"], "Sfn.SfnException");
    assert_eq!(execution.waits, [5, 10, 20]);
    assert_eq!(lambda.calls.len(), from);
}

/// A crashed invocation (out of memory, killed, timed out) is retried once a minute later,
/// in the execution and in a partition's child execution; a partition whose step crashes
/// twice fails its child execution, and the Map fails the execution with a clear cause.
#[tokio::test]
async fn a_crashed_step_is_retried_once_then_fails_clearly() {
    let fixture = fixture(Backend::Memory, 57).await;
    let env = &fixture.env;
    env.advance(30 * MINUTE);
    let collector = env.gc(config());
    let (mut plans, mut scans) = (0, 0);
    let mut lambda = Lambda::new(&collector, env).faking(|payload| {
        let crash = match payload["step"].as_str() {
            Some("plan") => {
                plans += 1;
                (plans == 1).then_some("Sandbox.Timedout")
            }
            Some("scan") if payload["partition"] == 2 => {
                scans += 1;
                (scans == 1).then_some("Lambda.Unknown")
            }
            _ => None,
        };
        crash.map(|error| Err(error.to_owned()))
    });
    let execution = Machine::new(4).execute(json!({}), &mut lambda).await;
    let Ending::Succeeded(output) = &execution.ending else {
        panic!("{execution:?}");
    };
    assert_eq!(output["last"]["status"], "completed");
    let retries: Vec<&String> = execution
        .trace
        .iter()
        .filter(|s| s.contains(" retry "))
        .collect();
    assert_eq!(
        retries,
        [
            "Plan retry Sandbox.Timedout after 60s",
            "Scan[2]/ScanPartition retry Lambda.Unknown after 60s",
        ]
    );

    // Twice in a row in partition 1's deletion: the child fails, then the execution.
    let fixture = self::fixture(Backend::Memory, 58).await;
    let env = &fixture.env;
    env.advance(30 * MINUTE);
    let collector = env.gc(config());
    let mut lambda = Lambda::new(&collector, env).faking(|payload| {
        (payload["step"] == "delete" && payload["partition"] == 1)
            .then(|| Err("Runtime.ExitError".to_owned()))
    });
    let execution = Machine::new(4).execute(json!({}), &mut lambda).await;
    let Ending::Failed { error, data } = &execution.ending else {
        panic!("{execution:?}");
    };
    assert_eq!(error, "GcPartitionFailed");
    assert_eq!(
        data["error"]["Error"],
        "States.ExceedToleratedFailureThreshold"
    );
    assert!(
        execution
            .trace
            .contains(&"Delete[1] failed Runtime.ExitError".to_owned()),
        "{:?}",
        execution.trace
    );
    assert_eq!(
        lambda
            .partitions("delete", 0)
            .iter()
            .filter(|&&p| p == 1)
            .count(),
        2,
        "invoked, crashed, retried once, crashed"
    );
    assert_eq!(fixture.existing(&fixture.live).await, fixture.live);
}

/// The partitions run in child executions: the execution's own history does not grow
/// with them, and each child's grows by 7 events per invocation. Here every partition's
/// scan takes three invocations and its deletion two.
#[tokio::test]
async fn history_stays_small_whatever_the_partitions() {
    for partitions in [16, 1_000] {
        let mut invocations: BTreeMap<(String, u64), usize> = BTreeMap::new();
        let mut gc = Scripted::new(|_, payload: &Value| {
            let step = payload["step"].as_str().expect("step").to_owned();
            let partition = payload["partition"].as_u64().unwrap_or(0);
            let count = invocations.entry((step.clone(), partition)).or_default();
            *count += 1;
            let done = match step.as_str() {
                "scan" => *count == 3,
                "delete" => *count == 2,
                _ => true,
            };
            Ok(answer(&step, "in-progress", done, partitions))
        });
        let execution = Machine::new(40).execute(json!({}), &mut gc).await;
        assert!(
            matches!(execution.ending, Ending::Succeeded(_)),
            "{execution:?}"
        );
        assert_eq!(gc.calls.len(), 3 + 5 * partitions);
        // Started and ended (2), Start (2), CheckOverlap (5), Overlapping (2), Plan (5),
        // Planned (2), Scan (4: entered, Map Run started and succeeded, exited), Verify (5),
        // Verified (2), Delete (4), Finish (5), Finished (2), Done (2).
        assert_eq!(execution.events, 42, "{partitions} partitions");
        let children = &execution.child_events;
        assert_eq!(children.len(), 2 * partitions);
        // Started and ended (2), k × (task 5 + choice 2), the Succeed state (2).
        assert_eq!(
            children.iter().filter(|&&e| e == 4 + 7 * 3).count(),
            partitions
        );
        assert_eq!(
            children.iter().filter(|&&e| e == 4 + 7 * 2).count(),
            partitions
        );
    }
}
