//! The Runtime API of one function, for one or more processes ("slots") that take its
//! invocations from one queue.
//!
//! Each slot has its own port (so the API knows which process took an invocation) and
//! serves the endpoints a custom runtime uses: `GET /2018-06-01/runtime/invocation/next`
//! (answered with the event and the `Lambda-Runtime-*` headers), `POST
//! .../invocation/{id}/response`, `POST .../invocation/{id}/error` and `POST
//! /2018-06-01/runtime/init/error`.
//!
//! Like Lambda, the API gives every invocation a deadline (`Lambda-Runtime-Deadline-Ms`,
//! [`DEFAULT_DEADLINE`] from when the event is handed out, or
//! [`RuntimeApi::set_deadline`]) and turns an answer that comes after it into the error
//! [`TIMED_OUT`]: a test sees whether a function answered in time by the answer's type,
//! without timing anything itself.

use std::collections::HashMap;
use std::fmt;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot};

use super::http;

/// The deadline of an invocation, from when its event is handed out (unless set).
pub const DEFAULT_DEADLINE: Duration = Duration::from_secs(60);

/// The `errorType` of an answer that came after the invocation's deadline (as Lambda
/// reports a function that did not answer in time).
pub const TIMED_OUT: &str = "Sandbox.Timedout";

/// What a function posted for one invocation (or for its initialisation), as it sent it.
#[derive(Clone, PartialEq, Eq)]
pub enum Answer {
    /// `POST .../response` with this body.
    Response(Vec<u8>),
    /// `POST .../error` or `/init/error`.
    Error {
        /// The body (`errorType`, `errorMessage`).
        body: Vec<u8>,
        /// The `Lambda-Runtime-Function-Error-Type` header.
        header: Option<String>,
    },
}

impl Answer {
    /// An error answer with this `errorType` and `errorMessage` (and no header).
    pub fn error(error_type: &str, message: &str) -> Answer {
        let body = serde_json::json!({"errorType": error_type, "errorMessage": message});
        Answer::Error {
            body: body.to_string().into_bytes(),
            header: None,
        }
    }
}

impl fmt::Debug for Answer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Answer::Response(body) => write!(f, "Response({})", String::from_utf8_lossy(body)),
            Answer::Error { body, header } => write!(
                f,
                "Error({}, header {header:?})",
                String::from_utf8_lossy(body)
            ),
        }
    }
}

/// An [`Answer`], parsed.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// A response with this JSON body (a body that is not JSON becomes a string saying so).
    Response(Value),
    /// An error.
    Error {
        /// `errorType` of the body.
        error_type: String,
        /// `errorMessage` of the body.
        error_message: String,
        /// The `Lambda-Runtime-Function-Error-Type` header.
        header: Option<String>,
    },
}

