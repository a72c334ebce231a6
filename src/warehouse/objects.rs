//! One object at a time: reading (bounded), heads, create-if-absent and the deliberate
//! overwrite of the ownership marker.

use bytes::Bytes;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload};

use futures::StreamExt;

use super::{Listed, Warehouse, is_missing, local, local_files, object_name, unavailable};
use crate::error::{Error, ErrorKind, Result};

impl Warehouse {
    /// Write a new immutable object at the warehouse-relative location `name` with
    /// create-if-absent, and return its absolute location.
    pub async fn write_new(&self, name: &str, bytes: Bytes) -> Result<String> {
        let path = self.path(name)?;
        let location = self.absolute(name);
        match self.put_if_absent_at(&path, bytes).await {
            Ok(true) => Ok(location),
            Ok(false) => Err(Error::new(
                ErrorKind::AlreadyExists,
                format!("`{location}` already exists; metadata files are immutable"),
            )),
            // A create cannot miss its key: the bucket (or root) is missing.
            Err(err @ object_store::Error::NotFound { .. }) => Err(Error::with_source(
                ErrorKind::StoreRefused,
                format!("writing `{location}` failed: the warehouse's bucket or root is missing"),
                err,
            )),
            Err(err) => Err(unavailable(&location, err)),
        }
    }

    /// Read the object `name` unless it is larger than `max_bytes` (one GET: the size is
    /// checked from the response head before the body is read).
    pub(crate) async fn get(&self, name: &str, max_bytes: u64) -> Result<Fetched> {
        let path = self.path(name)?;
        if let Some(dir) = self.local.as_deref()
            && local_files::regular_file(&dir.join(name))
                .await
                .is_ok_and(|file| file.is_none())
        {
            // Not a regular file: nothing an object store would hold (a FIFO would block).
            return Ok(Fetched::Missing);
        }
        let result = match self.store.get(&path).await {
            Ok(result) => result,
            Err(err) if is_missing(&err) => return Ok(Fetched::Missing),
            Err(err) => return Err(unavailable(name, err)),
        };
        if result.meta.size > max_bytes {
            return Ok(Fetched::TooLarge(result.meta.size));
        }
        let listed = self.listed(&result.meta, name);
        match result.bytes().await {
            Ok(bytes) => Ok(Fetched::Object(bytes, listed)),
            Err(object_store::Error::NotFound { .. }) => Ok(Fetched::Missing),
            Err(err) => Err(unavailable(name, err)),
        }
    }

    /// Read the object `name` like [`Warehouse::get`], and on a local warehouse also a file
    /// at a name `object_store` cannot address (its multipart staging names, `x#1`): for
    /// the readers that must see every file a reference can name.
    pub(crate) async fn get_named(&self, name: &str, max_bytes: u64) -> Result<Fetched> {
        match self.local.as_deref() {
            Some(dir) if local::is_staging_name(name) => {
                object_name(name)
                    .map_err(|why| Error::new(ErrorKind::InvalidIndexMetadata, why))?;
                local_files::get(&dir.join(name), name, max_bytes)
                    .await
                    .map_err(|err| local_error(name, err))
            }
            _ => self.get(name, max_bytes).await,
        }
    }

    /// Hand the object `name` to `each`, chunk by chunk (a file too large to hold at
    /// once); `false` if there is none. On a local warehouse it reads the file directly
    /// (see [`Warehouse::get_named`]).
    pub(crate) async fn read_chunks(
        &self,
        name: &str,
        each: &mut (dyn FnMut(&[u8]) + Send),
    ) -> Result<bool> {
        if let Some(dir) = self.local.as_deref() {
            object_name(name).map_err(|why| Error::new(ErrorKind::InvalidIndexMetadata, why))?;
            return local_files::read_chunks(&dir.join(name), each)
                .await
                .map_err(|err| local_error(name, err));
        }
        let path = self.path(name)?;
        let result = match self.store.get(&path).await {
            Ok(result) => result,
            Err(err) if is_missing(&err) => return Ok(false),
            Err(err) => return Err(unavailable(name, err)),
        };
        let mut chunks = result.into_stream();
        while let Some(chunk) = chunks.next().await {
            match chunk {
                Ok(chunk) => each(&chunk),
                Err(err) if is_missing(&err) => return Ok(false),
                Err(err) => return Err(unavailable(name, err)),
            }
        }
        Ok(true)
    }

