//! The deployment template (`infra/template.yaml`) against the code it deploys.
//!
//! * one `AWS::Serverless::Function` per binary in `functions/src/bin/`, built by
//!   `sam build` with cargo-lambda (`BuildMethod: rust-cargolambda`, `Binary: <name>`,
//!   `CodeUri` the functions crate), named `<stack>-<name>`, for the `Architecture`
//!   parameter, each with its own explicit role (no SAM-generated role, so no managed
//!   policy);
//! * every function knows its timeout (`PARQDB_FUNCTION_TIMEOUT`) and filters its own logs,
//!   with Lambda's log-level filter open so that metric lines are never dropped;
//! * the DynamoDB pointer table's key schema is the one `src/store/dynamodb/mod.rs` uses and
//!   documents (its attribute-name constants and its rustdoc schema table);
//! * only the garbage collector's role may delete objects, and only under `metadata/` and
//!   `indexes/` (the managed prefixes) and its own ledger `_gc/`; no role allows a wildcard
//!   action, and the only wildcard resource is the one IAM requires for
//!   `dynamodb:ListStreams`;
//! * the writing functions may claim the warehouse (create-only) and nothing else may write
//!   its ownership marker;
//! * every delivery path of pointer-change events has retries and a dead-letter queue,
//!   every queue a redrive policy, and the alarms watch what the issue tracker asked for;
//! * the gc cycle: its state machine's substitutions are its definition's placeholders,
//!   its parameters (`GcWorkers`, `GcPartitions`, `GcPageSize`) reach the Map states and the
//!   gc function within the collector's bounds, the function reserves the Map's
//!   concurrency, failed, timed-out and aborted executions reach an encrypted queue only
//!   their rule may write, and its alarms watch the metrics the gc function emits.
//!
//! The template is read with `serde_norway` into a `serde_norway::Value`
//! (`tests/it/support/infra.rs`); CloudFormation short-form tags (`!Sub`, `!If`, ...) arrive as
//! `Value::Tagged`. `tests/it/infra/operations.rs` checks how the stack is run: tracing,
//! aliases, the schedule's and manual invocations' failures, the dashboard, samconfig. `scripts/check-infra.sh`
//! validates the template itself (cfn-lint, checkov, SAM expansion).

use std::collections::{BTreeMap, BTreeSet};

use crate::support::infra::{
    branches, parameter, property, reference, resource, resources, resources_of_type, root,
    scalars, tagged, template,
};
use parqdb_catalog::store::dynamodb::{PARTITION_KEY, SORT_KEY};
use serde_norway::Value;

