//! Reductions over axes and arg-max/arg-min.
//!
//! The input's dims split into kept dims (which index the dense output) and reduced dims;
//! each group is coalesced. Then one of three loops runs:
//! - *column*: the innermost kept run is contiguous in the input (reducing a leading or
//!   middle axis): whole input rows are folded into a block of accumulators, a vector loop;
//! - *row*: otherwise, each output folds its reduced elements; when the innermost reduced run
//!   is contiguous (softmax-like rows, full reductions) that is a multi-lane vector loop;
//! - few outputs with much work each are folded in parallel pieces and merged.
//!
//! Floats fold in vector lanes of f32 (f64 for f64) over blocks of [`FLUSH`] elements, and
//! the blocks' partial results are merged in f64, so f32/f16/bf16 sums stay accurate and round
//! once at the end; integers accumulate in i64 (u64 in u64) with wrapping, which equals
//! wrapping in the narrow type modulo 2^bits: integer sum and prod wrap as the type does, and
//! integer mean is the wrapped sum divided by the count, truncated.

use super::elementwise::iter::{PAR_MIN, at, coalesce, elements, par_chunks};
use kiln_ir::half::{bf16, f16};
use kiln_ir::{ArgReduceOp, DType, Element, Error, HostTensor, Layout, Op, ReduceOp, Result};
use rayon::prelude::*;

/// Reduces `axes` of `x`; `shape` is the inferred output shape.
pub fn reduce(op: ReduceOp, x: &HostTensor, axes: &[usize], keep_dims: bool, shape: &[usize]) -> Result<HostTensor> {
    let name = Op::Reduce { op, axes: axes.to_vec(), keep_dims }.name();
    if let Some(&a) = axes.iter().find(|&&a| a >= x.layout.rank()) {
        return Err(Error::Shape(format!("{name}: axis {a} is out of range for shape {:?}", x.shape())));
    }
    if axes.is_empty() {
        // Reducing nothing is the identity (also for mean: each element is its own mean).
        return match x.dtype() {
            DType::Bool => Err(Error::DType(format!("{name}: needs a numeric input, got bool {:?}", x.shape()))),
            _ => super::cast::cast(x, x.dtype()),
        };
    }
    match x.dtype() {
        DType::F32 => reduce_t::<f32>(op, x, axes, shape, &name),
        DType::F64 => reduce_t::<f64>(op, x, axes, shape, &name),
        DType::F16 => reduce_t::<f16>(op, x, axes, shape, &name),
        DType::BF16 => reduce_t::<bf16>(op, x, axes, shape, &name),
        DType::I64 => reduce_t::<i64>(op, x, axes, shape, &name),
        DType::I32 => reduce_t::<i32>(op, x, axes, shape, &name),
        DType::I8 => reduce_t::<i8>(op, x, axes, shape, &name),
        DType::U8 => reduce_t::<u8>(op, x, axes, shape, &name),
        DType::I16 => reduce_t::<i16>(op, x, axes, shape, &name),
        DType::U16 => reduce_t::<u16>(op, x, axes, shape, &name),
        DType::U32 => reduce_t::<u32>(op, x, axes, shape, &name),
        DType::U64 => reduce_t::<u64>(op, x, axes, shape, &name),
        DType::Bool => Err(Error::DType(format!("{name}: needs a numeric input, got bool {:?}", x.shape()))),
    }
}

/// Index (i64) of the extreme along `axis`; `shape` is the inferred output shape.
pub fn arg_reduce(op: ArgReduceOp, x: &HostTensor, axis: usize, select_last: bool, shape: &[usize]) -> Result<HostTensor> {
    let name = format!("{op:?}").to_lowercase();
    if axis >= x.layout.rank() {
        return Err(Error::Shape(format!("{name}: axis {axis} is out of range for shape {:?}", x.shape())));
    }
    let is_max = op == ArgReduceOp::ArgMax;
    match x.dtype() {
        DType::F32 => arg_t::<f32>(x, axis, is_max, select_last, shape, &name),
        DType::F64 => arg_t::<f64>(x, axis, is_max, select_last, shape, &name),
        DType::F16 => arg_t::<f16>(x, axis, is_max, select_last, shape, &name),
        DType::BF16 => arg_t::<bf16>(x, axis, is_max, select_last, shape, &name),
        DType::I64 => arg_t::<i64>(x, axis, is_max, select_last, shape, &name),
        DType::I32 => arg_t::<i32>(x, axis, is_max, select_last, shape, &name),
        DType::I8 => arg_t::<i8>(x, axis, is_max, select_last, shape, &name),
        DType::U8 => arg_t::<u8>(x, axis, is_max, select_last, shape, &name),
        DType::I16 => arg_t::<i16>(x, axis, is_max, select_last, shape, &name),
        DType::U16 => arg_t::<u16>(x, axis, is_max, select_last, shape, &name),
        DType::U32 => arg_t::<u32>(x, axis, is_max, select_last, shape, &name),
        DType::U64 => arg_t::<u64>(x, axis, is_max, select_last, shape, &name),
        DType::Bool => Err(Error::DType(format!("{name}: needs a numeric input, got bool {:?}", x.shape()))),
    }
}

