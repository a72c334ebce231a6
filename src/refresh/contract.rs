//! The build contract between the `refresh` function and a builder function: version
//! `parqdb.refresh.build/1`, strict both ways.
//!
//! The refresh function (with `PARQDB_REFRESH_BUILDER_FUNCTION` set; see
//! [`LambdaBuilder`](super::LambdaBuilder)) invokes the builder function synchronously with
//! one [`BuildFunctionRequest`] per index and batch, and publishes the snapshot of the
//! [`BuildFunctionResponse`] it answers. Both are JSON objects; every field below is
//! required unless marked optional, and an unknown, duplicate, missing or ill-typed field
//! at any depth, trailing data, or another `contract` is refused: by the builder (it
//! should answer a function error; the example builder answers `INVALID_REQUEST`) and by
//! the refresh function (`INVALID_CONFIGURATION`: the deployed builder does not speak
//! this contract), naming the JSON path.
//!
//! Request:
//!
//! ```json
//! {
//!   "contract": "parqdb.refresh.build/1",
//!   "index": {"namespace": ["search"], "name": "docs"},
//!   "index-uuid": "5f0c...",            "build-id": "9a41...",
//!   "warehouse": "s3://warehouse-bucket/prefix",
//!   "table-prefix": "indexes/5f0c.../9a41.../",
//!   "read-start-ms": 1750000000000,
//!   "newest": {"bucket": "lake", "key": "docs/part-7.parquet", "sequencer": "0061...",
//!              "time-ms": 1749999998000, "version-id": "...", "size": 1048576},
//!   "changed": [ ...the same objects: each changed object's latest write... ],
//!   "changes": 12,
//!   "source-table": {"provider": "parquet", "properties": {...}},
//!   "current-snapshot-id": 4151367...
//! }
//! ```
//!
//! `version-id` and `size` of a change are optional; `current-snapshot-id` is `null` when
//! the refresh creates the index. The builder reads the source table (only from
//! `read-start-ms` on: no listing cached from before), writes every index table to a fresh
//! location below `<warehouse>/<table-prefix>` (never an existing path: a build the
//! refresh discards leaves orphans for the garbage collector), and answers:
//!
//! ```json
//! {
//!   "contract": "parqdb.refresh.build/1",
//!   "build-id": "9a41...",
//!   "snapshot": { ...snapshot contents, as `publish` takes them: "source-table" (use
//!                 the request's), "vector-field", "source-key-fields", "indexed-rows",
//!                 "index-family", "index-schema-version", "metric", "parameters",
//!                 "index-provider", "index-tables", optional "summary"... }
//! }
//! ```
//!
//! `build-id` must be the request's. The refresh adds its bookkeeping to `summary`
//! (`parqdb.refresh.read-start-ms`, `parqdb.idempotency-key`) and publishes; contents that
//! break a metadata rule fail at publication (`INVALID_INDEX_METADATA`).

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::{BuildRequest, SourceChange};
use crate::error::{Error, ErrorKind, Result};
use crate::identifier::IndexIdentifier;
use crate::json::{self, strict_object};
use crate::metadata::{SnapshotContents, TableDefinition};

/// The contract's name and version, the `contract` field of both messages.
#[doc(hidden)] // For the functions crate's tests; `BuildFunctionResponse::new` sets it.
pub const BUILD_CONTRACT: &str = "parqdb.refresh.build/1";

/// The largest message of the contract, in bytes (Lambda's synchronous payload limit).
pub(crate) const MAX_BUILD_MESSAGE_BYTES: usize = 6 * 1024 * 1024;

/// One build, as the refresh function sends it to the builder function.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(remote = "Self", deny_unknown_fields, rename_all = "kebab-case")]
pub struct BuildFunctionRequest {
    /// `parqdb.refresh.build/1`.
    pub contract: String,
    /// The index being refreshed.
    pub index: IndexIdentifier,
    /// Its UUID (new when the refresh creates the index).
    pub index_uuid: Uuid,
    /// This build's id (echoed in the response).
    pub build_id: Uuid,
    /// The warehouse root URI.
    pub warehouse: String,
    /// Where to write the index tables, relative to the warehouse
    /// (`indexes/<index-uuid>/<build-id>/`).
    pub table_prefix: String,
    /// When the build starts reading the source (Unix epoch milliseconds).
    pub read_start_ms: i64,
    /// The change with the latest time.
    pub newest: SourceChange,
    /// Each changed object's latest write, in key order.
    pub changed: Vec<SourceChange>,
    /// How many changes (deliveries included) the batch had.
    pub changes: usize,
    /// The source table's definition for the snapshot.
    pub source_table: TableDefinition,
    /// The index's current snapshot id (`null` when the refresh creates the index).
    pub current_snapshot_id: Option<i64>,
}

strict_object!(BuildFunctionRequest);

