//! GFLOP/s of the CPU hot-path kernels (matmul, conv2d, pooling) on resnet50 / bert-base
//! shapes, through `kiln_cpu::eval` as eager mode calls them (allocation included).
//! Run: `cargo bench -p kiln-cpu --bench kernels [-- FILTER]`; prints the median of repeats.

use kiln_cpu::eval;
use kiln_ir::{Conv2dAttrs, HostTensor, Op, Pool2dAttrs, PoolKind};
use std::time::{Duration, Instant};

/// A dense f32 tensor of deterministic values in [-1, 1).
fn tensor(shape: &[usize], seed: u32) -> HostTensor {
    let n: usize = shape.iter().product();
    let mut s = seed.wrapping_mul(2654435761).wrapping_add(1);
    let v: Vec<f32> = (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            (s >> 8) as f32 / (1u32 << 23) as f32 - 1.0
        })
        .collect();
    HostTensor::from_vec(v, shape).expect("bench shapes are consistent")
}

/// Median seconds of `op` on `inputs` over repeats (2 warm-ups, then up to 25 runs or ~2 s).
fn median_secs(op: &Op, inputs: &[&HostTensor]) -> f64 {
    for _ in 0..2 {
        eval(op, inputs).expect("bench op runs");
    }
    let mut times = Vec::new();
    let start = Instant::now();
    while times.len() < 25 && (times.len() < 5 || start.elapsed() < Duration::from_secs(2)) {
        let t = Instant::now();
        let out = eval(op, inputs).expect("bench op runs");
        times.push(t.elapsed().as_secs_f64());
        drop(out);
    }
    median(&mut times)
}

/// The median of `v` (sorted in place).
fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// Median seconds of `a` and of `b` over `runs` runs each, alternated so both see the same
/// machine state.
fn alternated_medians(runs: usize, mut a: impl FnMut(), mut b: impl FnMut()) -> (f64, f64) {
    let (mut ta, mut tb) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        let t = Instant::now();
        a();
        ta.push(t.elapsed().as_secs_f64());
        let t = Instant::now();
        b();
        tb.push(t.elapsed().as_secs_f64());
    }
    (median(&mut ta), median(&mut tb))
}

fn report(name: &str, flops: f64, secs: f64) {
    println!("{name:<44} {:>9.3} ms {:>8.1} GFLOP/s", secs * 1e3, flops / secs / 1e9);
}

