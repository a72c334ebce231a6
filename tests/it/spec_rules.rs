//! `docs/spec-rules.md` names the tests that prove each rule of the specs; this test keeps
//! every name valid (issue 27, item 5). In the "proved by" column of every rule row:
//!
//! * `path.rs` must be a file of the repository and `path.rs::name` a function in it
//!   (`publish_suite!` stands for `tests/it/support/publish/mod.rs`);
//! * a bare name after a file (or inside the parentheses following one) is a function in
//!   that file, one after the word "conformance" a case of `tests/it/support/conformance.rs`
//!   that `catalog_conformance!` instantiates on every backend;
//! * `valid/…`, `invalid/…` and `successor/…` are metadata fixtures (a successor case is
//!   its `.base.json` and `.new.json` pair).
//!
//! Names may use `*` and `{a,b}`; each alternative must match at least one function or
//! fixture. Backticked text in a parenthesis after anything else (a conformance case, a
//! fixture) is commentary.

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|err| panic!("read {}: {err}", path.display()))
}

/// `{a,b}` alternatives, expanded (an alternative that is `…` stands for "and more" and
/// is dropped).
fn expand(pattern: &str) -> Vec<String> {
    let (Some(open), Some(close)) = (pattern.find('{'), pattern.find('}')) else {
        return vec![pattern.to_owned()];
    };
    let (head, tail) = (&pattern[..open], &pattern[close + 1..]);
    pattern[open + 1..close]
        .split(',')
        .map(str::trim)
        .filter(|alternative| *alternative != "…" && !alternative.is_empty())
        .flat_map(|alternative| expand(&format!("{head}{alternative}{tail}")))
        .collect()
}

/// Whether `text` matches `pattern`, whose `*` matches any run of characters.
fn glob(pattern: &str, text: &str) -> bool {
    match pattern.split_once('*') {
        None => pattern == text,
        Some((head, rest)) => {
            let Some(after) = text.strip_prefix(head) else {
                return false;
            };
            (0..=after.len())
                .filter(|at| after.is_char_boundary(*at))
                .any(|at| glob(rest, &after[at..]))
        }
    }
}

/// The names of the functions defined in a source file.
fn functions(source: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = source;
    while let Some(at) = rest.find("fn ") {
        let boundary = rest[..at]
            .chars()
            .last()
            .is_none_or(|c| !(c.is_alphanumeric() || c == '_'));
        rest = &rest[at + 3..];
        let name: String = rest
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        if boundary && !name.is_empty() {
            names.push(name);
        }
    }
    names
}

fn is_name(token: &str) -> bool {
    token.chars().any(|c| c.is_ascii_lowercase())
        && token
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '*')
}

/// The file a token names, if it is a repository file (or `publish_suite!`).
fn file_of(token: &str) -> Option<String> {
    if token == "publish_suite!" {
        return Some("tests/it/support/publish/mod.rs".to_owned());
    }
    token.ends_with(".rs").then(|| token.to_owned())
}

struct Checker {
    conformance: Vec<String>,
    instantiated: String,
    problems: Vec<String>,
    checked: usize,
}

impl Checker {
    fn function(&mut self, row: &str, file: &str, pattern: &str) {
        self.checked += 1;
        let path = root().join(file);
        if !path.is_file() {
            self.problems.push(format!("{row}: no file `{file}`"));
            return;
        }
        let defined = functions(&read(&path));
        for name in expand(pattern) {
            if !defined.iter().any(|defined| glob(&name, defined)) {
                self.problems
                    .push(format!("{row}: no function `{name}` in `{file}`"));
            }
        }
    }

    fn conformance(&mut self, row: &str, pattern: &str) {
        self.checked += 1;
        for name in expand(pattern) {
            if !self.conformance.iter().any(|case| glob(&name, case)) {
                self.problems
                    .push(format!("{row}: no conformance case `{name}`"));
            } else if !name.contains('*')
                && !self.instantiated.contains(&format!("=> {name},"))
                && !self.instantiated.contains(&format!("=> {name}\n"))
                && !self.instantiated.contains(&format!("::{name}("))
            {
                self.problems.push(format!(
                    "{row}: conformance case `{name}` is not instantiated by catalog_conformance!"
                ));
            }
        }
    }

