//! The gc cycle state machine (`infra/statemachines/gc-cycle.asl.json`), driven in-process:
//! a small interpreter of the Amazon States Language subset the definition uses (Pass,
//! Task, Choice, Succeed, Fail; `Retry`/`Catch`; `Parameters`, `ResultSelector`,
//! `ResultPath`; the intrinsics `States.MathAdd` and `States.StringToJson`) runs the
//! definition exactly as written, with its Lambda task calling the gc function's handler
//! (`run_scheduled_within`) on a real local warehouse. The definition's syntax is checked
//! offline by `scripts/check-infra.sh` (asl-validator); this test checks its logic.

mod gc_support;

use std::time::Duration;

use gc_support::{Backend, Env, HOUR, Layout, MINUTE, test_config};
use parqdb_catalog::gc::{self, GarbageCollector, GcConfig, run_scheduled_within};
use serde_json::{Map, Value, json};

const DEFINITION: &str = include_str!("../infra/statemachines/gc-cycle.asl.json");

/// How an execution ended.
#[derive(Debug, PartialEq)]
enum Ending {
    Succeeded(Value),
    Failed { error: String },
}

/// One task attempt's outcome: the Lambda payload, or an error name (`errorType`).
type TaskResult = Result<Value, String>;

struct Machine {
    definition: Value,
}

impl Machine {
    fn new(max_runs: u32) -> Machine {
        let text = DEFINITION
            .replace("${MaxRuns}", &max_runs.to_string())
            .replace(
                "${GcFunctionArn}",
                "arn:aws:lambda:us-east-1:123456789012:function:gc",
            );
        Machine {
            definition: serde_json::from_str(&text).expect("the definition is JSON"),
        }
    }

    /// Run an execution; `task` is called for every Task attempt with its parameters.
    async fn execute<F, Fut>(&self, input: Value, mut task: F) -> (Ending, Vec<String>)
    where
        F: FnMut(Value) -> Fut,
        Fut: std::future::Future<Output = TaskResult>,
    {
        let states = &self.definition["States"];
        let mut name = self.definition["StartAt"]
            .as_str()
            .expect("StartAt")
            .to_owned();
        let mut data = input;
        let mut trace = Vec::new();
        let context = json!({"Execution": {"Id": "arn:aws:states:::execution:gc:test"}});
        for _ in 0..10_000 {
            trace.push(name.clone());
            let state = &states[&name];
            match state["Type"].as_str().expect("Type") {
                "Pass" => {
                    let result = match state.get("Parameters") {
                        Some(parameters) => resolve(parameters, &data, &context),
                        None => data.clone(),
                    };
                    data = place(&data, state.get("ResultPath"), result);
                }
                "Task" => {
                    let parameters = resolve(&state["Parameters"], &data, &context);
                    let mut attempts: Vec<u32> = vec![0; retriers(state).len()];
                    let outcome = loop {
                        match task(parameters.clone()).await {
                            Ok(payload) => break Ok(payload),
                            Err(error) => {
                                let retry = retriers(state).iter().position(|retrier| {
                                    matches_error(&retrier["ErrorEquals"], &error)
                                });
                                match retry {
                                    Some(at)
                                        if attempts[at]
                                            < retriers(state)[at]["MaxAttempts"]
                                                .as_u64()
                                                .unwrap_or(3)
                                                as u32 =>
                                    {
                                        attempts[at] += 1;
                                        trace.push(format!("retry {error}"));
                                    }
                                    _ => break Err(error),
                                }
                            }
                        }
                    };
                    match outcome {
                        Ok(payload) => {
                            let invocation = json!({"Payload": payload, "StatusCode": 200});
                            let result = match state.get("ResultSelector") {
                                Some(selector) => resolve(selector, &invocation, &context),
                                None => invocation,
                            };
                            data = place(&data, state.get("ResultPath"), result);
                        }
                        Err(error) => {
                            let catcher = state["Catch"]
                                .as_array()
                                .into_iter()
                                .flatten()
                                .find(|catcher| matches_error(&catcher["ErrorEquals"], &error));
                            match catcher {
                                Some(catcher) => {
                                    data = place(
                                        &data,
                                        catcher.get("ResultPath"),
                                        json!({"Error": error}),
                                    );
                                    name = catcher["Next"].as_str().expect("Next").to_owned();
                                    continue;
                                }
                                None => return (Ending::Failed { error }, trace),
                            }
                        }
                    }
                }
                "Choice" => {
                    let next = state["Choices"]
                        .as_array()
                        .expect("Choices")
                        .iter()
                        .find(|rule| holds(rule, &data))
                        .map(|rule| &rule["Next"])
                        .unwrap_or(&state["Default"]);
                    name = next.as_str().expect("a Choice goes somewhere").to_owned();
                    continue;
                }
                "Succeed" => return (Ending::Succeeded(data), trace),
                "Fail" => {
                    return (
                        Ending::Failed {
                            error: state["Error"].as_str().unwrap_or_default().to_owned(),
                        },
                        trace,
                    );
                }
                other => panic!("state type {other} is not used by the definition"),
            }
            name = state["Next"].as_str().expect("Next").to_owned();
        }
        panic!("the execution did not end: {trace:?}");
    }
}

