//! The garbage collector: scenarios, hostile layouts, durable evidence, the run protocol
//! across invocations and processes, the model check, the simulation and the scale test.
mod carried_attack;
mod carried_clocks;
mod clock_restamping;
mod condemnation_markers;
mod directory_references;
mod durable_evidence;
mod durable_runs;
mod family_resurrection;
mod hostile_layouts;
mod kill_and_resume;
mod late_finishes;
mod late_writes_of_previous_run;
mod model;
mod pages_alone_attack;
mod reincarnation;
mod scale;
mod scenarios;
mod simulation;
mod stale_metadata_clocks;
mod state_machine;
mod store_binding;
mod superseded_runs;
mod untaken_publications;