    fn fixture(&mut self, row: &str, pattern: &str) {
        self.checked += 1;
        let fixtures = root().join("tests/fixtures/metadata");
        for name in expand(pattern) {
            let Some((kind, stem)) = name.split_once('/') else {
                continue;
            };
            if stem.is_empty() {
                // Every fixture of a kind: the directory holds some.
                if std::fs::read_dir(fixtures.join(kind)).map_or(true, |mut e| e.next().is_none()) {
                    self.problems
                        .push(format!("{row}: no fixtures under `{name}`"));
                }
                continue;
            }
            let files: Vec<String> = std::fs::read_dir(fixtures.join(kind))
                .map(|entries| {
                    entries
                        .flatten()
                        .filter_map(|entry| entry.file_name().to_str().map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default();
            let found = if kind == "successor" {
                ["base", "new"].iter().all(|side| {
                    files
                        .iter()
                        .any(|file| glob(&format!("{stem}.{side}.json"), file))
                })
            } else {
                files.iter().any(|file| glob(&format!("{stem}.json"), file))
            };
            if !found {
                self.problems.push(format!("{row}: no fixture `{name}`"));
            }
        }
    }

    /// Check the "proved by" cell of one rule row.
    fn cell(&mut self, row: &str, cell: &str) {
        // Walk the cell: backticked tokens, parentheses and `;` (which ends a "conformance"
        // list). `owner` is what a parenthesis belongs to.
        let mut file: Option<String> = None;
        let mut in_conformance = false;
        let mut parens: Vec<Option<String>> = Vec::new();
        let mut last_file_token: Option<String> = None;
        let mut rest = cell;
        while !rest.is_empty() {
            let next_tick = rest.find('`').unwrap_or(rest.len());
            let text = &rest[..next_tick];
            for (at, c) in text.char_indices() {
                match c {
                    '(' => parens.push(last_file_token.take()),
                    ')' => {
                        parens.pop();
                    }
                    ';' if parens.is_empty() => {
                        in_conformance = false;
                        file = None;
                    }
                    _ => {}
                }
                if parens.is_empty() && text[at..].starts_with("conformance") {
                    in_conformance = true;
                    file = None;
                }
                if !c.is_whitespace() && c != '(' {
                    last_file_token = None;
                }
            }
            if next_tick == rest.len() {
                break;
            }
            let after = &rest[next_tick + 1..];
            let Some(end) = after.find('`') else { break };
            let token = &after[..end];
            rest = &after[end + 1..];
            let inside = parens.last().cloned();
            match inside {
                // Inside a parenthesis that belongs to a file: its functions.
                Some(Some(owner)) => {
                    if let Some(named) = file_of(token) {
                        // A file named inside the parenthesis owns the names after it.
                        self.function(row, &named, "*");
                        if let Some(last) = parens.last_mut() {
                            *last = Some(named);
                        }
                    } else if is_name(token) {
                        self.function(row, &owner, token);
                    }
                    continue;
                }
                // Commentary, except files it names.
                Some(None) => {
                    if let Some(named) = file_of(token) {
                        self.function(row, &named, "*");
                    }
                    continue;
                }
                None => {}
            }
            if let Some((path, name)) = token.split_once("::") {
                let path = file_of(path).unwrap_or_else(|| path.to_owned());
                self.function(row, &path, name);
                file = Some(path.clone());
                last_file_token = Some(path);
                in_conformance = false;
            } else if let Some(named) = file_of(token) {
                self.function(row, &named, "*");
                file = Some(named.clone());
                last_file_token = Some(named);
                in_conformance = false;
            } else if ["valid/", "invalid/", "successor/"]
                .iter()
                .any(|kind| token.starts_with(kind))
            {
                self.fixture(row, token);
            } else if is_name(token) {
                if in_conformance {
                    self.conformance(row, token);
                } else if let Some(file) = file.clone() {
                    self.function(row, &file, token);
                } else {
                    self.problems
                        .push(format!("{row}: `{token}` names no file, case or fixture"));
                }
            }
        }
    }
}

#[test]
fn every_test_the_rule_table_names_exists() {
    let conformance = read(&root().join("tests/it/support/conformance.rs"));
    let cases = conformance
        .lines()
        .filter_map(|line| line.trim().strip_prefix("pub async fn "))
        .map(|rest| rest.split('(').next().unwrap_or_default().to_owned())
        .collect();
    let mut checker = Checker {
        conformance: cases,
        instantiated: conformance.clone(),
        problems: Vec::new(),
        checked: 0,
    };
    let doc = read(&root().join("docs/spec-rules.md"));
    let mut rows = 0;
    for line in doc.lines() {
        let cells: Vec<&str> = line.split(" | ").collect();
        let Some(id) = cells.first().and_then(|first| first.strip_prefix("| ")) else {
            continue;
        };
        if !(id.starts_with('C') || id.starts_with('M')) || cells.len() < 3 {
            continue;
        }
        rows += 1;
        let proved_by = cells[2..].join(" | ");
        let proved_by = proved_by.trim_end_matches(" |").trim_end_matches('|');
        checker.cell(id, proved_by);
    }
    assert!(rows >= 70, "only {rows} rule rows found");
    assert!(
        checker.checked >= 200,
        "only {} references checked",
        checker.checked
    );
    assert!(
        checker.problems.is_empty(),
        "docs/spec-rules.md names {} test(s) that do not exist:\n{}",
        checker.problems.len(),
        checker.problems.join("\n")
    );
}

#[test]
fn the_checker_finds_what_is_missing() {
    let mut checker = Checker {
        conformance: vec!["register_and_load".to_owned()],
        instantiated: "=> register_and_load,".to_owned(),
        problems: Vec::new(),
        checked: 0,
    };
    checker.cell(
        "X1",
        "conformance `register_and_load` (`EMBEDDINGS` ≠ `embeddings`), `no_such_case`; \
         `src/json.rs::maps_refuse_duplicate_keys_with_their_path`, `no_such_test`; \
         `src/metadata/strict.rs::strict_map_rejects_duplicates`; \
         `tests/it/reliability/linearizability.rs` (`checker_rejects_two_registrations`, `nope_*`); \
         fixtures `invalid/uuid-*`, `invalid/format-version-{0,2,nope}`, `successor/ok-append`, \
         `successor/nope`",
    );
    let expected = [
        "no conformance case `no_such_case`",
        "no function `no_such_test` in `src/json.rs`",
        "no function `strict_map_rejects_duplicates` in `src/metadata/strict.rs`",
        "no function `nope_*` in `tests/it/reliability/linearizability.rs`",
        "no fixture `invalid/format-version-nope`",
        "no fixture `successor/nope`",
    ];
    assert_eq!(
        checker.problems.len(),
        expected.len(),
        "{:#?}",
        checker.problems
    );
    for (problem, expected) in checker.problems.iter().zip(expected) {
        assert!(problem.ends_with(expected), "{problem} vs {expected}");
    }
    assert_eq!(expand("a-{b,c,…}"), ["a-b", "a-c"]);
    assert!(glob("*_is_linearizable", "memory_is_linearizable"));
    assert!(!glob("memory_*", "s3_histories"));
}
