//! `kiln bench MODEL.onnx`: the same passes and record as for zoo models, for an ONNX file run
//! on the reference interpreter with random inputs (sized as `kiln run` sizes them).

use std::path::Path;

use kiln_ir::DType;

use crate::args::BenchArgs;
use crate::cmd_bench::{BenchRecord, Pass, measured, time_passes};
use crate::exit::{CliError, CliResult};
use crate::onnx_inputs::InputRequest;
use crate::onnx_setup::{self, Ready};

/// The float dtype the model computes in, for the record's `dtype`: that of its first float
/// input, else of its first float initializer, else of its first input, else f32.
fn compute_dtype(ready: &Ready) -> DType {
    let inputs = || ready.prepared.inputs.iter().map(|v| v.tensor.dtype());
    let inits = ready
        .model
        .proto
        .graph
        .iter()
        .flat_map(|g| &g.initializer)
        .filter_map(|t| kiln_onnx::tensor::dtype_from_onnx(t.data_type()).ok());
    inputs()
        .find(|d| d.is_float())
        .or_else(|| inits.clone().find(|d| d.is_float()))
        .or_else(|| inputs().next())
        .unwrap_or(DType::F32)
}

/// Benches one ONNX file.
pub fn bench_onnx(name: &str, args: &BenchArgs, threads: usize) -> CliResult<BenchRecord> {
    let path = Path::new(name);
    let m = &args.model_args;
    onnx_setup::check_model_args(path, m)?;
    let to_usize = |flag: &str, v: u64| {
        usize::try_from(v).map_err(|_| CliError::Failed(format!("--{flag} {v} is too large")))
    };
    let req = InputRequest {
        files: Vec::new(),
        dims: args.dim_args.dims.clone(),
        batch: to_usize("batch", m.batch)?,
        seq: to_usize("seq", m.seq)?,
        seed: m.seed,
    };
    let ready = onnx_setup::prepare(path, &req)?;
    tracing::info!(model = name, dims = %ready.prepared.dims_report(), "prepared ONNX inputs");
    // The interpreter runs every op node of the graph once per pass.
    let kernels = ready.kernels();
    let t = time_passes(name, args, || {
        let (secs, peak_bytes) = measured(|| onnx_setup::forward(&ready))?;
        Ok(Pass {
            secs,
            kernels,
            peak_bytes,
        })
    })?;
    let stem = path
        .file_stem()
        .map_or_else(|| name.to_string(), |s| s.to_string_lossy().into_owned());
    Ok(BenchRecord {
        model: stem,
        batch: ready.prepared.batch(),
        seq: ready.prepared.used_seq().then_some(req.seq),
        device: args.device.name(),
        mode: args.mode.name(),
        dtype: compute_dtype(&ready).name().to_string(),
        threads,
        iters: args.iters,
        warmup: args.warmup,
        params: onnx_setup::param_counts(&ready.model).0,
        build_s: ready.setup_s,
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
