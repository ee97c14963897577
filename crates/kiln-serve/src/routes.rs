//! The HTTP routes: KServe v2 health, metadata, readiness and inference, and `/metrics`.
//! Health probes are open; every other route needs an API key when keys are configured and
//! counts against the caller's rate limit. Unknown routes answer 404 with a JSON error.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use axum::body::Body;
use axum::extract::{ConnectInfo, Path, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::{Next, from_fn_with_state};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::json;

use crate::auth::Auth;
use crate::config::ServeConfig;
use crate::error::{ServeError, ServeResult};
use crate::metrics::{Metrics, RequestLabels};
use crate::protocol;
use crate::ratelimit::RateLimiter;
use crate::registry::{ModelHandle, Registry};

/// What every handler shares.
pub struct AppState {
    /// The served models.
    pub registry: Registry,
    /// The settings.
    pub cfg: ServeConfig,
    /// The API keys.
    pub auth: Auth,
    /// The per-client rate limit, if any.
    pub limiter: Option<RateLimiter>,
    /// The metrics.
    pub metrics: Arc<Metrics>,
}

type Shared = State<Arc<AppState>>;
type Params = Path<HashMap<String, String>>;

/// The router over `state`.
pub fn router(state: Arc<AppState>) -> Router {
    let guarded = Router::new()
        .route("/v2", get(server_metadata))
        .route("/v2/models/{name}", get(model_metadata))
        .route("/v2/models/{name}/versions/{version}", get(model_metadata))
        .route("/v2/models/{name}/ready", get(model_ready))
        .route("/v2/models/{name}/versions/{version}/ready", get(model_ready))
        .route("/v2/models/{name}/infer", post(infer))
        .route("/v2/models/{name}/versions/{version}/infer", post(infer))
        .route("/metrics", get(metrics))
        .route_layer(from_fn_with_state(state.clone(), guard));
    Router::new()
        .route("/v2/health/live", get(|| async { Json(json!({ "live": true })) }))
        .route("/v2/health/ready", get(server_ready))
        .merge(guarded)
        .fallback(|| async { ServeError::NotFound("no such route; see the KServe v2 protocol (/v2/health/live, /v2/models/{name}, /v2/models/{name}/infer) and /metrics".into()) })
        .layer(from_fn_with_state(state.clone(), count_inference))
        .with_state(state)
}

/// Authentication, then the rate limit of the key (or of the client's address).
async fn guard(State(st): Shared, req: Request, next: Next) -> Response {
    let key = match st.auth.check(req.headers()) {
        Ok(k) => k,
        Err(e) => return e.into_response(),
    };
    if let Some(limiter) = &st.limiter {
        let client = match key {
            Some(i) => format!("key#{i}"),
            None => req.extensions().get::<ConnectInfo<SocketAddr>>().map_or_else(|| "local".to_string(), |c| c.0.ip().to_string()),
        };
        if let Err(retry_after_s) = limiter.take(&client) {
            return ServeError::RateLimited { message: format!("rate limit of {} requests/s exceeded; retry after {retry_after_s} s", st.cfg.rate_limit.unwrap_or(0.0)), retry_after_s }
                .into_response();
        }
    }
    next.run(req).await
}

/// Counts inference requests by model and status, and times them.
async fn count_inference(State(st): Shared, req: Request, next: Next) -> Response {
    let path = req.uri().path();
    let model = path.strip_prefix("/v2/models/").filter(|_| path.ends_with("/infer")).and_then(|rest| rest.split('/').next()).map(|name| {
        if st.registry.models.contains_key(name) { name.to_string() } else { "unknown".to_string() }
    });
    let Some(model) = model else {
        return next.run(req).await;
    };
    let start = Instant::now();
    let resp = next.run(req).await;
    st.metrics.requests.get_or_create(&RequestLabels { model: model.clone(), status: resp.status().as_u16().to_string() }).inc();
    st.metrics.latency.get_or_create(&Metrics::model(&model)).observe(start.elapsed().as_secs_f64());
    resp
}

async fn server_ready(State(st): Shared) -> Response {
    let ready = st.registry.all_ready();
    let status = if ready { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
    (status, Json(json!({ "ready": ready }))).into_response()
}

async fn server_metadata() -> Response {
    Json(json!({ "name": "kiln", "version": env!("CARGO_PKG_VERSION"), "extensions": ["binary_tensor_data"] })).into_response()
}

/// The model named in the path, or 404 listing the served names.
fn lookup(st: &AppState, p: &HashMap<String, String>) -> ServeResult<Arc<ModelHandle>> {
    let name = p.get("name").map(String::as_str).unwrap_or_default();
    st.registry.models.get(name).cloned().ok_or_else(|| {
        let names: Vec<&str> = st.registry.models.keys().map(String::as_str).collect();
        ServeError::NotFound(format!("unknown model '{name}'; this server has: {}", names.join(", ")))
    })
}

async fn model_metadata(State(st): Shared, Path(p): Params) -> ServeResult<Response> {
    let m = lookup(&st, &p)?;
    let d = &m.def;
    Ok(Json(json!({
        "name": d.name,
        "versions": ["1"],
        "platform": "kiln",
        "inputs": d.inputs.iter().map(protocol::spec_json).collect::<Vec<_>>(),
        "outputs": d.outputs.iter().map(protocol::spec_json).collect::<Vec<_>>(),
        "max_batch_size": if d.batchable { st.cfg.max_batch } else { 0 },
    }))
    .into_response())
}

async fn model_ready(State(st): Shared, Path(p): Params) -> ServeResult<Response> {
    let m = lookup(&st, &p)?;
    let ready = m.is_ready();
    let status = if ready { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
    Ok((status, Json(json!({ "name": m.def.name, "ready": ready }))).into_response())
}

async fn metrics(State(st): Shared) -> Response {
    let mut resp = st.metrics.render().into_response();
    resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"));
    resp
}

async fn infer(State(st): Shared, Path(p): Params, headers: HeaderMap, body: Body) -> Response {
    let timeout = st.cfg.request_timeout;
    match tokio::time::timeout(timeout, run_infer(&st, &p, &headers, body)).await {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => e.into_response(),
        Err(_) => ServeError::Unavailable(format!("the request was not answered within the server's timeout of {} ms", timeout.as_millis())).into_response(),
    }
}

async fn run_infer(st: &AppState, p: &HashMap<String, String>, headers: &HeaderMap, body: Body) -> ServeResult<Response> {
    let m = lookup(st, p)?;
    let limit = st.cfg.max_body_bytes;
    let too_large = || ServeError::TooLarge(format!("the request body is larger than the server's limit of {limit} bytes (--max-body-mb)"));
    let declared = headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(too_large());
    }
    m.check_ready()?;
    let bytes = axum::body::to_bytes(body, limit).await.map_err(|e| {
        if e.to_string().contains("length limit") { too_large() } else { ServeError::BadRequest(format!("could not read the request body: {e}")) }
    })?;
    let header_len = match headers.get("inference-header-content-length") {
        None => None,
        Some(v) => Some(v.to_str().ok().and_then(|v| v.trim().parse::<usize>().ok()).ok_or_else(|| {
            ServeError::BadRequest("Inference-Header-Content-Length must be the JSON header's length in bytes".into())
        })?),
    };
    // Decoding and encoding tensors is CPU work (large JSON arrays): off the async runtime.
    let (def, max_batch) = (m.def.clone(), st.cfg.max_batch);
    let decoded = blocking(move || protocol::decode_request(&def, &bytes, header_len, max_batch)).await?;
    let rx = m.submit(decoded.inputs, decoded.rows)?;
    let outputs = rx.await.map_err(|_| ServeError::Unavailable(format!("model '{}' stopped before answering", m.def.name)))??;
    let (def, id, wanted) = (m.def.clone(), decoded.id, decoded.outputs);
    let enc = blocking(move || protocol::encode_response(&def, id.as_deref(), &outputs, &wanted)).await?;
    let mut resp = Response::new(Body::from(enc.body));
    let h = resp.headers_mut();
    match enc.header_len {
        Some(n) => {
            h.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/octet-stream"));
            h.insert("inference-header-content-length", HeaderValue::from(n));
        }
        None => {
            h.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        }
    }
    Ok(resp)
}

/// Runs `f` on tokio's blocking pool.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> ServeResult<T> + Send + 'static) -> ServeResult<T> {
    tokio::task::spawn_blocking(f).await.map_err(|e| ServeError::Internal(format!("a request task failed: {e}")))?
}
