#!/usr/bin/env python3
"""Writes CONFORMANCE.md: kiln's results on the ONNX backend conformance cases next to ONNX
Runtime's, per case kind and per op, plus the cases kiln gets wrong or misses.

Usage: conformance_table.py --kiln KILN.jsonl --ort ORT.jsonl --out CONFORMANCE.md

Both inputs are JSON lines {"case", "kind", "op", "status": pass|fail|unsupported, "message"},
as written by `kiln onnx-test --json` and scripts/onnx_ort_conformance.py.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter, defaultdict

STATUSES = ("pass", "fail", "unsupported")

HEADER = """\
# ONNX conformance

kiln's ONNX importer and CPU runtime run over the ONNX backend test cases: the {node} node
cases that the onnx wheel pinned in `scripts/onnx-cases.sh` generates, plus the model cases it ships
(`pytorch-converted`, `pytorch-operator`, `simple`; the `real` and `light` kinds need downloads
and are not run). ONNX Runtime (CPU execution provider, default graph optimisations)
runs the same cases as a baseline (results: `{ort_file}`).

A case passes when every `test_data_set_*` of it gives the reference outputs by ONNX's backend
runner rule (`onnx/backend/test/runner`, `assert_similar_outputs`): same number of outputs, same
shapes and dtypes, and `np.testing.assert_allclose(out, ref, rtol, atol)` with NaN equal to NaN,
rtol 1e-3 and atol 1e-7 for every case here (bfloat16: rtol 2**-6). *fail* means a wrong answer;
*unsupported* means the runtime refused the model or its inputs (unknown op, opset, dtype or
attribute). The `op` of a case is the operator it tests (function-expanded `*_expanded` cases
count under the op they expand; multi-node model cases under the op they are built around, or
under their kind).

Reproduce (from the repository root):

