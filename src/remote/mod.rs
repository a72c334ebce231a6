//! Remote catalogs: clients that implement [`IndexCatalog`](crate::catalog::IndexCatalog)
//! over a deployment instead of over a pointer store.
//!
//! * [`LambdaCatalog`], over the deployed Lambda functions (one function per
//!   operation, the event/response contract of [`crate::lambda::event`]). The CLI uses it
//!   for `--catalog lambda://PREFIX` (see [`CatalogConfig::connect`](crate::config::CatalogConfig::connect)).
//!
//! A remote client adds failure modes the embedded catalog does not have: the request may
//! be throttled, may never reach the service, or may reach it and lose its answer. Every
//! client here sorts each failure into one of three outcomes, and only the last one needs
//! care:
//!
//! | outcome                              | reads                      | mutations                        |
//! |--------------------------------------|----------------------------|----------------------------------|
//! | answered (a result or a typed error) | returned                   | returned                         |
//! | certainly not run (throttled, refused)| retried with backoff      | retried with backoff             |
//! | may have run (timeout, crash, 5xx)   | retried with backoff       | resolved by reading back, else `COMMIT_STATE_UNKNOWN` |

mod lambda;

pub use crate::lambda::Operation;
#[doc(hidden)] // For the template's tests (tests/it/infra).
pub use lambda::DEFAULT_QUALIFIER;
pub use lambda::{FunctionNames, LambdaCatalog, LambdaCatalogBuilder};
