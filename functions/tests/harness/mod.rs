//! A Lambda Runtime API on 127.0.0.1 and the function processes that poll it.
//!
//! [`RuntimeApi`] is a small HTTP/1.1 server (keep-alive, `Content-Length` and chunked
//! bodies) implementing the endpoints a custom runtime uses: `GET
//! /2018-06-01/runtime/invocation/next` (answered with the event and the
//! `Lambda-Runtime-*` headers), `POST .../invocation/{id}/response`, `POST
//! .../invocation/{id}/error` and `POST /2018-06-01/runtime/init/error`. [`Function`]
//! starts one compiled function binary against its own Runtime API, feeds it events and
//! collects its stdout (metric lines) and stderr (log lines).
//!
//! Like Lambda, the API gives every invocation a deadline (`Lambda-Runtime-Deadline-Ms`,
//! [`DEFAULT_DEADLINE`] from when the event is handed out, or
//! [`RuntimeApi::set_deadline`]) and turns an answer that comes after it into the error
//! `Sandbox.Timedout`: a test sees whether a function answered in time by the answer's
//! type, without timing anything itself.
#![allow(clippy::disallowed_methods)] // tests may read the wall clock and draw random ids (unique names)
#![allow(dead_code)]

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::process::{Child, Command};
use tokio::sync::{Notify, mpsc, oneshot};

/// Extra environment of a function: `(name, Some(value))` sets, `(name, None)` removes.
pub type Env = Vec<(String, Option<String>)>;

/// How long any single wait in the harness may take before the test fails.
pub const TIMEOUT: Duration = Duration::from_secs(60);

/// The deadline of an invocation, from when its event is handed out (unless set).
pub const DEFAULT_DEADLINE: Duration = Duration::from_secs(60);

/// The `errorType` of an answer that came after the invocation's deadline (as Lambda
/// reports a function that did not answer in time).
pub const TIMED_OUT: &str = "Sandbox.Timedout";

/// What a function answered to one invocation (or to its initialisation).
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// `POST .../response` with this JSON body.
    Response(Value),
    /// `POST .../error` or `/init/error`.
    Error {
        /// `errorType` of the body.
        error_type: String,
        /// `errorMessage` of the body.
        error_message: String,
        /// The `Lambda-Runtime-Function-Error-Type` header.
        header: Option<String>,
    },
}

impl Outcome {
    /// The response body; panics with the error otherwise.
    pub fn response(self) -> Value {
        match self {
            Outcome::Response(value) => value,
            Outcome::Error {
                error_type,
                error_message,
                ..
            } => {
                panic!("expected a response, got {error_type}: {error_message}")
            }
        }
    }

    /// The `errorType`; panics with the response otherwise.
    pub fn error_type(&self) -> &str {
        match self {
            Outcome::Error { error_type, .. } => error_type,
            Outcome::Response(value) => panic!("expected an error, got {value}"),
        }
    }

    /// The `errorMessage`; panics with the response otherwise.
    pub fn error_message(&self) -> &str {
        match self {
            Outcome::Error { error_message, .. } => error_message,
            Outcome::Response(value) => panic!("expected an error, got {value}"),
        }
    }
}

struct Invocation {
    id: String,
    body: Vec<u8>,
}

struct State {
    function_name: String,
    queue: tokio::sync::Mutex<mpsc::UnboundedReceiver<Invocation>>,
    waiting: Mutex<HashMap<String, oneshot::Sender<Outcome>>>,
    /// The deadline of every invocation handed out and not answered yet.
    deadlines: Mutex<HashMap<String, Instant>>,
    deadline: Mutex<Duration>,
    init_error: Mutex<Option<Outcome>>,
    init_error_posted: Notify,
    first_poll: Mutex<Option<Instant>>,
    polls: AtomicUsize,
}

/// A Lambda Runtime API for one function process.
pub struct RuntimeApi {
    addr: SocketAddr,
    events: mpsc::UnboundedSender<Invocation>,
    state: Arc<State>,
    next_id: AtomicUsize,
    server: tokio::task::JoinHandle<()>,
}