fn main() {
    let filter: Option<String> = std::env::args().skip(1).find(|a| !a.starts_with("--"));
    let wanted = |name: &str| filter.as_ref().is_none_or(|f| name.contains(f.as_str()));
    println!("threads: {}", rayon::current_num_threads());

    let matmuls: [(&str, &[usize], &[usize]); 7] = [
        ("sgemm 512", &[512, 512], &[512, 512]),
        ("sgemm 1024", &[1024, 1024], &[1024, 1024]),
        ("bert qkv/out [128,768]x[768,768]", &[128, 768], &[768, 768]),
        ("bert ffn1 [128,768]x[768,3072]", &[128, 768], &[768, 3072]),
        ("bert ffn2 [128,3072]x[3072,768]", &[128, 3072], &[3072, 768]),
        ("bert scores [12,128,64]x[12,64,128]", &[12, 128, 64], &[12, 64, 128]),
        ("bert context [12,128,128]x[12,128,64]", &[12, 128, 128], &[12, 128, 64]),
    ];
    for (name, sa, sb) in matmuls {
        if !wanted(name) {
            continue;
        }
        let (a, b) = (tensor(sa, 1), tensor(sb, 2));
        let (r, rb) = (sa.len(), sb.len());
        let batch: usize = sa[..r - 2].iter().product();
        let flops = 2.0 * (batch * sa[r - 2] * sa[r - 1] * sb[rb - 1]) as f64;
        report(name, flops, median_secs(&Op::MatMul, &[&a, &b]));
    }
    // transposed rhs (x @ W^T with W stored [out, in], as nn.Linear keeps it)
    if wanted("bert ffn1 W^T") {
        let (a, w) = (tensor(&[128, 768], 1), tensor(&[3072, 768], 2));
        let wt = w.with_layout(w.layout.permute(&[1, 0]).expect("2-D permute"));
        report("bert ffn1 W^T (strided rhs)", 2.0 * 128.0 * 768.0 * 3072.0, median_secs(&Op::MatMul, &[&a, &wt]));
    }

    // kiln's packed GEMM (weights packed once) against the gemm crate on the same operands,
    // alternated so both see the same machine state.
    if kiln_cpu::gemm::supported() {
        let shapes: [(&str, usize, usize, usize); 5] = [
            ("packed bert qkv [128,768]x[768,2304]", 128, 768, 2304),
            ("packed bert ffn1 [128,768]x[768,3072]", 128, 768, 3072),
            ("packed bert ffn2 [128,3072]x[3072,768]", 128, 3072, 768),
            ("packed pooler [1,768]x[768,768]", 1, 768, 768),
            ("packed resnet fc [1,2048]x[2048,1000]", 1, 2048, 1000),
        ];
        for (name, m, k, n) in shapes {
            if !wanted(name) {
                continue;
            }
            let (a, b) = (tensor(&[m, k], 1), tensor(&[k, n], 2));
            let (av, bv) = (a.to_vec::<f32>().expect("f32"), b.to_vec::<f32>().expect("f32"));
            let packed = kiln_cpu::gemm::PackedB::from_rows(k, n, &bv).expect("sizes fit");
            let mut c = vec![0.0f32; m * n];
            let (ours, crate_) = alternated_medians(
                15,
                // SAFETY: a is [m, k], c is [m, n], both dense.
                || unsafe { kiln_cpu::gemm::gemm(m, av.as_ptr(), k, &packed, c.as_mut_ptr(), n) },
                || drop(eval(&Op::MatMul, &[&a, &b]).expect("bench op runs")),
            );
            let flops = 2.0 * (m * k * n) as f64;
            report(name, flops, ours);
            report("  (gemm crate, same shapes)", flops, crate_);
        }
    }

    // bert-base's weight products of a whole forward (12 layers of qkv, out, ffn1, ffn2: 340 MB
    // of weights, out of cache on every run as in the model) against the same 48 products on
    // one layer's weights (in L3), alternated: the difference is what memory costs the GEMM.
    if kiln_cpu::gemm::supported() && wanted("bert layers") {
        let shapes = [(768, 2304), (768, 768), (768, 3072), (3072, 768)];
        let layer = |seed: u32| -> Vec<kiln_cpu::gemm::PackedB> {
            shapes
                .iter()
                .enumerate()
                .map(|(i, &(k, n))| {
                    let w = tensor(&[k, n], seed * 8 + i as u32).to_vec::<f32>().expect("f32");
                    kiln_cpu::gemm::PackedB::from_rows(k, n, &w).expect("sizes fit")
                })
                .collect()
        };
        let cold: Vec<Vec<kiln_cpu::gemm::PackedB>> = (0..12).map(layer).collect();
        let hot = layer(99);
        let x = tensor(&[128, 3072], 1).to_vec::<f32>().expect("f32");
        let forward = |layers: &[&Vec<kiln_cpu::gemm::PackedB>], c: &mut [f32]| {
            rayon::scope(|_| {
                kiln_cpu::par::run_awake(|| {
                    for w in layers {
                        for p in w.iter() {
                            // SAFETY: x holds 128 rows of up to 3072 values, c 128 rows of p.n().
                            unsafe { kiln_cpu::gemm::gemm(128, x.as_ptr(), p.k(), p, c.as_mut_ptr(), p.n()) }
                        }
                    }
                })
            })
        };
        let (cold, hot): (Vec<_>, Vec<_>) = (cold.iter().collect(), vec![&hot; 12]);
        let (mut c, mut d) = (vec![0.0f32; 128 * 3072], vec![0.0f32; 128 * 3072]);
        let (tc, th) = alternated_medians(9, || forward(&cold, &mut c), || forward(&hot, &mut d));
        let flops = 12.0 * 2.0 * 128.0 * shapes.iter().map(|&(k, n)| (k * n) as f64).sum::<f64>();
        report("bert layers, weights from memory", flops, tc);
        report("bert layers, weights in cache", flops, th);
    }

    // One level of Strassen's algorithm (weights packed once as its seven sums) against the
    // plain packed GEMM on bert-base's products, alternated.
    if kiln_cpu::gemm::supported() {
        let shapes: [(&str, usize, usize, usize); 5] = [
            ("strassen bert qkv [128,768]x[768,2304]", 128, 768, 2304),
            ("strassen bert ffn1 [128,768]x[768,3072]", 128, 768, 3072),
            ("strassen bert ffn2 [128,3072]x[3072,768]", 128, 3072, 768),
            ("strassen bert out [128,768]x[768,768]", 128, 768, 768),
            ("strassen odd rows [127,768]x[768,3072]", 127, 768, 3072),
        ];
        for (name, m, k, n) in shapes {
            if !wanted(name) {
                continue;
            }
            let (a, b) = (tensor(&[m, k], 1), tensor(&[k, n], 2));
            let (av, bv) = (a.to_vec::<f32>().expect("f32"), b.to_vec::<f32>().expect("f32"));
            let plain = kiln_cpu::gemm::PackedB::from_rows(k, n, &bv).expect("sizes fit");
            // SAFETY: b is a dense [k, n] matrix.
            let split = unsafe { kiln_cpu::gemm::strassen::StrassenB::pack(k, n, bv.as_ptr(), n as isize, 1) }.expect("even dims");
            let (mut c, mut d) = (vec![0.0f32; m * n], vec![0.0f32; m * n]);
            // On a worker of the pool with the others spinning, as a compiled model's steps run
            // (`par::run_awake`): called from outside, each of Strassen's eight hand-offs of work
            // woke the other thread (the plain product has one), which made it look slower.
            let awake = |f: &mut (dyn FnMut() + Send)| rayon::scope(|_| kiln_cpu::par::run_awake(f));
            let (ours, fast) = alternated_medians(
                31,
                // SAFETY: a is [m, k], c and d [m, n], all dense.
                || awake(&mut || unsafe { kiln_cpu::gemm::gemm(m, av.as_ptr(), k, &plain, c.as_mut_ptr(), n) }),
                || awake(&mut || assert!(unsafe { kiln_cpu::gemm::strassen::gemm(m, av.as_ptr(), k, &split, d.as_mut_ptr(), n) })),
            );
            let flops = 2.0 * (m * k * n) as f64;
            report(name, flops, ours);
            report("  (strassen, same shapes)", flops, fast);
            let diff = c.iter().zip(&d).map(|(x, y)| (x - y).abs()).fold(0.0f32, f32::max);
            println!("  largest difference {diff:e}, ratio {:.3}", fast / ours);
        }
    }

    // kiln's GEMM with the left side (a conv's weights [O, C]) packed once and the right side
    // (an image [C, H*W]) packed per call, against the gemm crate on the same operands:
    // resnet50's 1x1 convs.
    if kiln_cpu::gemm::supported() {
        let shapes: [(&str, usize, usize, usize); 8] = [
            ("packed-a 1x1 256->64 @56", 64, 256, 3136),
            ("packed-a 1x1 64->256 @56", 256, 64, 3136),
            ("packed-a 1x1 512->128 @28", 128, 512, 784),
            ("packed-a 1x1 128->512 @28", 512, 128, 784),
            ("packed-a 1x1 1024->256 @14", 256, 1024, 196),
            ("packed-a 1x1 256->1024 @14", 1024, 256, 196),
            ("packed-a 1x1 2048->512 @7", 512, 2048, 49),
            ("packed-a 1x1 512->2048 @7", 2048, 512, 49),
        ];
        for (name, m, k, n) in shapes {
            if !wanted(name) {
                continue;
            }
            let (a, b) = (tensor(&[m, k], 1), tensor(&[k, n], 2));
            let av = a.to_vec::<f32>().expect("f32");
            // On a 64-byte line, as a compiled program's arena places it (kiln's GEMM reads an
            // image of whole lines where it lies, and packs a misaligned one).
            let mut store = vec![0.0f32; k * n + 16];
            let skip = store.as_ptr().align_offset(64);
            store[skip..skip + k * n].copy_from_slice(&b.to_vec::<f32>().expect("f32"));
            let bv = &store[skip..skip + k * n];
            // SAFETY: a is a dense [m, k] matrix.
            let packed = unsafe { kiln_cpu::gemm::PackedA::pack(m, k, av.as_ptr(), k as isize, 1) };
            let mut c = vec![0.0f32; m * n];
            let (ours, crate_) = alternated_medians(
                21,
                // On a worker of the pool with the others spinning, as compiled steps run (see
                // `par::run_awake`; without it each call paid for waking the other thread).
                // SAFETY: b is [k, n] and c [m, n], both dense.
                || rayon::scope(|_| kiln_cpu::par::run_awake(|| unsafe { kiln_cpu::gemm::gemm_a(&packed, n, bv.as_ptr(), n as isize, 1, c.as_mut_ptr(), n) })),
                || drop(eval(&Op::MatMul, &[&a, &b]).expect("bench op runs")),
            );
            let flops = 2.0 * (m * k * n) as f64;
            report(name, flops, ours);
            report("  (gemm crate, same shapes)", flops, crate_);
            // Ours again with the weights out of cache, as a model bigger than the cache meets
            // them on every run: runs cycle through copies of them over 64 MB.
            // SAFETY: as above.
            let copies: Vec<_> = (0..(64 << 20) / (4 * m * k) + 1)
                .map(|_| unsafe { kiln_cpu::gemm::PackedA::pack(m, k, av.as_ptr(), k as isize, 1) })
                .collect();
            let mut next = 0;
            let (cold, _) = alternated_medians(
                21,
                || {
                    next += 1;
                    let w = &copies[next % copies.len()];
                    // SAFETY: as above.
                    rayon::scope(|_| kiln_cpu::par::run_awake(|| unsafe { kiln_cpu::gemm::gemm_a(w, n, bv.as_ptr(), n as isize, 1, c.as_mut_ptr(), n) }))
                },
                || {},
            );
            report("  (ours, weights out of cache)", flops, cold);
        }
    }

    // (name, C, H=W, O, k, stride, pad, groups)
    type ConvCase = (&'static str, usize, usize, usize, usize, usize, usize, usize);
    let convs: [ConvCase; 9] = [
        ("conv 7x7/2 3->64 @224", 3, 224, 64, 7, 2, 3, 1),
        ("conv 3x3 64->64 @56", 64, 56, 64, 3, 1, 1, 1),
        ("conv 1x1 256->64 @56", 256, 56, 64, 1, 1, 0, 1),
        ("conv 1x1 64->256 @56", 64, 56, 256, 1, 1, 0, 1),
        ("conv 1x1/2 256->512 @56", 256, 56, 512, 1, 2, 0, 1),
        ("conv 3x3 128->128 @28", 128, 28, 128, 3, 1, 1, 1),
        ("conv 3x3 256->256 @14", 256, 14, 256, 3, 1, 1, 1),
        ("conv 3x3 512->512 @7", 512, 7, 512, 3, 1, 1, 1),
        ("conv dw 3x3 32 @112", 32, 112, 32, 3, 1, 1, 32),
    ];
    for (name, c, hw, o, k, s, p, g) in convs {
        if !wanted(name) {
            continue;
        }
        let x = tensor(&[1, c, hw, hw], 3);
        let w = tensor(&[o, c / g, k, k], 4);
        let bias = tensor(&[o], 5);
        let a = Conv2dAttrs { stride: [s, s], padding: [p; 4], dilation: [1, 1], groups: g, channels_last: false };
        let out = (hw + 2 * p - k) / s + 1;
        let flops = 2.0 * (o * out * out * (c / g) * k * k) as f64;
        report(name, flops, median_secs(&Op::Conv2d(a), &[&x, &w, &bias]));
    }

    if wanted("maxpool") {
        let x = tensor(&[1, 64, 112, 112], 6);
        let p = Pool2dAttrs {
            kind: PoolKind::Max,
            kernel: [3, 3],
            stride: [2, 2],
            padding: [1; 4],
            dilation: [1, 1],
            ceil_mode: false,
        };
        // comparisons per output, counted as "flops" for a comparable rate
        report("maxpool 3x3/2 64@112", (64 * 56 * 56 * 9) as f64, median_secs(&Op::Pool2d(p), &[&x]));
    }
}
