//! Garbage collection (in progress).
