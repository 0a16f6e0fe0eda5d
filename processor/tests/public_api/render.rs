//! Renders a crate's public API from rustdoc's JSON output as sorted lines, one per item:
//! every path a user can name (modules, types, fields, variants, functions and methods
//! with their signatures, constants, traits and their items), the trait implementations of
//! the crate's types (with `Send` and `Sync`; the other auto traits, blanket
//! implementations and derives' unstable marker traits are left out as noise), and
//! re-exports of other crates' items.
//!
//! The crate's own types are printed with their shortest public path, other crates' with
//! the path rustdoc knows them by (`alloc::string::String`), so a dependency's type in a
//! signature shows its crate.

use std::collections::{BTreeSet, HashMap, HashSet};

use serde_json::Value;

/// The listing of the crate in `doc` (rustdoc's JSON output, parsed).
pub fn render(doc: &Value) -> Vec<String> {
    let root = id_of(&doc["root"]);
    let name = doc["index"][&root]["name"].as_str().expect("root name").to_string();
    let mut canonical = HashMap::new();
    public_paths(doc, &root, &name, &mut canonical, &mut HashSet::new());
    let mut r = Renderer { doc, lines: BTreeSet::new(), visited: HashSet::new(), canonical };
    r.module(&root, &name);
    r.lines.into_iter().collect()
}

pub(crate) struct Renderer<'a> {
    pub(crate) doc: &'a Value,
    lines: BTreeSet<String>,
    visited: HashSet<(String, String)>,
    /// A local item's shortest public path (fewest segments, then the first in order).
    pub(crate) canonical: HashMap<String, String>,
}

/// Records the public paths of the items of module `id` (at `path`) in `out`, keeping the
/// shortest for each item.
fn public_paths(doc: &Value, id: &str, path: &str, out: &mut HashMap<String, String>, seen: &mut HashSet<String>) {
    if !seen.insert(format!("{id}@{path}")) {
        return;
    }
    let index = &doc["index"];
    for child in index[id]["inner"]["module"]["items"].as_array().into_iter().flatten() {
        let child = id_of(child);
        let Some(item) = index.get(&child) else { continue };
        if item["visibility"] != "public" {
            continue;
        }
        let (kind, inner) = tag(&item["inner"]);
        let (target, name) = if kind == "use" {
            let Some(target) = inner["id"].as_u64().map(|n| n.to_string()) else { continue };
            if inner["is_glob"] == true {
                if index.get(&target).is_some() {
                    public_paths(doc, &target, path, out, seen);
                }
                continue;
            }
            (target, inner["name"].as_str().unwrap_or("_").to_string())
        } else {
            (child, item["name"].as_str().unwrap_or("_").to_string())
        };
        let Some(target_item) = index.get(&target) else { continue };
        let full = format!("{path}::{name}");
        let shorter = |old: &String| (full.matches("::").count(), &full) < (old.matches("::").count(), old);
        if out.get(&target).is_none_or(shorter) {
            out.insert(target.clone(), full.clone());
        }
        if tag(&target_item["inner"]).0 == "module" {
            public_paths(doc, &target, &full, out, seen);
        }
    }
}

pub(crate) fn id_of(v: &Value) -> String {
    match v {
        Value::Number(n) => n.to_string(),
        Value::String(s) => s.clone(),
        other => panic!("not an id: {other}"),
    }
}

/// The single key of an externally tagged enum value, and its content.
pub(crate) fn tag(v: &Value) -> (&str, &Value) {
    match v {
        Value::Object(m) if m.len() == 1 => {
            let (k, v) = m.iter().next().expect("one key");
            (k.as_str(), v)
        }
        Value::String(s) => (s.as_str(), &Value::Null),
        other => panic!("not a tagged value: {other}"),
    }
}

