#!/usr/bin/env python3
"""Runs ONNX Runtime (CPU execution provider, default graph optimisations) over the ONNX
conformance cases written by scripts/onnx-cases.sh, as the baseline kiln is compared against.

Usage: .venv-onnx/bin/python scripts/onnx_ort_conformance.py CASES_DIR --out FILE.jsonl

Writes one JSON line per case, in the format `kiln onnx-test --json` also writes:
  {"case", "kind", "op", "status": "pass"|"fail"|"unsupported", "message"}
unsupported: ORT raised while creating the session or running it (or crashed / timed out);
fail: it ran but an output differs from the reference, by ONNX's backend runner rule
(onnx/backend/test/runner/__init__.py, assert_similar_outputs): same number of outputs, then
per output the same shape, the same dtype and np.testing.assert_allclose(out, ref, rtol, atol)
with NaN equal to NaN (bfloat16 compared in float32 with rtol at least 2**-6).

Each case runs in a worker process, so that a crash or hang in ORT costs one case, not the run.
"""

from __future__ import annotations

import argparse
import glob
import json
import multiprocessing as mp
import os
import sys
import time

import numpy as np

# Generous: the slowest case takes well under a second on one core.
CASE_TIMEOUT_S = 120
MESSAGE_CHARS = 160

# Element types ORT's Python binding converts to and from numpy itself.
_NUMPY_ORT_TYPES = {
    "float", "double", "float16", "int8", "int16", "int32", "int64", "uint8", "uint16",
    "uint32", "uint64", "bool", "string", "complex64", "complex128",
}


def _short(text: str, case_dir: str = "") -> str:
    """First line of an error, without the cases path, cut in the middle when long (ORT puts
    the error class first and the reason last, with a C++ signature between)."""
    text = str(text)
    if case_dir:
        text = text.replace(case_dir.rstrip("/") + "/", "")
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    first = lines[0] if lines else ""
    if len(first) <= MESSAGE_CHARS:
        return first
    head = MESSAGE_CHARS // 2
    return first[:head] + " ... " + first[-(MESSAGE_CHARS - head - 5) :]


def _load_value(path: str, type_proto):
    """Reads one input/output .pb the way ONNX's backend runner (_load_proto) does."""
    import onnx  # noqa: PLC0415
    from onnx import numpy_helper  # noqa: PLC0415

    with open(path, "rb") as f:
        data = f.read()
    if type_proto.HasField("sequence_type"):
        proto = onnx.SequenceProto()
        proto.ParseFromString(data)
        return numpy_helper.to_list(proto)
    if type_proto.HasField("optional_type"):
        proto = onnx.OptionalProto()
        proto.ParseFromString(data)
        return numpy_helper.to_optional(proto)
    proto = onnx.TensorProto()
    proto.ParseFromString(data)
    return numpy_helper.to_array(proto)


def _compare(ref, out, rtol: float, atol: float, where: str) -> str | None:
    """None when `out` matches `ref` by the backend runner rule, else what differs."""

    if isinstance(ref, (list, tuple)) or isinstance(out, (list, tuple)):
        if not isinstance(ref, (list, tuple)) or not isinstance(out, (list, tuple)):
            return f"{where}: got {type(out).__name__}, expected {type(ref).__name__}"
        if len(out) != len(ref):
            return f"{where}: sequence length {len(out)}, expected {len(ref)}"
        for j, (r, o) in enumerate(zip(ref, out)):
            diff = _compare(r, o, rtol, atol, f"{where}[{j}]")
            if diff:
                return diff
        return None
    if ref is None or out is None:
        return None if ref is None and out is None else f"{where}: optional presence differs"
    out = np.asarray(out)
    ref = np.asarray(ref)
    if out.shape != ref.shape:
        return f"{where}: shape {list(out.shape)}, expected {list(ref.shape)}"
    if ref.dtype == object:
        if not np.array_equal(out, ref):
            return f"{where}: strings differ"
        return None
    if out.dtype != ref.dtype:
        return f"{where}: dtype {out.dtype}, expected {ref.dtype}"
    output_rtol = rtol
    if out.dtype.name == "bfloat16":
        output_rtol = max(rtol, 2**-6)  # Two bfloat16 ULPs, as in ONNX's runner.
        out = out.astype(np.float32)
        ref = ref.astype(np.float32)
    try:
        np.testing.assert_allclose(out, ref, rtol=output_rtol, atol=atol)
    except AssertionError:
        bad = _mismatch_summary(out, ref)
        return f"{where}: values differ ({bad})"
    return None


