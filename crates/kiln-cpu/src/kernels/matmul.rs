//! Batched NumPy matmul through the `gemm` crate (floats) and a plain loop (integers).
//!
//! Also home of the two helpers the other GEMM-based kernels (conv) share: [`gemm_dense`], a
//! safe row-major `gemm` call, and the f16/bf16 <-> f32 round trip ([`to_f32`], [`from_f32`]).

use half::{bf16, f16};
use kiln_ir::{DType, Element, Error, HostTensor, Layout, Result, broadcast_fixed};
use rayon::prelude::*;
use std::ops::Range;

/// Multiply-adds below which one gemm call stays on one thread: splitting a small product
/// costs more in synchronisation than it saves.
const PAR_WORK: usize = 1 << 18;

/// Multiply-adds per matrix below which a batched matmul runs whole matrices in parallel
/// (one thread each) instead of splitting every matrix across threads.
const BATCH_PAR_WORK: usize = 1 << 21;

/// `a @ b` with NumPy semantics; `shape` is the inferred output shape.
pub fn matmul(a: &HostTensor, b: &HostTensor, shape: &[usize]) -> Result<HostTensor> {
    if a.dtype() != b.dtype() {
        return Err(Error::DType(format!("matmul: operands are {} and {}", a.dtype(), b.dtype())));
    }
    match a.dtype() {
        DType::F32 => float_matmul::<f32>(a, b, shape),
        DType::F64 => float_matmul::<f64>(a, b, shape),
        DType::F16 | DType::BF16 => {
            let out = float_matmul::<f32>(&to_f32(a)?, &to_f32(b)?, shape)?;
            from_f32(&out, a.dtype())
        }
        DType::I64 => int_matmul::<i64>(a, b, shape),
        DType::I32 => int_matmul::<i32>(a, b, shape),
        DType::I8 => int_matmul::<i8>(a, b, shape),
        DType::U8 => int_matmul::<u8>(a, b, shape),
        DType::I16 => int_matmul::<i16>(a, b, shape),
        DType::U16 => int_matmul::<u16>(a, b, shape),
        DType::U32 => int_matmul::<u32>(a, b, shape),
        DType::U64 => int_matmul::<u64>(a, b, shape),
        DType::Bool => Err(Error::DType("matmul: needs numeric operands, got bool".into())),
    }
}

/// One operand seen as a batch of matrices: the storage offset of every matrix (already
/// broadcast to the output batch) and the row/column strides inside one matrix.
struct Operand {
    offsets: Vec<usize>,
    rows: usize,
    cols: usize,
    rs: isize,
    cs: isize,
}

/// The operands and result dims of one batched matmul, with NumPy's 1-D promotion done.
struct Plan {
    a: Operand,
    b: Operand,
    m: usize,
    n: usize,
    k: usize,
}

impl Plan {
    fn new(a: &HostTensor, b: &HostTensor, shape: &[usize]) -> Result<Plan> {
        let ctx = || format!("matmul({:?} @ {:?})", a.shape(), b.shape());
        if a.layout.rank() == 0 || b.layout.rank() == 0 {
            return Err(Error::Shape(format!("{}: operands need rank >= 1", ctx())));
        }
        // NumPy: a 1-D lhs is a row vector, a 1-D rhs a column vector.
        let (ash, ast) = promote(&a.layout, true);
        let (bsh, bst) = promote(&b.layout, false);
        let (ra, rb) = (ash.len(), bsh.len());
        let (m, k, n) = (ash[ra - 2], ash[ra - 1], bsh[rb - 1]);
        if bsh[rb - 2] != k {
            return Err(Error::Shape(format!("{}: inner dims differ ({k} vs {})", ctx(), bsh[rb - 2])));
        }
        let batch = broadcast_fixed(&ash[..ra - 2], &bsh[..rb - 2], &ctx())?;
        let total = batch.iter().product::<usize>() * m * n;
        if total != shape.iter().product::<usize>() {
            return Err(Error::Shape(format!("{}: result shape {shape:?} does not fit", ctx())));
        }
        let operand = |t: &HostTensor, sh: &[usize], st: &[isize]| -> Result<Operand> {
            let r = sh.len();
            let lead =
                Layout { shape: sh[..r - 2].to_vec(), strides: st[..r - 2].to_vec(), offset: t.layout.offset };
            Ok(Operand {
                offsets: lead.broadcast_to(&batch)?.offsets(),
                rows: sh[r - 2],
                cols: sh[r - 1],
                rs: st[r - 2],
                cs: st[r - 1],
            })
        };
        Ok(Plan { a: operand(a, &ash, &ast)?, b: operand(b, &bsh, &bst)?, m, n, k })
    }

