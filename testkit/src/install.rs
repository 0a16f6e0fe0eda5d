//! Installing a missing server's Debian package when this process can, so that the README's
//! test command works on a fresh Debian or Ubuntu machine with nothing but Rust, Java and
//! Maven installed.
//!
//! Only as root, with `apt-get` on the machine, and not when `KAFKA_EOS_NO_INSTALL` is set;
//! once per package and process (tests start servers in parallel: the first one installs,
//! the others wait for it). Otherwise the caller's error names the command to run.

use std::collections::HashMap;
use std::process::{Command, Stdio};
use std::sync::Mutex;

/// Installs Debian package `package` if this process may (see the module docs); returns
/// whether it is now installed by this call or an earlier one.
pub(crate) fn debian_package(package: &str) -> bool {
    static DONE: Mutex<Option<HashMap<String, bool>>> = Mutex::new(None);
    let mut done = DONE.lock().unwrap_or_else(|p| p.into_inner());
    let done = done.get_or_insert_with(HashMap::new);
    if let Some(ok) = done.get(package) {
        return *ok;
    }
    let allowed = std::env::var_os("KAFKA_EOS_NO_INSTALL").is_none()
        && nix::unistd::geteuid().is_root()
        && std::path::Path::new("/usr/bin/apt-get").is_file();
    let ok = allowed && {
        eprintln!("kafka-eos-testkit: installing Debian's {package} (set KAFKA_EOS_NO_INSTALL=1 to refuse)");
        let apt = |args: &[&str]| {
            Command::new("apt-get")
                .args(args)
                .env("DEBIAN_FRONTEND", "noninteractive")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        };
        apt(&["install", "-y", "-qq", package]) || (apt(&["update", "-qq"]) && apt(&["install", "-y", "-qq", package]))
    };
    done.insert(package.to_string(), ok);
    ok
}
