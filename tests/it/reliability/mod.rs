//! The reliability proof: linearizable histories, commits under injected faults, crash
//! points.
mod crash_points;
mod fault_injection;
mod linearizability;
