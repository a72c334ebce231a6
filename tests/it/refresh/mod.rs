//! Event-driven refresh.
mod burst;
mod ordering;
