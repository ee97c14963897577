#!/usr/bin/env bash
# Benchmarks kiln (eager, CPU) against PyTorch (eager, CPU, inference_mode) on the same models,
# batch, iterations and thread count, and prints the medians and the kiln/pytorch ratio.
#
# Environment: THREADS (default: all cores), ITERS (10), WARMUP (2), BATCH (1),
# MODELS ("resnet50 bert-base"). The first run creates .venv-bench and installs torch,
# torchvision and transformers from PyPI (a large download).
set -euo pipefail
cd "$(dirname "$0")/.."

THREADS=${THREADS:-$(nproc)}
ITERS=${ITERS:-10}
WARMUP=${WARMUP:-2}
BATCH=${BATCH:-1}
read -r -a MODELS <<< "${MODELS:-resnet50 bert-base}"
VENV=.venv-bench

if ! "$VENV/bin/python" -c 'import torch, torchvision, transformers' 2>/dev/null; then
    echo "setting up $VENV (torch, torchvision, transformers from PyPI)..." >&2
    python3 -m venv "$VENV"
    # Keeps the venv out of git without touching the repository's .gitignore.
    echo '*' > "$VENV/.gitignore"
    "$VENV/bin/pip" install --progress-bar off torch torchvision transformers >&2
fi

cargo build --release -p kiln-cli >&2

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# Same pool size for both: rayon's via --threads, torch's intra-op via set_num_threads, and
# OMP/MKL's so that neither side spins up extra threads.
export OMP_NUM_THREADS=$THREADS MKL_NUM_THREADS=$THREADS
echo "kiln bench ${MODELS[*]} (threads $THREADS, iters $ITERS, warmup $WARMUP)..." >&2
cargo run --release -q -p kiln-cli -- bench "${MODELS[@]}" --json --batch "$BATCH" \
    --threads "$THREADS" --iters "$ITERS" --warmup "$WARMUP" > "$out/kiln.jsonl"
echo "pytorch ${MODELS[*]}..." >&2
"$VENV/bin/python" scripts/pytorch_bench.py --models "${MODELS[@]}" --batch "$BATCH" \
    --threads "$THREADS" --iters "$ITERS" --warmup "$WARMUP" > "$out/torch.jsonl"

python3 - "$out/kiln.jsonl" "$out/torch.jsonl" <<'PY'
import json, sys
def load(path):
    return {r["model"]: r for r in map(json.loads, filter(str.strip, open(path)))}
kiln, torch = load(sys.argv[1]), load(sys.argv[2])
print(f"{'model':<12} {'threads':>7} {'kiln_ms':>10} {'pytorch_ms':>11} {'kiln/pytorch':>13}")
for name, k in kiln.items():
    t = torch.get(name)
    if t is None:
        print(f"{name:<12} {k['threads']:>7} {k['median_ms']:>10.2f} {'-':>11} {'-':>13}")
        continue
    ratio = k["median_ms"] / t["median_ms"]
    print(f"{name:<12} {k['threads']:>7} {k['median_ms']:>10.2f} {t['median_ms']:>11.2f} {ratio:>12.2f}x")
PY
