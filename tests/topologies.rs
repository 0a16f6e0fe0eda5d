//! Every example's topology is in the manual as `Pipeline::describe()` draws it, and stays
//! so: each example's own `pipeline()` is built (no broker needed) and rendered, and every
//! block of `docs/*.md` marked
//!
//! ```text
//! <!-- topology: <example> mermaid -->     (or `text`: the description as `Display` prints it)
//! ```mermaid
//! ...
//! ```
//! ```
//!
//! must equal its rendering; every example must have a Mermaid block. After a change to an
//! example or to the rendering, rewrite the blocks and commit them with the change:
//!
//! ```sh
//! KAFKA_EOS_BLESS_TOPOLOGIES=1 cargo test -p kafka-eos-cli --test topologies
//! ```

#[allow(dead_code)]
#[path = "../examples/cdc_upsert.rs"]
mod cdc_upsert;
#[allow(dead_code)]
#[path = "../cli/examples/financial_close/main.rs"]
mod financial_close_main;
#[allow(dead_code)]
#[path = "../cli/examples/page_views.rs"]
mod page_views;
#[allow(dead_code)]
#[path = "../examples/quickstart.rs"]
mod quickstart;

use std::collections::BTreeMap;
use std::path::Path;

use kafka_eos::{Pipeline, PipelineBuilder};
use kafka_eos_cli::workloads::card_velocity;
use kafka_eos_cli::workloads::financial_close::{self, Topics};

const BLESS: &str = "KAFKA_EOS_BLESS_TOPOLOGIES=1 cargo test -p kafka-eos-cli --test topologies";

/// A builder with the connection settings every example's `main` adds.
fn base(application_id: &str) -> PipelineBuilder {
    Pipeline::builder().bootstrap_servers("127.0.0.1:9092").application_id(application_id)
}

/// Every example's pipelines, by the name their blocks are marked with, built with the
/// topic names their `main` uses (without its per-run suffix).
fn examples() -> BTreeMap<&'static str, Pipeline> {
    let close = Topics {
        payments: "payments".into(),
        revenue: "revenue".into(),
        late: "late-payments".into(),
        merchants: "merchants".into(),
    };
    let built = [
        ("quickstart", quickstart::pipeline(base("quickstart"), "orders", "invoices")),
        ("cdc_upsert", cdc_upsert::pipeline(base("cdc-upsert"), "cdc", "customers")),
        ("page_views", page_views::pipeline(base("page-views"), "page-views", "page-counts")),
        (
            "page_views-redis",
            page_views::redis_counts::pipeline(
                base("page-views-redis"),
                "page-views",
                "redis://127.0.0.1",
                "views",
                true,
            ),
        ),
        ("financial_close", financial_close::pipeline(base("financial-close"), &close)),
        (
            "card_velocity",
            card_velocity::pipeline(
                base("card-velocity"),
                ("payments", "merchant-totals", "late-payments"),
                "host=127.0.0.1",
                "card-velocity",
            )
            .expect("windows"),
        ),
        (
            "financial_close-ledger",
            financial_close_main::ledger::pipeline(base("financial-close-ledger"), "payments", "host=127.0.0.1".into()),
        ),
    ];
    built.into_iter().map(|(name, b)| (name, b.build().unwrap_or_else(|e| panic!("{name}: {e}")))).collect()
}

/// One marked block: the example, the rendering (`mermaid` or `text`), and the lines of its
/// body (0-based, the fences excluded).
struct Block {
    example: String,
    format: String,
    body: std::ops::Range<usize>,
}

/// The marked blocks of a page.
fn blocks(page: &str, lines: &[&str]) -> Vec<Block> {
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let Some(marker) = line.trim().strip_prefix("<!-- topology:").and_then(|m| m.strip_suffix("-->")) else {
            continue;
        };
        let (example, format) = marker.trim().split_once(' ').unwrap_or_else(|| panic!("{page}:{}: {line}", i + 1));
        let fence = format!("```{format}");
        assert_eq!(lines.get(i + 1).map(|l| l.trim()), Some(&*fence), "{page}:{}: a {fence} block must follow", i + 1);
        let len = lines[i + 2..].iter().position(|l| l.trim() == "```").unwrap_or_else(|| panic!("{page}: unclosed"));
        out.push(Block { example: example.into(), format: format.into(), body: i + 2..i + 2 + len });
    }
    out
}

