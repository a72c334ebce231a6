//! The one scale knob of the integration tests: `PARQDB_TEST_SCALE=quick|full` (default
//! `full`, what `scripts/test.sh` runs; `scripts/test.sh --fast` sets `quick`). It only
//! changes defaults: a test's own variable (`PARQDB_GC_SIM_HISTORIES`,
//! `PARQDB_FUZZ_ITERATIONS`, ...) always wins.

/// How much work the randomised and exhaustive tests do by default.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scale {
    /// The fast tier: enough to catch a regression while developing.
    Quick,
    /// The whole suite.
    Full,
}

/// The scale of this run (`PARQDB_TEST_SCALE`); any other value fails the test.
pub fn scale() -> Scale {
    match std::env::var("PARQDB_TEST_SCALE").as_deref() {
        Err(_) | Ok("") | Ok("full") => Scale::Full,
        Ok("quick") => Scale::Quick,
        Ok(other) => panic!("PARQDB_TEST_SCALE={other}: expected `quick` or `full`"),
    }
}

/// `full` at the full scale, `quick` at the quick one.
pub fn by_scale<T>(full: T, quick: T) -> T {
    match scale() {
        Scale::Full => full,
        Scale::Quick => quick,
    }
}

/// The number in the variable `name`, else the scale's default.
pub fn knob(name: &str, full: u64, quick: u64) -> u64 {
    match std::env::var(name) {
        Ok(text) if !text.trim().is_empty() => text
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name}={text}: expected a non-negative integer")),
        _ => by_scale(full, quick),
    }
}
