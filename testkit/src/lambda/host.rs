//! [`LambdaHost`]: a local Lambda service running every catalog function — the Invoke API
//! for clients, and for each function a pool of processes behind one [`RuntimeApi`].
//!
//! [`LambdaHost::start`] serves `POST /2015-03-31/functions/{name}/invocations` (what
//! `aws-sdk-lambda`'s `Invoke` sends; `{name}` unqualified or qualified with `live` or
//! `$LATEST`) on one port, and for every catalog function
//! (`{prefix}load`, `{prefix}commit`, ...) runs a pool of the compiled binaries
//! ([`binary`]), each polling its own port of the function's Runtime API;
//! [`LambdaHost::start_functions`] does the same for any binaries under any names. All processes of
//! one function take invocations from one queue, so concurrent invocations run
//! concurrently, up to the pool size — like warm Lambda execution environments.
//!
//! An answer becomes the Invoke response: `200` with the payload, or `200` with
//! `X-Amz-Function-Error: Unhandled` and the error JSON. A process that exits during an
//! invocation answers it with `Runtime.ExitError` and is restarted; an invocation without
//! an answer within [`DEFAULT_DEADLINE`] answers `Sandbox.Timedout`. [`Fault`]s injected
//! with [`LambdaHost::inject`] replace the next invocations' answers (throttling, crashes
//! before or after the function ran, lost responses).

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use parqdb_catalog::lambda::Operation;
use tokio::io::{AsyncWriteExt, BufReader};
use tokio::net::TcpListener;

use super::http::{self, Request};
use super::process::{Env, Lines, Process, binary};
use super::runtime::{Answer, DEFAULT_DEADLINE, RuntimeApi, TIMED_OUT};

/// What replaces the next invocation's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// `429 TooManyRequestsException`; the function does not run.
    Throttle,
    /// `500 ServiceException`; the function does not run.
    ServiceErrorBeforeRun,
    /// `Runtime.ExitError` without running the function.
    CrashBeforeRun,
    /// The function runs; its answer is replaced by `Runtime.ExitError`.
    CrashAfterRun,
    /// The function runs; the Invoke response never comes (the client times out).
    HangAfterRun,
    /// The function does not run; the answer is a `COMMIT_STATE_UNKNOWN` function error
    /// (as when a function runs out of time right after sending a write that failed).
    UnknownBeforeRun,
    /// The function runs; its answer is replaced by a `COMMIT_STATE_UNKNOWN` function
    /// error (as when it runs out of time after its write applied).
    UnknownAfterRun,
}

/// How many of a process's last output lines the host keeps for failure messages.
const TAIL: usize = 50;

/// The processes of one function.
struct Pool {
    function_name: String,
    api: RuntimeApi,
    faults: Mutex<VecDeque<Fault>>,
    /// Process slots that have not given up (a process that exits before it polled
    /// failed to initialise and would fail again).
    alive: AtomicUsize,
    /// How many process slots the function has.
    processes: usize,
}

/// See the module docs.
pub struct LambdaHost {
    endpoint: String,
    prefix: String,
    pools: Arc<HashMap<String, Arc<Pool>>>,
}

impl LambdaHost {
    /// Start `processes` processes of every catalog function with the backend variables
    /// `env` (`PARQDB_WAREHOUSE`, `PARQDB_CATALOG`, ...) and serve the Invoke API.
    pub async fn start(env: &[(&str, String)], processes: usize) -> LambdaHost {
        let prefix = format!(
            "parqdb-test-{}-",
            &uuid::Uuid::new_v4().simple().to_string()[..8]
        );
        let env: Env = env
            .iter()
            .map(|(name, value)| ((*name).to_owned(), Some(value.clone())))
            .collect();
        let functions: Vec<(String, PathBuf, Env)> = Operation::ALL
            .iter()
            .map(|operation| {
                (
                    format!("{prefix}{}", operation.name()),
                    binary(operation.name()),
                    env.clone(),
                )
            })
            .collect();
        LambdaHost::serve(prefix, functions, processes).await
    }

    /// Serve the Invoke API for `functions` only: `(function name, binary, environment)`,
    /// `processes` processes each (e.g. a builder function the `refresh` binary invokes).
    pub async fn start_functions(
        functions: Vec<(String, PathBuf, Env)>,
        processes: usize,
    ) -> LambdaHost {
        LambdaHost::serve(String::new(), functions, processes).await
    }

