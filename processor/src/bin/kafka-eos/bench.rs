//! `kafka-eos bench`: the overhead of each guarantee on a user's cluster (issue: benchmarks).

use std::process::ExitCode;

/// Arguments of `kafka-eos bench`.
#[derive(clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> Result<ExitCode, Box<dyn std::error::Error>> {
    Err("`kafka-eos bench` is not implemented yet".into())
}
