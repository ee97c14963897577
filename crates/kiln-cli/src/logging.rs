//! Log setup: `KILN_LOG` is a tracing `EnvFilter` (e.g. `debug`, `kiln_cpu=trace`), default `warn`.
//! Logs go to stderr so that `--json` output on stdout stays machine-readable.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

/// The environment variable holding the log filter.
const ENV_VAR: &str = "KILN_LOG";

/// Installs the global tracing subscriber. A malformed `KILN_LOG` falls back to `warn` and says so,
/// rather than failing the command over a logging typo.
pub fn init() {
    let (filter, bad) = match std::env::var(ENV_VAR) {
        Ok(spec) if !spec.trim().is_empty() => match EnvFilter::try_new(&spec) {
            Ok(f) => (f, None),
            Err(e) => (EnvFilter::new("warn"), Some(format!("{spec:?}: {e}"))),
        },
        _ => (EnvFilter::new("warn"), None),
    };
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    if let Some(why) = bad {
        tracing::warn!("ignoring {ENV_VAR}={why}; logging at warn");
    }
}
