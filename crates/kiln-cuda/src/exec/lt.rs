//! A matmul step as cuBLASLt sees it: the descriptors of one (strided-batched) problem, and
//! the algorithm configurations max-autotune times for it against cuBLAS's own call
//! ([`super::matmul`]): the heuristic's proposals, then every algorithm cuBLASLt has for the
//! types with each of its tile shapes, pipeline stages, CTA swizzles and split-K factors (as
//! NVIDIA's `LtSgemmCustomFind` sample searches), each checked by `cublasLtMatmulAlgoCheck`.
//! The math is the same in all of them (f32 compute: strict fp32 for f32 operands, f32
//! accumulation for f16 / bf16); split-K sums in another order.

use super::tuning::LtAlgo;
use crate::device::Gpu;
use cudarc::cublaslt::sys;
use kiln_ir::{Error, Result};
use std::ffi::c_void;

/// Most candidate algorithms asked of the heuristic per problem.
pub const MAX_HEURISTIC: usize = 16;

/// Most candidates per problem in all (the heuristic's first).
pub const MAX_CANDIDATES: usize = 384;

/// Split-K factors tried for algorithms that support splitting the reduction.
const SPLIT_K: [u32; 6] = [2, 3, 4, 6, 8, 16];

/// Most workspace one candidate may use (what cuBLAS gets on Hopper in PyTorch).
pub const MAX_WORKSPACE: usize = 32 << 20;

fn lt(what: &str, e: impl std::fmt::Debug) -> Error {
    Error::Device(format!("cuBLASLt {what}: {e:?}"))
}

/// One stored operand in cuBLAS's column-major terms: `rows x cols`, leading dimension `ld`,
/// batch entries `stride` elements apart.
#[derive(Clone, Copy, Debug)]
pub(crate) struct LtOperand {
    pub rows: usize,
    pub cols: usize,
    pub ld: usize,
    pub stride: i64,
}

/// What cuBLASLt applies to the product before writing D.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LtEpilogue {
    None,
    /// `+ bias[row]` (a row of D in cuBLAS's column-major terms: a column of kiln's output).
    Bias,
    /// `max(0, . + bias[row])`.
    ReluBias,
}

impl LtEpilogue {
    /// `+ bias`, then a ReLU when `relu`.
    pub fn bias(relu: bool) -> LtEpilogue {
        if relu { LtEpilogue::ReluBias } else { LtEpilogue::Bias }
    }
}

/// `D = epilogue(op_a(A) op_b(B))` over `batches` entries, column-major, all of `ty`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct LtProblem {
    pub ty: sys::cudaDataType,
    pub trans_a: bool,
    pub trans_b: bool,
    pub a: LtOperand,
    pub b: LtOperand,
    pub d: LtOperand,
    pub batches: usize,
    /// The batch entries' addresses come from device arrays of pointers (A, B and D each);
    /// the operands' `stride` is then unused.
    pub pointer_array: bool,
    pub epilogue: LtEpilogue,
}

/// The descriptors of an [`LtProblem`] and the algorithm runs use.
pub(crate) struct LtGemm {
    desc: sys::cublasLtMatmulDesc_t,
    layouts: [sys::cublasLtMatrixLayout_t; 3],
    ty: sys::cudaDataType,
    /// The algorithm and the workspace bytes it needs.
    chosen: Option<(sys::cublasLtMatmulAlgo_t, usize)>,
}

// SAFETY: descriptors are plain host objects, used one call at a time under the executable's lock.
unsafe impl Send for LtGemm {}
unsafe impl Sync for LtGemm {}

