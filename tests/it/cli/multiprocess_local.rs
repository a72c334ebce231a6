//! The local-filesystem store across OS processes: several `parqdb-catalog commit`
//! processes racing on one base → exactly one wins, the others get `COMMIT_CONFLICT`.

use std::process::{Command, Stdio};
use std::sync::Arc;

use crate::support::fixture::TestEnv;
use parqdb_catalog::Catalog;
use parqdb_catalog::Warehouse;
use parqdb_catalog::store::LocalStore;
use parqdb_catalog::{ErrorKind, IndexIdentifier};

const PROCESSES: usize = 8;
const ROUNDS: usize = 4;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_processes_one_winner_per_round() {
    let dir = tempfile::tempdir().expect("temp dir");
    let root = dir.path().join("warehouse");
    let warehouse = Warehouse::local(&root).expect("warehouse");
    let store = LocalStore::new(root.join("_catalog"));
    let env = TestEnv {
        catalog: Arc::new(Catalog::builder(Arc::new(store), warehouse.clone()).build()),
        warehouse,
        with_registry: None,
    };
    let (index, mut base, mut base_location) = env.registered("race").await;
    let warehouse_uri = env.warehouse.root().to_owned();

    for round in 0..ROUNDS {
        let mut candidates = Vec::new();
        for process in 0..PROCESSES {
            candidates.push(
                env.successor(&base, (round * 100 + process + 2) as u32)
                    .await,
            );
        }
        let children: Vec<_> = candidates
            .iter()
            .map(|(_, location)| {
                Command::new(env!("CARGO_BIN_EXE_parqdb-catalog"))
                    .args(["--warehouse", &warehouse_uri, "commit"])
                    .args(namespace_args(&index))
                    .args([
                        "--name",
                        index.name(),
                        "--base",
                        &base_location,
                        "--new",
                        location,
                    ])
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .expect("process started")
            })
            .collect();
        let mut winners = Vec::new();
        for (child, (metadata, location)) in children.into_iter().zip(candidates) {
            let output = child.wait_with_output().expect("process finished");
            match output.status.code() {
                Some(0) => winners.push((metadata, location)),
                Some(code) => {
                    assert_eq!(code, ErrorKind::CommitConflict.exit_code());
                    let error: serde_json::Value =
                        serde_json::from_slice(&output.stderr).expect("error JSON on stderr");
                    assert_eq!(error["error"], "COMMIT_CONFLICT");
                }
                None => panic!("process killed"),
            }
        }
        assert_eq!(winners.len(), 1, "round {round}: exactly one process wins");
        let (metadata, location) = winners.pop().expect("one winner");
        assert_eq!(env.current(&index).await, location);
        (base, base_location) = (metadata, location);
    }
    assert_eq!(base.last_sequence_number(), 1 + ROUNDS as i64);
}

fn namespace_args(index: &IndexIdentifier) -> Vec<String> {
    index
        .namespace()
        .segments()
        .iter()
        .flat_map(|segment| ["--namespace".to_owned(), segment.clone()])
        .collect()
}