fn retriers(state: &Value) -> Vec<Value> {
    state["Retry"].as_array().cloned().unwrap_or_default()
}

fn matches_error(names: &Value, error: &str) -> bool {
    names
        .as_array()
        .expect("ErrorEquals")
        .iter()
        .any(|name| name == "States.ALL" || name == error)
}

/// A JSONPath of the form `$`, `$.a.b` or `$$.a.b`.
fn path<'v>(value: &'v Value, context: &'v Value, path: &str) -> Option<&'v Value> {
    let (mut at, rest) = match path.strip_prefix("$$") {
        Some(rest) => (context, rest),
        None => (value, path.strip_prefix('$').expect("a path starts with $")),
    };
    for key in rest.split('.').filter(|k| !k.is_empty()) {
        at = at.get(key)?;
    }
    Some(at)
}

/// `Parameters`/`ResultSelector`: keys ending in `.$` are paths or intrinsics.
fn resolve(template: &Value, data: &Value, context: &Value) -> Value {
    match template {
        Value::Object(fields) => {
            let mut out = Map::new();
            for (key, value) in fields {
                match key.strip_suffix(".$") {
                    Some(key) => {
                        let expression = value.as_str().expect("a path");
                        out.insert(key.to_owned(), evaluate(expression, data, context));
                    }
                    None => {
                        out.insert(key.clone(), resolve(value, data, context));
                    }
                }
            }
            Value::Object(out)
        }
        other => other.clone(),
    }
}

fn evaluate(expression: &str, data: &Value, context: &Value) -> Value {
    if let Some(arguments) = expression
        .strip_prefix("States.MathAdd(")
        .and_then(|rest| rest.strip_suffix(')'))
    {
        let (a, b) = arguments.split_once(',').expect("two arguments");
        let a = path(data, context, a.trim())
            .and_then(Value::as_i64)
            .expect("a number");
        let b: i64 = b.trim().parse().expect("a literal");
        return json!(a + b);
    }
    if let Some(argument) = expression
        .strip_prefix("States.StringToJson('")
        .and_then(|rest| rest.strip_suffix("')"))
    {
        return serde_json::from_str(argument).expect("JSON text");
    }
    path(data, context, expression)
        .cloned()
        .unwrap_or_else(|| panic!("States.Runtime: {expression} matches nothing in {data}"))
}

/// `ResultPath`: `$` replaces the input, `$.a.b` sets a field, null discards.
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

/// A Choice rule (the operators the definition uses).
fn holds(rule: &Value, data: &Value) -> bool {
    if let Some(inner) = rule.get("Not") {
        return !holds(inner, data);
    }
    if let Some(all) = rule.get("And") {
        return all.as_array().expect("And").iter().all(|r| holds(r, data));
    }
    let variable = path(
        data,
        &Value::Null,
        rule["Variable"].as_str().expect("Variable"),
    );
    if let Some(present) = rule.get("IsPresent") {
        return variable.is_some() == present.as_bool().expect("bool");
    }
    if let Some(string) = rule.get("IsString") {
        return variable.is_some_and(Value::is_string) == string.as_bool().expect("bool");
    }
    if let Some(expected) = rule.get("StringEquals") {
        return variable == Some(expected);
    }
    if let Some(other) = rule.get("NumericGreaterThanEqualsPath") {
        let other = path(data, &Value::Null, other.as_str().expect("path"));
        return match (
            variable.and_then(Value::as_f64),
            other.and_then(Value::as_f64),
        ) {
            (Some(a), Some(b)) => a >= b,
            _ => panic!("States.Runtime: not numbers"),
        };
    }
    panic!("Choice operator not used by the definition: {rule}");
}

fn budgeted() -> GcConfig {
    GcConfig {
        budget: Some(Duration::ZERO),
        ..test_config()
    }
}

/// The gc function's handler, as the Lambda task invokes it.
async fn invoke(collector: &GarbageCollector, payload: Value) -> TaskResult {
    run_scheduled_within(collector, payload, Some(Duration::ZERO))
        .await
        .map_err(|err| err.code().to_owned())
}

