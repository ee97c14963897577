//! `KILN_LOGS`: log topics, as PyTorch's `TORCH_LOGS`. Each topic is a tracing target that the
//! compiler logs to; `KILN_LOGS=graph,fusion` turns those on (at info, `+topic` at debug) on top of
//! the `KILN_LOG` filter.

use kiln_ir::{Error, Result};

/// The topics and the tracing target each one enables.
pub const TOPICS: [(&str, &str); 8] = [
    ("graph", "kiln::graph"),
    ("fusion", "kiln::fusion"),
    ("output_code", "kiln::output_code"),
    ("recompiles", "kiln::recompiles"),
    ("graph_breaks", "kiln::graph_breaks"),
    ("cache", "kiln::cache"),
    ("autotune", "kiln::autotune"),
    ("memory", "kiln::memory"),
];

/// The environment variable listing topics.
pub const ENV_VAR: &str = "KILN_LOGS";

/// `EnvFilter` directives (`kiln::fusion=info`, ...) for a comma-separated topic list. `all`
/// turns on every topic; a `+` prefix logs the topic at debug. An unknown topic is an error
/// listing the known ones.
pub fn directives(spec: &str) -> Result<Vec<String>> {
    let mut out = Vec::new();
    for item in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (level, name) = match item.strip_prefix('+') {
            Some(n) => ("debug", n),
            None => ("info", item),
        };
        if name == "all" {
            out.extend(TOPICS.iter().map(|(_, t)| format!("{t}={level}")));
            continue;
        }
        let target = TOPICS.iter().find(|(n, _)| *n == name).map(|(_, t)| *t).ok_or_else(|| {
            let known: Vec<&str> = TOPICS.iter().map(|(n, _)| *n).collect();
            Error::Value(format!("{ENV_VAR}: unknown topic '{name}' (known: {}, all)", known.join(", ")))
        })?;
        out.push(format!("{target}={level}"));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topics_map_to_targets() {
        assert_eq!(
            directives("fusion, +output_code").ok(),
            Some(vec!["kiln::fusion=info".to_string(), "kiln::output_code=debug".to_string()])
        );
        assert_eq!(directives("all").map(|d| d.len()).ok(), Some(TOPICS.len()));
        let e = directives("graph,bogus").err().map(|e| e.to_string()).unwrap_or_default();
        assert!(e.contains("bogus") && e.contains("output_code"), "{e}");
    }
}
