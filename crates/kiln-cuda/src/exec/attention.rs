//! `Op::Attention` (`softmax(q kᵀ * scale + mask [+ causal]) v`) as one handwritten kernel:
//! the scores never reach memory. The optimiser keeps the composite whole for this backend
//! ([`runs_composite`]); the scheduler leaves it to an eval step, which [`AttentionPlan`] takes
//! when its views fit.
//!
//! One block of 128 threads takes 32 query rows of one batch entry. Keys and values pass
//! through shared memory 64 keys at a time as f32; each thread computes a 4 x 4 block of the
//! tile's scores, the rows' online softmax (running max, rescaled sums) and a 4 x 4 block of the
//! output from the tile's probabilities (see [`KERNEL`]). Everything is computed in f32 from the
//! stored values (16-bit types too, rounded once on the store), as the decomposition computes
//! it; only the order of the sums differs. A row whose every score is -inf (all masked) gives
//! NaN, as the decomposition's softmax does.

use super::matmul::batch_offsets;
use crate::device::{DeviceBuffer, Gpu};
use crate::module::Module;
use cudarc::driver::{result, sys};
use kiln_ir::{DType, Error, Op, Result, TensorType};
use kiln_sched::{BufView, DiskCache};
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::{Arc, Mutex};

/// Largest head dim (of q/k and of v) the kernel keeps in registers.
pub const MAX_HEAD_DIM: usize = 64;

/// Query rows per block, keys per shared-memory tile.
const ROWS: usize = 32;
const TILE: usize = 64;

/// Query rows each thread takes, and lanes that share a row (each taking `64 / KL` keys of a
/// tile and output columns): blocks of `KL * 32 / RPT` = 128 threads. On the H200 (bert-base and
/// gpt2 bs8, one call each, `benches/results/h200-2026-11-30-attention-shapes.jsonl`) 4 x 16
/// beat 2 x 8 by 0.8% of bert-base's f32 forward and 3.5% of its bf16 one, and 2 x 16 and
/// 8 x 16 by more: 4 x 16 reads 8 floats of shared memory per 64 multiply-adds with few
/// registers (4 x 4 scores and outputs a thread).
const RPT: usize = 4;
const KL: usize = 16;

/// Whether this backend runs `op` on inputs of types `tys` as one op (the optimiser then keeps
/// it whole): attention over f32 / f16 / bf16 of fixed shapes whose head dims are 1 to
/// [`MAX_HEAD_DIM`] and which has at least one key and one query.
/// `KILN_CUDA_ATTENTION=0` turns the kernel off (attention is then decomposed into cuBLAS
/// GEMMs and generated softmax kernels).
pub fn runs_composite(op: &Op, tys: &[&TensorType]) -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let on = *ON.get_or_init(|| std::env::var("KILN_CUDA_ATTENTION").map_or(true, |v| v != "0"));
    let Op::Attention { .. } = op else { return false };
    if !on {
        return false;
    }
    let Some(shapes) = tys.iter().map(|t| t.shape.as_fixed()).collect::<Option<Vec<_>>>() else {
        return false;
    };
    let dtype = tys.first().map(|t| t.dtype);
    let one_float = matches!(dtype, Some(DType::F32 | DType::F16 | DType::BF16)) && tys.iter().all(|t| Some(t.dtype) == dtype);
    one_float && (3..=4).contains(&tys.len()) && fits(&shapes[0], &shapes[1], &shapes[2], shapes.get(3).map(|s| s.len()))
}

/// The shape conditions of [`runs_composite`] on q, k, v (and the mask's rank).
fn fits(q: &[usize], k: &[usize], v: &[usize], mask_rank: Option<usize>) -> bool {
    let (Some(&[lq, d]), Some(&[lk, dk]), Some(&[lv, dv])) = (q.last_chunk::<2>(), k.last_chunk::<2>(), v.last_chunk::<2>()) else {
        return false;
    };
    let heads = |x: usize| (1..=MAX_HEAD_DIM).contains(&x);
    heads(d) && heads(dv) && dk == d && lv == lk && lq >= 1 && lk >= 1 && mask_rank.is_none_or(|r| r >= 2)
}

