//! Recognising the warehouse in locations other engines wrote: every spelling of a
//! location that may denote objects of this warehouse.
//!
//! A source table's location is written by whatever engine owns the table, in whatever
//! spelling it uses: a plain absolute path (`/data/wh/indexes/src/`, DataFusion's usual
//! form), `file:/`, `file:///` or `file://localhost/` URIs in any case of the scheme,
//! Hadoop's `s3a://` and `s3n://`, S3's HTTPS URLs (virtual-hosted and path-style, a
//! local server's `http://127.0.0.1:9000/bucket/...`), doubled slashes, `.` and `..`
//! segments, percent-escapes, and on the local file system symbolic links to the
//! warehouse. Publication (which refuses a source table inside the warehouse's managed or
//! bookkeeping prefixes) and reachability (which keeps everything a source names) both ask
//! [`NameReader::names_of_location`], so what one refuses the other keeps.
//!
//! When a spelling may mean two things (a doubled slash is a distinct S3 key to S3 itself
//! but the same directory to Hadoop; a `%41` is an escape in a URI but two characters in
//! a path), every reading counts: the answer is the set of names any reading denotes.
//! Locations under another scheme (`gs://`, `hdfs://`, `abfss://`), another bucket, or
//! outside the root denote nothing here. A relative path is resolved against an engine's
//! working directory, which no catalog knows; on a local warehouse it is read against the
//! warehouse directory too (an engine may run there).

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use percent_encoding::percent_decode_str;

use super::links::{Links, clamp_dots, every_managed_prefix};
use super::{Warehouse, object_name};

/// One reading of a location: where it is, and the path (or key) below that.
enum Reading {
    /// A path on the local file system.
    Local(String),
    /// A key in an S3 bucket.
    Bucket { bucket: String, key: String },
    /// A path under another URI authority (`memory://`, ...), compared as the root URI is.
    Other {
        scheme: String,
        authority: String,
        path: String,
    },
    /// Anything: a reader's path climbs out of what the location shows (`..` after a cut
    /// that reaches past the bucket). Read as the root, and as a give-up.
    Anywhere,
    /// A relative local path (behind GDAL's prefixes: `/vsizip/indexes/…`), read from every
    /// directory a reader may stand in, as a relative location is.
    Relative(String),
}

impl Warehouse {
    /// [`NameReader::names_of_location`] of one location.
    #[cfg(test)]
    pub(crate) fn names_of_location(&self, location: &str) -> Vec<String> {
        self.name_reader().names_of_location(location)
    }

    /// A reader of many locations with one view of the local file system's links (see
    /// [`NameReader`]): what one metadata file's strings name.
    /// A [`name_reader`](Self::name_reader) for the strings of a file that is no
    /// metadata, which also observes where they lead outside the warehouse
    /// ([`NameReader::leads_outside`]).
    pub(crate) fn family_name_reader(&self) -> NameReader<'_> {
        let mut reader = self.name_reader();
        if let Some(links) = reader.links.as_mut() {
            links.observe_outside();
        }
        reader
    }

    pub(crate) fn name_reader(&self) -> NameReader<'_> {
        NameReader {
            warehouse: self,
            unbounded: false,
            budget: MAX_EXPANSION_BYTES,
            links: self
                .local
                .as_ref()
                .map(|dir| Links::new(dir, self.local_as_given.as_deref().map(PathBuf::as_path))),
        }
    }

    /// The names `location` may denote, and whether reading it gave up at a bound (too
    /// many alternatives: it may name anything).
    fn names_of_location_with(
        &self,
        location: &str,
        links: &mut Option<Links>,
        budget: &mut usize,
    ) -> (Vec<String>, bool) {
        let mut gave_up = false;
        // In the order found, each once: a set beside the list keeps the thousands of names
        // of a wide brace group linear (round 121, F4).
        let mut names: Vec<String> = Vec::new();
        let mut seen: HashSet<String> = HashSet::new();
        // Behind an archive's prefix (`/vsizip//wh/indexes/src/a.zip/t.parquet`,
        // `GPKG:/wh/…/a.gpkg:layer`) a reader opens a file above the path (the archive):
        // each name also names its table's directory (round 126, L1).
        let archive = archive_form(location);
        let mut add = |found: Vec<String>| {
            for name in found {
                let table = archive.then(|| table_of(&name)).flatten();
                for name in std::iter::once(name).chain(table) {
                    if seen.insert(name.clone()) {
                        names.push(name);
                    }
                }
            }
        };
        // Trimmed (as a reader that trims reads it) and exactly as written, white space at
        // its ends included (a reader that does not trim: round 54, W1).
        let mut all = pieces(location.trim());
        for piece in pieces(location) {
            if !all.contains(&piece) {
                all.push(piece);
            }
        }
        for piece in all {
            let piece = piece.as_str();
            match alternatives(piece, budget) {
                Some(paths) => {
                    for path in &paths {
                        let (found, anywhere) = self.names_of_path(path, links);
                        add(found);
                        gave_up |= anywhere;
                    }
                }
                // So many alternatives they may name anything: every managed prefix.
                // Marked as a give-up, so that a string in a file keeps everything rather
                // than being taken for a stray note naming `indexes` (round 49, B).
                None => {
                    add(self.names_of_path(piece, links).0);
                    add(every_managed_prefix());
                    gave_up = true;
                }
            }
        }
        (names, gave_up)
    }

    /// [`NameReader::names_of_location`] of one path (no list, no braces read
    /// as alternatives), and whether a reading of it may name anything
    /// ([`Reading::Anywhere`]).
    fn names_of_path(&self, location: &str, links: &mut Option<Links>) -> (Vec<String>, bool) {
        let mut names = Vec::new();
        // Each reading, with whether its directories are walked for links and whether it
        // is a relative path read from a directory other than the warehouse's.
        let mut relatives = relative_forms(location);
        let mut all: Vec<(Reading, bool, bool)> = Vec::new();
        for reading in readings(location) {
            match reading {
                Reading::Relative(path) => relatives.push((path, false)),
                reading => all.push((reading, true, false)),
            }
        }
        // A relative path is resolved against an engine's working directory (or home), which
        // no catalog knows; on a local warehouse that may be the warehouse directory or any
        // directory above it, as resolved or as configured (the default warehouse is
        // `./warehouse`, maybe a link to another disk: an engine started where the catalog
        // was reads `warehouse/indexes/…`; rounds 46 and 47, A5, S1, S2), this process's
        // working directory, and for `~` its home (H). A single word is not walked for
        // links from a directory above the warehouse (every word of a file's free text would
        // walk a top-level directory); a path is (round 47, R).
        if let (Some(dir), Some(view)) = (&self.local, links.as_mut()) {
            let bases = view.bases().to_vec();
            let home = std::env::var_os("HOME").map(PathBuf::from);
            for (relative, after_tilde) in relatives {
                // Its first segment as written and with its dots resolved by text (a
                // lexical reader takes `x/../indexes` for `indexes`).
                let clamped = clamp_dots(&relative);
                let firsts: Vec<&str> = [relative.as_str(), clamped.as_str()]
                    .iter()
                    .map(|form| form.split('/').next().unwrap_or_default())
                    .collect();
                let read_anyway = firsts.iter().any(|first| {
                    first.is_empty()
                        || *first == "."
                        || *first == ".."
                        || first.contains(PATTERN_OR_ESCAPE)
                });
                let homes = home.iter().filter(|_| after_tilde).cloned();
                let mut seen = Vec::new();
                for base in bases.iter().cloned().chain(homes) {
                    if seen.contains(&base) {
                        continue;
                    }
                    seen.push(base.clone());
                    // A path whose first segment is not there reaches nothing from here.
                    if !read_anyway && !firsts.iter().any(|first| view.exists(&base.join(first))) {
                        continue;
                    }
                    let elsewhere = base.as_path() != dir.as_path();
                    let walk = !elsewhere || relative.contains('/') || view.walks_words();
                    let base = base.display().to_string();
                    let path = format!("{}/{relative}", base.trim_end_matches('/'));
                    all.push((Reading::Local(path), walk, elsewhere));
                }
            }
        }
        let anywhere = all
            .iter()
            .any(|(reading, _, _)| matches!(reading, Reading::Anywhere));
        for (reading, walk, elsewhere) in all {
            if let Some(links) = links.as_mut() {
                links.set_walking(walk);
                links.set_elsewhere(elsewhere);
            }
            for path in spellings(&reading) {
                // The path as written (object names may hold `*` or `[`), and, read as a
                // pattern (DataFusion reads `*`, `?`, `[` and `{` in a path as a glob),
                // anything below its literal directory: that directory, or, if the root
                // lies below it, every managed prefix.
                let mut found: Vec<String> =
                    self.name_below_root(&reading, &path).into_iter().collect();
                // A table at the root or above it may read every object of the warehouse
                // (a recursive listing of its directory).
                if self.at_or_above_root(&reading, &path) {
                    found.extend(every_managed_prefix());
                }
                if let Some(literal) = glob_prefix(&path) {
                    match self.name_below_root(&reading, literal) {
                        Some(name) => found.push(name),
                        None if self.at_or_above_root(&reading, literal) => {
                            found.extend(every_managed_prefix())
                        }
                        None => {}
                    }
                }
                // On the local file system, every spelling (dots resolved, escapes
                // decoded) and a pattern's literal directory may also reach the warehouse
                // through a link or another mount of it.
                if let (Reading::Local(_), Some(links)) = (&reading, links.as_mut()) {
                    let absolute = |path: &str| format!("/{}", path.trim_start_matches('/'));
                    found.extend(links.linked_names(Path::new(&absolute(&path))));
                    if let Some(literal) = glob_prefix(&path) {
                        found.extend(links.linked_names(Path::new(&absolute(literal))));
                    }
                }
                for name in found {
                    if !names.contains(&name) {
                        names.push(name);
                    }
                }
            }
            // The path as written, and decoded (an engine that decodes a `file:` URI hands
            // the decoded path to the file system): through its links as the file system
            // resolves it, `..` after a link included, and through the links a pattern
            // before a `..` may match (round 41, F1 and F2).
            // Decoded to bytes too (a link's name need not be UTF-8: `%FF` is the byte), and
            // with U+FFFD for what is no UTF-8, as Java's and Python's decoders do (round 42,
            // G1–G3); a pattern's literal directory through its links as well.
            if let (Reading::Local(path), Some(links)) = (&reading, links.as_mut()) {
                use std::os::unix::ffi::OsStrExt;
                let bytes: Vec<u8> = percent_decode_str(path).collect();
                let lossy = String::from_utf8_lossy(&bytes).into_owned();
                // A pattern in a path that is no UTF-8 once decoded is matched as bytes by
                // some readers; not read here, so it may name anything.
                let mut found = Vec::new();
                if std::str::from_utf8(&bytes).is_err() && bytes.iter().any(|b| b"*?[{".contains(b))
                {
                    found.extend(links.anything());
                }
                found.extend(links.linked_names(Path::new(std::ffi::OsStr::from_bytes(&bytes))));
                // And with backslash escapes removed, as a shell, `glob(3)` and Hadoop's
                // globber read them (`plain/\s/` opens `plain/s/`; round 44, J2).
                let mut forms = vec![path.clone(), lossy];
                forms.extend(
                    forms
                        .iter()
                        .filter_map(|form| without_escapes(form))
                        .collect::<Vec<_>>(),
                );
                for written in forms.iter().map(String::as_str) {
                    found.extend(links.linked_names(Path::new(written)));
                    if let Some(literal) = glob_prefix(written) {
                        found.extend(links.linked_names(Path::new(literal)));
                    }
                    found.extend(links.through_patterns(written));
                }
                for name in found {
                    if !names.contains(&name) {
                        names.push(name);
                    }
                }
            }
        }
        if let Some(links) = links.as_mut() {
            links.set_walking(true);
            links.set_elsewhere(false);
        }
        (names, anywhere)
    }

    /// The name the relative path `path` denotes when resolved against the directory
    /// `dir` (a name; `""` for the root) as a file system resolves it: empty and `.`
    /// segments dropped, `..` going up, past the root too and back in through the root's
    /// own path. Literal: no pattern, list or link is read (a name of another format's
    /// file, not a table location).
    pub(crate) fn resolve_relative(&self, dir: &str, path: &str) -> Option<String> {
        if path.starts_with('/') {
            return None;
        }
        let root = self.root_segments.join("/");
        let resolved = clamp_dots(&format!("{root}/{dir}/{path}"));
        let below = match root.is_empty() {
            true => resolved.as_str(),
            false => resolved.strip_prefix(root.as_str())?.strip_prefix('/')?,
        };
        object_name(below).ok()
    }

    /// Whether `path` (one spelling of `reading`) is the root or one of its ancestors.
    fn at_or_above_root(&self, reading: &Reading, path: &str) -> bool {
        if !self.same_place(reading) {
            return false;
        }
        let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
        segments.len() <= self.root_segments.len()
            && segments
                .iter()
                .zip(&self.root_segments)
                .all(|(segment, root)| segment == root)
    }

    /// Whether `reading` is in the root's store (the same bucket, file system or URI
    /// authority).
    fn same_place(&self, reading: &Reading) -> bool {
        let root = &self.root;
        match reading {
            Reading::Local(_) => root.scheme() == "file",
            Reading::Anywhere => true,
            Reading::Relative(_) => false,
            Reading::Bucket { bucket, .. } => {
                root.scheme() == "s3"
                    && root
                        .host_str()
                        .is_some_and(|host| host.eq_ignore_ascii_case(bucket))
            }
            Reading::Other {
                scheme, authority, ..
            } => {
                root.scheme() == scheme
                    && root.host_str().unwrap_or("") == authority
                    && root.scheme() != "file"
                    && root.scheme() != "s3"
            }
        }
    }

    /// The name of `path` (one spelling of `reading`), if it lies strictly below the root.
    fn name_below_root(&self, reading: &Reading, path: &str) -> Option<String> {
        if !self.same_place(reading) {
            return None;
        }
        let mut segments = path.split('/').filter(|s| !s.is_empty());
        for root_segment in &self.root_segments {
            if segments.next()? != root_segment {
                return None;
            }
        }
        let rest: Vec<&str> = segments.collect();
        if rest.is_empty() {
            return None;
        }
        object_name(&rest.join("/")).ok()
    }
}

