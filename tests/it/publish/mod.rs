//! Successor publication: the publication suite (`support::publish`) per backend.
mod local;
mod network;
