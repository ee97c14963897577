#!/usr/bin/env python3
"""Exports real model architectures to ONNX and checks kiln's (and ONNX Runtime's) outputs on
them against PyTorch's.

Weights are random (fixed seeds): there is no access to pretrained weights, and the numerics
being checked do not depend on them. For each model this writes
  OUTDIR/<model>/model.onnx, OUTDIR/<model>/inputs/<input>.npy, OUTDIR/<model>/expected/<output>.npy
then, with --kiln PATH, runs `PATH run model.onnx --input NAME=FILE.npy ... --out OUTDIR/<model>/kiln`
and compares every output by max|a-b| / max|b| (must be < 1e-4). ONNX Runtime, when importable,
runs the same model for reference. A table goes to stdout and OUTDIR/report.json.

Usage: onnx_real_models.py [--out OUTDIR] [--kiln PATH] [--models NAME ...]
(normally through scripts/onnx-real-models.sh, which sets up .venv-bench).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import warnings
from collections import Counter

import numpy as np

REL_TOL = 1e-4
OPSET = 17
SEQ_LEN = 128
IMAGE_MODELS = ("resnet18", "resnet50", "mobilenet_v3_small", "efficientnet_b0")
TEXT_MODELS = ("bert", "bert-mlm", "gpt2", "t5-encoder")
VISION_TRANSFORMERS = ("vit",)
ALL_MODELS = IMAGE_MODELS + VISION_TRANSFORMERS + TEXT_MODELS


def build(name: str):
    """(module, inputs as an ordered {name: tensor}, output names, dynamic axes) for a model."""
    import torch  # noqa: PLC0415

    torch.manual_seed(0)
    if name in IMAGE_MODELS:
        import torchvision  # noqa: PLC0415

        model = getattr(torchvision.models, name)(weights=None)
        x = torch.randn(1, 3, 224, 224, generator=torch.Generator().manual_seed(1))
        axes = {"input": {0: "batch"}, "logits": {0: "batch"}}
        return model.eval(), {"input": x}, ["logits"], axes

    import transformers  # noqa: PLC0415

    if name == "vit":
        model = transformers.ViTModel(transformers.ViTConfig())
        x = torch.randn(1, 3, 224, 224, generator=torch.Generator().manual_seed(1))
        axes = {"pixel_values": {0: "batch"}}
        return _ImageModel(model.eval()), {"pixel_values": x}, ["last_hidden_state", "pooler_output"], axes

    if name == "t5-encoder":
        config = transformers.T5Config()
        model = transformers.T5EncoderModel(config)
        outputs = ["last_hidden_state"]
    elif name == "gpt2":
        config = transformers.GPT2Config(use_cache=False)
        model = transformers.GPT2LMHeadModel(config)
        outputs = ["logits"]
    else:
        config = transformers.BertConfig()
        if name == "bert":
            model = transformers.BertModel(config)
            outputs = ["last_hidden_state", "pooler_output"]
        else:
            model = transformers.BertForMaskedLM(config)
            outputs = ["logits"]
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(0, config.vocab_size, (1, SEQ_LEN), dtype=torch.int64, generator=gen)
    mask = torch.ones(1, SEQ_LEN, dtype=torch.int64)
    return _TextModel(model.eval()), {"input_ids": ids, "attention_mask": mask}, outputs, None


def _text_model_class():
    import torch  # noqa: PLC0415

    class TextModel(torch.nn.Module):
        """Positional (input_ids, attention_mask) in, tuple of tensors out: passing keywords
        to the exporters turns defaulted parameters (GPT-2's logits_to_keep) into graph inputs
        or clashes with Hugging Face's own keyword handling."""

        def __init__(self, inner) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, input_ids, attention_mask):
            out = self.inner(input_ids=input_ids, attention_mask=attention_mask)
            return tuple(v for v in out.to_tuple() if isinstance(v, torch.Tensor))

    return TextModel


def _ImageModel(inner):  # noqa: N802
    import torch  # noqa: PLC0415

    class ImageModel(torch.nn.Module):
        """Positional pixel_values in, tuple of tensors out (see TextModel)."""

        def __init__(self, inner) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, pixel_values):
            out = self.inner(pixel_values=pixel_values)
            return tuple(v for v in out.to_tuple() if isinstance(v, torch.Tensor))

    return ImageModel(inner).eval()


