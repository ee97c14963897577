//! The server's settings, and reading the API key file and the `--rate-limit` value.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use crate::error::{ServeError, ServeResult};

/// How the server runs. [`ServeConfig::default`] is loopback on an ephemeral port, batching
/// up to 8 within 5 ms, no keys, no rate limit, 64 MiB bodies, 30 s timeout, eager mode, on the CPU.
#[derive(Clone, Debug)]
pub struct ServeConfig {
    /// Where to listen (loopback unless told otherwise).
    pub addr: SocketAddr,
    /// Most rows (dim 0 of the inputs) run together; 1 turns batching off.
    pub max_batch: usize,
    /// How long the first request of a batch waits for others.
    pub batch_timeout: Duration,
    /// Accepted bearer keys; empty: no authentication.
    pub api_keys: Vec<String>,
    /// Requests per second per key (per client address without keys); `None`: no limit.
    pub rate_limit: Option<f64>,
    /// Largest accepted request body.
    pub max_body_bytes: usize,
    /// A request not answered within this is answered 503.
    pub request_timeout: Duration,
    /// Requests waiting per model beyond which new ones are refused with 503.
    pub queue_capacity: usize,
    /// Warm-up passes over every compiled batch size before the model is ready.
    pub warmup_passes: usize,
    /// How models are compiled.
    pub mode: kiln::compile::Mode,
    /// Where the compiled plans run (`cuda:N`: CUDA C kernels, cuBLAS, cuDNN).
    pub device: kiln::Device,
}

impl Default for ServeConfig {
    fn default() -> Self {
        ServeConfig {
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            max_batch: 8,
            batch_timeout: Duration::from_millis(5),
            api_keys: Vec::new(),
            rate_limit: None,
            max_body_bytes: 64 << 20,
            request_timeout: Duration::from_secs(30),
            queue_capacity: 64,
            warmup_passes: 3,
            mode: kiln::compile::Mode::Eager,
            device: kiln::Device::Cpu,
        }
    }
}

/// Reads API keys, one per line; blank lines and lines starting with `#` are skipped. The
/// keys themselves never appear in an error or a log.
pub fn load_api_keys(path: &Path) -> ServeResult<Vec<String>> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| ServeError::Setup(format!("cannot read API key file '{}': {e}", path.display())))?;
    let keys: Vec<String> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(str::to_string)
        .collect();
    if keys.is_empty() {
        return Err(ServeError::Setup(format!(
            "API key file '{}' holds no key (one key per line; '#' starts a comment)",
            path.display()
        )));
    }
    Ok(keys)
}

/// Parses `N/s`, `N/m` or a bare `N` (per second) into requests per second.
pub fn parse_rate(s: &str) -> Result<f64, String> {
    let (n, per) = match s.split_once('/') {
        Some((n, unit)) => match unit {
            "s" | "sec" | "second" => (n, 1.0),
            "m" | "min" | "minute" => (n, 60.0),
            _ => return Err(format!("'{s}': the unit after '/' must be s or m")),
        },
        None => (s, 1.0),
    };
    match n.trim().parse::<f64>() {
        Ok(v) if v > 0.0 && v.is_finite() => Ok(v / per),
        _ => Err(format!("'{s}' is not a rate; expected N/s with N > 0, e.g. 100/s")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_parse_and_bad_ones_are_refused() {
        assert_eq!(parse_rate("100/s"), Ok(100.0));
        assert_eq!(parse_rate("5"), Ok(5.0));
        assert_eq!(parse_rate("120/m"), Ok(2.0));
        for bad in ["0/s", "-1/s", "x/s", "3/h", ""] {
            assert!(parse_rate(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn key_files_skip_comments_and_must_hold_a_key() {
        let dir = std::env::temp_dir().join(format!("kiln-serve-keys-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("keys");
        std::fs::write(&f, "# ops\nsecret-1\n\n  secret-2  \n").unwrap();
        assert_eq!(load_api_keys(&f).unwrap(), ["secret-1", "secret-2"]);
        std::fs::write(&f, "# none\n").unwrap();
        let e = load_api_keys(&f).unwrap_err().to_string();
        assert!(e.contains("holds no key") && !e.contains("none"), "{e}");
    }
}
