//! Signatures and types as rustdoc's JSON output describes them, printed as Rust.

use serde_json::Value;

use crate::render::{id_of, tag, Renderer};

impl Renderer<'_> {
    pub(crate) fn function(&self, inner: &Value, path: &str) -> String {
        let header = &inner["header"];
        let mut quals = String::new();
        for (flag, word) in [("is_const", "const "), ("is_async", "async "), ("is_unsafe", "unsafe ")] {
            if header[flag] == true {
                quals.push_str(word);
            }
        }
        let generics = self.generics(&inner["generics"]);
        let inputs: Vec<String> = inner["sig"]["inputs"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|arg| {
                let name = arg[0].as_str().unwrap_or("_");
                let ty = &arg[1];
                if name == "self" {
                    match tag(ty) {
                        ("generic", Value::String(s)) if s == "Self" => return "self".to_string(),
                        ("borrowed_ref", r) if r["type"]["generic"] == "Self" => {
                            let lt = r["lifetime"].as_str().map(|l| format!("{l} ")).unwrap_or_default();
                            let m = if r["is_mutable"] == true { "mut " } else { "" };
                            return format!("&{lt}{m}self");
                        }
                        _ => {}
                    }
                }
                format!("{name}: {}", self.ty(ty))
            })
            .collect();
        let output = match &inner["sig"]["output"] {
            Value::Null => String::new(),
            t => format!(" -> {}", self.ty(t)),
        };
        let where_ = self.where_clause(&inner["generics"]);
        format!("pub {quals}fn {path}{generics}({}){output}{where_}", inputs.join(", "))
    }

    /// `<'a, T: Bound, const N: usize>`, without the synthetic parameters of `impl Trait`.
    pub(crate) fn generics(&self, g: &Value) -> String {
        let params: Vec<String> = g["params"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|p| {
                let name = p["name"].as_str().unwrap_or("_");
                let (kind, k) = tag(&p["kind"]);
                match kind {
                    "lifetime" => Some(name.to_string()),
                    "type" if k["is_synthetic"] == true => None,
                    "type" => {
                        let bounds = self.bounds(&k["bounds"]);
                        let default = match &k["default"] {
                            Value::Null => String::new(),
                            t => format!(" = {}", self.ty(t)),
                        };
                        Some(if bounds.is_empty() {
                            format!("{name}{default}")
                        } else {
                            format!("{name}: {bounds}{default}")
                        })
                    }
                    "const" => Some(format!("const {name}: {}", self.ty(&k["type"]))),
                    _ => Some(name.to_string()),
                }
            })
            .collect();
        if params.is_empty() {
            String::new()
        } else {
            format!("<{}>", params.join(", "))
        }
    }

    pub(crate) fn where_clause(&self, g: &Value) -> String {
        let preds: Vec<String> = g["where_predicates"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|p| {
                let (kind, p) = tag(p);
                match kind {
                    "bound_predicate" => format!("{}: {}", self.ty(&p["type"]), self.bounds(&p["bounds"])),
                    "lifetime_predicate" => {
                        let outlives: Vec<&str> =
                            p["outlives"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
                        format!("{}: {}", p["lifetime"].as_str().unwrap_or("'_"), outlives.join(" + "))
                    }
                    "eq_predicate" => format!("{} = {}", self.ty(&p["lhs"]), self.term(&p["rhs"])),
                    other => other.to_string(),
                }
            })
            .collect();
        if preds.is_empty() {
            String::new()
        } else {
            format!(" where {}", preds.join(", "))
        }
    }

    pub(crate) fn bounds(&self, bounds: &Value) -> String {
        let shown: Vec<String> = bounds
            .as_array()
            .into_iter()
            .flatten()
            .map(|b| {
                let (kind, b) = tag(b);
                match kind {
                    "trait_bound" => {
                        let maybe = if b["modifier"] == "maybe" { "?" } else { "" };
                        format!("{maybe}{}{}", self.hrtb(&b["generic_params"]), self.path(&b["trait"]))
                    }
                    "outlives" => b.as_str().unwrap_or("'_").to_string(),
                    other => other.to_string(),
                }
            })
            .collect();
        shown.join(" + ")
    }

    pub(crate) fn hrtb(&self, params: &Value) -> String {
        let names: Vec<&str> = params.as_array().into_iter().flatten().filter_map(|p| p["name"].as_str()).collect();
        if names.is_empty() {
            String::new()
        } else {
            format!("for<{}> ", names.join(", "))
        }
    }

    pub(crate) fn term(&self, t: &Value) -> String {
        match tag(t) {
            ("type", ty) => self.ty(ty),
            ("constant", c) => c["expr"].as_str().unwrap_or("_").to_string(),
            (other, _) => other.to_string(),
        }
    }

    /// The shortest public path of a local item, else the full path rustdoc knows `id` by.
    pub(crate) fn path_of(&self, id: &str) -> Option<String> {
        if let Some(path) = self.canonical.get(id) {
            return Some(path.clone());
        }
        let parts = self.doc["paths"].get(id)?["path"].as_array()?;
        Some(parts.iter().filter_map(Value::as_str).collect::<Vec<_>>().join("::"))
    }

    /// A resolved path with its generic arguments.
    pub(crate) fn path(&self, p: &Value) -> String {
        let written = p["path"].as_str().unwrap_or("?");
        let name = p.get("id").map(id_of).and_then(|id| self.path_of(&id)).unwrap_or_else(|| written.to_string());
        format!("{name}{}", self.args(&p["args"]))
    }

    pub(crate) fn args(&self, args: &Value) -> String {
        if args.is_null() {
            return String::new();
        }
        match tag(args) {
            ("angle_bracketed", a) => {
                let mut shown: Vec<String> = a["args"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|arg| match tag(arg) {
                        ("lifetime", l) => l.as_str().unwrap_or("'_").to_string(),
                        ("type", t) => self.ty(t),
                        ("const", c) => c["expr"].as_str().unwrap_or("_").to_string(),
                        (other, _) => other.to_string(),
                    })
                    .collect();
                for c in a["constraints"].as_array().into_iter().flatten() {
                    let name = c["name"].as_str().unwrap_or("_");
                    let (kind, b) = tag(&c["binding"]);
                    shown.push(match kind {
                        "equality" => format!("{name} = {}", self.term(b)),
                        _ => format!("{name}: {}", self.bounds(b)),
                    });
                }
                if shown.is_empty() {
                    String::new()
                } else {
                    format!("<{}>", shown.join(", "))
                }
            }
            ("parenthesized", a) => {
                let inputs: Vec<String> = a["inputs"].as_array().into_iter().flatten().map(|t| self.ty(t)).collect();
                let output = match &a["output"] {
                    Value::Null => String::new(),
                    t => format!(" -> {}", self.ty(t)),
                };
                format!("({}){output}", inputs.join(", "))
            }
            (other, _) => other.to_string(),
        }
    }

    pub(crate) fn ty(&self, t: &Value) -> String {
        let (kind, v) = tag(t);
        match kind {
            "resolved_path" => self.path(v),
            "dyn_trait" => {
                let traits: Vec<String> = v["traits"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|p| format!("{}{}", self.hrtb(&p["generic_params"]), self.path(&p["trait"])))
                    .collect();
                let lt = v["lifetime"].as_str().map(|l| format!(" + {l}")).unwrap_or_default();
                format!("dyn {}{lt}", traits.join(" + "))
            }
            "generic" | "primitive" => v.as_str().unwrap_or("?").to_string(),
            "function_pointer" => {
                let inputs: Vec<String> =
                    v["sig"]["inputs"].as_array().into_iter().flatten().map(|a| self.ty(&a[1])).collect();
                let output = match &v["sig"]["output"] {
                    Value::Null => String::new(),
                    t => format!(" -> {}", self.ty(t)),
                };
                format!("{}fn({}){output}", self.hrtb(&v["generic_params"]), inputs.join(", "))
            }
            "tuple" => {
                let parts: Vec<String> = v.as_array().into_iter().flatten().map(|t| self.ty(t)).collect();
                if parts.len() == 1 {
                    format!("({},)", parts[0])
                } else {
                    format!("({})", parts.join(", "))
                }
            }
            "slice" => format!("[{}]", self.ty(v)),
            "array" => format!("[{}; {}]", self.ty(&v["type"]), v["len"].as_str().unwrap_or("_")),
            "impl_trait" => format!("impl {}", self.bounds(v)),
            "infer" => "_".to_string(),
            "raw_pointer" => {
                let m = if v["is_mutable"] == true { "mut" } else { "const" };
                format!("*{m} {}", self.ty(&v["type"]))
            }
            "borrowed_ref" => {
                let lt = v["lifetime"].as_str().map(|l| format!("{l} ")).unwrap_or_default();
                let m = if v["is_mutable"] == true { "mut " } else { "" };
                format!("&{lt}{m}{}", self.ty(&v["type"]))
            }
            "qualified_path" => {
                let self_ty = self.ty(&v["self_type"]);
                let name = v["name"].as_str().unwrap_or("?");
                match &v["trait"] {
                    Value::Null => format!("{self_ty}::{name}"),
                    tr => format!("<{self_ty} as {}>::{name}", self.path(tr)),
                }
            }
            other => other.to_string(),
        }
    }
}
