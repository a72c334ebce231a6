//! The `parqdb-catalog` command, through the real binary.
mod bad_input;
mod multiprocess_local;
mod restore_drill;