fn layout(ty: sys::cudaDataType, o: &LtOperand, batches: usize, pointer_array: bool) -> Result<sys::cublasLtMatrixLayout_t> {
    let l = cudarc::cublaslt::result::create_matrix_layout(ty, o.rows as u64, o.cols as u64, o.ld as i64).map_err(|e| lt("matrix layout", e))?;
    if batches > 1 {
        let count = batches as i32;
        let mode = sys::cublasLtBatchMode_t::CUBLASLT_BATCH_MODE_POINTER_ARRAY;
        // SAFETY: a fresh layout; the values are the attributes' types (i32, i64, a u32 enum).
        let set = unsafe {
            use sys::cublasLtMatrixLayoutAttribute_t as A;
            let counted = cudarc::cublaslt::result::set_matrix_layout_attribute(l, A::CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, (&count as *const i32).cast(), 4);
            if pointer_array {
                counted.and_then(|_| cudarc::cublaslt::result::set_matrix_layout_attribute(l, A::CUBLASLT_MATRIX_LAYOUT_BATCH_MODE, (&mode as *const sys::cublasLtBatchMode_t).cast(), 4))
            } else {
                counted.and_then(|_| cudarc::cublaslt::result::set_matrix_layout_attribute(l, A::CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, (&o.stride as *const i64).cast(), 8))
            }
        };
        if let Err(e) = set {
            // SAFETY: created above, not handed out.
            let _ = unsafe { cudarc::cublaslt::result::destroy_matrix_layout(l) };
            return Err(lt("batched layout", e));
        }
    }
    Ok(l)
}

/// Asks cuBLASLt's heuristic about one small f32 product, which makes the library set itself
/// up (its first query in a process costs ~100 ms on an H200): a compile does this on another
/// thread before its first real query.
pub(crate) fn warm_up(gpu: &Gpu) -> Result<()> {
    let o = LtOperand { rows: 64, cols: 64, ld: 64, stride: 0 };
    let p = LtProblem { ty: sys::cudaDataType::CUDA_R_32F, trans_a: false, trans_b: false, a: o, b: o, d: o, batches: 1, pointer_array: false, epilogue: LtEpilogue::None };
    LtGemm::new(&p)?.best(gpu).map(|_| ())
}

impl LtGemm {
    /// Describes `p` to cuBLASLt.
    pub fn new(p: &LtProblem) -> Result<LtGemm> {
        let desc = cudarc::cublaslt::result::create_matmul_desc(sys::cublasComputeType_t::CUBLAS_COMPUTE_32F, sys::cudaDataType::CUDA_R_32F)
            .map_err(|e| lt("matmul descriptor", e))?;
        // The struct owns each descriptor as soon as it exists, so an error below frees them.
        let mut g = LtGemm { desc, layouts: [std::ptr::null_mut(); 3], ty: p.ty, chosen: None };
        for (attr, t) in [(sys::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_TRANSA, p.trans_a), (sys::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_TRANSB, p.trans_b)] {
            let op: i32 = t.into(); // CUBLAS_OP_N = 0, CUBLAS_OP_T = 1
            // SAFETY: a live descriptor; the attribute is a cublasOperation_t (an i32).
            unsafe { cudarc::cublaslt::result::set_matmul_desc_attribute(desc, attr, (&op as *const i32).cast(), 4) }.map_err(|e| lt("transpose attribute", e))?;
        }
        let epilogue = match p.epilogue {
            LtEpilogue::None => None,
            LtEpilogue::Bias => Some(sys::cublasLtEpilogue_t::CUBLASLT_EPILOGUE_BIAS),
            LtEpilogue::ReluBias => Some(sys::cublasLtEpilogue_t::CUBLASLT_EPILOGUE_RELU_BIAS),
        };
        if let Some(ep) = epilogue {
            // SAFETY: a live descriptor; the attribute is a cublasLtEpilogue_t (a u32).
            unsafe { cudarc::cublaslt::result::set_matmul_desc_attribute(desc, sys::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_EPILOGUE, (&ep as *const sys::cublasLtEpilogue_t).cast(), 4) }
                .map_err(|e| lt("epilogue attribute", e))?;
        }
        for (slot, o) in g.layouts.iter_mut().zip([&p.a, &p.b, &p.d]) {
            *slot = layout(p.ty, o, p.batches, p.pointer_array)?;
        }
        Ok(g)
    }

    /// Reads the epilogue's bias (one value of the problem's type per row of D, the same for
    /// every batch entry) from device address `bias`.
    pub fn set_bias(&mut self, bias: u64) -> Result<()> {
        // SAFETY: a live descriptor; the attribute is a device pointer (8 bytes).
        unsafe { cudarc::cublaslt::result::set_matmul_desc_attribute(self.desc, sys::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_BIAS_POINTER, (&bias as *const u64).cast(), 8) }
            .map_err(|e| lt("bias pointer", e))
    }

