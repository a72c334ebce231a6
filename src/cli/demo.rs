//! `parqdb-catalog demo`: the index lifecycle on real files, explained as it runs.

use std::collections::BTreeMap;

use bytes::Bytes;

use crate::catalog::{Catalog, IndexCatalog};
use crate::error::{ErrorKind, Result};
use crate::identifier::{IndexIdentifier, Namespace};
use crate::metadata::{
    IndexMetadata, IndexTableDefinition, ProviderDefinition, SnapshotContents, TableDefinition,
};

fn say(text: impl AsRef<str>) {
    println!("{}", text.as_ref());
}

fn source(version: u32) -> Result<TableDefinition> {
    TableDefinition::new(
        "parquet",
        BTreeMap::from([
            ("definition-version".to_owned(), "1".to_owned()),
            ("location".to_owned(), "s3://example/documents/".to_owned()),
            ("snapshot".to_owned(), version.to_string()),
        ]),
    )
}

/// Write placeholder index-table files and return snapshot contents naming them.
async fn index_tables(catalog: &Catalog, version: u32) -> Result<SnapshotContents> {
    let tag = catalog.ids().uuid().simple().to_string();
    let mut tables = BTreeMap::new();
    for role in ["ivf_centroids", "ivf_postings"] {
        let location = format!("indexes/{tag}/{role}/");
        catalog
            .warehouse()
            .write_new(
                &format!("{location}part-0.parquet"),
                Bytes::from_static(b"placeholder index table"),
            )
            .await?;
        tables.insert(
            role.to_owned(),
            IndexTableDefinition::new(1, BTreeMap::from([("location".to_owned(), location)]))?,
        );
    }
    Ok(SnapshotContents {
        source_table: source(version)?,
        vector_field: "embedding".into(),
        source_key_fields: vec!["document_id".into()],
        indexed_rows: 1000 * i64::from(version),
        index_family: "ivf".into(),
        index_schema_version: 1,
        metric: "cosine".into(),
        parameters: BTreeMap::from([("nlist".to_owned(), "64".to_owned())]),
        index_provider: ProviderDefinition::new("parquet", BTreeMap::new())?,
        index_tables: tables,
        summary: BTreeMap::from([("operation".to_owned(), format!("demo refresh {version}"))]),
    })
}

async fn write_metadata(catalog: &Catalog, metadata: &IndexMetadata) -> Result<String> {
    let relative = format!(
        "metadata/{}/{:05}-{}.metadata.json",
        metadata.index_uuid(),
        metadata.last_sequence_number(),
        catalog.ids().uuid()
    );
    catalog
        .warehouse()
        .write_new(&relative, Bytes::from(metadata.to_json_vec()))
        .await
}

async fn successor(
    catalog: &Catalog,
    base: &IndexMetadata,
    version: u32,
) -> Result<(IndexMetadata, String)> {
    let contents = index_tables(catalog, version).await?;
    let next = base.successor(
        contents,
        catalog.clock().as_ref(),
        catalog.ids().as_ref(),
        catalog.registry(),
    )?;
    let location = write_metadata(catalog, &next).await?;
    Ok((next, location))
}

pub(crate) async fn run(catalog: &Catalog) -> Result<()> {
    say(format!("warehouse: {}", catalog.warehouse().root()));
    say(format!("catalog:   {}", catalog.store().describe()));
    let namespace = Namespace::new(["demo"])?;
    match catalog.create_namespace(&namespace, BTreeMap::new()).await {
        Ok(()) => say("1. created namespace [\"demo\"]"),
        Err(err) if err.kind() == ErrorKind::AlreadyExists => {
            say("1. namespace [\"demo\"] exists already")
        }
        Err(err) => return Err(err),
    }
    let id = IndexIdentifier::new(namespace.clone(), "embeddings")?;
    let renamed = IndexIdentifier::new(namespace.clone(), "embeddings-v2")?;
    for leftover in [&id, &renamed] {
        if catalog.drop_index(leftover).await.is_ok() {
            say(format!(
                "   (dropped {leftover} left over from an interrupted run)"
            ));
        }
    }

    let contents = index_tables(catalog, 1).await?;
    let mut metadata = IndexMetadata::create(
        contents,
        BTreeMap::new(),
        catalog.clock().as_ref(),
        catalog.ids().as_ref(),
        catalog.registry(),
    )?;
    let mut location = write_metadata(catalog, &metadata).await?;
    say(format!(
        "2. wrote initial metadata and placeholder index tables:\n   {location}"
    ));
    catalog.register(&id, Some(&source(1)?), &location).await?;
    say(format!(
        "3. registered {id} (index-uuid {})",
        metadata.index_uuid()
    ));

    for version in 2..=4 {
        let (next, next_location) = successor(catalog, &metadata, version).await?;
        catalog
            .commit(&id, Some(&source(version)?), &location, &next_location)
            .await?;
        say(format!(
            "4. published successor: sequence {} -> {}",
            next.last_sequence_number(),
            next_location
        ));
        (metadata, location) = (next, next_location);
    }

    say("5. two writers race on the same base:");
    let (a, a_location) = successor(catalog, &metadata, 5).await?;
    let (_, b_location) = successor(catalog, &metadata, 6).await?;
    let (source_a, source_b) = (source(5)?, source(6)?);
    let (first, second) = tokio::join!(
        catalog.commit(&id, Some(&source_a), &location, &a_location),
        catalog.commit(&id, Some(&source_b), &location, &b_location),
    );
    let (winner, loser_version) = match (&first, &second) {
        (Ok(_), Err(err)) if err.kind() == ErrorKind::CommitConflict => ("A", 6),
        (Err(err), Ok(_)) if err.kind() == ErrorKind::CommitConflict => ("B", 5),
        _ => {
            first?;
            second?;
            unreachable!("two commits on one base cannot both succeed")
        }
    };
    let loser = if winner == "A" { "B" } else { "A" };
    say(format!(
        "   writer {winner} won; writer {loser} got COMMIT_CONFLICT and reloads"
    ));
    let current = catalog.load(&id).await?;
    let base = catalog.read_metadata(&current.metadata_location).await?;
    let (retry, retry_location) = successor(catalog, &base, loser_version).await?;
    catalog
        .commit(
            &id,
            Some(&source(loser_version)?),
            &current.metadata_location,
            &retry_location,
        )
        .await?;
    say(format!(
        "   writer {loser} reapplied on the new base and won: sequence {}",
        retry.last_sequence_number()
    ));
    let _ = a;

    catalog.rename(&id, &renamed).await?;
    say(format!("6. renamed {id} -> {renamed} (metadata untouched)"));
    let page = catalog.list(&namespace, None, None).await?;
    let names: Vec<&str> = page.identifiers.iter().map(IndexIdentifier::name).collect();
    say(format!("7. list [\"demo\"]: {names:?}"));
    catalog.drop_index(&renamed).await?;
    say(format!(
        "8. dropped {renamed}; its files stay until the garbage collector's retention window passes"
    ));
    Ok(())
}
