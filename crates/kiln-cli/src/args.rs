//! The command line, as clap derive types. Invalid values are rejected by clap (exit code 2).

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};
use kiln::DType;

/// kiln: a deep-learning compiler and runtime. Runs, benchmarks and checks models from its zoo
/// and ONNX files.
#[derive(Debug, Parser)]
#[command(name = "kiln", version, about, long_about = None)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Build a zoo model (or load a .onnx file), run one eager forward pass and print each
    /// output's shape and checksum.
    Run(RunArgs),
    /// Time forward passes of one or more zoo models or .onnx files (table, or one JSON object per line).
    Bench(BenchArgs),
    /// Describe a .onnx file: producer, opsets, inputs, outputs, ops, parameters, unsupported ops.
    Inspect(InspectArgs),
    /// Show what this machine offers: CPU and SIMD, cores, memory, C compiler, GPU, CUDA libraries.
    Doctor,
    /// Run ONNX backend test cases (folders with model.onnx and test_data_set_*) and compare outputs.
    OnnxTest(OnnxTestArgs),
    /// Compile a zoo model or .onnx file and show what the compiler did: optimised graph, passes,
    /// fusion groups and reasons, kernels per run, planned peak memory, compile time by stage.
    Explain(ExplainArgs),
    /// Serve zoo models and .onnx files over HTTP with the KServe v2 / Open Inference Protocol
    /// (as Triton does): dynamic batching, API keys, rate limits, Prometheus metrics.
    Serve(ServeArgs),
}

/// Arguments of `kiln serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Zoo model names (resnet18, resnet50, bert-base, gpt2) or paths ending in .onnx; each is
    /// served under its name (an ONNX file under its file stem).
    #[arg(required = true, num_args = 1..)]
    pub models: Vec<String>,
    /// TCP port (0: any free port).
    #[arg(long, default_value_t = 8080)]
    pub port: u16,
    /// Address to bind; loopback unless told otherwise.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: std::net::IpAddr,
    /// Where to run.
    #[arg(long, value_enum, default_value_t = DeviceArg::Cpu)]
    pub device: DeviceArg,
    /// Execution mode, as torch.compile's.
    #[arg(long, value_enum, default_value_t = ModeArg::Default)]
    pub mode: ModeArg,
    /// Most rows (dim 0) run together; 1 turns batching off. Plans are compiled for the
    /// powers of two below it and for it.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u64).range(1..=1024))]
    pub max_batch: u64,
    /// How long the first request of a batch waits for more.
    #[arg(long, default_value_t = 5)]
    pub batch_timeout_ms: u64,
    /// File of API keys, one per line: every route but /v2/health/* then needs
    /// 'Authorization: Bearer KEY'.
    #[arg(long, value_name = "FILE")]
    pub api_key_file: Option<PathBuf>,
    /// Requests per second per API key (per client address without keys), as N/s; over it: 429.
    #[arg(long, value_name = "N/s", value_parser = kiln_serve::config::parse_rate)]
    pub rate_limit: Option<f64>,
    /// Largest request body in MiB; larger: 413.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..=4096))]
    pub max_body_mb: u64,
    /// A request not answered within this many ms is answered 503.
    #[arg(long, default_value_t = 30_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub timeout_ms: u64,
    /// Requests that may wait per model; past it: 503 at once.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub queue: u64,
    /// Warm-up passes per compiled batch size before a model is ready.
    #[arg(long, default_value_t = 3)]
    pub warmup: u64,
    /// Sequence length (transformer zoo models).
    #[arg(long, default_value_t = 128, value_parser = clap::value_parser!(u64).range(1..))]
    pub seq: u64,
    /// Seed of the zoo models' random weights.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Float dtype of the zoo models.
    #[arg(long, value_enum, default_value_t = FloatDType::F32)]
    pub dtype: FloatDType,
    /// Size of the worker thread pool (default: all logical cores).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub threads: Option<u64>,
    /// ONNX dim sizes.
    #[command(flatten)]
    pub dim_args: OnnxDimArgs,
}