/// The function binaries: `functions/src/bin/<name>.rs`, but the examples (`example-*`, not
/// part of a deployment).
fn binaries() -> BTreeSet<String> {
    let dir = root().join("functions/src/bin");
    std::fs::read_dir(&dir)
        .unwrap_or_else(|err| panic!("read {}: {err}", dir.display()))
        .map(|entry| entry.expect("directory entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "rs"))
        .map(|path| {
            path.file_stem()
                .expect("file name")
                .to_string_lossy()
                .into_owned()
        })
        .filter(|name| !name.starts_with("example-"))
        .collect()
}

#[test]
fn one_function_per_binary_named_after_it() {
    let template = template();
    let mut deployed = BTreeMap::new();
    for (name, function) in resources_of_type(&template, "AWS::Serverless::Function") {
        let metadata = function.get("Metadata");
        assert_eq!(
            metadata
                .and_then(|m| m.get("BuildMethod"))
                .and_then(Value::as_str),
            Some("rust-cargolambda"),
            "{name}: sam build must build it with cargo-lambda"
        );
        let binary = metadata
            .and_then(|m| m.get("BuildProperties"))
            .and_then(|p| p.get("Binary"))
            .and_then(Value::as_str)
            .unwrap_or_else(|| panic!("{name}: Metadata.BuildProperties.Binary"));
        assert_eq!(
            property(function, "CodeUri").and_then(Value::as_str),
            Some("../functions/"),
            "{name}: CodeUri must be the functions crate"
        );
        if let Some(other) = deployed.insert(binary.to_owned(), name) {
            panic!("{other} and {name} both deploy the binary `{binary}`");
        }
        let function_name = property(function, "FunctionName").and_then(|n| tagged(n, "!Sub"));
        assert_eq!(
            function_name.and_then(Value::as_str),
            Some(format!("${{AWS::StackName}}-{binary}").as_str()),
            "{name}: FunctionName must be !Sub \"${{AWS::StackName}}-{binary}\""
        );
        assert!(
            property(function, "Role").is_some(),
            "{name}: needs an explicit Role"
        );
        assert!(
            property(function, "Policies").is_none(),
            "{name}: SAM `Policies` would generate a role with a managed policy; use the explicit role"
        );
        assert!(
            property(function, "Architectures").is_none(),
            "{name}: the architecture comes from Globals (the Architecture parameter)"
        );
    }
    let deployed: BTreeSet<String> = deployed.into_keys().collect();
    let binaries = binaries();
    assert_eq!(
        deployed,
        binaries,
        "template functions vs functions/src/bin: missing from the template {:?}, without a binary {:?}",
        binaries.difference(&deployed).collect::<Vec<_>>(),
        deployed.difference(&binaries).collect::<Vec<_>>()
    );

    let globals = template
        .get("Globals")
        .and_then(|g| g.get("Function"))
        .expect("Globals.Function");
    assert_eq!(
        globals.get("Runtime").and_then(Value::as_str),
        Some("provided.al2023")
    );
    assert_eq!(
        globals.get("Handler").and_then(Value::as_str),
        Some("bootstrap")
    );
    let architectures = globals
        .get("Architectures")
        .and_then(Value::as_sequence)
        .expect("Globals.Function.Architectures");
    let [architecture] = architectures.as_slice() else {
        panic!("one architecture for every function: {architectures:?}");
    };
    assert_eq!(
        tagged(architecture, "!Ref").and_then(Value::as_str),
        Some("Architecture")
    );
    let parameter = template
        .get("Parameters")
        .and_then(|p| p.get("Architecture"))
        .expect("an Architecture parameter");
    assert_eq!(
        parameter.get("Default").and_then(Value::as_str),
        Some("arm64")
    );
    let allowed: Vec<&str> = parameter
        .get("AllowedValues")
        .and_then(Value::as_sequence)
        .expect("AllowedValues")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(allowed, ["arm64", "x86_64"]);
}

#[test]
fn functions_know_their_timeout_and_never_let_lambda_drop_metrics() {
    let template = template();
    let global_env = template
        .get("Globals")
        .and_then(|g| g.get("Function"))
        .and_then(|f| f.get("Environment"))
        .and_then(|e| e.get("Variables"))
        .expect("Globals.Function.Environment.Variables");
    assert_eq!(
        reference(global_env.get("PARQDB_FUNCTION_TIMEOUT")),
        Some("FunctionTimeout")
    );
    assert_eq!(
        reference(global_env.get("PARQDB_LOG_LEVEL")),
        Some("LogLevel")
    );
    for (name, function) in resources_of_type(&template, "AWS::Serverless::Function") {
        let logging =
            property(function, "LoggingConfig").unwrap_or_else(|| panic!("{name}: LoggingConfig"));
        assert_eq!(
            logging.get("LogFormat").and_then(Value::as_str),
            Some("JSON"),
            "{name}"
        );
        // Lambda's filter counts the level-less metric lines as INFO: it must drop nothing.
        assert_eq!(
            logging.get("ApplicationLogLevel").and_then(Value::as_str),
            Some("TRACE"),
            "{name}: the functions filter their own logs (PARQDB_LOG_LEVEL)"
        );
        let own_timeout = property(function, "Timeout");
        let own_env = property(function, "Environment")
            .and_then(|e| e.get("Variables"))
            .and_then(|v| v.get("PARQDB_FUNCTION_TIMEOUT"));
        match reference(own_timeout) {
            None => assert!(own_env.is_none(), "{name}"),
            Some(timeout) => assert_eq!(
                reference(own_env),
                Some(timeout),
                "{name}: a function with its own Timeout must pass it as PARQDB_FUNCTION_TIMEOUT"
            ),
        }
    }
}

/// The store's key attributes (`PARTITION_KEY`, `SORT_KEY`) and the types its rustdoc
/// schema table in `src/store/dynamodb/mod.rs` gives them.
fn documented_key_schema() -> [(String, String); 2] {
    let path = root().join("src/store/dynamodb/mod.rs");
    let source = std::fs::read_to_string(&path).expect("read src/store/dynamodb/mod.rs");
    let documented_type = |attribute: &str, role: &str| -> String {
        source
            .lines()
            .filter_map(|line| line.strip_prefix("//! |"))
            .map(|row| row.split('|').map(str::trim).collect::<Vec<_>>())
            .find(|cells| {
                cells.len() >= 3 && cells[0] == format!("`{attribute}`") && cells[2].contains(role)
            })
            .map(|cells| cells[1].to_owned())
            .unwrap_or_else(|| {
                panic!(
                    "the schema table of src/store/dynamodb/mod.rs has no {role} row for `{attribute}`"
                )
            })
    };
    [(PARTITION_KEY, "partition key"), (SORT_KEY, "sort key")]
        .map(|(attribute, role)| (attribute.to_owned(), documented_type(attribute, role)))
}

#[test]
fn pointer_table_key_schema_is_the_dynamodb_stores() {
    let [(pk, pk_type), (sk, sk_type)] = documented_key_schema();
    let template = template();
    let tables = resources_of_type(&template, "AWS::DynamoDB::Table");
    let [(name, table)] = tables.as_slice() else {
        panic!(
            "expected exactly one DynamoDB table, found {}",
            tables.len()
        );
    };
    // `AttributeDefinitions` and `LocalSecondaryIndexes` depend on the
    // PointerTableListingIndex parameter: `!If [UseListingIndex, with, without]`.
    let branch = |list: &str, with_index: bool| -> Option<&Value> {
        let value = property(table, list)?;
        match tagged(value, "If").and_then(Value::as_sequence) {
            Some(branches) => {
                assert_eq!(
                    branches.first().and_then(Value::as_str),
                    Some("UseListingIndex"),
                    "{name}: {list} depends on UseListingIndex"
                );
                branches.get(if with_index { 1 } else { 2 })
            }
            None => Some(value),
        }
    };
    let pairs_of = |list: &str, with_index: bool, key: &str, value: &str| {
        branch(list, with_index)
            .and_then(Value::as_sequence)
            .unwrap_or_else(|| panic!("{name}: no {list}"))
            .iter()
            .map(|entry| {
                let field = |f: &str| {
                    entry
                        .get(f)
                        .and_then(Value::as_str)
                        .unwrap_or_else(|| panic!("{name}: {list} entry without {f}"))
                };
                (field(key).to_owned(), field(value).to_owned())
            })
            .collect::<BTreeSet<(String, String)>>()
    };
    let pairs = |list: &str, key: &str, value: &str| pairs_of(list, true, key, value);
    assert_eq!(
        pairs_of(
            "AttributeDefinitions",
            false,
            "AttributeName",
            "AttributeType"
        ),
        BTreeSet::from([(pk.clone(), pk_type.clone()), (sk.clone(), sk_type.clone())]),
        "{name}: without the listing index, only the key attributes"
    );
    assert_eq!(
        branch("LocalSecondaryIndexes", false)
            .and_then(|v| tagged(v, "Ref"))
            .and_then(Value::as_str),
        Some("AWS::NoValue"),
        "{name}: without the listing index, no local index"
    );
    let shown_sk = parqdb_catalog::store::dynamodb::SHOWN_SORT_KEY.to_owned();
    assert_eq!(
        pairs("AttributeDefinitions", "AttributeName", "AttributeType"),
        BTreeSet::from([
            (pk.clone(), pk_type),
            (sk.clone(), sk_type),
            (shown_sk.clone(), "S".to_owned())
        ]),
        "{name}: AttributeDefinitions must be exactly the key attributes of src/store/dynamodb/mod.rs"
    );
    assert_eq!(
        pairs("KeySchema", "AttributeName", "KeyType"),
        BTreeSet::from([(pk.clone(), "HASH".to_owned()), (sk, "RANGE".to_owned())]),
        "{name}: KeySchema"
    );
    let setting = |path: &[&str]| -> Option<&Value> {
        path.iter()
            .try_fold(table.get("Properties")?, |value, key| value.get(key))
    };
    let enabled = |path: &[&str]| setting(path).and_then(Value::as_bool) == Some(true);
    assert_eq!(
        setting(&["BillingMode"]).and_then(Value::as_str),
        Some("PAY_PER_REQUEST")
    );
    assert!(enabled(&[
        "PointInTimeRecoverySpecification",
        "PointInTimeRecoveryEnabled"
    ]));
    assert!(enabled(&["DeletionProtectionEnabled"]));
    assert!(enabled(&["SSESpecification", "SSEEnabled"]));
    assert!(
        property(table, "TimeToLiveSpecification").is_none(),
        "the store forbids TTL"
    );
    assert!(property(table, "GlobalSecondaryIndexes").is_none());
    // The one local index of src/store/dynamodb/mod.rs: sparse on `shown_sk`, strongly
    // consistent (a global index is not).
    let indexes = branch("LocalSecondaryIndexes", true)
        .and_then(Value::as_sequence)
        .unwrap_or_else(|| panic!("{name}: no LocalSecondaryIndexes"));
    assert_eq!(indexes.len(), 1, "{name}: one local index");
    let index = &indexes[0];
    assert_eq!(
        index.get("IndexName").and_then(Value::as_str),
        Some(parqdb_catalog::store::dynamodb::SHOWN_INDEX)
    );
    let keys: Vec<(&str, &str)> = index
        .get("KeySchema")
        .and_then(Value::as_sequence)
        .expect("index KeySchema")
        .iter()
        .map(|k| {
            (
                k.get("AttributeName").and_then(Value::as_str).unwrap_or(""),
                k.get("KeyType").and_then(Value::as_str).unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(keys, [(pk.as_str(), "HASH"), (shown_sk.as_str(), "RANGE")]);
}

/// One IAM statement of a role or a resource policy, with both branches of every `!If`.
#[derive(Debug)]
struct Statement<'a> {
    owner: &'a str,
    sid: Option<&'a str>,
    effect: &'a str,
    actions: Vec<&'a str>,
    resources: Vec<&'a Value>,
    condition: Option<&'a Value>,
}

fn statements(template: &Value) -> Vec<Statement<'_>> {
    let mut found = Vec::new();
    for (owner, resource) in resources(template) {
        let mut documents = Vec::new();
        if let Some(policies) = property(resource, "Policies").and_then(Value::as_sequence) {
            documents.extend(policies.iter().filter_map(|p| p.get("PolicyDocument")));
        }
        documents.extend(property(resource, "PolicyDocument"));
        for document in documents {
            let list = document
                .get("Statement")
                .and_then(Value::as_sequence)
                .unwrap_or_else(|| panic!("{owner}: policy without Statement list"));
            for statement in list.iter().flat_map(branches) {
                let effect = statement
                    .get("Effect")
                    .and_then(Value::as_str)
                    .unwrap_or_else(|| panic!("{owner}: statement without Effect"));
                assert!(
                    statement.get("NotAction").is_none() && statement.get("NotResource").is_none(),
                    "{owner}: NotAction/NotResource"
                );
                let actions = statement
                    .get("Action")
                    .map(scalars)
                    .unwrap_or_else(|| panic!("{owner}: statement without Action"));
                let resources = match statement.get("Resource") {
                    Some(Value::Sequence(items)) => items.iter().collect(),
                    Some(one) => vec![one],
                    None => Vec::new(),
                };
                found.push(Statement {
                    owner,
                    sid: statement.get("Sid").and_then(Value::as_str),
                    effect,
                    actions,
                    resources,
                    condition: statement.get("Condition"),
                });
            }
        }
    }
    found
}

/// The text of a resource ARN as written (`!Sub` template, `!GetAtt` target, or literal).
fn resource_text(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        Value::Tagged(tagged) => format!(
            "{} {}",
            tagged.tag,
            tagged.value.as_str().unwrap_or("<complex>")
        ),
        other => format!("{other:?}"),
    }
}

fn may_delete_objects(action: &str) -> bool {
    let action = action.to_ascii_lowercase();
    action == "*"
        || action == "s3:*"
        || action.starts_with("s3:delete")
        || action == "s3:putlifecycleconfiguration"
}

/// Actions IAM grants only on `*` (they have no resource type): the only ones a `*`
/// resource may carry. Step Functions' log delivery, X-Ray (the functions' and the state
/// machine's traces), the pipe's stream listing, CodeDeploy's alarm reads, the gc
/// cycle's overlap metric and AWS Backup's listings (`BackupRole`).
const WITHOUT_RESOURCE_TYPES: [&str; 18] = [
    "dynamodb:ListStreams",
    "cloudwatch:DescribeAlarms",
    "cloudwatch:PutMetricData",
    "xray:PutTraceSegments",
    "xray:PutTelemetryRecords",
    "xray:GetSamplingRules",
    "xray:GetSamplingTargets",
    "logs:CreateLogDelivery",
    "logs:GetLogDelivery",
    "logs:UpdateLogDelivery",
    "logs:DeleteLogDelivery",
    "logs:ListLogDeliveries",
    "logs:PutResourcePolicy",
    "logs:DescribeResourcePolicies",
    "logs:DescribeLogGroups",
    "cloudwatch:GetMetricData",
    "events:ListRules",
    "s3:ListAllMyBuckets",
];

#[test]
fn only_the_garbage_collector_may_delete_catalog_data() {
    let template = template();
    let gc_role = property(
        resources(&template)
            .into_iter()
            .find(|(name, _)| *name == "GcFunction")
            .map(|(_, f)| f)
            .expect("a GcFunction"),
        "Role",
    )
    .and_then(|role| tagged(role, "!GetAtt"))
    .and_then(Value::as_str)
    .and_then(|target| target.strip_suffix(".Arn"))
    .expect("GcFunction's Role is !GetAtt <role>.Arn")
    .to_owned();

    let statements = statements(&template);
    assert!(
        statements.iter().any(|s| s.owner == gc_role),
        "no statements found for {gc_role}"
    );
    let mut gc_deletes = BTreeSet::new();
    for statement in statements.iter().filter(|s| s.effect == "Allow") {
        for action in &statement.actions {
            assert!(
                !action.contains('*'),
                "{} {:?}: wildcard action `{action}`",
                statement.owner,
                statement.sid
            );
            if !may_delete_objects(action) {
                continue;
            }
            // A writer may withdraw its own change-log entries (src/catalog/changelog.rs):
            // bookkeeping under _gc/changes/, never catalog data.
            let change_log = "!Sub ${WarehouseBucket.Arn}/${WarehousePrefix}/_gc/changes/*";
            if statement.owner != gc_role
                && *action == "s3:DeleteObject"
                && statement
                    .resources
                    .iter()
                    .all(|r| resource_text(r) == change_log)
            {
                continue;
            }
            assert_eq!(
                statement.owner, gc_role,
                "{} {:?} allows `{action}`: only the GC may delete (writers only their change-log entries)",
                statement.owner, statement.sid
            );
            assert_eq!(
                *action, "s3:DeleteObject",
                "the GC needs s3:DeleteObject only"
            );
            gc_deletes.extend(statement.resources.iter().map(|r| resource_text(r)));
        }
        for resource in &statement.resources {
            if resource.as_str() != Some("*") {
                continue;
            }
            for action in &statement.actions {
                assert!(
                    WITHOUT_RESOURCE_TYPES.contains(action),
                    "{} {:?}: `*` resource for {action}, which IAM grants per resource",
                    statement.owner,
                    statement.sid
                );
            }
            // The one that could write anywhere is held to the catalog's namespace.
            if statement.actions.contains(&"cloudwatch:PutMetricData") {
                assert_eq!(
                    statement.condition.expect("a condition")["StringEquals"]
                        ["cloudwatch:namespace"]
                        .as_str(),
                    Some("ParqDBCatalog"),
                    "{}",
                    statement.owner
                );
            }
        }
    }
    // The managed prefixes (src/gc/collect.rs), and the collector's own ledger and lease
    // generations under _gc/ (src/gc/ledger.rs, src/gc/lease.rs), which hold no catalog data.
    assert_eq!(
        gc_deletes,
        BTreeSet::from([
            "!Sub ${WarehouseBucket.Arn}/${WarehousePrefix}/metadata/*".to_owned(),
            "!Sub ${WarehouseBucket.Arn}/${WarehousePrefix}/indexes/*".to_owned(),
            "!Sub ${WarehouseBucket.Arn}/${WarehousePrefix}/_gc/*".to_owned(),
        ]),
        "the GC may delete under metadata/, indexes/ and its own _gc/ only"
    );
}

/// The role of a function resource (`Role: !GetAtt <role>.Arn`).
fn role_of<'a>(template: &'a Value, function: &str) -> &'a str {
    resources(template)
        .into_iter()
        .find(|(name, _)| *name == function)
        .and_then(|(_, f)| property(f, "Role"))
        .and_then(|role| tagged(role, "!GetAtt"))
        .and_then(Value::as_str)
        .and_then(|target| target.strip_suffix(".Arn"))
        .unwrap_or_else(|| panic!("{function}'s Role is !GetAtt <role>.Arn"))
}

