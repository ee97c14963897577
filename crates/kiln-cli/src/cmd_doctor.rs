//! `kiln doctor`: what this machine offers kiln — CPU and SIMD features, cores, memory, a working
//! C compiler for generated CPU code, the GPU and each CUDA library — and what to do about what
//! is missing. It only reports, so it always exits 0.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use kiln_cuda::{Gpu, Lib};

/// Prints the report.
pub fn doctor() {
    println!("kiln doctor (kiln {})", env!("CARGO_PKG_VERSION"));
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpu = parse_cpuinfo(&cpuinfo);
    line("cpu", &cpu_report(&cpu));
    line("simd", &simd_report(&cpu.flags));
    line("cpu gemm", &gemm_report());
    let logical = std::thread::available_parallelism().map_or(0, |n| n.get());
    let physical = cpu.physical_cores.map_or_else(|| "unknown".to_string(), |n| n.to_string());
    line("cores", &format!("{logical} logical (available to this process), {physical} physical"));
    line("rayon", &format!("{} worker threads (set with --threads or RAYON_NUM_THREADS)", rayon::current_num_threads()));
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    line("memory", &memory_report(&meminfo));
    for (label, text) in c_compiler_report() {
        line(&label, &text);
    }
    line("gpu driver", &gpu_driver_report());
    line("nvidia-smi", &nvidia_smi_report());
    line("cuda device", &cuda_device_report());
    println!("cuda libraries:");
    let dirs = library_dirs(std::env::var("LD_LIBRARY_PATH").ok().as_deref());
    let ldconfig = run_capture("ldconfig", &["-p"]).unwrap_or_default();
    for lib in Lib::ALL {
        let file = library_file(lib);
        println!("  {}", library_line(&file, Some(lib.present()), find_library(&file, &dirs, &ldconfig).as_deref(), lib.install_hint()));
    }
    for (file, hint) in OTHER_LIBS {
        println!("  {}", library_line(file, None, find_library(file, &dirs, &ldconfig).as_deref(), hint));
    }
}

/// The first CUDA device kiln would run on (name, compute capability, memory), or why there
/// is none.
fn cuda_device_report() -> String {
    if !Gpu::available() {
        return match kiln_cuda::device::libs::require(Lib::Driver) {
            Err(e) => format!("none ({e})"),
            Ok(()) => "none (the driver reports no CUDA device)".into(),
        };
    }
    let opened = Gpu::open(0).and_then(|g| {
        let mem = g.mem_info()?;
        Ok((g, mem))
    });
    let gib = |b: usize| b as f64 / (1u64 << 30) as f64;
    match opened {
        Ok((g, (free, total))) => {
            let (major, minor) = g.capability();
            format!("cuda:0 {} (compute capability {major}.{minor}), {:.1} GiB free of {:.1} GiB", g.name(), gib(free), gib(total))
        }
        Err(e) => format!("cuda:0 cannot be opened: {e}"),
    }
}

/// The file the loader finds `lib` by: the driver ships only its versioned soname
/// (`libcuda.so.1`); the toolkit libraries are looked up by their unversioned name.
fn library_file(lib: Lib) -> String {
    match lib {
        Lib::Driver => format!("{}.so.1", lib.name()),
        _ => format!("{}.so", lib.name()),
    }
}

/// One library's line: where it is and, for the ones kiln loads (`loads` is `Some`), whether
/// it loads; else what provides it.
fn library_line(file: &str, loads: Option<bool>, path: Option<&Path>, provider: &str) -> String {
    match (path, loads) {
        (Some(p), Some(false)) => format!("{file:<20} found at {}, but kiln cannot load it — install {provider}", p.display()),
        (Some(p), _) => format!("{file:<20} found at {}", p.display()),
        (None, Some(true)) => format!("{file:<20} found by the loader (not in LD_LIBRARY_PATH's or the usual dirs, nor ldconfig's cache)"),
        (None, _) => format!("{file:<20} missing — install {provider}"),
    }
}

fn line(label: &str, value: &str) {
    println!("{:<11} {value}", format!("{label}:"));
}

