//! What `run` and `bench` share: sizing the thread pool and building a zoo model from flags.

use std::time::Instant;

use kiln::zoo::{self, Model, ModelConfig};

use crate::args::ModelArgs;
use crate::exit::{CliError, CliResult};
use crate::progress;

/// Sizes rayon's global pool. It must run before any parallel work, because the global pool is
/// built on first use and cannot be resized later. Returns the pool's thread count.
pub fn init_threads(threads: Option<u64>) -> CliResult<usize> {
    if let Some(n) = threads {
        let n = usize::try_from(n)
            .map_err(|_| CliError::Failed(format!("--threads {n} is too large")))?;
        rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .build_global()
            .map_err(|e| CliError::Failed(format!("cannot set up {n} worker threads: {e}")))?;
    }
    Ok(rayon::current_num_threads())
}

/// The zoo configuration the flags ask for.
pub fn config(args: &ModelArgs) -> CliResult<ModelConfig> {
    if let Some(path) = &args.weights
        && !path.is_file()
    {
        return Err(CliError::Failed(format!(
            "weights file '{}' does not exist or is not a file (pass a .safetensors file, or leave out --weights for random weights)",
            path.display()
        )));
    }
    let to_usize = |flag: &str, v: u64| {
        usize::try_from(v).map_err(|_| CliError::Failed(format!("--{flag} {v} is too large")))
    };
    Ok(ModelConfig {
        batch: to_usize("batch", args.batch)?,
        seq: to_usize("seq", args.seq)?,
        dtype: args.dtype.dtype(),
        seed: args.seed,
        weights: args.weights.clone(),
    })
}

/// Builds `name` from the zoo behind a spinner; returns the model and the seconds it took.
pub fn build(name: &str, args: &ModelArgs) -> CliResult<(Box<dyn Model>, f64)> {
    let cfg = config(args)?;
    let spinner = progress::spinner(format!("building {name} weights"));
    let start = Instant::now();
    let built = zoo::build(name, &cfg);
    spinner.finish_and_clear();
    let model = built?;
    let secs = start.elapsed().as_secs_f64();
    tracing::info!(model = name, params = model.num_parameters(), secs, "built model");
    Ok((model, secs))
}
