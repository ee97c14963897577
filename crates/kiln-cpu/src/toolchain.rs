//! The system C compiler that turns generated kernels ([`crate::codegen`]) into a shared
//! library, and the loading of that library.

use kiln_ir::{Error, Result};
use std::ffi::c_void;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A compiled kernel: `f(args, begin, end)` with `args[i]` the buffer of argument `i` and
/// `begin..end` the launched range of the first outer loop.
pub type KernelFn = unsafe extern "C" fn(*const *mut c_void, i64, i64);

/// An epilogue's twin over a block of rows and columns (see [`crate::codegen::cols_name`]):
/// `(args, begin, end, cbegin, cend)`.
pub type ColsFn = unsafe extern "C" fn(*const *mut c_void, i64, i64, i64, i64);

/// Flags for every compile. No `-ffast-math` (it would break NaN/Inf semantics);
/// `-ffp-contract=off` keeps `a*b+c` two roundings, as the interpreter computes it.
/// `-fno-trapping-math` says no floating-point exception is observed (kiln never reads the
/// flags or enables traps), which changes no value; without it GCC does not if-convert a
/// float comparison on a CPU without AVX-512's masks, so a loop with a select (the prelude's
/// exp and erfc, a Where) was not vectorised at all on AVX2 (GCC 12: "control flow in loop").
const FLAGS: &[&str] = &[
    "-O3",
    "-march=native",
    "-fopenmp",
    "-fPIC",
    "-shared",
    "-fno-math-errno",
    "-fno-trapping-math",
    "-ffp-contract=off",
    "-std=gnu11",
];

/// A working C compiler with OpenMP.
#[derive(Clone, Debug)]
pub struct Toolchain {
    /// The compiler command (`$CC` or `cc`).
    pub cc: PathBuf,
    /// The first line of `cc --version`.
    pub version: String,
    /// Flags that spread the build over this machine's cores ([`parallel_flags`]; empty when
    /// the compiler is not GCC or the machine has one thread).
    pub parallel: Vec<String>,
    /// Flags that choose the vector width for this CPU ([`vector_flags`]).
    pub vector: Vec<String>,
}

/// `-mprefer-vector-width=256` for GCC or Clang on an x86-64 CPU with AVX2 (and FMA, as the
/// packed GEMM checks) but not AVX-512F, else nothing. For the first AMD Zen cores
/// (`-march=native` there is znver1/znver2), GCC prefers 128-bit vectors, since those cores
/// split each 256-bit operation in two; a loop bound by its count of operations, not by
/// memory, then takes twice the instructions per element. bert-base's GELU epilogue (the
/// prelude's erfc) is such a loop: on a Zen 1 VM its FFN1 step went 9.6-9.8 -> 8.5-8.8 ms a
/// layer with 256-bit vectors, resnet50 unchanged (`kiln bench --profile`, alternated with and
/// without). On an AVX-512 CPU the compiler's own choice stands.
pub fn vector_flags(version_text: &str, avx2: bool, avx512f: bool) -> Vec<String> {
    let known = version_text.contains("Free Software Foundation") || version_text.contains("clang");
    if cfg!(target_arch = "x86_64") && known && avx2 && !avx512f {
        vec!["-mprefer-vector-width=256".into()]
    } else {
        Vec::new()
    }
}

/// GCC's link-time optimisation in parallel partitions for a compiler whose `--version` says
/// `version_text` on a machine of `threads` threads: the one translation unit is parsed once
/// and its functions compiled by `threads` processes at once. Every kernel is its own
/// function, so each is optimised as before (resnet50's library: the same size within 0.6%);
/// GCC 12 on the 2-core VM built resnet50's 3000 lines in 1.45-1.6 s against 2.3-2.5 s (the
/// partitions' minimum size lowered so that such a file splits at all). Clang's LTO needs a
/// linker plugin that may be missing, so other compilers build as one process.
pub fn parallel_flags(version_text: &str, threads: usize) -> Vec<String> {
    let gcc = version_text.contains("Free Software Foundation") && !version_text.contains("clang");
    if !gcc || threads < 2 {
        return Vec::new();
    }
    vec![format!("-flto={threads}"), "--param=lto-min-partition=500".into()]
}

impl Toolchain {
    /// Finds the compiler (`$CC`, else `cc`) and checks that it compiles an OpenMP shared
    /// library.
    pub fn detect() -> Result<Toolchain> {
        let tc = Toolchain::find()?;
        tc.probe()?;
        Ok(tc)
    }

