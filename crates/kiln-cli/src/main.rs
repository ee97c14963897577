//! The `kiln` binary: run a zoo model or ONNX file once, benchmark it, describe an ONNX file,
//! run ONNX conformance cases, serve models over HTTP, or check what this machine offers.

mod alloc_counter;
mod args;
mod compile_setup;
mod cmd_bench;
mod cmd_bench_compiled;
mod cmd_bench_cuda;
mod cmd_bench_onnx;
mod cmd_doctor;
mod cmd_explain;
mod cmd_inspect;
mod cmd_onnx_test;
mod cmd_run;
mod cmd_run_onnx;
mod cmd_serve;
mod exit;
mod logging;
mod model_setup;
mod npy;
mod onnx_inputs;
mod onnx_setup;
mod progress;
mod stats;

use std::process::ExitCode;

use clap::Parser;

use crate::args::{Cli, Command};

fn main() -> ExitCode {
    let cli = Cli::parse();
    // A server logs its progress (compiling, ready, listening) by default; other commands are quiet.
    logging::init(if matches!(cli.command, Command::Serve(_)) { "warn,kiln_serve=info" } else { "warn" });
    let outcome = match cli.command {
        Command::Run(a) => cmd_run::run(&a),
        Command::Bench(a) => cmd_bench::bench(&a),
        Command::Inspect(a) => cmd_inspect::inspect(&a),
        Command::OnnxTest(a) => cmd_onnx_test::onnx_test(&a),
        Command::Explain(a) => cmd_explain::explain(&a),
        Command::Serve(a) => cmd_serve::serve(&a),
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