/// Independent accumulators per run, so the compiler keeps them in vector lanes.
const LANES: usize = 16;
/// Elements (or, in the column loop, rows) folded in the fast lane type before the partial
/// result is merged into the wide accumulator: short enough that f32 partial sums stay
/// accurate, long enough that the merge costs nothing.
const FLUSH: usize = 256;
const FLUSH_ROWS: usize = 32;
/// Output elements per accumulator block in the column loop (kept in L1).
const COL_BLOCK: usize = 512;
/// The column loop pays off once the contiguous kept run is at least this long.
const COL_MIN: usize = 8;

/// Arithmetic of the accumulator types (f32, f64, and i64/u64 with wrapping).
trait Num: Copy + PartialOrd + Send + Sync + 'static {
    const ZERO: Self;
    const ONE: Self;
    fn add(self, o: Self) -> Self;
    fn mul(self, o: Self) -> Self;
    /// `self / n`; NaN (floats) or 0 (integers) when `n == 0`.
    fn mean(self, n: usize) -> Self;
}

macro_rules! num_float {
    ($($t:ty),*) => {$(
        impl Num for $t {
            const ZERO: $t = 0.0;
            const ONE: $t = 1.0;
            #[inline(always)] fn add(self, o: $t) -> $t { self + o }
            #[inline(always)] fn mul(self, o: $t) -> $t { self * o }
            fn mean(self, n: usize) -> $t { self / n as $t }
        }
    )*};
}
num_float!(f32, f64);

impl Num for i64 {
    const ZERO: i64 = 0;
    const ONE: i64 = 1;
    #[inline(always)]
    fn add(self, o: i64) -> i64 {
        self.wrapping_add(o)
    }
    #[inline(always)]
    fn mul(self, o: i64) -> i64 {
        self.wrapping_mul(o)
    }
    fn mean(self, n: usize) -> i64 {
        // Integer mean truncates toward zero, as integer division does.
        if n == 0 { 0 } else { self / n as i64 }
    }
}

impl Num for u64 {
    const ZERO: u64 = 0;
    const ONE: u64 = 1;
    #[inline(always)]
    fn add(self, o: u64) -> u64 {
        self.wrapping_add(o)
    }
    #[inline(always)]
    fn mul(self, o: u64) -> u64 {
        self.wrapping_mul(o)
    }
    fn mean(self, n: usize) -> u64 {
        if n == 0 { 0 } else { self / n as u64 }
    }
}

/// A stored type that can be reduced: its fast lane type `F` (f32 for f32/f16/bf16, so
/// lanes fill whole vectors), its wide type `W` (f64 for floats, i64 for integers (u64 for u64), where
/// wrapping equals wrapping in the narrow type modulo 2^bits) and its extreme values.
/// Conversions are spelled out per type because `Element`'s are not inlined across crates.
trait RElem: Element {
    type F: Num;
    type W: Num;
    fn fast(self) -> Self::F;
    fn widen(f: Self::F) -> Self::W;
    fn lower(w: Self::W) -> Self;
    /// The identity of max (-inf for floats).
    fn lowest() -> Self;
    /// The identity of min (+inf for floats).
    fn highest() -> Self;
}