/// Whether `condition` requires `If-None-Match` (`"Null": {"s3:if-none-match": "false"}`).
fn requires_if_none_match(condition: Option<&Value>) -> bool {
    condition
        .and_then(|c| c.get("Null"))
        .and_then(|n| n.get("s3:if-none-match"))
        .and_then(Value::as_str)
        == Some("false")
}

#[test]
fn writers_may_claim_the_warehouse_create_only_and_nobody_else_may_write_the_marker() {
    let template = template();
    let marker = "!Sub ${WarehouseBucket.Arn}/${WarehousePrefix}/_catalog-owner.json";
    let catalog_id = "!Sub ${WarehouseBucket.Arn}/${WarehousePrefix}/_catalog/_meta/=catalog-id";
    // The S3 store's first write into an empty `_catalog/` creates its listing-classes
    // marker (src/store/s3/mod.rs); without the grant it warns and `list` reads every record.
    let classes = "!Sub ${WarehouseBucket.Arn}/${WarehousePrefix}/_catalog/.listing-classes";
    // ... and every claim leaves a copy of the marker under `_gc/claims/`
    // (src/catalog/ownership.rs).
    let claim_records = "!Sub ${WarehouseBucket.Arn}/${WarehousePrefix}/_gc/claims/*";
    let writers: BTreeSet<&str> = [
        "RegisterFunction",
        "CommitFunction",
        "DropFunction",
        "RenameFunction",
        "NamespaceFunction",
        "PublishFunction",
        "RefreshFunction",
    ]
    .into_iter()
    .map(|function| role_of(&template, function))
    .collect();
    let statements = statements(&template);
    for role in &writers {
        let grants = |action: &str, resource: &str| -> Vec<&Statement<'_>> {
            statements
                .iter()
                .filter(|s| {
                    s.owner == *role
                        && s.effect == "Allow"
                        && s.actions.contains(&action)
                        && s.resources.iter().any(|r| resource_text(r) == resource)
                })
                .collect()
        };
        assert!(
            !grants("s3:GetObject", marker).is_empty(),
            "{role} must read the ownership marker"
        );
        assert!(
            !grants("s3:GetObject", claim_records).is_empty(),
            "{role} must read the claim records: whether the catalog bound the warehouse exactly before (GC round 104)"
        );
        assert!(
            !grants("dynamodb:DescribeTable", "!GetAtt PointerTable.Arn").is_empty(),
            "{role} must describe the pointer table: ownership binds the warehouse to the table's account and creation time (GC round 103)"
        );
        let puts = grants("s3:PutObject", marker);
        assert!(!puts.is_empty(), "{role} must create the ownership marker");
        let puts_id = grants("s3:PutObject", catalog_id);
        assert!(
            !puts_id.is_empty(),
            "{role} must create the catalog id record"
        );
        let puts_classes = grants("s3:PutObject", classes);
        assert!(
            !puts_classes.is_empty(),
            "{role} must create the S3 store's listing-classes marker"
        );
        let puts_records = grants("s3:PutObject", claim_records);
        assert!(
            !puts_records.is_empty(),
            "{role} must create its claim record"
        );
        // Every pointer write is logged first and leaves its commit link beside it, and a
        // claim lists the log before its marker (src/catalog/changelog.rs; GC round 112,
        // L2: without the links every busy index stopped collection).
        let mut puts_gc = Vec::new();
        let writes_pointers = *role != role_of(&template, "NamespaceFunction");
        for (dir, why) in [
            ("changes", "log its pointer writes"),
            ("links", "leave the commit link of each pointer write"),
            (
                "adoptions",
                "list the change log when it claims the warehouse",
            ),
        ]
        .into_iter()
        .filter(|(dir, _)| writes_pointers || *dir == "adoptions")
        {
            let resource =
                format!("!Sub ${{WarehouseBucket.Arn}}/${{WarehousePrefix}}/_gc/{dir}/*");
            let puts = grants("s3:PutObject", &resource);
            assert!(!puts.is_empty(), "{role} must {why} (`_gc/{dir}/*`)");
            puts_gc.extend(puts);
        }
        for put in puts
            .iter()
            .chain(&puts_id)
            .chain(&puts_classes)
            .chain(&puts_records)
            .chain(&puts_gc)
        {
            assert!(
                requires_if_none_match(put.condition),
                "{role} {:?}: create-only (If-None-Match)",
                put.sid
            );
        }
        // The DynamoDB id item: the writer's PutItem covers exactly the `_meta/=` partition.
        let partitions: Vec<&str> = statements
            .iter()
            .filter(|s| s.owner == *role && s.actions.contains(&"dynamodb:PutItem"))
            .filter_map(|s| s.condition)
            .filter_map(|c| c.get("ForAllValues:StringLike"))
            .filter_map(|c| c.get("dynamodb:LeadingKeys"))
            .flat_map(scalars)
            .collect();
        assert!(
            partitions.contains(&"_meta/="),
            "{role}: PutItem on the `_meta/=` partition: {partitions:?}"
        );
    }
    let collector = role_of(&template, "GcFunction");
    assert!(
        statements.iter().any(|s| s.owner == collector
            && s.effect == "Allow"
            && s.actions.contains(&"dynamodb:DescribeTable")
            && s.resources
                .iter()
                .any(|r| resource_text(r) == "!GetAtt PointerTable.Arn")),
        "the collector checks ownership before every run: it must describe the pointer table"
    );
    for statement in &statements {
        // The restore role puts back what a backup holds, the marker included; a restore
        // is followed by `init --adopt` (tests/it/infra/operations.rs checks the role).
        if statement.owner == "RestoreRole" {
            continue;
        }
        let writes_marker = statement.effect == "Allow"
            && statement.actions.contains(&"s3:PutObject")
            && statement.resources.iter().any(|r| {
                let text = resource_text(r);
                text == marker || text.ends_with("${WarehousePrefix}/*")
            });
        if writes_marker {
            assert!(
                writers.contains(statement.owner),
                "{} {:?} may write the ownership marker",
                statement.owner,
                statement.sid
            );
        }
    }
}