/// A [`SourceChange`] as the contract carries it: read strictly (unknown, duplicate,
/// missing or ill-typed fields are refused, naming the JSON path), then checked as
/// [`SourceChange::new`] checks it. It serializes as [`SourceChange`] does.
#[derive(Deserialize)]
#[serde(remote = "Self", deny_unknown_fields, rename_all = "kebab-case")]
struct ChangedObject {
    bucket: String,
    key: String,
    sequencer: String,
    time_ms: i64,
    #[serde(default)]
    version_id: Option<String>,
    #[serde(default)]
    size: Option<u64>,
}

strict_object!(deserialize ChangedObject);

impl<'de> Deserialize<'de> for SourceChange {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let wire = <ChangedObject as Deserialize>::deserialize(deserializer)?;
        SourceChange::new(wire.bucket, wire.key, wire.sequencer, wire.time_ms)
            .map(|change| change.with_version_id(wire.version_id).with_size(wire.size))
            .map_err(|err| serde::de::Error::custom(err.message()))
    }
}

/// The builder function's answer.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(remote = "Self", deny_unknown_fields, rename_all = "kebab-case")]
pub struct BuildFunctionResponse {
    /// `parqdb.refresh.build/1`.
    pub contract: String,
    /// The request's build id.
    pub build_id: Uuid,
    /// The new snapshot's contents.
    pub snapshot: SnapshotContents,
}

strict_object!(BuildFunctionResponse);

/// Parse `bytes` as one `T` of the contract: one JSON object, nothing after it, at most
/// 6 MiB, `contract` equal to `parqdb.refresh.build/1`. Errors are `kind`,
/// worded `<what>: <path>: <why>`.
fn parse<T: serde::de::DeserializeOwned>(
    bytes: &[u8],
    what: &str,
    kind: ErrorKind,
    contract: impl Fn(&T) -> &str,
) -> Result<T> {
    if bytes.len() > MAX_BUILD_MESSAGE_BYTES {
        return Err(Error::new(
            kind,
            format!(
                "{what}: {} bytes exceeds the {MAX_BUILD_MESSAGE_BYTES}-byte limit",
                bytes.len()
            ),
        ));
    }
    let message: T = json::from_slice(bytes).map_err(|err| match err.path() {
        None => Error::new(kind, format!("{what}: {}", err.inner())),
        Some(path) => Error::new(kind, format!("{what}: at `{path}`: {}", err.inner())),
    })?;
    let version = contract(&message);
    if version != BUILD_CONTRACT {
        return Err(Error::new(
            kind,
            format!("{what}: contract `{version}` is not `{BUILD_CONTRACT}`"),
        ));
    }
    Ok(message)
}

impl BuildFunctionRequest {
    /// The request for `request` (what the refresh function sends).
    #[doc(hidden)] // The refresh side of the contract (LambdaBuilder).
    pub fn new(request: &BuildRequest<'_>) -> BuildFunctionRequest {
        BuildFunctionRequest {
            contract: BUILD_CONTRACT.to_owned(),
            index: request.index.clone(),
            index_uuid: request.index_uuid,
            build_id: request.build_id,
            warehouse: request.warehouse.root().to_owned(),
            table_prefix: format!(
                "indexes/{}/{}/",
                request.index_uuid.simple(),
                request.build_id.simple()
            ),
            read_start_ms: request.read_start_ms,
            newest: request.newest.clone(),
            changed: request.changed.to_vec(),
            changes: request.changes,
            source_table: request.source_table.clone(),
            current_snapshot_id: request
                .current
                .map(|metadata| metadata.current_snapshot().snapshot_id()),
        }
    }

    /// Parse a request strictly (what a builder function does): `INVALID_REQUEST` naming
    /// the JSON path (an invalid change too), or for another contract version.
    pub fn from_json_slice(bytes: &[u8]) -> Result<BuildFunctionRequest> {
        parse(
            bytes,
            "build request",
            ErrorKind::InvalidRequest,
            |request: &BuildFunctionRequest| &request.contract,
        )
    }

    /// The request as JSON bytes.
    #[doc(hidden)] // The refresh side of the contract (LambdaBuilder).
    pub fn to_json_vec(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }
}

impl BuildFunctionResponse {
    /// The answer for `request` with `snapshot` (what a builder function returns).
    pub fn new(request: &BuildFunctionRequest, snapshot: SnapshotContents) -> Self {
        BuildFunctionResponse {
            contract: BUILD_CONTRACT.to_owned(),
            build_id: request.build_id,
            snapshot,
        }
    }

