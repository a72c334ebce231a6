//! Which Lambda function serves which operation.

use std::fmt;

use crate::error::{Error, ErrorKind, Result};
use crate::lambda::Operation;

/// The URI scheme of a Lambda deployment: `lambda://PREFIX[?OPERATION=NAME&...]`.
pub const SCHEME: &str = "lambda://";

/// The name (or ARN) of the function that serves each [`Operation`].
///
/// By default the name is a prefix followed by the operation's name, which is how the SAM
/// template names them (`${StackName}-load`, `${StackName}-commit`, ...); any operation
/// can be mapped explicitly.
///
/// ```
/// use parqdb_catalog::lambda::Operation;
/// use parqdb_catalog::remote::FunctionNames;
///
/// let names = FunctionNames::with_prefix("parqdb-prod-").set(Operation::Load, "reader");
/// assert_eq!(names.get(Operation::Commit), "parqdb-prod-commit");
/// assert_eq!(names.get(Operation::Load), "reader");
///
/// let names = FunctionNames::from_uri("lambda://parqdb-prod-?load=reader")?;
/// assert_eq!(names.get(Operation::Load), "reader");
/// assert_eq!(names.get(Operation::Namespace), "parqdb-prod-namespace");
/// # Ok::<(), parqdb_catalog::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FunctionNames {
    names: [String; Operation::ALL.len()],
}

impl FunctionNames {
    /// `PREFIX` + the operation name for every operation (`parqdb-prod-` →
    /// `parqdb-prod-load`, `parqdb-prod-commit`, ...). The prefix may be a partial ARN.
    pub fn with_prefix(prefix: &str) -> FunctionNames {
        FunctionNames {
            names: Operation::ALL.map(|operation| format!("{prefix}{}", operation.name())),
        }
    }

    /// Parse `lambda://PREFIX` with optional explicit names as query pairs:
    /// `lambda://parqdb-prod-?commit=my-commit&load=my-load`. Anything else is
    /// [`ErrorKind::Configuration`].
    pub fn from_uri(uri: &str) -> Result<FunctionNames> {
        let invalid = |reason: String| {
            Error::new(
                ErrorKind::Configuration,
                format!(
                    "catalog URI `{uri}` {reason}; expected lambda://PREFIX[?OPERATION=NAME&...]"
                ),
            )
        };
        let rest = uri
            .strip_prefix(SCHEME)
            .ok_or_else(|| invalid("is not a lambda:// URI".into()))?;
        let (prefix, query) = match rest.split_once('?') {
            Some((prefix, query)) => (prefix, Some(query)),
            None => (rest, None),
        };
        if prefix.is_empty() {
            return Err(invalid("names no function prefix".into()));
        }
        if let Some(bad) = prefix.chars().find(|c| !is_name_char(*c)) {
            return Err(invalid(format!(
                "has `{bad}` in its prefix (function names and ARNs use letters, digits, `-`, `_`, `:`, `.`)"
            )));
        }
        let mut names = FunctionNames::with_prefix(prefix);
        for pair in query.into_iter().flat_map(|query| query.split('&')) {
            let (key, value) = pair.split_once('=').ok_or_else(|| {
                invalid(format!("has the query part `{pair}`, not OPERATION=NAME"))
            })?;
            let operation = Operation::ALL
                .into_iter()
                .find(|operation| operation.name() == key)
                .ok_or_else(|| invalid(format!("maps the unknown operation `{key}`")))?;
            if value.is_empty() || !value.chars().all(|c| is_name_char(c) || c == '$') {
                return Err(invalid(format!(
                    "maps `{key}` to the invalid function name `{value}`"
                )));
            }
            names = names.set(operation, value);
        }
        Ok(names)
    }

    /// Serve `operation` with the function `name` (a name, partial ARN or ARN).
    pub fn set(mut self, operation: Operation, name: impl Into<String>) -> FunctionNames {
        self.names[index(operation)] = name.into();
        self
    }

    /// The function that serves `operation`.
    pub fn get(&self, operation: Operation) -> &str {
        &self.names[index(operation)]
    }
}

impl fmt::Display for FunctionNames {
    /// `load=NAME, register=NAME, ...`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (n, operation) in Operation::ALL.into_iter().enumerate() {
            if n > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{operation}={}", self.get(operation))?;
        }
        Ok(())
    }
}

fn index(operation: Operation) -> usize {
    Operation::ALL
        .iter()
        .position(|candidate| *candidate == operation)
        .unwrap_or_default()
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | ':' | '.')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_name_every_operation() {
        let names = FunctionNames::from_uri("lambda://parqdb-prod-").expect("valid");
        for operation in Operation::ALL {
            assert_eq!(names.get(operation), format!("parqdb-prod-{operation}"));
        }
        let arn = "lambda://arn:aws:lambda:us-east-1:123456789012:function:stack-";
        let names = FunctionNames::from_uri(arn).expect("valid");
        assert_eq!(
            names.get(Operation::Commit),
            "arn:aws:lambda:us-east-1:123456789012:function:stack-commit"
        );
    }

    #[test]
    fn queries_map_operations_explicitly() {
        let names =
            FunctionNames::from_uri("lambda://p-?commit=c1&rename=r:$LATEST").expect("valid");
        assert_eq!(names.get(Operation::Commit), "c1");
        assert_eq!(names.get(Operation::Rename), "r:$LATEST");
        assert_eq!(names.get(Operation::Load), "p-load");
    }

    #[test]
    fn malformed_uris_are_configuration_errors() {
        for uri in [
            "lambda://",
            "lambda://?load=x",
            "lambda://p/",
            "lambda://p x",
            "dynamodb://t",
            "lambda://p?load",
            "lambda://p?fetch=x",
            "lambda://p?load=",
            "lambda://p?load=a/b",
        ] {
            let err = FunctionNames::from_uri(uri).expect_err(uri);
            assert_eq!(err.kind(), ErrorKind::Configuration, "{uri}");
            assert!(err.message().contains(uri), "{err}");
        }
    }
}