    /// Whether the object `name`, `size` bytes long as listed, may be a JSON document: its
    /// first bytes (after white space) open an object. Reads at most 64 bytes; a file
    /// whose start cannot be read that way (gone, changed since it was listed, the store
    /// failing) may be.
    pub(crate) async fn may_be_json(&self, name: &str, size: u64) -> bool {
        if size == 0 {
            return false;
        }
        let Ok(path) = self.path(name) else {
            return true;
        };
        match self.store.get_range(&path, 0..size.min(64)).await {
            Ok(start) => opens_json(&start),
            // Gone, changed or failing: a whole read decides (and reports the failure).
            Err(_) => true,
        }
    }

    /// Whether the object `name` exists and its first bytes (after white space) open a JSON
    /// object: one ranged read of at most 64 bytes (and on a local warehouse, nothing but a
    /// regular file is opened). A name no object can have, or a failing read, may be
    /// (a whole read decides, and reports the failure).
    pub(crate) async fn starts_like_json(&self, name: &str) -> Result<bool> {
        let Ok(path) = self.path(name) else {
            return Ok(true);
        };
        if let Some(dir) = self.local.as_deref() {
            match local_files::regular_file(&dir.join(name)).await {
                Ok(None) => return Ok(false),
                Ok(Some(meta)) if meta.len() == 0 => return Ok(false),
                _ => {}
            }
        }
        match self.store.get_range(&path, 0..64).await {
            Ok(start) => Ok(opens_json(&start)),
            Err(err) if is_missing(&err) => Ok(false),
            // An object shorter than the range: read it whole.
            Err(_) => Ok(true),
        }
    }

    /// The object `name`'s size and time, if it exists. On a local warehouse (over its own
    /// store) the file is looked at, never opened: an open of a file the collector may not
    /// read stopped every run, and one of a FIFO blocked it for good (round 92, F1, F2);
    /// nothing but a regular file is an object.
    #[doc(hidden)] // Storage helpers for the workspace's tests.
    pub async fn head(&self, name: &str) -> Result<Option<Listed>> {
        let path = self.path(name)?;
        if let Some(found) = self.head_local(name).await {
            return found;
        }
        match self.store.head(&path).await {
            Ok(meta) => Ok(Some(self.listed(&meta, name))),
            Err(err) if is_missing(&err) => Ok(None),
            Err(err) => Err(unavailable(name, err)),
        }
    }

    /// The object `name`'s size and time, and a tag of its contents that every write
    /// replaces (an object store's entity tag, also within the second a time shows), if it
    /// exists. A local file has none: a write through a shared memory mapping moves
    /// neither its size nor any of its times (GC round 65, F1), so nothing but its bytes
    /// tells it changed.
    pub(crate) async fn head_tagged(&self, name: &str) -> Result<Option<(Listed, Option<String>)>> {
        let path = self.path(name)?;
        if let Some(found) = self.head_local(name).await {
            return found.map(|listed| listed.map(|listed| (listed, None)));
        }
        match self.store.head(&path).await {
            Ok(meta) => {
                let tag = match self.local {
                    Some(_) => None,
                    None => meta.e_tag.clone(),
                };
                Ok(Some((self.listed(&meta, name), tag)))
            }
            Err(err) if is_missing(&err) => Ok(None),
            Err(err) => Err(unavailable(name, err)),
        }
    }

    /// [`Warehouse::head`] of a local warehouse over its own store, by the file's metadata
    /// (a regular file, following links as a read does); `None` for any other warehouse.
    async fn head_local(&self, name: &str) -> Option<Result<Option<Listed>>> {
        let dir = self.local.as_deref().filter(|_| self.local_own_store)?;
        Some(match local_files::regular_file(&dir.join(name)).await {
            Ok(Some(meta)) => Ok(Some(local::listed(name.to_owned(), &meta))),
            Ok(None) => Ok(None),
            // The collector may not look there: what is there is unknown, and so it stays.
            Err(err) if err.kind() == std::io::ErrorKind::PermissionDenied => {
                Err(Error::with_source(
                    ErrorKind::StoreRefused,
                    format!("the collector may not look at `{name}` in the warehouse"),
                    err,
                ))
            }
            Err(err) => Err(Error::with_source(
                ErrorKind::StoreUnavailable,
                format!("cannot inspect `{name}` in the warehouse"),
                err,
            )),
        })
    }

