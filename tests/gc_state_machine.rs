//! The gc cycle state machine (`infra/statemachines/gc-cycle.asl.json`), driven in-process.
//!
//! A small interpreter of the Amazon States Language subset the definition uses — `Pass`,
//! `Task` (the `lambda:invoke` integration), `Choice` (`StringEquals`, `BooleanEquals`),
//! `Wait`, `Map` (inline: `ItemsPath`, `ItemSelector` with `$$.Map.Item.Value`,
//! `MaxConcurrencyPath`, `ItemProcessor`), `Succeed`, `Fail`; `Retry` (with its backoff) and
//! `Catch`; `Parameters`, `ResultSelector`, `ResultPath`; the intrinsic
//! `States.StringToJson`; the execution's `TimeoutSeconds` — runs the definition exactly as
//! written, with its Lambda task calling the gc function's handler (`run_scheduled_within`)
//! on a real warehouse. The interpreter refuses any field it does not interpret, so the
//! definition cannot grow something these tests silently skip. A `Map` runs its iterations
//! one after the other, or round-robin (one task attempt of each iteration in flight in
//! turn, at most `MaxConcurrency` in flight) to mimic concurrent workers. `Wait` states and
//! retry backoffs do not sleep: they advance the test clock.
//!
//! The definition's syntax is checked offline by `scripts/check-infra.sh` (asl-validator);
//! this test checks its logic.

mod gc_support;

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Duration;

use gc_support::{Backend, Env, Layout, MINUTE, test_config};
use parqdb_catalog::gc::{self, GarbageCollector, GcConfig, GcStep, run_scheduled_within};
use serde_json::{Map, Value, json};

const DEFINITION: &str = include_str!("../infra/statemachines/gc-cycle.asl.json");
const GC_ARN: &str = "arn:aws:lambda:us-east-1:123456789012:function:gc";

// ---------------------------------------------------------------------------------------
// The interpreter
// ---------------------------------------------------------------------------------------

/// How an execution ended.
#[derive(Debug, Clone, PartialEq)]
enum Ending {
    Succeeded(Value),
    /// A `Fail` state (`error` is its `Error`; `data` its input, with `$.error`), or an
    /// uncaught error.
    Failed {
        error: String,
        data: Value,
    },
    /// The execution ran past its `TimeoutSeconds`.
    TimedOut,
    /// Stopped from outside (`Machine::abort_after`), as `StopExecution` would.
    Aborted,
}

/// One task attempt's outcome: the Lambda payload, or an error name (`errorType`).
type TaskResult = Result<Value, String>;

/// What the Task states invoke, and what the execution's waits do.
trait Tasks {
    /// One attempt of a Task state, with the state's resolved `Parameters`.
    async fn invoke(&mut self, parameters: Value) -> TaskResult;

    /// The execution waits `seconds` (a `Wait` state, a retry's backoff).
    fn wait(&mut self, _seconds: u64) {}
}

/// How a `Map` runs its iterations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Schedule {
    /// One iteration after the other, each to its end.
    Sequential,
    /// Round-robin over at most `MaxConcurrency` iterations in flight: one task attempt
    /// (or wait) of each in turn, a new iteration starting when one ends.
    RoundRobin,
}

/// What became of an execution.
#[derive(Debug)]
struct Execution {
    ending: Ending,
    /// Every state entered (`Scan[2]/ScanPartition` inside an iteration), every retry
    /// (`... retry ERROR after Ns`).
    trace: Vec<String>,
    /// Every wait, in seconds (`Wait` states and retry backoffs, at their upper bound).
    waits: Vec<u64>,
    /// The most `Map` iterations that were in flight at once.
    max_in_flight: usize,
}

struct Machine {
    definition: Value,
    schedule: Schedule,
    abort_after: Option<usize>,
}

/// Why an execution stopped before reaching a terminal state.
enum Halt {
    TimedOut,
    Aborted,
    /// `States.Runtime`: a path matched nothing, a value had the wrong type. Neither
    /// retried nor caught.
    Runtime(String),
}

