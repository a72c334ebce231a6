//! `parqdb-catalog publish|expire`: successor publication and snapshot expiry with the
//! [`Publisher`]'s retry loop.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;

use super::source::json_argument;
use crate::catalog::IndexCatalog;
use crate::clock::{Clock, SystemClock};
use crate::error::{Error, ErrorKind, Result};
use crate::identifier::{IndexIdentifier, Namespace};
use crate::metadata::SnapshotContents;
use crate::publish::{IDEMPOTENCY_KEY, PublishOutcome, Published, Publisher, Retention};
use crate::warehouse::Warehouse;

/// Arguments of `publish`: publish new snapshot contents as the current snapshot.
#[derive(Debug, Clone, Args)]
pub struct PublishArgs {
    /// Namespace segment, outermost first (repeat for nested namespaces).
    #[arg(long = "namespace", required = true)]
    pub namespace: Vec<String>,
    /// Index name.
    #[arg(long)]
    pub name: String,
    /// The new snapshot's contents (the snapshot fields without snapshot-id,
    /// sequence-number and timestamp-ms), as inline JSON or a file.
    #[arg(long, value_name = "FILE_OR_JSON")]
    pub snapshot: String,
    /// Publish at most once per key: if a retained snapshot already carries it, print
    /// that publication (with "already-published": true) instead.
    #[arg(long)]
    pub idempotency_key: Option<String>,
    /// Create the index (in an existing namespace) if it does not exist: the snapshot
    /// becomes its first, with the snapshot's `source-table` as the source binding.
    #[arg(long)]
    pub create: bool,
    /// Also expire, in the same commit, all but the N snapshots with the highest sequence
    /// numbers (the new one counts: `--keep-last 1` keeps only the new snapshot). At least 1.
    #[arg(long, value_name = "N", value_parser = parse_keep_last)]
    pub keep_last: Option<usize>,
    /// Also expire, in the same commit, the snapshots older than this (e.g. `7d`, `1h30m`);
    /// snapshots kept by --keep-last stay.
    #[arg(long, value_name = "DURATION", value_parser = crate::gc::config::parse_duration)]
    pub older_than: Option<Duration>,
}

/// `--keep-last N`: a whole number of at least 1 (the current snapshot is always kept, so
/// 0 would not mean what it says).
fn parse_keep_last(text: &str) -> std::result::Result<usize, String> {
    match text.parse::<usize>() {
        Ok(0) => Err("keeps at least 1 snapshot (the current one is always kept)".to_owned()),
        Ok(n) => Ok(n),
        Err(err) => Err(err.to_string()),
    }
}

/// Arguments of `expire`: remove old snapshots (the current one is always kept).
#[derive(Debug, Clone, Args)]
#[command(group(clap::ArgGroup::new("retention").required(true).multiple(true)))]
pub struct ExpireArgs {
    /// Namespace segment, outermost first (repeat for nested namespaces).
    #[arg(long = "namespace", required = true)]
    pub namespace: Vec<String>,
    /// Index name.
    #[arg(long)]
    pub name: String,
    /// Keep the N snapshots with the highest sequence numbers (at least 1: the current
    /// snapshot is always kept).
    #[arg(long, value_name = "N", group = "retention", value_parser = parse_keep_last)]
    pub keep_last: Option<usize>,
    /// Expire snapshots older than this (e.g. `7d`, `12h`, `1h30m`, `90s`, `500ms`);
    /// snapshots kept by --keep-last stay.
    #[arg(long, value_name = "DURATION", value_parser = crate::gc::config::parse_duration, group = "retention")]
    pub older_than: Option<Duration>,
}

fn identifier(namespace: &[String], name: &str) -> Result<IndexIdentifier> {
    IndexIdentifier::new(Namespace::new(namespace.to_vec())?, name.to_owned())
}

