#!/usr/bin/env python3
"""Side-by-side GPU benchmark: kiln (eager, default, reduce-overhead, max-autotune) and PyTorch (eager, torch.compile default,
torch.compile reduce-overhead, and the expert setup: channels_last + freezing for CNNs) on resnet18/resnet50 (bs 1 and 64),
bert-base and gpt2 (bs 8, seq 128), in f32 and bf16 (--dtypes). One table: JSON lines + Markdown.

Run on the GPU machine:  python3 scripts/gpu_bench.py --kiln path/to/kiln --out DIR
Each torch case runs in this process; each kiln case runs `kiln bench --device cuda --json`.
Times are medians of CUDA-event-timed forward passes (kiln: per run, device time)."""
import argparse, json, os, subprocess, sys, time

CASES = [  # (model, batch, seq)
    ("resnet50", 64, None), ("resnet50", 1, None), ("resnet18", 64, None),
    ("bert-base", 8, 128), ("gpt2", 8, 128),
]

def torch_model(name, batch, seq, dtype):
    import torch
    dt = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}[dtype]
    if name.startswith("resnet"):
        import torchvision
        m = getattr(torchvision.models, name.replace("-", ""))().to(dt)
        x = torch.randn(batch, 3, 224, 224, dtype=dt)
        return m, (x,)
    import transformers
    if name == "bert-base":
        cfg = transformers.BertConfig()
        m = transformers.BertModel(cfg)
    else:
        cfg = transformers.GPT2Config()
        m = transformers.GPT2Model(cfg)
    ids = torch.randint(0, cfg.vocab_size, (batch, seq))
    return m.to(dt), (ids,)

def time_torch(fn, args, iters, warmup):
    import torch
    with torch.no_grad():
        t0 = time.time(); fn(*args); torch.cuda.synchronize(); first = time.time() - t0
        for _ in range(warmup): fn(*args)
        torch.cuda.synchronize()
        ts = []
        for _ in range(iters):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record(); fn(*args); b.record(); b.synchronize(); ts.append(a.elapsed_time(b))
    ts.sort()
    return first, ts[len(ts) // 2]

def torch_runs(name, batch, seq, iters, warmup, modes, dtype):
    import torch
    torch.backends.cuda.matmul.allow_tf32 = False  # PyTorch defaults: strict fp32 matmul, TF32 conv
    torch.backends.cudnn.allow_tf32 = True
    out = []
    m, args = torch_model(name, batch, seq, dtype)
    m = m.cuda().eval()
    args = tuple(a.cuda() for a in args)
    for mode in modes:
        try:
            torch._dynamo.reset()
            torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_allocated()
            if mode == "torch-eager":
                fn = m
            elif mode == "torch-compile":
                fn = torch.compile(m)
            elif mode == "torch-reduce-overhead":
                fn = torch.compile(m, mode="reduce-overhead")
            elif mode == "torch-expert":
                if not name.startswith("resnet"):
                    continue
                import torch._inductor.config as ic
                ic.freezing = True
                mm = m.to(memory_format=torch.channels_last)
                args2 = tuple(a.to(memory_format=torch.channels_last) for a in args)
                fn = torch.compile(mm)
                first, med = time_torch(fn, args2, iters, warmup)
                ic.freezing = False
                out.append(dict(model=name, batch=batch, seq=seq, runner=mode, dtype=dtype, median_ms=med, first_call_s=first,
                                peak_mb=(torch.cuda.max_memory_allocated() - base) / 1e6))
                continue
            first, med = time_torch(fn, args, iters, warmup)
            out.append(dict(model=name, batch=batch, seq=seq, runner=mode, dtype=dtype, median_ms=med, first_call_s=first,
                            peak_mb=(torch.cuda.max_memory_allocated() - base) / 1e6))
        except Exception as e:  # one failing case must not lose the table
            out.append(dict(model=name, batch=batch, seq=seq, runner=mode, dtype=dtype, error=str(e)[:300]))
        print(json.dumps(out[-1]), flush=True)
    return out

def kiln_runs(kiln, name, batch, seq, iters, warmup, modes, dtype):
    out = []
    for mode in modes:
        cmd = [kiln, "bench", name, "--device", "cuda", "--mode", mode, "--batch", str(batch), "--dtype", dtype,
               "--iters", str(iters), "--warmup", str(warmup), "--json"]
        if seq: cmd += ["--seq", str(seq)]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        if r.returncode != 0:
            out.append(dict(model=name, batch=batch, seq=seq, runner=f"kiln-{mode}", dtype=dtype, error=(r.stderr or r.stdout)[-400:]))
        else:
            j = json.loads(r.stdout.strip().splitlines()[-1])
            out.append(dict(model=name, batch=batch, seq=seq, runner=f"kiln-{mode}", dtype=j["dtype"], median_ms=j["median_ms"],
                            first_call_s=j["first_call_s"] + (j.get("compile_s") or 0), kernels=j["kernels"], peak_mb=j["peak_mb"]))
        print(json.dumps(out[-1]), flush=True)
    return out

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--out", default=".")
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--torch-modes", default="torch-eager,torch-compile,torch-reduce-overhead,torch-expert")
    ap.add_argument("--kiln-modes", default="eager,default,reduce-overhead,max-autotune")
    ap.add_argument("--cases", default="all", help="comma list of model:batch, or all")
    ap.add_argument("--dtypes", default="f32,bf16", help="comma list of f32, bf16, f16")
    a = ap.parse_args()
    cases = CASES if a.cases == "all" else [c for c in CASES if f"{c[0]}:{c[1]}" in a.cases.split(",")]
    rows = []
    os.makedirs(a.out, exist_ok=True)
    # Lines are written as each case ends, so a run cut short keeps what it measured.
    with open(os.path.join(a.out, "gpu_bench.jsonl"), "w") as f:
        for dtype in a.dtypes.split(","):
            for name, batch, seq in cases:
                new = kiln_runs(a.kiln, name, batch, seq, a.iters, a.warmup, a.kiln_modes.split(","), dtype)
                if a.torch_modes:
                    new += torch_runs(name, batch, seq, a.iters, a.warmup, a.torch_modes.split(","), dtype)
                for r in new: f.write(json.dumps(r) + "\n")
                f.flush()
                rows += new
    lines = ["| model | batch | dtype | runner | median ms | kernels | peak MB | first call s |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['model']} | {r['batch']} | {r.get('dtype','')} | {r['runner']} | error: {r['error'][:80]!r} | | | |")
        else:
            lines.append(f"| {r['model']} | {r['batch']} | {r['dtype']} | {r['runner']} | {r['median_ms']:.3f} | {r.get('kernels','')} | {r.get('peak_mb',0):.0f} | {r['first_call_s']:.2f} |")
    md = "\n".join(lines)
    open(os.path.join(a.out, "gpu_bench.md"), "w").write(md + "\n")
    print(md)

if __name__ == "__main__":
    main()