    /// The heuristic's best configuration, or `None` when cuBLASLt has none for the problem.
    pub fn best(&self, gpu: &Gpu) -> Result<Option<LtAlgo>> {
        Ok(self.heuristic(gpu)?.first().map(|a| LtAlgo(a.data)))
    }

    /// Workspace bytes `algo` needs for this problem, or `None` when cuBLASLt refuses it here
    /// (or it needs more than [`MAX_WORKSPACE`]).
    fn check(&self, gpu: &Gpu, algo: &sys::cublasLtMatmulAlgo_t) -> Result<Option<usize>> {
        let handle = gpu.cublaslt()?.0;
        let [a, b, d] = self.layouts;
        let mut r = std::mem::MaybeUninit::<sys::cublasLtMatmulHeuristicResult_t>::zeroed();
        // SAFETY: live descriptors; `r` is written by the call.
        let ok = unsafe { sys::cublasLtMatmulAlgoCheck(handle, self.desc, a, b, d, d, algo, r.as_mut_ptr()) }.result().is_ok();
        // SAFETY: zero-initialised, and filled in when the check passed.
        let r = unsafe { r.assume_init() };
        Ok((ok && r.state == sys::cublasStatus_t::CUBLAS_STATUS_SUCCESS && r.workspaceSize <= MAX_WORKSPACE).then_some(r.workspaceSize))
    }

    /// The configurations worth timing for this problem, at most [`MAX_CANDIDATES`]: the
    /// heuristic's proposals first, then every algorithm's tiles x stages x swizzles x
    /// split-K factors that cuBLASLt accepts for it.
    pub fn candidates(&self, gpu: &Gpu) -> Result<Vec<LtAlgo>> {
        let handle = gpu.cublaslt()?.0;
        let mut out: Vec<LtAlgo> = Vec::new();
        let push = |out: &mut Vec<LtAlgo>, a: sys::cublasLtMatmulAlgo_t| {
            let a = LtAlgo(a.data);
            if out.len() < MAX_CANDIDATES && !out.contains(&a) {
                out.push(a);
            }
        };
        for h in self.heuristic(gpu)? {
            push(&mut out, h);
        }
        let (ty, compute, scale) = (self.ty, sys::cublasComputeType_t::CUBLAS_COMPUTE_32F, sys::cudaDataType::CUDA_R_32F);
        let mut ids = vec![0i32; 128];
        let mut count = 0i32;
        // SAFETY: `ids` has room for the 128 asked for.
        if unsafe { sys::cublasLtMatmulAlgoGetIds(handle, compute, scale, ty, ty, ty, ty, ids.len() as i32, ids.as_mut_ptr(), &mut count) }.result().is_err() {
            return Ok(out);
        }
        ids.truncate(count.clamp(0, 128) as usize);
        for id in ids {
            let mut base = std::mem::MaybeUninit::<sys::cublasLtMatmulAlgo_t>::zeroed();
            // SAFETY: `base` is written by the call.
            if unsafe { sys::cublasLtMatmulAlgoInit(handle, compute, scale, ty, ty, ty, ty, id, base.as_mut_ptr()) }.result().is_err() {
                continue;
            }
            // SAFETY: initialised by the call above.
            let base = unsafe { base.assume_init() };
            let tiles = cap_list(&base, sys::cublasLtMatmulAlgoCapAttributes_t::CUBLASLT_ALGO_CAP_TILE_IDS);
            // Stages: cuBLASLt's own choice where it takes one (undefined), else the first few.
            let mut stages = cap_list(&base, sys::cublasLtMatmulAlgoCapAttributes_t::CUBLASLT_ALGO_CAP_STAGES_IDS);
            if stages.contains(&0) {
                stages = vec![0];
            }
            stages.truncate(3);
            let split = cap_u32(&base, sys::cublasLtMatmulAlgoCapAttributes_t::CUBLASLT_ALGO_CAP_SPLITK_SUPPORT) != 0;
            let schemes = cap_u32(&base, sys::cublasLtMatmulAlgoCapAttributes_t::CUBLASLT_ALGO_CAP_REDUCTION_SCHEME_MASK);
            let swizzle = cap_u32(&base, sys::cublasLtMatmulAlgoCapAttributes_t::CUBLASLT_ALGO_CAP_CTA_SWIZZLING_SUPPORT) != 0;
            // One reduction scheme is enough: they differ in where partial sums go, not in speed much.
            let scheme = [2u32, 1, 4].into_iter().find(|s| schemes & s != 0);
            let mut splits: Vec<(u32, u32)> = vec![(1, 0)];
            if let (true, Some(scheme)) = (split, scheme) {
                splits.extend(SPLIT_K.iter().map(|&k| (k, scheme)));
            }
            for &tile in tiles.iter() {
                for &stage in stages.iter() {
                    for swz in 0..=u32::from(swizzle) {
                        for &(k, scheme) in &splits {
                            let mut a = base;
                            use sys::cublasLtMatmulAlgoConfigAttributes_t as C;
                            let set = [(C::CUBLASLT_ALGO_CONFIG_TILE_ID, tile), (C::CUBLASLT_ALGO_CONFIG_STAGES_ID, stage), (C::CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, swz), (C::CUBLASLT_ALGO_CONFIG_SPLITK_NUM, k), (C::CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, scheme)]
                                .iter()
                                // SAFETY: a live algo struct; each attribute is a u32.
                                .all(|(attr, v)| unsafe { sys::cublasLtMatmulAlgoConfigSetAttribute(&mut a, *attr, (v as *const u32).cast(), 4) }.result().is_ok());
                            if set && self.check(gpu, &a)?.is_some() {
                                push(&mut out, a);
                            }
                            if out.len() >= MAX_CANDIDATES {
                                return Ok(out);
                            }
                        }
                    }
                }
            }
        }
        Ok(out)
    }

