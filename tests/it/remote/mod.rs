//! The remote client (`lambda://`) against the real function binaries.
mod invocation_failures;
