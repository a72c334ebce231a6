//! What a metadata file names: its index tables, its source tables' locations inside the
//! warehouse and its family references, read from valid metadata or, from a file that does
//! not parse, every string in it that names an object. The collector's walks
//! (`gc::reachability`), the change log's republications (`gc::history`) and rule (P)
//! (`gc::plan`) all read names here, and so does publication (`catalog::publication`:
//! nothing a publication makes reachable may be condemned).

use std::collections::{BTreeSet, HashSet};

use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};

use super::strings::{Found, JsonStrings};
use super::{IndexMetadata, MAX_METADATA_BYTES};
use crate::error::{Error, ErrorKind, Result};
use crate::family::FamilyRegistry;
use crate::warehouse::layout::CATALOG_DIR;
use crate::warehouse::{
    Fetched, GC_DIR, ListItem, MANAGED_PREFIXES, METADATA_DIR, NameReader, Warehouse, aliases,
    is_within, object_name,
};

/// The name of a warehouse-relative location as written in metadata, if it is one.
pub(crate) fn normalize(location: &str) -> Option<String> {
    object_name(location).ok()
}

/// The references of one metadata file, in canonical form, each list sorted and without
/// repeats.
#[derive(Debug, Default, Clone)]
pub(crate) struct References {
    /// Index-table locations.
    pub tables: Vec<String>,
    /// Source-table locations inside the warehouse, in every spelling the collector
    /// recognises as inside it.
    pub sources: Vec<String>,
    /// Family parameter references (objects that may themselves be metadata).
    pub family: Vec<String>,
}

impl References {
    /// The names the file makes reachable itself (its tables and its sources), which are
    /// never followed as metadata.
    pub fn direct(&self) -> impl Iterator<Item = &String> {
        self.tables.iter().chain(&self.sources)
    }
}

/// The references of `metadata`.
pub(crate) fn references_of(
    metadata: &IndexMetadata,
    registry: &FamilyRegistry,
    warehouse: &Warehouse,
) -> References {
    let mut refs = References::default();
    let mut reader = warehouse.name_reader();
    for snapshot in metadata.snapshots() {
        if let Some(provider) = registry.provider(snapshot.index_provider().provider()) {
            for table in snapshot.index_tables().values() {
                if let Some(location) = provider.table_location(table.properties()) {
                    refs.tables.extend(normalize(location));
                }
            }
        }
        refs.sources
            .extend(snapshot.source_table().warehouse_names(&mut reader));
        if let Some(family) = registry.family(snapshot.index_family()) {
            for location in family.warehouse_references(snapshot.parameters()) {
                refs.family.extend(normalize(location));
            }
        }
    }
    for names in [&mut refs.tables, &mut refs.sources, &mut refs.family] {
        names.sort_unstable();
        names.dedup();
    }
    refs
}

/// What reading a possibly-metadata object gave.
pub(crate) enum Parsed {
    /// It is valid index metadata.
    Metadata(Box<IndexMetadata>),
    /// It exists but is not valid index metadata of a format this collector understands:
    /// why, whether it may be metadata of another format version (then it is never
    /// deleted), and every string in it that names a warehouse object (kept while it
    /// exists: it might reference them).
    Opaque {
        why: String,
        foreign_format: bool,
        references: Vec<String>,
    },
    /// It may name anything: larger than [`MAX_SCANNED_BYTES`], or naming more files that
    /// may be metadata than [`MAX_FOLLOWED`]. Why.
    Unbounded(String),
    /// It does not exist.
    Missing,
}

/// The largest file whose strings are read when it is too large to be metadata (chunk by
/// chunk, at memory speed): a larger one is [`Parsed::Unbounded`].
pub(crate) const MAX_SCANNED_BYTES: u64 = 1 << 30;

/// The most distinct names of one file that does not parse that are checked for being
/// metadata ([`possible_metadata`]).
pub(crate) const MAX_FOLLOWED: usize = 100_000;