def _mismatch_summary(out, ref) -> str:

    try:
        a = out.astype(np.float64)
        b = ref.astype(np.float64)
        with np.errstate(all="ignore"):
            diff = np.abs(a - b)
        diff = diff[~(np.isnan(a) & np.isnan(b))]
        worst = float(np.nanmax(diff)) if diff.size else float("nan")
        return f"max abs diff {worst:.3g}"
    except (TypeError, ValueError):
        return "not comparable as numbers"


def _is_ml_dtype(value) -> bool:
    """bfloat16, float8, int4... arrays: numpy holds them through ml_dtypes, ORT's binding does not."""
    return hasattr(value, "dtype") and value.dtype.type.__module__.startswith("ml_dtypes")


def _run(sess, feeds: dict) -> list:
    """sess.run, except that tensors of types ORT's numpy binding lacks go through OrtValues.

    ORT computes bfloat16/float8/int4... tensors but cannot convert them from or to numpy, so
    such inputs are passed as their bit patterns tagged with the ONNX type and such outputs are
    read back as raw bytes; anything else would count a binding gap as missing op support.
    """
    import ctypes  # noqa: PLC0415

    import onnx  # noqa: PLC0415
    import onnxruntime as ort  # noqa: PLC0415
    from onnx import helper, numpy_helper  # noqa: PLC0415

    exotic_out = any(
        o.type.startswith("tensor(") and o.type[len("tensor(") : -1] not in _NUMPY_ORT_TYPES
        for o in sess.get_outputs()
    )
    if not exotic_out and not any(_is_ml_dtype(v) for v in feeds.values()):
        return sess.run(None, feeds)
    ort_feeds = {}
    keep_alive = []  # ORT may alias the numpy buffers it was given.
    for name, value in feeds.items():
        if _is_ml_dtype(value):
            elem = helper.np_dtype_to_tensor_dtype(value.dtype)
            bits = value.view(np.uint16 if value.dtype.itemsize == 2 else np.uint8)
            ort_value = ort.OrtValue.ortvalue_from_numpy_with_onnx_type(bits, elem)
            # int4/int2/float4 hold one element per byte in numpy but are packed in ORT: the
            # value above has the packed size, so its bytes are overwritten with the packing.
            packed = numpy_helper.from_array(value).raw_data
            if ort_value.tensor_size_in_bytes() != len(packed):
                raise ValueError(f"harness: cannot lay out {value.dtype} input {name} for ORT")
            ctypes.memmove(ort_value.data_ptr(), packed, len(packed))
            keep_alive.append(bits)
            ort_feeds[name] = ort_value
        else:
            ort_feeds[name] = ort.OrtValue.ortvalue_from_numpy(value)
    outs = []
    for value in sess.run_with_ort_values(None, ort_feeds):
        if value.is_tensor() and value.data_type()[len("tensor(") : -1] not in _NUMPY_ORT_TYPES:
            proto = onnx.TensorProto()
            proto.dims.extend(value.shape())
            proto.data_type = value.element_type()
            size = value.tensor_size_in_bytes()
            proto.raw_data = ctypes.string_at(value.data_ptr(), size) if size else b""
            outs.append(numpy_helper.to_array(proto))
        else:
            outs.append(value.numpy())
    return outs