impl From<Answer> for Outcome {
    fn from(answer: Answer) -> Outcome {
        match answer {
            Answer::Response(body) => Outcome::Response(
                serde_json::from_slice(&body)
                    .unwrap_or_else(|err| Value::String(format!("<response is not JSON: {err}>"))),
            ),
            Answer::Error { body, header } => {
                let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                Outcome::Error {
                    error_type: body["errorType"].as_str().unwrap_or_default().to_owned(),
                    error_message: body["errorMessage"].as_str().unwrap_or_default().to_owned(),
                    header,
                }
            }
        }
    }
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

/// An invocation waiting in the queue.
struct Invocation {
    id: String,
    body: Vec<u8>,
    answer: oneshot::Sender<Answer>,
}

/// An invocation a process took and has not answered yet.
struct InFlight {
    answer: oneshot::Sender<Answer>,
    slot: usize,
    deadline: Instant,
}

struct State {
    function_name: String,
    queue: tokio::sync::Mutex<mpsc::UnboundedReceiver<Invocation>>,
    in_flight: Mutex<HashMap<String, InFlight>>,
    deadline: Mutex<Duration>,
    init_error: Mutex<Option<Answer>>,
    first_poll: Mutex<Option<Instant>>,
    polls: AtomicUsize,
    /// Per slot: whether its process asked for an event since the last `take_polled`.
    polled: Vec<AtomicBool>,
    /// Invocations handed to a process.
    runs: AtomicUsize,
}

/// See the module docs.
pub struct RuntimeApi {
    state: Arc<State>,
    events: mpsc::UnboundedSender<Invocation>,
    addresses: Vec<SocketAddr>,
    servers: Vec<tokio::task::JoinHandle<()>>,
    next_id: AtomicUsize,
}

impl RuntimeApi {
    /// Serve `function_name` (the function of the ARN) to `slots` processes, each on a
    /// free port of 127.0.0.1.
    pub async fn start(function_name: &str, slots: usize) -> RuntimeApi {
        let (events, queue) = mpsc::unbounded_channel();
        let state = Arc::new(State {
            function_name: function_name.to_owned(),
            queue: tokio::sync::Mutex::new(queue),
            in_flight: Mutex::new(HashMap::new()),
            deadline: Mutex::new(DEFAULT_DEADLINE),
            init_error: Mutex::new(None),
            first_poll: Mutex::new(None),
            polls: AtomicUsize::new(0),
            polled: (0..slots).map(|_| AtomicBool::new(false)).collect(),
            runs: AtomicUsize::new(0),
        });
        let mut addresses = Vec::new();
        let mut servers = Vec::new();
        for slot in 0..slots {
            let listener = TcpListener::bind("127.0.0.1:0")
                .await
                .expect("bind 127.0.0.1:0");
            addresses.push(listener.local_addr().expect("local address"));
            let state = state.clone();
            servers.push(tokio::spawn(async move {
                while let Ok((stream, _)) = listener.accept().await {
                    tokio::spawn(serve_connection(stream, state.clone(), slot));
                }
            }));
        }
        RuntimeApi {
            state,
            events,
            addresses,
            servers,
            next_id: AtomicUsize::new(0),
        }
    }

    /// `host:port` of `slot`, the value of its process's `AWS_LAMBDA_RUNTIME_API`.
    pub fn address(&self, slot: usize) -> String {
        self.addresses[slot].to_string()
    }

    /// Queue an event; returns the invocation's request id and a receiver of its answer.
    pub fn enqueue(&self, body: Vec<u8>) -> (String, oneshot::Receiver<Answer>) {
        let n = self.next_id.fetch_add(1, Ordering::SeqCst);
        let id = format!(
            "{:08x}-{n:08}-{}",
            std::process::id(),
            uuid::Uuid::new_v4().simple()
        );
        let (answer, receiver) = oneshot::channel();
        self.events
            .send(Invocation {
                id: id.clone(),
                body,
                answer,
            })
            .expect("the API is running");
        (id, receiver)
    }

    /// Stop waiting for the answer of invocation `id` (an answer that still comes is
    /// refused as one to an unknown request).
    pub fn forget(&self, id: &str) {
        self.state.in_flight.lock().expect("lock").remove(id);
    }

    /// Give the invocations handed out from now on `deadline` (from when each is handed
    /// out) instead of [`DEFAULT_DEADLINE`].
    pub fn set_deadline(&self, deadline: Duration) {
        *self.state.deadline.lock().expect("lock") = deadline;
    }

    /// When a process first asked for an event.
    pub fn first_poll(&self) -> Option<Instant> {
        *self.state.first_poll.lock().expect("lock")
    }

    /// How many times the processes asked for an event.
    pub fn polls(&self) -> usize {
        self.state.polls.load(Ordering::SeqCst)
    }

    /// How many invocations were handed to a process.
    pub fn runs(&self) -> usize {
        self.state.runs.load(Ordering::SeqCst)
    }

    /// The init error, if one was posted.
    pub fn init_error(&self) -> Option<Outcome> {
        self.init_answer().map(Outcome::from)
    }

    /// The init error as it was posted.
    pub(crate) fn init_answer(&self) -> Option<Answer> {
        self.state.init_error.lock().expect("lock").clone()
    }

    /// Whether the process of `slot` asked for an event since the last call.
    pub(crate) fn take_polled(&self, slot: usize) -> bool {
        self.state.polled[slot].swap(false, Ordering::SeqCst)
    }