/// Whether the object `name` is metadata (store failures are errors).
pub(crate) async fn is_metadata(
    warehouse: &Warehouse,
    registry: &FamilyRegistry,
    name: &str,
) -> Result<bool> {
    Ok(matches!(
        read_parsed(warehouse, registry, name).await?,
        Parsed::Metadata(_)
    ))
}

/// Read and parse the object `name`. Store failures are errors; anything else that is not
/// valid metadata is opaque.
pub(crate) async fn read_parsed(
    warehouse: &Warehouse,
    registry: &FamilyRegistry,
    name: &str,
) -> Result<Parsed> {
    let failed = |err: Error| {
        Error::new(
            err.kind(),
            format!("reading `{name}` failed: {}", err.message()),
        )
    };
    let bytes: Bytes = match warehouse.get_named(name, MAX_METADATA_BYTES as u64).await {
        Ok(Fetched::Object(bytes, _)) => bytes,
        Ok(Fetched::Missing) => return Ok(Parsed::Missing),
        // No metadata, but it may name objects all the same: every string in it counts,
        // read chunk by chunk.
        Ok(Fetched::TooLarge(size)) if size > MAX_SCANNED_BYTES => {
            return Ok(Parsed::Unbounded(format!(
                "{size} bytes, more than the {MAX_SCANNED_BYTES} read of a file that is no metadata"
            )));
        }
        Ok(Fetched::TooLarge(size)) => {
            // Each chunk's strings read as they come: a file of strings is not held whole
            // (up to `MAX_SCANNED_BYTES`, against the collector's memory: round 126).
            let (mut strings, mut other) = (JsonStrings::default(), JsonStrings::other_pairing());
            let mut names = StringNames::new(warehouse, name, MAX_NAMED_BYTES);
            let found = warehouse
                .read_chunks(name, &mut |chunk| {
                    if names.full() {
                        return;
                    }
                    strings.feed(chunk);
                    other.feed(chunk);
                    for found in strings.drain().into_iter().chain(other.drain()) {
                        names.read(found);
                    }
                })
                .await
                .map_err(failed)?;
            if !found {
                return Ok(Parsed::Missing);
            }
            for found in strings.finish().into_iter().chain(other.finish()) {
                names.read(found);
            }
            let references = names.finish();
            return Ok(Parsed::Opaque {
                why: format!("{size} bytes, larger than any metadata file"),
                foreign_format: false,
                references,
            });
        }
        Err(err) => return Err(failed(err)),
    };
    match IndexMetadata::from_json_slice(&bytes, registry) {
        Ok(metadata) => Ok(Parsed::Metadata(Box::new(metadata))),
        Err(err) => Ok(Parsed::Opaque {
            why: err.message().to_owned(),
            foreign_format: err.kind() == ErrorKind::UnsupportedFormatVersion,
            references: string_references(&bytes, warehouse, name),
        }),
    }
}

/// Every string in a document that may be JSON (see [`JsonStrings`]) that names a
/// warehouse object (but a managed prefix as a whole): a warehouse-relative location or an
/// absolute location inside the warehouse. A superset of whatever an unparseable metadata
/// file could reference: a relative string is taken as it is, even with characters this
/// catalog's metadata may not contain (another format may allow a `%` and mean the object
/// at that literal name), and in its other spellings too (that `%` may also be an escape);
/// and in every encoding a reader may take the document in ([`readings`]). `holder` is the
/// document's own name (see [`StringNames`]).
///
/// Only JSON strings count: a reader of a live index reads metadata, which in every format
/// version is a JSON document; text of other formats (a list of names, YAML, a compressed
/// file) is no metadata, and no reader of an index interprets what it says (round 36).
fn string_references(bytes: &[u8], warehouse: &Warehouse, holder: &str) -> Vec<String> {
    let mut names = StringNames::new(warehouse, holder, MAX_NAMED_BYTES);
    for text in readings(bytes) {
        let mut pairings = vec![JsonStrings::default()];
        // No JSON: a stray quote (a comment's) may shift the pairing of the others.
        if serde_json::from_slice::<serde::de::IgnoredAny>(&text).is_err() {
            pairings.push(JsonStrings::other_pairing());
        }
        // A megabyte at a time: the strings are read as they come, not held whole.
        for chunk in text.chunks(1 << 20) {
            for strings in &mut pairings {
                strings.feed(chunk);
                strings
                    .drain()
                    .into_iter()
                    .for_each(|found| names.read(found));
            }
        }
        for strings in pairings {
            strings
                .finish()
                .into_iter()
                .for_each(|found| names.read(found));
        }
    }
    names.finish()
}