    fn batches(&self) -> usize {
        self.a.offsets.len()
    }
}

/// Shape and strides of an operand with a 1-D operand promoted to a matrix.
fn promote(l: &Layout, lhs: bool) -> (Vec<usize>, Vec<isize>) {
    if l.rank() != 1 {
        return (l.shape.clone(), l.strides.clone());
    }
    if lhs {
        (vec![1, l.shape[0]], vec![0, l.strides[0]])
    } else {
        (vec![l.shape[0], 1], vec![l.strides[0], 0])
    }
}

/// True when the last two dims can go to `gemm` as they are: a unit stride along rows or
/// columns (a size-1 dim's stride does not matter). Anything else is copied first, because
/// `gemm`'s fast paths need one unit stride.
fn gemm_friendly(l: &Layout) -> bool {
    let r = l.rank();
    if r < 2 {
        return true;
    }
    let unit = |d: usize| l.shape[d] <= 1 || l.strides[d] == 1;
    unit(r - 1) || unit(r - 2)
}

/// Checks that every element `t`'s layout can reach lies inside its storage, so that the raw
/// pointer arithmetic handed to `gemm` stays in bounds even for hand-built layouts.
fn check_in_bounds(t: &HostTensor) -> Result<()> {
    let l = &t.layout;
    if l.numel() == 0 {
        return Ok(());
    }
    let (mut lo, mut hi) = (l.offset as isize, l.offset as isize);
    for (&d, &s) in l.shape.iter().zip(&l.strides) {
        let span = (d as isize - 1) * s;
        if span < 0 { lo += span } else { hi += span }
    }
    if lo < 0 || hi as usize >= t.storage.len() {
        return Err(Error::Value(format!(
            "matmul: layout {:?}/{:?}+{} reaches outside its storage of {} elements",
            l.shape,
            l.strides,
            l.offset,
            t.storage.len()
        )));
    }
    Ok(())
}

/// A float operand as `gemm` wants it: copied when no stride is unit, bounds checked.
fn prepare<T: Element>(t: &HostTensor) -> Result<HostTensor> {
    let t = if gemm_friendly(&t.layout) { t.clone() } else { t.contiguous() };
    check_in_bounds(&t)?;
    if T::slice(&t.storage).is_none() {
        return Err(Error::DType(format!("matmul: expected {} data, got {}", T::DTYPE, t.dtype())));
    }
    Ok(t)
}

