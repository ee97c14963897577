//! End-to-end tests of the built `kiln` binary: output, exit codes and error messages.

mod common;

use common::{assert_clean_failure, kiln, stderr, stdout};
use std::path::PathBuf;
use std::process::Command;

/// A scratch path unique to this test process.
fn scratch(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("kiln-cli-test-{}-{name}", std::process::id()))
}

#[test]
fn run_resnet18_prints_output_shape_and_finite_checksum() {
    let o = kiln(&["run", "resnet18"]);
    let out = stdout(&o);
    assert!(o.status.success(), "stdout: {out}\nstderr: {}", stderr(&o));
    let line = out
        .lines()
        .find(|l| l.starts_with("output 0:"))
        .unwrap_or_else(|| panic!("no output line in {out}"));
    assert!(line.contains("shape [1, 1000]"), "{line}");
    let abs_sum: f64 = line
        .split_whitespace()
        .skip_while(|w| *w != "abs_sum")
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no abs_sum in {line}"));
    assert!(abs_sum.is_finite() && abs_sum > 0.0, "{line}");
    assert!(out.contains("forward:"), "{out}");
}

#[test]
fn bench_json_has_the_fields_and_sane_values_with_logs_on_stderr_only() {
    let o = Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args(["bench", "resnet18", "--iters", "2", "--warmup", "0", "--threads", "1", "--json"])
        .env("KILN_LOG", "debug")
        .output()
        .unwrap();
    let out = stdout(&o);
    assert!(o.status.success(), "stdout: {out}\nstderr: {}", stderr(&o));
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 1, "one JSON line per model: {out}");
    let v: serde_json::Value = serde_json::from_str(lines[0]).expect("stdout is JSON");
    assert_eq!(v["model"], "resnet18");
    assert_eq!(v["batch"], 1);
    assert_eq!(v["device"], "cpu");
    assert_eq!(v["mode"], "eager");
    assert_eq!(v["dtype"], "f32");
    assert_eq!(v["iters"], 2);
    assert_eq!(v["threads"], 1);
    let num = |k: &str| v[k].as_f64().unwrap_or_else(|| panic!("{k} missing or not a number in {v}"));
    // Eager mode dispatches one kernel per op: exactly the op nodes of the traced forward, and
    // at least one per conv (20), batch norm (20), relu (17), residual add (8), the two pools and
    // the classifier of a torchvision-style ResNet-18.
    assert_eq!(num("kernels"), traced_op_count("resnet18") as f64, "{v}");
    assert!(num("kernels") >= 68.0, "{v}");
    assert!(num("median_ms") > 0.0, "{v}");
    assert!(num("first_call_s") > 0.0, "{v}");
    assert!(num("p10_ms") <= num("median_ms") && num("median_ms") <= num("p90_ms"), "{v}");
    // ResNet-18 has 11.7 M parameters; a forward needs at least its output and some activations.
    assert!((11.0e6..12.5e6).contains(&num("params")), "{v}");
    assert!(num("peak_mb") > 0.0 && num("peak_mb") < 4000.0, "{v}");
}

/// Op nodes (not inputs or constants) in the traced forward pass of a zoo model at batch 1.
fn traced_op_count(name: &str) -> usize {
    let model = kiln::zoo::build(name, &kiln::zoo::ModelConfig::default()).unwrap();
    let graph = kiln::zoo::trace_model(model.as_ref()).unwrap();
    graph
        .nodes
        .iter()
        .filter(|n| !matches!(n.op, kiln_ir::Op::Input { .. } | kiln_ir::Op::Constant(_)))
        .count()
}

#[test]
fn unknown_model_exits_1_and_lists_the_zoo() {
    for cmd in ["run", "bench"] {
        let o = kiln(&[cmd, "resnet-9000"]);
        let err = assert_clean_failure(&o, 1);
        for name in kiln::zoo::NAMES {
            assert!(err.contains(name), "{cmd}: {err} does not list {name}");
        }
    }
}