def _TextModel(inner):  # noqa: N802 - builds the wrapper without importing torch at load time
    return _text_model_class()(inner).eval()


def export(name: str, out_dir: str) -> dict:
    """Exports one model and saves its inputs and PyTorch's outputs; returns its report row."""
    import onnx  # noqa: PLC0415
    import torch  # noqa: PLC0415

    model, inputs, output_names, axes = build(name)
    input_names = list(inputs)
    args = tuple(inputs.values())
    with torch.inference_mode():
        ref = model(*args)
    ref = [ref] if isinstance(ref, torch.Tensor) else list(ref)

    model_dir = os.path.join(out_dir, name)
    os.makedirs(os.path.join(model_dir, "inputs"), exist_ok=True)
    os.makedirs(os.path.join(model_dir, "expected"), exist_ok=True)
    path = os.path.join(model_dir, "model.onnx")
    start = time.monotonic()
    errors = []
    exporter = None
    for dynamo in (False, True):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                kwargs = dict(
                    input_names=input_names, output_names=output_names,
                    opset_version=OPSET, dynamic_axes=axes, dynamo=dynamo,
                )
                if dynamo:
                    kwargs["external_data"] = False
                torch.onnx.export(model, args, path, **kwargs)
            exporter = "dynamo" if dynamo else "torchscript"
            break
        except Exception as e:  # noqa: BLE001 - fall back to the other exporter
            errors.append(f"dynamo={dynamo}: {str(e).strip().splitlines()[0][:200]}")
    if exporter is None:
        return {"model": name, "exporter": None, "error": "; ".join(errors)}
    export_s = time.monotonic() - start

    for key, value in zip(input_names, inputs.values()):
        np.save(os.path.join(model_dir, "inputs", f"{key}.npy"), value.numpy())
    for key, value in zip(output_names, ref):
        np.save(os.path.join(model_dir, "expected", f"{key}.npy"), value.detach().numpy())

    proto = onnx.load(path, load_external_data=False)
    ops = Counter(
        (n.domain or "ai.onnx", n.op_type) for n in proto.graph.node
    )
    opsets = {(o.domain or "ai.onnx"): o.version for o in proto.opset_import}
    graph_outputs = [o.name for o in proto.graph.output]
    return {
        "model": name,
        "exporter": exporter,
        "export_s": round(export_s, 1),
        "fallback_reason": errors[0] if errors else None,
        "opsets": opsets,
        "op_count": sum(ops.values()),
        "ops": {f"{d}::{op}" if d != "ai.onnx" else op: n for (d, op), n in sorted(ops.items())},
        "inputs": input_names,
        "outputs": graph_outputs,
    }


def max_rel_err(got: np.ndarray, want: np.ndarray) -> float:
    if got.shape != want.shape:
        return float("inf")
    scale = float(np.max(np.abs(want))) if want.size else 0.0
    diff = float(np.max(np.abs(got.astype(np.float64) - want.astype(np.float64)))) if want.size else 0.0
    return diff / scale if scale else diff


def _worst(model_dir: str, outputs: list[str], got_dir: str) -> float:
    worst = 0.0
    for key in outputs:
        want = np.load(os.path.join(model_dir, "expected", f"{key}.npy"))
        got = np.load(os.path.join(got_dir, f"{key}.npy"))
        worst = max(worst, max_rel_err(got, want))
    return worst


def run_ort(model_dir: str, row: dict) -> float | None:
    try:
        import onnxruntime as ort  # noqa: PLC0415
    except ImportError:
        return None
    sess = ort.InferenceSession(
        os.path.join(model_dir, "model.onnx"), providers=["CPUExecutionProvider"]
    )
    feeds = {k: np.load(os.path.join(model_dir, "inputs", f"{k}.npy")) for k in row["inputs"]}
    got_dir = os.path.join(model_dir, "ort")
    os.makedirs(got_dir, exist_ok=True)
    for key, value in zip(row["outputs"], sess.run(row["outputs"], feeds)):
        np.save(os.path.join(got_dir, f"{key}.npy"), value)
    return _worst(model_dir, row["outputs"], got_dir)


