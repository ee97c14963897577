//! What the `kiln::compile` tests share: random inputs and closeness checks.

use kiln::Tensor;
use kiln::rng::Rng;

/// A uniform [-1, 1) f32 tensor of `shape`, from `seed`.
pub fn rand(shape: &[usize], seed: u64) -> Tensor {
    let mut r = Rng::new(seed);
    let n = shape.iter().product();
    Tensor::from_vec((0..n).map(|_| r.uniform(-1.0, 1.0) as f32).collect::<Vec<f32>>(), shape).unwrap()
}

/// Same dtype and shape, and every element within `tol` (relative to 1 + |want|).
pub fn assert_close(got: &Tensor, want: &Tensor, tol: f64) {
    assert_eq!((got.dtype(), got.shape()), (want.dtype(), want.shape()));
    let (g, w) = (got.to_f64_vec().unwrap(), want.to_f64_vec().unwrap());
    for (i, (a, b)) in g.iter().zip(&w).enumerate() {
        assert!((a - b).abs() <= tol * (1.0 + b.abs()), "element {i}: got {a}, want {b}");
    }
}
