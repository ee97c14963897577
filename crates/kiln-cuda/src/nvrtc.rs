//! CUDA C to device code with NVRTC: a cubin for the device's `sm_XX`, built once per source
//! and kept in kiln's disk cache (keyed on the source, the options, the NVRTC version and the
//! architecture), so a warm start loads it without compiling.

use crate::device::libs::{Lib, require};
use cudarc::nvrtc::{result, sys};
use kiln_ir::{Error, Result};
use kiln_sched::{CacheKey, CacheOutcome, DiskCache};
use std::ffi::CString;

/// NVRTC's `(major, minor)` version.
pub fn version() -> Result<(i32, i32)> {
    require(Lib::Nvrtc)?;
    let (mut major, mut minor) = (0, 0);
    // SAFETY: two out-parameters.
    unsafe { sys::nvrtcVersion(&mut major, &mut minor) }
        .result()
        .map_err(|e| Error::Device(format!("nvrtcVersion: {e:?}")))?;
    Ok((major, minor))
}

/// Compiles `source` for `sm_{arch}` (e.g. `90`) with `options` (besides the architecture)
/// into a cubin. A compile error carries NVRTC's log.
pub fn compile_cubin(source: &str, arch: u32, options: &[&str]) -> Result<Vec<u8>> {
    require(Lib::Nvrtc)?;
    let src = CString::new(source).map_err(|_| Error::Device("CUDA source holds a NUL byte".into()))?;
    let prog = result::create_program(&src, Some(c"kiln.cu")).map_err(|e| Error::Device(format!("nvrtcCreateProgram: {e:?}")))?;
    // The architecture is the device's, whatever `options` name.
    let mut opts: Vec<String> = vec![format!("--gpu-architecture=sm_{arch}")];
    opts.extend(options.iter().filter(|o| !o.starts_with("--gpu-architecture")).map(|s| s.to_string()));
    // SAFETY: `prog` is live until destroyed below; `src` outlives it.
    let built = unsafe {
        let compiled = result::compile_program(prog, &opts);
        let out = match compiled {
            Ok(()) => cubin(prog),
            Err(e) => {
                let log = result::get_program_log(prog).map(|l| c_text(&l)).unwrap_or_default();
                Err(Error::Device(format!("NVRTC could not compile the generated CUDA C ({e:?}):\n{}", first_lines(&log, 40))))
            }
        };
        let _ = result::destroy_program(prog);
        out
    };
    built
}

/// The cubin of a compiled program.
///
/// # Safety
/// `prog` must be a live, successfully compiled program.
unsafe fn cubin(prog: sys::nvrtcProgram) -> Result<Vec<u8>> {
    let mut size = 0usize;
    // SAFETY: per this function's contract.
    unsafe { sys::nvrtcGetCUBINSize(prog, &mut size) }.result().map_err(|e| Error::Device(format!("nvrtcGetCUBINSize: {e:?}")))?;
    let mut bytes = vec![0u8; size];
    // SAFETY: `bytes` holds the size NVRTC reported.
    unsafe { sys::nvrtcGetCUBIN(prog, bytes.as_mut_ptr().cast()) }.result().map_err(|e| Error::Device(format!("nvrtcGetCUBIN: {e:?}")))?;
    if bytes.is_empty() {
        return Err(Error::Device("NVRTC produced no cubin (was a virtual architecture given?)".into()));
    }
    Ok(bytes)
}

/// The cubin of `source` from the disk cache, compiling it on a miss (or a corrupt entry).
pub fn cached_cubin(cache: &DiskCache, source: &str, arch: u32, options: &[&str]) -> Result<(Vec<u8>, CacheOutcome)> {
    let (major, minor) = version()?;
    let key = CacheKey::new("cuda-cubin")
        .part("source", source)
        .part("options", options.join(" "))
        .part("arch", arch.to_string())
        .part("nvrtc", format!("{major}.{minor}"))
        .part("kiln", env!("CARGO_PKG_VERSION"));
    let (path, outcome) = cache.get_or_build(&key, "kernels.cubin", |tmp| {
        let bin = compile_cubin(source, arch, options)?;
        std::fs::write(tmp, bin).map_err(|e| Error::Io(format!("writing {}: {e}", tmp.display())))
    })?;
    let bytes = std::fs::read(&path).map_err(|e| Error::Io(format!("reading {}: {e}", path.display())))?;
    Ok((bytes, outcome))
}

fn c_text(chars: &[std::ffi::c_char]) -> String {
    let bytes: Vec<u8> = chars.iter().take_while(|&&c| c != 0).map(|&c| c as u8).collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

fn first_lines(s: &str, n: usize) -> String {
    let lines: Vec<&str> = s.lines().collect();
    let mut out = lines.iter().take(n).copied().collect::<Vec<_>>().join("\n");
    if lines.len() > n {
        out.push_str(&format!("\n... ({} more lines)", lines.len() - n));
    }
    out
}