macro_rules! relem {
    ($t:ty, $f:ty, $w:ty, $fast:expr, $lower:expr, $lo:expr, $hi:expr) => {
        impl RElem for $t {
            type F = $f;
            type W = $w;
            #[inline(always)]
            fn fast(self) -> $f {
                let f: fn($t) -> $f = $fast;
                f(self)
            }
            #[inline(always)]
            fn widen(f: $f) -> $w {
                f as $w
            }
            #[inline(always)]
            fn lower(w: $w) -> $t {
                let f: fn($w) -> $t = $lower;
                f(w)
            }
            fn lowest() -> $t {
                $lo
            }
            fn highest() -> $t {
                $hi
            }
        }
    };
}
relem!(f32, f32, f64, |x| x, |w| w as f32, f32::NEG_INFINITY, f32::INFINITY);
relem!(f64, f64, f64, |x| x, |w| w, f64::NEG_INFINITY, f64::INFINITY);
relem!(f16, f32, f64, f16::to_f32, f16::from_f64, f16::NEG_INFINITY, f16::INFINITY);
relem!(bf16, f32, f64, bf16::to_f32, bf16::from_f64, bf16::NEG_INFINITY, bf16::INFINITY);
relem!(i64, i64, i64, |x| x, |w| w, i64::MIN, i64::MAX);
relem!(i32, i64, i64, |x| x as i64, |w| w as i32, i32::MIN, i32::MAX);
relem!(i8, i64, i64, |x| x as i64, |w| w as i8, i8::MIN, i8::MAX);
relem!(u8, i64, i64, |x| x as i64, |w| w as u8, u8::MIN, u8::MAX);
relem!(i16, i64, i64, |x| x as i64, |w| w as i16, i16::MIN, i16::MAX);
relem!(u16, i64, i64, |x| x as i64, |w| w as u16, u16::MIN, u16::MAX);
relem!(u32, i64, i64, |x| x as i64, |w| w as u32, u32::MIN, u32::MAX);
// u64 accumulates in itself: i64 lanes would order values above i64::MAX wrongly for max/min.
relem!(u64, u64, u64, |x| x, |w| w, u64::MIN, u64::MAX);

/// One reduction: an associative, commutative `step` on lane values `L` with identity
/// `init`, whose partial results are widened and merged, then finished per output.
trait Fold<T: RElem>: Copy + Send + Sync {
    type L: Copy + Send + Sync;
    fn init(self) -> Self::L;
    fn lift(self, v: T) -> Self::L;
    fn step(self, a: Self::L, b: Self::L) -> Self::L;
    fn widen(self, l: Self::L) -> T::W;
    fn init_w(self) -> T::W;
    fn merge(self, a: T::W, b: T::W) -> T::W;
    /// The result from the merged accumulator of `count` elements.
    fn finish(self, w: T::W, count: usize) -> T;
}

/// Sum, or mean when `mean`.
#[derive(Clone, Copy)]
struct Sum {
    mean: bool,
}

impl<T: RElem> Fold<T> for Sum {
    type L = T::F;
    #[inline(always)]
    fn init(self) -> T::F {
        T::F::ZERO
    }
    #[inline(always)]
    fn lift(self, v: T) -> T::F {
        v.fast()
    }
    #[inline(always)]
    fn step(self, a: T::F, b: T::F) -> T::F {
        a.add(b)
    }
    #[inline(always)]
    fn widen(self, l: T::F) -> T::W {
        T::widen(l)
    }
    fn init_w(self) -> T::W {
        T::W::ZERO
    }
    #[inline(always)]
    fn merge(self, a: T::W, b: T::W) -> T::W {
        a.add(b)
    }
    fn finish(self, w: T::W, count: usize) -> T {
        T::lower(if self.mean { w.mean(count) } else { w })
    }
}

/// Product, in the wide type throughout (f32 partial products would overflow early).
#[derive(Clone, Copy)]
struct Prod;

impl<T: RElem> Fold<T> for Prod {
    type L = T::W;
    #[inline(always)]
    fn init(self) -> T::W {
        T::W::ONE
    }
    #[inline(always)]
    fn lift(self, v: T) -> T::W {
        T::widen(v.fast())
    }
    #[inline(always)]
    fn step(self, a: T::W, b: T::W) -> T::W {
        a.mul(b)
    }
    #[inline(always)]
    fn widen(self, l: T::W) -> T::W {
        l
    }
    fn init_w(self) -> T::W {
        T::W::ONE
    }
    #[inline(always)]
    fn merge(self, a: T::W, b: T::W) -> T::W {
        a.mul(b)
    }
    fn finish(self, w: T::W, _: usize) -> T {
        T::lower(w)
    }
}

/// Max (`MAX`) or min. NaN never compares greater or smaller, so the `b != b` test makes it
/// stick once seen.
#[derive(Clone, Copy)]
struct Extreme<const MAX: bool>;

#[allow(clippy::eq_op)]
#[inline(always)]
fn pick<A: PartialOrd, const MAX: bool>(a: A, b: A) -> A {
    if (if MAX { b > a } else { b < a }) || b != b { b } else { a }
}