    /// The process of `slot` exited: answer what it had taken with `answer`.
    pub(crate) fn exited(&self, slot: usize, answer: &Answer) {
        let taken: Vec<InFlight> = {
            let mut in_flight = self.state.in_flight.lock().expect("lock");
            let ids: Vec<String> = in_flight
                .iter()
                .filter(|(_, taken)| taken.slot == slot)
                .map(|(id, _)| id.clone())
                .collect();
            ids.iter().filter_map(|id| in_flight.remove(id)).collect()
        };
        for taken in taken {
            let _ = taken.answer.send(answer.clone());
        }
    }
}

impl Drop for RuntimeApi {
    fn drop(&mut self) {
        for server in &self.servers {
            server.abort();
        }
    }
}

async fn serve_connection(stream: TcpStream, state: Arc<State>, slot: usize) {
    let (read, mut write) = stream.into_split();
    let mut reader = BufReader::new(read);
    while let Ok(Some(request)) = http::read_request(&mut reader).await {
        let close = request
            .headers
            .get("connection")
            .is_some_and(|value| value.eq_ignore_ascii_case("close"));
        let path = request.path.strip_prefix("/2018-06-01/runtime/");
        let response = match (request.method.as_str(), path) {
            ("GET", Some("invocation/next")) => {
                state.polls.fetch_add(1, Ordering::SeqCst);
                state
                    .first_poll
                    .lock()
                    .expect("lock")
                    .get_or_insert_with(Instant::now);
                state.polled[slot].store(true, Ordering::SeqCst);
                // Wait for an invocation, unless the process goes away first.
                let invocation = tokio::select! {
                    invocation = async { state.queue.lock().await.recv().await } => invocation,
                    _ = reader.fill_buf() => return,
                };
                let Some(invocation) = invocation else {
                    return;
                };
                hand_out(&state, slot, invocation)
            }
            ("POST", Some("init/error")) => {
                *state.init_error.lock().expect("lock") = Some(Answer::Error {
                    body: request.body,
                    header: error_type_header(&request.headers),
                });
                http::accepted()
            }
            ("POST", Some(path)) => answer(&state, path, request.body, &request.headers),
            _ => http::not_found(),
        };
        if write.write_all(&response).await.is_err() || close {
            return;
        }
    }
}

fn error_type_header(headers: &HashMap<String, String>) -> Option<String> {
    headers.get("lambda-runtime-function-error-type").cloned()
}

/// The `GET .../invocation/next` response for `invocation`, now in flight on `slot`.
fn hand_out(state: &State, slot: usize, invocation: Invocation) -> Vec<u8> {
    state.runs.fetch_add(1, Ordering::SeqCst);
    let deadline = *state.deadline.lock().expect("lock");
    state.in_flight.lock().expect("lock").insert(
        invocation.id.clone(),
        InFlight {
            answer: invocation.answer,
            slot,
            deadline: Instant::now() + deadline,
        },
    );
    let deadline_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_millis())
        + deadline.as_millis();
    let arn = format!(
        "arn:aws:lambda:us-east-1:123456789012:function:{}",
        state.function_name
    );
    // The id ends with a UUID's 32 hex digits; a trace id takes 24.
    let trace = &invocation.id[invocation.id.len() - 32..][..24];
    http::response(
        "200 OK",
        &[
            ("Content-Type", "application/json".to_owned()),
            ("Lambda-Runtime-Aws-Request-Id", invocation.id.clone()),
            ("Lambda-Runtime-Deadline-Ms", deadline_ms.to_string()),
            ("Lambda-Runtime-Invoked-Function-Arn", arn),
            (
                "Lambda-Runtime-Trace-Id",
                format!("Root=1-00000000-{trace};Sampled=0"),
            ),
        ],
        &invocation.body,
    )
}

/// `POST invocation/{id}/response` or `.../error`: hand the answer to whoever waits.
fn answer(state: &State, path: &str, body: Vec<u8>, headers: &HashMap<String, String>) -> Vec<u8> {
    let Some(rest) = path.strip_prefix("invocation/") else {
        return http::not_found();
    };
    let (id, answer) = if let Some(id) = rest.strip_suffix("/response") {
        (id, Answer::Response(body))
    } else if let Some(id) = rest.strip_suffix("/error") {
        let header = error_type_header(headers);
        (id, Answer::Error { body, header })
    } else {
        return http::not_found();
    };
    let Some(taken) = state.in_flight.lock().expect("lock").remove(id) else {
        return http::response("400 Bad Request", &[], b"unknown request id");
    };
    let answer = if Instant::now() > taken.deadline {
        Answer::error(
            TIMED_OUT,
            &format!("the answer came after the deadline: {answer:?}"),
        )
    } else {
        answer
    };
    let _ = taken.answer.send(answer);
    http::accepted()
}