/// What /proc/cpuinfo says about the CPU.
#[derive(Debug, Default, PartialEq)]
struct CpuInfo {
    model: Option<String>,
    /// `cpu family` and `model` (numbers): a model name such as "AMD EPYC" covers several
    /// microarchitectures whose speeds differ twofold (Zen 1 is family 17h, Zen 3 19h).
    family: Option<(u32, u32)>,
    physical_cores: Option<usize>,
    flags: BTreeSet<String>,
}

/// Reads the model name, the flags of the first processor and the number of distinct
/// (physical id, core id) pairs, which is the physical core count.
fn parse_cpuinfo(text: &str) -> CpuInfo {
    let mut info = CpuInfo::default();
    let mut cores = BTreeSet::new();
    let mut package = None;
    let (mut family, mut number) = (None, None);
    for l in text.lines() {
        let Some((key, value)) = l.split_once(':') else { continue };
        let (key, value) = (key.trim(), value.trim());
        match key {
            "model name" if info.model.is_none() => info.model = Some(value.to_string()),
            "cpu family" if family.is_none() => family = value.parse().ok(),
            "model" if number.is_none() => number = value.parse().ok(),
            "flags" if info.flags.is_empty() => {
                info.flags = value.split_whitespace().map(str::to_string).collect();
            }
            "physical id" => package = Some(value.to_string()),
            "core id" => {
                cores.insert((package.clone(), value.to_string()));
            }
            _ => {}
        }
    }
    info.physical_cores = (!cores.is_empty()).then_some(cores.len());
    info.family = family.zip(number);
    info
}

/// The model name, with its family and model numbers in hex (as vendors write them) when
/// /proc/cpuinfo gives them.
fn cpu_report(cpu: &CpuInfo) -> String {
    let name = cpu.model.as_deref().unwrap_or("unknown (no model name in /proc/cpuinfo)");
    match cpu.family {
        Some((family, model)) => format!("{name} (family {family:02x}h, model {model:02x}h)"),
        None => name.to_string(),
    }
}

/// Which GEMM runs products by constant weights (bert's matmuls, resnet's convs), and whether
/// Strassen's product is on: both change a model's speed from one CPU to another.
fn gemm_report() -> String {
    use kiln_cpu::gemm;
    let tile = if !gemm::available() {
        "the gemm crate (kiln's packed GEMM needs AVX2 + FMA, is off on Intel AVX-512 CPUs and by KILN_DISABLE_PACKED_GEMM)"
    } else if gemm::wide() {
        "kiln's packed GEMM, AVX-512 6x64 tile"
    } else {
        "kiln's packed GEMM, AVX2 6x16 tile"
    };
    let strassen = if !gemm::available() {
        "Strassen's product: off (it runs on kiln's packed GEMM)"
    } else if gemm::strassen::enabled() {
        "Strassen's product: on (default on AMD CPUs without AVX-512; KILN_STRASSEN=0 turns it off)"
    } else {
        "Strassen's product: off (default on AMD CPUs without AVX-512; KILN_STRASSEN=1 turns it on)"
    };
    format!("{tile}; {strassen}")
}

/// The SIMD features kiln's kernels and generated C code can use, present and missing.
fn simd_report(cpuinfo_flags: &BTreeSet<String>) -> String {
    let mut have: Vec<&str> = Vec::new();
    let mut lack: Vec<&str> = Vec::new();
    #[cfg(target_arch = "x86_64")]
    {
        let detected = [
            ("sse4.2", is_x86_feature_detected!("sse4.2")),
            ("avx", is_x86_feature_detected!("avx")),
            ("avx2", is_x86_feature_detected!("avx2")),
            ("fma", is_x86_feature_detected!("fma")),
            ("f16c", is_x86_feature_detected!("f16c")),
            ("avx512f", is_x86_feature_detected!("avx512f")),
            ("avx512bw", is_x86_feature_detected!("avx512bw")),
            ("avx512vl", is_x86_feature_detected!("avx512vl")),
            ("avx512vnni", is_x86_feature_detected!("avx512vnni")),
            ("avx512bf16", is_x86_feature_detected!("avx512bf16")),
            ("avx512fp16", is_x86_feature_detected!("avx512fp16")),
        ];
        for (name, ok) in detected {
            if ok { have.push(name) } else { lack.push(name) }
        }
    }
    // AMX detection is still unstable in std, so it comes from the kernel's flags.
    for (name, flag) in [("amx-tile", "amx_tile"), ("amx-bf16", "amx_bf16"), ("amx-int8", "amx_int8")] {
        if cpuinfo_flags.contains(flag) { have.push(name) } else { lack.push(name) }
    }
    let mut out = if have.is_empty() { "none detected".to_string() } else { have.join(" ") };
    if !lack.is_empty() {
        out += &format!(" (not available: {})", lack.join(" "));
    }
    out
}

