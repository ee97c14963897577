#!/usr/bin/env python3
"""Where ONNX Runtime's time goes, node by node, for comparing with `kiln bench --profile N`.

Runs one ONNX file on ORT's CPU execution provider with its profiler on (every graph
optimization on, as scripts/ort_bench.py runs it), and prints one line per node of the
optimized graph: name, op type (ORT's fused ops show as theirs: `Conv` with its activation and
residual add, `FusedMatMul`, `SkipLayerNormalization`) and the median of its kernel time over
the timed runs; then the sum. Inputs are random floats (or ones for integer inputs), symbolic
dims 1.

    .venv-bench/bin/python scripts/ort_profile.py target/peers/resnet50-b1-seed0-opset17.onnx --threads 1
"""

import argparse
import collections
import json
import os
import statistics
import tempfile

import numpy as np
import onnxruntime as ort


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("onnx")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--by-op", action="store_true", help="sum the nodes of each op type instead")
    args = p.parse_args()

    so = ort.SessionOptions()
    so.intra_op_num_threads = args.threads
    so.inter_op_num_threads = 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.enable_profiling = True
    so.profile_file_prefix = os.path.join(tempfile.mkdtemp(prefix="ort-profile-"), "ort")
    s = ort.InferenceSession(args.onnx, so, providers=["CPUExecutionProvider"])
    feeds = {}
    rng = np.random.default_rng(0)
    for i in s.get_inputs():
        shape = [d if isinstance(d, int) else 1 for d in i.shape]
        if "int" in i.type:
            feeds[i.name] = np.ones(shape, dtype=np.int64)
        else:
            feeds[i.name] = rng.random(shape, dtype=np.float32)
    for _ in range(args.warmup + args.iters):
        s.run(None, feeds)
    with open(s.end_profiling()) as f:
        events = json.load(f)

    times = collections.defaultdict(list)
    ops = {}
    suffix = "_kernel_time"
    for e in events:
        if e.get("cat") == "Node" and e["name"].endswith(suffix):
            name = e["name"][: -len(suffix)]
            times[name].append(e["dur"])
            ops[name] = e["args"].get("op_name", "?")
    rows = []
    for name, durs in times.items():
        timed = durs[args.warmup :] if len(durs) > args.warmup else durs
        rows.append((name, ops[name], statistics.median(timed) / 1000.0))
    if args.by_op:
        per_op = collections.defaultdict(lambda: [0.0, 0])
        for _, op, ms in rows:
            per_op[op][0] += ms
            per_op[op][1] += 1
        for op, (ms, n) in sorted(per_op.items(), key=lambda kv: -kv[1][0]):
            print(f"{ms:9.3f} ms  {n:4d}x  {op}")
    else:
        for name, op, ms in rows:
            print(f"{ms:9.3f} ms  {op:24s} {name}")
    print(f"{sum(ms for _, _, ms in rows):9.3f} ms  total of node medians")


if __name__ == "__main__":
    main()
