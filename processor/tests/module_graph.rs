//! The core crate's files depend on each other in one direction: no file reaches itself
//! through the paths its code names.
//!
//! A file depends on the file that defines each item it names: `use` paths (re-exports
//! included), and `crate::`, `super::`, `self::` or child-module paths in code. A name that
//! a module only imports or re-exports leads on to the file that defines it, so a parent
//! `mod.rs` that re-exports its children does not tie them into a circle. `mod x;` alone is
//! not an edge; `#[cfg(test)]` modules are left out; inline modules count as their file;
//! `macro_rules!` bodies are left out (their paths resolve where the macro expands).
use std::collections::{BTreeMap, BTreeSet};

/// Identifiers, string literals (as `"` and their text), `::` and other punctuation, one
/// token each; comments and char literals dropped.
fn tokens(src: &str) -> Vec<String> {
    let c: Vec<char> = src.chars().collect();
    let at = |i: usize, s: &str| s.chars().enumerate().all(|(k, ch)| c.get(i + k) == Some(&ch));
    let word = |i: usize| c.get(i).is_some_and(|ch| ch.is_alphanumeric() || *ch == '_');
    let until = |mut i: usize, end: &str, escapes: bool| {
        while i < c.len() && !at(i, end) {
            i += 1 + (escapes && c[i] == '\\') as usize;
        }
        i + end.len()
    };
    let (mut out, mut i) = (Vec::new(), 0);
    while i < c.len() {
        let start = i;
        i = match c[i] {
            '/' if at(i, "//") || at(i, "/*") => until(i + 2, if at(i, "//") { "\n" } else { "*/" }, false),
            '"' => until(i + 1, "\"", true),
            '\'' if at(i + 1, "\\") || at(i + 2, "'") => until(i + 1, "'", true),
            ':' if at(i, "::") => i + 2,
            _ if word(i) => (i..).find(|&k| !word(k)).unwrap_or(i),
            _ => i + 1,
        };
        let tok: String = c[start..i.min(c.len())].iter().collect();
        if !(tok.starts_with("//") || tok.starts_with("/*") || tok.starts_with('\'') || tok.trim().is_empty()) {
            out.push(tok.trim_end_matches('"').to_string());
        }
    }
    out
}

/// One file: the child modules it declares (with `#[path]`), and the paths it names, each
/// with the name it binds (`use` paths; `None` for the paths in its code).
#[derive(Default)]
struct Parsed {
    mods: Vec<(String, Option<String>)>,
    uses: Vec<(Vec<String>, Option<String>)>,
}

fn ident(t: Option<&String>) -> Option<&str> {
    t.map(String::as_str).filter(|s| s.starts_with(|c: char| c.is_alphanumeric() || c == '_'))
}

/// Expands the use tree at `t[*i]` under `path`, leaving `*i` after it.
fn use_tree(t: &[String], i: &mut usize, mut path: Vec<String>, out: &mut Vec<(Vec<String>, Option<String>)>) {
    while let (Some(s), Some("::")) = (ident(t.get(*i)), t.get(*i + 1).map(String::as_str)) {
        path.push(s.to_string());
        *i += 2;
    }
    match t.get(*i).map(String::as_str) {
        Some("{") => {
            *i += 1;
            while !matches!(t.get(*i).map(String::as_str), Some("}") | None) {
                use_tree(t, i, path.clone(), out);
                *i += (t[*i] == ",") as usize;
            }
        }
        Some("*") => out.push((path, None)),
        Some("self") => out.push((path.clone(), path.last().cloned())),
        Some(s) if ident(t.get(*i)).is_some() => {
            let alias = ident(t.get(*i + 1)) == Some("as");
            let name = if alias { ident(t.get(*i + 2)).filter(|a| *a != "_") } else { Some(s) };
            out.push(([&path[..], &[s.to_string()]].concat(), name.map(String::from)));
            *i += 2 * alias as usize;
        }
        _ => {}
    }
    *i += 1;
}

/// The index just after the bracketed group that opens at `t[i]`.
fn after_group(t: &[String], mut i: usize) -> usize {
    let mut depth = 0;
    while let Some(tok) = t.get(i) {
        depth += ["{", "(", "["].contains(&tok.as_str()) as i32 - ["}", ")", "]"].contains(&tok.as_str()) as i32;
        i += 1;
        if depth == 0 {
            break;
        }
    }
    i
}

