//! How exactly a marker binds a pointer store: the store locations this release writes,
//! and the shorter ones earlier releases wrote.
//!
//! A location is the store's name, then the attributes that tell one instance of that
//! name from another (`?key=value&…`, in a fixed order per kind of store):
//!
//! | store | name | instance attributes |
//! |---|---|---|
//! | DynamoDB table | `dynamodb://TABLE` | `region`, `account`, `created` (the table's creation time) |
//! | local directory | `file:///canonical/path` | `inode`, and `born` (its birth time, in ns) where the file system keeps one |
//! | S3 bucket | `s3://bucket/prefix` | `endpoint` of a server other than AWS's, or AWS's `partition` |
//!
//! A marker holding such a location has `marker-version` 2 (a DynamoDB table) or 3 (a
//! directory or a bucket; [`marker_version`]); markers of earlier releases hold the name
//! alone (and, for a DynamoDB table, its name and region).
//! [`binds_less`] recognises exactly those shapes, and no other.

/// The attributes of one kind of store, in the order its location gives them; each
/// entry is one shape its location may take.
fn shapes(name: &str) -> &'static [&'static [&'static str]] {
    if name.starts_with("dynamodb://") {
        &[&["region", "account", "created"]]
    } else if name.starts_with("file://") {
        &[&["inode", "born"], &["inode"]]
    } else if name.starts_with("s3://") {
        &[&["endpoint"], &["partition"]]
    } else {
        &[]
    }
}

/// A location split into its name and its instance attributes, if it has a shape this
/// release writes (the attributes last: a path or a prefix may hold a `?` itself).
fn split(location: &str) -> Option<(&str, Vec<(&str, &str)>)> {
    let (name, query) = location.rsplit_once('?')?;
    let attributes: Vec<(&str, &str)> = if name.starts_with("s3://") {
        // An endpoint URL may hold `&` and `=`: it is the one attribute, and the rest.
        let (key, value) = query.split_once('=')?;
        vec![(
            ["endpoint", "partition"].into_iter().find(|k| *k == key)?,
            value,
        )]
    } else {
        query
            .split('&')
            .map(|pair| pair.split_once('='))
            .collect::<Option<_>>()?
    };
    let keys: Vec<&str> = attributes.iter().map(|(key, _)| *key).collect();
    let known = shapes(name).contains(&keys.as_slice());
    let valued = attributes.iter().all(|(_, value)| !value.is_empty());
    (known && valued).then_some((name, attributes))
}

/// A location in comparable form: a `file://` path resolved (a marker of an earlier
/// release may name it through a link), its instance attributes kept.
pub(super) fn normalized(location: &str) -> String {
    let Some(path) = location.strip_prefix("file://") else {
        return location.to_owned();
    };
    let (path, query) = match split(location) {
        Some(_) => match path.rsplit_once('?') {
            Some((path, query)) => (path, Some(query)),
            None => (path, None),
        },
        None => (path, None),
    };
    let resolved = crate::warehouse::resolve_existing(std::path::Path::new(path));
    match query {
        Some(query) => format!("file://{}?{query}", resolved.display()),
        None => format!("file://{}", resolved.display()),
    }
}

/// The version of a marker binding the store at `location`: where this release binds the
/// store as one instance (see the module docs), one that no release binding it less can
/// read, so none of them can take the marker for its own and rewrite it looser with
/// `init --adopt`, nor collect under it (GC round 105, F2: a round-103 collector in a
/// copy's account deleted the owner's live data): 2 for a DynamoDB table (rounds 104–108
/// bind it as this release does, and read 2), 3 for a directory or a bucket (rounds
/// 104–108 read 2 and bind them by name alone: GC round 109, F3). 1 for a location with
/// no instance attributes (a process-local store), which every release reads.
pub(super) fn marker_version(location: &str) -> i32 {
    match split(location) {
        Some((name, _)) if name.starts_with("dynamodb://") => 2,
        Some(_) => 3,
        None => 1,
    }
}

