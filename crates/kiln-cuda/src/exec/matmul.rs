//! MatMul through cuBLAS: f32 in strict fp32 (`sgemm` under `CUBLAS_DEFAULT_MATH`: no TF32, as
//! PyTorch's default for matmuls); f16 / bf16 through the `GemmEx` calls with f32 accumulation
//! (`CUBLAS_COMPUTE_32F`), as PyTorch. kiln's row-major `C[M,N] = A[M,K] B[K,N]` is cuBLAS's column-major
//! `Cᵀ = Bᵀ Aᵀ`; each operand is passed as it is stored (row- or column-major through its
//! strides), so transposed views need no copy.

use super::lt::{LtEpilogue, LtGemm, LtOperand, LtProblem};
use super::tuning::LtAlgo;
use crate::device::{DeviceBuffer, Gpu};
use cudarc::cublaslt::sys as lt_sys;
use std::sync::Arc;
use cudarc::cublas::{result, sys};
use kiln_ir::{DType, Error, Result};
use std::ffi::c_void;
use kiln_sched::BufView;

/// How one operand is stored: `trans` when column-major, and its leading dimension.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Operand {
    col_major: bool,
    ld: usize,
}

/// A `rows x cols` matrix with strides `(sr, sc)` as cuBLAS can read it, if it can.
fn operand(rows: usize, cols: usize, sr: usize, sc: usize) -> Option<Operand> {
    if sc == 1 || cols <= 1 {
        let ld = if rows <= 1 { cols.max(1) } else { sr };
        (ld >= cols.max(1)).then_some(Operand { col_major: false, ld })
    } else if sr == 1 || rows <= 1 {
        let ld = if cols <= 1 { rows.max(1) } else { sc };
        (ld >= rows.max(1)).then_some(Operand { col_major: true, ld })
    } else {
        None
    }
}

/// Element offsets of each batch entry of `v` (batch dims = all but the last two), for the
/// output's batch dims `batch` (broadcast from the left, as numpy).
pub(crate) fn batch_offsets(v: &BufView, batch: &[usize]) -> Vec<usize> {
    let r = v.shape.len() - 2;
    let pad = batch.len() - r;
    let mut offs = vec![v.offset];
    for (i, &n) in batch.iter().enumerate() {
        let (dim, stride) = if i < pad { (1, 0) } else { (v.shape[i - pad], v.strides[i - pad]) };
        let step = if dim == 1 { 0 } else { stride };
        offs = offs.iter().flat_map(|&o| (0..n).map(move |j| o + j * step)).collect();
    }
    offs
}

/// The single stride between consecutive entries, when there is one.
fn uniform(offs: &[usize]) -> Option<i64> {
    let d = offs.get(1).map_or(0, |&o| o as i64 - offs[0] as i64);
    offs.windows(2).all(|w| w[1] as i64 - w[0] as i64 == d).then_some(d)
}

/// How a plan issues its batch entries (one entry: `Strided`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Batching {
    /// One strided-batched call: each operand's entries lie one stride (in elements) apart.
    Strided { sa: i64, sb: i64 },
    /// One batched call over device arrays of A, B and C pointers (set by [`MatmulPlan::bind`]).
    Pointers,
    /// One call per entry: more entries than cuBLAS's 32-bit batch count.
    Loop,
}

/// A matmul step's shapes and per-batch offsets, fixed when the executable is built.
pub(crate) struct MatmulPlan {
    m: usize,
    n: usize,
    k: usize,
    a: Operand,
    b: Operand,
    a_offs: Vec<usize>,
    b_offs: Vec<usize>,
    /// Bytes per element of the operands and the output.
    elem: usize,
    /// The cuBLAS type of 16-bit operands (the `GemmEx` calls); `None` for f32 (`sgemm`).
    half: Option<sys::cudaDataType>,
    batching: Batching,
    /// Batches whose offsets are not one stride apart: the device arrays of A, B and C
    /// pointers `cublasSgemmBatched` reads (set by [`MatmulPlan::bind`]).
    pointers: Option<DeviceBuffer>,
    /// The problem in cuBLASLt's terms and its candidate algorithms, made when max-autotune
    /// (or a stored tuning) first asks for them.
    lt: Option<LtGemm>,
    /// Runs go through `lt`'s chosen algorithm rather than cuBLAS's own call.
    use_lt: bool,
    /// What cuBLASLt applies after the product ([`MatmulPlan::fuse_epilogue`]); anything but
    /// `None` runs through cuBLASLt always.
    epilogue: LtEpilogue,
}

