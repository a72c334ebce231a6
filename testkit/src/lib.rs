//! What the test suites of the ParqDB catalog share (`publish = false`, a dev-dependency
//! of the library and of the functions):
//!
//! * [`fixture`]: the sample index's source table and snapshot contents;
//! * [`faulty`]: [`faulty::FaultyStore`], a pointer store that injects scripted or random
//!   faults (failures, delays, ambiguous and applied-then-lost writes) and logs the writes
//!   that applied;
//! * [`store`]: [`store::Hooked`], a pointer store that runs a test's hook before every
//!   call it forwards;
//! * [`lambda`]: the function binaries as Lambda runs them — a Runtime API, single
//!   processes, and a local Lambda service with fault injection.
// The Lambda host plays the Lambda service: it mints request ids and deadlines from the real
// clock, as the service does (clippy.toml bans them in the library, which injects both).
#![allow(clippy::disallowed_methods)]

pub mod faulty;
pub mod fixture;
pub mod lambda;
pub mod store;