    async fn serve(
        prefix: String,
        functions: Vec<(String, PathBuf, Env)>,
        processes: usize,
    ) -> LambdaHost {
        let mut pools = HashMap::new();
        for (function_name, binary, env) in functions {
            let pool = Arc::new(Pool {
                api: RuntimeApi::start(&function_name, processes).await,
                function_name: function_name.clone(),
                faults: Mutex::new(VecDeque::new()),
                alive: AtomicUsize::new(processes),
                processes,
            });
            for slot in 0..processes {
                tokio::spawn(supervise(pool.clone(), slot, binary.clone(), env.clone()));
            }
            pools.insert(function_name, pool);
        }
        let pools = Arc::new(pools);
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind invoke API");
        let endpoint = format!("http://{}", listener.local_addr().expect("address"));
        tokio::spawn(serve_invoke_api(listener, pools.clone()));
        LambdaHost {
            endpoint,
            prefix,
            pools,
        }
    }

    /// The Invoke API's base URL (`AWS_ENDPOINT_URL_LAMBDA`).
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// The prefix of the function names.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// `lambda://PREFIX`.
    pub fn uri(&self) -> String {
        format!("lambda://{}", self.prefix)
    }

    fn pool(&self, operation: Operation) -> &Arc<Pool> {
        &self.pools[&format!("{}{}", self.prefix, operation.name())]
    }

    /// Wait until every process of every function has started and asked for its first
    /// event, so that a test's first invocation does not pay a cold start (on a loaded
    /// machine, starting a dozen binaries at once can outlast a short attempt timeout).
    ///
    /// # Panics
    /// If a process fails to initialise, or they are not all up within two minutes.
    pub async fn ready(&self) {
        let wait = async {
            for pool in self.pools.values() {
                while pool.api.polls() < pool.processes {
                    assert!(
                        pool.alive.load(Ordering::SeqCst) == pool.processes,
                        "{} failed to initialise: {:?}",
                        pool.function_name,
                        pool.api.init_error()
                    );
                    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                }
            }
        };
        tokio::time::timeout(std::time::Duration::from_secs(120), wait)
            .await
            .expect("every function process polls within two minutes");
    }

    /// Replace the answers of the next invocations of `operation` with `faults`, in order.
    pub fn inject(&self, operation: Operation, faults: &[Fault]) {
        self.pool(operation)
            .faults
            .lock()
            .expect("lock")
            .extend(faults);
    }

    /// Replace the answers of the next invocations of the function `function_name` (one
    /// of [`LambdaHost::start_functions`]) with `faults`, in order.
    pub fn inject_into(&self, function_name: &str, faults: &[Fault]) {
        self.pools[function_name]
            .faults
            .lock()
            .expect("lock")
            .extend(faults);
    }

    /// How many invocations of the function `function_name` reached a function process.
    pub fn runs_of(&self, function_name: &str) -> usize {
        self.pools[function_name].api.runs()
    }

    /// How many invocations of `operation` reached a function process.
    pub fn runs(&self, operation: Operation) -> usize {
        self.pool(operation).api.runs()
    }

    /// Keep the host (and whatever `keep` owns, e.g. temporary directories) running until
    /// the test's runtime shuts down, which kills the processes.
    pub fn detach<T: Send + 'static>(self, keep: T) {
        tokio::spawn(async move {
            let _host = self;
            let _keep = keep;
            std::future::pending::<()>().await;
        });
    }
}

/// Run slot `slot` of `pool`: start the binary, and restart it whenever it exits after it
/// had initialised, failing its in-flight invocation with `Runtime.ExitError`.
async fn supervise(pool: Arc<Pool>, slot: usize, binary: PathBuf, env: Env) {
    loop {
        let mut process = Process::spawn(
            &binary,
            &pool.function_name,
            &format!("slot-{slot}"),
            &pool.api.address(slot),
            &env,
            (Lines::last(TAIL), Lines::last(TAIL)),
        );
        let status = process.child.wait().await;
        eprintln!(
            "lambda host: {} (slot {slot}) exited ({status:?}); last log lines: {:#?}",
            pool.function_name,
            process.stderr.snapshot()
        );
        let exit = Answer::error(
            "Runtime.ExitError",
            &format!("Runtime exited with error: {status:?}"),
        );
        pool.api.exited(slot, &exit);
        if !pool.api.take_polled(slot) {
            // It failed during initialisation: it would fail again.
            pool.alive.fetch_sub(1, Ordering::SeqCst);
            return;
        }
    }
}

async fn serve_invoke_api(listener: TcpListener, pools: Arc<HashMap<String, Arc<Pool>>>) {
    while let Ok((stream, _)) = listener.accept().await {
        let pools = pools.clone();
        tokio::spawn(async move {
            let (read, mut write) = stream.into_split();
            let mut reader = BufReader::new(read);
            while let Ok(Some(request)) = http::read_request(&mut reader).await {
                let Some(response) = invoke(request, &pools).await else {
                    // A hung invocation: never answer, keep the connection open.
                    std::future::pending::<()>().await;
                    return;
                };
                if write.write_all(&response).await.is_err() {
                    return;
                }
            }
        });
    }
}

