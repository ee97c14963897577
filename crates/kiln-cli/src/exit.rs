//! How a failed command ends: the message printed after `error:` and the process exit code.

use std::fmt;

/// A command failure. Bad input (unknown model, bad weights) exits 1; a request for a part of
/// kiln that is not built yet (compiler modes, CUDA) exits 2, so scripts can tell them apart.
#[derive(Debug)]
pub enum CliError {
    /// An error from kiln itself or from the user's input: exit code 1.
    Failed(String),
    /// A feature this build does not have yet: exit code 2.
    NotBuilt(String),
}

impl CliError {
    /// The process exit code for this failure.
    pub fn code(&self) -> u8 {
        match self {
            CliError::Failed(_) => 1,
            CliError::NotBuilt(_) => 2,
        }
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CliError::Failed(m) | CliError::NotBuilt(m) => f.write_str(m),
        }
    }
}

impl From<kiln::Error> for CliError {
    fn from(e: kiln::Error) -> Self {
        CliError::Failed(e.to_string())
    }
}

/// Result of a CLI command.
pub type CliResult<T> = std::result::Result<T, CliError>;