fn float_matmul<T: Element>(a: &HostTensor, b: &HostTensor, shape: &[usize]) -> Result<HostTensor> {
    let (a, b) = (prepare::<T>(a)?, prepare::<T>(b)?);
    let p = Plan::new(&a, &b, shape)?;
    let (sa, sb) = (T::slice(&a.storage).unwrap_or(&[]), T::slice(&b.storage).unwrap_or(&[]));
    let mut out = vec![T::zero(); p.batches() * p.m * p.n];
    // K = 0 (and empty results) leave the zeros: nothing to multiply.
    if out.is_empty() || p.k == 0 {
        return HostTensor::from_vec(out, shape);
    }
    let work = p.m * p.n * p.k;
    let run = |i: usize, dst: &mut [T], par: bool| {
        let (oa, ob) = (p.a.offsets[i], p.b.offsets[i]);
        // SAFETY: `check_in_bounds` proved every element the layouts reach is inside the
        // storages; the matrices below are sub-views of those layouts, and `dst` is m*n long.
        unsafe {
            raw_gemm(
                p.m,
                p.n,
                p.k,
                dst.as_mut_ptr(),
                p.n as isize,
                1,
                false,
                sa.as_ptr().add(oa),
                p.a.rs,
                p.a.cs,
                sb.as_ptr().add(ob),
                p.b.rs,
                p.b.cs,
                par,
            )
        }
    };
    debug_assert_eq!((p.a.rows, p.a.cols, p.b.rows, p.b.cols), (p.m, p.k, p.k, p.n));
    let chunk = p.m * p.n;
    if p.batches() > 1 && work < BATCH_PAR_WORK {
        out.par_chunks_mut(chunk).enumerate().for_each(|(i, dst)| run(i, dst, false));
    } else {
        for (i, dst) in out.chunks_mut(chunk).enumerate() {
            run(i, dst, work >= PAR_WORK);
        }
    }
    HostTensor::from_vec(out, shape)
}

/// `dst[m, n] (row stride dst_rs, col stride dst_cs) = lhs[m, k] @ rhs[k, n]`, plus the old
/// `dst` when `accumulate`; with `parallel`, split into one block per rayon thread.
///
/// # Safety
/// Every element the strides reach from the three pointers must be inside live allocations,
/// and `dst` must not overlap `lhs` or `rhs`. `T` must be f32 or f64.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn raw_gemm<T: Element>(
    m: usize,
    n: usize,
    k: usize,
    dst: *mut T,
    dst_rs: isize,
    dst_cs: isize,
    accumulate: bool,
    lhs: *const T,
    lhs_rs: isize,
    lhs_cs: isize,
    rhs: *const T,
    rhs_rs: isize,
    rhs_cs: isize,
    parallel: bool,
) {
    let threads = rayon::current_num_threads();
    if !parallel || threads < 2 {
        // gemm computes dst = alpha * dst + beta * lhs @ rhs (alpha only read when read_dst).
        unsafe {
            gemm::gemm(
                m, n, k, dst, dst_cs, dst_rs, accumulate, lhs, lhs_cs, lhs_rs, rhs, rhs_cs, rhs_rs,
                T::one(), T::one(), false, false, false, gemm::Parallelism::None,
            )
        };
        return;
    }
    // Split the larger output dim into one block per thread, each a single-threaded gemm:
    // gemm's own threading stalls when its inner dim is small (conv's [O, OH*OW] outputs).
    let (along_n, len) = if n >= m { (true, n) } else { (false, m) };
    let block = len.div_ceil(threads).next_multiple_of(16);
    let (dst, lhs, rhs) = (SendPtr(dst), SendPtr(lhs as *mut T), SendPtr(rhs as *mut T));
    rayon::scope(|s| {
        for start in (0..len).step_by(block) {
            let (dst, lhs, rhs) = (&dst, &lhs, &rhs);
            s.spawn(move |_| {
                let size = block.min(len - start);
                let st = start as isize;
                // SAFETY: each block is a disjoint set of dst rows/columns inside the caller's
                // bounds; lhs/rhs are only read.
                unsafe {
                    let (mm, nn, d, l, r) = if along_n {
                        (m, size, dst.0.offset(st * dst_cs), lhs.0, rhs.0.offset(st * rhs_cs))
                    } else {
                        (size, n, dst.0.offset(st * dst_rs), lhs.0.offset(st * lhs_rs), rhs.0)
                    };
                    gemm::gemm(
                        mm, nn, k, d, dst_cs, dst_rs, accumulate, l as *const T, lhs_cs, lhs_rs,
                        r as *const T, rhs_cs, rhs_rs, T::one(), T::one(), false, false, false,
                        gemm::Parallelism::None,
                    )
                }
            });
        }
    });
}

