//! A warehouse is bound to one pointer store *instance*, not to its name: a copy of the
//! store under the same name — a local directory at the owner's path (a backup restored
//! there, a copy on another host sharing the warehouse), a same-named bucket on another
//! S3-compatible server — carries the catalog id, and must neither write into the owner's
//! warehouse nor collect in it (GC round 106, F1: its collector deleted the owner's later
//! index). Markers of earlier releases, which name the store alone, stay the owner's (with
//! a warning in every gc report) until `init --adopt` binds the instance; once bound, a
//! looser marker binds nobody. (DynamoDB tables: `gc::durable_evidence::dynamodb`.)
#![allow(clippy::disallowed_methods)] // tests may read the wall clock and draw random ids (unique names)

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::support::gc::{Backend, Env, HOUR, Layout, copy_dir, test_config};
use parqdb_catalog::Catalog;
use parqdb_catalog::gc::{self, GarbageCollector};
use parqdb_catalog::store::LocalStore;
use parqdb_catalog::store::PointerStore;
use parqdb_catalog::{ErrorKind, SeededIds};

/// A catalog on `store` over `env`'s warehouse (a process of its own: no cached check).
fn catalog_on(env: &Env, store: Arc<dyn PointerStore>, seed: u64) -> Catalog {
    Catalog::builder(store, env.warehouse.clone())
        .clock(env.clock.clone())
        .ids(Arc::new(SeededIds::new(seed)))
        .build()
}

/// The owner's marker, claim record and binding record, as files of a local warehouse.
struct OwnerFiles {
    marker: PathBuf,
    claim: PathBuf,
    binding: PathBuf,
}

impl OwnerFiles {
    fn of(env: &Env) -> OwnerFiles {
        let dir = env.local_dir.clone().expect("a local warehouse");
        let marker = dir.join("_catalog-owner.json");
        let id = Self::read(&marker)["catalog-id"]
            .as_str()
            .expect("catalog id")
            .to_owned();
        let claims = dir.join("_gc/claims");
        OwnerFiles {
            marker,
            claim: claims.join(format!("{id}.json")),
            binding: claims.join(format!("{id}.bound")),
        }
    }

    fn read(path: &Path) -> serde_json::Value {
        serde_json::from_slice(&std::fs::read(path).expect("record")).expect("json")
    }

    fn marker(&self) -> serde_json::Value {
        Self::read(&self.marker)
    }

    /// The store the marker names, split into its name and its instance attributes.
    fn bound(&self) -> (String, String) {
        let marker = self.marker();
        let bound = marker["catalog"].as_str().expect("catalog");
        let (name, attributes) = bound
            .rsplit_once('?')
            .expect("a new marker names the store's instance");
        (name.to_owned(), attributes.to_owned())
    }

    /// Leave the marker, claim record and binding record as rounds 104–108 wrote them: a
    /// version-1 marker naming the store alone, and copies of it.
    fn as_earlier_releases_wrote_them(&self) {
        let mut earlier = self.marker();
        earlier["marker-version"] = 1.into();
        earlier["catalog"] = self.bound().0.into();
        let bytes = serde_json::to_vec_pretty(&earlier).expect("json");
        for path in [&self.marker, &self.claim, &self.binding] {
            std::fs::write(path, &bytes).expect("record");
        }
    }

    /// Loosen the marker alone to name the store without its instance (an earlier
    /// release's `init --adopt` after the marker was removed by hand).
    fn loosen_marker(&self) {
        let mut loose = self.marker();
        loose["marker-version"] = 1.into();
        loose["catalog"] = self.bound().0.into();
        std::fs::write(&self.marker, serde_json::to_vec(&loose).expect("json")).expect("marker");
    }
}

/// Round 109 (round 106, F1): a copy of a local pointer store at the owner's path — a
/// backup restored there, or a copy on another host that mounts the shared warehouse at
/// the same paths (seen here by swapping the directories) — may neither write nor
/// collect, through days of attempts, and the owner's index registered after the copy was
/// taken stays whole; the owner's directory, back in place, is the owner again.
#[tokio::test]
async fn redteam109_a_copy_of_a_local_store_at_the_owners_path_is_a_copy() {
    let env = Env::open(Backend::Local, 2650).await;
    let config = test_config();
    let (id, _, v1) = env.register("early", &Layout::under("early/1")).await;
    let store = env.local_dir.clone().expect("local").join("_catalog");
    let backup = tempfile::tempdir().expect("backup");
    copy_dir(&store, backup.path());
    let later = Layout::under("later/1");
    let (_, _, location) = env.register("later", &later).await;
    let watched: Vec<String> = later
        .files()
        .into_iter()
        .chain([env.relative(&location)])
        .collect();
    let aside = store.with_extension("owner");
    std::fs::rename(&store, &aside).expect("the owner's directory aside");
    copy_dir(backup.path(), &store);
    let copy = || catalog_on(&env, Arc::new(LocalStore::new(&store)), 2651);
    let err = env.refused_copy(copy(), &config, &id, &v1).await;
    assert!(err.message().contains("copy of that store"), "{err}");
    for _ in 0..3 * 24 {
        env.advance(HOUR);
        let refused = GarbageCollector::new(copy(), config.clone())
            .expect("collector")
            .collect(env.now())
            .await
            .expect_err("the copy never collects");
        assert_eq!(refused.kind(), ErrorKind::WarehouseNotOwned, "{refused}");
    }
    assert!(
        env.all_exist(&watched).await,
        "the owner's later index is whole"
    );
    std::fs::remove_dir_all(&store).expect("the copy removed");
    std::fs::rename(&aside, &store).expect("the owner's directory back");
    let owner = catalog_on(&env, Arc::new(LocalStore::new(&store)), 2652);
    let report = GarbageCollector::new(owner, config.clone())
        .expect("collector")
        .collect(env.now())
        .await
        .expect("the owner collects");
    assert!(report.warnings.is_empty(), "{:?}", report.warnings);
    assert!(env.all_exist(&watched).await, "live");
}

