//! Helpers shared by the elementwise, cast and reduce kernel tests: building tensors of any
//! dtype from f64 values, the same logical tensor under several layouts, index arithmetic,
//! a tiny deterministic RNG and per-dtype comparison.
#![allow(dead_code)]

use kiln_ir::{DType, Element, HostTensor, Layout};

/// A dense tensor of dtype `d` holding `vals` (converted with `Element::from_f64`).
pub fn tensor(vals: &[f64], shape: &[usize], d: DType) -> HostTensor {
    with_storage(vals, d, Layout::contiguous(shape))
}

/// A tensor of dtype `d` whose storage holds `store` and whose layout is `layout`.
pub fn with_storage(store: &[f64], d: DType, layout: Layout) -> HostTensor {
    let dense = kiln_ir::with_dtype!(d, T, {
        HostTensor::from_vec(store.iter().map(|&v| T::from_f64(v)).collect::<Vec<T>>(), &[store.len()])
            .unwrap()
    });
    dense.with_layout(layout)
}

/// `v` rounded to dtype `d` and back (what a tensor of `d` holds).
pub fn round_to(v: f64, d: DType) -> f64 {
    tensor(&[v], &[1], d).to_f64_vec()[0]
}

/// Row-major multi-index of linear index `i`.
pub fn unravel(mut i: usize, shape: &[usize]) -> Vec<usize> {
    let mut idx = vec![0; shape.len()];
    for d in (0..shape.len()).rev() {
        idx[d] = i % shape[d];
        i /= shape[d];
    }
    idx
}

/// Linear index of a multi-index.
pub fn ravel(idx: &[usize], shape: &[usize]) -> usize {
    idx.iter().zip(shape).fold(0, |acc, (&i, &n)| acc * n + i)
}

/// Linear index into `in_shape` of output index `out_idx` under NumPy broadcasting.
pub fn bcast_index(out_idx: &[usize], in_shape: &[usize]) -> usize {
    let lead = out_idx.len() - in_shape.len();
    let idx: Vec<usize> =
        in_shape.iter().enumerate().map(|(k, &n)| if n == 1 { 0 } else { out_idx[lead + k] }).collect();
    ravel(&idx, in_shape)
}

/// The same logical tensor under several layouts: dense; every element at an odd place of a
/// wider storage (stride 2, offset 1); axis 0 reversed (negative stride); last two axes
/// stored transposed (permuted view). Only layouts that make sense for the shape are given.
pub fn views(vals: &[f64], shape: &[usize], d: DType) -> Vec<(&'static str, HostTensor)> {
    let n: usize = shape.iter().product();
    assert_eq!(vals.len(), n);
    let mut out = vec![("dense", tensor(vals, shape, d))];
    let rank = shape.len();
    if rank == 0 {
        let l = Layout { shape: vec![], strides: vec![], offset: 1 };
        out.push(("offset", with_storage(&[-7.0, vals[0]], d, l)));
        return out;
    }
    if n == 0 {
        return out;
    }
    // Stride 2 along the last axis, junk in between.
    let last = shape[rank - 1];
    let mut wide = shape.to_vec();
    wide[rank - 1] = 2 * last + 1;
    let mut store = vec![3.0; wide.iter().product()];
    for (i, &v) in vals.iter().enumerate() {
        let mut idx = unravel(i, shape);
        idx[rank - 1] = 2 * idx[rank - 1] + 1;
        store[ravel(&idx, &wide)] = v;
    }
    let l = Layout::contiguous(&wide).slice(rank - 1, 1, 2 * last as i64 + 1, 2).unwrap();
    out.push(("strided", with_storage(&store, d, l)));
    // Axis 0 reversed.
    let mut store = vec![0.0; n];
    for (i, &v) in vals.iter().enumerate() {
        let mut idx = unravel(i, shape);
        idx[0] = shape[0] - 1 - idx[0];
        store[ravel(&idx, shape)] = v;
    }
    let l = Layout::contiguous(shape).slice(0, shape[0] as i64 - 1, -1, -1).unwrap();
    out.push(("reversed", with_storage(&store, d, l)));
    // Last two axes stored transposed.
    if rank >= 2 {
        let mut perm: Vec<usize> = (0..rank).collect();
        perm.swap(rank - 2, rank - 1);
        let stored: Vec<usize> = perm.iter().map(|&p| shape[p]).collect();
        let mut store = vec![0.0; n];
        for (i, &v) in vals.iter().enumerate() {
            let idx = unravel(i, shape);
            let sidx: Vec<usize> = perm.iter().map(|&p| idx[p]).collect();
            store[ravel(&sidx, &stored)] = v;
        }
        let l = Layout::contiguous(&stored).permute(&perm).unwrap();
        out.push(("transposed", with_storage(&store, d, l)));
    }
    out
}

/// The elements of an integer or bool tensor, exactly.
pub fn ints(t: &HostTensor) -> Vec<i128> {
    match t.dtype() {
        DType::I64 => t.to_vec::<i64>().unwrap().into_iter().map(i128::from).collect(),
        DType::I32 => t.to_vec::<i32>().unwrap().into_iter().map(i128::from).collect(),
        DType::I8 => t.to_vec::<i8>().unwrap().into_iter().map(i128::from).collect(),
        DType::U8 => t.to_vec::<u8>().unwrap().into_iter().map(i128::from).collect(),
        DType::I16 => t.to_vec::<i16>().unwrap().into_iter().map(i128::from).collect(),
        DType::U16 => t.to_vec::<u16>().unwrap().into_iter().map(i128::from).collect(),
        DType::U32 => t.to_vec::<u32>().unwrap().into_iter().map(i128::from).collect(),
        DType::U64 => t.to_vec::<u64>().unwrap().into_iter().map(i128::from).collect(),
        DType::Bool => t.to_vec::<bool>().unwrap().into_iter().map(i128::from).collect(),
        d => panic!("ints() of a {d} tensor"),
    }
}

