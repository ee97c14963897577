//! The compiler end to end: random graphs and zoo models compiled (generated C, and the same
//! Program on the kernel-IR interpreter) against the reference interpreter; kernel counts of the
//! zoo models against eager; the disk cache (miss, hit, corrupt entry) through `compile`.

mod support;

use kiln::compile::{CompileOptions, Mode, compile, plan};
use kiln::nn::VarBuilder;
use kiln::zoo::{self, Model, bert, gpt2, resnet};
use kiln::DType;
use kiln_ir::HostTensor;
use proptest::prelude::*;
use support::random_graph::{compare, random_graph};

fn opts(cache: &std::path::Path) -> CompileOptions {
    CompileOptions { mode: Mode::Default, cache_dir: Some(cache.to_path_buf()), ..CompileOptions::default() }
}

fn shapes(xs: &[HostTensor]) -> Vec<Vec<usize>> {
    xs.iter().map(|t| t.shape().to_vec()).collect()
}

fn cache_dir(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("kiln-test-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn c_compiler_present() -> bool {
    let ok = kiln::compile::c_toolchain_works().is_ok();
    if !ok {
        eprintln!("no C compiler with OpenMP: skipping the generated-C half of this test");
    }
    ok
}

/// The Program of `plan` run by the kernel-IR interpreter equals the reference interpreter.
fn check_planned(seed: u64) -> Result<(), String> {
    let (g, xs) = random_graph(seed);
    let want = kiln_cpu::run(&g, &xs).map_err(|e| format!("seed {seed}: reference failed: {e}"))?;
    let (program, _) = plan(&g, &shapes(&xs), &CompileOptions::default()).map_err(|e| format!("seed {seed}: plan: {e}\n{g}"))?;
    let got = kiln_cpu::compiled::run_interpreted(&program, &xs).map_err(|e| format!("seed {seed}: run: {e}\n{g}"))?;
    compare(&got, &want, 1e-4, 1e-5).map_err(|e| format!("seed {seed}: {e}\n{g}"))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]
    #[test]
    fn random_graphs_planned_match_the_interpreter(seed in any::<u64>()) {
        if let Err(e) = check_planned(seed) { prop_assert!(false, "{}", e); }
    }
}

/// The graph of `seed` compiled to C equals the reference interpreter (Ok without a C compiler).
fn check_compiled(seed: u64) -> Result<(), String> {
    if !c_compiler_present() {
        return Ok(());
    }
    let (g, xs) = random_graph(seed);
    let want = kiln_cpu::run(&g, &xs).map_err(|e| format!("seed {seed}: reference: {e}"))?;
    // One cache per seed: tests run in parallel threads of one process.
    let dir = cache_dir(&format!("prop-{seed}"));
    let c = compile(&g, &shapes(&xs), &opts(&dir)).map_err(|e| format!("seed {seed}: compile: {e}\n{g}"));
    let _ = std::fs::remove_dir_all(&dir);
    let c = c?;
    let got = c.run(&xs).map_err(|e| format!("seed {seed}: run: {e}\n{g}"))?;
    compare(&got, &want, 1e-4, 1e-5)
        .map_err(|e| format!("seed {seed}: {e}\n{g}\n{}", c.report().source.clone().unwrap_or_default()))
}

proptest! {
    // Each case runs the C compiler once (~0.3 s), so fewer cases than the interpreted test.
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]
    #[test]
    fn random_graphs_compiled_to_c_match_the_interpreter(seed in any::<u64>()) {
        if let Err(e) = check_compiled(seed) { prop_assert!(false, "{}", e); }
    }
}