fn parse(src: &str) -> Parsed {
    let t = tokens(src);
    let (mut p, mut i, mut cfg_test, mut path_attr) = (Parsed::default(), 0, false, None);
    while i < t.len() {
        let (a, b, c) = (t[i].as_str(), t.get(i + 1).map(String::as_str), t.get(i + 2).map(String::as_str));
        match (a, b, c) {
            ("#", ..) => {
                let open = i + 1 + (b == Some("!")) as usize;
                let attr = &t[open..after_group(&t, open)];
                let has = |w: &str| attr.iter().any(|a| a == w);
                cfg_test |= attr.get(1).is_some_and(|a| a == "cfg") && has("test") && !has("not");
                if attr.get(1).is_some_and(|a| a == "path") {
                    path_attr = attr.get(3).and_then(|s| s.strip_prefix('"')).map(String::from);
                }
                i = open + attr.len();
            }
            ("pub", Some("("), _) => i += 4,
            ("pub", ..) => i += 1,
            ("mod", Some(name), Some(";")) => {
                if !cfg_test {
                    p.mods.push((name.to_string(), path_attr.take()));
                }
                (cfg_test, path_attr, i) = (false, None, i + 3);
            }
            ("mod", _, Some("{")) if cfg_test => (cfg_test, i) = (false, after_group(&t, i + 2)),
            ("macro_rules", ..) => i = after_group(&t, i + 3),
            ("use", ..) => {
                i += 1;
                use_tree(&t, &mut i, Vec::new(), &mut p.uses);
            }
            (_, Some("::"), _) if ident(t.get(i)).is_some() && (i == 0 || t[i - 1] != "::") => {
                let mut found = Vec::new();
                use_tree(&t, &mut i, Vec::new(), &mut found);
                p.uses.extend(found.into_iter().map(|(path, _)| (path, None)));
            }
            _ => (cfg_test, path_attr, i) = (false, None, i + 1),
        }
    }
    p
}

type Module = Vec<String>;
/// File to the files it depends on, each with the paths that make the edge.
type Graph = BTreeMap<String, BTreeMap<String, BTreeSet<String>>>;

/// The crate's modules with their files, found by following `mod` declarations from `lib.rs`.
struct Crate(BTreeMap<Module, (String, Parsed)>);

impl Crate {
    /// `read`: a file's text from its path under `src` (with `/`).
    fn load(read: impl Fn(&str) -> Option<String>) -> Crate {
        let mut krate = Crate(BTreeMap::new());
        let mut todo = vec![(Module::new(), "lib.rs".to_string())];
        while let Some((module, file)) = todo.pop() {
            let Some(src) = read(&file) else { continue };
            let parsed = parse(&src);
            let (dir, stem) = file.rsplit_once('/').unwrap_or(("", &file));
            let own = if stem == "lib.rs" || stem == "mod.rs" { dir } else { &file[..file.len() - 3] };
            let join = |a: &str, b: &str| if a.is_empty() { b.to_string() } else { format!("{a}/{b}") };
            for (name, path) in &parsed.mods {
                let flat = join(own, &format!("{name}.rs"));
                let child = match path {
                    Some(p) => join(dir, p),
                    None if read(&flat).is_some() => flat,
                    None => join(own, &format!("{name}/mod.rs")),
                };
                todo.push(([&module[..], std::slice::from_ref(name)].concat(), child));
            }
            krate.0.insert(module, (file, parsed));
        }
        krate
    }

    /// `path` as written in module `m`, made absolute; `None` for other crates.
    fn absolute(&self, m: &[String], path: &[String]) -> Option<Module> {
        let supers = path.iter().take_while(|s| *s == "super").count();
        let (base, rest) = match path.first()?.as_str() {
            "crate" => (&m[..0], &path[1..]),
            "self" => (m, &path[1..]),
            "super" => (&m[..m.len().checked_sub(supers)?], &path[supers..]),
            first if self.0.contains_key(&[m, &[first.to_string()]].concat()) => (m, path),
            _ => return None,
        };
        Some([base, rest].concat())
    }

    /// The module whose file defines what `path` names, following imports and re-exports.
    fn definer(&self, path: &[String], depth: usize) -> Option<Module> {
        let mut m = Module::new();
        for (k, seg) in path.iter().enumerate() {
            let child = [&m[..], std::slice::from_ref(seg)].concat();
            if self.0.contains_key(&child) {
                m = child;
                continue;
            }
            let binding = self.0[&m].1.uses.iter().find(|(_, name)| name.as_ref() == Some(seg));
            if let (Some((used, _)), true) = (binding, depth < 16) {
                let target = self.absolute(&m, used)?;
                return self.definer(&[&target[..], &path[k + 1..]].concat(), depth + 1);
            }
            break;
        }
        Some(m)
    }

    fn edges(&self) -> Graph {
        let mut edges = Graph::new();
        for (m, (from, p)) in &self.0 {
            for (path, _) in &p.uses {
                let Some(to) = self.absolute(m, path).and_then(|a| self.definer(&a, 0)) else { continue };
                if to != *m {
                    let names = edges.entry(from.clone()).or_default().entry(self.0[&to].0.clone()).or_default();
                    names.insert(path.join("::"));
                }
            }
        }
        edges
    }
}

