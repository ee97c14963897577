//! Where a tensor lives.

use kiln_ir::{Error, Result};
use std::fmt;

/// The device a tensor's data lives on. Only the CPU runs today; CUDA devices can be named
/// (so command lines and configs can say `cuda:0`) but are refused where they would be used.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Device {
    /// Host memory, run by the reference CPU runtime.
    #[default]
    Cpu,
    /// The CUDA GPU with this ordinal.
    Cuda(usize),
}

impl Device {
    /// Parses `cpu`, `cuda` (= `cuda:0`) or `cuda:N`, ignoring ASCII case and surrounding spaces.
    pub fn parse(s: &str) -> Result<Device> {
        let t = s.trim().to_ascii_lowercase();
        match t.as_str() {
            "cpu" => return Ok(Device::Cpu),
            "cuda" | "gpu" => return Ok(Device::Cuda(0)),
            _ => {}
        }
        if let Some(n) = t.strip_prefix("cuda:").or_else(|| t.strip_prefix("gpu:"))
            && let Ok(i) = n.parse::<usize>()
        {
            return Ok(Device::Cuda(i));
        }
        Err(Error::Value(format!("unknown device '{s}': expected cpu, cuda or cuda:N")))
    }

    /// Ok when this build of kiln can run tensors on the device; CUDA is not wired up yet.
    pub fn ensure_supported(self) -> Result<()> {
        match self {
            Device::Cpu => Ok(()),
            Device::Cuda(_) => Err(Error::Unsupported(format!(
                "device {self}: the CUDA backend is not available in this build yet; use cpu"
            ))),
        }
    }
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Device::Cpu => f.write_str("cpu"),
            Device::Cuda(i) => write!(f, "cuda:{i}"),
        }
    }
}

impl std::str::FromStr for Device {
    type Err = Error;
    fn from_str(s: &str) -> Result<Device> {
        Device::parse(s)
    }
}