/// A dense integer tensor from exact values (wrapped into the dtype).
pub fn int_tensor(vals: &[i128], shape: &[usize], d: DType) -> HostTensor {
    match d {
        DType::I64 => HostTensor::from_vec(vals.iter().map(|&v| v as i64).collect(), shape),
        DType::I32 => HostTensor::from_vec(vals.iter().map(|&v| v as i32).collect(), shape),
        DType::I8 => HostTensor::from_vec(vals.iter().map(|&v| v as i8).collect(), shape),
        DType::U8 => HostTensor::from_vec(vals.iter().map(|&v| v as u8).collect(), shape),
        DType::I16 => HostTensor::from_vec(vals.iter().map(|&v| v as i16).collect(), shape),
        DType::U16 => HostTensor::from_vec(vals.iter().map(|&v| v as u16).collect(), shape),
        DType::U32 => HostTensor::from_vec(vals.iter().map(|&v| v as u32).collect(), shape),
        DType::U64 => HostTensor::from_vec(vals.iter().map(|&v| v as u64).collect(), shape),
        DType::Bool => HostTensor::from_vec(vals.iter().map(|&v| v != 0).collect(), shape),
        d => panic!("int_tensor of {d}"),
    }
    .unwrap()
}

/// `v` wrapped into integer dtype `d` (two's complement), as an exact value.
pub fn wrap(v: i128, d: DType) -> i128 {
    match d {
        DType::I64 => v as i64 as i128,
        DType::I32 => v as i32 as i128,
        DType::I8 => v as i8 as i128,
        DType::U8 => v as u8 as i128,
        DType::I16 => v as i16 as i128,
        DType::U16 => v as u16 as i128,
        DType::U32 => v as u32 as i128,
        DType::U64 => v as u64 as i128,
        DType::Bool => (v != 0) as i128,
        d => panic!("wrap to {d}"),
    }
}

/// The smallest and largest values of integer dtype `d`.
pub fn int_range(d: DType) -> (i128, i128) {
    match d {
        DType::I64 => (i64::MIN as i128, i64::MAX as i128),
        DType::I32 => (i32::MIN as i128, i32::MAX as i128),
        DType::I8 => (i8::MIN as i128, i8::MAX as i128),
        DType::U8 => (0, 255),
        DType::I16 => (i16::MIN as i128, i16::MAX as i128),
        DType::U16 => (u16::MIN as i128, u16::MAX as i128),
        DType::U32 => (u32::MIN as i128, u32::MAX as i128),
        DType::U64 => (u64::MIN as i128, u64::MAX as i128),
        d => panic!("int_range of {d}"),
    }
}

/// Relative tolerance for results computed in (at least) the dtype's precision: a few ulps.
pub fn rtol(d: DType) -> f64 {
    match d {
        DType::F64 => 1e-12,
        DType::F32 => 2e-6,
        DType::F16 => 2e-3,
        DType::BF16 => 1.6e-2,
        _ => 0.0,
    }
}

/// Whether `got` matches `want` (NaN matches NaN, infinities must be equal).
pub fn close(got: f64, want: f64, d: DType) -> bool {
    if want.is_nan() {
        return got.is_nan();
    }
    if want.is_infinite() || got.is_infinite() {
        return got == want;
    }
    (got - want).abs() <= rtol(d) * want.abs() + rtol(d) * 1e-3
}

/// Asserts `got`'s elements match `want` elementwise under [`close`].
pub fn assert_close(got: &HostTensor, want: &[f64], d: DType, ctx: &str) {
    let g = got.to_f64_vec();
    assert_eq!(g.len(), want.len(), "{ctx}: element count");
    for (i, (&x, &w)) in g.iter().zip(want).enumerate() {
        assert!(close(x, w, d), "{ctx}: element {i} is {x}, want {w}\n got {g:?}\nwant {want:?}");
    }
}

/// A small deterministic generator (no test depends on a seed file or the clock).
pub struct Lcg(u64);

impl Lcg {
    pub fn new(seed: u64) -> Lcg {
        Lcg(seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407))
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let x = self.0;
        (x ^ (x >> 33)).wrapping_mul(0xff51afd7ed558ccd) ^ (x >> 29)
    }
    /// Uniform in `[-1, 1)`.
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 52) as f64 - 1.0
    }
    /// Uniform in `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
    /// `n` values in `[-scale, scale)`.
    pub fn vals(&mut self, n: usize, scale: f64) -> Vec<f64> {
        (0..n).map(|_| self.uniform() * scale).collect()
    }
}

/// The float dtypes and the integer dtypes.
pub const FLOATS: [DType; 4] = [DType::F32, DType::F64, DType::F16, DType::BF16];
pub const INTS: [DType; 8] =
    [DType::I64, DType::I32, DType::I16, DType::I8, DType::U64, DType::U32, DType::U16, DType::U8];