    /// Create the object `name` unless it exists; `false` if it did.
    #[doc(hidden)] // Storage helpers for the workspace's tests.
    pub async fn put_if_absent(&self, name: &str, bytes: Bytes) -> Result<bool> {
        let path = self.path(name)?;
        self.put_if_absent_at(&path, bytes)
            .await
            .map_err(|err| unavailable(name, err))
    }

    /// Replace the object `name` unconditionally. Only for what an operator does
    /// deliberately (re-homing the ownership marker); data objects are immutable.
    pub(crate) async fn overwrite(&self, name: &str, bytes: Bytes) -> Result<()> {
        let path = self.path(name)?;
        self.store
            .put(&path, PutPayload::from_bytes(bytes))
            .await
            .map(|_| ())
            .map_err(|err| unavailable(name, err))
    }

    async fn put_if_absent_at(&self, path: &Path, bytes: Bytes) -> object_store::Result<bool> {
        let options = PutOptions {
            mode: PutMode::Create,
            ..PutOptions::default()
        };
        match self
            .store
            .put_opts(path, PutPayload::from_bytes(bytes), options)
            .await
        {
            Ok(_) => Ok(true),
            Err(object_store::Error::AlreadyExists { .. }) => Ok(false),
            Err(err) => Err(err),
        }
    }
}

/// A local file-system failure reading `name`: permanent or not, as for the store's.
fn local_error(name: &str, err: std::io::Error) -> Error {
    let kind = match crate::store::local::is_permanent(err.kind()) {
        true => ErrorKind::StoreRefused,
        false => ErrorKind::StoreUnavailable,
    };
    Error::with_source(kind, format!("reading `{name}` failed"), err)
}

/// What [`Warehouse::get`] found.
#[derive(Debug)]
pub(crate) enum Fetched {
    /// The object's bytes and listing entry.
    Object(Bytes, Listed),
    /// It is larger than the limit (its size).
    TooLarge(u64),
    /// It does not exist.
    Missing,
}