#[test]
fn compiled_bench_reports_compile_time_and_fewer_kernels_and_cuda_exits_2() {
    let cache = std::env::temp_dir().join(format!("kiln-cli-cache-{}", std::process::id()));
    let bench = |mode: &str| {
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_kiln"))
            .args(["bench", "resnet18", "--mode", mode, "--iters", "1", "--warmup", "0", "--json"])
            .env("KILN_CACHE_DIR", &cache)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        serde_json::from_slice::<serde_json::Value>(&o.stdout).unwrap()
    };
    let eager = bench("eager");
    let compiled = bench("default");
    assert_eq!(compiled["mode"], "default");
    assert!(compiled["compile_s"].as_f64().is_some_and(|s| s > 0.0), "{compiled}");
    assert!(eager.get("compile_s").is_none());
    let (k, e) = (compiled["kernels"].as_u64().unwrap(), eager["kernels"].as_u64().unwrap());
    assert!(k * 2 < e, "{k} compiled launches vs {e} eager");
    // The second process finds the library in the disk cache.
    let again = bench("reduce-overhead");
    assert_eq!(again["cache"], "hit", "{again}");
    assert!(again.get("autotune").is_none(), "{again}");
    // max-autotune searches once, then the next process reads its result from the cache.
    let tuned = bench("max-autotune");
    assert!(tuned["autotune"].as_str().is_some_and(|a| a.starts_with("searched")), "{tuned}");
    let tuned = bench("max-autotune");
    assert!(tuned["autotune"].as_str().is_some_and(|a| a.starts_with("tuning from the cache")), "{tuned}");
    // --profile lists the slowest steps on stderr, leaving the JSON on stdout alone.
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args(["bench", "resnet18", "--mode", "default", "--iters", "2", "--warmup", "0", "--json", "--profile", "3"])
        .env("KILN_CACHE_DIR", &cache)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("steps, median run") && err.contains("slowest 3:"), "{err}");
    let listed: Vec<&str> = err.lines().filter(|l| l.contains(" ms ") && l.contains("step ")).collect();
    assert_eq!(listed.len(), 3, "{err}");
    let kinds = ["conv2d ", "matmul ", "kernel ", "eval "];
    assert!(listed.iter().all(|l| kinds.iter().any(|k| l.contains(k))), "{err}");
    serde_json::from_slice::<serde_json::Value>(&o.stdout).unwrap();
    let _ = std::fs::remove_dir_all(&cache);
    // Without a GPU (CI) the CUDA bench fails cleanly naming what is missing; with one it runs.
    let o = kiln(&["bench", "resnet18", "--device", "cuda", "--iters", "2", "--warmup", "0"]);
    if !o.status.success() {
        let err = assert_clean_failure(&o, 1);
        assert!(err.contains("libcuda not found: install the NVIDIA driver") || err.contains("CUDA device"), "{err}");
    }
    // max-autotune on CUDA the same: it fails cleanly without a GPU, and runs with one.
    let o = kiln(&["bench", "resnet18", "--batch", "1", "--device", "cuda", "--mode", "max-autotune", "--iters", "2", "--warmup", "0"]);
    if !o.status.success() {
        let err = assert_clean_failure(&o, 1);
        assert!(err.contains("libcuda not found: install the NVIDIA driver") || err.contains("CUDA device"), "{err}");
    }
}

#[test]
fn invalid_flag_values_are_usage_errors() {
    for args in [
        &["bench", "resnet18", "--iters", "0"][..],
        &["bench", "resnet18", "--mode", "turbo"],
        &["bench", "resnet18", "--dtype", "i8"],
        &["bench", "resnet18", "--device", "tpu"],
        &["run", "resnet18", "--batch", "-1"],
        &["frobnicate"],
    ] {
        let o = kiln(args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains("error:"), "{args:?}");
    }
}

#[test]
fn doctor_says_which_gemm_runs_and_follows_kiln_strassen() {
    // The line must reflect the switch, on any CPU: forced on, forced off.
    let gemm_line = |setting: &str| {
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_kiln"))
            .arg("doctor")
            .env("KILN_STRASSEN", setting)
            .output()
            .expect("the kiln binary runs");
        assert!(o.status.success());
        let out = String::from_utf8_lossy(&o.stdout).into_owned();
        out.lines().find(|l| l.starts_with("cpu gemm:")).unwrap_or_else(|| panic!("no cpu gemm line: {out}")).to_string()
    };
    let (on, off) = (gemm_line("1"), gemm_line("0"));
    assert!(off.contains("Strassen's product: off"), "{off}");
    if kiln_cpu::gemm::available() {
        assert!(on.contains("kiln's packed GEMM") && on.contains("Strassen's product: on"), "{on}");
    } else {
        assert!(on.contains("the gemm crate") && on.contains("Strassen's product: off"), "{on}");
    }
}