/// Arguments of `kiln explain`.
#[derive(Debug, Args)]
pub struct ExplainArgs {
    /// Model name from the zoo (resnet18, resnet50, bert-base, gpt2), or a path ending in .onnx.
    pub model: String,
    /// Model options.
    #[command(flatten)]
    pub model_args: ModelArgs,
    /// ONNX dim sizes.
    #[command(flatten)]
    pub dim_args: OnnxDimArgs,
    /// Compile mode.
    #[arg(long, value_enum, default_value_t = ModeArg::Default)]
    pub mode: ModeArg,
    /// The device to compile for. `cuda` needs no GPU: it shows each step's kernel (name,
    /// launch) or library call; outputs are checked only when a GPU is present.
    #[arg(long, value_enum, default_value_t = DeviceArg::Cpu)]
    pub device: DeviceArg,
    /// Also print the generated C (CUDA C with --device cuda) source.
    #[arg(long)]
    pub code: bool,
}

/// Arguments of `kiln onnx-test`.
#[derive(Debug, Args)]
pub struct OnnxTestArgs {
    /// A case folder, or a folder searched for case folders (e.g. from scripts/onnx-cases.sh).
    pub dir: PathBuf,
    /// Only cases whose name contains this text.
    #[arg(long)]
    pub filter: Option<String>,
    /// Write one JSON object per case (case, kind, op, status, message) to this file.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Print every case, not only the ones that did not pass.
    #[arg(long)]
    pub verbose: bool,
}

/// Which model to build and how; shared by `run` and `bench`.
#[derive(Debug, Args, Clone)]
pub struct ModelArgs {
    /// Batch size of the example inputs (ONNX: size of batch-like symbolic dims).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
    pub batch: u64,
    /// Sequence length (transformer models only; ONNX: size of the other symbolic dims).
    #[arg(long, default_value_t = 128, value_parser = clap::value_parser!(u64).range(1..))]
    pub seq: u64,
    /// Seed of the random weights and example inputs.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Load weights from this safetensors file instead of random ones.
    #[arg(long, value_name = "FILE")]
    pub weights: Option<PathBuf>,
    /// Float dtype of the weights and activations.
    #[arg(long, value_enum, default_value_t = FloatDType::F32)]
    pub dtype: FloatDType,
    /// Size of the worker thread pool (default: all logical cores).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub threads: Option<u64>,
}

/// Options that only ONNX models take: how to size their symbolic dims.
#[derive(Debug, Args, Clone, Default)]
pub struct OnnxDimArgs {
    /// Size of a symbolic dim of an ONNX model's inputs, as NAME=SIZE (repeatable). Unnamed
    /// dims are called INPUT.AXIS. Unset batch-like dims take --batch, the others --seq.
    #[arg(long = "dim", value_name = "NAME=SIZE", value_parser = parse_dim)]
    pub dims: Vec<(String, usize)>,
}

/// Arguments of `kiln run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// Model name from the zoo (resnet18, resnet50, bert-base, gpt2), or a path ending in .onnx.
    pub model: String,
    /// Model options.
    #[command(flatten)]
    pub model_args: ModelArgs,
    /// ONNX dim sizes.
    #[command(flatten)]
    pub dim_args: OnnxDimArgs,
    /// Value of an ONNX model input, as NAME=FILE.npy (repeatable); inputs not given are random.
    #[arg(long = "input", value_name = "NAME=FILE.npy", value_parser = parse_input)]
    pub inputs: Vec<(String, PathBuf)>,
    /// Write each output of an ONNX model to DIR/<output name>.npy.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
}