/// A raw pointer that may cross to another rayon task; users guarantee disjoint writes.
struct SendPtr<T>(*mut T);
// SAFETY: only used by `raw_gemm`, whose blocks write disjoint parts of dst and only read
// lhs/rhs, all inside the caller-checked bounds.
unsafe impl<T> Send for SendPtr<T> {}
unsafe impl<T> Sync for SendPtr<T> {}

/// Row-major dense `dst[m, n] (+)= lhs[m, k] @ rhs[k, n]` for f32/f64, threaded inside when
/// the product is large. The slices may be longer than needed; shorter is an error.
pub(crate) fn gemm_dense<T: Element>(
    m: usize,
    n: usize,
    k: usize,
    dst: &mut [T],
    lhs: &[T],
    rhs: &[T],
    accumulate: bool,
) -> Result<()> {
    if !matches!(T::DTYPE, DType::F32 | DType::F64) {
        return Err(Error::DType(format!("gemm: {} is not a gemm dtype (f32/f64)", T::DTYPE)));
    }
    if dst.len() < m * n || lhs.len() < m * k || rhs.len() < k * n {
        return Err(Error::Shape(format!(
            "gemm: buffers of {}, {}, {} elements are too small for [{m}, {k}] @ [{k}, {n}]",
            dst.len(),
            lhs.len(),
            rhs.len()
        )));
    }
    if m == 0 || n == 0 {
        return Ok(());
    }
    if k == 0 {
        if !accumulate {
            dst[..m * n].fill(T::zero());
        }
        return Ok(());
    }
    let par = m * n * k >= PAR_WORK;
    // SAFETY: the lengths were checked above; the borrow rules keep dst apart from lhs/rhs.
    unsafe {
        raw_gemm(
            m, n, k, dst.as_mut_ptr(), n as isize, 1, accumulate, lhs.as_ptr(), k as isize, 1,
            rhs.as_ptr(), n as isize, 1, par,
        )
    };
    Ok(())
}

/// `dst[m, n] (+)= lhs[m, k] @ rhs[k, n]` (row-major, f32/f64) without ever holding all of
/// `rhs`: `tiles` are disjoint, ascending column ranges of `dst`, and `fill(cols, buf)`
/// writes the `[k, cols.len()]` block of `rhs` for one of them into `buf`. Tiles run in
/// parallel, each as a single-threaded gemm whose rhs block is still in cache (conv's im2col).
#[allow(clippy::too_many_arguments)] // BLAS-style: sizes, buffers, tiling, epilogue
pub(crate) fn gemm_column_tiles<T: Element>(
    m: usize,
    n: usize,
    k: usize,
    dst: &mut [T],
    lhs: &[T],
    tiles: &[Range<usize>],
    accumulate: bool,
    fill: impl Fn(Range<usize>, &mut [T]) + Sync,
) -> Result<()> {
    if !matches!(T::DTYPE, DType::F32 | DType::F64) {
        return Err(Error::DType(format!("gemm: {} is not a gemm dtype (f32/f64)", T::DTYPE)));
    }
    let ordered = tiles.windows(2).all(|w| w[0].end <= w[1].start);
    if dst.len() < m * n || lhs.len() < m * k || !ordered || tiles.iter().any(|t| t.start > t.end || t.end > n) {
        return Err(Error::Shape(format!(
            "gemm: tiles {tiles:?} / buffers {}, {} do not fit [{m}, {k}] @ [{k}, {n}]",
            dst.len(),
            lhs.len()
        )));
    }
    if m == 0 || k == 0 {
        // an empty sum: the tiles' columns become zero (or keep their values)
        for row in dst[..m * n].chunks_mut(n.max(1)).filter(|_| !accumulate) {
            tiles.iter().for_each(|t| row[t.clone()].fill(T::zero()));
        }
        return Ok(());
    }
    let out = SendPtr(dst.as_mut_ptr());
    tiles.par_iter().for_each_init(Vec::new, |buf, cols| {
        let w = cols.len();
        buf.resize(k * w, T::zero());
        fill(cols.clone(), &mut buf[..k * w]);
        let out = &out;
        // SAFETY: the tiles are disjoint column ranges inside dst (checked above), so every
        // task writes its own elements; lhs and buf are long enough for [m, k] and [k, w].
        unsafe {
            raw_gemm(
                m, w, k, out.0.add(cols.start), n as isize, 1, accumulate, lhs.as_ptr(), k as isize, 1,
                buf.as_ptr(), w as isize, 1, false,
            )
        }
    });
    Ok(())
}

