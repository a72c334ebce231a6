//! Every test belongs to a tier (`tiers.txt`): this binary lists its own tests
//! (`--list`) and fails on any test that no line of `tiers.txt` takes, and on any line that
//! takes no test.
//!
//! `tiers.txt` holds `fast PATTERN` and `full PATTERN` lines; a pattern is a substring of a
//! test's path, as libtest filters match. A test is in the whole suite only if a `full`
//! pattern matches it, else in the fast tier if a `fast` pattern does. `scripts/test.sh
//! --fast` runs `cargo test --test it -- FAST... --skip FULL...` from the same file.

use std::process::Command;

/// The tier file, next to `main.rs`.
pub const TIERS: &str = include_str!("tiers.txt");

/// `(fast patterns, full patterns)` of the tier file.
fn patterns() -> (Vec<&'static str>, Vec<&'static str>) {
    let (mut fast, mut full) = (Vec::new(), Vec::new());
    for line in TIERS.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        match line.split_once(' ') {
            Some(("fast", pattern)) => fast.push(pattern.trim()),
            Some(("full", pattern)) => full.push(pattern.trim()),
            _ => panic!("tiers.txt: `{line}` is neither `fast PATTERN` nor `full PATTERN`"),
        }
    }
    (fast, full)
}

#[test]
fn every_test_belongs_to_a_tier() {
    let exe = std::env::current_exe().expect("the test binary");
    let output = Command::new(exe)
        .args(["--list", "--format", "terse"])
        .output()
        .expect("list the tests");
    assert!(output.status.success(), "--list failed: {output:?}");
    let listing = String::from_utf8(output.stdout).expect("utf-8");
    let tests: Vec<&str> = listing
        .lines()
        .filter_map(|line| line.strip_suffix(": test"))
        .collect();
    assert!(tests.len() > 100, "too few tests listed: {}", tests.len());
    let (fast, full) = patterns();
    let neither: Vec<&str> = tests
        .iter()
        .copied()
        .filter(|test| !fast.iter().chain(&full).any(|p| test.contains(p)))
        .collect();
    assert!(
        neither.is_empty(),
        "tests in neither tier (add their module to tests/it/tiers.txt): {neither:#?}"
    );
    let unused: Vec<&str> = fast
        .iter()
        .chain(&full)
        .copied()
        .filter(|p| !tests.iter().any(|test| test.contains(p)))
        .collect();
    assert!(
        unused.is_empty(),
        "tiers.txt lines that take no test: {unused:?}"
    );
}
