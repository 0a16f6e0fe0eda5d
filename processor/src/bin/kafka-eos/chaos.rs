//! `kafka-eos chaos`: exactly-once under injected faults (issue: chaos suite).

use std::process::ExitCode;

/// Arguments of `kafka-eos chaos`.
#[derive(clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> Result<ExitCode, Box<dyn std::error::Error>> {
    Err("`kafka-eos chaos` is not implemented yet".into())
}
