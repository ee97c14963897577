#!/usr/bin/env bash
# Benchmarks kiln against its peers on the CPU, each runner in its own process, one after another:
#   kiln-eager     kiln bench --mode eager
#   kiln-default   kiln bench --mode default, on a fresh KILN_CACHE_DIR (cold compile)
#   torch-eager    PyTorch eager under torch.inference_mode (scripts/pytorch_bench.py)
#   torch-compile  torch.compile mode default, on a fresh inductor cache (pytorch_bench.py --compile)
#   ort            ONNX Runtime, CPU EP, all graph optimizations, on the torch model exported to
#                  ONNX opset 17 (scripts/ort_bench.py; the .onnx files are cached in target/peers/)
# Same models, inputs, batch 1, threads, warm-up and timed iterations for all. Writes one JSON
# line per (model, runner) to target/peers/results.jsonl and prints a Markdown table, then the
# machine's `kiln doctor` cpu lines.
#
# Environment: THREADS (default: nproc), ITERS (20), WARMUP (3), MODELS ("resnet50 bert-base"),
# RUNNERS (all of the above; a subset by name), ROUNDS (1): how many times every runner runs,
# the runners taking turns round by round, so that a stall of a shared VM lands on one round of
# one runner rather than on all of a runner's runs; the table then shows the round whose median
# is the middle one (the lower of two), and each round's median. The first run creates .venv-bench and installs
# torch, torchvision, transformers, onnxruntime and onnx from PyPI (a large download).
set -euo pipefail
cd "$(dirname "$0")/.."

ALL_RUNNERS="kiln-eager kiln-default torch-eager torch-compile ort"
THREADS=${THREADS:-$(nproc)}
ITERS=${ITERS:-20}
ROUNDS=${ROUNDS:-1}
WARMUP=${WARMUP:-3}
read -r -a MODELS <<< "${MODELS:-resnet50 bert-base}"
read -r -a RUNNERS <<< "${RUNNERS:-$ALL_RUNNERS}"
VENV=.venv-bench
PEERS=target/peers

for r in "${RUNNERS[@]}"; do
    case " $ALL_RUNNERS " in
        *" $r "*) ;;
        *) echo "error: unknown runner '$r' in RUNNERS (known: $ALL_RUNNERS)" >&2; exit 2 ;;
    esac
done
for v in THREADS ITERS ROUNDS; do
    if ! [[ ${!v} =~ ^[1-9][0-9]*$ ]]; then echo "error: $v must be a whole number >= 1, got '${!v}'" >&2; exit 2; fi
done
if ! [[ $WARMUP =~ ^[0-9]+$ ]]; then echo "error: WARMUP must be a whole number >= 0, got '$WARMUP'" >&2; exit 2; fi

if ! "$VENV/bin/python" -c 'import torch, torchvision, transformers, onnxruntime, onnx' 2>/dev/null; then
    echo "setting up $VENV (torch, torchvision, transformers, onnxruntime, onnx from PyPI)..." >&2
    python3 -m venv "$VENV"
    # Keeps the venv out of git without touching the repository's .gitignore.
    echo '*' > "$VENV/.gitignore"
    "$VENV/bin/pip" install --progress-bar off torch torchvision transformers onnxruntime onnx >&2
fi

export CARGO_INCREMENTAL=0
cargo build --release -p kiln-cli >&2
KILN=target/release/kiln

mkdir -p "$PEERS/logs"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# One pool size everywhere: kiln's rayon pool via --threads, torch's intra-op pool via
# set_num_threads, ORT's via intra_op_num_threads, and OpenMP/MKL's so nobody starts extra threads.
export OMP_NUM_THREADS=$THREADS MKL_NUM_THREADS=$THREADS
common=(--threads "$THREADS" --iters "$ITERS" --warmup "$WARMUP")

# Runs runner $1 on model $2 in its own process; prints its JSON line on stdout.
run_one() {
    local runner=$1 model=$2 cache
    case $runner in
        kiln-eager) "$KILN" bench "$model" --mode eager --json "${common[@]}" ;;
        kiln-default)
            cache=$(mktemp -d "$work/kiln-cache.XXXX")
            KILN_CACHE_DIR=$cache "$KILN" bench "$model" --mode default --json "${common[@]}" ;;
        torch-eager) "$VENV/bin/python" scripts/pytorch_bench.py --models "$model" "${common[@]}" ;;
        torch-compile)
            cache=$(mktemp -d "$work/inductor-cache.XXXX")
            TORCHINDUCTOR_CACHE_DIR=$cache "$VENV/bin/python" scripts/pytorch_bench.py --compile \
                --models "$model" "${common[@]}" ;;
        ort) "$VENV/bin/python" scripts/ort_bench.py --models "$model" --onnx-dir "$PEERS" "${common[@]}" ;;
    esac
}