fn service_error(status: &str, error_type: &str, message: &str) -> Vec<u8> {
    let body = serde_json::json!({"Type": "User", "message": message}).to_string();
    http::response(
        status,
        &[
            ("Content-Type", "application/json".to_owned()),
            ("x-amzn-ErrorType", error_type.to_owned()),
        ],
        body.as_bytes(),
    )
}

fn function_response(answer: Answer) -> Vec<u8> {
    let mut headers = vec![
        ("Content-Type", "application/json".to_owned()),
        ("X-Amz-Executed-Version", "$LATEST".to_owned()),
    ];
    let body = match answer {
        Answer::Response(body) => body,
        Answer::Error { body, .. } => {
            headers.push(("X-Amz-Function-Error", "Unhandled".to_owned()));
            body
        }
    };
    http::response("200 OK", &headers, &body)
}

fn function_error(error_type: &str, message: &str) -> Vec<u8> {
    function_response(Answer::error(error_type, message))
}

/// Answer one Invoke request (`None`: never answer).
async fn invoke(request: Request, pools: &HashMap<String, Arc<Pool>>) -> Option<Vec<u8>> {
    let path = request.path.split('?').next().unwrap_or_default();
    let name = path
        .strip_prefix("/2015-03-31/functions/")
        .and_then(|rest| rest.strip_suffix("/invocations"))
        .map(percent_decode);
    let Some(name) = name.filter(|_| request.method == "POST") else {
        return Some(service_error(
            "404 Not Found",
            "UnknownOperationException",
            "unknown path",
        ));
    };
    // `NAME` or `NAME:QUALIFIER`. Each function here has one version, which `$LATEST` and
    // the alias `live` (the template's `AutoPublishAlias`) both serve; any other qualifier
    // names nothing, as an alias the stack does not have.
    let function = match name.split_once(':') {
        Some((function, "live" | "$LATEST")) => function,
        Some(_) => "",
        None => &name,
    };
    let Some(pool) = pools.get(function) else {
        return Some(service_error(
            "404 Not Found",
            "ResourceNotFoundException",
            &format!("Function not found: {name}"),
        ));
    };
    let invocation_type = request
        .headers
        .get("x-amz-invocation-type")
        .map_or("RequestResponse", String::as_str);
    if invocation_type != "RequestResponse" {
        return Some(service_error(
            "400 Bad Request",
            "InvalidParameterValueException",
            "this host serves RequestResponse invocations only",
        ));
    }
    let fault = pool.faults.lock().expect("lock").pop_front();
    match fault {
        Some(Fault::Throttle) => {
            return Some(service_error(
                "429 Too Many Requests",
                "TooManyRequestsException",
                "Rate Exceeded.",
            ));
        }
        Some(Fault::ServiceErrorBeforeRun) => {
            return Some(service_error(
                "500 Internal Server Error",
                "ServiceException",
                "injected",
            ));
        }
        Some(Fault::CrashBeforeRun) => {
            return Some(function_error(
                "Runtime.ExitError",
                "injected crash before the handler ran",
            ));
        }
        Some(Fault::UnknownBeforeRun) => {
            return Some(function_error(
                "COMMIT_STATE_UNKNOWN",
                "injected: out of time before the write landed",
            ));
        }
        _ => {}
    }
    if pool.alive.load(Ordering::SeqCst) == 0 {
        let answer = pool
            .api
            .init_answer()
            .unwrap_or_else(|| Answer::error("Runtime.ExitError", "the function cannot start"));
        return Some(function_response(answer));
    }
    let (id, answer) = pool.api.enqueue(request.body);
    let answer = match tokio::time::timeout(DEFAULT_DEADLINE, answer).await {
        Ok(Ok(answer)) => answer,
        Ok(Err(_)) => Answer::error("Runtime.ExitError", "the invocation was lost"),
        Err(_) => {
            pool.api.forget(&id);
            Answer::error(
                TIMED_OUT,
                &format!(
                    "Task timed out after {:.2} seconds",
                    DEFAULT_DEADLINE.as_secs_f64()
                ),
            )
        }
    };
    match fault {
        Some(Fault::CrashAfterRun) => Some(function_error(
            "Runtime.ExitError",
            "injected crash after the handler ran",
        )),
        Some(Fault::HangAfterRun) => None,
        Some(Fault::UnknownAfterRun) => Some(function_error(
            "COMMIT_STATE_UNKNOWN",
            "injected: out of time after the write landed",
        )),
        _ => Some(function_response(answer)),
    }
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let escaped = (bytes[i] == b'%')
            .then(|| bytes.get(i + 1..i + 3))
            .flatten()
            .and_then(|hex| std::str::from_utf8(hex).ok())
            .and_then(|hex| u8::from_str_radix(hex, 16).ok());
        match escaped {
            Some(byte) => {
                out.push(byte);
                i += 3;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}
