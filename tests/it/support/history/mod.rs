//! Linearizability of catalog histories.
//!
//! * [`workload::run_workload`]: K concurrent clients issue random `load`, `register`,
//!   `commit`, `drop`, `rename` and `list` operations over a small universe of identifiers
//!   (3 names in 2 namespaces, so conflicts are frequent), each recorded with its
//!   invocation and completion on a global logical clock, its arguments and its result.
//!   Metadata files are real: a shared [`workload::Pool`] writes them with the fixture
//!   helpers, and a commit always proposes "the successor of what I loaded" (one
//!   pre-written successor per base and client), so every committed file is a valid
//!   successor of its base.
//! * [`checker::check`]: searches for a linearization of the history against a
//!   sequential model of the catalog (the state is the map identifier → absent |
//!   present(location); the location determines the source binding). The search is Wing &
//!   Gong's, with Lowe's memoisation of (linearized set, state) and P-compositionality:
//!   operations are split into independent partitions by the identifiers they touch
//!   (rename links two). An operation whose outcome is unknown (`COMMIT_STATE_UNKNOWN`)
//!   may take effect at any point after its invocation, or never. `list` is not
//!   transactional (catalog spec): a listing becomes one observation per identifier of its
//!   namespace — present if listed, absent if not — each free to take effect at its own
//!   point of the listing's interval.
//! * [`backends`]: the stores and warehouses the workloads run on, and the catalog over
//!   them.
//!
//! This module holds what both sides share: the [`Universe`] of identifiers and the
//! recorded [`History`] of [`Op`]s.

pub mod backends;
pub mod checker;
pub mod workload;

use std::collections::BTreeSet;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use parqdb_catalog::IndexCatalog;
use parqdb_catalog::{ErrorKind, IndexIdentifier, Namespace};

/// A metadata location, interned.
pub type Loc = u32;

/// splitmix64.
pub fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// An environment variable as a number, or the default.
pub fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// `PARQDB_LIN_SEEDS=1,2,3` or the defaults.
pub fn env_seeds(default: &[u64]) -> Vec<u64> {
    match std::env::var("PARQDB_LIN_SEEDS") {
        Ok(text) if !text.trim().is_empty() => text
            .split(',')
            .map(|s| {
                s.trim()
                    .parse()
                    .expect("PARQDB_LIN_SEEDS: comma-separated integers")
            })
            .collect(),
        _ => default.to_vec(),
    }
}

/// The identifiers a workload touches.
#[derive(Debug, Clone)]
pub struct Universe {
    /// The namespaces.
    pub namespaces: Vec<Namespace>,
    /// The identifiers.
    pub ids: Vec<IndexIdentifier>,
    /// The namespace (index into `namespaces`) of each identifier.
    pub namespace_of: Vec<usize>,
}

impl Universe {
    /// `names` names in each of `namespaces` fresh namespaces (not yet created).
    pub fn new(tag: &str, namespaces: usize, names: usize) -> Universe {
        let unique = uuid::Uuid::new_v4().simple().to_string();
        let namespaces: Vec<Namespace> = (0..namespaces)
            .map(|n| Namespace::new([format!("lin-{tag}-{}-{n}", &unique[..8])]).expect("valid"))
            .collect();
        let mut ids = Vec::new();
        let mut namespace_of = Vec::new();
        for (n, namespace) in namespaces.iter().enumerate() {
            for name in 0..names {
                ids.push(
                    IndexIdentifier::new(namespace.clone(), format!("ix{name}")).expect("valid"),
                );
                namespace_of.push(n);
            }
        }
        Universe {
            namespaces,
            ids,
            namespace_of,
        }
    }

    /// The identifiers of namespace `ns`.
    pub fn ids_in(&self, ns: usize) -> impl Iterator<Item = usize> + '_ {
        (0..self.ids.len()).filter(move |&id| self.namespace_of[id] == ns)
    }

    /// Create the namespaces.
    pub async fn create(&self, catalog: &dyn IndexCatalog) {
        for namespace in &self.namespaces {
            catalog
                .create_namespace(namespace, Default::default())
                .await
                .expect("namespace created");
        }
    }
}

