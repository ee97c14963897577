//! [`Gpu`]: one CUDA device opened for kiln — its primary context, the stream every kernel and
//! library call of kiln goes on, lazily created cuBLAS/cuDNN handles, and the caching allocator.

use super::alloc::Pools;
use super::libs::{Lib, require};
use cudarc::driver::{CudaContext, CudaStream, DriverError, sys};
use kiln_ir::{Error, Result};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

/// Bytes of cuBLAS workspace (what PyTorch gives cuBLAS on Hopper).
pub const CUBLAS_WORKSPACE: usize = 32 << 20;

/// A driver error as a kiln error saying what was being done.
pub fn driver_error(what: &str, e: DriverError) -> Error {
    Error::Device(format!("{what}: {e}"))
}

/// One opened CUDA device. Cheap to share (`Arc`); all work kiln issues on it is ordered on
/// one stream, so a run never needs more synchronisation than its final copy back.
pub struct Gpu {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    name: String,
    capability: (i32, i32),
    pub(super) pools: Mutex<Pools>,
    cublas: OnceLock<std::result::Result<CublasHandle, String>>,
    cudnn: OnceLock<std::result::Result<CudnnHandle, String>>,
    cublaslt: OnceLock<std::result::Result<CublasLtHandle, String>>,
}

/// A cuBLAS handle bound to kiln's stream.
pub(crate) struct CublasHandle(pub cudarc::cublas::sys::cublasHandle_t);
// SAFETY: the handle is only used under the Gpu's work lock, one call at a time.
unsafe impl Send for CublasHandle {}
unsafe impl Sync for CublasHandle {}

/// A cuBLASLt handle (cuBLASLt takes the stream per call).
pub(crate) struct CublasLtHandle(pub cudarc::cublaslt::sys::cublasLtHandle_t);
// SAFETY: as for CublasHandle.
unsafe impl Send for CublasLtHandle {}
unsafe impl Sync for CublasLtHandle {}

/// A cuDNN handle bound to kiln's stream.
pub(crate) struct CudnnHandle(pub cudarc::cudnn::sys::cudnnHandle_t);
// SAFETY: as for CublasHandle.
unsafe impl Send for CudnnHandle {}
unsafe impl Sync for CudnnHandle {}

impl Gpu {
    /// Opens device `ordinal` (once per process; later calls share it). Errors name what is
    /// missing: the driver library, any device, or this ordinal.
    pub fn open(ordinal: usize) -> Result<Arc<Gpu>> {
        static OPEN: OnceLock<Mutex<HashMap<usize, Arc<Gpu>>>> = OnceLock::new();
        let mut open = OPEN.get_or_init(Default::default).lock().unwrap_or_else(|p| p.into_inner());
        if let Some(g) = open.get(&ordinal) {
            return Ok(g.clone());
        }
        require(Lib::Driver)?;
        let count = CudaContext::device_count().map_err(|e| driver_error("counting CUDA devices", e))?;
        if ordinal >= count.max(0) as usize {
            return Err(Error::Device(format!(
                "cuda:{ordinal} does not exist: this machine has {count} CUDA device(s)"
            )));
        }
        let ctx = CudaContext::new(ordinal).map_err(|e| driver_error(&format!("opening cuda:{ordinal}"), e))?;
        let stream = ctx.new_stream().map_err(|e| driver_error("creating a stream", e))?;
        let name = ctx.name().map_err(|e| driver_error("reading the device name", e))?;
        let capability = ctx.compute_capability().map_err(|e| driver_error("reading the compute capability", e))?;
        let gpu = Arc::new(Gpu {
            ctx,
            stream,
            name,
            capability,
            pools: Mutex::new(Pools::default()),
            cublas: OnceLock::new(),
            cudnn: OnceLock::new(),
            cublaslt: OnceLock::new(),
        });
        tracing::info!(target: "kiln::cuda", "opened cuda:{ordinal}: {} (sm_{}{})", gpu.name, capability.0, capability.1);
        open.insert(ordinal, gpu.clone());
        Ok(gpu)
    }

    /// Whether a CUDA device can be opened here (the driver loads and reports a device).
    pub fn available() -> bool {
        Lib::Driver.present() && CudaContext::device_count().map(|n| n > 0).unwrap_or(false)
    }

    /// The device's name (`NVIDIA H200`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `(major, minor)` compute capability.
    pub fn capability(&self) -> (i32, i32) {
        self.capability
    }

    /// The architecture number NVRTC compiles for (`90` for `sm_90`).
    pub fn sm(&self) -> u32 {
        (self.capability.0 * 10 + self.capability.1) as u32
    }

    /// The device ordinal.
    pub fn ordinal(&self) -> usize {
        self.ctx.ordinal()
    }

    /// Makes the context current on this thread (driver calls act on the current context).
    pub(crate) fn bind(&self) -> Result<()> {
        self.ctx.bind_to_thread().map_err(|e| driver_error("binding the CUDA context", e))
    }

    /// The raw stream kiln's work is ordered on.
    pub(crate) fn cu_stream(&self) -> sys::CUstream {
        self.stream.cu_stream()
    }

    /// Waits until everything issued on kiln's stream has finished, reporting any kernel fault.
    pub fn synchronize(&self) -> Result<()> {
        self.bind()?;
        self.stream.synchronize().map_err(|e| driver_error("waiting for the GPU", e))
    }

    /// `(free, total)` bytes of device memory.
    pub fn mem_info(&self) -> Result<(usize, usize)> {
        self.bind()?;
        self.ctx.mem_get_info().map_err(|e| driver_error("reading device memory", e))
    }

