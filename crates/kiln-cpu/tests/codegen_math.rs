//! The prelude's branch-free f32 exp, erfc, erf and sigmoid (`prelude.h`), rendered and
//! compiled as the compiler does, over a dense sweep of inputs against the interpreter's f64
//! results. The bounds are the ones measured over every f32 input (see the prelude); a wrong
//! polynomial coefficient or a broken range reduction exceeds them. Skipped, with a note, when
//! no C compiler exists.

use kiln_cpu::codegen::render_kernels;
use kiln_cpu::toolchain::{NativeLibrary, Toolchain};
use kiln_ir::{DType, HostTensor, Op, UnaryOp};
use kiln_sched::kernel::{Arg, Expr, Idx, Kernel, Loop, Stage};
use std::ffi::c_void;

/// Each op with its max error in f32 ulps of the f64 result (the ulp of the smallest normal
/// below it), as measured over all f32 inputs.
const BOUNDS: [(UnaryOp, f64); 4] = [
    (UnaryOp::Exp, 1.0),
    (UnaryOp::Erfc, 3.15),
    (UnaryOp::Erf, 1.372),
    (UnaryOp::Sigmoid, 2.5),
];

/// A million values evenly over [-100, 100], every binade of both signs (subnormals
/// included), values near each function's thresholds, and the specials.
fn inputs() -> Vec<f32> {
    let mut v: Vec<f32> = (0..1_000_000)
        .map(|i| -100.0 + 200.0 * i as f32 / 999_999.0)
        .collect();
    for bits in 1..=255u32 {
        for m in [0u32, 0x1234, 0x40_0000, 0x55_5555, 0x7f_ffff] {
            let x = f32::from_bits((bits.min(254) << 23) | m);
            v.extend([x, -x]);
        }
    }
    // Subnormal inputs: erf(x) ~ 1.128 x must not flush.
    v.extend((1..2000u32).map(|i| f32::from_bits(i * 4139)));
    // exp's underflow to subnormals and 0 (-87.3 .. -104), erfc's (9.2 .. 10.1), the erf
    // polynomial's switch at 0.75, the clamp at erfc(16).
    for (lo, hi) in [(-104.5f32, -87.0f32), (9.0, 10.2), (0.7, 0.8), (15.9, 16.1)] {
        v.extend((0..20_000).map(|i| lo + (hi - lo) * i as f32 / 19_999.0));
    }
    v.extend([
        0.0,
        -0.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        -f32::NAN,
        f32::MAX,
        f32::MIN,
        f32::MIN_POSITIVE,
        -f32::MIN_POSITIVE,
        88.722_83,
        88.722_84,
        -103.972_08,
        -103.972_09,
        0.75,
        0.749_999_94,
        1.0,
        -1.0,
    ]);
    v
}

/// One kernel: `out_k[i] = op_k(x[i])` for each op of [`BOUNDS`].
fn kernel(n: usize) -> Kernel {
    let mut k = Kernel::new("math_f32");
    k.outer = vec![Loop { var: 0, extent: n }];
    k.args.push(Arg {
        dtype: DType::F32,
        len: n,
        written: false,
    });
    let x = k.push(
        Expr::Load {
            arg: 0,
            index: Idx::var(0),
        },
        DType::F32,
    );
    for (op, _) in BOUNDS {
        let value = k.push(Expr::Unary { op, x }, DType::F32);
        k.args.push(Arg {
            dtype: DType::F32,
            len: n,
            written: true,
        });
        let arg = k.args.len() as u32 - 1;
        k.stages.push(Stage::Store {
            loops: vec![],
            arg,
            index: Idx::var(0),
            value,
        });
    }
    k
}

/// The compiled kernel's outputs for `xs`, or None without a C compiler.
fn run_compiled(xs: &[f32]) -> Option<Vec<Vec<f32>>> {
    let tc = match Toolchain::detect() {
        Ok(tc) => tc,
        Err(e) => {
            eprintln!("note: skipping the compiled math tests: {e}");
            return None;
        }
    };
    let k = kernel(xs.len());
    let src = render_kernels([&k]).unwrap();
    let dir = std::env::temp_dir().join(format!("kiln-codegen-math-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let so = dir.join("math.so");
    tc.compile_shared(&src, &so).unwrap();
    let lib = NativeLibrary::load(&so).unwrap();
    let f = lib.kernel(&k.name).unwrap();
    let mut x = xs.to_vec();
    let mut outs = vec![vec![0f32; xs.len()]; BOUNDS.len()];
    let mut ptrs: Vec<*mut c_void> = vec![x.as_mut_ptr() as *mut c_void];
    ptrs.extend(outs.iter_mut().map(|o| o.as_mut_ptr() as *mut c_void));
    // SAFETY: every argument buffer holds `xs.len()` f32s, the kernel's declared lengths.
    unsafe { f(ptrs.as_ptr(), 0, xs.len() as i64) };
    let _ = std::fs::remove_dir_all(&dir);
    Some(outs)
}

fn interpret(op: UnaryOp, x: &HostTensor) -> Vec<f64> {
    let y = kiln_cpu::eval(&Op::Unary(op), &[x]).unwrap().contiguous();
    (0..y.numel()).map(|i| y.storage.get_f64(i)).collect()
}

/// The spacing of f32 values at `w` (that of the smallest normals below them).
fn ulp_f32(w: f64) -> f64 {
    let e = if w == 0.0 {
        -126
    } else {
        (w.abs().log2().floor() as i32).max(-126)
    };
    2f64.powi(e - 23)
}

#[test]
fn vectorised_f32_math_is_within_its_measured_ulp_bounds() {
    let xs = inputs();
    let Some(outs) = run_compiled(&xs) else {
        return;
    };
    let x32 = HostTensor::from_vec(xs.clone(), &[xs.len()]).unwrap();
    let x64 = HostTensor::from_vec(
        xs.iter().map(|&x| x as f64).collect::<Vec<_>>(),
        &[xs.len()],
    )
    .unwrap();
    let mut failures = Vec::new();
    for ((op, bound), got) in BOUNDS.into_iter().zip(&outs) {
        let want = interpret(op, &x64);
        // The interpreter's f32 sigmoid is 1 / (1 + e^-x) in f32: 0 where e^-x overflows,
        // though the true value is a subnormal there. The kernel must give that 0 too.
        let want32 = interpret(op, &x32);
        let mut worst = 0.0f64;
        for (i, &g) in got.iter().enumerate() {
            let (g, w) = (g as f64, want[i]);
            let w_f32 = if op == UnaryOp::Sigmoid && want32[i] == 0.0 {
                0.0
            } else {
                w as f32
            };
            let ok = if w.is_nan() {
                g.is_nan()
            } else if w_f32 == 0.0 || w_f32.is_infinite() {
                // Results that round to 0 or overflow, and exact ones (erf(±0)): bit for bit.
                (g as f32).to_bits() == w_f32.to_bits()
            } else {
                let err = (g - w).abs() / ulp_f32(w);
                worst = worst.max(err);
                err <= bound
            };
            if !ok && failures.len() < 20 {
                failures.push(format!(
                    "{op:?}({:e} = {:#x}): got {g:e}, want {w:e} (bound {bound} ulp)",
                    xs[i],
                    xs[i].to_bits()
                ));
            }
        }
        eprintln!("{op:?}: max error {worst:.3} ulp over {} inputs", xs.len());
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
