//! `kiln bench`: times eager forward passes of zoo models (and, through [`cmd_bench_onnx`],
//! ONNX files) and reports latency percentiles,
//! kernels dispatched per forward and the peak heap a forward needs.

use std::io::Write;
use std::time::Instant;

use kiln::zoo::Model;
use kiln::Tensor;
use serde::Serialize;

use crate::alloc_counter;
use crate::args::{BenchArgs, DeviceArg, ModeArg};
use crate::{cmd_bench_compiled, cmd_bench_onnx};
use crate::exit::{CliError, CliResult};
use crate::model_setup;
use crate::onnx_setup;
use crate::progress;
use crate::stats;

/// One benchmark result; with `--json` it is printed as one JSON object per line.
#[derive(Debug, Clone, Serialize)]
pub struct BenchRecord {
    /// Zoo model name, or the file stem of an ONNX model.
    pub model: String,
    /// Batch size.
    pub batch: usize,
    /// Sequence length, for models that take token ids (absent for vision models).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seq: Option<usize>,
    /// `cpu` or `cuda`.
    pub device: &'static str,
    /// Execution mode name.
    pub mode: &'static str,
    /// Float dtype of weights and activations.
    pub dtype: String,
    /// Worker threads in the pool.
    pub threads: usize,
    /// Timed forward passes.
    pub iters: u64,
    /// Untimed forward passes between the first call and timing.
    pub warmup: u64,
    /// Trainable parameters (an ONNX model's initializer elements).
    pub params: usize,
    /// Seconds to build the model (weights).
    pub build_s: f64,
    /// Seconds of the first forward pass (includes any one-time work).
    pub first_call_s: f64,
    /// Median of the timed passes, in milliseconds.
    pub median_ms: f64,
    /// 10th percentile of the timed passes, in milliseconds.
    pub p10_ms: f64,
    /// 90th percentile of the timed passes, in milliseconds.
    pub p90_ms: f64,
    /// Ops dispatched per forward pass (one kernel each in eager mode).
    pub kernels: u64,
    /// Most heap memory a timed forward pass allocated beyond what was live before it, in MB (10^6 bytes).
    pub peak_mb: f64,
    /// Compiled modes: seconds to compile (passes, schedule, codegen, C compiler or cache).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub compile_s: Option<f64>,
    /// Compiled modes: `hit`, `miss` or `rebuilt` for the compiled library in the disk cache.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache: Option<String>,
    /// max-autotune: what the search found, or that the cache had its result.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub autotune: Option<String>,
}

/// What one forward pass cost.
pub(crate) struct Pass {
    pub secs: f64,
    pub kernels: u64,
    pub peak_bytes: usize,
}

/// Runs `forward` once; returns its seconds and the most heap it held beyond what was live
/// before it (its outputs included: they are dropped only after the measurement).
pub(crate) fn measured<T>(forward: impl FnOnce() -> CliResult<T>) -> CliResult<(f64, usize)> {
    let base = alloc_counter::reset_peak();
    let start = Instant::now();
    let outputs = forward()?;
    let secs = start.elapsed().as_secs_f64();
    let peak_bytes = alloc_counter::peak_bytes().saturating_sub(base);
    drop(outputs);
    Ok((secs, peak_bytes))
}

/// Runs one forward pass of a zoo model and measures its time, dispatched ops and peak extra heap.
fn measured_forward(model: &dyn Model, inputs: &[Tensor]) -> CliResult<Pass> {
    let ops_before = kiln::dispatch::op_count();
    let (secs, peak_bytes) = measured(|| Ok(model.forward(inputs)?))?;
    let kernels = kiln::dispatch::op_count() - ops_before;
    Ok(Pass { secs, kernels, peak_bytes })
}

/// The first pass, warm-up passes and timed passes of one model.
pub(crate) struct Timings {
    pub first: Pass,
    pub summary: stats::Summary,
    /// The most extra heap any timed pass needed.
    pub peak_bytes: usize,
}

/// Runs `pass` once, `--warmup` times untimed, then `--iters` timed times, behind a progress bar.
pub(crate) fn time_passes(name: &str, args: &BenchArgs, mut pass: impl FnMut() -> CliResult<Pass>) -> CliResult<Timings> {
    let bar = progress::bar(1 + args.warmup + args.iters, format!("bench {name}"));
    let first = pass()?;
    bar.inc(1);
    for _ in 0..args.warmup {
        pass()?;
        bar.inc(1);
    }
    let mut times_ms = Vec::with_capacity(args.iters as usize);
    let mut peak_bytes = 0;
    for _ in 0..args.iters {
        let p = pass()?;
        if p.kernels != first.kernels {
            tracing::warn!(first = first.kernels, now = p.kernels, "kernels per forward changed between passes");
        }
        times_ms.push(p.secs * 1e3);
        peak_bytes = peak_bytes.max(p.peak_bytes);
        bar.inc(1);
    }
    bar.finish_and_clear();
    // iters >= 1 is enforced by clap, so there is always a sample; say so if that ever changes.
    let summary = stats::summarize(&times_ms)
        .ok_or_else(|| CliError::Failed("bench needs --iters of at least 1".into()))?;
    Ok(Timings { first, summary, peak_bytes })
}

