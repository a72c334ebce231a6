//! The deployment template (`infra/template.yaml`) as a `serde_norway::Value`, and the
//! accessors the infrastructure tests share. CloudFormation short-form tags (`!Sub`,
//! `!If`, ...) arrive as `Value::Tagged`.
#![allow(dead_code)]

use std::path::PathBuf;

use serde_norway::Value;

pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

pub fn template() -> Value {
    let path = root().join("infra/template.yaml");
    let text = std::fs::read_to_string(&path).expect("read infra/template.yaml");
    serde_norway::from_str(&text).unwrap_or_else(|err| panic!("{}: {err}", path.display()))
}

/// The resources of the template by logical id, in template order.
pub fn resources(template: &Value) -> Vec<(&str, &Value)> {
    template
        .get("Resources")
        .and_then(Value::as_mapping)
        .expect("the template has Resources")
        .iter()
        .map(|(name, resource)| (name.as_str().expect("a string id"), resource))
        .collect()
}

pub fn resources_of_type<'a>(template: &'a Value, kind: &str) -> Vec<(&'a str, &'a Value)> {
    resources(template)
        .into_iter()
        .filter(|(_, resource)| resource.get("Type").and_then(Value::as_str) == Some(kind))
        .collect()
}

pub fn property<'a>(resource: &'a Value, name: &str) -> Option<&'a Value> {
    resource
        .get("Properties")
        .and_then(|properties| properties.get(name))
}

/// The operand of a short-form tag (`!Sub`, `!If`, ...), if `value` is tagged with `tag`.
/// (`Value`'s accessors such as `as_str` see through tags; this one checks the tag.)
pub fn tagged<'a>(value: &'a Value, tag: &str) -> Option<&'a Value> {
    match value {
        Value::Tagged(tagged) if tagged.tag == tag => Some(&tagged.value),
        _ => None,
    }
}

/// `!Ref <name>` of a value, if it is one.
pub fn reference(value: Option<&Value>) -> Option<&str> {
    value
        .and_then(|v| tagged(v, "!Ref"))
        .and_then(Value::as_str)
}

pub fn parameter<'a>(template: &'a Value, name: &str) -> &'a Value {
    template
        .get("Parameters")
        .and_then(|p| p.get(name))
        .unwrap_or_else(|| panic!("a parameter {name}"))
}

pub fn resource<'a>(template: &'a Value, name: &str) -> &'a Value {
    resources(template)
        .into_iter()
        .find(|(id, _)| *id == name)
        .map(|(_, resource)| resource)
        .unwrap_or_else(|| panic!("a resource {name}"))
}

/// A statement, or both branches of `!If [condition, a, b]` (without `!Ref AWS::NoValue`).
pub fn branches(node: &Value) -> Vec<&Value> {
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
pub fn scalars(value: &Value) -> Vec<&str> {
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
