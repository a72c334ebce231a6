//! The public API as a reviewable snapshot (`public-api.txt` at the repository root):
//! every item a user of the crate can name from the crate root, with its signature and the
//! features that gate it, one per line, sorted. A change to the public surface fails this
//! test until the snapshot is regenerated:
//!
//! ```sh
//! UPDATE_PUBLIC_API=1 cargo test --test it public_api::   # then review the diff of public-api.txt
//! ```
//!
//! The lister reads the sources (no nightly rustdoc JSON on this toolchain): it walks the
//! public modules from `src/lib.rs`, follows `pub use` into private modules, and lists
//! the public fields, variants, trait methods and inherent `pub fn`s of every listed type.
//! Items behind `cfg(test)` are left out; other `cfg`s are printed in front of the item.
//!
//! As in rustdoc, `#[doc(hidden)]` items are left out, and so is everything under a
//! `#[doc(hidden)]` module, field, variant, method or `pub use`: what is hidden is there for
//! the workspace's own crates (the Lambda handler layer for `functions/`, the test-support
//! hooks for the tests, testkit and fuzz targets), not for users. Also as in rustdoc, a
//! `pub use` of an item that is already public under another path is one line
//! (`path: pub use target`), not a second copy of the item; a `pub use` out of a private
//! module lists the item in full. Doc comments are never part of a line.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use quote::ToTokens;
use syn::{Attribute, Fields, ImplItem, Item, TraitItem, UseTree, Visibility};

const SNAPSHOT: &str = "public-api.txt";

/// One module's items, by name: how each renders, and the modules it declares.
#[derive(Default)]
struct Module {
    public: bool,
    gates: Vec<String>,
    /// Each line: its own gates, and what follows the item's path.
    items: BTreeMap<String, Vec<Line>>,
    /// `pub use` trees, with the gates in front of them.
    uses: Vec<(Vec<String>, UseTree)>,
    children: Vec<String>,
}

/// Every module of the crate, by path (`crate`, `crate::catalog`, …), and every inherent
/// `pub fn`, by the last segment of its type's name.
#[derive(Default)]
struct Crate {
    modules: BTreeMap<String, Module>,
    methods: BTreeMap<String, BTreeSet<Line>>,
}

/// An item's line: the `cfg`s in front of it, and what follows its path.
type Line = (String, String);

fn tokens(item: &impl ToTokens) -> String {
    item.to_token_stream().to_string()
}

fn is_pub(vis: &Visibility) -> bool {
    matches!(vis, Visibility::Public(_))
}

/// `#[doc(hidden)]`: left out, as rustdoc leaves it out.
fn hidden(attrs: &[Attribute]) -> bool {
    attrs.iter().any(|a| {
        a.path().is_ident("doc")
            && a.parse_args::<syn::Ident>()
                .is_ok_and(|ident| ident == "hidden")
    })
}