def run_case(case_dir: str) -> dict:
    """Runs one case with ORT; returns its result line (without the case/kind/op fields)."""
    import onnx  # noqa: PLC0415
    import onnxruntime as ort  # noqa: PLC0415

    with open(os.path.join(case_dir, "case.json")) as f:
        meta = json.load(f)
    model_path = os.path.join(case_dir, "model.onnx")
    model = onnx.load(model_path)
    try:
        opts = ort.SessionOptions()
        opts.log_severity_level = 4  # ORT's own error log repeats what we record.
        sess = ort.InferenceSession(model_path, opts, providers=["CPUExecutionProvider"])
    except Exception as e:  # noqa: BLE001 - any refusal means ORT does not support it
        return {"status": "unsupported", "message": _short(e, case_dir)}
    for data_dir in sorted(glob.glob(os.path.join(case_dir, "test_data_set_*"))):
        n_in = len(glob.glob(os.path.join(data_dir, "input_*.pb")))
        n_out = len(glob.glob(os.path.join(data_dir, "output_*.pb")))
        # As ONNX's runner: input_K.pb feeds graph.input[K] (older models also list their
        # initializers as inputs, after the real ones).
        feeds = {
            model.graph.input[k].name: _load_value(
                os.path.join(data_dir, f"input_{k}.pb"), model.graph.input[k].type
            )
            for k in range(n_in)
        }
        refs = [
            _load_value(os.path.join(data_dir, f"output_{k}.pb"), model.graph.output[k].type)
            for k in range(n_out)
        ]
        try:
            outs = _run(sess, feeds)
        except Exception as e:  # noqa: BLE001
            return {"status": "unsupported", "message": _short(e, case_dir)}
        name = os.path.basename(data_dir)
        if len(outs) != len(refs):
            return {"status": "fail", "message": f"{name}: {len(outs)} outputs, expected {len(refs)}"}
        for k, (ref, out) in enumerate(zip(refs, outs)):
            diff = _compare(ref, out, meta["rtol"], meta["atol"], f"{name} output {k}")
            if diff:
                return {"status": "fail", "message": _short(diff)}
    return {"status": "pass", "message": ""}


def _worker(conn) -> None:
    import warnings  # noqa: PLC0415

    import onnxruntime as ort  # noqa: PLC0415

    warnings.simplefilter("ignore")
    ort.set_default_logger_severity(4)
    while True:
        case_dir = conn.recv()
        if case_dir is None:
            return
        try:
            result = run_case(case_dir)
        except Exception as e:  # noqa: BLE001 - a harness error must not stop the run
            result = {"status": "unsupported", "message": _short(f"harness: {e}")}
        conn.send(result)


class _Pool:
    """One worker process, restarted after a crash or a timeout."""

    def __init__(self) -> None:
        self.ctx = mp.get_context("spawn")
        self.proc = None
        self.conn = None

    def _start(self) -> None:
        self.conn, child = self.ctx.Pipe()
        self.proc = self.ctx.Process(target=_worker, args=(child,), daemon=True)
        self.proc.start()

    def run(self, case_dir: str) -> dict:
        if self.proc is None or not self.proc.is_alive():
            self._start()
        self.conn.send(case_dir)
        if self.conn.poll(CASE_TIMEOUT_S):
            try:
                return self.conn.recv()
            except EOFError:
                pass
        else:
            self.proc.kill()
            self.proc.join()
            self.proc = None
            return {"status": "unsupported", "message": f"timed out after {CASE_TIMEOUT_S} s"}
        self.proc.join()
        code = self.proc.exitcode
        self.proc = None
        return {"status": "unsupported", "message": f"ORT crashed (exit code {code})"}

    def close(self) -> None:
        if self.proc is not None and self.proc.is_alive():
            self.conn.send(None)
            self.proc.join()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cases_dir")
    parser.add_argument("--out", required=True, help="JSON-lines result file")
    args = parser.parse_args()

    with open(os.path.join(args.cases_dir, "index.json")) as f:
        index = json.load(f)
    import onnxruntime as ort  # noqa: PLC0415

    start = time.monotonic()
    pool = _Pool()
    counts: dict[tuple[str, str], int] = {}
    with open(args.out, "w") as out:
        for entry in index:
            case_dir = os.path.join(args.cases_dir, entry["kind"], entry["case"])
            result = pool.run(case_dir)
            line = {
                "case": entry["case"],
                "kind": entry["kind"],
                "op": entry["op"],
                "status": result["status"],
                "message": result["message"],
            }
            out.write(json.dumps(line) + "\n")
            key = (entry["kind"], result["status"])
            counts[key] = counts.get(key, 0) + 1
    pool.close()
    kinds = sorted({k for k, _ in counts})
    print(
        f"onnxruntime {ort.__version__}: {len(index)} cases in {time.monotonic() - start:.0f} s",
        file=sys.stderr,
    )
    for kind in kinds:
        p, f, u = (counts.get((kind, s), 0) for s in ("pass", "fail", "unsupported"))
        print(f"  {kind:<18} pass {p:>5}  fail {f:>4}  unsupported {u:>4}", file=sys.stderr)


if __name__ == "__main__":
    main()