#[test]
fn doctor_exits_0_and_reports_cpu_and_every_cuda_library() {
    let o = kiln(&["doctor"]);
    let out = stdout(&o);
    assert!(o.status.success(), "{out}\n{}", stderr(&o));
    let cpu = out.lines().find(|l| l.starts_with("cpu:")).unwrap_or_else(|| panic!("no cpu line: {out}"));
    assert!(cpu.len() > "cpu:".len() + 1, "{cpu}");
    for key in ["simd:", "cores:", "memory:", "openmp:", "gpu driver:", "nvidia-smi:", "cuda device:"] {
        assert!(out.lines().any(|l| l.starts_with(key)), "no {key} line: {out}");
    }
    for lib in ["libcuda.so.1", "libnvrtc.so", "libcublas.so", "libcublasLt.so", "libcudnn.so", "libnccl.so", "libnvidia-ml.so.1"] {
        let line = out
            .lines()
            .find(|l| l.trim_start().starts_with(&format!("{lib} ")))
            .unwrap_or_else(|| panic!("no {lib} line: {out}"));
        assert!(line.contains("found at /") || line.contains("found by the loader") || line.contains("missing — "), "{line}");
    }
    // The device line names the GPU, or says why there is none (the missing driver library).
    let device = out.lines().find(|l| l.starts_with("cuda device:")).unwrap_or_default();
    if kiln_cuda::Gpu::available() {
        assert!(device.contains("cuda:0 ") && device.contains("compute capability") && device.contains("GiB free of"), "{device}");
    } else {
        assert!(device.contains("none ("), "{device}");
    }
}

#[test]
fn missing_weights_file_is_a_clear_error() {
    let o = kiln(&["run", "resnet18", "--weights", "missing.safetensors"]);
    let err = assert_clean_failure(&o, 1);
    assert!(err.contains("missing.safetensors"), "{err}");
}

#[test]
fn corrupt_weights_file_is_a_clear_error() {
    let path = scratch("corrupt.safetensors");
    std::fs::write(&path, b"\xff\xff\xff\xff not a safetensors file").unwrap();
    let o = kiln(&["run", "resnet18", "--weights", path.to_str().unwrap()]);
    std::fs::remove_file(&path).unwrap();
    assert_clean_failure(&o, 1);
}

#[test]
fn weights_file_without_the_model_keys_names_a_missing_key() {
    let path = scratch("wrong-keys.safetensors");
    let t = kiln::Tensor::from_vec(vec![1.0f32, 2.0], &[2]).unwrap();
    kiln::nn::save_safetensors(&path, &[("not_a_resnet_weight".to_string(), t)]).unwrap();
    let o = kiln(&["bench", "resnet18", "--iters", "1", "--weights", path.to_str().unwrap()]);
    std::fs::remove_file(&path).unwrap();
    let err = assert_clean_failure(&o, 1);
    // ResNet's first parameter is the stem convolution, named as in torchvision.
    assert!(err.contains("conv1.weight") || err.contains("weight"), "{err}");
}