/// A new local store's marker binds the directory's inode (and its birth time where the
/// file system keeps one), as version 3, which earlier releases refuse to read (rounds
/// 104–108 read version 2, and bound a directory by its path alone: GC round 109, F3).
#[tokio::test]
async fn a_local_stores_marker_binds_its_directory_as_one_instance() {
    let env = Env::open(Backend::Local, 2653).await;
    let files = OwnerFiles::of(&env);
    let (name, attributes) = files.bound();
    let store = env.local_dir.clone().expect("local").join("_catalog");
    let canonical = store.canonicalize().expect("store");
    assert_eq!(name, format!("file://{}", canonical.display()));
    let inode = std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(&store).expect("meta"));
    assert!(
        attributes == format!("inode={inode}")
            || attributes.starts_with(&format!("inode={inode}&born=")),
        "{attributes}"
    );
    assert_eq!(files.marker()["marker-version"], 3);
    assert_eq!(OwnerFiles::read(&files.binding)["marker-version"], 3);
}

/// A marker of an earlier release names a local store by its path alone (and so did the
/// records rounds 104–108 left beside it): the owner goes on, with a warning in every gc
/// report, until `init --adopt` binds the directory; once bound, the marker loosened again
/// binds nobody, neither the owner nor a copy, until the owner adopts again.
#[tokio::test]
async fn a_marker_naming_a_local_store_by_its_path_is_the_owners_until_adopted() {
    let env = Env::open(Backend::Local, 2654).await;
    let config = test_config();
    let files = OwnerFiles::of(&env);
    env.register("before", &Layout::under("before/1")).await;
    files.as_earlier_releases_wrote_them();
    let owner = || catalog_on(&env, env.pointer_store.clone(), 2655);
    env.collects_with_warning(owner(), &config, "without its inode")
        .await;
    env.register("meanwhile", &Layout::under("meanwhile/1"))
        .await;
    gc::adopt(&owner(), env.now()).await.expect("adopted");
    assert_eq!(files.marker()["marker-version"], 3, "bound as one instance");
    assert_eq!(
        OwnerFiles::read(&files.binding)["marker-version"],
        3,
        "the binding record an earlier release left shows the exact binding now"
    );
    assert_eq!(OwnerFiles::read(&files.claim)["marker-version"], 3);
    let report = GarbageCollector::new(owner(), config.clone())
        .expect("collector")
        .collect(env.now())
        .await
        .expect("the owner collects");
    assert!(report.warnings.is_empty(), "{:?}", report.warnings);
    files.loosen_marker();
    let refused = GarbageCollector::new(owner(), config.clone())
        .expect("collector")
        .collect(env.now())
        .await
        .expect_err("a marker loosened after an exact binding binds nobody");
    assert_eq!(refused.kind(), ErrorKind::WarehouseNotOwned, "{refused}");
    let ns = parqdb_catalog::Namespace::new(["after"]).expect("ns");
    use parqdb_catalog::IndexCatalog;
    let err = owner()
        .create_namespace(&ns, std::collections::BTreeMap::new())
        .await
        .expect_err("nor writes");
    assert_eq!(err.kind(), ErrorKind::WarehouseNotOwned, "{err}");
    gc::adopt(&owner(), env.now())
        .await
        .expect("the owner adopts again");
    owner()
        .create_namespace(&ns, std::collections::BTreeMap::new())
        .await
        .expect("and writes");
}

/// Round 109: an S3-compatible bucket is bound to its server's endpoint; the same bucket
/// name reached through another endpoint (a replica site, another server holding a copy;
/// here the test server under another host name) is another store. A marker naming the
/// bucket alone (earlier releases) stays the owner's, with a warning.
mod s3 {
    use super::*;
    use crate::support::services::{new_bucket, s3_options};
    use parqdb_catalog::store::s3::S3Store;

    fn store(bucket: &str, endpoint: &str) -> Arc<dyn PointerStore> {
        let options = parqdb_catalog::store::s3::S3Options {
            endpoint: Some(endpoint.to_owned()),
            ..s3_options()
        };
        Arc::new(S3Store::from_uri(&format!("s3://{bucket}/_catalog"), &options).expect("store"))
    }

    #[tokio::test]
    async fn redteam109_a_bucket_through_another_endpoint_is_another_store() {
        let endpoint = s3_options().endpoint.expect("endpoint");
        let elsewhere = endpoint.replace("127.0.0.1", "localhost");
        assert_ne!(endpoint, elsewhere, "the test server listens on 127.0.0.1");
        let bucket = new_bucket().await;
        let env = Env::open_with_pointers(Backend::Local, 2656, store(&bucket, &endpoint)).await;
        let config = test_config();
        let (id, _, v1) = env.register("s3", &Layout::under("s3/1")).await;
        let files = OwnerFiles::of(&env);
        let (name, attributes) = files.bound();
        assert_eq!(name, format!("s3://{bucket}/_catalog"));
        assert_eq!(
            attributes,
            format!("endpoint={}", endpoint.trim_end_matches('/'))
        );
        assert_eq!(files.marker()["marker-version"], 3);
        let copy = catalog_on(&env, store(&bucket, &elsewhere), 2657);
        env.refused_copy(copy, &config, &id, &v1).await;
        files.as_earlier_releases_wrote_them();
        let owner = catalog_on(&env, store(&bucket, &endpoint), 2658);
        env.collects_with_warning(owner, &config, "without its endpoint")
            .await;
    }
}
