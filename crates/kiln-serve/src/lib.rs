//! `kiln serve`: an inference server speaking the KServe v2 / Open Inference Protocol over
//! HTTP (the protocol Triton Inference Server speaks), with the binary-tensor extension.
//!
//! - [`config`]: settings, API key file, `--rate-limit` parsing;
//! - [`model`]: a served model (zoo or ONNX) and its graph per batch size;
//! - [`registry`]: per-model worker threads that compile, warm up and serve a bounded queue;
//! - [`batcher`]: dynamic batching (concatenate along dim 0, pad, run, split back);
//! - [`protocol`]: decoding and checking requests, encoding responses;
//! - [`auth`], [`ratelimit`]: bearer keys in constant time, per-key token buckets;
//! - [`metrics`]: Prometheus metrics, with [`nvml`] GPU readings when a GPU is present; [`routes`]: the HTTP routes; [`server`]: start and drain.

pub mod auth;
pub mod batcher;
pub mod config;
pub mod error;
pub mod metrics;
pub mod model;
pub mod nvml;
pub mod protocol;
pub mod ratelimit;
pub mod registry;
pub mod routes;
pub mod server;

pub use config::ServeConfig;
pub use error::{ServeError, ServeResult};
pub use model::{ModelDef, TensorSpec};
pub use server::{Server, shutdown_signal};