impl RuntimeApi {
    /// Serve on a free port of 127.0.0.1.
    pub async fn start(function_name: &str) -> RuntimeApi {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind 127.0.0.1:0");
        let addr = listener.local_addr().expect("local address");
        let (events, queue) = mpsc::unbounded_channel();
        let state = Arc::new(State {
            function_name: function_name.to_owned(),
            queue: tokio::sync::Mutex::new(queue),
            waiting: Mutex::new(HashMap::new()),
            deadlines: Mutex::new(HashMap::new()),
            deadline: Mutex::new(DEFAULT_DEADLINE),
            init_error: Mutex::new(None),
            init_error_posted: Notify::new(),
            first_poll: Mutex::new(None),
            polls: AtomicUsize::new(0),
        });
        let server_state = state.clone();
        let server = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(serve_connection(stream, server_state.clone()));
            }
        });
        RuntimeApi {
            addr,
            events,
            state,
            next_id: AtomicUsize::new(0),
            server,
        }
    }

    /// `host:port`, the value of `AWS_LAMBDA_RUNTIME_API`.
    pub fn address(&self) -> String {
        self.addr.to_string()
    }

    /// Queue an event; the receiver yields the function's answer.
    fn enqueue(&self, body: Vec<u8>) -> (String, oneshot::Receiver<Outcome>) {
        let n = self.next_id.fetch_add(1, Ordering::SeqCst);
        let id = format!("req-{n:04}-{}", uuid::Uuid::new_v4().simple());
        let (sender, receiver) = oneshot::channel();
        self.state
            .waiting
            .lock()
            .expect("lock")
            .insert(id.clone(), sender);
        self.events
            .send(Invocation {
                id: id.clone(),
                body,
            })
            .expect("the server is running");
        (id, receiver)
    }

    /// Give the invocations handed out from now on `deadline` (from when each is handed
    /// out) instead of [`DEFAULT_DEADLINE`].
    pub fn set_deadline(&self, deadline: Duration) {
        *self.state.deadline.lock().expect("lock") = deadline;
    }

    /// When the function first asked for an event.
    pub fn first_poll(&self) -> Option<Instant> {
        *self.state.first_poll.lock().expect("lock")
    }

    /// How many times the function asked for an event.
    pub fn polls(&self) -> usize {
        self.state.polls.load(Ordering::SeqCst)
    }

    /// The init error, if one was posted.
    pub fn init_error(&self) -> Option<Outcome> {
        self.state.init_error.lock().expect("lock").clone()
    }
}

impl Drop for RuntimeApi {
    fn drop(&mut self) {
        self.server.abort();
    }
}

struct Request {
    method: String,
    path: String,
    headers: HashMap<String, String>,
    body: Vec<u8>,
}

