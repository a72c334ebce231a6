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
//! The template is read with the small block-style YAML reader at the end of this file
//! (no YAML dependency): block mappings and sequences, CloudFormation short-form tags
//! (`!Sub`, `!If`, ...), flow sequences of scalars and folded/literal block scalars, which
//! is all the template uses. Anything else in it fails these tests loudly rather than
//! being misread. `scripts/check-infra.sh` validates the template itself (cfn-lint,
//! checkov, SAM expansion).

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn template() -> Node {
    let path = root().join("infra/template.yaml");
    let text = std::fs::read_to_string(&path).expect("read infra/template.yaml");
    parse_yaml(&text).unwrap_or_else(|err| panic!("{}: {err}", path.display()))
}

fn resources(template: &Node) -> &[(String, Node)] {
    template
        .get("Resources")
        .and_then(Node::as_map)
        .expect("the template has Resources")
}

fn resources_of_type<'a>(template: &'a Node, kind: &str) -> Vec<(&'a str, &'a Node)> {
    resources(template)
        .iter()
        .filter(|(_, resource)| resource.get("Type").and_then(Node::as_str) == Some(kind))
        .map(|(name, resource)| (name.as_str(), resource))
        .collect()
}

fn property<'a>(resource: &'a Node, name: &str) -> Option<&'a Node> {
    resource
        .get("Properties")
        .and_then(|properties| properties.get(name))
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
        let code = property(function, "CodeUri").and_then(Node::as_str);
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
        let function_name = property(function, "FunctionName").and_then(|n| n.tagged("!Sub"));
        assert_eq!(
            function_name.and_then(Node::as_str),
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
        globals.get("Runtime").and_then(Node::as_str),
        Some("provided.al2023")
    );
    assert_eq!(
        globals.get("Handler").and_then(Node::as_str),
        Some("bootstrap")
    );
    let architectures: Vec<&str> = globals
        .get("Architectures")
        .and_then(Node::as_seq)
        .expect("Globals.Function.Architectures")
        .iter()
        .filter_map(Node::as_str)
        .collect();
    assert_eq!(architectures, ["arm64"]);
}

/// The store's attribute names (`const PK`/`const SK`, private) and the types its rustdoc
/// schema table gives them, read from `src/store/dynamodb.rs`.
fn documented_key_schema() -> [(String, String); 2] {
    let path = root().join("src/store/dynamodb.rs");
    let source = std::fs::read_to_string(&path).expect("read src/store/dynamodb.rs");
    let constant = |name: &str| -> String {
        let prefix = format!("const {name}: &str = \"");
        source
            .lines()
            .find_map(|line| {
                line.trim_start()
                    .strip_prefix(&prefix)?
                    .strip_suffix("\";")
                    .map(str::to_owned)
            })
            .unwrap_or_else(|| panic!("src/store/dynamodb.rs no longer defines `{prefix}...\";`"))
    };
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
    let (pk, sk) = (constant("PK"), constant("SK"));
    let pk_type = documented_type(&pk, "partition key");
    let sk_type = documented_type(&sk, "sort key");
    [(pk, pk_type), (sk, sk_type)]
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
    let pairs = |list: &str, key: &str, value: &str| -> BTreeSet<(String, String)> {
        property(table, list)
            .and_then(Node::as_seq)
            .unwrap_or_else(|| panic!("{name}: no {list}"))
            .iter()
            .map(|entry| {
                let field = |f: &str| {
                    entry
                        .get(f)
                        .and_then(Node::as_str)
                        .unwrap_or_else(|| panic!("{name}: {list} entry without {f}"))
                };
                (field(key).to_owned(), field(value).to_owned())
            })
            .collect()
    };
    assert_eq!(
        pairs("AttributeDefinitions", "AttributeName", "AttributeType"),
        BTreeSet::from([(pk.clone(), pk_type), (sk.clone(), sk_type)]),
        "{name}: AttributeDefinitions must be exactly the key attributes of src/store/dynamodb.rs"
    );
    assert_eq!(
        pairs("KeySchema", "AttributeName", "KeyType"),
        BTreeSet::from([(pk, "HASH".to_owned()), (sk, "RANGE".to_owned())]),
        "{name}: KeySchema"
    );
    let scalar = |path: &[&str]| -> Option<&str> {
        let mut node = table.get("Properties")?;
        for key in path {
            node = node.get(key)?;
        }
        node.as_str()
    };
    assert_eq!(scalar(&["BillingMode"]), Some("PAY_PER_REQUEST"));
    assert_eq!(
        scalar(&[
            "PointInTimeRecoverySpecification",
            "PointInTimeRecoveryEnabled"
        ]),
        Some("true")
    );
    assert_eq!(scalar(&["DeletionProtectionEnabled"]), Some("true"));
    assert_eq!(scalar(&["SSESpecification", "SSEEnabled"]), Some("true"));
    assert!(
        property(table, "TimeToLiveSpecification").is_none(),
        "the store forbids TTL"
    );
    assert!(property(table, "GlobalSecondaryIndexes").is_none());
    assert!(property(table, "LocalSecondaryIndexes").is_none());
}

