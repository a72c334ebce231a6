//! The reliability proof, part 1 and 2: concurrent histories of `load`, `register`,
//! `commit`, `drop`, `rename` and `list` are linearizable against the sequential model of
//! the catalog spec, on every backend, without and with injected faults.
//!
//! CI size: 4 clients × 40 operations per backend and seed. Long runs:
//!
//! ```text
//! PARQDB_LIN_CLIENTS=16 PARQDB_LIN_OPS=2000 PARQDB_LIN_SEEDS=1,2,3 \
//!     cargo test --release --test it -- --nocapture linearizability::memory linearizability::local
//! PARQDB_LIN_RENAMES=0 ...   # without renames: the check partitions per identifier
//! ```
//!
//! The S3 and DynamoDB cases need `PARQDB_TEST_S3_ENDPOINT` / `PARQDB_TEST_DYNAMODB_ENDPOINT`
//! (`scripts/test.sh` starts both).
#![allow(clippy::disallowed_methods)] // tests may read the wall clock and draw random ids (unique names)

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Instant;

use crate::support::fixture::TestEnv;
use crate::support::history::backends::{Backend, assert_applied_once, catalog_over};
use crate::support::history::checker::check;
use crate::support::history::workload::{Workload, final_loads, run_workload};
use crate::support::history::{Call, History, Op, Ret, Universe, env_seeds, mix};
use parqdb_catalog::ErrorKind;
use parqdb_catalog::IndexCatalog;
use parqdb_catalog_testkit::faulty::{FaultConfig, FaultStats, FaultyStore};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

struct Case {
    backend: Backend,
    /// Injected fault rate (`0.0`: none).
    faults: f64,
    /// Hide the store's atomic multi-key write (forces the step-wise rename).
    hide_transact: bool,
    clients: usize,
    ops: usize,
    seeds: Vec<u64>,
}

async fn run(case: Case) {
    for &seed in &case.seeds {
        let started = Instant::now();
        let (raw, warehouse) = case.backend.open().await;
        let mut config = FaultConfig {
            max_delay: std::time::Duration::from_millis(3),
            ..FaultConfig::uniform(seed, case.faults)
        };
        config.hide_transact = case.hide_transact;
        let faulty = Arc::new(FaultyStore::new(raw.clone(), config));
        faulty.set_enabled(false);
        let setup = catalog_over(faulty.clone(), &warehouse, true);
        let universe = Universe::new(&format!("s{seed}"), 2, 3);
        universe.create(&setup).await;
        let env = TestEnv {
            catalog: Arc::new(setup),
            warehouse: warehouse.clone(),
            with_registry: None,
        };
        let workload = Workload::sized(case.clients, case.ops, seed);
        // One catalog per client, as separate processes would have.
        let catalogs: Vec<Arc<dyn IndexCatalog>> = (0..workload.clients)
            .map(|_| {
                Arc::new(catalog_over(faulty.clone(), &warehouse, false)) as Arc<dyn IndexCatalog>
            })
            .collect();
        faulty.set_enabled(true);
        let (mut history, pool) = run_workload(&env, &catalogs, &universe, &workload).await;
        faulty.set_enabled(false);
        let stats: FaultStats = faulty.stats();
        let fresh = catalog_over(raw.clone(), &warehouse, false);
        final_loads(&mut history, &fresh, &pool).await;
        let ran = started.elapsed();
        let started = Instant::now();
        let report = check(&history).unwrap_or_else(|failure| {
            // `PARQDB_LIN_DUMP=DIR`: keep the whole history and the applied writes.
            if let Ok(dir) = std::env::var("PARQDB_LIN_DUMP") {
                let mut ops = history.ops.clone();
                ops.sort_by_key(|op| op.invoke);
                let mut text: String = ops
                    .iter()
                    .map(|op| crate::support::history::describe(&history, op) + "\n")
                    .collect();
                for (loc, location) in pool.all().iter().enumerate() {
                    text.push_str(&format!("L{loc} = {location}\n"));
                }
                for write in faulty.applied_writes() {
                    text.push_str(&format!(
                        "applied call {} {} {}\n",
                        write.call,
                        write.key,
                        String::from_utf8_lossy(&write.value)
                    ));
                }
                let path = std::path::Path::new(&dir).join(format!("history-{seed}.txt"));
                std::fs::write(&path, text).expect("history written");
            }
            panic!(
                "{:?} seed {seed} (faults {}, hide transact {}): {failure}",
                case.backend, case.faults, case.hide_transact
            )
        });
        let applied = assert_applied_once(&faulty.applied_writes());
        println!(
            "{:?} seed {seed} faults {:.0}% step-wise-rename {}: {} clients x {} ops in {:.1?}; {report} (checked in {:.1?}); {applied} pointer writes applied, none twice; {stats}; results: {}",
            case.backend,
            case.faults * 100.0,
            case.hide_transact || matches!(case.backend, Backend::Local | Backend::S3),
            workload.clients,
            workload.ops_per_client,
            ran,
            started.elapsed(),
            history.summary()
        );
    }
}