/// Total and available memory from /proc/meminfo.
fn memory_report(meminfo: &str) -> String {
    let kib = |key: &str| {
        meminfo.lines().find_map(|l| {
            let rest = l.strip_prefix(key)?.strip_prefix(':')?;
            rest.split_whitespace().next()?.parse::<u64>().ok()
        })
    };
    let gib = |k: u64| k as f64 / (1024.0 * 1024.0);
    match (kib("MemTotal"), kib("MemAvailable")) {
        (Some(t), Some(a)) => format!("{:.1} GiB total, {:.1} GiB available", gib(t), gib(a)),
        (Some(t), None) => format!("{:.1} GiB total", gib(t)),
        _ => "unknown (no /proc/meminfo)".to_string(),
    }
}

/// Runs a program and returns its stdout when it exits successfully.
fn run_capture(program: &str, args: &[&str]) -> Option<String> {
    let out = Command::new(program).args(args).output().ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

const OPENMP_PROBE: &str = r#"#include <omp.h>
#include <stdio.h>
int main(void) {
    int n = 0;
    #pragma omp parallel
    {
        #pragma omp atomic
        n++;
    }
    printf("%d\n", n);
    return 0;
}
"#;

/// Each C compiler's version, and whether the flags of kiln's CPU code generator
/// (`-O3 -march=native -fopenmp`) compile and run an OpenMP program.
fn c_compiler_report() -> Vec<(String, String)> {
    let mut lines = Vec::new();
    let mut usable = None;
    for cc in ["cc", "gcc"] {
        match run_capture(cc, &["--version"]) {
            Some(v) => {
                lines.push((cc.to_string(), v.lines().next().unwrap_or("").trim().to_string()));
                usable.get_or_insert(cc);
            }
            None => lines.push((cc.to_string(), "not found — install gcc (apt-get install gcc)".into())),
        }
    }
    let probe = match usable {
        Some(cc) => match openmp_probe(cc) {
            Ok(threads) => format!("{cc} -O3 -march=native -fopenmp: ok, OpenMP ran {threads} threads"),
            Err(why) => format!("{cc} -O3 -march=native -fopenmp: FAILED — {why}"),
        },
        None => "no C compiler: compiled CPU mode will not work; install gcc".into(),
    };
    lines.push(("openmp".into(), probe));
    lines
}

/// Compiles and runs [`OPENMP_PROBE`] in a fresh temp dir; returns the thread count it printed.
fn openmp_probe(cc: &str) -> Result<String, String> {
    let dir = std::env::temp_dir().join(format!("kiln-doctor-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let result = (|| {
        let src = dir.join("probe.c");
        let exe = dir.join("probe");
        std::fs::write(&src, OPENMP_PROBE).map_err(|e| format!("cannot write {}: {e}", src.display()))?;
        let out = Command::new(cc)
            .args(["-O3", "-march=native", "-fopenmp"])
            .arg(&src)
            .arg("-o")
            .arg(&exe)
            .output()
            .map_err(|e| format!("cannot run {cc}: {e}"))?;
        if !out.status.success() {
            let err = String::from_utf8_lossy(&out.stderr);
            return Err(format!("compile error: {}", err.lines().next().unwrap_or("").trim()));
        }
        let out = Command::new(&exe).output().map_err(|e| format!("cannot run the probe: {e}"))?;
        if !out.status.success() {
            return Err(format!("the probe exited with {}", out.status));
        }
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    })();
    let _ = std::fs::remove_dir_all(&dir);
    result
}

fn gpu_driver_report() -> String {
    match std::fs::read_to_string("/proc/driver/nvidia/version") {
        Ok(v) => v.lines().next().unwrap_or("").trim().to_string(),
        Err(_) => "no NVIDIA driver loaded (/proc/driver/nvidia/version missing); CPU only".into(),
    }
}

fn nvidia_smi_report() -> String {
    let out = Command::new("nvidia-smi")
        .args(["--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"])
        .output();
    match out {
        Err(_) => "not found".into(),
        Ok(o) if !o.status.success() => {
            format!("failed: {}", String::from_utf8_lossy(&o.stdout).lines().next().unwrap_or("").trim())
        }
        Ok(o) => {
            let gpus: Vec<String> = String::from_utf8_lossy(&o.stdout)
                .lines()
                .filter(|l| !l.trim().is_empty())
                .enumerate()
                .map(|(i, l)| format!("GPU {i}: {}", l.trim()))
                .collect();
            if gpus.is_empty() { "no GPUs listed".into() } else { gpus.join("; ") }
        }
    }
}

/// Libraries kiln's GPU support uses beyond the ones kiln-cuda loads ([`Lib::ALL`]), and
/// what provides each.
const OTHER_LIBS: [(&str, &str); 2] = [
    ("libnccl.so", "NCCL 2 (needed only for several GPUs)"),
    ("libnvidia-ml.so.1", "the NVIDIA driver, which ships NVML (GPU metrics of kiln serve)"),
];

/// Directories the dynamic loader searches, LD_LIBRARY_PATH first, as kiln's loader would.
fn library_dirs(ld_library_path: Option<&str>) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = ld_library_path
        .unwrap_or("")
        .split(':')
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .collect();
    for d in [
        "/usr/local/cuda/lib64",
        "/usr/local/cuda/targets/x86_64-linux/lib",
        "/usr/lib/x86_64-linux-gnu",
        "/usr/local/nvidia/lib64",
    ] {
        dirs.push(PathBuf::from(d));
    }
    dirs
}

