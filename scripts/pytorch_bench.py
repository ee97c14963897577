#!/usr/bin/env python3
"""PyTorch CPU eager baseline for `kiln bench`.

Times torch.inference_mode() forward passes of the same models as kiln's zoo (random init, no
hub download) and prints one JSON line per model, with the fields `kiln bench --json` uses, so
the two can be compared line by line (see scripts/compare_pytorch.sh).
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
    """Returns (model, inputs as a kwargs dict) for a kiln zoo name."""
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


def bench(name, args):
    torch.manual_seed(args.seed)
    model, inputs = build(name, args.batch, args.seq)
    model.eval()
    params = sum(p.numel() for p in model.parameters())
    times_ms = []
    with torch.inference_mode():
        start = time.perf_counter()
        model(**inputs)
        first_call_s = time.perf_counter() - start
        for _ in range(args.warmup):
            model(**inputs)
        for _ in range(args.iters):
            start = time.perf_counter()
            model(**inputs)
            times_ms.append((time.perf_counter() - start) * 1e3)
    times_ms.sort()
    record = {
        "framework": "pytorch",
        "torch": torch.__version__,
        "model": name,
        "batch": args.batch,
        "device": "cpu",
        "mode": "eager",
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
        record["seq"] = args.seq
    return record


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", nargs="+", default=["resnet50", "bert-base"])
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--iters", type=int, default=10, help="timed passes (kiln bench's default)")
    p.add_argument("--warmup", type=int, default=2, help="untimed passes after the first call")
    p.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    if args.iters < 1:
        raise SystemExit("error: --iters must be at least 1")
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    for name in args.models:
        print(json.dumps(bench(name, args)), flush=True)


if __name__ == "__main__":
    main()