impl<T: RElem, const MAX: bool> Fold<T> for Extreme<MAX> {
    type L = T::F;
    #[inline(always)]
    fn init(self) -> T::F {
        if MAX { T::lowest().fast() } else { T::highest().fast() }
    }
    #[inline(always)]
    fn lift(self, v: T) -> T::F {
        v.fast()
    }
    #[inline(always)]
    fn step(self, a: T::F, b: T::F) -> T::F {
        pick::<_, MAX>(a, b)
    }
    #[inline(always)]
    fn widen(self, l: T::F) -> T::W {
        T::widen(l)
    }
    fn init_w(self) -> T::W {
        T::widen(<Self as Fold<T>>::init(self))
    }
    #[inline(always)]
    fn merge(self, a: T::W, b: T::W) -> T::W {
        pick::<_, MAX>(a, b)
    }
    fn finish(self, w: T::W, _: usize) -> T {
        T::lower(w)
    }
}

/// How the input's dims split between the output (kept) and the reduction.
struct Plan {
    /// Kept dims, coalesced: (size, input stride). Row-major over these is the output order.
    kept: Vec<(usize, [isize; 1])>,
    /// Reduced dims, coalesced, innermost last.
    red: Vec<(usize, [isize; 1])>,
    offset: usize,
}

impl Plan {
    /// Reduced dims may be visited in any order, so they are sorted by decreasing stride
    /// (when `reorder`), which lets a permuted input coalesce back into one contiguous run.
    fn new(l: &Layout, axes: &[usize], reorder: bool) -> Plan {
        let dims = |keep: bool| {
            (0..l.rank()).filter(move |d| axes.contains(d) != keep).map(|d| (l.shape[d], [l.strides[d]]))
        };
        let mut red: Vec<_> = dims(false).collect();
        if reorder {
            red.sort_by_key(|&(_, [s])| std::cmp::Reverse(s.unsigned_abs()));
        }
        Plan { kept: coalesce(dims(true)), red: coalesce(red), offset: l.offset }
    }

    fn n_out(&self) -> usize {
        self.kept.iter().map(|d| d.0).product()
    }

    fn count(&self) -> usize {
        self.red.iter().map(|d| d.0).product()
    }

    /// Storage offsets of every combination of `dims`, starting from the first element.
    fn offsets(&self, dims: &[(usize, [isize; 1])]) -> Vec<usize> {
        Layout {
            shape: dims.iter().map(|d| d.0).collect(),
            strides: dims.iter().map(|d| d.1[0]).collect(),
            offset: self.offset,
        }
        .offsets()
    }

    /// The reduced elements of one output as runs: the runs' starts relative to the output's
    /// first element, and the innermost run's length and stride.
    fn runs(&self) -> (Vec<isize>, usize, isize) {
        let (outer, inner) = self.red.split_at(self.red.len() - 1);
        let starts = self.offsets(outer).into_iter().map(|o| o as isize - self.offset as isize).collect();
        (starts, inner[0].0, inner[0].1[0])
    }
}

/// Folds `len` elements at `xs[o]`, `xs[o + s]`, ... into the wide accumulator.
#[inline(always)]
fn fold_run<T: RElem, R: Fold<T>>(r: R, xs: &[T], o: usize, len: usize, s: isize) -> T::W {
    let mut w = r.init_w();
    if s == 1 {
        for block in xs[o..o + len].chunks(FLUSH) {
            let mut lanes = [r.init(); LANES];
            let (chunks, rest) = block.as_chunks::<LANES>();
            for c in chunks {
                for j in 0..LANES {
                    lanes[j] = r.step(lanes[j], r.lift(c[j]));
                }
            }
            let acc = rest.iter().fold(r.init(), |a, &v| r.step(a, r.lift(v)));
            w = r.merge(w, r.widen(lanes.into_iter().fold(acc, |a, b| r.step(a, b))));
        }
    } else {
        for b0 in (0..len).step_by(FLUSH) {
            let acc = (b0..len.min(b0 + FLUSH)).fold(r.init(), |a, i| r.step(a, r.lift(xs[at(o, i, s)])));
            w = r.merge(w, r.widen(acc));
        }
    }
    w
}