fn case(backend: Backend, faults: f64, hide_transact: bool, seeds: &[u64]) -> Case {
    Case {
        backend,
        faults,
        hide_transact,
        clients: 4,
        ops: 40,
        seeds: env_seeds(seeds),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn memory_atomic_rename_is_linearizable() {
    run(case(Backend::Memory, 0.0, false, &[1, 2, 3])).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn memory_step_wise_rename_is_linearizable() {
    run(case(Backend::Memory, 0.0, true, &[1, 2, 3])).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn local_files_are_linearizable() {
    run(case(Backend::Local, 0.0, false, &[1, 2])).await;
}
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn memory_atomic_rename_with_ten_percent_faults() {
    run(case(Backend::Memory, 0.10, false, &[11, 12, 13])).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn memory_step_wise_rename_with_ten_percent_faults() {
    run(case(Backend::Memory, 0.10, true, &[11, 12, 13])).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn local_files_with_ten_percent_faults() {
    run(case(Backend::Local, 0.10, false, &[11, 12])).await;
}

/// A third of all calls faulty: many more ambiguous outcomes, some left unknown.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn memory_with_heavy_faults() {
    run(case(Backend::Memory, 0.33, true, &[31, 32])).await;
    run(case(Backend::Memory, 0.33, false, &[33])).await;
}
// ---------------------------------------------------------------------------------------
// The checker itself: it accepts what it must and rejects what it must.
// ---------------------------------------------------------------------------------------

fn history(ops: &[(Call, Ret, u64, u64)]) -> History {
    History {
        universe: Universe::new("self", 2, 2),
        ops: ops
            .iter()
            .enumerate()
            .map(|(client, (call, ret, invoke, complete))| Op {
                client,
                call: call.clone(),
                ret: ret.clone(),
                invoke: *invoke,
                complete: *complete,
            })
            .collect(),
    }
}

fn accepts(ops: &[(Call, Ret, u64, u64)]) {
    let h = history(ops);
    if let Err(failure) = check(&h) {
        panic!("rejected a linearizable history: {failure}");
    }
}

fn rejects(ops: &[(Call, Ret, u64, u64)]) {
    let h = history(ops);
    assert!(
        check(&h).is_err(),
        "accepted a non-linearizable history: {h:#?}"
    );
}

use Call::{Commit, Drop, List, Load, Register, Rename};
use Ret::{Committed, Dropped, Failed, Listed, Loaded, Registered, Renamed, Unknown};

const OK: Ret = Committed {
    already_applied: false,
};

#[test]
fn checker_accepts_a_sequential_history() {
    accepts(&[
        (Register { id: 0, loc: 0 }, Registered, 0, 1),
        (Load { id: 0 }, Loaded(0), 2, 3),
        (
            Commit {
                id: 0,
                base: 0,
                new: 1,
            },
            OK,
            4,
            5,
        ),
        (
            Commit {
                id: 0,
                base: 0,
                new: 2,
            },
            Failed(ErrorKind::CommitConflict),
            6,
            7,
        ),
        (
            Commit {
                id: 0,
                base: 0,
                new: 1,
            },
            Committed {
                already_applied: true,
            },
            8,
            9,
        ),
        (Rename { from: 0, to: 1 }, Renamed(1), 10, 11),
        (Load { id: 0 }, Failed(ErrorKind::IndexNotFound), 12, 13),
        (Load { id: 1 }, Loaded(1), 14, 15),
        (
            Register { id: 1, loc: 0 },
            Failed(ErrorKind::AlreadyExists),
            16,
            17,
        ),
        (Drop { id: 1 }, Dropped, 18, 19),
        (Drop { id: 1 }, Failed(ErrorKind::IndexNotFound), 20, 21),
        (
            List {
                ns: 0,
                page_size: None,
            },
            Listed(BTreeSet::new()),
            22,
            23,
        ),
    ]);
}

#[test]
fn checker_rejects_a_stale_read() {
    rejects(&[
        (Register { id: 0, loc: 0 }, Registered, 0, 1),
        (
            Commit {
                id: 0,
                base: 0,
                new: 1,
            },
            OK,
            2,
            3,
        ),
        (Load { id: 0 }, Loaded(0), 4, 5),
    ]);
}

#[test]
fn checker_allows_any_order_of_overlapping_operations() {
    accepts(&[
        (Register { id: 0, loc: 0 }, Registered, 0, 1),
        (
            Commit {
                id: 0,
                base: 0,
                new: 1,
            },
            OK,
            2,
            5,
        ),
        (Load { id: 0 }, Loaded(0), 3, 6),
        (Load { id: 0 }, Loaded(1), 4, 7),
    ]);
}

#[test]
fn checker_rejects_two_winners_from_one_base() {
    rejects(&[
        (Register { id: 0, loc: 0 }, Registered, 0, 1),
        (
            Commit {
                id: 0,
                base: 0,
                new: 1,
            },
            OK,
            2,
            5,
        ),
        (
            Commit {
                id: 0,
                base: 0,
                new: 2,
            },
            OK,
            3,
            6,
        ),
    ]);
    accepts(&[
        (Register { id: 0, loc: 0 }, Registered, 0, 1),
        (
            Commit {
                id: 0,
                base: 0,
                new: 1,
            },
            OK,
            2,
            5,
        ),
        (
            Commit {
                id: 0,
                base: 0,
                new: 2,
            },
            Failed(ErrorKind::CommitConflict),
            3,
            6,
        ),
    ]);
}

#[test]
fn checker_rejects_two_registrations() {
    rejects(&[
        (Register { id: 0, loc: 0 }, Registered, 0, 3),
        (Register { id: 0, loc: 1 }, Registered, 1, 2),
    ]);
}

#[test]
fn checker_lets_unknown_outcomes_land_late_or_never() {
    // Landed after its caller gave up.
    accepts(&[
        (Register { id: 0, loc: 0 }, Registered, 0, 1),
        (
            Commit {
                id: 0,
                base: 0,
                new: 1,
            },
            Unknown,
            2,
            3,
        ),
        (Load { id: 0 }, Loaded(0), 4, 5),
        (Load { id: 0 }, Loaded(1), 6, 7),
    ]);
    // Never landed.
    accepts(&[
        (Register { id: 0, loc: 0 }, Registered, 0, 1),
        (Drop { id: 0 }, Unknown, 2, 3),
        (
            Register { id: 0, loc: 1 },
            Failed(ErrorKind::AlreadyExists),
            4,
            5,
        ),
    ]);
    // But it cannot land twice, nor before it was invoked.
    rejects(&[
        (Register { id: 0, loc: 0 }, Registered, 0, 1),
        (
            Commit {
                id: 0,
                base: 0,
                new: 1,
            },
            Unknown,
            2,
            3,
        ),
        (Load { id: 0 }, Loaded(1), 4, 5),
        (Load { id: 0 }, Loaded(0), 6, 7),
    ]);
    rejects(&[
        (Register { id: 0, loc: 0 }, Registered, 0, 1),
        (Load { id: 0 }, Loaded(1), 2, 3),
        (
            Commit {
                id: 0,
                base: 0,
                new: 1,
            },
            Unknown,
            4,
            5,
        ),
    ]);
}

#[test]
fn checker_rejects_a_duplicated_or_lost_rename() {
    rejects(&[
        (Register { id: 0, loc: 0 }, Registered, 0, 1),
        (Rename { from: 0, to: 1 }, Renamed(0), 2, 3),
        (Load { id: 0 }, Loaded(0), 4, 5),
    ]);
    rejects(&[
        (Register { id: 0, loc: 0 }, Registered, 0, 1),
        (Rename { from: 0, to: 1 }, Renamed(0), 2, 3),
        (Load { id: 1 }, Failed(ErrorKind::IndexNotFound), 4, 5),
    ]);
    // A rename that failed must leave the source in place.
    rejects(&[
        (Register { id: 0, loc: 0 }, Registered, 0, 1),
        (Register { id: 1, loc: 1 }, Registered, 2, 3),
        (
            Rename { from: 0, to: 1 },
            Failed(ErrorKind::AlreadyExists),
            4,
            5,
        ),
        (Load { id: 0 }, Failed(ErrorKind::IndexNotFound), 6, 7),
    ]);
}

#[test]
fn checker_treats_list_as_per_identifier_observations() {
    // Not transactional: each identifier is observed at its own point of the interval.
    accepts(&[
        (Register { id: 0, loc: 0 }, Registered, 0, 1),
        (
            List {
                ns: 0,
                page_size: None,
            },
            Listed(BTreeSet::from([1])),
            2,
            7,
        ),
        (Rename { from: 0, to: 1 }, Renamed(0), 3, 4),
        (Register { id: 0, loc: 1 }, Registered, 5, 6),
    ]);
    // But every listed identifier existed during the listing, and every identifier that
    // existed throughout it was listed.
    rejects(&[
        (
            List {
                ns: 0,
                page_size: None,
            },
            Listed(BTreeSet::from([0])),
            0,
            1,
        ),
        (Register { id: 0, loc: 0 }, Registered, 2, 3),
    ]);
    rejects(&[
        (Register { id: 0, loc: 0 }, Registered, 0, 1),
        (
            List {
                ns: 0,
                page_size: None,
            },
            Listed(BTreeSet::new()),
            2,
            3,
        ),
    ]);
}

#[test]
fn checker_rejects_results_no_state_explains() {
    let h = history(&[(
        Load { id: 0 },
        Ret::Bogus("a location nobody wrote".into()),
        0,
        1,
    )]);
    assert!(check(&h).is_err());
    let h = history(&[(
        Register { id: 0, loc: 0 },
        Failed(ErrorKind::CorruptRecord),
        0,
        1,
    )]);
    assert!(check(&h).is_err());
}

/// A random history from a simulated linearizable catalog: `clients` clients, each
/// operation taking effect atomically at a random point of its interval.
fn simulated(clients: usize, ops: usize, seed: u64) -> History {
    let universe = Universe::new("sim", 2, 3);
    let n = universe.ids.len();
    let mut rng = StdRng::seed_from_u64(seed);
    let mut state: Vec<Option<u32>> = vec![None; n];
    let mut next_loc = 0u32;
    // Per client: (call, invoked at, result once applied).
    let mut pending: Vec<Option<(Call, u64, Option<Ret>)>> = vec![None; clients];
    let mut done = vec![0; clients];
    let mut out = Vec::new();
    let mut clock = 0u64;
    while done.iter().any(|&d| d < ops) || pending.iter().any(Option::is_some) {
        let c = rng.random_range(0..clients);
        clock += 1;
        match pending[c].take() {
            None if done[c] < ops => {
                let id = rng.random_range(0..n);
                let call = match rng.random_range(0..6) {
                    0 => Load { id },
                    1 => Register {
                        id,
                        loc: rng.random_range(0..3),
                    },
                    2 => match state[id] {
                        Some(base) if rng.random_bool(0.8) => {
                            next_loc += 1;
                            Commit {
                                id,
                                base,
                                new: 100 + next_loc,
                            }
                        }
                        _ => Commit {
                            id,
                            base: 0,
                            new: 99,
                        },
                    },
                    3 => Drop { id },
                    4 => Rename {
                        from: id,
                        to: rng.random_range(0..n),
                    },
                    _ => Load { id },
                };
                pending[c] = Some((call, clock, None));
            }
            None => {}
            Some((call, invoked, None)) => {
                // The linearization point.
                let unknown = rng.random_bool(0.03);
                let ret = match call {
                    Load { id } => match state[id] {
                        Some(loc) => Loaded(loc),
                        None => Failed(ErrorKind::IndexNotFound),
                    },
                    Register { id, loc } => match state[id] {
                        Some(_) => Failed(ErrorKind::AlreadyExists),
                        None => {
                            state[id] = Some(loc);
                            Registered
                        }
                    },
                    Commit { id, base, new } => match state[id] {
                        None => Failed(ErrorKind::IndexNotFound),
                        Some(cur) if cur == base => {
                            state[id] = Some(new);
                            OK
                        }
                        Some(cur) if cur == new => Committed {
                            already_applied: true,
                        },
                        Some(_) => Failed(ErrorKind::CommitConflict),
                    },
                    Drop { id } => match state[id].take() {
                        Some(_) => Dropped,
                        None => Failed(ErrorKind::IndexNotFound),
                    },
                    Rename { from, to } => match (state[from], state[to]) {
                        (None, _) => Failed(ErrorKind::IndexNotFound),
                        (Some(_), Some(_)) => Failed(ErrorKind::AlreadyExists),
                        (Some(loc), None) => {
                            state[from] = None;
                            state[to] = Some(loc);
                            Renamed(loc)
                        }
                    },
                    List { .. } => unreachable!(),
                };
                let ret = match (&call, unknown) {
                    (Load { .. }, _) | (_, false) => ret,
                    (_, true) => Unknown,
                };
                pending[c] = Some((call, invoked, Some(ret)));
            }
            Some((call, invoked, Some(ret))) => {
                out.push(Op {
                    client: c,
                    call,
                    ret,
                    invoke: invoked,
                    complete: clock,
                });
                done[c] += 1;
            }
        }
    }
    // A renamed pointer is reported by a later load of the destination in the catalog;
    // in the simulation it is the moved location, which is the same thing.
    History { universe, ops: out }
}

#[test]
fn checker_stays_tractable_on_long_histories() {
    let clients = crate::support::history::env_usize("PARQDB_LIN_CLIENTS", 16);
    let ops = crate::support::history::env_usize("PARQDB_LIN_OPS", 1000);
    for seed in 0..3 {
        let h = simulated(clients, ops, mix(seed));
        let started = Instant::now();
        let report = check(&h).unwrap_or_else(|failure| panic!("seed {seed}: {failure}"));
        println!(
            "simulated {clients} clients x {ops} ops, seed {seed}: {report} in {:.1?}",
            started.elapsed()
        );
    }
}

/// The tests on the S3-compatible server (`PARQDB_TEST_S3_ENDPOINT`): the whole suite
/// runs them, the fast tier does not (`tests/it/tiers.txt`).
mod s3 {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn s3_is_linearizable() {
        run(case(Backend::S3, 0.0, false, &[1])).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn s3_with_faults() {
        let mut case = case(Backend::S3, 0.10, false, &[21]);
        case.ops = 25;
        run(case).await;
    }
}

/// The tests with pointers in DynamoDB Local (`PARQDB_TEST_DYNAMODB_ENDPOINT`): the whole
/// suite runs them, the fast tier does not (`tests/it/tiers.txt`).
mod dynamodb {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn dynamodb_is_linearizable() {
        run(case(Backend::DynamoDb, 0.0, false, &[1])).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn dynamodb_with_faults() {
        let mut case = case(Backend::DynamoDb, 0.10, false, &[21]);
        case.ops = 25;
        run(case).await;
    }
}