/// The groups of more than one file that reach each other.
fn cycles(edges: &Graph) -> BTreeSet<BTreeSet<String>> {
    let reach = |from: &String| {
        let (mut seen, mut todo) = (BTreeSet::new(), vec![from]);
        while let Some(f) = todo.pop() {
            todo.extend(edges.get(f).into_iter().flat_map(|e| e.keys()).filter(|t| seen.insert(t.to_string())));
        }
        seen
    };
    let reached: BTreeMap<&String, BTreeSet<String>> = edges.keys().map(|f| (f, reach(f))).collect();
    let back = |f: &String, t: &String| reached.get(t).is_some_and(|r| r.contains(f));
    let groups = reached.iter().map(|(f, r)| r.iter().filter(|t| back(f, t)).cloned().collect::<BTreeSet<_>>());
    groups.filter(|g| g.len() > 1).collect()
}

#[test]
fn core_crate_files_form_no_cycle() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let edges = Crate::load(|file| std::fs::read_to_string(root.join(file)).ok()).edges();
    assert!(edges.len() > 20, "read the crate's files from {}", root.display());
    let mut report = String::new();
    for group in cycles(&edges) {
        report += &format!("\ncycle of {} files:\n", group.len());
        for (from, to, names) in group.iter().flat_map(|f| edges[f].iter().map(move |(t, n)| (f, t, n))) {
            if group.contains(to) {
                report += &format!("  {from} -> {to}: {}\n", Vec::from_iter(names.iter().cloned()).join(", "));
            }
        }
    }
    assert!(report.is_empty(), "files in processor/src depend on each other in circles:{report}");
}

mod resolver {
    use super::*;

    fn graph(files: &[(&str, &str)]) -> Graph {
        Crate::load(|file| files.iter().find(|(f, _)| *f == file).map(|(_, s)| s.to_string())).edges()
    }

    fn pairs(files: &[(&str, &str)]) -> Vec<String> {
        graph(files).into_iter().flat_map(|(f, to)| to.into_keys().map(move |t| format!("{f} -> {t}"))).collect()
    }

    #[test]
    fn an_empty_crate_and_bare_mod_declarations_have_no_edges() {
        assert!(graph(&[]).is_empty() && graph(&[("lib.rs", "")]).is_empty() && cycles(&Graph::new()).is_empty());
        assert!(graph(&[("lib.rs", "mod a; pub mod b;"), ("a.rs", ""), ("b/mod.rs", "")]).is_empty());
    }

    #[test]
    fn use_trees_resolve_to_the_deepest_module_file() {
        let files = [
            ("lib.rs", "mod a; mod b; mod c;"),
            ("a.rs", "use crate::{b::{X, d::{self, Y as Z}}, c};"),
            ("b/mod.rs", "pub mod d; pub struct X;"),
            ("b/d.rs", "pub struct Y;"),
            ("c.rs", "#[path = \"v.rs\"]\nmod v;"),
            ("v.rs", "use super::super::a::X;"),
        ];
        assert_eq!(graph(&files)["a.rs"]["b/mod.rs"], BTreeSet::from(["crate::b::X".to_string()]));
        assert_eq!(pairs(&files), ["a.rs -> b/d.rs", "a.rs -> b/mod.rs", "a.rs -> c.rs", "v.rs -> b/mod.rs"]);
    }

    #[test]
    fn paths_in_code_count_but_comments_strings_and_test_modules_do_not() {
        let files = [
            ("lib.rs", "mod a; mod b; mod c; mod t;"),
            ("a.rs", "// crate::c::X\nfn f() -> u8 { let _ = \"crate::c\"; '\"'; crate::b::g(); self::h() }"),
            ("b.rs", "#[cfg(test)]\nmod tests { use crate::a::f; }\n#[cfg(all(test, unix))]\npub(crate) mod t2;"),
            ("b/t2.rs", "use crate::a::f;"),
            ("c.rs", "/* crate::a */ macro_rules! m { () => { crate::a::f() }; }"),
            ("t.rs", "use super::a::f; use std::fmt;"),
        ];
        assert_eq!(pairs(&files), ["a.rs -> b.rs", "t.rs -> a.rs"]);
    }

    #[test]
    fn re_exports_lead_to_the_defining_file_but_parents_items_close_cycles() {
        let files = [
            ("lib.rs", "mod s; pub use s::Store;"),
            ("s/mod.rs", "mod store; mod log; pub use store::Store; use std::sync::Arc; pub struct Def;"),
            ("s/store.rs", "pub struct Store;"),
            ("s/log.rs", "use super::{Arc, Store}; fn f(_: crate::Store) {}"),
        ];
        assert_eq!(pairs(&files), ["lib.rs -> s/store.rs", "s/log.rs -> s/store.rs", "s/mod.rs -> s/store.rs"]);
        assert!(cycles(&graph(&files)).is_empty());
        let mut files = files.to_vec();
        files[2].1 = "pub struct Store(super::Def);";
        let both = BTreeSet::from(["s/mod.rs".to_string(), "s/store.rs".to_string()]);
        assert_eq!(cycles(&graph(&files)), BTreeSet::from([both]));
    }
}
