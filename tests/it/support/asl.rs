//! A small interpreter of the Amazon States Language subset the gc cycle's definition
//! (`infra/statemachines/gc-cycle.asl.json`) uses, to drive it in-process:
//!
//! * states: `Pass`, `Task`, `Choice` (`StringEquals`, `BooleanEquals`,
//!   `NumericGreaterThan`), `Wait`, `Map` (`ItemsPath`, `ItemSelector` with
//!   `$$.Map.Item.Value`, `MaxConcurrencyPath`, `ItemProcessor` in `INLINE` mode, or in
//!   `DISTRIBUTED` mode where every iteration is a child execution with its own history),
//!   `Succeed`, `Fail`; `Retry` (with its backoff) and `Catch`; `Parameters`,
//!   `ResultSelector`, `ResultPath`; the intrinsics `States.StringToJson` and
//!   `States.ArrayLength`; the context's `$$.Execution.Id` and `$$.StateMachine.Id`; the
//!   execution's `TimeoutSeconds`;
//! * tasks: the `lambda:invoke` integration calls [`Tasks::invoke`] (the gc function's
//!   handler in the tests); the two AWS SDK integrations the definition uses are answered
//!   by the interpreter's world: `sfn:listExecutions` lists this execution and
//!   [`Machine::with_running`] others, `cloudwatch:putMetricData` records the metric in
//!   [`Execution::metrics`];
//! * history: every execution's history events are counted as Step Functions writes them
//!   (a state entered and exited: 2; a task attempt: scheduled, started, succeeded or
//!   failed: 3; an inline `Map`: started and succeeded, and per iteration started and
//!   succeeded; a distributed `Map`: its Map Run started and succeeded in the parent, and a
//!   child execution per iteration; an execution started and ended: 2), so a test can hold
//!   an execution to the 25,000 events of a Standard Workflow.
//!
//! The interpreter refuses any field it does not interpret, so the definition cannot grow
//! something the tests silently skip. A `Map` runs its iterations one after the other, or
//! round-robin (one task attempt of each iteration in flight in turn, at most
//! `MaxConcurrency` in flight) to mimic concurrent workers. `Wait` states and retry
//! backoffs do not sleep: they advance the test clock ([`Tasks::wait`]).
#![allow(dead_code)]

use std::collections::VecDeque;

use serde_json::{Map, Value, json};

/// The definition the template deploys.
pub const DEFINITION: &str = include_str!("../../../infra/statemachines/gc-cycle.asl.json");
/// What the template substitutes for `${GcFunctionArn}`: the gc function's alias.
pub const GC_ARN: &str = "arn:aws:lambda:us-east-1:123456789012:function:parqdb-gc:live";
/// What the template substitutes for `${Stack}`.
pub const STACK: &str = "parqdb";
/// This state machine, and the execution the interpreter runs.
pub const STATE_MACHINE_ARN: &str =
    "arn:aws:states:us-east-1:123456789012:stateMachine:parqdb-gc-cycle";
pub const EXECUTION_ARN: &str =
    "arn:aws:states:us-east-1:123456789012:execution:parqdb-gc-cycle:test";

const LAMBDA_INVOKE: &str = "arn:aws:states:::lambda:invoke";
const LIST_EXECUTIONS: &str = "arn:aws:states:::aws-sdk:sfn:listExecutions";
const PUT_METRIC_DATA: &str = "arn:aws:states:::aws-sdk:cloudwatch:putMetricData";

/// How an execution ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Ending {
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
pub type TaskResult = Result<Value, String>;

/// What the Lambda tasks invoke, and what the execution's waits do.
pub trait Tasks {
    /// One attempt of a `lambda:invoke` Task state, with the state's resolved `Parameters`.
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
pub struct Execution {
    pub ending: Ending,
    /// Every state entered (`Scan[2]/ScanPartition` inside an iteration), every retry
    /// (`... retry ERROR after Ns`), every failed child execution (`Scan[2] failed ERROR`).
    pub trace: Vec<String>,
    /// Every wait, in seconds (`Wait` states and retry backoffs, at their upper bound).
    pub waits: Vec<u64>,
    /// The most `Map` iterations that were in flight at once.
    pub max_in_flight: usize,
    /// The `Parameters` of every `cloudwatch:putMetricData` call.
    pub metrics: Vec<Value>,
    /// The execution's history events.
    pub events: u64,
    /// The history events of each child execution of a distributed `Map`.
    pub child_events: Vec<u64>,
}

pub struct Machine {
    pub definition: Value,
    schedule: Schedule,
    abort_after: Option<usize>,
    running: usize,
    list_error: Option<String>,
}

/// Why an execution stopped before reaching a terminal state.
enum Halt {
    TimedOut,
    Aborted,
    /// `States.Runtime`: a path matched nothing, a value had the wrong type. Neither
    /// retried nor caught.
    Runtime(String),
}

/// Where one branch (an execution, or one `Map` iteration) stands.
struct Branch<'d> {
    states: &'d Map<String, Value>,
    label: String,
    at: String,
    data: Value,
    context: Value,
    /// Retries spent per retrier of the current state.
    attempts: Vec<u32>,
    /// History events this branch wrote.
    events: u64,
}