async fn serve_connection(stream: TcpStream, state: Arc<State>) {
    let (read, mut write) = stream.into_split();
    let mut reader = BufReader::new(read);
    loop {
        let request = match read_request(&mut reader).await {
            Ok(Some(request)) => request,
            Ok(None) | Err(_) => return,
        };
        let close = request
            .headers
            .get("connection")
            .is_some_and(|value| value.eq_ignore_ascii_case("close"));
        let response = route(request, &state).await;
        if write.write_all(&response).await.is_err() || close {
            return;
        }
    }
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
                // Trailers, then the empty line.
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

fn accepted() -> Vec<u8> {
    http_response(
        "202 Accepted",
        &[("Content-Type", "application/json".to_owned())],
        br#"{"status":"OK"}"#,
    )
}

fn error_outcome(request: &Request) -> Outcome {
    let body: Value = serde_json::from_slice(&request.body).unwrap_or(Value::Null);
    Outcome::Error {
        error_type: body["errorType"].as_str().unwrap_or_default().to_owned(),
        error_message: body["errorMessage"].as_str().unwrap_or_default().to_owned(),
        header: request
            .headers
            .get("lambda-runtime-function-error-type")
            .cloned(),
    }
}

async fn route(request: Request, state: &State) -> Vec<u8> {
    const PREFIX: &str = "/2018-06-01/runtime/";
    let Some(path) = request.path.strip_prefix(PREFIX) else {
        return http_response("404 Not Found", &[], b"");
    };
    match (request.method.as_str(), path) {
        ("GET", "invocation/next") => {
            state.polls.fetch_add(1, Ordering::SeqCst);
            state
                .first_poll
                .lock()
                .expect("lock")
                .get_or_insert_with(Instant::now);
            let Some(invocation) = state.queue.lock().await.recv().await else {
                return http_response("500 Internal Server Error", &[], b"");
            };
            let deadline = *state.deadline.lock().expect("lock");
            state
                .deadlines
                .lock()
                .expect("lock")
                .insert(invocation.id.clone(), Instant::now() + deadline);
            let now_ms = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |elapsed| elapsed.as_millis());
            let arn = format!(
                "arn:aws:lambda:us-east-1:123456789012:function:{}",
                state.function_name
            );
            http_response(
                "200 OK",
                &[
                    ("Content-Type", "application/json".to_owned()),
                    ("Lambda-Runtime-Aws-Request-Id", invocation.id.clone()),
                    (
                        "Lambda-Runtime-Deadline-Ms",
                        (now_ms + deadline.as_millis()).to_string(),
                    ),
                    ("Lambda-Runtime-Invoked-Function-Arn", arn),
                    (
                        "Lambda-Runtime-Trace-Id",
                        format!("Root=1-00000000-{};Sampled=0", &invocation.id[9..33]),
                    ),
                ],
                &invocation.body,
            )
        }
        ("POST", "init/error") => {
            *state.init_error.lock().expect("lock") = Some(error_outcome(&request));
            state.init_error_posted.notify_waiters();
            accepted()
        }
        ("POST", path) => {
            let Some(rest) = path.strip_prefix("invocation/") else {
                return http_response("404 Not Found", &[], b"");
            };
            let (id, outcome) = if let Some(id) = rest.strip_suffix("/response") {
                let body = serde_json::from_slice(&request.body)
                    .unwrap_or_else(|err| Value::String(format!("<response is not JSON: {err}>")));
                (id, Outcome::Response(body))
            } else if let Some(id) = rest.strip_suffix("/error") {
                (id, error_outcome(&request))
            } else {
                return http_response("404 Not Found", &[], b"");
            };
            let deadline = state.deadlines.lock().expect("lock").remove(id);
            let outcome = match deadline {
                Some(deadline) if Instant::now() > deadline => Outcome::Error {
                    error_type: TIMED_OUT.to_owned(),
                    error_message: format!("the answer came after the deadline: {outcome:?}"),
                    header: None,
                },
                _ => outcome,
            };
            match state.waiting.lock().expect("lock").remove(id) {
                Some(sender) => {
                    let _ = sender.send(outcome);
                    accepted()
                }
                None => http_response("400 Bad Request", &[], b"unknown request id"),
            }
        }
        _ => http_response("404 Not Found", &[], b""),
    }
}

/// The path of a function binary: this build's, or the one in `PARQDB_FUNCTIONS_BIN_DIR`
/// (e.g. `target/release`, to measure release binaries).
pub fn binary(name: &str) -> PathBuf {
    if let Ok(dir) = std::env::var("PARQDB_FUNCTIONS_BIN_DIR") {
        return PathBuf::from(dir).join(name);
    }
    PathBuf::from(match name {
        "load" => env!("CARGO_BIN_EXE_load"),
        "register" => env!("CARGO_BIN_EXE_register"),
        "commit" => env!("CARGO_BIN_EXE_commit"),
        "drop" => env!("CARGO_BIN_EXE_drop"),
        "rename" => env!("CARGO_BIN_EXE_rename"),
        "list" => env!("CARGO_BIN_EXE_list"),
        "namespace" => env!("CARGO_BIN_EXE_namespace"),
        "publish" => env!("CARGO_BIN_EXE_publish"),
        "gc" => env!("CARGO_BIN_EXE_gc"),
        "refresh" => env!("CARGO_BIN_EXE_refresh"),
        other => panic!("no function binary `{other}`"),
    })
}

/// Lines a child writes, collected as they arrive.
#[derive(Clone, Default)]
pub struct Lines(Arc<Mutex<Vec<String>>>);

impl Lines {
    fn collect(&self, stream: impl AsyncRead + Unpin + Send + 'static) {
        let lines = self.0.clone();
        tokio::spawn(async move {
            let mut reader = BufReader::new(stream).lines();
            while let Ok(Some(line)) = reader.next_line().await {
                lines.lock().expect("lock").push(line);
            }
        });
    }