/// A location, and each piece of it another reader may take for the location: what a C
/// reader keeps before a NUL, what `trim()` in Java or `strip()` in Python leaves of
/// control characters at its ends, and the words a shell or a list reader splits it into
/// (on control characters, `;` and whitespace; commas are read as lists by
/// [`alternatives`]). Round 45, N.
fn pieces(location: &str) -> Vec<String> {
    let mut pieces = vec![location.to_owned()];
    // Known pieces in a set: a long location of many words must not cost their square
    // (round 119: 32,000 words took minutes).
    let mut known: std::collections::HashSet<String> = pieces.iter().cloned().collect();
    let mut add = |pieces: &mut Vec<String>, piece: &str| {
        if !piece.is_empty() && known.insert(piece.to_owned()) {
            pieces.push(piece.to_owned());
        }
    };
    // What a shell makes of the text, in every combination (rounds 49 and 50: Q, D, and
    // their bypasses): a backslash-newline removed (a line continuation), ANSI-C and locale
    // quoting (`$'…'`, `$"…"`) read as quotes with `\\xHH` and `\\NNN` escapes decoded,
    // quotes removed anywhere in a word; then `+` read as a space by a form decoder. Each
    // reading is split into words as well.
    let mut shell = vec![location.to_owned()];
    for transform in [
        without_line_continuations as fn(&str) -> String,
        ansi_c_quoting,
        without_quotes,
        plus_as_space,
    ] {
        for text in shell.clone() {
            let changed = transform(&text);
            if !shell.contains(&changed) {
                shell.push(changed);
            }
        }
    }
    for text in &shell {
        add(&mut pieces, text);
        for piece in text
            .split(|c: char| c.is_control() || c == ';')
            .chain(text.split_whitespace())
            .map(|piece| {
                piece.trim_matches(|c: char| {
                    c.is_control() || c.is_whitespace() || matches!(c, '\'' | '"')
                })
            })
        {
            add(&mut pieces, piece);
        }
    }
    // A dataset written inline as XML (GDAL's `<OGRVRTDataSource>…<SrcDataSource>p<…`,
    // `<VRTDataset>…<SourceFilename>p<…`): the text between its tags and its attributes'
    // values, with character references and CDATA decoded (round 128, N1).
    for text in pieces.clone() {
        if text.contains('<') {
            let decoded = xml_text(&text);
            for part in decoded.split(['<', '>', '"', '\'', '=']) {
                add(&mut pieces, part.trim());
            }
        }
    }
    // GDAL's driver prefixes (`PARQUET:/p`, `NETCDF:/p/f.nc:var`, `GTIFF_DIR:1:/p`,
    // `DERIVED_SUBDATASET:AMPLITUDE:GTIFF_DIR:1:p`): what follows the leading fields (those
    // before the first `/`), whole and up to its next `:` (a subdataset's name follows;
    // rounds 126 and 127, L1, M3); before a URL (`WMS:https://…`), the URL.
    for text in pieces.clone() {
        let head = text.find('/').map_or(text.as_str(), |slash| &text[..slash]);
        let Some(colon) = head.rfind(':') else {
            continue;
        };
        let rest = &text[colon + 1..];
        if rest.starts_with("//") {
            if let Some(scheme) = head[..colon].rfind(':') {
                add(&mut pieces, &text[scheme + 1..]);
            }
            continue;
        }
        add(&mut pieces, rest);
        if let Some((path, _)) = rest.split_once(':') {
            add(&mut pieces, path);
        }
    }
    // A `file:` URL as the WHATWG URL standard parses it (the `url` crate, so DataFusion's
    // `ListingTableUrl`): controls and spaces around it and tabs and line breaks anywhere
    // dropped, a backslash read as a `/` (round 47, W; round 48, N8, N9).
    for text in pieces.clone() {
        for link in text.split("::") {
            add(&mut pieces, link);
            // fsspec: `local://` is `file://`, and the rest of `file://rest` is a path
            // relative to the reader (`file://wh/…`, `file://~/…`; round 48, F1–F4).
            let file = match link.get(..8) {
                Some(scheme) if scheme.eq_ignore_ascii_case("local://") => {
                    format!("file://{}", &link[8..])
                }
                _ => link.to_owned(),
            };
            add(&mut pieces, &file);
            if let Some(rest) = file
                .get(..7)
                .filter(|scheme| scheme.eq_ignore_ascii_case("file://"))
                .map(|_| &file[7..])
            {
                add(&mut pieces, rest);
            }
            if let Ok(url) = url::Url::parse(&file)
                && url.scheme() == "file"
            {
                add(&mut pieces, url.path());
                if let Some(host) = url.host_str() {
                    add(&mut pieces, &format!("{host}{}", url.path()));
                }
            }
        }
    }
    // Any URL as the WHATWG URL standard parses it (the `url` crate: object_store's
    // `parse_url` and `AmazonS3Builder::with_url`, DataFusion's `ListingTableUrl`): tabs
    // and line breaks dropped anywhere, a backslash read as `/` and any number of slashes
    // after a special scheme (`https:b.s3…`, `https:///b.s3…`), the host of one
    // percent-decoded and IDNA-mapped (fullwidth letters, `。`, soft hyphens), and `?` or
    // `#` ending the authority (`s3://b?/wh/…` reads the bucket's root): its serialisation,
    // and the same without its query and fragment (GC round 118, F1).
    for text in pieces.clone() {
        if let Ok(mut url) = url::Url::parse(&text) {
            add(&mut pieces, url.as_str());
            url.set_query(None);
            url.set_fragment(None);
            add(&mut pieces, url.as_str());
        }
    }
    pieces
}

/// `text` with XML's character references (`&#101;`, `&#x2F;`, `&amp;` and the other
/// four) decoded and CDATA's markers removed; a reference it cannot decode stays as
/// written.
fn xml_text(text: &str) -> String {
    let text = text.replace("<![CDATA[", "").replace("]]>", "");
    let mut parts = text.split('&');
    let mut out = parts.next().unwrap_or_default().to_owned();
    for part in parts {
        let decoded = part
            .split_once(';')
            .and_then(|(name, after)| Some((xml_reference(name)?, after)));
        match decoded {
            Some((c, after)) => {
                out.push(c);
                out.push_str(after);
            }
            None => {
                out.push('&');
                out.push_str(part);
            }
        }
    }
    out
}

/// The character an XML reference's name (between `&` and `;`) stands for.
fn xml_reference(name: &str) -> Option<char> {
    let code = match name {
        "amp" => return Some('&'),
        "lt" => return Some('<'),
        "gt" => return Some('>'),
        "quot" => return Some('"'),
        "apos" => return Some('\''),
        _ => match name.strip_prefix("#x").or_else(|| name.strip_prefix("#X")) {
            Some(hex) => u32::from_str_radix(hex, 16).ok()?,
            None => name.strip_prefix('#')?.parse().ok()?,
        },
    };
    char::from_u32(code)
}

/// `text` without backslash-newlines (a shell's line continuation, even inside double
/// quotes).
fn without_line_continuations(text: &str) -> String {
    text.replace("\\\r\n", "").replace("\\\n", "")
}

/// `text` with ANSI-C and locale quoting read as plain quotes (`$'…'`, `$"…"`), and the
/// escapes ANSI-C quoting decodes (`\\xHH`, `\\NNN` octal) decoded everywhere.
fn ansi_c_quoting(text: &str) -> String {
    let text = text.replace("$'", "'").replace("$\"", "\"");
    let mut out = String::new();
    let mut rest = text.as_str();
    while let Some(at) = rest.find('\\') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        let (radix, digits) = match after.strip_prefix('x') {
            Some(hex) => (
                16,
                hex.chars()
                    .take(2)
                    .take_while(char::is_ascii_hexdigit)
                    .count(),
            ),
            None => (
                8,
                after
                    .chars()
                    .take(3)
                    .take_while(|c| ('0'..='7').contains(c))
                    .count(),
            ),
        };
        let start = usize::from(radix == 16);
        match u8::from_str_radix(&after[start..start + digits], radix) {
            Ok(byte) if digits > 0 && byte.is_ascii() => {
                out.push(char::from(byte));
                rest = &after[start + digits..];
            }
            _ => {
                out.push('\\');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// `text` with every quote removed, as a shell removes them from a word.
fn without_quotes(text: &str) -> String {
    text.chars().filter(|c| !matches!(c, '\'' | '"')).collect()
}

/// `text` with `+` read as a space, as a form decoder reads it.
fn plus_as_space(text: &str) -> String {
    text.replace('+', " ")
}

/// The most paths one location is read as (see [`alternatives`]).
const MAX_ALTERNATIVES: usize = 4096;

/// The most bytes the brace expansions of one [`NameReader`] (one file's strings, one
/// metadata file's sources) may write before they give up ([`alternatives`] is then
/// `None`: the location may name anything). Groups whose choices expand alike
/// (`{a,a}{a,a}…`, `{a,{a}}…`) keep the output at one path while the work doubles with
/// each group: the work is capped, not only the output (GC round 119, F3: sixty such
/// groups in a stray file stopped every run for good), and for the whole file, not each
/// string (round 120, F2: a thousand strings, each within the cap, did). A location
/// without braces costs nothing.
const MAX_EXPANSION_BYTES: usize = 16 << 20;

/// Every path a location may stand for: itself, and, as Hadoop's `FileInputFormat` and
/// Spark read an input, each part of a comma-separated list (commas outside braces), each
/// with its brace alternatives expanded (`/data/{a,b}/` is `/data/a/` and `/data/b/`,
/// nested braces too, as `GlobExpander` does before `..` is resolved: an alternative
/// `{src,../wh/indexes/old}` climbs out of the literal directory). `None` if there are more
/// than [`MAX_ALTERNATIVES`] (round 35 G4).
fn alternatives(location: &str, budget: &mut usize) -> Option<Vec<String>> {
    let mut out = vec![location.to_owned()];
    let mut seen: std::collections::HashSet<String> = out.iter().cloned().collect();
    let parts = split_outside_braces(location);
    for part in std::iter::once(location).chain(if parts.len() > 1 { parts } else { Vec::new() }) {
        for path in expand_braces(part.trim(), budget)? {
            if seen.insert(path.clone()) {
                out.push(path);
            }
            if out.len() > MAX_ALTERNATIVES {
                return None;
            }
        }
    }
    Some(out)
}

/// `text` split at the commas outside braces (a backslash escapes the next character).
fn split_outside_braces(text: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut depth, mut escaped, mut from) = (0usize, false, 0);
    for (at, c) in text.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' => escaped = true,
            '{' => depth += 1,
            '}' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                parts.push(&text[from..at]);
                from = at + 1;
            }
            _ => {}
        }
    }
    parts.push(&text[from..]);
    parts
}

/// The first brace group of `text` (outside escapes) and its matching closing brace.
fn first_group(text: &str) -> Option<(usize, usize)> {
    let (mut depth, mut escaped, mut open) = (0usize, false, None);
    for (at, c) in text.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' => escaped = true,
            '{' => {
                if depth == 0 {
                    open = Some(at);
                }
                depth += 1;
            }
            '}' if depth > 0 => {
                depth -= 1;
                if depth == 0 {
                    return open.map(|open| (open, at));
                }
            }
            _ => {}
        }
    }
    None
}

/// `text` with every brace group expanded into its alternatives; `None` past
/// [`MAX_ALTERNATIVES`] paths, or once the expansion has written `budget` bytes.
fn expand_braces(text: &str, budget: &mut usize) -> Option<Vec<String>> {
    let Some((open, close)) = first_group(text) else {
        return Some(vec![text.to_owned()]);
    };
    *budget = budget.checked_sub(text.len() + 1)?;
    let (head, body, tail) = (&text[..open], &text[open + 1..close], &text[close + 1..]);
    let mut out: Vec<String> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    let mut choices = std::collections::HashSet::new();
    for choice in split_outside_braces(body) {
        if !choices.insert(choice) {
            continue;
        }
        for path in expand_braces(&format!("{head}{choice}{tail}"), budget)? {
            if seen.insert(path.clone()) {
                out.push(path);
            }
            if out.len() > MAX_ALTERNATIVES {
                return None;
            }
        }
    }
    Some(out)
}

/// The readings of a location: what place and path it names.
fn readings(location: &str) -> Vec<Reading> {
    let mut readings = scheme_readings(location);
    readings.extend(bucket_path_readings(location));
    readings.extend(gdal_readings(location));
    readings
}

/// What GDAL reads in a location that holds its virtual file systems anywhere
/// ([`gdal_prefixes`]). Each occurrence is read up to the next one (GDAL may read a later
/// one, behind a prefix of its own), and up to a `}` (the end of an archive's path in
/// `/vsizip/{…}/…`); the first of each kind also to the end, as GDAL reads it. A cut path
/// names a directory above what GDAL reads (more, never less) once it climbs one directory
/// for every `..` segment after the cut (curl resolves them: round 126, K1), and the work
/// stays linear in the location's length however many occurrences it holds (round 124,
/// J0: reading each to the end was quadratic, and 240 KB stopped every run). A climb past
/// the bucket (or a URL's host, or a local path's top) may lead anywhere.
fn gdal_readings(location: &str) -> Vec<Reading> {
    let found = gdal_prefixes(location);
    let dot_dots = dot_dot_segments(location);
    let mut readings = Vec::new();
    let mut wholly_read: Vec<Gdal> = Vec::new();
    for (index, &(at, length, kind)) in found.iter().enumerate() {
        let next = found[index..]
            .iter()
            .map(|&(next, _, _)| next)
            .find(|&next| next > at)
            .unwrap_or(location.len());
        let whole = !wholly_read.contains(&kind) && next < location.len();
        wholly_read.push(kind);
        for end in [Some(next), whole.then_some(location.len())]
            .into_iter()
            .flatten()
        {
            let climb = dot_dots.len() - dot_dots.partition_point(|&dots| dots < end);
            let start = at + length;
            let rest = location.get(start..end.max(start)).unwrap_or("");
            readings.extend(gdal_reading(kind, rest, climb));
        }
    }
    // GDAL reads every option after its first `/vsicurl?`, a value holding `/vsicurl` or
    // `/vsis3/` included: the `url` options of the whole tail, in one pass (round 125, K0).
    if let Some(&(at, length, _)) = found.iter().find(|&&(_, _, kind)| kind == Gdal::Url) {
        let tail = location[at + length..].trim_start_matches(['/', '?']);
        for url in gdal_url_options(tail) {
            readings.extend(url_readings(&url));
        }
    }
    readings
}