#[test]
fn every_delivery_path_retries_and_ends_in_a_dead_letter_queue() {
    let template = template();
    let queues = resources_of_type(&template, "AWS::SQS::Queue");
    assert!(
        queues.len() >= 3,
        "the consumer queue and two dead-letter queues"
    );
    for (name, queue) in &queues {
        assert!(
            property(queue, "RedrivePolicy").is_some()
                || property(queue, "RedriveAllowPolicy").is_some(),
            "{name}: every queue has a redrive policy (or is a dead-letter queue)"
        );
        if let Some(redrive) = property(queue, "RedrivePolicy") {
            assert!(redrive.get("deadLetterTargetArn").is_some(), "{name}");
            // A number, or a number parameter.
            let count = redrive.get("maxReceiveCount");
            let parameter = reference(count)
                .and_then(|name| template.get("Parameters")?.get(name)?.get("Type"))
                .and_then(Value::as_str);
            assert!(
                count.and_then(Value::as_u64).is_some() || parameter == Some("Number"),
                "{name}: maxReceiveCount {count:?}"
            );
        }
    }
    // Queues that are where a path ends: dead-letter queues (a redrive-allow policy, no
    // redrive policy of their own).
    let terminal: BTreeSet<String> = queues
        .iter()
        .filter(|(_, queue)| {
            property(queue, "RedrivePolicy").is_none()
                && property(queue, "RedriveAllowPolicy").is_some()
        })
        .map(|(name, _)| format!("{name}.Arn"))
        .collect();
    for (name, rule) in resources_of_type(&template, "AWS::Events::Rule") {
        if property(rule, "EventPattern").is_none() {
            continue;
        }
        for target in property(rule, "Targets")
            .and_then(Value::as_sequence)
            .unwrap_or_else(|| panic!("{name}: Targets"))
            .iter()
            .flat_map(branches)
        {
            let into_dead_letters = target
                .get("Arn")
                .and_then(|arn| tagged(arn, "!GetAtt"))
                .and_then(Value::as_str)
                .is_some_and(|arn| terminal.contains(arn));
            assert!(
                target.get("DeadLetterConfig").is_some() || into_dead_letters,
                "{name}: a dead-letter queue (or the target is one)"
            );
            assert!(
                target.get("RetryPolicy").is_some(),
                "{name}: a retry policy"
            );
        }
    }
    let pipes = resources_of_type(&template, "AWS::Pipes::Pipe");
    assert!(!pipes.is_empty());
    for (name, pipe) in pipes {
        let stream = property(pipe, "SourceParameters")
            .and_then(|p| p.get("DynamoDBStreamParameters"))
            .unwrap_or_else(|| panic!("{name}: DynamoDBStreamParameters"));
        assert!(stream.get("DeadLetterConfig").is_some(), "{name}");
        assert!(stream.get("MaximumRetryAttempts").is_some(), "{name}");
        assert!(stream.get("MaximumRecordAgeInSeconds").is_some(), "{name}");
    }
    let subscriptions = resources_of_type(&template, "AWS::SNS::Subscription");
    assert!(!subscriptions.is_empty(), "an example consumer");
    for (name, subscription) in subscriptions {
        assert!(property(subscription, "RedrivePolicy").is_some(), "{name}");
        assert_eq!(
            property(subscription, "Protocol").and_then(Value::as_str),
            Some("sqs"),
            "{name}: a queue per consumer"
        );
    }
    // The stream says which pointer changed, never what it holds.
    let tables = resources_of_type(&template, "AWS::DynamoDB::Table");
    let [(_, table)] = tables.as_slice() else {
        panic!("one table");
    };
    assert_eq!(
        property(table, "StreamSpecification")
            .and_then(|s| s.get("StreamViewType"))
            .and_then(Value::as_str),
        Some("KEYS_ONLY")
    );
}