/// True when `file` is `lib` itself or a versioned name of it (`libcublas.so.13`).
fn names_library(file: &str, lib: &str) -> bool {
    file.strip_prefix(lib).is_some_and(|rest| rest.is_empty() || rest.starts_with('.'))
}

/// Where `lib` is: the first of `dirs` holding it, else the `ldconfig -p` cache.
fn find_library(lib: &str, dirs: &[PathBuf], ldconfig: &str) -> Option<PathBuf> {
    for dir in dirs {
        let Ok(entries) = std::fs::read_dir(dir) else { continue };
        let mut names: Vec<String> = entries
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| names_library(n, lib))
            .collect();
        // The shortest name is the loader's own (libcuda.so.1 rather than libcuda.so.1.580.65).
        names.sort_by_key(|n| (n.len(), n.clone()));
        if let Some(n) = names.first() {
            return Some(dir.join(n));
        }
    }
    // `ldconfig -p` lines read "\tlibcuda.so.1 (libc6,x86-64) => /usr/lib/.../libcuda.so.1".
    ldconfig.lines().find_map(|l| {
        let (name, rest) = l.trim().split_once(' ')?;
        let path = rest.split_once("=>")?.1.trim();
        names_library(name, lib).then(|| Path::new(path).to_path_buf())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpuinfo_counts_distinct_physical_cores_across_packages() {
        let text = "processor\t: 0\nmodel name\t: Test CPU @ 2GHz\nflags\t\t: fpu avx2 amx_tile\nphysical id\t: 0\ncore id\t\t: 0\n\n\
                    processor\t: 1\nmodel name\t: Test CPU @ 2GHz\nflags\t\t: fpu\nphysical id\t: 0\ncore id\t\t: 0\n\n\
                    processor\t: 2\nphysical id\t: 1\ncore id\t\t: 0\n";
        let info = parse_cpuinfo(text);
        assert_eq!(info.model.as_deref(), Some("Test CPU @ 2GHz"));
        assert_eq!(info.family, None);
        assert_eq!(info.physical_cores, Some(2));
        assert!(info.flags.contains("amx_tile") && info.flags.contains("avx2"));
        assert_eq!(parse_cpuinfo("").physical_cores, None);
    }

    #[test]
    fn family_and_model_are_read_as_numbers_and_shown_in_hex() {
        let text = "processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 1\nmodel name\t: AMD EPYC\n";
        let info = parse_cpuinfo(text);
        assert_eq!(info.family, Some((25, 1)));
        assert_eq!(cpu_report(&info), "AMD EPYC (family 19h, model 01h)");
        let zen1 = parse_cpuinfo("cpu family\t: 23\nmodel\t\t: 1\nmodel name\t: AMD EPYC 7551 32-Core Processor\n");
        assert_eq!(cpu_report(&zen1), "AMD EPYC 7551 32-Core Processor (family 17h, model 01h)");
        assert_eq!(cpu_report(&CpuInfo::default()), "unknown (no model name in /proc/cpuinfo)");
    }

    #[test]
    fn amx_comes_from_cpuinfo_flags() {
        let flags: BTreeSet<String> = ["amx_bf16".to_string()].into();
        let r = simd_report(&flags);
        let (have, lack) = r.split_once("(not available").unwrap();
        assert!(have.contains("amx-bf16"));
        assert!(lack.contains("amx-tile") && lack.contains("amx-int8"));
    }

    #[test]
    fn memory_in_gib() {
        let m = "MemTotal:       25165824 kB\nMemFree: 1 kB\nMemAvailable:   12582912 kB\n";
        assert_eq!(memory_report(m), "24.0 GiB total, 12.0 GiB available");
        assert_eq!(memory_report(""), "unknown (no /proc/meminfo)");
    }

    #[test]
    fn library_names_match_versions_but_not_siblings() {
        assert!(names_library("libcublas.so", "libcublas.so"));
        assert!(names_library("libcublas.so.13", "libcublas.so"));
        assert!(!names_library("libcublasLt.so.13", "libcublas.so"));
        assert!(!names_library("libcuda.so", "libcuda.so.1"));
    }

    #[test]
    fn finds_libraries_in_dirs_first_then_ldconfig() {
        let dir = std::env::temp_dir().join(format!("kiln-doctor-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("libnccl.so.2.28.3"), b"").unwrap();
        std::fs::write(dir.join("libnccl.so.2"), b"").unwrap();
        let ldconfig = "123 libs found in cache\n\tlibcudnn.so.9 (libc6,x86-64) => /opt/cudnn/libcudnn.so.9\n";
        let dirs = vec![PathBuf::from("/nonexistent"), dir.clone()];
        assert_eq!(find_library("libnccl.so", &dirs, ldconfig), Some(dir.join("libnccl.so.2")));
        assert_eq!(find_library("libcudnn.so", &dirs, ldconfig), Some(PathBuf::from("/opt/cudnn/libcudnn.so.9")));
        assert_eq!(find_library("libnvrtc.so", &dirs, ldconfig), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn library_lines_say_where_and_what_to_install() {
        let p = Path::new("/usr/lib/libcuda.so.1");
        assert_eq!(library_file(Lib::Driver), "libcuda.so.1");
        assert_eq!(library_file(Lib::CublasLt), "libcublasLt.so");
        assert!(library_line("libcuda.so.1", Some(true), Some(p), "x").ends_with("found at /usr/lib/libcuda.so.1"));
        assert!(library_line("libcuda.so.1", Some(false), Some(p), "the driver").contains("cannot load it — install the driver"));
        assert!(library_line("libcudnn.so", Some(true), None, "x").contains("found by the loader"));
        assert!(library_line("libnccl.so", None, None, "NCCL 2").ends_with("missing — install NCCL 2"));
    }

    #[test]
    fn ld_library_path_comes_first_and_skips_empty_entries() {
        let dirs = library_dirs(Some("/a::/b"));
        assert_eq!(dirs[..2], [PathBuf::from("/a"), PathBuf::from("/b")]);
        assert!(dirs.contains(&PathBuf::from("/usr/local/cuda/lib64")));
    }
}