#[test]
fn random_graph_seeds_that_once_failed_match() {
    // 1138224827948315209: gelu as 1 + erf cancelled in the negative tail.
    // 704110680085990719: rem by a computed gelu amplified a last-ulp difference.
    // 18163234434894124650: layer norm of equal values divided a last-ulp difference of the
    // mean by sqrt(1e-5) (the generator now uses eps 0.1).
    // 14265309074092156389: sqrt of a layer norm of a padded (constant) row took the square
    // root of cancellation noise (the generator now gives sqrt/log/reciprocal raw inputs only).
    // 17381084515511446881: softmax underflow (0 vs a subnormal) divided by -0 gave NaN vs
    // -Inf (the generator now divides raw inputs only).
    // 10504653245553457351: a matmul read a reduction through its reshape, an output root of
    // the same kernel, and the reduction itself was never stored.
    // 6322962479859053688: an extern's epilogue over an output with a zero dim divided by 0
    // while splitting its row index.
    for seed in [
        1138224827948315209, 704110680085990719, 18163234434894124650, 14265309074092156389,
        6322962479859053688, 10504653245553457351, 17381084515511446881,
    ] {
        check_planned(seed).unwrap();
        check_compiled(seed).unwrap();
    }
}

fn tiny_resnet() -> resnet::ResNetConfig {
    resnet::ResNetConfig { block: resnet::BlockKind::Bottleneck, layers: [1, 1, 1, 1], base_width: 8, num_classes: 7, image_size: 32 }
}

/// Compiles a zoo model, checks it against the interpreter and returns (kernels, eager kernels).
fn check_model(m: &dyn Model, dir: &std::path::Path) -> (usize, usize) {
    let g = zoo::trace_model(m).unwrap();
    let xs: Vec<HostTensor> = m.example_inputs(3).unwrap().iter().map(|t| t.to_host().unwrap()).collect();
    let want = kiln_cpu::run(&g, &xs).unwrap();
    let (program, report) = plan(&g, &shapes(&xs), &opts(dir)).unwrap();
    let got = kiln_cpu::compiled::run_interpreted(&program, &xs).unwrap();
    compare(&got, &want, 1e-4, 1e-5).unwrap_or_else(|e| panic!("{} planned: {e}", m.name()));
    if c_compiler_present() {
        let c = compile(&g, &shapes(&xs), &opts(dir)).unwrap();
        let got = c.run(&xs).unwrap();
        compare(&got, &want, 1e-4, 1e-5).unwrap_or_else(|e| panic!("{} compiled: {e}", m.name()));
    }
    (report.kernels, report.eager_kernels)
}

