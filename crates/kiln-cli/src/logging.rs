//! Log setup: `KILN_LOG` is a tracing `EnvFilter` (e.g. `debug`, `kiln_cpu=trace`), default `warn` (`kiln serve`: `warn,kiln_serve=info`, so compile progress and readiness show);
//! `KILN_LOGS=graph,fusion,output_code,recompiles,graph_breaks,cache,autotune,memory` turns on compiler topics
//! (see `kiln::compile::logs`). Logs go to stderr so that `--json` output on stdout stays
//! machine-readable.

use std::io::IsTerminal;

use kiln::compile::logs;
use tracing_subscriber::EnvFilter;

/// The environment variable holding the log filter.
const ENV_VAR: &str = "KILN_LOG";

/// Installs the global tracing subscriber; without `KILN_LOG` the filter is `default`. A
/// malformed `KILN_LOG` or `KILN_LOGS` falls back to what parses and says so, rather than
/// failing the command over a logging typo.
pub fn init(default: &str) {
    let mut problems = Vec::new();
    let mut filter = match std::env::var(ENV_VAR) {
        Ok(spec) if !spec.trim().is_empty() => match EnvFilter::try_new(&spec) {
            Ok(f) => f,
            Err(e) => {
                problems.push(format!("ignoring {ENV_VAR}={spec:?}: {e}; logging at {default}"));
                EnvFilter::new(default)
            }
        },
        _ => EnvFilter::new(default),
    };
    if let Ok(spec) = std::env::var(logs::ENV_VAR) {
        match logs::directives(&spec) {
            Ok(ds) => {
                for d in ds {
                    match d.parse() {
                        Ok(d) => filter = filter.add_directive(d),
                        Err(e) => problems.push(format!("ignoring log topic directive {d}: {e}")),
                    }
                }
            }
            Err(e) => problems.push(format!("ignoring {}: {e}", logs::ENV_VAR)),
        }
    }
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    for p in problems {
        tracing::warn!("{p}");
    }
}