/// An attention step's kernel source and the element offsets of each batch entry of q, k, v,
/// the mask and the output, worked out from the views alone (no GPU), so `kiln explain` shows what runs.
#[derive(Clone, Debug, PartialEq)]
pub struct AttentionPlan {
    /// The CUDA C (kiln's prelude, then the kernel with every size and stride written in).
    pub source: String,
    /// Batch entries (blocks along y).
    pub batches: usize,
    /// Blocks along x: query rows / 32.
    row_blocks: usize,
    /// q, k, v, mask and output offsets, `batches` each (the mask's are zero without one).
    offsets: Vec<i64>,
}

/// The kernel's one name (each source holds one kernel).
const NAME: &str = "kiln_attention";

impl AttentionPlan {
    /// Plans `Attention { causal, scale }` on `inputs` (q, k, v, optional mask, each a strided
    /// view) writing `out_shape` of `dtype`, or `None` when the shapes do not fit the kernel
    /// (the caller runs it on the host).
    ///
    /// `out_strides`: the element strides the result is written with, one per dim of
    /// `out_shape` ([`kiln_sched::write_through`]); `None`: dense.
    pub fn new(causal: bool, scale: Option<f64>, inputs: &[BufView], out_shape: &[usize], dtype: DType, out_strides: Option<&[usize]>) -> Option<AttentionPlan> {
        let (q, k, v, mask) = (inputs.first()?, inputs.get(1)?, inputs.get(2)?, inputs.get(3));
        if !matches!(dtype, DType::F32 | DType::F16 | DType::BF16) || !fits(&q.shape, &k.shape, &v.shape, mask.map(|m| m.shape.len())) || out_shape.len() < 2 {
            return None;
        }
        let r = out_shape.len();
        let (lq, lk, d, dv) = (q.shape[q.shape.len() - 2], k.shape[k.shape.len() - 2], q.shape[q.shape.len() - 1], v.shape[v.shape.len() - 1]);
        if out_shape[r - 2..] != [lq, dv] {
            return None;
        }
        let batch = &out_shape[..r - 2];
        let batches: usize = batch.iter().product();
        // Views narrower than the output broadcast from the left (as batch_offsets reads them).
        if [q, k, v].into_iter().chain(mask).any(|x| x.shape.len() - 2 > batch.len()) || batches == 0 || batches > 65535 {
            return None;
        }
        let mut offsets = Vec::with_capacity(5 * batches);
        for x in [q, k, v] {
            offsets.extend(batch_offsets(x, batch).iter().map(|&o| o as i64));
        }
        match mask {
            Some(m) => offsets.extend(batch_offsets(m, batch).iter().map(|&o| o as i64)),
            None => offsets.extend(std::iter::repeat_n(0, batches)),
        }
        let dense: Vec<usize> = (0..r).map(|d| out_shape[d + 1..].iter().product()).collect();
        let out = BufView { buf: kiln_sched::BufId(0), offset: 0, shape: out_shape.to_vec(), strides: out_strides.filter(|s| s.len() == r).map_or(dense, <[usize]>::to_vec) };
        offsets.extend(batch_offsets(&out, batch).iter().map(|&o| o as i64));
        // Row and column strides; a dim of size 1 (a broadcast mask) reads stride 0.
        let rc = |x: &BufView| {
            let n = x.shape.len();
            let s = |i: usize| if x.shape[i] == 1 { 0 } else { x.strides[i] };
            (s(n - 2), s(n - 1))
        };
        let scale = scale.unwrap_or(1.0 / (d as f64).sqrt()) as f32;
        // k and v rows load 4 values at a time when each row starts 4-aligned (buffers are
        // 64-byte aligned) and its values are adjacent.
        let by4 = |x: &BufView, n: usize, offs: &[i64]| {
            let r = x.shape.len();
            let adjacent = x.shape[r - 1] == 1 || x.strides[r - 1] == 1;
            let rows_aligned = x.shape[r - 2] == 1 || x.strides[r - 2].is_multiple_of(4);
            n.is_multiple_of(4) && adjacent && rows_aligned && offs.iter().all(|o| o % 4 == 0)
        };
        let vec = by4(k, d, &offsets[batches..2 * batches]) && by4(v, dv, &offsets[2 * batches..3 * batches]);
        // The output is stored four columns at a time under the same conditions.
        let out_vec = by4(&out, dv, &offsets[4 * batches..]);
        let (o_rs, o_cs) = rc(&out);
        let (storage, load, store) = match dtype {
            DType::F32 => ("float", "(x)", "(x)"),
            DType::F16 => ("uint16_t", "kc_h2f(x)", "kc_f2h(x)"),
            _ => ("uint16_t", "kc_bf2f(x)", "kc_f2bf(x)"),
        };
        let ((q_rs, q_cs), (k_rs, k_cs), (v_rs, v_cs)) = (rc(q), rc(k), rc(v));
        let (m_rs, m_cs) = mask.map_or((0, 0), rc);
        let source = format!(
            "{prelude}\n\
             typedef {storage} T;\n\
             #define LOAD(x) {load}\n#define STORE(x) {store}\n\
             #define LQ {lq}\n#define LK {lk}\n#define D {d}\n#define DV {dv}\n#define BATCHES {batches}\n\
             #define Q_RS {q_rs}LL\n#define Q_CS {q_cs}LL\n#define K_RS {k_rs}LL\n#define K_CS {k_cs}LL\n\
             #define V_RS {v_rs}LL\n#define V_CS {v_cs}LL\n#define M_RS {m_rs}LL\n#define M_CS {m_cs}LL\n\
             #define O_RS {o_rs}LL\n#define O_CS {o_cs}LL\n#define OUT_VEC {out_vec}\n\
             #define SCALE __int_as_float({scale_bits:#010x})\n#define CAUSAL {causal}\n#define MASK {has_mask}\n\
             #define ROWS {ROWS}\n#define RPT {rpt}\n#define KL {kl}\n#define TILE {TILE}\n#define VEC {vec}\n#define F32 {f32}\n\
             {KERNEL}",
            prelude = kiln_cpu::codegen::PRELUDE,
            scale_bits = scale.to_bits(),
            causal = causal as u8,
            has_mask = mask.is_some() as u8,
            vec = vec as u8,
            out_vec = out_vec as u8,
            rpt = RPT,
            kl = KL,
            f32 = (dtype == DType::F32) as u8,
        );
        Some(AttentionPlan { source, batches, row_blocks: lq.div_ceil(ROWS), offsets })
    }
}