/// Arguments of `kiln inspect`.
#[derive(Debug, Args)]
pub struct InspectArgs {
    /// The .onnx file.
    pub model: PathBuf,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Splits `NAME=VALUE` at the last `=`, so names may hold `=` but values (sizes, file names
/// without `=`) are unambiguous; both parts must be non-empty.
fn split_assignment<'a>(s: &'a str, what: &str) -> Result<(&'a str, &'a str), String> {
    match s.rsplit_once('=') {
        Some((name, value)) if !name.is_empty() && !value.is_empty() => Ok((name, value)),
        _ => Err(format!("expected {what}, got '{s}'")),
    }
}

/// Parses `--dim NAME=SIZE`.
fn parse_dim(s: &str) -> Result<(String, usize), String> {
    let (name, size) = split_assignment(s, "NAME=SIZE")?;
    let size = size.parse::<usize>().map_err(|_| format!("'{size}' in '{s}' is not a size (a whole number >= 0)"))?;
    Ok((name.to_string(), size))
}

/// Parses `--input NAME=FILE`. Splits at the first `=`: ONNX input names rarely hold `=`,
/// file paths sometimes do.
fn parse_input(s: &str) -> Result<(String, PathBuf), String> {
    match s.split_once('=') {
        Some((name, file)) if !name.is_empty() && !file.is_empty() => Ok((name.to_string(), PathBuf::from(file))),
        _ => Err(format!("expected NAME=FILE.npy, got '{s}'")),
    }
}

/// Arguments of `kiln bench`.
#[derive(Debug, Clone, Args)]
pub struct BenchArgs {
    /// Model names from the zoo (resnet18, resnet50, bert-base, gpt2) or paths ending in .onnx;
    /// each is benched in turn.
    #[arg(required = true, num_args = 1..)]
    pub models: Vec<String>,
    /// Model options.
    #[command(flatten)]
    pub model_args: ModelArgs,
    /// ONNX dim sizes.
    #[command(flatten)]
    pub dim_args: OnnxDimArgs,
    /// Timed forward passes.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..))]
    pub iters: u64,
    /// Untimed forward passes after the first call, before timing.
    #[arg(long, default_value_t = 2)]
    pub warmup: u64,
    /// Where to run: `auto` is the first CUDA GPU when one is present, else the CPU.
    #[arg(long, value_enum, default_value_t = DeviceArg::Auto)]
    pub device: DeviceArg,
    /// Execution mode, as torch.compile's.
    #[arg(long, value_enum, default_value_t = ModeArg::Eager)]
    pub mode: ModeArg,
    /// Print one JSON object per model on stdout instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Compiled modes: after timing, print the N steps that take longest (each step's median
    /// over the timed passes) on stderr.
    #[arg(long, value_name = "N")]
    pub profile: Option<usize>,
}

/// Float dtypes a model can be built in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum FloatDType {
    /// 32-bit float.
    F32,
    /// bfloat16.
    Bf16,
    /// IEEE half.
    F16,
}

impl FloatDType {
    /// The kiln dtype.
    pub fn dtype(self) -> DType {
        match self {
            FloatDType::F32 => DType::F32,
            FloatDType::Bf16 => DType::BF16,
            FloatDType::F16 => DType::F16,
        }
    }
}

/// Devices `bench`, `explain` and `serve` accept on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum DeviceArg {
    /// The host CPU.
    Cpu,
    /// The first NVIDIA GPU.
    Cuda,
    /// The first NVIDIA GPU when one can be opened here, else the CPU.
    Auto,
}

impl DeviceArg {
    /// The name used in output.
    pub fn name(self) -> &'static str {
        match self {
            DeviceArg::Cpu => "cpu",
            DeviceArg::Cuda => "cuda",
            DeviceArg::Auto => self.resolve().name(),
        }
    }

    /// `Auto` made concrete: `Cuda` when a CUDA device is present, else `Cpu`.
    pub fn resolve(self) -> DeviceArg {
        match self {
            DeviceArg::Auto if kiln_cuda::Gpu::available() => DeviceArg::Cuda,
            DeviceArg::Auto => DeviceArg::Cpu,
            d => d,
        }
    }

    /// The kiln device.
    pub fn device(self) -> kiln::Device {
        match self.resolve() {
            DeviceArg::Cuda => kiln::Device::Cuda(0),
            _ => kiln::Device::Cpu,
        }
    }
}

/// Execution modes, as torch.compile's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ModeArg {
    /// One kernel per op.
    Eager,
    /// Fused, compiled kernels.
    Default,
    /// `default` replayed as a CUDA graph.
    ReduceOverhead,
    /// `default` with autotuned kernels.
    MaxAutotune,
}