impl MatmulPlan {
    /// Plans `a [.., M, K] @ b [.., K, N] -> out [.., M, N]` (dense, all of `dtype`), or `None`
    /// when an operand's strides are not a matrix cuBLAS reads or `dtype` is not f32 / f16 /
    /// bf16 (the caller runs the step on the host).
    pub fn new(inputs: &[BufView], out_shape: &[usize], dtype: DType) -> Result<Option<MatmulPlan>> {
        let half = match dtype {
            DType::F32 => None,
            DType::F16 => Some(sys::cudaDataType::CUDA_R_16F),
            DType::BF16 => Some(sys::cudaDataType::CUDA_R_16BF),
            _ => return Ok(None),
        };
        let (a, b) = (&inputs[0], &inputs[1]);
        if a.shape.len() < 2 || b.shape.len() < 2 || out_shape.len() < 2 {
            return Err(Error::Graph(format!("matmul extern on ranks {} and {}", a.shape.len(), b.shape.len())));
        }
        let (ra, rb) = (a.shape.len(), b.shape.len());
        let (m, k, n) = (a.shape[ra - 2], a.shape[ra - 1], b.shape[rb - 1]);
        let batch = &out_shape[..out_shape.len() - 2];
        let big = [m, n, k].iter().any(|&d| d >= i32::MAX as usize);
        let (Some(ao), Some(bo)) = (
            operand(m, k, a.strides[ra - 2], a.strides[ra - 1]),
            operand(k, n, b.strides[rb - 2], b.strides[rb - 1]),
        ) else {
            return Ok(None);
        };
        if big || ao.ld >= i32::MAX as usize || bo.ld >= i32::MAX as usize {
            return Ok(None);
        }
        let (mut a_offs, mut b_offs) = (batch_offsets(a, batch), batch_offsets(b, batch));
        // One B for every batch entry (a weight) and row-major A entries stored one after
        // another: the entries stacked as rows are one product of batches x M rows, which
        // cuBLAS tiles over the whole GPU (bert-base's [8,128,768] x [768,3072] is one
        // 1024-row GEMM, not eight of 128 rows).
        let mut m = m;
        let rows = m * a_offs.len();
        if a_offs.len() > 1 && !ao.col_major && uniform(&b_offs) == Some(0) && uniform(&a_offs) == Some((m * ao.ld) as i64) && rows < i32::MAX as usize {
            m = rows;
            a_offs.truncate(1);
            b_offs.truncate(1);
        }
        let batching = match (uniform(&a_offs), uniform(&b_offs)) {
            _ if a_offs.len() > i32::MAX as usize => Batching::Loop,
            (Some(sa), Some(sb)) => Batching::Strided { sa, sb },
            _ => Batching::Pointers,
        };
        Ok(Some(MatmulPlan { m, n, k, a: ao, b: bo, a_offs, b_offs, elem: dtype.size_of(), half, batching, pointers: None, lt: None, use_lt: false, epilogue: LtEpilogue::None }))
    }

    /// How the batch entries are issued.
    pub fn batching(&self) -> Batching {
        self.batching
    }

    /// Batch entries (1 for a plain matrix product).
    pub fn batches(&self) -> usize {
        self.a_offs.len()
    }

