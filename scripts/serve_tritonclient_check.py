#!/usr/bin/env python3
"""Checks `kiln serve` with NVIDIA's tritonclient[http] as an unmodified KServe v2 client.

Starts two servers on free loopback ports: the tested one (`--mode default`, compiled) and a
reference one (`--mode eager`, kiln's reference interpreter). Checks server liveness and
readiness, model metadata, JSON inference, binary-tensor inference and a batch of two against
the reference outputs. Prints one line per check and exits non-zero on the first failure.

    python3 scripts/serve_tritonclient_check.py [--kiln target/release/kiln] [--model resnet18]
"""

import argparse
import sys
import time

import numpy as np
import tritonclient.http as httpclient

from serve_common import start_server, stop_server


def start(kiln, model, mode, extra):
    """Starts `kiln serve` on port 0 and returns (process, 'host:port') once it listens."""
    return start_server([kiln, "serve", model, "--port", "0", "--mode", mode, "--max-batch", "2", *extra])


def wait_ready(client, model, timeout=600):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            if client.is_server_ready() and client.is_model_ready(model):
                return
        except Exception:
            pass
        time.sleep(0.5)
    sys.exit(f"FAIL: {model} not ready within {timeout} s")


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        sys.exit(1)


def infer(client, model, x, binary):
    inp = httpclient.InferInput("input", list(x.shape), "FP32")
    inp.set_data_from_numpy(x, binary_data=binary)
    out = httpclient.InferRequestedOutput("output", binary_data=binary)
    return client.infer(model, [inp], outputs=[out]).as_numpy("output")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kiln", default="target/release/kiln")
    ap.add_argument("--model", default="resnet18")
    args = ap.parse_args()
    model = args.model
    tested, tested_addr = start(args.kiln, model, "default", [])
    ref, ref_addr = start(args.kiln, model, "eager", ["--warmup", "1"])
    try:
        c = httpclient.InferenceServerClient(url=tested_addr)
        r = httpclient.InferenceServerClient(url=ref_addr)
        check(c.is_server_live(), "server live")
        wait_ready(c, model)
        wait_ready(r, model)
        check(c.is_server_ready() and c.is_model_ready(model), "server and model ready")
        meta = c.get_model_metadata(model)
        check(meta["name"] == model, f"metadata name {meta['name']}")
        check(
            meta["inputs"] == [{"name": "input", "datatype": "FP32", "shape": [-1, 3, 224, 224]}],
            f"metadata inputs {meta['inputs']}",
        )
        check(
            meta["outputs"] == [{"name": "output", "datatype": "FP32", "shape": [-1, 1000]}],
            f"metadata outputs {meta['outputs']}",
        )
        rng = np.random.default_rng(0)
        x = rng.standard_normal((1, 3, 224, 224), dtype=np.float32)
        expected = infer(r, model, x, binary=False)
        check(expected.shape == (1, 1000) and np.isfinite(expected).all(), "reference (eager) output")
        as_json = infer(c, model, x, binary=False)
        err = float(np.abs(as_json - expected).max() / np.abs(expected).max())
        check(as_json.shape == (1, 1000) and err < 1e-3, f"JSON infer matches the reference (max rel err {err:.2e})")
        as_binary = infer(c, model, x, binary=True)
        check(np.array_equal(as_binary, as_json), "binary infer equals JSON infer bit for bit")
        x2 = rng.standard_normal((2, 3, 224, 224), dtype=np.float32)
        batch = infer(c, model, x2, binary=True)
        exp2 = infer(r, model, x2, binary=True)
        err2 = float(np.abs(batch - exp2).max() / np.abs(exp2).max())
        check(batch.shape == (2, 1000) and err2 < 1e-3, f"batch of 2 (binary) matches the reference (max rel err {err2:.2e})")
        try:
            c.infer(model, [httpclient.InferInput("nope", [1, 3], "FP32")])
            check(False, "unknown input refused")
        except Exception as e:
            check("has no input 'nope'" in str(e), f"unknown input refused: {e}")
        print("tritonclient check passed", flush=True)
    finally:
        for p in (tested, ref):
            print(f"kiln serve exited with {stop_server(p)} after SIGTERM", flush=True)


if __name__ == "__main__":
    main()
