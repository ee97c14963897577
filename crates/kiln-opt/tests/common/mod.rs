//! Helpers shared by the kiln-opt tests: a seeded generator, op counting and output comparison
//! against the reference interpreter.
#![allow(dead_code)]

use kiln_ir::{Graph, HostTensor};

/// A small deterministic generator (splitmix64), so tests need no rng crate.
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in `[lo, hi)`.
    pub fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
    pub fn f32s(&mut self, n: usize, lo: f64, hi: f64) -> Vec<f32> {
        (0..n).map(|_| self.uniform(lo, hi) as f32).collect()
    }
}

/// A dense f32 tensor of `shape` with values uniform in `[lo, hi)`.
pub fn rand_f32(rng: &mut Rng, shape: &[usize], lo: f64, hi: f64) -> HostTensor {
    let n = shape.iter().product();
    HostTensor::from_vec(rng.f32s(n, lo, hi), shape).unwrap()
}

/// How many nodes of `graph` have op name `name` (`conv2d`, `batch_norm`, `add`, `const`...).
pub fn count(graph: &Graph, name: &str) -> usize {
    graph.nodes.iter().filter(|n| n.op.name() == name).count()
}

/// Runs both graphs on `inputs` and checks every output: same dtype and shape, NaN where the
/// other has NaN, equal infinities, and finite values within `rel` of each other (relative to
/// the larger magnitude, or absolute below 1). With `rel == 0` the bits must match except that
/// NaN payloads may differ.
pub fn assert_same_outputs(original: &Graph, optimized: &Graph, inputs: &[HostTensor], rel: f64) {
    let want = kiln_cpu::run(original, inputs).unwrap();
    let got = kiln_cpu::run(optimized, inputs).unwrap();
    assert_eq!(want.len(), got.len(), "output count");
    for (k, (w, g)) in want.iter().zip(&got).enumerate() {
        assert_eq!(w.dtype(), g.dtype(), "output {k} dtype");
        assert_eq!(w.shape(), g.shape(), "output {k} shape");
        for (i, (a, b)) in w.to_f64_vec().into_iter().zip(g.to_f64_vec()).enumerate() {
            let ok = if a.is_nan() || b.is_nan() {
                a.is_nan() && b.is_nan()
            } else if rel == 0.0 || a.is_infinite() || b.is_infinite() {
                a.to_bits() == b.to_bits()
            } else {
                (a - b).abs() <= rel * a.abs().max(b.abs()).max(1.0)
            };
            assert!(
                ok,
                "output {k} element {i}: original {a:e}, optimized {b:e}\noriginal:\n{original}\noptimized:\n{optimized}"
            );
        }
    }
}

/// `max |a - b| / max |b|` over all outputs of the two graphs (b from the original).
pub fn max_rel_err(original: &Graph, optimized: &Graph, inputs: &[HostTensor]) -> f64 {
    let want = kiln_cpu::run(original, inputs).unwrap();
    let got = kiln_cpu::run(optimized, inputs).unwrap();
    let mut worst: f64 = 0.0;
    for (w, g) in want.iter().zip(&got) {
        assert_eq!(w.shape(), g.shape());
        let (w, g) = (w.to_f64_vec(), g.to_f64_vec());
        let scale = w
            .iter()
            .fold(0.0f64, |m, v| m.max(v.abs()))
            .max(f64::MIN_POSITIVE);
        let diff = w
            .iter()
            .zip(&g)
            .fold(0.0f64, |m, (a, b)| m.max((a - b).abs()));
        assert!(diff.is_finite(), "non-finite difference");
        worst = worst.max(diff / scale);
    }
    worst
}