fn reduce_t<T: RElem>(op: ReduceOp, x: &HostTensor, axes: &[usize], shape: &[usize], name: &str) -> Result<HostTensor> {
    match op {
        ReduceOp::Sum => fold::<T, _>(x, axes, shape, name, Sum { mean: false }),
        ReduceOp::Mean => fold::<T, _>(x, axes, shape, name, Sum { mean: true }),
        ReduceOp::Prod => fold::<T, _>(x, axes, shape, name, Prod),
        ReduceOp::Max => fold::<T, _>(x, axes, shape, name, Extreme::<true>),
        ReduceOp::Min => fold::<T, _>(x, axes, shape, name, Extreme::<false>),
    }
}

/// Runs reduction `r` for every output.
fn fold<T: RElem, R: Fold<T>>(x: &HostTensor, axes: &[usize], shape: &[usize], name: &str, r: R) -> Result<HostTensor> {
    let xs = elements::<T>(x, name)?;
    let plan = Plan::new(&x.layout, axes, true);
    let (n_out, count) = (plan.n_out(), plan.count());
    check_out(shape, n_out, x, name)?;
    let mut out = vec![T::zero(); n_out];
    if n_out == 0 {
    } else if count == 0 {
        out.fill(r.finish(r.init_w(), 0));
    } else {
        let (starts, len, s) = plan.runs();
        let (b, kst) = plan.kept[plan.kept.len() - 1];
        if kst[0] == 1 && b >= COL_MIN && s != 1 {
            // Column loop: out is [outer kept, b]; fold whole input rows of b elements.
            let bases = plan.offsets(&plan.kept[..plan.kept.len() - 1]);
            par_chunks(&mut out, count, |start, chunk| {
                let (mut lanes, mut wide) = (Vec::with_capacity(COL_BLOCK), Vec::with_capacity(COL_BLOCK));
                for_each_block(start, chunk, b, |row, col, dst| {
                    lanes.clear();
                    lanes.resize(dst.len(), r.init());
                    wide.clear();
                    wide.resize(dst.len(), r.init_w());
                    let mut rows = 0;
                    for &ro in &starts {
                        for j in 0..len {
                            let o = (at(bases[row] + col, j, s) as isize + ro) as usize;
                            let src = &xs[o..o + dst.len()];
                            lanes.iter_mut().zip(src).for_each(|(a, &v)| *a = r.step(*a, r.lift(v)));
                            rows += 1;
                            if rows == FLUSH_ROWS {
                                wide.iter_mut().zip(&mut lanes).for_each(|(w, l)| {
                                    *w = r.merge(*w, r.widen(*l));
                                    *l = r.init();
                                });
                                rows = 0;
                            }
                        }
                    }
                    for ((d, &w), &l) in dst.iter_mut().zip(&wide).zip(&lanes) {
                        *d = r.finish(r.merge(w, r.widen(l)), count);
                    }
                });
            });
        } else {
            let bases = plan.offsets(&plan.kept);
            let fold_one = |base: usize, starts: &[isize]| {
                starts.iter().fold(r.init_w(), |w, &ro| r.merge(w, fold_run(r, xs, (base as isize + ro) as usize, len, s)))
            };
            let threads = rayon::current_num_threads();
            if n_out >= 4 * threads || n_out.saturating_mul(count) < PAR_MIN || threads == 1 {
                par_chunks(&mut out, count, |start, chunk| {
                    for (o, &base) in chunk.iter_mut().zip(&bases[start..]) {
                        *o = r.finish(fold_one(base, &starts), count);
                    }
                });
            } else {
                // Few outputs, each a long fold: split every fold into pieces across threads.
                for (o, &base) in out.iter_mut().zip(&bases) {
                    let w = if starts.len() >= 2 * threads {
                        let piece = starts.len().div_ceil(4 * threads);
                        starts.par_chunks(piece).map(|c| fold_one(base, c)).reduce(|| r.init_w(), |a, b| r.merge(a, b))
                    } else {
                        let piece = len.div_ceil(4 * threads).max(PAR_MIN / 4);
                        starts.iter().fold(r.init_w(), |w, &ro| {
                            let o = (base as isize + ro) as usize;
                            let part = (0..len.div_ceil(piece))
                                .into_par_iter()
                                .map(|p| fold_run(r, xs, at(o, p * piece, s), piece.min(len - p * piece), s))
                                .reduce(|| r.init_w(), |a, b| r.merge(a, b));
                            r.merge(w, part)
                        })
                    };
                    *o = r.finish(w, count);
                }
            }
        }
    }
    HostTensor::from_vec(out, shape)
}