/// An alarm's metrics in the `ParqDBCatalog` namespace: the metric query's id (the alarm's
/// own metric: `"alarm"`) and its dimensions other than `Stack`, each of which must filter
/// on this stack.
fn metric_queries(alarm: &Value) -> Vec<(&str, Vec<(&str, &str)>)> {
    let own = property(alarm, "Namespace")
        .map(|namespace| ("alarm", namespace, property(alarm, "Dimensions")));
    let queries = property(alarm, "Metrics")
        .and_then(Value::as_sequence)
        .into_iter()
        .flatten()
        .flat_map(branches)
        .filter_map(|query| {
            let metric = query.get("MetricStat")?.get("Metric")?;
            Some((
                query.get("Id")?.as_str()?,
                metric.get("Namespace")?,
                metric.get("Dimensions"),
            ))
        });
    own.into_iter()
        .chain(queries)
        .filter(|(_, namespace, _)| namespace.as_str() == Some("ParqDBCatalog"))
        .map(|(id, _, dimensions)| {
            let dimensions: Vec<&Value> = dimensions
                .and_then(Value::as_sequence)
                .map(|d| d.iter().collect())
                .unwrap_or_default();
            let stack = dimensions
                .iter()
                .filter(|d| d.get("Name").and_then(Value::as_str) == Some("Stack"))
                .filter_map(|d| reference(d.get("Value")))
                .collect::<Vec<_>>();
            assert_eq!(stack, ["AWS::StackName"], "{id}: filters on Stack");
            let others = dimensions
                .iter()
                .filter(|d| d.get("Name").and_then(Value::as_str) != Some("Stack"))
                .map(|d| {
                    (
                        d.get("Name").and_then(Value::as_str).expect("a name"),
                        d.get("Value").and_then(Value::as_str).expect("a value"),
                    )
                })
                .collect();
            (id, others)
        })
        .collect()
}

/// Every alarm on the functions' metrics filters on this stack (two stacks in one
/// account and region share no series), and the functions are told their stack.
#[test]
fn every_catalog_metric_alarm_filters_on_the_stack() {
    let template = template();
    let mut watched = 0;
    for (_, alarm) in resources_of_type(&template, "AWS::CloudWatch::Alarm") {
        // metric_queries asserts the Stack dimension of each.
        watched += metric_queries(alarm).len();
    }
    assert!(watched >= 30, "{watched}");
    let variables = template["Globals"]["Function"]["Environment"]["Variables"].clone();
    assert_eq!(
        reference(variables.get(parqdb_catalog::lambda::metrics::STACK_VARIABLE)),
        Some("AWS::StackName")
    );
    // The state machine's own metric carries the same dimension.
    let machine = resource(&template, "GcCycleStateMachine");
    let substitutions = property(machine, "DefinitionSubstitutions").expect("substitutions");
    assert_eq!(
        reference(substitutions.get("Stack")),
        Some("AWS::StackName")
    );
}

#[test]
fn alarms_watch_failures_throttles_outcomes_and_queues() {
    let template = template();
    let alarms = resources_of_type(&template, "AWS::CloudWatch::Alarm");
    let functions: BTreeSet<&str> = resources_of_type(&template, "AWS::Serverless::Function")
        .into_iter()
        .map(|(name, _)| name)
        .collect();
    let watched = |metric: &str| -> BTreeSet<&str> {
        alarms
            .iter()
            .filter_map(|(_, alarm)| property(alarm, "Metrics").and_then(Value::as_sequence))
            .flatten()
            // A conditional function's query is `!If [condition, query, AWS::NoValue]`.
            .flat_map(branches)
            .filter_map(|query| query.get("MetricStat").and_then(|m| m.get("Metric")))
            .filter(|m| m.get("MetricName").and_then(Value::as_str) == Some(metric))
            .filter_map(|m| m.get("Dimensions").and_then(Value::as_sequence))
            .flatten()
            .filter_map(|d| reference(d.get("Value")))
            .collect()
    };
    assert_eq!(
        watched("Invocations"),
        functions,
        "failure alarm: every function"
    );
    assert_eq!(
        watched("Throttles"),
        functions,
        "throttle alarm: every function"
    );
    // Each outcome alarm: that outcome's share of the catalog functions' answers (gc's
    // answers left out on both sides: the gc cycle retries them), in 3 of 5 periods.
    for outcome in [
        "STORE_UNAVAILABLE",
        "COMMIT_STATE_UNKNOWN",
        "CORRUPT_RECORD",
        "INVALID_CONFIGURATION",
        "STORE_REFUSED",
        "WAREHOUSE_NOT_OWNED",
    ] {
        let (name, alarm) = alarms
            .iter()
            .find(|(_, alarm)| {
                metric_queries(alarm)
                    .iter()
                    .any(|(_, dims)| dims == &[("Outcome", outcome)])
            })
            .unwrap_or_else(|| panic!("an alarm on {outcome}"));
        let queries = metric_queries(alarm);
        let id_of = |wanted: &[(&str, &str)]| {
            queries
                .iter()
                .find(|(_, dims)| dims == wanted)
                .map(|(id, _)| *id)
                .unwrap_or_else(|| panic!("{name}: a query {wanted:?}"))
        };
        let (outcomes, gc_outcomes) = (
            id_of(&[("Outcome", outcome)]),
            id_of(&[("Operation", "gc"), ("Outcome", outcome)]),
        );
        let (answers, gc_answers) = (id_of(&[]), id_of(&[("Operation", "gc")]));
        let expression = property(alarm, "Metrics")
            .and_then(Value::as_sequence)
            .and_then(|metrics| metrics.iter().find_map(|m| m.get("Expression")))
            .and_then(Value::as_str)
            .unwrap_or_else(|| panic!("{name}: an expression"));
        assert_eq!(
            expression,
            format!(
                "100 * (FILL({outcomes}, 0) - FILL({gc_outcomes}, 0)) / (FILL({answers}, 0) - FILL({gc_answers}, 0))"
            ),
            "{name}"
        );
        assert_eq!(
            reference(property(alarm, "Threshold")),
            Some("OutcomeRateAlarmPercent")
        );
        assert_eq!(
            property(alarm, "EvaluationPeriods").and_then(Value::as_u64),
            Some(5)
        );
        assert_eq!(
            property(alarm, "DatapointsToAlarm").and_then(Value::as_u64),
            Some(3)
        );
    }
    let queue_metrics: BTreeSet<(&str, String)> = alarms
        .iter()
        .filter(|(_, a)| property(a, "Namespace").and_then(Value::as_str) == Some("AWS/SQS"))
        .filter_map(|(_, a)| {
            let metric = property(a, "MetricName").and_then(Value::as_str)?;
            let queue = property(a, "Dimensions")
                .and_then(Value::as_sequence)?
                .first()?
                .get("Value")
                .and_then(|v| tagged(v, "!GetAtt"))
                .and_then(Value::as_str)?
                .trim_end_matches(".QueueName")
                .to_owned();
            Some((metric, queue))
        })
        .collect();
    for (name, queue) in resources_of_type(&template, "AWS::SQS::Queue") {
        // A failed gc cycle pages once, through GcCycleFailedAlarm: its queue's alarm is a
        // reminder of events left unread (their age), not a second page.
        let metric = if property(queue, "RedrivePolicy").is_some() || name == "GcCycleFailureQueue"
        {
            "ApproximateAgeOfOldestMessage"
        } else {
            "ApproximateNumberOfMessagesVisible"
        };
        assert!(
            queue_metrics.contains(&(metric, name.to_owned())),
            "{name}: an alarm on {metric}"
        );
    }
}

#[test]
fn capability_probe_keys_expire() {
    let template = template();
    let buckets = resources_of_type(&template, "AWS::S3::Bucket");
    let [(_, bucket)] = buckets.as_slice() else {
        panic!("one bucket");
    };
    let rules = property(bucket, "LifecycleConfiguration")
        .and_then(|l| l.get("Rules"))
        .and_then(Value::as_sequence)
        .expect("lifecycle rules");
    let probe = rules
        .iter()
        .find(|rule| {
            rule.get("Prefix")
                .and_then(|p| tagged(p, "!Sub"))
                .and_then(Value::as_str)
                == Some("${WarehousePrefix}/_catalog/_probe/")
        })
        .expect("a lifecycle rule for _catalog/_probe/");
    assert_eq!(probe.get("Status").and_then(Value::as_str), Some("Enabled"));
    assert!(
        probe
            .get("ExpirationInDays")
            .and_then(Value::as_u64)
            .is_some()
    );
}

