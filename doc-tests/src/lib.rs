//! Every Rust snippet of the README and of the manual (`docs/`), compiled as a doc test.
//!
//! Each page is included as the doc comment of an empty module, so rustdoc compiles each of
//! its ```` ```rust ```` blocks: a page that shows code the API no longer accepts fails the
//! build. Blocks that need a broker are `no_run`; a fragment gets the declarations it
//! assumes as hidden `# ` lines, which mdBook hides as rustdoc does. Rustdoc takes a block
//! without a language for Rust too, so output and diagrams are fenced as `text`. Every page
//! is listed, so a snippet added to any page is compiled too.

// The pages are Markdown for mdBook and GitHub, not rustdoc: clippy's rules for doc comments
// (list indentation, `#[test]` in a doc test, ...) do not apply to their prose, and the
// crate has no other code to lint. A snippet that shows a `#[test]` function puts the
// attribute on a hidden placeholder and calls the function from a hidden `main`, so it runs.
#![allow(clippy::all)]

#[doc = include_str!("../../README.md")]
mod readme {}

#[doc = include_str!("../../docs/introduction.md")]
mod introduction {}

#[doc = include_str!("../../docs/guide.md")]
mod guide {}

#[doc = include_str!("../../docs/semantics.md")]
mod semantics {}

#[doc = include_str!("../../docs/state.md")]
mod state {}

#[doc = include_str!("../../docs/testing.md")]
mod testing {}

#[doc = include_str!("../../docs/sinks.md")]
mod sinks {}

#[doc = include_str!("../../docs/reference.md")]
mod reference {}

#[doc = include_str!("../../docs/operations.md")]
mod operations {}

#[doc = include_str!("../../docs/scaling.md")]
mod scaling {}

#[doc = include_str!("../../docs/reliability.md")]
mod reliability {}

#[doc = include_str!("../../docs/benchmarks.md")]
mod benchmarks {}

#[doc = include_str!("../../docs/topologies.md")]
mod topologies {}

#[doc = include_str!("../../docs/architecture.md")]
mod architecture {}

/// A page added to `docs/` must be listed above, or its snippets would go unchecked.
#[test]
fn every_page_is_included() {
    let lib = include_str!("lib.rs");
    let docs = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs");
    for entry in std::fs::read_dir(docs).expect("docs/") {
        let name = entry.expect("docs/ entry").file_name().into_string().expect("UTF-8 name");
        if name.ends_with(".md") && name != "SUMMARY.md" {
            let include = format!("include_str!(\"../../docs/{name}\")");
            assert!(lib.contains(&include), "docs/{name} is not included in doc-tests/src/lib.rs");
        }
    }
}