#[test]
fn zoo_models_compiled_match_the_interpreter_with_far_fewer_kernels() {
    let dir = cache_dir("zoo");
    let rn = resnet::ResNet::new(VarBuilder::random(1, DType::F32), &tiny_resnet(), 2).unwrap();
    let bert = bert::Bert::new(VarBuilder::random(1, DType::F32), &bert::BertConfig::tiny(), 2, 7).unwrap();
    let gpt = gpt2::Gpt2::new(VarBuilder::random(1, DType::F32), &gpt2::Gpt2Config::tiny(), 2, 5).unwrap();
    for m in [&rn as &dyn Model, &bert, &gpt] {
        let (k, eager) = check_model(m, &dir);
        eprintln!("{}: {k} launches per run, eager {eager}", m.name());
        // Each conv is at most one launch (BN folded, bias/relu/residual in its epilogue, the
        // global pool the last conv's row epilogue; a block's last 1x1 conv and the next
        // block's first, or a stage's downsample with them, run as one where kiln's GEMM runs):
        // at least 60% fewer (today 77%; 67% with `KILN_CPU_CHAIN=0`). A transformer's matmuls carry its layer norms, GELU and bias in
        // their epilogues, and attention is one step writing the heads' merge: at least 70%
        // fewer (today bert 83%, gpt2 78%).
        let floor = if m.name().starts_with("resnet") { 60 } else { 70 };
        assert!(k * 100 <= eager * (100 - floor), "{}: {k} kernels vs {eager} eager", m.name());
    }
    // bert's attention is one step that writes the merge of its heads (no copy step after it).
    let g = zoo::trace_model(&bert).unwrap();
    let xs: Vec<HostTensor> = bert.example_inputs(3).unwrap().iter().map(|t| t.to_host().unwrap()).collect();
    let (program, _) = plan(&g, &shapes(&xs), &opts(&dir)).unwrap();
    let through = program.steps.iter().filter(|s| {
        matches!(&s.kind, kiln_sched::StepKind::Eval { op: kiln_ir::Op::Attention { .. }, out_strides: Some(_), .. })
    });
    assert_eq!(through.count(), bert::BertConfig::tiny().layers, "one attention step per layer, each writing through");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_disk_cache_hits_and_rebuilds_corrupt_entries() {
    if !c_compiler_present() {
        return;
    }
    let dir = cache_dir("cache");
    let (g, xs) = random_graph(7);
    let want = kiln_cpu::run(&g, &xs).unwrap();
    let first = compile(&g, &shapes(&xs), &opts(&dir)).unwrap();
    assert_eq!(first.report().cache.as_deref(), Some("miss"));
    let second = compile(&g, &shapes(&xs), &opts(&dir)).unwrap();
    assert_eq!(second.report().cache.as_deref(), Some("hit"));
    compare(&second.run(&xs).unwrap(), &want, 1e-4, 1e-5).unwrap();
    // Unload the library before damaging its file (writing into a mapped library is SIGBUS).
    drop((first, second));
    // Replace every compiled library in the cache by junk: the next compile notices and rebuilds.
    let mut truncated = 0;
    for entry in walk(&dir) {
        if entry.extension().is_some_and(|e| e == "so") {
            std::fs::remove_file(&entry).unwrap();
            std::fs::write(&entry, b"not a library").unwrap();
            truncated += 1;
        }
    }
    assert!(truncated >= 1, "no compiled library found under {}", dir.display());
    let third = compile(&g, &shapes(&xs), &opts(&dir)).unwrap();
    assert!(third.report().cache.as_deref().is_some_and(|c| c.starts_with("rebuilt")), "{:?}", third.report().cache);
    compare(&third.run(&xs).unwrap(), &want, 1e-4, 1e-5).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                out.extend(walk(&p));
            } else {
                out.push(p);
            }
        }
    }
    out
}

#[test]
fn eager_mode_is_the_interpreter_and_reports_every_op() {
    let (g, xs) = random_graph(11);
    let c = compile(&g, &shapes(&xs), &CompileOptions { mode: Mode::Eager, ..CompileOptions::default() }).unwrap();
    assert!(c.report().source.is_none());
    assert_eq!(c.kernels(), c.report().eager_kernels);
    compare(&c.run(&xs).unwrap(), &kiln_cpu::run(&g, &xs).unwrap(), 0.0, 0.0).unwrap();
}