/// The optional refresh component: every resource of it is gated on `RefreshEnabled`; the
/// rule sends the source prefix's `Object Created` events to the queue; the queue's
/// visibility timeout covers six function timeouts plus the batching window for every
/// allowed timeout; the function reports partial batch failures, has a bounded
/// concurrency, and its routes (with sample parameter values) are what
/// `Routes::from_json` accepts.
#[test]
fn the_refresh_component_is_gated_batched_and_routed() {
    let template = template();
    let refresh: Vec<(&str, &Value)> = resources(&template)
        .into_iter()
        .filter(|(name, _)| name.starts_with("Refresh"))
        .collect();
    assert!(
        refresh.len() >= 8,
        "{:?}",
        refresh.iter().map(|(n, _)| n).collect::<Vec<_>>()
    );
    for (name, resource) in &refresh {
        assert_eq!(
            resource.get("Condition").and_then(Value::as_str),
            Some("RefreshEnabled"),
            "{name}: deployed only with RefreshSourceBucket"
        );
    }
    let get = |name: &str| {
        refresh
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, r)| *r)
            .unwrap_or_else(|| panic!("{name}"))
    };
    let pattern = property(get("RefreshRule"), "EventPattern").expect("pattern");
    assert_eq!(pattern["source"][0].as_str(), Some("aws.s3"));
    assert_eq!(pattern["detail-type"][0].as_str(), Some("Object Created"));
    assert_eq!(
        reference(pattern["detail"]["object"]["key"][0].get("prefix")),
        Some("RefreshSourcePrefix")
    );
    let target = &property(get("RefreshRule"), "Targets").expect("targets")[0];
    assert_eq!(
        tagged(&target["Arn"], "!GetAtt").and_then(Value::as_str),
        Some("RefreshQueue.Arn")
    );

    // Visibility >= 6 x timeout + the longest batching window, for every allowed timeout.
    let parameters = template.get("Parameters").expect("parameters");
    let window = parameters["RefreshBatchingWindowSeconds"]["MaxValue"]
        .as_u64()
        .expect("window bound");
    let mapping = &template["Mappings"]["RefreshQueueVisibility"];
    for timeout in parameters["RefreshTimeout"]["AllowedValues"]
        .as_sequence()
        .expect("allowed timeouts")
    {
        let timeout = timeout.as_u64().expect("seconds");
        let visibility = mapping[timeout.to_string().as_str()]["Seconds"]
            .as_u64()
            .unwrap_or_else(|| panic!("no visibility for {timeout} s"));
        assert!(
            visibility >= 6 * timeout + window,
            "{timeout} s -> {visibility} s"
        );
    }

    let function = get("RefreshFunction");
    let source = &property(function, "Events").expect("events")["SourceChanges"];
    assert_eq!(source["Type"].as_str(), Some("SQS"));
    let properties = &source["Properties"];
    assert_eq!(
        properties["FunctionResponseTypes"][0].as_str(),
        Some("ReportBatchItemFailures")
    );
    assert!(properties.get("MaximumBatchingWindowInSeconds").is_some());
    assert!(
        properties["ScalingConfig"]
            .get("MaximumConcurrency")
            .is_some()
    );

    let routes = property(function, "Environment").expect("environment")["Variables"]
        ["PARQDB_REFRESH_ROUTES"]
        .clone();
    let routes = tagged(&routes, "!Sub")
        .and_then(Value::as_str)
        .expect("!Sub routes")
        .replace("${RefreshSourceBucket}", "lake")
        .replace("${RefreshSourcePrefix}", "tables/docs/")
        .replace("${RefreshIndexNamespace}", "search")
        .replace("${RefreshIndexName}", "docs");
    let routes = parqdb_catalog::refresh::Routes::from_json(&routes).expect("valid routes");
    let change =
        parqdb_catalog::refresh::SourceChange::new("lake", "tables/docs/p.parquet", "0A", 0)
            .expect("change");
    let route = routes.find(&change).expect("routed");
    assert_eq!(route.index().name(), "docs");
    assert_eq!(route.table_location(&change), "s3://lake/tables/docs/");
}

/// The refresh's external builder (issue 28): `RefreshBuilderFunctionArn` is optional
/// (empty: the placeholder builder, no permission); set, it reaches the function as
/// `PARQDB_REFRESH_BUILDER_FUNCTION` and the refresh role may invoke exactly that ARN,
/// with one gated statement, and no other role may invoke it.
#[test]
fn the_refresh_builder_function_is_gated_and_least_privilege() {
    let template = template();
    let parameter = &template["Parameters"]["RefreshBuilderFunctionArn"];
    assert_eq!(parameter["Default"].as_str(), Some(""));
    let pattern = parameter["AllowedPattern"].as_str().expect("a pattern");
    assert!(
        pattern.starts_with("^$|^arn:")
            && pattern.contains(":lambda:")
            && pattern.contains(":function:"),
        "{pattern}"
    );
    let condition = serde_norway::to_string(&template["Conditions"]["RefreshUsesBuilderFunction"])
        .expect("yaml");
    assert!(
        condition.contains("RefreshEnabled") && condition.contains("RefreshBuilderFunctionArn"),
        "{condition}"
    );
    let uses_builder = |value: &Value| -> Option<(Value, Value)> {
        let operands = tagged(value, "!If")?.as_sequence()?;
        (operands.first()?.as_str() == Some("RefreshUsesBuilderFunction"))
            .then(|| (operands[1].clone(), operands[2].clone()))
    };
    let function = resources(&template)
        .into_iter()
        .find(|(name, _)| *name == "RefreshFunction")
        .expect("RefreshFunction")
        .1;
    let variable = &property(function, "Environment").expect("environment")["Variables"]["PARQDB_REFRESH_BUILDER_FUNCTION"];
    let (set, unset) = uses_builder(variable).expect("!If RefreshUsesBuilderFunction");
    assert_eq!(reference(Some(&set)), Some("RefreshBuilderFunctionArn"));
    assert_eq!(reference(Some(&unset)), Some("AWS::NoValue"));

    // Every statement of every role that names lambda:InvokeFunction.
    let mut invoking = Vec::new();
    for (role, resource) in resources_of_type(&template, "AWS::IAM::Role") {
        for policy in property(resource, "Policies")
            .and_then(Value::as_sequence)
            .into_iter()
            .flatten()
        {
            for statement in policy["PolicyDocument"]["Statement"]
                .as_sequence()
                .into_iter()
                .flatten()
            {
                let text = serde_norway::to_string(statement).expect("yaml");
                if text.contains("RefreshBuilderFunctionArn") {
                    invoking.push((role, statement.clone()));
                }
            }
        }
    }
    assert_eq!(invoking.len(), 1, "{invoking:#?}");
    let (role, statement) = &invoking[0];
    assert_eq!(*role, "RefreshRole");
    let (granted, absent) = uses_builder(statement).expect("gated on RefreshUsesBuilderFunction");
    assert_eq!(reference(Some(&absent)), Some("AWS::NoValue"));
    assert_eq!(granted["Effect"].as_str(), Some("Allow"));
    let actions: Vec<&str> = granted["Action"]
        .as_sequence()
        .expect("actions")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(actions, ["lambda:InvokeFunction"]);
    assert_eq!(
        reference(granted.get("Resource")),
        Some("RefreshBuilderFunctionArn")
    );
    assert!(granted.get("Condition").is_none());
}

