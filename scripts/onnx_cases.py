#!/usr/bin/env python3
"""Writes the ONNX backend conformance cases to disk for `kiln onnx-test`.

The onnx wheel ships the generators of its node test cases but not their data, plus a few
model test directories (pytorch-converted, pytorch-operator, simple). This script writes all of
them as OUTDIR/<kind>/<case>/{model.onnx, test_data_set_N/{input_K.pb, output_K.pb}, case.json}
and OUTDIR/index.json. The `real` and `light` kinds are skipped: they need downloads.

case.json holds {"kind", "op", "rtol", "atol"}: "op" is the operator the case tests (used to
group results per op), rtol/atol are the tolerances ONNX's own backend runner uses for the case.

Usage: onnx_cases.py OUTDIR        (normally called by scripts/onnx-cases.sh)
       onnx_cases.py --stamp       (prints the string that identifies a generated OUTDIR)
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import sys
import warnings

# Bump when the layout or contents of OUTDIR change, so that onnx-cases.sh regenerates it.
GENERATOR_VERSION = 1

# Shipped model-test kinds that need no download.
SHIPPED_KINDS = ("pytorch-converted", "pytorch-operator", "simple")

# ONNX's loader (onnx/backend/test/loader/__init__.py) uses these for on-disk model tests unless
# the case directory has a data.json overriding them.
MODEL_TEST_RTOL = 1e-3
MODEL_TEST_ATOL = 1e-7

# Nodes that only move data around; ignored when looking for the op a multi-node model tests.
_PLUMBING_OPS = ("Constant",)
_LAYOUT_OPS = ("Unsqueeze", "Squeeze", "Reshape")

_EXPANDED = re.compile(r"_expanded(_ver\d+)?$")


def stamp() -> str:
    import ml_dtypes  # noqa: PLC0415
    import onnx  # noqa: PLC0415

    # ml_dtypes computes the expected outputs of the 4- and 2-bit integer casts.
    return f"onnx={onnx.__version__} ml_dtypes={ml_dtypes.__version__} generator={GENERATOR_VERSION}"


def _model_op(model, kind: str) -> str:
    """The most specific op a multi-node shipped model tests, else the kind name."""
    ops = [n.op_type for n in model.graph.node]
    for ignored in (_PLUMBING_OPS, _PLUMBING_OPS + _LAYOUT_OPS):
        left = {op for op in ops if op not in ignored}
        if len(left) == 1:
            return left.pop()
    return kind


def _write_case_json(case_dir: str, kind: str, op: str, rtol: float, atol: float) -> dict:
    meta = {"kind": kind, "op": op, "rtol": rtol, "atol": atol}
    with open(os.path.join(case_dir, "case.json"), "w") as f:
        json.dump(meta, f, sort_keys=True)
        f.write("\n")
    return {"case": os.path.basename(case_dir), **meta}


def _generate_node_cases(out: str) -> list[dict]:
    import onnx.backend.test.case.model as model_cases  # noqa: PLC0415
    import onnx.backend.test.case.node as node_cases  # noqa: PLC0415
    import onnx.backend.test.cmd_tools as cmd_tools  # noqa: PLC0415

    # The generators print numpy overflow warnings for their deliberate Inf/NaN cases.
    with warnings.catch_warnings(), contextlib.redirect_stdout(sys.stderr):
        warnings.simplefilter("ignore")
        cases = node_cases.collect_testcases()
        # generate_data writes every case of model_cases.collect_testcases(); point it at the
        # node cases only (the model cases are the `real` ones that need downloads).
        model_cases.collect_testcases = lambda: cases
        cmd_tools.model_test = model_cases
        cmd_tools.generate_data(argparse.Namespace(output=out, diff=False))

    base_op: dict[str, str] = {}
    for case in cases:
        if not _EXPANDED.search(case.name):
            nodes = case.model.graph.node
            if len(nodes) != 1:
                raise SystemExit(f"node case {case.name} has {len(nodes)} nodes, expected 1")
            base_op[case.name] = nodes[0].op_type

    index = []
    for case in cases:
        base = _EXPANDED.sub("", case.name)
        op = base_op.get(base)
        if op is None:
            raise SystemExit(f"expanded case {case.name} has no matching case {base}")
        case_dir = os.path.join(out, case.kind, case.name)
        index.append(_write_case_json(case_dir, case.kind, op, case.rtol, case.atol))
    return index


def _copy_shipped_cases(out: str) -> list[dict]:
    import onnx  # noqa: PLC0415
    from onnx.backend.test.loader import DATA_DIR  # noqa: PLC0415

    index = []
    for kind in SHIPPED_KINDS:
        kind_dir = os.path.join(DATA_DIR, kind)
        for name in sorted(os.listdir(kind_dir)):
            src = os.path.join(kind_dir, name)
            if not os.path.isfile(os.path.join(src, "model.onnx")):
                continue
            rtol, atol = MODEL_TEST_RTOL, MODEL_TEST_ATOL
            data_json = os.path.join(src, "data.json")
            if os.path.exists(data_json):
                with open(data_json) as f:
                    data = json.load(f)
                rtol, atol = data.get("rtol", rtol), data.get("atol", atol)
            dst = os.path.join(out, kind, name)
            shutil.copytree(src, dst, ignore=shutil.ignore_patterns("data.json", "__pycache__"))
            model = onnx.load(os.path.join(src, "model.onnx"))
            nodes = model.graph.node
            op = nodes[0].op_type if len(nodes) == 1 else _model_op(model, kind)
            index.append(_write_case_json(dst, kind, op, rtol, atol))
    return index


def generate(out: str) -> int:
    for kind in ("node", *SHIPPED_KINDS):
        shutil.rmtree(os.path.join(out, kind), ignore_errors=True)
    os.makedirs(out, exist_ok=True)
    index = _generate_node_cases(out) + _copy_shipped_cases(out)
    index.sort(key=lambda r: (r["kind"], r["case"]))
    with open(os.path.join(out, "index.json"), "w") as f:
        json.dump(index, f, indent=0)
        f.write("\n")
    return len(index)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("outdir", nargs="?")
    parser.add_argument("--stamp", action="store_true", help="print the stamp and exit")
    args = parser.parse_args()
    if args.stamp:
        print(stamp())
        return
    if not args.outdir:
        parser.error("OUTDIR is required")
    n = generate(args.outdir)
    with open(os.path.join(args.outdir, ".stamp"), "w") as f:
        f.write(stamp() + "\n")
    print(f"onnx cases: {n} in {args.outdir}", file=sys.stderr)


if __name__ == "__main__":
    main()
