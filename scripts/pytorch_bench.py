#!/usr/bin/env python3
"""PyTorch CPU baselines for `kiln bench`: eager (inference_mode) or torch.compile.

Times forward passes of the same models as kiln's zoo (random init, no hub download) and prints
one JSON line per model, with the fields `kiln bench --json` uses, so the two can be compared
line by line (see scripts/compare_peers.sh). scripts/ort_bench.py reuses `build` and `time_passes`.

With --compile the model goes through torch.compile (mode "default", inductor). torch.compile
compiles lazily, inside the first call, so `compile_s` is that first call (compilation plus one
forward: the two cannot be separated) and `first_call_s` is the second call, the first one of the
compiled code, which is what kiln's compiled `first_call_s` measures too.
"""

import argparse
import json
import math
import time

import torch


def quantile(sorted_samples, q):
    """Linear interpolation between closest ranks, as numpy and `kiln bench` do."""
    pos = q * (len(sorted_samples) - 1)
    lo, hi = math.floor(pos), math.ceil(pos)
    return sorted_samples[lo] + (sorted_samples[hi] - sorted_samples[lo]) * (pos - lo)


def build(name, batch, seq):
    """Returns (model, inputs as an ordered kwargs dict) for a kiln zoo name.

    The inputs match kiln's zoo: resnets take x [B,3,224,224]; bert-base and gpt2 take only
    input_ids [B,S], as kiln's do (kiln's BERT uses token type 0 everywhere and no padding mask,
    which is exactly what HF's BertModel does when token_type_ids and attention_mask are left out).
    """
    if name in ("resnet18", "resnet50"):
        import torchvision

        model = getattr(torchvision.models, name)(weights=None)
        return model, {"x": torch.randn(batch, 3, 224, 224)}
    if name == "bert-base":
        from transformers import BertConfig, BertModel

        cfg = BertConfig()
        return BertModel(cfg), {"input_ids": torch.randint(0, cfg.vocab_size, (batch, seq))}
    if name == "gpt2":
        from transformers import GPT2Config, GPT2Model

        cfg = GPT2Config()
        return GPT2Model(cfg), {"input_ids": torch.randint(0, cfg.vocab_size, (batch, seq))}
    raise SystemExit(f"error: unknown model '{name}' (known: resnet18, resnet50, bert-base, gpt2)")


def seeded_model(name, args):
    """Seeds torch and builds `name` in eval mode: (model, inputs, build_s, params)."""
    torch.manual_seed(args.seed)
    start = time.perf_counter()
    model, inputs = build(name, args.batch, args.seq)
    model.eval()
    build_s = time.perf_counter() - start
    return model, inputs, build_s, sum(p.numel() for p in model.parameters())


def time_passes(forward, warmup, iters):
    """Runs `forward` once, `warmup` times untimed, then `iters` timed times, as `kiln bench`
    does. Returns (first call seconds, sorted timed passes in ms)."""
    start = time.perf_counter()
    forward()
    first_call_s = time.perf_counter() - start
    for _ in range(warmup):
        forward()
    times_ms = []
    for _ in range(iters):
        start = time.perf_counter()
        forward()
        times_ms.append((time.perf_counter() - start) * 1e3)
    times_ms.sort()
    return first_call_s, times_ms


def record(name, args, framework, mode, params, first_call_s, times_ms, **extra):
    """One result line with `kiln bench --json`'s field names (plus `extra`)."""
    rec = {
        "framework": framework,
        "model": name,
        "batch": args.batch,
        "device": "cpu",
        "mode": mode,
        "dtype": "f32",
        "threads": torch.get_num_threads(),
        "iters": args.iters,
        "warmup": args.warmup,
        "params": params,
        "first_call_s": first_call_s,
        "median_ms": quantile(times_ms, 0.5),
        "p10_ms": quantile(times_ms, 0.1),
        "p90_ms": quantile(times_ms, 0.9),
    }
    if name in ("bert-base", "gpt2"):
        rec["seq"] = args.seq
    rec.update(extra)
    return rec


def compiled_kernel_count():
    """C++/OpenMP kernels inductor generated so far (its extern calls, mkldnn convs and GEMMs,
    are not counted), or None where this torch does not expose the counter."""
    try:
        from torch._inductor import metrics
    except ImportError:
        return None
    return getattr(metrics, "generated_kernel_count", None)


def bench(name, args):
    model, inputs, build_s, params = seeded_model(name, args)
    extra = {"torch": torch.__version__, "build_s": build_s}
    with torch.inference_mode():
        if not args.compile:
            first_call_s, times_ms = time_passes(lambda: model(**inputs), args.warmup, args.iters)
            return record(name, args, "pytorch", "eager", params, first_call_s, times_ms, **extra)
        compiled = torch.compile(model, mode="default")
        # The counter is per process; the difference keeps each model's own kernels.
        kernels_before = compiled_kernel_count()
        start = time.perf_counter()
        compiled(**inputs)
        extra["compile_s"] = time.perf_counter() - start
        kernels_after = compiled_kernel_count()
        if kernels_before is not None and kernels_after is not None:
            extra["generated_kernels"] = kernels_after - kernels_before
        first_call_s, times_ms = time_passes(lambda: compiled(**inputs), args.warmup, args.iters)
        return record(name, args, "pytorch", "torch.compile", params, first_call_s, times_ms, **extra)


def parser(threads_default, threads_help):
    """The flags every baseline script takes (ort_bench.py too), as `kiln bench` names them."""
    p = argparse.ArgumentParser()
    p.add_argument("--models", nargs="+", default=["resnet50", "bert-base"])
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--iters", type=int, default=10, help="timed passes (kiln bench's default)")
    p.add_argument("--warmup", type=int, default=2, help="untimed passes after the first call")
    p.add_argument("--threads", type=int, default=threads_default, help=threads_help)
    p.add_argument("--seed", type=int, default=0)
    return p


def check(args):
    """Refuses counts below one, as `kiln bench` does."""
    if args.iters < 1:
        raise SystemExit("error: --iters must be at least 1")
    if args.threads is not None and args.threads < 1:
        raise SystemExit("error: --threads must be at least 1")


def main():
    p = parser(None, "torch.set_num_threads (default: torch's)")
    p.description = __doc__.splitlines()[0]
    p.add_argument("--compile", action="store_true", help="time torch.compile(model) (mode default) instead of eager")
    args = p.parse_args()
    check(args)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    for name in args.models:
        print(json.dumps(bench(name, args)), flush=True)


if __name__ == "__main__":
    main()