enum Progress {
    Running,
    Succeeded(Value),
    Failed { error: String, data: Value },
}

impl Machine {
    /// The definition with its substitutions (`${Workers}` = `workers`), as the template
    /// makes them.
    pub fn new(workers: usize) -> Machine {
        let text = DEFINITION
            .replace("${Workers}", &workers.to_string())
            .replace("${GcFunctionArn}", GC_ARN)
            .replace("${Stack}", STACK);
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
            running: 0,
            list_error: None,
        }
    }

    pub fn round_robin(mut self) -> Machine {
        self.schedule = Schedule::RoundRobin;
        self
    }

    /// Stop the execution once `invocations` Lambda task attempts have been made (the last
    /// one's invocation ran; its answer is lost).
    pub fn abort_after(mut self, invocations: usize) -> Machine {
        self.abort_after = Some(invocations);
        self
    }

    /// `others` more executions of the state machine are running.
    pub fn with_running(mut self, others: usize) -> Machine {
        self.running = others;
        self
    }

    /// `sfn:listExecutions` fails with `error`.
    pub fn listing_fails(mut self, error: &str) -> Machine {
        self.list_error = Some(error.to_owned());
        self
    }

    pub async fn execute<T: Tasks>(&self, input: Value, tasks: &mut T) -> Execution {
        let mut run = Run {
            machine: self,
            tasks,
            trace: Vec::new(),
            waits: Vec::new(),
            elapsed_s: 0,
            invocations: 0,
            max_in_flight: 0,
            metrics: Vec::new(),
            child_events: Vec::new(),
        };
        let mut branch = Branch {
            states: self.definition["States"].as_object().expect("States"),
            label: String::new(),
            at: self.definition["StartAt"]
                .as_str()
                .expect("StartAt")
                .to_owned(),
            data: input,
            context: json!({
                "Execution": {"Id": EXECUTION_ARN},
                "StateMachine": {"Id": STATE_MACHINE_ARN},
            }),
            attempts: Vec::new(),
            // ExecutionStarted, and the event that ends it.
            events: 2,
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
            metrics: run.metrics,
            events: branch.events,
            child_events: run.child_events,
        }
    }
}