```sh
scripts/onnx-cases.sh target/onnx-cases
cargo run --release -p kiln-cli -- onnx-test target/onnx-cases --json kiln.jsonl
.venv-onnx/bin/pip install onnxruntime==1.32.0   # once; onnx-cases.sh installs only onnx
.venv-onnx/bin/python scripts/onnx_ort_conformance.py target/onnx-cases --out scripts/data/ort-1.32.jsonl
python3 scripts/conformance_table.py --kiln kiln.jsonl --ort scripts/data/ort-1.32.jsonl --out CONFORMANCE.md
```
"""


def load(path: str) -> dict[str, dict]:
    rows: dict[str, dict] = {}
    with open(path) as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                sys.exit(f"{path}:{lineno}: not JSON ({e})")
            missing = {"case", "kind", "op", "status"} - row.keys()
            if missing:
                sys.exit(f"{path}:{lineno}: missing fields {sorted(missing)}")
            if row["status"] not in STATUSES:
                sys.exit(f"{path}:{lineno}: status {row['status']!r} is not one of {STATUSES}")
            rows[f"{row['kind']}/{row['case']}"] = row
    return rows


def _table(headers: list[str], rows: list[list], align: str) -> list[str]:
    out = ["| " + " | ".join(headers) + " |"]
    out.append("|" + "|".join(":--" if a == "l" else "--:" for a in align) + "|")
    out.extend("| " + " | ".join(str(c) for c in row) + " |" for row in rows)
    return out


def _counts(rows: dict[str, dict], keys: list[str]) -> Counter:
    return Counter(rows[k]["status"] if k in rows else "missing" for k in keys)


def _esc(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render(kiln: dict[str, dict], ort: dict[str, dict], ort_file: str) -> str:
    # The ORT file is the full case list; kiln rows it lacks count as missing (not run).
    cases = dict(ort)
    for key, row in kiln.items():
        cases.setdefault(key, row)
    by_kind: dict[str, list[str]] = defaultdict(list)
    by_op: dict[str, list[str]] = defaultdict(list)
    for key, row in cases.items():
        by_kind[row["kind"]].append(key)
        by_op[row["op"]].append(key)

    lines = []
    node = len(by_kind.get("node", []))
    lines.append(HEADER.format(node=node, ort_file=ort_file))
    missing = [k for k in cases if k not in kiln]

    lines.append("## Summary per kind\n")
    rows = []
    total_k, total_o = Counter(), Counter()
    kinds = sorted(by_kind, key=lambda k: (k != "node", k))
    for kind in kinds:
        keys = by_kind[kind]
        k, o = _counts(kiln, keys), _counts(ort, keys)
        total_k += k
        total_o += o
        rows.append([kind, len(keys), *(k[s] for s in STATUSES), *(o[s] for s in STATUSES)])
    rows.append(["**all**", len(cases), *(total_k[s] for s in STATUSES), *(total_o[s] for s in STATUSES)])
    headers = ["kind", "cases", "kiln pass", "kiln fail", "kiln unsupported",
               "ORT pass", "ORT fail", "ORT unsupported"]
    lines.extend(_table(headers, rows, "lrrrrrrr"))
    if missing:
        lines.append(f"\n{len(missing)} cases have no kiln result (not run): counted in no kiln column.")
    fixed = [r for r in kiln.values() if r["status"] == "pass" and "fixed at import" in r.get("message", "")]
    if fixed:
        lines.append(
            f"\nOf kiln's passes, {len(fixed)} fixed a graph input to its test value at import time: the"
            " test feeds, as a graph input, a value that decides a shape or a branch (a Reshape target,"
            " axes, pads, k, sizes, an If condition), and kiln's graphs have static or symbolic shapes,"
            " not data-dependent ones (`kiln_onnx::import_for_inputs`, `Imported::specialised`)."
            " ONNX Runtime takes such values at run time."
        )

    lines.append("\n## Per op\n")
    rows = []
    for op in sorted(by_op, key=str.lower):
        keys = by_op[op]
        k, o = _counts(kiln, keys), _counts(ort, keys)
        rows.append([op, len(keys), *(k[s] for s in STATUSES), *(o[s] for s in STATUSES)])
    headers = ["op", "cases", "kiln pass", "kiln fail", "kiln unsupported",
               "ORT pass", "ORT fail", "ORT unsupported"]
    lines.extend(_table(headers, rows, "lrrrrrrr"))
    lines.append("\n## Kiln's wrong answers\n")
    wrong = sorted((k for k, r in kiln.items() if r["status"] == "fail"))
    if wrong:
        lines.append(
            "A wrong answer is a bug, where refusing is not. Known exceptions are listed in"
            " `crates/kiln-onnx/tests/conformance.rs` (`REFERENCE_DEFECTS`) with the reason:"
            " there the expected output itself is off by more than the tolerance.\n"
        )
        rows = [[kiln[k]["kind"], kiln[k]["case"], kiln[k]["op"], _esc(kiln[k].get("message", ""))]
                for k in wrong]
        lines.extend(_table(["kind", "case", "op", "message"], rows, "llll"))
    else:
        lines.append("None.")

    lines.append("\n## Cases ORT passes and kiln does not\n")
    gap = sorted(
        (k for k, r in ort.items() if r["status"] == "pass" and kiln.get(k, {}).get("status") != "pass"),
        key=lambda k: (cases[k]["op"], k),
    )
    if gap:
        rows = [[cases[k]["op"], cases[k]["kind"], cases[k]["case"],
                 kiln[k]["status"] if k in kiln else "not run",
                 _esc(kiln.get(k, {}).get("message", ""))] for k in gap]
        lines.append(f"{len(gap)} cases.\n")
        lines.extend(_table(["op", "kind", "case", "kiln", "kiln message"], rows, "lllll"))
    else:
        lines.append("None.")

    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kiln", required=True, help="kiln onnx-test --json output")
    parser.add_argument("--ort", required=True, help="onnx_ort_conformance.py output")
    parser.add_argument("--out", required=True, help="markdown file to write")
    args = parser.parse_args()
    kiln, ort = load(args.kiln), load(args.ort)
    text = render(kiln, ort, args.ort)
    with open(args.out, "w") as f:
        f.write(text)
    passed = sum(r["status"] == "pass" for r in kiln.values())
    print(f"{args.out}: kiln passes {passed} of {len(kiln)} cases run", file=sys.stderr)


if __name__ == "__main__":
    main()