/// The kinds of GDAL's virtual file systems: over an S3 API, whose path is `bucket/key`
/// (`/vsis3/B/k`, also after a driver prefix, `PARQUET:/vsis3/…`, or inside a chain,
/// `/vsizip//vsis3/…`; round 122, G4); over a URL (`/vsicurl/https://…`, or with options,
/// `/vsicurl?…&url=<percent-encoded URL>`: round 123, H2); and over a file system path
/// (`/vsizip//data/a.zip/t.parquet`, `/vsigzip/…`, `/vsitar/…`, and every other: round
/// 126, L1), whose options (`/vsicached?file=/data/…`) are paths too.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Gdal {
    Bucket,
    Url,
    Path,
}

/// Every GDAL virtual file system prefix in `location` (`/vsi` and a name, then `/`, or
/// `?` for options): where it begins, its length, and its kind. A URL prefix's length stops
/// before its `/` or `?`; the others' include the `/`.
fn gdal_prefixes(location: &str) -> Vec<(usize, usize, Gdal)> {
    // GDAL's `vrt://` connection string: a path (absolute or relative) and options
    // (round 127, M2); any case.
    let lower = location.to_ascii_lowercase();
    let mut found: Vec<(usize, usize, Gdal)> = lower
        .match_indices("vrt://")
        .map(|(at, _)| (at, 6, Gdal::Path))
        .collect();
    for (at, _) in location.match_indices("/vsi") {
        let after = &location[at + 4..];
        let name_length = after
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(after.len());
        let name = &after[..name_length];
        let kind = match name {
            "s3" | "s3_streaming" | "gs" | "gs_streaming" | "oss" | "oss_streaming" => Gdal::Bucket,
            "curl" | "curl_streaming" => Gdal::Url,
            _ => Gdal::Path,
        };
        let length = 4 + name_length;
        match (kind, after[name_length..].chars().next()) {
            (Gdal::Url, Some('/' | '?')) | (Gdal::Path, Some('?')) => {
                found.push((at, length, kind))
            }
            (_, Some('/')) => found.push((at, length + 1, kind)),
            _ => {}
        }
    }
    found.sort_unstable_by_key(|&(at, _, _)| at);
    found
}

/// The readings of what follows one GDAL prefix of `kind` (see [`gdal_readings`]), cut
/// where `climb` more `..` segments follow.
fn gdal_reading(kind: Gdal, rest: &str, climb: usize) -> Vec<Reading> {
    let mut readings = Vec::new();
    match kind {
        Gdal::Bucket => {
            let archive = rest.split('}').next().unwrap_or(rest);
            for path in [rest, archive] {
                // Path-style, `..` may leave the bucket: the whole path resolved too.
                match climbed(path, climb, 0) {
                    Some(path) => {
                        readings.extend(bucket_path_readings(&format!("s3://{path}")));
                        let resolved = clamp_dots(&path);
                        readings.extend(bucket_path_readings(&format!("s3://{resolved}")));
                    }
                    None => readings.push(Reading::Anywhere),
                }
            }
        }
        Gdal::Url => {
            // `/vsicurl/URL`, or options after `/vsicurl?` or (when what follows is not
            // a URL) after `/vsicurl/`: both readings of either (round 124, J1).
            let Some(after) = rest.strip_prefix('/').or_else(|| rest.strip_prefix('?')) else {
                return readings;
            };
            for url in std::iter::once(after.to_owned()).chain(gdal_url_options(after)) {
                let floor = if url.contains("://") { 2 } else { 0 };
                match climbed(&url, climb, floor) {
                    Some(url) => readings.extend(url_readings(&url)),
                    None => readings.push(Reading::Anywhere),
                }
            }
        }
        Gdal::Path => {
            // A path (relative ones from a reader's working directory: round 127, M1), an
            // archive's path in braces, or options' values, after `?` or after the prefix's
            // `/`, split at `&` or `,` (`/vsicrypt/key=…,file=/p`: M4).
            let rest = rest.strip_prefix('?').unwrap_or(rest);
            let mut paths = vec![rest.to_owned()];
            if let Some(braced) = rest.strip_prefix('{') {
                paths.push(braced.split('}').next().unwrap_or(braced).to_owned());
            }
            for option in rest.split(['&', ',']) {
                if let Some((_, value)) = option.split_once('=') {
                    paths.push(value.to_owned());
                    paths.push(percent_decode_str(value).decode_utf8_lossy().into_owned());
                }
            }
            for path in paths.iter().filter(|path| !path.is_empty()) {
                match climbed(path, climb, 0) {
                    Some(path) if path.starts_with('/') => readings.push(Reading::Local(path)),
                    Some(path) => readings.push(Reading::Relative(path)),
                    None => readings.push(Reading::Anywhere),
                }
            }
        }
    }
    readings
}

/// Whether `location` holds a GDAL prefix (`/vsi…`) or begins with a driver's
/// (`PARQUET:/…`, a field without a slash before a `:` that no `//` follows), behind which
/// a reader may open a file above the path it names (an archive, a container).
fn archive_form(location: &str) -> bool {
    location.contains("/vsi")
        || location.to_ascii_lowercase().contains("vrt://")
        || location
            .split_once(':')
            .is_some_and(|(field, rest)| !field.contains('/') && !rest.starts_with("//"))
}

/// The directory of the table a name lies in (`indexes/t/x/y` → `indexes/t`), where that
/// differs from the name and is no managed prefix.
fn table_of(name: &str) -> Option<String> {
    let mut segments = name.splitn(3, '/');
    let (prefix, table, _) = (segments.next()?, segments.next()?, segments.next()?);
    Some(format!("{prefix}/{table}"))
}

/// Where each `..` segment of `text` begins.
fn dot_dot_segments(text: &str) -> Vec<usize> {
    let mut at = 0;
    let mut found = Vec::new();
    for segment in text.split('/') {
        if segment == ".." {
            found.push(at);
        }
        at += segment.len() + 1;
    }
    found
}

/// `path` followed by `climb` more `..` segments, or `None` if they climb into its first
/// `floor` segments or past its last (its bucket, or a URL's scheme and host: a
/// path-style reader then takes the bucket from what follows).
fn climbed(path: &str, climb: usize, floor: usize) -> Option<String> {
    if climb == 0 {
        return Some(path.to_owned());
    }
    let segments = clamp_dots(path)
        .split('/')
        .filter(|s| !s.is_empty())
        .count();
    (segments > floor + climb).then(|| format!("{path}{}", "/..".repeat(climb)))
}

/// The URLs GDAL's `/vsicurl` options give (`url=…`): options are split at `&` (outside
/// double quotes, which are dropped, and also plainly), each is percent-decoded, then
/// split at its first `=` or `:`, and a key of any case `url` gives its value (round 124,
/// J2; GDAL's `VSICurlGetURLFromFilename`). Every such value counts, not just GDAL's last.
fn gdal_url_options(options: &str) -> Vec<String> {
    let mut tokens: Vec<String> = options.split('&').map(str::to_owned).collect();
    let mut token = String::new();
    let mut quoted = false;
    let mut chars = options.chars();
    while let Some(c) = chars.next() {
        match c {
            '"' => quoted = !quoted,
            '\\' if quoted => token.extend(chars.next()),
            '&' if !quoted => tokens.push(std::mem::take(&mut token)),
            c => token.push(c),
        }
    }
    tokens.push(token);
    let mut urls = Vec::new();
    for token in &tokens {
        let decoded = percent_decode_str(token).decode_utf8_lossy();
        for separator in ['=', ':'] {
            for text in [decoded.as_ref(), token.as_str()] {
                if let Some((key, value)) = text.split_once(separator)
                    && key.trim().eq_ignore_ascii_case("url")
                {
                    urls.push(value.to_owned());
                    urls.push(percent_decode_str(value).decode_utf8_lossy().into_owned());
                }
            }
        }
    }
    urls.sort_unstable();
    urls.dedup();
    urls
}

/// The readings of a URL handed to a URL client (libcurl under GDAL), as written and as
/// the URL standard normalises it: a percent-encoded or full-width host is decoded and
/// mapped (round 123, H3; `pieces` does the same for a location that is a URL).
fn url_readings(url: &str) -> Vec<Reading> {
    let mut readings = scheme_readings(url);
    if let Ok(parsed) = url::Url::parse(url) {
        readings.extend(scheme_readings(parsed.as_str()));
    }
    readings
}

/// s3fs's own path form, which every path an `S3FileSystem` is handed goes through
/// (`fs.ls`, `fs.open`, pyarrow and pandas given `filesystem=fs`): without every leading
/// `s3::`/`s3a::` (and `s3://`), without leading slashes, the first segment is the bucket.
/// So `B/key`, `/B/key`, `s3a::B/key` and `s3::s3a::B/key` all read bucket `B` (round
/// 121, F1 and F2). A location that is something else reads a bucket name no bucket can
/// have (`file:`), which names nothing. A lone word (`b`, a piece of a list, a property's
/// value) is no path: it takes a scheme or a slash to be read as a bucket.
fn bucket_path_readings(location: &str) -> Vec<Reading> {
    let path = without_s3_schemes(location).trim_start_matches('/');
    let (bucket, key) = path.split_once('/').unwrap_or((path, ""));
    if bucket.is_empty() || path == location && !path.contains('/') {
        return Vec::new();
    }
    query_readings(key)
        .into_iter()
        .map(|key| Reading::Bucket {
            bucket: bucket.to_owned(),
            key: key.to_owned(),
        })
        .collect()
}

/// The readings of a location by its scheme (a path without one is a local path).
fn scheme_readings(location: &str) -> Vec<Reading> {
    let Some((scheme, rest)) = split_scheme(location) else {
        // No scheme: an absolute path is a local file path; a relative one is resolved
        // against an engine's working directory, which nobody here knows.
        return if location.starts_with('/') {
            vec![Reading::Local(location.to_owned())]
        } else {
            Vec::new()
        };
    };
    match scheme.as_str() {
        "file" => {
            // `file:/p`, `file:///p`, `file://localhost/p`, and `file://HOST/p` for any host:
            // readers take `127.0.0.1`, the machine's own name or `~` for this machine
            // (round 46, A3), and which names are this machine nobody here knows.
            let path = match rest.strip_prefix("//") {
                Some(after) => match after.find('/') {
                    Some(at) => &after[at..],
                    None => return Vec::new(),
                },
                None if rest.starts_with('/') => rest,
                None => return Vec::new(),
            };
            // A `?` or `#` ends the path of a URL, but an engine that reads `file:` paths
            // as paths (or as patterns) keeps it: both readings count.
            query_readings(path)
                .into_iter()
                .map(|path| Reading::Local(path.to_owned()))
                .collect()
        }
        // An S3 location (see `S3_SCHEMES`).
        scheme if S3_SCHEMES.contains(&scheme) => match rest.strip_prefix("//") {
            Some(after) => {
                let (authority, key) = after.split_once('/').unwrap_or((after, ""));
                // `s3://reader@bucket/…` and `s3://bucket:443/…` read `bucket`:
                // object_store and the URL parsers readers use take the host alone (GC
                // round 117, F1).
                let keys = query_readings(key);
                let mut readings: Vec<Reading> = hosts(authority)
                    .into_iter()
                    .flat_map(|bucket| {
                        keys.iter().map(move |key| Reading::Bucket {
                            bucket: bucket.to_owned(),
                            key: (*key).to_owned(),
                        })
                    })
                    .collect();
                // fsspec strips each of its protocols in turn, by `://` or `::`
                // (`s3://s3a://bucket/…`, `s3://s3a::bucket/…`; round 120, F1): what is
                // left is read as a location without an authority.
                let inner = without_s3_schemes(after);
                if inner.len() < after.len() {
                    // Not `readings`: what GDAL reads in the string is read once, from the
                    // whole location (a nested call per `/vsicurl/` doubled the work per
                    // occurrence: round 123, H0). `inner` no longer begins with an S3
                    // scheme, so this goes one level deep.
                    let inner = format!("s3:///{}", inner.trim_start_matches('/'));
                    readings.extend(scheme_readings(&inner));
                    readings.extend(bucket_path_readings(&inner));
                }
                // No authority: fsspec and s3fs strip every slash and take the first
                // segment for the bucket (`s3:///bucket/…`; round 119, F2).
                if authority.is_empty() {
                    let trimmed = key.trim_start_matches('/');
                    let (bucket, key) = trimmed.split_once('/').unwrap_or((trimmed, ""));
                    for key in query_readings(key) {
                        readings.push(Reading::Bucket {
                            bucket: bucket.to_owned(),
                            key: key.to_owned(),
                        });
                    }
                }
                readings
            }
            None => Vec::new(),
        },
        "http" | "https" => {
            let Some(after) = rest.strip_prefix("//") else {
                return Vec::new();
            };
            let (authority, path) = after.split_at(after.find('/').unwrap_or(after.len()));
            let host = host_of(authority);
            let path = strip_query(path);
            let mut readings = Vec::new();
            let trimmed = path.trim_start_matches('/');
            // Virtual-hosted style: the bucket is the host up to a label boundary (bucket
            // names may hold dots: `my.bucket.s3.us-east-1.amazonaws.com`), so every such
            // prefix is a reading, and the whole host (a bucket named for its domain, by
            // CNAME). The key is the path, or, as object_store reads a host of
            // `amazonaws.com` that begins with `s3` (`s3bucket.s3.amazonaws.com`), the path
            // without its first segment (round 119, F1).
            let below_first = trimmed.split_once('/').map_or("", |(_, rest)| rest);
            let dots = host.match_indices('.').map(|(at, _)| at);
            for bucket in dots.map(|at| &host[..at]).chain([host]) {
                for key in [trimmed, below_first] {
                    readings.push(Reading::Bucket {
                        bucket: bucket.to_owned(),
                        key: key.to_owned(),
                    });
                }
            }
            // Path style (S3, MinIO, a local server): the bucket is the first segment, as
            // written and percent-decoded (round 119, F4).
            let (bucket, key) = trimmed.split_once('/').unwrap_or((trimmed, ""));
            let decoded = percent_decode_str(bucket).decode_utf8_lossy();
            for bucket in [bucket, decoded.as_ref()] {
                readings.push(Reading::Bucket {
                    bucket: bucket.to_owned(),
                    key: key.to_owned(),
                });
            }
            readings
        }
        _ => match rest.strip_prefix("//") {
            Some(after) => {
                let (authority, path) = after.split_at(after.find('/').unwrap_or(after.len()));
                hosts(authority)
                    .into_iter()
                    .map(|authority| Reading::Other {
                        scheme: scheme.clone(),
                        authority: authority.to_owned(),
                        path: strip_query(path).to_owned(),
                    })
                    .collect()
            }
            None => Vec::new(),
        },
    }
}