/// Where one branch (the execution, or one `Map` iteration) stands.
struct Branch<'d> {
    states: &'d Map<String, Value>,
    label: String,
    at: String,
    data: Value,
    context: Value,
    /// Retries spent per retrier of the current state.
    attempts: Vec<u32>,
}

enum Progress {
    Running,
    Succeeded(Value),
    Failed { error: String, data: Value },
}

impl Machine {
    /// The definition with `${Workers}` = `workers`, as the template substitutes it.
    fn new(workers: usize) -> Machine {
        let text = DEFINITION
            .replace("${Workers}", &workers.to_string())
            .replace("${GcFunctionArn}", GC_ARN);
        assert!(
            !text.contains("${"),
            "a substitution the template does not provide"
        );
        let definition: Value = serde_json::from_str(&text).expect("the definition is JSON");
        check_subset(&definition, true);
        Machine {
            definition,
            schedule: Schedule::Sequential,
            abort_after: None,
        }
    }

    fn round_robin(mut self) -> Machine {
        self.schedule = Schedule::RoundRobin;
        self
    }

    /// Stop the execution once `tasks` task attempts have been made (the last one's
    /// invocation ran; its answer is lost).
    fn abort_after(mut self, tasks: usize) -> Machine {
        self.abort_after = Some(tasks);
        self
    }

    async fn execute<T: Tasks>(&self, input: Value, tasks: &mut T) -> Execution {
        let mut run = Run {
            machine: self,
            tasks,
            trace: Vec::new(),
            waits: Vec::new(),
            elapsed_s: 0,
            attempts: 0,
            max_in_flight: 0,
        };
        let mut branch = Branch {
            states: self.definition["States"].as_object().expect("States"),
            label: String::new(),
            at: self.definition["StartAt"]
                .as_str()
                .expect("StartAt")
                .to_owned(),
            data: input,
            context: json!({"Execution": {"Id": "arn:aws:states:us-east-1:123456789012:execution:gc-cycle:test"}}),
            attempts: Vec::new(),
        };
        let ending = loop {
            match run.advance(&mut branch).await {
                Ok(Progress::Running) => continue,
                Ok(Progress::Succeeded(output)) => break Ending::Succeeded(output),
                Ok(Progress::Failed { error, data }) => break Ending::Failed { error, data },
                Err(Halt::TimedOut) => break Ending::TimedOut,
                Err(Halt::Aborted) => break Ending::Aborted,
                Err(Halt::Runtime(why)) => {
                    break Ending::Failed {
                        error: "States.Runtime".into(),
                        data: json!({"cause": why}),
                    };
                }
            }
        };
        Execution {
            ending,
            trace: run.trace,
            waits: run.waits,
            max_in_flight: run.max_in_flight,
        }
    }
}

struct Run<'m, T> {
    machine: &'m Machine,
    tasks: &'m mut T,
    trace: Vec<String>,
    waits: Vec<u64>,
    elapsed_s: u64,
    attempts: usize,
    max_in_flight: usize,
}

impl<'m, T: Tasks> Run<'m, T> {
    fn wait(&mut self, seconds: u64) -> Result<(), Halt> {
        self.waits.push(seconds);
        self.tasks.wait(seconds);
        self.elapsed_s += seconds;
        match self.machine.definition["TimeoutSeconds"].as_u64() {
            Some(timeout) if self.elapsed_s > timeout => Err(Halt::TimedOut),
            _ => Ok(()),
        }
    }

