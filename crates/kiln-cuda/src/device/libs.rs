//! The CUDA libraries kiln loads at run time, and whether each is present. cudarc panics when
//! a library or symbol is missing, so every entry point checks [`require`] first and turns
//! absence into an error that names the library and what to install.

use kiln_ir::{Error, Result};

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

    /// Whether the library can be loaded on this machine.
    pub fn present(self) -> bool {
        // SAFETY: these only try `dlopen` on the candidate names; nothing is called.
        unsafe {
            match self {
                Lib::Driver => cudarc::driver::sys::is_culib_present(),
                Lib::Nvrtc => cudarc::nvrtc::sys::is_culib_present(),
                Lib::Cublas => cudarc::cublas::sys::is_culib_present(),
                Lib::CublasLt => cudarc::cublaslt::sys::is_culib_present(),
                Lib::Cudnn => cudarc::cudnn::sys::is_culib_present(),
            }
        }
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