/// A document's bytes in every encoding a JSON reader may take them in, as UTF-8: as they
/// are (UTF-8, with or without a byte-order mark) and, if they hold a NUL byte (which no
/// UTF-8 JSON text does), as UTF-16 and UTF-32 of either byte order. Readers detect those
/// from the first bytes (RFC 4627) or a byte-order mark; taking every one is the superset
/// of what any of them reads, whatever the first bytes say.
fn readings(bytes: &[u8]) -> Vec<std::borrow::Cow<'_, [u8]>> {
    let mut out = vec![std::borrow::Cow::Borrowed(bytes)];
    if !bytes.contains(&0) {
        return out;
    }
    for big in [false, true] {
        let units: Vec<u16> = bytes
            .chunks_exact(2)
            .map(|pair| match big {
                true => u16::from_be_bytes([pair[0], pair[1]]),
                false => u16::from_le_bytes([pair[0], pair[1]]),
            })
            .collect();
        out.push(String::from_utf16_lossy(&units).into_bytes().into());
        let text: String = bytes
            .chunks_exact(4)
            .map(|quad| {
                let quad = [quad[0], quad[1], quad[2], quad[3]];
                let code = match big {
                    true => u32::from_be_bytes(quad),
                    false => u32::from_le_bytes(quad),
                };
                char::from_u32(code).unwrap_or(char::REPLACEMENT_CHARACTER)
            })
            .collect();
        out.push(text.into_bytes().into());
    }
    out
}

/// The names of warehouse objects among the strings (see [`string_references`]) of the
/// object `holder`. Each string is also read as a list (its parts between line breaks,
/// commas, semicolons or white space), and each relative one is also resolved, `.` and `..`
/// included, against the warehouse root and against `holder`'s directory (a reader of the
/// file may take names relative to it, as a manifest's `centroids-0.bin` or `../x/`), as a
/// file system resolves them: a `..` may climb above the root and come back in through
/// its own name (rounds 35 G3 and G6, 36).
///
/// Read a string at a time, as a document's chunks arrive (its strings are not held
/// whole: round 126), giving up past `max_bytes` of names ([`MAX_NAMED_BYTES`]).
struct StringNames<'w> {
    warehouse: &'w Warehouse,
    reader: NameReader<'w>,
    folder: String,
    out: Vec<String>,
    held: usize,
    max_bytes: usize,
}