    /// Finds the compiler (`$CC`, else `cc`) and reads its version, without the probe compile
    /// (a warm start from the disk cache needs the compiler's identity, not a build).
    pub fn find() -> Result<Toolchain> {
        let cc = std::env::var_os("CC")
            .filter(|s| !s.is_empty())
            .map_or_else(|| PathBuf::from("cc"), PathBuf::from);
        Toolchain::identify(cc)
    }

    /// Checks the compiler `cc` (a command name or a path) as [`Toolchain::detect`] does.
    pub fn with_compiler(cc: PathBuf) -> Result<Toolchain> {
        let tc = Toolchain::identify(cc)?;
        tc.probe()?;
        Ok(tc)
    }

    /// The compiler `cc` with its version line, if `cc --version` runs.
    fn identify(cc: PathBuf) -> Result<Toolchain> {
        let out = Command::new(&cc).arg("--version").output().map_err(|e| {
            Error::Unsupported(format!(
                "no C compiler: running `{} --version` failed ({e}); install gcc (apt install gcc) or set CC",
                cc.display()
            ))
        })?;
        if !out.status.success() {
            return Err(Error::Unsupported(format!(
                "no C compiler: `{} --version` exited with {}; install gcc (apt install gcc) or set CC",
                cc.display(),
                out.status
            )));
        }
        let text = String::from_utf8_lossy(&out.stdout);
        let version = text.lines().next().unwrap_or("").trim().to_string();
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        let parallel = parallel_flags(&text, threads);
        // The packed GEMM's own CPU checks (AVX2 with FMA; AVX-512F).
        let vector = vector_flags(&text, crate::gemm::supported(), crate::gemm::avx512f());
        Ok(Toolchain { cc, version, parallel, vector })
    }

    /// A string naming the compiler, its version and the flags, for cache keys.
    pub fn id(&self) -> String {
        format!(
            "{} | {} | {} {} {}",
            self.cc.display(),
            self.version,
            FLAGS.join(" "),
            self.vector.join(" "),
            self.parallel.join(" ")
        )
    }

    /// Compiles `source` into the shared library `out`. The source is written next to it
    /// (`out` with extension `.c`) for debugging; the library is built under a temporary name
    /// and renamed, so a concurrent reader never sees a half-written file. A build with the
    /// [`parallel_flags`] that fails is tried once more without them (a GCC without its LTO
    /// plugin), whose error is the one reported.
    pub fn compile_shared(&self, source: &str, out: &Path) -> Result<()> {
        let c_path = write_source(source, out)?;
        if !self.parallel.is_empty() && self.build(&c_path, out, &self.parallel).is_ok() {
            return Ok(());
        }
        self.build(&c_path, out, &[])
    }

    /// Builds the C file `c_path` into the shared library `out` with [`FLAGS`], the
    /// [`vector_flags`] and `extra`.
    fn build(&self, c_path: &Path, out: &Path, extra: &[String]) -> Result<()> {
        let tmp = out.with_extension(format!("tmp{}.so", std::process::id()));
        let res = Command::new(&self.cc)
            .args(FLAGS)
            .args(&self.vector)
            .args(extra)
            .arg("-o")
            .arg(&tmp)
            .arg(c_path)
            .arg("-lm")
            .output()
            .map_err(|e| {
                Error::Unsupported(format!("running the C compiler {}: {e}", self.cc.display()))
            })?;
        if !res.status.success() {
            let _ = std::fs::remove_file(&tmp);
            let stderr = String::from_utf8_lossy(&res.stderr);
            let head: Vec<&str> = stderr.lines().take(20).collect();
            return Err(Error::Unsupported(format!(
                "C compiler {} failed on {} ({}):\n{}",
                self.cc.display(),
                c_path.display(),
                res.status,
                head.join("\n")
            )));
        }
        std::fs::rename(&tmp, out).map_err(|e| {
            Error::Io(format!(
                "moving {} to {}: {e}",
                tmp.display(),
                out.display()
            ))
        })
    }

