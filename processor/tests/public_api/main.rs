//! The public API of `kafka-eos` changes only on purpose: this test renders it from
//! rustdoc's JSON output (every feature that adds API, none of the `test-hooks`) and
//! compares it with `processor/public-api.txt`. A change fails the test with the diff; if
//! the change is meant, bless it and commit the listing with the change:
//!
//! ```sh
//! KAFKA_EOS_BLESS_API=1 cargo test -p kafka-eos --test public_api -- --include-ignored
//! ```
//!
//! rustdoc's JSON output is unstable: the test asks the stable toolchain's rustdoc for it
//! with `RUSTC_BOOTSTRAP=1`, and knows the format versions listed in `FORMATS`. Another
//! toolchain's format is not one it can read, so the test is ignored by default (a user's
//! `cargo test` on any toolchain stays green) and `.ci/run` runs it by name.

mod render;
mod signature;

use std::path::{Path, PathBuf};
use std::process::Command;

/// The features whose API the listing covers. `ssl` adds none, but builds librdkafka as the
/// workspace does, so that this check reuses the workspace's build of it.
const FEATURES: &str = "json,ops-server,logging,time-zones,ssl";

/// rustdoc JSON format versions the renderer was checked against.
const FORMATS: &[u64] = &[57];

const BLESS: &str = "KAFKA_EOS_BLESS_API=1 cargo test -p kafka-eos --test public_api -- --include-ignored";

#[test]
#[ignore = "tied to the rustdoc JSON formats in FORMATS; .ci/run runs it with --include-ignored"]
fn public_api_matches_the_committed_listing() {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| manifest.join("../target"), PathBuf::from);
    // RUSTC_BOOTSTRAP only for rustdoc: build scripts that watch it (proc-macro2's) would
    // otherwise make cargo rebuild every dependency here, then again in the next build.
    let wrapper = target.join("rustdoc-bootstrap.sh");
    std::fs::create_dir_all(&target).expect("create the target directory");
    std::fs::write(&wrapper, "#!/bin/sh\nRUSTC_BOOTSTRAP=1 exec \"$KAFKA_EOS_RUSTDOC\" \"$@\"\n")
        .expect("write the wrapper");
    make_executable(&wrapper);
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = Command::new(cargo)
        .current_dir(manifest)
        .args(["doc", "--quiet", "--no-deps", "-p", "kafka-eos", "--no-default-features", "--features", FEATURES])
        .arg("--target-dir")
        .arg(&target)
        .env("KAFKA_EOS_RUSTDOC", std::env::var_os("RUSTDOC").unwrap_or_else(|| "rustdoc".into()))
        .env("RUSTDOC", &wrapper)
        .env("RUSTDOCFLAGS", "-Z unstable-options --output-format json --document-hidden-items --cap-lints allow")
        .status()
        .expect("run cargo doc");
    assert!(status.success(), "cargo doc (rustdoc JSON) failed");
    let json = target.join("doc/kafka_eos.json");
    let doc: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&json).expect("read rustdoc JSON")).expect("parse rustdoc JSON");
    let format = doc["format_version"].as_u64().unwrap_or(0);
    assert!(
        FORMATS.contains(&format),
        "rustdoc JSON format {format} is not one the renderer knows ({FORMATS:?}): check \
         tests/public_api/render.rs against rustdoc-types' changelog, then add it"
    );
    let actual = render::render(&doc).join("\n") + "\n";
    let listing = manifest.join("public-api.txt");
    if std::env::var_os("KAFKA_EOS_BLESS_API").is_some() {
        std::fs::write(&listing, &actual).expect("write public-api.txt");
        return;
    }
    let expected = std::fs::read_to_string(&listing).unwrap_or_default();
    if expected != actual {
        panic!(
            "the public API differs from processor/public-api.txt (- listed, + now):\n{}\nIf the change \
             is meant, bless it and commit the listing:\n    {BLESS}",
            diff(&expected, &actual)
        );
    }
}

/// The lines only in `old` (`-`) and only in `new` (`+`): both listings are sorted sets.
#[cfg(unix)]
fn make_executable(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).expect("chmod the wrapper");
}

#[cfg(not(unix))]
fn make_executable(_: &Path) {}

fn diff(old: &str, new: &str) -> String {
    let (old, new): (std::collections::BTreeSet<&str>, std::collections::BTreeSet<&str>) =
        (old.lines().collect(), new.lines().collect());
    let mut out: Vec<String> = old.difference(&new).map(|l| format!("- {l}")).collect();
    out.extend(new.difference(&old).map(|l| format!("+ {l}")));
    out.sort_by(|a, b| a[2..].cmp(&b[2..]));
    out.join("\n")
}