    /// The heuristic's proposals within [`MAX_WORKSPACE`], best guess first (none when it
    /// refuses the problem).
    fn heuristic(&self, gpu: &Gpu) -> Result<Vec<sys::cublasLtMatmulAlgo_t>> {
        let handle = gpu.cublaslt()?.0;
        let pref = cudarc::cublaslt::result::create_matmul_pref().map_err(|e| lt("preference", e))?;
        let ws = MAX_WORKSPACE as u64;
        let mut results: Vec<sys::cublasLtMatmulHeuristicResult_t> = Vec::with_capacity(MAX_HEURISTIC);
        let mut count = 0i32;
        let [a, b, d] = self.layouts;
        // SAFETY: live descriptors; `results` has room for the MAX_HEURISTIC results asked for.
        let asked = unsafe {
            cudarc::cublaslt::result::set_matmul_pref_attribute(pref, sys::cublasLtMatmulPreferenceAttributes_t::CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, (&ws as *const u64).cast(), 8)
                .and_then(|_| sys::cublasLtMatmulAlgoGetHeuristic(handle, self.desc, a, b, d, d, pref, MAX_HEURISTIC as i32, results.as_mut_ptr(), &mut count).result())
        };
        // SAFETY: created above, used only by the calls above.
        let _ = unsafe { cudarc::cublaslt::result::destroy_matmul_pref(pref) };
        if asked.is_err() {
            // cuBLASLt refuses some problems (NOT_SUPPORTED): cuBLAS's own call stays.
            return Ok(Vec::new());
        }
        // SAFETY: the heuristic wrote `count` results.
        unsafe { results.set_len(count.clamp(0, MAX_HEURISTIC as i32) as usize) };
        Ok(results.into_iter().filter(|r| r.state == sys::cublasStatus_t::CUBLAS_STATUS_SUCCESS && r.workspaceSize <= MAX_WORKSPACE).map(|r| r.algo).collect())
    }

