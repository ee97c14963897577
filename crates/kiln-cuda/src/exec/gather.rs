//! `Op::Gather` on the GPU (embedding lookups: the one graph op the scheduler leaves to the
//! reference kernels in the zoo's transformers), by a handwritten kernel compiled once per
//! process through NVRTC and the disk cache. Elements are copied as 1/2/4/8-byte words, so one
//! kernel per element size and index type serves every dtype. An out-of-range index sets a
//! flag the run checks afterwards (the interpreter's error, raised after the fact).

use crate::device::Gpu;
use crate::module::Module;
use cudarc::driver::{result, sys};
use kiln_ir::{DType, Error, Result};
use kiln_sched::{BufView, DiskCache, Program};
use std::ffi::c_void;
use std::sync::Arc;

const SOURCE: &str = r#"
template <typename T, typename I>
static __device__ __forceinline__ void gather(const T* __restrict__ data, const I* __restrict__ idx, T* __restrict__ out,
        long long outer, long long nidx, long long axis, long long inner, int* err) {
    long long total = outer * nidx * inner;
    for (long long t = blockIdx.x * (long long)blockDim.x + threadIdx.x; t < total; t += (long long)gridDim.x * blockDim.x) {
        long long i = t % inner, r = t / inner, j = r % nidx, o = r / nidx;
        long long ix = (long long)idx[j];
        if (ix < 0) ix += axis;
        if (ix < 0 || ix >= axis) { atomicExch(err, 1); out[t] = (T)0; continue; }
        out[t] = data[(o * axis + ix) * inner + i];
    }
}
#define KILN_GATHER(NAME, T, I) extern "C" __global__ void NAME(const T* d, const I* x, T* o, long long a, long long b, long long c, long long e, int* err) { gather<T, I>(d, x, o, a, b, c, e, err); }
KILN_GATHER(kiln_gather_1_i32, unsigned char, int)
KILN_GATHER(kiln_gather_2_i32, unsigned short, int)
KILN_GATHER(kiln_gather_4_i32, unsigned int, int)
KILN_GATHER(kiln_gather_8_i32, unsigned long long, int)
KILN_GATHER(kiln_gather_1_i64, unsigned char, long long)
KILN_GATHER(kiln_gather_2_i64, unsigned short, long long)
KILN_GATHER(kiln_gather_4_i64, unsigned int, long long)
KILN_GATHER(kiln_gather_8_i64, unsigned long long, long long)
"#;

const NAMES: [&str; 8] = [
    "kiln_gather_1_i32", "kiln_gather_2_i32", "kiln_gather_4_i32", "kiln_gather_8_i32",
    "kiln_gather_1_i64", "kiln_gather_2_i64", "kiln_gather_4_i64", "kiln_gather_8_i64",
];

/// The gather kernels, loaded on first use.
fn module(gpu: &Arc<Gpu>, cache: &DiskCache) -> Result<Arc<Module>> {
    static MODULE: std::sync::Mutex<Option<Arc<Module>>> = std::sync::Mutex::new(None);
    let mut m = MODULE.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(m) = m.as_ref() {
        return Ok(m.clone());
    }
    let (cubin, _) = crate::nvrtc::cached_cubin(cache, SOURCE, gpu.sm(), &["--std=c++17"])?;
    let loaded = Arc::new(Module::load(gpu, &cubin, &NAMES)?);
    *m = Some(loaded.clone());
    Ok(loaded)
}

/// Whether the kernel takes a gather along `axis` of `data` at indices `idx` of `index_dtype`:
/// dense views, i32 or i64 indices.
pub(crate) fn fits(data: &BufView, idx: &BufView, axis: usize, index_dtype: DType) -> bool {
    data.layout().is_contiguous() && idx.layout().is_contiguous() && axis < data.shape.len() && matches!(index_dtype, DType::I32 | DType::I64)
}

/// A gather step bound to its buffers.
pub(crate) struct GatherCall {
    func: sys::CUfunction,
    _module: Arc<Module>,
    /// data, indices, out addresses; outer, index count, axis length, inner; the error flag.
    ptrs: [u64; 3],
    sizes: [i64; 4],
    grid: u32,
}

// SAFETY: a context-wide function handle, used under the executable's lock.
unsafe impl Send for GatherCall {}
unsafe impl Sync for GatherCall {}

impl GatherCall {
    /// Binds `Gather { axis }` on `inputs` (dense views) writing `out`, or `None` when the views
    /// are not dense (the caller runs it on the host).
    pub fn new(gpu: &Arc<Gpu>, cache: &DiskCache, p: &Program, ptrs: &[u64], axis: usize, inputs: &[BufView], out: u64) -> Result<Option<GatherCall>> {
        let (data, idx) = (&inputs[0], &inputs[1]);
        let dt = p.buffer(data.buf).dtype;
        let it = p.buffer(idx.buf).dtype;
        if !fits(data, idx, axis, it) {
            return Ok(None);
        }
        let size = dt.size_of();
        let name = format!("kiln_gather_{size}_{}", if it == DType::I32 { "i32" } else { "i64" });
        let module = module(gpu, cache)?;
        let func = module.function(&name)?;
        let outer: usize = data.shape[..axis].iter().product();
        let inner: usize = data.shape[axis + 1..].iter().product();
        let nidx: usize = idx.shape.iter().product();
        let total = (outer * nidx * inner) as u64;
        let at = |v: &BufView, elem: usize| ptrs[v.buf.index()] + (v.offset * elem) as u64;
        Ok(Some(GatherCall {
            func,
            _module: module,
            ptrs: [at(data, size), at(idx, it.size_of()), out],
            sizes: [outer as i64, nidx as i64, data.shape[axis] as i64, inner as i64],
            grid: total.div_ceil(256).min(65535 * 8) as u32,
        }))
    }

    /// Issues the gather on kiln's stream; an out-of-range index sets `*err` to 1.
    pub fn launch(&self, gpu: &Gpu, err: u64) -> Result<()> {
        if self.grid == 0 {
            return Ok(());
        }
        let mut params: Vec<*mut c_void> = self.ptrs.iter().map(|p| p as *const u64 as *mut c_void).collect();
        params.extend(self.sizes.iter().map(|s| s as *const i64 as *mut c_void));
        params.push(&err as *const u64 as *mut c_void);
        // SAFETY: the kernel's parameters are exactly these; the addresses are live buffers of
        // the program, sized by the shapes given.
        unsafe { result::launch_kernel(self.func, (self.grid, 1, 1), (256, 1, 1), 0, gpu.cu_stream(), &mut params) }
            .map_err(|e| Error::Device(format!("launching gather: {e}")))
    }
}
