//! Prometheus metrics (`GET /metrics`, text format): requests by model and status, latency and
//! batch size histograms, queue depth, compile and warm-up time, readiness, process memory, and
//! per-GPU utilisation, memory, temperature and power through NVML when a GPU is present
//! (`kiln_gpu_present` counts the GPUs NVML sees; 0 without a driver or GPU).

use std::sync::Mutex;
use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// Labels of per-model metrics.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ModelLabel {
    /// The model's name.
    pub model: String,
}

/// Labels of the request counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    /// The model's name (`unknown` for names the server does not have).
    pub model: String,
    /// The HTTP status code.
    pub status: String,
}

/// Labels of per-GPU metrics.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct GpuLabel {
    /// NVML's index of the GPU.
    pub gpu: String,
}

/// Labels of the compile-time gauge.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CompileLabels {
    /// The model's name.
    pub model: String,
    /// The batch size compiled for.
    pub batch: String,
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

/// Every metric the server keeps.
pub struct Metrics {
    registry: Mutex<Registry>,
    /// Inference requests answered, by model and status.
    pub requests: Family<RequestLabels, Counter>,
    /// Seconds from a request's arrival to its answer.
    pub latency: HistogramFamily<ModelLabel>,
    /// Rows per batch run.
    pub batch_size: HistogramFamily<ModelLabel>,
    /// Requests waiting in a model's queue.
    pub queue_depth: Family<ModelLabel, Gauge>,
    /// Seconds to compile a model for one batch size.
    pub compile_seconds: Family<CompileLabels, Gauge<f64, AtomicU64>>,
    /// Batch sizes of a model that run on its size-generic kernels (one C library for every
    /// batch size; the others were compiled on their own).
    pub size_generic_batches: Family<ModelLabel, Gauge>,
    /// Seconds of warm-up passes of a model (after compiling).
    pub warmup_seconds: Family<ModelLabel, Gauge<f64, AtomicU64>>,
    /// 1 when a model is ready.
    pub model_ready: Family<ModelLabel, Gauge>,
    /// Resident memory of the process (the CPU device's memory), read at scrape time.
    pub resident_bytes: Gauge,
    gpus: Gpus,
}

/// The NVML gauges, read at scrape time.
struct Gpus {
    nvml: Option<crate::nvml::Nvml>,
    present: Gauge,
    utilization: Family<GpuLabel, Gauge>,
    memory_used: Family<GpuLabel, Gauge>,
    memory_total: Family<GpuLabel, Gauge>,
    temperature: Family<GpuLabel, Gauge>,
    power: Family<GpuLabel, Gauge<f64, AtomicU64>>,
}

impl Gpus {
    fn register(r: &mut Registry) -> Gpus {
        let nvml = match crate::nvml::Nvml::load() {
            Ok(n) => Some(n),
            Err(why) => {
                tracing::info!("no GPU metrics: {why}");
                None
            }
        };
        let g = Gpus {
            nvml,
            present: Gauge::default(),
            utilization: Family::default(),
            memory_used: Family::default(),
            memory_total: Family::default(),
            temperature: Family::default(),
            power: Family::default(),
        };
        r.register("gpu_present", "GPUs seen through NVML (0 without an NVIDIA driver or GPU)", g.present.clone());
        r.register("gpu_utilization_percent", "GPU busy percent over NVML's last sample period", g.utilization.clone());
        r.register("gpu_memory_used_bytes", "GPU memory in use", g.memory_used.clone());
        r.register("gpu_memory_total_bytes", "GPU memory in all", g.memory_total.clone());
        r.register("gpu_temperature_celsius", "GPU core temperature", g.temperature.clone());
        r.register("gpu_power_watts", "GPU power draw", g.power.clone());
        g
    }

    fn refresh(&self) {
        let Some(nvml) = &self.nvml else { return };
        let readings = nvml.read();
        self.present.set(readings.len() as i64);
        for (i, r) in readings.iter().enumerate() {
            let l = GpuLabel { gpu: i.to_string() };
            let set = |f: &Family<GpuLabel, Gauge>, v: Option<u64>| {
                if let Some(v) = v {
                    f.get_or_create(&l).set(v as i64);
                }
            };
            set(&self.utilization, r.utilization_percent.map(u64::from));
            set(&self.memory_used, r.memory_used_bytes);
            set(&self.memory_total, r.memory_total_bytes);
            set(&self.temperature, r.temperature_celsius.map(u64::from));
            if let Some(w) = r.power_watts {
                self.power.get_or_create(&l).set(w);
            }
        }
    }
}

fn latency_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.0005, 2.0, 18))
}

fn batch_histogram() -> Histogram {
    Histogram::new(exponential_buckets(1.0, 2.0, 10))
}

impl Metrics {
    /// Registers every metric under the `kiln_` prefix.
    pub fn new() -> Metrics {
        let mut r = Registry::with_prefix("kiln");
        let requests = Family::<RequestLabels, Counter>::default();
        let latency: HistogramFamily<ModelLabel> = Family::new_with_constructor(latency_histogram);
        let batch_size: HistogramFamily<ModelLabel> = Family::new_with_constructor(batch_histogram);
        let queue_depth = Family::<ModelLabel, Gauge>::default();
        let compile_seconds = Family::<CompileLabels, Gauge<f64, AtomicU64>>::default();
        let size_generic_batches = Family::<ModelLabel, Gauge>::default();
        let warmup_seconds = Family::<ModelLabel, Gauge<f64, AtomicU64>>::default();
        let model_ready = Family::<ModelLabel, Gauge>::default();
        let resident_bytes = Gauge::default();
        r.register("requests", "Inference requests answered, by model and HTTP status", requests.clone());
        r.register("request_duration_seconds", "Inference request latency", latency.clone());
        r.register("batch_size", "Rows per batch run", batch_size.clone());
        r.register("queue_depth", "Requests waiting in the model's queue", queue_depth.clone());
        r.register("compile_seconds", "Seconds to compile the model for one batch size", compile_seconds.clone());
        r.register(
            "size_generic_batches",
            "Batch sizes of the model run on one size-generic kernel library (the others compiled on their own)",
            size_generic_batches.clone(),
        );
        r.register("warmup_seconds", "Seconds of warm-up passes before the model was ready", warmup_seconds.clone());
        r.register("model_ready", "1 when the model is ready", model_ready.clone());
        r.register("process_resident_memory_bytes", "Resident memory of the server (CPU device memory)", resident_bytes.clone());
        let gpus = Gpus::register(&mut r);
        Metrics {
            registry: Mutex::new(r),
            requests,
            latency,
            batch_size,
            queue_depth,
            compile_seconds,
            size_generic_batches,
            warmup_seconds,
            model_ready,
            resident_bytes,
            gpus,
        }
    }

    /// The text exposition format.
    pub fn render(&self) -> String {
        if let Some(b) = resident_memory_bytes() {
            self.resident_bytes.set(b as i64);
        }
        self.gpus.refresh();
        let mut out = String::new();
        let registry = self.registry.lock().unwrap_or_else(|p| p.into_inner());
        if let Err(e) = prometheus_client::encoding::text::encode(&mut out, &registry) {
            tracing::warn!("encoding metrics failed: {e}");
        }
        out
    }

    /// The label of `model`.
    pub fn model(model: &str) -> ModelLabel {
        ModelLabel { model: model.to_string() }
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

/// Resident set size from `/proc/self/statm` (Linux); `None` elsewhere.
fn resident_memory_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096)
}