    /// Runs `algo` from now on; an error when cuBLASLt refuses it for this problem (a tuning
    /// stored by another library version or for another problem).
    pub fn choose(&mut self, gpu: &Gpu, algo: LtAlgo) -> Result<()> {
        let a = sys::cublasLtMatmulAlgo_t { data: algo.0 };
        let ws = self.check(gpu, &a)?.ok_or_else(|| Error::Value("cuBLASLt refuses the stored algorithm for this matmul".into()))?;
        self.chosen = Some((a, ws));
        Ok(())
    }

    /// The algorithm runs use, once one was chosen.
    pub fn chosen(&self) -> Option<LtAlgo> {
        self.chosen.map(|(a, _)| LtAlgo(a.data))
    }

    /// Workspace bytes the chosen algorithm needs.
    pub fn workspace(&self) -> usize {
        self.chosen.map_or(0, |(_, ws)| ws)
    }

    /// `d = a b` with the chosen algorithm on kiln's stream (`a`, `b`, `d` the first batch
    /// entries' addresses, or for a pointer-array problem the addresses of the pointer arrays).
    ///
    /// # Safety
    /// The addresses must hold the problem's operands; `workspace` at least
    /// [`LtGemm::workspace`] bytes.
    pub unsafe fn run(&self, gpu: &Gpu, a: u64, b: u64, d: u64, workspace: u64) -> Result<()> {
        let handle = gpu.cublaslt()?.0;
        let (algo, ws) = self.chosen.as_ref().ok_or_else(|| Error::Device("cuBLASLt matmul run before an algorithm was chosen".into()))?;
        let (one, zero) = (1f32, 0f32);
        let [la, lb, ld] = self.layouts;
        // SAFETY: per this function's contract; beta = 0, so C (= D) is not read.
        unsafe {
            cudarc::cublaslt::result::matmul(
                handle,
                self.desc,
                (&one as *const f32).cast(),
                (&zero as *const f32).cast(),
                a as *const c_void,
                la,
                b as *const c_void,
                lb,
                d as *const c_void,
                ld,
                d as *mut c_void,
                ld,
                algo,
                workspace as *mut c_void,
                *ws,
                gpu.cu_stream() as sys::cudaStream_t,
            )
        }
        .map_err(|e| lt("matmul", e))
    }
}

/// A u32 capability of `algo` (0 when unreadable).
fn cap_u32(algo: &sys::cublasLtMatmulAlgo_t, attr: sys::cublasLtMatmulAlgoCapAttributes_t) -> u32 {
    let mut v = 0u32;
    let mut written = 0usize;
    // SAFETY: a live algo struct; `v` holds the 4 bytes asked for.
    let _ = unsafe { sys::cublasLtMatmulAlgoCapGetAttribute(algo, attr, (&mut v as *mut u32).cast(), 4, &mut written) };
    v
}

/// A list-valued capability of `algo` (tile or stage ids); `[0]` (undefined: cuBLASLt
/// chooses) when it has none.
fn cap_list(algo: &sys::cublasLtMatmulAlgo_t, attr: sys::cublasLtMatmulAlgoCapAttributes_t) -> Vec<u32> {
    let mut bytes = 0usize;
    // SAFETY: a size query (null buffer, size 0) writes only `bytes`.
    let _ = unsafe { sys::cublasLtMatmulAlgoCapGetAttribute(algo, attr, std::ptr::null_mut(), 0, &mut bytes) };
    let mut v = vec![0u32; (bytes / 4).min(256)];
    if !v.is_empty() {
        let mut written = 0usize;
        // SAFETY: `v` has room for the bytes given.
        let _ = unsafe { sys::cublasLtMatmulAlgoCapGetAttribute(algo, attr, v.as_mut_ptr().cast(), v.len() * 4, &mut written) };
    }
    if v.is_empty() { vec![0] } else { v }
}

impl Drop for LtGemm {
    fn drop(&mut self) {
        // SAFETY: descriptors this struct created and nobody else holds (null: never made).
        unsafe {
            for l in self.layouts.into_iter().filter(|l| !l.is_null()) {
                let _ = cudarc::cublaslt::result::destroy_matrix_layout(l);
            }
            let _ = cudarc::cublaslt::result::destroy_matmul_desc(self.desc);
        }
    }
}