    /// Run `branch` up to and including its next task attempt or wait (a `Map` state runs
    /// all its iterations), or to its end.
    async fn advance(&mut self, branch: &mut Branch<'m>) -> Result<Progress, Halt> {
        loop {
            let states = branch.states;
            let state = &states[&branch.at];
            let name = format!("{}{}", branch.label, branch.at);
            if branch.attempts.is_empty() {
                self.trace.push(name.clone());
            }
            match state["Type"].as_str().expect("Type") {
                "Pass" => {
                    let result = match state.get("Parameters") {
                        Some(parameters) => resolve(parameters, &branch.data, &branch.context)?,
                        None => branch.data.clone(),
                    };
                    branch.data = place(&branch.data, state.get("ResultPath"), result);
                    branch.go(&state["Next"]);
                }
                "Choice" => {
                    let mut next = &state["Default"];
                    for rule in state["Choices"].as_array().expect("Choices") {
                        if holds(rule, &branch.data)? {
                            next = &rule["Next"];
                            break;
                        }
                    }
                    branch.go(next);
                }
                "Wait" => {
                    branch.go(&state["Next"]);
                    self.wait(state["Seconds"].as_u64().expect("Seconds"))?;
                    return Ok(Progress::Running);
                }
                "Succeed" => return Ok(Progress::Succeeded(branch.data.clone())),
                "Fail" => {
                    return Ok(Progress::Failed {
                        error: state["Error"].as_str().expect("Error").to_owned(),
                        data: branch.data.clone(),
                    });
                }
                "Task" => {
                    if self.machine.abort_after.is_some_and(|n| self.attempts >= n) {
                        return Err(Halt::Aborted);
                    }
                    let parameters = resolve(&state["Parameters"], &branch.data, &branch.context)?;
                    self.attempts += 1;
                    let outcome = self.tasks.invoke(parameters).await;
                    if self.machine.abort_after.is_some_and(|n| self.attempts >= n) {
                        return Err(Halt::Aborted);
                    }
                    match outcome {
                        Ok(payload) => {
                            let invocation = json!({"Payload": payload, "StatusCode": 200});
                            let result = match state.get("ResultSelector") {
                                Some(selector) => resolve(selector, &invocation, &branch.context)?,
                                None => invocation,
                            };
                            branch.data = place(&branch.data, state.get("ResultPath"), result);
                            branch.go(&state["Next"]);
                            return Ok(Progress::Running);
                        }
                        Err(error) => return self.failed(branch, state, &name, error),
                    }
                }
                "Map" => {
                    let label = format!("{}{}", branch.label, branch.at);
                    match Box::pin(self.map(state, &branch.data, &branch.context, &label)).await? {
                        Ok(results) => {
                            branch.data = place(&branch.data, state.get("ResultPath"), results);
                            branch.go(&state["Next"]);
                            return Ok(Progress::Running);
                        }
                        Err(error) => return self.failed(branch, state, &name, error),
                    }
                }
                other => panic!("state type {other} is not interpreted"),
            }
        }
    }

    /// A state's error: retried (with its backoff) if a retrier matches and has attempts
    /// left, else caught, else the branch fails.
    fn failed(
        &mut self,
        branch: &mut Branch<'m>,
        state: &'m Value,
        name: &str,
        error: String,
    ) -> Result<Progress, Halt> {
        let retriers = state["Retry"].as_array().map(Vec::as_slice).unwrap_or(&[]);
        if branch.attempts.len() != retriers.len() {
            branch.attempts = vec![0; retriers.len()];
        }
        if let Some(at) = retriers
            .iter()
            .position(|retrier| matches_error(&retrier["ErrorEquals"], &error))
        {
            let retrier = &retriers[at];
            let max_attempts = retrier["MaxAttempts"].as_u64().unwrap_or(3) as u32;
            if branch.attempts[at] < max_attempts {
                let interval = retrier["IntervalSeconds"].as_f64().unwrap_or(1.0);
                let rate = retrier["BackoffRate"].as_f64().unwrap_or(2.0);
                let mut delay = interval * rate.powi(branch.attempts[at] as i32);
                if let Some(cap) = retrier["MaxDelaySeconds"].as_f64() {
                    delay = delay.min(cap);
                }
                branch.attempts[at] += 1;
                let delay = delay.round() as u64;
                self.trace
                    .push(format!("{name} retry {error} after {delay}s"));
                self.wait(delay)?;
                return Ok(Progress::Running);
            }
        }
        let catcher = state["Catch"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|catcher| matches_error(&catcher["ErrorEquals"], &error));
        match catcher {
            Some(catcher) => {
                branch.data = place(
                    &branch.data,
                    catcher.get("ResultPath"),
                    json!({"Error": error, "Cause": ""}),
                );
                branch.go(&catcher["Next"]);
                Ok(Progress::Running)
            }
            None => Ok(Progress::Failed {
                error,
                data: branch.data.clone(),
            }),
        }
    }