    /// A copy of the lines so far.
    pub fn snapshot(&self) -> Vec<String> {
        self.0.lock().expect("lock").clone()
    }

    /// Wait (bounded) until `done` holds for the lines; returns them.
    pub async fn wait_until(&self, done: impl Fn(&[String]) -> bool) -> Vec<String> {
        let deadline = Instant::now() + TIMEOUT;
        loop {
            let lines = self.snapshot();
            if done(&lines) {
                return lines;
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting for output; got {lines:#?}"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

/// One running function process and its Runtime API.
pub struct Function {
    /// The binary's name (`load`, `commit`, ...).
    pub name: String,
    /// The Runtime API it polls.
    pub api: RuntimeApi,
    /// Its stdout lines (EMF metrics).
    pub stdout: Lines,
    /// Its stderr lines (JSON logs).
    pub stderr: Lines,
    /// When the process was spawned.
    pub spawned: Instant,
    child: Child,
}

impl Function {
    /// Start the binary `name` with the standard Lambda variables plus `env`
    /// (`(name, None)` removes a variable).
    pub async fn start(name: &str, env: &[(String, Option<String>)]) -> Function {
        let api = RuntimeApi::start(name).await;
        let mut command = Command::new(binary(name));
        command
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("AWS_LAMBDA_RUNTIME_API", api.address())
            .env("AWS_LAMBDA_FUNCTION_NAME", format!("parqdb-catalog-{name}"))
            .env("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "256")
            .env("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST")
            .env("AWS_LAMBDA_LOG_STREAM_NAME", "test-stream")
            .env(
                "AWS_LAMBDA_LOG_GROUP_NAME",
                format!("/aws/lambda/parqdb-catalog-{name}"),
            )
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        for (key, value) in env {
            match value {
                Some(value) => command.env(key, value),
                None => command.env_remove(key),
            };
        }
        let spawned = Instant::now();
        let mut child = command
            .spawn()
            .unwrap_or_else(|err| panic!("cannot start {}: {err}", binary(name).display()));
        let stdout = Lines::default();
        let stderr = Lines::default();
        stdout.collect(child.stdout.take().expect("piped stdout"));
        stderr.collect(child.stderr.take().expect("piped stderr"));
        Function {
            name: name.to_owned(),
            api,
            stdout,
            stderr,
            spawned,
            child,
        }
    }

    /// Invoke with a JSON event.
    pub async fn invoke(&mut self, event: &Value) -> Outcome {
        self.invoke_raw(event.to_string().into_bytes()).await.1
    }

    /// Invoke with raw body bytes; returns the request id and the answer. Fails the test
    /// if the process exits or does not answer in time.
    pub async fn invoke_raw(&mut self, body: Vec<u8>) -> (String, Outcome) {
        let (id, answer) = self.api.enqueue(body);
        tokio::select! {
            answer = answer => (id, answer.expect("the server keeps the sender")),
            status = self.child.wait() => panic!(
                "{} exited ({status:?}) during invocation {id}; stderr: {:#?}",
                self.name,
                self.stderr.snapshot()
            ),
            () = tokio::time::sleep(TIMEOUT) => panic!(
                "{} did not answer invocation {id}; stderr: {:#?}",
                self.name,
                self.stderr.snapshot()
            ),
        }
    }

    /// Wait (bounded) for the first poll; the time from spawn to it.
    pub async fn time_to_first_poll(&mut self) -> Duration {
        let deadline = Instant::now() + TIMEOUT;
        loop {
            if let Some(polled) = self.api.first_poll() {
                return polled - self.spawned;
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!(
                    "{} exited ({status}) before polling; stderr: {:#?}",
                    self.name,
                    self.stderr.snapshot()
                );
            }
            assert!(Instant::now() < deadline, "{} never polled", self.name);
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    /// Wait (bounded) for the process to exit.
    pub async fn exit_status(&mut self) -> ExitStatus {
        tokio::time::timeout(TIMEOUT, self.child.wait())
            .await
            .unwrap_or_else(|_| panic!("{} did not exit", self.name))
            .expect("exit status")
    }

    /// Whether the process is still running.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}
