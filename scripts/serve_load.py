#!/usr/bin/env python3
"""Load test of `kiln serve` on loopback: throughput and p50/p99 latency at several
concurrency levels, with dynamic batching on and off, then a 2x-overload phase that reports
the share of answers by status and the server's memory before and after.

Standard library only. Each phase is bounded in time (--duration) and requests (--max-requests);
the server is started by the script on a free 127.0.0.1 port and stopped with SIGTERM.

    python3 scripts/serve_load.py --model resnet50 --duration 20 --levels 1,8,32
"""

import argparse
import http.client
import json
import os
import random
import re
import struct
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from serve_common import start_server, stop_server


def start(args, max_batch):
    cmd = [args.kiln, "serve", args.model, "--host", "127.0.0.1", "--port", "0", "--mode", args.mode,
           "--max-batch", str(max_batch), "--batch-timeout-ms", str(args.batch_timeout_ms), "--queue", str(args.queue)]
    proc, addr = start_server(cmd)
    host, port = addr.rsplit(":", 1)
    assert host == "127.0.0.1", "loopback only"
    deadline = time.time() + 900
    while time.time() < deadline:
        try:
            c = http.client.HTTPConnection(host, int(port), timeout=5)
            c.request("GET", "/v2/health/ready")
            if c.getresponse().status == 200:
                return proc, (host, int(port))
        except OSError:
            pass
        time.sleep(0.5)
    proc.kill()
    sys.exit("kiln serve did not get ready")


def request_body(shape, seed):
    rnd = random.Random(seed)
    n = 1
    for d in shape:
        n *= d
    data = struct.pack(f"<{n}f", *(rnd.gauss(0.0, 1.0) for _ in range(n)))
    head = json.dumps({
        "inputs": [{"name": "input", "shape": shape, "datatype": "FP32", "parameters": {"binary_data_size": len(data)}}],
        "outputs": [{"name": "output", "parameters": {"binary_data": True}}],
    }).encode()
    return head + data, len(head)


class Client:
    """One keep-alive connection per thread."""

    def __init__(self, addr, body, head_len, model):
        self.addr, self.body, self.head_len, self.model = addr, body, head_len, model
        self.local = threading.local()

    def post(self):
        conn = getattr(self.local, "conn", None)
        if conn is None:
            conn = self.local.conn = http.client.HTTPConnection(*self.addr, timeout=120)
        t = time.perf_counter()
        try:
            conn.request("POST", f"/v2/models/{self.model}/infer", body=self.body,
                         headers={"Inference-Header-Content-Length": str(self.head_len),
                                  "Content-Type": "application/octet-stream"})
            r = conn.getresponse()
            r.read()
            status = r.status
        except OSError as e:
            self.local.conn = None
            status = f"conn-error:{type(e).__name__}"
        return status, time.perf_counter() - t


def percentile(xs, p):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


class Recorder:
    """Answers by status and latencies (ms) of the 200s, from many threads."""

    def __init__(self):
        self.lock, self.lat, self.statuses, self.sent = threading.Lock(), [], {}, 0

    def take(self, max_requests):
        """Claims one request of the budget; False when it is spent."""
        with self.lock:
            self.sent += 1
            return self.sent <= max_requests

    def send(self, client):
        s, dt = client.post()
        with self.lock:
            self.statuses[s] = self.statuses.get(s, 0) + 1
            if s == 200:
                self.lat.append(dt * 1e3)