failed=0
for model in "${MODELS[@]}"; do
    for round in $(seq "$ROUNDS"); do
        for runner in "${RUNNERS[@]}"; do
            echo "$runner $model round $round/$ROUNDS (threads $THREADS, iters $ITERS, warmup $WARMUP)..." >&2
            # One log a round, so a later round does not overwrite the one a failure points to.
            log="$PEERS/logs/$model.$runner.$round.log"
            # A failing run is reported and skipped, so one missing peer does not lose the others.
            if run_one "$runner" "$model" > "$work/$model.$runner.$round.json" 2> "$log"; then
                printf '%s\n' "$runner" > "$work/$model.$runner.$round.runner"
            else
                echo "  $runner $model failed (exit $?); see $log" >&2
                failed=1
            fi
        done
    done
done

"$VENV/bin/python" - "$work" "$PEERS/results.jsonl" "${MODELS[*]}" "${RUNNERS[*]}" "$ROUNDS" <<'PY'
import json, os, sys

work, out_path, models, runners = sys.argv[1], sys.argv[2], sys.argv[3].split(), sys.argv[4].split()
rounds = int(sys.argv[5])

def load_round(model, runner, r):
    path = os.path.join(work, f"{model}.{runner}.{r}.json")
    if not os.path.isfile(os.path.join(work, f"{model}.{runner}.{r}.runner")):
        return None
    lines = [l for l in open(path) if l.strip()]
    return json.loads(lines[-1]) if lines else None

def load(model, runner):
    # The record of the runs that succeeded whose median is the middle one (the lower middle
    # of an even count, so that its p10 and p90 stay around its median), with every round's
    # median beside it.
    recs = [rec for r in range(1, rounds + 1) if (rec := load_round(model, runner, r)) is not None]
    if not recs:
        return None
    mid = sorted(recs, key=lambda rec: rec["median_ms"])[(len(recs) - 1) // 2]
    return dict(mid, runner=runner, round_medians_ms=[rec["median_ms"] for rec in recs])

def fmt(v, digits):
    return "-" if v is None else f"{v:.{digits}f}"

rows = []
with open(out_path, "w") as out:
    for model in models:
        recs = {r: load(model, r) for r in runners}
        base = recs.get("kiln-default")
        for runner in runners:
            rec = recs[runner]
            if rec is None:
                rows.append(f"| {model} | {runner} | failed | | | | | | | |")
                continue
            if base is not None:
                rec["vs_kiln_default"] = rec["median_ms"] / base["median_ms"]
            out.write(json.dumps(rec) + "\n")
            kernels = rec.get("kernels")
            if kernels is None and rec.get("generated_kernels") is not None:
                kernels = f"{rec['generated_kernels']}†"
            rows.append(
                f"| {model} | {runner} | {fmt(rec['median_ms'], 2)} | {fmt(rec['p10_ms'], 2)} "
                f"| {fmt(rec['p90_ms'], 2)} | {fmt(rec.get('compile_s'), 2)} | {fmt(rec['first_call_s'], 3)} "
                f"| {'-' if kernels is None else kernels} | {fmt(rec.get('vs_kiln_default'), 2)} "
                f"| {' / '.join(fmt(m, 1) for m in rec['round_medians_ms'])} |"
            )

print("| model | runner | median_ms | p10_ms | p90_ms | compile_s | first_call_s | kernels | vs kiln-default | rounds |")
print("|---|---|---:|---:|---:|---:|---:|---:|---:|---|")
print("\n".join(rows))
print()
print("compile_s: kiln-default = compile (cold cache); torch-compile = first call (compile + one forward);")
print("ort = session creation (graph optimization). first_call_s: first run after that.")
print("kernels: kiln = ops dispatched (eager) or launches (compiled) per forward; † = C++ kernels")
print("inductor generated (its mkldnn/GEMM extern calls not counted). vs kiln-default = median / kiln-default's.")
print("rounds: each round's median, in the order run; the other columns are the middle round's (the lower of two).")
print(f"results: {out_path}", file=sys.stderr)
PY
# The machine, as `kiln doctor` names it: one model name ("AMD EPYC") has covered CPUs whose
# speeds differ twofold, so figures are quoted with the family and model numbers.
"$KILN" doctor 2>/dev/null | grep -E '^(cpu|cpu gemm):' || true
exit "$failed"
