//! A local Lambda service for the real function binaries: the Invoke API for clients and a
//! Runtime API for each function process, on 127.0.0.1.
//!
//! [`LambdaHost::start`] serves `POST /2015-03-31/functions/{name}/invocations` (what
//! `aws-sdk-lambda`'s `Invoke` sends) on one port, and for every catalog function
//! (`{prefix}load`, `{prefix}commit`, ...) runs a pool of the compiled binaries
//! (`target/debug/<operation>`), each polling its own Runtime API port
//! (`GET /2018-06-01/runtime/invocation/next`, `POST .../{id}/response`,
//! `POST .../{id}/error`, `POST /2018-06-01/runtime/init/error`). All processes of one
//! function take invocations from one queue, so concurrent invocations run concurrently,
//! up to the pool size — like warm Lambda execution environments.
//!
//! An answer becomes the Invoke response: `200` with the payload, or `200` with
//! `X-Amz-Function-Error: Unhandled` and the error JSON. A process that exits during an
//! invocation answers it with `Runtime.ExitError` and is restarted; an invocation without
//! an answer within the function timeout answers `Sandbox.Timedout`. [`Fault`]s injected
//! with [`LambdaHost::inject`] replace the next invocations' answers (throttling, crashes
//! before or after the function ran, lost responses).
//!
//! The binaries are found in `PARQDB_FUNCTIONS_BIN_DIR`, else next to this test executable
//! (`target/debug/`); `cargo test --workspace` builds them, alone run
//! `cargo build -p parqdb-catalog-functions --bins` first.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use aws_sdk_lambda::config::{BehaviorVersion, Credentials, Region};
use parqdb_catalog::catalog::{Catalog, RetryPolicy};
use parqdb_catalog::lambda::Operation;
use parqdb_catalog::remote::{FunctionNames, LambdaCatalog};
use parqdb_catalog::store::local::LocalStore;
use parqdb_catalog::warehouse::Warehouse;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::process::Command;
use tokio::sync::{mpsc, oneshot};

use super::fixture::TestEnv;

/// How long a function may take per invocation before the host answers `Sandbox.Timedout`.
pub const FUNCTION_TIMEOUT: Duration = Duration::from_secs(60);

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

/// One invocation's answer from a function process.
#[derive(Debug)]
enum Outcome {
    Response(Vec<u8>),
    Error(Vec<u8>),
}

struct Pending {
    id: String,
    body: Vec<u8>,
    answer: oneshot::Sender<Outcome>,
}

/// The processes of one function and their shared queue.
struct Pool {
    function_name: String,
    operation: Operation,
    queue: mpsc::UnboundedSender<Pending>,
    next: tokio::sync::Mutex<mpsc::UnboundedReceiver<Pending>>,
    /// Request id → (answer, process slot).
    in_flight: Mutex<HashMap<String, (oneshot::Sender<Outcome>, usize)>>,
    faults: Mutex<VecDeque<Fault>>,
    alive: AtomicUsize,
    init_error: Mutex<Option<Vec<u8>>>,
    /// Invocations handed to a process.
    runs: AtomicUsize,
    next_id: AtomicUsize,
    /// The last lines each slot's process wrote to stderr (for failure messages).
    logs: Vec<Mutex<VecDeque<String>>>,
}

/// A local Lambda service running the catalog's function binaries.
pub struct LambdaHost {
    endpoint: String,
    prefix: String,
    pools: Arc<HashMap<String, Arc<Pool>>>,
}

/// The catalog's function binaries: `PARQDB_FUNCTIONS_BIN_DIR`, else the directory of
/// this build's binaries (the test executable is in its `deps/`).
pub fn functions_bin_dir() -> PathBuf {
    if let Ok(dir) = std::env::var("PARQDB_FUNCTIONS_BIN_DIR") {
        return PathBuf::from(dir);
    }
    let exe = std::env::current_exe().expect("test executable path");
    let deps = exe.parent().expect("deps directory");
    deps.parent().expect("profile directory").to_path_buf()
}

fn binary(dir: &Path, operation: Operation) -> PathBuf {
    let path = dir.join(operation.name());
    assert!(
        path.is_file(),
        "the function binary {} is missing: run `cargo build -p parqdb-catalog-functions --bins` \
         (or set PARQDB_FUNCTIONS_BIN_DIR)",
        path.display()
    );
    if std::env::var_os("PARQDB_FUNCTIONS_BIN_DIR").is_none() {
        warn_if_stale(&path);
    }
    path
}