    /// Fixes the buffers' addresses: a batch without one stride per operand gets its pointer
    /// arrays uploaded once, so each run is one batched call rather than a call per entry.
    pub fn bind(&mut self, gpu: &Arc<Gpu>, a: u64, b: u64, c: u64) -> Result<()> {
        if self.batching != Batching::Pointers {
            return Ok(());
        }
        let n = self.a_offs.len();
        let mut ptrs: Vec<u64> = Vec::with_capacity(3 * n);
        ptrs.extend(self.a_offs.iter().map(|&o| self.at(a, o)));
        ptrs.extend(self.b_offs.iter().map(|&o| self.at(b, o)));
        ptrs.extend((0..n).map(|i| self.at(c, i * self.m * self.n)));
        let bytes: Vec<u8> = ptrs.iter().flat_map(|p| p.to_le_bytes()).collect();
        let buf = gpu.alloc(bytes.len())?;
        gpu.write(buf.ptr(), &bytes)?;
        self.pointers = Some(buf);
        Ok(())
    }

    /// The problem as cuBLASLt describes it (the column-major `Cᵀ = Bᵀ Aᵀ` of [`MatmulPlan::run`]),
    /// when it is one strided batch or one batch over pointer arrays.
    fn lt_problem(&self) -> Option<LtProblem> {
        let (sa, sb, pointer_array) = match self.batching {
            Batching::Strided { sa, sb } => (sa, sb, false),
            Batching::Pointers => (0, 0, true),
            Batching::Loop => return None,
        };
        let ty = match self.half {
            None => lt_sys::cudaDataType::CUDA_R_32F,
            Some(sys::cudaDataType::CUDA_R_16F) => lt_sys::cudaDataType::CUDA_R_16F,
            Some(_) => lt_sys::cudaDataType::CUDA_R_16BF,
        };
        // A stored `rows x cols` operand read transposed when column-major.
        let stored = |o: Operand, rows: usize, cols: usize, stride: i64| {
            let (rows, cols) = if o.col_major { (cols, rows) } else { (rows, cols) };
            // cuBLAS's column-major view of kiln's row-major storage swaps rows and columns.
            LtOperand { rows: cols, cols: rows, ld: o.ld, stride }
        };
        Some(LtProblem {
            ty,
            trans_a: self.b.col_major,
            trans_b: self.a.col_major,
            a: stored(self.b, self.k, self.n, sb),
            b: stored(self.a, self.m, self.k, sa),
            d: LtOperand { rows: self.n, cols: self.m, ld: self.n, stride: (self.m * self.n) as i64 },
            batches: self.a_offs.len(),
            pointer_array,
            epilogue: self.epilogue,
        })
    }

    /// This step in cuBLASLt's terms, made on first use; `None` when cuBLASLt cannot take it
    /// (a batch issued call by call, a layout it refuses).
    fn lt(&mut self) -> Option<&mut LtGemm> {
        if self.lt.is_none() {
            let p = self.lt_problem()?;
            match LtGemm::new(&p) {
                Ok(g) => self.lt = Some(g),
                Err(e) => tracing::debug!(target: "kiln::cuda", "matmul [{}x{}]x[{}x{}]: {e}; cuBLAS's own call only", self.m, self.k, self.k, self.n),
            }
        }
        self.lt.as_mut()
    }

    /// What identifies this step's problem for cuBLASLt (steps with equal keys have the same
    /// best configuration); `None` when cuBLASLt cannot take it.
    pub fn lt_key(&self) -> Option<String> {
        self.lt_problem().map(|p| format!("{p:?}"))
    }

    /// cuBLASLt configurations max-autotune may time for this step (none when cuBLASLt cannot
    /// take it).
    pub fn lt_candidates(&mut self, gpu: &Gpu) -> Result<Vec<LtAlgo>> {
        match self.lt() {
            Some(g) => g.candidates(gpu),
            None => Ok(Vec::new()),
        }
    }

    /// Whether cuBLASLt has an algorithm for this matmul with the epilogue `+ bias` (then
    /// `relu`): what [`super::fusion`] asks before folding an epilogue into the GEMM.
    pub fn lt_accepts_epilogue(mut self, gpu: &Gpu, relu: bool) -> bool {
        self.epilogue = LtEpilogue::bias(relu);
        self.lt().is_some_and(|g| matches!(g.best(gpu), Ok(Some(_))))
    }

