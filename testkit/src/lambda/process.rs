//! Function processes: where the binaries are, how Lambda starts them, and [`Function`],
//! one process against its own [`RuntimeApi`].

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::process::{Child, Command};

use super::runtime::{Outcome, RuntimeApi};

/// Extra environment of a function: `(name, Some(value))` sets, `(name, None)` removes.
pub type Env = Vec<(String, Option<String>)>;

/// How long any single wait of a [`Function`] may take before the test fails.
pub const TIMEOUT: Duration = Duration::from_secs(60);

/// The catalog's function binaries: `PARQDB_FUNCTIONS_BIN_DIR` (e.g. `target/release`, to
/// measure release binaries), else the directory of this build's binaries (the test
/// executable is in its `deps/`).
pub fn functions_bin_dir() -> PathBuf {
    if let Ok(dir) = std::env::var("PARQDB_FUNCTIONS_BIN_DIR") {
        return PathBuf::from(dir);
    }
    let exe = std::env::current_exe().expect("test executable path");
    let deps = exe.parent().expect("deps directory");
    deps.parent().expect("profile directory").to_path_buf()
}

/// The path of the function binary `name` (`load`, `gc`, ...) in [`functions_bin_dir`].
pub fn binary(name: &str) -> PathBuf {
    let path = functions_bin_dir().join(name);
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
/// binary: `cargo test --workspace` rebuilds the binaries, `cargo test --test X` of the
/// library's tests does not.
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
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace root");
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

/// Lines a child writes, collected as they arrive (all of them, or the last few).
#[derive(Clone, Default)]
pub struct Lines {
    lines: Arc<Mutex<VecDeque<String>>>,
    keep: Option<usize>,
}

impl Lines {
    /// Lines that keep only the last `keep`.
    pub(crate) fn last(keep: usize) -> Lines {
        Lines {
            lines: Arc::default(),
            keep: Some(keep),
        }
    }

    fn collect(&self, stream: impl AsyncRead + Unpin + Send + 'static) {
        let this = self.clone();
        tokio::spawn(async move {
            let mut reader = BufReader::new(stream).lines();
            while let Ok(Some(line)) = reader.next_line().await {
                let mut lines = this.lines.lock().expect("lock");
                if this.keep == Some(lines.len()) {
                    lines.pop_front();
                }
                lines.push_back(line);
            }
        });
    }

    /// A copy of the lines so far.
    pub fn snapshot(&self) -> Vec<String> {
        self.lines.lock().expect("lock").iter().cloned().collect()
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

    /// Wait (bounded) until at least `count` lines contain `needle`; returns the lines.
    pub async fn wait_for_count(&self, needle: &str, count: usize) -> Vec<String> {
        self.wait_until(|lines| lines.iter().filter(|line| line.contains(needle)).count() >= count)
            .await
    }
}

/// A function process as Lambda starts one.
pub(crate) struct Process {
    pub(crate) child: Child,
    pub(crate) stdout: Lines,
    pub(crate) stderr: Lines,
}

impl Process {
    /// Start `binary` as `function_name` against the Runtime API at `runtime_api`, with
    /// the variables Lambda sets (only those, and `PATH`) plus `env`; its output goes to
    /// `stdout` and `stderr`.
    pub(crate) fn spawn(
        binary: &Path,
        function_name: &str,
        log_stream: &str,
        runtime_api: &str,
        env: &[(String, Option<String>)],
        (stdout, stderr): (Lines, Lines),
    ) -> Process {
        let mut command = Command::new(binary);
        command
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("AWS_LAMBDA_RUNTIME_API", runtime_api)
            .env("AWS_LAMBDA_FUNCTION_NAME", function_name)
            .env("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "256")
            .env("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST")
            .env("AWS_LAMBDA_LOG_STREAM_NAME", log_stream)
            .env(
                "AWS_LAMBDA_LOG_GROUP_NAME",
                format!("/aws/lambda/{function_name}"),
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
        let mut child = command
            .spawn()
            .unwrap_or_else(|err| panic!("cannot start {}: {err}", binary.display()));
        stdout.collect(child.stdout.take().expect("piped stdout"));
        stderr.collect(child.stderr.take().expect("piped stderr"));
        Process {
            child,
            stdout,
            stderr,
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
    /// Start the binary `name` as `parqdb-catalog-{name}` with the standard Lambda
    /// variables plus `env` (`(name, None)` removes a variable).
    pub async fn start(name: &str, env: &[(String, Option<String>)]) -> Function {
        let function_name = format!("parqdb-catalog-{name}");
        let api = RuntimeApi::start(&function_name, 1).await;
        let spawned = Instant::now();
        let process = Process::spawn(
            &binary(name),
            &function_name,
            "test-stream",
            &api.address(0),
            env,
            (Lines::default(), Lines::default()),
        );
        Function {
            name: name.to_owned(),
            api,
            stdout: process.stdout,
            stderr: process.stderr,
            spawned,
            child: process.child,
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
            answer = answer => (id, answer.expect("the API keeps the sender").into()),
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
