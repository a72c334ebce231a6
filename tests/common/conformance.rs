//! The catalog conformance suite: the catalog spec's operations, errors and their
//! precedence, pagination, namespaces and concurrency, written once and instantiated per
//! backend with [`catalog_conformance!`].

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use parqdb_catalog::catalog::{IndexCatalog, LoadIfChanged};
use parqdb_catalog::{ErrorKind, IndexIdentifier, Namespace};

use super::fixture::{TestEnv, source};

fn id(namespace: &Namespace, name: &str) -> IndexIdentifier {
    IndexIdentifier::new(namespace.clone(), name).expect("valid identifier")
}

fn kind<T: std::fmt::Debug>(result: parqdb_catalog::Result<T>) -> ErrorKind {
    result.expect_err("expected an error").kind()
}

pub async fn namespaces_lifecycle(env: TestEnv) {
    let catalog = &env.catalog;
    let root = env.namespace("root").await;
    assert!(catalog.namespace_exists(&root).await.expect("exists"));
    assert_eq!(
        kind(catalog.create_namespace(&root, BTreeMap::new()).await),
        ErrorKind::AlreadyExists
    );
    let orphan = root
        .child("missing")
        .expect("valid")
        .child("deeper")
        .expect("valid");
    assert_eq!(
        kind(catalog.create_namespace(&orphan, BTreeMap::new()).await),
        ErrorKind::NamespaceNotFound
    );
    let props = BTreeMap::from([("owner".to_owned(), "search-team".to_owned())]);
    let mut children = Vec::new();
    for name in ["c", "a", "b", "A", "a.b"] {
        let child = root.child(name).expect("valid");
        catalog
            .create_namespace(&child, props.clone())
            .await
            .expect("child created");
        children.push(child);
    }
    assert_eq!(
        catalog
            .namespace_properties(&children[0])
            .await
            .expect("props"),
        props
    );
    // Paginate children two at a time; order is stable and complete.
    let mut listed = Vec::new();
    let mut token: Option<String> = None;
    loop {
        let page = catalog
            .list_namespaces(Some(&root), token.as_deref(), Some(2))
            .await
            .expect("list");
        assert!(page.namespaces.len() <= 2);
        listed.extend(page.namespaces);
        token = page.next_page_token;
        if token.is_none() {
            break;
        }
    }
    let expected: BTreeSet<Namespace> = children.iter().cloned().collect();
    assert_eq!(listed.iter().cloned().collect::<BTreeSet<_>>(), expected);
    assert_eq!(listed.len(), children.len());
    let again = catalog
        .list_namespaces(Some(&root), None, Some(10))
        .await
        .expect("list");
    assert_eq!(again.namespaces, listed, "listing order is stable");
    let top = catalog
        .list_namespaces(None, None, Some(1000))
        .await
        .expect("top level");
    assert!(top.namespaces.contains(&root));

    assert_eq!(
        kind(catalog.drop_namespace(&root).await),
        ErrorKind::NamespaceNotEmpty
    );
    for child in &children {
        catalog.drop_namespace(child).await.expect("dropped");
    }
    assert!(
        !catalog
            .namespace_exists(&children[0])
            .await
            .expect("exists")
    );
    assert_eq!(
        kind(catalog.namespace_properties(&children[0]).await),
        ErrorKind::NamespaceNotFound
    );
    assert_eq!(
        kind(catalog.drop_namespace(&children[0]).await),
        ErrorKind::NamespaceNotFound
    );
    // A namespace holding an index is not empty either.
    let (index, _, _) = env.registered("held").await;
    assert_eq!(
        kind(catalog.drop_namespace(index.namespace()).await),
        ErrorKind::NamespaceNotEmpty
    );
    catalog.drop_index(&index).await.expect("dropped");
    catalog
        .drop_namespace(index.namespace())
        .await
        .expect("empty now");
    catalog.drop_namespace(&root).await.expect("empty now");
    catalog
        .create_namespace(&root, BTreeMap::new())
        .await
        .expect("re-created");
    assert!(
        catalog
            .list_namespaces(Some(&root), None, None)
            .await
            .expect("list")
            .namespaces
            .is_empty()
    );
    assert_eq!(
        kind(
            catalog
                .list_namespaces(Some(&children[0]), None, None)
                .await
        ),
        ErrorKind::NamespaceNotFound
    );
}

