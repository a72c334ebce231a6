//! The deployment template (`infra/template.yaml`) against the code it deploys.
//!
//! * one `AWS::Serverless::Function` per binary in `functions/src/bin/`, whose `CodeUri`
//!   is that binary's cargo-lambda output `../target/lambda/<name>/` and whose name is
//!   `<stack>-<name>`, each with its own explicit role (no SAM-generated role, so no
//!   managed policy);
//! * the DynamoDB pointer table's key schema is the one `src/store/dynamodb.rs` uses and
//!   documents (its attribute-name constants and its rustdoc schema table);
//! * only the garbage collector's role may delete objects, and only under `metadata/` and
//!   `indexes/` (the managed prefixes) and its own ledger `_gc/`; no role allows a wildcard
//!   action, and the only wildcard resource is the one IAM requires for
//!   `dynamodb:ListStreams`.
//!
//! The template is read with `serde_norway` into a `serde_norway::Value`; CloudFormation
//! short-form tags (`!Sub`, `!If`, ...) arrive as `Value::Tagged`. `scripts/check-infra.sh`
//! validates the template itself (cfn-lint, checkov, SAM expansion).

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use parqdb_catalog::store::dynamodb::{PARTITION_KEY, SORT_KEY};
use serde_norway::Value;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn template() -> Value {
    let path = root().join("infra/template.yaml");
    let text = std::fs::read_to_string(&path).expect("read infra/template.yaml");
    serde_norway::from_str(&text).unwrap_or_else(|err| panic!("{}: {err}", path.display()))
}

/// The resources of the template by logical id, in template order.
fn resources(template: &Value) -> Vec<(&str, &Value)> {
    template
        .get("Resources")
        .and_then(Value::as_mapping)
        .expect("the template has Resources")
        .iter()
        .map(|(name, resource)| (name.as_str().expect("a string id"), resource))
        .collect()
}

fn resources_of_type<'a>(template: &'a Value, kind: &str) -> Vec<(&'a str, &'a Value)> {
    resources(template)
        .into_iter()
        .filter(|(_, resource)| resource.get("Type").and_then(Value::as_str) == Some(kind))
        .collect()
}

fn property<'a>(resource: &'a Value, name: &str) -> Option<&'a Value> {
    resource
        .get("Properties")
        .and_then(|properties| properties.get(name))
}

/// The operand of a short-form tag (`!Sub`, `!If`, ...), if `value` is tagged with `tag`.
/// (`Value`'s accessors such as `as_str` see through tags; this one checks the tag.)
fn tagged<'a>(value: &'a Value, tag: &str) -> Option<&'a Value> {
    match value {
        Value::Tagged(tagged) if tagged.tag == tag => Some(&tagged.value),
        _ => None,
    }
}

/// The function binaries: `functions/src/bin/<name>.rs`.
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
        .collect()
}

#[test]
fn one_function_per_binary_named_after_it() {
    let template = template();
    let mut deployed = BTreeMap::new();
    for (name, function) in resources_of_type(&template, "AWS::Serverless::Function") {
        let code = property(function, "CodeUri").and_then(Value::as_str);
        let binary = code
            .and_then(|uri| uri.strip_prefix("../target/lambda/"))
            .and_then(|rest| rest.strip_suffix('/'))
            .filter(|binary| !binary.is_empty() && !binary.contains('/'))
            .unwrap_or_else(|| {
                panic!("{name}: CodeUri {code:?} is not ../target/lambda/<binary>/")
            });
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
    let architectures: Vec<&str> = globals
        .get("Architectures")
        .and_then(Value::as_sequence)
        .expect("Globals.Function.Architectures")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(architectures, ["arm64"]);
}

/// The store's key attributes (`PARTITION_KEY`, `SORT_KEY`) and the types its rustdoc
/// schema table in `src/store/dynamodb.rs` gives them.
fn documented_key_schema() -> [(String, String); 2] {
    let path = root().join("src/store/dynamodb.rs");
    let source = std::fs::read_to_string(&path).expect("read src/store/dynamodb.rs");
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
                    "the schema table of src/store/dynamodb.rs has no {role} row for `{attribute}`"
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
        "{name}: AttributeDefinitions must be exactly the key attributes of src/store/dynamodb.rs"
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
    // The one local index of src/store/dynamodb.rs: sparse on `shown_sk`, strongly
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
                });
            }
        }
    }
    found
}

/// A statement, or both branches of `!If [condition, a, b]` (without `!Ref AWS::NoValue`).
fn branches(node: &Value) -> Vec<&Value> {
    match tagged(node, "!If")
        .and_then(Value::as_sequence)
        .map(Vec::as_slice)
    {
        Some([_, yes, no]) => [yes, no]
            .into_iter()
            .filter(|branch| tagged(branch, "!Ref").and_then(Value::as_str) != Some("AWS::NoValue"))
            .flat_map(branches)
            .collect(),
        Some(_) => panic!("malformed !If: {node:?}"),
        None => vec![node],
    }
}

/// A scalar or a sequence of scalars, through tags.
fn scalars(value: &Value) -> Vec<&str> {
    let items = match value.as_sequence() {
        Some(items) => items.iter().collect(),
        None => vec![value],
    };
    items
        .into_iter()
        .map(|item| {
            item.as_str()
                .unwrap_or_else(|| panic!("not a scalar: {item:?}"))
        })
        .collect()
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

#[test]
fn only_the_garbage_collector_may_delete_objects() {
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
            assert_eq!(
                statement.owner, gc_role,
                "{} {:?} allows `{action}`: only the GC may delete",
                statement.owner, statement.sid
            );
            assert_eq!(
                *action, "s3:DeleteObject",
                "the GC needs s3:DeleteObject only"
            );
            gc_deletes.extend(statement.resources.iter().map(|r| resource_text(r)));
        }
        for resource in &statement.resources {
            if resource.as_str() == Some("*") {
                assert_eq!(
                    statement.actions,
                    ["dynamodb:ListStreams"],
                    "{} {:?}: `*` resource",
                    statement.owner,
                    statement.sid
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
