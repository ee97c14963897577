//! `kiln bench --mode default|reduce-overhead|max-autotune`: compiles the model (zoo name or
//! .onnx file) once, then times the compiled forward passes as eager ones are timed.

use crate::args::{BenchArgs, DeviceArg};
use crate::cmd_bench::{BenchRecord, Pass, measured, time_passes};
use crate::compile_setup;
use crate::exit::CliResult;

/// Benches one model in a compiled mode.
pub fn bench_compiled(name: &str, args: &BenchArgs, threads: usize) -> CliResult<BenchRecord> {
    let m = compile_setup::graph_model(name, &args.model_args, &args.dim_args)?;
    let start = std::time::Instant::now();
    let compiled = compile_setup::compile(&m, compile_setup::mode(args.mode), args.device.device())?;
    let compile_s = start.elapsed().as_secs_f64();
    let report = compiled.report();
    tracing::info!(model = name, compile_s, kernels = report.kernels, "compiled");
    let kernels = report.kernels as u64;
    let t = if args.device == DeviceArg::Cuda {
        crate::cmd_bench_cuda::time_on_gpu(&compiled, &m.inputs, args, kernels)?
    } else {
        time_passes(name, args, || {
            let (secs, peak_bytes) = measured(|| Ok(compiled.run(&m.inputs)?))?;
            Ok(Pass { secs, kernels, peak_bytes })
        })?
    };
    if let Some(top) = args.profile {
        print_profile(name, &compiled, &m.inputs, args.iters as usize, top)?;
    }
    let dtype = m.inputs.iter().map(|t| t.dtype()).find(|d| d.is_float()).unwrap_or(args.model_args.dtype.dtype());
    Ok(BenchRecord {
        model: m.name.clone(),
        batch: m.batch,
        seq: m.seq,
        device: args.device.name(),
        mode: args.mode.name(),
        dtype: dtype.name().to_string(),
        threads,
        iters: args.iters,
        warmup: args.warmup,
        params: m.params,
        build_s: m.setup_s,
        first_call_s: t.first.secs,
        median_ms: t.summary.median,
        p10_ms: t.summary.p10,
        p90_ms: t.summary.p90,
        kernels: t.first.kernels,
        peak_mb: t.peak_bytes as f64 / 1e6,
        compile_s: Some(compile_s),
        cache: report.cache.clone(),
        autotune: report.autotune.clone(),
    })
}

/// Prints the `top` slowest steps (median over `runs` profiled runs) on stderr.
fn print_profile(
    name: &str,
    compiled: &kiln::compile::Compiled,
    inputs: &[kiln_ir::HostTensor],
    runs: usize,
    top: usize,
) -> CliResult<()> {
    let Some((mut steps, whole)) = compiled.profile(inputs, runs)? else {
        eprintln!("{name}: nothing compiled (eager fallback), no steps to profile");
        return Ok(());
    };
    let sum: std::time::Duration = steps.iter().map(|s| s.median).sum();
    steps.sort_by(|a, b| b.median.cmp(&a.median));
    let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
    eprintln!(
        "{name}: {} steps, median run {:.2} ms, sum of step medians {:.2} ms; slowest {top}:",
        steps.len(),
        ms(whole),
        ms(sum)
    );
    for s in steps.iter().take(top) {
        let inside = if s.inside_previous { format!(" (ran inside step {})", s.step - 1) } else { String::new() };
        eprintln!("  {:8.3} ms {:5.1}%  step {:3}  {}{inside}", ms(s.median), 100.0 * ms(s.median) / ms(sum).max(1e-9), s.step, s.what);
    }
    Ok(())
}
