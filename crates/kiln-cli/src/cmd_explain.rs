//! `kiln explain MODEL`: what the compiler does to a model — the optimised graph, each pass,
//! the fusion groups and why ops were or were not fused, kernels per run, planned peak memory,
//! compile time by stage — and a check of the compiled outputs against the interpreter.

use crate::args::ExplainArgs;
use crate::compile_setup;
use crate::exit::{CliError, CliResult};

/// Largest |a - b| / max(1, |b|) over all outputs (NaN where exactly one side is NaN).
fn max_rel_diff(got: &[kiln_ir::HostTensor], want: &[kiln_ir::HostTensor]) -> f64 {
    let mut worst = 0.0f64;
    for (g, w) in got.iter().zip(want) {
        for (a, b) in g.to_f64_vec().iter().zip(w.to_f64_vec()) {
            let d = if a.is_nan() && b.is_nan() || a == &b { 0.0 } else { (a - b).abs() / b.abs().max(1.0) };
            worst = if d.is_nan() { f64::NAN } else { worst.max(d) };
        }
    }
    worst
}

/// Runs the command.
pub fn explain(args: &ExplainArgs) -> CliResult<()> {
    let m = compile_setup::graph_model(&args.model, &args.model_args, &args.dim_args)?;
    let compiled = compile_setup::compile(&m, compile_setup::mode(args.mode), kiln::Device::Cpu)?;
    let report = compiled.report();
    println!("model: {} (batch {}{})", m.name, m.batch, m.seq.map(|s| format!(", seq {s}")).unwrap_or_default());
    print!("{report}");
    if args.code {
        match &report.source {
            Some(src) => println!("\n== generated C ==\n{src}"),
            None => println!("\n(no generated code: the model runs eagerly)"),
        }
    }
    let got = compiled.run(&m.inputs)?;
    let want = kiln_cpu::run(&m.graph, &m.inputs)?;
    let diff = max_rel_diff(&got, &want);
    println!("outputs vs reference interpreter: max relative difference {diff:.2e}");
    if diff.is_nan() || diff > 1e-3 {
        return Err(CliError::Failed(format!("compiled outputs differ from the reference interpreter by {diff:.2e}")));
    }
    Ok(())
}