/// Say (in the test's output, shown when it fails) if a source file is newer than the
/// binary: `cargo test --workspace` rebuilds the binaries, `cargo test --test X` does not.
fn warn_if_stale(binary: &Path) {
    fn newest(dir: &Path, newest_so_far: &mut Option<(SystemTime, PathBuf)>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                newest(&path, newest_so_far);
            } else if let Ok(modified) = entry.metadata().and_then(|meta| meta.modified())
                && newest_so_far
                    .as_ref()
                    .is_none_or(|(time, _)| modified > *time)
            {
                *newest_so_far = Some((modified, path));
            }
        }
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut source = None;
    newest(&root.join("src"), &mut source);
    newest(&root.join("functions").join("src"), &mut source);
    let built = std::fs::metadata(binary).and_then(|meta| meta.modified());
    if let (Some((changed, file)), Ok(built)) = (source, built)
        && changed > built
    {
        eprintln!(
            "lambda host: WARNING {} is older than {}; run \
             `cargo build -p parqdb-catalog-functions --bins` to test the current sources",
            binary.display(),
            file.display()
        );
    }
}

impl LambdaHost {
    /// Start `processes` processes of every catalog function with the backend variables
    /// `env` (`PARQDB_WAREHOUSE`, `PARQDB_CATALOG`, ...) and serve the Invoke API.
    pub async fn start(env: &[(&str, String)], processes: usize) -> LambdaHost {
        let bin_dir = functions_bin_dir();
        let prefix = format!(
            "parqdb-test-{}-",
            &uuid::Uuid::new_v4().simple().to_string()[..8]
        );
        let env: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.clone()))
            .collect();
        let mut pools = HashMap::new();
        for operation in Operation::ALL {
            let function_name = format!("{prefix}{}", operation.name());
            let (queue, next) = mpsc::unbounded_channel();
            let pool = Arc::new(Pool {
                function_name: function_name.clone(),
                operation,
                queue,
                next: tokio::sync::Mutex::new(next),
                in_flight: Mutex::new(HashMap::new()),
                faults: Mutex::new(VecDeque::new()),
                alive: AtomicUsize::new(processes),
                init_error: Mutex::new(None),
                runs: AtomicUsize::new(0),
                next_id: AtomicUsize::new(0),
                logs: (0..processes)
                    .map(|_| Mutex::new(VecDeque::new()))
                    .collect(),
            });
            for slot in 0..processes {
                let listener = TcpListener::bind("127.0.0.1:0")
                    .await
                    .expect("bind runtime API");
                let address = listener.local_addr().expect("address");
                let polled = Arc::new(AtomicBool::new(false));
                tokio::spawn(serve_runtime_api(
                    listener,
                    pool.clone(),
                    slot,
                    polled.clone(),
                ));
                tokio::spawn(supervise(
                    pool.clone(),
                    slot,
                    binary(&bin_dir, operation),
                    address,
                    env.clone(),
                    polled,
                ));
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

    /// A Lambda client for this host: dummy credentials, `us-east-1`.
    pub fn client(&self) -> aws_sdk_lambda::Client {
        let config = aws_sdk_lambda::Config::builder()
            .behavior_version(BehaviorVersion::latest())
            .region(Region::new("us-east-1"))
            .credentials_provider(Credentials::new("dummy", "dummy", None, None, "tests"))
            .endpoint_url(&self.endpoint)
            .build();
        aws_sdk_lambda::Client::from_conf(config)
    }

    /// A [`LambdaCatalog`] over this host's functions.
    pub async fn catalog(&self) -> LambdaCatalog {
        self.catalog_with(RetryPolicy::default(), None).await
    }

    /// A [`LambdaCatalog`] with this retry policy and attempt timeout.
    pub async fn catalog_with(
        &self,
        retry: RetryPolicy,
        timeout: Option<Duration>,
    ) -> LambdaCatalog {
        let mut builder = LambdaCatalog::builder(FunctionNames::with_prefix(&self.prefix))
            .client(self.client())
            .retry(retry);
        if let Some(timeout) = timeout {
            builder = builder.attempt_timeout(timeout);
        }
        builder.build().await.expect("catalog")
    }

    fn pool(&self, operation: Operation) -> &Arc<Pool> {
        &self.pools[&format!("{}{}", self.prefix, operation.name())]
    }

    /// Replace the answers of the next invocations of `operation` with `faults`, in order.
    pub fn inject(&self, operation: Operation, faults: &[Fault]) {
        self.pool(operation)
            .faults
            .lock()
            .expect("lock")
            .extend(faults);
    }

    /// How many invocations of `operation` reached a function process.
    pub fn runs(&self, operation: Operation) -> usize {
        self.pool(operation).runs.load(Ordering::SeqCst)
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
async fn supervise(
    pool: Arc<Pool>,
    slot: usize,
    binary: PathBuf,
    runtime_api: SocketAddr,
    env: Vec<(String, String)>,
    polled: Arc<AtomicBool>,
) {
    loop {
        polled.store(false, Ordering::SeqCst);
        let mut command = Command::new(&binary);
        command
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("AWS_LAMBDA_RUNTIME_API", runtime_api.to_string())
            .env("AWS_LAMBDA_FUNCTION_NAME", &pool.function_name)
            .env("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "256")
            .env("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST")
            .env("AWS_LAMBDA_LOG_STREAM_NAME", format!("slot-{slot}"))
            .env(
                "AWS_LAMBDA_LOG_GROUP_NAME",
                format!("/aws/lambda/{}", pool.function_name),
            )
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = command
            .spawn()
            .unwrap_or_else(|err| panic!("cannot start {}: {err}", binary.display()));
        let stderr = child.stderr.take().expect("piped stderr");
        let logs_pool = pool.clone();
        tokio::spawn(async move {
            let mut lines = BufReader::new(stderr).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let mut logs = logs_pool.logs[slot].lock().expect("lock");
                if logs.len() == 50 {
                    logs.pop_front();
                }
                logs.push_back(line);
            }
        });
        let status = child.wait().await;
        let tail: Vec<String> = pool.logs[slot]
            .lock()
            .expect("lock")
            .iter()
            .cloned()
            .collect();
        eprintln!(
            "lambda host: {} (slot {slot}) exited ({status:?}); last log lines: {tail:#?}",
            pool.function_name
        );
        let crashed: Vec<oneshot::Sender<Outcome>> = {
            let mut in_flight = pool.in_flight.lock().expect("lock");
            let ids: Vec<String> = in_flight
                .iter()
                .filter(|(_, (_, owner))| *owner == slot)
                .map(|(id, _)| id.clone())
                .collect();
            ids.into_iter()
                .filter_map(|id| in_flight.remove(&id).map(|(answer, _)| answer))
                .collect()
        };
        for answer in crashed {
            let _ = answer.send(Outcome::Error(error_body(
                "Runtime.ExitError",
                &format!("Runtime exited with error: {status:?}"),
            )));
        }
        if !polled.load(Ordering::SeqCst) {
            // It failed during initialisation: it would fail again.
            pool.alive.fetch_sub(1, Ordering::SeqCst);
            return;
        }
    }
}

fn error_body(error_type: &str, message: &str) -> Vec<u8> {
    serde_json::json!({"errorType": error_type, "errorMessage": message})
        .to_string()
        .into_bytes()
}

// ---------------------------------------------------------------------------------------
// The Invoke API.

async fn serve_invoke_api(listener: TcpListener, pools: Arc<HashMap<String, Arc<Pool>>>) {
    while let Ok((stream, _)) = listener.accept().await {
        let pools = pools.clone();
        tokio::spawn(async move {
            let (read, mut write) = stream.into_split();
            let mut reader = BufReader::new(read);
            while let Ok(Some(request)) = read_request(&mut reader).await {
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
    http_response(
        status,
        &[
            ("Content-Type", "application/json".to_owned()),
            ("x-amzn-ErrorType", error_type.to_owned()),
        ],
        body.as_bytes(),
    )
}

fn function_response(outcome: Outcome) -> Vec<u8> {
    let mut headers = vec![
        ("Content-Type", "application/json".to_owned()),
        ("X-Amz-Executed-Version", "$LATEST".to_owned()),
    ];
    let body = match outcome {
        Outcome::Response(body) => body,
        Outcome::Error(body) => {
            headers.push(("X-Amz-Function-Error", "Unhandled".to_owned()));
            body
        }
    };
    http_response("200 OK", &headers, &body)
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
    let Some(pool) = pools.get(&name) else {
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
            return Some(function_response(Outcome::Error(error_body(
                "Runtime.ExitError",
                "injected crash before the handler ran",
            ))));
        }
        Some(Fault::UnknownBeforeRun) => {
            return Some(function_response(Outcome::Error(error_body(
                "COMMIT_STATE_UNKNOWN",
                "injected: out of time before the write landed",
            ))));
        }
        _ => {}
    }
    if pool.alive.load(Ordering::SeqCst) == 0 {
        let body = pool
            .init_error
            .lock()
            .expect("lock")
            .clone()
            .unwrap_or_else(|| error_body("Runtime.ExitError", "the function cannot start"));
        return Some(function_response(Outcome::Error(body)));
    }
    let n = pool.next_id.fetch_add(1, Ordering::SeqCst);
    let id = format!(
        "{:08x}-{n:08}-{}",
        std::process::id(),
        uuid::Uuid::new_v4().simple()
    );
    let (answer, outcome) = oneshot::channel();
    pool.queue
        .send(Pending {
            id: id.clone(),
            body: request.body,
            answer,
        })
        .expect("the pool is running");
    let outcome = match tokio::time::timeout(FUNCTION_TIMEOUT, outcome).await {
        Ok(Ok(outcome)) => outcome,
        Ok(Err(_)) => Outcome::Error(error_body("Runtime.ExitError", "the invocation was lost")),
        Err(_) => {
            pool.in_flight.lock().expect("lock").remove(&id);
            Outcome::Error(error_body(
                "Sandbox.Timedout",
                &format!(
                    "Task timed out after {:.2} seconds",
                    FUNCTION_TIMEOUT.as_secs_f64()
                ),
            ))
        }
    };
    match fault {
        Some(Fault::CrashAfterRun) => Some(function_response(Outcome::Error(error_body(
            "Runtime.ExitError",
            "injected crash after the handler ran",
        )))),
        Some(Fault::HangAfterRun) => None,
        Some(Fault::UnknownAfterRun) => Some(function_response(Outcome::Error(error_body(
            "COMMIT_STATE_UNKNOWN",
            "injected: out of time after the write landed",
        )))),
        _ => Some(function_response(outcome)),
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

// ---------------------------------------------------------------------------------------
// The Runtime API of one process slot.

async fn serve_runtime_api(
    listener: TcpListener,
    pool: Arc<Pool>,
    slot: usize,
    polled: Arc<AtomicBool>,
) {
    while let Ok((stream, _)) = listener.accept().await {
        tokio::spawn(serve_runtime_connection(
            stream,
            pool.clone(),
            slot,
            polled.clone(),
        ));
    }
}

async fn serve_runtime_connection(
    stream: TcpStream,
    pool: Arc<Pool>,
    slot: usize,
    polled: Arc<AtomicBool>,
) {
    let (read, mut write) = stream.into_split();
    let mut reader = BufReader::new(read);
    while let Ok(Some(request)) = read_request(&mut reader).await {
        let Some(path) = request.path.strip_prefix("/2018-06-01/runtime/") else {
            let _ = write
                .write_all(&http_response("404 Not Found", &[], b""))
                .await;
            continue;
        };
        let response = match (request.method.as_str(), path) {
            ("GET", "invocation/next") => {
                polled.store(true, Ordering::SeqCst);
                // Wait for an invocation, unless the process goes away first.
                let pending = tokio::select! {
                    pending = async { pool.next.lock().await.recv().await } => pending,
                    _ = reader.fill_buf() => return,
                };
                let Some(pending) = pending else { return };
                pool.runs.fetch_add(1, Ordering::SeqCst);
                pool.in_flight
                    .lock()
                    .expect("lock")
                    .insert(pending.id.clone(), (pending.answer, slot));
                let deadline = SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map_or(0, |elapsed| elapsed.as_millis())
                    + FUNCTION_TIMEOUT.as_millis();
                let arn = format!(
                    "arn:aws:lambda:us-east-1:123456789012:function:{}",
                    pool.function_name
                );
                http_response(
                    "200 OK",
                    &[
                        ("Content-Type", "application/json".to_owned()),
                        ("Lambda-Runtime-Aws-Request-Id", pending.id.clone()),
                        ("Lambda-Runtime-Deadline-Ms", deadline.to_string()),
                        ("Lambda-Runtime-Invoked-Function-Arn", arn),
                        (
                            "Lambda-Runtime-Trace-Id",
                            format!("Root=1-00000000-{};Sampled=0", &pending.id[18..42]),
                        ),
                    ],
                    &pending.body,
                )
            }
            ("POST", "init/error") => {
                *pool.init_error.lock().expect("lock") = Some(request.body);
                accepted()
            }
            ("POST", path) => {
                let rest = path.strip_prefix("invocation/").unwrap_or_default();
                let (id, outcome) = if let Some(id) = rest.strip_suffix("/response") {
                    (id, Outcome::Response(request.body))
                } else if let Some(id) = rest.strip_suffix("/error") {
                    (id, Outcome::Error(request.body))
                } else {
                    let _ = write
                        .write_all(&http_response("404 Not Found", &[], b""))
                        .await;
                    continue;
                };
                match pool.in_flight.lock().expect("lock").remove(id) {
                    Some((answer, _)) => {
                        let _ = answer.send(outcome);
                        accepted()
                    }
                    None => http_response("400 Bad Request", &[], b"unknown request id"),
                }
            }
            _ => http_response("404 Not Found", &[], b""),
        };
        if write.write_all(&response).await.is_err() {
            return;
        }
    }
}

fn accepted() -> Vec<u8> {
    http_response(
        "202 Accepted",
        &[("Content-Type", "application/json".to_owned())],
        br#"{"status":"OK"}"#,
    )
}

// ---------------------------------------------------------------------------------------
// Minimal HTTP/1.1: keep-alive, Content-Length and chunked request bodies.

struct Request {
    method: String,
    path: String,
    headers: HashMap<String, String>,
    body: Vec<u8>,
}

async fn read_request<R: AsyncRead + Unpin>(
    reader: &mut BufReader<R>,
) -> std::io::Result<Option<Request>> {
    let mut line = String::new();
    if reader.read_line(&mut line).await? == 0 {
        return Ok(None);
    }
    let mut parts = line.split_whitespace();
    let method = parts.next().unwrap_or_default().to_owned();
    let path = parts.next().unwrap_or_default().to_owned();
    let mut headers = HashMap::new();
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).await? == 0 {
            return Ok(None);
        }
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some((name, value)) = line.split_once(':') {
            headers.insert(name.trim().to_ascii_lowercase(), value.trim().to_owned());
        }
    }
    let mut body = Vec::new();
    if headers
        .get("transfer-encoding")
        .is_some_and(|value| value.eq_ignore_ascii_case("chunked"))
    {
        loop {
            let mut size = String::new();
            reader.read_line(&mut size).await?;
            let size = usize::from_str_radix(size.trim().split(';').next().unwrap_or("0"), 16)
                .map_err(std::io::Error::other)?;
            if size == 0 {
                loop {
                    let mut trailer = String::new();
                    if reader.read_line(&mut trailer).await? == 0 || trailer.trim().is_empty() {
                        break;
                    }
                }
                break;
            }
            let start = body.len();
            body.resize(start + size, 0);
            reader.read_exact(&mut body[start..]).await?;
            let mut crlf = [0u8; 2];
            reader.read_exact(&mut crlf).await?;
        }
    } else if let Some(length) = headers.get("content-length") {
        let length: usize = length.parse().map_err(std::io::Error::other)?;
        body.resize(length, 0);
        reader.read_exact(&mut body).await?;
    }
    Ok(Some(Request {
        method,
        path,
        headers,
        body,
    }))
}

fn http_response(status: &str, headers: &[(&str, String)], body: &[u8]) -> Vec<u8> {
    let mut head = format!("HTTP/1.1 {status}\r\nContent-Length: {}\r\n", body.len());
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    let mut bytes = head.into_bytes();
    bytes.extend_from_slice(body);
    bytes
}

// ---------------------------------------------------------------------------------------
// Backends behind the functions.

/// Processes per function in the conformance environments.
pub const PROCESSES: usize = 4;

/// A host running the functions over one backend, plus direct access to that backend.
pub struct Deployment {
    /// The local Lambda service.
    pub host: LambdaHost,
    /// The warehouse the functions use (a local directory), for writing metadata files.
    pub warehouse: Warehouse,
    /// The embedded catalog over the same pointer store and warehouse.
    pub embedded: Catalog,
    /// Keeps the directory alive.
    pub dir: tempfile::TempDir,
}

impl Deployment {
    /// The conformance environment over this deployment's [`LambdaCatalog`]; the host
    /// runs until the test's runtime shuts down.
    pub async fn into_env(self) -> TestEnv {
        let catalog = self.host.catalog().await;
        self.host.detach(self.dir);
        TestEnv {
            catalog: Arc::new(catalog),
            warehouse: self.warehouse,
        }
    }
}

/// Functions that keep warehouse and pointers (under `_catalog/`) in a fresh local
/// directory: the default deployment.
pub async fn local_deployment(processes: usize) -> Deployment {
    let dir = tempfile::tempdir().expect("temp dir");
    let root = dir.path().join("warehouse");
    let warehouse = Warehouse::local(&root).expect("warehouse");
    let env = [("PARQDB_WAREHOUSE", warehouse.root().to_owned())];
    let store = LocalStore::new(root.canonicalize().expect("canonical").join("_catalog"));
    Deployment {
        host: LambdaHost::start(&env, processes).await,
        embedded: Catalog::builder(Arc::new(store), warehouse.clone()).build(),
        warehouse,
        dir,
    }
}

/// Functions that keep pointers in a fresh DynamoDB Local table
/// (`PARQDB_TEST_DYNAMODB_ENDPOINT`) and metadata in a fresh local directory.
pub async fn dynamodb_deployment(processes: usize) -> Deployment {
    let store = super::services::dynamodb_store().await;
    let endpoint =
        std::env::var("PARQDB_TEST_DYNAMODB_ENDPOINT").expect("checked by dynamodb_store");
    let dir = tempfile::tempdir().expect("temp dir");
    let warehouse = Warehouse::local(&dir.path().join("warehouse")).expect("warehouse");
    let env = [
        ("PARQDB_WAREHOUSE", warehouse.root().to_owned()),
        ("PARQDB_CATALOG", format!("dynamodb://{}", store.table())),
        ("AWS_ENDPOINT_URL_DYNAMODB", endpoint),
        ("AWS_ACCESS_KEY_ID", "dummy".to_owned()),
        ("AWS_SECRET_ACCESS_KEY", "dummy".to_owned()),
        ("AWS_REGION", "us-east-1".to_owned()),
    ];
    Deployment {
        host: LambdaHost::start(&env, processes).await,
        embedded: Catalog::builder(Arc::new(store), warehouse.clone()).build(),
        warehouse,
        dir,
    }
}

/// The conformance environment: a [`LambdaCatalog`] over functions on local files.
pub async fn local_env() -> TestEnv {
    local_deployment(PROCESSES).await.into_env().await
}

/// The conformance environment: a [`LambdaCatalog`] over functions on DynamoDB Local.
pub async fn dynamodb_env() -> TestEnv {
    dynamodb_deployment(PROCESSES).await.into_env().await
}

/// A [`LambdaCatalog`] over functions whose pointer directory lies below a regular file:
/// every store call is refused for good, and the functions say so (`STORE_REFUSED`).
pub async fn local_refusing() -> super::conformance::SharedCatalog {
    let dir = tempfile::tempdir().expect("temp dir");
    let warehouse = Warehouse::local(&dir.path().join("warehouse")).expect("warehouse");
    let blocker = dir.path().join("blocker");
    std::fs::write(&blocker, b"a regular file").expect("blocker");
    let catalog = url::Url::from_file_path(blocker.join("_catalog")).expect("file URI");
    let env = [
        ("PARQDB_WAREHOUSE", warehouse.root().to_owned()),
        ("PARQDB_CATALOG", catalog.to_string()),
    ];
    let host = LambdaHost::start(&env, 1).await;
    let remote = host.catalog().await;
    host.detach(dir);
    Arc::new(remote)
}

/// A [`LambdaCatalog`] over functions whose DynamoDB table does not exist.
pub async fn dynamodb_refusing() -> super::conformance::SharedCatalog {
    let endpoint = std::env::var("PARQDB_TEST_DYNAMODB_ENDPOINT")
        .expect("PARQDB_TEST_DYNAMODB_ENDPOINT is set (run scripts/test.sh)");
    let dir = tempfile::tempdir().expect("temp dir");
    let warehouse = Warehouse::local(&dir.path().join("warehouse")).expect("warehouse");
    let env = [
        ("PARQDB_WAREHOUSE", warehouse.root().to_owned()),
        (
            "PARQDB_CATALOG",
            format!(
                "dynamodb://parqdb-missing-{}",
                uuid::Uuid::new_v4().simple()
            ),
        ),
        ("AWS_ENDPOINT_URL_DYNAMODB", endpoint),
        ("AWS_ACCESS_KEY_ID", "dummy".to_owned()),
        ("AWS_SECRET_ACCESS_KEY", "dummy".to_owned()),
        ("AWS_REGION", "us-east-1".to_owned()),
    ];
    let host = LambdaHost::start(&env, 1).await;
    let remote = host.catalog().await;
    host.detach(dir);
    Arc::new(remote)
}
