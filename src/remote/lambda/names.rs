//! Which Lambda function serves which operation.

use std::fmt;

use crate::error::{Error, ErrorKind, Result};
use crate::lambda::Operation;

/// The URI scheme of a Lambda deployment:
/// `lambda://PREFIX[?qualifier=ALIAS][&OPERATION=NAME...]`.
pub(crate) const SCHEME: &str = "lambda://";

/// The alias the SAM template publishes every function through (`AutoPublishAlias` in
/// `infra/template.yaml`), which CodeDeploy shifts gradually to each new version: what a
/// prefix's names invoke unless the URI says otherwise.
pub const DEFAULT_QUALIFIER: &str = "live";

/// The name (or ARN) of the function that serves each [`Operation`].
///
/// By default the name is a prefix followed by the operation's name, which is how the SAM
/// template names them (`${StackName}-load`, `${StackName}-commit`, ...), qualified with
/// the alias `live` (`${StackName}-load:live`), so a client follows a
/// deployment's gradual shift instead of running `$LATEST` at once. `?qualifier=` picks
/// another alias or version (`$LATEST` for the unqualified function); an operation mapped
/// explicitly is invoked exactly as named.
///
/// ```
/// use parqdb_catalog::lambda::Operation;
/// use parqdb_catalog::remote::FunctionNames;
///
/// let names = FunctionNames::with_prefix("parqdb-prod-").set(Operation::Load, "reader:v2");
/// assert_eq!(names.get(Operation::Commit), "parqdb-prod-commit:live");
/// assert_eq!(names.get(Operation::Load), "reader:v2");
///
/// let names = FunctionNames::from_uri("lambda://parqdb-prod-?qualifier=$LATEST&load=reader")?;
/// assert_eq!(names.get(Operation::Load), "reader");
/// assert_eq!(names.get(Operation::Namespace), "parqdb-prod-namespace:$LATEST");
/// # Ok::<(), parqdb_catalog::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FunctionNames {
    names: [String; Operation::ALL.len()],
}

impl FunctionNames {
    /// `PREFIX` + the operation name + `:live` for every operation
    /// (`parqdb-prod-` → `parqdb-prod-load:live`, `parqdb-prod-commit:live`, ...). The
    /// prefix may be a partial ARN.
    pub fn with_prefix(prefix: &str) -> FunctionNames {
        FunctionNames::with_prefix_and_qualifier(prefix, DEFAULT_QUALIFIER)
    }

    /// `PREFIX` + the operation name + `:QUALIFIER` (an alias, a version, or `$LATEST`).
    pub fn with_prefix_and_qualifier(prefix: &str, qualifier: &str) -> FunctionNames {
        FunctionNames {
            names: Operation::ALL
                .map(|operation| format!("{prefix}{}:{qualifier}", operation.name())),
        }
    }

    /// Parse `lambda://PREFIX` with optional query pairs: `qualifier=ALIAS` for the
    /// prefix's names (default `live`; an alias, a version or `$LATEST`),
    /// and explicit names, used as written:
    /// `lambda://parqdb-prod-?qualifier=canary&commit=my-commit:live`. Anything else is
    /// [`ErrorKind::Configuration`].
    pub fn from_uri(uri: &str) -> Result<FunctionNames> {
        let invalid = |reason: String| {
            Error::new(
                ErrorKind::Configuration,
                format!(
                    "catalog URI `{uri}` {reason}; expected lambda://PREFIX[?qualifier=ALIAS][&OPERATION=NAME...]"
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
        let mut pairs = Vec::new();
        for pair in query.into_iter().flat_map(|query| query.split('&')) {
            pairs.push(pair.split_once('=').ok_or_else(|| {
                invalid(format!(
                    "has the query part `{pair}`, not qualifier=ALIAS or OPERATION=NAME"
                ))
            })?);
        }
        let mut qualifier = DEFAULT_QUALIFIER;
        for (_, value) in pairs.iter().filter(|(key, _)| *key == QUALIFIER_KEY) {
            if !is_qualifier(value) {
                return Err(invalid(format!(
                    "has the invalid qualifier `{value}` (an alias, a version or $LATEST)"
                )));
            }
            qualifier = value;
        }
        let mut names = FunctionNames::with_prefix_and_qualifier(prefix, qualifier);
        for (key, value) in pairs.into_iter().filter(|(key, _)| *key != QUALIFIER_KEY) {
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

/// The query key of the qualifier in a `lambda://` URI.
const QUALIFIER_KEY: &str = "qualifier";

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | ':' | '.')
}

/// An alias (`live`), a version (`42`) or `$LATEST`, as Lambda spells qualifiers.
fn is_qualifier(value: &str) -> bool {
    value == "$LATEST"
        || (!value.is_empty()
            && value
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_')))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_name_every_operation_through_the_templates_alias() {
        let names = FunctionNames::from_uri("lambda://parqdb-prod-").expect("valid");
        for operation in Operation::ALL {
            assert_eq!(
                names.get(operation),
                format!("parqdb-prod-{operation}:live")
            );
        }
        assert_eq!(names, FunctionNames::with_prefix("parqdb-prod-"));
        let arn = "lambda://arn:aws:lambda:us-east-1:123456789012:function:stack-";
        let names = FunctionNames::from_uri(arn).expect("valid");
        assert_eq!(
            names.get(Operation::Commit),
            "arn:aws:lambda:us-east-1:123456789012:function:stack-commit:live"
        );
    }

    #[test]
    fn the_qualifier_can_be_overridden_for_the_prefixs_names() {
        for (qualifier, expected) in [
            ("canary", "p-load:canary"),
            ("42", "p-load:42"),
            ("$LATEST", "p-load:$LATEST"),
        ] {
            let names = FunctionNames::from_uri(&format!("lambda://p-?qualifier={qualifier}"))
                .expect("valid");
            assert_eq!(names.get(Operation::Load), expected);
            assert_eq!(
                names,
                FunctionNames::with_prefix_and_qualifier("p-", qualifier)
            );
        }
    }

    #[test]
    fn queries_map_operations_explicitly_and_as_written() {
        let names = FunctionNames::from_uri("lambda://p-?commit=c1&rename=r:$LATEST&qualifier=v2")
            .expect("valid");
        assert_eq!(names.get(Operation::Commit), "c1");
        assert_eq!(names.get(Operation::Rename), "r:$LATEST");
        assert_eq!(names.get(Operation::Load), "p-load:v2");
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
            "lambda://p?qualifier=",
            "lambda://p?qualifier=a:b",
            "lambda://p?qualifier=$latest",
            "lambda://p?qualifier",
        ] {
            let err = FunctionNames::from_uri(uri).expect_err(uri);
            assert_eq!(err.kind(), ErrorKind::Configuration, "{uri}");
            assert!(err.message().contains(uri), "{err}");
        }
    }
}