/// An operation's arguments (identifiers and namespaces as indexes into the universe).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Call {
    /// `load(id)`.
    Load { id: usize },
    /// `register(id, source-of(loc), loc)`.
    Register { id: usize, loc: Loc },
    /// `commit(id, source-of(new), base, new)`.
    Commit { id: usize, base: Loc, new: Loc },
    /// `drop(id)`.
    Drop { id: usize },
    /// `rename(from, to)`.
    Rename { from: usize, to: usize },
    /// `list(ns)`, every page (`page_size` per page).
    List { ns: usize, page_size: Option<usize> },
}

/// An operation's result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ret {
    /// `load` answered this location.
    Loaded(Loc),
    /// `register` succeeded.
    Registered,
    /// `commit` succeeded.
    Committed { already_applied: bool },
    /// `drop` succeeded.
    Dropped,
    /// `rename` succeeded; the pointer it answered has this location.
    Renamed(Loc),
    /// `list` answered these identifiers (all pages).
    Listed(BTreeSet<usize>),
    /// A definite error.
    Failed(ErrorKind),
    /// `COMMIT_STATE_UNKNOWN`: may or may not have taken effect.
    Unknown,
    /// An answer the model cannot explain at all (a location the pool never wrote, an
    /// identifier outside the universe, a source that does not match the location).
    Bogus(String),
}

/// One recorded operation.
#[derive(Debug, Clone)]
pub struct Op {
    /// The client that issued it.
    pub client: usize,
    /// The arguments.
    pub call: Call,
    /// The result.
    pub ret: Ret,
    /// Logical time of the invocation.
    pub invoke: u64,
    /// Logical time of the completion.
    pub complete: u64,
}

/// A recorded history.
#[derive(Debug, Clone)]
pub struct History {
    /// The identifiers.
    pub universe: Universe,
    /// The operations, in no particular order.
    pub ops: Vec<Op>,
}

impl History {
    /// Operations whose outcome was unknown.
    pub fn unknown(&self) -> usize {
        self.ops.iter().filter(|op| op.ret == Ret::Unknown).count()
    }

    /// Count of each result class, for the report.
    pub fn summary(&self) -> String {
        let mut counts: std::collections::BTreeMap<String, usize> = Default::default();
        for op in &self.ops {
            let call = match op.call {
                Call::Load { .. } => "load",
                Call::Register { .. } => "register",
                Call::Commit { .. } => "commit",
                Call::Drop { .. } => "drop",
                Call::Rename { .. } => "rename",
                Call::List { .. } => "list",
            };
            let ret = match &op.ret {
                Ret::Failed(kind) => kind.code().to_owned(),
                Ret::Unknown => "UNKNOWN".to_owned(),
                Ret::Bogus(_) => "BOGUS".to_owned(),
                Ret::Committed {
                    already_applied: true,
                } => "ok(already-applied)".to_owned(),
                _ => "ok".to_owned(),
            };
            *counts.entry(format!("{call}:{ret}")).or_default() += 1;
        }
        counts
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// Records operations on a global logical clock.
#[derive(Debug, Default)]
pub struct Recorder {
    clock: AtomicU64,
    ops: Mutex<Vec<Op>>,
}

impl Recorder {
    /// The next tick.
    pub fn tick(&self) -> u64 {
        self.clock.fetch_add(1, Ordering::SeqCst)
    }

    /// Keep an operation.
    pub fn push(&self, op: Op) {
        self.ops.lock().unwrap_or_else(|p| p.into_inner()).push(op);
    }

    /// Everything recorded.
    pub fn ops(&self) -> Vec<Op> {
        self.ops.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// A readable line for one operation.
pub fn describe(history: &History, op: &Op) -> String {
    let id = |i: usize| format!("#{i}{}", history.universe.ids[i]);
    let call = match &op.call {
        Call::Load { id: i } => format!("load({})", id(*i)),
        Call::Register { id: i, loc } => format!("register({}, L{loc})", id(*i)),
        Call::Commit { id: i, base, new } => format!("commit({}, L{base} -> L{new})", id(*i)),
        Call::Drop { id: i } => format!("drop({})", id(*i)),
        Call::Rename { from, to } => format!("rename({} -> {})", id(*from), id(*to)),
        Call::List { ns, page_size } => format!("list(ns{ns}, page-size {page_size:?})"),
    };
    format!(
        "client {} [{}, {}] {call} => {:?}",
        op.client, op.invoke, op.complete, op.ret
    )
}