pub async fn register_and_load(env: TestEnv) {
    let catalog = &env.catalog;
    let namespace = env.namespace("reg").await;
    let index = id(&namespace, "embeddings");
    assert_eq!(kind(catalog.load(&index).await), ErrorKind::IndexNotFound);
    let (metadata, location) = env.new_index().await;
    let registered = catalog
        .register(&index, &source(1), &location)
        .await
        .expect("registered");
    assert_eq!(registered.metadata_location, location);
    let loaded = catalog.load(&index).await.expect("loaded");
    assert_eq!(loaded.metadata_location, location);
    assert_eq!(loaded.source, source(1));
    assert_eq!(loaded.identifier, index);
    assert_eq!(env.read(&loaded.metadata_location).await, metadata);
    assert_eq!(
        kind(catalog.register(&index, &source(1), &location).await),
        ErrorKind::AlreadyExists
    );
    // Registering the same immutable metadata under a second identifier is allowed.
    let twin = id(&namespace, "twin");
    catalog
        .register(&twin, &source(1), &location)
        .await
        .expect("second binding");
    // Identifiers are exact code-point sequences: case matters.
    let upper = id(&namespace, "EMBEDDINGS");
    assert_eq!(kind(catalog.load(&upper).await), ErrorKind::IndexNotFound);
}