    /// From now on, runs through cuBLASLt adding the bias at device address `bias` (one value
    /// per output column) to the product, then (`relu`) applying a ReLU, with the heuristic's
    /// best algorithm; an error when cuBLASLt has none.
    pub fn fuse_epilogue(&mut self, gpu: &Gpu, relu: bool, bias: u64) -> Result<()> {
        self.epilogue = LtEpilogue::bias(relu);
        self.lt = None;
        let (m, k, n) = (self.m, self.k, self.n);
        let g = self.lt().ok_or_else(|| Error::Device(format!("cuBLASLt cannot run the matmul [{m}x{k}]x[{k}x{n}] with a bias epilogue")))?;
        g.set_bias(bias)?;
        self.set_lt(gpu, None)
    }

    /// Runs cuBLASLt's `algo` from now on, or (`None`) the built-in choice: cuBLAS's own call,
    /// or for a fused epilogue the cuBLASLt heuristic's best; an error when cuBLASLt refuses
    /// `algo` for this step.
    pub fn set_lt(&mut self, gpu: &Gpu, algo: Option<LtAlgo>) -> Result<()> {
        self.use_lt = false;
        let algo = match (algo, self.epilogue) {
            (None, LtEpilogue::Bias | LtEpilogue::ReluBias) => {
                let (m, k, n) = (self.m, self.k, self.n);
                let g = self.lt().ok_or_else(|| Error::Device(format!("cuBLASLt cannot run the fused matmul [{m}x{k}]x[{k}x{n}]")))?;
                Some(g.best(gpu)?.ok_or_else(|| Error::Device(format!("cuBLASLt has no algorithm for the fused matmul [{m}x{k}]x[{k}x{n}]")))?)
            }
            (a, _) => a,
        };
        if let Some(a) = algo {
            let (m, k, n) = (self.m, self.k, self.n);
            let g = self.lt().ok_or_else(|| Error::Value(format!("cuBLASLt cannot run the matmul [{m}x{k}]x[{k}x{n}]")))?;
            g.choose(gpu, a)?;
            self.use_lt = true;
        }
        Ok(())
    }

    /// The cuBLASLt configuration runs use, when it is not cuBLAS's own call.
    pub fn lt_algo(&self) -> Option<LtAlgo> {
        self.lt.as_ref().filter(|_| self.use_lt).and_then(LtGemm::chosen)
    }