/// The attributes of the store at `here` that a marker of an earlier release leaves
/// out, if it is one: the store's name alone (a DynamoDB table before GC round 102; a
/// local directory or an S3-compatible bucket before round 109), or a DynamoDB table and
/// its region (rounds 102–103). No other shape is honoured. Such a marker is honoured (a
/// release must not refuse its own warehouses), with a warning, until `init --adopt`
/// rebinds it — unless the catalog has bound the warehouse exactly before.
pub(super) fn binds_less<'a>(marker: &str, here: &'a str) -> Option<Vec<&'a str>> {
    let (name, attributes) = split(here)?;
    let keys = |skip: usize| -> Vec<&'a str> {
        attributes.iter().skip(skip).map(|(key, _)| *key).collect()
    };
    let missing = if marker == name {
        keys(0)
    } else if name.starts_with("dynamodb://") {
        let region = marker.strip_prefix(name)?.strip_prefix("?region=")?;
        if attributes.first() != Some(&("region", region)) {
            return None;
        }
        keys(1)
    } else {
        return None;
    };
    (!missing.is_empty()).then_some(missing)
}

/// The warning for a marker of an earlier release (`marker`) that names the store now at
/// `here` with fewer of its attributes, if it is one: what else would pass for the store,
/// and the way out.
pub(super) fn loose_binding_at(marker: &str, here: &str) -> Option<String> {
    let missing = binds_less(marker, here)?;
    let words: Vec<&str> = missing
        .iter()
        .map(|attribute| match *attribute {
            "created" | "born" => "creation time",
            "inode" => "inode",
            other => other,
        })
        .collect();
    let missing = match words.split_last() {
        Some((last, [])) => (*last).to_owned(),
        Some((last, rest)) => format!("{} and {last}", rest.join(", ")),
        None => return None,
    };
    Some(format!(
        "the ownership marker binds the warehouse to `{marker}` without its {missing}, so {} would pass for this catalog's store `{here}`; run `parqdb-catalog init --adopt` with the owner's store — the one whose pointers are current, never a copy — to bind it (adopting restarts every retention clock)",
        copies(here)
    ))
}

/// What would pass for the store at `here` under a marker naming it alone.
pub(super) fn copies(here: &str) -> &'static str {
    if here.starts_with("dynamodb://") {
        "a same-named table elsewhere (a backup restored in another region or account, a replica, a table deleted and restored under this name)"
    } else if here.starts_with("file://") {
        "a copy of the store's directory at the same path (a backup restored there, or a copy on another host that shares the warehouse)"
    } else {
        "a same-named bucket on another S3-compatible server or in another AWS partition (a replica site, a copy)"
    }
}

#[cfg(test)]
mod tests {
    use super::{binds_less, marker_version, normalized};

    const HERE: &str = "dynamodb://t?region=us-east-1&account=111122223333&created=1750000000123";
    const DIR: &str = "file:///srv/catalog?inode=1234&born=1750000000123456789";
    const BUCKET: &str = "s3://b/p?endpoint=http://minio.internal:9000";

    #[test]
    fn a_marker_binding_a_table_less_exactly_names_it_with_every_attribute_it_gives() {
        assert_eq!(
            binds_less("dynamodb://t", HERE),
            Some(vec!["region", "account", "created"]),
            "the table alone (before round 102)"
        );
        assert_eq!(
            binds_less("dynamodb://t?region=us-east-1", HERE),
            Some(vec!["account", "created"]),
            "the table and its region (rounds 102 and 103)"
        );
    }

    #[test]
    fn a_marker_naming_a_directory_or_a_bucket_alone_binds_it_less_exactly() {
        assert_eq!(
            binds_less("file:///srv/catalog", DIR),
            Some(vec!["inode", "born"])
        );
        assert_eq!(
            binds_less("file:///srv/catalog", "file:///srv/catalog?inode=7"),
            Some(vec!["inode"]),
            "a file system that keeps no birth times"
        );
        assert_eq!(binds_less("s3://b/p", BUCKET), Some(vec!["endpoint"]));
        assert_eq!(
            binds_less("s3://b/p", "s3://b/p?partition=aws"),
            Some(vec!["partition"])
        );
        let odd = "file:///srv/a?b?inode=5&born=6";
        assert_eq!(
            binds_less("file:///srv/a?b", odd),
            Some(vec!["inode", "born"]),
            "a path holding `?`"
        );
    }