struct Run<'m, T> {
    machine: &'m Machine,
    tasks: &'m mut T,
    trace: Vec<String>,
    waits: Vec<u64>,
    elapsed_s: u64,
    invocations: usize,
    max_in_flight: usize,
    metrics: Vec<Value>,
    child_events: Vec<u64>,
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

    fn aborting(&self) -> bool {
        self.machine
            .abort_after
            .is_some_and(|n| self.invocations >= n)
    }

    /// One attempt of a Task state.
    async fn attempt(&mut self, resource: &str, parameters: Value) -> Result<TaskResult, Halt> {
        match resource {
            LAMBDA_INVOKE => {
                if self.aborting() {
                    return Err(Halt::Aborted);
                }
                self.invocations += 1;
                let outcome = self.tasks.invoke(parameters).await;
                if self.aborting() {
                    return Err(Halt::Aborted);
                }
                Ok(outcome)
            }
            LIST_EXECUTIONS => {
                assert_eq!(parameters["StateMachineArn"], STATE_MACHINE_ARN);
                assert_eq!(parameters["StatusFilter"], "RUNNING");
                if let Some(error) = &self.machine.list_error {
                    return Ok(Err(error.clone()));
                }
                let limit = parameters["MaxResults"].as_u64().unwrap_or(100) as usize;
                let executions: Vec<Value> = std::iter::once(EXECUTION_ARN.to_owned())
                    .chain(
                        (0..self.machine.running).map(|n| format!("{STATE_MACHINE_ARN}:other-{n}")),
                    )
                    .take(limit)
                    .map(|arn| json!({"ExecutionArn": arn, "Status": "RUNNING"}))
                    .collect();
                Ok(Ok(json!({"Executions": executions})))
            }
            PUT_METRIC_DATA => {
                self.metrics.push(parameters);
                Ok(Ok(json!({})))
            }
            other => panic!("task resource {other} is not interpreted"),
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
                branch.events += 1;
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
                "Succeed" => {
                    branch.events += 1;
                    return Ok(Progress::Succeeded(branch.data.clone()));
                }
                "Fail" => {
                    return Ok(Progress::Failed {
                        error: state["Error"].as_str().expect("Error").to_owned(),
                        data: branch.data.clone(),
                    });
                }
                "Task" => {
                    let parameters = resolve(&state["Parameters"], &branch.data, &branch.context)?;
                    let resource = state["Resource"].as_str().expect("Resource");
                    let outcome = self.attempt(resource, parameters).await?;
                    // Scheduled, started, succeeded or failed.
                    branch.events += 3;
                    match outcome {
                        Ok(payload) => {
                            let result = if resource == LAMBDA_INVOKE {
                                json!({"Payload": payload, "StatusCode": 200})
                            } else {
                                payload
                            };
                            let result = match state.get("ResultSelector") {
                                Some(selector) => resolve(selector, &result, &branch.context)?,
                                None => result,
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
                    let outcome = Box::pin(self.map(
                        state,
                        &branch.data,
                        &branch.context,
                        &label,
                        &mut branch.events,
                    ))
                    .await?;
                    match outcome {
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

    /// Run a `Map` state over its items; the iterations' outputs, or the first error. The
    /// events it writes into the history it runs in are added to `events`.
    async fn map(
        &mut self,
        state: &'m Value,
        data: &Value,
        context: &Value,
        label: &str,
        events: &mut u64,
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
        let distributed = processor["ProcessorConfig"]["Mode"] == "DISTRIBUTED";
        // MapStateStarted and MapStateSucceeded, or MapRunStarted and MapRunSucceeded.
        *events += 2;
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
                // An iteration's started and succeeded, or a child execution's.
                events: 2,
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
                let progress = self.advance(&mut branches[index]).await?;
                if !matches!(progress, Progress::Running) {
                    match distributed {
                        true => self.child_events.push(branches[index].events),
                        false => *events += branches[index].events,
                    }
                }
                match progress {
                    Progress::Running => still.push(index),
                    Progress::Succeeded(output) => results[index] = output,
                    // The first failed iteration fails the Map (the others are stopped);
                    // a distributed Map fails with its tolerated-failure error.
                    Progress::Failed { error, .. } if distributed => {
                        self.trace.push(format!("{label}[{index}] failed {error}"));
                        return Ok(Err("States.ExceedToleratedFailureThreshold".into()));
                    }
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
        self.events += 1;
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
                "Label",
                "ItemsPath",
                "ItemSelector",
                "MaxConcurrencyPath",
                "ToleratedFailurePercentage",
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
                &[
                    "Variable",
                    "StringEquals",
                    "BooleanEquals",
                    "NumericGreaterThan",
                    "Next",
                ],
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
            match state["Resource"].as_str() {
                Some(LAMBDA_INVOKE) => {
                    assert_eq!(state["Parameters"]["FunctionName"], GC_ARN, "{name}")
                }
                Some(LIST_EXECUTIONS | PUT_METRIC_DATA) => {}
                other => panic!("{name}: task resource {other:?} is not interpreted"),
            }
        }
        if state["Type"] == "Map" {
            let processor = &state["ItemProcessor"];
            let config = &processor["ProcessorConfig"];
            match config["Mode"].as_str() {
                Some("INLINE") => keys_within(config, &["Mode"], name),
                Some("DISTRIBUTED") => {
                    keys_within(config, &["Mode", "ExecutionType"], name);
                    assert_eq!(config["ExecutionType"], "STANDARD", "{name}");
                    assert_eq!(state["ToleratedFailurePercentage"], 0, "{name}");
                }
                other => panic!("{name}: Map mode {other:?} is not interpreted"),
            }
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
    if let Some(argument) = expression
        .strip_prefix("States.ArrayLength(")
        .and_then(|rest| rest.strip_suffix(')'))
    {
        let array = evaluate(argument, data, context)?;
        return match array.as_array() {
            Some(items) => Ok(json!(items.len())),
            None => Err(Halt::Runtime(format!(
                "States.ArrayLength: {array} is not an array"
            ))),
        };
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
    if let Some(expected) = rule.get("NumericGreaterThan") {
        return Ok(variable
            .as_f64()
            .zip(expected.as_f64())
            .is_some_and(|(variable, expected)| variable > expected));
    }
    panic!("Choice operator not interpreted: {rule}");
}