/// An f16/bf16 tensor widened to a dense f32 tensor of the same shape (exact), so the f32
/// kernels serve the half types too.
pub(crate) fn to_f32(t: &HostTensor) -> Result<HostTensor> {
    let v: Vec<f32> = match t.dtype() {
        DType::F16 => t.to_vec::<f16>()?.into_iter().map(f16::to_f32).collect(),
        DType::BF16 => t.to_vec::<bf16>()?.into_iter().map(bf16::to_f32).collect(),
        DType::F32 => t.to_vec::<f32>()?,
        d => return Err(Error::DType(format!("to_f32: expected a float tensor, got {d}"))),
    };
    HostTensor::from_vec(v, t.shape())
}

/// A dense f32 tensor rounded (to nearest even) to `dtype` (f16, bf16 or f32).
pub(crate) fn from_f32(t: &HostTensor, dtype: DType) -> Result<HostTensor> {
    let v = t.to_vec::<f32>()?;
    match dtype {
        DType::F16 => HostTensor::from_vec(v.into_iter().map(f16::from_f32).collect::<Vec<_>>(), t.shape()),
        DType::BF16 => HostTensor::from_vec(v.into_iter().map(bf16::from_f32).collect::<Vec<_>>(), t.shape()),
        DType::F32 => HostTensor::from_vec(v, t.shape()),
        d => Err(Error::DType(format!("from_f32: cannot narrow to {d}"))),
    }
}

/// Integer element types with the wrapping arithmetic integer matmul uses (as PyTorch and
/// NumPy: overflow wraps, it is not an error).
trait WrapInt: Element {
    fn wrapping_mul_add(self, a: Self, b: Self) -> Self;
}

macro_rules! wrap_int {
    ($($t:ty),*) => {$(
        impl WrapInt for $t {
            #[inline]
            fn wrapping_mul_add(self, a: Self, b: Self) -> Self {
                self.wrapping_add(a.wrapping_mul(b))
            }
        }
    )*};
}
wrap_int!(i64, i32, i16, i8, u64, u32, u16, u8);

fn int_matmul<T: WrapInt>(a: &HostTensor, b: &HostTensor, shape: &[usize]) -> Result<HostTensor> {
    check_in_bounds(a)?;
    check_in_bounds(b)?;
    let p = Plan::new(a, b, shape)?;
    let dtype_err = || Error::DType(format!("matmul: expected {} data", T::DTYPE));
    let sa = T::slice(&a.storage).ok_or_else(dtype_err)?;
    let sb = T::slice(&b.storage).ok_or_else(dtype_err)?;
    let (m, n, k) = (p.m, p.n, p.k);
    let mut out = vec![T::zero(); p.batches() * m * n];
    if out.is_empty() {
        return HostTensor::from_vec(out, shape);
    }
    let at = |base: usize, i: usize, j: usize, rs: isize, cs: isize| {
        (base as isize + i as isize * rs + j as isize * cs) as usize
    };
    // i-k-j order: the innermost loop walks a row of b and a row of the result.
    out.par_chunks_mut(m * n).enumerate().for_each(|(bi, dst)| {
        let (oa, ob) = (p.a.offsets[bi], p.b.offsets[bi]);
        for i in 0..m {
            let row = &mut dst[i * n..(i + 1) * n];
            for kk in 0..k {
                let av = sa[at(oa, i, kk, p.a.rs, p.a.cs)];
                for (j, r) in row.iter_mut().enumerate() {
                    *r = r.wrapping_mul_add(av, sb[at(ob, kk, j, p.b.rs, p.b.cs)]);
                }
            }
        }
    });
    HostTensor::from_vec(out, shape)
}
