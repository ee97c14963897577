//! The `kiln` binary: run a zoo model once, benchmark it, or check what this machine offers.

mod alloc_counter;
mod args;
mod cmd_bench;
mod cmd_doctor;
mod cmd_run;
mod exit;
mod logging;
mod model_setup;
mod progress;
mod stats;

use std::process::ExitCode;

use clap::Parser;

use crate::args::{Cli, Command};

fn main() -> ExitCode {
    let cli = Cli::parse();
    logging::init();
    let outcome = match cli.command {
        Command::Run(a) => cmd_run::run(&a),
        Command::Bench(a) => cmd_bench::bench(&a),
        Command::Doctor => {
            cmd_doctor::doctor();
            Ok(())
        }
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(e.code())
        }
    }
}
