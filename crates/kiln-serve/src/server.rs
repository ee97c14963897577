//! Starting and stopping the server: bind, start the model workers, serve HTTP until told to
//! stop, then drain: stop accepting, finish in-flight requests, close the model queues.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::auth::Auth;
use crate::config::ServeConfig;
use crate::error::{ServeError, ServeResult};
use crate::metrics::Metrics;
use crate::model::ModelDef;
use crate::ratelimit::RateLimiter;
use crate::registry::Registry;
use crate::routes::{AppState, router};

/// A running server.
pub struct Server {
    addr: SocketAddr,
    state: Arc<AppState>,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<std::io::Result<()>>,
}

impl Server {
    /// Binds `cfg.addr` and serves `models` (each compiled and warmed up in the background;
    /// `/v2/health/ready` says when all are ready). Must run inside a tokio runtime.
    pub async fn start(cfg: ServeConfig, models: Vec<ModelDef>) -> ServeResult<Server> {
        if cfg.max_batch == 0 {
            return Err(ServeError::Setup("--max-batch must be at least 1".into()));
        }
        // A missing GPU or CUDA library fails the start, not every model in the background.
        kiln::compile::check_device(cfg.device).map_err(|e| ServeError::Setup(format!("--device {}: {e}", cfg.device)))?;
        let listener = tokio::net::TcpListener::bind(cfg.addr)
            .await
            .map_err(|e| ServeError::Setup(format!("cannot listen on {}: {e}", cfg.addr)))?;
        let addr = listener.local_addr().map_err(|e| ServeError::Setup(e.to_string()))?;
        if !addr.ip().is_loopback() && cfg.api_keys.is_empty() {
            tracing::warn!(%addr, "listening beyond loopback without API keys: anyone who can reach this address can use the server (see --api-key-file)");
        }
        let metrics = Arc::new(Metrics::new());
        let registry = Registry::start(models, &cfg, metrics.clone())?;
        let state = Arc::new(AppState {
            registry,
            auth: Auth::new(&cfg.api_keys),
            limiter: cfg.rate_limit.map(RateLimiter::new),
            cfg,
            metrics,
        });
        let (stop, stopped) = oneshot::channel::<()>();
        let app = router(state.clone()).into_make_service_with_connect_info::<SocketAddr>();
        let task = tokio::spawn(async move {
            axum::serve(listener, app)
                .with_graceful_shutdown(async move {
                    let _ = stopped.await;
                })
                .await
        });
        tracing::info!(%addr, auth = state.auth.enabled(), "listening");
        Ok(Server { addr, state, stop: Some(stop), task })
    }

    /// The address the server listens on (the real port when started on port 0).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Waits until every model is ready, at most `timeout`; true when they are.
    pub async fn wait_ready(&self, timeout: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + timeout;
        while !self.state.registry.all_ready() {
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        true
    }

    /// Stops accepting connections, waits for in-flight requests to be answered, then closes
    /// the model queues.
    pub async fn shutdown(mut self) -> ServeResult<()> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let served = (&mut self.task).await;
        self.state.registry.shutdown();
        match served {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(ServeError::Setup(format!("the server stopped with an error: {e}"))),
            Err(e) => Err(ServeError::Internal(format!("the server task failed: {e}"))),
        }
    }

    /// Serves until `stop` resolves (e.g. [`shutdown_signal`]), then shuts down gracefully.
    pub async fn run_until(self, stop: impl std::future::Future<Output = ()>) -> ServeResult<()> {
        stop.await;
        tracing::info!("shutting down: draining in-flight requests");
        self.shutdown().await
    }
}

/// Installs SIGTERM and SIGINT (Ctrl-C) handlers now, so a signal that arrives at any later
/// moment is not lost (nor kills the process), and returns a future that resolves on the first.
/// Must run inside a tokio runtime.
#[cfg(unix)]
pub fn shutdown_signal() -> ServeResult<impl std::future::Future<Output = ()>> {
    use tokio::signal::unix::{SignalKind, signal};
    let install = |kind: SignalKind, name: &str| signal(kind).map_err(|e| ServeError::Setup(format!("cannot handle {name}: {e}")));
    let mut term = install(SignalKind::terminate(), "SIGTERM")?;
    let mut int = install(SignalKind::interrupt(), "SIGINT")?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => {},
            _ = int.recv() => {},
        }
    })
}

/// Ctrl-C where there are no Unix signals.
#[cfg(not(unix))]
pub fn shutdown_signal() -> ServeResult<impl std::future::Future<Output = ()>> {
    Ok(async {
        let _ = tokio::signal::ctrl_c().await;
    })
}