/// Benches one model.
fn bench_model(name: &str, args: &BenchArgs, threads: usize) -> CliResult<BenchRecord> {
    let (model, build_s) = model_setup::build(name, &args.model_args)?;
    let inputs = model.example_inputs(args.model_args.seed)?;
    // Models fed token ids (integer inputs) are the ones a sequence length applies to.
    let takes_tokens = model.inputs().iter().any(|s| s.dtype.is_int());

    let t = time_passes(name, args, || measured_forward(model.as_ref(), &inputs))?;

    Ok(BenchRecord {
        model: model.name().to_string(),
        batch: args.model_args.batch as usize,
        seq: takes_tokens.then_some(args.model_args.seq as usize),
        device: args.device.name(),
        mode: args.mode.name(),
        dtype: args.model_args.dtype.dtype().name().to_string(),
        threads,
        iters: args.iters,
        warmup: args.warmup,
        params: model.num_parameters(),
        build_s,
        first_call_s: t.first.secs,
        median_ms: t.summary.median,
        p10_ms: t.summary.p10,
        p90_ms: t.summary.p90,
        kernels: t.first.kernels,
        peak_mb: t.peak_bytes as f64 / 1e6,
        compile_s: None,
        cache: None,
        autotune: None,
    })
}

/// The readable table of results.
fn table(records: &[BenchRecord]) -> String {
    let mut out = format!(
        "{:<12} {:>5} {:>5} {:<6} {:<6} {:>7} {:>9} {:>10} {:>11} {:>10} {:>10} {:>8} {:>9}\n",
        "model", "batch", "seq", "dtype", "mode", "threads", "params_M", "first_s", "median_ms",
        "p10_ms", "p90_ms", "kernels", "peak_MB"
    );
    for r in records {
        let seq = r.seq.map_or_else(|| "-".to_string(), |s| s.to_string());
        out += &format!(
            "{:<12} {:>5} {:>5} {:<6} {:<6} {:>7} {:>9.2} {:>10.3} {:>11.3} {:>10.3} {:>10.3} {:>8} {:>9.1}\n",
            r.model, r.batch, seq, r.dtype, r.mode, r.threads, r.params as f64 / 1e6,
            r.first_call_s, r.median_ms, r.p10_ms, r.p90_ms, r.kernels, r.peak_mb
        );
    }
    out
}

/// Runs the command.
pub fn bench(args: &BenchArgs) -> CliResult<()> {
    let args = &BenchArgs { device: args.device.resolve(), ..args.clone() };
    let threads = model_setup::init_threads(args.model_args.threads)?;
    if !args.dim_args.dims.is_empty() && !args.models.iter().any(|m| onnx_setup::is_onnx(m)) {
        return Err(CliError::Failed("--dim applies to .onnx models only, and none was given".into()));
    }
    let mut records = Vec::new();
    for name in &args.models {
        let record = if args.mode != ModeArg::Eager || args.device == DeviceArg::Cuda {
            cmd_bench_compiled::bench_compiled(name, args, threads)?
        } else if onnx_setup::is_onnx(name) {
            cmd_bench_onnx::bench_onnx(name, args, threads)?
        } else {
            bench_model(name, args, threads)?
        };
        if args.json {
            let line = serde_json::to_string(&record)
                .map_err(|e| CliError::Failed(format!("cannot encode bench result as JSON: {e}")))?;
            println!("{line}");
            // Lets a reader of the pipe see each model's line as soon as it is done.
            let _ = std::io::stdout().flush();
        }
        records.push(record);
    }
    if !args.json {
        print!("{}", table(&records));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use kiln::DType;

    fn record() -> BenchRecord {
        BenchRecord {
            model: "resnet18".into(),
            batch: 1,
            seq: None,
            device: "cpu",
            mode: "eager",
            dtype: DType::F32.name().into(),
            threads: 2,
            iters: 3,
            warmup: 1,
            params: 11_689_512,
            build_s: 0.5,
            first_call_s: 0.25,
            median_ms: 12.5,
            p10_ms: 11.0,
            p90_ms: 14.0,
            kernels: 140,
            peak_mb: 30.0,
            compile_s: None,
            cache: None,
            autotune: None,
        }
    }

    #[test]
    fn json_has_the_documented_fields_and_omits_seq_for_vision() {
        let v: serde_json::Value = serde_json::to_value(record()).unwrap();
        for key in ["model", "batch", "device", "mode", "dtype", "first_call_s", "median_ms",
            "p10_ms", "p90_ms", "iters", "threads", "params", "kernels", "peak_mb"] {
            assert!(v.get(key).is_some(), "missing {key}");
        }
        assert!(v.get("seq").is_none());
        let v = serde_json::to_value(BenchRecord { seq: Some(128), ..record() }).unwrap();
        assert_eq!(v["seq"], 128);
    }

    #[test]
    fn table_has_a_header_and_one_row_per_record() {
        let t = table(&[record(), BenchRecord { model: "gpt2".into(), seq: Some(64), ..record() }]);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 3);
        assert!(lines[0].contains("median_ms"));
        assert!(lines[1].starts_with("resnet18") && lines[1].contains("12.500"));
        assert!(lines[2].starts_with("gpt2") && lines[2].contains(" 64 "));
    }
}