    /// Run a `Map` state over its items; the iterations' outputs, or the first error.
    async fn map(
        &mut self,
        state: &'m Value,
        data: &Value,
        context: &Value,
        label: &str,
    ) -> Result<Result<Value, String>, Halt> {
        let items = evaluate(state["ItemsPath"].as_str().unwrap_or("$"), data, context)?;
        let items = items
            .as_array()
            .ok_or_else(|| Halt::Runtime(format!("{label}: ItemsPath is not an array")))?
            .clone();
        let limit = match state.get("MaxConcurrencyPath") {
            Some(path) => evaluate(path.as_str().expect("a path"), data, context)?
                .as_u64()
                .ok_or_else(|| Halt::Runtime(format!("{label}: MaxConcurrency is not a number")))?,
            None => state["MaxConcurrency"].as_u64().unwrap_or(0),
        };
        let limit = match limit {
            0 => usize::MAX,
            n => n as usize,
        };
        let processor = &state["ItemProcessor"];
        let states = processor["States"].as_object().expect("States");
        let start = processor["StartAt"].as_str().expect("StartAt");
        let mut branches = Vec::new();
        for (index, item) in items.iter().enumerate() {
            let mut context = context.clone();
            context["Map"] = json!({"Item": {"Index": index, "Value": item}});
            let input = match state.get("ItemSelector") {
                Some(selector) => resolve(selector, data, &context)?,
                None => item.clone(),
            };
            branches.push(Branch {
                states,
                label: format!("{label}[{index}]/"),
                at: start.to_owned(),
                data: input,
                context,
                attempts: Vec::new(),
            });
        }
        let mut results = vec![Value::Null; branches.len()];
        let mut pending: VecDeque<usize> = (0..branches.len()).collect();
        let mut active: Vec<usize> = Vec::new();
        loop {
            let room = match self.machine.schedule {
                Schedule::Sequential => 1,
                Schedule::RoundRobin => limit,
            };
            while active.len() < room {
                match pending.pop_front() {
                    Some(next) => active.push(next),
                    None => break,
                }
            }
            if active.is_empty() {
                return Ok(Ok(Value::Array(results)));
            }
            self.max_in_flight = self.max_in_flight.max(active.len());
            let mut still = Vec::new();
            for index in active {
                match self.advance(&mut branches[index]).await? {
                    Progress::Running => still.push(index),
                    Progress::Succeeded(output) => results[index] = output,
                    // The first failed iteration fails the Map (the others are stopped).
                    Progress::Failed { error, .. } => return Ok(Err(error)),
                }
            }
            active = still;
        }
    }
}

impl Branch<'_> {
    fn go(&mut self, next: &Value) {
        self.at = next
            .as_str()
            .expect("a transition names a state")
            .to_owned();
        self.attempts.clear();
    }
}

