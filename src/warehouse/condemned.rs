//! What the collector's ledger records as condemned, for publication: register and
//! commit refuse to publish an object the collector condemned (see
//! `catalog::publication`). The names and the files' formats are the layout's
//! (`warehouse::layout`: `c-` facts and condemnation markers); this module reads them.

use futures::StreamExt;

use super::Warehouse;
use super::layout::{
    Fact, LEDGER_DIR, MarkerBody, condemnation_visible, ledger_entry, parse_fact, parse_marker,
};
use crate::error::Result;

/// The largest marker body read (a page of at most 10,000 names of at most 1,024 bytes).
const MAX_MARKER_BYTES: u64 = 16 << 20;

impl Warehouse {
    /// The latest condemnation of the object `name` its ledger entry records, if any:
    /// register and commit refuse to publish a condemned object (see
    /// `catalog::publication`).
    pub(crate) async fn condemnation(&self, name: &str) -> Result<Option<i64>> {
        let files = self.list_files(&ledger_entry(name)).await?;
        Ok(files
            .iter()
            .filter_map(|file| {
                let last = file.name.rsplit('/').next().unwrap_or(&file.name);
                match parse_fact(last)? {
                    (Fact::Condemned(ms), _) => {
                        Some(condemnation_visible(ms, file.last_modified_ms))
                    }
                    _ => None,
                }
            })
            .max())
    }

    /// A condemnation of any object at or below the name `name`, or below another
    /// spelling of it (see `warehouse::names::aliases`), if the ledger records one:
    /// register and commit refuse to publish an index table or family reference under
    /// which the collector has condemned something (see `catalog::publication`). For each
    /// spelling, two listings at once: the ledger below the name (a `c-` file, or a
    /// marker, which names objects of its directory: at or below the name), stopping at
    /// the first condemnation, and the markers of the name's directory, whose bodies
    /// (read only where there is one) say whether the name itself is condemned. Two
    /// requests for a table the collector never tracked.
    pub(crate) async fn condemned_within(&self, name: &str) -> Result<Option<(String, i64)>> {
        let spellings = std::iter::once(name.to_owned()).chain(super::names::aliases(name));
        for spelling in spellings {
            let (below, itself) = futures::try_join!(
                self.condemned_below(&spelling),
                self.condemned_by_marker(&spelling)
            )?;
            if let Some(found) = below.or(itself) {
                return Ok(Some(found));
            }
        }
        Ok(None)
    }

    /// The first condemnation the ledger records at or below `name` (a `c-` file of an
    /// object there, or a marker of a directory there).
    async fn condemned_below(&self, name: &str) -> Result<Option<(String, i64)>> {
        let mut facts = self.list(&ledger_entry(name));
        while let Some(item) = facts.next().await {
            let super::ListItem::Object(file) = item? else {
                continue;
            };
            let Some((dir, last)) = file.name.rsplit_once('/') else {
                continue;
            };
            let object = dir.strip_prefix(LEDGER_DIR).unwrap_or(dir);
            let object = object.strip_prefix('/').unwrap_or(object).to_owned();
            if let Some((Fact::Condemned(ms), _)) = parse_fact(last) {
                return Ok(Some((
                    object,
                    condemnation_visible(ms, file.last_modified_ms),
                )));
            }
            if let Some((ms, _)) = parse_marker(last) {
                // The marker's directory is at or below `name`: so is everything it names.
                let first = match self.marker_names(&file.name).await? {
                    Some(names) => names.into_iter().next(),
                    None => None,
                };
                let object = match first {
                    Some(base) => format!("{object}/{base}"),
                    None => object,
                };
                return Ok(Some((
                    object,
                    condemnation_visible(ms, file.last_modified_ms),
                )));
            }
        }
        Ok(None)
    }

