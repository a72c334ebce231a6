//! The catalog conformance suite: the catalog spec's operations, errors and their
//! precedence, pagination, namespaces and concurrency, written once and instantiated per
//! backend with [`catalog_conformance!`].

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use parqdb_catalog::IndexMetadata;
use parqdb_catalog::family::{FamilyRegistry, IndexFamily};
use parqdb_catalog::{ErrorKind, IndexIdentifier, Namespace};
use parqdb_catalog::{IndexCatalog, LoadIfChanged, SourceBinding};
use serde_json::{Value, json};

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
        .register(&index, Some(&source(1)), &location)
        .await
        .expect("registered");
    assert_eq!(registered.metadata_location, location);
    let loaded = catalog.load(&index).await.expect("loaded");
    assert_eq!(loaded.metadata_location, location);
    assert_eq!(loaded.source, source(1));
    assert_eq!(loaded.identifier, index);
    assert_eq!(env.read(&loaded.metadata_location).await, metadata);
    assert_eq!(
        kind(catalog.register(&index, Some(&source(1)), &location).await),
        ErrorKind::AlreadyExists
    );
    // Registering the same immutable metadata under a second identifier is allowed.
    let twin = id(&namespace, "twin");
    catalog
        .register(&twin, Some(&source(1)), &location)
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
                .register(&id(&missing_ns, "x"), Some(&source(1)), &bad)
                .await
        ),
        ErrorKind::NamespaceNotFound
    );
    let target = id(&namespace, "x");
    assert_eq!(
        kind(catalog.register(&target, Some(&source(1)), &bad).await),
        ErrorKind::InvalidIndexMetadata
    );
    assert_eq!(
        kind(catalog.register(&target, Some(&source(1)), &future).await),
        ErrorKind::UnsupportedFormatVersion
    );
    assert_eq!(
        kind(catalog.register(&target, Some(&source(1)), outside).await),
        ErrorKind::InvalidIndexMetadata
    );
    assert_eq!(
        kind(
            catalog
                .register(&target, Some(&source(1)), &missing_file)
                .await
        ),
        ErrorKind::InvalidIndexMetadata
    );
    // The source binding must equal the current snapshot's source-table exactly.
    assert_eq!(
        kind(catalog.register(&target, Some(&source(2)), &good).await),
        ErrorKind::InvalidIndexMetadata
    );
    // None of the failures wrote anything.
    assert_eq!(kind(catalog.load(&target).await), ErrorKind::IndexNotFound);
    catalog
        .register(&target, Some(&source(1)), &good)
        .await
        .expect("registered");
    // The catalog's state is checked before the request's content: existence first.
    assert_eq!(
        kind(catalog.register(&target, Some(&source(1)), &bad).await),
        ErrorKind::AlreadyExists
    );
    assert_eq!(
        kind(catalog.register(&target, Some(&source(1)), &good).await),
        ErrorKind::AlreadyExists
    );
}