#[test]
fn every_example_topology_in_the_manual_is_what_describe_draws() {
    let examples = examples();
    let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs");
    let bless = std::env::var_os("KAFKA_EOS_BLESS_TOPOLOGIES").is_some();
    let mut drawn = BTreeMap::new();
    let mut stale = Vec::new();
    let mut pages: Vec<_> = std::fs::read_dir(&docs).expect("docs/").map(|e| e.expect("docs/ entry").path()).collect();
    pages.sort();
    for path in pages.into_iter().filter(|p| p.extension().is_some_and(|e| e == "md")) {
        let page = path.file_name().unwrap().to_string_lossy().into_owned();
        let text = std::fs::read_to_string(&path).expect("read a page");
        let lines: Vec<&str> = text.lines().collect();
        let mut rewritten: Vec<String> = lines.iter().map(|l| l.to_string()).collect();
        // Replaced from the last block up, so the earlier blocks' line numbers still hold.
        for b in blocks(&page, &lines).into_iter().rev() {
            let Some(pipeline) = examples.get(b.example.as_str()) else {
                panic!("{page}: no example {:?} (known: {:?})", b.example, examples.keys().collect::<Vec<_>>());
            };
            let rendered = match b.format.as_str() {
                "mermaid" => pipeline.describe().mermaid(),
                "text" => pipeline.describe().to_string(),
                f => panic!("{page}: {f:?} is neither mermaid nor text"),
            };
            if b.format == "mermaid" {
                *drawn.entry(b.example.clone()).or_insert(0) += 1;
            }
            let indent: String = lines[b.body.start - 1].chars().take_while(|c| c.is_whitespace()).collect();
            let want: Vec<String> = rendered.lines().map(|l| format!("{indent}{l}")).collect();
            if lines[b.body.clone()] != want {
                stale.push(format!("{page}: {} {}", b.example, b.format));
                rewritten.splice(b.body.clone(), want);
            }
        }
        if bless && rewritten != lines {
            std::fs::write(&path, rewritten.join("\n") + "\n").expect("write the page");
        }
    }
    let missing: Vec<_> = examples.keys().filter(|e| !drawn.contains_key(**e)).collect();
    assert!(missing.is_empty(), "examples without a `<!-- topology: NAME mermaid -->` block in docs/: {missing:?}");
    assert!(
        bless || stale.is_empty(),
        "blocks that differ from describe()'s rendering: {stale:?}\nIf the change is meant, rewrite them and commit \
         the pages:\n    {BLESS}"
    );
}

/// `kafka-eos describe` prints what `describe()` says of the pipeline a chaos instance runs:
/// for the financial close, the workload's own pipeline on the instance's topics.
#[test]
fn the_command_line_describes_the_chaos_workloads() {
    let run = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_kafka-eos")).arg("describe").args(args).output();
        let out = out.expect("run kafka-eos describe");
        assert!(out.status.success(), "kafka-eos describe {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).expect("UTF-8")
    };
    let topics = Topics {
        payments: "payments".into(),
        revenue: "revenue".into(),
        late: "revenue-late".into(),
        merchants: "payments-merchants".into(),
    };
    let close = financial_close::pipeline(base("close"), &topics).build().expect("build").describe();
    let args = ["financial-close", "--app", "close", "--input", "payments", "--output", "revenue"];
    assert_eq!(run(&args), close.to_string());
    assert_eq!(run(&[&args[..], &["--mermaid"]].concat()), close.mermaid());
    let copy = run(&["--guarantee", "exactly-once-per-consumer", "--app", "copy"]);
    assert!(
        copy.contains("transactional.id per worker of each instance: copy:<instance-id>, copy:<instance-id>#<k>"),
        "{copy}"
    );
}