#[tokio::test]
async fn a_cycle_runs_budgeted_runs_until_the_scan_has_gone_round() {
    let env = Env::new(Backend::Local, 41);
    gc::claim(&env.catalog, env.now()).await.expect("claimed");
    let live = Layout::under("live/1");
    env.register("live", &live).await;
    for name in [
        "indexes/g1/part-0",
        "indexes/g2/part-0",
        "indexes/g3/part-0",
    ] {
        env.put(name, b"garbage").await;
    }
    let (_, dirs) = env
        .warehouse
        .list_children("indexes")
        .await
        .expect("listed");
    let collector = env.gc(budgeted());
    let machine = Machine::new(50);
    let mut cycles = 0;
    while env.exists("indexes/g3/part-0").await {
        cycles += 1;
        assert!(cycles < 40, "garbage outlived {cycles} cycles");
        env.advance(30 * MINUTE);
        let mut runs = 0;
        let (ending, trace) = machine
            .execute(json!({}), |payload| {
                runs += 1;
                let collector = &collector;
                async move {
                    assert_eq!(
                        payload["FunctionName"],
                        "arn:aws:lambda:us-east-1:123456789012:function:gc"
                    );
                    invoke(collector, payload["Payload"].clone()).await
                }
            })
            .await;
        let Ending::Succeeded(output) = ending else {
            panic!("cycle {cycles}: {ending:?} {trace:?}");
        };
        // One run per top-level directory, the last one going round.
        assert_eq!(runs, dirs.len(), "{dirs:?} {trace:?}");
        assert_eq!(output["cycle"]["runs"], json!(dirs.len()));
        assert!(
            output["last"]["scan"]["stopped-after"].is_null(),
            "{output}"
        );
        for name in files(&live) {
            assert!(env.exists(&name).await, "live `{name}` deleted");
        }
    }
    assert!(env.now() < START + 12 * HOUR);
}

const START: i64 = gc_support::START_MS;

fn files(layout: &Layout) -> Vec<String> {
    [&layout.centroids, &layout.postings]
        .into_iter()
        .map(|dir| format!("{dir}part-0.parquet"))
        .collect()
}

#[tokio::test]
async fn max_runs_bounds_a_cycle_and_the_next_resumes() {
    let env = Env::new(Backend::Memory, 42);
    gc::claim(&env.catalog, env.now()).await.expect("claimed");
    for n in 0..5 {
        let name: &'static str = Box::leak(format!("indexes/d{n}/part-0").into_boxed_str());
        env.put(name, b"garbage").await;
    }
    let collector = env.gc(budgeted());
    let machine = Machine::new(2);
    let (mut stops, mut runs) = (Vec::new(), Vec::new());
    for _ in 0..3 {
        env.advance(10 * MINUTE);
        let (ending, _) = machine
            .execute(json!({}), |payload| {
                invoke(&collector, payload["Payload"].clone())
            })
            .await;
        let Ending::Succeeded(output) = ending else {
            panic!("{ending:?}");
        };
        runs.push(output["cycle"]["runs"].clone());
        stops.push(output["last"]["scan"]["stopped-after"].clone());
    }
    assert_eq!(runs, [json!(2), json!(2), json!(1)]);
    assert_eq!(
        stops,
        [json!("indexes/d1"), json!("indexes/d3"), Value::Null],
        "each execution resumes where the last run stopped"
    );
}

#[tokio::test]
async fn store_outages_are_retried_and_configuration_errors_fail_at_once() {
    let machine = Machine::new(10);
    // Two outages, then the run completes (a full scan: the cycle ends).
    let mut calls = 0;
    let (ending, trace) = machine
        .execute(json!({}), |_| {
            calls += 1;
            let attempt = calls;
            async move {
                if attempt <= 2 {
                    Err("STORE_UNAVAILABLE".to_owned())
                } else {
                    Ok(json!({"status": "completed", "scan": null, "deleted": {}, "run-id": "r"}))
                }
            }
        })
        .await;
    assert!(matches!(ending, Ending::Succeeded(_)), "{ending:?}");
    assert_eq!(calls, 3, "{trace:?}");
    // A warehouse this catalog does not own: no retry, the execution fails.
    let env = Env::new(Backend::Memory, 43);
    let collector = env.gc(budgeted()); // never claimed
    let mut calls = 0;
    let (ending, _) = machine
        .execute(json!({}), |payload| {
            calls += 1;
            invoke(&collector, payload["Payload"].clone())
        })
        .await;
    assert_eq!(
        ending,
        Ending::Failed {
            error: "GcRunFailed".into()
        }
    );
    assert_eq!(calls, 1, "configuration errors are not retried");
    // A run skipped because another holds the lease ends the cycle quietly.
    let (ending, _) = machine
        .execute(json!({}), |_| async {
            Ok(json!({"status": "skipped", "scan": null, "deleted": {}, "run-id": "r"}))
        })
        .await;
    assert!(matches!(ending, Ending::Succeeded(_)));
}
