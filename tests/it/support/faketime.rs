//! Running a command at a fake time: libfaketime preloaded into it (Debian: `apt-get
//! install faketime`, which `scripts/test.sh` installs).
//!
//! The library is preloaded directly, not through the `faketime` wrapper: the wrapper
//! opens a named semaphore and a shared-memory segment per process id
//! (`/faketime_sem_<pid>`), which a wrapper killed before its clean-up leaves behind, and a
//! later wrapper that gets the same process id fails with `sem_open: File exists` (seen in
//! a CI run of `cli::restore_drill`).

use std::path::PathBuf;
use std::process::Command;

/// Where Debian's package puts the library, per architecture.
const CANDIDATES: [&str; 3] = [
    "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
    "/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1",
    "/usr/lib/faketime/libfaketime.so.1",
];

/// The libfaketime library, or a panic that says how to install it.
pub fn library() -> PathBuf {
    CANDIDATES
        .iter()
        .map(PathBuf::from)
        .find(|path| path.is_file())
        .unwrap_or_else(|| {
            panic!(
                "libfaketime is needed (Debian: apt-get install faketime); looked at {CANDIDATES:?}"
            )
        })
}

/// `command` at `offset` from now (`+172800s`, `+2d`: libfaketime's `FAKETIME` syntax),
/// with the monotonic clock left real.
pub fn at<'a>(command: &'a mut Command, offset: &str) -> &'a mut Command {
    command
        .env("LD_PRELOAD", library())
        .env("FAKETIME", offset)
        .env("FAKETIME_DONT_FAKE_MONOTONIC", "1")
}

/// Fails unless a preloaded command really sees the fake time (a library that is present
/// but not applied would let a time-travel test run at the real time).
pub fn check() {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_secs();
    let output = at(Command::new("date").arg("+%s"), "+100000s")
        .output()
        .expect("date runs");
    let seen: u64 = String::from_utf8_lossy(&output.stdout)
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("date under libfaketime: {output:?}"));
    assert!(
        seen >= now + 99_000,
        "libfaketime did not move the clock: real {now}, seen {seen} ({output:?})"
    );
}
