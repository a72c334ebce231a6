//! Explicit namespaces (the Iceberg model): create, exists, properties, list, drop.
//!
//! A namespace record is its own key (`n/<parents>/=<leaf>`); a dropped namespace is a
//! tombstone record, like a dropped index. Nested namespaces need their parent.
//!
//! Known limit: dropping a namespace checks emptiness and then writes its tombstone; it is
//! not atomic with a `register` or `rename` into that namespace that runs at the same
//! moment. Such an index stays loadable and becomes listable again when the namespace is
//! re-created.

use std::collections::BTreeMap;

use bytes::Bytes;

use super::index::{MAX_REEVALUATIONS, Visibility};
use super::record::{NamespaceRecord, PointerRecord};
use super::write::{Basis, WriteOutcome, conditional_write_listed, read_with_retry};
use super::{Catalog, NamespacePage, page_size};
use crate::error::{Error, ErrorKind, Result};
use crate::identifier::Namespace;
use crate::store::{PutMode, StoreKey, Version, Versioned};

fn namespace_not_found(namespace: &Namespace) -> Error {
    Error::new(
        ErrorKind::NamespaceNotFound,
        format!("namespace {namespace} does not exist"),
    )
}

impl Catalog {
    pub(crate) async fn namespace_record(
        &self,
        namespace: &Namespace,
    ) -> Result<Option<(NamespaceRecord, Version)>> {
        read_with_retry(self.store().as_ref(), &namespace.store_key(), self.retry())
            .await?
            .map(|stored| Ok((NamespaceRecord::from_bytes(&stored.value)?, stored.version)))
            .transpose()
    }

    async fn write_namespace(
        &self,
        namespace: &Namespace,
        previous: Option<&(NamespaceRecord, Version)>,
        record: &NamespaceRecord,
    ) -> Result<WriteOutcome> {
        let (mode, basis) = match previous {
            None => (PutMode::Create, Basis::Absent),
            Some((previous, version)) => (
                PutMode::Update(version.clone()),
                Basis::Commit(previous.commit_id),
            ),
        };
        conditional_write_listed(
            self.store().as_ref(),
            &namespace.store_key(),
            Bytes::from(record.to_bytes()),
            mode,
            record.listing(),
            basis,
            record.commit_id,
            self.retry(),
        )
        .await
    }

    pub(crate) async fn create_namespace_record(
        &self,
        namespace: &Namespace,
        properties: BTreeMap<String, String>,
    ) -> Result<()> {
        self.ensure_writable(None).await?;
        if let Some(parent) = namespace.parent() {
            self.require_namespace(&parent).await?;
        }
        for _ in 0..MAX_REEVALUATIONS {
            let previous = self.namespace_record(namespace).await?;
            if previous.as_ref().is_some_and(|(record, _)| record.exists) {
                return Err(Error::new(
                    ErrorKind::AlreadyExists,
                    format!("namespace {namespace} already exists"),
                ));
            }
            let record = NamespaceRecord::new(
                previous.as_ref().map(|(r, _)| r),
                true,
                properties.clone(),
                self.fresh_commit_id(),
                self.now_ms(),
            );
            match self
                .write_namespace(namespace, previous.as_ref(), &record)
                .await?
            {
                WriteOutcome::Applied(_) => return Ok(()),
                WriteOutcome::Lost => continue,
            }
        }
        Err(contended(namespace))
    }

    pub(crate) async fn namespace_properties_of(
        &self,
        namespace: &Namespace,
    ) -> Result<BTreeMap<String, String>> {
        match self.namespace_record(namespace).await? {
            Some((record, _)) if record.exists => Ok(record.properties),
            _ => Err(namespace_not_found(namespace)),
        }
    }

    pub(crate) async fn list_namespace_records(
        &self,
        parent: Option<&Namespace>,
        page_token: Option<&str>,
        requested: Option<usize>,
    ) -> Result<NamespacePage> {
        // The catalog's state before the request's content (see the module docs).
        let prefix = match parent {
            Some(parent) => {
                self.require_namespace(parent).await?;
                parent.children_prefix()
            }
            None => Namespace::top_level_prefix(),
        };
        let size = page_size(requested)?;
        let exists = |value: Option<Versioned>| async move {
            Ok(match value {
                None => true,
                Some(value) => NamespaceRecord::from_bytes(&value.value)?.exists,
            })
        };
        let (namespaces, next_page_token) = self
            .list_visible(&prefix, page_token, size, exists, Namespace::from_store_key)
            .await?;
        Ok(NamespacePage {
            namespaces,
            next_page_token,
        })
    }

    /// Whether any visible index or live namespace is stored under `prefix`.
    async fn holds_anything(&self, prefix: &StoreKey, indexes: bool) -> Result<bool> {
        let mut after = None;
        loop {
            let page = self.scan(prefix, after.as_ref(), 100).await?;
            for (_, value) in &page.records {
                let visible = match value {
                    None => true,
                    Some(value) if indexes => {
                        let record = PointerRecord::from_bytes(&value.value)?;
                        let stored = super::index::Stored {
                            record,
                            version: value.version.clone(),
                        };
                        matches!(self.visibility(Some(stored)).await?, Visibility::Visible(_))
                    }
                    Some(value) => NamespaceRecord::from_bytes(&value.value)?.exists,
                };
                if visible {
                    return Ok(true);
                }
            }
            if !page.more {
                return Ok(false);
            }
            // Past every listed record, hidden ones included (a page of tombstones only
            // lists no record at all).
            after = page.last;
        }
    }

    pub(crate) async fn drop_namespace_record(&self, namespace: &Namespace) -> Result<()> {
        self.ensure_writable(None).await?;
        for _ in 0..MAX_REEVALUATIONS {
            let current = match self.namespace_record(namespace).await? {
                Some(current) if current.0.exists => current,
                _ => return Err(namespace_not_found(namespace)),
            };
            if self
                .holds_anything(&namespace.indexes_prefix(), true)
                .await?
                || self
                    .holds_anything(&namespace.children_prefix(), false)
                    .await?
            {
                return Err(Error::new(
                    ErrorKind::NamespaceNotEmpty,
                    format!("namespace {namespace} still holds indexes or namespaces"),
                ));
            }
            let record = NamespaceRecord::new(
                Some(&current.0),
                false,
                BTreeMap::new(),
                self.fresh_commit_id(),
                self.now_ms(),
            );
            match self
                .write_namespace(namespace, Some(&current), &record)
                .await?
            {
                WriteOutcome::Applied(_) => return Ok(()),
                WriteOutcome::Lost => continue,
            }
        }
        Err(contended(namespace))
    }
}

/// The error of a namespace mutation that kept losing races to other writers.
fn contended(namespace: &Namespace) -> Error {
    Error::new(
        ErrorKind::ConcurrentModification,
        format!("namespace {namespace} kept changing under concurrent writers; retry"),
    )
}