pub async fn register_error_precedence(env: TestEnv) {
    let catalog = &env.catalog;
    let namespace = env.namespace("prec").await;
    let missing_ns = Namespace::new(["no-such-namespace-here"]).expect("valid");
    let (_, good) = env.new_index().await;
    let bad = env.write_raw(br#"{"format-version": 1}"#).await;
    let future = env
        .write_raw(br#"{"format-version": 2, "anything": true}"#)
        .await;
    let outside = "s3://elsewhere/metadata/x.metadata.json";
    let missing_file = format!(
        "{}/metadata/none/missing.metadata.json",
        env.warehouse.root()
    );

    // Namespace first, even with invalid metadata.
    assert_eq!(
        kind(
            catalog
                .register(&id(&missing_ns, "x"), &source(1), &bad)
                .await
        ),
        ErrorKind::NamespaceNotFound
    );
    let target = id(&namespace, "x");
    assert_eq!(
        kind(catalog.register(&target, &source(1), &bad).await),
        ErrorKind::InvalidIndexMetadata
    );
    assert_eq!(
        kind(catalog.register(&target, &source(1), &future).await),
        ErrorKind::UnsupportedFormatVersion
    );
    assert_eq!(
        kind(catalog.register(&target, &source(1), outside).await),
        ErrorKind::InvalidIndexMetadata
    );
    assert_eq!(
        kind(catalog.register(&target, &source(1), &missing_file).await),
        ErrorKind::InvalidIndexMetadata
    );
    // The source binding must equal the current snapshot's source-table exactly.
    assert_eq!(
        kind(catalog.register(&target, &source(2), &good).await),
        ErrorKind::InvalidIndexMetadata
    );
    // None of the failures wrote anything.
    assert_eq!(kind(catalog.load(&target).await), ErrorKind::IndexNotFound);
    catalog
        .register(&target, &source(1), &good)
        .await
        .expect("registered");
    // Metadata validity is checked before existence.
    assert_eq!(
        kind(catalog.register(&target, &source(1), &bad).await),
        ErrorKind::InvalidIndexMetadata
    );
    assert_eq!(
        kind(catalog.register(&target, &source(1), &good).await),
        ErrorKind::AlreadyExists
    );
}

pub async fn commit_chain(env: TestEnv) {
    let catalog = &env.catalog;
    let (index, mut metadata, mut location) = env.registered("chain").await;
    for round in 2..=4 {
        let (next, next_location) = env.successor(&metadata, round).await;
        let result = catalog
            .commit(&index, &source(round), &location, &next_location)
            .await
            .expect("committed");
        assert!(!result.already_applied);
        assert_eq!(result.pointer.metadata_location, next_location);
        let loaded = catalog.load(&index).await.expect("loaded");
        assert_eq!(loaded.metadata_location, next_location);
        assert_eq!(loaded.source, source(round));
        metadata = next;
        location = next_location;
    }
    assert_eq!(metadata.last_sequence_number(), 4);
    assert_eq!(env.read(&location).await.snapshots().len(), 4);
}

pub async fn commit_errors_and_precedence(env: TestEnv) {
    let catalog = &env.catalog;
    let (index, base, base_location) = env.registered("commit").await;
    let (next, next_location) = env.successor(&base, 2).await;
    let bad = env.write_raw(br#"{"format-version": 1}"#).await;

    // INDEX_NOT_FOUND comes first.
    let missing = id(index.namespace(), "missing");
    assert_eq!(
        kind(
            catalog
                .commit(&missing, &source(2), &base_location, &bad)
                .await
        ),
        ErrorKind::IndexNotFound
    );
    // A wrong base is a conflict, before any check of the new metadata.
    assert_eq!(
        kind(
            catalog
                .commit(&index, &source(2), &next_location, &bad)
                .await
        ),
        ErrorKind::CommitConflict
    );
    // New metadata: readable, valid, inside the warehouse.
    assert_eq!(
        kind(
            catalog
                .commit(&index, &source(2), &base_location, &bad)
                .await
        ),
        ErrorKind::InvalidIndexMetadata
    );
    assert_eq!(
        kind(
            catalog
                .commit(&index, &source(2), &base_location, "s3://elsewhere/m.json")
                .await
        ),
        ErrorKind::InvalidIndexMetadata
    );
    // Another index's metadata.
    let (_, foreign_location) = env.new_index().await;
    assert_eq!(
        kind(
            catalog
                .commit(&index, &source(1), &base_location, &foreign_location)
                .await
        ),
        ErrorKind::IndexUuidMismatch
    );
    // The source binding must equal the new current snapshot's source-table.
    assert_eq!(
        kind(
            catalog
                .commit(&index, &source(1), &base_location, &next_location)
                .await
        ),
        ErrorKind::InvalidIndexMetadata
    );
    // Nothing changed so far.
    assert_eq!(
        catalog.load(&index).await.expect("load").metadata_location,
        base_location
    );

    let done = catalog
        .commit(&index, &source(2), &base_location, &next_location)
        .await
        .expect("commit");
    assert!(!done.already_applied);
    // A retry of the very same commit reports that it already landed.
    let retry = catalog
        .commit(&index, &source(2), &base_location, &next_location)
        .await
        .expect("retry");
    assert!(retry.already_applied);
    assert_eq!(retry.pointer.metadata_location, next_location);
    // A stale base is a conflict.
    let (_, other_location) = env.successor(&base, 3).await;
    assert_eq!(
        kind(
            catalog
                .commit(&index, &source(3), &base_location, &other_location)
                .await
        ),
        ErrorKind::CommitConflict
    );
    // Going backwards (the old base as "new") breaks the successor rules.
    assert_eq!(
        kind(
            catalog
                .commit(&index, &source(1), &next_location, &base_location)
                .await
        ),
        ErrorKind::InvalidIndexMetadata
    );
    let _ = next;
}

pub async fn load_if_changed(env: TestEnv) {
    let catalog = &env.catalog;
    let (index, base, base_location) = env.registered("cache").await;
    let loaded = catalog.load(&index).await.expect("load");
    assert_eq!(
        catalog
            .load_if_changed(&index, &loaded.version)
            .await
            .expect("check"),
        LoadIfChanged::Unchanged
    );
    let (_, next_location) = env.successor(&base, 2).await;
    catalog
        .commit(&index, &source(2), &base_location, &next_location)
        .await
        .expect("commit");
    match catalog
        .load_if_changed(&index, &loaded.version)
        .await
        .expect("check")
    {
        LoadIfChanged::Changed(pointer) => {
            assert_eq!(pointer.metadata_location, next_location);
            assert_ne!(pointer.version, loaded.version);
        }
        LoadIfChanged::Unchanged => panic!("the commit must change the version"),
    }
    let current = catalog.load(&index).await.expect("load");
    catalog.drop_index(&index).await.expect("drop");
    assert_eq!(
        kind(catalog.load_if_changed(&index, &current.version).await),
        ErrorKind::IndexNotFound
    );
}

pub async fn drop_and_reregister(env: TestEnv) {
    let catalog = &env.catalog;
    let (index, _, location) = env.registered("drop").await;
    catalog.drop_index(&index).await.expect("dropped");
    assert_eq!(kind(catalog.load(&index).await), ErrorKind::IndexNotFound);
    assert_eq!(
        kind(catalog.drop_index(&index).await),
        ErrorKind::IndexNotFound
    );
    // drop never deletes metadata
    env.read(&location).await;
    assert!(
        catalog
            .list(index.namespace(), None, None)
            .await
            .expect("list")
            .identifiers
            .is_empty()
    );
    // Re-registering the old metadata is allowed.
    catalog
        .register(&index, &source(1), &location)
        .await
        .expect("re-registered");
    assert_eq!(
        catalog.load(&index).await.expect("load").metadata_location,
        location
    );
}

pub async fn rename_semantics(env: TestEnv) {
    let catalog = &env.catalog;
    let (from, base, location) = env.registered("from").await;
    let other_ns = env.namespace("dest").await;
    let to = id(&other_ns, "to");
    let missing_ns = Namespace::new(["no-such-namespace-either"]).expect("valid");

    assert_eq!(
        kind(
            catalog
                .rename(&id(from.namespace(), "missing"), &id(&missing_ns, "x"))
                .await
        ),
        ErrorKind::IndexNotFound
    );
    assert_eq!(
        kind(catalog.rename(&from, &id(&missing_ns, "x")).await),
        ErrorKind::NamespaceNotFound
    );
    let (_, taken_location) = env.new_index().await;
    let taken = id(&other_ns, "taken");
    catalog
        .register(&taken, &source(1), &taken_location)
        .await
        .expect("registered");
    assert_eq!(
        kind(catalog.rename(&from, &taken).await),
        ErrorKind::AlreadyExists
    );
    assert_eq!(
        kind(catalog.rename(&from, &from).await),
        ErrorKind::AlreadyExists
    );
    assert_eq!(
        catalog
            .load(&from)
            .await
            .expect("untouched")
            .metadata_location,
        location
    );

    let moved = catalog.rename(&from, &to).await.expect("renamed");
    assert_eq!(moved.identifier, to);
    assert_eq!(moved.metadata_location, location);
    assert_eq!(moved.source, source(1));
    assert_eq!(kind(catalog.load(&from).await), ErrorKind::IndexNotFound);
    assert_eq!(
        catalog.load(&to).await.expect("load").metadata_location,
        location
    );
    // Metadata is untouched and the renamed index accepts commits.
    let (_, next_location) = env.successor(&base, 2).await;
    catalog
        .commit(&to, &source(2), &location, &next_location)
        .await
        .expect("commit after rename");
    assert_eq!(
        kind(
            catalog
                .commit(&from, &source(2), &location, &next_location)
                .await
        ),
        ErrorKind::IndexNotFound
    );
    // The old name is free again, and renaming back works.
    catalog.rename(&to, &from).await.expect("renamed back");
    assert_eq!(
        catalog.load(&from).await.expect("load").metadata_location,
        next_location
    );
    assert_eq!(kind(catalog.load(&to).await), ErrorKind::IndexNotFound);
    let listed = catalog
        .list(&other_ns, None, None)
        .await
        .expect("list")
        .identifiers;
    assert_eq!(listed, vec![taken]);
}

pub async fn list_pagination(env: TestEnv) {
    let catalog = &env.catalog;
    let namespace = env.namespace("docs").await;
    let sibling = Namespace::new([format!("{}2", namespace.segments()[0])]).expect("valid");
    catalog
        .create_namespace(&sibling, BTreeMap::new())
        .await
        .expect("sibling");
    let nested = namespace.child("deeper").expect("valid");
    catalog
        .create_namespace(&nested, BTreeMap::new())
        .await
        .expect("nested");
    let (_, location) = env.new_index().await;
    let names = ["g", "b", "a", "Z", "e", "c", "f", "d.x"];
    for name in names {
        catalog
            .register(&id(&namespace, name), &source(1), &location)
            .await
            .expect("registered");
    }
    catalog
        .register(&id(&sibling, "s"), &source(1), &location)
        .await
        .expect("sibling index");
    catalog
        .register(&id(&nested, "n"), &source(1), &location)
        .await
        .expect("nested index");
    catalog
        .drop_index(&id(&namespace, "e"))
        .await
        .expect("dropped");

    let mut listed = Vec::new();
    let mut token: Option<String> = None;
    let mut pages = 0;
    loop {
        let page = catalog
            .list(&namespace, token.as_deref(), Some(3))
            .await
            .expect("page");
        assert!(page.identifiers.len() <= 3);
        pages += 1;
        listed.extend(page.identifiers);
        token = page.next_page_token;
        if token.is_none() {
            break;
        }
    }
    assert!(pages >= 3);
    let expected: BTreeSet<IndexIdentifier> = names
        .iter()
        .filter(|n| **n != "e")
        .map(|n| id(&namespace, n))
        .collect();
    assert_eq!(
        listed.len(),
        expected.len(),
        "no duplicates, nothing missing: {listed:?}"
    );
    assert_eq!(listed.iter().cloned().collect::<BTreeSet<_>>(), expected);
    let all = catalog
        .list(&namespace, None, Some(1000))
        .await
        .expect("one page");
    assert_eq!(all.identifiers, listed, "stable order");
    assert_eq!(all.next_page_token, None);

    let missing = Namespace::new(["never-created-namespace"]).expect("valid");
    assert_eq!(
        kind(catalog.list(&missing, None, None).await),
        ErrorKind::NamespaceNotFound
    );
    assert_eq!(
        kind(catalog.list(&namespace, Some("not/a/token"), None).await),
        ErrorKind::InvalidRequest
    );
    assert_eq!(
        kind(catalog.list(&namespace, Some("i/=zz"), None).await),
        ErrorKind::InvalidRequest
    );
    assert_eq!(
        kind(catalog.list(&namespace, None, Some(0)).await),
        ErrorKind::InvalidRequest
    );
}

pub async fn racing_commits_one_winner(env: TestEnv, writers: usize) {
    let (index, base, base_location) = env.registered("race").await;
    let mut candidates = Vec::new();
    for round in 0..writers {
        candidates.push(env.successor(&base, 2 + round as u32).await);
    }
    let mut tasks = Vec::new();
    for (round, (_, location)) in candidates.into_iter().enumerate() {
        let catalog = env.catalog.clone();
        let index = index.clone();
        let base_location = base_location.clone();
        tasks.push(tokio::spawn(async move {
            catalog
                .commit(&index, &source(2 + round as u32), &base_location, &location)
                .await
        }));
    }
    let mut winners = Vec::new();
    for task in tasks {
        match task.await.expect("task") {
            Ok(result) => winners.push(result.pointer.metadata_location),
            Err(err) => assert_eq!(err.kind(), ErrorKind::CommitConflict, "{err}"),
        }
    }
    assert_eq!(
        winners.len(),
        1,
        "exactly one of {writers} racing commits wins"
    );
    assert_eq!(
        env.catalog
            .load(&index)
            .await
            .expect("load")
            .metadata_location,
        winners[0]
    );
}

/// `writers` tasks each publish `per_writer` successors with reload-and-retry. A commit
/// whose outcome is unknown (`COMMIT_STATE_UNKNOWN`: under heavy load more than the
/// record's remembered history can land between a writer's read and its write) is
/// resolved as its contract says, by reloading; one that landed unseen is found in the
/// chain at the end. Every sequence number is published exactly once, none is lost.
pub async fn contended_chain_loses_nothing(env: TestEnv, writers: usize, per_writer: usize) {
    let (index, _, _) = env.registered("chain").await;
    let mut tasks = Vec::new();
    for writer in 0..writers {
        let env = env.clone();
        let index = index.clone();
        tasks.push(tokio::spawn(async move {
            let mut landed = Vec::new();
            let mut unknown = Vec::new();
            while landed.len() < per_writer {
                let current = env.catalog.load(&index).await.expect("load");
                let base = env.read(&current.metadata_location).await;
                // Keep files small: retain the last few snapshots only.
                let base = base
                    .expire_snapshots(Some(4), None, &parqdb_catalog::SystemClock)
                    .expect("expire");
                let version = (writer * 100_000 + landed.len() + unknown.len() + 2) as u32;
                let (next, location) = env.successor(&base, version).await;
                match env
                    .catalog
                    .commit(
                        &index,
                        &source(version),
                        &current.metadata_location,
                        &location,
                    )
                    .await
                {
                    Ok(_) => landed.push(next.last_sequence_number()),
                    Err(err) if err.kind() == ErrorKind::CommitConflict => continue,
                    Err(err) if err.kind() == ErrorKind::CommitStateUnknown => {
                        let now = env.catalog.load(&index).await.expect("reload");
                        if now.metadata_location == location {
                            landed.push(next.last_sequence_number());
                        } else {
                            unknown.push(next.last_sequence_number());
                        }
                    }
                    Err(err) => panic!("unexpected error: {err}"),
                }
            }
            (landed, unknown)
        }));
    }
    let mut sequences = BTreeSet::new();
    let mut unknown = BTreeSet::new();
    for task in tasks {
        let (landed, maybe) = task.await.expect("writer");
        for sequence in landed {
            assert!(
                sequences.insert(sequence),
                "sequence {sequence} published twice"
            );
        }
        unknown.extend(maybe);
    }
    let last = env
        .read(
            &env.catalog
                .load(&index)
                .await
                .expect("load")
                .metadata_location,
        )
        .await;
    let final_sequence = last.last_sequence_number();
    // Each sequence number is allocated by exactly one landed commit (the chain is
    // contiguous); a gap is a commit whose outcome its writer could not know.
    for sequence in 2..=final_sequence {
        if !sequences.contains(&sequence) {
            assert!(
                unknown.contains(&sequence),
                "sequence {sequence} is in the chain but no writer published it"
            );
            sequences.insert(sequence);
        }
    }
    let expected: BTreeSet<i64> = (2..=final_sequence).collect();
    assert_eq!(
        sequences, expected,
        "every acknowledged commit is in the chain"
    );
    assert!(
        final_sequence >= (writers * per_writer) as i64 + 1,
        "every writer's commits landed"
    );
}

/// Instantiate the suite: `catalog_conformance!(async_factory_expr)`; the factory returns
/// a fresh [`TestEnv`] per test.
#[macro_export]
macro_rules! catalog_conformance {
    ($factory:expr) => {
        #[tokio::test]
        async fn conformance_namespaces_lifecycle() {
            common::conformance::namespaces_lifecycle($factory.await).await;
        }
        #[tokio::test]
        async fn conformance_register_and_load() {
            common::conformance::register_and_load($factory.await).await;
        }
        #[tokio::test]
        async fn conformance_register_error_precedence() {
            common::conformance::register_error_precedence($factory.await).await;
        }
        #[tokio::test]
        async fn conformance_commit_chain() {
            common::conformance::commit_chain($factory.await).await;
        }
        #[tokio::test]
        async fn conformance_commit_errors_and_precedence() {
            common::conformance::commit_errors_and_precedence($factory.await).await;
        }
        #[tokio::test]
        async fn conformance_load_if_changed() {
            common::conformance::load_if_changed($factory.await).await;
        }
        #[tokio::test]
        async fn conformance_drop_and_reregister() {
            common::conformance::drop_and_reregister($factory.await).await;
        }
        #[tokio::test]
        async fn conformance_rename_semantics() {
            common::conformance::rename_semantics($factory.await).await;
        }
        #[tokio::test]
        async fn conformance_list_pagination() {
            common::conformance::list_pagination($factory.await).await;
        }
        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn conformance_sixteen_racing_commits_one_winner() {
            common::conformance::racing_commits_one_winner($factory.await, 16).await;
        }
        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn conformance_eight_writers_fifty_successors_none_lost() {
            common::conformance::contended_chain_loses_nothing($factory.await, 8, 50).await;
        }
    };
}

/// Keep `Arc` imported for factories that share a catalog.
pub type SharedCatalog = Arc<dyn IndexCatalog>;