/// The schemes read as S3 locations: S3's own, and those other readers send to an S3 API
/// too (Flink's Presto plugin `s3p`, DuckDB's `r2`, `gs` and `gcs` over an S3-compatible
/// endpoint; round 119, F4; Lance's `s3+ddb` and PyIceberg's `oss`, and fsspec's caching
/// wrappers, whose target protocol may be S3: round 122, G2 and G3; round 123, H1).
const S3_SCHEMES: [&str; 13] = [
    "s3",
    "s3a",
    "s3n",
    "s3p",
    "r2",
    "gs",
    "gcs",
    "s3+ddb",
    "oss",
    "simplecache",
    "filecache",
    "blockcache",
    "cached",
];

/// `text` without every S3 scheme it begins with, each followed by `://` or `::`.
fn without_s3_schemes(mut text: &str) -> &str {
    'strip: loop {
        for scheme in S3_SCHEMES {
            let rest = text
                .get(..scheme.len())
                .filter(|head| head.eq_ignore_ascii_case(scheme))
                .map(|_| &text[scheme.len()..]);
            if let Some(after) =
                rest.and_then(|rest| rest.strip_prefix("://").or_else(|| rest.strip_prefix("::")))
            {
                text = after;
                continue 'strip;
            }
        }
        return text;
    }
}

/// The host of a URL's authority, as URL parsers read it: without the user information
/// (up to the last `@`) and the port (`:443`; an IPv6 literal `[::1]` keeps its colons).
fn host_of(authority: &str) -> &str {
    let host = authority.rsplit('@').next().unwrap_or(authority);
    match host.strip_prefix('[') {
        Some(literal) => literal.find(']').map_or(host, |end| &host[..end + 2]),
        None => host.split(':').next().unwrap_or(host),
    }
}

/// The places an authority may name: its host ([`host_of`]), and the authority as written
/// when that differs (a reader that takes it whole).
fn hosts(authority: &str) -> Vec<&str> {
    let host = host_of(authority);
    match host == authority {
        true => vec![host],
        false => vec![host, authority],
    }
}

/// What makes the first segment of a relative form worth reading from every directory even
/// when no entry of that name is there: a pattern, an escape.
const PATTERN_OR_ESCAPE: [char; 7] = ['*', '?', '[', '{', '(', '%', '\\'];

/// The relative paths `location` may be read as, against a reader's working directory or
/// home, each with whether it followed a `~` (read against a home too): a path with no
/// scheme that is not absolute; with a `~` or `~user` first segment, also what follows it
/// (round 46, A1); a relative `file:` URI (`file:indexes/…`, A4); and what follows the last
/// `cwd` segment of a path, decoded or not (`/proc/self/cwd/…`, where the reading process
/// stands, in any spelling: `/proc/self/./cwd/`, `/dev/fd/../../self/cwd/`, `%63wd`;
/// rounds 46, 47, A2, P).
fn relative_forms(location: &str) -> Vec<(String, bool)> {
    let path = match split_scheme(location) {
        None => location,
        Some((scheme, rest)) if scheme == "file" => rest,
        Some(_) => return Vec::new(),
    };
    let below = |after: &str| match after.trim_start_matches('/') {
        "" => ".".to_owned(),
        rest => rest.to_owned(),
    };
    let mut forms = Vec::new();
    if !path.starts_with('/') && !path.is_empty() {
        forms.push((path.to_owned(), false));
        if path.starts_with('~') {
            forms.push((
                path.split_once('/')
                    .map_or(".".to_owned(), |(_, after)| below(after)),
                true,
            ));
        }
    }
    let decoded = percent_decode_str(path).decode_utf8_lossy().into_owned();
    for text in [path.to_owned(), decoded] {
        let segments: Vec<&str> = text.split('/').collect();
        for (at, _) in segments.iter().enumerate().filter(|(_, s)| **s == "cwd") {
            let form = (below(&segments[at + 1..].join("/")), false);
            if !forms.contains(&form) {
                forms.push(form);
            }
        }
    }
    forms
}

/// Whether a shell, or an engine that unquotes the way one does, may read `location` as a
/// local path other than its letters: a quote (`'`, `"`, `` ` ``), a backslash or a `$`
/// (variables, `$'…'` ANSI-C quoting with its many escapes, `$"…"`), as written or once
/// percent-decoded (`%27`: a reader that decodes a URI and hands the path to a shell), and
/// with `controls`, a control character. Without `backslashes`, a backslash does not count
/// (a string as written in a JSON document, whose backslashes are its escapes: its value
/// is read as well). Imitating each reading did not converge (rounds
/// 49–51: every imitation of quote removal and escapes had a bypass, such as a quote kept
/// inside the other kind of quote, a quote decoded from `\x27`, `\u0073`, octal escapes
/// past `\377`), so such a location is not interpreted at all.
///
/// One token that is a URI of another store (`s3://b/a$b`) is no local path, unless it
/// chains another URL (fsspec's `zip://x::file:///…`), names `file:` anywhere, or holds a
/// `%` or a control character (round 52, F2, F3).
fn shell_reads_otherwise(location: &str, controls: bool, backslashes: bool) -> bool {
    let location = location.trim();
    let decoded = percent_decode_str(location).decode_utf8_lossy();
    let special = |c: char| {
        matches!(c, '\'' | '"' | '`' | '$')
            || (backslashes && c == '\\')
            || (controls && c.is_control())
    };
    if !location.chars().chain(decoded.chars()).any(special) {
        return false;
    }
    let one_token = !location.chars().any(|c| {
        c.is_whitespace()
            || c.is_control()
            || matches!(c, ';' | ',' | '|' | '&' | '(' | ')' | '<' | '>' | '%')
    });
    let lower = location.to_ascii_lowercase();
    let chained =
        lower.contains("::") || lower.contains("file:") || lower.matches("//").count() > 1;
    let other_store = split_scheme(location).is_some_and(|(scheme, rest)| {
        scheme != "file" && scheme != "local" && rest.starts_with("//")
    });
    !(one_token && other_store && !chained)
}

/// `scheme` (lower-cased) and the rest, if `location` starts with a URI scheme.
fn split_scheme(location: &str) -> Option<(String, &str)> {
    let (scheme, rest) = location.split_once(':')?;
    let mut chars = scheme.chars();
    let valid = chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
        // A one-letter "scheme" is a Windows drive, not a URI.
        && scheme.len() > 1;
    valid.then(|| (scheme.to_ascii_lowercase(), rest))
}

/// The literal directory before the first glob character of `path` (`*`, `?`, `[`, `{`),
/// if it has one.
fn glob_prefix(path: &str) -> Option<&str> {
    let first = path.find(['*', '?', '[', '{'])?;
    Some(&path[..path[..first].rfind('/').unwrap_or(0)])
}

fn strip_query(path: &str) -> &str {
    path.split(['?', '#']).next().unwrap_or(path)
}

/// A path read without what follows `?` or `#` (a URL's query and fragment), and, when
/// that differs, as written (`?` and `#` are ordinary characters of a file or key name).
fn query_readings(path: &str) -> Vec<&str> {
    let stripped = strip_query(path);
    if stripped == path {
        vec![path]
    } else {
        vec![stripped, path]
    }
}

/// Every spelling of a reading's path worth comparing: as written and percent-decoded,
/// each with doubled slashes and `.` segments dropped and `..` resolved (and, for S3
/// keys, also exactly as written: a doubled slash is a key of its own there).
fn spellings(reading: &Reading) -> Vec<String> {
    let path = match reading {
        Reading::Local(path) => path,
        Reading::Bucket { key, .. } => key,
        Reading::Other { path, .. } => path,
        Reading::Anywhere => return vec![String::new()],
        Reading::Relative(path) => path,
    };
    let mut out = Vec::new();
    let decoded = percent_decode_str(path)
        .decode_utf8()
        .ok()
        .map(|d| d.into_owned());
    for written in std::iter::once(path.clone()).chain(decoded) {
        // `..` past the start stays there, as on a file system (and in Hadoop's paths).
        let normal = clamp_dots(&written);
        if !out.contains(&normal) {
            out.push(normal);
        }
        if matches!(reading, Reading::Bucket { .. }) && !out.contains(&written) {
            out.push(written);
        }
    }
    out
}

/// `path` with its backslash escapes removed (`\x` read as `x`), if it has any.
fn without_escapes(path: &str) -> Option<String> {
    if !path.contains('\\') {
        return None;
    }
    let mut out = String::with_capacity(path.len());
    let mut chars = path.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => out.push(chars.next().unwrap_or('\\')),
            c => out.push(c),
        }
    }
    Some(out)
}

/// Locations read as names with one view of the local file system's links ([`Links`]):
/// what one metadata file's strings name, or a source table's properties.
pub(crate) struct NameReader<'w> {
    warehouse: &'w Warehouse,
    links: Option<Links>,
    /// A reading gave up at a bound outside the view of links (too many alternatives)
    /// since [`NameReader::gave_up`] was last asked.
    unbounded: bool,
    /// What is left of the brace expansions' work ([`MAX_EXPANSION_BYTES`]).
    budget: usize,
}

