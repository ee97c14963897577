//! Steps the GPU path runs on the host: graph ops the scheduler left to the reference kernels
//! (`StepKind::Eval`), and externs cuBLAS/cuDNN cannot take as given. The inputs are copied
//! back, evaluated by `kiln_cpu::eval`, and the result copied up — correct, not fast; each such
//! step is logged when the executable is built.

use crate::device::Gpu;
use kiln_ir::{HostTensor, Op, Result, Storage};
use kiln_sched::{BufKind, BufView, Program};
use std::sync::Arc;

/// Evaluates `op` on `inputs` (views of the buffers at `ptrs`) and writes the dense result to
/// the buffer at `out`.
pub(crate) fn eval_on_host(gpu: &Gpu, p: &Program, ptrs: &[u64], op: &Op, inputs: &[BufView], out: u64) -> Result<()> {
    let mut tensors = Vec::with_capacity(inputs.len());
    for v in inputs {
        let b = p.buffer(v.buf);
        // Constants have their host copy in the program: only computed values come back.
        let storage = match b.kind {
            BufKind::Const(id) if p.consts.get(id.0 as usize).is_some_and(|c| c.is_dense()) => p.consts[id.0 as usize].storage.clone(),
            _ => Arc::new(Storage::from_le_bytes(b.dtype, &gpu.read(ptrs[v.buf.index()], b.bytes())?)?),
        };
        tensors.push(HostTensor { storage, layout: v.layout() });
    }
    let refs: Vec<&HostTensor> = tensors.iter().collect();
    let result = kiln_cpu::eval(op, &refs)?.contiguous();
    gpu.write(out, &result.storage.as_bytes())
}
