//! `kiln serve`: builds the served models from flags and runs the kiln-serve server until
//! SIGTERM or Ctrl-C. Everything else (protocol, batching, auth, metrics) is in kiln-serve.
//! `--device cuda` compiles every plan for the first GPU (`--mode eager`: the unfused plan); a
//! machine without one fails at start-up, naming the missing library or device.

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use kiln::zoo::ModelConfig;
use kiln_serve::{ModelDef, ServeConfig, Server, shutdown_signal};

use crate::args::ServeArgs;
use crate::exit::{CliError, CliResult};
use crate::{compile_setup, model_setup, onnx_setup};

fn failed(e: kiln_serve::ServeError) -> CliError {
    CliError::Failed(e.to_string())
}

/// Runs the server.
pub fn serve(a: &ServeArgs) -> CliResult<()> {
    model_setup::init_threads(a.threads)?;
    let too_large = |flag: &str, v: u64| CliError::Failed(format!("--{flag} {v} is too large"));
    let cfg = ServeConfig {
        addr: std::net::SocketAddr::new(a.host, a.port),
        max_batch: usize::try_from(a.max_batch).map_err(|_| too_large("max-batch", a.max_batch))?,
        batch_timeout: Duration::from_millis(a.batch_timeout_ms),
        api_keys: match &a.api_key_file {
            Some(f) => kiln_serve::config::load_api_keys(f).map_err(failed)?,
            None => Vec::new(),
        },
        rate_limit: a.rate_limit,
        max_body_bytes: usize::try_from(a.max_body_mb << 20).map_err(|_| too_large("max-body-mb", a.max_body_mb))?,
        request_timeout: Duration::from_millis(a.timeout_ms),
        queue_capacity: usize::try_from(a.queue).map_err(|_| too_large("queue", a.queue))?,
        warmup_passes: usize::try_from(a.warmup).map_err(|_| too_large("warmup", a.warmup))?,
        mode: compile_setup::mode(a.mode),
        device: a.device.device(),
    };
    let zoo_cfg = ModelConfig {
        batch: 1,
        seq: usize::try_from(a.seq).map_err(|_| too_large("seq", a.seq))?,
        dtype: a.dtype.dtype(),
        seed: a.seed,
        weights: None,
    };
    let dims: HashMap<String, usize> = a.dim_args.dims.iter().cloned().collect();
    let defs = a
        .models
        .iter()
        .map(|m| {
            tracing::info!(model = %m, "loading");
            if onnx_setup::is_onnx(m) { ModelDef::onnx_file(Path::new(m), &dims) } else { ModelDef::zoo(m, &zoo_cfg) }
        })
        .collect::<Result<Vec<_>, _>>()
        .map_err(failed)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| CliError::Failed(format!("cannot start the async runtime: {e}")))?;
    rt.block_on(async {
        // Handlers first: a SIGTERM right after "listening" must drain, not kill.
        let stop = shutdown_signal().map_err(failed)?;
        let server = Server::start(cfg, defs).await.map_err(failed)?;
        eprintln!("kiln serve: listening on http://{} (models compile and warm up now; GET /v2/health/ready says when done)", server.addr());
        server.run_until(stop).await.map_err(failed)
    })
}
