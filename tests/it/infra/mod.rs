//! The deployment (`infra/`) against the code it deploys.
mod operations;
mod template;