/// Splits the output range `start..start + chunk.len()` of a row-major `[rows, b]` output into
/// pieces that stay inside one row and hold at most [`COL_BLOCK`] elements:
/// `f(row, first column, piece)`.
fn for_each_block<U>(start: usize, chunk: &mut [U], b: usize, mut f: impl FnMut(usize, usize, &mut [U])) {
    let mut pos = 0;
    while pos < chunk.len() {
        let (row, col) = ((start + pos) / b, (start + pos) % b);
        let n = (b - col).min(COL_BLOCK).min(chunk.len() - pos);
        f(row, col, &mut chunk[pos..pos + n]);
        pos += n;
    }
}

/// Checks the caller's output shape against the plan.
fn check_out(shape: &[usize], n_out: usize, x: &HostTensor, name: &str) -> Result<()> {
    if shape.iter().product::<usize>() != n_out {
        return Err(Error::Shape(format!(
            "{name}: result shape {shape:?} does not hold the {n_out} results of reducing {:?}",
            x.shape()
        )));
    }
    Ok(())
}

fn arg_t<T: RElem>(
    x: &HostTensor,
    axis: usize,
    is_max: bool,
    select_last: bool,
    shape: &[usize],
    name: &str,
) -> Result<HostTensor> {
    let xs = elements::<T>(x, name)?;
    let plan = Plan::new(&x.layout, &[axis], false);
    let n_out = plan.n_out();
    check_out(shape, n_out, x, name)?;
    let (len, s) = (x.layout.shape[axis], x.layout.strides[axis]);
    if len == 0 && n_out > 0 {
        return Err(Error::Shape(format!("{name}: cannot take the arg-extreme of empty axis {axis} of {:?}", x.shape())));
    }
    // Whether `v` replaces the current `best`. NaN (the only value with `v != v`) beats
    // every number, for argmin too (as PyTorch); among equals the first wins unless
    // `select_last`.
    #[allow(clippy::eq_op)]
    let better = move |v: T, best: T| {
        if best != best {
            select_last && v != v
        } else if v != v {
            true
        } else if is_max {
            v > best || (select_last && v == best)
        } else {
            v < best || (select_last && v == best)
        }
    };
    let mut out = vec![0i64; n_out];
    let (b, kst) = plan.kept[plan.kept.len() - 1];
    if n_out == 0 || len == 1 {
    } else if kst[0] == 1 && b >= COL_MIN && s != 1 {
        let bases = plan.offsets(&plan.kept[..plan.kept.len() - 1]);
        par_chunks(&mut out, len, |start, chunk| {
            let mut best: Vec<T> = Vec::with_capacity(COL_BLOCK);
            for_each_block(start, chunk, b, |row, col, dst| {
                let first = bases[row] + col;
                best.clear();
                best.extend_from_slice(&xs[first..first + dst.len()]);
                for j in 1..len {
                    let o = at(first, j, s);
                    let src = &xs[o..o + dst.len()];
                    for ((bv, d), &v) in best.iter_mut().zip(dst.iter_mut()).zip(src) {
                        if better(v, *bv) {
                            *bv = v;
                            *d = j as i64;
                        }
                    }
                }
            });
        });
    } else {
        let bases = plan.offsets(&plan.kept);
        par_chunks(&mut out, len, |start, chunk| {
            for (d, &base) in chunk.iter_mut().zip(&bases[start..]) {
                if s == 1 {
                    *d = arg_contiguous(&xs[base..base + len], is_max, select_last);
                    continue;
                }
                let mut best = xs[base];
                for j in 1..len {
                    let v = xs[at(base, j, s)];
                    if better(v, best) {
                        best = v;
                        *d = j as i64;
                    }
                }
            }
        });
    }
    HostTensor::from_vec(out, shape)
}

/// Arg-extreme of a contiguous row in two vector-friendly passes: the extreme itself (NaN
/// sticks, as in reduce), then the first (or last) element equal to it.
fn arg_contiguous<T: RElem>(row: &[T], is_max: bool, select_last: bool) -> i64 {
    let ext = if is_max {
        fold_run(Extreme::<true>, row, 0, row.len(), 1)
    } else {
        fold_run(Extreme::<false>, row, 0, row.len(), 1)
    };
    #[allow(clippy::eq_op)]
    let hit = |&v: &T| {
        let w = T::widen(v.fast());
        w == ext || (ext != ext && w != w)
    };
    let pos = if select_last { row.iter().rposition(hit) } else { row.iter().position(hit) };
    pos.unwrap_or(0) as i64
}