/// Panic unless `scope` (the definition, or a `Map`'s `ItemProcessor`) uses only what
/// this interpreter interprets, and every transition names a state of its scope.
fn check_subset(scope: &Value, top: bool) {
    let allowed: &[&str] = if top {
        &["Comment", "StartAt", "TimeoutSeconds", "States"]
    } else {
        &["ProcessorConfig", "StartAt", "States"]
    };
    keys_within(scope, allowed, "the definition");
    let states = scope["States"].as_object().expect("States");
    let start = scope["StartAt"].as_str().expect("StartAt");
    assert!(states.contains_key(start), "StartAt {start}");
    let known = |name: &str, next: &Value| {
        let next = next.as_str().unwrap_or_else(|| panic!("{name}: Next"));
        assert!(states.contains_key(next), "{name} goes to unknown {next}");
    };
    for (name, state) in states {
        let fields: &[&str] = match state["Type"].as_str().expect("Type") {
            "Pass" => &["Parameters", "ResultPath", "Next"],
            "Task" => &[
                "Resource",
                "Parameters",
                "ResultSelector",
                "ResultPath",
                "Retry",
                "Catch",
                "Next",
            ],
            "Choice" => &["Choices", "Default"],
            "Wait" => &["Seconds", "Next"],
            "Map" => &[
                "ItemsPath",
                "ItemSelector",
                "MaxConcurrencyPath",
                "ItemProcessor",
                "ResultPath",
                "Catch",
                "Next",
            ],
            "Succeed" => &[],
            "Fail" => &["Error", "Cause"],
            other => panic!("{name}: state type {other} is not interpreted"),
        };
        let mut fields = fields.to_vec();
        fields.extend(["Type", "Comment"]);
        keys_within(state, &fields, name);
        if let Some(next) = state.get("Next") {
            known(name, next);
        }
        if let Some(default) = state.get("Default") {
            known(name, default);
        }
        for rule in state["Choices"].as_array().into_iter().flatten() {
            keys_within(
                rule,
                &["Variable", "StringEquals", "BooleanEquals", "Next"],
                name,
            );
            known(name, &rule["Next"]);
        }
        for retrier in state["Retry"].as_array().into_iter().flatten() {
            keys_within(
                retrier,
                &[
                    "ErrorEquals",
                    "IntervalSeconds",
                    "MaxAttempts",
                    "BackoffRate",
                    "MaxDelaySeconds",
                    "JitterStrategy",
                ],
                name,
            );
        }
        for catcher in state["Catch"].as_array().into_iter().flatten() {
            keys_within(catcher, &["ErrorEquals", "ResultPath", "Next"], name);
            known(name, &catcher["Next"]);
        }
        if state["Type"] == "Task" {
            assert_eq!(
                state["Resource"], "arn:aws:states:::lambda:invoke",
                "{name}"
            );
            assert_eq!(state["Parameters"]["FunctionName"], GC_ARN, "{name}");
        }
        if state["Type"] == "Map" {
            let processor = &state["ItemProcessor"];
            assert_eq!(processor["ProcessorConfig"]["Mode"], "INLINE", "{name}");
            keys_within(&processor["ProcessorConfig"], &["Mode"], name);
            check_subset(processor, false);
        }
    }
}

fn keys_within(value: &Value, allowed: &[&str], owner: &str) {
    for key in value.as_object().expect("an object").keys() {
        assert!(
            allowed.contains(&key.as_str()),
            "{owner}: `{key}` is not interpreted by this test"
        );
    }
}

fn matches_error(names: &Value, error: &str) -> bool {
    names
        .as_array()
        .expect("ErrorEquals")
        .iter()
        .any(|name| name == "States.ALL" || name == error)
}

/// A path of the form `$`, `$.a.b` or `$$.a.b` (the context object).
fn path<'v>(data: &'v Value, context: &'v Value, path: &str) -> Option<&'v Value> {
    let (mut at, rest) = match path.strip_prefix("$$") {
        Some(rest) => (context, rest),
        None => (data, path.strip_prefix('$').expect("a path starts with $")),
    };
    for key in rest.split('.').filter(|k| !k.is_empty()) {
        at = at.get(key)?;
    }
    Some(at)
}

