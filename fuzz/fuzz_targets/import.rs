//! Fuzz target for the ONNX importer: any bytes go through decoding, the model queries, the
//! import and, for small graphs, a run on zero inputs. Errors are fine; a panic, an abort or
//! an allocation over libFuzzer's `-malloc_limit_mb` (a lying length field) is a crash.

#![no_main]

use kiln_ir::{Graph, HostTensor};
use kiln_onnx::{ImportOptions, OnnxModel, import};
use libfuzzer_sys::fuzz_target;

/// Graphs with more nodes than this are imported but not run (running is for coverage of the
/// importer's output, not for benchmarking the interpreter).
const MAX_RUN_NODES: usize = 200;
/// Total elements of all graph inputs above which the graph is not run.
const MAX_INPUT_ELEMENTS: usize = 100_000;
/// Largest value any node may yield for the graph to be run: a graph that legitimately asks
/// for a huge tensor (Expand to 10^9 elements) is not a bug, and would trip the malloc limit.
const MAX_NODE_ELEMENTS: usize = 1 << 20;

fuzz_target!(|data: &[u8]| {
    let Ok(model) = OnnxModel::from_bytes(data) else { return };
    // The queries `kiln inspect` makes; each must be total on any decoded model.
    let _ = model.inputs();
    let _ = model.outputs();
    let _ = model.opsets();
    let _ = model.op_histogram();
    let _ = model.unsupported_ops();
    let Ok(imported) = import(&model, &ImportOptions::default()) else {
        return;
    };
    if let Some(inputs) = zero_inputs(&imported.graph) {
        let _ = kiln_cpu::run(&imported.graph, &inputs);
    }
});

/// Zero-filled inputs for `g`, when `g` is small enough to run: few nodes, every shape fixed
/// and every value small.
fn zero_inputs(g: &Graph) -> Option<Vec<HostTensor>> {
    if g.nodes.len() > MAX_RUN_NODES {
        return None;
    }
    for n in &g.nodes {
        let dims = n.ty.shape.as_fixed()?;
        let numel = dims.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d))?;
        if numel > MAX_NODE_ELEMENTS {
            return None;
        }
    }
    let mut total = 0usize;
    let mut inputs = Vec::with_capacity(g.inputs.len());
    for &id in &g.inputs {
        let ty = g.ty(id);
        let dims = ty.shape.as_fixed()?;
        total = total.checked_add(dims.iter().product())?;
        if total > MAX_INPUT_ELEMENTS {
            return None;
        }
        inputs.push(HostTensor::zeros(ty.dtype, &dims));
    }
    Some(inputs)
}
