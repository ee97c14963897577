//! The CUDA backend against the reference interpreter, on a real GPU. Without one (CI) each
//! test prints one line saying why it skipped and passes. Convs run in strict fp32 here
//! (`KILN_CUDA_TF32=0`), so every comparison uses the CPU compiler's tolerances.

mod support;

use kiln::compile::{CompileOptions, Compiled, Mode, compile};
use kiln::nn::VarBuilder;
use kiln::zoo::{self, Model, bert, gpt2, resnet};
use kiln::{DType, Device};
use kiln_cuda::Gpu;
use kiln_ir::HostTensor;
use support::random_graph::{compare, random_graph};

/// The GPU for one test, or `None` (after one line saying why) where there is none. The tests
/// take it one at a time: kiln does all its work on one stream per device, and a test capturing
/// a CUDA graph there (reduce-overhead) turned the other tests' work on it into errors and wrong
/// results under the harness's parallel threads.
fn gpu_or_skip(test: &str) -> Option<std::sync::MutexGuard<'static, ()>> {
    static GPU: std::sync::Mutex<()> = std::sync::Mutex::new(());
    static STRICT_FP32: std::sync::Once = std::sync::Once::new();
    // SAFETY: the first test to get here sets it while the others wait in `call_once`, before
    // any of them starts GPU work; nothing else in this binary writes the environment.
    STRICT_FP32.call_once(|| unsafe { std::env::set_var("KILN_CUDA_TF32", "0") });
    if !Gpu::available() {
        eprintln!("{test}: skipped, no CUDA GPU here (the driver library or a device is missing)");
        return None;
    }
    // A test that failed while holding it leaves nothing behind that the next one depends on.
    Some(GPU.lock().unwrap_or_else(|p| p.into_inner()))
}