/// Full-size ResNet-50 at batch 1 plans to at most a fifth of the launches eager dispatches
/// (kiln's target: 80% fewer): on a CPU where kiln's GEMM runs, every block's last 1x1 conv
/// and the next block's first run as one launch, a stage's downsample with them, on every map
/// size (177 ops eager, 35 launches). Planned only: the kernels are not compiled.
#[test]
fn resnet50_plans_to_a_fifth_of_eager_launches() {
    if !kiln_cpu::gemm::available() {
        return;
    }
    let dir = cache_dir("resnet50-plan");
    let rn = resnet::ResNet::new(VarBuilder::random(1, DType::F32), &resnet::ResNetConfig::resnet50(), 1).unwrap();
    let g = zoo::trace_model(&rn).unwrap();
    let (program, report) = plan(&g, &[vec![1, 3, 224, 224]], &opts(&dir)).unwrap();
    assert_eq!(program.launches(), report.kernels);
    assert!(report.kernels * 5 <= report.eager_kernels, "{} launches vs {} eager", report.kernels, report.eager_kernels);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn max_autotune_searches_once_then_reads_the_cache_and_stays_correct() {
    if !c_compiler_present() {
        return;
    }
    let dir = cache_dir("autotune");
    let rn = resnet::ResNet::new(VarBuilder::random(3, DType::F32), &tiny_resnet(), 2).unwrap();
    let g = zoo::trace_model(&rn).unwrap();
    let xs: Vec<HostTensor> = rn.example_inputs(3).unwrap().iter().map(|t| t.to_host().unwrap()).collect();
    let want = kiln_cpu::run(&g, &xs).unwrap();
    let tuned = |budget: f64| CompileOptions {
        mode: Mode::MaxAutotune,
        autotune_budget: Some(std::time::Duration::from_secs_f64(budget)),
        ..opts(&dir)
    };
    // No budget: nothing is searched, nothing stored.
    let none = compile(&g, &shapes(&xs), &tuned(0.0)).unwrap();
    let msg = none.report().autotune.clone().unwrap_or_default();
    assert!(msg.contains("0 tuned") && msg.contains("ran out"), "{msg}");
    compare(&none.run(&xs).unwrap(), &want, 1e-4, 1e-5).unwrap();
    // A real search, kept in the cache.
    let first = compile(&g, &shapes(&xs), &tuned(60.0)).unwrap();
    let msg = first.report().autotune.clone().unwrap_or_default();
    assert!(msg.starts_with("searched") && !msg.contains("ran out"), "{msg}");
    compare(&first.run(&xs).unwrap(), &want, 1e-4, 1e-5).unwrap_or_else(|e| panic!("autotuned: {e}"));
    let second = compile(&g, &shapes(&xs), &tuned(60.0)).unwrap();
    let msg = second.report().autotune.clone().unwrap_or_default();
    assert!(msg.starts_with("tuning from the cache"), "{msg}");
    compare(&second.run(&xs).unwrap(), &want, 1e-4, 1e-5).unwrap_or_else(|e| panic!("cached tuning: {e}"));
    // Default mode never autotunes.
    assert!(compile(&g, &shapes(&xs), &opts(&dir)).unwrap().report().autotune.is_none());
    let _ = std::fs::remove_dir_all(&dir);
}

/// The extern steps of a program and their output dtypes.
fn extern_dtypes(p: &kiln_sched::Program) -> Vec<DType> {
    p.steps
        .iter()
        .filter_map(|s| match &s.kind {
            kiln_sched::StepKind::Extern { out, .. } => Some(p.buffer(*out).dtype),
            _ => None,
        })
        .collect()
}

#[test]
fn half_models_plan_externs_only_for_cuda_and_compile_for_the_cpu() {
    let dir = cache_dir("half");
    for dt in [DType::BF16, DType::F16] {
        let rn = resnet::ResNet::new(VarBuilder::random(1, dt), &tiny_resnet(), 2).unwrap();
        let bert = bert::Bert::new(VarBuilder::random(1, dt), &bert::BertConfig::tiny(), 2, 7).unwrap();
        for m in [&rn as &dyn Model, &bert] {
            let g = zoo::trace_model(m).unwrap();
            let xs: Vec<HostTensor> = m.example_inputs(3).unwrap().iter().map(|t| t.to_host().unwrap()).collect();
            // The CPU's externs are f32 only (a model may do some matmuls in f32): its `dt`
            // matmuls and convs stay reference evals.
            let (cpu, _) = plan(&g, &shapes(&xs), &opts(&dir)).unwrap();
            let ext = extern_dtypes(&cpu);
            assert!(ext.iter().all(|&d| d == DType::F32), "{} {dt}: CPU plan: {ext:?}", m.name());
            // For CUDA (planning needs no GPU) every matmul and conv is a library call.
            let cuda = CompileOptions { device: kiln::Device::Cuda(0), ..opts(&dir) };
            let (gpu, _) = plan(&g, &shapes(&xs), &cuda).unwrap();
            let ext = extern_dtypes(&gpu);
            assert!(ext.contains(&dt) && ext.iter().all(|&d| d == dt || d == DType::F32), "{} {dt}: {ext:?}", m.name());
            let evals: Vec<String> = gpu
                .steps
                .iter()
                .filter_map(|s| match &s.kind {
                    kiln_sched::StepKind::Eval { op, .. } if matches!(op, kiln_ir::Op::MatMul | kiln_ir::Op::Conv2d(_)) => Some(op.name().to_string()),
                    _ => None,
                })
                .collect();
            assert_eq!(evals, Vec::<String>::new(), "{} {dt}: matmul/conv left to the host", m.name());
            // The CPU build of the half model matches the interpreter: both round once per op,
            // in the same order, and do matmul/conv through the same reference kernels.
            if c_compiler_present() {
                let want = kiln_cpu::run(&g, &xs).unwrap();
                let got = compile(&g, &shapes(&xs), &opts(&dir)).unwrap().run(&xs).unwrap();
                compare(&got, &want, 1e-2, 1e-2).unwrap_or_else(|e| panic!("{} {dt} compiled: {e}", m.name()));
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A small `[..]` f32 tensor of deterministic values in [-1, 1).
fn values(shape: &[usize], seed: u32) -> HostTensor {
    let n: usize = shape.iter().product();
    let v: Vec<f32> = (0..n as u32).map(|i| ((i.wrapping_mul(2654435761) ^ seed.wrapping_mul(40503)) % 2001) as f32 / 1000.0 - 1.0).collect();
    HostTensor::from_vec(v, shape).unwrap()
}

/// Convs on kiln's GEMM run their bias and epilogue on each block of the output as the GEMM
/// finishes it (the epilogue's `_cols` twin in the generated C): a 1x1 conv read in place and
/// a stride-2 3x3 one through im2col, with more output channels than one 6-row tile, more
/// pixels than one sweep of panels and a narrow last panel, and a residual in the epilogue,
/// against the reference interpreter.
#[test]
fn conv_epilogues_run_on_each_block_the_gemm_finishes() {
    use kiln_ir::{BinaryOp, Conv2dAttrs, Graph, Op, Shape, TensorType, UnaryOp};
    if !c_compiler_present() {
        return;
    }
    let dir = cache_dir("conv-blocks");
    for (c, o, hw, k, stride) in [(40, 70, 20, 1, 1), (40, 70, 21, 1, 1), (24, 13, 13, 3, 2), (9, 32, 12, 1, 1)] {
        let pad = k / 2;
        let attrs = Conv2dAttrs { stride: [stride; 2], padding: [pad; 4], dilation: [1, 1], groups: 1, channels_last: false };
        let mut g = Graph::new();
        let x = g.input("x", TensorType::new(DType::F32, Shape::fixed(&[1, c, hw, hw])));
        let w = g.constant(values(&[o, c, k, k], 1));
        let b = g.constant(values(&[o], 2));
        let y = g.add(Op::Conv2d(attrs), &[x, w, b]).unwrap();
        let dims = g.ty(y).shape.as_fixed().unwrap();
        let skip = g.input("skip", TensorType::new(DType::F32, Shape::fixed(&dims)));
        let y = g.add(Op::Binary(BinaryOp::Add), &[y, skip]).unwrap();
        let y = g.add(Op::Unary(UnaryOp::Relu), &[y]).unwrap();
        g.output(y);
        let xs = vec![values(&[1, c, hw, hw], 3), values(&dims, 4)];
        let want = kiln_cpu::run(&g, &xs).unwrap();
        let (program, _) = plan(&g, &shapes(&xs), &opts(&dir)).unwrap();
        let source = kiln_cpu::codegen::render_c(&program).unwrap();
        assert!(source.contains("_epilogue_cols("), "no column-block twin in\n{source}");
        let got = compile(&g, &shapes(&xs), &opts(&dir)).unwrap().run(&xs).unwrap();
        compare(&got, &want, 1e-4, 1e-5).unwrap_or_else(|e| panic!("c {c} o {o} {hw}x{hw} k {k} s {stride}: {e}"));
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Plans `g` for inputs `xs` and checks the program on the kernel-IR interpreter and compiled
/// to C against the reference interpreter (panicking with `case`); returns the program, its
/// report and one profiled run of the compiled steps.
fn check_both_ways(
    g: &kiln_ir::Graph,
    xs: &[HostTensor],
    dir: &std::path::Path,
    case: &str,
) -> (kiln_sched::Program, kiln::compile::CompileReport, Vec<kiln_cpu::compiled::StepTime>) {
    let want = kiln_cpu::run(g, xs).unwrap();
    let (program, report) = plan(g, &shapes(xs), &opts(dir)).unwrap();
    let got = kiln_cpu::compiled::run_interpreted(&program, xs).unwrap();
    compare(&got, &want, 1e-4, 1e-5).unwrap_or_else(|e| panic!("{case}, interpreted: {e}"));
    let compiled = compile(g, &shapes(xs), &opts(dir)).unwrap();
    compare(&compiled.run(xs).unwrap(), &want, 1e-4, 1e-5).unwrap_or_else(|e| panic!("{case}: {e}"));
    let (steps, _) = compiled.profile(xs, 1).unwrap().expect("compiled steps");
    (program, report, steps)
}

/// A 1x1 conv that reads what the conv before it stores runs inside that conv (one launch for
/// both), on each range of pixels as soon as the first conv has finished every channel of
/// them: against the reference interpreter, with the first conv read in place or through
/// im2col (stride 2), pixels in several sweeps and threads with a narrow last panel, rows of
/// pixels that are not whole cache lines, two images, the second conv's epilogue reading
/// the first one's output as its residual, and 7x7 maps of fewer pixels than channels (where
/// the pair runs one conv after the other, each split by channels). Both run with the interpreted kernels too, which
/// have no column-block epilogues and so run the pair one after the other.
#[test]
fn one_by_one_convs_run_inside_the_conv_before_them() {
    use kiln_ir::{BinaryOp, Conv2dAttrs, Graph, Op, Shape, TensorType, UnaryOp};
    if !c_compiler_present() {
        return;
    }
    let dir = cache_dir("conv-chain");
    // (images, in channels, first conv's channels, second's, input side, first conv's stride)
    // The last two have fewer pixels than channels (a 7x7 map: 4 panels, one of a column).
    for (n, c, o1, o2, hw, stride) in [
        (1, 40, 70, 24, 20, 1),
        (1, 24, 32, 32, 42, 2),
        (2, 16, 48, 16, 21, 1),
        (1, 64, 64, 64, 32, 1),
        (1, 64, 96, 32, 7, 1),
        (1, 32, 80, 80, 14, 2),
    ] {
        let attrs = |stride| Conv2dAttrs { stride: [stride; 2], padding: [0; 4], dilation: [1, 1], groups: 1, channels_last: false };
        let mut g = Graph::new();
        let x = g.input("x", TensorType::new(DType::F32, Shape::fixed(&[n, c, hw, hw])));
        let (w1, b1) = (g.constant(values(&[o1, c, 1, 1], 1)), g.constant(values(&[o1], 2)));
        let y = g.add(Op::Conv2d(attrs(stride)), &[x, w1, b1]).unwrap();
        let dims = g.ty(y).shape.as_fixed().unwrap();
        let skip = g.input("skip", TensorType::new(DType::F32, Shape::fixed(&dims)));
        let y = g.add(Op::Binary(BinaryOp::Add), &[y, skip]).unwrap();
        let y = g.add(Op::Unary(UnaryOp::Relu), &[y]).unwrap();
        let (w2, b2) = (g.constant(values(&[o2, o1, 1, 1], 3)), g.constant(values(&[o2], 4)));
        let mut z = g.add(Op::Conv2d(attrs(1)), &[y, w2, b2]).unwrap();
        if o2 == o1 {
            z = g.add(Op::Binary(BinaryOp::Add), &[z, y]).unwrap();
        }
        let z = g.add(Op::Unary(UnaryOp::Relu), &[z]).unwrap();
        g.output(y);
        g.output(z);
        let xs = vec![values(&[n, c, hw, hw], 5), values(&dims, 6)];
        let case = format!("n {n} c {c} -> {o1} -> {o2}, {hw}x{hw} s {stride}");
        let (program, report, steps) = check_both_ways(&g, &xs, &dir, &case);
        let chained: Vec<usize> = (0..program.steps.len()).filter(|&i| program.steps[i].with_previous).collect();
        assert_eq!(chained.len(), 1, "{case}: one conv chained onto the other");
        assert_eq!((report.kernels, program.launches()), (1, 1), "{case}: one launch for the pair");
        assert!(steps[chained[0]].inside_previous, "{case}: the 1x1 conv ran on its own");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A 3x3 conv on a map of fewer pixels than channels, run by Winograd's F(2x2, 3x3), leads a
/// chain (resnet50's 7x7 blocks): the conv, then the 1x1 conv of its output with a residual, one
/// launch, split by channels; against the reference interpreter, with two images.
#[test]
fn a_winograd_conv_on_a_small_map_leads_a_chain() {
    use kiln_ir::{BinaryOp, Conv2dAttrs, Graph, Op, Shape, TensorType, UnaryOp};
    if !c_compiler_present() {
        return;
    }
    let dir = cache_dir("conv-chain-f2");
    let (n, c, o2, hw) = (2, 64, 96, 7);
    let attrs = |k: usize| Conv2dAttrs { stride: [1; 2], padding: [k / 2; 4], dilation: [1, 1], groups: 1, channels_last: false };
    let mut g = Graph::new();
    let x = g.input("x", TensorType::new(DType::F32, Shape::fixed(&[n, c, hw, hw])));
    let (w1, b1) = (g.constant(values(&[c, c, 3, 3], 1)), g.constant(values(&[c], 2)));
    let y = g.add(Op::Conv2d(attrs(3)), &[x, w1, b1]).unwrap();
    let y = g.add(Op::Unary(UnaryOp::Relu), &[y]).unwrap();
    let w2 = g.constant(values(&[o2, c, 1, 1], 3));
    let z = g.add(Op::Conv2d(attrs(1)), &[y, w2]).unwrap();
    let skip = g.input("skip", TensorType::new(DType::F32, Shape::fixed(&[n, o2, hw, hw])));
    let z = g.add(Op::Binary(BinaryOp::Add), &[z, skip]).unwrap();
    let z = g.add(Op::Unary(UnaryOp::Relu), &[z]).unwrap();
    g.output(z);
    let xs = vec![values(&[n, c, hw, hw], 5), values(&[n, o2, hw, hw], 6)];
    // Winograd's rounding scales with the outputs as a whole (see kiln-cpu's conv_winograd):
    // an absolute tolerance of 1e-4 of their RMS.
    let want = kiln_cpu::run(&g, &xs).unwrap();
    let w = want[0].to_f64_vec();
    let atol = 1e-4 * (w.iter().map(|v| v * v).sum::<f64>() / w.len() as f64).sqrt();
    let (program, report) = plan(&g, &shapes(&xs), &opts(&dir)).unwrap();
    compare(&kiln_cpu::compiled::run_interpreted(&program, &xs).unwrap(), &want, 1e-4, atol).unwrap_or_else(|e| panic!("interpreted: {e}"));
    let compiled = compile(&g, &shapes(&xs), &opts(&dir)).unwrap();
    compare(&compiled.run(&xs).unwrap(), &want, 1e-4, atol).unwrap_or_else(|e| panic!("compiled: {e}"));
    let (steps, _) = compiled.profile(&xs, 1).unwrap().expect("compiled steps");
    assert_eq!((program.steps.len(), report.kernels), (2, 1), "two steps, one launch");
    assert!(steps[1].inside_previous, "the 1x1 conv ran on its own");
    let algorithms = compiled.packed_algorithms();
    if kiln_cpu::gemm::available() && std::env::var_os("KILN_DISABLE_WINOGRAD").is_none() {
        assert!(algorithms.contains(&(0, "conv winograd f2")), "{algorithms:?}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A chain of three (resnet's block entry): a 1x1 downsample conv, a 1x1 conv of another input
/// whose epilogue adds the downsample as its residual, then a 1x1 conv of that sum. All three
/// run as one launch, the later two on each range of pixels as the first finishes it (the
/// scheduler puts either of the first two first); against the reference interpreter, with
/// two images, with a map whose rows are not whole cache lines, and with a 7x7 map of fewer
/// pixels than channels (where the three run one after the other, split by channels).
#[test]
fn a_downsample_its_residual_conv_and_the_next_conv_run_as_one_launch() {
    use kiln_ir::{BinaryOp, Conv2dAttrs, Graph, Op, Shape, TensorType, UnaryOp};
    if !c_compiler_present() {
        return;
    }
    let dir = cache_dir("conv-chain3");
    // (images, x's channels and side, downsample stride, h's channels, block channels, next's)
    for (n, cx, hw, stride, ch, o, o2) in [(1, 24, 21, 1, 16, 48, 16), (2, 32, 20, 1, 8, 40, 24), (2, 40, 7, 1, 24, 72, 56)] {
        let attrs = |stride| Conv2dAttrs { stride: [stride; 2], padding: [0; 4], dilation: [1, 1], groups: 1, channels_last: false };
        let side = hw / stride;
        let mut g = Graph::new();
        let x = g.input("x", TensorType::new(DType::F32, Shape::fixed(&[n, cx, hw, hw])));
        let h = g.input("h", TensorType::new(DType::F32, Shape::fixed(&[n, ch, side, side])));
        let wd = g.constant(values(&[o, cx, 1, 1], 1));
        let ds = g.add(Op::Conv2d(attrs(stride)), &[x, wd]).unwrap();
        let (w1, b1) = (g.constant(values(&[o, ch, 1, 1], 2)), g.constant(values(&[o], 3)));
        let y = g.add(Op::Conv2d(attrs(1)), &[h, w1, b1]).unwrap();
        let y = g.add(Op::Binary(BinaryOp::Add), &[y, ds]).unwrap();
        let y = g.add(Op::Unary(UnaryOp::Relu), &[y]).unwrap();
        let w2 = g.constant(values(&[o2, o, 1, 1], 4));
        let z = g.add(Op::Conv2d(attrs(1)), &[y, w2]).unwrap();
        let z = g.add(Op::Unary(UnaryOp::Relu), &[z]).unwrap();
        g.output(y);
        g.output(z);
        let xs = vec![values(&[n, cx, hw, hw], 5), values(&[n, ch, side, side], 6)];
        let case = format!("n {n} x {cx}@{hw} s {stride}, h {ch} -> {o} -> {o2}");
        let (program, report, steps) = check_both_ways(&g, &xs, &dir, &case);
        let described: Vec<String> = program.steps.iter().map(|s| kiln_cpu::compiled::describe(&s.kind)).collect();
        assert_eq!((program.steps.len(), report.kernels), (3, 1), "{case}: three steps, one launch: {described:#?}");
        assert!(steps[1].inside_previous && steps[2].inside_previous, "{case}: the chain ran apart");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