    /// `cuBLAS` or `cuBLASLt +bias+relu` — what `kiln bench --profile` prints for this call.
    pub fn describe(&self) -> &'static str {
        match (self.epilogue, self.use_lt) {
            (LtEpilogue::Bias, _) => "cuBLASLt +bias",
            (LtEpilogue::ReluBias, _) => "cuBLASLt +bias+relu",
            (LtEpilogue::None, true) => "cuBLASLt",
            (LtEpilogue::None, false) => "cuBLAS",
        }
    }

    /// Workspace bytes a run needs from the executable (cuBLAS's own call has its own).
    pub fn workspace(&self) -> usize {
        self.lt.as_ref().filter(|_| self.use_lt).map_or(0, LtGemm::workspace)
    }

    /// The address of element `off` of the buffer at `base`.
    fn at(&self, base: u64, off: usize) -> u64 {
        base + (self.elem * off) as u64
    }

    /// Runs the matmul on kiln's stream: `a`, `b` are the operands' buffer addresses (the
    /// views' offsets are applied here), `c` the dense output.
    ///
    /// # Safety
    /// The addresses must hold the buffers this plan was made for; `workspace` at least
    /// [`MatmulPlan::workspace`] bytes.
    pub unsafe fn run(&self, gpu: &Gpu, a: u64, b: u64, c: u64, workspace: u64) -> Result<()> {
        let batches = self.a_offs.len();
        if self.m == 0 || self.n == 0 || batches == 0 {
            return Ok(());
        }
        if let Some(lt) = self.lt.as_ref().filter(|_| self.use_lt) {
            let (lb, la, ld) = match self.batching {
                Batching::Pointers => {
                    let p = self.pointers.as_ref().map(DeviceBuffer::ptr).ok_or_else(|| Error::Device("batched matmul run before its pointers were bound".into()))?;
                    let arr = |i: usize| p + (8 * i * batches) as u64;
                    (arr(1), arr(0), arr(2))
                }
                _ => (self.at(b, self.b_offs[0]), self.at(a, self.a_offs[0]), c),
            };
            // SAFETY: per this function's contract; the problem is this plan's (its pointer
            // arrays hold `batches` addresses into this plan's buffers).
            return unsafe { lt.run(gpu, lb, la, ld, workspace) };
        }
        let h = gpu.cublas()?.0;
        let op = |o: Operand| if o.col_major { sys::cublasOperation_t::CUBLAS_OP_T } else { sys::cublasOperation_t::CUBLAS_OP_N };
        let (one, zero) = (1f32, 0f32);
        let (m, n, k) = (self.m as i32, self.n as i32, self.k as i32);
        let addr = |base: u64, off: usize| self.at(base, off) as *const f32;
        let call = if self.half.is_some() { "GemmEx" } else { "sgemm" };
        let err = |e| Error::Device(format!("cuBLAS {call} [{}x{}]x[{}x{}]: {e:?}", self.m, self.k, self.k, self.n));
        let (ob, oa, ldb, lda) = (op(self.b), op(self.a), self.b.ld as i32, self.a.ld as i32);
        let (alpha, beta) = ((&one as *const f32).cast::<c_void>(), (&zero as *const f32).cast::<c_void>());
        let (compute, algo) = (sys::cublasComputeType_t::CUBLAS_COMPUTE_32F, sys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT);
        // Column-major: C^T (N x M) = B^T (N x K) * A^T (K x M).
        match self.batching {
            Batching::Strided { sa, sb } => unsafe {
                let (pb, pa, stride_c) = (addr(b, self.b_offs[0]), addr(a, self.a_offs[0]), (self.m * self.n) as i64);
                // SAFETY: per this function's contract.
                match self.half {
                    None => result::sgemm_strided_batched(h, ob, oa, n, m, k, &one, pb, ldb, sb, pa, lda, sa, &zero, c as *mut f32, n, stride_c, batches as i32).map_err(err),
                    Some(t) => sys::cublasGemmStridedBatchedEx(
                        h, ob, oa, n, m, k, alpha, pb.cast(), t, ldb, sb, pa.cast(), t, lda, sa, beta, c as *mut c_void, t, n, stride_c, batches as i32, compute, algo,
                    )
                    .result()
                    .map_err(err),
                }
            },
            Batching::Pointers => {
                let p = self.pointers.as_ref().map(DeviceBuffer::ptr).ok_or_else(|| Error::Device("batched matmul run before its pointers were bound".into()))?;
                let arr = |i: usize| (p + (8 * i * batches) as u64) as *const *const c_void;
                // SAFETY: the arrays hold `batches` pointers each into this plan's buffers.
                unsafe {
                    match self.half {
                        None => sys::cublasSgemmBatched(h, ob, oa, n, m, k, &one, arr(1).cast(), ldb, arr(0).cast(), lda, &zero, arr(2) as *const *mut f32, n, batches as i32),
                        Some(t) => sys::cublasGemmBatchedEx(h, ob, oa, n, m, k, alpha, arr(1), t, ldb, arr(0), t, lda, beta, arr(2) as *const *mut c_void, t, n, batches as i32, compute, algo),
                    }
                    .result()
                    .map_err(err)
                }
            }
            Batching::Loop => {
                for i in 0..batches {
                    let (pb, pa, pc) = (addr(b, self.b_offs[i]), addr(a, self.a_offs[i]), self.at(c, i * self.m * self.n));
                    // SAFETY: per this function's contract.
                    unsafe {
                        match self.half {
                            None => result::sgemm(h, ob, oa, n, m, k, &one, pb, ldb, pa, lda, &zero, pc as *mut f32, n).map_err(err)?,
                            Some(t) => sys::cublasGemmEx(h, ob, oa, n, m, k, alpha, pb.cast(), t, ldb, pa.cast(), t, lda, beta, pc as *mut c_void, t, n, compute, algo)
                                .result()
                                .map_err(err)?,
                        }
                    }
                }
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kiln_sched::BufId;

    #[test]
    fn operands_are_read_row_or_column_major_through_their_strides() {
        assert_eq!(operand(3, 4, 4, 1), Some(Operand { col_major: false, ld: 4 }));
        assert_eq!(operand(3, 4, 1, 3), Some(Operand { col_major: true, ld: 3 }));
        assert_eq!(operand(3, 4, 8, 1), Some(Operand { col_major: false, ld: 8 }));
        assert_eq!(operand(1, 4, 0, 1), Some(Operand { col_major: false, ld: 4 }));
        assert_eq!(operand(3, 1, 1, 0), Some(Operand { col_major: false, ld: 1 }));
        assert_eq!(operand(3, 1, 5, 0), Some(Operand { col_major: false, ld: 5 }));
        assert_eq!(operand(3, 4, 8, 2), None);
        assert_eq!(operand(3, 4, 2, 1), None, "rows overlap: ld below cols");
    }

    #[test]
    fn a_shared_weight_over_stacked_rows_is_one_gemm() {
        let view = |shape: Vec<usize>, strides: Vec<usize>| BufView { buf: BufId(0), offset: 0, shape, strides };
        // [8,128,768] x [768,3072]: one GEMM of 1024 rows.
        let p = MatmulPlan::new(&[view(vec![8, 128, 768], vec![128 * 768, 768, 1]), view(vec![768, 3072], vec![3072, 1])], &[8, 128, 3072], DType::F32).unwrap().unwrap();
        assert_eq!((p.m, p.batches(), p.batching()), (1024, 1, Batching::Strided { sa: 0, sb: 0 }));
        // Entries not stored one after another (a slice of a longer batch stride) stay batched.
        let p = MatmulPlan::new(&[view(vec![8, 128, 768], vec![256 * 768, 768, 1]), view(vec![768, 3072], vec![3072, 1])], &[8, 128, 3072], DType::F32).unwrap().unwrap();
        assert_eq!((p.m, p.batches()), (128, 8));
        // A batched B (attention's K) stays batched too.
        let p = MatmulPlan::new(&[view(vec![8, 128, 64], vec![128 * 64, 64, 1]), view(vec![8, 64, 128], vec![64 * 128, 128, 1])], &[8, 128, 128], DType::F32).unwrap().unwrap();
        assert_eq!((p.m, p.batches()), (128, 8));
        // A column-major A (a transposed view) cannot stack its rows.
        let p = MatmulPlan::new(&[view(vec![2, 4, 3], vec![12, 1, 4]), view(vec![3, 5], vec![5, 1])], &[2, 4, 5], DType::F32).unwrap().unwrap();
        assert_eq!((p.m, p.batches()), (4, 2));
    }

    #[test]
    fn batch_offsets_broadcast_from_the_left() {
        let v = BufView { buf: BufId(0), offset: 5, shape: vec![2, 3, 4], strides: vec![12, 4, 1] };
        assert_eq!(batch_offsets(&v, &[3, 2]), vec![5, 17, 5, 17, 5, 17]);
        assert_eq!(uniform(&batch_offsets(&v, &[2])), Some(12));
        assert_eq!(uniform(&batch_offsets(&v, &[3, 2])), None);
        let w = BufView { buf: BufId(0), offset: 0, shape: vec![3, 4], strides: vec![4, 1] };
        assert_eq!(batch_offsets(&w, &[6]), vec![0; 6]);
        assert_eq!(uniform(&[0; 6]), Some(0));
    }
}