pub async fn commit_chain(env: TestEnv) {
    let catalog = &env.catalog;
    let (index, mut metadata, mut location) = env.registered("chain").await;
    let (first, first_location) = (metadata.clone(), location.clone());
    for round in 2..=4 {
        let (next, next_location) = env.successor(&metadata, round).await;
        let result = catalog
            .commit(&index, Some(&source(round)), &location, &next_location)
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
    // A reader that loaded the first file still reads its immutable state.
    assert_eq!(env.read(&first_location).await, first);
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
                .commit(&missing, Some(&source(2)), &base_location, &bad)
                .await
        ),
        ErrorKind::IndexNotFound
    );
    // A wrong base is a conflict, before any check of the new metadata.
    assert_eq!(
        kind(
            catalog
                .commit(&index, Some(&source(2)), &next_location, &bad)
                .await
        ),
        ErrorKind::CommitConflict
    );
    // New metadata: readable, valid, inside the warehouse.
    assert_eq!(
        kind(
            catalog
                .commit(&index, Some(&source(2)), &base_location, &bad)
                .await
        ),
        ErrorKind::InvalidIndexMetadata
    );
    assert_eq!(
        kind(
            catalog
                .commit(
                    &index,
                    Some(&source(2)),
                    &base_location,
                    "s3://elsewhere/m.json"
                )
                .await
        ),
        ErrorKind::InvalidIndexMetadata
    );
    // Another index's metadata.
    let (_, foreign_location) = env.new_index().await;
    assert_eq!(
        kind(
            catalog
                .commit(&index, Some(&source(1)), &base_location, &foreign_location)
                .await
        ),
        ErrorKind::IndexUuidMismatch
    );
    // The source binding must equal the new current snapshot's source-table.
    assert_eq!(
        kind(
            catalog
                .commit(&index, Some(&source(1)), &base_location, &next_location)
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
        .commit(&index, Some(&source(2)), &base_location, &next_location)
        .await
        .expect("commit");
    assert!(!done.already_applied);
    // A retry of the very same commit reports that it already landed.
    let retry = catalog
        .commit(&index, Some(&source(2)), &base_location, &next_location)
        .await
        .expect("retry");
    assert!(retry.already_applied);
    assert_eq!(retry.pointer.metadata_location, next_location);
    // A stale base is a conflict.
    let (_, other_location) = env.successor(&base, 3).await;
    assert_eq!(
        kind(
            catalog
                .commit(&index, Some(&source(3)), &base_location, &other_location)
                .await
        ),
        ErrorKind::CommitConflict
    );
    // Going backwards (the old base as "new") breaks the successor rules.
    assert_eq!(
        kind(
            catalog
                .commit(&index, Some(&source(1)), &next_location, &base_location)
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
        .commit(&index, Some(&source(2)), &base_location, &next_location)
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
        .register(&index, Some(&source(1)), &location)
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
        .register(&taken, Some(&source(1)), &taken_location)
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
        .commit(&to, Some(&source(2)), &location, &next_location)
        .await
        .expect("commit after rename");
    assert_eq!(
        kind(
            catalog
                .commit(&from, Some(&source(2)), &location, &next_location)
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

/// Pages over runs of dropped indexes longer than a page, at the start, the middle and
/// the end of the namespace: every page size lists exactly the live identifiers, in order,
/// each once, and every page but the last is full.
pub async fn list_pagination_across_tombstones(env: TestEnv) {
    let catalog = &env.catalog;
    let namespace = env.namespace("runs").await;
    let (_, location) = env.new_index().await;
    let names: Vec<String> = (0..24).map(|n| format!("n{n:02}")).collect();
    for name in &names {
        catalog
            .register(&id(&namespace, name), Some(&source(1)), &location)
            .await
            .expect("registered");
    }
    let dropped = |n: usize| n < 4 || (8..17).contains(&n) || n == 19 || n >= 21;
    for (n, name) in names.iter().enumerate() {
        if dropped(n) {
            catalog
                .drop_index(&id(&namespace, name))
                .await
                .expect("dropped");
        }
    }
    let expected: Vec<IndexIdentifier> = names
        .iter()
        .enumerate()
        .filter(|(n, _)| !dropped(*n))
        .map(|(_, name)| id(&namespace, name))
        .collect();
    for size in [1, 2, 3, 5, 8, 100] {
        let (mut listed, mut token, mut pages) = (Vec::new(), None::<String>, Vec::new());
        loop {
            let page = catalog
                .list(&namespace, token.as_deref(), Some(size))
                .await
                .expect("page");
            pages.push(page.identifiers.len());
            listed.extend(page.identifiers);
            token = page.next_page_token;
            if token.is_none() {
                break;
            }
            assert!(
                pages.len() <= expected.len() + 1,
                "page size {size}: no end"
            );
        }
        assert_eq!(listed, expected, "page size {size}");
        let (last, full) = pages.split_last().expect("a page");
        assert!(
            full.iter().all(|n| *n == size),
            "page size {size}: {pages:?}"
        );
        assert!(*last <= size, "page size {size}: {pages:?}");
    }
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
            .register(&id(&namespace, name), Some(&source(1)), &location)
            .await
            .expect("registered");
    }
    catalog
        .register(&id(&sibling, "s"), Some(&source(1)), &location)
        .await
        .expect("sibling index");
    catalog
        .register(&id(&nested, "n"), Some(&source(1)), &location)
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

/// Issue 27, item 4: the listings check the catalog's state before the request's
/// content: a missing namespace is `NAMESPACE_NOT_FOUND` whatever the page size or token;
/// an existing one with a bad page size or token is `INVALID_REQUEST`.
pub async fn listings_check_the_namespace_before_the_page(env: TestEnv) {
    let catalog = &env.catalog;
    let existing = env.namespace("pages").await;
    let missing =
        Namespace::new([format!("missing-{}", uuid::Uuid::new_v4().simple())]).expect("valid");
    for (token, size) in [
        (None, Some(0)),
        (None, Some(1001)),
        (Some("not/a/token"), None),
        (Some("not/a/token"), Some(0)),
    ] {
        assert_eq!(
            kind(catalog.list(&missing, token, size).await),
            ErrorKind::NamespaceNotFound,
            "list {token:?} {size:?}"
        );
        assert_eq!(
            kind(catalog.list_namespaces(Some(&missing), token, size).await),
            ErrorKind::NamespaceNotFound,
            "list_namespaces {token:?} {size:?}"
        );
        assert_eq!(
            kind(catalog.list(&existing, token, size).await),
            ErrorKind::InvalidRequest,
            "list {token:?} {size:?}"
        );
        assert_eq!(
            kind(catalog.list_namespaces(Some(&existing), token, size).await),
            ErrorKind::InvalidRequest,
            "list_namespaces {token:?} {size:?}"
        );
    }
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
                .commit(
                    &index,
                    Some(&source(2 + round as u32)),
                    &base_location,
                    &location,
                )
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
    assert_eq!(env.current(&index).await, winners[0]);
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
                        Some(&source(version)),
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
    let last = env.read(&env.current(&index).await).await;
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
        final_sequence > (writers * per_writer) as i64,
        "every writer's commits landed"
    );
}

/// The metadata of `location` as JSON, edited by `edit`, written to a fresh location.
async fn edited(env: &TestEnv, metadata: &IndexMetadata, edit: impl FnOnce(&mut Value)) -> String {
    let mut value: Value = serde_json::from_slice(&metadata.to_json_vec()).expect("json");
    edit(&mut value);
    env.write_raw(&serde_json::to_vec_pretty(&value).expect("serialize"))
        .await
}

/// Issue 17, item 1: a commit publishes a successor, and only a successor — the base with
/// non-current snapshots (and their log entries) removed, then at most one snapshot
/// published by the six steps; nothing else but `last-updated-ms` and `properties`.
pub async fn commit_publishes_only_successors(env: TestEnv) {
    let catalog = &env.catalog;
    let (index, base, base_location) = env.registered("successor").await;
    let (next, _) = env.successor(&base, 2).await;
    let (two_ahead, two_ahead_location) = env.successor(&next, 3).await;
    let first = base.current_snapshot_id();
    let env_ref = &env;
    let refused = |what: &'static str, location: String| {
        let index = index.clone();
        async move {
            let result = catalog
                .commit(&index, None, &env_ref.current(&index).await, &location)
                .await;
            assert_eq!(
                result.as_ref().map_err(|err| err.kind()).err(),
                Some(ErrorKind::InvalidIndexMetadata),
                "{what}: {result:?}"
            );
        }
    };

    // From the one-snapshot base.
    refused(
        "a sequence number jumping from 1 to 7",
        edited(&env, &next, |v| {
            v["snapshots"][1]["sequence-number"] = json!(7);
            v["last-sequence-number"] = json!(7);
        })
        .await,
    )
    .await;
    refused("two snapshots appended at once", two_ahead_location.clone()).await;
    refused(
        "a snapshot appended without advancing current-snapshot-id",
        edited(&env, &next, |v| {
            v["current-snapshot-id"] = json!(first);
            v["snapshot-log"].as_array_mut().expect("log").pop();
        })
        .await,
    )
    .await;
    refused(
        "last-sequence-number raised with no snapshot allocated",
        edited(&env, &base, |v| {
            v["last-sequence-number"] = json!(5);
            v["last-updated-ms"] = json!(base.last_updated_ms() + 1);
        })
        .await,
    )
    .await;
    refused(
        "no change at all (a no-op commit)",
        edited(&env, &base, |_| {}).await,
    )
    .await;
    refused(
        "only properties changed (a no-op commit)",
        edited(&env, &base, |v| v["properties"] = json!({"owner": "me"})).await,
    )
    .await;
    assert_eq!(env.current(&index).await, base_location, "nothing landed");

    // A real successor lands; then from the two-snapshot state.
    let next_location = env.write(&next).await;
    catalog
        .commit(&index, None, &base_location, &next_location)
        .await
        .expect("a successor commits");
    refused(
        "the log entry of a retained snapshot removed",
        edited(&env, &next, |v| {
            v["snapshot-log"].as_array_mut().expect("log").remove(0);
        })
        .await,
    )
    .await;
    refused(
        "a rollback to a retained snapshot",
        edited(&env, &next, |v| {
            v["current-snapshot-id"] = json!(first);
            let at = v["last-updated-ms"].clone();
            v["snapshot-log"]
                .as_array_mut()
                .expect("log")
                .push(json!({"timestamp-ms": at, "snapshot-id": first}));
        })
        .await,
    )
    .await;
    let second = next.current_snapshot_id();
    refused(
        "the base's current snapshot removed",
        edited(&env, &next, |v| {
            v["snapshots"]
                .as_array_mut()
                .expect("snapshots")
                .retain(|s| s["snapshot-id"] != json!(second));
            v["snapshot-log"]
                .as_array_mut()
                .expect("log")
                .retain(|e| e["snapshot-id"] != json!(second));
            v["current-snapshot-id"] = json!(first);
        })
        .await,
    )
    .await;
    assert_eq!(env.current(&index).await, next_location, "nothing landed");
    let _ = two_ahead;

    // Expiry alone, and expiry then publication in one commit, are successors.
    let expired = next
        .expire_snapshots(None, None, &parqdb_catalog::SystemClock)
        .expect("expire");
    let expired_location = env.write(&expired).await;
    catalog
        .commit(&index, None, &next_location, &expired_location)
        .await
        .expect("expiry commits");
    let (third, _) = env.successor(&expired, 3).await;
    let (both, both_location) = env
        .successor(
            &third
                .expire_snapshots(None, None, &parqdb_catalog::SystemClock)
                .expect("expire"),
            4,
        )
        .await;
    // `both` builds on a snapshot that was never published (two new snapshots): refused.
    // Built on `expired` itself, the successor lands.
    refused("a successor of a snapshot never published", both_location).await;
    let _ = both;
    let (fourth, fourth_location) = env.successor(&expired, 5).await;
    catalog
        .commit(&index, None, &expired_location, &fourth_location)
        .await
        .expect("publication after expiry commits");
    assert_eq!(fourth.last_sequence_number(), 3);
}

/// Issue 27, item 1: publishing makes the base's current snapshot non-current, so one
/// commit may publish a snapshot and remove the old current one (and every other old
/// snapshot): a writer that keeps only the newest snapshot commits once per refresh.
pub async fn publish_and_expire_the_old_current_in_one_commit(env: TestEnv) {
    let catalog = &env.catalog;
    let (index, base, base_location) = env.registered("newest-only").await;
    // From the one-snapshot base: publish the second snapshot, remove the first.
    let (next, _) = env.successor(&base, 2).await;
    let newest = next
        .expire_snapshots(Some(1), None, &parqdb_catalog::SystemClock)
        .expect("expire");
    assert_eq!(newest.snapshots().len(), 1);
    let newest_location = env.write(&newest).await;
    let committed = catalog
        .commit(&index, None, &base_location, &newest_location)
        .await
        .expect("publish and expire the old current snapshot in one commit");
    assert_eq!(committed.pointer.metadata_location, newest_location);
    // And again from there.
    let (third, _) = env.successor(&newest, 3).await;
    let kept = third
        .expire_snapshots(Some(1), None, &parqdb_catalog::SystemClock)
        .expect("expire");
    let kept_location = env.write(&kept).await;
    catalog
        .commit(&index, None, &newest_location, &kept_location)
        .await
        .expect("again");
    let loaded = env.read(&env.current(&index).await).await;
    assert_eq!(loaded, kept);
    assert_eq!(
        loaded.last_sequence_number(),
        3,
        "sequence numbers preserved"
    );
    assert_eq!(
        loaded
            .snapshot_log()
            .iter()
            .map(|entry| entry.snapshot_id())
            .collect::<Vec<_>>(),
        [kept.current_snapshot_id()],
        "the removed snapshots' log entries went with them"
    );
    // Removing the current snapshot without publishing is still refused.
    let (fifth, _) = env.successor(&kept, 4).await;
    let fifth_location = env.write(&fifth).await;
    catalog
        .commit(&index, None, &kept_location, &fifth_location)
        .await
        .expect("a plain publication");
    let previous = kept.current_snapshot_id();
    let rolled_back = edited(&env, &fifth, |v| {
        let now = fifth.current_snapshot_id();
        v["snapshots"]
            .as_array_mut()
            .expect("snapshots")
            .retain(|s| s["snapshot-id"] != json!(now));
        v["snapshot-log"]
            .as_array_mut()
            .expect("log")
            .retain(|e| e["snapshot-id"] != json!(now));
        v["current-snapshot-id"] = json!(previous);
    })
    .await;
    assert_eq!(
        kind(
            catalog
                .commit(&index, None, &fifth_location, &rolled_back)
                .await
        ),
        ErrorKind::InvalidIndexMetadata
    );
    assert_eq!(env.current(&index).await, fifth_location);
}

/// The `ivf` family as an earlier version had it: its centroids metadata could lie
/// anywhere in the warehouse (today it must lie under `metadata/`).
#[derive(Debug)]
struct EarlierIvf;

static IVF: parqdb_catalog::family::IvfFamily = parqdb_catalog::family::IvfFamily;

impl IndexFamily for EarlierIvf {
    fn name(&self) -> &str {
        IVF.name()
    }
    fn schema_versions(&self) -> &[i32] {
        IVF.schema_versions()
    }
    fn roles(&self) -> &[&str] {
        IVF.roles()
    }
    fn metrics(&self) -> &[&str] {
        IVF.metrics()
    }
    fn validate_parameters(&self, parameters: &BTreeMap<String, String>) -> Result<(), String> {
        match parameters.get(CENTROIDS) {
            Some(location) => parqdb_catalog::family::validate_relative_location(location),
            None => Ok(()),
        }
    }
    fn warehouse_references<'a>(&self, parameters: &'a BTreeMap<String, String>) -> Vec<&'a str> {
        IVF.warehouse_references(parameters)
    }
}

const CENTROIDS: &str = "ivf_centroids_metadata_location";

/// Issue 27, item 2: a commit judges the new metadata by today's rules and reads of the
/// base only what the successor rules compare, so an index whose current metadata an
/// earlier version accepted under a rule since tightened takes a successor that fixes it.
pub async fn a_base_written_under_earlier_rules_takes_a_successor(env: TestEnv) {
    let earlier_registry = FamilyRegistry::builtin().with_family(Arc::new(EarlierIvf));
    let earlier = (env
        .with_registry
        .as_ref()
        .expect("a catalog of another version"))(earlier_registry.clone());
    let namespace = env.namespace("earlier").await;
    let tag = uuid::Uuid::new_v4().simple().to_string();
    let mut old_contents = parqdb_catalog_testkit::fixture::contents(&tag);
    old_contents.parameters.insert(
        CENTROIDS.to_owned(),
        format!("indexes/{tag}/centroids.json"),
    );
    let clock = parqdb_catalog::SystemClock;
    let ids = parqdb_catalog::RandomIds;
    let registry = FamilyRegistry::builtin();
    for (round, keep_old_current) in [(0, true), (1, false)] {
        let index = id(&namespace, &format!("x{round}"));
        // The old snapshot, under the earlier rule; for round 0 a fixed one on top.
        let old = IndexMetadata::create(
            old_contents.clone(),
            BTreeMap::new(),
            &clock,
            &ids,
            &earlier_registry,
        )
        .expect("valid under the earlier rule");
        let fixed = |rows: i64| {
            let mut fixed = parqdb_catalog_testkit::fixture::contents(&format!("{tag}-{rows}"));
            fixed.indexed_rows = rows;
            fixed
        };
        let base = if keep_old_current {
            old.successor(fixed(1001), &clock, &ids, &earlier_registry)
                .expect("valid under the earlier rule")
        } else {
            old
        };
        let base_location = env.write(&base).await;
        assert_eq!(
            kind(env.catalog.register(&index, None, &base_location).await),
            ErrorKind::InvalidIndexMetadata,
            "round {round}: today's rules refuse the base itself"
        );
        earlier
            .register(&index, None, &base_location)
            .await
            .expect("registered by the earlier version");

        // Keeping the old snapshot keeps what today's rules refuse: the new metadata is
        // judged fully.
        let kept = base
            .successor(fixed(1002), &clock, &ids, &earlier_registry)
            .expect("valid under the earlier rule");
        let kept_location = env.write(&kept).await;
        assert_eq!(
            kind(
                env.catalog
                    .commit(&index, None, &base_location, &kept_location)
                    .await
            ),
            ErrorKind::InvalidIndexMetadata,
            "round {round}: the new metadata is judged by today's rules"
        );
        // Removing the old snapshot (round 0: expiry; round 1: publication and expiry in
        // one commit) is a successor of the base.
        let new = if keep_old_current {
            base.expire_snapshots(None, None, &clock).expect("expire")
        } else {
            kept.expire_snapshots(Some(1), None, &clock)
                .expect("expire")
        };
        IndexMetadata::from_json_slice(&new.to_json_vec(), &registry)
            .expect("valid under today's rules");
        let new_location = env.write(&new).await;
        let committed = env
            .catalog
            .commit(&index, None, &base_location, &new_location)
            .await
            .unwrap_or_else(|err| panic!("round {round}: {err}"));
        assert_eq!(committed.pointer.metadata_location, new_location);
        assert_eq!(env.current(&index).await, new_location);
    }
}

/// Issue 27, item 3: a malformed source binding has one code, `INVALID_INDEX_METADATA`,
/// at one place in the order of checks — where the binding is checked, after the
/// catalog's state, the metadata and the successor rules — on every path.
pub async fn malformed_source_bindings_follow_the_order_of_checks(env: TestEnv) {
    let catalog = &env.catalog;
    let malformed = SourceBinding::from_json_slice(br#"{"provider": ""}"#);
    assert!(matches!(malformed, SourceBinding::Malformed(_)));
    let (existing, base, base_location) = env.registered("bound").await;
    let namespace = existing.namespace().clone();
    let missing_ns =
        Namespace::new([format!("missing-{}", uuid::Uuid::new_v4().simple())]).expect("valid");
    let absent = id(&namespace, "absent");
    let future = env.write_raw(br#"{"format-version": 2, "x": 1}"#).await;
    let register = |identifier: IndexIdentifier, location: String| {
        let malformed = malformed.clone();
        async move {
            catalog
                .register_with_binding(&identifier, &malformed, &location)
                .await
        }
    };
    assert_eq!(
        kind(register(id(&missing_ns, "x"), base_location.clone()).await),
        ErrorKind::NamespaceNotFound
    );
    assert_eq!(
        kind(register(existing.clone(), base_location.clone()).await),
        ErrorKind::AlreadyExists,
        "the catalog's state before the binding"
    );
    assert_eq!(
        kind(register(absent.clone(), future.clone()).await),
        ErrorKind::UnsupportedFormatVersion,
        "the metadata before the binding"
    );
    let err = register(absent.clone(), base_location.clone())
        .await
        .expect_err("malformed binding");
    assert_eq!(err.kind(), ErrorKind::InvalidIndexMetadata, "{err}");
    assert!(err.message().contains("not a table-definition"), "{err}");
    assert_eq!(
        kind(catalog.load(&absent).await),
        ErrorKind::IndexNotFound,
        "nothing registered"
    );

    let (_, next_location) = env.successor(&base, 2).await;
    let (_, foreign) = env.new_index().await;
    let commit = |identifier: IndexIdentifier, base: String, new: String| {
        let malformed = malformed.clone();
        async move {
            catalog
                .commit_with_binding(&identifier, &malformed, &base, &new)
                .await
        }
    };
    assert_eq!(
        kind(commit(absent.clone(), base_location.clone(), next_location.clone()).await),
        ErrorKind::IndexNotFound
    );
    assert_eq!(
        kind(commit(existing.clone(), foreign.clone(), next_location.clone()).await),
        ErrorKind::CommitConflict,
        "a stale base before the binding"
    );
    assert_eq!(
        kind(commit(existing.clone(), base_location.clone(), future.clone()).await),
        ErrorKind::UnsupportedFormatVersion,
        "the metadata before the binding"
    );
    assert_eq!(
        kind(commit(existing.clone(), base_location.clone(), foreign.clone()).await),
        ErrorKind::IndexUuidMismatch,
        "the successor rules before the binding"
    );
    let err = commit(
        existing.clone(),
        base_location.clone(),
        next_location.clone(),
    )
    .await
    .expect_err("malformed binding");
    assert_eq!(err.kind(), ErrorKind::InvalidIndexMetadata, "{err}");
    assert!(err.message().contains("not a table-definition"), "{err}");
    assert_eq!(
        env.current(&existing).await,
        base_location,
        "nothing landed"
    );
    // Once the commit landed, a request with a malformed binding is not its replay.
    catalog
        .commit(&existing, None, &base_location, &next_location)
        .await
        .expect("commit");
    assert_eq!(
        kind(
            commit(
                existing.clone(),
                base_location.clone(),
                next_location.clone()
            )
            .await
        ),
        ErrorKind::CommitConflict
    );
}

/// Issue 17, item 2: a commit whose `new` is already current succeeds (`already-applied`)
/// only as a retry of the commit that made it current: same base, same source binding.
pub async fn commit_replay_requires_the_same_request(env: TestEnv) {
    let catalog = &env.catalog;
    let (index, base, base_location) = env.registered("replay").await;
    let (next, next_location) = env.successor(&base, 2).await;
    let (_, never_current) = env.successor(&base, 3).await;
    let done = catalog
        .commit(&index, Some(&source(2)), &base_location, &next_location)
        .await
        .expect("commit");
    assert!(!done.already_applied);

    // The very same request, with or without the source, in any spelling of the base.
    for (what, source_arg, base_arg) in [
        ("same source", Some(source(2)), base_location.clone()),
        ("default source", None, base_location.clone()),
        (
            "base spelled differently",
            Some(source(2)),
            base_location.replacen("/metadata/", "/%6Detadata/", 1),
        ),
    ] {
        let replay = catalog
            .commit(&index, source_arg.as_ref(), &base_arg, &next_location)
            .await
            .unwrap_or_else(|err| panic!("{what}: {err}"));
        assert!(replay.already_applied, "{what}");
        assert_eq!(replay.pointer.metadata_location, next_location, "{what}");
        assert_eq!(replay.pointer.source, source(2), "{what}");
    }
    // A request that could not have produced the current state is a conflict.
    assert_eq!(
        kind(
            catalog
                .commit(&index, Some(&source(2)), &never_current, &next_location)
                .await
        ),
        ErrorKind::CommitConflict,
        "a base that was never current"
    );
    assert_eq!(
        kind(
            catalog
                .commit(&index, Some(&source(9)), &base_location, &next_location)
                .await
        ),
        ErrorKind::CommitConflict,
        "another source binding"
    );
    // Once the state moved on, the old request is a plain conflict.
    let (_, later_location) = env.successor(&next, 4).await;
    catalog
        .commit(&index, None, &next_location, &later_location)
        .await
        .expect("commit");
    assert_eq!(
        kind(
            catalog
                .commit(&index, Some(&source(2)), &base_location, &next_location)
                .await
        ),
        ErrorKind::CommitConflict
    );
    // A pointer that does not know what its location replaced (created by register or
    // rename) recognises no replay.
    let twin = id(index.namespace(), "twin");
    catalog
        .register(&twin, None, &later_location)
        .await
        .expect("register");
    assert_eq!(
        kind(
            catalog
                .commit(&twin, None, &next_location, &later_location)
                .await
        ),
        ErrorKind::CommitConflict,
        "registered pointer"
    );
    let moved = id(index.namespace(), "moved");
    catalog.rename(&index, &moved).await.expect("rename");
    assert_eq!(
        kind(
            catalog
                .commit(&moved, None, &next_location, &later_location)
                .await
        ),
        ErrorKind::CommitConflict,
        "renamed pointer"
    );
    assert_eq!(env.current(&moved).await, later_location);
}

/// Issue 17, item 3: one order of checks — the catalog's state before the request's
/// content — with an explicit source and with the default one alike.
pub async fn order_of_checks_with_and_without_source(env: TestEnv) {
    let catalog = &env.catalog;
    let namespace = env.namespace("order").await;
    let missing_ns =
        Namespace::new([format!("missing-{}", uuid::Uuid::new_v4().simple())]).expect("valid");
    let bad = env.write_raw(br#"{"format-version": 1}"#).await;
    let future = env.write_raw(br#"{"format-version": 2, "x": 1}"#).await;
    let (base, base_location) = env.new_index().await;
    let (_, next_location) = env.successor(&base, 2).await;
    let (_, foreign) = env.new_index().await;
    let source_one = source(1);
    let source_two = source(2);
    for (round, register_source, commit_source) in
        [(0, Some(&source_one), Some(&source_two)), (1, None, None)]
    {
        let target = id(&namespace, &format!("x{round}"));
        let register = |identifier: IndexIdentifier, location: String| async move {
            kind(
                catalog
                    .register(&identifier, register_source, &location)
                    .await,
            )
        };
        assert_eq!(
            register(id(&missing_ns, "x"), bad.clone()).await,
            ErrorKind::NamespaceNotFound,
            "round {round}: a missing namespace first"
        );
        assert_eq!(
            register(target.clone(), bad.clone()).await,
            ErrorKind::InvalidIndexMetadata
        );
        assert_eq!(
            register(target.clone(), future.clone()).await,
            ErrorKind::UnsupportedFormatVersion
        );
        let registered = catalog
            .register(&target, register_source, &base_location)
            .await
            .expect("register");
        assert_eq!(
            registered.source,
            source(1),
            "round {round}: the bound source"
        );
        assert_eq!(catalog.load(&target).await.expect("load").source, source(1));
        assert_eq!(
            register(target.clone(), bad.clone()).await,
            ErrorKind::AlreadyExists,
            "round {round}: existence before the metadata"
        );

        let commit = |identifier: IndexIdentifier, base: String, new: String| async move {
            kind(
                catalog
                    .commit(&identifier, commit_source, &base, &new)
                    .await,
            )
        };
        assert_eq!(
            commit(id(&namespace, "absent"), base_location.clone(), bad.clone()).await,
            ErrorKind::IndexNotFound,
            "round {round}: existence first"
        );
        assert_eq!(
            commit(target.clone(), next_location.clone(), bad.clone()).await,
            ErrorKind::CommitConflict,
            "round {round}: a stale base before the metadata"
        );
        assert_eq!(
            commit(target.clone(), base_location.clone(), bad.clone()).await,
            ErrorKind::InvalidIndexMetadata
        );
        assert_eq!(
            commit(target.clone(), base_location.clone(), future.clone()).await,
            ErrorKind::UnsupportedFormatVersion
        );
        assert_eq!(
            commit(target.clone(), base_location.clone(), foreign.clone()).await,
            ErrorKind::IndexUuidMismatch
        );
        let committed = catalog
            .commit(&target, commit_source, &base_location, &next_location)
            .await
            .expect("commit");
        assert_eq!(
            committed.pointer.source,
            source(2),
            "round {round}: the bound source"
        );
    }
    // An explicit source that differs from the metadata's source-table is refused.
    let other = id(&namespace, "other");
    assert_eq!(
        kind(
            catalog
                .register(&other, Some(&source(7)), &base_location)
                .await
        ),
        ErrorKind::InvalidIndexMetadata
    );
}

/// Issue 17, item 4: a metadata location is any absolute URI inside the warehouse; the
/// catalog stores and returns one canonical form.
pub async fn metadata_locations_are_uris(env: TestEnv) {
    let catalog = &env.catalog;
    let namespace = env.namespace("uris").await;
    let (base, _) = env.new_index().await;
    let name = format!(
        "metadata/{}/caf\u{e9} a-{}.metadata.json",
        base.index_uuid(),
        uuid::Uuid::new_v4().simple()
    );
    let canonical = env
        .warehouse
        .write_new(&name, bytes::Bytes::from(base.to_json_vec()))
        .await
        .expect("written");
    assert_eq!(canonical, env.warehouse.absolute(&name));
    assert!(canonical.contains("caf%C3%A9%20a-"), "{canonical}");
    let root = env.warehouse.root().to_owned();
    let spellings = [
        canonical.clone(),
        format!("{root}/{name}"),
        canonical.replace("%C3%A9", "%c3%a9"),
        canonical.replacen("/metadata/", "/%6D%65tadata/", 1),
    ];
    for (n, spelling) in spellings.iter().enumerate() {
        let index = id(&namespace, &format!("spelling-{n}"));
        let registered = catalog
            .register(&index, None, spelling)
            .await
            .unwrap_or_else(|err| panic!("`{spelling}`: {err}"));
        assert_eq!(registered.metadata_location, canonical, "`{spelling}`");
        assert_eq!(env.current(&index).await, canonical, "`{spelling}`");
    }
    // A commit based on another spelling, and its replay in yet another.
    let index = id(&namespace, "spelling-1");
    let (_, next_location) = env.successor(&base, 2).await;
    catalog
        .commit(&index, None, &spellings[1], &next_location)
        .await
        .expect("commit on an unescaped base");
    let replay = catalog
        .commit(
            &index,
            None,
            &spellings[2],
            &next_location.replacen("/metadata/", "/%6detadata/", 1),
        )
        .await
        .expect("replay");
    assert!(replay.already_applied);
    assert_eq!(replay.pointer.metadata_location, next_location);
    // `..`, empty segments and an escaped `/` stay refused.
    let (uuid, file) = name
        .strip_prefix("metadata/")
        .and_then(|rest| rest.split_once('/'))
        .expect("two segments");
    for refused in [
        format!("{root}/metadata/{uuid}/../{uuid}/{file}"),
        format!("{root}/metadata/x/%2E%2E/{uuid}/{file}"),
        format!("{root}/metadata//{uuid}/{file}"),
        format!("{root}/metadata%2F{uuid}/{file}"),
        format!("{root}/metadata/{uuid}%2F{file}"),
    ] {
        let index = id(&namespace, "refused");
        assert_eq!(
            kind(catalog.register(&index, None, &refused).await),
            ErrorKind::InvalidIndexMetadata,
            "`{refused}`"
        );
    }
}

/// Issue 17, item 5: integers follow JSON — `-0` is the integer 0 — and a
/// `format-version` outside the `int` range is an out-of-range integer.
pub async fn integers_follow_json(env: TestEnv) {
    let catalog = &env.catalog;
    let namespace = env.namespace("ints").await;
    let (base, _) = env.new_index().await;
    let text = String::from_utf8(base.to_json_vec()).expect("utf-8");
    let log_time = base.snapshot_log()[0].timestamp_ms();
    let zero = text.replacen(
        &format!("\"timestamp-ms\": {log_time},\n      \"snapshot-id\""),
        "\"timestamp-ms\": -0,\n      \"snapshot-id\"",
        1,
    );
    assert_ne!(zero, text, "the log entry was rewritten");
    let location = env.write_raw(zero.as_bytes()).await;
    catalog
        .register(&id(&namespace, "zero"), None, &location)
        .await
        .expect("-0 is a valid integer");
    for (version, expected) in [
        ("-0", ErrorKind::UnsupportedFormatVersion),
        ("2147483647", ErrorKind::UnsupportedFormatVersion),
        ("2147483648", ErrorKind::InvalidIndexMetadata),
        ("4294967297", ErrorKind::InvalidIndexMetadata),
        ("-2147483649", ErrorKind::InvalidIndexMetadata),
    ] {
        let doc = text.replacen(
            "\"format-version\": 1",
            &format!("\"format-version\": {version}"),
            1,
        );
        let location = env.write_raw(doc.as_bytes()).await;
        assert_eq!(
            kind(
                catalog
                    .register(&id(&namespace, "fv"), None, &location)
                    .await
            ),
            expected,
            "format-version {version}"
        );
    }
}

/// Issue 17, item 5: a store that refuses for good (access denied, a missing bucket or
/// table) is `STORE_REFUSED`, which no one should retry.
pub async fn store_refusal_is_permanent(refusing: SharedCatalog) {
    let namespace = Namespace::new(["refused"]).expect("valid");
    let index = id(&namespace, "x");
    for (what, err) in [
        (
            "create_namespace",
            refusing
                .create_namespace(&namespace, BTreeMap::new())
                .await
                .expect_err("refused"),
        ),
        (
            "register",
            refusing
                .register(&index, None, "memory://nowhere/metadata/x.json")
                .await
                .expect_err("refused"),
        ),
    ] {
        assert_eq!(err.kind(), ErrorKind::StoreRefused, "{what}: {err}");
        assert!(!err.is_retryable(), "{what}");
    }
}

/// Issue 17, item 5: register, drop, rename and namespace operations have no base, so
/// under contention they never answer `COMMIT_CONFLICT` (giving up is
/// `CONCURRENT_MODIFICATION`, retryable). On a loaded machine a rename whose settling
/// gives up, or a register whose write outlives its publish window, cannot tell whether
/// it landed: that is `COMMIT_STATE_UNKNOWN` (reload to find out), never a conflict.
pub async fn operations_without_a_base_never_report_commit_conflict(env: TestEnv) {
    let namespace = env.namespace("churn").await;
    let (_, location) = env.new_index().await;
    let a = id(&namespace, "a");
    env.catalog
        .register(&a, None, &location)
        .await
        .expect("register");
    let mut tasks = Vec::new();
    for writer in 0..6 {
        let catalog = env.catalog.clone();
        let (namespace, location) = (namespace.clone(), location.clone());
        tasks.push(tokio::spawn(async move {
            let a = id(&namespace, "a");
            let b = id(&namespace, "b");
            let child = namespace.child("child").expect("valid");
            let mut kinds = Vec::new();
            for _ in 0..4 {
                let results: Vec<parqdb_catalog::Result<()>> = match writer % 3 {
                    0 => vec![
                        catalog.rename(&a, &b).await.map(|_| ()),
                        catalog.rename(&b, &a).await.map(|_| ()),
                    ],
                    1 => vec![
                        catalog.drop_index(&a).await,
                        catalog.register(&a, None, &location).await.map(|_| ()),
                    ],
                    _ => vec![
                        catalog.create_namespace(&child, BTreeMap::new()).await,
                        catalog.drop_namespace(&child).await,
                    ],
                };
                kinds.extend(
                    results
                        .into_iter()
                        .filter_map(|r| r.err())
                        .map(|e| e.kind()),
                );
            }
            kinds
        }));
    }
    for task in tasks {
        for kind in task.await.expect("task") {
            assert!(
                matches!(
                    kind,
                    ErrorKind::AlreadyExists
                        | ErrorKind::IndexNotFound
                        | ErrorKind::NamespaceNotFound
                        | ErrorKind::ConcurrentModification
                        | ErrorKind::CommitStateUnknown
                ),
                "an operation without a base answered {kind}"
            );
            if kind == ErrorKind::ConcurrentModification {
                assert!(kind.is_retryable());
            }
        }
    }
}

/// Instantiate the suite: `catalog_conformance!(async_factory_expr)`; the factory returns
/// a fresh [`TestEnv`] per test.
#[macro_export]
macro_rules! catalog_conformance {
    ($factory:expr, refusing: $refusing:expr) => {
        #[tokio::test]
        async fn conformance_store_refusal_is_permanent() {
            $crate::support::conformance::store_refusal_is_permanent($refusing.await).await;
        }
        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn conformance_operations_without_a_base_never_report_commit_conflict() {
            $crate::support::conformance::operations_without_a_base_never_report_commit_conflict(
                $factory.await,
            )
            .await;
        }
        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn conformance_sixteen_racing_commits_one_winner() {
            $crate::support::conformance::racing_commits_one_winner($factory.await, 16).await;
        }
        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn conformance_eight_writers_fifty_successors_none_lost() {
            $crate::support::conformance::contended_chain_loses_nothing($factory.await, 8, 50).await;
        }
        catalog_conformance!(@cases $factory;
            conformance_commit_publishes_only_successors => commit_publishes_only_successors,
            conformance_publish_and_expire_the_old_current_in_one_commit => publish_and_expire_the_old_current_in_one_commit,
            conformance_a_base_written_under_earlier_rules_takes_a_successor => a_base_written_under_earlier_rules_takes_a_successor,
            conformance_commit_replay_requires_the_same_request => commit_replay_requires_the_same_request,
            conformance_order_of_checks_with_and_without_source => order_of_checks_with_and_without_source,
            conformance_malformed_source_bindings_follow_the_order_of_checks => malformed_source_bindings_follow_the_order_of_checks,
            conformance_metadata_locations_are_uris => metadata_locations_are_uris,
            conformance_integers_follow_json => integers_follow_json,
            conformance_namespaces_lifecycle => namespaces_lifecycle,
            conformance_register_and_load => register_and_load,
            conformance_register_error_precedence => register_error_precedence,
            conformance_commit_chain => commit_chain,
            conformance_commit_errors_and_precedence => commit_errors_and_precedence,
            conformance_load_if_changed => load_if_changed,
            conformance_drop_and_reregister => drop_and_reregister,
            conformance_rename_semantics => rename_semantics,
            conformance_list_pagination => list_pagination,
            conformance_listings_check_the_namespace_before_the_page => listings_check_the_namespace_before_the_page,
            conformance_list_pagination_across_runs_of_tombstones => list_pagination_across_tombstones
        );
    };
    // One test per case: `$test` runs `$crate::support::conformance::$case` on a fresh environment.
    (@cases $factory:expr; $($test:ident => $case:ident),+) => {
        $(
            #[tokio::test]
            async fn $test() {
                $crate::support::conformance::$case($factory.await).await;
            }
        )+
    };
}

/// Keep `Arc` imported for factories that share a catalog.
pub type SharedCatalog = Arc<dyn IndexCatalog>;