    /// The cuBLAS handle, created on first use, set to kiln's stream and strict fp32 math.
    pub(crate) fn cublas(&self) -> Result<&CublasHandle> {
        self.cublas
            .get_or_init(|| {
                require(Lib::Cublas).map_err(|e| e.to_string())?;
                let _timer = LoadTimer::new("cuBLAS handle made");
                self.bind().map_err(|e| e.to_string())?;
                let h = cudarc::cublas::result::create_handle().map_err(|e| format!("cublasCreate: {e:?}"))?;
                // SAFETY: a fresh handle and kiln's live stream.
                unsafe {
                    cudarc::cublas::result::set_stream(h, self.cu_stream() as _).map_err(|e| format!("cublasSetStream: {e:?}"))?;
                    cudarc::cublas::sys::cublasSetMathMode(h, cudarc::cublas::sys::cublasMath_t::CUBLAS_DEFAULT_MATH)
                        .result()
                        .map_err(|e| format!("cublasSetMathMode: {e:?}"))?;
                    // A workspace of kiln's own, so cuBLAS never allocates inside a CUDA graph
                    // capture (reduce-overhead); it lives as long as the process's handle.
                    let ws = cudarc::driver::result::malloc_sync(CUBLAS_WORKSPACE).map_err(|e| format!("cuBLAS workspace: {e}"))?;
                    cudarc::cublas::sys::cublasSetWorkspace_v2(h, ws as *mut std::ffi::c_void, CUBLAS_WORKSPACE)
                        .result()
                        .map_err(|e| format!("cublasSetWorkspace: {e:?}"))?;
                }
                Ok(CublasHandle(h))
            })
            .as_ref()
            .map_err(|e| Error::Device(e.clone()))
    }

    /// The cuBLASLt handle, created on first use.
    pub(crate) fn cublaslt(&self) -> Result<&CublasLtHandle> {
        self.cublaslt
            .get_or_init(|| {
                require(Lib::CublasLt).map_err(|e| e.to_string())?;
                let _timer = LoadTimer::new("cuBLASLt handle made");
                self.bind().map_err(|e| e.to_string())?;
                cudarc::cublaslt::result::create_handle().map(CublasLtHandle).map_err(|e| format!("cublasLtCreate: {e:?}"))
            })
            .as_ref()
            .map_err(|e| Error::Device(e.clone()))
    }

    /// Loads the libraries a program will call, makes their handles and has each answer one
    /// small query, which sets it up: cuDNN when the program has convs, cuBLASLt when it has
    /// matmuls, each on its own thread (this returns when both are done). A compile runs this
    /// on another thread while it builds the executable, so the ~100 ms each library takes to
    /// set itself up overlaps that work instead of adding to it. A failure here is left to
    /// the call that needs the library, which reports it.
    pub fn preload(&self, convs: bool, matmuls: bool) {
        std::thread::scope(|s| {
            if convs {
                s.spawn(|| {
                    let _timer = LoadTimer::new("cuDNN set up (handle and a first query)");
                    let _ = crate::exec::warm_up_cudnn(self);
                });
            }
            if matmuls {
                let _timer = LoadTimer::new("cuBLASLt set up (handle and a first query)");
                let _ = crate::exec::warm_up_cublaslt(self);
            }
        });
    }

    /// The versions of the libraries whose choices a tuning records (cuDNN, cuBLASLt), for
    /// cache keys: `cudnn 91400 cublaslt 130000` (a library that is missing reads 0).
    pub fn library_versions(&self) -> String {
        // SAFETY: plain version queries, made only when the library loads.
        let cudnn = if Lib::Cudnn.present() { unsafe { cudarc::cudnn::sys::cudnnGetVersion() } } else { 0 };
        let lt = if Lib::CublasLt.present() { unsafe { cudarc::cublaslt::sys::cublasLtGetVersion() } } else { 0 };
        format!("cudnn {cudnn} cublaslt {lt}")
    }

    /// The cuDNN handle, created on first use and set to kiln's stream.
    pub(crate) fn cudnn(&self) -> Result<&CudnnHandle> {
        self.cudnn
            .get_or_init(|| {
                require(Lib::Cudnn).map_err(|e| e.to_string())?;
                let _timer = LoadTimer::new("cuDNN handle made");
                self.bind().map_err(|e| e.to_string())?;
                let h = cudarc::cudnn::result::create_handle().map_err(|e| format!("cudnnCreate: {e:?}"))?;
                // SAFETY: a fresh handle and kiln's live stream.
                unsafe { cudarc::cudnn::result::set_stream(h, self.cu_stream() as _) }.map_err(|e| format!("cudnnSetStream: {e:?}"))?;
                Ok(CudnnHandle(h))
            })
            .as_ref()
            .map_err(|e| Error::Device(e.clone()))
    }

    /// Locks the allocator's pools.
    pub(super) fn pools(&self) -> MutexGuard<'_, Pools> {
        self.pools.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Logs how long a library took to load and make its handle, or to set itself up (on
/// `kiln::cuda`, when dropped): part of a process's first compile for the GPU.
struct LoadTimer {
    what: &'static str,
    began: std::time::Instant,
}

impl LoadTimer {
    fn new(what: &'static str) -> LoadTimer {
        LoadTimer { what, began: std::time::Instant::now() }
    }
}

impl Drop for LoadTimer {
    fn drop(&mut self) {
        tracing::info!(target: "kiln::cuda", "{} in {:.1} ms", self.what, self.began.elapsed().as_secs_f64() * 1e3);
    }
}
