//! The execution modes, as `torch.compile`'s.

use kiln_ir::{Error, Result};
use std::fmt;

/// How a graph is run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Mode {
    /// One reference kernel per op (the interpreter); the baseline and the oracle.
    Eager,
    /// Passes, fusion, memory planning, generated C kernels and library calls with fused epilogues.
    #[default]
    Default,
    /// `Default` replayed as a CUDA graph; on the CPU it is `Default` (said once in the log).
    ReduceOverhead,
    /// `Default`, with candidate kernels timed on this machine and the fastest kept in the cache.
    MaxAutotune,
}

impl Mode {
    /// Every mode, in the order the CLI lists them.
    pub const ALL: [Mode; 4] = [Mode::Eager, Mode::Default, Mode::ReduceOverhead, Mode::MaxAutotune];

    /// The name used on the command line and in output.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Eager => "eager",
            Mode::Default => "default",
            Mode::ReduceOverhead => "reduce-overhead",
            Mode::MaxAutotune => "max-autotune",
        }
    }

    /// The mode called `name`.
    pub fn parse(name: &str) -> Result<Mode> {
        Mode::ALL.into_iter().find(|m| m.name() == name).ok_or_else(|| {
            let known: Vec<&str> = Mode::ALL.iter().map(|m| m.name()).collect();
            Error::Value(format!("unknown mode '{name}' (known: {})", known.join(", ")))
        })
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_unknown_names_are_listed() {
        for m in Mode::ALL {
            assert_eq!(Mode::parse(m.name()).ok(), Some(m));
        }
        let e = Mode::parse("fast").err().map(|e| e.to_string()).unwrap_or_default();
        assert!(e.contains("fast") && e.contains("max-autotune"), "{e}");
    }
}
