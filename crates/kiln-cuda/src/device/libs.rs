//! The CUDA libraries kiln loads at run time, and whether each is present. cudarc panics when
//! a library or symbol is missing, so every entry point checks [`require`] first and turns
//! absence into an error that names the library and what to install.

use kiln_ir::{Error, Result};
use std::sync::OnceLock;

/// One CUDA library kiln uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lib {
    /// The driver API (`libcuda.so.1`), installed with the NVIDIA driver.
    Driver,
    /// The runtime compiler (`libnvrtc.so`), which turns generated CUDA C into device code.
    Nvrtc,
    /// cuBLAS, for matmuls.
    Cublas,
    /// cuBLASLt, for matmuls with fused epilogues.
    CublasLt,
    /// cuDNN, for convolutions.
    Cudnn,
}

impl Lib {
    /// Every library, in the order `kiln doctor` lists them.
    pub const ALL: [Lib; 5] = [Lib::Driver, Lib::Nvrtc, Lib::Cublas, Lib::CublasLt, Lib::Cudnn];

    /// The library's file name stem.
    pub fn name(self) -> &'static str {
        match self {
            Lib::Driver => "libcuda",
            Lib::Nvrtc => "libnvrtc",
            Lib::Cublas => "libcublas",
            Lib::CublasLt => "libcublasLt",
            Lib::Cudnn => "libcudnn",
        }
    }

    /// What provides the library.
    pub fn install_hint(self) -> &'static str {
        match self {
            Lib::Driver => "the NVIDIA driver",
            Lib::Nvrtc => "the CUDA 13 toolkit (or pip's nvidia-cuda-nvrtc), on LD_LIBRARY_PATH",
            Lib::Cublas | Lib::CublasLt => "the CUDA 13 toolkit (or pip's nvidia-cublas), on LD_LIBRARY_PATH",
            Lib::Cudnn => "cuDNN 9 for CUDA 13 (or pip's nvidia-cudnn-cu13), on LD_LIBRARY_PATH",
        }
    }

    /// The names cudarc loads the library by (each expanded by
    /// `cudarc::get_lib_name_candidates`).
    fn cudarc_names(self) -> &'static [&'static str] {
        match self {
            Lib::Driver => &["cuda", "nvcuda"],
            Lib::Nvrtc => &["nvrtc"],
            Lib::Cublas => &["cublas"],
            Lib::CublasLt => &["cublasLt"],
            Lib::Cudnn => &["cudnn"],
        }
    }

    /// Whether the library can be loaded on this machine. The first check loads it, by the
    /// names cudarc tries in cudarc's order, and keeps it loaded: cudarc's own load later is
    /// then a reference count. (cudarc's `is_culib_present` unloads what it found, so each
    /// library was loaded twice on a first compile: cuBLASLt and cuDNN are large.)
    pub fn present(self) -> bool {
        static LOADED: [OnceLock<bool>; Lib::ALL.len()] = [const { OnceLock::new() }; Lib::ALL.len()];
        *LOADED[self as usize].get_or_init(|| {
            self.cudarc_names().iter().flat_map(|n| cudarc::get_lib_name_candidates(n)).any(|name| {
                // SAFETY: loading a CUDA library runs only its initialisers, as cudarc's load of
                // the same file does; nothing in it is called here.
                match unsafe { libloading::Library::new(&name) } {
                    Ok(lib) => {
                        // Kept for the life of the process, as cudarc keeps its handle.
                        std::mem::forget(lib);
                        true
                    }
                    Err(_) => false,
                }
            })
        })
    }
}

/// Ok when `lib` loads; otherwise an error naming it and what provides it.
pub fn require(lib: Lib) -> Result<()> {
    if lib.present() {
        Ok(())
    } else {
        Err(Error::Device(format!("{} not found: install {}", lib.name(), lib.install_hint())))
    }
}