/// The gc cycle: the state machine's substitutions are exactly its definition's
/// placeholders; `GcWorkers`, `GcPartitions` and `GcPageSize` reach the Map states and the
/// gc function as the collector's defaults and bounds (`src/gc/config.rs`); the function
/// reserves what the Map states run at once; every `PARQDB_GC_*` variable it gets is one
/// `GcConfig::from_lookup` reads, and accepts with the parameters' defaults.
#[test]
fn the_gc_cycle_fans_out_over_the_configured_partitions() {
    let defaults = parqdb_catalog::gc::GcConfig::default();
    // The most partitions the collector accepts: `GcPartitions`' `MaxValue` must be it.
    let accepts = |partitions: usize| {
        parqdb_catalog::gc::GcConfig {
            partitions,
            ..defaults.clone()
        }
        .validate()
        .is_ok()
    };
    let template = template();
    let bounds = |name: &str| {
        let p = parameter(&template, name);
        assert_eq!(
            p.get("Type").and_then(Value::as_str),
            Some("Number"),
            "{name}"
        );
        let number = |field: &str| {
            p.get(field)
                .and_then(Value::as_u64)
                .unwrap_or_else(|| panic!("{name}: {field}"))
        };
        (number("Default"), number("MinValue"), number("MaxValue"))
    };
    // Distributed Map states run up to 10,000 child executions at once, bounded here by
    // the default account concurrency; a run has at most as many partitions as the collector accepts; S3
    // lists at most 1000 keys per request.
    assert_eq!(bounds("GcWorkers"), (defaults.workers as u64, 1, 1000));
    let (default, min, max) = bounds("GcPartitions");
    assert_eq!((default, min), (defaults.partitions as u64, 1));
    let max = usize::try_from(max).expect("GcPartitions' MaxValue");
    assert!(
        accepts(max) && !accepts(max + 1),
        "GcPartitions' MaxValue is {max}"
    );
    assert_eq!(bounds("GcPageSize"), (defaults.page_size as u64, 1, 1000));
    assert!(
        template
            .get("Parameters")
            .and_then(|p| p.get("GcMaxRunsPerCycle"))
            .is_none(),
        "a cycle is one run: no bound on runs per cycle"
    );

    // The definition's placeholders are exactly the substitutions.
    let definition = std::fs::read_to_string(root().join("infra/statemachines/gc-cycle.asl.json"))
        .expect("read the definition");
    let placeholders: BTreeSet<&str> = definition
        .split("${")
        .skip(1)
        .map(|rest| rest.split('}').next().expect("a closing brace"))
        .collect();
    let machine = resource(&template, "GcCycleStateMachine");
    assert_eq!(
        property(machine, "DefinitionUri").and_then(Value::as_str),
        Some("statemachines/gc-cycle.asl.json")
    );
    let substitutions = property(machine, "DefinitionSubstitutions")
        .and_then(Value::as_mapping)
        .expect("DefinitionSubstitutions");
    let substituted: BTreeSet<&str> = substitutions
        .keys()
        .map(|key| key.as_str().expect("a name"))
        .collect();
    assert_eq!(substituted, placeholders);
    let substitution = |name: &str| {
        substitutions
            .get(name)
            .unwrap_or_else(|| panic!("substitution {name}"))
    };
    assert_eq!(reference(Some(substitution("Workers"))), Some("GcWorkers"));
    assert_eq!(
        reference(Some(substitution("GcFunctionArn"))),
        Some("GcFunction.Alias"),
        "the state machine invokes the alias, so a deploy's gradual shift covers gc"
    );
    assert_eq!(
        reference(Some(substitution("Stack"))),
        Some("AWS::StackName")
    );
    let definition: serde_json::Value =
        serde_json::from_str(&definition.replace("${Workers}", "4")).expect("JSON");
    let maps: Vec<&str> = definition["States"]
        .as_object()
        .expect("States")
        .iter()
        .filter(|(_, state)| state["Type"] == "Map")
        .map(|(name, state)| {
            assert_eq!(state["MaxConcurrencyPath"], "$.cycle.workers", "{name}");
            name.as_str()
        })
        .collect();
    assert_eq!(maps, ["Delete", "Scan"]);
    assert_eq!(
        definition["States"]["Start"]["Parameters"]["workers.$"],
        "States.StringToJson('4')"
    );

    // The function: the parameters as its configuration, GcWorkers reserved.
    let function = resource(&template, "GcFunction");
    let variables = property(function, "Environment")
        .and_then(|e| e.get("Variables"))
        .and_then(Value::as_mapping)
        .expect("GcFunction variables");
    let gc_variable = |name: &str| reference(variables.get(name));
    assert_eq!(gc_variable("PARQDB_GC_PARTITIONS"), Some("GcPartitions"));
    assert_eq!(gc_variable("PARQDB_GC_PAGE_SIZE"), Some("GcPageSize"));
    assert_eq!(gc_variable("PARQDB_GC_WORKERS"), Some("GcWorkers"));
    assert_eq!(
        gc_variable("PARQDB_GC_MAX_DELETES"),
        Some("GcMaxDeletesPerRun")
    );
    let config_source =
        std::fs::read_to_string(root().join("src/gc/config.rs")).expect("read src/gc/config.rs");
    let mut sample = BTreeMap::new();
    for (name, value) in variables {
        let name = name.as_str().expect("a name");
        if !name.starts_with("PARQDB_GC_") {
            continue;
        }
        assert!(
            config_source.contains(&format!("lookup(\"{name}\")"))
                || config_source.contains(&format!("(\"{name}\", &mut")),
            "GcConfig::from_lookup does not read {name}"
        );
        let parameter_name = reference(Some(value)).expect("!Ref <parameter>");
        let default = parameter(&template, parameter_name)
            .get("Default")
            .expect("a default");
        let text = match default {
            Value::Number(n) => n.to_string(),
            other => other.as_str().expect("a scalar").to_owned(),
        };
        sample.insert(name.to_owned(), text);
    }
    let config = parqdb_catalog::gc::GcConfig::from_lookup(|name| sample.get(name).cloned())
        .expect("the defaults are a valid configuration");
    assert_eq!(
        (config.partitions, config.page_size, config.workers),
        (defaults.partitions, defaults.page_size, defaults.workers)
    );
    assert_eq!(
        (config.max_deletes_per_run, defaults.max_deletes_per_run),
        (1_000_000_000, 1_000_000_000),
        "GcMaxDeletesPerRun and the library's default"
    );
    let reserved = property(function, "ReservedConcurrentExecutions")
        .and_then(|r| tagged(r, "!If"))
        .and_then(Value::as_sequence)
        .expect("ReservedConcurrentExecutions: !If [...]");
    assert_eq!(reserved[0].as_str(), Some("ReserveGcConcurrency"));
    assert_eq!(
        reference(reserved.get(1)),
        Some("GcWorkers"),
        "the Map states run GcWorkers steps at once; plan, verify and finish run alone"
    );
    assert_eq!(reference(reserved.get(2)), Some("AWS::NoValue"));
}