impl<'w> StringNames<'w> {
    fn new(warehouse: &'w Warehouse, holder: &str, max_bytes: usize) -> StringNames<'w> {
        StringNames {
            warehouse,
            reader: warehouse.family_name_reader(),
            folder: holder
                .rsplit_once('/')
                .map_or("", |(dir, _)| dir)
                .to_owned(),
            out: Vec::new(),
            held: 0,
            max_bytes,
        }
    }

    /// Whether the names passed the bound: the file may name anything, and the rest of
    /// its strings need not be read.
    fn full(&self) -> bool {
        self.held > self.max_bytes
    }

    fn read(&mut self, found: Found) {
        if self.full() {
            return;
        }
        let (text, as_written) = match found {
            Found::Value(text) => (text, false),
            Found::AsWritten(text) => (text, true),
            Found::Overlong => {
                self.out
                    .extend(MANAGED_PREFIXES.iter().map(|prefix| (*prefix).to_owned()));
                return;
            }
        };
        let (warehouse, reader, folder) = (self.warehouse, &mut self.reader, self.folder.as_str());
        let mut parts: Vec<&str> = text
            .split(|c: char| c.is_control() || c == ',' || c == ';')
            .chain(text.split_whitespace())
            .map(str::trim)
            .filter(|part| !part.is_empty() && *part != text.as_str())
            .collect();
        parts.sort_unstable();
        parts.dedup();
        for part in std::iter::once(text.as_str()).chain(parts) {
            let mut names = match as_written {
                true => reader.names_of_location_as_written(part),
                false => reader.names_of_location(part),
            };
            if !part.contains("://") {
                if let Some(name) = normalize(part) {
                    names.extend(aliases(&name));
                    names.push(name);
                }
                // Resolved as a reader resolves a relative path: against the root and
                // against the holder's directory, `.` and `..` as on a file system (a `..`
                // may climb above the root and come back in through its own name).
                for dir in ["", folder] {
                    if let Some(name) = warehouse.resolve_relative(dir, part) {
                        names.extend(aliases(&name));
                        names.push(name);
                    }
                }
                // And on a local warehouse as the file system resolves it from the
                // holder's directory: through links (round 41, F3).
                names.extend(reader.names_relative_to(folder, part));
            }
            // A path that leads outside the warehouse (in any of a reader's resolutions):
            // what a reader finds there, now or later, may name anything (rounds 59 B, 60, 61).
            if reader.leads_outside(part) {
                names.extend(MANAGED_PREFIXES.iter().map(|p| (*p).to_owned()));
            }
            // A location in metadata of any version names a table or a file, never a
            // whole managed prefix: a stray note naming `indexes` must not stop collection.
            // Unless reading it gave up at a bound: then it may name anything (round 44, J1).
            if !reader.gave_up() {
                names.retain(|name| !MANAGED_PREFIXES.contains(&name.as_str()));
            }
            self.held += names
                .iter()
                .map(|name| name.len() + NAME_OVERHEAD)
                .sum::<usize>();
            self.out.extend(names);
        }
        // So many names the collector's memory would not hold them: it may name anything
        // (round 126: a stray file of comma lists of distinct names stopped every run).
        if self.full() {
            self.out
                .extend(MANAGED_PREFIXES.iter().map(|prefix| (*prefix).to_owned()));
        }
    }

    fn finish(mut self) -> Vec<String> {
        self.out.sort_unstable();
        self.out.dedup();
        self.out
    }
}

/// The most memory the names one file that does not parse gives may take (counted as
/// their bytes and [`NAME_OVERHEAD`] each, duplicates included) before the rest of the file
/// is not read: past it the file may name anything (it keeps everything under `indexes/`
/// while it exists, and is collected itself in time). Sized for the collector's smallest
/// deployed memory (512 MB), which holds several such files' names at once.
const MAX_NAMED_BYTES: usize = 64 << 20;

/// The memory of one name besides its bytes: a `String` and its allocation's overhead.
const NAME_OVERHEAD: usize = 48;

/// Everything the metadata file `name` names, itself included, following family
/// references to the metadata they name: what a logged publication of it may have made
/// reachable. Unlike the walk's closure, a file that is missing or does not parse is no
/// error: it names itself, and (not parsing) every string in it that names an object.
pub(crate) async fn names_of_metadata(
    warehouse: &Warehouse,
    registry: &FamilyRegistry,
    name: &str,
) -> Result<Vec<String>> {
    let mut names = vec![name.to_owned()];
    let mut visited: HashSet<String> = HashSet::from([name.to_owned()]);
    let mut frontier = vec![name.to_owned()];
    while let Some(file) = frontier.pop() {
        // Directories it names: their files that may be metadata are read as family
        // references' are (`files_below`).
        let mut directories: Vec<String> = Vec::new();
        match read_parsed(warehouse, registry, &file).await? {
            Parsed::Metadata(metadata) => {
                let refs = references_of(&metadata, registry, warehouse);
                directories.extend(directories_of([], &refs.tables));
                names.extend(refs.direct().cloned());
                for reference in refs.family {
                    if visited.insert(reference.clone()) {
                        names.push(reference.clone());
                        frontier.push(reference);
                    }
                }
            }
            // No metadata: a reader of its format may take names from it by rules no
            // catalog knows, so it may name anything (see the walk, `gc::reachability`).
            Parsed::Opaque { why, .. } => return Err(unbounded(warehouse, &file, &why)),
            Parsed::Unbounded(why) => return Err(unbounded(warehouse, &file, &why)),
            Parsed::Missing => directories.extend(directories_of([&file], [])),
        }
        let below = match files_below(warehouse, &directories).await? {
            Below::Files(files) => files,
            Below::Anything(why) => return Err(unbounded(warehouse, &file, &why)),
        };
        for found in below {
            if visited.insert(found.clone()) {
                names.push(found.clone());
                frontier.push(found);
            }
        }
    }
    Ok(names)
}

/// What names `file`, which may name anything, cannot be published.
fn unbounded(warehouse: &Warehouse, file: &str, why: &str) -> Error {
    Error::new(
        ErrorKind::InvalidIndexMetadata,
        format!(
            "`{}`, which the metadata leads to through family references, is no metadata that can be read to the end ({why}): what it names is unknown. Write a metadata file",
            warehouse.absolute(file)
        ),
    )
}

/// Of the names found in a file that does not parse, those that may be metadata (they
/// exist and start like a JSON object): such a file may be a family reference's, so it is
/// read as one is. `None` if the file's names come from more than [`MAX_FOLLOWED`]
/// distinct `strings` (the file may then name anything; the spellings of one string count
/// once). One ranged read of 64 bytes per distinct name.
pub(crate) async fn possible_metadata(
    warehouse: &Warehouse,
    names: &[String],
    strings: usize,
) -> Result<Option<Vec<String>>> {
    if strings > MAX_FOLLOWED {
        return Ok(None);
    }
    let names: BTreeSet<&String> = names.iter().collect();
    let checked: Vec<(String, bool)> = futures::stream::iter(names.into_iter().cloned())
        .map(|name| async move {
            let json = warehouse.starts_like_json(&name).await?;
            Ok::<_, Error>((name, json))
        })
        .buffer_unordered(FOLLOW_CONCURRENCY)
        .try_collect()
        .await?;
    Ok(Some(
        checked
            .into_iter()
            .filter_map(|(name, json)| json.then_some(name))
            .collect(),
    ))
}

/// What [`files_below`] found below the directories it listed.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Below {
    /// The files that may be metadata (they start like a JSON object).
    Files(Vec<String>),
    /// What is below may name anything: a symbolic link (what it leads to is not read),
    /// or more files than [`MAX_FOLLOWED`]. Why.
    Anything(String),
}