/// A variant's fields without their attributes (no doc text in the snapshot).
fn variant_fields(fields: &Fields) -> String {
    let each = |f: &syn::Field| match &f.ident {
        Some(name) => format!("{name}: {}", tokens(&f.ty)),
        None => tokens(&f.ty),
    };
    match fields {
        Fields::Named(named) => format!(
            "{{ {} }}",
            named.named.iter().map(each).collect::<Vec<_>>().join(", ")
        ),
        Fields::Unnamed(unnamed) => format!(
            "({})",
            unnamed
                .unnamed
                .iter()
                .map(each)
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Fields::Unit => String::new(),
    }
}

/// `Some(gates)` for the `cfg` attributes of an item, `None` if it exists only in tests.
fn gates(attrs: &[Attribute]) -> Option<Vec<String>> {
    let mut gates = Vec::new();
    for attr in attrs.iter().filter(|a| a.path().is_ident("cfg")) {
        let text = tokens(&attr.meta);
        let test_only = text == "cfg (test)" || text.starts_with("cfg (all (test ,");
        if test_only {
            return None;
        }
        gates.push(format!("#[{text}]"));
    }
    Some(gates)
}

fn derives(attrs: &[Attribute]) -> Vec<String> {
    attrs
        .iter()
        .filter(|a| a.path().is_ident("derive"))
        .map(|a| format!("#[{}]", tokens(&a.meta)))
        .collect()
}

fn fields(fields: &Fields) -> Vec<String> {
    fields
        .iter()
        .enumerate()
        .filter(|(_, f)| is_pub(&f.vis) && !hidden(&f.attrs))
        .map(|(n, f)| {
            let name = f.ident.as_ref().map_or(n.to_string(), ToString::to_string);
            format!("::{name}: {}", tokens(&f.ty))
        })
        .collect()
}

/// How a public item renders (what follows its path on each of its lines), or `None`.
fn render(item: &Item) -> Option<(String, Vec<String>)> {
    let (name, mut lines) = match item {
        Item::Fn(f) if is_pub(&f.vis) => (
            f.sig.ident.to_string(),
            vec![format!(": {}", tokens(&f.sig))],
        ),
        Item::Const(c) if is_pub(&c.vis) => (
            c.ident.to_string(),
            vec![format!(": const {}", tokens(&c.ty))],
        ),
        Item::Static(s) if is_pub(&s.vis) => (
            s.ident.to_string(),
            vec![format!(": static {}", tokens(&s.ty))],
        ),
        Item::Type(t) if is_pub(&t.vis) => (
            t.ident.to_string(),
            vec![format!(": type{} = {}", tokens(&t.generics), tokens(&t.ty))],
        ),
        Item::Struct(s) if is_pub(&s.vis) => {
            let mut lines = vec![format!(
                ": struct{} {}",
                tokens(&s.generics),
                derives(&s.attrs).join(" ")
            )];
            lines.extend(fields(&s.fields));
            (s.ident.to_string(), lines)
        }
        Item::Enum(e) if is_pub(&e.vis) => {
            let mut lines = vec![format!(
                ": enum{} {}",
                tokens(&e.generics),
                derives(&e.attrs).join(" ")
            )];
            for variant in e.variants.iter().filter(|v| !hidden(&v.attrs)) {
                lines.push(format!(
                    "::{} {}",
                    variant.ident,
                    variant_fields(&variant.fields)
                ));
            }
            (e.ident.to_string(), lines)
        }
        Item::Trait(t) if is_pub(&t.vis) => {
            let mut lines = vec![format!(
                ": trait{}: {}",
                tokens(&t.generics),
                tokens(&t.supertraits)
            )];
            for item in &t.items {
                match item {
                    TraitItem::Fn(f) if !hidden(&f.attrs) => {
                        lines.push(format!("::{}", tokens(&f.sig)));
                    }
                    TraitItem::Type(ty) if !hidden(&ty.attrs) => {
                        lines.push(format!("::type {}", ty.ident));
                    }
                    TraitItem::Const(c) if !hidden(&c.attrs) => {
                        lines.push(format!("::const {}", c.ident));
                    }
                    _ => {}
                }
            }
            (t.ident.to_string(), lines)
        }
        _ => return None,
    };
    for line in &mut lines {
        *line = line.trim().to_owned();
    }
    Some((name, lines))
}

/// The file of module `name` declared in `file` (`#[path]` respected).
fn child_file(file: &Path, name: &str, attrs: &[Attribute]) -> PathBuf {
    let stem = file
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or_default();
    let dir = if matches!(stem, "lib" | "mod") {
        file.parent().expect("a parent").to_path_buf()
    } else {
        file.with_extension("")
    };
    for attr in attrs.iter().filter(|a| a.path().is_ident("path")) {
        if let syn::Meta::NameValue(nv) = &attr.meta
            && let syn::Expr::Lit(lit) = &nv.value
            && let syn::Lit::Str(path) = &lit.lit
        {
            return file.parent().expect("a parent").join(path.value());
        }
    }
    let flat = dir.join(format!("{name}.rs"));
    if flat.exists() {
        flat
    } else {
        dir.join(name).join("mod.rs")
    }
}

impl Crate {
    fn read(&mut self, path: &str, file: &Path, items: &[Item], public: bool, outer: Vec<String>) {
        let mut module = Module {
            public,
            gates: outer.clone(),
            ..Module::default()
        };
        for item in items {
            let attrs: &[Attribute] = match item {
                Item::Fn(i) => &i.attrs,
                Item::Const(i) => &i.attrs,
                Item::Static(i) => &i.attrs,
                Item::Type(i) => &i.attrs,
                Item::Struct(i) => &i.attrs,
                Item::Enum(i) => &i.attrs,
                Item::Trait(i) => &i.attrs,
                Item::Mod(i) => &i.attrs,
                Item::Use(i) => &i.attrs,
                Item::Impl(i) => &i.attrs,
                _ => continue,
            };
            let Some(own) = gates(attrs) else { continue };
            let hidden_item = hidden(attrs);
            let prefix = own.join(" ");
            match item {
                Item::Mod(m) => {
                    let child = format!("{path}::{}", m.ident);
                    let mut inner = outer.clone();
                    inner.extend(own);
                    let public = public && is_pub(&m.vis) && !hidden_item;
                    match &m.content {
                        Some((_, items)) => self.read(&child, file, items, public, inner),
                        None => {
                            let child_path = child_file(file, &m.ident.to_string(), &m.attrs);
                            let text = std::fs::read_to_string(&child_path)
                                .unwrap_or_else(|e| panic!("{}: {e}", child_path.display()));
                            let parsed = syn::parse_file(&text)
                                .unwrap_or_else(|e| panic!("{}: {e}", child_path.display()));
                            self.read(&child, &child_path, &parsed.items, public, inner);
                        }
                    }
                    if !module.children.contains(&m.ident.to_string()) {
                        module.children.push(m.ident.to_string());
                    }
                }
                Item::Use(u) if is_pub(&u.vis) && !hidden_item => {
                    module.uses.push((own, u.tree.clone()));
                }
                _ if hidden_item => {}
                Item::Impl(i) if i.trait_.is_none() => {
                    let syn::Type::Path(ty) = &*i.self_ty else {
                        continue;
                    };
                    let Some(last) = ty.path.segments.last() else {
                        continue;
                    };
                    for member in &i.items {
                        let line = match member {
                            ImplItem::Fn(f)
                                if is_pub(&f.vis)
                                    && !hidden(&f.attrs)
                                    && gates(&f.attrs).is_some() =>
                            {
                                format!("::{}", tokens(&f.sig))
                            }
                            // Methods a macro writes (e.g. shared builder setters).
                            ImplItem::Macro(m) => format!("::{}", tokens(&m.mac)),
                            _ => continue,
                        };
                        self.methods
                            .entry(last.ident.to_string())
                            .or_default()
                            .insert((prefix.clone(), line));
                    }
                }
                _ => {
                    if let Some((name, lines)) = render(item) {
                        let lines = lines
                            .into_iter()
                            .map(|line| (prefix.clone(), line))
                            .collect();
                        module.items.insert(name, lines);
                    }
                }
            }
        }
        // `#[cfg(feature = "x")] pub mod m;` next to `#[cfg(not(…))] pub(crate) mod m;`:
        // the public declaration is the one users see.
        if self.modules.get(path).is_some_and(|m| m.public) && !public {
            return;
        }
        self.modules.insert(path.to_owned(), module);
    }

    /// The module a `use` path names from `module`, if it is one of ours.
    fn resolve(&self, module: &str, segments: &[String]) -> Option<String> {
        let mut at = module.to_owned();
        for (n, segment) in segments.iter().enumerate() {
            at = match segment.as_str() {
                "crate" if n == 0 => "crate".to_owned(),
                "self" => at,
                "super" => at.rsplit_once("::").map(|(parent, _)| parent.to_owned())?,
                name => {
                    let child = format!("{at}::{name}");
                    if self.modules.contains_key(&child) {
                        child
                    } else if n == 0 && self.modules.contains_key(&format!("crate::{name}")) {
                        format!("crate::{name}")
                    } else {
                        return None;
                    }
                }
            };
        }
        Some(at)
    }

    /// Emit `module`'s public items under `shown`, then its public submodules.
    fn emit(&self, shown: &str, module: &str, gates: &[String], out: &mut BTreeSet<String>) {
        let Some(m) = self.modules.get(module) else {
            return;
        };
        for (name, lines) in &m.items {
            self.emit_item(&format!("{shown}::{name}"), name, lines, gates, out);
        }
        for (own, tree) in &m.uses {
            let mut gated = gates.to_vec();
            gated.extend(own.iter().cloned());
            self.emit_use(shown, module, &mut Vec::new(), tree, &gated, out);
        }
        for child in &m.children {
            let path = format!("{module}::{child}");
            if let Some(c) = self.modules.get(&path)
                && c.public
            {
                let shown_child = format!("{shown}::{child}");
                out.insert(
                    format!("{} mod {shown_child}", c.gates.join(" "))
                        .trim()
                        .to_owned(),
                );
                self.emit(&shown_child, &path, &c.gates, out);
            }
        }
    }

    fn emit_item(
        &self,
        path: &str,
        name: &str,
        lines: &[Line],
        gates: &[String],
        out: &mut BTreeSet<String>,
    ) {
        let line_of = |(own, suffix): &Line| {
            let mut gate: Vec<&str> = gates.iter().map(String::as_str).collect();
            if !own.is_empty() {
                gate.push(own);
            }
            format!("{} {path}{suffix}", gate.join(" "))
                .trim()
                .to_owned()
        };
        for line in lines {
            out.insert(line_of(line));
        }
        let is_type = lines
            .first()
            .is_some_and(|(_, l)| l.starts_with(": struct") || l.starts_with(": enum"));
        if is_type && let Some(methods) = self.methods.get(name) {
            for method in methods {
                out.insert(line_of(method));
            }
        }
    }

    fn emit_use(
        &self,
        shown: &str,
        module: &str,
        prefix: &mut Vec<String>,
        tree: &UseTree,
        gates: &[String],
        out: &mut BTreeSet<String>,
    ) {
        match tree {
            UseTree::Path(p) => {
                prefix.push(p.ident.to_string());
                self.emit_use(shown, module, prefix, &p.tree, gates, out);
                prefix.pop();
            }
            UseTree::Group(g) => {
                for tree in &g.items {
                    self.emit_use(shown, module, prefix, tree, gates, out);
                }
            }
            UseTree::Name(n) => self.emit_reexport(
                shown,
                module,
                prefix,
                &n.ident.to_string(),
                None,
                gates,
                out,
            ),
            UseTree::Rename(r) => self.emit_reexport(
                shown,
                module,
                prefix,
                &r.ident.to_string(),
                Some(r.rename.to_string()),
                gates,
                out,
            ),
            UseTree::Glob(_) => {
                let from = self.resolve(module, prefix);
                let gate = gates.join(" ");
                match from.and_then(|m| self.modules.get(&m).map(|_| m)) {
                    Some(from) => self.emit(shown, &from, gates, out),
                    None => {
                        out.insert(
                            format!("{gate} pub use {}::* in {shown}", prefix.join("::"))
                                .trim()
                                .to_owned(),
                        );
                    }
                }
            }
        }
    }

    /// Item `name` of `module`: defined there, or re-exported there by a `pub use` (followed
    /// a few levels); with the name it was defined under.
    fn find(&self, module: &str, name: &str, depth: usize) -> Option<(String, &[Line])> {
        let m = self.modules.get(module)?;
        if let Some(lines) = m.items.get(name) {
            return Some((name.to_owned(), lines));
        }
        if depth > 4 {
            return None;
        }
        m.uses.iter().find_map(|(_, tree)| {
            let (prefix, original) = leaf(tree, name, &mut Vec::new())?;
            let from = self.resolve(module, &prefix)?;
            self.find(&from, &original, depth + 1)
        })
    }

    #[allow(clippy::too_many_arguments)]
    fn emit_reexport(
        &self,
        shown: &str,
        module: &str,
        prefix: &[String],
        name: &str,
        rename: Option<String>,
        gates: &[String],
        out: &mut BTreeSet<String>,
    ) {
        let visible = rename.unwrap_or_else(|| name.to_owned());
        let path = format!("{shown}::{visible}");
        let from = self.resolve(module, prefix);
        // Already public under `from`: one line, as rustdoc shows such a re-export.
        if let Some(from) = &from
            && self.modules.get(from).is_some_and(|m| m.public)
            && self.find(from, name, 0).is_some()
        {
            let target = from.replacen("crate", "parqdb_catalog", 1);
            let gate = gates.join(" ");
            out.insert(
                format!("{gate} {path}: pub use {target}::{name}")
                    .trim()
                    .to_owned(),
            );
            return;
        }
        let found = from.and_then(|from| self.find(&from, name, 0));
        match found {
            Some((original, lines)) => self.emit_item(&path, &original, lines, gates, out),
            None => {
                let target = if prefix.is_empty() {
                    name.to_owned()
                } else {
                    format!("{}::{name}", prefix.join("::"))
                };
                let gate = gates.join(" ");
                out.insert(format!("{gate} {path}: pub use {target}").trim().to_owned());
            }
        }
    }
}

/// The path and original name of the leaf of `tree` that makes `name` visible.
fn leaf(tree: &UseTree, name: &str, prefix: &mut Vec<String>) -> Option<(Vec<String>, String)> {
    match tree {
        UseTree::Path(p) => {
            prefix.push(p.ident.to_string());
            let found = leaf(&p.tree, name, prefix);
            prefix.pop();
            found
        }
        UseTree::Group(g) => g.items.iter().find_map(|tree| leaf(tree, name, prefix)),
        UseTree::Name(n) if n.ident == name => Some((prefix.clone(), name.to_owned())),
        UseTree::Rename(r) if r.rename == name => Some((prefix.clone(), r.ident.to_string())),
        _ => None,
    }
}

fn listing() -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/lib.rs");
    let text = std::fs::read_to_string(&root).expect("src/lib.rs");
    let file = syn::parse_file(&text).expect("src/lib.rs parses");
    let mut krate = Crate::default();
    krate.read("crate", &root, &file.items, true, Vec::new());
    let mut out = BTreeSet::new();
    krate.emit("parqdb_catalog", "crate", &[], &mut out);
    let mut text = String::new();
    for line in out {
        text.push_str(&line);
        text.push('\n');
    }
    text
}