impl NameReader<'_> {
    /// Every name of this warehouse that `location` may denote in some engine's reading
    /// (see the [module docs](self)); empty if it denotes nothing inside the root.
    ///
    /// On a local warehouse, a location that a shell reads otherwise than its letters
    /// ([`shell_reads_otherwise`]) may name anything: every managed prefix, marked as a
    /// give-up (a file holding such a string keeps everything while it is live: round 52,
    /// F1).
    pub(crate) fn names_of_location(&mut self, location: &str) -> Vec<String> {
        self.names_of(location, true)
    }

    /// [`names_of_location`](Self::names_of_location) of a string as written in a JSON
    /// document beside its decoded value: its backslashes are the document's escapes (the
    /// value, read too, has its own).
    pub(crate) fn names_of_location_as_written(&mut self, location: &str) -> Vec<String> {
        self.names_of(location, false)
    }

    fn names_of(&mut self, location: &str, backslashes: bool) -> Vec<String> {
        if self.links.is_some() && shell_reads_otherwise(location, false, backslashes) {
            self.unbounded = true;
            return every_managed_prefix();
        }
        let (names, gave_up) =
            self.warehouse
                .names_of_location_with(location, &mut self.links, &mut self.budget);
        self.unbounded |= gave_up;
        names
    }

    /// [`names_of_location`](Self::names_of_location) of a source table's location: a
    /// relative one that is a single word is walked for links from every directory above
    /// the warehouse too (it is a path, not a word of free text: round 48, N1).
    ///
    /// On a local warehouse, a source location that a shell reads otherwise than its
    /// letters ([`shell_reads_otherwise`]) may name anything: every managed prefix, marked
    /// as a give-up (publication refuses it; the collector keeps everything while it is
    /// bound).
    pub(crate) fn names_of_source(&mut self, location: &str) -> Vec<String> {
        if self.links.is_some() && shell_reads_otherwise(location, true, true) {
            self.unbounded = true;
            return every_managed_prefix();
        }
        if let Some(links) = self.links.as_mut() {
            links.set_walk_words(true);
        }
        let mut names = self.names_of_location(location);
        if let Some(links) = self.links.as_mut() {
            links.set_walk_words(false);
        }
        // A source location that is one word is a bucket to s3fs (`fs.find("B")` lists
        // the whole bucket; round 122, G1), where a word of free text is not read so.
        let word = location.trim();
        if !word.is_empty() && !word.contains(['/', ':']) {
            for name in self.names_of_location(&format!("s3://{word}")) {
                if !names.contains(&name) {
                    names.push(name);
                }
            }
        }
        names
    }

    /// On a local warehouse, whether `part`, a string of a file that is no metadata, read
    /// since the last call (by [`names_of_location`](Self::names_of_location) and
    /// [`names_relative_to`](Self::names_relative_to) of a reader from
    /// [`Warehouse::family_name_reader`]), leads outside the warehouse in any of the
    /// paths that reading tried: every spelling, every directory a reader may stand in,
    /// the file's folder, as the file system resolves them (see the `outside` module for
    /// what counts). A reader of the file may read what is there, or what appears there
    /// later, which the collector does not read, so it may name anything (rounds 59 B, 60,
    /// 61): marked as a give-up.
    pub(crate) fn leads_outside(&mut self, part: &str) -> bool {
        let Some(links) = self.links.as_mut() else {
            return false;
        };
        let reach = links.take_outside();
        let absolute = pieces(part.trim())
            .into_iter()
            .chain(pieces(part))
            .any(|piece| match alternatives(&piece, &mut self.budget) {
                Some(paths) => paths.iter().any(|path| {
                    path.trim().starts_with('/') || split_scheme(path.trim()).is_some()
                }),
                None => true,
            });
        let outside = reach.may_name_anything(absolute);
        self.unbounded |= outside;
        outside
    }

    /// Whether a lookup since the last call gave up at a bound (the names it gave are
    /// every managed prefix because the location may name anything), and forget it.
    pub(crate) fn gave_up(&mut self) -> bool {
        let links = self.links.as_mut().is_some_and(Links::take_unbounded);
        std::mem::take(&mut self.unbounded) || links
    }

    /// On a local warehouse, the names the relative path `part` denotes when a reader
    /// resolves it on the file system against the directory `folder` (a name) of the
    /// warehouse: through links, as [`names_of_location`](Self::names_of_location) reads
    /// a local path (round 41, F3: a file's own strings, relative to its directory, through
    /// a link outside the warehouse). Empty on other stores and for an absolute `part`.
    pub(crate) fn names_relative_to(&mut self, folder: &str, part: &str) -> Vec<String> {
        let Some(dir) = self.warehouse.local.as_deref() else {
            return Vec::new();
        };
        if part.starts_with('/') || split_scheme(part).is_some() {
            return Vec::new();
        }
        let path = format!("{}/{folder}/{part}", dir.display());
        let (names, gave_up) =
            self.warehouse
                .names_of_location_with(&path, &mut self.links, &mut self.budget);
        self.unbounded |= gave_up;
        names
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use object_store::memory::InMemory;
    use object_store::path::Path as StorePath;

    use super::*;
    use crate::warehouse::MANAGED_PREFIXES;

    /// A temporary directory, resolved, with the directories `made` below it (kept while
    /// the guard lives).
    fn tree(made: &[&str]) -> (tempfile::TempDir, std::path::PathBuf) {
        let dir = tempfile::tempdir().expect("dir");
        let base = std::fs::canonicalize(dir.path()).expect("dir");
        for made in made {
            std::fs::create_dir_all(base.join(made)).expect("dirs");
        }
        (dir, base)
    }

    /// Each location names the victim `indexes/old/src/part-0.parquet` or a name above it.
    fn assert_each_reaches_the_victim(wh: &Warehouse, locations: &[String]) {
        for location in locations {
            let names = wh.names_of_location(location);
            assert!(
                names
                    .iter()
                    .any(|name| "indexes/old/src/part-0.parquet".starts_with(name.as_str())),
                "{location:?}: {names:?}"
            );
        }
    }

    fn s3() -> Warehouse {
        Warehouse::new(
            "s3://b/wh",
            Arc::new(InMemory::new()),
            StorePath::from("wh"),
        )
        .expect("warehouse")
    }

    #[test]
    fn every_s3_spelling_of_a_location_inside_is_recognised() {
        let wh = s3();
        for spelling in [
            "s3://b/wh/indexes/src/",
            "S3://b/wh/indexes/src",
            "s3a://b/wh/indexes/src",
            "S3N://B/wh/indexes/src/",
            "s3://b/wh//indexes/src",
            "s3://b/wh/./indexes/src",
            "s3://b/wh/x/../indexes/src",
            "s3://b/wh/%69ndexes/src",
            "https://b.s3.us-east-1.amazonaws.com/wh/indexes/src/",
            "https://s3.us-east-1.amazonaws.com/b/wh/indexes/src/",
            "http://127.0.0.1:9000/b/wh/indexes/src",
        ] {
            assert!(
                wh.names_of_location(spelling)
                    .contains(&"indexes/src".to_owned()),
                "{spelling}: {:?}",
                wh.names_of_location(spelling)
            );
        }
        // s3fs's path form (`bucket/key`, leading slashes stripped; round 121, F2), and
        // with it the path of a `file:` URL, which is also read as a path.
        for spelling in [
            "/b/wh/indexes/src",
            "b/wh/indexes/src",
            "file:///b/wh/indexes/src",
        ] {
            assert!(
                wh.names_of_location(spelling)
                    .contains(&"indexes/src".to_owned()),
                "{spelling}: {:?}",
                wh.names_of_location(spelling)
            );
        }
        for outside in [
            "s3://other/wh/indexes/src",
            "s3://b/wh2/indexes/src",
            "az://b/wh/indexes/src",
            "b",
            "wh/indexes/src",
            "indexes/src",
            "s3://b/wh/../indexes/src",
        ] {
            assert!(
                wh.names_of_location(outside).is_empty(),
                "{outside}: {:?}",
                wh.names_of_location(outside)
            );
        }
    }

    /// Round 35 G4: Hadoop and Spark read a comma-separated list of inputs, and expand
    /// brace alternatives before resolving `..`; every path so read counts.
    #[test]
    fn each_path_of_a_list_or_of_brace_alternatives_is_recognised() {
        let wh = s3();
        for location in [
            "s3://b/data/{src,../wh/indexes/old1}/",
            "s3://b/data/{x,{y,../../wh/indexes/old1}}",
            "s3://b/data/src/,s3://b/wh/indexes/old1/",
            "s3://b/data/src/, s3a://b/wh/indexes/{old1,old2}",
        ] {
            let names = wh.names_of_location(location);
            assert!(
                names.contains(&"indexes/old1".to_owned()),
                "{location}: {names:?}"
            );
        }
        assert!(
            wh.names_of_location("s3://b/wh/indexes/{old1,old2}")
                .contains(&"indexes/old2".to_owned())
        );
        // An escaped comma is no separator; a name that holds a comma is also itself.
        assert!(
            wh.names_of_location(r"s3://b/data/a\,s3://b/wh/indexes/old1")
                .is_empty()
        );
        assert_eq!(
            wh.names_of_location("s3://b/wh/indexes/a,b"),
            vec!["indexes/a,b".to_owned(), "indexes/a".to_owned()]
        );
        // More alternatives than any reader lists: they may name anything.
        let many =
            "s3://elsewhere/{a,b}{a,b}{a,b}{a,b}{a,b}{a,b}{a,b}{a,b}{a,b}{a,b}{a,b}{a,b}{a,b}";
        let names = wh.names_of_location(many);
        assert!(names.contains(&"indexes".to_owned()), "{names:?}");
        assert_eq!(
            alternatives("/a/{b,c}/d", &mut MAX_EXPANSION_BYTES.clone()).map(|all| all.len()),
            Some(3)
        );
    }

    /// GC round 126, L1: GDAL's prefixes and drivers' before a local path; what a reader
    /// opens is the archive above the path, so the table's directory is named.
    #[test]
    fn gdal_prefixes_before_a_local_path_name_the_archive_above_it() {
        let (_dir, base) = tree(&["wh/indexes/src"]);
        let wh = Warehouse::local(&base.join("wh")).expect("warehouse");
        let abs = format!("{}/wh", base.display());
        let spellings = [
            format!("/vsizip//{abs}/indexes/src/a.zip/part-0.parquet"),
            format!("/vsizip/{{{abs}/indexes/src/a.zip}}/part-0.parquet"),
            format!("/vsigzip/{abs}/indexes/src/part-1.parquet.gz"),
            format!("/vsitar//{abs}/indexes/src/"),
            format!("/vsicached?file={abs}/indexes/src/a"),
            format!("PARQUET:{abs}/indexes/src/part-0.parquet"),
            format!("NETCDF:{abs}/indexes/src/f.nc:var"),
            format!("GTIFF_DIR:1:{abs}/indexes/src/f.tif"),
            format!("/vsizip//{abs}/indexes/src/x/y/vsigzip/../../a.zip"),
            // Relative after a prefix, `vrt://`, four driver fields, options after `/`
            // (round 127, M1 to M4).
            "/vsizip/indexes/src/a.zip/part-0.parquet".to_owned(),
            "/vsizip/{indexes/src/a.zip}/part-0.parquet".to_owned(),
            "/vsigzip/./indexes/src/part-1.parquet.gz".to_owned(),
            format!("vrt://{abs}/indexes/src/part-0.parquet?bands=1"),
            "VRT://indexes/src/part-0.parquet".to_owned(),
            format!("DERIVED_SUBDATASET:AMPLITUDE:GTIFF_DIR:1:{abs}/indexes/src/part-0.parquet"),
            "DERIVED_SUBDATASET:AMPLITUDE:GTIFF_DIR:1:indexes/src/part-0.parquet".to_owned(),
            format!("/vsicrypt/key=AAAA,file={abs}/indexes/src/part-0.parquet"),
            "/vsicrypt/key=AAAA,file=indexes/src/part-0.parquet".to_owned(),
        ];
        let missed: Vec<(&String, Vec<String>)> = spellings
            .iter()
            .map(|spelling| (spelling, wh.names_of_location(spelling)))
            .filter(|(_, names)| !names.contains(&"indexes/src".to_owned()))
            .collect();
        assert_eq!(missed, []);
        // A path outside the warehouse stays outside, and a driver's prefix before a URL
        // of another store names nothing here.
        let outside = [
            format!("/vsizip/{abs}2/indexes/src/a.zip"),
            format!("PARQUET:{abs}2/indexes/src/"),
            "s3://b/indexes/src/a.zip".to_owned(),
        ];
        let named: Vec<Vec<String>> = outside
            .iter()
            .map(|location| wh.names_of_location(location))
            .filter(|names| !names.is_empty())
            .collect();
        assert_eq!(named, Vec::<Vec<String>>::new());
        // An inline XML dataset names what its text names, as text or character
        // references (round 128, N1).
        let victim = "indexes/src/part-0.parquet";
        for xml in [
            "<OGRVRTDataSource><OGRVRTLayer name=p><SrcDataSource>indexes/src/part-0.parquet</SrcDataSource></OGRVRTLayer></OGRVRTDataSource>".to_owned(),
            format!("<VRTDataset><SimpleSource><SourceFilename>{abs}/{victim}</SourceFilename></SimpleSource></VRTDataset>"),
            "<OGRVRTDataSource><SrcDataSource>ind&#101;xes&#47;src&#x2F;part-0.parquet</SrcDataSource></OGRVRTDataSource>".to_owned(),
            "<X><![CDATA[indexes/src/part-0.parquet]]></X>".to_owned(),
        ] {
            let names = wh.names_of_location(&xml);
            assert!(
                names
                    .iter()
                    .any(|name| victim.strip_prefix(name.as_str()).is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))),
                "{xml}: {names:?}"
            );
        }
    }

    #[test]
    fn every_local_spelling_of_a_location_inside_is_recognised() {
        let dir = tempfile::tempdir().expect("dir");
        let root = dir.path().join("wh");
        std::fs::create_dir_all(root.join("indexes/src")).expect("dirs");
        let wh = Warehouse::local(&root).expect("warehouse");
        let abs = std::fs::canonicalize(&root).expect("root");
        let abs = abs.display();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&root, &link).expect("link");
        let link = link.display();
        for spelling in [
            format!("{abs}/indexes/src/"),
            format!("{abs}//indexes/./src"),
            format!("file://{abs}/indexes/src"),
            format!("FILE://{abs}/indexes/src"),
            format!("file:{abs}/indexes/src"),
            format!("file://localhost{abs}/indexes/src"),
            format!("{abs}/indexes/x/../src"),
            format!("{link}/indexes/src"),
            format!("file://{link}/indexes/src/not-yet"),
            // Any host may be this machine to some reader (round 46, A3).
            format!("file://host{abs}/indexes/src"),
            format!("file://127.0.0.1{abs}/indexes/src"),
            format!("file://~{abs}/indexes/src"),
        ] {
            let names = wh.names_of_location(&spelling);
            assert!(
                names.iter().any(|n| n.starts_with("indexes/src")),
                "{spelling}: {names:?}"
            );
        }
        for outside in [
            format!("{abs}2/indexes/src"),
            format!("s3://b{abs}/indexes/src"),
        ] {
            assert!(wh.names_of_location(&outside).is_empty(), "{outside}");
        }
        // Found by the last issue-26 attack: a relative path, read by an engine whose
        // working directory is the warehouse directory.
        for relative in ["indexes/src/", "./indexes/src", "x/../indexes/src"] {
            let names = wh.names_of_location(relative);
            assert!(
                names.contains(&"indexes/src".to_owned()),
                "{relative}: {names:?}"
            );
        }
    }

    /// Rounds 41 (F1, F2), 42 (G1–G4) and 43: a `..` after a link climbs out of the link's
    /// target, and a pattern matching a link leads where the link points. A spelling
    /// read by text (escapes decoded, or a pattern's directory) drops the link with the
    /// `..`; the file system does not. An escape before the link (`%6C` for `l`), an
    /// escaped space in the directory of the link, or a pattern matching the link, each
    /// followed by `..`, reach the table the link's target sits beside.
    #[test]
    fn a_dot_dot_after_a_link_behind_an_escape_or_a_pattern_is_followed() {
        let (_dir, base) = tree(&["wh/indexes/old/src", "wh/indexes/old/sub"]);
        let root = base.join("wh");
        std::fs::write(root.join("indexes/old/src/part-0.parquet"), b"t").expect("file");
        for parent in ["plain", "my data", "plain/d"] {
            std::fs::create_dir_all(base.join(parent)).expect("dirs");
            std::os::unix::fs::symlink(root.join("indexes/old/sub"), base.join(parent).join("l"))
                .expect("link");
        }
        for parent in ["plain", "plain/d"] {
            std::os::unix::fs::symlink(root.join("indexes/old/src"), base.join(parent).join("s"))
                .expect("link");
        }
        {
            use std::os::unix::ffi::OsStrExt;
            let plain = base.join("plain");
            let odd = |name: &[u8]| plain.join(std::ffi::OsStr::from_bytes(name));
            std::os::unix::fs::symlink(root.join("indexes/old/sub"), odd(b"l\xff")).expect("link");
            std::os::unix::fs::symlink(root.join("indexes/old/src"), odd(b"s\xff")).expect("link");
            std::os::unix::fs::symlink(root.join("indexes/old/sub"), plain.join("l\u{FFFD}"))
                .expect("link");
        }
        let wh = Warehouse::local(&root).expect("warehouse");
        let base = base.display();
        for location in [
            format!("file://{base}/plain/%6C/../src/"),
            format!("file://{base}/my%20data/l/../src/"),
            format!("{base}/plain/[l]/../src/"),
            format!("{base}/plain/?/../src/"),
            format!("{base}/plain/*/../src/part-0.parquet"),
            format!("{base}/pl*/l/../src/"),
            format!("{base}/pl*/[l]/../src/"),
            // Round 42: a link named in bytes that are no UTF-8 (G1), one named with
            // U+FFFD as lossy decoders read `%FF` (G2), an escape no UTF-8 in a pattern
            // (G3), and a pattern matching a directory with the link below it (G4).
            format!("file://{base}/plain/l%FF/../src/"),
            format!("file://localhost{base}/plain/s%FF/"),
            format!("file://{base}/plain/l\u{FFFD}/../src/"),
            format!("file://{base}/plain/%6C/../src/[%FFp]art-0.parquet"),
            format!("{base}/plain/[d]/l/../src/"),
            format!("{base}/plain/*/l/../src/"),
            // Round 43: a pattern that matches a link into the warehouse, with no `..`.
            format!("{base}/plain/[s]/"),
            format!("{base}/plain/s*/"),
            format!("file://{base}/plain/[s]/part-0.parquet"),
            format!("{base}/plain/?/*.parquet"),
            format!("{base}/plain/[d]/s/"),
            // Round 44 (J2): a backslash escape, as a shell or `glob(3)` reads it.
            format!("{base}/plain/\\s/*.parquet"),
            format!("{base}/plain/\\s/part-0.parquet"),
        ] {
            // Named, or covered by a name above it (a pattern above the root names every
            // managed prefix).
            let names = wh.names_of_location(&location);
            let covers = |name: &String| {
                name.starts_with("indexes/old/src")
                    || "indexes/old/src".starts_with(&format!("{name}/"))
            };
            assert!(names.iter().any(covers), "{location}: {names:?}");
        }
    }

    /// Round 54: a source whose directory resolves to a name that is no UTF-8 (N1) or to a
    /// path past `PATH_MAX` (N2), or holds directories deeper than that (round 55, L1), or
    /// lies in `/dev` or another process's view (round 56, D1, P1), may name anything (links into the warehouse may lie there); one whose name ends in white
    /// space is read as written too (W1).
    #[test]
    fn sources_resolving_past_what_a_view_can_name_may_name_anything() {
        use std::os::unix::ffi::OsStrExt;
        use std::os::unix::fs::symlink;
        let (_dir, base) = tree(&["wh/indexes/old/src", "spaced/src \u{a0}", "spaced/src "]);
        let root = base.join("wh");
        let wh = Warehouse::local(&root).expect("warehouse");
        // N1: `src -> caf\xe9`, holding a link into the warehouse.
        let latin = base.join(std::ffi::OsStr::from_bytes(b"caf\xe9"));
        std::fs::create_dir(&latin).expect("dir");
        symlink(root.join("indexes/old/src"), latin.join("part-1.parquet")).expect("link");
        symlink(&latin, base.join("src")).expect("link");
        // N2: `deep` resolves through a chain of links to a path past `PATH_MAX`.
        let mut short = base.clone();
        for i in 0..22 {
            let next = short.join("d".repeat(200));
            std::fs::create_dir(&next).expect("dir");
            let link = base.join(format!("l{i}"));
            symlink(&next, &link).expect("link");
            short = link;
        }
        symlink(root.join("indexes/old/src"), short.join("part-1.parquet")).expect("link");
        symlink(&short, base.join("deep")).expect("link");
        // L1 (round 55): below `walked/`, a link at a depth past `PATH_MAX` (made through
        // short links to each level, kept outside `walked/`).
        let mut short = base.join("walked");
        std::fs::create_dir(&short).expect("dir");
        for i in 0..22 {
            let next = short.join("w".repeat(200));
            std::fs::create_dir(&next).expect("dir");
            let link = base.join(format!("w{i}"));
            symlink(&next, &link).expect("link");
            short = link;
        }
        symlink(root.join("indexes/old/src"), short.join("part-1.parquet")).expect("link");
        // D1 (round 56): a directory in `/dev` (a tmpfs may hold links), reached directly or
        // through a relative link; P1: a path through another process's view.
        std::fs::create_dir(base.join("to-dev")).expect("dir");
        let up = "../".repeat(base.components().count() + 1);
        symlink(format!("{up}dev"), base.join("to-dev/sub")).expect("link");
        let b = base.display();
        for location in [
            format!("{b}/src/"),
            format!("{b}/deep/"),
            format!("{b}/walked/"),
            format!("{b}/to-dev/"),
            "/dev/".to_owned(),
            format!("/proc/1/root{b}/spaced/"),
        ] {
            let mut reader = wh.name_reader();
            let names = reader.names_of_source(&location);
            assert!(reader.gave_up(), "{location}: {names:?}");
        }
        // U1: as deep, holding only files and directories: read through its parents, it
        // names nothing.
        crate::warehouse::deep_file(&base, "plaindeep", 22);
        let mut reader = wh.name_reader();
        let names = reader.names_of_source(&format!("{b}/plaindeep/"));
        assert!(!reader.gave_up(), "{names:?}");
        // W1: the directory named with its trailing white space.
        for dir in ["src ", "src \u{a0}"] {
            symlink(
                root.join("indexes/old/src"),
                base.join("spaced").join(dir).join("part-1.parquet"),
            )
            .expect("link");
            let mut reader = wh.name_reader();
            let names = reader.names_of_source(&format!("{b}/spaced/{dir}"));
            assert!(
                names.contains(&"indexes/old/src".to_owned()),
                "{dir:?}: {names:?}"
            );
        }
    }

    /// Round 53, A2: a source in `/dev/shm` (tmpfs: ordinary files) is walked for links
    /// into the warehouse like any other directory.
    #[test]
    fn a_source_in_dev_shm_is_walked_for_links() {
        use std::os::unix::fs::symlink;
        let shm = std::path::Path::new("/dev/shm");
        assert!(shm.is_dir(), "this test needs /dev/shm");
        let (_dir, base) = tree(&["wh/indexes/old/src"]);
        let root = base.join("wh");
        let source = tempfile::tempdir_in(shm).expect("dir in /dev/shm");
        symlink(
            root.join("indexes/old/src"),
            source.path().join("part-1.parquet"),
        )
        .expect("link");
        let wh = Warehouse::local(&root).expect("warehouse");
        let mut reader = wh.name_reader();
        let names = reader.names_of_source(&format!("{}/", source.path().display()));
        assert!(names.contains(&"indexes/old/src".to_owned()), "{names:?}");
    }

    /// A directory a source names may hold links into the warehouse, which a listing that
    /// follows links reads (`object_store`'s local listing; round 43, H2): below it, behind
    /// a link to another directory outside, inside the warehouse outside the managed
    /// prefixes, a link to one file; loops end; past the bound, anything.
    #[test]
    fn a_directory_holding_links_into_the_warehouse_names_their_targets() {
        use std::os::unix::fs::symlink;
        let (_dir, base) = tree(&[
            "wh/indexes/old/src",
            "wh/indexes/other/src",
            "wh/indexes/third",
            "wh/sources/nested",
            "ext/a/b",
            "far/deep",
            "quiet/x",
        ]);
        let root = base.join("wh");
        std::fs::write(root.join("indexes/third/part-0.parquet"), b"t").expect("file");
        symlink(root.join("indexes/old/src"), base.join("ext/a/b/s")).expect("link");
        symlink(base.join("far"), base.join("ext/far")).expect("link");
        symlink(root.join("indexes/other/src"), base.join("far/deep/s")).expect("link");
        symlink(base.join("ext"), base.join("far/loop")).expect("link");
        symlink(
            root.join("indexes/third/part-0.parquet"),
            root.join("sources/nested/f"),
        )
        .expect("link");
        symlink(base.join("nowhere"), base.join("quiet/dangling")).expect("link");
        let wh = Warehouse::local(&root).expect("warehouse");
        let b = base.display();
        for (location, expected) in [
            (
                format!("{b}/ext/"),
                vec!["indexes/old/src", "indexes/other/src"],
            ),
            (
                format!("file://{b}/ext"),
                vec!["indexes/old/src", "indexes/other/src"],
            ),
            (
                format!("{b}/far/"),
                vec!["indexes/old/src", "indexes/other/src"],
            ),
            (format!("{b}/ext/a/*.parquet"), vec!["indexes/old/src"]),
            (
                format!("{b}/wh/sources/"),
                vec!["indexes/third/part-0.parquet"],
            ),
            (format!("{b}/quiet/"), vec![]),
        ] {
            let mut names = wh.names_of_location(&location);
            names.retain(|name| name.starts_with("indexes"));
            names.sort();
            assert_eq!(names, expected, "{location}");
        }
        // Past the bound, a walk names anything, and says it gave up.
        let mut reader = wh.name_reader();
        if let Some(links) = reader.links.as_mut() {
            links.limit_walks(1);
        }
        let names = reader.names_of_location(&format!("{b}/quiet/"));
        assert!(reader.gave_up(), "{names:?}");
        assert!(names.contains(&"indexes".to_owned()), "{names:?}");
    }

    /// Round 45 (K1–K9): a pattern whose directory lies inside the warehouse is tried with
    /// each entry it may match: a link to a whole managed prefix or to the root, a `..`
    /// after a link, a link out of the warehouse and back in, a plain pattern below
    /// `indexes/`. Entries it cannot match are not named (liveness: `indexes/t1*/…` must
    /// not keep `indexes/t4/…`).
    #[test]
    fn a_pattern_inside_the_warehouse_is_tried_with_the_entries_it_may_match() {
        use std::os::unix::fs::symlink;
        let (_dir, base) = tree(&[
            "wh/indexes/old/src",
            "wh/indexes/old/sub",
            "wh/indexes/t1a/p",
            "wh/indexes/t4/p",
            "wh/data",
            "plain/x",
        ]);
        let root = base.join("wh");
        std::fs::write(root.join("indexes/old/src/part-0.parquet"), b"t").expect("file");
        symlink(root.join("indexes"), root.join("data/i")).expect("link");
        symlink(&root, root.join("data/r")).expect("link");
        symlink(root.join("indexes/old/sub"), root.join("data/l")).expect("link");
        symlink(root.join("indexes/old/sub"), root.join("l")).expect("link");
        symlink(root.join("indexes/old/src"), base.join("plain/x/s")).expect("link");
        symlink(base.join("plain/x"), root.join("data/o")).expect("link");
        let wh = Warehouse::local(&root).expect("warehouse");
        let (b, w) = (base.display(), root.display());
        for location in [
            format!("{w}/data/[i]/old/src/"),
            format!("{w}/data/[r]/indexes/old/src/"),
            format!("{w}/data/[l]/../src/"),
            format!("{w}/data/?/../src/part-0.parquet"),
            format!("{w}/data/[o]/s/"),
            format!("{w}/[l]/../src/part-0.parquet"),
            format!("{w}/indexes/*/src/part-0.parquet"),
            format!("{w}/[i]ndexes/old/src/part-0.parquet"),
            format!("{b}/wh/data/[I]/old/src/"),
        ] {
            let names = wh.names_of_location(&location);
            assert!(
                names.iter().any(|name| name.starts_with("indexes/old/src")),
                "{location}: {names:?}"
            );
        }
        let names = wh.names_of_location(&format!("{w}/indexes/t1*/p/part-0.parquet"));
        assert!(
            names.contains(&"indexes/t1a/p/part-0.parquet".to_owned()),
            "{names:?}"
        );
        assert!(
            !names.iter().any(|name| name.starts_with("indexes/t4")),
            "{names:?}"
        );
    }

    /// Round 46: a relative location read against every directory above the warehouse (the
    /// default warehouse is `./warehouse`), after a `~`, as a relative `file:` URI and
    /// after `/proc/self/cwd/`; a pattern in a directory inside matched as any dialect
    /// would (negation with case, POSIX classes, bytes, a directory last); and what the
    /// collector may not read names anything.
    #[test]
    fn relative_forms_dialects_and_unreadable_directories_are_read_conservatively() {
        use std::os::unix::fs::{PermissionsExt, symlink};
        let (_dir, base) = tree(&["wh/indexes/old/src", "wh/data", "ext/d"]);
        let root = base.join("wh");
        symlink(&root, root.join("data/\u{e9}")).expect("link");
        let wh = Warehouse::local(&root).expect("warehouse");
        let w = root.display();
        assert_each_reaches_the_victim(
            &wh,
            &[
                "wh/indexes/old/src/".to_owned(),
                "~/wh/indexes/old/src/".to_owned(),
                "~user/indexes/old/src/".to_owned(),
                "file:indexes/old/src/".to_owned(),
                "file:./indexes/old/src/".to_owned(),
                "/proc/self/cwd/indexes/old/src/".to_owned(),
                format!("{w}/indexes/[!O]ld/src/part-0.parquet"),
                format!("{w}/indexes/[[:alpha:]]ld/src/part-0.parquet"),
                format!("{w}/data/??/indexes/old/src/part-0.parquet"),
            ],
        );
        // A directory the last pattern matches is named (a recursive listing reads it).
        let names = wh.names_of_location(&format!("{w}/indexes/o*/"));
        assert!(names.contains(&"indexes/old".to_owned()), "{names:?}");
        // As root, permissions do not stop a lookup: only an unprivileged user sees it.
        let hidden = base.join("ext/d");
        symlink(root.join("indexes/old/src"), hidden.join("s")).expect("link");
        std::fs::set_permissions(&hidden, std::fs::Permissions::from_mode(0o000)).expect("mode");
        let refused = std::fs::read_dir(&hidden).is_err();
        let mut reader = wh.name_reader();
        let names = reader.names_of_location(&format!("{}/ext/", base.display()));
        if refused {
            assert!(reader.gave_up(), "{names:?}");
            assert!(names.contains(&"indexes".to_owned()), "{names:?}");
        }
        std::fs::set_permissions(&hidden, std::fs::Permissions::from_mode(0o755)).expect("mode");
    }

    /// Round 47: a relative path whose reading from above the warehouse is a directory with
    /// a link into it (R), a warehouse configured through a link (S), `/proc/self/cwd` in
    /// any spelling (P), and `file:` URLs as the WHATWG standard parses them (W).
    #[test]
    fn readings_from_above_a_linked_warehouse_and_whatwg_file_urls_are_followed() {
        use std::os::unix::fs::symlink;
        let (_dir, base) = tree(&["far/wh/indexes/old/src", "near", "plain/ext"]);
        symlink(base.join("far/wh"), base.join("near/warehouse")).expect("link");
        let root = base.join("far/wh");
        symlink(root.join("indexes/old/src"), base.join("plain/ext/s")).expect("link");
        let wh = Warehouse::local(&base.join("near/warehouse")).expect("warehouse");
        let w = root.display();
        assert_each_reaches_the_victim(
            &wh,
            &[
                // From the directory the configured path starts in (`near/`).
                "warehouse/indexes/old/src/".to_owned(),
                // A directory above the warehouse holding a link into it: walked.
                "plain/ext/".to_owned(),
                "file:plain/ext/".to_owned(),
                "/proc/self/./cwd/indexes/old/src/".to_owned(),
                "/proc//self/cwd/indexes/old/src/".to_owned(),
                "file:///proc/self/%63wd/indexes/old/src/".to_owned(),
                "/dev/fd/../../self/cwd/indexes/old/src/".to_owned(),
                format!("file://{w}\\indexes\\old\\src/"),
                format!(
                    "FILE:{}",
                    format!("{w}/indexes/old/src/").replace('/', "\\")
                ),
                format!("file://{w}/ind\texes/old/src/"),
                format!("file://{w}/ind\nexes/old/src/"),
            ],
        );
    }

    /// Round 48: a source's single relative word walked from above the warehouse (N1);
    /// URLs as the `url` crate and fsspec read them (N8, N9, F1–F4); nested extended
    /// groups, classes inside brackets, escaped `]` (N10, N15, N17b); `**` (N16).
    #[test]
    fn sources_urls_and_glob_dialects_of_round_48_are_followed() {
        use std::os::unix::fs::symlink;
        let (_dir, base) = tree(&["wh/indexes/old/src", "wh/data", "ext"]);
        let root = base.join("wh");
        symlink(root.join("indexes/old/src"), base.join("ext/s")).expect("link");
        symlink(root.join("indexes/old"), root.join("data/o")).expect("link");
        let wh = Warehouse::local(&root).expect("warehouse");
        let w = root.display();
        // A source's word is a path: walked from the directory above the warehouse.
        let names = wh.name_reader().names_of_source("ext");
        assert!(names.contains(&"indexes/old/src".to_owned()), "{names:?}");
        assert_each_reaches_the_victim(
            &wh,
            &[
                format!("\u{1}file://{w}\\indexes\\old\\src/"),
                format!("fi\tle://{w}/indexes/old/src/"),
                format!("local://{w}/indexes/old/src/"),
                format!("simplecache::file://{w}/indexes/old/src/part-0.parquet"),
                "file://wh/indexes/old/src/".to_owned(),
                format!("{w}/data/@(x|@(o))/src/"),
                format!("{w}/indexes/[o[:digit:]]ld/src/part-0.parquet"),
                format!("{w}/indexes/[[:digit:]o]ld/src/part-0.parquet"),
                format!("{w}/indexes/[o\\]]ld/src/part-0.parquet"),
                // Round 49 (Q): quotes a shell removes.
                format!("'{w}/indexes/old/src/'"),
                format!("\"{w}\"/indexes/old/src/"),
                // Round 50: ANSI-C quoting, its escapes, a line continuation.
                format!("$'{w}/indexes/old/src/'"),
                format!("{w}/$'\\151'ndexes/old/src/"),
                format!("$'{w}/\\x69ndexes/old/src/'"),
                format!("/nothing/ $\"{w}/indexes/old/src/\""),
                format!("{w}/ind\\\nexes/old/src/"),
            ],
        );
        // Round 49 (B): more alternatives than are read is a give-up, which a string in a
        // file reads as "anything" (on every store, not only through links).
        for wh in [&wh, &s3()] {
            let mut reader = wh.name_reader();
            let groups: String = ('a'..='m').map(|c| format!("{{,{c}}}")).collect();
            let many = format!("{w}/indexes/{{old,x}}{groups}/src/");
            reader.names_of_location(&many);
            assert!(reader.gave_up(), "{many}");
        }
        let mut reader = wh.name_reader();
        reader.names_of_location(&format!("{w}/indexes/**/old/src/part-0.parquet"));
        assert!(reader.gave_up(), "`**` may match any depth");
    }

    /// Round 51: a source location on a local warehouse that a shell reads otherwise than
    /// its letters (quotes kept inside the other kind, a quote decoded from an escape,
    /// escapes past what is imitated) is not interpreted: it may name anything, and says
    /// so; a plain one, and one token of another store, are read as before.
    #[test]
    fn a_source_a_shell_reads_otherwise_may_name_anything() {
        let dir = tempfile::tempdir().expect("dir");
        let base = std::fs::canonicalize(dir.path()).expect("dir");
        let root = base.join("wh");
        std::fs::create_dir_all(root.join("indexes/old/src")).expect("dirs");
        std::fs::create_dir_all(base.join("plain")).expect("dirs");
        let wh = Warehouse::local(&root).expect("warehouse");
        let p = base.join("plain").display().to_string();
        for location in [
            format!("{p}/\"it's\"/"),
            format!("{p}/'say\"hi'/"),
            format!("{p}/\"it\\\"s\"/"),
            format!("{p}/$\"it\\\"s\"/"),
            format!("{p}/$'it\\x27s'/"),
            format!("{p}/$'it\\047s'/"),
            format!("{p}/$'\\563'/"),
            format!("{p}/$'\\u0073'/"),
            format!("{p}/$'\\U00000073'/"),
            format!("{p}/$'\\t'/"),
            format!("{p}/$'\\303\\251'/"),
            format!("{p}/$'\\xff'/"),
            format!("{p}/`echo s`/"),
            format!("{p}/$HOME/"),
            format!("{p}/a\tb/"),
            "s3://b/a$b;/x/it's".to_owned(),
            // Round 52, F2: another store's URI chaining a local one; F3: percent-encoded.
            format!("zip://part-0.parquet::file://{p}/\"it's\"/part-0.parquet"),
            format!("s3://b/k::file://{p}/$'\\u0073'/part-0.parquet"),
            format!("zip://part-0.parquet::file://$PWD/{p}/s/"),
            format!("s3://b/k?x=file://{p}/$HOME/"),
            format!("file://{p}/%22it%27s%22/"),
            format!("{p}/%24HOME/"),
        ] {
            let mut reader = wh.name_reader();
            let names = reader.names_of_source(&location);
            assert!(reader.gave_up(), "{location}");
            assert!(
                names.contains(&"indexes".to_owned()),
                "{location}: {names:?}"
            );
        }
        for location in [
            format!("{p}/s/"),
            format!("file://{p}/s/"),
            "s3://b/a$b/".to_owned(),
        ] {
            let mut reader = wh.name_reader();
            assert!(reader.names_of_source(&location).is_empty(), "{location}");
            assert!(!reader.gave_up(), "{location}");
        }
        // Round 52, F1: any string on a local warehouse (a family file's) too.
        for location in [
            format!("{p}/\"it's\"/part-0.parquet"),
            "$'it\\x27s'".to_owned(),
            format!("{p}/%27s/"),
        ] {
            let mut reader = wh.name_reader();
            let names = reader.names_of_location(&location);
            assert!(reader.gave_up(), "{location}");
            assert!(names.contains(&"indexes".to_owned()), "{location}");
        }
        // On another store a source is read as it was (a shell's file system is not the
        // bucket).
        let s3 = s3();
        let mut reader = s3.name_reader();
        reader.names_of_source("'s3://b/other/src/'");
        assert!(!reader.gave_up());
    }

    /// Round 45 (N): a location is also read as the pieces other readers take from it:
    /// before a NUL, without control characters at its ends, and word by word.
    #[test]
    fn a_location_is_read_as_every_piece_another_reader_takes_from_it() {
        let dir = tempfile::tempdir().expect("dir");
        let root = std::fs::canonicalize(dir.path()).expect("dir").join("wh");
        std::fs::create_dir_all(root.join("indexes/old/src")).expect("dirs");
        let wh = Warehouse::local(&root).expect("warehouse");
        let w = root.display();
        for location in [
            format!("{w}/indexes/old/src/{}", '\u{0}'),
            format!("{w}/indexes/old/src/{}", '\u{1f}'),
            format!("{}{w}/indexes/old/src/", '\u{1f}'),
            format!("{w}/indexes/old/src{}", '\u{1}'),
            format!("/nothing/ {w}/indexes/old/src/"),
            format!("/nothing/\n{w}/indexes/old/src/"),
            format!("/nothing/;{w}/indexes/old/src/"),
        ] {
            let names = wh.names_of_location(&location);
            assert!(
                names.contains(&"indexes/old/src".to_owned()),
                "{location:?}: {names:?}"
            );
        }
    }

    /// One reader for a batch of locations answers each as a reader of its own would: the
    /// links are looked up once per exact spelling. `Path` takes `/o/x/../l/` and
    /// `/o/x/../l` for one path, but a link to a file resolves only without the slash; a
    /// view keyed by `Path` answered the second from the first and missed the file
    /// (found by review of the shared view).
    #[test]
    fn a_shared_reader_answers_every_location_as_a_fresh_one() {
        let (_dir, base) = tree(&["wh/indexes"]);
        let root = base.join("wh");
        std::fs::write(root.join("indexes/victim"), b"table").expect("file");
        std::fs::create_dir_all(base.join("e/d")).expect("dirs");
        std::fs::create_dir_all(base.join("o")).expect("dirs");
        std::os::unix::fs::symlink(base.join("e/d"), base.join("o/x")).expect("link");
        std::os::unix::fs::symlink(root.join("indexes/victim"), base.join("e/l")).expect("link");
        std::os::unix::fs::symlink(root.join("indexes"), base.join("e/t")).expect("link");
        let wh = Warehouse::local(&root).expect("warehouse");
        let o = base.join("o").display().to_string();
        let locations = [
            format!("{o}/x/../l/"),
            format!("{o}/x/../l"),
            format!("{o}/x/../l/t"),
            format!("{o}/x/../t/"),
            format!("{o}/x/../t/victim"),
            format!("{o}/x/../t/victim/"),
            format!("{o}/x/../t/../t/victim"),
            format!("file://{o}/x/../l"),
            "indexes/victim".to_owned(),
            "indexes/victim/".to_owned(),
        ];
        let fresh: Vec<Vec<String>> = locations.iter().map(|l| wh.names_of_location(l)).collect();
        assert!(
            fresh[1].contains(&"indexes/victim".to_owned()),
            "the link to the file: {:?}",
            fresh[1]
        );
        for order in [
            (0..locations.len()).collect::<Vec<_>>(),
            (0..locations.len()).rev().collect(),
        ] {
            let mut reader = wh.name_reader();
            for i in order {
                assert_eq!(
                    reader.names_of_location(&locations[i]),
                    fresh[i],
                    "{}",
                    locations[i]
                );
            }
        }
    }

    /// Found by the issue-26 attack: a glob in a source location (DataFusion reads `*`,
    /// `?`, `[` and `{` in a path as a pattern) matches what its literal spelling does
    /// not; one above the managed prefixes may match them all.
    #[test]
    fn a_glob_names_everything_its_pattern_may_match() {
        let dir = tempfile::tempdir().expect("dir");
        let root = dir.path().join("wh");
        std::fs::create_dir_all(&root).expect("dirs");
        let wh = Warehouse::local(&root).expect("warehouse");
        let abs = std::fs::canonicalize(&root).expect("root");
        let abs = abs.display();
        let managed = || {
            MANAGED_PREFIXES
                .iter()
                .map(|p| (*p).to_owned())
                .collect::<Vec<_>>()
        };
        for (pattern, expected) in [
            (format!("{abs}/index?s/src/*.parquet"), managed()),
            (format!("{abs}/[i]ndexes/src/"), managed()),
            (format!("file://{abs}/index{{es,x}}/src/"), managed()),
            (format!("{abs}/*"), managed()),
            (
                format!("{}/w?/indexes/src/", dir.path().display()),
                managed(),
            ),
            (
                format!("{abs}/indexes/src/*.parquet"),
                vec!["indexes/src".to_owned()],
            ),
            // A name with a `*` is also a name: both readings count.
            (
                format!("{abs}/indexes/a*b/part-0"),
                vec!["indexes/a*b/part-0".to_owned(), "indexes".to_owned()],
            ),
        ] {
            let names = wh.names_of_location(&pattern);
            for name in &expected {
                assert!(names.contains(name), "{pattern}: {names:?}");
            }
        }
        assert!(wh.names_of_location("/elsewhere/*/src").is_empty());
        // Found by the third issue-26 attack: a `?` in a `file:` URL is a query to a URL
        // parser but a pattern to an engine that globs paths.
        let names = wh.names_of_location(&format!("file://{abs}/index?s/src/"));
        assert!(names.contains(&"indexes".to_owned()), "{names:?}");
        let s3 = s3();
        let names = s3.names_of_location("s3://b/wh/ind*/src/");
        assert!(names.contains(&"indexes".to_owned()), "{names:?}");
    }

    /// Found by the second issue-26 attack: a table at the warehouse root or above it (a
    /// recursive listing of its directory reads every object), in any spelling, through a
    /// link, or with `..` climbing past `/`, names every managed prefix.
    #[test]
    fn a_location_at_or_above_the_root_names_every_managed_prefix() {
        let dir = tempfile::tempdir().expect("dir");
        let root = dir.path().join("wh");
        std::fs::create_dir_all(&root).expect("dirs");
        let wh = Warehouse::local(&root).expect("warehouse");
        let abs = std::fs::canonicalize(&root).expect("root");
        let parent = abs.parent().expect("parent").display().to_string();
        let abs = abs.display();
        let link = dir.path().join("to-parent");
        std::os::unix::fs::symlink(dir.path(), &link).expect("link");
        let link = link.display();
        for spelling in [
            format!("{abs}"),
            format!("{abs}/"),
            format!("file://{abs}/"),
            format!("FILE://{abs}/./"),
            format!("{parent}/"),
            "/".to_owned(),
            "file:///".to_owned(),
            format!("{link}/"),
            format!("{link}/wh/"),
        ] {
            let names = wh.names_of_location(&spelling);
            for managed in MANAGED_PREFIXES {
                assert!(names.iter().any(|n| n == managed), "{spelling}: {names:?}");
            }
        }
        // Found by the fourth issue-26 attack: through a link, with `..`, an escape or a
        // pattern in the path.
        for spelling in [
            format!("{link}/zz/../wh/indexes/src/"),
            format!(
                "file://{}/to-p%61rent/wh/indexes/src/",
                dir.path().display()
            ),
            format!("{}/to-par*/wh/indexes/src/", dir.path().display()),
        ] {
            let names = wh.names_of_location(&spelling);
            assert!(
                names.iter().any(|n| n == "indexes/src" || n == "indexes"),
                "{spelling}: {names:?}"
            );
        }
        // `..` past `/` stays at `/`, as the file system reads it.
        let names = wh.names_of_location(&format!("/../..{abs}/indexes/src/"));
        assert!(names.contains(&"indexes/src".to_owned()), "{names:?}");
        let names = s3().names_of_location("s3://b/wh/");
        assert!(names.contains(&"indexes".to_owned()), "{names:?}");
        assert!(wh.names_of_location(&format!("{abs}2/")).is_empty());
    }

    /// GC round 117, F1: object_store (and every URL parser a reader uses) takes the host
    /// of an `s3://` authority as the bucket, without the user and the port.
    #[test]
    fn a_user_or_a_port_before_the_bucket_names_the_bucket() {
        let wh = s3();
        for location in [
            "s3://reader@b/wh/indexes/src/",
            "s3://b:443/wh/indexes/src/",
            "s3a://key:secret@b:9000/wh/indexes/src",
            "s3://@b/wh/indexes/src/",
            "https://reader@b.s3.amazonaws.com:443/wh/indexes/src/",
        ] {
            let names = wh.names_of_location(location);
            assert!(
                names.contains(&"indexes/src".to_owned()),
                "{location}: {names:?}"
            );
        }
        let names = wh.names_of_location("s3://reader@b/wh/");
        assert!(names.contains(&"indexes".to_owned()), "{names:?}");
        assert!(
            wh.names_of_location("s3://reader@b2/wh/indexes/src/")
                .is_empty()
        );
        assert_eq!(host_of("[::1]:9000"), "[::1]");
        assert_eq!(host_of("u@[::1]"), "[::1]");
    }

    /// GC round 118, F1: object_store and DataFusion parse a location with the `url`
    /// crate (the WHATWG URL standard), which reads more spellings as the bucket and key
    /// than a split at `/` does.
    #[test]
    fn a_location_names_what_the_url_standard_reads_in_it() {
        let wh = s3();
        for location in [
            "https://b.s3.amazonaws.com\\wh/indexes/src/",
            "https://%62.s3.amazonaws.com/wh/indexes/src/",
            "s3://b/w\th/indexes/src/",
            "s3a://b/w\nh/indexes/src/",
            "https:///b.s3.amazonaws.com/wh/indexes/src/",
            "https:b.s3.amazonaws.com/wh/indexes/src/",
            "https://\u{ff42}.s3.amazonaws.com/wh/indexes/src/",
            "https://b\u{3002}s3.amazonaws.com/wh/indexes/src/",
            "https://b\u{ad}.s3.amazonaws.com/wh/indexes/src/",
            "https://b%2Es3%2Eamazonaws%2Ecom/wh/indexes/src/",
            "https://s3.us-east-1.amazonaws.com\\b/wh/indexes/src/",
            "https://b.s3.amazonaws.com/wh\\indexes\\src\\",
            "https://b.s3.amazonaws.com/w\th/indexes/src/",
        ] {
            let names = wh.names_of_location(location);
            assert!(
                names.contains(&"indexes/src".to_owned()) || names.contains(&"indexes".to_owned()),
                "{location:?}: {names:?}"
            );
        }
        for location in ["s3://b?/wh/indexes/src/", "s3://b#/wh/indexes/src/"] {
            let names = wh.names_of_location(location);
            assert!(
                names.contains(&"indexes".to_owned()),
                "{location:?}: {names:?}"
            );
        }
    }

    /// GC round 119: what other S3 readers take for a bucket and key (F1, F2, F4), and a
    /// brace expansion whose work doubles while its output does not grow (F3).
    #[test]
    fn what_other_s3_readers_read_is_recognised_and_braces_are_bounded() {
        let on = |root: &str| {
            let prefix = root.split_once("://").map_or("", |(_, rest)| rest);
            let prefix = prefix.split_once('/').map_or("", |(_, rest)| rest);
            Warehouse::new(root, Arc::new(InMemory::new()), StorePath::from(prefix))
                .expect("warehouse")
        };
        let cases = [
            // object_store drops the first segment under a host beginning with `s3`.
            (
                "s3://s3b/wh",
                "https://s3b.s3.amazonaws.com/x/wh/indexes/src/",
            ),
            // fsspec and s3fs: no authority, the first segment is the bucket.
            ("s3://b/wh", "s3:///b/wh/indexes/src/"),
            ("s3://b/wh", "s3a:////b/wh/indexes/src/"),
            // Other schemes sent to an S3 API.
            ("s3://b/wh", "s3p://b/wh/indexes/src/"),
            ("s3://b/wh", "r2://b/wh/indexes/src/"),
            ("s3://b/wh", "gs://b/wh/indexes/src/"),
            // A percent-encoded path-style bucket; a bucket named for its domain.
            (
                "s3://b/wh",
                "https://s3.us-east-1.amazonaws.com/%62/wh/indexes/src/",
            ),
            (
                "s3://cdn.example.com/wh",
                "https://cdn.example.com/wh/indexes/src/",
            ),
            // fsspec strips each of its protocols in turn (round 120, F1).
            ("s3://b/wh", "s3://s3a://b/wh/indexes/src/"),
            ("s3://b/wh", "s3a://s3://b/wh/indexes/src/"),
            ("s3://b/wh", "s3://s3a::b/wh/indexes/src/"),
            ("s3://b/wh", "s3://s3a:///b/wh/indexes/src/"),
            ("s3://b/wh", "simplecache::s3://s3a://b/wh/indexes/src/"),
            // s3fs's own path form for any path an `S3FileSystem` is handed: leading
            // `s3::`/`s3a::` stripped, then slashes, then the bucket (round 121, F1, F2).
            ("s3://b/wh", "s3a::b/wh/indexes/src/"),
            ("s3://b/wh", "s3::b/wh/indexes/src/"),
            ("s3://b/wh", "s3::s3a::b/wh/indexes/src/"),
            ("s3://b/wh", "s3a::/b/wh/indexes/src/"),
            ("s3://b/wh", "b/wh/indexes/src/"),
            ("s3://b/wh", "/b/wh/indexes/src/"),
            ("s3://b/wh", "//b/wh/indexes/src/"),
            // Lance's and PyIceberg's S3 schemes, fsspec's caching wrappers over S3, GDAL's
            // virtual file systems (round 122, G2 to G4).
            (
                "s3://b/wh",
                "s3+ddb://b/wh/indexes/src/?ddbTableName=commits",
            ),
            ("s3://b/wh", "OSS://b/wh/indexes/src/"),
            ("s3://b/wh", "simplecache://b/wh/indexes/src/"),
            ("s3://b/wh", "blockcache://b/wh/indexes/src/"),
            ("s3://b/wh", "/vsis3/b/wh/indexes/src/"),
            ("s3://b/wh", "/vsis3_streaming/b/wh/indexes/src/"),
            ("s3://b/wh", "PARQUET:/vsis3/b/wh/indexes/src/"),
            ("s3://b/wh", "/vsizip//vsis3/b/wh/indexes/src/"),
            (
                "s3://b/wh",
                "/vsicurl/https://b.s3.us-east-1.amazonaws.com/wh/indexes/src/",
            ),
            // fsspec's `cached`; GDAL's option form of `/vsicurl`; a URL client decodes
            // the host (round 123, H1 to H3).
            ("s3://b/wh", "cached://b/wh/indexes/src/"),
            (
                "s3://b/wh",
                "/vsicurl?max_retry=2&url=https%3A%2F%2Fb.s3.us-east-1.amazonaws.com%2Fwh%2Findexes%2Fsrc%2F",
            ),
            (
                "s3://b/wh",
                "/vsicurl/https://%62.s3.us-east-1.amazonaws.com/wh/indexes/src/",
            ),
            // GDAL's options after `/vsicurl/`, its key in any case and percent-encoded,
            // `:` for `=`, a quoted value, a later `url` (round 124, J1, J2).
            (
                "s3://b/wh",
                "/vsicurl/url=https://b.s3.us-east-1.amazonaws.com/wh/indexes/src/",
            ),
            // An option's value holding another prefix hides no later `url` (round 125, K0).
            (
                "s3://b/wh",
                "/vsicurl?x=/vsicurl&url=https://b.s3.us-east-1.amazonaws.com/wh/indexes/src/",
            ),
            (
                "s3://b/wh",
                "/vsicurl?x=/vsis3/&url=https://b.s3.us-east-1.amazonaws.com/wh/indexes/src/",
            ),
            (
                "s3://b/wh",
                "/vsicurl?URL=https://b.s3.us-east-1.amazonaws.com/wh/indexes/src/",
            ),
            (
                "s3://b/wh",
                "/vsicurl?u%72l=https://b.s3.us-east-1.amazonaws.com/wh/indexes/src/",
            ),
            (
                "s3://b/wh",
                "/vsicurl?url:https://b.s3.us-east-1.amazonaws.com/wh/indexes/src/",
            ),
            (
                "s3://b/wh",
                "/vsicurl?url=\"https://b.s3.us-east-1.amazonaws.com/wh/indexes/src/\"",
            ),
            (
                "s3://b/wh",
                "/vsicurl?url=https://example.com/x&url=https://b.s3.us-east-1.amazonaws.com/wh/indexes/src/",
            ),
            (
                "s3://b/wh",
                "/vsicurl/https://\u{ff42}.s3.us-east-1.amazonaws.com/wh/indexes/src/",
            ),
            // `..` in a GDAL path, after a nested prefix too (round 126, K1), and out of
            // another bucket, path-style.
            ("s3://b/wh", "/vsis3/b/wh/x/y/../../indexes/src/"),
            ("s3://b/wh", "/vsis3/b/wh/indexes/x/vsicurl/../../src/"),
            ("s3://b/wh", "/vsis3/b/wh/indexes/x/vsis3/../../src/"),
            ("s3://b/wh", "/vsis3/other/../b/wh/indexes/src/"),
            // An archive behind GDAL's prefix names its table (round 126, L1).
            (
                "s3://b/wh",
                "/vsizip//vsis3/b/wh/indexes/src/a.zip/t.parquet",
            ),
            (
                "s3://b/wh",
                "/vsicurl_streaming/https://b.s3.amazonaws.com/wh/indexes/src/",
            ),
            (
                "s3://b/wh",
                "/vsicurl/https://s3.amazonaws.com/b/wh/indexes/x/vsis3/../../src/",
            ),
        ];
        for (root, location) in cases {
            let names = on(root).names_of_location(location);
            assert!(
                names.contains(&"indexes/src".to_owned()),
                "{root} {location}: {names:?}"
            );
        }
        // A source location of one word is a bucket to s3fs (round 122, G1): the bucket
        // of the warehouse names all of it; a word of free text is no bucket.
        let source_names = s3().name_reader().names_of_source(" b ");
        assert!(
            source_names.contains(&"indexes".to_owned()),
            "{source_names:?}"
        );
        assert!(s3().name_reader().names_of_source("other").is_empty());
        assert!(s3().names_of_location("b").is_empty());
        // GDAL's URLs inside URLs are read once each, each up to the next: nested
        // `/vsicurl/` over S3 schemes (round 123, H0: each occurrence doubled the work,
        // 1.5 GB at twenty-two) and thousands of occurrences (round 124, J0: reading each
        // to the end was quadratic, 2.8 GB at 240 KB) end at once and name nothing.
        for nested in [
            "/vsicurl/s3://s3://x".repeat(24),
            "/vsicurl/s3://x".repeat(16_000),
            "/vsis3/x".repeat(16_000),
        ] {
            assert!(s3().names_of_location(&nested).is_empty());
        }
        // Each occurrence still reads what it names, up to the next.
        let names = s3().names_of_location("/vsis3/b/wh/indexes/src/vsis3/x");
        assert!(names.contains(&"indexes/src".to_owned()), "{names:?}");
        // An archive's path ends at its `}`: the archive itself is named.
        let names = s3().names_of_location("/vsizip/{/vsis3/b/wh/indexes/src/a.zip}/t.parquet");
        assert!(names.contains(&"indexes/src/a.zip".to_owned()), "{names:?}");
        // A later occurrence, cut at the next, climbs one directory per `..` after the
        // cut (round 126, K1): a reader behind a prefix this list lacks reads it whole.
        let later = "/vsicurl/https://h/a/vsis3/b/wh/indexes/x/y/vsis3/../../src/";
        let names = s3().names_of_location(later);
        assert!(names.contains(&"indexes".to_owned()), "{names:?}");
        // A climb past the bucket may lead to any bucket, path-style: anything.
        for anywhere in [
            "/vsicurl/https://h/a/vsis3/x/vsicurl/../../b/wh/indexes/src/",
            "/vsicurl/https://h/a/vsicurl/https://s3.amazonaws.com/x/vsis3/../../b/wh/",
        ] {
            let wh = s3();
            let mut reader = wh.name_reader();
            let names = reader.names_of_location(anywhere);
            assert!(
                names.contains(&"indexes".to_owned()),
                "{anywhere}: {names:?}"
            );
            assert!(reader.gave_up(), "{anywhere}");
        }
        // Thousands of occurrences and `..` segments still end at once.
        let climbing = format!("{}{}", "/vsis3/x/y".repeat(16_000), "/..".repeat(16_000));
        let names = s3().names_of_location(&climbing);
        assert!(names.contains(&"indexes".to_owned()), "{names:?}");
        // Groups that expand alike: one path, found without doubling the work per group.
        let alike = format!("s3://elsewhere/x/{}", "{a,a}".repeat(60));
        assert!(s3().names_of_location(&alike).is_empty());
        // Groups whose choices differ in spelling only: the work is capped, and a location
        // the expansion gave up on may name anything.
        let nested = format!("s3://elsewhere/x/{}", "{a,{a}}".repeat(40));
        let names = s3().names_of_location(&nested);
        assert!(names.contains(&"indexes".to_owned()), "{names:?}");
        // The cap is the reader's (one file's strings), not each string's (round 120, F2):
        // once spent, every string with braces may name anything, at no cost; one without
        // braces is read as ever.
        let wh = s3();
        let mut reader = wh.name_reader();
        for n in 0..1000 {
            let names =
                reader.names_of_location(&format!("s3://elsewhere/s{n}/{}", "{a,{a}}".repeat(24)));
            assert!(names.contains(&"indexes".to_owned()), "{n}: {names:?}");
        }
        assert!(
            reader
                .names_of_location("s3://b/wh/indexes/src/")
                .contains(&"indexes/src".to_owned())
        );
    }

    /// Found by the issue-26 attack: a bucket name with dots in a virtual-hosted URL.
    #[test]
    fn a_virtual_hosted_url_of_a_dotted_bucket_is_recognised() {
        let wh = Warehouse::new(
            "s3://my.dotted.bucket/wh",
            Arc::new(InMemory::new()),
            StorePath::from("wh"),
        )
        .expect("warehouse");
        for spelling in [
            "https://my.dotted.bucket.s3.us-east-1.amazonaws.com/wh/indexes/src/",
            "https://my.dotted.bucket.s3.amazonaws.com/wh/indexes/src/",
            "https://my.dotted.bucket.s3-us-west-2.amazonaws.com/wh/indexes/src/",
        ] {
            assert!(
                wh.names_of_location(spelling)
                    .contains(&"indexes/src".to_owned()),
                "{spelling}"
            );
        }
        assert!(
            wh.names_of_location("https://my.dotted.s3.amazonaws.com/wh/indexes/src/")
                .is_empty()
        );
    }
}
