#!/usr/bin/env python3
"""ONNX Runtime CPU baseline for `kiln bench`.

Exports the same torch models as scripts/pytorch_bench.py (random init, same seed and inputs as
its runs) to ONNX with the legacy TorchScript exporter (opset 17; it needs no extra packages),
caches each file under --onnx-dir, and times InferenceSession.run on the CPU execution provider
with intra_op_num_threads=--threads and every graph optimization on. Prints one JSON line per
model with `kiln bench --json`'s fields; `compile_s` is the session creation (ORT optimizes the
graph there), so it lines up with kiln's and torch.compile's compile time.
"""

import json
import os
import time
import warnings

import onnxruntime as ort
import torch

from pytorch_bench import check, parser, record, seeded_model, time_passes

OPSET = 17


def onnx_path(onnx_dir, name, args):
    """The cache file of one export: the name holds everything that changes the model."""
    seq = f"-s{args.seq}" if name in ("bert-base", "gpt2") else ""
    return os.path.join(onnx_dir, f"{name}-b{args.batch}{seq}-seed{args.seed}-opset{OPSET}.onnx")


class _ByKeyword(torch.nn.Module):
    """Calls `model` with its inputs by keyword and returns its outputs as a tuple: HF models'
    positional parameters do not start with just the inputs kiln feeds, and they return a
    ModelOutput mapping (last_hidden_state, pooler_output) that the exporter should see flat."""

    def __init__(self, model, names):
        super().__init__()
        self.model, self.names = model, list(names)

    def forward(self, *tensors):
        out = self.model(**dict(zip(self.names, tensors)))
        return tuple(out.values()) if isinstance(out, dict) else out


def export(model, inputs, path):
    """Exports `model` to `path` through a temporary file, so that an interrupted export never
    leaves a truncated file that later runs would take for a cached one. Returns seconds taken."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    tmp = f"{path}.tmp{os.getpid()}"
    start = time.perf_counter()
    with warnings.catch_warnings():
        # The legacy exporter warns that it is legacy; it is chosen on purpose (see above).
        warnings.simplefilter("ignore", DeprecationWarning)
        with torch.inference_mode():
            torch.onnx.export(
                _ByKeyword(model, inputs),
                tuple(inputs.values()),
                tmp,
                input_names=list(inputs),
                opset_version=OPSET,
                dynamo=False,
            )
    os.replace(tmp, path)
    return time.perf_counter() - start


def session_options(threads):
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    # One graph, run node after node: the inter-op pool would only add threads beyond --threads.
    opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return opts


def bench(name, args):
    model, inputs, build_s, params = seeded_model(name, args)
    path = onnx_path(args.onnx_dir, name, args)
    extra = {"onnxruntime": ort.__version__, "build_s": build_s, "onnx": path, "opset": OPSET}
    if os.path.isfile(path):
        extra["export_cached"] = True
    else:
        extra["export_cached"] = False
        extra["export_s"] = export(model, inputs, path)
    feeds = {k: v.numpy() for k, v in inputs.items()}
    # Frees the torch weights before ORT loads its own copy.
    del model

    start = time.perf_counter()
    sess = ort.InferenceSession(path, sess_options=session_options(args.threads), providers=["CPUExecutionProvider"])
    extra["compile_s"] = extra["session_s"] = time.perf_counter() - start
    extra["threads"] = args.threads
    first_call_s, times_ms = time_passes(lambda: sess.run(None, feeds), args.warmup, args.iters)
    return record(name, args, "onnxruntime", "ort", params, first_call_s, times_ms, **extra)


def main():
    p = parser(os.cpu_count() or 1, "intra_op_num_threads (default: all cores)")
    p.description = __doc__.splitlines()[0]
    p.add_argument("--onnx-dir", default="target/peers", help="where exported .onnx files are cached")
    args = p.parse_args()
    check(args)
    # The export runs in torch; keep it on the same number of threads as the timed runs.
    torch.set_num_threads(args.threads)
    for name in args.models:
        print(json.dumps(bench(name, args)), flush=True)


if __name__ == "__main__":
    main()