/// `Parameters`, `ItemSelector`, `ResultSelector`: keys ending in `.$` are paths or
/// intrinsics.
fn resolve(template: &Value, data: &Value, context: &Value) -> Result<Value, Halt> {
    Ok(match template {
        Value::Object(fields) => {
            let mut out = Map::new();
            for (key, value) in fields {
                match key.strip_suffix(".$") {
                    Some(key) => {
                        let expression = value.as_str().expect("a path");
                        out.insert(key.to_owned(), evaluate(expression, data, context)?);
                    }
                    None => {
                        out.insert(key.clone(), resolve(value, data, context)?);
                    }
                }
            }
            Value::Object(out)
        }
        other => other.clone(),
    })
}

fn evaluate(expression: &str, data: &Value, context: &Value) -> Result<Value, Halt> {
    if let Some(argument) = expression
        .strip_prefix("States.StringToJson('")
        .and_then(|rest| rest.strip_suffix("')"))
    {
        return serde_json::from_str(argument)
            .map_err(|err| Halt::Runtime(format!("States.StringToJson: {err}")));
    }
    assert!(
        !expression.starts_with("States."),
        "intrinsic {expression} is not interpreted"
    );
    path(data, context, expression)
        .cloned()
        .ok_or_else(|| Halt::Runtime(format!("{expression} matches nothing in {data}")))
}

/// `ResultPath`: `$` (or none) replaces the input, `$.a.b` sets a field, null discards
/// the result.
fn place(data: &Value, result_path: Option<&Value>, result: Value) -> Value {
    match result_path.map(|p| p.as_str()) {
        None | Some(Some("$")) => result,
        Some(None) => data.clone(),
        Some(Some(path)) => {
            let mut out = data.clone();
            let keys: Vec<&str> = path
                .strip_prefix("$.")
                .expect("a field path")
                .split('.')
                .collect();
            let mut at = &mut out;
            for key in &keys[..keys.len() - 1] {
                at = at
                    .as_object_mut()
                    .expect("an object")
                    .entry(*key)
                    .or_insert_with(|| json!({}));
            }
            at.as_object_mut()
                .expect("an object")
                .insert(keys[keys.len() - 1].to_owned(), result);
            out
        }
    }
}

/// A Choice rule. A variable that matches nothing is `States.Runtime`; one of another
/// type does not match.
fn holds(rule: &Value, data: &Value) -> Result<bool, Halt> {
    let name = rule["Variable"].as_str().expect("Variable");
    let variable = path(data, &Value::Null, name)
        .ok_or_else(|| Halt::Runtime(format!("Choice: {name} matches nothing in {data}")))?;
    if let Some(expected) = rule.get("StringEquals") {
        return Ok(variable == expected);
    }
    if let Some(expected) = rule.get("BooleanEquals") {
        return Ok(variable == expected);
    }
    panic!("Choice operator not interpreted: {rule}");
}

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