/// The kernel; the source's `#define`s above it fix its shapes. A block of `KL * ROWS / RPT`
/// threads takes 32 query rows; thread `KL * rg + kg` owns rows `rg + RG * i` (i < RPT) and,
/// per 64-key tile, keys `kg + KL * c` of the scores (c < 64 / KL) and the output columns
/// `4kg + 4KL * h..+4` (v's head dim is padded to 64). Each thread computes an RPT x NK block of
/// scores and an RPT x NC block of outputs from float4 reads of shared memory (the first version,
/// one row a thread, read one float4 per 4 multiply-adds and took longer than the
/// decomposition). A row's KL lanes are adjacent: its max and sum combine with shuffles.
/// `D4`: the head dim rounded up to float4s (q and k padded with zeros); rows of shared memory
/// get 4 more floats so that lanes reading consecutive rows hit different banks.
const KERNEL: &str = r#"
#define RG (ROWS / RPT)
#define NT (KL * RG)
#define NK (TILE / KL)
#define NC (64 / KL)
#define NH (NC / 4)
#define D4 ((D + 3) / 4 * 4)
#define DP (D4 + 4)
#define DVP 68
#define PP 72
#define KS_FLOATS (TILE * DP > ROWS * PP ? TILE * DP : ROWS * PP)
/* 16 bytes from global to shared memory without passing through registers; zeros unless `in`. */
static __device__ __forceinline__ void cp_async16(float* dst, const void* src, bool in) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" :: "r"(s), "l"(src), "r"(in ? 16 : 0) : "memory");
}
extern "C" __global__ void __launch_bounds__(NT) kiln_attention(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
        const T* __restrict__ mask, T* __restrict__ out, const long long* __restrict__ offs) {
    __shared__ __align__(16) float qs[ROWS * DP];
    /* k's tile, then (once the scores are made) the tile's probabilities P [ROWS][PP] */
    __shared__ __align__(16) float ks[KS_FLOATS];
    __shared__ __align__(16) float vs[TILE * DVP];
    const int tid = threadIdx.x, kg = tid % KL, rg = tid / KL;
    const int b = blockIdx.y, r0 = blockIdx.x * ROWS;
    const long long qo = offs[b], ko = offs[BATCHES + b], vo = offs[2 * BATCHES + b], mo = offs[3 * BATCHES + b];
    /* v's padding columns (DV..64) stay zero: the tiles only write columns below DV. */
    for (int e = tid; e < TILE * DVP; e += NT) vs[e] = 0.0f;
#pragma unroll 8
    for (int e = tid; e < ROWS * D4; e += NT) {
        const int r = e / D4, d = e % D4;
        qs[r * DP + d] = (r0 + r < LQ && d < D) ? LOAD(q[qo + (r0 + r) * Q_RS + d * Q_CS]) : 0.0f;
    }
    float o[RPT][NC], m[RPT], l[RPT];
#pragma unroll
    for (int i = 0; i < RPT; i++) {
        m[i] = -INFINITY;
        l[i] = 0.0f;
#pragma unroll
        for (int c = 0; c < NC; c++) o[i][c] = 0.0f;
    }
    /* Keys past the block's last row are masked for every row of it (causal): skip their tiles. */
    int kend = LK;
    if (CAUSAL) {
        const int last = min(r0 + ROWS - 1, LQ - 1) + (LK - LQ);
        kend = max(0, min(LK, last + 1));
    }
    for (int j0 = 0; j0 < kend; j0 += TILE) {
        __syncthreads();
        /* Every load of the tile in flight at once. */
#if VEC && F32
#pragma unroll
        for (int e = tid; e < TILE * D / 4; e += NT) {
            const int j = e / (D / 4), d = e % (D / 4) * 4;
            const bool in = j0 + j < LK;
            cp_async16(&ks[j * DP + d], in ? k + ko + (j0 + j) * K_RS + d : k, in);
        }
#pragma unroll
        for (int e = tid; e < TILE * DV / 4; e += NT) {
            const int j = e / (DV / 4), d = e % (DV / 4) * 4;
            const bool in = j0 + j < LK;
            cp_async16(&vs[j * DVP + d], in ? v + vo + (j0 + j) * V_RS + d : v, in);
        }
        asm volatile("cp.async.wait_all;\n" ::: "memory");
#elif VEC
#pragma unroll
        for (int e = tid; e < TILE * D / 4; e += NT) {
            const int j = e / (D / 4), d = e % (D / 4) * 4;
            const uint2 u = j0 + j < LK ? *(const uint2*)(k + ko + (j0 + j) * K_RS + d) : make_uint2(0u, 0u);
            *(float4*)&ks[j * DP + d] = make_float4(LOAD((T)(u.x & 0xffffu)), LOAD((T)(u.x >> 16)), LOAD((T)(u.y & 0xffffu)), LOAD((T)(u.y >> 16)));
        }
#pragma unroll
        for (int e = tid; e < TILE * DV / 4; e += NT) {
            const int j = e / (DV / 4), d = e % (DV / 4) * 4;
            const uint2 u = j0 + j < LK ? *(const uint2*)(v + vo + (j0 + j) * V_RS + d) : make_uint2(0u, 0u);
            *(float4*)&vs[j * DVP + d] = make_float4(LOAD((T)(u.x & 0xffffu)), LOAD((T)(u.x >> 16)), LOAD((T)(u.y & 0xffffu)), LOAD((T)(u.y >> 16)));
        }
#else
        /* k's padding columns are rewritten with zeros: P used them in the last tile. */
#pragma unroll 8
        for (int e = tid; e < TILE * D4; e += NT) {
            const int j = e / D4, d = e % D4;
            ks[j * DP + d] = (j0 + j < LK && d < D) ? LOAD(k[ko + (j0 + j) * K_RS + d * K_CS]) : 0.0f;
        }
#pragma unroll 8
        for (int e = tid; e < TILE * DV; e += NT) {
            const int j = e / DV, d = e % DV;
            vs[j * DVP + d] = j0 + j < LK ? LOAD(v[vo + (j0 + j) * V_RS + d * V_CS]) : 0.0f;
        }
#endif
        __syncthreads();
        float s[RPT][NK];
#pragma unroll
        for (int i = 0; i < RPT; i++)
#pragma unroll
            for (int c = 0; c < NK; c++) s[i][c] = 0.0f;
#pragma unroll
        for (int d = 0; d < D4; d += 4) {
            float4 qv[RPT], kv[NK];
#pragma unroll
            for (int i = 0; i < RPT; i++) qv[i] = *(const float4*)&qs[(rg + RG * i) * DP + d];
#pragma unroll
            for (int c = 0; c < NK; c++) kv[c] = *(const float4*)&ks[(kg + KL * c) * DP + d];
#pragma unroll
            for (int i = 0; i < RPT; i++)
#pragma unroll
                for (int c = 0; c < NK; c++) {
                    s[i][c] = fmaf(qv[i].x, kv[c].x, s[i][c]);
                    s[i][c] = fmaf(qv[i].y, kv[c].y, s[i][c]);
                    s[i][c] = fmaf(qv[i].z, kv[c].z, s[i][c]);
                    s[i][c] = fmaf(qv[i].w, kv[c].w, s[i][c]);
                }
        }
#pragma unroll
        for (int i = 0; i < RPT; i++) {
            const int row = r0 + rg + RG * i;
            float mc = -INFINITY;
#pragma unroll
            for (int c = 0; c < NK; c++) {
                const int j = j0 + kg + KL * c;
                float x = s[i][c] * SCALE;
                if (MASK && row < LQ && j < LK) x = x + LOAD(mask[mo + row * M_RS + j * M_CS]);
                if (j >= LK || (CAUSAL && j > row + (LK - LQ))) x = -INFINITY;
                s[i][c] = x;
                mc = kc_maxf(mc, x);
            }
#pragma unroll
            for (int off = 1; off < KL; off <<= 1) mc = kc_maxf(mc, __shfl_xor_sync(0xffffffffu, mc, off));
            const float mn = kc_maxf(m[i], mc);
            /* With every score so far -inf, exp(-inf - 0) keeps the sums at 0 (not NaN). */
            const float ms = mn == -INFINITY ? 0.0f : mn;
            const float alpha = expf(m[i] - ms);
            float sum = 0.0f;
#pragma unroll
            for (int c = 0; c < NK; c++) {
                s[i][c] = expf(s[i][c] - ms);
                sum += s[i][c];
            }
#pragma unroll
            for (int off = 1; off < KL; off <<= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
            l[i] = l[i] * alpha + sum;
#pragma unroll
            for (int c = 0; c < NC; c++) o[i][c] *= alpha;
            m[i] = mn;
        }
        __syncthreads(); /* every lane is done reading k's tile: P takes its place */
#pragma unroll
        for (int i = 0; i < RPT; i++)
#pragma unroll
            for (int c = 0; c < NK; c++) ks[(rg + RG * i) * PP + kg + KL * c] = s[i][c];
        __syncthreads();
#pragma unroll 2
        for (int j = 0; j < TILE; j += 4) {
            float4 pv[RPT];
#pragma unroll
            for (int i = 0; i < RPT; i++) pv[i] = *(const float4*)&ks[(rg + RG * i) * PP + j];
#pragma unroll
            for (int u = 0; u < 4; u++) {
                float4 vv[NH];
#pragma unroll
                for (int h = 0; h < NH; h++) vv[h] = *(const float4*)&vs[(j + u) * DVP + 4 * kg + 4 * KL * h];
#pragma unroll
                for (int i = 0; i < RPT; i++) {
                    const float p = u == 0 ? pv[i].x : u == 1 ? pv[i].y : u == 2 ? pv[i].z : pv[i].w;
#pragma unroll
                    for (int h = 0; h < NH; h++) {
                        o[i][4 * h] = fmaf(p, vv[h].x, o[i][4 * h]);
                        o[i][4 * h + 1] = fmaf(p, vv[h].y, o[i][4 * h + 1]);
                        o[i][4 * h + 2] = fmaf(p, vv[h].z, o[i][4 * h + 2]);
                        o[i][4 * h + 3] = fmaf(p, vv[h].w, o[i][4 * h + 3]);
                    }
                }
            }
        }
    }
#pragma unroll
    for (int i = 0; i < RPT; i++) {
        const int row = r0 + rg + RG * i;
        if (row >= LQ) continue;
        T* dst = out + offs[4 * BATCHES + b] + row * O_RS;
#if OUT_VEC
        /* Four adjacent columns a store (a row starts 16-byte aligned for f32, 8 for 16-bit). */
#pragma unroll
        for (int h = 0; h < NH; h++) {
            const int col = 4 * kg + 4 * KL * h;
            if (col >= DV) continue;
            const float* x = &o[i][4 * h];
#if F32
            *(float4*)&dst[col] = make_float4(x[0] / l[i], x[1] / l[i], x[2] / l[i], x[3] / l[i]);
#else
            *(uint2*)&dst[col] = make_uint2((unsigned)STORE(x[0] / l[i]) | ((unsigned)STORE(x[1] / l[i]) << 16),
                                            (unsigned)STORE(x[2] / l[i]) | ((unsigned)STORE(x[3] / l[i]) << 16));
#endif
        }
#else
#pragma unroll
        for (int c = 0; c < NC; c++) {
            const int col = 4 * kg + 4 * KL * (c / 4) + c % 4;
            if (col < DV) dst[col * O_CS] = STORE(o[i][c] / l[i]);
        }
#endif
    }
}
"#;

/// Loaded attention kernels by source (steps of one shape share one).
fn module(gpu: &Arc<Gpu>, cache: &DiskCache, source: &str) -> Result<Arc<Module>> {
    static MODULES: Mutex<Option<HashMap<String, Arc<Module>>>> = Mutex::new(None);
    let mut all = MODULES.lock().unwrap_or_else(|p| p.into_inner());
    let all = all.get_or_insert_with(HashMap::new);
    if let Some(m) = all.get(source) {
        return Ok(m.clone());
    }
    // The generated kernels' options, but multiply-adds may contract here (the kernel's dot
    // products call fmaf themselves, as cuBLAS's GEMMs in the decomposition do).
    let options: Vec<&str> = crate::codegen::NVRTC_OPTIONS.iter().copied().filter(|o| *o != "--fmad=false").collect();
    let (cubin, _) = crate::nvrtc::cached_cubin(cache, source, gpu.sm(), &options)?;
    let loaded = Arc::new(Module::load(gpu, &cubin, &[NAME])?);
    all.insert(source.to_string(), loaded.clone());
    Ok(loaded)
}

/// An attention step bound to its buffers.
pub(crate) struct AttentionCall {
    func: sys::CUfunction,
    _module: Arc<Module>,
    /// q, k, v, mask, out addresses (the views' offsets are in `offsets`), then `offsets`'s.
    ptrs: [u64; 6],
    _offsets: DeviceBuffer,
    grid: (u32, u32),
    threads: u32,
}

// SAFETY: a context-wide function handle, used under the executable's lock.
unsafe impl Send for AttentionCall {}
unsafe impl Sync for AttentionCall {}

impl AttentionCall {
    /// Compiles (through the disk cache) and binds `plan` to the buffers at `ptrs`: `inputs`'
    /// buffers and the dense output at `out`.
    pub fn new(gpu: &Arc<Gpu>, cache: &DiskCache, plan: &AttentionPlan, inputs: &[BufView], ptrs: &[u64], out: u64) -> Result<AttentionCall> {
        let module = module(gpu, cache, &plan.source)?;
        let func = module.function(NAME)?;
        let bytes: Vec<u8> = plan.offsets.iter().flat_map(|o| o.to_le_bytes()).collect();
        let offsets = gpu.alloc(bytes.len())?;
        gpu.write(offsets.ptr(), &bytes)?;
        let base = |i: usize| inputs.get(i).map_or(0, |v| ptrs[v.buf.index()]);
        let grid = (u32::try_from(plan.row_blocks).map_err(|_| Error::Value(format!("attention over {} query rows", plan.row_blocks * ROWS)))?, plan.batches as u32);
        Ok(AttentionCall { func, _module: module, ptrs: [base(0), base(1), base(2), base(3), out, offsets.ptr()], _offsets: offsets, grid, threads: (KL * ROWS / RPT) as u32 })
    }

    /// Issues the kernel on kiln's stream.
    pub fn launch(&self, gpu: &Gpu) -> Result<()> {
        let mut params: Vec<*mut c_void> = self.ptrs.iter().map(|p| p as *const u64 as *mut c_void).collect();
        // SAFETY: the kernel takes exactly these six pointers; the offsets address elements of
        // the views the plan was made for, which live in these buffers.
        unsafe { result::launch_kernel(self.func, (self.grid.0, self.grid.1, 1), (self.threads, 1, 1), 0, gpu.cu_stream(), &mut params) }
            .map_err(|e| Error::Device(format!("launching attention: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kiln_ir::Shape;
    use kiln_sched::BufId;

    fn view(shape: &[usize], strides: &[usize], offset: usize) -> BufView {
        BufView { buf: BufId(0), offset, shape: shape.to_vec(), strides: strides.to_vec() }
    }

    #[test]
    fn the_backend_keeps_attention_whose_head_dims_fit() {
        let ty = |s: &[usize], dtype| TensorType { dtype, shape: Shape::fixed(s) };
        let op = Op::Attention { causal: false, scale: None };
        let (q, kv) = (ty(&[2, 4, 8, 64], DType::F32), ty(&[2, 4, 16, 64], DType::F32));
        assert!(runs_composite(&op, &[&q, &kv, &kv]));
        let wide = ty(&[2, 4, 16, 65], DType::F32);
        assert!(!runs_composite(&op, &[&q, &kv, &wide]), "v's head dim past 64");
        let half = ty(&[2, 4, 16, 64], DType::BF16);
        assert!(!runs_composite(&op, &[&q, &kv, &half]), "mixed dtypes");
        let ints = ty(&[2, 4, 8, 64], DType::I32);
        assert!(!runs_composite(&op, &[&ints, &ints, &ints]));
        let no_keys = ty(&[2, 4, 0, 64], DType::F32);
        assert!(!runs_composite(&op, &[&q, &no_keys, &no_keys]));
        assert!(!runs_composite(&Op::Softmax { axis: 1 }, &[&q]));
        let mask1 = ty(&[16], DType::F32);
        assert!(!runs_composite(&op, &[&q, &kv, &kv, &mask1]), "a rank-1 mask");
    }

    #[test]
    fn plans_read_strided_heads_and_broadcast_masks() {
        // bert's q: heads of a [2, 8, 3*4*16] projection, [b, h, s, d] strides [8*192, 16, 192, 1].
        let q = view(&[2, 4, 8, 16], &[8 * 192, 16, 192, 1], 0);
        let k = view(&[2, 4, 8, 16], &[8 * 192, 16, 192, 1], 64);
        let v = view(&[2, 4, 8, 16], &[8 * 192, 16, 192, 1], 128);
        let mask = view(&[2, 1, 1, 8], &[8, 8, 8, 1], 0);
        let p = AttentionPlan::new(false, None, &[q, k, v, mask], &[2, 4, 8, 16], DType::F32, None).unwrap();
        assert_eq!((p.batches, p.row_blocks), (8, 1));
        let (qo, ko, mo) = (&p.offsets[0..8], &p.offsets[8..16], &p.offsets[24..32]);
        assert_eq!(qo, &[0, 16, 32, 48, 1536, 1552, 1568, 1584]);
        assert_eq!(ko[1], 64 + 16);
        assert_eq!(mo, &[0, 0, 0, 0, 8, 8, 8, 8], "the mask broadcasts over heads");
        assert!(p.source.contains("#define Q_RS 192LL") && p.source.contains("#define M_RS 0LL"), "a broadcast mask row reads stride 0");
        assert!(p.source.contains("#define VEC 1"), "rows of 16 adjacent values at 4-aligned offsets load by 4");
        let odd = AttentionPlan::new(false, None, &[view(&[8, 16], &[16, 1], 0), view(&[8, 16], &[16, 1], 2), view(&[8, 16], &[16, 1], 0)], &[8, 16], DType::F32, None).unwrap();
        assert!(odd.source.contains("#define VEC 0"), "k starts 2 values past an aligned address");
        // Written into the merge of its heads, [b, s, h * d]: offsets b * 8 * 64 + h * 16, rows by 64.
        let q = view(&[2, 4, 8, 16], &[512, 128, 16, 1], 0);
        let merged = AttentionPlan::new(false, None, &[q.clone(), q.clone(), q], &[2, 4, 8, 16], DType::F32, Some(&[512, 16, 64, 1])).unwrap();
        assert_eq!(&merged.offsets[32..40], &[0, 16, 32, 48, 512, 528, 544, 560]);
        assert!(merged.source.contains("#define O_RS 64LL") && merged.source.contains("#define OUT_VEC 1"));
        // 1/sqrt(16) = 0.25.
        assert!(p.source.contains(&format!("{:#010x}", 0.25f32.to_bits())));
        let out_mismatch = AttentionPlan::new(false, None, &[view(&[8, 16], &[16, 1], 0), view(&[8, 16], &[16, 1], 0), view(&[8, 16], &[16, 1], 0)], &[8, 17], DType::F32, None);
        assert!(out_mismatch.is_none());
        assert!(AttentionPlan::new(true, Some(0.5), &[view(&[40, 16], &[16, 1], 0), view(&[8, 16], &[16, 1], 0), view(&[8, 16], &[16, 1], 0)], &[40, 16], DType::BF16, None).is_some_and(|p| p.row_blocks == 2 && p.batches == 1));
    }
}