#[test]
fn serve_without_a_gpu_fails_cleanly_refuses_unknown_models_and_stops_cleanly_on_sigterm() {
    // Without a GPU, CUDA serving fails at start-up naming what is missing (exit 1); with one it
    // would serve until stopped, so that part is left to kiln-serve's CUDA serving test.
    if kiln_cuda::Gpu::available() {
        eprintln!("a CUDA device is present: skipping the no-GPU failure of serve --device cuda");
    } else {
        let err = assert_clean_failure(&kiln(&["serve", "resnet18", "--device", "cuda", "--port", "0", "--max-batch", "1"]), 1);
        assert!(err.contains("--device cuda:0: ") && (err.contains("libcuda not found") || err.contains("CUDA device")), "{err}");
    }
    let err = assert_clean_failure(&kiln(&["serve", "nope", "--port", "0"]), 1);
    assert!(err.contains("unknown model 'nope'"), "{err}");

    // A real process on a free loopback port: it says where it listens, answers, and exits 0
    // on SIGTERM.
    use std::io::{BufRead, BufReader, Read, Write};
    let mut child = Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args(["serve", "resnet18", "--port", "0", "--mode", "eager", "--max-batch", "1", "--warmup", "0"])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let addr = lines
        .by_ref()
        .map_while(Result::ok)
        .find_map(|l| l.split("listening on http://").nth(1).and_then(|r| r.split_whitespace().next()).map(str::to_string))
        .expect("no 'listening on' line");
    assert!(addr.starts_with("127.0.0.1:"), "loopback by default: {addr}");
    let mut s = std::net::TcpStream::connect(&addr).unwrap();
    s.write_all(b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).unwrap();
    assert!(resp.starts_with("HTTP/1.1 200") && resp.contains("\"live\":true"), "{resp}");
    let killed = Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap();
    assert!(killed.success());
    let status = child.wait().unwrap();
    assert!(status.success(), "exit after SIGTERM: {status:?}");
}

/// The step lines of `kiln explain --device cuda` output (the CUDA section, not the fusion groups).
fn cuda_steps(out: &str) -> Vec<&str> {
    let section = out.split_once("== CUDA steps ==").map_or("", |(_, rest)| rest);
    section.lines().filter(|l| l.trim_start().starts_with("step ")).collect()
}

/// The kernel count of the `CUDA: N steps: K kernels ...` summary.
fn cuda_kernels(out: &str) -> usize {
    let line = out.lines().find(|l| l.starts_with("CUDA: ")).unwrap_or_else(|| panic!("no CUDA summary: {out}"));
    line.split(": ").nth(2).and_then(|r| r.split_whitespace().next()).and_then(|n| n.parse().ok()).unwrap_or_else(|| panic!("{line}"))
}

#[test]
fn explain_cuda_shows_kernels_launches_and_library_calls_without_a_gpu() {
    let o = kiln(&["explain", "resnet18", "--device", "cuda", "--code"]);
    let out = stdout(&o);
    assert!(o.status.success(), "{out}\n{}", stderr(&o));
    assert!(out.contains("device: cuda:0") && out.contains("== CUDA steps ==") && out.contains("== generated CUDA C =="), "{out}");
    assert!(out.contains("__global__"), "no CUDA C in:\n{out}");
    let steps = cuda_steps(&out);
    // Convs go to cuDNN, which also adds the bias (the folded BatchNorm), the residual and the
    // ReLU; the classifier's matmul goes to cuBLASLt, which adds its bias; the global average
    // pool is a block reduction.
    assert!(steps.iter().any(|l| l.contains("cuDNN conv+bias+relu (fused)") && l.contains("conv2d, relu")), "{out}");
    assert!(steps.iter().any(|l| l.contains("cuDNN conv+bias+add+relu (fused)") && l.contains("conv2d, add, relu")), "{out}");
    assert!(steps.iter().any(|l| l.contains("cuBLASLt matmul+bias (fused)") && l.contains("matmul, add")), "{out}");
    assert!(steps.iter().any(|l| l.contains("(PerThread block 256)")), "{out}");
    assert!(steps.iter().any(|l| l.contains("PerBlock block ") && l.contains("reduce_")), "{out}");
    let fused = cuda_kernels(&out);
    assert!(fused > 0, "{out}");
    if kiln_cuda::Gpu::available() {
        assert!(out.contains("max relative difference"), "{out}");
    } else {
        assert!(out.contains("not checked (no CUDA device here)"), "{out}");
    }
    // Eager on CUDA: the unfused program, more kernels.
    let o = kiln(&["explain", "resnet18", "--device", "cuda", "--mode", "eager"]);
    let eager = stdout(&o);
    assert!(o.status.success(), "{eager}\n{}", stderr(&o));
    assert!(cuda_kernels(&eager) > fused, "eager {} vs default {fused} kernels", cuda_kernels(&eager));
}

