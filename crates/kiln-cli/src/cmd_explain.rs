//! `kiln explain MODEL`: what the compiler does to a model — the optimised graph, each pass,
//! the fusion groups and why ops were or were not fused, kernels per run, planned peak memory,
//! compile time by stage, on the CPU the algorithm of each extern with packed constants
//! (Winograd, conv tiles, kiln's GEMM) — and a check of the compiled outputs against the
//! interpreter. With
//! `--device cuda` it also shows where each step runs on a GPU (kernel and launch, cuBLAS,
//! cuDNN or the host) and, with `--code`, the CUDA C; that needs no GPU.

use crate::args::{DeviceArg, ExplainArgs};
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
    println!("model: {} (batch {}{})", m.name, m.batch, m.seq.map(|s| format!(", seq {s}")).unwrap_or_default());
    let mode = compile_setup::mode(args.mode);
    if args.device.resolve() == DeviceArg::Cuda {
        return explain_cuda(&m, mode, args.code);
    }
    let compiled = compile_setup::compile(&m, mode, kiln::Device::Cpu)?;
    let report = compiled.report();
    print!("{report}");
    if args.code {
        match &report.source {
            Some(src) => println!("\n== generated C ==\n{src}"),
            None => println!("\n(no generated code: the model runs eagerly)"),
        }
    }
    let checked = check_outputs(&compiled, &m, 1e-3);
    // After the run: a matmul's weights are packed, for Strassen's product or not, on its first.
    print_algorithms(&compiled.packed_algorithms());
    checked
}

/// The CPU externs' algorithms, one line each with the steps that use it.
fn print_algorithms(steps: &[(usize, &'static str)]) {
    if steps.is_empty() {
        return;
    }
    println!("\n== extern algorithms (others: the gemm crate) ==");
    let mut names: Vec<&str> = steps.iter().map(|s| s.1).collect();
    names.dedup();
    names.sort_unstable();
    names.dedup();
    for name in names {
        let ids: Vec<String> = steps.iter().filter(|s| s.1 == name).map(|s| s.0.to_string()).collect();
        println!("  {name:<20} {:>3} steps: {}", ids.len(), ids.join(" "));
    }
}

/// `--device cuda`: the scheduled program, where each step runs on a GPU and (with `code`)
/// the CUDA C — none of which needs a GPU; with one, the outputs are checked too.
fn explain_cuda(m: &compile_setup::GraphModel, mode: kiln::compile::Mode, code: bool) -> CliResult<()> {
    let device = DeviceArg::Cuda.device();
    let (program, report) = compile_setup::plan(m, mode, device)?;
    let gpu = kiln_cuda::explain::explain_program(&program, report.optimized.as_ref())?;
    println!("device: {device}");
    print!("{report}");
    print!("{gpu}");
    if code {
        println!("\n== generated CUDA C ==\n{}", gpu.source.source);
    }
    if !kiln_cuda::Gpu::available() {
        println!("outputs vs reference interpreter: not checked (no CUDA device here)");
        return Ok(());
    }
    // cuDNN convs use TF32 (as PyTorch's) unless KILN_CUDA_TF32=0 asks for strict fp32.
    let strict = std::env::var("KILN_CUDA_TF32").is_ok_and(|v| v == "0");
    check_outputs(&compile_setup::compile(m, mode, device)?, m, if strict { 1e-3 } else { 5e-2 })
}

/// Runs the compiled model and compares its outputs with the reference interpreter's; more
/// than `tol` apart is an error.
fn check_outputs(compiled: &kiln::compile::Compiled, m: &compile_setup::GraphModel, tol: f64) -> CliResult<()> {
    let got = compiled.run(&m.inputs)?;
    let want = kiln_cpu::run(&m.graph, &m.inputs)?;
    let diff = max_rel_diff(&got, &want);
    println!("outputs vs reference interpreter: max relative difference {diff:.2e}");
    if diff.is_nan() || diff > tol {
        return Err(CliError::Failed(format!("compiled outputs differ from the reference interpreter by {diff:.2e}")));
    }
    Ok(())
}