/// Publish `args.snapshot` to the index (creating it first with `--create`); prints
/// `{"metadata-location", "snapshot-id", "sequence-number", "attempts",
/// "already-published"}`.
pub async fn run_publish(
    args: &PublishArgs,
    catalog: Arc<dyn IndexCatalog>,
    warehouse: &Warehouse,
) -> Result<serde_json::Value> {
    let identifier = identifier(&args.namespace, &args.name)?;
    let contents = SnapshotContents::from_json_slice(&json_argument(&args.snapshot, "snapshot")?)?;
    let mut publisher = Publisher::builder(catalog, warehouse.clone());
    if args.keep_last.is_some() || args.older_than.is_some() {
        publisher = publisher.retention(Retention {
            keep_last: args.keep_last,
            max_age: args.older_than,
        });
    }
    let publisher = publisher.build();
    // Two rounds: if `--create` loses the creation race, publish on top of the winner.
    for _ in 0..2 {
        let published = publish(&publisher, &identifier, args, &contents).await;
        match published {
            Err(err) if args.create && err.kind() == ErrorKind::IndexNotFound => {
                let mut initial = contents.clone();
                if let Some(key) = &args.idempotency_key {
                    initial
                        .summary
                        .insert(IDEMPOTENCY_KEY.to_owned(), key.clone());
                }
                match publisher
                    .create_index(&identifier, initial, BTreeMap::new())
                    .await
                {
                    Err(err) if err.kind() == ErrorKind::AlreadyExists => continue,
                    created => return Ok(json(&created?)),
                }
            }
            published => return Ok(json(&published?)),
        }
    }
    Err(Error::new(
        ErrorKind::ConcurrentModification,
        format!("{identifier} was created and dropped concurrently; retry"),
    ))
}

async fn publish(
    publisher: &Publisher,
    identifier: &IndexIdentifier,
    args: &PublishArgs,
    contents: &SnapshotContents,
) -> Result<Published> {
    if let Some(key) = &args.idempotency_key {
        return publisher
            .publish_idempotent(identifier, key, contents.clone())
            .await;
    }
    match publisher
        .publish(identifier, |_| Ok(Some(contents.clone())))
        .await?
    {
        PublishOutcome::Published(published) => Ok(published),
        // The closure above never declines.
        PublishOutcome::Declined(declined) => Err(Error::new(
            ErrorKind::CommitConflict,
            format!("publication declined on `{}`", declined.metadata_location),
        )),
    }
}

fn json(value: &impl serde::Serialize) -> serde_json::Value {
    serde_json::to_value(value).unwrap_or_default()
}

/// Expire snapshots of the index; prints `{"metadata-location", "current-snapshot-id",
/// "last-sequence-number", "expired-snapshot-ids", "retained-snapshots", "attempts"}`.
pub async fn run_expire(
    args: &ExpireArgs,
    catalog: Arc<dyn IndexCatalog>,
    warehouse: &Warehouse,
) -> Result<serde_json::Value> {
    let identifier = identifier(&args.namespace, &args.name)?;
    let newer_than_ms = match args.older_than {
        Some(age) => {
            let age_ms = i64::try_from(age.as_millis()).unwrap_or(i64::MAX);
            Some(SystemClock.now_ms().saturating_sub(age_ms))
        }
        None => None,
    };
    let publisher = Publisher::new(catalog, warehouse.clone());
    let expired = publisher
        .expire(&identifier, args.keep_last, newer_than_ms)
        .await?;
    Ok(json(&expired))
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        expire: ExpireArgs,
    }

    fn older_than(text: &str) -> std::result::Result<Option<Duration>, clap::Error> {
        let args = [
            "expire",
            "--namespace",
            "a",
            "--name",
            "x",
            "--older-than",
            text,
        ];
        Cli::try_parse_from(args).map(|cli| cli.expire.older_than)
    }

    #[test]
    fn older_than_takes_the_crate_duration_syntax() {
        for (text, expected) in [
            ("1h30m", Duration::from_secs(5_400)),
            ("2w", Duration::from_secs(14 * 86_400)),
            ("90s", Duration::from_secs(90)),
            ("500ms", Duration::from_millis(500)),
            ("7d", Duration::from_secs(604_800)),
        ] {
            assert_eq!(older_than(text).expect(text), Some(expected), "{text}");
        }
        for bad in ["7", "1h30", "7x", "soon"] {
            let err = older_than(bad).expect_err(bad);
            assert_eq!(err.kind(), clap::error::ErrorKind::ValueValidation, "{bad}");
            let source = std::error::Error::source(&err)
                .and_then(|source| source.downcast_ref::<Error>())
                .expect("the typed error");
            assert_eq!(source.kind(), ErrorKind::InvalidRequest, "{bad}");
        }
    }
}