    #[test]
    fn a_marker_naming_another_store_or_instance_is_not_loose_but_wrong() {
        for marker in [
            "dynamodb://t2",
            "dynamodb://t2?region=us-east-1",
            "dynamodb://t?region=us-west-2",
            "dynamodb://t?region=us-east-1&account=444455556666",
            "dynamodb://t?region=us-east-1&account=111122223333&created=1",
            "dynamodb://t?account=444455556666",
            "dynamodb://t?region",
            "dynamodb://t?",
            "dynamodb://t?region=us-east-1&region=us-east-1",
            "dynamodb://t?region=us-east-1&account=111122223333",
            "dynamodb://t?account=111122223333&region=us-east-1",
        ] {
            assert_eq!(binds_less(marker, HERE), None, "{marker}");
        }
        for marker in [
            "file:///srv/other",
            "file:///srv/catalog?inode=1234",
            "file:///srv/catalog?inode=99&born=1750000000123456789",
            "file:///srv/catalog?born=1750000000123456789",
            "file:///srv/catalog/",
        ] {
            assert_eq!(binds_less(marker, DIR), None, "{marker}");
        }
        for marker in [
            "s3://b",
            "s3://b/p?endpoint=http://other:9000",
            "s3://b/q",
            "s3://b/p?partition=aws",
        ] {
            assert_eq!(binds_less(marker, BUCKET), None, "{marker}");
        }
        assert_eq!(
            binds_less(
                "s3://b/p?endpoint=http://minio.internal:9000",
                "s3://b/p?partition=aws"
            ),
            None,
            "a replica's marker does not bind the bucket on AWS, nor the other way round"
        );
        assert_eq!(binds_less(HERE, HERE), None, "exact: not loose");
        assert_eq!(binds_less(DIR, DIR), None, "exact: not loose");
        assert_eq!(
            binds_less(
                "dynamodb://t?region=us-east-1",
                "dynamodb://t?region=us-east-1"
            ),
            None,
            "as loose as the other: not less"
        );
        assert_eq!(binds_less("s3://b/p", "s3://b/p?region=x"), None);
        assert_eq!(
            binds_less("s3://b/p", "s3://b/p"),
            None,
            "no instance: not loose"
        );
        assert_eq!(binds_less("s3://b/p", "s3://b/p?region=us-east-1"), None);
        assert_eq!(
            binds_less("file:///srv/x", "file:///srv/x?inode=&born=1"),
            None,
            "an attribute without a value is no shape of ours"
        );
    }

    #[test]
    fn only_a_location_naming_an_instance_makes_a_marker_earlier_releases_cannot_read() {
        assert_eq!(marker_version(HERE), 2);
        assert_eq!(marker_version(DIR), 3);
        assert_eq!(marker_version(BUCKET), 3);
        assert_eq!(marker_version("s3://b/p?partition=aws"), 3);
        for earlier in [
            "dynamodb://t",
            "dynamodb://t?region=us-east-1",
            "file:///srv/catalog",
            "s3://b/p",
            "memory",
        ] {
            assert_eq!(marker_version(earlier), 1, "{earlier}");
        }
    }

    #[test]
    fn a_directorys_location_resolves_its_path_and_keeps_its_attributes() {
        let dir = std::env::temp_dir().canonicalize().expect("temp dir");
        let linked = format!("file://{}/./?inode=1&born=2", dir.display());
        let resolved = normalized(&linked);
        assert!(
            resolved.ends_with("?inode=1&born=2"),
            "{linked} -> {resolved}"
        );
        assert!(!resolved.contains("/./"), "{resolved}");
        assert_eq!(normalized(BUCKET), BUCKET);
        assert_eq!(normalized(HERE), HERE);
    }
}
