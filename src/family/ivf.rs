//! The built-in `ivf` index family.

use std::collections::BTreeMap;

use super::{IndexFamily, validate_relative_location};

/// The parameter naming the warehouse-relative centroids metadata file.
pub(crate) const CENTROIDS_METADATA_LOCATION: &str = "ivf_centroids_metadata_location";

/// The `ivf` (inverted file) family, as [`FamilyRegistry::builtin`](super::FamilyRegistry::builtin)
/// describes it.
#[derive(Debug, Default, Clone, Copy)]
#[doc(hidden)] // Built in (`FamilyRegistry::builtin`); named by the conformance tests.
pub struct IvfFamily;

impl IndexFamily for IvfFamily {
    fn name(&self) -> &str {
        "ivf"
    }

    fn schema_versions(&self) -> &[i32] {
        &[1]
    }

    fn roles(&self) -> &[&str] {
        &["ivf_centroids", "ivf_postings"]
    }

    fn metrics(&self) -> &[&str] {
        &["l2_squared", "cosine", "inner_product"]
    }

    fn validate_parameters(&self, parameters: &BTreeMap<String, String>) -> Result<(), String> {
        match parameters.get(CENTROIDS_METADATA_LOCATION) {
            Some(location) => {
                validate_relative_location(location)
                    .map_err(|err| format!("{CENTROIDS_METADATA_LOCATION}: {err}"))?;
                if location.starts_with("metadata/") && location.len() > "metadata/".len() {
                    Ok(())
                } else {
                    Err(format!(
                        "{CENTROIDS_METADATA_LOCATION}: location {location:?} must be under `metadata/`, where metadata files live"
                    ))
                }
            }
            None => Ok(()),
        }
    }

    fn warehouse_references<'a>(&self, parameters: &'a BTreeMap<String, String>) -> Vec<&'a str> {
        parameters
            .get(CENTROIDS_METADATA_LOCATION)
            .map(String::as_str)
            .into_iter()
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(location: Option<&str>) -> BTreeMap<String, String> {
        let mut map = BTreeMap::from([("nlist".to_owned(), "4096".to_owned())]);
        if let Some(location) = location {
            map.insert(CENTROIDS_METADATA_LOCATION.to_owned(), location.to_owned());
        }
        map
    }

    #[test]
    fn centroids_location_is_validated_and_referenced() {
        let family = IvfFamily;
        let ok = params(Some("metadata/c/v1.metadata.json"));
        assert_eq!(family.validate_parameters(&ok), Ok(()));
        assert_eq!(
            family.warehouse_references(&ok),
            ["metadata/c/v1.metadata.json"]
        );

        let none = params(None);
        assert_eq!(family.validate_parameters(&none), Ok(()));
        assert!(family.warehouse_references(&none).is_empty());

        let bad = params(Some("s3://elsewhere/c.json"));
        let err = family.validate_parameters(&bad).expect_err("absolute");
        assert!(err.starts_with(CENTROIDS_METADATA_LOCATION), "{err}");

        for outside in [
            "indexes/c/v1.metadata.json",
            "c.json",
            "metadata/",
            "metadata",
        ] {
            let err = family
                .validate_parameters(&params(Some(outside)))
                .expect_err(outside);
            assert!(err.contains("metadata/"), "{err}");
        }
    }
}
