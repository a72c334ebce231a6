//! The warehouse-relative location rule shared by providers, families, the catalog and
//! the garbage collector.

/// Check that `location` is a warehouse-relative object location or directory prefix.
///
/// A valid location is non-empty, has no URI scheme (no `://` and no `:` in its first
/// segment), does not start with `/`, contains no backslash and no control character,
/// and has no empty, `.` or `..` segment; a single trailing `/` (a directory prefix) is
/// allowed. Because locations are joined verbatim both into URIs and into object keys,
/// the URI-significant characters `%`, `?` and `#` are rejected too (so `%2e%2e` cannot
/// become `..` and no part becomes a query or fragment). The error message describes the
/// violation and quotes the location.
///
/// ```
/// use parqdb_catalog::family::validate_relative_location;
///
/// assert!(validate_relative_location("indexes/abc/701/ivf_postings/").is_ok());
/// assert!(validate_relative_location("metadata/v1.metadata.json").is_ok());
/// assert!(validate_relative_location("s3://bucket/x").is_err());
/// assert!(validate_relative_location("a/../b").is_err());
/// ```
pub fn validate_relative_location(location: &str) -> Result<(), String> {
    let reject = |why: &str| Err(format!("location {location:?} {why}"));
    if location.is_empty() {
        return reject("must not be empty");
    }
    if location.chars().any(char::is_control) {
        return reject("must not contain control characters");
    }
    if location.contains('\\') {
        return reject("must not contain a backslash");
    }
    if let Some(c) = location.chars().find(|c| matches!(c, '%' | '?' | '#')) {
        return reject(&format!(
            "must not contain {c:?} (percent-encoding, query or fragment)"
        ));
    }
    if location.starts_with('/') {
        return reject("must be relative to the warehouse (no leading '/')");
    }
    let first_segment = location.split('/').next().unwrap_or_default();
    if location.contains("://") || first_segment.contains(':') {
        return reject("must be relative to the warehouse (no URI scheme)");
    }
    let path = location.strip_suffix('/').unwrap_or(location);
    for segment in path.split('/') {
        match segment {
            "" => return reject("must not contain an empty segment"),
            "." | ".." => return reject("must not contain '.' or '..' segments"),
            _ => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::validate_relative_location;

    #[test]
    fn accepts_relative_objects_and_prefixes() {
        for ok in [
            "a",
            "a/",
            "indexes/2f1c/701/ivf_postings/",
            "metadata/fe98/v1.metadata.json",
            "a/b:c",
            "a/.hidden/..x",
            "unicode/é/ß",
        ] {
            assert_eq!(validate_relative_location(ok), Ok(()), "{ok}");
        }
    }

    #[test]
    fn rejects_every_rule() {
        let cases = [
            ("", "empty"),
            ("/abs/path", "leading '/'"),
            ("s3://bucket/a", "scheme"),
            ("file:relative", "scheme"),
            ("c:/windows", "scheme"),
            ("a/b://c", "scheme"),
            ("a//b", "empty segment"),
            ("a//", "empty segment"),
            ("a/./b", "'.'"),
            ("a/../b", "'..'"),
            ("..", "'..'"),
            ("./a", "'.'"),
            ("a\\b", "backslash"),
            ("a\nb", "control"),
            ("a\u{7f}b", "control"),
            ("a\u{85}b", "control"),
            ("a/%2e%2e/b", "'%'"),
            ("a/b%20c", "'%'"),
            ("a/b.json?x=1", "'?'"),
            ("a/b#frag", "'#'"),
        ];
        for (location, why) in cases {
            let err = validate_relative_location(location).expect_err(location);
            assert!(err.contains(why), "{location:?}: {err}");
        }
    }
}