#[test]
fn explain_cuda_of_bert_runs_attention_as_one_kernel_and_splits_norms_over_blocks() {
    let o = kiln(&["explain", "bert-base", "--device", "cuda", "--seq", "64"]);
    let out = stdout(&o);
    assert!(o.status.success(), "{out}\n{}", stderr(&o));
    let steps = cuda_steps(&out);
    // Attention over the 12 heads is kiln's one fused kernel: no score matmuls or softmax left.
    assert_eq!(steps.iter().filter(|l| l.contains("attention kernel (batch 12)")).count(), 12, "{out}");
    assert!(!steps.iter().any(|l| l.contains("reduce_max") || l.contains("strided-batched")), "{out}");
    // Layer norm rows (mean and variance over 768): one block per row.
    let reduction = |steps: &[&str], op: &str| steps.iter().any(|l| l.contains(op)) && steps.iter().filter(|l| l.contains(op)).all(|l| l.contains("PerBlock block "));
    assert!(reduction(&steps, "reduce_mean"), "{out}");
    assert!(cuda_kernels(&out) > 0);
    // Without the kernel: Q @ K^T and P @ V one strided-batched GEMM each, softmax rows a block each.
    let o = Command::new(env!("CARGO_BIN_EXE_kiln")).args(["explain", "bert-base", "--device", "cuda", "--seq", "64"]).env("KILN_CUDA_ATTENTION", "0").output().unwrap();
    let out = stdout(&o);
    assert!(o.status.success(), "{out}\n{}", stderr(&o));
    let steps = cuda_steps(&out);
    assert!(!steps.iter().any(|l| l.contains("attention kernel")), "{out}");
    assert!(steps.iter().any(|l| l.contains("cuBLAS sgemm strided-batched (batch 12)")), "{out}");
    assert!(reduction(&steps, "reduce_max"), "{out}");
}

#[test]
fn kiln_logs_output_code_prints_the_cuda_c_of_a_gpu_build() {
    if !kiln_cuda::Gpu::available() {
        eprintln!("no CUDA device: skipping KILN_LOGS=output_code on CUDA");
        return;
    }
    let o = Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args(["bench", "resnet18", "--device", "cuda", "--mode", "default", "--iters", "1", "--warmup", "0"])
        .env_remove("KILN_LOG")
        .env("KILN_LOGS", "output_code")
        .env("KILN_CACHE_DIR", std::env::temp_dir().join("kiln-cli-test-cache"))
        .output()
        .unwrap();
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    assert!(err.contains("generated CUDA C (") && err.contains("__global__"), "{err}");
}

/// `kiln explain` on the CPU lists how the externs run: resnet18's ten 3x3 stride-1 convs on
/// 56x56, 28x28 and 14x14 outputs by Winograd where kiln's GEMM runs (its three 7x7-output
/// ones and the strided ones not), and its stem on the conv tiles (with AVX-512, also its two
/// stride-2 3x3 convs of 64 or more output pixels).
#[test]
fn explain_cpu_lists_extern_algorithms() {
    let o = kiln(&["explain", "resnet18", "--device", "cpu"]);
    let out = stdout(&o);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(out.contains("== extern algorithms"), "{out}");
    let steps = |name: &str| {
        out.lines()
            .find(|l| l.trim_start().starts_with(name))
            .and_then(|l| l.split_whitespace().nth(name.split(' ').count()))
            .map(|n| n.parse::<usize>().unwrap())
    };
    let winograd = kiln_cpu::gemm::available() && std::env::var_os("KILN_DISABLE_WINOGRAD").is_none();
    assert_eq!(steps("conv winograd"), winograd.then_some(10), "{out}");
    if winograd && std::env::var_os("KILN_DISABLE_CONV_TILES").is_none() {
        #[cfg(target_arch = "x86_64")]
        let tiles = if std::arch::is_x86_feature_detected!("avx512f") { 3 } else { 1 };
        #[cfg(not(target_arch = "x86_64"))]
        let tiles = 1;
        assert_eq!(steps("conv tiles"), Some(tiles), "{out}");
    }
}
