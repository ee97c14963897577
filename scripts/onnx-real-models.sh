#!/usr/bin/env bash
# Exports torchvision and Hugging Face models (random weights, fixed seeds) to ONNX with
# PyTorch's reference outputs, and, given a kiln binary, checks kiln's outputs against them.
#
# Usage: scripts/onnx-real-models.sh [OUTDIR] [--kiln PATH] [--models NAME ...]
# OUTDIR defaults to target/onnx-real. The first run creates .venv-bench (torch, torchvision,
# transformers; a large download) as scripts/compare_peers.sh does, and adds onnx,
# onnxscript and onnxruntime to it.
set -euo pipefail
cd "$(dirname "$0")/.."

out=target/onnx-real
if [[ $# -gt 0 && $1 != --* ]]; then
    out=$1
    shift
fi
VENV=.venv-bench

if ! "$VENV/bin/python" -c 'import torch, torchvision, transformers' 2>/dev/null; then
    echo "setting up $VENV (torch, torchvision, transformers from PyPI)..." >&2
    python3 -m venv "$VENV"
    # Keeps the venv out of git without touching the repository's .gitignore.
    echo '*' > "$VENV/.gitignore"
    "$VENV/bin/pip" install --progress-bar off torch torchvision transformers >&2
fi
if ! "$VENV/bin/python" -c 'import onnx, onnxscript, onnxruntime' 2>/dev/null; then
    "$VENV/bin/pip" install --progress-bar off -q onnx==1.23.2 onnxscript onnxruntime==1.32.0 >&2
fi

exec "$VENV/bin/python" scripts/onnx_real_models.py --out "$out" "$@"
