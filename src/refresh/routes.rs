//! Which index a source change refreshes.

use crate::error::{Error, ErrorKind, Result};
use crate::identifier::IndexIdentifier;

use super::SourceChange;

/// A mapping from source-table locations (`s3://<bucket>/<prefix>/`) to the index built
/// from each table. A change belongs to the route with the longest prefix that contains
/// its object (on a `/` boundary); a change no route contains is reported as unrouted.
///
/// ```
/// use parqdb_catalog::refresh::{Routes, SourceChange};
/// use parqdb_catalog::{IndexIdentifier, Namespace};
///
/// let docs = IndexIdentifier::new(Namespace::new(["search"])?, "docs")?;
/// let routes = Routes::new().route("s3://lake/docs/", docs.clone())?;
/// let change = SourceChange::new("lake", "docs/part-00042.parquet", "0061F0A2", 0)?;
/// let route = routes.find(&change).expect("routed");
/// assert_eq!(route.index(), &docs);
/// assert_eq!(route.table_location(&change), "s3://lake/docs/");
/// assert!(routes.find(&SourceChange::new("lake", "docs2/x.parquet", "01", 0)?).is_none());
/// # Ok::<(), parqdb_catalog::Error>(())
/// ```
#[derive(Debug, Clone, Default)]
pub struct Routes {
    routes: Vec<Route>,
    /// The index of changes no prefix route contains, if any.
    fallback: Option<IndexIdentifier>,
}

/// One route: a source-table location and its index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    /// `s3://<bucket>/<prefix>/`, or empty for the fallback route.
    prefix: String,
    index: IndexIdentifier,
}

impl Route {
    /// The index this route refreshes.
    pub fn index(&self) -> &IndexIdentifier {
        &self.index
    }

    /// The source table's location for `change`: the route's prefix, or for the fallback
    /// route the directory of the changed object.
    pub fn table_location(&self, change: &SourceChange) -> String {
        if !self.prefix.is_empty() {
            return self.prefix.clone();
        }
        match change.key.rsplit_once('/') {
            Some((directory, _)) => format!("s3://{}/{directory}/", change.bucket),
            None => format!("s3://{}/", change.bucket),
        }
    }
}

impl Routes {
    /// No routes.
    pub fn new() -> Routes {
        Routes::default()
    }

    /// Refresh `index` from the source table at `location` (`s3://<bucket>/<prefix>/`; a
    /// missing trailing `/` is added). `INVALID_REQUEST` for another scheme, an empty
    /// bucket, or a location routed twice.
    pub fn route(mut self, location: &str, index: IndexIdentifier) -> Result<Routes> {
        let invalid = |why: String| Error::new(ErrorKind::InvalidRequest, why);
        let rest = location.strip_prefix("s3://").ok_or_else(|| {
            invalid(format!(
                "route `{location}`: a source table location is s3://<bucket>/<prefix>/"
            ))
        })?;
        let bucket = rest.split('/').next().unwrap_or_default();
        if bucket.is_empty() {
            return Err(invalid(format!("route `{location}`: no bucket")));
        }
        let prefix = if location.ends_with('/') {
            location.to_owned()
        } else {
            format!("{location}/")
        };
        if self.routes.iter().any(|route| route.prefix == prefix) {
            return Err(invalid(format!("route `{prefix}` is given twice")));
        }
        self.routes.push(Route { prefix, index });
        Ok(self)
    }

    /// Refresh `index` from every change no other route contains, taking the changed
    /// object's directory as the source table (the single-index example job).
    pub fn fallback(mut self, index: IndexIdentifier) -> Routes {
        self.fallback = Some(index);
        self
    }

