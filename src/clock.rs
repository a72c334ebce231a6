//! Injected time and identifier generation (what [`Clock`] documents).

use std::sync::Mutex;
use std::sync::atomic::{AtomicI64, Ordering};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use uuid::Uuid;

/// A source of wall-clock time in Unix epoch milliseconds.
///
/// Core logic never calls `SystemTime::now`, `Uuid::new_v4` or `rand::rng` directly: it
/// asks a [`Clock`] and an [`IdGenerator`] (backoff jitter included), so simulations and
/// tests can run deterministically. `clippy.toml` bans those calls everywhere but in
/// [`SystemClock`] and [`RandomIds`].
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// Milliseconds since the Unix epoch.
    fn now_ms(&self) -> i64;
}

/// The system clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    // The one reading of the wall clock (clippy.toml bans it everywhere else).
    #[allow(clippy::disallowed_methods)]
    fn now_ms(&self) -> i64 {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        i64::try_from(now.as_millis()).unwrap_or(i64::MAX)
    }
}

/// A clock that only moves when told to (for tests and simulations).
#[derive(Debug)]
pub struct ManualClock {
    now_ms: AtomicI64,
}

impl ManualClock {
    /// A clock reading `start_ms`.
    pub fn new(start_ms: i64) -> Self {
        ManualClock {
            now_ms: AtomicI64::new(start_ms),
        }
    }

    /// Move the clock forward by `delta_ms`.
    pub fn advance(&self, delta_ms: i64) {
        self.now_ms.fetch_add(delta_ms, Ordering::SeqCst);
    }

    /// Set the clock to `now_ms`.
    pub fn set(&self, now_ms: i64) {
        self.now_ms.store(now_ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> i64 {
        self.now_ms.load(Ordering::SeqCst)
    }
}

/// A source of fresh identifiers: UUIDs and positive snapshot ids.
pub trait IdGenerator: Send + Sync + std::fmt::Debug {
    /// A fresh random (version 4) UUID.
    fn uuid(&self) -> Uuid;
    /// A fresh positive 63-bit id (for snapshot ids).
    fn positive_id(&self) -> i64 {
        let bits = self.uuid().as_u128();
        let id = (bits as u64 & (i64::MAX as u64)) as i64;
        id.max(1)
    }
}

/// Identifiers from the operating system's random source.
#[derive(Debug, Default, Clone, Copy)]
pub struct RandomIds;

impl IdGenerator for RandomIds {
    // The one use of the operating system's randomness (clippy.toml bans it elsewhere).
    #[allow(clippy::disallowed_methods)]
    fn uuid(&self) -> Uuid {
        Uuid::new_v4()
    }
}

/// Identifiers from a seeded generator (deterministic, for tests and simulations).
#[derive(Debug)]
pub struct SeededIds {
    rng: Mutex<StdRng>,
}

impl SeededIds {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> Self {
        SeededIds {
            rng: Mutex::new(StdRng::seed_from_u64(seed)),
        }
    }
}

impl IdGenerator for SeededIds {
    fn uuid(&self) -> Uuid {
        let bytes: [u8; 16] = match self.rng.lock() {
            Ok(mut rng) => rng.random(),
            Err(poisoned) => poisoned.into_inner().random(),
        };
        uuid::Builder::from_random_bytes(bytes).into_uuid()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeded_ids_are_deterministic_and_v4() {
        let a = SeededIds::new(7);
        let b = SeededIds::new(7);
        let (x, y) = (a.uuid(), b.uuid());
        assert_eq!(x, y);
        assert_eq!(x.get_version_num(), 4);
        assert!(a.positive_id() > 0);
    }

    #[test]
    fn manual_clock_moves_only_when_told() {
        let clock = ManualClock::new(1_000);
        assert_eq!(clock.now_ms(), 1_000);
        clock.advance(500);
        assert_eq!(clock.now_ms(), 1_500);
        clock.set(10);
        assert_eq!(clock.now_ms(), 10);
    }
}