impl ModeArg {
    /// The name used on the command line and in output.
    pub fn name(self) -> &'static str {
        match self {
            ModeArg::Eager => "eager",
            ModeArg::Default => "default",
            ModeArg::ReduceOverhead => "reduce-overhead",
            ModeArg::MaxAutotune => "max-autotune",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn bench_parses_flags_and_rejects_bad_values() {
        let cli = Cli::try_parse_from([
            "kiln", "bench", "resnet18", "gpt2", "--iters", "3", "--mode", "max-autotune",
            "--dtype", "bf16", "--threads", "2", "--json",
        ])
        .unwrap();
        let Command::Bench(b) = cli.command else { panic!("not bench") };
        assert_eq!(b.models, ["resnet18", "gpt2"]);
        assert_eq!(b.iters, 3);
        assert_eq!(b.mode, ModeArg::MaxAutotune);
        assert_eq!(b.model_args.dtype.dtype(), DType::BF16);
        assert_eq!(b.model_args.threads, Some(2));
        assert!(b.json);
        for bad in [
            &["kiln", "bench", "resnet18", "--iters", "0"][..],
            &["kiln", "bench", "resnet18", "--mode", "fast"],
            &["kiln", "bench", "resnet18", "--dtype", "i64"],
            &["kiln", "bench", "resnet18", "--threads", "0"],
            &["kiln", "bench", "resnet18", "--device", "tpu"],
            &["kiln", "bench"],
        ] {
            assert!(Cli::try_parse_from(bad).is_err(), "{bad:?} parsed");
        }
    }

    #[test]
    fn serve_parses_flags_and_rejects_bad_values() {
        let cli = Cli::try_parse_from([
            "kiln", "serve", "resnet18", "m.onnx", "--port", "0", "--max-batch", "4", "--rate-limit", "10/s",
            "--api-key-file", "keys", "--mode", "eager",
        ])
        .unwrap();
        let Command::Serve(s) = cli.command else { panic!("not serve") };
        assert_eq!(s.models, ["resnet18", "m.onnx"]);
        assert_eq!((s.port, s.max_batch, s.rate_limit), (0, 4, Some(10.0)));
        assert_eq!(s.host.to_string(), "127.0.0.1");
        for bad in [
            &["kiln", "serve"][..],
            &["kiln", "serve", "resnet18", "--max-batch", "0"],
            &["kiln", "serve", "resnet18", "--rate-limit", "fast"],
            &["kiln", "serve", "resnet18", "--host", "localhost:80"],
        ] {
            assert!(Cli::try_parse_from(bad).is_err(), "{bad:?} parsed");
        }
    }

    #[test]
    fn run_parses_onnx_inputs_dims_and_out() {
        let cli = Cli::try_parse_from([
            "kiln", "run", "m.onnx", "--input", "x=a=b.npy", "--input", "ids=ids.npy", "--dim", "batch=4",
            "--dim", "x.1=0", "--out", "outs",
        ])
        .unwrap();
        let Command::Run(r) = cli.command else { panic!("not run") };
        assert_eq!(r.inputs, [("x".to_string(), PathBuf::from("a=b.npy")), ("ids".to_string(), PathBuf::from("ids.npy"))]);
        assert_eq!(r.dim_args.dims, [("batch".to_string(), 4), ("x.1".to_string(), 0)]);
        assert_eq!(r.out, Some(PathBuf::from("outs")));
        for bad in [
            &["kiln", "run", "m.onnx", "--dim", "batch"][..],
            &["kiln", "run", "m.onnx", "--dim", "batch=-1"],
            &["kiln", "run", "m.onnx", "--dim", "=3"],
            &["kiln", "run", "m.onnx", "--input", "x"],
            &["kiln", "run", "m.onnx", "--input", "=x.npy"],
            &["kiln", "run", "m.onnx", "--input", "x="],
            &["kiln", "inspect"],
        ] {
            assert!(Cli::try_parse_from(bad).is_err(), "{bad:?} parsed");
        }
    }
}