#[test]
fn the_definition_is_what_the_template_deploys() {
    let machine = Machine::new(7);
    let definition = &machine.definition;
    assert_eq!(definition["TimeoutSeconds"], 86_400);
    assert_eq!(definition["States"]["Start"]["Type"], "Pass");
    let states = definition["States"].as_object().expect("States");
    let mut tasks = Vec::new();
    for (name, state) in states {
        if state["Type"] == "Map" {
            assert_eq!(state["ItemsPath"], "$.plan.partitions", "{name}");
            assert_eq!(state["MaxConcurrencyPath"], "$.cycle.workers", "{name}");
            assert_eq!(
                state["ResultPath"],
                Value::Null,
                "{name}: the results are dropped"
            );
            for (inner, task) in state["ItemProcessor"]["States"]
                .as_object()
                .expect("States")
            {
                if task["Type"] == "Task" {
                    tasks.push((format!("{name}/{inner}"), task));
                }
            }
        }
        if state["Type"] == "Task" {
            tasks.push((name.clone(), state));
        }
        if matches!(state["Type"].as_str(), Some("Task" | "Map")) {
            // Every step, and every fan-out, ends in Failed on an error retries did not fix.
            let catchers = state["Catch"].as_array().expect("Catch");
            assert_eq!(catchers.len(), 1, "{name}");
            assert_eq!(catchers[0]["ErrorEquals"], json!(["States.ALL"]), "{name}");
            assert_eq!(catchers[0]["Next"], "Failed", "{name}");
        }
        if state["Type"] == "Wait" {
            assert_eq!(state["Seconds"], 60, "{name}");
        }
    }
    assert_eq!(tasks.len(), 5, "plan, scan, verify, delete, finish");
    for (name, task) in tasks {
        let retried: BTreeSet<&str> = task["Retry"]
            .as_array()
            .expect("Retry")
            .iter()
            .flat_map(|retrier| retrier["ErrorEquals"].as_array().expect("ErrorEquals"))
            .map(|name| name.as_str().expect("a name"))
            .collect();
        for error in [
            "STORE_UNAVAILABLE",
            "Lambda.ServiceException",
            "Lambda.AWSLambdaException",
            "Lambda.SdkClientException",
            "Lambda.TooManyRequestsException",
        ] {
            assert!(retried.contains(error), "{name} retries {error}");
        }
        for error in ["States.ALL", "INVALID_CONFIGURATION", "WAREHOUSE_NOT_OWNED"] {
            assert!(!retried.contains(error), "{name} must not retry {error}");
        }
    }
    assert_eq!(states["Failed"]["Error"], "GcRunFailed");
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
    assert!(state.current_run.is_none(), "every run finished");
    assert!(!state.running, "the lease is released");
    assert!(state.last_finished_run.is_some());
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
        let current = state.current_run.expect("the run is unfinished");
        assert_eq!(current.run.run_id.to_string(), run);
        let scanned_before = current.partitions.iter().filter(|p| p.scanned).count();

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
        assert!(state.current_run.is_none());
        assert_eq!(
            state.last_finished_run.map(|r| r.run_id.to_string()),
            Some(run)
        );
        assert_eq!(fixture.existing(&fixture.live).await, fixture.live);
    }

    // A step that fails with an error no retrier matches (the process died: out of memory)
    // fails the execution; the next one resumes the run.
    let fixture = fixture(Backend::Memory, 46).await;
    let env = &fixture.env;
    env.advance(30 * MINUTE);
    let collector = env.gc(config());
    let mut verifies = 0;
    let mut lambda = Lambda::new(&collector, env).faking(|payload| {
        if payload["step"] == "verify" {
            verifies += 1;
            if verifies == 1 {
                return Some(Err("Runtime.OutOfMemory".into()));
            }
        }
        None
    });
    let failed = Machine::new(4).execute(json!({}), &mut lambda).await;
    let Ending::Failed { error, data } = &failed.ending else {
        panic!("{failed:?}");
    };
    assert_eq!(error, "GcRunFailed");
    assert_eq!(data["error"]["Error"], "Runtime.OutOfMemory");
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
    // A warehouse nobody claimed: the plan step refuses it.
    let env = Env::new(Backend::Memory, 49);
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
    assert_eq!(execution.trace, ["Start", "Plan", "Failed"]);

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
    assert_eq!(execution.trace, ["Start", "Plan", "Planned", "Done"]);
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

    // Skipped for ever: the execution times out after a day (TimeoutSeconds).
    let mut busy = Scripted::new(|_, payload: &Value| {
        Ok(match payload["step"].as_str() {
            Some("plan") => answer("plan", "in-progress", true, 2),
            Some("scan") => answer("scan", "in-progress", true, 0),
            step => answer(step.expect("step"), "skipped", false, 0),
        })
    });
    let execution = Machine::new(4).execute(json!({}), &mut busy).await;
    assert_eq!(execution.ending, Ending::TimedOut);
    assert_eq!(execution.waits.len(), 86_400 / 60 + 1);
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