impl<'a> Renderer<'a> {
    pub(crate) fn item(&self, id: &str) -> Option<&'a Value> {
        self.doc["index"].get(id)
    }

    fn module(&mut self, id: &str, path: &str) {
        if !self.visited.insert((id.to_string(), path.to_string())) {
            return;
        }
        let Some(module) = self.item(id) else { return };
        if path.contains("::") {
            self.lines.insert(format!("pub mod {path}"));
        }
        for child in module["inner"]["module"]["items"].as_array().into_iter().flatten() {
            let child = id_of(child);
            if let Some(item) = self.item(&child) {
                self.entry(&child, item, path);
            }
        }
    }

    /// An item of the module at `parent`.
    fn entry(&mut self, id: &str, item: &'a Value, parent: &str) {
        if item["visibility"] != "public" {
            return;
        }
        let (kind, inner) = tag(&item["inner"]);
        if kind == "use" {
            return self.reexport(inner, parent);
        }
        let name = item["name"].as_str().unwrap_or("_");
        self.named(id, item, &format!("{parent}::{name}"));
    }

    fn reexport(&mut self, inner: &'a Value, parent: &str) {
        let target = inner["id"].as_u64().map(|n| n.to_string());
        let local = target.as_deref().and_then(|t| self.item(t).map(|item| (t.to_string(), item)));
        match (local, inner["is_glob"].as_bool() == Some(true)) {
            (Some((_, module)), true) => {
                for child in module["inner"]["module"]["items"].as_array().into_iter().flatten() {
                    let child = id_of(child);
                    if let Some(item) = self.item(&child) {
                        self.entry(&child, item, parent);
                    }
                }
            }
            (Some((t, item)), false) => {
                let name = inner["name"].as_str().expect("use name");
                self.named(&t, item, &format!("{parent}::{name}"));
            }
            (None, glob) => {
                let source = inner["source"].as_str().unwrap_or("?");
                let source = target.as_deref().and_then(|t| self.path_of(t)).unwrap_or_else(|| source.to_string());
                let name = inner["name"].as_str().unwrap_or("_");
                let alias = if glob {
                    "::*".to_string()
                } else if source.ends_with(&format!("::{name}")) {
                    String::new()
                } else {
                    format!(" as {name}")
                };
                self.lines.insert(format!("pub use {parent}::{{{source}{alias}}}"));
            }
        }
    }

    /// A local item reachable as `path`.
    fn named(&mut self, id: &str, item: &'a Value, path: &str) {
        let (kind, inner) = tag(&item["inner"]);
        let attrs = attrs(item);
        match kind {
            "module" => self.module(id, path),
            "struct" => {
                let generics = self.generics(&inner["generics"]);
                let (skind, fields) = tag(&inner["kind"]);
                match skind {
                    "plain" => {
                        self.lines.insert(format!("{attrs}pub struct {path}{generics}"));
                        self.fields(&fields["fields"], path);
                    }
                    "tuple" => {
                        let shown = self.tuple_fields(fields, "pub ");
                        self.lines.insert(format!("{attrs}pub struct {path}{generics}({shown})"));
                    }
                    _ => {
                        self.lines.insert(format!("{attrs}pub struct {path}{generics}"));
                    }
                }
                self.impls(&inner["impls"], path);
            }
            "enum" => {
                let generics = self.generics(&inner["generics"]);
                self.lines.insert(format!("{attrs}pub enum {path}{generics}"));
                for v in inner["variants"].as_array().into_iter().flatten() {
                    let Some(variant) = self.item(&id_of(v)) else { continue };
                    self.variant(variant, &format!("{path}::{}", variant["name"].as_str().unwrap_or("_")));
                }
                self.impls(&inner["impls"], path);
            }
            "union" => {
                self.lines.insert(format!("{attrs}pub union {path}"));
                self.impls(&inner["impls"], path);
            }
            "function" => {
                let line = self.function(inner, path);
                self.lines.insert(format!("{attrs}{line}"));
            }
            "trait" => self.trait_(inner, path, &attrs),
            "type_alias" => {
                let generics = self.generics(&inner["generics"]);
                self.lines.insert(format!("pub type {path}{generics} = {}", self.ty(&inner["type"])));
            }
            "constant" => {
                self.lines.insert(format!("pub const {path}: {}", self.ty(&inner["type"])));
            }
            "static" => {
                let m = if inner["is_mutable"] == true { "mut " } else { "" };
                self.lines.insert(format!("pub static {m}{path}: {}", self.ty(&inner["type"])));
            }
            "macro" | "proc_macro" => {
                self.lines.insert(format!("pub macro {path}!"));
            }
            other => {
                self.lines.insert(format!("pub {other} {path}"));
            }
        }
    }

    fn fields(&mut self, fields: &Value, path: &str) {
        for f in fields.as_array().into_iter().flatten() {
            let Some(field) = self.item(&id_of(f)) else { continue };
            if field["visibility"] != "public" {
                continue;
            }
            let name = field["name"].as_str().unwrap_or("_");
            self.lines.insert(format!("pub {path}::{name}: {}", self.ty(&field["inner"]["struct_field"])));
        }
    }

    /// The types of a tuple's fields, `_` for the private ones.
    fn tuple_fields(&self, fields: &Value, vis: &str) -> String {
        let shown: Vec<String> = fields
            .as_array()
            .into_iter()
            .flatten()
            .map(|f| match f {
                Value::Null => "_".to_string(),
                f => self
                    .item(&id_of(f))
                    .map_or("_".into(), |f| format!("{vis}{}", self.ty(&f["inner"]["struct_field"]))),
            })
            .collect();
        shown.join(", ")
    }

    fn variant(&mut self, variant: &'a Value, path: &str) {
        let attrs = attrs(variant);
        let (kind, inner) = tag(&variant["inner"]["variant"]["kind"]);
        match kind {
            "tuple" => {
                let shown = self.tuple_fields(inner, "");
                self.lines.insert(format!("{attrs}pub {path}({shown})"));
            }
            "struct" => {
                self.lines.insert(format!("{attrs}pub {path}"));
                // Variant fields are public with their enum.
                for f in inner["fields"].as_array().into_iter().flatten() {
                    let Some(field) = self.item(&id_of(f)) else { continue };
                    let name = field["name"].as_str().unwrap_or("_");
                    self.lines.insert(format!("pub {path}::{name}: {}", self.ty(&field["inner"]["struct_field"])));
                }
            }
            _ => {
                self.lines.insert(format!("{attrs}pub {path}"));
            }
        }
    }

    fn trait_(&mut self, inner: &'a Value, path: &str, attrs: &str) {
        let generics = self.generics(&inner["generics"]);
        let bounds = self.bounds(&inner["bounds"]);
        let bounds = if bounds.is_empty() { String::new() } else { format!(": {bounds}") };
        let unsafe_ = if inner["is_unsafe"] == true { "unsafe " } else { "" };
        self.lines.insert(format!("{attrs}pub {unsafe_}trait {path}{generics}{bounds}"));
        for i in inner["items"].as_array().into_iter().flatten() {
            let Some(item) = self.item(&id_of(i)) else { continue };
            let name = item["name"].as_str().unwrap_or("_");
            self.assoc(item, &format!("{path}::{name}"));
        }
        for i in inner["implementations"].as_array().into_iter().flatten() {
            if let Some(imp) = self.item(&id_of(i)) {
                self.impl_line(imp);
            }
        }
    }

    /// An associated item of a trait or an impl.
    fn assoc(&mut self, item: &'a Value, path: &str) {
        let (kind, inner) = tag(&item["inner"]);
        let line = match kind {
            "function" => self.function(inner, path),
            "assoc_type" => {
                let bounds = self.bounds(&inner["bounds"]);
                let bounds = if bounds.is_empty() { String::new() } else { format!(": {bounds}") };
                let value = match &inner["type"] {
                    Value::Null => String::new(),
                    t => format!(" = {}", self.ty(t)),
                };
                format!("pub type {path}{bounds}{value}")
            }
            "assoc_const" => format!("pub const {path}: {}", self.ty(&inner["type"])),
            other => format!("pub {other} {path}"),
        };
        self.lines.insert(line);
    }

    fn impls(&mut self, impls: &'a Value, path: &str) {
        for i in impls.as_array().into_iter().flatten() {
            let Some(imp) = self.item(&id_of(i)) else { continue };
            let inner = &imp["inner"]["impl"];
            if inner["trait"].is_null() {
                for m in inner["items"].as_array().into_iter().flatten() {
                    let Some(item) = self.item(&id_of(m)) else { continue };
                    if item["visibility"] != "public" {
                        continue;
                    }
                    let name = item["name"].as_str().unwrap_or("_");
                    self.assoc(item, &format!("{path}::{name}"));
                }
            } else {
                self.impl_line(imp);
            }
        }
    }

    /// `impl Trait for Type`, for the implementations that are part of the contract.
    fn impl_line(&mut self, imp: &'a Value) {
        let inner = &imp["inner"]["impl"];
        if !inner["blanket_impl"].is_null() {
            return;
        }
        let trait_ = self.path(&inner["trait"]);
        if NOT_CONTRACT.contains(&trait_.as_str()) {
            return;
        }
        if inner["is_synthetic"] == true && !matches!(trait_.as_str(), "core::marker::Send" | "core::marker::Sync") {
            return;
        }
        let generics = self.generics(&inner["generics"]);
        let neg = if inner["is_negative"] == true { "!" } else { "" };
        let unsafe_ = if inner["is_unsafe"] == true { "unsafe " } else { "" };
        let where_ = self.where_clause(&inner["generics"]);
        self.lines.insert(format!("{unsafe_}impl{generics} {neg}{trait_} for {}{where_}", self.ty(&inner["for"])));
    }
}

/// Unstable traits that derives implement, which a user cannot name: the toolchain's
/// business, not the crate's.
const NOT_CONTRACT: &[&str] = &["core::clone::TrivialClone", "core::marker::StructuralPartialEq"];

/// The attributes that are part of the contract.
fn attrs(item: &Value) -> String {
    let mut out = String::new();
    for a in item["attrs"].as_array().into_iter().flatten() {
        if a == "non_exhaustive" {
            out.push_str("#[non_exhaustive] ");
        }
    }
    if !item["deprecation"].is_null() {
        out.push_str("#[deprecated] ");
    }
    out
}
