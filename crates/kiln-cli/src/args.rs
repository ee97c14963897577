//! The command line, as clap derive types. Invalid values are rejected by clap (exit code 2).

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};
use kiln::DType;

/// kiln: a deep-learning compiler and runtime. Runs, benchmarks and checks models from its zoo.
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
    /// Build a zoo model, run one eager forward pass and print each output's shape and checksum.
    Run(RunArgs),
    /// Time forward passes of one or more zoo models (table, or one JSON object per line).
    Bench(BenchArgs),
    /// Show what this machine offers: CPU and SIMD, cores, memory, C compiler, GPU, CUDA libraries.
    Doctor,
}

/// Which model to build and how; shared by `run` and `bench`.
#[derive(Debug, Args, Clone)]
pub struct ModelArgs {
    /// Batch size of the example inputs.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
    pub batch: u64,
    /// Sequence length (transformer models only).
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

/// Arguments of `kiln run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// Model name from the zoo (resnet18, resnet50, bert-base, gpt2).
    pub model: String,
    /// Model options.
    #[command(flatten)]
    pub model_args: ModelArgs,
}

/// Arguments of `kiln bench`.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Model names from the zoo (resnet18, resnet50, bert-base, gpt2); each is benched in turn.
    #[arg(required = true, num_args = 1..)]
    pub models: Vec<String>,
    /// Model options.
    #[command(flatten)]
    pub model_args: ModelArgs,
    /// Timed forward passes.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..))]
    pub iters: u64,
    /// Untimed forward passes after the first call, before timing.
    #[arg(long, default_value_t = 2)]
    pub warmup: u64,
    /// Where to run.
    #[arg(long, value_enum, default_value_t = DeviceArg::Cpu)]
    pub device: DeviceArg,
    /// Execution mode, as torch.compile's.
    #[arg(long, value_enum, default_value_t = ModeArg::Eager)]
    pub mode: ModeArg,
    /// Print one JSON object per model on stdout instead of a table.
    #[arg(long)]
    pub json: bool,
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

/// Devices `bench` accepts on the command line (not all are built yet).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum DeviceArg {
    /// The host CPU.
    Cpu,
    /// The first NVIDIA GPU.
    Cuda,
}

impl DeviceArg {
    /// The name used in output.
    pub fn name(self) -> &'static str {
        match self {
            DeviceArg::Cpu => "cpu",
            DeviceArg::Cuda => "cuda",
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
}