    /// The latest condemnation of the object `name` itself by a marker of its directory.
    async fn condemned_by_marker(&self, name: &str) -> Result<Option<(String, i64)>> {
        let (dir, base) = match name.rsplit_once('/') {
            Some((dir, base)) => (ledger_entry(dir), base),
            None => (LEDGER_DIR.to_owned(), name),
        };
        // Every marker of the directory, and nothing that sorts outside `n-`…`n.`.
        let range = super::ListRange::new(&dir, Some("n-".to_owned()), Some("n.".to_owned()));
        let mut listed = self.list_range(&range, None);
        let mut latest: Option<i64> = None;
        while let Some(item) = listed.next().await {
            let super::ListItem::Object(file) = item?.item else {
                continue;
            };
            let Some((parent, last)) = file.name.rsplit_once('/') else {
                continue;
            };
            let Some((ms, _)) = parse_marker(last).filter(|_| parent == dir) else {
                continue;
            };
            let names = self.marker_names(&file.name).await?;
            if names.is_none_or(|names| names.iter().any(|listed| listed == base)) {
                let visible = condemnation_visible(ms, file.last_modified_ms);
                latest = Some(latest.map_or(visible, |l| l.max(visible)));
            }
        }
        Ok(latest.map(|ms| (name.to_owned(), ms)))
    }

    /// The names a marker condemns; `None` if its body cannot be read as one (then it
    /// condemns every name of its directory). A marker gone since it was listed
    /// condemns nothing more (its condemnations were released).
    pub(crate) async fn marker_names(&self, marker: &str) -> Result<Option<Vec<String>>> {
        match self.get(marker, MAX_MARKER_BYTES).await? {
            super::objects::Fetched::Object(bytes, _) => {
                Ok(serde_json::from_slice::<MarkerBody>(&bytes)
                    .ok()
                    .map(|body| body.names))
            }
            super::objects::Fetched::Missing => Ok(Some(Vec::new())),
            super::objects::Fetched::TooLarge(_) => Ok(None),
        }
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;

    const RUN: &str = "1700000000000-0123456789abcdef0123456789abcdef";

    /// Put a marker of `dir` condemning `body`'s names at 5.
    async fn put_marker(warehouse: &Warehouse, dir: &str, page: u64, body: &str) {
        let name = format!("{}/n-5-{RUN}-{page}.json", ledger_entry(dir));
        assert!(
            warehouse
                .put_if_absent(&name, Bytes::from(body.to_owned()))
                .await
                .expect("put")
        );
    }

    /// Publication finds a condemnation a marker records: of anything below a table (any
    /// marker there), and of a file itself (a marker of its directory naming it), but not
    /// of a file beside one the marker names; a marker it cannot read condemns every
    /// name of its directory. On both kinds of store, whose listings order differently.
    #[tokio::test]
    async fn publication_finds_what_markers_condemn() {
        let dir = tempfile::tempdir().expect("dir");
        for warehouse in [
            Warehouse::in_memory("memory://markers/wh").expect("memory"),
            Warehouse::local(dir.path()).expect("local"),
        ] {
            let postings = "indexes/a/1/ivf_postings";
            put_marker(
                &warehouse,
                postings,
                3,
                r#"{"names": ["part-0", "part-2"]}"#,
            )
            .await;
            // Siblings of the markers that sort near them.
            for sibling in ["n-1", "n.x", "m"] {
                let entry = format!("{}/{sibling}/o-1-1-{RUN}.json", ledger_entry("indexes/b"));
                warehouse
                    .put_if_absent(&entry, Bytes::from_static(b"{}"))
                    .await
                    .expect("put");
            }
            let condemned = |name: &'static str| {
                let warehouse = warehouse.clone();
                async move { warehouse.condemned_within(name).await.expect("checked") }
            };
            // The table, and every directory above its condemned files.
            for table in ["indexes/a/1/ivf_postings", "indexes/a/1", "indexes/a"] {
                let (object, _) = condemned(table).await.expect(table);
                assert_eq!(object, "indexes/a/1/ivf_postings/part-0", "{table}");
            }
            // The files themselves, as family references name files.
            let (object, ms) = condemned("indexes/a/1/ivf_postings/part-2")
                .await
                .expect("part-2");
            assert_eq!(object, "indexes/a/1/ivf_postings/part-2");
            assert!(ms >= 5);
            // Not a file beside them, nor another table.
            assert_eq!(condemned("indexes/a/1/ivf_postings/part-1").await, None);
            assert_eq!(condemned("indexes/a/2").await, None);
            assert_eq!(condemned("indexes/b/n-1").await, None);
            // A damaged marker condemns every name of its directory.
            put_marker(&warehouse, "indexes/c", 1, "not json").await;
            assert!(condemned("indexes/c/anything").await.is_some());
            assert!(condemned("indexes/c").await.is_some());
            assert_eq!(condemned("indexes/cc").await, None);
        }
    }
}
