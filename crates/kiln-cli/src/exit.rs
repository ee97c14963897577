//! How a failed command ends: the message printed after `error:` and the process exit code.

use std::fmt;

/// A command failure: exit code 1 (bad flags are clap's usage errors, exit code 2).
#[derive(Debug)]
pub enum CliError {
    /// An error from kiln itself or from the user's input: exit code 1.
    Failed(String),
}

impl CliError {
    /// The process exit code for this failure.
    pub fn code(&self) -> u8 {
        match self {
            CliError::Failed(_) => 1,
        }
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CliError::Failed(m) => f.write_str(m),
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