def closed_loop(client, concurrency, duration, max_requests):
    """`concurrency` clients each sending back to back; returns (req/s, lat ms list, statuses)."""
    stop = time.time() + duration
    rec = Recorder()

    def worker():
        while time.time() < stop and rec.take(max_requests):
            rec.send(client)

    t0 = time.time()
    threads = [threading.Thread(target=worker) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.time() - t0
    return len(rec.lat) / elapsed, rec.lat, rec.statuses, elapsed


def open_loop(client, rate, duration, max_requests, workers):
    """Requests sent at `rate`/s whatever the answers; returns statuses and latencies."""
    n = min(int(rate * duration), max_requests)
    rec = Recorder()

    t0 = time.time()
    with ThreadPoolExecutor(max_workers=workers) as pool:
        for i in range(n):
            delay = t0 + i / rate - time.time()
            if delay > 0:
                time.sleep(delay)
            pool.submit(rec.send, client)
    return rec.statuses, rec.lat, time.time() - t0


def rss_mb(addr):
    c = http.client.HTTPConnection(*addr, timeout=10)
    c.request("GET", "/metrics")
    text = c.getresponse().read().decode()
    m = re.search(r"^kiln_process_resident_memory_bytes (\S+)", text, re.M)
    return float(m.group(1)) / 1e6 if m else float("nan")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kiln", default="target/release/kiln")
    ap.add_argument("--model", default="resnet50")
    ap.add_argument("--mode", default="default")
    ap.add_argument("--shape", default="1,3,224,224", help="input shape of one request")
    ap.add_argument("--levels", default="1,8,32", help="concurrency levels")
    ap.add_argument("--duration", type=float, default=20.0, help="seconds per phase (at most)")
    ap.add_argument("--max-requests", type=int, default=5000, help="requests per phase (at most)")
    ap.add_argument("--max-batch", type=int, default=8, help="--max-batch of the batching server")
    ap.add_argument("--batch-timeout-ms", type=int, default=5)
    ap.add_argument("--queue", type=int, default=64)
    ap.add_argument("--no-overload", action="store_true")
    ap.add_argument("--json", default="target/serve-load/results.jsonl")
    args = ap.parse_args()
    shape = [int(d) for d in args.shape.split(",")]
    body, head_len = request_body(shape, 0)
    levels = [int(x) for x in args.levels.split(",")]
    os.makedirs(os.path.dirname(args.json) or ".", exist_ok=True)
    out = open(args.json, "a")
    print(f"{'batching':>9} {'conc':>5} {'req/s':>8} {'p50 ms':>8} {'p99 ms':>8} {'ok':>6} {'errors':>7}", flush=True)
    for batching, max_batch in (("on", args.max_batch), ("off", 1)):
        proc, addr = start(args, max_batch)
        try:
            client = Client(addr, body, head_len, args.model)
            for _ in range(3):
                client.post()
            best = 0.0
            for conc in levels:
                rps, lat, statuses, elapsed = closed_loop(client, conc, args.duration, args.max_requests)
                best = max(best, rps)
                errors = sum(v for k, v in statuses.items() if k != 200)
                print(f"{batching:>9} {conc:>5} {rps:8.2f} {percentile(lat, 50):8.1f} {percentile(lat, 99):8.1f} "
                      f"{len(lat):>6} {errors:>7}", flush=True)
                out.write(json.dumps({"model": args.model, "mode": args.mode, "batching": batching, "max_batch": max_batch,
                                      "concurrency": conc, "rps": rps, "p50_ms": percentile(lat, 50),
                                      "p99_ms": percentile(lat, 99), "statuses": {str(k): v for k, v in statuses.items()},
                                      "seconds": elapsed}) + "\n")
            if not args.no_overload:
                rate = 2 * best
                before = rss_mb(addr)
                statuses, lat, elapsed = open_loop(client, rate, args.duration, args.max_requests, workers=256)
                after = rss_mb(addr)
                total = sum(statuses.values())
                shares = ", ".join(f"{k}: {v} ({100 * v / total:.1f}%)" for k, v in sorted(statuses.items(), key=str))
                print(f"{batching:>9} overload at {rate:.1f} req/s (2x the best): {total} sent in {elapsed:.1f} s; {shares}; "
                      f"p50 of 200s {percentile(lat, 50):.1f} ms; server RSS {before:.0f} -> {after:.0f} MB", flush=True)
                out.write(json.dumps({"model": args.model, "mode": args.mode, "batching": batching, "overload_rate": rate,
                                      "statuses": {str(k): v for k, v in statuses.items()}, "rss_mb_before": before,
                                      "rss_mb_after": after}) + "\n")
            alive = proc.poll() is None
            print(f"{batching:>9} server alive after the runs: {alive}", flush=True)
        finally:
            print(f"{batching:>9} kiln serve exited with {stop_server(proc)} after SIGTERM", flush=True)


if __name__ == "__main__":
    main()