#[test]
fn the_public_api_is_the_reviewed_snapshot() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(SNAPSHOT);
    let now = listing();
    if std::env::var_os("UPDATE_PUBLIC_API").is_some() {
        std::fs::write(&path, &now).expect("write the snapshot");
        return;
    }
    let before = std::fs::read_to_string(&path).unwrap_or_default();
    let old: BTreeSet<&str> = before.lines().collect();
    let new: BTreeSet<&str> = now.lines().collect();
    let removed: Vec<&&str> = old.difference(&new).collect();
    let added: Vec<&&str> = new.difference(&old).collect();
    assert!(
        removed.is_empty() && added.is_empty(),
        "the public API changed; review it and run `UPDATE_PUBLIC_API=1 cargo test --test it public_api::`\nremoved:\n{}\nadded:\n{}",
        removed
            .iter()
            .map(|l| format!("  - {l}"))
            .collect::<Vec<_>>()
            .join("\n"),
        added
            .iter()
            .map(|l| format!("  + {l}"))
            .collect::<Vec<_>>()
            .join("\n"),
    );
}

#[test]
fn implementation_details_are_not_public() {
    let api = listing();
    for hidden in [
        "parqdb_catalog::cli",
        "parqdb_catalog::bench",
        "parqdb_catalog::catalog::write",
        "parqdb_catalog::catalog::rename",
        // The fault-injecting store is the test kit's (`parqdb_catalog_testkit::faulty`).
        "parqdb_catalog::store::faulty",
        // `#[doc(hidden)]`: the handler layer of `functions/`, and what the crate's tests
        // and fuzz targets reach into (with the `test-util` feature).
        "parqdb_catalog::lambda",
        "parqdb_catalog::catalog::record",
        "parqdb_catalog::gc::rules",
        "parqdb_catalog::publish::request",
    ] {
        assert!(
            !api.lines().any(|line| line.contains(&format!("{hidden}::"))
                || line.ends_with(&format!("mod {hidden}"))),
            "{hidden} is public"
        );
    }
}