/// Whether a document's first bytes may open a JSON object in an encoding some reader
/// takes: a byte-order mark (UTF-8, UTF-16 or UTF-32) opens one, and otherwise the first
/// byte that is neither white space nor NUL (the other bytes of a UTF-16 or UTF-32 code
/// unit without a mark, RFC 4627) is `{`, or there is none.
pub(super) fn opens_json(start: &[u8]) -> bool {
    const MARKS: [&[u8]; 4] = [b"\xEF\xBB\xBF", b"\xFF\xFE", b"\xFE\xFF", b"\0\0\xFE\xFF"];
    MARKS.iter().any(|mark| start.starts_with(mark))
        || start
            .iter()
            .find(|byte| !byte.is_ascii_whitespace() && **byte != 0)
            .is_none_or(|byte| *byte == b'{')
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use object_store::memory::InMemory;

    use super::*;

    /// Round 92 (helper-86, F1, F2): on a local warehouse a head looks at the file and
    /// never opens it: a FIFO is no object (an open would block for good), and a file the
    /// collector may not read is still seen.
    #[tokio::test]
    async fn a_local_head_never_opens_the_file() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("dir");
        let wh = Warehouse::local(dir.path()).expect("warehouse");
        std::fs::create_dir_all(dir.path().join("indexes/junk")).expect("dirs");
        let status = std::process::Command::new("mkfifo")
            .arg(dir.path().join("indexes/junk/fifo.parquet"))
            .status()
            .expect("mkfifo runs");
        assert!(status.success());
        let empty = dir.path().join("indexes/junk/empty.parquet");
        std::fs::write(&empty, b"").expect("file");
        std::fs::set_permissions(&empty, std::fs::Permissions::from_mode(0o000)).expect("chmod");
        let head = |name: &'static str| {
            let wh = wh.clone();
            async move {
                tokio::time::timeout(std::time::Duration::from_secs(30), wh.head(name))
                    .await
                    .expect("a head never blocks")
            }
        };
        assert_eq!(head("indexes/junk/fifo.parquet").await.expect("head"), None);
        let listed = head("indexes/junk/empty.parquet")
            .await
            .expect("head")
            .expect("seen");
        assert_eq!(listed.size, 0);
        let tagged = tokio::time::timeout(
            std::time::Duration::from_secs(30),
            wh.head_tagged("indexes/junk/fifo.parquet"),
        )
        .await
        .expect("a head never blocks");
        assert_eq!(tagged.expect("head"), None);
    }

    /// Round 93 (helper-87, G1): a file the collector may not look at (its directory made
    /// unsearchable) is a refusal, which the delete step reads as "may have been written
    /// since" (kept), not a failure that stops every run. Root looks anyway: run again as
    /// `nobody` (util-linux's `setpriv`).
    #[tokio::test]
    async fn a_local_head_the_collector_may_not_make_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        if super::super::unlink::tests::ran_as_nobody(
            "warehouse::objects::tests::a_local_head_the_collector_may_not_make_is_refused",
        ) {
            return;
        }
        let dir = tempfile::tempdir().expect("dir");
        let is_root =
            std::os::unix::fs::MetadataExt::uid(&std::fs::metadata(dir.path()).expect("meta")) == 0;
        let wh = Warehouse::local(dir.path()).expect("warehouse");
        let junk = dir.path().join("indexes/junk");
        std::fs::create_dir_all(&junk).expect("dirs");
        std::fs::write(junk.join("empty.parquet"), b"").expect("file");
        std::fs::set_permissions(&junk, std::fs::Permissions::from_mode(0o000)).expect("chmod");
        let head = wh.head("indexes/junk/empty.parquet").await;
        std::fs::set_permissions(&junk, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        match is_root {
            true => assert!(head.is_ok()),
            false => assert_eq!(
                head.map(|_| ()).map_err(|err| err.kind()),
                Err(ErrorKind::StoreRefused)
            ),
        }
    }

    fn warehouse(root: &str) -> Warehouse {
        Warehouse::new(root, Arc::new(InMemory::new()), Path::from("wh")).expect("valid root")
    }

    /// A JSON object opens a document in every encoding a reader may take (round 34 F2);
    /// anything else does not.
    #[test]
    fn a_json_object_opens_in_every_encoding() {
        let utf16le: Vec<u8> = " {".encode_utf16().flat_map(u16::to_le_bytes).collect();
        let utf16be: Vec<u8> = "{".encode_utf16().flat_map(u16::to_be_bytes).collect();
        let utf32le: Vec<u8> = "\n{"
            .chars()
            .flat_map(|c| u32::from(c).to_le_bytes())
            .collect();
        let utf32be: Vec<u8> = "{"
            .chars()
            .flat_map(|c| u32::from(c).to_be_bytes())
            .collect();
        for start in [
            &b" {"[..],
            b"\xEF\xBB\xBF{",
            &utf16le,
            &utf16be,
            &utf32le,
            &utf32be,
            b"\0\0\xFE\xFF",
            b"",
        ] {
            assert!(opens_json(start), "{start:?}");
        }
        for start in [&b"PAR1"[..], b"[1]", b"\0\0\0x"] {
            assert!(!opens_json(start), "{start:?}");
        }
    }

    /// On a file system, a file where a directory of the path would be means no object
    /// is at the name (not a refusal: a family reference below such a file names nothing).
    #[tokio::test]
    async fn a_name_below_a_file_is_missing() {
        let dir = tempfile::tempdir().expect("dir");
        let wh = Warehouse::local(dir.path()).expect("warehouse");
        wh.put_if_absent("metadata/x", Bytes::from_static(b"{}"))
            .await
            .expect("written");
        assert!(matches!(
            wh.get("metadata/x/c.json", 1024).await.expect("read"),
            Fetched::Missing
        ));
        assert_eq!(wh.head("metadata/x/c.json").await.expect("head"), None);
        // So is a name on a loop of symbolic links.
        let root = dir.path().join("metadata");
        std::os::unix::fs::symlink(root.join("loop"), root.join("loop")).expect("link");
        for name in ["metadata/loop", "metadata/loop/c.json"] {
            assert!(
                matches!(wh.get(name, 1024).await.expect("read"), Fetched::Missing),
                "{name}"
            );
        }
    }

    /// What a read of a local warehouse finds where no object can be: a name too long for
    /// the file system is missing; a FIFO, a socket or a directory holds no object (and a
    /// FIFO is never opened: that would wait for a writer forever).
    #[tokio::test]
    async fn a_local_name_that_holds_no_regular_file_is_missing() {
        let dir = tempfile::tempdir().expect("dir");
        let wh = Warehouse::local(dir.path()).expect("warehouse");
        let long = format!("metadata/{}.json", "x".repeat(300));
        assert!(matches!(
            wh.get(&long, 1024).await.expect("read"),
            Fetched::Missing
        ));
        assert_eq!(wh.head(&long).await.expect("head"), None);
        std::fs::create_dir_all(dir.path().join("metadata/dir")).expect("dir");
        let fifo = dir.path().join("metadata/fifo");
        let status = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .expect("mkfifo");
        assert!(status.success());
        for name in ["metadata/fifo", "metadata/dir"] {
            let read = tokio::time::timeout(std::time::Duration::from_secs(20), wh.get(name, 1024))
                .await
                .expect("answered at once");
            assert!(matches!(read.expect("read"), Fetched::Missing), "{name}");
            let mut ignore = |_: &[u8]| {};
            let chunks = wh.read_chunks(name, &mut ignore);
            let found = tokio::time::timeout(std::time::Duration::from_secs(20), chunks)
                .await
                .expect("answered at once");
            assert!(!found.expect("read"), "{name}");
        }
    }

    /// A local file at a name `object_store` cannot address (its staging names, `x#1`) is
    /// read all the same by the readers that must see every file a reference can name.
    #[tokio::test]
    async fn a_local_file_at_a_staging_name_is_read_directly() {
        let dir = tempfile::tempdir().expect("dir");
        let wh = Warehouse::local(dir.path()).expect("warehouse");
        assert!(
            wh.get("metadata/x#1", 1024).await.is_err(),
            "not addressable"
        );
        assert!(matches!(
            wh.get_named("metadata/x#1", 1024).await.expect("read"),
            Fetched::Missing
        ));
        std::fs::create_dir_all(dir.path().join("metadata")).expect("dir");
        std::fs::write(dir.path().join("metadata/x#1"), b"{\"a\": 1}").expect("written");
        match wh.get_named("metadata/x#1", 1024).await.expect("read") {
            Fetched::Object(bytes, listed) => {
                assert_eq!(&bytes[..], b"{\"a\": 1}");
                assert_eq!(listed.size, 8);
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            wh.get_named("metadata/x#1", 4).await.expect("read"),
            Fetched::TooLarge(8)
        ));
        let mut read = Vec::new();
        assert!(
            wh.read_chunks("metadata/x#1", &mut |chunk| read.extend_from_slice(chunk))
                .await
                .expect("read")
        );
        assert_eq!(read, b"{\"a\": 1}");
    }

    #[tokio::test]
    async fn metadata_files_are_written_once_and_read_back() {
        let wh = warehouse("memory://test/wh");
        let location = wh
            .write_new("metadata/x/1.metadata.json", Bytes::from_static(b"{}"))
            .await
            .expect("written");
        assert_eq!(location, "memory://test/wh/metadata/x/1.metadata.json");
        assert_eq!(
            wh.read_metadata(&location).await.expect("read").as_ref(),
            b"{}"
        );
        let again = wh
            .write_new("metadata/x/1.metadata.json", Bytes::from_static(b"[]"))
            .await;
        assert_eq!(
            again.expect_err("immutable").kind(),
            ErrorKind::AlreadyExists
        );
        let missing = wh
            .read_metadata("memory://test/wh/metadata/none.json")
            .await;
        assert_eq!(
            missing.expect_err("missing").kind(),
            ErrorKind::InvalidIndexMetadata
        );
    }
}
