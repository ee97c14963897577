//! The one dispatch point every tensor op goes through. Eager execution and tracing are two
//! consumers of the same stream of `(op, inputs)` pairs, so the op list exists only once: in
//! [`kiln_ir::Op`]. Tensor methods only translate their arguments into an `Op` and call
//! [`dispatch`].

use crate::Tensor;
use kiln_ir::{Error, HostTensor, Op, Result};
use std::cell::Cell;

thread_local! {
    static OP_COUNT: Cell<u64> = const { Cell::new(0) };
}

/// Number of ops dispatched on this thread since it started, eager and traced alike (the CLI
/// reports the difference around a forward pass as "kernels per forward" in eager mode).
pub fn op_count() -> u64 {
    OP_COUNT.with(Cell::get)
}

/// Applies `op` to `inputs`. While a trace is active on this thread the op is recorded as a
/// node of the trace's graph (concrete inputs become constants) and a traced tensor comes back;
/// otherwise the reference CPU runtime evaluates it. Errors name the op and the input types.
pub fn dispatch(op: Op, inputs: &[&Tensor]) -> Result<Tensor> {
    OP_COUNT.with(|c| c.set(c.get() + 1));
    if inputs.is_empty() {
        return Err(Error::Graph(format!("{}: dispatched without inputs", op.name())));
    }
    for t in inputs {
        t.device().ensure_supported()?;
    }
    if crate::trace::is_active() || inputs.iter().any(|t| t.is_traced()) {
        return crate::trace::record(op, inputs);
    }
    let hosts: Vec<&HostTensor> = inputs.iter().map(|t| t.host_ref(&op)).collect::<Result<_>>()?;
    tracing::trace!(op = %op.name(), "eager dispatch");
    kiln_cpu::eval(&op, &hosts).map(Tensor::from_host)
}