/// One IAM statement of a role or a resource policy, with both branches of every `!If`.
#[derive(Debug)]
struct Statement<'a> {
    owner: &'a str,
    sid: Option<&'a str>,
    effect: &'a str,
    actions: Vec<&'a str>,
    resources: Vec<&'a Node>,
}

fn statements(template: &Node) -> Vec<Statement<'_>> {
    let mut found = Vec::new();
    for (owner, resource) in resources(template) {
        let mut documents = Vec::new();
        if let Some(policies) = property(resource, "Policies").and_then(Node::as_seq) {
            documents.extend(policies.iter().filter_map(|p| p.get("PolicyDocument")));
        }
        documents.extend(property(resource, "PolicyDocument"));
        for document in documents {
            let list = document
                .get("Statement")
                .and_then(Node::as_seq)
                .unwrap_or_else(|| panic!("{owner}: policy without Statement list"));
            for statement in list.iter().flat_map(branches) {
                let effect = statement
                    .get("Effect")
                    .and_then(Node::as_str)
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
                    Some(Node::Seq(items)) => items.iter().collect(),
                    Some(one) => vec![one],
                    None => Vec::new(),
                };
                found.push(Statement {
                    owner: owner.as_str(),
                    sid: statement.get("Sid").and_then(Node::as_str),
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
fn branches(node: &Node) -> Vec<&Node> {
    match node.tagged("!If").and_then(Node::as_seq) {
        Some([_, yes, no]) => [yes, no]
            .into_iter()
            .filter(|branch| branch.tagged("!Ref").and_then(Node::as_str) != Some("AWS::NoValue"))
            .flat_map(branches)
            .collect(),
        Some(_) => panic!("malformed !If: {node:?}"),
        None => vec![node],
    }
}

fn scalars(node: &Node) -> Vec<&str> {
    match node {
        Node::Seq(items) => items
            .iter()
            .map(|item| {
                item.as_str()
                    .unwrap_or_else(|| panic!("not a scalar: {item:?}"))
            })
            .collect(),
        other => vec![
            other
                .as_str()
                .unwrap_or_else(|| panic!("not a scalar: {other:?}")),
        ],
    }
}

/// The text of a resource ARN as written (`!Sub` template, `!GetAtt` target, or literal).
fn resource_text(node: &Node) -> String {
    match node {
        Node::Scalar(text) => text.clone(),
        Node::Tagged(tag, inner) => format!("{tag} {}", inner.as_str().unwrap_or("<complex>")),
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
            .iter()
            .find(|(name, _)| name == "GcFunction")
            .map(|(_, f)| f)
            .expect("a GcFunction"),
        "Role",
    )
    .and_then(|role| role.tagged("!GetAtt"))
    .and_then(Node::as_str)
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

#[test]
fn the_yaml_reader_reads_what_the_template_uses() {
    let doc = parse_yaml(
        "A: 1 # comment\nB:\n  - x\n  - !Sub \"s3://${B}/p\"\n  - K: v\n    L: [a, b]\n\"Null\":\n  k: \"false\"\nC: !If\n  - Cond\n  - x\n  - !Ref AWS::NoValue\nD: >-\n  folded\n  text\nE:\n- same-indent\n",
    )
    .expect("parses");
    assert_eq!(doc.get("A").and_then(Node::as_str), Some("1"));
    let b = doc.get("B").and_then(Node::as_seq).expect("B");
    assert_eq!(
        b[1].tagged("!Sub").and_then(Node::as_str),
        Some("s3://${B}/p")
    );
    assert_eq!(b[2].get("L").map(scalars), Some(vec!["a", "b"]));
    assert_eq!(
        doc.get("Null")
            .and_then(|n| n.get("k"))
            .and_then(Node::as_str),
        Some("false")
    );
    assert_eq!(branches(doc.get("C").expect("C")).len(), 1);
    assert_eq!(doc.get("D").and_then(Node::as_str), Some("folded text"));
    assert_eq!(doc.get("E").map(scalars), Some(vec!["same-indent"]));
    assert!(
        parse_yaml("A: {b: 1}\n").is_err(),
        "flow mappings are refused"
    );
    assert!(parse_yaml("A: &x 1\n").is_err(), "anchors are refused");
}

// ---------------------------------------------------------------------------------------
// A reader for the block-style YAML subset of CloudFormation templates.
// ---------------------------------------------------------------------------------------

#[derive(Debug, Clone, PartialEq)]
enum Node {
    Scalar(String),
    Seq(Vec<Node>),
    Map(Vec<(String, Node)>),
    /// A CloudFormation short-form tag (`!Sub`, `!If`, ...) and its operand.
    Tagged(String, Box<Node>),
}

impl Node {
    fn get(&self, key: &str) -> Option<&Node> {
        self.as_map()?
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v)
    }
    fn as_map(&self) -> Option<&[(String, Node)]> {
        match self {
            Node::Map(entries) => Some(entries),
            _ => None,
        }
    }
    fn as_seq(&self) -> Option<&[Node]> {
        match self {
            Node::Seq(items) => Some(items),
            _ => None,
        }
    }
    fn as_str(&self) -> Option<&str> {
        match self {
            Node::Scalar(text) => Some(text),
            _ => None,
        }
    }
    fn tagged(&self, tag: &str) -> Option<&Node> {
        match self {
            Node::Tagged(t, inner) if t == tag => Some(inner),
            _ => None,
        }
    }
}

struct Line<'a> {
    number: usize,
    indent: usize,
    text: &'a str,
}

fn parse_yaml(text: &str) -> Result<Node, String> {
    let mut lines = Vec::new();
    for (index, raw) in text.lines().enumerate() {
        let content = strip_comment(raw).trim_end();
        let trimmed = content.trim_start();
        if trimmed.is_empty() {
            continue;
        }
        if raw.starts_with('\t') {
            return Err(format!("line {}: tab indentation", index + 1));
        }
        lines.push(Line {
            number: index + 1,
            indent: content.len() - trimmed.len(),
            text: trimmed,
        });
    }
    let mut reader = Reader { lines, next: 0 };
    let node = reader.block(0)?;
    match reader.lines.get(reader.next) {
        Some(line) => Err(format!("line {}: unexpected indentation", line.number)),
        None => Ok(node),
    }
}

/// The line without a trailing `# comment` (a `#` at the start or after a space, outside quotes).
fn strip_comment(line: &str) -> &str {
    let mut quote = None;
    let mut previous = ' ';
    for (at, c) in line.char_indices() {
        match (quote, c) {
            (None, '"' | '\'') => quote = Some(c),
            (Some(q), _) if c == q => quote = None,
            (None, '#') if previous == ' ' => return &line[..at],
            _ => {}
        }
        previous = c;
    }
    line
}

struct Reader<'a> {
    lines: Vec<Line<'a>>,
    next: usize,
}

impl<'a> Reader<'a> {
    fn peek(&self) -> Option<(usize, &'a str)> {
        self.lines
            .get(self.next)
            .map(|line| (line.indent, line.text))
    }

    fn error(&self, message: &str) -> String {
        let number = self
            .lines
            .get(self.next.saturating_sub(1))
            .map_or(0, |line| line.number);
        format!("line {number}: {message}")
    }

    /// The block (mapping or sequence) whose lines start at `indent`.
    fn block(&mut self, indent: usize) -> Result<Node, String> {
        match self.peek() {
            Some((_, text)) if is_item(text) => self.sequence(indent),
            Some(_) => self.mapping(indent),
            None => Err(self.error("missing block")),
        }
    }

    fn sequence(&mut self, indent: usize) -> Result<Node, String> {
        let mut items = Vec::new();
        while let Some((at, text)) = self.peek() {
            if at != indent || !is_item(text) {
                break;
            }
            let rest = text[1..].trim_start();
            if rest.is_empty() {
                self.next += 1;
                items.push(self.nested(indent)?);
            } else if split_key(rest).is_some() {
                // `- key: value`: a mapping whose keys line up after the dash.
                let inner = indent + (text.len() - rest.len());
                let line = &mut self.lines[self.next];
                line.indent = inner;
                line.text = rest;
                items.push(self.mapping(inner)?);
            } else {
                self.next += 1;
                items.push(self.value(rest, indent)?);
            }
        }
        Ok(Node::Seq(items))
    }

    fn mapping(&mut self, indent: usize) -> Result<Node, String> {
        let mut entries: Vec<(String, Node)> = Vec::new();
        while let Some((at, text)) = self.peek() {
            if at < indent {
                break;
            }
            if at > indent || is_item(text) {
                return Err(format!(
                    "line {}: unexpected indentation",
                    self.lines[self.next].number
                ));
            }
            self.next += 1;
            let (key, rest) = split_key(text).ok_or_else(|| self.error("expected `key: value`"))?;
            let key = unquote(key);
            if entries.iter().any(|(k, _)| *k == key) {
                return Err(self.error(&format!("duplicate key `{key}`")));
            }
            let value = if rest.is_empty() {
                match self.peek() {
                    // A sequence may sit at its key's indentation.
                    Some((at, text)) if at == indent && is_item(text) => self.sequence(indent)?,
                    _ => self.nested(indent)?,
                }
            } else {
                self.value(rest, indent)?
            };
            entries.push((key, value));
        }
        Ok(Node::Map(entries))
    }

    /// The block indented deeper than `parent`.
    fn nested(&mut self, parent: usize) -> Result<Node, String> {
        match self.peek() {
            Some((at, _)) if at > parent => self.block(at),
            _ => Err(self.error("missing nested block")),
        }
    }

    /// An inline value; `parent` is the indentation of the line it is on.
    fn value(&mut self, text: &'a str, parent: usize) -> Result<Node, String> {
        if let Some(tagged) = text.strip_prefix('!') {
            let (tag, operand) = tagged.split_once(' ').unwrap_or((tagged, ""));
            let operand = operand.trim();
            let inner = if operand.is_empty() {
                self.nested(parent)?
            } else {
                self.value(operand, parent)?
            };
            return Ok(Node::Tagged(format!("!{tag}"), Box::new(inner)));
        }
        if matches!(text, ">" | ">-" | "|" | "|-") {
            let mut parts = Vec::new();
            while let Some((at, line)) = self.peek() {
                if at <= parent {
                    break;
                }
                parts.push(line);
                self.next += 1;
            }
            let separator = if text.starts_with('>') { " " } else { "\n" };
            return Ok(Node::Scalar(parts.join(separator)));
        }
        if let Some(inner) = text.strip_prefix('[') {
            let inner = inner
                .strip_suffix(']')
                .ok_or_else(|| self.error("unterminated flow sequence"))?;
            return split_flow(inner)
                .into_iter()
                .map(|item| self.value(item, parent))
                .collect::<Result<_, _>>()
                .map(Node::Seq);
        }
        if text.starts_with(['{', '&', '*', '<']) {
            return Err(self.error(&format!(
                "unsupported YAML (flow mapping, anchor, alias or merge): `{text}`"
            )));
        }
        Ok(Node::Scalar(unquote(text)))
    }
}

fn is_item(text: &str) -> bool {
    text == "-" || text.starts_with("- ")
}

/// `key: rest` or `key:` (outside quotes); `None` if the text is not a mapping entry.
fn split_key(text: &str) -> Option<(&str, &str)> {
    if text.starts_with(['!', '[', '{', '>', '|']) {
        return None;
    }
    let mut quote = None;
    for (at, c) in text.char_indices() {
        match (quote, c) {
            (None, '"' | '\'') => quote = Some(c),
            (Some(q), _) if c == q => quote = None,
            (None, ':') if text[at + 1..].is_empty() || text[at + 1..].starts_with(' ') => {
                return Some((text[..at].trim(), text[at + 1..].trim()));
            }
            _ => {}
        }
    }
    None
}

fn split_flow(text: &str) -> Vec<&str> {
    let mut items = Vec::new();
    let (mut quote, mut depth, mut start) = (None, 0, 0);
    for (at, c) in text.char_indices() {
        match (quote, c) {
            (None, '"' | '\'') => quote = Some(c),
            (Some(q), _) if c == q => quote = None,
            (None, '[') => depth += 1,
            (None, ']') => depth -= 1,
            (None, ',') if depth == 0 => {
                items.push(text[start..at].trim());
                start = at + 1;
            }
            _ => {}
        }
    }
    let last = text[start..].trim();
    if !last.is_empty() {
        items.push(last);
    }
    items
}

fn unquote(text: &str) -> String {
    let text = text.trim();
    for q in ['"', '\''] {
        if text.len() >= 2 && text.starts_with(q) && text.ends_with(q) {
            return text[1..text.len() - 1].to_owned();
        }
    }
    text.to_owned()
}