/// The directories among `names` a reader may read as directories: the names a family
/// reference leads to (a family file's strings, a family reference naming no file),
/// anywhere in the warehouse (round 59, A: `extra/d/` beside the managed prefixes), and of
/// an index's tables those placed under `metadata/` (where the collector reads files as
/// possible metadata). A whole managed prefix is left out (a file that may name anything
/// makes everything reachable), and so are the catalog's and the collector's own
/// directories as a whole.
pub(crate) fn directories_of<'n>(
    family: impl IntoIterator<Item = &'n String>,
    tables: impl IntoIterator<Item = &'n String>,
) -> Vec<String> {
    // A whole top-level directory of the catalog's own is no directory a reader reads
    // (and the collector's is large).
    let whole = |name: &&String| {
        MANAGED_PREFIXES.contains(&name.as_str()) || [GC_DIR, CATALOG_DIR].contains(&name.as_str())
    };
    let mut out: Vec<String> = family
        .into_iter()
        .filter(|name| !whole(name))
        .chain(
            tables
                .into_iter()
                .filter(|name| !whole(name) && is_within(name, METADATA_DIR)),
        )
        .cloned()
        .collect();
    out.sort_unstable();
    out.dedup();
    out
}

/// The files below `directories` (see [`directories_of`]) that may be metadata: a reader
/// of a directory reads its files, so they are read as a family reference's file is, by
/// the walk, the delete guard and publication alike (round 57: such a file was read only
/// by the collector's pass over `metadata/`, and not at all under `indexes/`; round 58:
/// nor through a link). A file has nothing below it. One listing per directory.
pub(crate) async fn files_below(warehouse: &Warehouse, directories: &[String]) -> Result<Below> {
    let mut files = Vec::new();
    for directory in directories {
        let mut listing = warehouse.list(directory);
        while let Some(item) = listing.try_next().await? {
            match item {
                ListItem::Object(listed) if listed.name == *directory => {}
                ListItem::Object(listed) => files.push(listed.name),
                ListItem::Skipped { name, reason } => {
                    return Ok(Below::Anything(format!(
                        "`{name}` in the directory `{directory}` is not read ({reason})"
                    )));
                }
            }
            if files.len() > MAX_FOLLOWED {
                return Ok(Below::Anything(format!(
                    "the directory `{directory}` holds more than {MAX_FOLLOWED} files"
                )));
            }
        }
    }
    let count = files.len();
    Ok(match possible_metadata(warehouse, &files, count).await? {
        Some(files) => Below::Files(files),
        None => Below::Anything(format!("more than {MAX_FOLLOWED} files to read")),
    })
}

