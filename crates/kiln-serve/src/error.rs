//! Errors of the server as values: each is an HTTP status and a JSON body `{"error": "..."}`
//! whose message says what was expected.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

/// Why a request (or starting the server) failed. Each variant maps to one HTTP status.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ServeError {
    /// The request was malformed or does not fit the model (400).
    #[error("{0}")]
    BadRequest(String),
    /// No API key, or an unknown one (401).
    #[error("{0}")]
    Unauthorized(String),
    /// An unknown model, or an unknown route (404).
    #[error("{0}")]
    NotFound(String),
    /// The body is larger than `--max-body-mb` (413).
    #[error("{0}")]
    TooLarge(String),
    /// The key's rate limit is spent; retry after this many seconds (429).
    #[error("{message}")]
    RateLimited {
        /// What happened.
        message: String,
        /// Seconds until a request would be allowed (the `Retry-After` header).
        retry_after_s: u64,
    },
    /// The model is not ready, its queue is full, the request timed out, or running it failed
    /// (out of memory, a kernel error): this request only, the server keeps serving (503).
    #[error("{0}")]
    Unavailable(String),
    /// A bug in kiln (500).
    #[error("{0}")]
    Internal(String),
    /// Setting up the server failed (a model, a key file, the address).
    #[error("{0}")]
    Setup(String),
}

impl ServeError {
    /// The HTTP status this error is answered with.
    pub fn status(&self) -> StatusCode {
        match self {
            ServeError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ServeError::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            ServeError::NotFound(_) => StatusCode::NOT_FOUND,
            ServeError::TooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            ServeError::RateLimited { .. } => StatusCode::TOO_MANY_REQUESTS,
            ServeError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            ServeError::Internal(_) | ServeError::Setup(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

impl From<kiln_ir::Error> for ServeError {
    fn from(e: kiln_ir::Error) -> Self {
        ServeError::Setup(e.to_string())
    }
}

impl IntoResponse for ServeError {
    fn into_response(self) -> Response {
        let status = self.status();
        let body = serde_json::json!({ "error": self.to_string() });
        let mut resp = (status, axum::Json(body)).into_response();
        let headers = resp.headers_mut();
        match &self {
            ServeError::RateLimited { retry_after_s, .. } => {
                headers.insert(header::RETRY_AFTER, HeaderValue::from(*retry_after_s));
            }
            ServeError::Unavailable(_) => {
                headers.insert(header::RETRY_AFTER, HeaderValue::from(1u64));
            }
            ServeError::Unauthorized(_) => {
                headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            }
            _ => {}
        }
        resp
    }
}

/// A result whose error is a [`ServeError`].
pub type ServeResult<T> = std::result::Result<T, ServeError>;