    /// Routes from a JSON document, as the `refresh` function reads them from
    /// `PARQDB_REFRESH_ROUTES`: an array of `{"source": "s3://<bucket>/<prefix>/",
    /// "index": {"namespace": [...], "name": "..."}}`. Strict: `INVALID_CONFIGURATION` for
    /// anything else (unknown or duplicate fields, an invalid identifier or location, a
    /// location routed twice, no route at all), naming the JSON path.
    ///
    /// ```
    /// use parqdb_catalog::refresh::{Routes, SourceChange};
    ///
    /// let routes = Routes::from_json(
    ///     r#"[{"source": "s3://lake/docs/", "index": {"namespace": ["search"], "name": "docs"}}]"#,
    /// )?;
    /// let change = SourceChange::new("lake", "docs/part-1.parquet", "0A", 0)?;
    /// assert_eq!(routes.find(&change).expect("routed").index().name(), "docs");
    /// assert_eq!(Routes::from_json("[]").unwrap_err().code(), "INVALID_CONFIGURATION");
    /// # Ok::<(), parqdb_catalog::Error>(())
    /// ```
    pub fn from_json(text: &str) -> Result<Routes> {
        #[derive(serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Wire {
            source: String,
            index: IndexIdentifier,
        }
        let configuration = |why: String| Error::new(ErrorKind::Configuration, why);
        let mut deserializer = serde_json::Deserializer::from_str(text);
        let wires: Vec<Wire> =
            serde_path_to_error::deserialize(&mut deserializer).map_err(|err| {
                configuration(format!(
                    "refresh routes: at `{}`: {}",
                    err.path(),
                    err.inner()
                ))
            })?;
        deserializer
            .end()
            .map_err(|err| configuration(format!("refresh routes: {err}")))?;
        if wires.is_empty() {
            return Err(configuration(
                "refresh routes: no route; give at least one {\"source\", \"index\"}".into(),
            ));
        }
        wires
            .into_iter()
            .enumerate()
            .try_fold(Routes::new(), |routes, (n, wire)| {
                routes.route(&wire.source, wire.index).map_err(|err| {
                    configuration(format!("refresh routes: at `[{n}]`: {}", err.message()))
                })
            })
    }

    /// The route of `change`: the longest containing prefix, else the fallback.
    pub fn find(&self, change: &SourceChange) -> Option<Route> {
        let uri = change.uri();
        self.routes
            .iter()
            .filter(|route| uri.starts_with(&route.prefix))
            .max_by_key(|route| route.prefix.len())
            .cloned()
            .or_else(|| {
                self.fallback.clone().map(|index| Route {
                    prefix: String::new(),
                    index,
                })
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::identifier::Namespace;

    fn id(name: &str) -> IndexIdentifier {
        IndexIdentifier::new(Namespace::new(["n"]).expect("ns"), name).expect("id")
    }

    #[test]
    fn the_longest_prefix_wins_on_a_segment_boundary() {
        let routes = Routes::new()
            .route("s3://b/t", id("outer"))
            .expect("route")
            .route("s3://b/t/inner/", id("inner"))
            .expect("route");
        let change = |key: &str| SourceChange::new("b", key, "1", 0).expect("change");
        assert_eq!(
            routes.find(&change("t/inner/x")).map(|r| r.index().clone()),
            Some(id("inner"))
        );
        assert_eq!(
            routes.find(&change("t/x")).map(|r| r.index().clone()),
            Some(id("outer"))
        );
        assert!(routes.find(&change("tt/x")).is_none());
        let routes = routes.fallback(id("any"));
        let route = routes.find(&change("tt/x/y")).expect("fallback");
        assert_eq!(route.index(), &id("any"));
        assert_eq!(route.table_location(&change("tt/x/y")), "s3://b/tt/x/");
        assert!(Routes::new().route("file:///x", id("x")).is_err());
        assert!(
            Routes::new()
                .route("s3://b/t/", id("x"))
                .and_then(|r| r.route("s3://b/t", id("y")))
                .is_err()
        );
    }

    #[test]
    fn route_documents_are_strict() {
        let one = r#"{"source": "s3://b/t/", "index": {"namespace": ["n"], "name": "x"}}"#;
        let routes = Routes::from_json(&format!("[{one}]")).expect("routes");
        let change = SourceChange::new("b", "t/part.parquet", "1", 0).expect("change");
        assert_eq!(
            routes.find(&change).map(|r| r.index().clone()),
            Some(id("x"))
        );
        for (bad, path) in [
            ("[]".to_owned(), ""),
            ("{}".to_owned(), "."),
            (format!("[{one}] trailing"), ""),
            (format!("[{one}, {one}]"), "[1]"),
            (r#"[{"source": "s3://b/t/", "index": {"namespace": ["n"], "name": "x"}, "x": 1}]"#.to_owned(), "[0]"),
            (r#"[{"source": "s3://b/t/", "source": "s3://b/u/", "index": {"namespace": ["n"], "name": "x"}}]"#.to_owned(), "[0]"),
            (r#"[{"source": "s3://b/t/", "index": {"namespace": [], "name": "x"}}]"#.to_owned(), "[0].index"),
            (r#"[{"source": "file:///t/", "index": {"namespace": ["n"], "name": "x"}}]"#.to_owned(), "[0]"),
            (r#"[{"source": 1, "index": {"namespace": ["n"], "name": "x"}}]"#.to_owned(), "[0].source"),
        ] {
            let err = Routes::from_json(&bad).expect_err(&bad);
            assert_eq!(err.code(), "INVALID_CONFIGURATION", "{bad}");
            assert!(err.message().contains(&format!("at `{path}")) || path.is_empty(), "{bad}: {}", err.message());
        }
    }
}