/// How many names [`possible_metadata`] checks at a time.
const FOLLOW_CONCURRENCY: usize = 64;

#[cfg(test)]
mod tests {
    use super::*;

    /// [`StringNames`] of all of `strings`.
    fn names_in_strings(
        strings: impl IntoIterator<Item = impl Into<Found>>,
        warehouse: &Warehouse,
        holder: &str,
    ) -> Vec<String> {
        let mut names = StringNames::new(warehouse, holder, MAX_NAMED_BYTES);
        strings
            .into_iter()
            .for_each(|found| names.read(found.into()));
        names.finish()
    }

    #[test]
    fn names_are_raw_and_drop_the_trailing_slash() {
        assert_eq!(
            normalize("indexes/a/1/ivf_postings/").as_deref(),
            Some("indexes/a/1/ivf_postings")
        );
        assert_eq!(
            normalize("indexes/ü b/~x/").as_deref(),
            Some("indexes/ü b/~x")
        );
        assert_eq!(normalize("indexes//x"), None);
    }

    /// The readers of references see a local file at a name `object_store` cannot address
    /// (`x#1`, written by another program, or named by a change-log entry of a register
    /// that failed): no error that would stop every collection.
    #[tokio::test]
    async fn a_local_file_at_a_staging_name_is_read() {
        let dir = tempfile::tempdir().expect("dir");
        let warehouse = Warehouse::local(dir.path()).expect("warehouse");
        let registry = FamilyRegistry::builtin();
        let name = "metadata/x#1";
        assert!(matches!(
            read_parsed(&warehouse, &registry, name)
                .await
                .expect("read"),
            Parsed::Missing
        ));
        std::fs::create_dir_all(dir.path().join("metadata")).expect("dir");
        std::fs::write(dir.path().join(name), br#"{"t": "indexes/a/1/"}"#).expect("written");
        match read_parsed(&warehouse, &registry, name)
            .await
            .expect("read")
        {
            Parsed::Opaque { references, .. } => {
                assert!(
                    references.contains(&"indexes/a/1".to_owned()),
                    "{references:?}"
                )
            }
            _ => panic!("not read"),
        }
    }

    #[test]
    fn the_strings_of_a_utf16_document_name_objects() {
        let warehouse = Warehouse::in_memory("memory://utf16/wh").expect("warehouse");
        let text = r#"{"t": "indexes/a/1/"}"#;
        for big in [false, true] {
            let mut bytes = match big {
                true => vec![0xFE, 0xFF],
                false => vec![0xFF, 0xFE],
            };
            for unit in text.encode_utf16() {
                bytes.extend(match big {
                    true => unit.to_be_bytes(),
                    false => unit.to_le_bytes(),
                });
            }
            let names = string_references(&bytes, &warehouse, "metadata/x.json");
            assert!(names.contains(&"indexes/a/1".to_owned()), "{names:?}");
        }
    }

    /// RFC 4627's detection, which some readers use: UTF-16 and UTF-32 of either byte order,
    /// with or without a byte-order mark (round 34 F2).
    #[test]
    fn the_strings_of_a_utf16_or_utf32_document_without_a_mark_name_objects() {
        let warehouse = Warehouse::in_memory("memory://utf32/wh").expect("warehouse");
        let text = r#"{"t": "indexes/a/1/"}"#;
        let utf16 = |big: bool| -> Vec<u8> {
            text.encode_utf16()
                .flat_map(|unit| match big {
                    true => unit.to_be_bytes(),
                    false => unit.to_le_bytes(),
                })
                .collect()
        };
        let utf32 = |big: bool, mark: bool| -> Vec<u8> {
            let marked = mark.then_some('\u{FEFF}');
            marked
                .into_iter()
                .chain(text.chars())
                .flat_map(|c| match big {
                    true => u32::from(c).to_be_bytes(),
                    false => u32::from(c).to_le_bytes(),
                })
                .collect()
        };
        for (what, bytes) in [
            ("UTF-16LE", utf16(false)),
            ("UTF-16BE", utf16(true)),
            ("UTF-32LE", utf32(false, false)),
            ("UTF-32BE", utf32(true, false)),
            ("UTF-32LE with a mark", utf32(false, true)),
            ("UTF-32BE with a mark", utf32(true, true)),
        ] {
            let names = string_references(&bytes, &warehouse, "metadata/x.json");
            assert!(
                names.contains(&"indexes/a/1".to_owned()),
                "{what}: {names:?}"
            );
        }
    }

    /// Round 44 (J1): a string whose reading gives up at a bound (five patterns, through
    /// links) may name anything, so it keeps every managed prefix; a stray note naming
    /// `indexes` still names nothing.
    #[test]
    fn a_string_whose_reading_gives_up_keeps_everything() {
        let dir = tempfile::tempdir().expect("dir");
        let base = std::fs::canonicalize(dir.path()).expect("dir");
        let root = base.join("wh");
        std::fs::create_dir_all(root.join("indexes/old/src")).expect("dirs");
        std::fs::create_dir_all(base.join("x/a/b/c/d")).expect("dirs");
        std::os::unix::fs::symlink(root.join("indexes/old/src"), base.join("x/a/b/c/d/s"))
            .expect("link");
        let warehouse = Warehouse::local(&root).expect("warehouse");
        let far = format!("{}/x/[a]/[b]/[c]/[d]/[s]/part-0.parquet", base.display());
        let names = names_in_strings(vec![far], &warehouse, "metadata/fam/c.json");
        assert!(names.contains(&"indexes".to_owned()), "{names:?}");
        let names = names_in_strings(
            vec!["indexes".to_owned()],
            &warehouse,
            "metadata/fam/c.json",
        );
        assert!(!names.contains(&"indexes".to_owned()), "{names:?}");
    }

    /// Round 41 (F3): a string relative to the file that holds it, resolved on a local
    /// warehouse as the file system resolves it from the file's directory, through a link
    /// outside the warehouse (`../../../plain/l/../src/…` from `metadata/fam/`).
    #[test]
    fn names_relative_to_the_file_follow_links_on_a_local_warehouse() {
        let dir = tempfile::tempdir().expect("dir");
        let base = std::fs::canonicalize(dir.path()).expect("dir");
        let root = base.join("wh");
        for sub in ["indexes/old/src", "indexes/old/sub", "metadata/fam"] {
            std::fs::create_dir_all(root.join(sub)).expect("dirs");
        }
        std::fs::write(root.join("indexes/old/src/part-0.parquet"), b"t").expect("file");
        std::fs::create_dir_all(base.join("plain")).expect("dirs");
        std::os::unix::fs::symlink(root.join("indexes/old/sub"), base.join("plain/l"))
            .expect("link");
        let warehouse = Warehouse::local(&root).expect("warehouse");
        let strings = vec!["../../../plain/l/../src/part-0.parquet".to_owned()];
        let names = names_in_strings(strings, &warehouse, "metadata/fam/centroids.json");
        assert!(
            names.contains(&"indexes/old/src/part-0.parquet".to_owned()),
            "{names:?}"
        );
    }

    /// Round 35 G3 and G6: a reader may take a file's names relative to the file itself
    /// (`centroids-0.bin` beside it, `../../../indexes/old1/…`), and several names from one
    /// string (one per line, or a list with commas).
    #[test]
    fn a_file_of_more_names_than_memory_holds_names_anything() {
        let warehouse = Warehouse::in_memory("memory://many/wh").expect("warehouse");
        let strings: Vec<String> = (0..40)
            .map(|s| {
                (0..500)
                    .map(|n| format!("indexes/x{s}_{n}"))
                    .collect::<Vec<_>>()
                    .join(",")
            })
            .collect();
        let within = |max_bytes: usize| {
            let mut names = StringNames::new(&warehouse, "metadata/s.json", max_bytes);
            strings
                .iter()
                .for_each(|text| names.read(Found::Value(text.clone())));
            names.finish()
        };
        let few = within(1 << 30);
        assert!(few.contains(&"indexes/x39_499".to_owned()));
        assert!(!few.contains(&"indexes".to_owned()), "{:?}", &few[..3]);
        let held: usize = few.iter().map(|name| name.len() + NAME_OVERHEAD).sum();
        let capped = within(held / 4);
        for prefix in MANAGED_PREFIXES {
            assert!(capped.contains(&(*prefix).to_owned()), "{prefix}");
        }
        assert!(
            capped.len() < few.len() / 2,
            "{} of {}",
            capped.len(),
            few.len()
        );
    }

    #[test]
    fn names_relative_to_the_file_and_lists_in_one_string_count() {
        let warehouse = Warehouse::in_memory("memory://relative/wh").expect("warehouse");
        let strings = [
            "centroids-0.bin",
            "./centroids-1.bin",
            "../../../indexes/old1/ivf_postings/part-0.parquet",
            "indexes/a/../b/x",
            "indexes/c/p-0\nindexes/c/p-1",
            "indexes/d/p-0, indexes/d/p-1;indexes/d/p-2",
            "../../../../above/the/root",
            "../../../../wh/indexes/e/x",
        ]
        .map(str::to_owned)
        .to_vec();
        let names = names_in_strings(strings, &warehouse, "metadata/c/v1/centroids.json");
        for name in [
            "metadata/c/v1/centroids-0.bin",
            "metadata/c/v1/centroids-1.bin",
            "indexes/old1/ivf_postings/part-0.parquet",
            "indexes/b/x",
            "indexes/c/p-0",
            "indexes/c/p-1",
            "indexes/d/p-0",
            "indexes/d/p-1",
            "indexes/d/p-2",
            "indexes/e/x",
        ] {
            assert!(names.contains(&name.to_owned()), "{name}: {names:?}");
        }
        assert!(
            !names.iter().any(|name| name.contains("above")),
            "{names:?}"
        );
    }
}