    /// Parse a response strictly (what the refresh function does): `INVALID_CONFIGURATION`
    /// (the builder does not speak this contract) naming the JSON path, for another
    /// contract version, or for another build's id than `build_id`.
    #[doc(hidden)] // The refresh side of the contract (LambdaBuilder).
    pub fn from_json_slice(bytes: &[u8], build_id: Uuid) -> Result<BuildFunctionResponse> {
        let response: BuildFunctionResponse = parse(
            bytes,
            "build response",
            ErrorKind::Configuration,
            |response: &BuildFunctionResponse| &response.contract,
        )?;
        if response.build_id != build_id {
            return Err(Error::new(
                ErrorKind::Configuration,
                format!(
                    "build response: at `build-id`: {} answers another build than {build_id}",
                    response.build_id
                ),
            ));
        }
        Ok(response)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use serde_json::{Value, json};

    use super::*;
    use crate::identifier::Namespace;
    use crate::metadata::{IndexTableDefinition, ProviderDefinition};

    fn request() -> BuildFunctionRequest {
        let change = SourceChange::new("lake", "docs/p.parquet", "0A", 5)
            .expect("a valid change")
            .with_size(Some(10));
        BuildFunctionRequest {
            contract: BUILD_CONTRACT.into(),
            index: IndexIdentifier::new(Namespace::new(["search"]).expect("ns"), "docs")
                .expect("id"),
            index_uuid: Uuid::nil(),
            build_id: Uuid::from_u128(7),
            warehouse: "s3://w/p".into(),
            table_prefix: "indexes/0/7/".into(),
            read_start_ms: 9,
            newest: change.clone(),
            changed: vec![change],
            changes: 1,
            source_table: TableDefinition::new(
                "parquet",
                BTreeMap::from([("location".to_owned(), "s3://lake/docs/".to_owned())]),
            )
            .expect("table"),
            current_snapshot_id: None,
        }
    }

    fn response(request: &BuildFunctionRequest) -> Value {
        let snapshot = SnapshotContents {
            source_table: request.source_table.clone(),
            vector_field: "embedding".into(),
            source_key_fields: vec!["id".into()],
            indexed_rows: 1,
            index_family: "ivf".into(),
            index_schema_version: 1,
            metric: "l2_squared".into(),
            parameters: BTreeMap::new(),
            index_provider: ProviderDefinition::new("parquet", BTreeMap::new()).expect("p"),
            index_tables: BTreeMap::from([(
                "ivf_centroids".to_owned(),
                IndexTableDefinition::new(
                    1,
                    BTreeMap::from([("location".to_owned(), "indexes/0/7/c/".to_owned())]),
                )
                .expect("table"),
            )]),
            summary: BTreeMap::new(),
        };
        serde_json::to_value(BuildFunctionResponse::new(request, snapshot)).expect("json")
    }

    #[test]
    fn requests_round_trip_and_are_strict() {
        let request = request();
        let bytes = request.to_json_vec();
        assert_eq!(
            BuildFunctionRequest::from_json_slice(&bytes).expect("parses"),
            request
        );
        let valid: Value = serde_json::from_slice(&bytes).expect("json");
        let mut cases: Vec<(Value, &str)> = Vec::new();
        let mut unknown = valid.clone();
        unknown["extra"] = json!(1);
        cases.push((unknown, "extra"));
        let mut nested = valid.clone();
        nested["newest"]["etag"] = json!("x");
        cases.push((nested, "newest"));
        let mut typed = valid.clone();
        typed["read-start-ms"] = json!("9");
        cases.push((typed, "read-start-ms"));
        let mut missing = valid.clone();
        missing.as_object_mut().expect("object").remove("changed");
        cases.push((missing, "changed"));
        let mut version = valid.clone();
        version["contract"] = json!("parqdb.refresh.build/2");
        cases.push((version, "contract"));
        let mut bad_change = valid.clone();
        bad_change["changed"][0]["sequencer"] = json!("not hex");
        cases.push((bad_change, "sequencer"));
        for (bad, mentions) in cases {
            let err = BuildFunctionRequest::from_json_slice(bad.to_string().as_bytes())
                .expect_err("refused");
            assert_eq!(err.kind(), ErrorKind::InvalidRequest, "{bad}");
            assert!(err.message().contains(mentions), "{mentions}: {err}");
        }
        let trailing = format!("{valid} {{}}");
        assert!(BuildFunctionRequest::from_json_slice(trailing.as_bytes()).is_err());
        assert!(BuildFunctionRequest::from_json_slice(b"[]").is_err());
    }

    #[test]
    fn responses_are_strict() {
        let request = request();
        let valid = response(&request);
        let parsed =
            BuildFunctionResponse::from_json_slice(valid.to_string().as_bytes(), request.build_id)
                .expect("parses");
        assert_eq!(parsed.snapshot.index_family, "ivf");
        let mut cases: Vec<(Value, &str)> = Vec::new();
        let mut unknown = valid.clone();
        unknown["snapshot"]["colour"] = json!("red");
        cases.push((unknown, "snapshot"));
        let mut typed = valid.clone();
        typed["snapshot"]["indexed-rows"] = json!("1");
        cases.push((typed, "snapshot.indexed-rows"));
        let mut version = valid.clone();
        version["contract"] = json!("parqdb.refresh.build/0");
        cases.push((version, "contract"));
        let mut other = valid.clone();
        other["build-id"] = json!(Uuid::from_u128(8).to_string());
        cases.push((other, "build-id"));
        cases.push((
            json!({"errorType": "x", "errorMessage": "y"}),
            "unknown field",
        ));
        for (bad, mentions) in cases {
            let err = BuildFunctionResponse::from_json_slice(
                bad.to_string().as_bytes(),
                request.build_id,
            )
            .expect_err("refused");
            assert_eq!(err.kind(), ErrorKind::Configuration, "{bad}");
            assert!(err.message().contains(mentions), "{mentions}: {err}");
        }
    }
}