/// Every execution that fails, times out or is aborted reaches an encrypted queue that
/// keeps it (and the alarm topic when there is one), through a rule for this state
/// machine only, and only that rule may send to the queue.
#[test]
fn failed_gc_cycles_reach_their_destination() {
    let template = template();
    let rule = resource(&template, "GcCycleFailureRule");
    let pattern = property(rule, "EventPattern").expect("EventPattern");
    assert_eq!(scalars(&pattern["source"]), ["aws.states"]);
    assert_eq!(
        scalars(&pattern["detail-type"]),
        ["Step Functions Execution Status Change"]
    );
    let statuses: BTreeSet<&str> = scalars(&pattern["detail"]["status"]).into_iter().collect();
    assert_eq!(statuses, BTreeSet::from(["ABORTED", "FAILED", "TIMED_OUT"]));
    let machines = pattern["detail"]["stateMachineArn"]
        .as_sequence()
        .expect("stateMachineArn");
    assert_eq!(machines.len(), 1);
    assert_eq!(reference(machines.first()), Some("GcCycleStateMachine"));

    let targets: Vec<&Value> = property(rule, "Targets")
        .and_then(Value::as_sequence)
        .expect("Targets")
        .iter()
        .collect();
    let queue_target = targets
        .iter()
        .find(|t| {
            tagged(&t["Arn"], "!GetAtt").and_then(Value::as_str) == Some("GcCycleFailureQueue.Arn")
        })
        .expect("the failure queue is a target");
    assert!(queue_target.get("RetryPolicy").is_some());
    // The alarm topic only when one is given, with the queue as its dead-letter queue.
    let topic = targets
        .iter()
        .find_map(|t| tagged(t, "!If").and_then(Value::as_sequence))
        .expect("the alarm topic target, conditionally");
    assert_eq!(topic[0].as_str(), Some("HasAlarmTopic"));
    assert_eq!(reference(topic[1].get("Arn")), Some("AlarmTopicArn"));
    assert_eq!(
        tagged(&topic[1]["DeadLetterConfig"]["Arn"], "!GetAtt").and_then(Value::as_str),
        Some("GcCycleFailureQueue.Arn")
    );
    assert_eq!(reference(topic.get(2)), Some("AWS::NoValue"));

    let queue = resource(&template, "GcCycleFailureQueue");
    assert_eq!(
        property(queue, "SqsManagedSseEnabled").and_then(Value::as_bool),
        Some(true),
        "encrypted at rest"
    );
    assert_eq!(
        property(queue, "MessageRetentionPeriod").and_then(Value::as_u64),
        Some(1_209_600),
        "kept 14 days"
    );
    // Least privilege: one statement sends to the queue, for EventBridge, from this rule.
    let statements = statements(&template);
    let senders: Vec<&Statement<'_>> = statements
        .iter()
        .filter(|s| {
            s.resources
                .iter()
                .any(|r| resource_text(r) == "!GetAtt GcCycleFailureQueue.Arn")
        })
        .collect();
    let [sender] = senders.as_slice() else {
        panic!("one statement names the queue: {senders:?}");
    };
    assert_eq!(sender.owner, "GcCycleFailureQueuePolicy");
    assert_eq!(
        (sender.effect, sender.actions.as_slice()),
        ("Allow", ["sqs:SendMessage"].as_slice())
    );
    assert_eq!(sender.resources.len(), 1);
    let policy = resource(&template, "GcCycleFailureQueuePolicy");
    let statement = &property(policy, "PolicyDocument").expect("document")["Statement"][0];
    assert_eq!(
        statement["Principal"]["Service"].as_str(),
        Some("events.amazonaws.com")
    );
    assert_eq!(
        tagged(
            &sender.condition.expect("a condition")["ArnEquals"]["aws:SourceArn"],
            "!GetAtt"
        )
        .and_then(Value::as_str),
        Some("GcCycleFailureRule.Arn")
    );
}

/// The gc alarms: a failed execution (Step Functions' metric), a run not completed in
/// `GcCycleAlarmHours` and the bytes finished runs keep past retention (the metrics of the
/// gc function's EMF line, which `gc_emf_line` writes under `Operation=gc`).
#[test]
fn gc_alarms_watch_executions_and_the_runs_metrics() {
    let template = template();
    let alarm = |name: &str| {
        let alarm = resource(&template, name);
        let field = |f: &str| property(alarm, f).unwrap_or_else(|| panic!("{name}: {f}"));
        (
            alarm,
            field("Namespace").as_str(),
            field("MetricName").as_str(),
        )
    };
    // A cycle that ends in any way but success pages once, and the page clears by itself.
    let failed = resource(&template, "GcCycleFailedAlarm");
    let queries = property(failed, "Metrics")
        .and_then(Value::as_sequence)
        .expect("metric math");
    let mut watched = BTreeSet::new();
    for query in queries.iter().filter_map(|q| q.get("MetricStat")) {
        let metric = &query["Metric"];
        assert_eq!(metric["Namespace"].as_str(), Some("AWS/States"));
        let dimension = &metric["Dimensions"][0];
        assert_eq!(dimension["Name"].as_str(), Some("StateMachineArn"));
        assert_eq!(
            reference(dimension.get("Value")),
            Some("GcCycleStateMachine")
        );
        watched.insert(metric["MetricName"].as_str().expect("a metric"));
    }
    assert_eq!(
        watched,
        BTreeSet::from([
            "ExecutionsAborted",
            "ExecutionsFailed",
            "ExecutionsTimedOut"
        ])
    );
    let expression = queries
        .iter()
        .find_map(|q| q.get("Expression"))
        .and_then(Value::as_str)
        .expect("an expression");
    assert_eq!(
        expression,
        "FILL(failed, 0) + FILL(timedout, 0) + FILL(aborted, 0)"
    );
    // The failure queue's alarm waits days for its events to be read: one failure, one page.
    let reminder = resource(&template, "GcCycleFailuresAlarm");
    assert_eq!(
        property(reminder, "MetricName").and_then(Value::as_str),
        Some("ApproximateAgeOfOldestMessage")
    );
    assert!(
        property(reminder, "Threshold").and_then(Value::as_u64) >= Some(86_400),
        "at least a day"
    );

    // What a finished run's line carries.
    let finish = serde_json::json!({
        "step": "finish", "status": "completed", "done": true, "run-id": "r", "now-ms": 1,
        "progress": {"phase": "done", "partitions": 1, "steps": 1},
        "deleted": {"objects": 1, "bytes": 10}, "kept-by-reference": {"objects": 1, "bytes": 5},
    });
    let line: serde_json::Value = serde_json::from_str(
        &parqdb_catalog::lambda::metrics::gc_emf_line("s", 2, &finish),
    )
    .expect("an EMF line");
    let emitted: BTreeSet<&str> = line["_aws"]["CloudWatchMetrics"][0]["Metrics"]
        .as_array()
        .expect("metrics")
        .iter()
        .filter_map(|m| m["Name"].as_str())
        .collect();
    let namespace_of_line = line["_aws"]["CloudWatchMetrics"][0]["Namespace"].as_str();
    assert_eq!(line["RunsCompleted"], 1);
    for (name, metric, statistic) in [
        ("GcCycleOverdueAlarm", "RunsCompleted", "Sum"),
        ("GcKeptBytesAlarm", "BytesKeptPastRetention", "Minimum"),
    ] {
        let (alarm, namespace, watched) = alarm(name);
        assert_eq!(namespace, namespace_of_line, "{name}");
        assert_eq!(watched, Some(metric), "{name}");
        assert!(emitted.contains(metric), "the gc function emits {metric}");
        assert_eq!(
            property(alarm, "Statistic").and_then(Value::as_str),
            Some(statistic),
            "{name}"
        );
        let dimensions = property(alarm, "Dimensions")
            .and_then(Value::as_sequence)
            .expect("Dimensions");
        assert_eq!(dimensions.len(), 2, "{name}");
        assert_eq!(dimensions[0]["Name"].as_str(), Some("Stack"));
        assert_eq!(
            reference(dimensions[0].get("Value")),
            Some("AWS::StackName")
        );
        assert_eq!(dimensions[1]["Name"].as_str(), Some("Operation"));
        assert_eq!(dimensions[1]["Value"].as_str(), Some("gc"));
    }
    // Overdue: fewer than one completed run in each of GcCycleAlarmHours hours, and no
    // data at all (nothing ran) counts as overdue.
    let (overdue, _, _) = alarm("GcCycleOverdueAlarm");
    let field = |f: &str| property(overdue, f).unwrap_or_else(|| panic!("{f}"));
    assert_eq!(field("Period").as_u64(), Some(3600));
    assert_eq!(
        reference(Some(field("EvaluationPeriods"))),
        Some("GcCycleAlarmHours")
    );
    assert_eq!(field("Threshold").as_u64(), Some(1));
    assert_eq!(
        field("ComparisonOperator").as_str(),
        Some("LessThanThreshold")
    );
    assert_eq!(field("TreatMissingData").as_str(), Some("breaching"));
    // CloudWatch evaluates at most seven days.
    let hours = parameter(&template, "GcCycleAlarmHours");
    assert!(
        hours
            .get("MaxValue")
            .and_then(Value::as_u64)
            .is_some_and(|h| h * 3600 <= 604_800)
    );
}