def run_kiln(kiln: str, model_dir: str, row: dict) -> tuple[float | None, str]:
    got_dir = os.path.join(model_dir, "kiln")
    os.makedirs(got_dir, exist_ok=True)
    cmd = [kiln, "run", os.path.join(model_dir, "model.onnx")]
    for key in row["inputs"]:
        cmd += ["--input", f"{key}={os.path.join(model_dir, 'inputs', key + '.npy')}"]
    cmd += ["--out", got_dir]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        lines = (proc.stderr or proc.stdout).strip().splitlines()
        return None, f"kiln exited {proc.returncode}: {lines[-1] if lines else ''}"[:300]
    try:
        return _worst(model_dir, row["outputs"], got_dir), ""
    except (OSError, ValueError) as e:
        return None, f"kiln outputs unreadable: {e}"[:300]


def _fmt(err: float | None) -> str:
    return "-" if err is None else f"{err:.2e}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="target/onnx-real", help="output directory")
    parser.add_argument("--kiln", help="kiln binary; without it only export (and ORT) run")
    parser.add_argument("--models", nargs="+", default=list(ALL_MODELS), choices=ALL_MODELS)
    args = parser.parse_args()

    import torch  # noqa: PLC0415

    torch.set_num_threads(max(1, min(4, os.cpu_count() or 1)))
    os.makedirs(args.out, exist_ok=True)
    rows = []
    for name in args.models:
        print(f"exporting {name}...", file=sys.stderr)
        try:
            row = export(name, args.out)
        except Exception as e:  # noqa: BLE001 - report it and go on with the other models
            row = {"model": name, "exporter": None, "error": f"{type(e).__name__}: {e}"[:300]}
        rows.append(row)
        if row["exporter"] is None:
            row["status"] = "fail"
            continue
        model_dir = os.path.join(args.out, name)
        try:
            row["ort_max_rel_err"] = run_ort(model_dir, row)
        except Exception as e:  # noqa: BLE001 - ORT is a reference only
            row["ort_max_rel_err"], row["ort_error"] = None, str(e).splitlines()[0][:300]
        row["kiln_max_rel_err"], row["kiln_error"] = (None, "")
        if args.kiln:
            row["kiln_max_rel_err"], row["kiln_error"] = run_kiln(args.kiln, model_dir, row)
            ok = row["kiln_max_rel_err"] is not None and row["kiln_max_rel_err"] < REL_TOL
            row["status"] = "pass" if ok else "fail"
        else:
            row["status"] = "exported"

    print()
    for row in rows:
        if row["exporter"] is None:
            continue
        opsets = ", ".join(f"{d} {v}" for d, v in sorted(row["opsets"].items()))
        print(f"{row['model']} ({opsets}): {', '.join(f'{op} x{n}' for op, n in row['ops'].items())}")
    print()
    header = f"{'model':<20} {'exporter':<12} {'ops':>5} {'kiln max rel err':>17} {'ORT max rel err':>16}  result"
    print(header)
    for row in rows:
        if row["exporter"] is None:
            print(f"{row['model']:<20} {'FAILED':<12} {'-':>5} {'-':>17} {'-':>16}  export failed: {row['error']}")
            continue
        note = f"  ({row['kiln_error']})" if row.get("kiln_error") else ""
        print(
            f"{row['model']:<20} {row['exporter']:<12} {row['op_count']:>5} "
            f"{_fmt(row['kiln_max_rel_err']):>17} {_fmt(row['ort_max_rel_err']):>16}  {row['status']}{note}"
        )
    union = sorted({op for row in rows if row["exporter"] for op in row["ops"]})
    print(f"\nall ops ({len(union)}): {' '.join(union)}")
    with open(os.path.join(args.out, "report.json"), "w") as f:
        json.dump({"rel_tol": REL_TOL, "models": rows}, f, indent=1)
        f.write("\n")
    if any(row["status"] == "fail" for row in rows):
        sys.exit(1)


if __name__ == "__main__":
    main()
