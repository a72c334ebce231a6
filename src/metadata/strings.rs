//! Every string in a document that may be JSON, read in chunks of any size: what a file
//! that is not valid metadata (another format, written half, too large to parse) could
//! name. A superset of its string values: object keys count too, a string cut off by the
//! end of the file counts, and a file that is no JSON at all gives whatever it holds
//! between double quotes. A string longer than any object name can be is skipped.

/// The longest string taken, in bytes as written (a name of up to 4,096 bytes, every
/// byte of it escaped as `\uXXXX`, fits).
const MAX_STRING_BYTES: usize = 6 * 4096;

/// Collects the strings of a document fed chunk by chunk (see the module docs).
#[derive(Debug, Default)]
pub(crate) struct JsonStrings {
    /// Inside a string.
    open: bool,
    /// The previous byte inside the string was an unescaped backslash.
    escaped: bool,
    /// The open string's bytes as written (empty once it is too long).
    current: Vec<u8>,
    /// The open string is longer than [`MAX_STRING_BYTES`].
    overlong: bool,
    strings: Vec<Found>,
}

/// One string of a document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Found {
    /// Its value.
    Value(String),
    /// The text as written between its quotes, beside its value where that differs
    /// (escapes): its backslashes are the document's escapes, not the value's.
    AsWritten(String),
    /// A string longer than [`MAX_STRING_BYTES`]: no object name as written, but a
    /// reader that collapses repeated slashes, trims white space or drops `/.` segments
    /// may make one of it (round 53, A1), so it may name anything.
    Overlong,
}

impl From<String> for Found {
    fn from(text: String) -> Found {
        Found::Value(text)
    }
}

impl JsonStrings {
    /// A reader of the strings in the other pairing of the document's double quotes: the
    /// text before the first quote, between the second and the third, and so on. A
    /// document that is no JSON may hold a stray quote (in a comment of JSON with
    /// comments: `// the 5" sample`) that shifts which text lies between quotes for a
    /// reader that skips it (round 53, A3).
    pub(crate) fn other_pairing() -> JsonStrings {
        JsonStrings {
            open: true,
            ..JsonStrings::default()
        }
    }

    /// Read the next chunk of the document.
    pub(crate) fn feed(&mut self, mut chunk: &[u8]) {
        while !chunk.is_empty() {
            if !self.open {
                // Outside a string only a quote matters.
                let Some(at) = memchr::memchr(b'"', chunk) else {
                    return;
                };
                self.open = true;
                chunk = &chunk[at + 1..];
                continue;
            }
            if self.escaped {
                self.escaped = false;
                self.take(&chunk[..1]);
                chunk = &chunk[1..];
                continue;
            }
            match memchr::memchr2(b'"', b'\\', chunk) {
                None => {
                    self.take(chunk);
                    return;
                }
                Some(at) if chunk[at] == b'"' => {
                    self.take(&chunk[..at]);
                    self.close();
                    chunk = &chunk[at + 1..];
                }
                Some(at) => {
                    self.take(&chunk[..=at]);
                    self.escaped = true;
                    chunk = &chunk[at + 1..];
                }
            }
        }
    }

    /// Add bytes of the open string (up to the length no name exceeds).
    fn take(&mut self, bytes: &[u8]) {
        if self.overlong {
            return;
        }
        if self.current.len() + bytes.len() > MAX_STRING_BYTES {
            self.overlong = true;
            self.current = Vec::new();
            return;
        }
        self.current.extend_from_slice(bytes);
    }

    fn close(&mut self) {
        let raw = std::mem::take(&mut self.current);
        if std::mem::take(&mut self.overlong) {
            self.strings.push(Found::Overlong);
        } else {
            self.strings.extend(decoded(&raw));
        }
        self.open = false;
        self.escaped = false;
    }

    /// The strings found so far (not one still open), which are then forgotten.
    pub(crate) fn drain(&mut self) -> Vec<Found> {
        std::mem::take(&mut self.strings)
    }

    /// The strings found (a string the document's end cut off included).
    pub(crate) fn finish(mut self) -> Vec<Found> {
        if self.open {
            self.close();
        }
        self.strings
    }
}

/// A string as written between quotes: decoded (escapes resolved), and as written if that
/// differs or does not decode (a file of another format may mean either).
fn decoded(raw: &[u8]) -> Vec<Found> {
    let literal = String::from_utf8_lossy(raw).into_owned();
    let mut quoted = Vec::with_capacity(raw.len() + 2);
    quoted.push(b'"');
    quoted.extend_from_slice(raw);
    quoted.push(b'"');
    match serde_json::from_slice::<String>(&quoted) {
        Ok(text) if text == literal => vec![Found::Value(text)],
        Ok(text) => vec![Found::Value(text), Found::AsWritten(literal)],
        Err(_) => vec![Found::Value(literal)],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings_of(chunks: &[&[u8]]) -> Vec<String> {
        let mut strings = JsonStrings::default();
        for chunk in chunks {
            strings.feed(chunk);
        }
        strings
            .finish()
            .into_iter()
            .filter_map(|found| match found {
                Found::Value(text) | Found::AsWritten(text) => Some(text),
                Found::Overlong => None,
            })
            .collect()
    }

    #[test]
    fn every_string_of_a_json_document_in_chunks_of_any_size() {
        let document =
            br#"{"tables": ["indexes/a/1/", "x\"y"], "n": 3, "k\u0041": "\u0069ndexes/b"}"#;
        let whole = strings_of(&[document]);
        assert_eq!(
            whole,
            [
                "tables",
                "indexes/a/1/",
                "x\"y",
                "x\\\"y",
                "n",
                "kA",
                "k\\u0041",
                "indexes/b",
                "\\u0069ndexes/b"
            ]
        );
        for size in 1..8 {
            let chunks: Vec<&[u8]> = document.chunks(size).collect();
            assert_eq!(strings_of(&chunks), whole, "chunks of {size}");
        }
    }

    #[test]
    fn strings_are_drained_as_they_close_and_an_open_one_waits() {
        let mut strings = JsonStrings::default();
        strings.feed(br#"["a", "b"#);
        assert_eq!(strings.drain(), [Found::Value("a".to_owned())]);
        assert!(strings.drain().is_empty());
        strings.feed(br#"c", "d"#);
        assert_eq!(strings.drain(), [Found::Value("bc".to_owned())]);
        assert_eq!(strings.finish(), [Found::Value("d".to_owned())]);
    }

    #[test]
    fn a_string_cut_off_by_the_end_counts_and_an_endless_one_names_anything() {
        assert_eq!(
            strings_of(&[br#"{"tables": ["indexes/old/1/ivf_post"#]),
            ["tables", "indexes/old/1/ivf_post"]
        );
        let long = vec![b'a'; MAX_STRING_BYTES + 1];
        assert_eq!(
            strings_of(&[b"\"", &long, b"\" \"indexes/c\""]),
            ["indexes/c"]
        );
        assert!(strings_of(&[b"no quotes at all"]).is_empty());
        // The endless one is there, as a string that may name anything.
        let mut strings = JsonStrings::default();
        strings.feed(&[b"\"", &long[..], b"\""].concat());
        assert_eq!(strings.finish(), [Found::Overlong]);
    }

    #[test]
    fn the_other_pairing_of_quotes_reads_past_a_stray_quote() {
        let document = b"{ // the 5\" sample\n \"c\": \"indexes/old/x\" }";
        let mut other = JsonStrings::other_pairing();
        other.feed(document);
        let found = other.finish();
        assert!(
            found.contains(&Found::Value("indexes/old/x".to_owned())),
            "{found:?}"
        );
    }
}