    /// Compiles a tiny OpenMP kernel, so a missing `-fopenmp` runtime (libgomp) is found at
    /// detection rather than at the first real compile.
    /// Builds a tiny OpenMP shared library, to tell a usable compiler from one that is not.
    pub fn probe(&self) -> Result<()> {
        // Unique per call, so threads probing at once do not delete each other's files.
        static PROBES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = PROBES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("kiln-cc-probe-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir)
            .map_err(|e| Error::Io(format!("creating {}: {e}", dir.display())))?;
        let src = "#include <math.h>\nvoid kiln_probe(float* x, long n) {\n#pragma omp parallel for\n    for (long i = 0; i < n; i++) x[i] = sqrtf(x[i]);\n}\n";
        // Built as one process: the probe asks whether the compiler works at all, and a build
        // with the parallel flags falls back without them anyway (they cost it ~50 ms).
        let out = dir.join("probe.so");
        let res = write_source(src, &out).and_then(|c| self.build(&c, &out, &[]));
        let _ = std::fs::remove_dir_all(&dir);
        res.map_err(|e| {
            Error::Unsupported(format!(
                "the C compiler {} cannot build OpenMP shared libraries (install gcc and libgomp, or set CC): {e}",
                self.cc.display()
            ))
        })
    }
}

/// Writes `source` next to the library `out` will be (`out` with extension `.c`); returns
/// its path.
fn write_source(source: &str, out: &Path) -> Result<PathBuf> {
    let c_path = out.with_extension("c");
    std::fs::write(&c_path, source)
        .map_err(|e| Error::Io(format!("writing C source {}: {e}", c_path.display())))?;
    Ok(c_path)
}

/// A loaded shared library of kernels. The [`KernelFn`]s it hands out point into it: keep
/// the library alive as long as they are called (hold both in one struct).
#[derive(Debug)]
pub struct NativeLibrary {
    lib: libloading::Library,
    path: PathBuf,
}

impl NativeLibrary {
    /// Loads the shared library at `path`.
    pub fn load(path: &Path) -> Result<NativeLibrary> {
        // SAFETY: the library is one kiln compiled from generated C: it has no initialisers
        // beyond the C runtime's and OpenMP's.
        let lib = unsafe { libloading::Library::new(path) }
            .map_err(|e| Error::Io(format!("loading compiled kernels {}: {e}", path.display())))?;
        Ok(NativeLibrary {
            lib,
            path: path.to_path_buf(),
        })
    }

    /// The kernel function `name`.
    pub fn kernel(&self, name: &str) -> Result<KernelFn> {
        // SAFETY: every exported kernel has the `KernelFn` signature (codegen's contract).
        let sym = unsafe { self.lib.get::<KernelFn>(name.as_bytes()) }.map_err(|e| {
            Error::Unsupported(format!(
                "kernel {name} is not in the compiled library {}: {e}",
                self.path.display()
            ))
        })?;
        Ok(*sym)
    }

    /// The column-block twin of kernel `name` (see [`crate::codegen::cols_name`]), when the
    /// library has one.
    pub fn kernel_cols(&self, name: &str) -> Option<ColsFn> {
        // SAFETY: every exported `*_cols` twin has the `ColsFn` signature (codegen's contract).
        unsafe { self.lib.get::<ColsFn>(name.as_bytes()) }.ok().map(|sym| *sym)
    }

    /// Where the library was loaded from.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// The CPU's feature flags (the `flags` line of `/proc/cpuinfo`, else the features the
/// standard library detects), for cache keys: `-march=native` code is only valid on a CPU
/// with the same features.
pub fn cpu_features() -> String {
    if let Ok(info) = std::fs::read_to_string("/proc/cpuinfo")
        && let Some(line) = info
            .lines()
            .find(|l| l.starts_with("flags") || l.starts_with("Features"))
        && let Some((_, flags)) = line.split_once(':')
    {
        return flags.trim().to_string();
    }
    detected_features()
}

#[cfg(target_arch = "x86_64")]
fn detected_features() -> String {
    let mut out: Vec<&str> = Vec::new();
    macro_rules! probe {
        ($($f:tt),*) => {$(
            if std::arch::is_x86_feature_detected!($f) {
                out.push($f);
            }
        )*};
    }
    probe!(
        "sse4.2", "avx", "avx2", "fma", "f16c", "bmi2", "avx512f", "avx512bw", "avx512vl",
        "avx512dq"
    );
    out.join(" ")
}

#[cfg(not(target_arch = "x86_64"))]
fn detected_features() -> String {
    std::env::consts::ARCH.to_string()
}