fn cache_dir(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("kiln-cuda-test-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn on_gpu(mode: Mode, cache: &std::path::Path) -> CompileOptions {
    CompileOptions { mode, device: Device::Cuda(0), cache_dir: Some(cache.to_path_buf()), ..CompileOptions::default() }
}

fn shapes(xs: &[HostTensor]) -> Vec<Vec<usize>> {
    xs.iter().map(|t| t.shape().to_vec()).collect()
}

fn run_on_gpu(g: &kiln_ir::Graph, xs: &[HostTensor], mode: Mode, cache: &std::path::Path) -> Result<(Vec<HostTensor>, Compiled), String> {
    let c = compile(g, &shapes(xs), &on_gpu(mode, cache)).map_err(|e| format!("compile: {e}"))?;
    let out = c.run(xs).map_err(|e| format!("run: {e}"))?;
    Ok((out, c))
}

#[test]
fn random_graphs_on_the_gpu_match_the_interpreter() {
    let Some(_gpu) = gpu_or_skip("random_graphs_on_the_gpu_match_the_interpreter") else {
        return;
    };
    let dir = cache_dir("random");
    let mut failures = Vec::new();
    for seed in 0..200u64 {
        let (g, xs) = random_graph(seed.wrapping_mul(0x9e3779b97f4a7c15));
        let want = kiln_cpu::run(&g, &xs).unwrap();
        for mode in [Mode::Default, Mode::Eager] {
            match run_on_gpu(&g, &xs, mode, &dir).and_then(|(got, c)| {
                compare(&got, &want, 1e-4, 1e-5).map_err(|e| format!("{e}\n{}", c.report().source.clone().unwrap_or_default()))
            }) {
                Ok(()) => {}
                Err(e) => failures.push(format!("seed {seed} {mode:?}: {e}\n{g}")),
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert!(failures.is_empty(), "{} of 400 failed; first:\n{}", failures.len(), failures[0]);
}

#[test]
fn zoo_models_on_the_gpu_match_the_interpreter() {
    let Some(_gpu) = gpu_or_skip("zoo_models_on_the_gpu_match_the_interpreter") else {
        return;
    };
    let dir = cache_dir("zoo");
    let cfg = resnet::ResNetConfig { block: resnet::BlockKind::Bottleneck, layers: [1, 1, 1, 1], base_width: 8, num_classes: 7, image_size: 32 };
    let rn = resnet::ResNet::new(VarBuilder::random(1, DType::F32), &cfg, 2).unwrap();
    let bert = bert::Bert::new(VarBuilder::random(1, DType::F32), &bert::BertConfig::tiny(), 2, 7).unwrap();
    let gpt = gpt2::Gpt2::new(VarBuilder::random(1, DType::F32), &gpt2::Gpt2Config::tiny(), 2, 5).unwrap();
    for m in [&rn as &dyn Model, &bert, &gpt] {
        let g = zoo::trace_model(m).unwrap();
        let xs: Vec<HostTensor> = m.example_inputs(3).unwrap().iter().map(|t| t.to_host().unwrap()).collect();
        let want = kiln_cpu::run(&g, &xs).unwrap();
        for mode in [Mode::Default, Mode::Eager] {
            let (got, c) = run_on_gpu(&g, &xs, mode, &dir).unwrap_or_else(|e| panic!("{} {mode:?}: {e}", m.name()));
            compare(&got, &want, 1e-4, 1e-5).unwrap_or_else(|e| panic!("{} {mode:?}: {e}", m.name()));
            eprintln!("{} {mode:?}: {} launches per run", m.name(), c.kernels());
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn out_of_memory_is_an_error_with_sizes_and_the_next_call_works() {
    let Some(_gpu) = gpu_or_skip("out_of_memory_is_an_error_with_sizes_and_the_next_call_works") else {
        return;
    };
    let gpu = Gpu::open(0).unwrap();
    let before = gpu.memory_stats();
    let err = gpu.alloc(1 << 50).err().expect("a petabyte allocation must fail");
    let msg = err.to_string();
    assert!(msg.contains("out of GPU memory") && msg.contains("asked for 1073741824.0 MiB"), "{msg}");
    assert_eq!(gpu.memory_stats().allocated, before.allocated);
    // An absurd batch fails to compile with the same error; a sane one then compiles and runs.
    let dir = cache_dir("oom");
    let cfg = resnet::ResNetConfig { block: resnet::BlockKind::Basic, layers: [1, 1, 1, 1], base_width: 8, num_classes: 7, image_size: 32 };
    // 2^26 images of 3x32x32: terabytes of activations, more than any GPU has.
    let big = resnet::ResNet::new(VarBuilder::random(1, DType::F32), &cfg, 1 << 26).unwrap();
    let g = zoo::trace_model(&big).unwrap();
    let shapes = vec![vec![1 << 26, 3, 32, 32]];
    let err = compile(&g, &shapes, &on_gpu(Mode::Default, &dir)).err().expect("a 64M-image batch must not fit");
    assert!(err.to_string().contains("out of GPU memory"), "{err}");
    let small = resnet::ResNet::new(VarBuilder::random(1, DType::F32), &cfg, 2).unwrap();
    let g = zoo::trace_model(&small).unwrap();
    let xs: Vec<HostTensor> = small.example_inputs(3).unwrap().iter().map(|t| t.to_host().unwrap()).collect();
    let (got, _) = run_on_gpu(&g, &xs, Mode::Default, &dir).unwrap();
    compare(&got, &kiln_cpu::run(&g, &xs).unwrap(), 1e-4, 1e-5).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_allocator_reuses_freed_blocks_and_counts_them() {
    let Some(_gpu) = gpu_or_skip("the_allocator_reuses_freed_blocks_and_counts_them") else {
        return;
    };
    let gpu = Gpu::open(0).unwrap();
    // 37 MiB + 5: an odd size no other test of this binary asks for.
    let size = (37 << 20) + 5;
    let a = gpu.alloc(size).unwrap();
    let (ptr, s1) = (a.ptr(), gpu.memory_stats());
    assert!(a.bytes() >= size && a.bytes() % (2 << 20) == 0);
    drop(a);
    let b = gpu.alloc(size).unwrap();
    let s2 = gpu.memory_stats();
    assert_eq!(b.ptr(), ptr, "the freed block is handed out again");
    assert_eq!(s2.cache_hits, s1.cache_hits + 1);
    assert_eq!(s2.driver_allocs, s1.driver_allocs);
    assert!(s2.peak_allocated >= b.bytes());
    let t = HostTensor::from_vec((0..1000).map(|i| i as f32 * 0.5).collect(), &[10, 100]).unwrap();
    let up = gpu.upload(&t).unwrap();
    let back = gpu.download(up.ptr(), DType::F32, &[10, 100]).unwrap();
    assert_eq!(back.to_vec::<f32>().unwrap(), t.to_vec::<f32>().unwrap());
}

#[test]
fn a_corrupted_cubin_in_the_cache_is_rebuilt() {
    let Some(_gpu) = gpu_or_skip("a_corrupted_cubin_in_the_cache_is_rebuilt") else {
        return;
    };
    let dir = cache_dir("corrupt");
    let (g, xs) = random_graph(7);
    let want = kiln_cpu::run(&g, &xs).unwrap();
    let (_, c) = run_on_gpu(&g, &xs, Mode::Default, &dir).unwrap();
    assert_eq!(c.report().cache.as_deref(), Some("miss"));
    let (_, c) = run_on_gpu(&g, &xs, Mode::Default, &dir).unwrap();
    assert_eq!(c.report().cache.as_deref(), Some("hit"));
    let cubins: Vec<_> = walk(&dir).into_iter().filter(|p| p.extension().is_some_and(|e| e == "cubin")).collect();
    assert_eq!(cubins.len(), 1, "{cubins:?}");
    let mut bytes = std::fs::read(&cubins[0]).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0xff;
    std::fs::write(&cubins[0], &bytes).unwrap();
    let (got, c) = run_on_gpu(&g, &xs, Mode::Default, &dir).unwrap();
    assert!(c.report().cache.as_deref().is_some_and(|s| s.starts_with("rebuilt")), "{:?}", c.report().cache);
    compare(&got, &want, 1e-4, 1e-5).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() { out.extend(walk(&p)) } else { out.push(p) }
    }
    out
}

#[test]
fn without_a_gpu_compiling_for_cuda_names_what_is_missing() {
    if Gpu::available() {
        eprintln!("without_a_gpu_compiling_for_cuda_names_what_is_missing: skipped, this machine has a GPU");
        return;
    }
    let (g, xs) = random_graph(1);
    let err = compile(&g, &shapes(&xs), &on_gpu(Mode::Default, &cache_dir("nogpu"))).err().expect("no GPU: must fail");
    let msg = err.to_string();
    assert!(msg.contains("libcuda not found: install the NVIDIA driver") || msg.contains("CUDA device"), "{msg}");
}

#[test]
fn reduce_overhead_replays_a_cuda_graph_equal_to_plain_launches() {
    let Some(_gpu) = gpu_or_skip("reduce_overhead_replays_a_cuda_graph_equal_to_plain_launches") else {
        return;
    };
    let dir = cache_dir("graphs");
    let bert = bert::Bert::new(VarBuilder::random(1, DType::F32), &bert::BertConfig::tiny(), 2, 7).unwrap();
    let cfg = resnet::ResNetConfig { block: resnet::BlockKind::Basic, layers: [1, 1, 1, 1], base_width: 8, num_classes: 7, image_size: 32 };
    let rn = resnet::ResNet::new(VarBuilder::random(1, DType::F32), &cfg, 2).unwrap();
    for m in [&rn as &dyn Model, &bert] {
        let g = zoo::trace_model(m).unwrap();
        let plain = compile(&g, &shapes(&m_inputs(m, 3)), &on_gpu(Mode::Default, &dir)).unwrap();
        let replay = compile(&g, &shapes(&m_inputs(m, 3)), &on_gpu(Mode::ReduceOverhead, &dir)).unwrap();
        // New input values each call: the graph must read the static buffers they are copied into.
        for seed in [3, 4, 5] {
            let xs = m_inputs(m, seed);
            let want = plain.run(&xs).unwrap();
            let got = replay.run(&xs).unwrap();
            compare(&got, &want, 0.0, 0.0).unwrap_or_else(|e| panic!("{} seed {seed}: {e}", m.name()));
            compare(&got, &kiln_cpu::run(&g, &xs).unwrap(), 1e-4, 1e-5).unwrap();
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// bf16 / f16 models on the GPU: every matmul and conv goes to cuBLAS / cuDNN (none runs on
/// the host), and the outputs match the interpreter within the type's precision.
///
/// Tolerances: the interpreter does matmul/conv by widening to f32, accumulating and rounding
/// once, as cuBLAS / cuDNN with f32 compute do, but in another summation order (and cuDNN adds
/// the bias after rounding the conv), so single outputs can land one ulp apart (bf16: 8
/// significant bits, ulp 2^-8 = 3.9e-3 relative; f16: 11 bits, 4.9e-4); reductions (softmax,
/// layer norm) differ the same way. A few layers compound that to a few ulps: about 8 ulps is
/// 3e-2 for bf16 and 4e-3 for f16 (1e-2 used), with the same absolute floor for outputs near
/// zero after cancellation (residual adds, normalised activations of magnitude ~1).
#[test]
fn half_models_on_the_gpu_run_matmuls_and_convs_in_cublas_and_cudnn() {
    let Some(_gpu) = gpu_or_skip("half_models_on_the_gpu_run_matmuls_and_convs_in_cublas_and_cudnn") else {
        return;
    };
    let dir = cache_dir("half");
    let cfg = resnet::ResNetConfig { block: resnet::BlockKind::Bottleneck, layers: [1, 1, 1, 1], base_width: 8, num_classes: 7, image_size: 32 };
    for (dt, tol) in [(DType::BF16, 3e-2), (DType::F16, 1e-2)] {
        let rn = resnet::ResNet::new(VarBuilder::random(1, dt), &cfg, 2).unwrap();
        let bert = bert::Bert::new(VarBuilder::random(1, dt), &bert::BertConfig::tiny(), 2, 7).unwrap();
        let gpt = gpt2::Gpt2::new(VarBuilder::random(1, dt), &gpt2::Gpt2Config::tiny(), 2, 5).unwrap();
        for m in [&rn as &dyn Model, &bert, &gpt] {
            let g = zoo::trace_model(m).unwrap();
            let xs = m_inputs(m, 3);
            let want = kiln_cpu::run(&g, &xs).unwrap();
            let (got, c) = run_on_gpu(&g, &xs, Mode::Default, &dir).unwrap_or_else(|e| panic!("{} {dt}: {e}", m.name()));
            let on_host: Vec<String> = c.host_ops().into_iter().filter(|op| op == "matmul" || op == "conv2d").collect();
            assert!(on_host.is_empty(), "{} {dt}: ran on the host: {on_host:?} (all host ops: {:?})", m.name(), c.host_ops());
            compare(&got, &want, tol, tol).unwrap_or_else(|e| panic!("{} {dt}: {e}", m.name()));
            eprintln!("{} {dt}: {} launches per run, host ops {:?}", m.name(), c.kernels(), c.host_ops());
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Standard-normal values of `shape` in `dt` from `seed`.
fn random(shape: &[usize], dt: DType, seed: u64) -> HostTensor {
    zoo::random_normal(shape, dt, seed).unwrap().to_host().unwrap()
}

/// A ResNet block with per-channel BatchNorms of random parameters: `relu(bn(conv(relu(bn(conv(x))))) + bn(conv1x1(x)))`.
fn conv_bn_block() -> (kiln_ir::Graph, Vec<HostTensor>) {
    use kiln_ir::{BinaryOp, Conv2dAttrs, Graph, Op, Shape, TensorType, UnaryOp};
    let rand = |shape: &[usize], seed: u64| random(shape, DType::F32, seed);
    let mut g = Graph::new();
    let x = g.input("x", TensorType::new(DType::F32, Shape::fixed(&[2, 8, 10, 10])));
    let mut seed = 10;
    let mut conv_bn = |g: &mut Graph, x, k: usize, pad: usize| {
        seed += 10;
        let attrs = Conv2dAttrs { stride: [1, 1], padding: [pad; 4], dilation: [1, 1], groups: 1, channels_last: false };
        let w = g.constant(rand(&[8, 8, k, k], seed));
        let y = g.add(Op::Conv2d(attrs), &[x, w]).unwrap();
        let var = HostTensor::from_vec(rand(&[8], seed + 4).to_f64_vec().iter().map(|v| (v.abs() + 0.5) as f32).collect::<Vec<f32>>(), &[8]).unwrap();
        let p: Vec<_> = [rand(&[8], seed + 1), rand(&[8], seed + 2), rand(&[8], seed + 3), var].into_iter().map(|t| g.constant(t)).collect();
        g.add(Op::BatchNorm { eps: 1e-5 }, &[y, p[0], p[1], p[2], p[3]]).unwrap()
    };
    let a = conv_bn(&mut g, x, 3, 1);
    let a = g.add(Op::Unary(UnaryOp::Relu), &[a]).unwrap();
    let b = conv_bn(&mut g, a, 3, 1);
    let d = conv_bn(&mut g, x, 1, 0);
    let sum = g.add(Op::Binary(BinaryOp::Add), &[b, d]).unwrap();
    let out = g.add(Op::Unary(UnaryOp::Relu), &[sum]).unwrap();
    g.output(out);
    (g, vec![rand(&[2, 8, 10, 10], 1)])
}

#[test]
fn conv_bn_add_relu_runs_inside_cudnn_calls_and_matches_the_interpreter() {
    let Some(_gpu) = gpu_or_skip("conv_bn_add_relu_runs_inside_cudnn_calls_and_matches_the_interpreter") else {
        return;
    };
    let dir = cache_dir("conv-fusion");
    let (g, xs) = conv_bn_block();
    let want = kiln_cpu::run(&g, &xs).unwrap();
    for mode in [Mode::Default, Mode::ReduceOverhead] {
        let (got, c) = run_on_gpu(&g, &xs, mode, &dir).unwrap();
        compare(&got, &want, 1e-4, 1e-5).unwrap_or_else(|e| panic!("{mode:?}: {e}"));
        // BatchNorm went into the weights, bias and ReLU into the first conv's cuDNN call: the
        // one generated kernel is the last add + ReLU, which writes the NCHW output from the
        // channels-last convs.
        let source = c.report().source.clone().unwrap_or_default();
        assert_eq!(source.matches("__global__").count(), 1, "{mode:?}:\n{source}");
        assert!(c.host_ops().is_empty(), "{:?}", c.host_ops());
        // Beyond the weights and the input a run uses the arena and cuDNN's workspace (no cuBLAS
        // here).
        let working = c.device_working_bytes().unwrap();
        let floor = c.report().arena_bytes;
        assert!(working >= floor && working < floor + (64 << 20), "{working} vs {floor}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The algorithms cuDNN ranked for each conv are stored in the cache (one line per conv
/// signature), so the next process asks cuDNN nothing; a damaged entry is written again
/// whole, and the compiles around it still match the interpreter.
#[test]
fn cudnn_conv_rankings_are_stored_in_the_cache_and_a_damaged_entry_is_rewritten() {
    let Some(_gpu) = gpu_or_skip("cudnn_conv_rankings_are_stored_in_the_cache_and_a_damaged_entry_is_rewritten") else {
        return;
    };
    let dir = cache_dir("conv-algos");
    let (g, xs) = conv_bn_block();
    let want = kiln_cpu::run(&g, &xs).unwrap();
    let blob = || walk(&dir.join("cudnn-conv-algos")).into_iter().find(|p| p.file_name().is_some_and(|n| n == "blob.bin"));
    let signatures = |path: &std::path::Path| -> Vec<String> {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        text.lines().filter(|l| l.contains('\t') && l.contains(" x[")).map(str::to_string).collect()
    };
    let (got, _) = run_on_gpu(&g, &xs, Mode::Default, &dir).unwrap();
    compare(&got, &want, 1e-4, 1e-5).unwrap();
    let path = blob().unwrap_or_else(|| panic!("no cuDNN ranking entry under {}: {:?}", dir.display(), walk(&dir)));
    // The block's convs have two signatures (the 3x3 pair share one, the 1x1 has its own).
    let lines = signatures(&path);
    assert!(lines.len() >= 2, "{lines:?}");
    assert!(lines.iter().all(|l| l.split('\t').nth(1).is_some_and(|algos| algos.split(' ').all(|a| a.split_once(':').is_some()))), "{lines:?}");
    std::fs::write(&path, b"damaged").unwrap();
    let (got, _) = run_on_gpu(&g, &xs, Mode::Default, &dir).unwrap();
    compare(&got, &want, 1e-4, 1e-5).unwrap();
    assert_eq!(signatures(&path).len(), lines.len(), "the damaged entry was not written again");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `[relu](x @ w + bias)` over a batch of rows, the bias per column or one literal: cuBLASLt
/// adds the bias and applies the ReLU inside the GEMM (no generated kernel is left), and the
/// results equal the interpreter's, NaN and infinities in `x` included (a NaN stays NaN
/// through the ReLU).
#[test]
fn linear_bias_and_relu_run_inside_cublaslt_and_match_the_interpreter() {
    let Some(_gpu) = gpu_or_skip("linear_bias_and_relu_run_inside_cublaslt_and_match_the_interpreter") else {
        return;
    };
    use kiln_ir::{BinaryOp, Graph, Op, Shape, TensorType, UnaryOp};
    let dir = cache_dir("gemm-fusion");
    for (dt, tol) in [(DType::F32, 1e-5), (DType::BF16, 3e-2)] {
        for (column, relu) in [(true, false), (true, true), (false, true)] {
            let mut g = Graph::new();
            let x = g.input("x", TensorType::new(dt, Shape::fixed(&[2, 3, 16])));
            let w = g.constant(random(&[16, 8], dt, 5));
            let b = g.constant(if column { random(&[8], dt, 6) } else { kiln_cpu::eval(&Op::Cast(dt), &[&HostTensor::from_vec(vec![0.25f32], &[]).unwrap()]).unwrap() });
            let m = g.add(Op::MatMul, &[x, w]).unwrap();
            let mut y = g.add(Op::Binary(BinaryOp::Add), &[m, b]).unwrap();
            if relu {
                y = g.add(Op::Unary(UnaryOp::Relu), &[y]).unwrap();
            }
            g.output(y);
            let mut xv = random(&[2, 3, 16], DType::F32, 7).to_f64_vec();
            (xv[0], xv[20], xv[40]) = (f64::NAN, f64::INFINITY, f64::NEG_INFINITY);
            let xs = vec![kiln_cpu::eval(&Op::Cast(dt), &[&HostTensor::from_vec(xv, &[2, 3, 16]).unwrap()]).unwrap()];
            let want = kiln_cpu::run(&g, &xs).unwrap();
            let what = format!("{dt} column bias {column} relu {relu}");
            for mode in [Mode::Default, Mode::ReduceOverhead] {
                let (got, c) = run_on_gpu(&g, &xs, mode, &dir).unwrap_or_else(|e| panic!("{what}: {e}"));
                compare(&got, &want, tol, tol).unwrap_or_else(|e| panic!("{what} {mode:?}: {e}"));
                let source = c.report().source.clone().unwrap_or_default();
                assert_eq!(source.matches("__global__").count(), 0, "{what}: the bias add is left as a kernel:\n{source}");
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Attention runs as kiln's one fused kernel (the optimised graph keeps the op; no generated
/// kernel is left) and equals the interpreter: keys past one tile and query rows past one block,
/// head dims that are not multiples of 4, causal masks with more queries than keys (rows that
/// see no key are NaN, as the decomposition's softmax makes them), additive masks broadcast
/// over heads with -inf entries, k and v broadcast over the batch, 16-bit types, NaN and Inf
/// in the inputs, and q, k, v read as strided heads of one projection.
#[test]
fn attention_runs_as_one_fused_kernel_and_matches_the_interpreter() {
    let Some(_gpu) = gpu_or_skip("attention_runs_as_one_fused_kernel_and_matches_the_interpreter") else {
        return;
    };
    use kiln_ir::{Graph, Op, Shape, SliceAxis, TensorType};
    let dir = cache_dir("attention");
    let cast = |t: HostTensor, dt: DType| kiln_cpu::eval(&Op::Cast(dt), &[&t]).unwrap();
    // (dtype, q, k, v, mask shape, causal, specials)
    let cases: [(DType, [usize; 4], [usize; 4], [usize; 4], Option<Vec<usize>>, bool, bool); 7] = [
        (DType::F32, [2, 3, 7, 64], [2, 3, 130, 64], [2, 3, 130, 64], None, false, false),
        (DType::F32, [1, 2, 40, 16], [1, 2, 40, 16], [1, 2, 40, 24], None, true, false),
        (DType::F32, [1, 1, 70, 5], [1, 1, 33, 5], [1, 1, 33, 3], None, true, false),
        (DType::BF16, [2, 2, 128, 64], [2, 2, 128, 64], [2, 2, 128, 64], Some(vec![2, 1, 128, 128]), false, false),
        (DType::F16, [2, 3, 33, 32], [1, 3, 65, 32], [1, 3, 65, 32], Some(vec![33, 65]), true, false),
        (DType::F32, [2, 2, 9, 8], [2, 2, 9, 8], [2, 2, 9, 8], None, false, true),
        (DType::F32, [2, 4, 128, 64], [2, 4, 128, 64], [2, 4, 128, 64], None, false, false),
    ];
    for (i, (dt, qs, ks, vs, mask, causal, specials)) in cases.into_iter().enumerate() {
        let mut g = Graph::new();
        let ty = |s: &[usize]| TensorType::new(dt, Shape::fixed(s));
        let (q, k, v) = (g.input("q", ty(&qs)), g.input("k", ty(&ks)), g.input("v", ty(&vs)));
        let mut args = vec![q, k, v];
        let mut xs = vec![random(&qs, DType::F32, 11 + i as u64), random(&ks, DType::F32, 21 + i as u64), random(&vs, DType::F32, 31 + i as u64)];
        if let Some(ms) = &mask {
            args.push(g.input("mask", ty(ms)));
            // Every 7th entry masked out entirely.
            let vals: Vec<f64> = random(ms, DType::F32, 41).to_f64_vec().into_iter().enumerate().map(|(j, x)| if j % 7 == 3 { f64::NEG_INFINITY } else { x }).collect();
            xs.push(HostTensor::from_vec(vals, ms).unwrap());
        }
        if specials {
            let mut qv = xs[0].to_f64_vec();
            qv[8 * 2] = f64::NAN; // row 2 of the first head: NaN scores
            let mut vv = xs[2].to_f64_vec();
            vv[8 * 9 + 3] = f64::INFINITY; // the second head's first value row
            xs[0] = HostTensor::from_vec(qv, &qs).unwrap();
            xs[2] = HostTensor::from_vec(vv, &vs).unwrap();
        }
        let xs: Vec<HostTensor> = xs.into_iter().map(|t| cast(t, dt)).collect();
        let a = g.add(Op::Attention { causal, scale: if i == 1 { Some(0.3) } else { None } }, &args).unwrap();
        g.output(a);
        let want = kiln_cpu::run(&g, &xs).unwrap();
        let tol = if dt == DType::F32 { 1e-5 } else { 2e-2 };
        for mode in [Mode::Default, Mode::ReduceOverhead, Mode::Eager] {
            let what = format!("case {i} ({dt} q {qs:?} k {ks:?} v {vs:?} mask {mask:?} causal {causal}) {mode:?}");
            let (got, c) = run_on_gpu(&g, &xs, mode, &dir).unwrap_or_else(|e| panic!("{what}: {e}"));
            compare(&got, &want, tol, tol).unwrap_or_else(|e| panic!("{what}: {e}"));
            if mode != Mode::Eager {
                let kept = c.report().optimized.as_ref().map_or(0, |o| o.nodes.iter().filter(|n| matches!(n.op, Op::Attention { .. })).count());
                assert_eq!(kept, 1, "{what}: attention was decomposed");
                let source = c.report().source.clone().unwrap_or_default();
                assert_eq!(source.matches("__global__").count(), 0, "{what}: generated kernels are left:\n{source}");
            }
        }
    }
    // bert's heads: q, k, v strided views of one [b, s, 3 * h * d] projection.
    let mut g = Graph::new();
    let x = g.input("x", TensorType::new(DType::F32, Shape::fixed(&[2, 10, 3 * 4 * 16])));
    let head = |g: &mut Graph, i: i64| {
        let s = g.add(Op::Slice(vec![SliceAxis::FULL, SliceAxis::FULL, SliceAxis { start: i * 64, end: (i + 1) * 64, step: 1 }]), &[x]).unwrap();
        let r = g.add(Op::Reshape(Shape::fixed(&[2, 10, 4, 16])), &[s]).unwrap();
        g.add(Op::Permute(vec![0, 2, 1, 3]), &[r]).unwrap()
    };
    let (q, k, v) = (head(&mut g, 0), head(&mut g, 1), head(&mut g, 2));
    let a = g.add(Op::Attention { causal: false, scale: None }, &[q, k, v]).unwrap();
    g.output(a);
    // And the heads merged back ([b, s, h * d]) into a matmul: the kernel writes the merge.
    let p = g.add(Op::Permute(vec![0, 2, 1, 3]), &[a]).unwrap();
    let merged = g.add(Op::Reshape(Shape::fixed(&[2, 10, 64])), &[p]).unwrap();
    let w = g.constant(random(&[64, 8], DType::F32, 52));
    let y = g.add(Op::MatMul, &[merged, w]).unwrap();
    g.output(y);
    let xs = vec![random(&[2, 10, 192], DType::F32, 51)];
    let want = kiln_cpu::run(&g, &xs).unwrap();
    let (got, _) = run_on_gpu(&g, &xs, Mode::Default, &dir).unwrap_or_else(|e| panic!("strided heads: {e}"));
    compare(&got, &want, 1e-5, 1e-5).unwrap_or_else(|e| panic!("strided heads: {e}"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn grouped_and_depthwise_convs_run_channels_last_on_the_gpu_as_the_interpreter() {
    use kiln_ir::{Conv2dAttrs, Graph, Op, Shape, TensorType, UnaryOp};
    let Some(_gpu) = gpu_or_skip("grouped_and_depthwise_convs_run_channels_last_on_the_gpu_as_the_interpreter") else {
        return;
    };
    let dir = cache_dir("grouped");
    for dtype in [DType::F32, DType::BF16] {
        let rand = |shape: &[usize], seed: u64| random(shape, dtype, seed);
        let mut g = Graph::new();
        let x = g.input("x", TensorType::new(dtype, Shape::fixed(&[2, 3, 17, 17])));
        let mut v = x;
        // (out channels, in channels per group, kernel, stride, groups): a stem, a depthwise
        // conv (stride 2, padded), a grouped conv and a channel-multiplier depthwise conv.
        for (i, (o, cg, k, s, groups)) in [(16, 3, 3, 1, 1), (16, 1, 3, 2, 16), (24, 8, 1, 1, 2), (48, 1, 3, 1, 24)].into_iter().enumerate() {
            let attrs = Conv2dAttrs { stride: [s, s], padding: [k / 2; 4], dilation: [1, 1], groups, channels_last: false };
            let w = g.constant(rand(&[o, cg, k, k], 10 + i as u64));
            let b = g.constant(rand(&[o], 20 + i as u64));
            let y = g.add(Op::Conv2d(attrs), &[v, w, b]).unwrap();
            v = g.add(Op::Unary(UnaryOp::Relu), &[y]).unwrap();
        }
        g.output(v);
        let xs = vec![rand(&[2, 3, 17, 17], 1)];
        let want = kiln_cpu::run(&g, &xs).unwrap();
        let (got, c) = run_on_gpu(&g, &xs, Mode::Default, &dir).unwrap_or_else(|e| panic!("{dtype}: {e}"));
        assert!(c.host_ops().is_empty(), "{dtype}: {:?}", c.host_ops());
        let tol = if dtype == DType::F32 { 1e-4 } else { 3e-2 };
        compare(&got, &want, tol, tol).unwrap_or_else(|e| panic!("{dtype}: {e}"));
    }
    let _ = std::fs::remove_dir_all(&dir);
}

fn m_inputs(m: &dyn Model, seed: u64) -> Vec<HostTensor> {
    m.example_inputs(seed).unwrap().iter().map(|t| t.to_host().unwrap()).collect()
}

#[test]
fn a_gather_index_out_of_range_is_an_error_and_the_next_run_works() {
    let Some(_gpu) = gpu_or_skip("a_gather_index_out_of_range_is_an_error_and_the_next_run_works") else {
        return;
    };
    let dir = cache_dir("gather");
    let mut g = kiln_ir::Graph::new();
    let table = g.input("table", kiln_ir::TensorType::new(DType::F32, kiln_ir::Shape::fixed(&[5, 3])));
    let ids = g.input("ids", kiln_ir::TensorType::new(DType::I64, kiln_ir::Shape::fixed(&[2, 2])));
    let out = g.add(kiln_ir::Op::Gather { axis: 0 }, &[table, ids]).unwrap();
    g.output(out);
    let t = HostTensor::from_vec((0..15).map(|i| i as f32).collect(), &[5, 3]).unwrap();
    let ok = HostTensor::from_vec(vec![4i64, -1, 0, 2], &[2, 2]).unwrap();
    let bad = HostTensor::from_vec(vec![4i64, 5, 0, 2], &[2, 2]).unwrap();
    let c = compile(&g, &[vec![5, 3], vec![2, 2]], &on_gpu(Mode::Default, &dir)).unwrap();
    let want = kiln_cpu::run(&g, &[t.clone(), ok.clone()]).unwrap();
    compare(&c.run(&[t.clone(), ok.clone()]).unwrap(), &want, 0.0, 0.0).unwrap();
    let err = c.run(&[t.clone(), bad]).err().expect("index 5 of 5 rows must fail");
    assert!(err.to_string().contains("out of range"), "{err}");
    compare(&c.run(&[t, ok]).unwrap(), &want, 0.0, 0.0).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

/// A small bottleneck ResNet and a tiny BERT: convs (with fused and unfused epilogues), matmuls
/// (plain and batched), pointwise and reduction kernels — every kind of knob max-autotune sets.
fn tunable_models() -> Vec<Box<dyn Model>> {
    let cfg = resnet::ResNetConfig { block: resnet::BlockKind::Bottleneck, layers: [1, 1, 1, 1], base_width: 8, num_classes: 7, image_size: 32 };
    vec![
        Box::new(resnet::ResNet::new(VarBuilder::random(1, DType::F32), &cfg, 2).unwrap()),
        Box::new(bert::Bert::new(VarBuilder::random(1, DType::F32), &bert::BertConfig::tiny(), 2, 7).unwrap()),
    ]
}

#[test]
fn max_autotune_on_the_gpu_matches_the_interpreter_and_the_next_compile_reads_its_cache() {
    let Some(_gpu) = gpu_or_skip("max_autotune_on_the_gpu_matches_the_interpreter_and_the_next_compile_reads_its_cache") else {
        return;
    };
    let dir = cache_dir("autotune");
    for m in tunable_models() {
        let g = zoo::trace_model(m.as_ref()).unwrap();
        let xs = m_inputs(m.as_ref(), 3);
        let want = kiln_cpu::run(&g, &xs).unwrap();
        let (got, c) = run_on_gpu(&g, &xs, Mode::MaxAutotune, &dir).unwrap();
        let said = c.report().autotune.clone().unwrap_or_default();
        assert!(said.starts_with("searched "), "{}: {said}", m.name());
        compare(&got, &want, 1e-4, 1e-5).unwrap_or_else(|e| panic!("{} tuned: {e}", m.name()));
        // The next compile (as the next process would) reads the tuning and computes the same.
        let (again, c2) = run_on_gpu(&g, &xs, Mode::MaxAutotune, &dir).unwrap();
        let said2 = c2.report().autotune.clone().unwrap_or_default();
        assert!(said2.starts_with("tuning from the cache"), "{}: {said2}", m.name());
        compare(&again, &got, 0.0, 0.0).unwrap_or_else(|e| panic!("{} from the cache: {e}", m.name()));
        eprintln!("{}: {said} | {said2}", m.name());
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn every_autotune_candidate_computes_what_the_interpreter_does() {
    use kiln_cuda::exec::{GpuStepTuning, GpuTuning};
    let Some(_gpu) = gpu_or_skip("every_autotune_candidate_computes_what_the_interpreter_does") else {
        return;
    };
    let dir = cache_dir("candidates");
    let cache = kiln_sched::DiskCache::open(&dir).unwrap();
    let gpu = Gpu::open(0).unwrap();
    let (mut blocks, mut algos, mut lts, mut refused) = (0, 0, 0, Vec::new());
    for m in tunable_models() {
        let g = zoo::trace_model(m.as_ref()).unwrap();
        let xs = m_inputs(m.as_ref(), 3);
        let want = kiln_cpu::run(&g, &xs).unwrap();
        let (program, _) = kiln::compile::plan(&g, &shapes(&xs), &on_gpu(Mode::MaxAutotune, &dir)).unwrap();
        let mut exe = kiln_cuda::Executable::new(program, &gpu, &cache).unwrap();
        let n = exe.program().steps.len();
        for i in 0..n {
            for c in exe.candidates(i).unwrap() {
                let mut t = GpuTuning { steps: vec![GpuStepTuning::default(); n] };
                t.steps[i] = c;
                match exe.set_tuning(&t).and_then(|_| exe.run(&xs)) {
                    Ok(got) => compare(&got, &want, 1e-4, 1e-5).unwrap_or_else(|e| panic!("{} step {i} {c:?}: {e}", m.name())),
                    Err(e) => refused.push(format!("{} step {i} {c:?}: {e}", m.name())),
                }
                blocks += usize::from(c.block.is_some() || c.spread.is_some() || c.epilogue_block.is_some());
                algos += usize::from(c.conv_algo.is_some());
                lts += usize::from(c.lt_algo.is_some());
            }
        }
        // Back to the built-in choices, which still work after every candidate.
        exe.set_tuning(&GpuTuning::default()).unwrap();
        compare(&exe.run(&xs).unwrap(), &want, 1e-4, 1e-5).unwrap();
    }
    eprintln!("candidates run: {blocks} launch shapes, {algos} cuDNN algorithms, {lts} cuBLASLt configurations");
    assert!(blocks > 10 && algos > 5 && lts > 50, "too few candidates to test: {blocks} {algos} {lts}");
    // The search offers only candidates that run: none may fail.
    assert!(refused.is_empty(), "{} of {} failed: {refused:#?}", refused.len(), blocks + algos + lts);
    let _ = std::fs::remove_dir_all(&dir);
}
