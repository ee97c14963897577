//! `kiln bench --mode default|reduce-overhead|max-autotune`: compiles the model (zoo name or
//! .onnx file) once, then times the compiled forward passes as eager ones are timed.

use crate::args::BenchArgs;
use crate::cmd_bench::{BenchRecord, Pass, measured, time_passes};
use crate::compile_setup;
use crate::exit::CliResult;

/// Benches one model in a compiled mode.
pub fn bench_compiled(name: &str, args: &BenchArgs, threads: usize) -> CliResult<BenchRecord> {
    let m = compile_setup::graph_model(name, &args.model_args, &args.dim_args)?;
    let start = std::time::Instant::now();
    let compiled = compile_setup::compile(&m, compile_setup::mode(args.mode))?;
    let compile_s = start.elapsed().as_secs_f64();
    let report = compiled.report();
    tracing::info!(model = name, compile_s, kernels = report.kernels, "compiled");
    let kernels = report.kernels as u64;
    let t = time_passes(name, args, || {
        let (secs, peak_bytes) = measured(|| Ok(compiled.run(&m.inputs)?))?;
        Ok(Pass { secs, kernels, peak_bytes })
    })?;
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
