//! The one error type of the graph IR and the stages built on it.

/// What went wrong, with a message that names the op, the shapes or the file involved
/// and, where there is one, what to do about it.
#[derive(Debug, thiserror::Error, Clone, PartialEq)]
pub enum Error {
    /// Shapes that do not fit the op (broadcasting, matmul inner dims, reshape sizes...).
    #[error("shape error: {0}")]
    Shape(String),
    /// A dtype the op does not accept, or inputs whose dtypes disagree.
    #[error("dtype error: {0}")]
    DType(String),
    /// A malformed graph: dangling input, cycle, wrong arity, bad constant id.
    #[error("invalid graph: {0}")]
    Graph(String),
    /// A well-formed request that this build of kiln cannot carry out yet.
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// A bad value supplied by the user (an out-of-range index, a division by zero, a bad attribute).
    #[error("invalid value: {0}")]
    Value(String),
    /// Reading or writing files (safetensors, caches).
    #[error("i/o error: {0}")]
    Io(String),
    /// The accelerator or its libraries failed: a missing driver or library, out of device
    /// memory (the message gives the sizes), a kernel that did not compile or launch.
    #[error("device error: {0}")]
    Device(String),
}

impl Error {
    /// The same error with `at` (a node, a file, a request) put before its message, keeping its kind.
    pub fn context(self, at: &str) -> Error {
        match self {
            Error::Shape(m) => Error::Shape(format!("{at}: {m}")),
            Error::DType(m) => Error::DType(format!("{at}: {m}")),
            Error::Graph(m) => Error::Graph(format!("{at}: {m}")),
            Error::Unsupported(m) => Error::Unsupported(format!("{at}: {m}")),
            Error::Value(m) => Error::Value(format!("{at}: {m}")),
            Error::Io(m) => Error::Io(format!("{at}: {m}")),
            Error::Device(m) => Error::Device(format!("{at}: {m}")),
        }
    }
}

/// Result with [`Error`].
pub type Result<T> = std::result::Result<T, Error>;

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        Error::Io(e.to_string())
    }
}
